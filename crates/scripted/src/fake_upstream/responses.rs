//! The Responses writer: a script as a stateless Responses stream (`response.created` through
//! `response.completed` or `response.incomplete`, numbered from 0) or as one Response object.

use bytes::Bytes;
use serde_json::{Value, json};

use super::options::{Fault, Opts};
use super::script::{Call, Output, Script};
use super::sse::{Frames, Tail};
use super::unix_now;

/// One Responses event before framing: its JSON without `sequence_number`, and whether it is a delta.
struct Ev {
    pub(super) json: Value,
    pub(super) delta: bool,
}

fn ev(json: Value) -> Ev {
    Ev { json, delta: false }
}

fn delta_ev(json: Value) -> Ev {
    Ev { json, delta: true }
}

/// `event: TYPE\ndata: JSON\n\n` with the sequence number set.
fn event_frame(mut json: Value, seq: usize) -> Bytes {
    json["sequence_number"] = json!(seq);
    let kind = json
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("message")
        .to_string();
    let data = json.to_string();
    let mut b = Vec::with_capacity(kind.len() + data.len() + 16);
    b.extend_from_slice(b"event: ");
    b.extend_from_slice(kind.as_bytes());
    b.extend_from_slice(b"\ndata: ");
    b.extend_from_slice(data.as_bytes());
    b.extend_from_slice(b"\n\n");
    Bytes::from(b)
}

/// The assistant message a response streams: its text (or refusal), in pieces.
struct Message<'a> {
    text: &'a str,
    pieces: &'a [String],
    refusal: bool,
    status: &'a str,
    phase: Option<&'static str>,
}

/// One response's builder: its `in_progress` Response object and the ids of its items.
struct ResponsesBuilder {
    serial: u64,
    /// The Response as `response.created` shows it (`in_progress`, no output).
    base: Value,
}

impl ResponsesBuilder {
    fn new(body: &Value, model: &str, serial: u64) -> Self {
        let get = |k: &str| body.get(k).cloned().unwrap_or(Value::Null);
        let base = json!({
            "id": format!("resp_fake{serial}"),
            "object": "response",
            "created_at": unix_now(),
            "status": "in_progress",
            "background": false,
            "completed_at": null,
            "error": null,
            "incomplete_details": null,
            "instructions": get("instructions"),
            "max_output_tokens": get("max_output_tokens"),
            "max_tool_calls": null,
            "model": model,
            "output": [],
            "parallel_tool_calls": body.get("parallel_tool_calls").cloned().unwrap_or(json!(true)),
            "previous_response_id": null,
            "reasoning": {"effort": body.pointer("/reasoning/effort").cloned().unwrap_or(Value::Null), "summary": null},
            "store": false,
            "temperature": body.get("temperature").cloned().unwrap_or(json!(1.0)),
            "text": body.get("text").cloned().unwrap_or(json!({"format": {"type": "text"}})),
            "tool_choice": body.get("tool_choice").cloned().unwrap_or(json!("auto")),
            "tools": body.get("tools").cloned().unwrap_or(json!([])),
            "top_p": body.get("top_p").cloned().unwrap_or(json!(1.0)),
            "truncation": "disabled",
            "usage": null,
            "user": get("user"),
            "metadata": {},
        });
        ResponsesBuilder { serial, base }
    }

    fn item_id(&self, prefix: &str, index: usize) -> String {
        format!("{prefix}_fake{}_{index}", self.serial)
    }

    /// Appends the output items' events to `evs`; returns the finished items.
    fn output_events(&self, s: &Script, evs: &mut Vec<Ev>) -> Vec<Value> {
        let status = if s.length { "incomplete" } else { "completed" };
        let mut output = Vec::new();
        if !s.reasoning.is_empty() {
            let at = output.len();
            output.push(self.reasoning_item(&s.reasoning, at, evs));
        }
        match &s.output {
            Output::Text(text, pieces) | Output::Refusal(text, pieces) => {
                let refusal = matches!(s.output, Output::Refusal(..));
                let at = output.len();
                let message = Message {
                    text,
                    pieces,
                    refusal,
                    status,
                    phase: s.phase,
                };
                output.push(self.message_item(message, at, evs));
            }
            Output::Calls(calls) => {
                for (i, c) in calls.iter().enumerate() {
                    let at = output.len();
                    output.push(if c.custom {
                        self.custom_call_item(i, c, at, evs)
                    } else {
                        self.function_call_item(i, c, status, at, evs)
                    });
                }
            }
        }
        output
    }

