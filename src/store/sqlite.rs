//! The embedded SQLite backend (WAL). One writer thread takes every write from a channel and
//! commits them in batches, then makes the batch's events visible to readers: the run task never
//! waits on the disk. A batch is gathered for a time sized by what the last one cost (group
//! commit, [`group_window`]): the writer sleeps rather than waking for each write, so under load
//! many runs' events share one commit and one wake-up. A reader sees an event once it is kept
//! and never before, except the events of a run a failed commit broke: that run is failed
//! through its hook, its events are shown to its live clients unkept (so they get their terminal
//! event, turned into `response.failed` if it said the run completed), and at its end it is
//! removed whole (by the next batch that commits).
//! Reads use their own connection (WAL readers do not block the writer).
//!
//! Events of a live run are kept in `journal`, a table appended in arrival order whatever the
//! run, so a commit writes the few pages at its end rather than one page per live run. With its
//! terminal event, a run's whole log is packed into one compressed blob (`responses.log`, see
//! [`packed`](super::packed)), in the same transaction. Journal rows older than the oldest live
//! run's first one are removed from time to time; at start-up, the journal gives back the events
//! of runs a stopped process left unfinished. Invariant: every kept event of a run is in its
//! `log` once the run is finished, and in `journal` before. Files written before logs were packed
//! keep a finished run's events as rows of `events`; they are read from there.
//!
//! A new database is made with `auto_vacuum = INCREMENTAL`: after a commit that left more than
//! [`FREE_KEPT`] pages free (runs deleted or expired), the writer gives at most
//! [`VACUUM_PAGES`] of them back to the file system per pass, so the file tracks what it holds
//! without a long full `VACUUM`. (A file made before keeps its own vacuum mode.)

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use rusqlite::{Connection, OptionalExtension, params};
use tokio::sync::oneshot;

