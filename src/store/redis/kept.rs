//! Reading a run's kept log out of Redis's replies: a packed blob or stream entries back into
//! log entries, and entries into the fold that says what the run is. Anything that does not
//! decode is [`StoreError`] (a corrupt record), never skipped.

use std::collections::HashMap;

use ::redis::FromRedisValue;

use super::StoreError;
use super::packed;
use crate::api::Sequenced;
use crate::api::fold::Fold;
use crate::eventlog::log::LogEntry;

/// A run's status and kept events.
pub(super) struct Kept {
    pub(super) status: String,
    pub(super) entries: Vec<LogEntry>,
}

/// [`READ_LOG`](super::scripts::READ_LOG)'s or [`TAIL_STEP`](super::scripts::TAIL_STEP)'s reply: `None` for a run gone; the entries of its packed log
/// (all of them) or of its stream (those read).
pub(super) fn kept_of(id: &str, reply: Vec<::redis::Value>) -> Result<Option<Kept>, StoreError> {
    let bad =
        |why: String| StoreError::Corrupt(format!("the kept log of {id} is unreadable: {why}"));
    let mut it = reply.into_iter();
    let Some(status) = it.next() else {
        return Ok(None);
    };
    let status = String::from_redis_value(status).map_err(|e| bad(e.to_string()))?;
    let packed = match it.next() {
        Some(v) => Option::<Vec<u8>>::from_redis_value(v).map_err(|e| bad(e.to_string()))?,
        None => None,
    };
    let entries = match (packed, it.next()) {
        (Some(blob), _) => packed::unpack(&blob)?.entries,
        (None, Some(v)) => {
            let raw = Vec::<(String, HashMap<String, String>)>::from_redis_value(v)
                .map_err(|e| bad(e.to_string()))?;
            raw.into_iter()
                .map(|(_, f)| entry_of(&f))
                .collect::<Result<_, _>>()?
        }
        (None, None) => Vec::new(),
    };
    Ok(Some(Kept { status, entries }))
}

pub(super) fn entry_of(f: &HashMap<String, String>) -> Result<LogEntry, StoreError> {
    let field = |k: &str| {
        f.get(k)
            .ok_or_else(|| StoreError::Corrupt(format!("a kept event has no '{k}'")))
    };
    let seq = field("seq")?
        .parse()
        .map_err(|_| StoreError::Corrupt("a kept event has a bad 'seq'".into()))?;
    let offset_ms = field("offset_ms")?.parse().unwrap_or(0);
    Ok(LogEntry {
        seq,
        offset_ms,
        frame: LogEntry::frame_for(field("kind")?, field("data")?.as_bytes()),
    })
}

pub(super) fn event_of(e: &LogEntry) -> Result<crate::api::Event, StoreError> {
    let s: Sequenced = serde_json::from_slice(&e.json())
        .map_err(|err| StoreError::Corrupt(format!("kept event {} is unreadable: {err}", e.seq)))?;
    Ok(s.event)
}

pub(super) fn fold_entries(entries: &[LogEntry]) -> Result<Fold, StoreError> {
    let mut fold = Fold::new();
    for e in entries {
        fold.apply(&event_of(e)?).map_err(|err| {
            StoreError::Corrupt(format!("kept event {} breaks the log: {err}", e.seq))
        })?;
    }
    Ok(fold)
}
