//! The Chat Completions writer: a script as `chat.completion.chunk` frames (with the options'
//! quirks and faults) or as one `chat.completion`.

use bytes::Bytes;
use serde_json::{Value, json};

use super::options::{Fault, Opts};
use super::script::{Output, Script};
use super::sse::{DONE, Frames, Tail, data_frame};
use super::unix_now;

fn chat_usage(s: &Script) -> Value {
    json!({
        "prompt_tokens": s.prompt_tokens,
        "completion_tokens": s.completion_tokens,
        "total_tokens": s.prompt_tokens + s.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": s.reasoning.len()},
    })
}

fn chat_finish_reason(s: &Script) -> &'static str {
    match (&s.output, s.length) {
        (_, true) => "length",
        (Output::Calls(_), false) => "tool_calls",
        _ => "stop",
    }
}

/// The frames of a streamed chat answer.
pub(super) fn chat_frames(
    s: &Script,
    o: &Opts,
    model: &str,
    serial: u64,
    include_usage: bool,
) -> (Vec<Bytes>, Tail) {
    // Every chunk shares this head; only the choice and usage differ.
    let head = format!(
        "{{\"id\":\"chatcmpl-fake{serial}\",\"object\":\"chat.completion.chunk\",\"created\":{},\"model\":{},\"system_fingerprint\":\"fp_fake\",\"choices\":[",
        unix_now(),
        Value::String(model.to_string())
    );
    let chunk = |delta: &Value, finish: Option<&str>, usage: Option<&Value>| -> Bytes {
        let finish = finish
            .map(|f| format!("\"{f}\""))
            .unwrap_or_else(|| "null".into());
        let mut json = String::with_capacity(head.len() + 128);
        json.push_str(&head);
        json.push_str("{\"index\":0,\"delta\":");
        json.push_str(&delta.to_string());
        json.push_str(",\"logprobs\":null,\"finish_reason\":");
        json.push_str(&finish);
        json.push_str("}]");
        if let Some(u) = usage {
            json.push_str(",\"usage\":");
            json.push_str(&u.to_string());
        }
        json.push('}');
        data_frame(&json)
    };
    let mut f = Frames { frames: Vec::new() };
    f.frames.push((
        chunk(&json!({"role": "assistant", "content": ""}), None, None),
        false,
    ));
    for r in &s.reasoning {
        f.frames
            .push((chunk(&json!({"reasoning_content": r}), None, None), true));
    }
    match &s.output {
        Output::Text(_, pieces) => {
            for p in pieces {
                f.frames
                    .push((chunk(&json!({"content": p}), None, None), true));
            }
        }
        Output::Refusal(_, pieces) => {
            for p in pieces {
                f.frames
                    .push((chunk(&json!({"refusal": p}), None, None), true));
            }
        }
        Output::Calls(calls) => {
            for (i, c) in calls.iter().enumerate() {
                let index = if o.one_index { 0 } else { i };
                let first = json!({"tool_calls": [{"index": index, "id": format!("call_{i}"), "type": "function",
                    "function": {"name": c.name, "arguments": ""}}]});
                f.frames.push((chunk(&first, None, None), false));
                for p in &c.pieces {
                    let d = json!({"tool_calls": [{"index": index, "function": {"arguments": p}}]});
                    f.frames.push((chunk(&d, None, None), true));
                }
            }
        }
    }
    let usage = chat_usage(s);
    let finish = chat_finish_reason(s);
    if o.usage_on_finish {
        f.frames
            .push((chunk(&json!({}), Some(finish), Some(&usage)), false));
    } else {
        f.frames
            .push((chunk(&json!({}), Some(finish), None), false));
        if include_usage {
            let mut json = head.clone();
            json.push_str("],\"usage\":");
            json.push_str(&usage.to_string());
            json.push('}');
            f.frames.push((data_frame(&json), false));
        }
    }
    f.frames.push((Bytes::from_static(DONE), false));
    f.finish(o.fault, |_| match o.fault {
        Fault::Malformed => vec![Bytes::from_static(b"data: {not json\n\n")],
        Fault::ErrorChunk => vec![
            data_frame(r#"{"error":{"message":"overloaded","code":503}}"#),
            Bytes::from_static(DONE),
        ],
        _ => Vec::new(),
    })
}

/// The non-streaming `chat.completion`.
pub(super) fn chat_completion(s: &Script, model: &str, serial: u64) -> Value {
    let mut message = json!({"role": "assistant", "content": null, "refusal": null});
    match &s.output {
        Output::Text(t, _) => message["content"] = json!(t),
        Output::Refusal(t, _) => message["refusal"] = json!(t),
        Output::Calls(calls) => {
            message["tool_calls"] = Value::Array(
                calls
                    .iter()
                    .enumerate()
                    .map(|(i, c)| {
                        json!({"id": format!("call_{i}"), "type": "function",
                        "function": {"name": c.name, "arguments": c.arguments}})
                    })
                    .collect(),
            )
        }
    }
    if !s.reasoning.is_empty() {
        message["reasoning_content"] = json!(s.reasoning.concat());
    }
    json!({
        "id": format!("chatcmpl-fake{serial}"),
        "object": "chat.completion",
        "created": unix_now(),
        "model": model,
        "system_fingerprint": "fp_fake",
        "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": chat_finish_reason(s)}],
        "usage": chat_usage(s),
    })
}
