//! The embedded SQLite backend (WAL). One writer thread takes every write from a channel and
//! commits them in batches, then makes the batch's events visible to readers (each run's once, on
//! the lane the run started on: `eventlog::publish`): the run task never
//! waits on the disk. A batch is gathered for a time sized by what the last one cost (group
//! commit, in `writer`): the writer sleeps rather than waking for each write, so under load
//! many runs' events share one commit and one wake-up. A reader sees an event once it is kept
//! and never before, except the events of a run a failed commit broke: that run is failed
//! through its hook, its events are shown to its live clients unkept (so they get their terminal
//! event, turned into `response.failed` if it said the run completed), and at its end it is
//! removed whole (by the next batch that commits).
//! Reads use their own connection (WAL readers do not block the writer).
//!
//! Events of a live run are kept in `journal`, a table appended in arrival order whatever the
//! run, so a commit writes the few pages at its end rather than one page per live run: one row
//! per run and batch (a lone event as it is, several packed into one blob numbered from the row's
//! `seq`, none for a run the batch ends). With its
//! terminal event, a run's whole log is packed into one compressed blob (`responses.log`, see
//! [`packed`](super::packed)), in the same transaction. Journal rows older than the oldest live
//! run's first one are removed from time to time; at start-up, the journal gives back the events
//! of runs a stopped process left unfinished. Invariant: every kept event of a run is in its
//! `log` once the run is finished, and in `journal` before. Files written before logs were packed
//! keep a finished run's events as rows of `events`; they are read from there.
//!
//! A new database is made with `auto_vacuum = INCREMENTAL`: after a commit that left more than
//! `FREE_KEPT` pages free (runs deleted or expired), the writer gives at most
//! `VACUUM_PAGES` of them back to the file system per pass, so the file tracks what it holds
//! without a long full `VACUUM`. (A file made before keeps its own vacuum mode.)
//!
//! The files on disk are what the store holds (rule and numbers in `disk`): the WAL is cut to
//! 64 MiB whenever it starts again, the writer checkpoints itself past 64 MiB of it, and after
//! 1 s without a commit the checkpointer truncates it to nothing; so a second or two after a load
//! the files are the database, an empty WAL and its index. A commit that fails for a full disk
//! (or an I/O error) fails its batch's runs as above, and new stored runs are refused
//! ([`Sqlite::available`], a 503) until a probe write succeeds.
//!
//! Here: the [`Sqlite`] type, opening a database, recovery at start-up. Beside it: `schema`
//! (tables and migrations), `writer` (the writer thread), `disk` (the checkpointer, the WAL's
//! bound, a full disk), `journal` (what it knows of the journal), `reads` (reads and `export`),
//! `conversations`, `usage` (the usage tallies' table).

mod conversations;
mod disk;
mod journal;
mod reads;
mod schema;
mod usage;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use rusqlite::Connection;
use tokio::sync::oneshot;

use self::disk::{CHECKPOINT_BUSY, Disk, WAL_AUTOCHECKPOINT, WAL_LIMIT, checkpoints};
pub use self::reads::export;
use self::reads::{fold_entries, read_entries};
use self::schema::{SCHEMA, migrate};
pub use self::usage::usage_at;
pub use self::writer::Sink;
use self::writer::{Cmd, write_loop};
use super::{Record, StoreError, Tenant, status_of};
use crate::api::response::Usage;
use crate::eventlog::emitter::end_as_failed;
use crate::eventlog::log::RunLog;

/// The SQLite store of this process: the writer's channel and the read connection. Cheap to
/// clone.
#[derive(Clone)]
pub struct Sqlite {
    tx: mpsc::Sender<Cmd>,
    read: Arc<Mutex<Connection>>,
    /// Whether the disk takes writes (shared with the writer and the checkpointer).
    disk: Arc<Disk>,
    /// The checkpointer stops once every clone of the store is gone.
    _alive: Arc<()>,
}

fn connect(path: &Path) -> Result<Connection, StoreError> {
    configure(Connection::open(path)?)
}

