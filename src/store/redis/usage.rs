//! The usage tallies in Redis. Keys (each under a time to live of [`TTL_DAYS`] days, renewed by
//! every flush that writes to it):
//! - `relay:usage:{TENANT}:DAY`: a hash per tenant and UTC day, fields `MODEL|runs`,
//!   `MODEL|input_tokens`, `MODEL|output_tokens`, `MODEL|mcp_calls` (a model name may hold `|`:
//!   the counter is what follows the last one);
//! - `relay:usage:{TENANT}:days`: the days the tenant has a hash for, scored by day number;
//! - `relay:usage:tenants`: the tenants with usage.
//!
//! A flushed batch is one `MULTI`/`EXEC` pipeline of `HINCRBY`s: all of it is added, or none.
//! A tenant's keys share the hash tag `{TENANT}`, so they stay in one slot when Redis Cluster
//! comes (the batch then goes as one transaction per tenant).

use std::collections::{BTreeMap, BTreeSet};

use super::conn::{Conn, unavailable};
use super::{Redis, StoreError, Tenant};
use crate::redact::mask_password;
use crate::store::usage::{Tally, UsageRow, day_number};

/// How long a tenant's usage is kept after its last write.
pub(super) const TTL_DAYS: i64 = 400;
const TENANTS: &str = "relay:usage:tenants";

fn day_key(tenant: &str, day: &str) -> String {
    format!("relay:usage:{{{tenant}}}:{day}")
}

fn days_key(tenant: &str) -> String {
    format!("relay:usage:{{{tenant}}}:days")
}

impl Redis {
    /// Adds a flushed batch of tallies, one transaction per tenant (a tenant's keys share a
    /// slot); on failure, the error and the rows not added (to be added at the next flush).
    pub async fn add_usage(&self, rows: Vec<UsageRow>) -> Result<(), (StoreError, Vec<UsageRow>)> {
        let mut by_tenant: BTreeMap<String, Vec<UsageRow>> = BTreeMap::new();
        for r in rows {
            by_tenant.entry(r.tenant.clone()).or_default().push(r);
        }
        let mut unkept = Vec::new();
        let mut error = None;
        for (_, rows) in by_tenant {
            if let Err(e) = write(&self.inner.conn, &rows).await {
                unkept.extend(rows);
                error = Some(e);
            }
        }
        match error {
            None => Ok(()),
            Some(e) => Err((e, unkept)),
        }
    }

    /// The usage of `tenant` (or every tenant) from `since_day` on, by tenant, day and model.
    pub async fn usage(
        &self,
        tenant: Option<&Tenant>,
        since_day: &str,
    ) -> Result<Vec<UsageRow>, StoreError> {
        read(&self.inner.conn, tenant, since_day).await
    }
}

/// Runs `pipe`, dropping the connection after an error that is not a server's reply.
async fn run<T: ::redis::FromRedisValue>(
    conn: &Conn,
    pipe: &::redis::Pipeline,
) -> Result<T, StoreError> {
    let mut c = conn.get().await.map_err(unavailable)?;
    match pipe.query_async(&mut c).await {
        Ok(v) => Ok(v),
        Err(e) => {
            conn.failed(&e).await;
            Err(unavailable(e))
        }
    }
}

/// Each reply of [`Conn::send`] read as a `T` (the first error, if any).
fn replies<T: ::redis::FromRedisValue>(
    replies: Vec<Result<::redis::Value, String>>,
) -> Result<Vec<T>, StoreError> {
    replies
        .into_iter()
        .map(|r| {
            r.and_then(|v| T::from_redis_value(v).map_err(|e| e.to_string()))
                .map_err(|e| StoreError::Unavailable(format!("Redis: {e}")))
        })
        .collect()
}

