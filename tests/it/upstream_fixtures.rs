//! Recorded upstream transcripts (`fixtures/upstream`, real provider streams) through the upstream
//! parsers, the transcoder and the emitter: every one must become well-ordered Responses events
//! that carry the transcript's text, refusal, reasoning, tool calls and usage. Also checks that the
//! fake upstream replays those transcripts verbatim and that the relay's HTTP adapters read the
//! replays exactly as the parsers read the files.

use crate::fake_upstream;

use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use responses_relay::api::fold::Fold;
use responses_relay::api::id::IdSource;
use responses_relay::api::response::{ContentPart, ReasoningEcho, ResponseError};
use responses_relay::api::{Event, OutputItem, Response, ResponseStatus, Sequenced, Usage};
use responses_relay::eventlog::emitter::{Clock, Emitter, Ending, Immediate};
use responses_relay::eventlog::log::RunLog;
use responses_relay::run::transcode::{ToolMap, Transcoder};
use responses_relay::upstream::chat::ChunkParser;
use responses_relay::upstream::responses::EventParser;
use responses_relay::upstream::{
    FinishReason, ModelEvent, Timeouts, TurnRequest, TurnToolChoice, Upstream, UpstreamApi,
    UpstreamError,
};
use serde_json::{Map, Value, json};

// ---------------------------------------------------------------------------------------------
// Reading the transcripts (independently of the code under test)

fn fixtures_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/upstream")
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Api {
    Chat,
    Responses,
}

struct Transcript {
    /// Path relative to `fixtures/upstream`.
    name: String,
    api: Api,
    /// The JSON payloads in order (`[DONE]` and SSE comments left out).
    payloads: Vec<String>,
}

/// The `data:` payloads of an SSE body, read by eventsource-stream (the SSE rules: events end at
/// a blank line, comments start with `:`, one leading space after `data:` is dropped, data lines of
/// one event join with `\n`). Stops at `[DONE]`.
fn sse_payloads(text: &str) -> Vec<String> {
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

fn load(path: &Path) -> Transcript {
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
    let api = if first.get("type").is_some() {
        Api::Responses
    } else {
        Api::Chat
    };
    Transcript {
        name,
        api,
        payloads,
    }
}

fn all_transcripts() -> Vec<Transcript> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let p = entry.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else {
                out.push(p);
            }
        }
    }
    let mut paths = Vec::new();
    walk(&fixtures_dir(), &mut paths);
    paths.sort();
    paths.iter().map(|p| load(p)).collect()
}

fn transcripts(api: Api) -> Vec<Transcript> {
    all_transcripts()
        .into_iter()
        .filter(|t| t.api == api)
        .collect()
}

/// What a transcript says the model did, read straight from its JSON.
#[derive(Debug, Default, PartialEq)]
struct Expected {
    text: String,
    refusal: String,
    reasoning: String,
    /// (name, arguments) in call order.
    calls: Vec<(String, String)>,
    usage: Option<Usage>,
    /// The first finish reason (chat) or the terminal event's kind (responses).
    finish: Option<String>,
    /// The message of an in-stream error.
    error: Option<String>,
}

fn u(v: &Value, p: &str) -> u64 {
    v.pointer(p).and_then(Value::as_u64).unwrap_or(0)
}

