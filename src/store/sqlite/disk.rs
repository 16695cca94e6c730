//! What the SQLite store takes on disk, and what it does when the disk is full.
//!
//! **The WAL's bound.** A passive checkpoint (the checkpointer's, every [`CHECKPOINT_EVERY`])
//! copies the WAL's pages into the database but never shortens the WAL file: a WAL is only
//! started again from its beginning when a writer begins after a checkpoint that copied all of
//! it with no reader still in it, and even then the file keeps its size unless
//! `journal_size_limit` is set. Under a steady load the checkpointer never catches up with the
//! writer, so before this rule the WAL grew to the writer's own autocheckpoint (65,536 pages,
//! 256 MiB) and stayed there for good: 272 MB of WAL beside a 133 MB database after 41,600
//! runs. The rule:
//! - `journal_size_limit` is [`WAL_LIMIT`] (64 MiB): a WAL started again is cut to it;
//! - the writer checkpoints itself past [`WAL_AUTOCHECKPOINT`] pages (64 MiB) of WAL (passive:
//!   it copies only what the checkpointer has not copied yet), so a steady load starts the WAL
//!   again every 64 MiB: under load the WAL stays near 64 MiB;
//! - once no commit happened for [`IDLE`] (1 s), the checkpointer runs a TRUNCATE checkpoint: the
//!   WAL file goes to 0 bytes. It waits at most [`CHECKPOINT_BUSY`] (50 ms) for readers and the
//!   writer (it holds the writer back while it waits, so never longer), and is tried again at
//!   the next tick until it truncated.
//!
//! So a minute after a load (about 1.2 s, in fact) the store's files are the database, an empty
//! WAL and the WAL index (`-shm`, 32 KiB per 4,096 WAL pages the WAL last held: about 160 KiB).
//!
//! **A full disk.** A commit that fails with `SQLITE_FULL` ([`StoreError::Full`]) or an I/O error
//! ([`StoreError::Unavailable`]) fails the runs of its batch through the writer's usual path
//! (failed through their hooks, removed whole), and leaves the store [`Disk::unwritable`]: new
//! stored runs are refused (`available()`, a 503) until a probe, a commit of
//! [`PROBE_BYTES`] made by the writer every [`PROBE_EVERY`] while it is so, succeeds; its rows
//! are deleted at once (their pages stay free for the next runs). An ordinary commit meanwhile
//! does not clear the state: removing broken runs or a conversation's small write may fit where
//! a run does not.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rusqlite::Connection;

use super::StoreError;

/// How often the checkpointer copies the WAL into the database (passive).
pub(super) const CHECKPOINT_EVERY: Duration = Duration::from_millis(200);
/// A WAL started again from its beginning is cut to this size (`journal_size_limit`).
pub(super) const WAL_LIMIT: i64 = 64 << 20;
/// WAL pages (of 4 KiB) past which the writer checkpoints itself (`wal_autocheckpoint`): 64 MiB.
pub(super) const WAL_AUTOCHECKPOINT: i64 = 16384;
/// No commit for this long and the WAL file is truncated.
pub(super) const IDLE: Duration = Duration::from_secs(1);
/// The longest a TRUNCATE checkpoint waits for the writer or readers (it holds the writer back
/// meanwhile).
pub(super) const CHECKPOINT_BUSY: Duration = Duration::from_millis(50);
/// While the disk is full, the writer probes it this often.
pub(super) const PROBE_EVERY: Duration = Duration::from_secs(1);
/// What a probe commits: a short stored run's few KiB, many times over.
pub(super) const PROBE_BYTES: i64 = 256 * 1024;

const WRITABLE: u8 = 0;
const FULL: u8 = 1;
const IO_ERROR: u8 = 2;

/// What the writer and the checkpointer share: how many commits were made, and whether the disk
/// takes writes.
#[derive(Default)]
pub(super) struct Disk {
    commits: AtomicU64,
    state: AtomicU8,
}

