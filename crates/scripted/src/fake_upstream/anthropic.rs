//! The Anthropic Messages writer and checks: a script as Messages stream events (`message_start`,
//! content blocks with their deltas, `message_delta`, `message_stop`; `ping`s with `pings=N`), the
//! conversation read from a Messages request, and Anthropic's checks of the thinking blocks sent
//! back. Its `thinking` blocks carry a signature over their text and its `redacted_thinking`
//! blocks fixed data; a block that comes back altered or unsigned, or a tool-use turn sent back
//! without the thinking that led to it while thinking is on, is refused with a 400, as Anthropic
//! does. Errors are Anthropic's `{"type": "error", "error": {type, message}}`.

use bytes::Bytes;
use hyper::header::{CONTENT_TYPE, HeaderValue, RETRY_AFTER};
use hyper::{Response, StatusCode};
use serde_json::{Value, json};

use super::Body;
use super::convo::{Choice, Convo, Last, Tool};
use super::options::{Fault, Opts};
use super::script::{Output, Script};
use super::sse::{Frames, Tail};

/// What the fake's `redacted_thinking` blocks hold (and must come back holding).
pub(super) const REDACTED: &str =
    "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP";

/// The fake's signature over a thinking block's text (a stable hash; Anthropic's is opaque).
pub(super) fn signature(thinking: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in "fake-anthropic/".bytes().chain(thinking.bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("EqQBCgIYAhIM{h:016x}")
}

/// An Anthropic error answer.
pub(super) fn error(status: StatusCode, kind: &str, message: &str) -> Response<Body> {
    let body = json!({"type": "error", "error": {"type": kind, "message": message}});
    let mut r = Response::new(super::routes::full(
        serde_json::to_vec(&body).expect("json serializes"),
    ));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if status == StatusCode::TOO_MANY_REQUESTS {
        r.headers_mut()
            .insert(RETRY_AFTER, HeaderValue::from_static("1"));
    }
    r
}

/// Anthropic's checks of the thinking sent back: every `thinking` block signed as the fake signs,
/// every `redacted_thinking` block as the fake made it, and (thinking on) a last assistant
/// message that used tools starting with its thinking. The refusal, if any.
pub(super) fn check_thinking(body: &Value) -> Option<Response<Body>> {
    let messages = body.get("messages").and_then(Value::as_array)?;
    let bad = |m: &str| Some(error(StatusCode::BAD_REQUEST, "invalid_request_error", m));
    for (i, m) in messages.iter().enumerate() {
        for (j, b) in blocks(m).iter().enumerate() {
            match b["type"].as_str() {
                Some("thinking") => {
                    let text = b["thinking"].as_str().unwrap_or_default();
                    match b["signature"].as_str() {
                        None | Some("") => {
                            return bad(&format!(
                                "messages.{i}.content.{j}.thinking.signature: Field required"
                            ));
                        }
                        Some(s) if s != signature(text) => {
                            return bad(&format!(
                                "messages.{i}.content.{j}: Invalid `signature` in `thinking` block"
                            ));
                        }
                        Some(_) => {}
                    }
                }
                Some("redacted_thinking") if b["data"] != REDACTED => {
                    return bad(&format!(
                        "messages.{i}.content.{j}: Invalid `data` in `redacted_thinking` block"
                    ));
                }
                _ => {}
            }
        }
    }
    let thinking_on = body.pointer("/thinking/type").and_then(Value::as_str) == Some("enabled");
    let last_assistant = messages.iter().rposition(|m| m["role"] == "assistant");
    if let Some(at) = last_assistant
        && thinking_on
        && messages[at + 1..].iter().all(only_tool_results)
    {
        let b = blocks(&messages[at]);
        let uses_tools = b.iter().any(|b| b["type"] == "tool_use");
        let starts_thinking = b
            .first()
            .is_some_and(|b| matches!(b["type"].as_str(), Some("thinking" | "redacted_thinking")));
        if uses_tools && !starts_thinking {
            return bad(&format!(
                "messages.{at}.content.0.type: Expected `thinking` or `redacted_thinking`, but found `{}`. When `thinking` is enabled, a final `assistant` message must start with a thinking block.",
                b.first()
                    .and_then(|b| b["type"].as_str())
                    .unwrap_or("nothing")
            ));
        }
    }
    None
}

/// A message's content blocks (a string content is one text block).
fn blocks(m: &Value) -> Vec<Value> {
    match &m["content"] {
        Value::String(s) => vec![json!({"type": "text", "text": s})],
        Value::Array(b) => b.clone(),
        _ => Vec::new(),
    }
}

fn only_tool_results(m: &Value) -> bool {
    m["role"] == "user" && blocks(m).iter().all(|b| b["type"] == "tool_result")
}

/// The text of a block list's text blocks (and a tool result's text), joined; images counted.
fn text_of(blocks: &[Value], images: &mut usize, files: &mut usize) -> String {
    let mut texts: Vec<String> = Vec::new();
    for b in blocks {
        match b["type"].as_str().unwrap_or_default() {
            "text" => texts.extend(b["text"].as_str().map(str::to_string)),
            "image" => *images += 1,
            "document" => *files += 1,
            _ => {}
        }
    }
    texts.join(" ")
}

impl Convo {
    /// The conversation of a Messages request.
    pub(super) fn from_anthropic(body: &Value) -> Convo {
        let empty = Vec::new();
        let msgs = body
            .get("messages")
            .and_then(Value::as_array)
            .unwrap_or(&empty);
        let has_text =
            |m: &Value| m["role"] == "user" && blocks(m).iter().any(|b| b["type"] != "tool_result");
        let last = match msgs.last() {
            Some(m) if has_text(m) => Last::User,
            Some(m) if only_tool_results(m) => Last::ToolResults(
                blocks(m)
                    .iter()
                    .map(|b| match &b["content"] {
                        Value::String(s) => s.clone(),
                        Value::Array(parts) => text_of(parts, &mut 0, &mut 0),
                        _ => String::new(),
                    })
                    .collect(),
            ),
            _ => Last::Other,
        };
        let (mut images, mut files) = (0, 0);
        let after_user = msgs.iter().rposition(has_text);
        let user_text = after_user
            .map(|i| text_of(&blocks(&msgs[i]), &mut images, &mut files))
            .unwrap_or_default();
        let rounds = msgs[after_user.map_or(0, |i| i + 1)..]
            .iter()
            .filter(|m| {
                m["role"] == "assistant" && blocks(m).iter().any(|b| b["type"] == "tool_use")
            })
            .count();
        let tools = body
            .get("tools")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|t| {
                Some(Tool {
                    name: t["name"].as_str()?.to_string(),
                    parameters: t["input_schema"].clone(),
                    custom: false,
                })
            })
            .collect();
        let choice = match body.pointer("/tool_choice/type").and_then(Value::as_str) {
            Some("none") => Choice::None,
            Some("any") => Choice::Required,
            Some("tool") => match body.pointer("/tool_choice/name").and_then(Value::as_str) {
                Some(n) => Choice::Named(n.to_string()),
                None => Choice::Required,
            },
            _ => Choice::Auto,
        };
        let system =
            body.get("system")
                .is_some_and(|s| s.as_str().is_none_or(|s| !s.is_empty())) as usize;
        Convo {
            messages: system + msgs.len(),
            last,
            user_text,
            images,
            files,
            tools,
            choice,
            rounds,
        }
    }
}

