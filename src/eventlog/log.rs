//! A run's event log in memory: the one buffer every reader of a live run reads from.
//!
//! Invariants: entries are appended only by the run's [`Emitter`](super::Emitter), in
//! sequence order with no gap; readers are cursors over it (no per-reader queue, so a slow reader
//! costs nothing but its cursor); a reader sees an entry only once it is `visible` (durable in the
//! store, when the run is stored); after the terminal event nothing is appended.

use std::sync::Mutex;

use bytes::{Bytes, BytesMut};
use tokio::sync::Notify;

use crate::api::response::ResponseError;
use crate::api::{Event, Fold, Response};

/// One logged event: its number, its time offset from the run's start, and its SSE frame
/// (`event: T\ndata: JSON\n\n`, written once and shared by every reader).
#[derive(Debug, Clone)]
pub struct LogEntry {
    pub seq: u64,
    pub offset_ms: u64,
    pub frame: Bytes,
}

impl LogEntry {
    /// The event's JSON (the `data:` line of the frame).
    pub fn json(&self) -> Bytes {
        let start = self
            .frame
            .iter()
            .position(|b| *b == b'\n')
            .map(|i| i + 1 + "data: ".len())
            .unwrap_or(0);
        self.frame.slice(start..self.frame.len() - 2)
    }

    /// The event's `type` (the `event:` line of the frame).
    pub fn kind(&self) -> &str {
        let line_end = self.frame.iter().position(|b| *b == b'\n').unwrap_or(0);
        std::str::from_utf8(&self.frame["event: ".len()..line_end]).unwrap_or("")
    }

    /// Builds the SSE frame for an event already serialized as JSON.
    pub fn frame_for(kind: &str, json: &[u8]) -> Bytes {
        let mut buf = Vec::with_capacity(kind.len() + json.len() + 16);
        buf.extend_from_slice(b"event: ");
        buf.extend_from_slice(kind.as_bytes());
        buf.extend_from_slice(b"\ndata: ");
        buf.extend_from_slice(json);
        buf.extend_from_slice(b"\n\n");
        Bytes::from(buf)
    }
}

/// Writes one line of an exported log (`logs export`, the run viewer's download):
/// `{"offset_ms":N,"event":EVENT}` and a newline, the event's JSON exactly as streamed.
pub fn write_export_line(
    out: &mut impl std::io::Write,
    offset_ms: u64,
    event_json: &[u8],
) -> std::io::Result<()> {
    write!(out, "{{\"offset_ms\":{offset_ms},\"event\":")?;
    out.write_all(event_json)?;
    out.write_all(b"}\n")
}

/// Serializes `event` with its `sequence_number` and frames it as one SSE event:
/// `event: T\ndata: {...,"sequence_number":N}\n\n`, in its own buffer.
pub fn encode(event: &Event, seq: u64) -> Bytes {
    encode_with(event, seq, Bytes::copy_from_slice)
}

/// Builds the frame in a per-thread scratch buffer and hands it to `keep`, which copies it out
/// once (measured: growing a fresh buffer cost three allocations per event).
fn encode_with(event: &Event, seq: u64, keep: impl FnOnce(&[u8]) -> Bytes) -> Bytes {
    thread_local! {
        static SCRATCH: std::cell::RefCell<Vec<u8>> = std::cell::RefCell::new(Vec::with_capacity(4096));
    }
    SCRATCH.with(|scratch| {
        let mut buf = scratch.borrow_mut();
        buf.clear();
        let kind = event.kind();
        buf.extend_from_slice(b"event: ");
        buf.extend_from_slice(kind.as_bytes());
        buf.extend_from_slice(b"\ndata: ");
        serde_json::to_writer(&mut *buf, event).expect("events always serialize");
        debug_assert_eq!(buf.last(), Some(&b'}'));
        buf.pop();
        buf.extend_from_slice(b",\"sequence_number\":");
        // serde_json writes the number without the formatting machinery `write!` costs per event.
        serde_json::to_writer(&mut *buf, &seq).expect("a number always serializes");
        buf.extend_from_slice(b"}\n\n");
        let frame = keep(&buf);
        if buf.capacity() > 1 << 20 {
            // One huge event (a long final Response) must not pin a megabyte per thread.
            *buf = Vec::with_capacity(4096);
        }
        frame
    })
}

