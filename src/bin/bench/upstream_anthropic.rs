//! The model server's Anthropic Messages stream (`POST /v1/messages`, `stream: true`), stamped
//! like its Chat Completions one: every `text_delta` carries `@T<µs> ` (its send time), paced on
//! the stream's own schedule (`upstream::stamps`). Framed as Anthropic documents it
//! (`fixtures/upstream/anthropic/text-basic.sse`): `message_start` with usage, the text block's
//! `content_block_start`, a `ping`, the `content_block_delta`s, `content_block_stop`,
//! `message_delta` with the stop reason and usage, `message_stop`. A last user message with a
//! `CALL <tool> <json>` line gets one `tool_use` block instead, its input as one
//! `input_json_delta` (`tool-use-weather.sse`); a last user message of `tool_result` blocks gets
//! the text. So the relay with `--upstream-api anthropic` does the same job as with the Chat
//! Completions upstream, and the added latency is measured through it the same way.

use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use serde_json::{Value, json};

use crate::upstream::{Body, called_tool, options, sse, stamps, text_of};

/// Messages numbered within this process (ids are unique, as Anthropic's are).
static SERIAL: AtomicU64 = AtomicU64::new(1);

/// `event: TYPE\ndata: JSON\n\n` of `json`, whose `type` is `TYPE`.
fn frame(json: Value) -> Bytes {
    let kind = json["type"].as_str().unwrap_or("message").to_string();
    Bytes::from(format!("event: {kind}\ndata: {json}\n\n"))
}

/// A text delta's frame, written directly (the stamp changes per delta; no JSON tree per event).
fn delta_frame(delta: &str) -> Bytes {
    Bytes::from(format!(
        "event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"{delta}\"}}}}\n\n"
    ))
}

/// `message_delta` (why the message stopped, the output tokens) and `message_stop`.
fn tail(stop_reason: &str, output_tokens: usize) -> [Bytes; 2] {
    [
        frame(json!({"type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": null},
            "usage": {"output_tokens": output_tokens}})),
        frame(json!({"type": "message_stop"})),
    ]
}

/// `(tool, input)` when the last message is the user's with a `CALL <tool> <json>` line (not
/// tool results).
fn wanted_call(body: &Value) -> Option<(String, String)> {
    let last = body.get("messages")?.as_array()?.last()?;
    if last.get("role").and_then(Value::as_str) != Some("user") {
        return None;
    }
    let content = last.get("content").unwrap_or(&Value::Null);
    let results = content.as_array().is_some_and(|blocks| {
        blocks
            .iter()
            .any(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))
    });
    if results {
        return None;
    }
    let tools = body.get("tools").and_then(Value::as_array);
    let names = tools
        .into_iter()
        .flatten()
        .filter_map(|t| t.get("name").and_then(Value::as_str));
    called_tool(&text_of(content), names)
}

/// `POST /v1/messages`: the stamped text stream, or one tool call.
pub fn messages(body: &Value) -> hyper::Response<Body> {
    let model = body.get("model").and_then(Value::as_str).unwrap_or("bench");
    let (deltas, delay) = options(model);
    let n = SERIAL.fetch_add(1, Ordering::Relaxed);
    let start = frame(json!({"type": "message_start", "message": {
        "id": format!("msg_bench{}_{n}", std::process::id()), "type": "message",
        "role": "assistant", "content": [], "model": model, "stop_reason": null,
        "stop_sequence": null, "usage": {"input_tokens": 10, "output_tokens": 1}}}));
    if let Some((name, input)) = wanted_call(body) {
        let frames: Vec<Bytes> = [
            start,
            frame(
                json!({"type": "content_block_start", "index": 0, "content_block":
                {"type": "tool_use", "id": format!("toolu_bench{n}"), "name": name, "input": {}}}),
            ),
            frame(json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "input_json_delta", "partial_json": input}})),
            frame(json!({"type": "content_block_stop", "index": 0})),
        ]
        .into_iter()
        .chain(tail("tool_use", 1))
        .collect();
        return sse(futures::stream::iter(frames));
    }
    let stream = async_stream::stream! {
        yield start;
        yield frame(json!({"type": "content_block_start", "index": 0,
            "content_block": {"type": "text", "text": ""}}));
        yield frame(json!({"type": "ping"}));
        for await stamp in stamps(deltas, delay) {
            yield delta_frame(&stamp);
        }
        yield frame(json!({"type": "content_block_stop", "index": 0}));
        for f in tail("end_turn", deltas) {
            yield f;
        }
    };
    sse(stream)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_line_names_the_tool_the_relay_listed() {
        let body = json!({"messages": [{"role": "user",
            "content": [{"type": "text", "text": "CALL echo {\"text\":\"hi\"}"}]}],
            "tools": [{"name": "bench__add", "input_schema": {}},
                      {"name": "bench__echo", "input_schema": {}}]});
        assert_eq!(
            wanted_call(&body),
            Some(("bench__echo".into(), "{\"text\":\"hi\"}".into()))
        );
        let plain = json!({"messages": [{"role": "user", "content": "CALL echo {}"}]});
        assert_eq!(wanted_call(&plain), Some(("echo".into(), "{}".into())));
    }

    #[test]
    fn tool_results_or_plain_text_get_the_text() {
        let after_call = json!({"messages": [
            {"role": "user", "content": "CALL echo {}"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "echo", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "CALL echo {}"}]}]});
        assert_eq!(wanted_call(&after_call), None);
        assert_eq!(
            wanted_call(&json!({"messages": [{"role": "user", "content": "hi"}]})),
            None
        );
    }

    #[test]
    fn a_delta_frame_is_a_documented_text_delta_with_its_stamp() {
        let f = delta_frame("@T123 ");
        let text = std::str::from_utf8(&f).unwrap();
        let data = text
            .strip_prefix("event: content_block_delta\ndata: ")
            .and_then(|d| d.strip_suffix("\n\n"))
            .unwrap();
        let v: Value = serde_json::from_str(data).unwrap();
        assert_eq!(
            v,
            json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": "@T123 "}})
        );
    }
}