/// One event as Anthropic frames it: its `event` line, its JSON as `data`.
fn frame(v: &Value) -> Bytes {
    let kind = v["type"].as_str().unwrap_or("message");
    Bytes::from(format!("event: {kind}\ndata: {v}\n\n"))
}

/// The frames of a streamed Messages answer (`o.redacted`: a `redacted_thinking` block after
/// the thinking); `(read, written)`: its prompt's tokens read from and written to the cache.
pub(super) fn anthropic_frames(
    s: &Script,
    o: &Opts,
    model: &str,
    serial: u64,
    (read, written): (u64, u64),
) -> (Vec<Bytes>, Tail) {
    let redacted = o.redacted;
    // The prompt's tokens not read from or written to the cache (Anthropic's `input_tokens`).
    let fresh = s.prompt_tokens.saturating_sub(read + written);
    let mut f = Frames { frames: Vec::new() };
    let mut push = |v: Value, delta: bool| f.frames.push((frame(&v), delta));
    push(
        json!({"type": "message_start", "message": {"id": format!("msg_fake{serial}"), "type": "message",
            "role": "assistant", "content": [], "model": model, "stop_reason": null, "stop_sequence": null,
            "usage": {"input_tokens": fresh, "cache_creation_input_tokens": written,
                "cache_read_input_tokens": read, "output_tokens": 1}}}),
        false,
    );
    for _ in 0..o.pings {
        push(json!({"type": "ping"}), false);
    }
    let mut index = 0;
    let mut block = |start: Value, deltas: Vec<Value>, push: &mut dyn FnMut(Value, bool)| {
        push(
            json!({"type": "content_block_start", "index": index, "content_block": start}),
            false,
        );
        for d in deltas {
            push(
                json!({"type": "content_block_delta", "index": index, "delta": d}),
                true,
            );
        }
        push(json!({"type": "content_block_stop", "index": index}), false);
        index += 1;
    };
    if !s.reasoning.is_empty() {
        let mut deltas: Vec<Value> = s
            .reasoning
            .iter()
            .map(|r| json!({"type": "thinking_delta", "thinking": r}))
            .collect();
        deltas.push(
            json!({"type": "signature_delta", "signature": signature(&s.reasoning.concat())}),
        );
        block(
            json!({"type": "thinking", "thinking": ""}),
            deltas,
            &mut push,
        );
    }
    if redacted {
        block(
            json!({"type": "redacted_thinking", "data": REDACTED}),
            Vec::new(),
            &mut push,
        );
    }
    let stop = match &s.output {
        Output::Text(_, pieces) | Output::Refusal(_, pieces) => {
            let deltas = pieces
                .iter()
                .map(|p| json!({"type": "text_delta", "text": p}))
                .collect();
            block(json!({"type": "text", "text": ""}), deltas, &mut push);
            if matches!(s.output, Output::Refusal(..)) {
                "refusal"
            } else {
                "end_turn"
            }
        }
        Output::Calls(calls) => {
            for (i, c) in calls.iter().enumerate() {
                let deltas = c
                    .pieces
                    .iter()
                    .map(|p| json!({"type": "input_json_delta", "partial_json": p}))
                    .collect();
                block(
                    json!({"type": "tool_use", "id": format!("toolu_fake{serial}_{i}"), "name": c.name, "input": {}}),
                    deltas,
                    &mut push,
                );
            }
            "tool_use"
        }
    };
    let stop = if s.length { "max_tokens" } else { stop };
    push(
        json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null},
            "usage": {"output_tokens": s.completion_tokens}}),
        false,
    );
    push(json!({"type": "message_stop"}), false);
    f.finish(o.fault, |_| match o.fault {
        Fault::Malformed => vec![Bytes::from_static(b"event: content_block_delta\ndata: {not json\n\n")],
        Fault::ErrorChunk => vec![frame(
            &json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        )],
        _ => Vec::new(),
    })
}

