//! The SQLite writer thread: takes every write from the channel and commits them in batches
//! (group commit: a batch is gathered for a time sized by what the last one cost), then makes
//! the batch's events visible to readers; after a commit it gives free pages back to the file
//! system, a few at a time. While a full disk keeps new stored runs out, it probes the disk
//! every second (see `disk`).
//!
//! Invariants: an event is visible only once committed; a run a failed commit broke is failed
//! through its hook once, its later events are shown to its live clients unkept (its end never
//! saying it completed), and once it ended it is removed whole by the next batch that commits,
//! so it is never kept half-written.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::mpsc;

use rusqlite::{Connection, params};
use tokio::sync::oneshot;

use super::conversations::{ConvOp, apply_conv};
use super::disk::{Disk, PROBE_EVERY};
use super::journal::Journal;
use super::{StoreError, status_of};
use crate::api::Response;
use crate::api::output_as_input;
use crate::eventlog::emitter::LogSink;
use crate::eventlog::log::{LogEntry, RunLog};
use crate::eventlog::publish::{Batch, Home};
use crate::store::packed::Packer;

/// Largest number of writes committed in one transaction.
pub(super) const BATCH: usize = 4096;

/// Free pages the file keeps for reuse (the journal's churn) before any is given back.
pub(super) const FREE_KEPT: i64 = 1024;
/// Most free pages given back to the file system after one commit (bounds the pass's time).
pub(super) const VACUUM_PAGES: i64 = 1024;