use super::{Record, RunQuery, StoreError, Tenant, status_of, unfinished};
use crate::api::Response;
use crate::api::fold::Fold;
use crate::api::output_as_input;
use crate::api::request::InputItem;
use crate::api::response::Conversation;
use crate::api::response::Usage;
use crate::eventlog::emitter::{LogSink, end_as_failed};
use crate::eventlog::log::{LogEntry, RunLog};
use serde_json::{Map, Value};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS responses (
    id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL DEFAULT 'default',
    created_at INTEGER NOT NULL,
    expires_at INTEGER,
    status TEXT NOT NULL,
    response TEXT NOT NULL,
    input TEXT NOT NULL,
    turns TEXT,
    log BLOB
);
CREATE TABLE IF NOT EXISTS events (
    response_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    offset_ms INTEGER NOT NULL,
    kind TEXT NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (response_id, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS journal (
    response_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    offset_ms INTEGER NOT NULL,
    kind TEXT NOT NULL,
    data TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS items (
    tenant TEXT NOT NULL DEFAULT 'default',
    id TEXT NOT NULL,
    response_id TEXT NOT NULL,
    item TEXT NOT NULL,
    PRIMARY KEY (tenant, id)
);
CREATE INDEX IF NOT EXISTS items_by_response ON items(response_id);
CREATE TABLE IF NOT EXISTS conversations (
    tenant TEXT NOT NULL,
    id TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    metadata TEXT NOT NULL,
    PRIMARY KEY (tenant, id)
);
CREATE TABLE IF NOT EXISTS conversation_items (
    tenant TEXT NOT NULL,
    conversation_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    item_id TEXT,
    item TEXT NOT NULL,
    PRIMARY KEY (tenant, conversation_id, seq)
);
CREATE INDEX IF NOT EXISTS responses_by_expiry ON responses(expires_at);
";

/// A database made before tenants existed: its rows go to the default tenant (`responses` gets
/// a `tenant` column; `items`, keyed by item id alone, is rebuilt keyed by (tenant, id)); one
/// made before runs kept their model turns' usage gets a `turns` column (null for its runs).
fn migrate(c: &Connection) -> Result<(), StoreError> {
    let has = |table: &str, column: &str| -> Result<bool, StoreError> {
        let n: i64 = c.query_row(
            &format!("SELECT COUNT(*) FROM pragma_table_info('{table}') WHERE name = ?1"),
            [column],
            |r| r.get(0),
        )?;
        Ok(n > 0)
    };
    if !has("responses", "tenant")? {
        c.execute_batch(
            "ALTER TABLE responses ADD COLUMN tenant TEXT NOT NULL DEFAULT 'default';",
        )?;
    }
    if !has("responses", "turns")? {
        c.execute_batch("ALTER TABLE responses ADD COLUMN turns TEXT;")?;
    }
    if !has("responses", "log")? {
        c.execute_batch("ALTER TABLE responses ADD COLUMN log BLOB;")?;
    }
    if !has("items", "tenant")? {
        c.execute_batch(
            "BEGIN;
             CREATE TABLE items_by_tenant (
                 tenant TEXT NOT NULL DEFAULT 'default',
                 id TEXT NOT NULL,
                 response_id TEXT NOT NULL,
                 item TEXT NOT NULL,
                 PRIMARY KEY (tenant, id)
             );
             INSERT INTO items_by_tenant (tenant, id, response_id, item)
                 SELECT 'default', id, response_id, item FROM items;
             DROP TABLE items;
             ALTER TABLE items_by_tenant RENAME TO items;
             CREATE INDEX IF NOT EXISTS items_by_response ON items(response_id);
             COMMIT;",
        )?;
    }
    Ok(())
}

/// Largest number of writes committed in one transaction.
const BATCH: usize = 4096;
/// How often the checkpointer copies the WAL into the database.
const CHECKPOINT_EVERY: std::time::Duration = std::time::Duration::from_millis(200);
/// The journal is trimmed once this many rows could go.
const TRIM_ROWS: i64 = 4096;
/// Free pages the file keeps for reuse (the journal's churn) before any is given back.
const FREE_KEPT: i64 = 1024;
/// Most free pages given back to the file system after one commit (bounds the pass's time).
const VACUUM_PAGES: i64 = 1024;

enum Cmd {
    Insert {
        id: String,
        tenant: String,
        created_at: i64,
        expires_at: Option<i64>,
        status: String,
        response: String,
        input: String,
        items: Vec<(String, String)>,
        /// Ends the run as failed if the store cannot keep it.
        fail: super::FailHook,
    },
    Append {
        id: String,
        tenant: String,
        log: Arc<RunLog>,
        entry: LogEntry,
        terminal: Option<Box<Response>>,
    },
    Delete {
        id: String,
        tenant: String,
        reply: oneshot::Sender<Result<bool, StoreError>>,
    },
    Expire {
        now: i64,
        live: Vec<String>,
        reply: oneshot::Sender<Result<usize, StoreError>>,
    },
    Flush {
        reply: oneshot::Sender<()>,
    },
    /// The usage of each model turn of an ended run (JSON), kept beside its Response.
    Turns {
        id: String,
        tenant: String,
        turns: String,
    },
    /// A write to a conversation: answers how many rows it touched (0: no such conversation).
    Conv {
        tenant: String,
        id: String,
        op: ConvOp,
        reply: oneshot::Sender<Result<usize, StoreError>>,
    },
    /// Start-up recovery finished every run: the journal is emptied (no run is live yet), then
    /// the reply (outside the async runtime).
    Recovered {
        reply: mpsc::Sender<()>,
    },
}

/// What a [`Cmd::Conv`] does.
enum ConvOp {
    Create {
        created_at: i64,
        metadata: String,
        items: Vec<(Option<String>, String)>,
    },
    Update {
        metadata: String,
    },
    Delete,
    Append {
        items: Vec<(Option<String>, String)>,
    },
    DeleteItem {
        item_id: String,
    },
}

#[derive(Clone)]
pub struct Sqlite {
    tx: mpsc::Sender<Cmd>,
    read: Arc<Mutex<Connection>>,
    /// The checkpointer stops once every clone of the store is gone.
    _alive: Arc<()>,
}

/// Appends one run's events through the writer.
pub struct Sink {
    id: String,
    tenant: String,
    tx: mpsc::Sender<Cmd>,
}

impl LogSink for Sink {
    fn append(&self, log: &Arc<RunLog>, entry: &LogEntry, terminal: Option<&Response>) {
        let cmd = Cmd::Append {
            id: self.id.clone(),
            tenant: self.tenant.clone(),
            log: log.clone(),
            entry: entry.clone(),
            terminal: terminal.cloned().map(Box::new),
        };
        if self.tx.send(cmd).is_err() {
            tracing::error!("the SQLite writer is gone; an event could not be kept");
        }
    }
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
                .map_err(|e| StoreError(format!("{}: {e}", dir.display())))?;
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
        // past 65,536 WAL pages (256 MB), should the checkpointer fall behind.
        writer.pragma_update(None, "cache_size", -16384)?;
        writer.pragma_update(None, "wal_autocheckpoint", 65536)?;
        writer.execute_batch(SCHEMA)?;
        migrate(&writer)?;
        let read = connect(path)?;
        let (tx, rx) = mpsc::channel();
        std::thread::Builder::new()
            .name("sqlite-writer".into())
            .spawn(move || write_loop(writer, rx))
            .map_err(|e| StoreError(e.to_string()))?;
        let alive = Arc::new(());
        let checkpointer = connect(path)?;
        let weak = Arc::downgrade(&alive);
        std::thread::Builder::new()
            .name("sqlite-checkpoint".into())
            .spawn(move || checkpoints(checkpointer, weak))
            .map_err(|e| StoreError(e.to_string()))?;
        let store = Sqlite {
            tx,
            read: Arc::new(Mutex::new(read)),
            _alive: alive,
        };
        store.recover()?;
        Ok(store)
    }

    pub fn sink(&self, tenant: &Tenant, id: &str) -> Sink {
        Sink {
            id: id.to_string(),
            tenant: tenant.as_str().to_string(),
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
            .map_err(|e| StoreError(e.to_string()))?
    }

    pub async fn record(&self, tenant: &Tenant, id: &str) -> Result<Option<Record>, StoreError> {
        let (tenant, id) = (tenant.clone(), id.to_string());
        self.read(move |c| read_record(c, &tenant, &id)).await
    }

    /// A finished run's kept log, for replaying it as it was streamed: the kept frames as they
    /// are, without parsing the events again (each one passed the fold before it was kept).
    pub async fn log(&self, tenant: &Tenant, id: &str) -> Result<Option<Arc<RunLog>>, StoreError> {
        let (tenant, id) = (tenant.clone(), id.to_string());
        self.read(move |c| {
            let Some(status) = status(c, Some(tenant.as_str()), &id)? else {
                return Ok(None);
            };
            Ok(Some(Arc::new(RunLog::kept(read_entries(
                c,
                &id,
                unfinished(&status),
            )?))))
        })
        .await
    }

    /// Keeps the usage of each model turn of `tenant`'s ended run `id` (nothing if it is gone).
    pub fn keep_turns(&self, tenant: &Tenant, id: &str, turns: &[Usage]) {
        let _ = self.tx.send(Cmd::Turns {
            id: id.to_string(),
            tenant: tenant.as_str().to_string(),
            turns: serde_json::to_string(turns).expect("serializes"),
        });
    }

    /// The usage of each model turn of `tenant`'s run `id`, if it was kept.
    pub async fn turns(&self, tenant: &Tenant, id: &str) -> Result<Option<Vec<Usage>>, StoreError> {
        let (tenant, id) = (tenant.clone(), id.to_string());
        self.read(move |c| {
            let json: Option<Option<String>> = c
                .query_row(
                    "SELECT turns FROM responses WHERE id = ?1 AND tenant = ?2",
                    [&id, tenant.as_str()],
                    |r| r.get(0),
                )
                .optional()?;
            json.flatten()
                .map(|j| {
                    serde_json::from_str(&j).map_err(|e| {
                        StoreError(format!("stored turns of {id} are unreadable: {e}"))
                    })
                })
                .transpose()
        })
        .await
    }

    /// `tenant`'s runs as `query` wants them, newest stored first (up to `limit + 1`).
    pub async fn runs(
        &self,
        tenant: &Tenant,
        query: &RunQuery,
    ) -> Result<Vec<Response>, StoreError> {
        let (tenant, query) = (tenant.clone(), query.clone());
        self.read(move |c| {
            // The model is filtered here, not in SQL: a finished run's Response is packed with
            // its log (the `response` column is then empty).
            let mut stmt = c.prepare_cached(
                "SELECT response, log FROM responses WHERE tenant = ?1
                   AND (?2 IS NULL OR status = ?2
                        OR (?2 IN ('queued', 'in_progress') AND status IN ('queued', 'in_progress')))
                   AND (?3 IS NULL OR rowid < (SELECT rowid FROM responses WHERE id = ?3 AND tenant = ?1))
                 ORDER BY rowid DESC",
            )?;
            let mut rows = stmt.query(rusqlite::params![
                tenant.as_str(),
                query.status,
                query.after,
            ])?;
            let mut out = Vec::new();
            while out.len() <= query.limit
                && let Some(row) = rows.next()?
            {
                let (json, packed): (String, Option<Vec<u8>>) = (row.get(0)?, row.get(1)?);
                let parsed = match packed {
                    Some(blob) => {
                        serde_json::from_slice::<Response>(&super::packed::unpack(&blob)?.response)
                    }
                    None => serde_json::from_str::<Response>(&json),
                };
                let response = parsed
                    .map_err(|e| StoreError(format!("a stored response is unreadable: {e}")))?;
                if query.model.as_deref().is_none_or(|m| response.model == m) {
                    out.push(response);
                }
            }
            Ok(out)
        })
        .await
    }

    pub async fn find_item(
        &self,
        tenant: &Tenant,
        id: &str,
    ) -> Result<Option<InputItem>, StoreError> {
        let (tenant, id) = (tenant.as_str().to_string(), id.to_string());
        self.read(move |c| {
            let item: Option<String> = c
                .query_row(
                    "SELECT item FROM items WHERE tenant = ?1 AND id = ?2",
                    [&tenant, &id],
                    |r| r.get(0),
                )
                .optional()?;
            item.map(|s| serde_json::from_str(&s).map_err(|e| StoreError(e.to_string())))
                .transpose()
        })
        .await
    }

    pub async fn delete(&self, tenant: &Tenant, id: &str) -> Result<bool, StoreError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Cmd::Delete {
                id: id.to_string(),
                tenant: tenant.as_str().to_string(),
                reply,
            })
            .map_err(|_| StoreError("writer gone".into()))?;
        rx.await.map_err(|_| StoreError("writer gone".into()))?
    }

    pub async fn expire(&self, now: i64, live: Vec<String>) -> Result<usize, StoreError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Cmd::Expire { now, live, reply })
            .map_err(|_| StoreError("writer gone".into()))?;
        rx.await.map_err(|_| StoreError("writer gone".into()))?
    }

    async fn conv(&self, tenant: &Tenant, id: &str, op: ConvOp) -> Result<usize, StoreError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Cmd::Conv {
                tenant: tenant.as_str().to_string(),
                id: id.to_string(),
                op,
                reply,
            })
            .map_err(|_| StoreError("writer gone".into()))?;
        rx.await.map_err(|_| StoreError("writer gone".into()))?
    }

    pub async fn create_conversation(
        &self,
        tenant: &Tenant,
        c: &Conversation,
        items: &[InputItem],
    ) -> Result<(), StoreError> {
        let op = ConvOp::Create {
            created_at: c.created_at,
            metadata: serde_json::to_string(&c.metadata).expect("serializes"),
            items: conv_rows(items),
        };
        self.conv(tenant, &c.id, op).await.map(|_| ())
    }

    pub async fn conversation(
        &self,
        tenant: &Tenant,
        id: &str,
    ) -> Result<Option<Conversation>, StoreError> {
        let (tenant, id) = (tenant.as_str().to_string(), id.to_string());
        self.read(move |c| {
            let row: Option<(i64, String)> = c
                .query_row(
                    "SELECT created_at, metadata FROM conversations WHERE tenant = ?1 AND id = ?2",
                    [&tenant, &id],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()?;
            row.map(|(created_at, metadata)| {
                Ok(Conversation {
                    id: id.clone(),
                    object: "conversation".into(),
                    created_at,
                    metadata: serde_json::from_str(&metadata)
                        .map_err(|e| StoreError(e.to_string()))?,
                })
            })
            .transpose()
        })
        .await
    }

    pub async fn conversation_items(
        &self,
        tenant: &Tenant,
        id: &str,
    ) -> Result<Option<Vec<InputItem>>, StoreError> {
        let (tenant, id) = (tenant.as_str().to_string(), id.to_string());
        self.read(move |c| {
            let exists: Option<i64> = c
                .query_row(
                    "SELECT 1 FROM conversations WHERE tenant = ?1 AND id = ?2",
                    [&tenant, &id],
                    |r| r.get(0),
                )
                .optional()?;
            if exists.is_none() {
                return Ok(None);
            }
            let rows: Vec<String> = c
                .prepare_cached("SELECT item FROM conversation_items WHERE tenant = ?1 AND conversation_id = ?2 ORDER BY seq")?
                .query_map([&tenant, &id], |r| r.get(0))?
                .collect::<Result<_, _>>()?;
            rows.iter()
                .map(|s| serde_json::from_str(s).map_err(|e| StoreError(e.to_string())))
                .collect::<Result<Vec<_>, _>>()
                .map(Some)
        })
        .await
    }

    pub async fn update_conversation(
        &self,
        tenant: &Tenant,
        id: &str,
        metadata: &Map<String, Value>,
    ) -> Result<bool, StoreError> {
        let metadata = serde_json::to_string(metadata).expect("serializes");
        Ok(self.conv(tenant, id, ConvOp::Update { metadata }).await? > 0)
    }

    pub async fn delete_conversation(&self, tenant: &Tenant, id: &str) -> Result<bool, StoreError> {
        Ok(self.conv(tenant, id, ConvOp::Delete).await? > 0)
    }

    pub async fn append_conversation(
        &self,
        tenant: &Tenant,
        id: &str,
        items: &[InputItem],
    ) -> Result<bool, StoreError> {
        let op = ConvOp::Append {
            items: conv_rows(items),
        };
        Ok(self.conv(tenant, id, op).await? > 0)
    }

    pub async fn delete_conversation_item(
        &self,
        tenant: &Tenant,
        id: &str,
        item_id: &str,
    ) -> Result<bool, StoreError> {
        let op = ConvOp::DeleteItem {
            item_id: item_id.to_string(),
        };
        Ok(self.conv(tenant, id, op).await? > 0)
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

/// Items as conversation rows: their id and JSON.
fn conv_rows(items: &[InputItem]) -> Vec<(Option<String>, String)> {
    items
        .iter()
        .map(|i| {
            (
                i.id().map(str::to_string),
                serde_json::to_string(i).expect("serializes"),
            )
        })
        .collect()
}

/// Applies a conversation write; how many rows it touched (0: no such conversation).
fn apply_conv(
    tx: &rusqlite::Transaction,
    tenant: &str,
    id: &str,
    op: &ConvOp,
) -> Result<usize, StoreError> {
    let append = |items: &[(Option<String>, String)]| -> Result<usize, StoreError> {
        let next: i64 = tx.query_row(
            "SELECT COALESCE(MAX(seq), -1) + 1 FROM conversation_items WHERE tenant = ?1 AND conversation_id = ?2",
            [tenant, id],
            |r| r.get(0),
        )?;
        let mut stmt = tx.prepare_cached(
            "INSERT INTO conversation_items (tenant, conversation_id, seq, item_id, item) VALUES (?1, ?2, ?3, ?4, ?5)",
        )?;
        for (k, (item_id, item)) in items.iter().enumerate() {
            stmt.execute(params![tenant, id, next + k as i64, item_id, item])?;
        }
        Ok(items.len())
    };
    let exists = || -> Result<bool, StoreError> {
        Ok(tx
            .query_row(
                "SELECT 1 FROM conversations WHERE tenant = ?1 AND id = ?2",
                [tenant, id],
                |_| Ok(()),
            )
            .optional()?
            .is_some())
    };
    Ok(match op {
        ConvOp::Create {
            created_at,
            metadata,
            items,
        } => {
            tx.execute(
                "INSERT INTO conversations (tenant, id, created_at, metadata) VALUES (?1, ?2, ?3, ?4)",
                params![tenant, id, created_at, metadata],
            )?;
            append(items)? + 1
        }
        ConvOp::Update { metadata } => tx.execute(
            "UPDATE conversations SET metadata = ?3 WHERE tenant = ?1 AND id = ?2",
            params![tenant, id, metadata],
        )?,
        ConvOp::Delete => {
            let n = tx.execute(
                "DELETE FROM conversations WHERE tenant = ?1 AND id = ?2",
                [tenant, id],
            )?;
            tx.execute(
                "DELETE FROM conversation_items WHERE tenant = ?1 AND conversation_id = ?2",
                [tenant, id],
            )?;
            n
        }
        ConvOp::Append { items } => {
            if !exists()? {
                return Ok(0);
            }
            append(items)? + 1
        }
        ConvOp::DeleteItem { item_id } => tx.execute(
            "DELETE FROM conversation_items WHERE tenant = ?1 AND conversation_id = ?2 AND item_id = ?3",
            [tenant, id, item_id],
        )?,
    })
}

fn read_record(c: &Connection, tenant: &Tenant, id: &str) -> Result<Option<Record>, StoreError> {
    type Row = (String, String, Option<Vec<u8>>);
    let row: Option<Row> = c
        .prepare_cached("SELECT response, input, log FROM responses WHERE id = ?1 AND tenant = ?2")?
        .query_row([id, tenant.as_str()], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
        })
        .optional()?;
    let Some((response, input, packed)) = row else {
        return Ok(None);
    };
    let bad = |e: serde_json::Error| StoreError(format!("stored response {id} is unreadable: {e}"));
    let response = match packed {
        // A finished run: its final Response is packed with its log.
        Some(blob) => serde_json::from_slice(&super::packed::unpack(&blob)?.response),
        None => serde_json::from_str(&response),
    };
    Ok(Some(Record {
        tenant: tenant.clone(),
        response: response.map_err(bad)?,
        input: serde_json::from_str(&input).map_err(bad)?,
    }))
}

/// The kept events of a run, in order: from `events`, and for an `unfinished` run also from the
/// journal (read whole: only recovery and `logs export` of a stopped relay ask for those).
fn read_entries(c: &Connection, id: &str, unfinished: bool) -> Result<Vec<LogEntry>, StoreError> {
    let row = |r: &rusqlite::Row| -> rusqlite::Result<LogEntry> {
        let (seq, offset_ms, kind, data): (i64, i64, String, String) =
            (r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?);
        Ok(LogEntry {
            seq: seq as u64,
            offset_ms: offset_ms as u64,
            frame: LogEntry::frame_for(&kind, data.as_bytes()),
        })
    };
    // A file no relay of this version opened yet (`logs export` reads it as it is) has no `log`.
    let packed: Option<Vec<u8>> = match c.prepare_cached("SELECT log FROM responses WHERE id = ?1")
    {
        Ok(mut stmt) => stmt.query_row([id], |r| r.get(0)).optional()?.flatten(),
        Err(e) if e.to_string().contains("no such column") => None,
        Err(e) => return Err(e.into()),
    };
    let mut entries: Vec<LogEntry> = match packed {
        Some(blob) => super::packed::unpack(&blob)?.entries,
        None => c
            .prepare_cached(
                "SELECT seq, offset_ms, kind, data FROM events WHERE response_id = ?1 ORDER BY seq",
            )?
            .query_map([id], row)?
            .collect::<Result<_, _>>()?,
    };
    if unfinished {
        let journal: Vec<LogEntry> = c
            .prepare_cached("SELECT seq, offset_ms, kind, data FROM journal WHERE response_id = ?1 ORDER BY seq")?
            .query_map([id], row)?
            .collect::<Result<_, _>>()?;
        entries.extend(journal);
        entries.sort_by_key(|e| e.seq);
        entries.dedup_by_key(|e| e.seq);
    }
    Ok(entries)
}

fn fold_entries(entries: &[LogEntry]) -> Result<Fold, StoreError> {
    let mut fold = Fold::new();
    for e in entries {
        let s: crate::api::Sequenced = serde_json::from_slice(&e.json())
            .map_err(|err| StoreError(format!("kept event {} is unreadable: {err}", e.seq)))?;
        fold.apply(&s.event)
            .map_err(|err| StoreError(format!("kept event {} breaks the log: {err}", e.seq)))?;
    }
    Ok(fold)
}

/// Opens a database read-only and reads one run's events (for `logs export` on a stopped relay),
/// of any tenant, or only of `tenant`.
pub fn export(
    path: &Path,
    id: &str,
    tenant: Option<&str>,
) -> Result<Option<Vec<LogEntry>>, StoreError> {
    let c = Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    let Some(status) = status(&c, tenant, id)? else {
        return Ok(None);
    };
    read_entries(&c, id, unfinished(&status)).map(Some)
}

/// A kept run's status (`tenant`'s run, or any tenant's with `None`), without reading the run.
fn status(c: &Connection, tenant: Option<&str>, id: &str) -> Result<Option<String>, StoreError> {
    Ok(match tenant {
        Some(t) => c
            .prepare_cached("SELECT status FROM responses WHERE id = ?1 AND tenant = ?2")?
            .query_row([id, t], |r| r.get(0))
            .optional()?,
        None => c
            .prepare_cached("SELECT status FROM responses WHERE id = ?1")?
            .query_row([id], |r| r.get(0))
            .optional()?,
    })
}

/// Copies the WAL's new pages into the database every [`CHECKPOINT_EVERY`] without blocking the
/// writer or readers (a passive checkpoint), until the store is dropped.
fn checkpoints(conn: Connection, alive: std::sync::Weak<()>) {
    while alive.strong_count() > 0 {
        std::thread::sleep(CHECKPOINT_EVERY);
        if let Err(e) = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(())) {
            tracing::warn!(error = %e, "SQLite checkpoint failed");
        }
    }
}