/// Where one run's frames are kept. Small frames (a delta) are copied into a shared buffer of
/// [`Frames::SHARED`] bytes: one allocation for many events, and a frame shared with a reader or
/// the store is a reference count, not the allocation a lone buffer makes when first shared. A
/// frame over half that size gets a buffer of its own (no tail left unused by a run that has
/// written only its first, large events).
#[derive(Debug, Default)]
pub struct Frames(BytesMut);

impl Frames {
    const SHARED: usize = 2048;

    /// [`encode`], kept here.
    pub fn encode(&mut self, event: &Event, seq: u64) -> Bytes {
        encode_with(event, seq, |frame| {
            if frame.len() > Self::SHARED / 2 {
                return Bytes::copy_from_slice(frame);
            }
            if self.0.capacity() < frame.len() {
                self.0 = BytesMut::with_capacity(Self::SHARED);
            }
            self.0.extend_from_slice(frame);
            self.0.split().freeze()
        })
    }
}

#[derive(Debug)]
struct Inner {
    entries: Vec<LogEntry>,
    visible: usize,
    finished: bool,
    fold: Fold,
}

/// What a reader got: the entries past its cursor, and whether the log is complete.
pub struct Batch {
    pub entries: Vec<LogEntry>,
    pub finished: bool,
}

#[derive(Debug)]
pub struct RunLog {
    inner: Mutex<Inner>,
    /// Woken whenever more entries become visible or the log finishes (one lock per
    /// notification; readers re-check `Inner` under its lock).
    changed: Notify,
}

impl Default for RunLog {
    fn default() -> Self {
        Self::new()
    }
}

impl RunLog {
    pub fn new() -> Self {
        RunLog {
            inner: Mutex::new(Inner {
                entries: Vec::new(),
                visible: 0,
                finished: false,
                fold: Fold::new(),
            }),
            changed: Notify::new(),
        }
    }

    /// A log rebuilt from stored entries: `finished` for a completed run, or open so the
    /// rest can be appended (recovery after a crash).
    pub fn from_entries(entries: Vec<LogEntry>, fold: Fold, finished: bool) -> Self {
        let n = entries.len();
        RunLog {
            inner: Mutex::new(Inner {
                entries,
                visible: n,
                finished,
                fold,
            }),
            changed: Notify::new(),
        }
    }

    /// A finished log read back for replay only: its entries as kept, all visible. It holds no
    /// fold (`snapshot` is `None`): the events were checked by the fold when they were appended,
    /// and a replay serves the kept bytes, not a rebuilt Response.
    pub fn kept(entries: Vec<LogEntry>) -> Self {
        Self::from_entries(entries, Fold::new(), true)
    }

    /// The first `n` entries (visible or not), in order.
    pub fn entries_upto(&self, n: usize) -> Vec<LogEntry> {
        let inner = self.inner.lock().expect("run log poisoned");
        inner.entries[..n.min(inner.entries.len())].to_vec()
    }

    /// Indexes of output items added and not yet done.
    pub fn open_items(&self) -> Vec<usize> {
        let inner = self.inner.lock().expect("run log poisoned");
        let n = inner.fold.response().map(|r| r.output.len()).unwrap_or(0);
        (0..n).filter(|i| inner.fold.is_open(*i)).collect()
    }

    /// Waits until the terminal event is visible.
    pub async fn wait_finished(&self) {
        while !self.is_finished() {
            let n = self.len();
            self.wait_past(n).await;
        }
    }

    /// Applies `f` to the fold and appends the entry it returns (if any), atomically.
    /// Used by the emitter only.
    pub(crate) fn append_with(
        &self,
        f: impl FnOnce(&mut Fold, u64) -> Option<LogEntry>,
    ) -> Option<LogEntry> {
        let mut inner = self.inner.lock().expect("run log poisoned");
        if inner.finished || inner.fold.is_terminal() {
            return None;
        }
        let seq = inner.entries.len() as u64;
        let entry = f(&mut inner.fold, seq)?;
        debug_assert_eq!(entry.seq, seq);
        inner.entries.push(entry.clone());
        Some(entry)
    }

