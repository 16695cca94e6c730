//! The replayer: `replay:FILE` models stream a recorded transcript from the fixtures directory
//! verbatim (`.sse`, `.chunks.txt`, or a llama-stack `.json` recording), each file read once and
//! kept. A file is only ever read from inside the fixtures directory.

use std::path::{Component, Path};
use std::sync::Arc;

use bytes::Bytes;
use hyper::{Response, StatusCode};
use serde_json::Value;

use super::options::Opts;
use super::routes::{Api, bad_request, error_response};
use super::sse::{DONE, Tail, data_frame, sse_response};
use super::{Body, State};

pub(super) struct Replay {
    pub(super) api: Api,
    pub(super) frames: Vec<Bytes>,
}

pub(super) async fn replay(
    state: &Arc<State>,
    api: Api,
    file: &str,
    opts: &Opts,
) -> Response<Body> {
    let cached = state
        .replays
        .lock()
        .expect("replays lock")
        .get(file)
        .cloned();
    let replay = match cached {
        Some(r) => r,
        None => match load_replay(&state.fixtures, file).await {
            Ok(r) => {
                let r = Arc::new(r);
                state
                    .replays
                    .lock()
                    .expect("replays lock")
                    .insert(file.to_string(), r.clone());
                r
            }
            Err((status, msg)) => {
                return error_response(
                    status,
                    &msg,
                    "invalid_request_error",
                    Some("model"),
                    Some("model_not_found"),
                );
            }
        },
    };
    if replay.api != api {
        let (what, route) = match replay.api {
            Api::Chat => ("a Chat Completions", "/v1/chat/completions"),
            Api::Responses => ("a Responses", "/v1/responses"),
            Api::Anthropic => ("an Anthropic Messages", "/v1/messages"),
            Api::Gemini => (
                "a Gemini",
                "/v1beta/models/MODEL:streamGenerateContent?alt=sse",
            ),
        };
        return bad_request(&format!(
            "replay file '{file}' is {what} transcript: POST it to {route}"
        ));
    }
    sse_response(
        state,
        replay.frames.clone(),
        opts.delay,
        Tail::End,
        opts.hold.clone(),
    )
}

async fn load_replay(dir: &Path, file: &str) -> Result<Replay, (StatusCode, String)> {
    let rel = Path::new(file);
    if file.is_empty() || rel.components().any(|c| !matches!(c, Component::Normal(_))) {
        return Err((
            StatusCode::BAD_REQUEST,
            format!("replay file '{file}' must be a relative path inside the fixtures"),
        ));
    }
    let bytes = tokio::fs::read(dir.join(rel)).await.map_err(|e| {
        (
            StatusCode::NOT_FOUND,
            format!("replay file '{file}' cannot be read: {e}"),
        )
    })?;
    let bad = |m: String| {
        (
            StatusCode::BAD_REQUEST,
            format!("replay file '{file}': {m}"),
        )
    };
    if file.ends_with(".sse") {
        let frames = split_sse(&bytes);
        let payloads: Vec<&[u8]> = frames.iter().flat_map(|f| data_lines(f)).collect();
        let api = detect_api(payloads.into_iter()).ok_or_else(|| bad("no JSON payload".into()))?;
        Ok(Replay { api, frames })
    } else if file.ends_with(".chunks.txt") {
        let text = std::str::from_utf8(&bytes).map_err(|e| bad(e.to_string()))?;
        let lines: Vec<&str> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        let api = detect_api(lines.iter().map(|l| l.as_bytes()))
            .ok_or_else(|| bad("no JSON payload".into()))?;
        let mut frames: Vec<Bytes> = match api {
            Api::Chat | Api::Gemini => lines.iter().map(|l| data_frame(l)).collect(),
            Api::Responses | Api::Anthropic => lines
                .iter()
                .map(|l| {
                    let kind = serde_json::from_str::<Value>(l)
                        .ok()
                        .and_then(|v| v.get("type").and_then(Value::as_str).map(str::to_string));
                    match kind {
                        Some(k) => Bytes::from(format!("event: {k}\ndata: {l}\n\n")),
                        None => data_frame(l),
                    }
                })
                .collect(),
        };
        if api == Api::Chat {
            frames.push(Bytes::from_static(DONE));
        }
        Ok(Replay { api, frames })
    } else if file.ends_with(".json") {
        // A llama-stack recording: `response.body[*].__data__` are the chunks.
        let v: Value = serde_json::from_slice(&bytes).map_err(|e| bad(e.to_string()))?;
        let chunks = v
            .pointer("/response/body")
            .and_then(Value::as_array)
            .ok_or_else(|| bad("no response.body list".into()))?;
        let mut frames: Vec<Bytes> = chunks
            .iter()
            .filter_map(|c| c.get("__data__"))
            .map(|d| data_frame(&d.to_string()))
            .collect();
        frames.push(Bytes::from_static(DONE));
        Ok(Replay {
            api: Api::Chat,
            frames,
        })
    } else {
        Err(bad(
            "expected a .sse, .chunks.txt or llama-stack .json file".into(),
        ))
    }
}

/// Splits an SSE body into events, each with its trailing blank line (as recorded).
fn split_sse(bytes: &[u8]) -> Vec<Bytes> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i + 1 < bytes.len() {
        if bytes[i] == b'\n' && bytes[i + 1] == b'\n' {
            out.push(Bytes::copy_from_slice(&bytes[start..i + 2]));
            start = i + 2;
            i += 2;
        } else {
            i += 1;
        }
    }
    if start < bytes.len() {
        out.push(Bytes::copy_from_slice(&bytes[start..]));
    }
    out
}

fn data_lines(frame: &[u8]) -> Vec<&[u8]> {
    frame
        .split(|b| *b == b'\n')
        .filter_map(|l| l.strip_prefix(b"data:"))
        .map(|l| l.strip_prefix(b" ").unwrap_or(l))
        .collect()
}

/// Which API a transcript belongs to, from its first JSON payload.
fn detect_api<'a>(payloads: impl Iterator<Item = &'a [u8]>) -> Option<Api> {
    for p in payloads {
        let Ok(v) = serde_json::from_slice::<Value>(p) else {
            continue;
        };
        match v.get("type").and_then(Value::as_str) {
            Some(t) if t.starts_with("message_") || t.starts_with("content_block_") => {
                return Some(Api::Anthropic);
            }
            Some(_) => return Some(Api::Responses),
            None => {}
        }
        if v.get("candidates").is_some() || v.get("usageMetadata").is_some() {
            return Some(Api::Gemini);
        }
        if v.get("choices").is_some() || v.get("object").is_some() {
            return Some(Api::Chat);
        }
    }
    None
}