fn configure(conn: Connection) -> Result<Connection, StoreError> {
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    Ok(conn)
}

impl Sqlite {
    /// Opens (creating) the database, starts the writer, and finishes runs a previous process
    /// left unfinished.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| StoreError::Io(format!("{}: {e}", dir.display())))?;
        }
        let writer = Connection::open(path)?;
        // Before WAL mode and the first table: it takes effect on a new database only.
        writer.pragma_update(None, "auto_vacuum", "INCREMENTAL")?;
        let writer = configure(writer)?;
        // A 16 MB page cache keeps the hot pages in memory (with SQLite's 2 MB default the writer
        // re-read pages and spilled dirty ones mid-transaction; at 64 MB, the scan of the cache's
        // hash table at the end of every transaction, `pcache1TruncateUnsafe`, was 12% of the
        // writer under `store-scale`, and with packed logs the hot pages fit in 16). Checkpoints run on their own
        // thread (`checkpoints`), so a commit never waits for one: checkpointing in the writer
        // (SQLite's default) held every event behind it for the checkpoint's copy and fsync,
        // most of the p99 added latency with `store: true` (`bench --scenario stream`: p99
        // 164 -> 64 ms, p50 4.8 -> 2.8 ms without them). The writer still checkpoints itself
        // past 64 MiB of WAL, which starts the WAL again, cut to 64 MiB (see `disk`).
        writer.pragma_update(None, "cache_size", -16384)?;
        writer.pragma_update(None, "wal_autocheckpoint", WAL_AUTOCHECKPOINT)?;
        writer.pragma_update(None, "journal_size_limit", WAL_LIMIT)?;
        // Every statement the writer runs per batch stays prepared (about 15 of them; the
        // default cache holds 16, and one evicted is parsed again at its next use).
        writer.set_prepared_statement_cache_capacity(32);
        writer.execute_batch(SCHEMA)?;
        migrate(&writer)?;
        let read = connect(path)?;
        let (tx, rx) = mpsc::channel();
        let disk = Arc::new(Disk::default());
        let shared = disk.clone();
        std::thread::Builder::new()
            .name("sqlite-writer".into())
            .spawn(move || write_loop(writer, rx, shared))
            .map_err(|e| StoreError::Internal(e.to_string()))?;
        let alive = Arc::new(());
        let checkpointer = connect(path)?;
        // A TRUNCATE checkpoint holds the writer back while it waits: never long.
        checkpointer.busy_timeout(CHECKPOINT_BUSY)?;
        let (weak, shared, db) = (Arc::downgrade(&alive), disk.clone(), path.to_path_buf());
        std::thread::Builder::new()
            .name("sqlite-checkpoint".into())
            .spawn(move || checkpoints(checkpointer, db, shared, weak))
            .map_err(|e| StoreError::Internal(e.to_string()))?;
        let store = Sqlite {
            tx,
            read: Arc::new(Mutex::new(read)),
            disk,
            _alive: alive,
        };
        store.recover()?;
        Ok(store)
    }

    /// Fails when the disk took no write since a commit failed for lack of space
    /// ([`StoreError::Full`]) or an I/O error ([`StoreError::Unavailable`]): a new stored run
    /// is refused rather than failed once started.
    pub fn available(&self) -> Result<(), StoreError> {
        self.disk.unwritable().map_or(Ok(()), Err)
    }

    /// For tests: sets the writer's `max_page_count`, so that a commit growing the database
    /// past `pages` pages fails with `SQLITE_FULL`, as on a full disk; answers the limit SQLite
    /// took (never below the database's size).
    #[doc(hidden)]
    pub async fn set_max_page_count(&self, pages: u64) -> Result<u64, StoreError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Cmd::MaxPages { pages, reply })
            .map_err(|_| StoreError::Internal("writer gone".into()))?;
        rx.await
            .map_err(|_| StoreError::Internal("writer gone".into()))?
    }

    pub fn sink(&self, tenant: &Tenant, id: &str) -> Sink {
        Sink {
            id: id.into(),
            tenant: tenant.as_str().into(),
            home: crate::eventlog::publish::Home::here(),
            tx: self.tx.clone(),
        }
    }

    pub fn insert(&self, record: &Record, expires_at: Option<i64>, fail: super::FailHook) {
        let r = &record.response;
        let items = record
            .input
            .iter()
            .filter_map(|i| Some((i.id()?.to_string(), serde_json::to_string(i).ok()?)))
            .collect();
        let cmd = Cmd::Insert {
            id: r.id.clone(),
            tenant: record.tenant.as_str().to_string(),
            created_at: r.created_at,
            expires_at,
            status: status_of(r),
            response: serde_json::to_string(r).expect("serializes"),
            input: serde_json::to_string(&record.input).expect("serializes"),
            items,
            fail,
        };
        let _ = self.tx.send(cmd);
    }

    async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let conn = self.read.clone();
        tokio::task::spawn_blocking(move || f(&conn.lock().expect("sqlite reader poisoned")))
            .await
            .map_err(|e| StoreError::Internal(e.to_string()))?
    }

    /// Keeps the usage of each model turn of `tenant`'s ended run `id` (nothing if it is gone).
    pub fn keep_turns(&self, tenant: &Tenant, id: &str, turns: &[Usage]) {
        let _ = self.tx.send(Cmd::Turns {
            id: id.to_string(),
            tenant: tenant.as_str().to_string(),
            turns: serde_json::to_string(turns).expect("serializes"),
        });
    }

    pub async fn delete(&self, tenant: &Tenant, id: &str) -> Result<bool, StoreError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Cmd::Delete {
                id: id.to_string(),
                tenant: tenant.as_str().to_string(),
                reply,
            })
            .map_err(|_| StoreError::Internal("writer gone".into()))?;
        rx.await
            .map_err(|_| StoreError::Internal("writer gone".into()))?
    }

    pub async fn expire(&self, now: i64, live: Vec<String>) -> Result<usize, StoreError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Cmd::Expire { now, live, reply })
            .map_err(|_| StoreError::Internal("writer gone".into()))?;
        rx.await
            .map_err(|_| StoreError::Internal("writer gone".into()))?
    }

    pub async fn flush(&self) {
        let (reply, rx) = oneshot::channel();
        if self.tx.send(Cmd::Flush { reply }).is_ok() {
            let _ = rx.await;
        }
    }

    /// Ends every run left `queued`/`in_progress` by a process that stopped: its open items are
    /// closed and `response.failed` is appended, through the same emitter as a live run.
    fn recover(&self) -> Result<(), StoreError> {
        let conn = self.read.lock().expect("sqlite reader poisoned");
        let mut stmt = conn.prepare(
            "SELECT id, tenant FROM responses WHERE status IN ('queued', 'in_progress')",
        )?;
        let ids: Vec<(String, String)> = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<Result<_, _>>()?;
        // Every unfinished run's events are read before any is finished: finishing one lets the
        // writer trim the journal.
        let mut left = Vec::with_capacity(ids.len());
        for (id, tenant) in ids {
            let entries = read_entries(&conn, &id, true)?;
            left.push((id, Tenant::new(&tenant), entries));
        }
        for (id, tenant, entries) in left {
            let fold = fold_entries(&entries)?;
            if fold.response().is_none() {
                // Not even `response.created` was kept: nothing was ever visible; drop it.
                conn.execute("DELETE FROM responses WHERE id = ?1", [&id])?;
                continue;
            }
            let log = Arc::new(RunLog::from_entries(entries, fold, false));
            end_as_failed(
                log,
                Arc::new(self.sink(&tenant, &id)),
                "The relay stopped before this response finished.",
            );
            tracing::warn!(response_id = %id, "finished a run left unfinished by a previous relay process");
        }
        drop(stmt);
        drop(conn);
        let (reply, rx) = mpsc::channel();
        let _ = self.tx.send(Cmd::Recovered { reply });
        let _ = rx.recv();
        Ok(())
    }
}

/// The default database path.
pub fn default_path() -> PathBuf {
    PathBuf::from("./relay-data/relay.sqlite3")
}
