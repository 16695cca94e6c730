//! The Redis backend: several relays share one Redis, so any of them serves, resumes and cancels
//! any run.
//!
//! Keys of a run (all under the run's time to live, all in the run's hash slot: `{id}` is a hash
//! tag, the braces are in the key):
//! - `relay:resp:{id}`: a hash with the input JSON, `status`, `background`, `tenant`,
//!   `deadline`, `turns` (each model turn's usage, once the run ended), the Response JSON
//!   (`response`) until the run is packed, and, while the run goes on, `owner` (the relay
//!   instance running it) and `lease` (unix ms until which that owner holds it), `cancel` when
//!   another relay asked to cancel it;
//!   once the run finished, `packed`: its whole log and final Response in one zstd blob (the
//!   format SQLite keeps, [`packed`]), instead of `response` and the stream;
//! - `relay:log:{id}`: while the run goes on, a Stream, one entry per event (`seq`, `offset_ms`,
//!   `kind`, `data`), whose entry id is `0-{seq+1}`, so a duplicate or a gap is refused by Redis
//!   itself;
//! - `relay:item:{item_id}` (the default tenant's; data kept before tenants existed is its) or
//!   `relay:titem:{tenant}:{item_id}`: a hash with the item JSON and its run's id;
//! - `relay:tail:{id}`: set (for a few seconds) by a relay tailing the run live (below).
//!
//! Packing (issue 28): once Redis acknowledged a run's terminal event, its owner packs the log
//! it holds and replaces the stream by the blob and drops `response`, in one script (`PACK`)
//! that does so only for a finished run whose stream holds exactly the events packed. Every
//! event is still kept in the stream before any client sees it; a replay serves the packed
//! frames, the bytes the live clients got. Every read of a log takes the blob or the stream in
//! one script, so it never falls between the two; runs kept before packing (a finished stream,
//! `response`) read as before. A relay tailing a run live marks it (`relay:tail:{id}`, renewed
//! before it blocks on the stream): the owner does not pack a marked run, and tries again once
//! the mark lapsed, so a blocking read never waits on a stream that went away; a tail that
//! finds the stream gone reads the rest from the blob. A finished short run then holds about a
//! quarter of the memory it held with its stream (docs/decisions.md, "Redis store").
//!
//! Tenants: the run's hash holds its `tenant` (none: the default tenant); every read of a run is
//! a script that answers nothing unless the hash's tenant is the reader's, and items live under
//! their tenant's key prefix, so one tenant's request cannot reach another's run or item.
//!
//! Two sorted sets index runs: `relay:leases` (unfinished runs by lease expiry) and
//! `relay:expiry` (runs by `expires_at`, for [`Redis::expire`]); a third per tenant,
//! `relay:runs:TENANT`, holds its runs by the time they were stored (for [`Redis::runs`]).
//! Indexes and items are in slots of their own, so they are written beside a run's scripts, not
//! in them: an index is a hint each reader checks against the run's hash (a run indexed but gone
//! is skipped; a live run's lease entry is written again at every renewal), and a run's output
//! items are written in the same batch as its end, so they are there once a client sees it.
//!
//! Redis Cluster (`redis+cluster://`): every script touches the keys of one run, or of one
//! conversation, or of one tenant's counters, all in one hash slot; a batch goes as one pipeline
//! per slot ([`Conn::send`]); the cluster connection follows `MOVED`/`ASK`. Data kept in the
//! layout from before the hash tags is moved once by `responses-relay store migrate`
//! ([`migrate`]); a store that finds such data refuses to start until it is.
//!
//! Every write is a Lua script (atomic per event), sent by one writer task per process in
//! pipelined batches, in the order the emitter appended; the events of one batch (of any runs of
//! one slot) go in one script call, which answers one code per event: an event is made visible
//! on the run's log only once Redis acknowledged it. Appends are fenced: a script refuses an event of a
//! run this relay no longer owns, of a finished run, or of a deleted one. A relay that owns runs
//! renews their leases every 250 ms and acts on cancel flags in the same call; any relay finishes
//! a run whose lease lapsed (its owner died) as `failed`, after claiming it atomically. Blocking reads
//! (`XREAD BLOCK`, to tail a run live on another relay) use a dedicated connection without a
//! response timeout. Behind Sentinel (`target`), the connection follows the primary the
//! Sentinels name.
//!
//! Here: the [`Redis`] type, opening it, and its reads and deletes. Beside it: `scripts` (every
//! Lua script), `conn` (the connection), `writer` (the batching writer and packing), `lease`
//! (ownership, recovery of abandoned runs, cancels across relays), `tail` (live tails),
//! `kept` (decoding kept logs), `conversations`, `usage` (the usage tallies), `migrate` (the key
//! layout).