async fn write(conn: &Conn, rows: &[UsageRow]) -> Result<(), StoreError> {
    let ttl = TTL_DAYS * 86_400;
    let mut pipe = ::redis::pipe();
    pipe.atomic();
    let mut days: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for r in rows {
        let key = day_key(&r.tenant, &r.day);
        let t = &r.tally;
        for (counter, n) in [
            ("runs", t.runs),
            ("input_tokens", t.input_tokens),
            ("output_tokens", t.output_tokens),
            ("mcp_calls", t.mcp_calls),
        ] {
            // Redis counters are signed 64-bit: a count past that (never, in practice) is capped.
            let n = i64::try_from(n).unwrap_or(i64::MAX);
            pipe.hincr(&key, format!("{}|{counter}", r.model), n)
                .ignore();
        }
        days.entry(&r.tenant).or_default().insert(&r.day);
    }
    for (tenant, tenant_days) in &days {
        for day in tenant_days {
            pipe.expire(day_key(tenant, day), ttl).ignore();
            let n = day_number(day).unwrap_or(0);
            pipe.zadd(days_key(tenant), *day, n).ignore();
        }
        // Days whose hash has expired leave the index.
        let newest = tenant_days
            .iter()
            .filter_map(|d| day_number(d))
            .max()
            .unwrap_or(0);
        pipe.cmd("ZREMRANGEBYSCORE")
            .arg(days_key(tenant))
            .arg("-inf")
            .arg(format!("({}", newest - TTL_DAYS))
            .ignore();
        pipe.expire(days_key(tenant), ttl).ignore();
    }
    let () = run(conn, &pipe).await?;
    // The index of tenants, in its own slot (once their tallies are kept).
    let mut index = ::redis::pipe();
    for tenant in days.keys() {
        index.sadd(TENANTS, *tenant).ignore();
    }
    index.expire(TENANTS, ttl).ignore();
    let () = run(conn, &index).await?;
    Ok(())
}

async fn read(
    conn: &Conn,
    tenant: Option<&Tenant>,
    since_day: &str,
) -> Result<Vec<UsageRow>, StoreError> {
    let from = day_number(since_day)
        .ok_or_else(|| StoreError::Internal(format!("'{since_day}' is not a day (YYYY-MM-DD)")))?;
    let tenants: Vec<String> = match tenant {
        Some(t) => vec![t.as_str().to_string()],
        None => {
            let mut all: Vec<String> = conn.query(::redis::cmd("SMEMBERS").arg(TENANTS)).await?;
            all.sort();
            all
        }
    };
    if tenants.is_empty() {
        return Ok(Vec::new());
    }
    let asks: Vec<::redis::Cmd> = tenants
        .iter()
        .map(|t| {
            let mut c = ::redis::cmd("ZRANGEBYSCORE");
            c.arg(days_key(t)).arg(from).arg("+inf");
            c
        })
        .collect();
    let days: Vec<Vec<String>> = replies(conn.send(asks, &[]).await)?;
    let wanted: Vec<(&String, String)> = tenants
        .iter()
        .zip(days)
        .flat_map(|(t, ds)| ds.into_iter().map(move |d| (t, d)))
        .collect();
    if wanted.is_empty() {
        return Ok(Vec::new());
    }
    let asks: Vec<::redis::Cmd> = wanted
        .iter()
        .map(|(t, d)| {
            let mut c = ::redis::cmd("HGETALL");
            c.arg(day_key(t, d));
            c
        })
        .collect();
    let hashes: Vec<BTreeMap<String, i64>> = replies(conn.send(asks, &[]).await)?;
    let mut rows = Vec::new();
    for ((tenant, day), fields) in wanted.into_iter().zip(hashes) {
        let mut models: BTreeMap<String, Tally> = BTreeMap::new();
        for (field, n) in fields {
            let Some((model, counter)) = field.rsplit_once('|') else {
                continue;
            };
            let t = models.entry(model.to_string()).or_default();
            let n = u64::try_from(n).unwrap_or(0);
            match counter {
                "runs" => t.runs = n,
                "input_tokens" => t.input_tokens = n,
                "output_tokens" => t.output_tokens = n,
                "mcp_calls" => t.mcp_calls = n,
                _ => {}
            }
        }
        rows.extend(models.into_iter().map(|(model, tally)| UsageRow {
            tenant: tenant.clone(),
            day: day.clone(),
            model,
            tally,
        }));
    }
    crate::store::usage::sort_rows(&mut rows);
    Ok(rows)
}

/// The usage kept in the Redis at `url`, read without starting a store (no writer, no leases).
pub async fn usage_at(
    url: &str,
    tenant: Option<&Tenant>,
    since_day: &str,
) -> Result<Vec<UsageRow>, StoreError> {
    crate::install_tls();
    let shown = mask_password(url);
    let target =
        super::target::Target::open(url).map_err(|e| StoreError::Redis(format!("{shown}: {e}")))?;
    let conn = Conn::new(
        target,
        super::Timeouts {
            connect: std::time::Duration::from_secs(2),
            response: Some(std::time::Duration::from_secs(30)),
        },
    );
    let mut c = conn
        .get()
        .await
        .map_err(|e| StoreError::Redis(format!("cannot reach Redis at {shown}: {e}")))?;
    ::redis::cmd("PING")
        .query_async::<String>(&mut c)
        .await
        .map_err(|e| StoreError::Redis(format!("Redis at {shown}: {e}")))?;
    read(&conn, tenant, since_day).await
}
