//! The one place that numbers a run's events: folds each into the Response, frames it as SSE
//! once, appends it to the run's log and hands it to the store before any reader can see it.

use std::sync::Arc;
use std::time::Instant;

use super::log::{Frames, LogEntry, RunLog};
use crate::api::Fold;
use crate::api::id::IdSource;
use crate::api::response::{IncompleteDetails, ResponseError};
use crate::api::{Event, Response, ResponseStatus, Usage};

/// Wall-clock source: real, or fixed for golden logs.
#[derive(Debug, Clone, Copy)]
pub enum Clock {
    System,
    /// Always this unix time; every event's offset is 0.
    Fixed(i64),
}

impl Clock {
    pub fn now_unix(&self) -> i64 {
        match self {
            Clock::System => std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs() as i64)
                .unwrap_or(0),
            Clock::Fixed(t) => *t,
        }
    }
}

/// Receives each appended entry; the store implements it. Must not block.
pub trait LogSink: Send + Sync {
    /// Takes entries in order; makes them visible on `log` once durable.
    fn append(&self, log: &Arc<RunLog>, entry: &LogEntry, terminal: Option<&Response>);
}

/// Appends to the in-memory log only: entries are visible at once.
pub struct Immediate;

impl LogSink for Immediate {
    fn append(&self, log: &Arc<RunLog>, entry: &LogEntry, terminal: Option<&Response>) {
        log.publish(entry.seq as usize + 1, terminal.is_some());
    }
}

/// How a run ended, for [`Emitter::finish`].
#[derive(Debug, Clone)]
pub enum Ending {
    Completed,
    Incomplete(String),
    Failed(ResponseError),
    Cancelled,
}

pub struct Emitter {
    log: Arc<RunLog>,
    sink: Arc<dyn LogSink>,
    ids: IdSource,
    clock: Clock,
    started: Instant,
    frames: Frames,
}

impl Emitter {
    pub fn new(log: Arc<RunLog>, sink: Arc<dyn LogSink>, ids: IdSource, clock: Clock) -> Self {
        Emitter {
            log,
            sink,
            ids,
            clock,
            started: Instant::now(),
            frames: Frames::default(),
        }
    }

    pub fn log(&self) -> &Arc<RunLog> {
        &self.log
    }

    pub fn mint(&self, prefix: &str) -> String {
        self.ids.mint(prefix)
    }

    pub fn clock(&self) -> Clock {
        self.clock
    }

    /// The next free `output_index`.
    pub fn next_output_index(&self) -> usize {
        self.log.output_len()
    }

    /// The Response as emitted so far.
    pub fn snapshot(&self) -> Response {
        self.log
            .snapshot()
            .expect("snapshot before response.created")
    }

    /// Emits one event. An event that breaks the stream rules is a relay bug: it panics in debug
    /// builds and is dropped (with an error log) in release builds, so clients never see it.
    pub fn emit(&mut self, event: Event) {
        let offset_ms = match self.clock {
            Clock::System => self.started.elapsed().as_millis() as u64,
            Clock::Fixed(_) => 0,
        };
        let frames = &mut self.frames;
        let appended = self.log.append_with(|fold: &mut Fold, seq| {
            if let Err(e) = fold.apply(&event) {
                debug_assert!(false, "relay emitted an invalid event: {e}");
                tracing::error!(error = %e, "dropping an event that breaks the stream rules");
                return None;
            }
            Some(LogEntry {
                seq,
                offset_ms,
                frame: frames.encode(&event, seq),
            })
        });
        if let Some(entry) = appended {
            let terminal = if event.is_terminal() {
                event.response()
            } else {
                None
            };
            self.sink.append(&self.log, &entry, terminal);
        }
    }

    /// Closes every item still open (as `incomplete`; an MCP call as `failed`), so a terminal
    /// event can follow whatever stopped the run.
    pub fn close_open_items(&mut self) {
        use crate::api::ItemStatus;
        use crate::api::OutputItem;
        let open = self.log.open_items();
        if open.is_empty() {
            return;
        }
        let snapshot = self.snapshot();
        for index in open {
            let mut item = snapshot.output[index].clone();
            match &mut item {
                OutputItem::Message(m) => m.status = ItemStatus::Incomplete,
                OutputItem::Reasoning(r) => r.status = ItemStatus::Incomplete,
                OutputItem::FunctionCall(f) => f.status = ItemStatus::Incomplete,
                OutputItem::McpCall(c) => {
                    c.status = ItemStatus::Failed;
                    c.output = None;
                    c.error = Some(crate::api::response::McpCallError::McpToolExecutionError {
                        content: serde_json::json!([{"type": "text", "text": "The run stopped before this call finished."}]),
                    });
                }
                OutputItem::ToolSearchCall(t) => t.status = ItemStatus::Incomplete,
                OutputItem::ToolSearchOutput(t) => t.status = ItemStatus::Incomplete,
                OutputItem::CustomToolCall(c) => c.status = ItemStatus::Incomplete,
                OutputItem::WebSearchCall(w) => w.status = ItemStatus::Incomplete,
                OutputItem::LocalShellCall(c)
                | OutputItem::ShellCall(c)
                | OutputItem::ApplyPatchCall(c)
                | OutputItem::ComputerCall(c) => c.status = ItemStatus::Incomplete,
                OutputItem::McpListTools(_)
                | OutputItem::McpApprovalRequest(_)
                | OutputItem::Compaction(_) => {}
            }
            self.emit(Event::OutputItemDone {
                output_index: index,
                item,
            });
        }
    }

    /// Emits the terminal event with the folded Response, its final status and summed usage.
    pub fn finish(&mut self, ending: Ending, usage: Option<Usage>) -> Response {
        self.close_open_items();
        let mut response = self.snapshot();
        response.usage = Some(usage.unwrap_or_default());
        let now = self.clock.now_unix();
        let event = match ending {
            Ending::Completed => {
                response.status = ResponseStatus::Completed;
                response.completed_at = Some(now);
                Event::Completed {
                    response: Box::new(response.clone()),
                }
            }
            Ending::Incomplete(reason) => {
                response.status = ResponseStatus::Incomplete;
                response.incomplete_details = Some(IncompleteDetails { reason });
                Event::Incomplete {
                    response: Box::new(response.clone()),
                }
            }
            Ending::Failed(error) => {
                response.status = ResponseStatus::Failed;
                response.error = Some(error);
                Event::Failed {
                    response: Box::new(response.clone()),
                }
            }
            Ending::Cancelled => {
                // There is no `response.cancelled` event: the log ends with `response.failed`
                // whose Response says `cancelled`, so every reader still gets a terminal event.
                response.status = ResponseStatus::Cancelled;
                response.error = None;
                Event::Failed {
                    response: Box::new(response.clone()),
                }
            }
        };
        self.emit(event);
        response
    }
}

/// Ends a log that its run will never end (its relay stopped, or it can no longer be followed):
/// open items closed, then `response.failed` (`server_error`, `message`) through `sink`. The log
/// must hold `response.created`.
pub fn end_as_failed(log: Arc<RunLog>, sink: Arc<dyn LogSink>, message: &str) {
    let usage = log.snapshot().and_then(|r| r.usage);
    let mut em = Emitter::new(log, sink, IdSource::Random, Clock::System);
    em.finish(
        Ending::Failed(ResponseError {
            code: "server_error".into(),
            message: message.into(),
        }),
        usage,
    );
}
