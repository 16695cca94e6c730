//! Recorded upstream transcripts (`fixtures/upstream`, real provider streams) through the upstream
//! parsers, the transcoder and the emitter: every one must become well-ordered Responses events
//! that carry the transcript's text, refusal, reasoning, tool calls and usage. Also checks that the
//! fake upstream replays those transcripts verbatim and that the relay's HTTP adapters read the
//! replays exactly as the parsers read the files.

mod pipeline;
mod transcripts;

use pipeline::*;
use transcripts::*;

use crate::fake_upstream;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use responses_relay::api::ResponseStatus;
use responses_relay::upstream::chat::ChunkParser;
use responses_relay::upstream::{
    FinishReason, ModelEvent, Timeouts, TurnRequest, TurnToolChoice, Upstream, UpstreamApi,
    UpstreamError,
};
use serde_json::{Value, json};

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
fn every_anthropic_stream_becomes_well_ordered_events() {
    let ts = transcripts(Api::Anthropic);
    assert!(
        ts.len() >= 7,
        "expected every Anthropic transcript, found {}",
        ts.len()
    );
    let all: Vec<Expected> = ts.iter().map(anthropic_expected).collect();
    assert!(all.iter().any(|e| !e.text.is_empty() && e.usage.is_some()));
    assert!(all.iter().any(|e| !e.reasoning.is_empty()));
    assert!(all.iter().any(|e| e.calls.len() >= 2));
    assert!(all.iter().any(|e| e.error.is_some()));
    check_all(&ts, check_transcript);
    // A refusal and a cut-off answer end incomplete, with OpenAI's reasons.
    for (file, reason) in [
        ("refusal.sse", "content_filter"),
        ("max-tokens.sse", "max_output_tokens"),
    ] {
        let o = run(&load(&fixtures_dir().join("anthropic").join(file)));
        assert_eq!(o.response.status, ResponseStatus::Incomplete, "{file}");
        let details = serde_json::to_value(&o.response.incomplete_details).unwrap();
        assert_eq!(details["reason"], reason, "{file}");
    }
    let o = run(&load(
        &fixtures_dir().join("anthropic/error-overloaded.sse"),
    ));
    assert_eq!(o.response.status, ResponseStatus::Failed);
}

#[test]
fn every_gemini_stream_becomes_well_ordered_events() {
    let ts = transcripts(Api::Gemini);
    assert!(
        ts.len() >= 10,
        "expected every Gemini transcript, found {}",
        ts.len()
    );
    let all: Vec<Expected> = ts.iter().map(gemini_expected).collect();
    assert!(all.iter().any(|e| !e.text.is_empty() && e.usage.is_some()));
    assert!(all.iter().any(|e| !e.reasoning.is_empty()));
    assert!(all.iter().any(|e| e.calls.len() >= 2));
    assert!(all.iter().any(|e| e.error.is_some()));
    check_all(&ts, check_transcript);
    // A blocked answer or prompt and a cut-off answer end incomplete, with OpenAI's reasons.
    for (file, reason) in [
        ("safety-blocked-answer.sse", "content_filter"),
        ("prompt-blocked.sse", "content_filter"),
        ("max-tokens.sse", "max_output_tokens"),
    ] {
        let o = run(&load(&fixtures_dir().join("gemini").join(file)));
        assert_eq!(o.response.status, ResponseStatus::Incomplete, "{file}");
        let details = serde_json::to_value(&o.response.incomplete_details).unwrap();
        assert_eq!(details["reason"], reason, "{file}");
    }
    let o = run(&load(&fixtures_dir().join("gemini/error-unavailable.sse")));
    assert_eq!(o.response.status, ResponseStatus::Failed);
    // Every signature is kept as a signed reasoning block, on what it came on.
    for (file, on) in [
        ("function-call-signature.sse", vec!["functionCall"]),
        ("parallel-function-calls.sse", vec!["functionCall"]),
        ("text-signature-last-part.sse", vec!["text"]),
    ] {
        let (events, _) = parse_all(&load(&fixtures_dir().join("gemini").join(file)));
        let signed: Vec<&str> = events
            .iter()
            .filter_map(|e| match e {
                ModelEvent::SignedReasoning(b) => b["gemini"].as_str(),
                _ => None,
            })
            .collect();
        assert_eq!(signed, on, "{file}");
    }
}

/// Each Anthropic and Gemini transcript's event log, compared byte for byte with
/// `fixtures/golden/upstream/<api>/<file>.jsonl` (`UPDATE_GOLDEN=1` rewrites them): the emitter's
/// ids and clock are deterministic here, so any change to what the relay makes of these streams
/// shows as a diff to review. (The transcoder here seals nothing, a seal's nonce being random: a
/// signed block's reasoning item shows without `encrypted_content`.)
#[test]
fn anthropic_and_gemini_streams_match_their_golden_event_logs() {
    let mut ts = transcripts(Api::Anthropic);
    ts.extend(transcripts(Api::Gemini));
    assert!(
        ts.len() >= 17,
        "expected every Anthropic and Gemini transcript"
    );
    check_all(&ts, |t| {
        let o = run(t);
        let events = o
            .log
            .iter()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let body = crate::support::SseBody {
            events,
            raw: o.log,
            done: true,
        };
        let name = t.name.strip_suffix(".sse").unwrap_or(&t.name);
        crate::support::golden(&format!("upstream/{name}"), &body);
    });
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
        signed_reasoning: Default::default(),
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
            Api::Anthropic => UpstreamApi::Anthropic,
            Api::Gemini => UpstreamApi::Gemini,
        };
        let upstream = Upstream::new(api, &fake.base_url(), None, test_timeouts());
        let (want, want_err) = parse_all(&t);
        if t.api != Api::Chat && want_err.is_none() {
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
            Api::Chat => ("chat/completions".to_string(), "responses"),
            Api::Responses => ("responses".into(), "chat/completions"),
            Api::Anthropic => ("messages".into(), "responses"),
            // The model in the path (`/` and `:` percent-encoded).
            Api::Gemini => (
                format!(
                    "models/replay%3A{}:streamGenerateContent?alt=sse",
                    t.name.replace('/', "%2F")
                ),
                "responses",
            ),
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

/// Every event of one turn of `upstream`, which must open and stream without error.
async fn model_events(upstream: &Upstream, req: &TurnRequest) -> Vec<ModelEvent> {
    let stream = upstream.open(req, &req.model).await.unwrap();
    stream.map(|e| e.unwrap()).collect().await
}

/// The tool calls among `events`, each (name, arguments) put together from its deltas by index.
fn tool_calls_of(events: &[ModelEvent]) -> Vec<(String, String)> {
    let mut calls: Vec<(String, String)> = Vec::new();
    for e in events {
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
    calls
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
        let events = model_events(&upstream, &req).await;
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
        let events = model_events(&upstream, &req).await;
        let calls = tool_calls_of(&events);
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
