//! Reads of the SQLite store, on the store's read connection (WAL readers never block the
//! writer) in a blocking task: a run's record, log, turns, the tenant's runs, an item; and
//! [`export`], which reads one run's events from a stopped relay's file, read-only.
//!
//! Invariants: every read is scoped by tenant (another tenant's run reads as none); a finished
//! run's Response and events come from its packed `log`, an unfinished one's from `journal`
//! (and a file older than packing from `events`); a stored value that does not decode is an
//! error, never skipped.

use std::path::Path;
use std::sync::Arc;

use rusqlite::{Connection, OptionalExtension};

use super::{Sqlite, StoreError, Tenant};
use crate::api::Response;
use crate::api::fold::Fold;
use crate::api::request::InputItem;
use crate::api::response::Usage;
use crate::eventlog::log::{LogEntry, RunLog};
use crate::store::{Record, RunQuery, unfinished};

impl Sqlite {
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
                        StoreError::Corrupt(format!("stored turns of {id} are unreadable: {e}"))
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
                        serde_json::from_slice::<Response>(&crate::store::packed::unpack(&blob)?.response)
                    }
                    None => serde_json::from_str::<Response>(&json),
                };
                let response = parsed
                    .map_err(|e| StoreError::Corrupt(format!("a stored response is unreadable: {e}")))?;
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
            item.map(|s| serde_json::from_str(&s).map_err(|e| StoreError::Corrupt(e.to_string())))
                .transpose()
        })
        .await
    }
}

pub(super) fn read_record(
    c: &Connection,
    tenant: &Tenant,
    id: &str,
) -> Result<Option<Record>, StoreError> {
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
    let bad = |e: serde_json::Error| {
        StoreError::Corrupt(format!("stored response {id} is unreadable: {e}"))
    };
    let response = match packed {
        // A finished run: its final Response is packed with its log.
        Some(blob) => serde_json::from_slice(&crate::store::packed::unpack(&blob)?.response),
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
pub(super) fn read_entries(
    c: &Connection,
    id: &str,
    unfinished: bool,
) -> Result<Vec<LogEntry>, StoreError> {
    let row = |r: &rusqlite::Row<'_>| -> rusqlite::Result<LogEntry> {
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
        Some(blob) => crate::store::packed::unpack(&blob)?.entries,
        None => c
            .prepare_cached(
                "SELECT seq, offset_ms, kind, data FROM events WHERE response_id = ?1 ORDER BY seq",
            )?
            .query_map([id], row)?
            .collect::<Result<_, _>>()?,
    };
    if unfinished {
        let mut journal = Vec::new();
        let mut stmt = c.prepare_cached(
            "SELECT seq, offset_ms, kind, data FROM journal WHERE response_id = ?1 ORDER BY seq",
        )?;
        let mut rows = stmt.query([id])?;
        while let Some(r) = rows.next()? {
            let (seq, kind): (i64, String) = (r.get(0)?, r.get(2)?);
            if kind.is_empty() {
                // One run's events of one batch, packed; numbered from the row's `seq`.
                let blob: Vec<u8> = r.get(3)?;
                let part = crate::store::packed::unpack(&blob)?.entries;
                journal.extend(part.into_iter().map(|mut e| {
                    e.seq += seq as u64;
                    e
                }));
            } else {
                journal.push(row(r)?);
            }
        }
        entries.extend(journal);
        entries.sort_by_key(|e| e.seq);
        entries.dedup_by_key(|e| e.seq);
    }
    Ok(entries)
}

pub(super) fn fold_entries(entries: &[LogEntry]) -> Result<Fold, StoreError> {
    let mut fold = Fold::new();
    for e in entries {
        let s: crate::api::Sequenced = serde_json::from_slice(&e.json()).map_err(|err| {
            StoreError::Corrupt(format!("kept event {} is unreadable: {err}", e.seq))
        })?;
        fold.apply(&s.event).map_err(|err| {
            StoreError::Corrupt(format!("kept event {} breaks the log: {err}", e.seq))
        })?;
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
pub(super) fn status(
    c: &Connection,
    tenant: Option<&str>,
    id: &str,
) -> Result<Option<String>, StoreError> {
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
