//! Ownership of runs across relays: the relay running a run holds its lease (`owner`, `lease`
//! in its hash, and `relay:leases`), renewed every [`RENEW_EVERY`] together with acting on
//! cancel flags and deletions; any relay claims a run whose lease lapsed (one script, so one
//! relay only) and finishes it as `failed`; a cancel of a run live elsewhere is a flag its owner
//! acts on.
//!
//! Invariant: a relay appends only to runs it holds the lease of (the append script checks it);
//! one that lost a lease fails the run through its hook and stops.

use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::conn::script;
use super::scripts::{CANCEL, CLAIM, LAPSED, RENEW};
use super::{FailHook, Inner, LEASES, Redis, StoreError, Tenant, fold_entries, now_ms, unfinished};
use crate::eventlog::emitter::end_as_failed;
use crate::eventlog::log::{LogEntry, RunLog};

/// How long an owner's lease lasts; it renews it every [`RENEW_EVERY`].
pub(super) const LEASE_MS: u64 = 3000;
pub(super) const RENEW_EVERY: Duration = Duration::from_millis(250);
/// How often a relay looks for runs whose owner died (every this many renewals).
pub(super) const SWEEP_TICKS: u32 = 4;
/// A relay that claimed a dead owner's run holds it this long to finish it.
pub(super) const CLAIM_MS: u64 = 30_000;

/// A run this relay runs and holds the lease of.
pub(super) struct Owned {
    pub(super) cancel: CancellationToken,
    pub(super) fail: FailHook,
}

impl Redis {
    /// Claims the run if its owner's lease lapsed and finishes it as failed. True if it did.
    pub(super) async fn recover(&self, id: &str) -> Result<bool, StoreError> {
        if self
            .inner
            .owned
            .lock()
            .expect("owned poisoned")
            .contains_key(id)
        {
            return Ok(false);
        }
        let mut claim = script(CLAIM, &[Self::resp_key(id)]);
        claim.arg(&self.inner.instance).arg(CLAIM_MS);
        let claimed: i64 = self.inner.conn.query(&claim).await?;
        if claimed == -1 {
            // Finished or gone: it leaves the index of leases.
            let mut unindexed = ::redis::cmd("ZREM");
            unindexed.arg(LEASES).arg(id);
            self.inner.conn.query::<i64>(&unindexed).await?;
        }
        if claimed != 1 {
            return Ok(false);
        }
        let entries = self.entries(id).await?;
        let fold = fold_entries(&entries)?;
        if fold.response().is_none() {
            // Not even `response.created` was kept: nothing was ever visible; drop it.
            self.remove(None, id).await?;
            return Ok(true);
        }
        let log = Arc::new(RunLog::from_entries(entries, fold, false));
        let tenant = self.fields(id, &["tenant"]).await?[0]
            .clone()
            .unwrap_or_else(|| super::super::DEFAULT_TENANT.to_string());
        end_as_failed(
            log.clone(),
            Arc::new(self.sink(&Tenant::new(&tenant), id, None)),
            "The relay running this response stopped before it finished.",
        );
        if tokio::time::timeout(Duration::from_secs(10), log.wait_finished())
            .await
            .is_err()
        {
            return Err(StoreError::Internal(format!(
                "could not finish the abandoned run {id}"
            )));
        }
        tracing::warn!(response_id = %id, "finished a run whose relay stopped (its lease lapsed)");
        Ok(true)
    }

    /// The kept events of a run, in order (none for a run gone).
    async fn entries(&self, id: &str) -> Result<Vec<LogEntry>, StoreError> {
        Ok(self
            .read_log(None, id)
            .await?
            .map(|k| k.entries)
            .unwrap_or_default())
    }

