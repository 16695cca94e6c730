//! Where runs live: live runs in memory (their log, cancel token), and every stored run's
//! Response, input items and event log in a backend: `memory`, embedded SQLite, or Redis (shared
//! by several relays: see [`redis`]). Every ended run's usage is tallied per tenant, day and
//! model, in memory, and written to the backend in batches ([`usage`]).
//!
//! Invariants: a reader only sees an event once the backend has kept it (the backend's sink
//! publishes it on the run's log after its commit), so a replay is exactly what live clients got;
//! the one exception is a run the backend failed to keep: it is failed through its hook, its
//! events are shown to its live clients unkept so they get their terminal event, and it is not
//! kept (SQLite removes it; Redis leaves it for a relay to finish as failed);
//! a run with `store: false` is never kept; a run is in the live map from its start until its
//! terminal event is kept; after a crash, [`Store::open`] finishes every unfinished run with a
//! terminal event, so no reader waits forever.

pub mod conversations;
pub mod kind;
pub mod memory;
pub mod packed;
pub mod redis;
pub mod sqlite;
pub mod usage;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::api::Response;
use crate::api::output_as_input;
use crate::api::request::InputItem;
use crate::api::response::Usage;
use crate::eventlog::{Immediate, LogSink, RunLog};

pub use self::kind::StoreKind;

/// The tenant of a relay with no keys, and of data stored before tenants existed.
pub const DEFAULT_TENANT: &str = "default";

/// What went wrong in the store, by kind. The HTTP layer answers
/// [`Unavailable`](StoreError::Unavailable) with 503 (try again shortly) and every other kind
/// with 500; each one's message is for the logs (clients get a fixed one).
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// The store cannot be reached or cannot answer now (Redis away, a connection broken): worth
    /// retrying.
    #[error("store error: {prefix}: {0}", prefix = UNAVAILABLE)]
    Unavailable(String),
    /// The disk is full (SQLite's `SQLITE_FULL`): nothing new can be kept until space is freed.
    #[error("store error: the disk is full: {0}")]
    Full(String),
    /// A kept record does not decode (a Response, input items, an item, a conversation, turns,
    /// an event, a packed log), or kept events do not make a log.
    #[error("store error: {0}")]
    Corrupt(String),
    /// A `previous_response_id` chain longer than the store follows, or a cyclic one.
    #[error("store error: previous_response_id chain is too long or cyclic")]
    ChainTooLong,
    /// SQLite failed: opening the database, a query, a commit.
    #[error("store error: {0}")]
    Sqlite(String),
    /// Redis could not be used at start-up: a bad URL, no answer, a refused `PING`.
    #[error("store error: {0}")]
    Redis(String),
    /// A file or directory the relay keeps beside its store could not be made or read (the
    /// database's directory, the sealing key).
    #[error("store error: {0}")]
    Io(String),
    /// The store's own machinery failed: its writer is gone, a thread or task could not run,
    /// the compressor could not start, an abandoned run could not be finished in time.
    #[error("store error: {0}")]
    Internal(String),
}

impl From<rusqlite::Error> for StoreError {
    /// `SQLITE_FULL` is [`Full`](StoreError::Full), an I/O error
    /// [`Unavailable`](StoreError::Unavailable) (the disk may take writes again), the rest
    /// [`Sqlite`](StoreError::Sqlite).
    fn from(e: rusqlite::Error) -> Self {
        use rusqlite::ErrorCode as C;
        match e.sqlite_error_code() {
            Some(C::DiskFull) => StoreError::Full(e.to_string()),
            Some(C::SystemIoFailure) => StoreError::Unavailable(format!("SQLite: {e}")),
            _ => StoreError::Sqlite(e.to_string()),
        }
    }
}

/// Starts the message of a [`StoreError::Unavailable`] (the logs read it; the HTTP layer matches
/// the kind, never the text).
pub const UNAVAILABLE: &str = "the store is unavailable";

/// Called when the backend cannot keep a run's events: ends the run as failed with this message.
pub type FailHook = Arc<dyn Fn(String) + Send + Sync>;

