//! The model server's stateless `/v1/responses` stream, stamped like its Chat Completions one:
//! every `response.output_text.delta` carries `@T<µs> ` (its send time), paced on the stream's
//! own schedule. A last user input with a `CALL <tool> <json>` line gets one `function_call` item
//! instead (to the function tool whose name ends with `<tool>`); input ending in tool results
//! gets the text. So every gateway (the relay with `--upstream-api responses`, SMG, agentic-api)
//! and the floor can sit in front of the same upstream doing the same job.

use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use serde_json::{Value, json};

use crate::upstream::{Body, called_tool, now_micros, options, sse, stamps, text_of};

/// Responses numbered within this process (every id is unique: gateways key what they store by
/// the upstream's ids).
static SERIAL: AtomicU64 = AtomicU64::new(1);

/// `event: TYPE\ndata: JSON\n\n` of `json` (its `type` set) with `sequence_number` `seq`.
fn frame(mut json: Value, seq: usize) -> Bytes {
    json["sequence_number"] = json!(seq);
    let kind = json["type"].as_str().unwrap_or("message").to_string();
    Bytes::from(format!("event: {kind}\ndata: {json}\n\n"))
}

/// A text delta's frame, written directly (the stamp changes per delta; no JSON tree per event).
fn delta_frame(item: &str, seq: usize, delta: &str) -> Bytes {
    Bytes::from(format!(
        "event: response.output_text.delta\ndata: {{\"type\":\"response.output_text.delta\",\"sequence_number\":{seq},\"item_id\":\"{item}\",\"output_index\":0,\"content_index\":0,\"delta\":\"{delta}\",\"logprobs\":[]}}\n\n"
    ))
}

/// The `in_progress` Response object of `response.created`.
fn base(body: &Value, model: &str, id: &str) -> Value {
    let get = |k: &str, d: Value| body.get(k).cloned().unwrap_or(d);
    json!({
        "id": id, "object": "response", "created_at": now_micros() / 1_000_000,
        "status": "in_progress", "background": false, "completed_at": null, "error": null,
        "incomplete_details": null, "instructions": get("instructions", Value::Null),
        "max_output_tokens": null, "max_tool_calls": null, "model": model, "output": [],
        "parallel_tool_calls": get("parallel_tool_calls", json!(true)),
        "previous_response_id": null, "reasoning": {"effort": null, "summary": null},
        "store": false, "temperature": 1.0, "text": {"format": {"type": "text"}},
        "tool_choice": get("tool_choice", json!("auto")), "tools": get("tools", json!([])),
        "top_p": 1.0, "truncation": "disabled", "usage": null, "user": null, "metadata": {},
    })
}