/// The default database path.
pub fn default_path() -> PathBuf {
    PathBuf::from("./relay-data/relay.sqlite3")
}

/// What the writer knows of the journal: where each live run's rows begin, and up to where rows
/// were trimmed. Changes made by a transaction count once it commits: a run whose terminal write
/// was rolled back keeps its journal rows.
#[derive(Default)]
struct Journal {
    first_row: HashMap<String, i64>,
    trimmed_below: i64,
    /// This transaction's runs that journaled a first row, runs that ended, and where the
    /// journal was trimmed before it trimmed.
    started: HashMap<String, i64>,
    ended: HashSet<String>,
    trimmed_before: Option<i64>,
}

impl Journal {
    fn journaled(&mut self, id: &str, row: i64) {
        if !self.first_row.contains_key(id) && !self.started.contains_key(id) {
            self.started.insert(id.to_string(), row);
        }
    }

    /// Removes the rows no live run needs, once there are enough of them.
    fn trim(&mut self, tx: &rusqlite::Transaction) -> Result<(), StoreError> {
        let next: i64 = tx
            .prepare_cached("SELECT COALESCE(MAX(rowid), 0) + 1 FROM journal")?
            .query_row([], |r| r.get(0))?;
        let live = self
            .first_row
            .iter()
            .filter(|(id, _)| !self.ended.contains(*id))
            .map(|(_, row)| *row);
        let started = self
            .started
            .iter()
            .filter(|(id, _)| !self.ended.contains(*id))
            .map(|(_, row)| *row);
        let keep_from = live.chain(started).min().unwrap_or(next);
        if keep_from - self.trimmed_below >= TRIM_ROWS {
            tx.prepare_cached("DELETE FROM journal WHERE rowid < ?1")?
                .execute([keep_from])?;
            // An emptied journal numbers its rows from 1 again.
            self.trimmed_to(if keep_from == next { 0 } else { keep_from });
        }
        Ok(())
    }

