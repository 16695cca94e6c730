//! `response.steer` on a WebSocket connection (SPEC §22): a submission checked and offered to the
//! queue of the response it names (the run announces it, `response.steer.accepted`, in its own
//! log and lane); after the response ends, its queued input committed by a successor the lane
//! starts by itself, kept for the client's continuation (`response.steer.pending`), or handed
//! back (`response.steer.failed`).
//!
//! Invariants: a steer names only a response started on this connection; every submission is
//! answered once: accepted (then committed by a successor's `response.created`, or returned) or
//! refused, its input returned. Refusals answered at once are numbered 0 (they are no part of a
//! response's stream); notices after a response's terminal event continue its numbering. The
//! connection gone, queued input is dropped with the queue, so nothing it asked for starts.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::{Message, Utf8Bytes};

use super::Conn;
use super::writer::Out;
use crate::api::ResponseStatus;
use crate::api::request::parse_create_value;
use crate::api::steer::{
    FailedSteer, PendingReason, SteerErrorCode, SteerNotice, SteerRef, check_input, input_items,
    required_input,
};
use crate::run::steer::Steer;
use crate::run::{RunHandle, Steering};

/// Responses a connection keeps as steering targets (oldest forgotten first).
const TARGETS: usize = 64;

/// What a connection knows for steering: the responses it started, and the input waiting for
/// the client's continuation of a response.
#[derive(Default)]
pub(super) struct Steers {
    targets: HashMap<String, Target>,
    order: VecDeque<String>,
    waiting: HashMap<String, Commit>,
}

/// A response a steer may name: its lane, its model (to check input parts as a create would),
/// and its queue (`None`: it cannot be steered).
#[derive(Clone)]
pub(super) struct Target {
    pub(super) lane: Option<String>,
    pub(super) model: String,
    pub(super) steering: Option<Arc<Steering>>,
}

/// Accepted input a create commits (its `response.created` is the commit point): the steered
/// response, the submissions in order, and the number the next notice about them takes.
pub(super) struct Commit {
    parent: String,
    lane: Option<String>,
    steers: Vec<Steer>,
    next_seq: u64,
    /// Started by the relay (a successor), not by the client's own create.
    automatic: bool,
}

/// A create for a lane: the client's, or a successor carrying the input it commits.
pub(super) struct Create {
    pub(super) body: Value,
    pub(super) commits: Option<Commit>,
}

impl Steers {
    pub(super) fn register(&mut self, id: String, target: Target) {
        if self.targets.insert(id.clone(), target).is_none() {
            self.order.push_back(id);
        }
        while self.order.len() > TARGETS {
            if let Some(old) = self.order.pop_front() {
                self.targets.remove(&old);
                self.waiting.remove(&old);
            }
        }
    }
}

/// Answers one `response.steer` frame: refused at once (`response.steer.failed`), or offered to
/// its response's queue (the run announces it).
pub(super) fn steer(conn: &Conn, value: &Value) {
    let fields = value.as_object().expect("dispatched objects only");
    let previous = fields.get("previous_response_id").and_then(Value::as_str);
    let input = fields.get("input").cloned().unwrap_or(Value::Null);
    let target = previous.and_then(|id| {
        let steers = conn.steers.lock().expect("not poisoned");
        steers.targets.get(id).cloned()
    });
    let refuse = |code: SteerErrorCode, message: String| {
        let steer = FailedSteer {
            id: None,
            previous_response_id: previous.unwrap_or_default().to_string(),
            input: input.clone(),
        };
        let lane = target.as_ref().and_then(|t| t.lane.as_deref());
        tracing::info!(code = ?code, error = %message, "websocket steer refused");
        conn.send_notice(&SteerNotice::failed(steer, code, message), 0, lane);
    };
    let invalid = |message: String| refuse(SteerErrorCode::InvalidInput, message);
    if fields.contains_key("stream_id") {
        return invalid(
            "Invalid 'stream_id': a steer goes to the lane of the response it names; do not send 'stream_id'.".into(),
        );
    }
    if let Some(other) =
        (fields.keys()).find(|k| !matches!(k.as_str(), "type" | "previous_response_id" | "input"))
    {
        return invalid(format!(
            "Unknown parameter: '{other}'. 'response.steer' takes only 'type', 'previous_response_id' and 'input'."
        ));
    }
    let Some(previous) = previous else {
        return invalid(
            "Missing required parameter: 'previous_response_id' (a string: the response to steer)."
                .into(),
        );
    };
    if !fields.contains_key("input") {
        return invalid("Missing required parameter: 'input'.".into());
    }
    let Some(target) = &target else {
        return refuse(
            SteerErrorCode::ResponseNotFound,
            format!("No response with id '{previous}' was started on this connection."),
        );
    };
    if let Err((param, why)) = check_input(&input) {
        return invalid(format!("Invalid '{param}': {why}"));
    }
    // Each part checked as a create's input would be (an image's URL, a file's data).
    if let Err(e) = parse_create_value(json!({"model": target.model, "input": input})) {
        return invalid(e.message);
    }
    let Some(steering) = &target.steering else {
        return refuse(
            SteerErrorCode::SteeringNotSupported,
            "This response cannot be steered: responses bound to a conversation or using automatic compaction (context_management) do not support steering.".into(),
        );
    };
    match steering.offer(input.clone(), || conn.app.ids().mint("steer")) {
        Ok(()) => tracing::info!("websocket steer accepted"),
        Err((code, message)) => refuse(code, message),
    }
}