    /// The reasoning item at output index `at`: its events appended to `evs`, the item returned.
    fn reasoning_item(&self, reasoning: &[String], at: usize, evs: &mut Vec<Ev>) -> Value {
        let id = self.item_id("rs", at);
        evs.push(ev(json!({"type": "response.output_item.added", "output_index": at,
            "item": {"id": id, "type": "reasoning", "status": "in_progress", "summary": [], "content": []}})));
        evs.push(ev(
            json!({"type": "response.content_part.added", "item_id": id, "output_index": at,
            "content_index": 0, "part": {"type": "reasoning_text", "text": ""}}),
        ));
        for r in reasoning {
            evs.push(delta_ev(
                json!({"type": "response.reasoning_text.delta", "item_id": id, "output_index": at,
                "content_index": 0, "delta": r}),
            ));
        }
        let text = reasoning.concat();
        let part = json!({"type": "reasoning_text", "text": text});
        evs.push(ev(
            json!({"type": "response.reasoning_text.done", "item_id": id, "output_index": at,
            "content_index": 0, "text": text}),
        ));
        evs.push(ev(
            json!({"type": "response.content_part.done", "item_id": id, "output_index": at,
            "content_index": 0, "part": part}),
        ));
        let item = json!({"id": id, "type": "reasoning", "status": "completed", "summary": [], "content": [part]});
        evs.push(ev(
            json!({"type": "response.output_item.done", "output_index": at, "item": item}),
        ));
        item
    }

    /// The assistant message (text, or a refusal) at output index `at`, streamed in `pieces`.
    fn message_item(&self, m: Message<'_>, at: usize, evs: &mut Vec<Ev>) -> Value {
        let Message {
            text,
            pieces,
            refusal,
            status,
            phase,
        } = m;
        let id = self.item_id("msg", at);
        let mut opened = json!({"id": id, "type": "message", "status": "in_progress", "role": "assistant", "content": []});
        if let Some(p) = phase {
            opened["phase"] = json!(p);
        }
        evs.push(ev(
            json!({"type": "response.output_item.added", "output_index": at, "item": opened}),
        ));
        let (empty, full) = if refusal {
            (
                json!({"type": "refusal", "refusal": ""}),
                json!({"type": "refusal", "refusal": text}),
            )
        } else {
            (
                json!({"type": "output_text", "text": "", "annotations": [], "logprobs": []}),
                json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []}),
            )
        };
        evs.push(ev(
            json!({"type": "response.content_part.added", "item_id": id, "output_index": at,
            "content_index": 0, "part": empty}),
        ));
        for p in pieces {
            evs.push(delta_ev(if refusal {
                json!({"type": "response.refusal.delta", "item_id": id, "output_index": at, "content_index": 0, "delta": p})
            } else {
                json!({"type": "response.output_text.delta", "item_id": id, "output_index": at, "content_index": 0,
                    "delta": p, "logprobs": []})
            }));
        }
        evs.push(ev(if refusal {
            json!({"type": "response.refusal.done", "item_id": id, "output_index": at, "content_index": 0, "refusal": text})
        } else {
            json!({"type": "response.output_text.done", "item_id": id, "output_index": at, "content_index": 0,
                "text": text, "logprobs": []})
        }));
        evs.push(ev(
            json!({"type": "response.content_part.done", "item_id": id, "output_index": at,
            "content_index": 0, "part": full}),
        ));
        let mut item = json!({"id": id, "type": "message", "status": status, "role": "assistant", "content": [full]});
        if let Some(p) = phase {
            item["phase"] = json!(p);
        }
        evs.push(ev(
            json!({"type": "response.output_item.done", "output_index": at, "item": item}),
        ));
        item
    }

    /// Call `i` of the turn to a custom tool (`custom_tool_call`, raw input) at output index `at`.
    fn custom_call_item(&self, i: usize, c: &Call, at: usize, evs: &mut Vec<Ev>) -> Value {
        let call_id = format!("call_{i}");
        let id = self.item_id("ctc", at);
        evs.push(ev(
            json!({"type": "response.output_item.added", "output_index": at,
            "item": {"id": id, "type": "custom_tool_call", "input": "",
                "call_id": call_id, "name": c.name}}),
        ));
        for p in &c.pieces {
            evs.push(delta_ev(
                json!({"type": "response.custom_tool_call_input.delta", "item_id": id,
                "output_index": at, "delta": p}),
            ));
        }
        evs.push(ev(
            json!({"type": "response.custom_tool_call_input.done", "item_id": id,
            "output_index": at, "input": c.arguments}),
        ));
        let item = json!({"id": id, "type": "custom_tool_call", "input": c.arguments,
            "call_id": call_id, "name": c.name});
        evs.push(ev(
            json!({"type": "response.output_item.done", "output_index": at, "item": item}),
        ));
        item
    }

    /// Call `i` of the turn to a function tool (`function_call`, JSON arguments) at output index `at`.
    fn function_call_item(
        &self,
        i: usize,
        c: &Call,
        status: &str,
        at: usize,
        evs: &mut Vec<Ev>,
    ) -> Value {
        let call_id = format!("call_{i}");
        let id = self.item_id("fc", at);
        evs.push(ev(
            json!({"type": "response.output_item.added", "output_index": at,
            "item": {"id": id, "type": "function_call", "status": "in_progress", "arguments": "",
                "call_id": call_id, "name": c.name}}),
        ));
        for p in &c.pieces {
            evs.push(delta_ev(
                json!({"type": "response.function_call_arguments.delta", "item_id": id,
                "output_index": at, "delta": p}),
            ));
        }
        evs.push(ev(
            json!({"type": "response.function_call_arguments.done", "item_id": id,
            "output_index": at, "name": c.name, "arguments": c.arguments}),
        ));
        let item = json!({"id": id, "type": "function_call", "status": status, "arguments": c.arguments,
            "call_id": call_id, "name": c.name});
        evs.push(ev(
            json!({"type": "response.output_item.done", "output_index": at, "item": item}),
        ));
        item
    }

    fn usage(s: &Script) -> Value {
        json!({
            "input_tokens": s.prompt_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": s.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": s.reasoning.len()},
            "total_tokens": s.prompt_tokens + s.completion_tokens,
        })
    }

    /// The final Response: completed, or incomplete with `max_output_tokens`.
    fn terminal(&self, s: &Script, output: Vec<Value>) -> Value {
        let mut r = self.base.clone();
        r["output"] = Value::Array(output);
        r["usage"] = Self::usage(s);
        if s.length {
            r["status"] = json!("incomplete");
            r["incomplete_details"] = json!({"reason": "max_output_tokens"});
        } else {
            r["status"] = json!("completed");
            r["completed_at"] = json!(unix_now());
        }
        r
    }
}