    /// Notes a trim of this transaction (undone if it rolls back).
    fn trimmed_to(&mut self, below: i64) {
        self.trimmed_before.get_or_insert(self.trimmed_below);
        self.trimmed_below = below;
    }

    /// The transaction committed (`true`) or was rolled back.
    fn settle(&mut self, committed: bool) {
        if committed {
            self.first_row.extend(self.started.drain());
            for id in self.ended.drain() {
                self.first_row.remove(&id);
            }
        } else {
            self.started.clear();
            self.ended.clear();
        }
        if let Some(before) = self.trimmed_before.take()
            && !committed
        {
            self.trimmed_below = before;
        }
    }
}

fn write_loop(mut conn: Connection, rx: mpsc::Receiver<Cmd>) {
    let mut journal = Journal::default();
    // 2: INCREMENTAL (a new database; an older file keeps its mode).
    let incremental = conn
        .query_row("PRAGMA auto_vacuum", [], |r| r.get::<_, i64>(0))
        .is_ok_and(|mode| mode == 2);
    let mut packer = match super::packed::Packer::new() {
        Ok(p) => p,
        Err(e) => {
            tracing::error!(error = %e, "the SQLite writer cannot start");
            return;
        }
    };
    let mut batch = Vec::with_capacity(BATCH);
    // How long the writer gathers a batch before committing it (see [`group_window`]).
    let mut window = std::time::Duration::ZERO;
    // Live stored runs' fail hooks, and the runs a failed commit broke: their later events are
    // shown to their clients without being kept, and at their end the run is removed.
    let mut hooks: HashMap<String, super::FailHook> = HashMap::new();
    let mut broken: HashSet<String> = HashSet::new();
    // Broken runs that ended while their removal could not be committed: removed by the next
    // batch that commits.
    let mut to_remove: HashSet<String> = HashSet::new();
    loop {
        // With removals pending, an idle writer still retries them every second.
        let first = if to_remove.is_empty() {
            rx.recv().ok()
        } else {
            match rx.recv_timeout(std::time::Duration::from_secs(1)) {
                Ok(c) => Some(c),
                Err(mpsc::RecvTimeoutError::Timeout) => None,
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        };
        if first.is_some() && !window.is_zero() {
            // Group commit: what arrives while the writer sleeps joins this batch, without
            // waking it (a sender wakes a writer blocked in `recv`, not a sleeping one).
            std::thread::sleep(window);
        }
        let busy_from = std::time::Instant::now();
        match first {
            Some(c) => batch.push(c),
            None if to_remove.is_empty() => break,
            None => {}
        }
        while batch.len() < BATCH {
            match rx.try_recv() {
                Ok(c) => batch.push(c),
                Err(_) => break,
            }
        }
        // A broken run that ends is not kept whole, so it is not kept at all: never half-written.
        let ending = batch.iter().filter_map(|cmd| match cmd {
            Cmd::Append {
                id,
                terminal: Some(_),
                ..
            } if broken.contains(id) => Some(id.clone()),
            _ => None,
        });
        if !broken.is_empty() {
            to_remove.extend(ending);
        }
        let writes = batch.len();
        let mut counts = vec![0usize; writes];
        let result = (|| -> Result<(), StoreError> {
            let tx = conn.transaction()?;
            for (cmd, count) in batch.iter().zip(counts.iter_mut()) {
                *count = match cmd {
                    Cmd::Append { id, .. } if broken.contains(id) => 0,
                    cmd => apply(&tx, cmd, &mut journal, &mut packer)?,
                };
            }
            // After the batch's own commands, so that a DELETE in it still finds the run.
            for id in &to_remove {
                remove_run(&tx, None, id)?;
                journal.ended.insert(id.clone());
            }
            journal.trim(&tx)?;
            tx.commit()?;
            Ok(())
        })();
        journal.settle(result.is_ok());
        if let Err(e) = &result {
            tracing::error!(error = %e, "the SQLite writer could not commit a batch");
        } else {
            to_remove.clear();
            if let Err(e) = give_back_free_pages(&conn, incremental) {
                tracing::warn!(error = %e, "SQLite incremental vacuum failed");
            }
        }
        let not_kept = |e: &StoreError| {
            format!(
                "The relay's store (SQLite) could not keep this response ({e}); it was not kept."
            )
        };
        for (cmd, count) in batch.drain(..).zip(counts) {
            match cmd {
                Cmd::Insert { id, fail, .. } => {
                    if let Err(e) = &result
                        && broken.insert(id.clone())
                    {
                        fail(not_kept(e));
                    }
                    hooks.insert(id, fail);
                }
                // Visible once kept. A run whose events a failed commit lost is failed through
                // its hook; its events are still shown to its live clients (unkept), so they
                // get their terminal event.
                Cmd::Append {
                    id,
                    log,
                    entry,
                    terminal,
                    ..
                } => {
                    if let Err(e) = &result
                        && broken.insert(id.clone())
                        && let Some(fail) = hooks.get(&id)
                    {
                        fail(not_kept(e));
                    }
                    if terminal.is_some() && broken.contains(&id) {
                        // Not kept: the run's end must not tell its clients it completed.
                        log.fail_pending_terminal(&match &result {
                            Err(e) => not_kept(e),
                            Ok(()) => "The relay's store (SQLite) could not keep this response; it was not kept.".into(),
                        });
                    }
                    log.publish(entry.seq as usize + 1, terminal.is_some());
                    if terminal.is_some() {
                        hooks.remove(&id);
                        broken.remove(&id);
                        if result.is_err() {
                            to_remove.insert(id);
                        }
                    }
                }
                Cmd::Flush { reply } => {
                    let _ = reply.send(());
                }
                Cmd::Turns { .. } => {}
                Cmd::Recovered { reply } => {
                    let _ = reply.send(());
                }
                Cmd::Conv { reply, .. } => {
                    let _ = reply.send(
                        result
                            .as_ref()
                            .map(|_| count)
                            .map_err(|e| StoreError(e.0.clone())),
                    );
                }
                Cmd::Delete { reply, .. } => {
                    let _ = reply.send(
                        result
                            .as_ref()
                            .map(|_| count > 0)
                            .map_err(|e| StoreError(e.0.clone())),
                    );
                }
                Cmd::Expire { reply, .. } => {
                    let _ = reply.send(
                        result
                            .as_ref()
                            .map(|_| count)
                            .map_err(|e| StoreError(e.0.clone())),
                    );
                }
            }
        }
        window = group_window(busy_from.elapsed(), writes);
    }
}

/// The writer's time per batch over the time it sleeps gathering one: at most 1 to this. A
/// batch's cost is mostly fixed (a wake-up, the commit's pages written to the WAL, readers woken),
/// so gathering more events per batch is what makes an event cheaper to keep.
const GATHER_PER_BUSY: u32 = 16;
/// The longest a batch is gathered: an event waits at most this long (plus a commit) before its
/// readers see it.
const GATHER_MAX: std::time::Duration = std::time::Duration::from_millis(4);

/// How long to gather the next batch, sized by the last one: by what it cost (`busy`:
/// committing it and making it visible), [`GATHER_PER_BUSY`] times that, at most
/// [`GATHER_MAX`], so the writer spends at most a seventeenth of its time committing; and not at
/// all after a batch of one write (`writes`): nothing else arrived while it was gathered and
/// committed, so waiting would only delay the next (a quiet relay commits each write at once).
fn group_window(busy: std::time::Duration, writes: usize) -> std::time::Duration {
    if writes <= 1 {
        return std::time::Duration::ZERO;
    }
    (busy * GATHER_PER_BUSY).min(GATHER_MAX)
}

/// Gives free pages past [`FREE_KEPT`] back to the file system, at most [`VACUUM_PAGES`]; only
/// in a database in incremental vacuum mode (`incremental`, read once by the writer).
fn give_back_free_pages(conn: &Connection, incremental: bool) -> Result<(), StoreError> {
    if !incremental {
        return Ok(());
    }
    let free: i64 = conn
        .prepare_cached("PRAGMA freelist_count")?
        .query_row([], |r| r.get(0))?;
    if free > FREE_KEPT {
        let n = (free - FREE_KEPT).min(VACUUM_PAGES);
        // Each step of the statement frees one page: run it to the end.
        let mut stmt = conn.prepare(&format!("PRAGMA incremental_vacuum({n})"))?;
        let mut rows = stmt.query([])?;
        while rows.next()?.is_some() {}
    }
    Ok(())
}

/// Removes a run (of `tenant`, or of any tenant) with its events and items; answers whether it
/// was there.
fn remove_run(
    tx: &rusqlite::Transaction,
    tenant: Option<&str>,
    id: &str,
) -> Result<usize, StoreError> {
    let n = match tenant {
        Some(t) => tx.execute(
            "DELETE FROM responses WHERE id = ?1 AND tenant = ?2",
            [id, t],
        )?,
        None => tx.execute("DELETE FROM responses WHERE id = ?1", [id])?,
    };
    if n == 0 {
        return Ok(0);
    }
    tx.execute("DELETE FROM events WHERE response_id = ?1", [id])?;
    tx.execute("DELETE FROM items WHERE response_id = ?1", [id])?;
    Ok(n)
}

/// Applies one write; returns how many runs it removed (for delete and expire).
fn apply(
    tx: &rusqlite::Transaction,
    cmd: &Cmd,
    journal: &mut Journal,
    packer: &mut super::packed::Packer,
) -> Result<usize, StoreError> {
    match cmd {
        Cmd::Insert {
            id,
            tenant,
            created_at,
            expires_at,
            status,
            response,
            input,
            items,
            ..
        } => {
            tx.execute(
                "INSERT OR REPLACE INTO responses (id, tenant, created_at, expires_at, status, response, input) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                params![id, tenant, created_at, expires_at, status, response, input],
            )?;
            // An input item keeps the run that first stored it: a later run of its tenant
            // sending it again (by reference, or as history) neither takes it over nor changes it.
            let mut stmt = tx.prepare_cached(
                "INSERT OR IGNORE INTO items (tenant, id, response_id, item) VALUES (?1, ?2, ?3, ?4)",
            )?;
            for (item_id, item) in items.iter() {
                stmt.execute(params![tenant, item_id, id, item])?;
            }
        }
        Cmd::Append {
            id,
            entry,
            terminal: None,
            ..
        } => {
            let json = entry.json();
            tx.prepare_cached("INSERT INTO journal (response_id, seq, offset_ms, kind, data) VALUES (?1, ?2, ?3, ?4, ?5)")?
                .execute(params![id, entry.seq as i64, entry.offset_ms as i64, entry.kind(), std::str::from_utf8(&json).unwrap_or("")])?;
            journal.journaled(id, tx.last_insert_rowid());
        }
        Cmd::Append {
            id,
            tenant,
            log,
            entry,
            terminal: Some(r),
        } => {
            journal.ended.insert(id.clone());
            // The whole log, this terminal event included, and the final Response packed into
            // one blob (the `response` column is left empty: the blob has it).
            let response = serde_json::to_vec(&**r).expect("serializes");
            let packed = packer.pack(&log.entries_upto(entry.seq as usize + 1), &response)?;
            let kept = tx
                .prepare_cached(
                    "UPDATE responses SET status = ?2, response = '', log = ?3 WHERE id = ?1",
                )?
                .execute(params![id, status_of(r), packed])?;
            if kept == 0 {
                // Deleted while it ran: its log and items are not written back.
                return Ok(0);
            }
            let mut stmt = tx.prepare_cached(
                "INSERT OR REPLACE INTO items (tenant, id, response_id, item) VALUES (?1, ?2, ?3, ?4)",
            )?;
            for o in &r.output {
                if let Some(i) = output_as_input(o) {
                    stmt.execute(params![
                        tenant,
                        o.id(),
                        id,
                        serde_json::to_string(&i).expect("serializes")
                    ])?;
                }
            }
        }
        Cmd::Delete { id, tenant, .. } => return remove_run(tx, Some(tenant), id),
        Cmd::Conv { tenant, id, op, .. } => return apply_conv(tx, tenant, id, op),
        Cmd::Expire { now, live, .. } => {
            let ids: Vec<String> = {
                let mut stmt = tx.prepare(
                    "SELECT id FROM responses WHERE expires_at IS NOT NULL AND expires_at <= ?1",
                )?;
                stmt.query_map([*now], |r| r.get(0))?
                    .collect::<Result<_, _>>()?
            };
            let mut n = 0;
            for id in ids.iter().filter(|i| !live.contains(i)) {
                n += remove_run(tx, None, id)?;
            }
            return Ok(n);
        }
        Cmd::Recovered { .. } => {
            tx.execute("DELETE FROM journal", [])?;
            journal.trimmed_to(0);
        }
        Cmd::Flush { .. } => {}
        Cmd::Turns { id, tenant, turns } => {
            tx.execute(
                "UPDATE responses SET turns = ?3 WHERE id = ?1 AND tenant = ?2",
                [id, tenant, turns],
            )?;
        }
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_lone_write_is_committed_at_once_and_a_busy_writer_gathers_in_proportion_to_its_cost() {
        assert_eq!(group_window(Duration::from_micros(300), 1), Duration::ZERO);
        assert_eq!(
            group_window(Duration::from_micros(50), 2),
            Duration::from_micros(800)
        );
        assert_eq!(group_window(Duration::from_millis(1), 40), GATHER_MAX);
    }
}
