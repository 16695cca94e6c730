//! Reading the recorded transcripts and what each should become, independently of the code
//! under test.

use std::path::{Path, PathBuf};

use responses_relay::api::Usage;
use serde_json::Value;

pub(super) fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/upstream")
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Api {
    Chat,
    Responses,
    Anthropic,
    Gemini,
}

pub(super) struct Transcript {
    /// Path relative to `fixtures/upstream`.
    pub(super) name: String,
    pub(super) api: Api,
    /// The JSON payloads in order (`[DONE]` and SSE comments left out).
    pub(super) payloads: Vec<String>,
}

/// The `data:` payloads of an SSE body, read by eventsource-stream (the SSE rules: events end at
/// a blank line, comments start with `:`, one leading space after `data:` is dropped, data lines of
/// one event join with `\n`). Stops at `[DONE]`.
pub(super) fn sse_payloads(text: &str) -> Vec<String> {
    use eventsource_stream::Eventsource;
    use futures::StreamExt;
    let body = futures::stream::iter([Ok::<_, std::convert::Infallible>(bytes::Bytes::from(
        text.to_string(),
    ))]);
    let events: Vec<_> = futures::executor::block_on(body.eventsource().collect());
    events
        .into_iter()
        .map(|e| e.expect("the transcript is valid SSE").data)
        .take_while(|d| d.trim() != "[DONE]")
        .collect()
}

pub(super) fn load(path: &Path) -> Transcript {
    let name = path
        .strip_prefix(fixtures_dir())
        .unwrap()
        .to_string_lossy()
        .replace('\\', "/");
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{name}: {e}"));
    let payloads: Vec<String> = if name.ends_with(".sse") {
        sse_payloads(&text)
    } else if name.ends_with(".chunks.txt") {
        text.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(str::to_string)
            .collect()
    } else if name.ends_with(".json") {
        let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
        v.pointer("/response/body")
            .and_then(Value::as_array)
            .unwrap_or_else(|| panic!("{name}: no response.body"))
            .iter()
            .map(|c| {
                c.get("__data__")
                    .unwrap_or_else(|| panic!("{name}: a chunk without __data__"))
                    .to_string()
            })
            .collect()
    } else {
        panic!("{name}: unknown transcript format")
    };
    let first: Value =
        serde_json::from_str(&payloads[0]).unwrap_or_else(|e| panic!("{name}: first payload: {e}"));
    let gemini = ["candidates", "promptFeedback", "usageMetadata"];
    let api = match first.get("type").and_then(Value::as_str) {
        _ if gemini.iter().any(|k| first.get(k).is_some()) => Api::Gemini,
        Some(t) if t.starts_with("message_") => Api::Anthropic,
        Some(_) => Api::Responses,
        None => Api::Chat,
    };
    Transcript {
        name,
        api,
        payloads,
    }
}

pub(super) fn all_transcripts() -> Vec<Transcript> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let p = entry.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_none_or(|e| e != "md") {
                out.push(p);
            }
        }
    }
    let mut paths = Vec::new();
    walk(&fixtures_dir(), &mut paths);
    paths.sort();
    paths.iter().map(|p| load(p)).collect()
}

pub(super) fn transcripts(api: Api) -> Vec<Transcript> {
    all_transcripts()
        .into_iter()
        .filter(|t| t.api == api)
        .collect()
}

/// What a transcript says the model did, read straight from its JSON.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Expected {
    pub(super) text: String,
    pub(super) refusal: String,
    pub(super) reasoning: String,
    /// (name, arguments) in call order.
    pub(super) calls: Vec<(String, String)>,
    pub(super) usage: Option<Usage>,
    /// The first finish reason (chat) or the terminal event's kind (responses).
    pub(super) finish: Option<String>,
    /// The message of an in-stream error.
    pub(super) error: Option<String>,
}

pub(super) fn u(v: &Value, p: &str) -> u64 {
    v.pointer(p).and_then(Value::as_u64).unwrap_or(0)
}