mod conn;
mod conversations;
mod kept;
mod lease;
mod migrate;
mod scripts;
mod tail;
mod target;
mod usage;
mod writer;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

pub use self::conn::{Conn, Timeouts, script};
use self::kept::{Kept, fold_entries, kept_of};
use self::lease::{LEASE_MS, Owned, keep_leases};
pub use self::migrate::migrate;
use self::scripts::{DELETE, INSERT, ITEM_DROP, ITEM_KEEP, KEEP_TURNS, READ, READ_LOG};
use self::tail::{TAIL, tail};
use self::target::Target;
pub use self::usage::usage_at;
pub use self::writer::Sink;
use self::writer::{Cmd, write_loop};
use super::packed;
use super::{FailHook, Record, RunQuery, StoreError, Tenant, status_of, unfinished};
use crate::api::Response;
use crate::api::output_as_input;
use crate::api::request::InputItem;
use crate::api::response::Usage;
use crate::eventlog::log::RunLog;
use crate::redact::mask_password;

const RESP: &str = "relay:resp:";
const LOG: &str = "relay:log:";
/// The index of unfinished runs by lease expiry.
const LEASES: &str = "relay:leases";
/// The index of runs by `expires_at`.
const EXPIRY: &str = "relay:expiry";
const ITEM: &str = "relay:item:";
/// Other tenants' items: `relay:titem:{tenant}:{item_id}` (the scripts spell it out too). Not under
/// `relay:item:`, so no default-tenant item id (ids are the client's) can name another's item.
const TENANT_ITEM: &str = "relay:titem:";

/// The index of `tenant`'s runs by the time they were stored.
fn runs_key(tenant: &str) -> String {
    format!("relay:runs:{tenant}")
}

/// The time now, in unix milliseconds (this relay's clock: for index scores, which are hints).
fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The key prefix of `tenant`'s items (the default tenant's is the one from before tenants).
fn item_prefix(tenant: &Tenant) -> String {
    if tenant.is_default() {
        ITEM.to_string()
    } else {
        format!("{TENANT_ITEM}{}:", tenant.as_str())
    }
}

struct Inner {
    conn: Arc<Conn>,
    tx: mpsc::UnboundedSender<Cmd>,
    /// This process's name as an owner.
    instance: String,
    ttl: Option<Duration>,
    owned: Arc<Mutex<HashMap<String, Owned>>>,
    /// Logs of runs live on other relays, tailed from Redis (shared by this relay's readers).
    tails: Mutex<HashMap<String, Weak<RunLog>>>,
}

/// The Redis store of this process: one connection, one writer task, one lease keeper. Cheap to
/// clone.
#[derive(Clone)]
pub struct Redis {
    inner: Arc<Inner>,
}