/// How long `DELETE` waits for a live run it cancelled to end before deleting anyway.
const DELETE_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Whose data a request reaches: the tenant of its relay key ([`DEFAULT_TENANT`] without keys,
/// and for data stored before tenants existed). Every read of a backend is scoped by it: another
/// tenant's run is, to a request, exactly an unknown one.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Tenant(Arc<str>);

impl Tenant {
    pub fn new(name: &str) -> Self {
        Tenant(Arc::from(name))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The tenant of a relay without keys.
    pub fn is_default(&self) -> bool {
        &*self.0 == DEFAULT_TENANT
    }
}

impl Default for Tenant {
    fn default() -> Self {
        Tenant::new(DEFAULT_TENANT)
    }
}

/// A stored run's own data (its log aside).
#[derive(Debug, Clone)]
pub struct Record {
    pub tenant: Tenant,
    pub response: Response,
    pub input: Vec<InputItem>,
}

/// Which of a tenant's runs a listing wants ([`Store::runs`]): newest first, those with this
/// stored `status` and `model` (exactly), after the run `after` (the last one of the page before),
/// `limit` of them.
#[derive(Debug, Clone, Default)]
pub struct RunQuery {
    pub status: Option<String>,
    pub model: Option<String>,
    pub after: Option<String>,
    pub limit: usize,
}

impl RunQuery {
    /// Whether a stored run with this status and model may be one the query wants. A run not
    /// yet ended is stored as it was created (`queued` or `in_progress`) until its end: asked
    /// for either, a backend gives both, and [`Store::runs`] keeps those whose live status is
    /// the one asked for.
    pub fn wants(&self, status: &str, model: &str) -> bool {
        self.status
            .as_deref()
            .is_none_or(|s| s == status || (unfinished(s) && unfinished(status)))
            && self.model.as_deref().is_none_or(|m| m == model)
    }
}

/// A Response's status as stored (`in_progress`, `completed`...).
pub(crate) fn status_of(r: &Response) -> String {
    serde_json::to_value(r.status)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// Whether a stored status (`queued`, `in_progress`, `completed`...) is that of a run not yet ended.
pub(crate) fn unfinished(status: &str) -> bool {
    matches!(status, "queued" | "in_progress")
}

/// A run that is still going (or whose terminal event is not kept yet).
#[derive(Clone)]
pub struct LiveRun {
    pub tenant: Tenant,
    pub log: Arc<RunLog>,
    pub cancel: CancellationToken,
    pub background: bool,
    pub input: Arc<Vec<InputItem>>,
    /// The Response as created (`queued` for a background run): what the run is until its task
    /// has emitted `response.created`.
    pub created: Arc<Response>,
}

impl LiveRun {
    /// The run's current Response. Until its end is kept (visible), a run whose terminal event
    /// says it completed (or ended incomplete) is still `in_progress`: the store may yet fail to
    /// keep that end, and the run then ends failed.
    pub fn response(&self) -> Response {
        use crate::api::ResponseStatus;
        let Some(mut r) = self.log.snapshot() else {
            return (*self.created).clone();
        };
        if matches!(
            r.status,
            ResponseStatus::Completed | ResponseStatus::Incomplete
        ) && !self.log.is_finished()
        {
            r.status = ResponseStatus::InProgress;
            r.completed_at = None;
            r.incomplete_details = None;
        }
        r
    }
}

#[derive(Clone)]
enum Backend {
    Memory(memory::Memory),
    Sqlite(sqlite::Sqlite),
    Redis(self::redis::Redis),
}

/// The store. Cheap to clone.
#[derive(Clone)]
pub struct Store {
    live: Arc<Mutex<HashMap<String, LiveRun>>>,
    backend: Backend,
    ttl: Option<Duration>,
    /// Why the store ended a live run (its events could not be kept), for the agent's ending.
    failures: Arc<Mutex<HashMap<String, String>>>,
    /// Conversations a run of this relay holds ([`Store::lock_conversation`]).
    conversation_locks: Arc<Mutex<std::collections::HashSet<(Tenant, String)>>>,
    /// Where the backend's reads and deletes are timed, once the app has set it.
    metrics: Option<Arc<crate::metrics::Metrics>>,
    /// Ended runs' usage, tallied in memory and flushed to the backend in batches.
    usage: Arc<usage::Tallies>,
}

impl Store {
    pub fn memory() -> Self {
        let backend = Backend::Memory(memory::Memory::default());
        Store {
            live: Arc::default(),
            usage: usage::Tallies::start(backend.clone()),
            backend,
            ttl: None,
            failures: Arc::default(),
            conversation_locks: Arc::default(),
            metrics: None,
        }
    }

    /// Opens the configured store; for SQLite, finishes runs a previous process left unfinished.
    pub fn open(kind: &StoreKind, ttl: Option<Duration>) -> Result<Self, StoreError> {
        let backend = match kind {
            StoreKind::Memory => Backend::Memory(memory::Memory::default()),
            StoreKind::Sqlite(path) => Backend::Sqlite(sqlite::Sqlite::open(path)?),
            StoreKind::Redis(url) => Backend::Redis(self::redis::Redis::open(url, ttl)?),
        };
        Ok(Store {
            live: Arc::default(),
            usage: usage::Tallies::start(backend.clone()),
            backend,
            ttl,
            failures: Arc::default(),
            conversation_locks: Arc::default(),
            metrics: None,
        })
    }

    /// The store, its backend operations timed in `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<crate::metrics::Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// Runs one backend operation, timing it.
    async fn timed<T>(
        &self,
        operation: &'static str,
        op: impl std::future::Future<Output = T>,
    ) -> T {
        let started = std::time::Instant::now();
        let out = op.await;
        if let Some(m) = &self.metrics {
            let backend = match self.backend {
                Backend::Memory(_) => "memory",
                Backend::Sqlite(_) => "sqlite",
                Backend::Redis(_) => "redis",
            };
            m.store_operation(backend, operation, started.elapsed());
        }
        out
    }

    /// The sink `tenant`'s run `id`'s emitter appends through: the backend's when the run is
    /// `stored`.
    pub fn sink(&self, tenant: &Tenant, id: &str, stored: bool) -> Arc<dyn LogSink> {
        match (&self.backend, stored) {
            (Backend::Sqlite(s), true) => Arc::new(s.sink(tenant, id)),
            (Backend::Redis(r), true) => Arc::new(r.sink(tenant, id, Some(self.fail_hook(id)))),
            _ => Arc::new(Immediate),
        }
    }

    /// Ends a live run as failed with `reason` (the backend could not keep its events): records
    /// the reason for the agent ([`Store::failure`]) and cancels the run.
    fn fail_hook(&self, id: &str) -> FailHook {
        let (live, failures, id) = (self.live.clone(), self.failures.clone(), id.to_string());
        Arc::new(move |reason: String| {
            let run = live.lock().expect("store poisoned").get(&id).cloned();
            if let Some(run) = run {
                failures
                    .lock()
                    .expect("store poisoned")
                    .insert(id.clone(), reason);
                run.cancel.cancel();
            }
        })
    }

    /// Why the store ended this live run, if it did (the agent then ends it `failed`).
    pub fn failure(&self, id: &str) -> Option<String> {
        self.failures
            .lock()
            .expect("store poisoned")
            .get(id)
            .cloned()
    }

    /// The Redis connection of a Redis store (shared with the limits' counters).
    pub fn redis(&self) -> Option<Arc<self::redis::Conn>> {
        match &self.backend {
            Backend::Redis(r) => Some(r.connection()),
            _ => None,
        }
    }

    /// Fails fast (before a stored run starts) when the backend cannot keep it now: Redis away,
    /// SQLite's disk full since a commit failed for lack of space.
    pub async fn available(&self) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Redis(r) => r.available().await,
            Backend::Sqlite(s) => s.available(),
            Backend::Memory(_) => Ok(()),
        }
    }

    /// For tests: a SQLite store's full disk at a chosen size (see
    /// [`sqlite::Sqlite::set_max_page_count`]); `None` for other backends.
    #[doc(hidden)]
    pub async fn set_sqlite_max_page_count(&self, pages: u64) -> Option<Result<u64, StoreError>> {
        match &self.backend {
            Backend::Sqlite(s) => Some(s.set_max_page_count(pages).await),
            _ => None,
        }
    }

    /// Cancels `tenant`'s background run live on another relay (Redis) and waits for its end;
    /// does nothing for other runs or backends.
    pub async fn cancel_elsewhere(&self, tenant: &Tenant, id: &str) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Redis(r) => r.cancel_elsewhere(tenant, id).await,
            _ => Ok(()),
        }
    }

    /// Registers a starting stored run under `id` and keeps its input items and its Response as
    /// created.
    pub fn insert_live(&self, id: &str, run: LiveRun) {
        let record = Record {
            tenant: run.tenant.clone(),
            response: (*run.created).clone(),
            input: (*run.input).clone(),
        };
        let (log, cancel) = (run.log.clone(), run.cancel.clone());
        // Live first: a backend that fails to keep the run finds it to fail it.
        self.live
            .lock()
            .expect("store poisoned")
            .insert(id.to_string(), run);
        let expires_at = self
            .ttl
            .map(|t| record.response.created_at + t.as_secs() as i64);
        match &self.backend {
            Backend::Memory(m) => m.insert(record, log, expires_at),
            Backend::Sqlite(s) => s.insert(&record, expires_at, self.fail_hook(id)),
            Backend::Redis(r) => r.insert(&record, expires_at, cancel, self.fail_hook(id)),
        }
    }

    /// Called when a run ended: once its terminal event is kept, it leaves the live map, and
    /// the usage of each of its model turns (`turns`; the log has only their sum) is kept
    /// beside it for the run viewer.
    pub async fn finish_live(&self, id: &str, log: &RunLog, turns: &[Usage]) {
        log.wait_finished().await;
        let tenant = self
            .live
            .lock()
            .expect("store poisoned")
            .get(id)
            .map(|l| l.tenant.clone());
        if let (Backend::Memory(m), Some(r), Some(t)) = (&self.backend, log.snapshot(), &tenant) {
            m.finish(t, &r);
        }
        if let Some(t) = &tenant
            && !turns.is_empty()
        {
            match &self.backend {
                Backend::Memory(m) => m.keep_turns(t, id, turns),
                Backend::Sqlite(s) => s.keep_turns(t, id, turns),
                Backend::Redis(r) => {
                    if let Err(e) = r.keep_turns(t, id, turns).await {
                        tracing::warn!(response_id = %id, error = %e, "could not keep the run's turn usage");
                    }
                }
            }
        }
        self.live.lock().expect("store poisoned").remove(id);
        self.failures.lock().expect("store poisoned").remove(id);
    }

    /// `tenant`'s live run `id`, if it is one.
    pub fn live(&self, tenant: &Tenant, id: &str) -> Option<LiveRun> {
        self.live
            .lock()
            .expect("store poisoned")
            .get(id)
            .filter(|l| &l.tenant == tenant)
            .cloned()
    }

    /// The current Response of a run of `tenant` (mid-run too).
    pub async fn response(
        &self,
        tenant: &Tenant,
        id: &str,
    ) -> Result<Option<Response>, StoreError> {
        if let Some(l) = self.live(tenant, id) {
            return Ok(Some(l.response()));
        }
        Ok(self.record(tenant, id).await?.map(|r| r.response))
    }

    /// The usage of each model turn of `tenant`'s ended run `id`, if it was kept (runs that
    /// ended before it was kept, or that a stopped relay left, have none).
    pub async fn turns(&self, tenant: &Tenant, id: &str) -> Result<Option<Vec<Usage>>, StoreError> {
        self.timed("turns", async {
            match &self.backend {
                Backend::Memory(m) => Ok(m.turns(tenant, id)),
                Backend::Sqlite(s) => s.turns(tenant, id).await,
                Backend::Redis(r) => r.turns(tenant, id).await,
            }
        })
        .await
    }

    /// A run's Response and input items, if the run is `tenant`'s.
    pub async fn record(&self, tenant: &Tenant, id: &str) -> Result<Option<Record>, StoreError> {
        if let Some(l) = self.live(tenant, id) {
            return Ok(Some(Record {
                tenant: l.tenant.clone(),
                response: l.response(),
                input: l.input.to_vec(),
            }));
        }
        self.timed("record", async {
            match &self.backend {
                Backend::Memory(m) => Ok(m.record(tenant, id)),
                Backend::Sqlite(s) => s.record(tenant, id).await,
                Backend::Redis(r) => r.record(tenant, id).await,
            }
        })
        .await
    }

    /// A run's event log, if the run is `tenant`'s: the live one, or the kept one of a finished
    /// run.
    pub async fn log(&self, tenant: &Tenant, id: &str) -> Result<Option<Arc<RunLog>>, StoreError> {
        if let Some(l) = self.live(tenant, id) {
            return Ok(Some(l.log));
        }
        self.timed("log", async {
            match &self.backend {
                Backend::Memory(m) => Ok(m.log(tenant, id)),
                Backend::Sqlite(s) => s.log(tenant, id).await,
                Backend::Redis(r) => r.log(tenant, id).await,
            }
        })
        .await
    }

    /// What the model saw and said along `tenant`'s chain ending at `id`, oldest first: every
    /// ancestor's input and output, then this run's. `None` if `id` is unknown (to `tenant`).
    pub async fn history(
        &self,
        tenant: &Tenant,
        id: &str,
    ) -> Result<Option<Vec<InputItem>>, StoreError> {
        let mut chain = Vec::new();
        let mut cur = Some(id.to_string());
        while let Some(c) = cur {
            let Some(record) = self.record(tenant, &c).await? else {
                if chain.is_empty() {
                    return Ok(None);
                }
                break; // an ancestor was deleted: the chain starts after it
            };
            cur = record.response.previous_response_id.clone();
            chain.push(record);
            if chain.len() > 10_000 {
                return Err(StoreError::ChainTooLong);
            }
        }
        let mut history = Vec::new();
        for record in chain.into_iter().rev() {
            history.extend(record.input);
            history.extend(record.response.output.iter().filter_map(output_as_input));
        }
        Ok(Some(history))
    }

    /// A stored item (input or output) of `tenant`'s by id, for `item_reference`.
    pub async fn find_item(
        &self,
        tenant: &Tenant,
        id: &str,
    ) -> Result<Option<InputItem>, StoreError> {
        let live: Vec<LiveRun> = self
            .live
            .lock()
            .expect("store poisoned")
            .values()
            .filter(|l| &l.tenant == tenant)
            .cloned()
            .collect();
        for l in live {
            if let Some(i) = l.input.iter().find(|i| i.id() == Some(id)) {
                return Ok(Some(i.clone()));
            }
            if let Some(r) = l.log.snapshot()
                && let Some(o) = r.output.iter().find(|o| o.id() == id)
            {
                return Ok(output_as_input(o));
            }
        }
        self.timed("find_item", async {
            match &self.backend {
                Backend::Memory(m) => Ok(m.find_item(tenant, id)),
                Backend::Sqlite(s) => s.find_item(tenant, id).await,
                Backend::Redis(r) => r.find_item(tenant, id).await,
            }
        })
        .await
    }

    /// `tenant`'s stored runs, newest first, as [`RunQuery`] filters and pages them: up to
    /// `limit + 1` Responses (one more than asked, so a caller can tell there are more). A live
    /// run is shown (and filtered) as it is now; it is listed once its backend has kept its
    /// start (SQLite: the writer's next commit).
    pub async fn runs(
        &self,
        tenant: &Tenant,
        query: &RunQuery,
    ) -> Result<Vec<Response>, StoreError> {
        let found = self
            .timed("runs", async {
                match &self.backend {
                    Backend::Memory(m) => Ok(m.runs(tenant, query)),
                    Backend::Sqlite(s) => s.runs(tenant, query).await,
                    Backend::Redis(r) => r.runs(tenant, query).await,
                }
            })
            .await?;
        Ok(found
            .into_iter()
            .map(|r| match self.live(tenant, &r.id) {
                Some(l) => l.response(),
                None => r,
            })
            .filter(|r| query.status.as_deref().is_none_or(|s| s == status_of(r)))
            .collect())
    }

    /// Removes `tenant`'s run, its items and its log (cancelling it if it is live); false if
    /// unknown (to `tenant`).
    pub async fn delete(&self, tenant: &Tenant, id: &str) -> Result<bool, StoreError> {
        // A live run is cancelled and allowed to end first (its terminal event kept), so that
        // nothing it writes at its end lands after the delete and brings its log or items back.
        let running = self.live(tenant, id);
        if let Some(l) = &running {
            l.cancel.cancel();
            let _ = tokio::time::timeout(DELETE_WAIT, l.log.wait_finished()).await;
            self.live.lock().expect("store poisoned").remove(id);
        }
        let kept = self
            .timed("delete", async {
                match &self.backend {
                    Backend::Memory(m) => Ok(m.delete(tenant, id)),
                    Backend::Sqlite(s) => s.delete(tenant, id).await,
                    Backend::Redis(r) => r.delete(tenant, id).await,
                }
            })
            .await?;
        Ok(kept || running.is_some())
    }

    /// Removes runs whose time to live has passed; returns how many.
    pub async fn expire(&self, now: i64) -> Result<usize, StoreError> {
        let live: Vec<String> = self
            .live
            .lock()
            .expect("store poisoned")
            .keys()
            .cloned()
            .collect();
        self.timed("expire", async {
            match &self.backend {
                Backend::Memory(m) => Ok(m.expire(now, &live)),
                Backend::Sqlite(s) => s.expire(now, live).await,
                Backend::Redis(r) => r.expire(now, live).await,
            }
        })
        .await
    }

    /// Tallies an ended run of `tenant` (stored or not): its `usage` and `mcp_calls` go to
    /// (`tenant`, the UTC day of `created_at`, `model`), in memory until the next flush.
    pub fn tally(
        &self,
        tenant: &Tenant,
        created_at: i64,
        model: &str,
        usage: &Usage,
        mcp_calls: u64,
    ) {
        let tally = usage::Tally {
            runs: 1,
            input_tokens: usage.input_tokens,
            output_tokens: usage.output_tokens,
            mcp_calls,
        };
        self.usage.add(tenant, created_at, model, tally);
    }

    /// The usage of `tenant` (every tenant's with `None`) from the UTC day `since_day`
    /// (`YYYY-MM-DD`) on, ordered by tenant, day and model; this relay's tallies are flushed
    /// first (other relays' sharing a Redis reach it within [`usage::FLUSH_EVERY`]).
    pub async fn usage(
        &self,
        tenant: Option<&Tenant>,
        since_day: &str,
    ) -> Result<Vec<usage::UsageRow>, StoreError> {
        self.usage.flush().await?;
        self.timed("usage", async {
            match &self.backend {
                Backend::Memory(m) => Ok(m.usage(tenant, since_day)),
                Backend::Sqlite(s) => s.usage(tenant, since_day).await,
                Backend::Redis(r) => r.usage(tenant, since_day).await,
            }
        })
        .await
    }

    /// Waits until everything appended so far is kept (SQLite, Redis), the usage tallies
    /// included; at once for memory.
    pub async fn flush(&self) {
        if let Err(e) = self.usage.flush().await {
            tracing::warn!(error = %e, "could not write the usage tallies");
        }
        match &self.backend {
            Backend::Sqlite(s) => s.flush().await,
            Backend::Redis(r) => r.flush().await,
            Backend::Memory(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_store_error_says_its_kind_and_an_unavailable_store_says_so_first() {
        let e = StoreError::Unavailable("Redis: connection refused".into());
        assert_eq!(
            e.to_string(),
            "store error: the store is unavailable: Redis: connection refused"
        );
        assert!(e.to_string().contains(UNAVAILABLE));
        assert_eq!(
            StoreError::ChainTooLong.to_string(),
            "store error: previous_response_id chain is too long or cyclic"
        );
        assert!(
            !StoreError::Corrupt("x".into())
                .to_string()
                .contains(UNAVAILABLE)
        );
    }
}