impl Disk {
    /// A commit was made (or tried).
    pub(super) fn committed(&self) {
        self.commits.fetch_add(1, Ordering::Relaxed);
    }

    /// Why the store cannot keep a new run now, if it cannot.
    pub(super) fn unwritable(&self) -> Option<StoreError> {
        match self.state.load(Ordering::Relaxed) {
            WRITABLE => None,
            FULL => Some(StoreError::Full(
                "a commit failed for lack of space; new stored runs wait for a write to succeed"
                    .into(),
            )),
            _ => Some(StoreError::Unavailable(
                "SQLite could not write its files (an I/O error); new stored runs wait for a write to succeed"
                    .into(),
            )),
        }
    }

    /// Notes how a commit of runs' writes went: a full disk or an I/O error makes the store
    /// unwritable (answers whether it just became so); other outcomes change nothing.
    pub(super) fn note(&self, result: &Result<(), StoreError>) -> bool {
        let state = match result {
            Err(StoreError::Full(_)) => FULL,
            Err(StoreError::Unavailable(_)) => IO_ERROR,
            _ => return false,
        };
        self.state.swap(state, Ordering::Relaxed) == WRITABLE
    }

    /// Commits a probe of [`PROBE_BYTES`] and deletes it; once one succeeds the store is writable
    /// again.
    pub(super) fn probe(&self, conn: &mut Connection) {
        let result = (|| -> Result<(), StoreError> {
            let tx = conn.transaction()?;
            tx.execute("DELETE FROM disk_probe", [])?;
            tx.execute(
                "INSERT INTO disk_probe (bytes) VALUES (randomblob(?1))",
                [PROBE_BYTES],
            )?;
            tx.commit()?;
            conn.execute("DELETE FROM disk_probe", [])?;
            Ok(())
        })();
        match result {
            Ok(()) => {
                self.state.store(WRITABLE, Ordering::Relaxed);
                tracing::warn!("the SQLite store can write again; stored runs are accepted");
            }
            Err(e) => tracing::debug!(error = %e, "the SQLite store still cannot write"),
        }
    }
}

/// The WAL file of the database at `db`.
fn wal_of(db: &Path) -> PathBuf {
    let mut p = db.as_os_str().to_owned();
    p.push("-wal");
    PathBuf::from(p)
}

/// The checkpointer, until the store is dropped: every [`CHECKPOINT_EVERY`] a passive
/// checkpoint (blocks neither the writer nor readers); once the store has been idle for
/// [`IDLE`], a TRUNCATE checkpoint, until one truncated the WAL.
pub(super) fn checkpoints(
    conn: Connection,
    db: PathBuf,
    disk: Arc<Disk>,
    alive: std::sync::Weak<()>,
) {
    let wal = wal_of(&db);
    let mut seen = 0;
    let mut quiet_since = Instant::now();
    let mut failing = false;
    while alive.strong_count() > 0 {
        std::thread::sleep(CHECKPOINT_EVERY);
        let commits = disk.commits.load(Ordering::Relaxed);
        if commits != seen {
            (seen, quiet_since) = (commits, Instant::now());
        }
        let idle = quiet_since.elapsed() >= IDLE;
        let truncate = idle && std::fs::metadata(&wal).is_ok_and(|m| m.len() > 0);
        let mode = if truncate { "TRUNCATE" } else { "PASSIVE" };
        let result = conn.query_row(&format!("PRAGMA wal_checkpoint({mode})"), [], |r| {
            r.get::<_, i64>(0)
        });
        match result {
            Ok(_) if failing => {
                failing = false;
                tracing::info!("SQLite checkpoints work again");
            }
            Ok(_) => {}
            // Once per failing spell (a full disk fails every one).
            Err(e) if !failing => {
                failing = true;
                tracing::warn!(error = %e, "SQLite checkpoint failed");
            }
            Err(_) => {}
        }
    }
}