impl Redis {
    /// Connects (failing at once if Redis cannot be reached) and starts the writer and the
    /// lease keeper. Needs a tokio runtime.
    pub fn open(url: &str, ttl: Option<Duration>) -> Result<Self, StoreError> {
        crate::install_tls();
        let shown = mask_password(url);
        let target = Target::open(url).map_err(|e| StoreError::Redis(format!("{shown}: {e}")))?;
        let rt = tokio::runtime::Handle::try_current()
            .map_err(|_| StoreError::Internal("the Redis store needs a tokio runtime".into()))?;
        // Fail fast on a wrong address or password (one short blocking round trip at start-up).
        target
            .probe(Duration::from_secs(2))
            .map_err(|e| StoreError::Redis(format!("cannot reach Redis at {shown}: {e}")))?;
        migrate::check_layout(&target)
            .map_err(|e| StoreError::Redis(format!("Redis at {shown}: {e}")))?;
        let config = Timeouts {
            connect: Duration::from_secs(1),
            response: Some(Duration::from_secs(5)),
        };
        let conn = Arc::new(Conn::new(target, config));
        // The writer's own connection: behind Sentinel it sends `WAIT`, which holds the
        // connection it is sent on (and every read queued behind it) until a replica answers.
        let writer = Arc::new(Conn::new(
            Target::open(url).map_err(|e| StoreError::Redis(format!("{shown}: {e}")))?,
            config,
        ));
        let (tx, rx) = mpsc::unbounded_channel();
        let owned: Arc<Mutex<HashMap<String, Owned>>> = Arc::default();
        let instance = format!("relay-{:016x}", rand::random::<u64>());
        let inner = Arc::new(Inner {
            conn: conn.clone(),
            tx,
            instance,
            ttl,
            owned: owned.clone(),
            tails: Mutex::default(),
        });
        if conn.target().follows_sentinels() {
            rt.spawn(follow_primary(Arc::downgrade(&conn)));
            rt.spawn(follow_primary(Arc::downgrade(&writer)));
        } else if conn.is_cluster() {
            rt.spawn(count_replicas(Arc::downgrade(&writer)));
        }
        rt.spawn(write_loop(writer, rx, owned, inner.instance.clone()));
        rt.spawn(keep_leases(Arc::downgrade(&inner)));
        tracing::info!(redis = %shown, instance = %inner.instance, "Redis store ready");
        Ok(Redis { inner })
    }

    /// The store's connection, for others keeping counters in the same Redis (the limits).
    pub fn connection(&self) -> Arc<Conn> {
        self.inner.conn.clone()
    }

    fn resp_key(id: &str) -> String {
        format!("{RESP}{{{id}}}")
    }

    fn log_key(id: &str) -> String {
        format!("{LOG}{{{id}}}")
    }

    fn mark_key(id: &str) -> String {
        format!("{TAIL}{{{id}}}")
    }

    /// A new run's deadline (unix s) under the store's time to live (0: none).
    fn deadline(&self) -> i64 {
        self.inner
            .ttl
            .map_or(0, |t| now_ms() / 1000 + t.as_secs().max(1) as i64)
    }

    /// The sink `tenant`'s run `id`'s emitter appends through; `fail` ends the run if its events
    /// cannot be kept.
    pub fn sink(&self, tenant: &Tenant, id: &str, fail: Option<FailHook>) -> Sink {
        Sink {
            id: id.to_string(),
            home: crate::eventlog::publish::Home::here(),
            tx: self.inner.tx.clone(),
            fail,
            items: item_prefix(tenant),
            deadline: self.deadline(),
        }
    }