pub(super) fn chat_expected(t: &Transcript) -> Expected {
    let mut e = Expected::default();
    // index → position in e.calls
    let mut by_index: Vec<(u64, usize)> = Vec::new();
    for p in &t.payloads {
        let v: Value = serde_json::from_str(p).unwrap_or_else(|err| panic!("{}: {err}", t.name));
        if let Some(err) = v.get("error").filter(|e| e.is_object()) {
            e.error = Some(err["message"].as_str().unwrap_or_default().to_string());
            break;
        }
        for choice in v["choices"].as_array().into_iter().flatten() {
            let d = &choice["delta"];
            let s = |k: &str| d.get(k).and_then(Value::as_str).unwrap_or("");
            e.reasoning.push_str(if s("reasoning_content").is_empty() {
                s("reasoning")
            } else {
                s("reasoning_content")
            });
            e.text.push_str(s("content"));
            e.refusal.push_str(s("refusal"));
            for tc in d["tool_calls"].as_array().into_iter().flatten() {
                let index = tc["index"]
                    .as_u64()
                    .unwrap_or_else(|| panic!("{}: a tool call without index", t.name));
                let at = match by_index.iter().find(|(i, _)| *i == index) {
                    Some((_, at)) => *at,
                    None => {
                        by_index.push((index, e.calls.len()));
                        e.calls.push((String::new(), String::new()));
                        e.calls.len() - 1
                    }
                };
                let f = &tc["function"];
                if let Some(n) = f["name"].as_str().filter(|n| !n.is_empty())
                    && e.calls[at].0.is_empty()
                {
                    e.calls[at].0 = n.to_string();
                }
                e.calls[at]
                    .1
                    .push_str(f["arguments"].as_str().unwrap_or(""));
            }
            if let Some(r) = choice["finish_reason"].as_str()
                && e.finish.is_none()
            {
                e.finish = Some(r.to_string());
            }
        }
        if let Some(usage) = v.get("usage").filter(|u| u.is_object()) {
            let mut x = Usage {
                input_tokens: u(usage, "/prompt_tokens"),
                output_tokens: u(usage, "/completion_tokens"),
                ..Usage::default()
            };
            x.total_tokens = usage["total_tokens"]
                .as_u64()
                .unwrap_or(x.input_tokens + x.output_tokens);
            x.input_tokens_details.cached_tokens = u(usage, "/prompt_tokens_details/cached_tokens");
            x.output_tokens_details.reasoning_tokens =
                u(usage, "/completion_tokens_details/reasoning_tokens");
            e.usage = Some(x);
        }
    }
    e
}

pub(super) fn responses_expected(t: &Transcript) -> Expected {
    let mut e = Expected::default();
    for p in &t.payloads {
        let v: Value = serde_json::from_str(p).unwrap_or_else(|err| panic!("{}: {err}", t.name));
        let delta = || v["delta"].as_str().unwrap_or("").to_string();
        match v["type"].as_str().unwrap_or("") {
            "response.output_text.delta" => e.text.push_str(&delta()),
            "response.refusal.delta" => e.refusal.push_str(&delta()),
            "response.reasoning_text.delta" | "response.reasoning_summary_text.delta" => {
                e.reasoning.push_str(&delta())
            }
            "response.output_item.done" if v["item"]["type"] == "function_call" => {
                let item = &v["item"];
                e.calls.push((
                    item["name"].as_str().unwrap().to_string(),
                    item["arguments"].as_str().unwrap().to_string(),
                ));
            }
            kind @ ("response.completed" | "response.incomplete") => {
                let usage = &v["response"]["usage"];
                if usage.is_object() {
                    e.usage = Some(Usage {
                        input_tokens: u(usage, "/input_tokens"),
                        output_tokens: u(usage, "/output_tokens"),
                        total_tokens: u(usage, "/total_tokens"),
                        input_tokens_details: responses_relay::api::response::InputTokensDetails {
                            cached_tokens: u(usage, "/input_tokens_details/cached_tokens"),
                            cache_write_tokens: 0,
                        },
                        output_tokens_details:
                            responses_relay::api::response::OutputTokensDetails {
                                reasoning_tokens: u(
                                    usage,
                                    "/output_tokens_details/reasoning_tokens",
                                ),
                            },
                    });
                }
                e.finish = Some(kind.to_string());
                break;
            }
            "error" => {
                e.error = Some(
                    v.pointer("/error/message")
                        .or_else(|| v.get("message"))
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .into(),
                );
                break;
            }
            "response.failed" => {
                e.error = Some(
                    v.pointer("/response/error/message")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .into(),
                );
                break;
            }
            _ => {}
        }
    }
    e
}