impl Conn {
    /// Sends one steering notice on `lane`, numbered `seq`.
    pub(super) fn send_notice(&self, notice: &SteerNotice, seq: u64, lane: Option<&str>) {
        let text = Utf8Bytes::from(notice.to_json(seq, lane));
        let _ = self.out.send(Out::Frame(Message::Text(text)));
    }

    /// The input waiting for the continuation `body` is (its `previous_response_id` names a
    /// response that waits for the client's own work, on this `lane`), prepended to its input.
    pub(super) fn take_waiting(&self, body: &mut Value, lane: Option<&str>) -> Option<Commit> {
        let previous = body.get("previous_response_id").and_then(Value::as_str)?;
        let mut steers = self.steers.lock().expect("not poisoned");
        if steers.waiting.get(previous)?.lane.as_deref() != lane {
            return None;
        }
        let commit = steers.waiting.remove(previous)?;
        drop(steers);
        let mut input: Vec<Value> = commit
            .steers
            .iter()
            .flat_map(|s| input_items(&s.input))
            .collect();
        match body.get("input") {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) => {
                input.push(json!({"type": "message", "role": "user", "content": s}))
            }
            Some(Value::Array(items)) => input.extend(items.iter().cloned()),
            // Not an input: the create's own validation says so, and the commit fails.
            Some(other) => input.push(other.clone()),
        }
        body["input"] = Value::Array(input);
        Some(commit)
    }

    /// A create that was to commit steering input could not start: each submission is handed
    /// back (`successor_creation_failed`), saying why.
    pub(super) fn commit_failed(&self, mut commit: Commit, why: &str) {
        let lane = commit.lane.clone();
        for steer in commit.steers.drain(..) {
            let failed = FailedSteer {
                id: Some(steer.id),
                previous_response_id: commit.parent.clone(),
                input: steer.input,
            };
            let message = format!("The successor response could not be created: {why}");
            let notice =
                SteerNotice::failed(failed, SteerErrorCode::SuccessorCreationFailed, message);
            self.send_notice(&notice, commit.next_seq, lane.as_deref());
            commit.next_seq += 1;
        }
    }

    /// After `handle`'s response ended with accepted input queued: the successor's create (its
    /// settings `settings`, its input the queued input in order), or, when the response waits
    /// for the client's own calls or approvals, the input kept for the client's continuation
    /// (`response.steer.pending`); a response that failed or was cancelled hands it back.
    pub(super) fn after_steered(
        &self,
        handle: &RunHandle,
        mut settings: Value,
        queued: Vec<Steer>,
        lane: Option<&str>,
    ) -> Option<Create> {
        let response = handle.log.snapshot()?;
        let mut seq = handle.log.len() as u64;
        let commit = Commit {
            parent: handle.id.clone(),
            lane: lane.map(str::to_string),
            steers: queued,
            next_seq: seq,
            automatic: true,
        };
        match response.status {
            ResponseStatus::Completed | ResponseStatus::Incomplete => {}
            _ => {
                for steer in commit.steers {
                    let failed = FailedSteer {
                        id: Some(steer.id),
                        previous_response_id: handle.id.clone(),
                        input: steer.input,
                    };
                    let message = "The response ended before the steering input took effect; it was not applied.";
                    let notice =
                        SteerNotice::failed(failed, SteerErrorCode::ResponseNotActive, message);
                    self.send_notice(&notice, seq, lane);
                    seq += 1;
                }
                return None;
            }
        }
        let required = required_input(&response);
        if response.status == ResponseStatus::Completed && !required.is_empty() {
            for steer in &commit.steers {
                let notice = SteerNotice::Pending {
                    steer: SteerRef {
                        id: steer.id.clone(),
                        previous_response_id: handle.id.clone(),
                    },
                    reason: PendingReason::WaitingForRequiredInput,
                    required_input: required.clone(),
                };
                self.send_notice(&notice, seq, lane);
                seq += 1;
            }
            let commit = Commit {
                next_seq: seq,
                automatic: false,
                ..commit
            };
            let mut steers = self.steers.lock().expect("not poisoned");
            steers.waiting.insert(handle.id.clone(), commit);
            return None;
        }
        let input: Vec<Value> = (commit.steers.iter())
            .flat_map(|s| input_items(&s.input))
            .collect();
        settings["input"] = Value::Array(input);
        settings["previous_response_id"] = Value::from(handle.id.clone());
        Some(Create {
            body: settings,
            commits: Some(commit),
        })
    }
}

impl Commit {
    /// Whether the relay started this create (a successor) rather than the client.
    pub(super) fn automatic(&self) -> bool {
        self.automatic
    }
}