/// The models list as Anthropic answers `GET /v1/models`.
pub(super) fn models() -> Value {
    json!({"data": [{"type": "model", "id": "fake-model", "display_name": "Fake Model",
        "created_at": "2025-01-01T00:00:00Z"}], "has_more": false,
        "first_id": "fake-model", "last_id": "fake-model"})
}

/// Tokens a cached block stands for, in the fake's accounting.
const BLOCK_TOKENS: u64 = 4;

/// Anthropic's prompt cache, simplified: a request may mark at most four blocks `cache_control`
/// (more is a 400, as Anthropic answers); the prefix up to each marked block is written to
/// `cache`; the longest prefix (up to any block) an earlier request wrote is read back. Answers
/// the tokens read and written (4 per block of the prefix), or the 400's message.
pub(super) fn cache_usage(
    cache: &std::sync::Mutex<std::collections::HashSet<u64>>,
    body: &Value,
) -> Result<(u64, u64), String> {
    use std::hash::{Hash, Hasher};
    let messages = body["messages"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    // Every block in order, with whether it is marked; the prefix hashes exclude the marks.
    let mut prefix = std::collections::hash_map::DefaultHasher::new();
    body["model"].to_string().hash(&mut prefix);
    body["system"].to_string().hash(&mut prefix);
    body["tools"].to_string().hash(&mut prefix);
    let mut boundaries: Vec<(u64, bool)> = Vec::new();
    for m in messages {
        m["role"].to_string().hash(&mut prefix);
        for b in blocks(m) {
            let mut plain = b.clone();
            let marked = plain
                .as_object_mut()
                .and_then(|o| o.remove("cache_control"))
                .is_some();
            plain.to_string().hash(&mut prefix);
            boundaries.push((prefix.clone().finish(), marked));
        }
    }
    let marks = boundaries.iter().filter(|(_, m)| *m).count();
    if marks > 4 {
        return Err(format!(
            "A maximum of 4 blocks with cache_control may be provided. Found {marks}."
        ));
    }
    let mut cache = cache.lock().expect("prompt cache lock");
    let read = boundaries
        .iter()
        .rposition(|(h, _)| cache.contains(h))
        .map_or(0, |at| at as u64 + 1);
    let last_mark = boundaries
        .iter()
        .rposition(|(_, m)| *m)
        .map_or(0, |at| at as u64 + 1);
    for (h, _) in boundaries.iter().filter(|(_, m)| *m) {
        cache.insert(*h);
    }
    Ok((
        read * BLOCK_TOKENS,
        last_mark.saturating_sub(read) * BLOCK_TOKENS,
    ))
}

/// `POST /v1/messages/count_tokens`: the prompt's tokens as the scripted model counts them (the
/// `prompt_tokens` a turn of this conversation reports), generating nothing.
pub(super) fn count_tokens(body: &Value) -> Value {
    json!({"input_tokens": Convo::from_anthropic(body).messages as u64 * 10})
}