    /// Keeps a starting run (queued behind nothing: before its first event) and takes its lease.
    pub fn insert(
        &self,
        record: &Record,
        expires_at: Option<i64>,
        cancel: CancellationToken,
        fail: FailHook,
    ) {
        let r = &record.response;
        let deadline = self.deadline();
        let mut cmd = script(INSERT, &[Self::resp_key(&r.id)]);
        cmd.arg(&r.id)
            .arg(&self.inner.instance)
            .arg(LEASE_MS)
            .arg(deadline)
            .arg(serde_json::to_string(r).expect("serializes"))
            .arg(serde_json::to_string(&record.input).expect("serializes"))
            .arg(status_of(r))
            .arg(if r.background { "1" } else { "0" })
            .arg(record.tenant.as_str());
        // Beside it, each in its own slot: its index entries and its input items.
        let now = now_ms();
        let mut beside = vec![
            zadd(LEASES, now + LEASE_MS as i64, &r.id),
            zadd(&runs_key(record.tenant.as_str()), now, &r.id),
        ];
        if deadline > 0 {
            beside.push(zadd(EXPIRY, expires_at.unwrap_or(deadline), &r.id));
        }
        let prefix = item_prefix(&record.tenant);
        for i in &record.input {
            if let (Some(item_id), Ok(json)) = (i.id(), serde_json::to_string(i)) {
                beside.push(keep_item(&prefix, item_id, &r.id, &json, deadline, "nx"));
            }
        }
        let _ = self.inner.tx.send(Cmd::Insert {
            id: r.id.clone(),
            cmd,
            beside,
            owned: Some(Owned { cancel, fail }),
        });
    }

    /// Fields of a run's hash, of any tenant (the relay's own bookkeeping).
    async fn fields(&self, id: &str, names: &[&str]) -> Result<Vec<Option<String>>, StoreError> {
        let mut cmd = ::redis::cmd("HMGET");
        cmd.arg(Self::resp_key(id)).arg(names);
        self.inner.conn.query(&cmd).await
    }

    /// Fields of `tenant`'s run `id`: `None` for a run of another tenant, or no run.
    async fn tenant_fields(
        &self,
        tenant: &Tenant,
        id: &str,
        names: &[&str],
    ) -> Result<Option<Vec<Option<String>>>, StoreError> {
        let mut cmd = script(READ, &[Self::resp_key(id)]);
        cmd.arg(tenant.as_str()).arg(names);
        let f: Vec<Option<String>> = self.inner.conn.query(&cmd).await?;
        Ok((f.len() == names.len()).then_some(f))
    }

    /// A run's status and kept events, read together (from its packed log once it has one, else
    /// from its stream): `None` for no run, or one of another tenant than `tenant` (`None`: any).
    async fn read_log(
        &self,
        tenant: Option<&Tenant>,
        id: &str,
    ) -> Result<Option<Kept>, StoreError> {
        let mut cmd = script(READ_LOG, &[Self::resp_key(id), Self::log_key(id)]);
        cmd.arg(tenant.map_or("*", Tenant::as_str));
        let reply: Vec<::redis::Value> = self.inner.conn.query(&cmd).await?;
        kept_of(id, reply)
    }

    pub async fn record(&self, tenant: &Tenant, id: &str) -> Result<Option<Record>, StoreError> {
        let Some((record, status)) = self.raw_record(tenant, id).await? else {
            return Ok(None);
        };
        if !unfinished(&status) {
            return Ok(Some(record));
        }
        if self.recover(id).await? {
            return Ok(self.raw_record(tenant, id).await?.map(|(r, _)| r));
        }
        // Live on another relay: its Response as the kept events describe it now.
        let mut record = record;
        let tailed = self
            .inner
            .tails
            .lock()
            .expect("tails poisoned")
            .get(id)
            .and_then(Weak::upgrade);
        let now = match tailed {
            Some(log) => log.snapshot(),
            None => match self.read_log(Some(tenant), id).await? {
                Some(k) => fold_entries(&k.entries)?.response().cloned(),
                None => return Ok(None),
            },
        };
        if let Some(r) = now {
            record.response = r;
        }
        Ok(Some(record))
    }