/// The non-streaming Response: the same object as a stream's terminal event.
pub(super) fn response_object(s: &Script, body: &Value, model: &str, serial: u64) -> Value {
    let r = ResponsesBuilder::new(body, model, serial);
    let mut evs = Vec::new();
    let output = r.output_events(s, &mut evs);
    r.terminal(s, output)
}

/// The frames of a streamed Responses answer.
pub(super) fn responses_frames(
    s: &Script,
    o: &Opts,
    body: &Value,
    model: &str,
    serial: u64,
) -> (Vec<Bytes>, Tail) {
    let b = ResponsesBuilder::new(body, model, serial);
    let mut evs = vec![
        ev(json!({"type": "response.created", "response": b.base})),
        ev(json!({"type": "response.in_progress", "response": b.base})),
    ];
    let output = b.output_events(s, &mut evs);
    let terminal = b.terminal(s, output);
    let kind = if s.length {
        "response.incomplete"
    } else {
        "response.completed"
    };
    evs.push(ev(json!({"type": kind, "response": terminal})));
    let frames = Frames {
        frames: evs
            .into_iter()
            .enumerate()
            .map(|(i, e)| (event_frame(e.json, i), e.delta))
            .collect(),
    };
    let failed = |seq: usize| {
        let mut r = b.base.clone();
        r["status"] = json!("failed");
        r["error"] = json!({"code": "server_error", "message": "overloaded"});
        vec![
            event_frame(
                json!({"type": "error", "code": "server_error", "message": "overloaded", "param": null}),
                seq,
            ),
            event_frame(json!({"type": "response.failed", "response": r}), seq + 1),
        ]
    };
    frames.finish(o.fault, |seq| match o.fault {
        Fault::Malformed => vec![Bytes::from_static(
            b"event: response.output_text.delta\ndata: {not json\n\n",
        )],
        Fault::ErrorChunk => failed(seq),
        _ => Vec::new(),
    })
}