    /// Cancels a background run live on another relay: flags it (its owner acts within a
    /// renewal) and waits for its terminal event. Does nothing for other runs.
    pub async fn cancel_elsewhere(&self, tenant: &Tenant, id: &str) -> Result<(), StoreError> {
        let Some(f) = self
            .tenant_fields(tenant, id, &["status", "background"])
            .await?
        else {
            return Ok(());
        };
        let (Some(status), Some(background)) = (f[0].clone(), f[1].clone()) else {
            return Ok(());
        };
        if !unfinished(&status) || background != "1" {
            return Ok(());
        }
        let mut cancel = script(CANCEL, &[Self::resp_key(id)]);
        cancel.arg(tenant.as_str());
        let _: i64 = self.inner.conn.query(&cancel).await?;
        if let Some(log) = self.log(tenant, id).await? {
            let _ = tokio::time::timeout(Duration::from_secs(10), log.wait_finished()).await;
        }
        Ok(())
    }
}

/// Renews the leases of the runs this relay owns (acting on cancel flags and deletions), and
/// finishes runs whose owner died.
pub(super) async fn keep_leases(inner: Weak<Inner>) {
    let mut tick = tokio::time::interval(RENEW_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut n: u32 = 0;
    loop {
        tick.tick().await;
        let Some(inner) = inner.upgrade() else { return };
        let store = Redis { inner };
        n = n.wrapping_add(1);
        let ids: Vec<String> = store
            .inner
            .owned
            .lock()
            .expect("owned poisoned")
            .keys()
            .cloned()
            .collect();
        if !ids.is_empty() {
            // One script per hash slot (one on one Redis), and the index of leases beside.
            let groups = store.inner.conn.by_slot(&ids, |id| Redis::resp_key(id));
            let mut cmds: Vec<::redis::Cmd> = groups
                .iter()
                .map(|g| {
                    let keys: Vec<String> = g.iter().map(|id| Redis::resp_key(id)).collect();
                    let mut cmd = script(RENEW, &keys);
                    cmd.arg(&store.inner.instance).arg(LEASE_MS).arg(g);
                    cmd
                })
                .collect();
            let mut index = ::redis::cmd("ZADD");
            index.arg(LEASES);
            let until = now_ms() + LEASE_MS as i64;
            for id in &ids {
                index.arg(until).arg(id);
            }
            cmds.push(index);
            // The renewals' replies (the index's, last, is not acted on).
            let renewals = groups.len();
            for reply in store
                .inner
                .conn
                .send(cmds, &[])
                .await
                .into_iter()
                .take(renewals)
            {
                let stops = reply.and_then(|v| {
                    <Vec<String> as ::redis::FromRedisValue>::from_redis_value(v)
                        .map_err(|e| e.to_string())
                });
                match stops {
                    Ok(stops) => act_on(&store, stops),
                    Err(e) => tracing::warn!(error = %e, "could not renew run leases"),
                }
            }
        }
        if n.is_multiple_of(SWEEP_TICKS) {
            let lapsed: Result<Vec<String>, _> = store
                .inner
                .conn
                .query(&script(LAPSED, &[LEASES.to_string()]))
                .await;
            for id in lapsed.unwrap_or_default() {
                if let Err(e) = store.recover(&id).await {
                    tracing::warn!(response_id = %id, error = %e, "could not finish an abandoned run");
                }
            }
        }
    }
}

/// Acts on what a renewal answered (`cancel:ID`, `gone:ID`, `lost:ID`).
fn act_on(store: &Redis, stops: Vec<String>) {
    for s in stops {
        let Some((what, id)) = s.split_once(':') else {
            continue;
        };
        let mut owned = store.inner.owned.lock().expect("owned poisoned");
        match what {
            "cancel" => {
                if let Some(o) = owned.get(id) {
                    o.cancel.cancel();
                }
            }
            "gone" => {
                if let Some(o) = owned.remove(id) {
                    o.cancel.cancel();
                }
            }
            _ => {
                if let Some(o) = owned.remove(id) {
                    (o.fail)(
                        "Another relay took this response over (this relay lost its lease).".into(),
                    );
                }
            }
        }
    }
}