fn chat_expected(t: &Transcript) -> Expected {
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

fn responses_expected(t: &Transcript) -> Expected {
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

// ---------------------------------------------------------------------------------------------
// Running a transcript through parser → transcoder → emitter

fn created_response() -> Response {
    Response {
        id: "resp_recorded".into(),
        object: "response".into(),
        created_at: 0,
        completed_at: None,
        status: ResponseStatus::InProgress,
        background: false,
        error: None,
        incomplete_details: None,
        instructions: None,
        max_output_tokens: None,
        max_tool_calls: None,
        model: "recorded".into(),
        output: Vec::new(),
        parallel_tool_calls: true,
        previous_response_id: None,
        reasoning: ReasoningEcho::default(),
        store: false,
        temperature: 1.0,
        top_p: 1.0,
        presence_penalty: 0.0,
        frequency_penalty: 0.0,
        top_logprobs: 0,
        text: json!({"format": {"type": "text"}}),
        tool_choice: json!("auto"),
        tools: Vec::new(),
        truncation: "disabled".into(),
        usage: None,
        user: None,
        metadata: Map::new(),
        service_tier: "default".into(),
        safety_identifier: None,
        prompt_cache_key: None,
        prompt_cache_retention: None,
        conversation: None,
    }
}

/// The model events a parser makes of a transcript, and the error that stopped it (if any).
fn parse_all(t: &Transcript) -> (Vec<ModelEvent>, Option<UpstreamError>) {
    let mut events = Vec::new();
    let mut chat = ChunkParser::new();
    let mut resp = EventParser::new();
    for p in &t.payloads {
        let r = match t.api {
            Api::Chat => chat.parse(p, &mut events),
            Api::Responses => resp.parse(p, &mut events),
        };
        if let Err(e) = r {
            return (events, Some(e));
        }
    }
    (events, None)
}

struct Outcome {
    response: Response,
    finish: Option<FinishReason>,
    error: Option<UpstreamError>,
}

/// Drives the events through a transcoder and emitter as the agent loop does, then checks the
/// log: sequence numbers 0..n, every JSON line deserializes and re-folds into the same Response.
fn run(t: &Transcript) -> Outcome {
    let (events, error) = parse_all(t);
    let log = Arc::new(RunLog::new());
    let mut em = Emitter::new(
        log.clone(),
        Arc::new(Immediate),
        IdSource::sequential(),
        Clock::Fixed(0),
    );
    em.emit(Event::Created {
        response: Box::new(created_response()),
    });
    em.emit(Event::InProgress {
        response: Box::new(em.snapshot()),
    });
    let mut tc = Transcoder::new();
    let tools = ToolMap::new();
    for ev in events {
        tc.on(ev, &mut em, &tools);
    }
    if error.is_some() {
        tc.on(ModelEvent::Finish(FinishReason::Length), &mut em, &tools);
    }
    let outcome = tc.finish(&mut em);
    let ending = match (&error, outcome.finish) {
        (Some(e), _) => Ending::Failed(ResponseError {
            code: "server_error".into(),
            message: e.to_string(),
        }),
        (None, Some(FinishReason::Length)) => Ending::Incomplete("max_output_tokens".into()),
        (None, Some(FinishReason::ContentFilter)) => Ending::Incomplete("content_filter".into()),
        (None, _) => Ending::Completed,
    };
    let finished = em.finish(ending, outcome.usage.clone());

    let entries = log.entries_from(0);
    assert!(log.is_finished(), "{}: the log is not finished", t.name);
    let mut fold = Fold::new();
    for (i, entry) in entries.iter().enumerate() {
        assert_eq!(
            entry.seq, i as u64,
            "{}: log entry {i} has seq {}",
            t.name, entry.seq
        );
        let s: Sequenced = serde_json::from_slice(&entry.json()).unwrap_or_else(|e| {
            panic!(
                "{}: entry {i} is not an event ({e}): {}",
                t.name,
                String::from_utf8_lossy(&entry.json())
            )
        });
        assert_eq!(
            s.sequence_number, i as u64,
            "{}: entry {i} has sequence_number {}",
            t.name, s.sequence_number
        );
        assert_eq!(
            entry.kind(),
            s.event.kind(),
            "{}: entry {i}'s event line",
            t.name
        );
        fold.apply(&s.event)
            .unwrap_or_else(|e| panic!("{}: re-folding entry {i}: {e}", t.name));
    }
    assert!(
        fold.is_terminal(),
        "{}: the log does not end with a terminal event",
        t.name
    );
    let refolded = fold.into_response().expect("created");
    assert_eq!(
        refolded, finished,
        "{}: the re-folded Response differs from the emitted one",
        t.name
    );
    Outcome {
        response: finished,
        finish: outcome.finish,
        error,
    }
}

fn refusal_of(r: &Response) -> String {
    let mut s = String::new();
    for item in &r.output {
        if let OutputItem::Message(m) = item {
            for p in &m.content {
                if let ContentPart::Refusal { refusal } = p {
                    s.push_str(refusal);
                }
            }
        }
    }
    s
}

fn reasoning_of(r: &Response) -> String {
    let mut s = String::new();
    for item in &r.output {
        if let OutputItem::Reasoning(x) = item {
            for p in &x.content {
                if let ContentPart::ReasoningText { text } = p {
                    s.push_str(text);
                }
            }
        }
    }
    s
}

fn calls_of(r: &Response) -> Vec<(String, String)> {
    r.output
        .iter()
        .filter_map(|i| match i {
            OutputItem::FunctionCall(f) => Some((f.name.clone(), f.arguments.clone())),
            _ => None,
        })
        .collect()
}

/// What the relay made of the transcript, in the same shape as [`Expected`].
fn actual(t: &Transcript, o: &Outcome, expected: &Expected) -> Expected {
    let r = &o.response;
    let finish = match t.api {
        Api::Chat => expected
            .finish
            .as_ref()
            .and(o.finish)
            .map(|f| format!("{f:?}")),
        Api::Responses => expected
            .finish
            .as_ref()
            .and(Some(format!("response.{}", status_word(r.status)))),
    };
    Expected {
        text: r.output_text(),
        refusal: refusal_of(r),
        reasoning: reasoning_of(r),
        calls: calls_of(r),
        usage: if expected.usage.is_some() {
            r.usage.clone()
        } else {
            None
        },
        finish,
        error: o.error.as_ref().map(|e| match e {
            UpstreamError::Status { message, .. } => message.clone(),
            other => other.to_string(),
        }),
    }
}

fn status_word(s: ResponseStatus) -> &'static str {
    match s {
        ResponseStatus::Completed => "completed",
        ResponseStatus::Incomplete => "incomplete",
        ResponseStatus::Failed => "failed",
        _ => "other",
    }
}

/// The expected values with the chat finish reason in parser terms.
fn normalized(t: &Transcript, mut e: Expected) -> Expected {
    if t.api == Api::Chat {
        e.finish = e.finish.map(|f| format!("{:?}", FinishReason::parse(&f)));
    }
    e
}

/// Runs `check` on every transcript, collecting failures (panics included) so one report names
/// every transcript that breaks.
fn check_all(ts: &[Transcript], check: impl Fn(&Transcript)) {
    let mut failures = Vec::new();
    for t in ts {
        if let Err(p) = std::panic::catch_unwind(AssertUnwindSafe(|| check(t))) {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            failures.push(format!("{}: {msg}", t.name));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} transcripts failed:\n{}",
        failures.len(),
        ts.len(),
        failures.join("\n\n")
    );
}

/// The set exercises every kind of output, so the comparisons cannot pass vacuously.
fn assert_covers(ts: &[Transcript], expected: fn(&Transcript) -> Expected) {
    let all: Vec<Expected> = ts.iter().map(expected).collect();
    assert!(
        all.iter().any(|e| !e.text.is_empty()),
        "no transcript with text"
    );
    assert!(
        all.iter().any(|e| !e.refusal.is_empty()),
        "no transcript with a refusal"
    );
    assert!(
        all.iter().any(|e| !e.reasoning.is_empty()),
        "no transcript with reasoning"
    );
    assert!(
        all.iter().any(|e| e.calls.len() >= 2),
        "no transcript with parallel calls"
    );
    assert!(
        all.iter().any(|e| e.usage.is_some()),
        "no transcript with usage"
    );
}

fn check_transcript(t: &Transcript) {
    let expected = match t.api {
        Api::Chat => chat_expected(t),
        Api::Responses => responses_expected(t),
    };
    let o = run(t);
    let got = actual(t, &o, &expected);
    let expected = normalized(t, expected);
    if expected.usage.is_none() {
        assert_eq!(
            o.response.usage,
            Some(Usage::default()),
            "{}: usage without a usage report",
            t.name
        );
    }
    assert_eq!(
        got, expected,
        "{}: what the relay made of the transcript differs from it",
        t.name
    );
}

// ---------------------------------------------------------------------------------------------
// Tests

#[test]
fn every_recorded_chat_stream_becomes_well_ordered_events() {
    let ts = transcripts(Api::Chat);
    assert!(
        ts.len() >= 21,
        "expected every chat transcript, found {}",
        ts.len()
    );
    assert!(
        ts.iter()
            .any(|t| t.name.ends_with(".llama-stack-recording.json"))
    );
    assert_covers(&ts, chat_expected);
    check_all(&ts, check_transcript);
}

#[test]
fn every_recorded_responses_stream_becomes_well_ordered_events() {
    let ts = transcripts(Api::Responses);
    assert!(
        ts.len() >= 9,
        "expected every Responses transcript, found {}",
        ts.len()
    );
    assert_covers(&ts, responses_expected);
    check_all(&ts, check_transcript);
}

#[test]
fn a_recorded_mid_stream_error_fails_the_response() {
    let t = load(&fixtures_dir().join("openai-responses/error-response-failed.chunks.txt"));
    let o = run(&t);
    assert!(
        matches!(o.error, Some(UpstreamError::Status { .. })),
        "{:?}",
        o.error
    );
    assert_eq!(o.response.status, ResponseStatus::Failed);
}

fn test_timeouts() -> Timeouts {
    Timeouts {
        retries: 0,
        connect: Duration::from_secs(5),
        first_byte: Duration::from_secs(10),
        idle: Duration::from_secs(10),
    }
}

fn turn(model: &str) -> TurnRequest {
    TurnRequest {
        model: model.into(),
        instructions: None,
        items: Vec::new(),
        tools: Vec::new(),
        tool_choice: TurnToolChoice::Auto,
        parallel_tool_calls: true,
        max_output_tokens: None,
        temperature: None,
        top_p: None,
        text_format: None,
        reasoning_effort: None,
        user: None,
        client_bearer: None,
        responses_only: Default::default(),
    }
}

async fn start_fake() -> fake_upstream::FakeUpstream {
    responses_relay::install_tls();
    fake_upstream::start("127.0.0.1:0".parse().unwrap(), fixtures_dir())
        .await
        .expect("fake upstream starts")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replayed_transcripts_reach_the_adapters_exactly_as_recorded() {
    let fake = start_fake().await;
    let mut failures = Vec::new();
    for t in all_transcripts() {
        let api = match t.api {
            Api::Chat => UpstreamApi::Chat,
            Api::Responses => UpstreamApi::Responses,
        };
        let upstream = Upstream::new(api, &fake.base_url(), None, test_timeouts());
        let (want, want_err) = parse_all(&t);
        if t.api == Api::Responses && want_err.is_none() {
            // The Responses adapter stops at the terminal event; nothing follows it in these files.
            assert!(
                want.last()
                    .is_some_and(|e| matches!(e, ModelEvent::Finish(_))),
                "{}",
                t.name
            );
        }
        let req = turn(&format!("replay:{}", t.name));
        let mut stream = match upstream.open(&req, &req.model).await {
            Ok(s) => s,
            Err(e) => {
                failures.push(format!("{}: open failed: {e}", t.name));
                continue;
            }
        };
        let mut got = Vec::new();
        let mut got_err = None;
        while let Some(item) = stream.next().await {
            match item {
                Ok(ev) => got.push(ev),
                Err(e) => {
                    got_err = Some(e);
                    break;
                }
            }
        }
        if got != want || got_err.is_some() != want_err.is_some() {
            failures.push(format!(
                "{}: over HTTP {got:?} / {got_err:?}\nfrom the file {want:?} / {want_err:?}",
                t.name
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_transcripts_replay_byte_for_byte_on_their_own_route_only() {
    let fake = start_fake().await;
    let http = reqwest::Client::new();
    for t in all_transcripts()
        .into_iter()
        .filter(|t| t.name.ends_with(".sse"))
    {
        let (route, other) = match t.api {
            Api::Chat => ("chat/completions", "responses"),
            Api::Responses => ("responses", "chat/completions"),
        };
        let body = json!({"model": format!("replay:{}", t.name), "stream": true, "messages": [], "input": []});
        let resp = http
            .post(format!("{}/{route}", fake.base_url()))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "{}", t.name);
        assert_eq!(resp.headers()["content-type"], "text/event-stream");
        let bytes = resp.bytes().await.unwrap();
        let file = std::fs::read(fixtures_dir().join(&t.name)).unwrap();
        assert!(
            bytes == file,
            "{}: the replay differs from the recording",
            t.name
        );
        let wrong = http
            .post(format!("{}/{other}", fake.base_url()))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(wrong.status(), 400, "{} on /{other}", t.name);
    }
    let missing = json!({"model": "replay:nope/missing.sse", "stream": true, "messages": []});
    let resp = http
        .post(format!("{}/chat/completions", fake.base_url()))
        .json(&missing)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
    let escape = json!({"model": "replay:../Cargo.toml", "stream": true, "messages": []});
    let resp = http
        .post(format!("{}/chat/completions", fake.base_url()))
        .json(&escape)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scripted_model_speaks_both_wire_formats_the_adapters_read() {
    let fake = start_fake().await;
    for api in [UpstreamApi::Chat, UpstreamApi::Responses] {
        let upstream = Upstream::new(api, &fake.base_url(), None, test_timeouts());
        let mut req = turn("fake-model?deltas=3&reasoning=2");
        req.items = vec![
            serde_json::from_value(json!({"type": "message", "role": "user", "content": "hi"}))
                .unwrap(),
        ];
        let events: Vec<ModelEvent> = upstream
            .open(&req, &req.model)
            .await
            .unwrap()
            .map(|e| e.unwrap())
            .collect()
            .await;
        let text: String = events
            .iter()
            .filter_map(|e| {
                if let ModelEvent::Text(t) = e {
                    Some(t.as_str())
                } else {
                    None
                }
            })
            .collect();
        let reasoning: String = events
            .iter()
            .filter_map(|e| {
                if let ModelEvent::Reasoning(t) = e {
                    Some(t.as_str())
                } else {
                    None
                }
            })
            .collect();
        assert_eq!(text, "Hello! You said: hi", "{api:?}");
        assert_eq!(reasoning, "think think ", "{api:?}");
        let usage = events.iter().find_map(|e| {
            if let ModelEvent::Usage(u) = e {
                Some(u.clone())
            } else {
                None
            }
        });
        let usage = usage.unwrap_or_else(|| panic!("{api:?}: no usage"));
        assert_eq!(
            (usage.input_tokens, usage.output_tokens, usage.total_tokens),
            (10, 5, 15),
            "{api:?}"
        );
        assert!(
            events.contains(&ModelEvent::Finish(FinishReason::Stop)),
            "{api:?}: {events:?}"
        );

        let mut req = turn("fake-model");
        req.tools = vec![responses_relay::upstream::FunctionDef {
            name: "math__add".into(),
            description: String::new(),
            parameters: std::sync::Arc::new(json!({"type": "object"})),
            strict: None,
            custom: None,
        }];
        req.items = vec![
            serde_json::from_value(json!({"type": "message", "role": "user", "content": "CALL add {\"a\":2,\"b\":3}\nCALL other {}"}))
                .unwrap(),
        ];
        let events: Vec<ModelEvent> = upstream
            .open(&req, &req.model)
            .await
            .unwrap()
            .map(|e| e.unwrap())
            .collect()
            .await;
        let mut calls: Vec<(String, String)> = Vec::new();
        for e in &events {
            if let ModelEvent::ToolCall {
                index,
                name,
                arguments,
                ..
            } = e
            {
                let i = *index as usize;
                if calls.len() <= i {
                    calls.resize(i + 1, (String::new(), String::new()));
                }
                if let Some(n) = name {
                    calls[i].0 = n.clone();
                }
                calls[i].1.push_str(arguments);
            }
        }
        assert_eq!(
            calls,
            vec![
                ("math__add".to_string(), r#"{"a":2,"b":3}"#.to_string()),
                ("other".to_string(), "{}".to_string())
            ],
            "{api:?}"
        );
        assert!(
            events.contains(&ModelEvent::Finish(FinishReason::ToolCalls)),
            "{api:?}: {events:?}"
        );
    }
    let recorded = fake.requests();
    assert_eq!(recorded.len(), 4);
    assert_eq!(recorded[0].path, "/v1/chat/completions");
    assert_eq!(
        recorded[1].body["messages"][0]["content"]
            .as_str()
            .map(|s| s.starts_with("CALL add")),
        Some(true)
    );
    assert_eq!(recorded[2].path, "/v1/responses");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_goes_away_ends_the_fake_stream() {
    let fake = start_fake().await;
    let upstream = Upstream::new(UpstreamApi::Chat, &fake.base_url(), None, test_timeouts());
    let req = turn("fake-model?fault=stall");
    let mut stream = upstream.open(&req, &req.model).await.unwrap();
    // Two deltas arrive, then nothing.
    let mut texts = 0;
    while texts < 2 {
        if let Some(Ok(ModelEvent::Text(_))) = stream.next().await {
            texts += 1;
        }
    }
    assert_eq!(fake.open_streams(), 1);
    drop(stream);
    assert!(
        fake.wait_open_streams(0, Duration::from_secs(5)).await,
        "the stalled stream is still open"
    );
}

/// Inputs the fuzzer found (fuzz/seeds/*/…overflow*): absurd counts and indices from an upstream
/// must not overflow (a panic in debug builds, silent wrap-around in release builds).
#[test]
fn absurd_usage_and_indices_from_an_upstream_saturate_instead_of_overflowing() {
    use responses_relay::api::Usage;
    use responses_relay::upstream::ModelEvent;
    let mut total = Usage {
        input_tokens: u64::MAX - 1,
        output_tokens: u64::MAX,
        total_tokens: u64::MAX,
        ..Usage::default()
    };
    total.add(&Usage {
        input_tokens: 5,
        output_tokens: 5,
        total_tokens: 10,
        ..Usage::default()
    });
    assert_eq!(
        (total.input_tokens, total.output_tokens, total.total_tokens),
        (u64::MAX, u64::MAX, u64::MAX)
    );

    let mut parser = responses_relay::upstream::chat::ChunkParser::new();
    let mut out = Vec::new();
    let huge = format!(
        r#"{{"choices":[],"usage":{{"prompt_tokens":{},"completion_tokens":7}}}}"#,
        u64::MAX
    );
    parser.parse(&huge, &mut out).unwrap();
    assert!(matches!(&out[0], ModelEvent::Usage(u) if u.total_tokens == u64::MAX));
    out.clear();
    let max_index = format!(
        r#"{{"choices":[{{"delta":{{"tool_calls":[{{"index":{},"id":"a","function":{{"name":"f","arguments":""}}}}]}}}}]}}"#,
        u32::MAX
    );
    parser.parse(&max_index, &mut out).unwrap();
    parser.parse(r#"{"choices":[{"delta":{"tool_calls":[{"id":"b","function":{"name":"g","arguments":""}}]}}]}"#, &mut out).unwrap();
    assert_eq!(out.len(), 2);

    let mut events = responses_relay::upstream::responses::EventParser::new();
    let mut out = Vec::new();
    let added = |name: &str| {
        format!(
            r#"{{"type":"response.output_item.added","output_index":0,"item":{{"type":"function_call","call_id":"c","name":"{name}","arguments":""}}}}"#
        )
    };
    events.parse(&added("f"), &mut out).unwrap();
    events.parse(&added("g"), &mut out).unwrap();
    let indices: Vec<u32> = out
        .iter()
        .filter_map(|e| match e {
            ModelEvent::ToolCall { index, .. } => Some(*index),
            _ => None,
        })
        .collect();
    assert_eq!(
        indices,
        [0, 1],
        "a repeated output_index must not merge two calls"
    );
}

#[test]
fn chat_tool_calls_are_told_apart_by_index_and_by_id() {
    use responses_relay::upstream::ModelEvent;
    let calls = |chunks: &[&str]| -> Vec<(u32, Option<String>, String)> {
        let mut parser = ChunkParser::new();
        let mut out = Vec::new();
        for c in chunks {
            parser
                .parse(
                    &format!(r#"{{"choices":[{{"delta":{{"tool_calls":[{c}]}}}}]}}"#),
                    &mut out,
                )
                .unwrap();
        }
        out.into_iter()
            .filter_map(|e| match e {
                ModelEvent::ToolCall {
                    index,
                    name,
                    arguments,
                    ..
                } => Some((index, name, arguments)),
                _ => None,
            })
            .collect()
    };
    let f = |name: &str| Some(name.to_string());
    // Distinct indices (OpenAI, vLLM): each its own call, continued by index alone.
    assert_eq!(
        calls(&[
            r#"{"index":0,"id":"a","function":{"name":"f","arguments":""}}"#,
            r#"{"index":0,"function":{"arguments":"{}"}}"#,
            r#"{"index":1,"id":"b","function":{"name":"g","arguments":"{"}}"#,
            r#"{"index":1,"function":{"arguments":"}"}}"#,
        ]),
        [
            (0, f("f"), "".into()),
            (0, None, "{}".into()),
            (1, f("g"), "{".into()),
            (1, None, "}".into())
        ]
    );
    // One index, told apart by id (Ollama, SGLang); a repeated id is the same call.
    assert_eq!(
        calls(&[
            r#"{"index":0,"id":"a","function":{"name":"f","arguments":"{"}}"#,
            r#"{"index":0,"id":"a","function":{"arguments":"}"}}"#,
            r#"{"index":0,"id":"b","function":{"name":"g","arguments":"{"}}"#,
            r#"{"index":0,"function":{"arguments":"}"}}"#,
        ]),
        [
            (0, f("f"), "{".into()),
            (0, None, "}".into()),
            (1, f("g"), "{".into()),
            (1, None, "}".into())
        ]
    );
    // A fresh id on every delta of one call (Poolside, older mlx servers): argument deltas name
    // no function, so they continue the call at their index.
    assert_eq!(
        calls(&[
            r#"{"index":0,"id":"a","function":{"name":"f","arguments":""}}"#,
            r#"{"index":0,"id":"b","function":{"arguments":"{\"x\":"}}"#,
            r#"{"index":0,"id":"c","function":{"arguments":"1}"}}"#,
        ]),
        [
            (0, f("f"), "".into()),
            (0, None, "{\"x\":".into()),
            (0, None, "1}".into())
        ]
    );
    // No index at all: a new id naming a function starts a call, a known id continues its call,
    // any other delta the latest call.
    assert_eq!(
        calls(&[
            r#"{"id":"a","function":{"name":"f","arguments":"{"}}"#,
            r#"{"function":{"arguments":"}"}}"#,
            r#"{"id":"b","function":{"name":"g","arguments":"{}"}}"#,
            r#"{"id":"a","function":{"arguments":""}}"#,
            r#"{"id":"z","function":{"arguments":" "}}"#,
        ]),
        [
            (0, f("f"), "{".into()),
            (0, None, "}".into()),
            (1, f("g"), "{}".into()),
            (0, None, "".into()),
            (0, None, " ".into())
        ]
    );
}

#[test]
fn turn_bodies_carry_each_tool_whole_in_each_wire_format() {
    use responses_relay::upstream::{FunctionDef, chat, responses};
    let schema = json!({"type": "object", "properties": {"q": {"type": "string", "description": "ü \"quoted\""}}, "required": ["q"]});
    let mut req = turn("m");
    req.tools = vec![
        FunctionDef {
            name: "s__find".into(),
            description: "Find.".into(),
            parameters: Arc::new(schema.clone()),
            strict: Some(true),
            custom: None,
        },
        FunctionDef {
            name: "plain".into(),
            description: String::new(),
            parameters: Arc::new(json!({"type": "object"})),
            strict: None,
            custom: None,
        },
    ];
    req.tool_choice = TurnToolChoice::Required;
    fn body(b: &impl serde::Serialize) -> Value {
        serde_json::to_value(b).unwrap()
    }
    let chat = body(&chat::request_body(&req));
    assert_eq!(
        chat["tools"],
        json!([
            {"type": "function", "function": {"name": "s__find", "description": "Find.", "parameters": schema, "strict": true}},
            {"type": "function", "function": {"name": "plain", "description": "", "parameters": {"type": "object"}}},
        ])
    );
    assert_eq!(
        (
            chat["tool_choice"].clone(),
            chat["parallel_tool_calls"].clone(),
            chat["model"].clone()
        ),
        (json!("required"), json!(true), json!("m"))
    );
    let resp = body(&responses::request_body(&req));
    assert_eq!(
        resp["tools"],
        json!([
            {"type": "function", "name": "s__find", "description": "Find.", "parameters": schema, "strict": true},
            {"type": "function", "name": "plain", "description": "", "parameters": {"type": "object"}, "strict": false},
        ])
    );
    assert_eq!(
        (resp["tool_choice"].clone(), resp["store"].clone()),
        (json!("required"), json!(false))
    );
    // No tools: no `tools`, `tool_choice` or `parallel_tool_calls` key at all.
    req.tools.clear();
    for b in [
        body(&chat::request_body(&req)),
        body(&responses::request_body(&req)),
    ] {
        let keys: Vec<&String> = b.as_object().unwrap().keys().collect();
        assert!(
            !keys
                .iter()
                .any(|k| ["tools", "tool_choice", "parallel_tool_calls"].contains(&k.as_str())),
            "{keys:?}"
        );
    }
}