pub(super) enum Cmd {
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
        fail: crate::store::FailHook,
    },
    Append {
        id: Arc<str>,
        tenant: Arc<str>,
        /// Where the run's readers are woken (see `eventlog::publish`).
        home: Option<Arc<Home>>,
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
    /// Usage tallies to add to the `usage` table; answers once committed (or not).
    Usage {
        rows: Vec<crate::store::usage::UsageRow>,
        reply: oneshot::Sender<Result<(), StoreError>>,
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
    /// For tests: the writer's `max_page_count` (a full disk at a chosen size); answers the
    /// limit SQLite took.
    MaxPages {
        pages: u64,
        reply: oneshot::Sender<Result<u64, StoreError>>,
    },
}

/// Appends one run's events through the writer.
pub struct Sink {
    pub(super) id: Arc<str>,
    pub(super) tenant: Arc<str>,
    pub(super) home: Option<Arc<Home>>,
    pub(super) tx: mpsc::Sender<Cmd>,
}

impl LogSink for Sink {
    fn append(&self, log: &Arc<RunLog>, entry: &LogEntry, terminal: Option<&Response>) {
        let cmd = Cmd::Append {
            id: self.id.clone(),
            tenant: self.tenant.clone(),
            home: self.home.clone(),
            log: log.clone(),
            entry: entry.clone(),
            terminal: terminal.cloned().map(Box::new),
        };
        if self.tx.send(cmd).is_err() {
            tracing::error!("the SQLite writer is gone; an event could not be kept");
        }
    }
}

/// The writer thread: gathers a batch, commits it, settles each of its writes; until every
/// sender is gone. While the disk is full it probes it every [`PROBE_EVERY`] (see `disk`).
pub(super) fn write_loop(mut conn: Connection, rx: mpsc::Receiver<Cmd>, disk: Arc<Disk>) {
    let Some(mut writer) = Writer::new(&conn, disk) else {
        return;
    };
    let mut batch = Vec::with_capacity(BATCH);
    // How long the writer gathers a batch before committing it (see [`group_window`]).
    let mut window = std::time::Duration::ZERO;
    let mut probed = std::time::Instant::now();
    while let Some(busy_from) = writer.gather(&rx, &mut batch, window) {
        let writes = batch.len();
        let (result, counts) = writer.commit(&mut conn, &batch);
        if writer.disk.note(&result) {
            tracing::error!(error = %result.as_ref().unwrap_err(), "the SQLite store cannot write; new stored runs are refused until a write succeeds");
            probed = std::time::Instant::now();
        }
        for (cmd, count) in batch.drain(..).zip(counts) {
            writer.settle(&mut conn, cmd, count, &result);
        }
        writer.published.send();
        window = group_window(busy_from.elapsed(), writes);
        if writer.disk.unwritable().is_some() && probed.elapsed() >= PROBE_EVERY {
            writer.disk.probe(&mut conn);
            probed = std::time::Instant::now();
        }
    }
}

/// The writer thread's state between batches.
struct Writer {
    journal: Journal,
    /// Whether the database is in incremental vacuum mode (read once).
    incremental: bool,
    packer: Packer,
    /// Live stored runs' fail hooks.
    hooks: HashMap<String, crate::store::FailHook>,
    /// The runs a failed commit broke, and what their clients are told: their later events are
    /// shown to their clients without being kept, and at their end the run is removed.
    broken: HashMap<String, String>,
    /// Broken runs that ended while their removal could not be committed: removed by the next
    /// batch that commits.
    to_remove: HashSet<String>,
    /// Commits made, and whether the disk takes writes (shared with the store).
    disk: Arc<Disk>,
    /// The batch's events made visible, sent once it is settled: one wake-up per lane.
    published: Batch,
}

impl Writer {
    /// The writer for `conn`'s database; `None` if it cannot start (logged).
    fn new(conn: &Connection, disk: Arc<Disk>) -> Option<Self> {
        // 2: INCREMENTAL (a new database; an older file keeps its mode).
        let incremental = conn
            .query_row("PRAGMA auto_vacuum", [], |r| r.get::<_, i64>(0))
            .is_ok_and(|mode| mode == 2);
        let packer = match Packer::new() {
            Ok(p) => p,
            Err(e) => {
                tracing::error!(error = %e, "the SQLite writer cannot start");
                return None;
            }
        };
        Some(Writer {
            journal: Journal::default(),
            incremental,
            packer,
            hooks: HashMap::new(),
            broken: HashMap::new(),
            to_remove: HashSet::new(),
            disk,
            published: Batch::default(),
        })
    }

    /// Gathers the next batch into `batch`: waits for a first write, sleeps `window` (group
    /// commit), then takes what is queued (up to [`BATCH`]). With removals pending, or the disk
    /// full, an idle writer still comes back every second (with an empty batch) to retry them or
    /// probe it. Answers when the batch's work began; `None` once every sender is gone.
    fn gather(
        &mut self,
        rx: &mpsc::Receiver<Cmd>,
        batch: &mut Vec<Cmd>,
        window: std::time::Duration,
    ) -> Option<std::time::Instant> {
        // With removals pending or the disk full, an idle writer still comes back every second.
        let waking = !self.to_remove.is_empty() || self.disk.unwritable().is_some();
        let first = if !waking {
            rx.recv().ok()
        } else {
            match rx.recv_timeout(std::time::Duration::from_secs(1)) {
                Ok(c) => Some(c),
                Err(mpsc::RecvTimeoutError::Timeout) => None,
                Err(mpsc::RecvTimeoutError::Disconnected) => return None,
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
            None if !waking => return None,
            None => {}
        }
        while batch.len() < BATCH {
            match rx.try_recv() {
                Ok(c) => batch.push(c),
                Err(_) => break,
            }
        }
        Some(busy_from)
    }

    /// Commits `batch` in one transaction, with the removals pending; answers how it went and,
    /// per write, what [`apply`] counted. After a commit, gives free pages back.
    fn commit(
        &mut self,
        conn: &mut Connection,
        batch: &[Cmd],
    ) -> (Result<(), StoreError>, Vec<usize>) {
        // A broken run that ends is not kept whole, so it is not kept at all: never half-written.
        let broken = &self.broken;
        let ending = batch.iter().filter_map(|cmd| match cmd {
            Cmd::Append {
                id,
                terminal: Some(_),
                ..
            } if broken.contains_key(&**id) => Some(id.to_string()),
            _ => None,
        });
        if !broken.is_empty() {
            self.to_remove.extend(ending);
        }
        let mut counts = vec![0usize; batch.len()];
        let (journal, packer, to_remove) = (&mut self.journal, &mut self.packer, &self.to_remove);
        let incremental = self.incremental;
        // Free pages after the batch, read inside its transaction (page 1 is already locked and
        // cached there; read after the commit it costs a read transaction of its own).
        let mut free = 0;
        let result = in_transaction(conn, |tx| {
            let mut parts = Parts::default();
            for (cmd, count) in batch.iter().zip(counts.iter_mut()) {
                *count = match cmd {
                    Cmd::Append { id, .. } if broken.contains_key(&**id) => 0,
                    cmd => apply(tx, cmd, journal, packer, &mut parts)?,
                };
            }
            // After the batch's own commands, so that a DELETE in it still finds the run.
            for id in to_remove {
                remove_run(tx, None, id)?;
                journal.ended.insert(id.clone());
            }
            parts.journal(tx, journal, packer)?;
            journal.trim(tx)?;
            if incremental {
                free = tx
                    .prepare_cached("PRAGMA freelist_count")?
                    .query_row([], |r| r.get(0))?;
            }
            Ok(())
        });
        self.disk.committed();
        self.journal.settle(result.is_ok());
        if let Err(e) = &result {
            tracing::error!(error = %e, "the SQLite writer could not commit a batch");
        } else {
            self.to_remove.clear();
            if let Err(e) = give_back_free_pages(conn, free) {
                tracing::warn!(error = %e, "SQLite incremental vacuum failed");
            }
        }
        (result, counts)
    }

    /// Settles one write of a batch by how its commit went: events are made visible, callers
    /// answered, runs the failure broke failed through their hooks.
    fn settle(
        &mut self,
        conn: &mut Connection,
        cmd: Cmd,
        count: usize,
        result: &Result<(), StoreError>,
    ) {
        match cmd {
            Cmd::Insert { id, fail, .. } => {
                if let Err(e) = result
                    && !self.broken.contains_key(&id)
                {
                    self.broken.insert(id.clone(), not_kept(e));
                    fail(not_kept(e));
                }
                self.hooks.insert(id, fail);
            }
            Cmd::Append {
                id,
                home,
                log,
                entry,
                terminal,
                ..
            } => self.appended(&id, home.as_ref(), &log, &entry, terminal.is_some(), result),
            Cmd::Flush { reply } => {
                let _ = reply.send(());
            }
            Cmd::Turns { .. } => {}
            Cmd::Usage { reply, .. } => {
                let _ = reply.send(result.clone());
            }
            Cmd::Recovered { reply } => {
                let _ = reply.send(());
            }
            Cmd::Conv { reply, .. } => {
                let _ = reply.send(result.clone().map(|_| count));
            }
            Cmd::Delete { reply, .. } => {
                let _ = reply.send(result.clone().map(|_| count > 0));
            }
            Cmd::Expire { reply, .. } => {
                let _ = reply.send(result.clone().map(|_| count));
            }
            Cmd::MaxPages { pages, reply } => {
                let set = conn
                    .query_row(&format!("PRAGMA max_page_count = {pages}"), [], |r| {
                        r.get::<_, i64>(0)
                    })
                    .map(|n| n as u64)
                    .map_err(StoreError::from);
                let _ = reply.send(set);
            }
        }
    }

    /// Visible once kept (made so when the batch is settled, on the run's lane). A run whose
    /// events a failed commit lost is failed through its hook; its events are still shown to its
    /// live clients (unkept), so they get their terminal event.
    fn appended(
        &mut self,
        id: &str,
        home: Option<&Arc<Home>>,
        log: &Arc<RunLog>,
        entry: &LogEntry,
        terminal: bool,
        result: &Result<(), StoreError>,
    ) {
        if let Err(e) = result
            && !self.broken.contains_key(id)
        {
            self.broken.insert(id.to_string(), not_kept(e));
            if let Some(fail) = self.hooks.get(id) {
                fail(not_kept(e));
            }
        }
        if terminal && let Some(why) = self.broken.get(id) {
            // Not kept: the run's end must not tell its clients it completed, and says why (the
            // failure that broke it: the run may have ended before its hook could stop it).
            log.fail_pending_terminal(why);
        }
        self.published
            .add(home, log, entry.seq as usize + 1, terminal);
        if terminal {
            self.hooks.remove(id);
            self.broken.remove(id);
            if result.is_err() {
                self.to_remove.insert(id.to_string());
            }
        }
    }
}

/// Runs `f` in one transaction, begun and committed by statements prepared once per connection
/// (not parsed again for every batch); rolled back if `f` or the commit fails.
fn in_transaction(
    conn: &Connection,
    f: impl FnOnce(&Connection) -> Result<(), StoreError>,
) -> Result<(), StoreError> {
    conn.prepare_cached("BEGIN")?.execute([])?;
    let result = f(conn).and_then(|()| {
        conn.prepare_cached("COMMIT")?.execute([])?;
        Ok(())
    });
    if result.is_err() && !conn.is_autocommit() {
        let _ = conn.execute_batch("ROLLBACK");
    }
    result
}

/// What a run's clients are told when a failed commit lost its events.
fn not_kept(e: &StoreError) -> String {
    format!("The relay's store (SQLite) could not keep this response ({e}); it was not kept.")
}

/// The writer's time per batch over the time it sleeps gathering one: at most 1 to this. A
/// batch's cost is mostly fixed (a wake-up, the commit's pages written to the WAL, readers woken),
/// so gathering more events per batch is what makes an event cheaper to keep.
pub(super) const GATHER_PER_BUSY: u32 = 32;
/// The longest a batch is gathered: an event waits at most this long (plus a commit) before its
/// readers see it.
pub(super) const GATHER_MAX: std::time::Duration = std::time::Duration::from_millis(4);

/// How long to gather the next batch, sized by the last one: by what it cost (`busy`:
/// committing it and making it visible), [`GATHER_PER_BUSY`] times that, at most
/// [`GATHER_MAX`], so the writer spends at most a thirty-third of its time committing; and not at
/// all after a batch of one write (`writes`): nothing else arrived while it was gathered and
/// committed, so waiting would only delay the next (a quiet relay commits each write at once).
pub(super) fn group_window(busy: std::time::Duration, writes: usize) -> std::time::Duration {
    if writes <= 1 {
        return std::time::Duration::ZERO;
    }
    (busy * GATHER_PER_BUSY).min(GATHER_MAX)
}

/// Gives free pages past [`FREE_KEPT`] back to the file system, at most [`VACUUM_PAGES`], in a
/// transaction of its own: `free` is the free-page count the last commit left (0 unless the
/// database is in incremental vacuum mode, read once by the writer).
pub(super) fn give_back_free_pages(conn: &Connection, free: i64) -> Result<(), StoreError> {
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
pub(super) fn remove_run(
    tx: &rusqlite::Connection,
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

/// A batch's events of live runs, journaled after its commands ([`Parts::journal`]).
#[derive(Default)]
pub(super) struct Parts<'b> {
    runs: Vec<(&'b str, Vec<&'b LogEntry>)>,
    at: HashMap<&'b str, usize>,
}

impl<'b> Parts<'b> {
    fn add(&mut self, id: &'b str, entry: &'b LogEntry) {
        match self.at.get(id) {
            Some(&i) => self.runs[i].1.push(entry),
            None => {
                self.at.insert(id, self.runs.len());
                self.runs.push((id, vec![entry]));
            }
        }
    }

    /// One journal row per run: its only event as it is, or its events packed into one blob
    /// (`kind` empty, numbered from the row's `seq`). None for a run that ended in this batch:
    /// its packed log, in the same transaction, holds them.
    fn journal(
        self,
        tx: &rusqlite::Connection,
        journal: &mut Journal,
        packer: &mut crate::store::packed::Packer,
    ) -> Result<(), StoreError> {
        let mut insert = tx.prepare_cached(
            "INSERT INTO journal (response_id, seq, offset_ms, kind, data) VALUES (?1, ?2, ?3, ?4, ?5)",
        )?;
        for (id, entries) in self.runs {
            if journal.ended.contains(id) {
                continue;
            }
            let first = entries[0];
            let (seq, offset_ms) = (first.seq as i64, first.offset_ms as i64);
            if let [one] = entries[..] {
                let json = one.json();
                let json = std::str::from_utf8(&json).unwrap_or("");
                insert.execute(params![id, seq, offset_ms, one.kind(), json])?;
            } else {
                let blob = packer.pack_part(entries.into_iter())?;
                insert.execute(params![id, seq, offset_ms, "", blob])?;
            }
            journal.journaled(id, tx.last_insert_rowid());
        }
        Ok(())
    }
}

/// Applies one write; returns how many runs it removed (for delete and expire). A live run's
/// event goes to `parts`, journaled once the batch's commands are applied.
pub(super) fn apply<'b>(
    tx: &rusqlite::Connection,
    cmd: &'b Cmd,
    journal: &mut Journal,
    packer: &mut crate::store::packed::Packer,
    parts: &mut Parts<'b>,
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
            tx.prepare_cached(
                "INSERT OR REPLACE INTO responses (id, tenant, created_at, expires_at, status, response, input) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )?
            .execute(params![id, tenant, created_at, expires_at, status, response, input])?;
            keep_input_items(tx, tenant, id, items)?;
        }
        Cmd::Append {
            id,
            entry,
            terminal: None,
            ..
        } => parts.add(id, entry),
        Cmd::Append {
            id,
            tenant,
            log,
            entry,
            terminal: Some(r),
            ..
        } => {
            journal.ended.insert(id.to_string());
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
            keep_output_items(tx, tenant, id, r)?;
        }
        Cmd::Delete { id, tenant, .. } => return remove_run(tx, Some(tenant), id),
        Cmd::Conv { tenant, id, op, .. } => return apply_conv(tx, tenant, id, op),
        Cmd::Expire { now, live, .. } => return expire_runs(tx, *now, live),
        Cmd::Recovered { .. } => {
            tx.execute("DELETE FROM journal", [])?;
            journal.trimmed_to(0);
        }
        Cmd::Flush { .. } | Cmd::MaxPages { .. } => {}
        Cmd::Usage { rows, .. } => super::usage::add(tx, rows)?,
        Cmd::Turns { id, tenant, turns } => {
            tx.prepare_cached("UPDATE responses SET turns = ?3 WHERE id = ?1 AND tenant = ?2")?
                .execute([id, tenant, turns])?;
        }
    }
    Ok(0)
}

/// Keeps a new run's input items. An input item keeps the run that first stored it: a later run
/// of its tenant sending it again (by reference, or as history) neither takes it over nor
/// changes it.
fn keep_input_items(
    tx: &rusqlite::Connection,
    tenant: &str,
    id: &str,
    items: &[(String, String)],
) -> Result<(), StoreError> {
    let mut stmt = tx.prepare_cached(
        "INSERT OR IGNORE INTO items (tenant, id, response_id, item) VALUES (?1, ?2, ?3, ?4)",
    )?;
    for (item_id, item) in items.iter() {
        stmt.execute(params![tenant, item_id, id, item])?;
    }
    Ok(())
}

/// Keeps the items of an ended run's output (those a later request may reference).
fn keep_output_items(
    tx: &rusqlite::Connection,
    tenant: &str,
    id: &str,
    r: &Response,
) -> Result<(), StoreError> {
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
    Ok(())
}

/// Removes the runs whose time to live ended by `now`, but those `live`; answers how many.
fn expire_runs(tx: &rusqlite::Connection, now: i64, live: &[String]) -> Result<usize, StoreError> {
    let ids: Vec<String> = {
        let mut stmt = tx.prepare(
            "SELECT id FROM responses WHERE expires_at IS NOT NULL AND expires_at <= ?1",
        )?;
        stmt.query_map([now], |r| r.get(0))?
            .collect::<Result<_, _>>()?
    };
    let mut n = 0;
    for id in ids.iter().filter(|i| !live.contains(i)) {
        n += remove_run(tx, None, id)?;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn entry(seq: u64) -> LogEntry {
        let json = format!(r#"{{"type":"response.output_text.delta","sequence_number":{seq}}}"#);
        LogEntry {
            seq,
            offset_ms: seq * 10,
            frame: LogEntry::frame_for("response.output_text.delta", json.as_bytes()),
        }
    }

    #[test]
    fn a_batchs_events_are_journaled_one_row_per_run_and_read_back_in_order() {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(super::super::schema::SCHEMA).unwrap();
        super::super::schema::migrate(&conn).unwrap();
        let (mut journal, mut packer) = (Journal::default(), Packer::new().unwrap());
        // Two batches of run a (three events, then one), one of run b, one of run c that ends.
        let a: Vec<LogEntry> = (0..4).map(entry).collect();
        let b = entry(0);
        let c = entry(0);
        let mut parts = Parts::default();
        for (id, e) in [
            ("a", &a[0]),
            ("b", &b),
            ("a", &a[1]),
            ("c", &c),
            ("a", &a[2]),
        ] {
            parts.add(id, e);
        }
        journal.ended.insert("c".into());
        parts.journal(&conn, &mut journal, &mut packer).unwrap();
        let mut parts = Parts::default();
        parts.add("a", &a[3]);
        parts.journal(&conn, &mut journal, &mut packer).unwrap();

        let rows: Vec<(String, i64, String)> = conn
            .prepare("SELECT response_id, seq, kind FROM journal ORDER BY rowid")
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let rows: Vec<(&str, i64, &str)> = rows
            .iter()
            .map(|(id, seq, kind)| (id.as_str(), *seq, kind.as_str()))
            .collect();
        assert_eq!(
            rows,
            [
                ("a", 0, ""),
                ("b", 0, "response.output_text.delta"),
                ("a", 3, "response.output_text.delta")
            ],
            "one row per run and batch; a lone event as it is; none for a run that ended"
        );
        let back = super::super::reads::read_entries(&conn, "a", true).unwrap();
        assert_eq!(back.len(), 4);
        for (got, want) in back.iter().zip(&a) {
            assert_eq!(
                (got.seq, got.offset_ms, &got.frame),
                (want.seq, want.offset_ms, &want.frame)
            );
        }
        assert_eq!(
            super::super::reads::read_entries(&conn, "c", true)
                .unwrap()
                .len(),
            0
        );
    }

    #[test]
    fn a_lone_write_is_committed_at_once_and_a_busy_writer_gathers_in_proportion_to_its_cost() {
        assert_eq!(group_window(Duration::from_micros(300), 1), Duration::ZERO);
        assert_eq!(
            group_window(Duration::from_micros(50), 2),
            Duration::from_micros(1600)
        );
        assert_eq!(group_window(Duration::from_millis(1), 40), GATHER_MAX);
    }
}