/// The terminal Response: `base` completed with `output`.
fn completed(mut r: Value, output: Value, output_tokens: usize) -> Value {
    r["status"] = json!("completed");
    r["completed_at"] = json!(now_micros() / 1_000_000);
    r["output"] = output;
    r["usage"] = json!({"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": output_tokens, "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 10 + output_tokens});
    r
}

/// `(tool, arguments)` when the last input is a user message with a `CALL <tool> <json>` line.
fn wanted_call(body: &Value) -> Option<(String, String)> {
    let text = match body.get("input")? {
        Value::String(s) => s.clone(),
        Value::Array(items) => {
            let last = items.last()?;
            if last.get("role").and_then(Value::as_str) != Some("user") {
                return None;
            }
            text_of(last.get("content").unwrap_or(&Value::Null))
        }
        _ => return None,
    };
    let tools = body.get("tools").and_then(Value::as_array);
    let names = tools
        .into_iter()
        .flatten()
        .filter_map(|t| t.get("name").and_then(Value::as_str));
    called_tool(&text, names)
}

/// `POST /v1/responses`: the stamped text stream, or one function call.
pub fn responses(body: &Value) -> hyper::Response<Body> {
    let model = body
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("bench")
        .to_string();
    let n = SERIAL.fetch_add(1, Ordering::Relaxed);
    let id = format!("resp_bench{}_{n}", std::process::id());
    let r = base(body, &model, &id);
    let head = [
        frame(json!({"type": "response.created", "response": r}), 0),
        frame(json!({"type": "response.in_progress", "response": r}), 1),
    ];
    if let Some((name, args)) = wanted_call(body) {
        let fc = format!("fc_bench{}_{n}", std::process::id());
        let call_id = format!("call_bench{n}");
        let item = json!({"id": fc, "type": "function_call", "status": "completed",
            "arguments": args, "call_id": call_id, "name": name});
        let mut opened = item.clone();
        opened["status"] = json!("in_progress");
        opened["arguments"] = json!("");
        let frames: Vec<Bytes> = head
            .into_iter()
            .chain([
                frame(json!({"type": "response.output_item.added", "output_index": 0, "item": opened}), 2),
                frame(json!({"type": "response.function_call_arguments.delta", "item_id": fc, "output_index": 0, "delta": args}), 3),
                frame(json!({"type": "response.function_call_arguments.done", "item_id": fc, "output_index": 0, "name": name, "arguments": args}), 4),
                frame(json!({"type": "response.output_item.done", "output_index": 0, "item": item}), 5),
                frame(json!({"type": "response.completed", "response": completed(r, json!([item]), 1)}), 6),
            ])
            .collect();
        return sse(futures::stream::iter(frames));
    }
    text_stream(body, r, head, &id)
}

/// The message item's stream: `deltas` stamped deltas, `delay` apart on the stream's own
/// schedule (as the Chat Completions stream: a late delta does not push the next ones back).
fn text_stream(body: &Value, r: Value, head: [Bytes; 2], id: &str) -> hyper::Response<Body> {
    let model = body.get("model").and_then(Value::as_str).unwrap_or("bench");
    let (deltas, delay) = options(model);
    let msg = format!("msg_{}", id.trim_start_matches("resp_"));
    let stream = async_stream::stream! {
        for f in head {
            yield f;
        }
        let opened = json!({"id": msg, "type": "message", "status": "in_progress", "role": "assistant", "content": []});
        yield frame(json!({"type": "response.output_item.added", "output_index": 0, "item": opened}), 2);
        let part = json!({"type": "output_text", "text": "", "annotations": [], "logprobs": []});
        yield frame(json!({"type": "response.content_part.added", "item_id": msg, "output_index": 0, "content_index": 0, "part": part}), 3);
        let mut text = String::with_capacity(deltas * 20);
        let mut i = 0;
        for await d in stamps(deltas, delay) {
            text.push_str(&d);
            yield delta_frame(&msg, 4 + i, &d);
            i += 1;
        }
        let seq = 4 + deltas;
        yield frame(json!({"type": "response.output_text.done", "item_id": msg, "output_index": 0, "content_index": 0, "text": text, "logprobs": []}), seq);
        let part = json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []});
        yield frame(json!({"type": "response.content_part.done", "item_id": msg, "output_index": 0, "content_index": 0, "part": part}), seq + 1);
        let item = json!({"id": msg, "type": "message", "status": "completed", "role": "assistant", "content": [part]});
        yield frame(json!({"type": "response.output_item.done", "output_index": 0, "item": item}), seq + 2);
        yield frame(json!({"type": "response.completed", "response": completed(r, json!([item]), deltas)}), seq + 3);
    };
    sse(stream)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_line_names_the_tool_the_gateway_listed() {
        let body = json!({"input": [{"type": "message", "role": "user",
            "content": [{"type": "input_text", "text": "CALL echo {\"text\":\"hi\"}"}]}],
            "tools": [{"type": "function", "name": "mcp__bench__add"},
                      {"type": "function", "name": "mcp__bench__echo"}]});
        assert_eq!(
            wanted_call(&body),
            Some(("mcp__bench__echo".into(), "{\"text\":\"hi\"}".into()))
        );
        assert_eq!(
            wanted_call(&json!({"input": "CALL echo {}"})),
            Some(("echo".into(), "{}".into()))
        );
    }

    #[test]
    fn tool_results_or_plain_input_get_the_text() {
        let after_call = json!({"input": [
            {"type": "message", "role": "user", "content": "CALL echo {}"},
            {"type": "function_call", "call_id": "c", "name": "echo", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c", "output": "hi"}]});
        assert_eq!(wanted_call(&after_call), None);
        assert_eq!(wanted_call(&json!({"input": "hi"})), None);
    }

    #[test]
    fn a_delta_frame_is_json_with_its_stamp() {
        let f = delta_frame("msg_1", 7, "@T123 ");
        let text = std::str::from_utf8(&f).unwrap();
        let data = text
            .strip_prefix("event: response.output_text.delta\ndata: ")
            .and_then(|d| d.strip_suffix("\n\n"))
            .unwrap();
        let v: Value = serde_json::from_str(data).unwrap();
        assert_eq!(v["delta"], "@T123 ");
        assert_eq!(v["sequence_number"], 7);
    }
}