    async fn raw_record(
        &self,
        tenant: &Tenant,
        id: &str,
    ) -> Result<Option<(Record, String)>, StoreError> {
        let names = ["response", "input", "status", "packed"];
        let mut cmd = script(READ, &[Self::resp_key(id)]);
        cmd.arg(tenant.as_str()).arg(&names[..]);
        let f: Vec<Option<Vec<u8>>> = self.inner.conn.query(&cmd).await?;
        let [response, Some(input), Some(status), packed] =
            <[_; 4]>::try_from(f).unwrap_or_default()
        else {
            return Ok(None);
        };
        let bad = |e: serde_json::Error| {
            StoreError::Corrupt(format!("stored response {id} is unreadable: {e}"))
        };
        let response = match (packed, response) {
            // A packed run: its final Response is packed with its log.
            (Some(blob), _) => serde_json::from_slice(&packed::unpack(&blob)?.response),
            (None, Some(json)) => serde_json::from_slice(&json),
            (None, None) => return Ok(None),
        };
        let record = Record {
            tenant: tenant.clone(),
            response: response.map_err(bad)?,
            input: serde_json::from_slice(&input).map_err(bad)?,
        };
        let status = String::from_utf8(status)
            .map_err(|_| StoreError::Corrupt(format!("stored response {id} has a bad status")))?;
        Ok(Some((record, status)))
    }

    /// A run's log: complete for a finished run; for a run live on another relay, the kept
    /// events then, appended as that relay keeps them, the rest (tailed with `XREAD BLOCK`).
    pub async fn log(&self, tenant: &Tenant, id: &str) -> Result<Option<Arc<RunLog>>, StoreError> {
        // One read for a finished run: its status and log together.
        let Some(mut kept) = self.read_log(Some(tenant), id).await? else {
            return Ok(None);
        };
        if let Some(log) = self
            .inner
            .tails
            .lock()
            .expect("tails poisoned")
            .get(id)
            .and_then(Weak::upgrade)
        {
            return Ok(Some(log));
        }
        if unfinished(&kept.status) && self.recover(id).await? {
            let Some(again) = self.read_log(Some(tenant), id).await? else {
                return Ok(None);
            };
            kept = again;
        }
        let Kept { status, entries } = kept;
        if !unfinished(&status) {
            // Finished: its terminal event was kept with its status (one script), so the log
            // is whole; replayed as kept, as SQLite's are.
            return Ok(Some(Arc::new(RunLog::kept(entries))));
        }
        let fold = fold_entries(&entries)?;
        if fold.is_terminal() {
            return Ok(Some(Arc::new(RunLog::from_entries(entries, fold, true))));
        }
        let next = entries.len() as u64;
        let log = Arc::new(RunLog::from_entries(entries, fold, false));
        let mut tails = self.inner.tails.lock().expect("tails poisoned");
        tails.retain(|_, w| w.strong_count() > 0);
        if let Some(existing) = tails.get(id).and_then(Weak::upgrade) {
            return Ok(Some(existing));
        }
        tails.insert(id.to_string(), Arc::downgrade(&log));
        drop(tails);
        tokio::spawn(tail(self.clone(), id.to_string(), log.clone(), next));
        Ok(Some(log))
    }

    /// Keeps the usage of each model turn of `tenant`'s ended run `id` (nothing if it is gone).
    pub async fn keep_turns(
        &self,
        tenant: &Tenant,
        id: &str,
        turns: &[Usage],
    ) -> Result<(), StoreError> {
        let mut cmd = script(KEEP_TURNS, &[Self::resp_key(id)]);
        cmd.arg(tenant.as_str())
            .arg(serde_json::to_string(turns).expect("serializes"));
        let _: i64 = self.inner.conn.query(&cmd).await?;
        Ok(())
    }

    /// The usage of each model turn of `tenant`'s run `id`, if it was kept.
    pub async fn turns(&self, tenant: &Tenant, id: &str) -> Result<Option<Vec<Usage>>, StoreError> {
        let Some(f) = self.tenant_fields(tenant, id, &["turns"]).await? else {
            return Ok(None);
        };
        f[0].as_deref()
            .map(|j| {
                serde_json::from_str(j).map_err(|e| {
                    StoreError::Corrupt(format!("stored turns of {id} are unreadable: {e}"))
                })
            })
            .transpose()
    }