/// What an Anthropic Messages stream says, read straight from its events: Anthropic's counts as
/// OpenAI's (input with the cache's tokens, `cached_tokens` those read), the finish as the
/// Response's terminal event (`max_tokens` and `refusal` end it incomplete).
pub(super) fn anthropic_expected(t: &Transcript) -> Expected {
    let mut e = Expected::default();
    let mut usage = serde_json::Map::new();
    let mut note = |u: &Value| {
        for (k, v) in u.as_object().into_iter().flatten() {
            usage.insert(k.clone(), v.clone());
        }
    };
    let mut calls: Vec<(u64, usize)> = Vec::new();
    let mut stop = None;
    for p in &t.payloads {
        let v: Value = serde_json::from_str(p).unwrap_or_else(|err| panic!("{}: {err}", t.name));
        let d = &v["delta"];
        match v["type"].as_str().unwrap_or("") {
            "message_start" => note(&v["message"]["usage"]),
            "content_block_start" if v["content_block"]["type"] == "tool_use" => {
                calls.push((v["index"].as_u64().unwrap(), e.calls.len()));
                e.calls.push((
                    v["content_block"]["name"].as_str().unwrap().to_string(),
                    String::new(),
                ));
            }
            "content_block_delta" => match d["type"].as_str().unwrap_or("") {
                "text_delta" => e.text.push_str(d["text"].as_str().unwrap()),
                "thinking_delta" => e.reasoning.push_str(d["thinking"].as_str().unwrap()),
                "input_json_delta" => {
                    let at = calls.iter().find(|(i, _)| Some(*i) == v["index"].as_u64());
                    e.calls[at.unwrap().1]
                        .1
                        .push_str(d["partial_json"].as_str().unwrap());
                }
                _ => {}
            },
            "message_delta" => {
                stop = d["stop_reason"].as_str().map(str::to_string);
                note(&v["usage"]);
            }
            "message_stop" => {
                e.finish = Some(match stop.as_deref() {
                    Some("max_tokens" | "refusal") => "response.incomplete".into(),
                    _ => "response.completed".into(),
                });
            }
            "error" => {
                e.error = Some(v["error"]["message"].as_str().unwrap_or("").into());
                break;
            }
            _ => {}
        }
    }
    if !usage.is_empty() && e.error.is_none() {
        let n = |k: &str| usage.get(k).and_then(Value::as_u64).unwrap_or(0);
        let input =
            n("input_tokens") + n("cache_read_input_tokens") + n("cache_creation_input_tokens");
        let mut x = Usage {
            input_tokens: input,
            output_tokens: n("output_tokens"),
            total_tokens: input + n("output_tokens"),
            ..Usage::default()
        };
        x.input_tokens_details.cached_tokens = n("cache_read_input_tokens");
        x.input_tokens_details.cache_write_tokens = n("cache_creation_input_tokens");
        e.usage = Some(x);
    }
    e
}

/// What a Gemini stream says, read straight from its chunks: text and thought parts, function
/// calls (their `args` as JSON), the last `usageMetadata` as OpenAI counts (input with the tool
/// prompt, output with the thoughts), the finish as the Response's terminal event (a blocked
/// prompt, `MAX_TOKENS` and the blocked reasons end it incomplete).
pub(super) fn gemini_expected(t: &Transcript) -> Expected {
    let mut e = Expected::default();
    let (mut usage, mut finish, mut blocked) = (None, None, false);
    for p in &t.payloads {
        let v: Value = serde_json::from_str(p).unwrap_or_else(|err| panic!("{}: {err}", t.name));
        if let Some(err) = v.get("error") {
            e.error = Some(err["message"].as_str().unwrap_or("").into());
            break;
        }
        blocked |= v.pointer("/promptFeedback/blockReason").is_some();
        if let Some(u) = v.get("usageMetadata") {
            usage = Some(u.clone());
        }
        let parts = v
            .pointer("/candidates/0/content/parts")
            .and_then(Value::as_array);
        for part in parts.into_iter().flatten() {
            if let Some(c) = part.get("functionCall") {
                let name = c["name"].as_str().unwrap().to_string();
                e.calls
                    .push((name, serde_json::to_string(&c["args"]).unwrap()));
            } else if part["thought"] == true {
                e.reasoning.push_str(part["text"].as_str().unwrap_or(""));
            } else if let Some(text) = part["text"].as_str() {
                e.text.push_str(text);
            }
        }
        if let Some(r) = v
            .pointer("/candidates/0/finishReason")
            .and_then(Value::as_str)
        {
            finish = Some(r.to_string());
        }
    }
    if e.error.is_some() {
        return e;
    }
    let cut = matches!(
        finish.as_deref(),
        Some(
            "MAX_TOKENS"
                | "SAFETY"
                | "RECITATION"
                | "LANGUAGE"
                | "BLOCKLIST"
                | "PROHIBITED_CONTENT"
                | "SPII"
        )
    );
    e.finish = Some(
        if blocked || cut {
            "response.incomplete"
        } else {
            "response.completed"
        }
        .into(),
    );
    if let Some(u) = usage {
        let n = |k: &str| u[k].as_u64().unwrap_or(0);
        let input = n("promptTokenCount") + n("toolUsePromptTokenCount");
        let output = n("candidatesTokenCount") + n("thoughtsTokenCount");
        let mut x = Usage {
            input_tokens: input,
            output_tokens: output,
            total_tokens: input + output,
            ..Usage::default()
        };
        x.input_tokens_details.cached_tokens = n("cachedContentTokenCount");
        x.output_tokens_details.reasoning_tokens = n("thoughtsTokenCount");
        e.usage = Some(x);
    }
    e
}
