//! The usage tallies in SQLite: the `usage` table, one row per (tenant, UTC day, model), each
//! flushed batch added to it (`+=`) through the writer, in the writer's next transaction; read
//! on the read connection, or from a stopped relay's file read-only ([`usage_at`]).

use std::path::Path;

use rusqlite::{Connection, OptionalExtension, params};
use tokio::sync::oneshot;

use super::writer::Cmd;
use super::{Sqlite, StoreError, Tenant};
use crate::store::usage::{Tally, UsageRow};

impl Sqlite {
    /// Adds a flushed batch of tallies; answers once the writer committed it.
    pub async fn add_usage(&self, rows: Vec<UsageRow>) -> Result<(), StoreError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Cmd::Usage { rows, reply })
            .map_err(|_| StoreError::Internal("writer gone".into()))?;
        rx.await
            .map_err(|_| StoreError::Internal("writer gone".into()))?
    }

    /// The usage of `tenant` (or every tenant) from `since_day` on, by tenant, day and model.
    pub async fn usage(
        &self,
        tenant: Option<&Tenant>,
        since_day: &str,
    ) -> Result<Vec<UsageRow>, StoreError> {
        let (tenant, since) = (tenant.cloned(), since_day.to_string());
        self.read(move |c| read(c, tenant.as_ref(), &since)).await
    }
}

/// Adds `rows` to the table (in the writer's transaction).
pub(super) fn add(tx: &rusqlite::Connection, rows: &[UsageRow]) -> Result<(), StoreError> {
    let mut stmt = tx.prepare_cached(
        "INSERT INTO usage (tenant, day, model, runs, input_tokens, output_tokens, mcp_calls)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
         ON CONFLICT (tenant, day, model) DO UPDATE SET
             runs = runs + excluded.runs,
             input_tokens = input_tokens + excluded.input_tokens,
             output_tokens = output_tokens + excluded.output_tokens,
             mcp_calls = mcp_calls + excluded.mcp_calls",
    )?;
    // SQLite integers are signed: a count past i64::MAX (never, in practice) is kept as the max.
    let n = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
    for r in rows {
        let t = &r.tally;
        stmt.execute(params![
            r.tenant,
            r.day,
            r.model,
            n(t.runs),
            n(t.input_tokens),
            n(t.output_tokens),
            n(t.mcp_calls)
        ])?;
    }
    Ok(())
}

/// The rows of `tenant` (or every tenant) from `since_day` on, ordered; none from a file made
/// before the table existed (a relay adds it when it opens the file).
fn read(
    c: &Connection,
    tenant: Option<&Tenant>,
    since_day: &str,
) -> Result<Vec<UsageRow>, StoreError> {
    let table: Option<i64> = c
        .query_row(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'usage'",
            [],
            |r| r.get(0),
        )
        .optional()?;
    if table.is_none() {
        return Ok(Vec::new());
    }
    let mut stmt = c.prepare_cached(
        "SELECT tenant, day, model, runs, input_tokens, output_tokens, mcp_calls FROM usage
          WHERE day >= ?1 AND (?2 IS NULL OR tenant = ?2)
          ORDER BY tenant, day, model",
    )?;
    let n = |v: i64| u64::try_from(v).unwrap_or(0);
    let rows = stmt
        .query_map(params![since_day, tenant.map(Tenant::as_str)], |r| {
            Ok(UsageRow {
                tenant: r.get(0)?,
                day: r.get(1)?,
                model: r.get(2)?,
                tally: Tally {
                    runs: n(r.get(3)?),
                    input_tokens: n(r.get(4)?),
                    output_tokens: n(r.get(5)?),
                    mcp_calls: n(r.get(6)?),
                },
            })
        })?
        .collect::<Result<_, _>>()?;
    Ok(rows)
}

/// The usage kept in the database at `path` (a relay's, running or stopped), opened read-only.
pub fn usage_at(
    path: &Path,
    tenant: Option<&Tenant>,
    since_day: &str,
) -> Result<Vec<UsageRow>, StoreError> {
    let c = Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)?;
    c.busy_timeout(std::time::Duration::from_secs(5))?;
    read(&c, tenant, since_day)
}