    /// Appends an entry another relay already kept (read back from the store), applies its
    /// event to the fold and makes it visible at once. Refuses an entry out of sequence or one
    /// that breaks the log.
    pub(crate) fn append_kept(
        &self,
        entry: LogEntry,
        event: &crate::api::Event,
    ) -> Result<(), String> {
        let mut inner = self.inner.lock().expect("run log poisoned");
        if inner.finished || inner.fold.is_terminal() {
            return Err("the log is already finished".into());
        }
        if entry.seq != inner.entries.len() as u64 {
            return Err(format!(
                "expected event {}, got {}",
                inner.entries.len(),
                entry.seq
            ));
        }
        inner.fold.apply(event).map_err(|e| e.to_string())?;
        inner.entries.push(entry);
        inner.visible = inner.entries.len();
        inner.finished = inner.fold.is_terminal();
        drop(inner);
        self.changed.notify_waiters();
        Ok(())
    }

    /// For a store that could not keep the run's terminal event: while that event is not yet
    /// visible, replaces it (same number) with `response.failed` saying `message` if it said the
    /// run completed or ended incomplete, so no client is told of a success that was not kept.
    /// Returns whether it replaced it.
    pub fn fail_pending_terminal(&self, message: &str) -> bool {
        let mut inner = self.inner.lock().expect("run log poisoned");
        let inner = &mut *inner;
        let pending = inner.visible < inner.entries.len();
        let Some(event) = pending
            .then(|| {
                inner.fold.fail_terminal(ResponseError {
                    code: "server_error".into(),
                    message: message.into(),
                })
            })
            .flatten()
        else {
            return false;
        };
        let last = inner
            .entries
            .last_mut()
            .expect("a terminal event was appended");
        last.frame = encode(&event, last.seq);
        true
    }

    /// Makes entries up to `upto` (exclusive) visible to readers; `finished` once the terminal one is.
    pub fn publish(&self, upto: usize, finished: bool) {
        let mut inner = self.inner.lock().expect("run log poisoned");
        if upto > inner.visible {
            inner.visible = upto.min(inner.entries.len());
        }
        if finished && inner.visible == inner.entries.len() {
            inner.finished = true;
        }
        drop(inner);
        self.changed.notify_waiters();
    }