    /// `tenant`'s runs as `query` wants them, newest stored first (up to `limit + 1`): the
    /// tenant's index read 100 at a time from after `query.after`, those runs' hashes read
    /// together for their status and Response.
    pub async fn runs(
        &self,
        tenant: &Tenant,
        query: &RunQuery,
    ) -> Result<Vec<Response>, StoreError> {
        let index = runs_key(tenant.as_str());
        let mut from: i64 = match &query.after {
            Some(after) => {
                let mut cmd = ::redis::cmd("ZREVRANK");
                cmd.arg(&index).arg(after);
                let rank: Option<i64> = self.inner.conn.query(&cmd).await?;
                match rank {
                    Some(r) => r + 1,
                    None => return Ok(Vec::new()),
                }
            }
            None => 0,
        };
        const PAGE: i64 = 100;
        let mut found = Vec::new();
        loop {
            let mut cmd = ::redis::cmd("ZREVRANGE");
            cmd.arg(&index).arg(from).arg(from + PAGE - 1);
            let ids: Vec<String> = self.inner.conn.query(&cmd).await?;
            // Read together: the multiplexed connection pipelines them.
            let records =
                futures::future::try_join_all(ids.iter().map(|id| self.raw_record(tenant, id)))
                    .await?;
            // A run whose hash expired (its time to live) is gone, though still indexed.
            for (record, status) in records.into_iter().flatten() {
                if query.wants(&status, &record.response.model) {
                    found.push(record.response);
                    if found.len() > query.limit {
                        return Ok(found);
                    }
                }
            }
            if (ids.len() as i64) < PAGE {
                return Ok(found);
            }
            from += PAGE;
        }
    }

    pub async fn find_item(
        &self,
        tenant: &Tenant,
        id: &str,
    ) -> Result<Option<InputItem>, StoreError> {
        let mut cmd = ::redis::cmd("HGET");
        cmd.arg(format!("{}{id}", item_prefix(tenant))).arg("item");
        let item: Option<String> = self.inner.conn.query(&cmd).await?;
        item.map(|s| serde_json::from_str(&s).map_err(|e| StoreError::Corrupt(e.to_string())))
            .transpose()
    }

    /// Removes `tenant`'s run (nothing if it is another tenant's).
    pub async fn delete(&self, tenant: &Tenant, id: &str) -> Result<bool, StoreError> {
        self.remove(Some(tenant), id).await
    }

    /// Removes a run of `tenant`, or of any tenant with `None` (expiry, recovery).
    async fn remove(&self, tenant: Option<&Tenant>, id: &str) -> Result<bool, StoreError> {
        let mut items: Vec<String> = Vec::new();
        let owner = match tenant {
            Some(t) => t.clone(),
            None => Tenant::new(
                self.fields(id, &["tenant"]).await?[0]
                    .as_deref()
                    .unwrap_or(super::DEFAULT_TENANT),
            ),
        };
        if let Some((record, _)) = self.raw_record(&owner, id).await? {
            items.extend(
                record
                    .input
                    .iter()
                    .filter_map(|i| i.id().map(str::to_string)),
            );
            items.extend(
                record
                    .response
                    .output
                    .iter()
                    .filter(|o| output_as_input(o).is_some())
                    .map(|o| o.id().to_string()),
            );
        }
        let mut cmd = script(DELETE, &[Self::resp_key(id), Self::log_key(id)]);
        cmd.arg(tenant.map(|t| t.as_str()).unwrap_or("*"));
        let existed: i64 = self.inner.conn.query(&cmd).await?;
        if existed == -1 {
            // Another tenant's run: not this caller's to remove.
            return Ok(false);
        }
        // Its items and index entries, each in its own slot (also when its hash had already
        // lapsed: its index entries stay otherwise).
        let prefix = item_prefix(&owner);
        let mut beside: Vec<::redis::Cmd> = items
            .iter()
            .map(|item| {
                let mut c = script(ITEM_DROP, &[format!("{prefix}{item}")]);
                c.arg(id);
                c
            })
            .collect();
        for index in [
            LEASES.to_string(),
            EXPIRY.to_string(),
            runs_key(owner.as_str()),
        ] {
            let mut c = ::redis::cmd("ZREM");
            c.arg(index).arg(id);
            beside.push(c);
        }
        for r in self.inner.conn.send(beside, &[]).await {
            if let Err(e) = r {
                tracing::warn!(response_id = %id, error = %e, "a deleted run's item or index entry stays");
            }
        }
        Ok(existed == 1)
    }

