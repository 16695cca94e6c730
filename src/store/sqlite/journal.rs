//! What the SQLite writer knows of `journal`, the table live runs' events are appended to:
//! where each live run's rows begin, so that rows no live run needs are trimmed.
//!
//! Invariant: the writer's view changes only with a committed transaction (a rolled back one
//! leaves it as it was), so a run's rows are never trimmed while the run may still need them.

use std::collections::{HashMap, HashSet};

use super::StoreError;

/// The journal is trimmed once this many rows could go.
pub(super) const TRIM_ROWS: i64 = 4096;

/// What the writer knows of the journal: where each live run's rows begin, and up to where rows
/// were trimmed. Changes made by a transaction count once it commits: a run whose terminal write
/// was rolled back keeps its journal rows.
#[derive(Default)]
pub(super) struct Journal {
    first_row: HashMap<String, i64>,
    trimmed_below: i64,
    /// This transaction's runs that journaled a first row, runs that ended, and where the
    /// journal was trimmed before it trimmed.
    started: HashMap<String, i64>,
    pub(super) ended: HashSet<String>,
    trimmed_before: Option<i64>,
}

impl Journal {
    pub(super) fn journaled(&mut self, id: &str, row: i64) {
        if !self.first_row.contains_key(id) && !self.started.contains_key(id) {
            self.started.insert(id.to_string(), row);
        }
    }

    /// Removes the rows no live run needs, once there are enough of them.
    pub(super) fn trim(&mut self, tx: &rusqlite::Connection) -> Result<(), StoreError> {
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
    pub(super) fn trimmed_to(&mut self, below: i64) {
        self.trimmed_before.get_or_insert(self.trimmed_below);
        self.trimmed_below = below;
    }

    /// The transaction committed (`true`) or was rolled back.
    pub(super) fn settle(&mut self, committed: bool) {
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