    /// Number of appended entries (visible or not).
    pub fn len(&self) -> usize {
        self.inner.lock().expect("run log poisoned").entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn is_finished(&self) -> bool {
        self.inner.lock().expect("run log poisoned").finished
    }

    /// The Response as the visible and pending events describe it now.
    pub fn snapshot(&self) -> Option<Response> {
        self.inner
            .lock()
            .expect("run log poisoned")
            .fold
            .response()
            .cloned()
    }

    /// The number of output items so far (the next free `output_index`).
    pub fn output_len(&self) -> usize {
        self.inner
            .lock()
            .expect("run log poisoned")
            .fold
            .response()
            .map(|r| r.output.len())
            .unwrap_or(0)
    }

    /// The time offset of the first entry of `kind`, if there is one.
    pub fn offset_of_first(&self, kind: &str) -> Option<u64> {
        let inner = self.inner.lock().expect("run log poisoned");
        inner
            .entries
            .iter()
            .find(|e| e.kind() == kind)
            .map(|e| e.offset_ms)
    }

    /// All appended entries, for the store.
    pub fn entries_from(&self, from: usize) -> Vec<LogEntry> {
        let inner = self.inner.lock().expect("run log poisoned");
        inner
            .entries
            .get(from..)
            .map(<[LogEntry]>::to_vec)
            .unwrap_or_default()
    }

    /// The visible entries' count, whether appended entries wait to become visible, and whether
    /// the log is finished.
    pub fn progress(&self) -> (usize, bool, bool) {
        let inner = self.inner.lock().expect("run log poisoned");
        (
            inner.visible,
            inner.visible < inner.entries.len(),
            inner.finished,
        )
    }

    /// Visible entries from `cursor` on (at most `max`).
    pub fn read(&self, cursor: usize, max: usize) -> Batch {
        let inner = self.inner.lock().expect("run log poisoned");
        let end = inner.visible.min(cursor.saturating_add(max));
        let entries = if cursor < end {
            inner.entries[cursor..end].to_vec()
        } else {
            Vec::new()
        };
        let finished = inner.finished && end >= inner.visible;
        Batch { entries, finished }
    }

    /// Waits until more entries are visible than `seen`, or the log finishes.
    pub async fn wait_past(&self, seen: usize) {
        loop {
            // Registered before the check, so a notification between the two is not lost.
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let inner = self.inner.lock().expect("run log poisoned");
                if inner.visible > seen || inner.finished {
                    return;
                }
            }
            notified.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::api::ResponseStatus;
    use crate::api::id::IdSource;
    use crate::eventlog::emitter::{Clock, Emitter, Ending, Immediate, LogSink};

    /// A store that has not kept anything yet: nothing is visible.
    struct Pending;

    impl LogSink for Pending {
        fn append(&self, _: &Arc<RunLog>, _: &LogEntry, _: Option<&Response>) {}
    }

    fn created() -> Event {
        let response = serde_json::from_value(serde_json::json!({
            "id": "resp_1", "object": "response", "created_at": 0, "completed_at": null,
            "status": "in_progress", "background": false, "error": null,
            "incomplete_details": null, "instructions": null, "max_output_tokens": null,
            "max_tool_calls": null, "model": "m", "output": [], "parallel_tool_calls": true,
            "previous_response_id": null, "reasoning": {"effort": null, "summary": null},
            "store": true, "temperature": 1.0, "top_p": 1.0, "presence_penalty": 0.0,
            "frequency_penalty": 0.0, "top_logprobs": 0, "text": {"format": {"type": "text"}},
            "tool_choice": "auto", "tools": [], "truncation": "disabled", "usage": null,
            "user": null, "metadata": {}, "service_tier": "default", "safety_identifier": null,
            "prompt_cache_key": null, "prompt_cache_retention": null
        }))
        .expect("a Response");
        Event::Created {
            response: Box::new(response),
        }
    }

    fn ended(sink: Arc<dyn LogSink>, ending: Ending) -> Arc<RunLog> {
        let log = Arc::new(RunLog::new());
        let mut em = Emitter::new(log.clone(), sink, IdSource::sequential(), Clock::Fixed(7));
        em.emit(created());
        em.finish(ending, None);
        log
    }

    #[test]
    fn a_completed_end_not_yet_kept_can_be_turned_into_a_failure_with_the_same_number() {
        let log = ended(Arc::new(Pending), Ending::Completed);
        assert!(log.fail_pending_terminal("not kept"));
        // What a non-streaming client is answered with.
        let snapshot = log.snapshot().expect("a response");
        assert_eq!(snapshot.status, ResponseStatus::Failed);
        assert_eq!(snapshot.completed_at, None);
        let error = snapshot.error.expect("an error");
        assert_eq!(
            (error.code.as_str(), error.message.as_str()),
            ("server_error", "not kept")
        );
        // What a streaming client reads: the same event number, now `response.failed`.
        let last = log.entries_from(1).pop().expect("the terminal event");
        assert_eq!((last.seq, last.kind()), (1, "response.failed"));
        let json: serde_json::Value = serde_json::from_slice(&last.json()).expect("json");
        assert_eq!(json["sequence_number"], 1);
        assert_eq!(json["response"]["status"], "failed");
        assert_eq!(json["response"]["error"]["message"], "not kept");
        // Nothing claims success any more.
        assert!(!log.fail_pending_terminal("again"));
    }

    #[test]
    fn a_visible_end_and_an_end_that_already_says_failed_are_never_rewritten() {
        let shown = ended(Arc::new(Immediate), Ending::Completed);
        assert!(!shown.fail_pending_terminal("too late"));
        assert_eq!(shown.entries_from(1)[0].kind(), "response.completed");
        let cancelled = ended(Arc::new(Pending), Ending::Cancelled);
        assert!(!cancelled.fail_pending_terminal("not kept"));
        assert_eq!(
            cancelled.snapshot().expect("a response").status,
            ResponseStatus::Cancelled
        );
    }
}