    pub async fn expire(&self, now: i64, live: Vec<String>) -> Result<usize, StoreError> {
        let mut cmd = ::redis::cmd("ZRANGEBYSCORE");
        cmd.arg(EXPIRY).arg("-inf").arg(now);
        let ids: Vec<String> = self.inner.conn.query(&cmd).await?;
        let mut n = 0;
        for id in ids.iter().filter(|i| !live.contains(i)) {
            if self.remove(None, id).await? {
                n += 1;
            }
        }
        Ok(n)
    }

    pub async fn flush(&self) {
        let (reply, rx) = oneshot::channel();
        if self.inner.tx.send(Cmd::Flush { reply }).is_ok() {
            let _ = rx.await;
        }
    }

    /// Whether Redis answers now, within a second (for new stored requests while it is away,
    /// paused or asleep, and for `/healthz`).
    pub async fn available(&self) -> Result<(), StoreError> {
        let cmd = ::redis::cmd("PING");
        let ping = self.inner.conn.query::<String>(&cmd);
        match tokio::time::timeout(AVAILABLE_WITHIN, ping).await {
            Ok(answered) => answered.map(|_| ()),
            Err(_) => Err(StoreError::Unavailable(
                "Redis did not answer within a second".into(),
            )),
        }
    }
}

/// `ZADD key score member`.
fn zadd(key: &str, score: i64, member: &str) -> ::redis::Cmd {
    let mut c = ::redis::cmd("ZADD");
    c.arg(key).arg(score).arg(member);
    c
}

/// Keeps item `item_id` (JSON `json`) of run `run` under `prefix` ([`ITEM_KEEP`]; `mode`: `nx`
/// for an input item, `set` for an output item).
fn keep_item(
    prefix: &str,
    item_id: &str,
    run: &str,
    json: &str,
    deadline: i64,
    mode: &str,
) -> ::redis::Cmd {
    let mut c = script(ITEM_KEEP, &[format!("{prefix}{item_id}")]);
    c.arg(run).arg(json).arg(deadline).arg(mode);
    c
}

/// Whether `url` names a Redis the store can use (checked, not connected to).
pub fn check_url(url: &str) -> Result<(), String> {
    Target::open(url).map(|_| ())
}

/// How long a new stored run waits to learn whether Redis answers.
const AVAILABLE_WITHIN: Duration = Duration::from_secs(1);

/// How often a relay behind Sentinel asks the Sentinels which server is the primary.
const FOLLOW_EVERY: Duration = Duration::from_millis(250);

/// How often a relay on a cluster counts the cluster's replicas.
const COUNT_REPLICAS_EVERY: Duration = Duration::from_secs(5);

/// On a cluster, until the store is gone: keeps the count of replicas the writer waits on.
async fn count_replicas(conn: std::sync::Weak<Conn>) {
    loop {
        match conn.upgrade() {
            Some(conn) => conn.count_replicas().await,
            None => return,
        }
        tokio::time::sleep(COUNT_REPLICAS_EVERY).await;
    }
}

/// Behind Sentinel, until the store is gone: drops the connection as soon as the Sentinels name
/// another primary, so writes go where they will be kept (a demoted primary may accept writes
/// for a moment, and loses them).
async fn follow_primary(conn: std::sync::Weak<Conn>) {
    loop {
        // First at once: the writer learns of the primary's replicas before its first batches.
        match conn.upgrade() {
            Some(conn) => conn.follow_primary().await,
            None => return,
        }
        tokio::time::sleep(FOLLOW_EVERY).await;
    }
}
