//! An Anthropic upstream (issue #37): `--upstream-api anthropic` and `api = "anthropic"` drive
//! the fake upstream's `POST /v1/messages` with `x-api-key` and `anthropic-version`; text, images,
//! tools (MCP through the real MCP test server, functions with every `tool_choice`, parallel
//! calls), stop reasons, usage, signed thinking kept across tool calls (in a run, through
//! `previous_response_id`, and statelessly with `include`), retries, a mid-stream error, pings as
//! liveness, and `GET /v1/models`. The fake refuses a thinking block sent back altered, unsigned
//! or missing (400, as Anthropic does), so a lost signature fails these tests.

use std::time::Duration;

use responses_relay::upstream::UpstreamApi;
use serde_json::{Value, json};

use crate::fake_upstream::FakeUpstream;
use crate::mcp_test_server;
use crate::support::*;

const KEY: &str = "sk-ant-test-key";

/// The fake upstream and a relay driving it as an Anthropic upstream with [`KEY`].
async fn anthropic_relay() -> (FakeUpstream, Relay) {
    anthropic_relay_with(|_| {}).await
}

async fn anthropic_relay_with(
    change: impl FnOnce(&mut responses_relay::Config),
) -> (FakeUpstream, Relay) {
    let up = upstream().await;
    let relay = relay_for(&up, |c| {
        c.upstream_api = UpstreamApi::Anthropic;
        c.upstream_api_key = Some(responses_relay::config::Secret(KEY.into()));
        change(c);
    })
    .await;
    (up, relay)
}

/// The Messages requests the fake got, in order.
fn messages_requests(up: &FakeUpstream) -> Vec<crate::fake_upstream::Recorded> {
    up.requests()
        .into_iter()
        .filter(|r| r.method == "POST" && r.path == "/v1/messages")
        .collect()
}

#[tokio::test]
async fn a_text_run_goes_to_messages_with_the_key_as_x_api_key_and_streams_the_answer() {
    let (up, relay) = anthropic_relay().await;
    let body = json!({"model": "fake-model?deltas=3", "instructions": "Be brief.", "stream": true,
        "input": [{"role": "user", "content": [
            {"type": "input_text", "text": "hi"},
            {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="},
            {"type": "input_image", "image_url": "https://example.com/cat.png"}]}]});
    let s = relay.stream(&body).await;
    let r = check_events(&s.events);
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(streamed_text(&s.events), "Hello! You said: hi [2 images]");
    assert_eq!(r["model"], "fake-model?deltas=3");
    // Usage as OpenAI counts it: 2 prompt "messages" (system and user) of 10 tokens each.
    assert_eq!(r["usage"]["input_tokens"], 20, "{r}");
    assert_eq!(r["usage"]["output_tokens"], 3, "{r}");
    assert_eq!(r["usage"]["total_tokens"], 23, "{r}");
    assert_eq!(r["usage"]["input_tokens_details"]["cached_tokens"], 0);

    let sent = messages_requests(&up);
    assert_eq!(sent.len(), 1);
    let req = &sent[0];
    assert_eq!(req.header("x-api-key"), Some(KEY));
    assert_eq!(req.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(req.header("authorization"), None, "never a bearer");
    let b = &req.body;
    assert_eq!(b["system"], "Be brief.");
    assert_eq!(b["max_tokens"], 8192, "the default max_tokens");
    assert_eq!(b["stream"], true);
    assert!(
        b.get("thinking").is_none() && b.get("tools").is_none(),
        "{b}"
    );
    assert_eq!(
        b["messages"],
        json!([{"role": "user", "content": [
            {"type": "text", "text": "hi"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
            // The conversation's end is a prompt-cache breakpoint (implicit caching).
            {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"},
                "cache_control": {"type": "ephemeral"}}]}])
    );

    // The client's bound, temperature and top_p go as they are.
    let (status, _) = relay
        .create(
            &json!({"model": "fake-model", "input": "x", "max_output_tokens": 100,
            "temperature": 0.5, "top_p": 0.9}),
        )
        .await;
    assert_eq!(status, 200);
    let b = last_request(&up);
    assert_eq!(
        (
            b["max_tokens"].clone(),
            b["temperature"].clone(),
            b["top_p"].clone()
        ),
        (json!(100), json!(0.5), json!(0.9))
    );
}

#[tokio::test]
async fn an_mcp_run_loops_through_tool_use_and_tool_result_blocks() {
    let (up, relay) = anthropic_relay().await;
    let server = mcp_server(mcp_test_server::Options::default()).await;
    let (status, r) = relay
        .create(
            &json!({"model": "fake-model", "input": "CALL add {\"a\":2,\"b\":3}",
            "tools": [mcp_tool("math", &server.url())]}),
        )
        .await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["status"], "completed", "{r}");
    let calls = items_of(&r, "mcp_call");
    assert_eq!(calls.len(), 1, "{r}");
    assert_eq!(calls[0]["name"], "add");
    let sent = messages_requests(&up);
    assert_eq!(sent.len(), 2, "two model turns");
    let tools = &sent[0].body["tools"];
    assert!(
        tools
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "math__add" && t["input_schema"]["type"] == "object"),
        "{tools}"
    );
    let msgs = sent[1].body["messages"].as_array().unwrap().clone();
    assert_eq!(msgs.len(), 3, "{msgs:?}");
    let tool_use = &msgs[1]["content"][0];
    assert_eq!(msgs[1]["role"], "assistant");
    assert_eq!(tool_use["type"], "tool_use");
    assert_eq!(tool_use["name"], "math__add");
    assert_eq!(tool_use["input"], json!({"a": 2, "b": 3}));
    let result = &msgs[2]["content"][0];
    assert_eq!(msgs[2]["role"], "user");
    assert_eq!(result["type"], "tool_result");
    assert_eq!(result["tool_use_id"], tool_use["id"], "the ids match");
    assert_eq!(
        message_text(&r),
        format!("Tool results: {}", calls[0]["output"].as_str().unwrap())
    );
}

#[tokio::test]
async fn function_tools_take_every_tool_choice_and_parallel_calls_come_back_as_results() {
    let (up, relay) = anthropic_relay().await;
    let weather = json!({"type": "function", "name": "get_weather", "description": "Weather.",
        "parameters": {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]}});
    let lookup = json!({"type": "function", "name": "lookup",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}});
    let tools = json!([weather, lookup]);
    for (choice, parallel, want_choice, want_calls) in [
        (
            json!("auto"),
            true,
            json!({"type": "auto"}),
            vec!["get_weather", "lookup"],
        ),
        (
            json!("required"),
            false,
            json!({"type": "any", "disable_parallel_tool_use": true}),
            vec!["get_weather"],
        ),
        (
            json!({"type": "function", "name": "lookup"}),
            true,
            json!({"type": "tool", "name": "lookup"}),
            vec!["lookup"],
        ),
        (json!("none"), true, json!({"type": "none"}), vec![]),
    ] {
        let input = if choice == "auto" {
            "CALL get_weather {\"location\":\"Paris\"}\nCALL lookup {\"q\":\"x\"}"
        } else {
            "hello"
        };
        let (status, r) = relay
            .create(
                &json!({"model": "fake-model", "input": input, "tools": tools,
                "tool_choice": choice, "parallel_tool_calls": parallel, "store": false}),
            )
            .await;
        assert_eq!(status, 200, "{choice}: {r}");
        assert_eq!(last_request(&up)["tool_choice"], want_choice, "{choice}");
        let calls = items_of(&r, "function_call");
        let names: Vec<&str> = calls.iter().map(|c| c["name"].as_str().unwrap()).collect();
        assert_eq!(names, want_calls, "{choice}: {r}");
        if calls.len() < 2 {
            continue;
        }
        // Both results back in one request: one assistant turn of both calls, one user turn
        // of both results, ids matching.
        let mut input = vec![json!({"role": "user", "content": input})];
        input.extend(calls.iter().map(|c| (*c).clone()));
        input.extend(calls.iter().map(|c| {
            json!({"type": "function_call_output", "call_id": c["call_id"], "output": format!("out of {}", c["name"].as_str().unwrap())})
        }));
        let (status, r) = relay
            .create(&json!({"model": "fake-model", "input": input, "tools": tools, "store": false}))
            .await;
        assert_eq!(status, 200, "{r}");
        assert_eq!(
            message_text(&r),
            "Tool results: out of get_weather; out of lookup"
        );
        let msgs = last_request(&up)["messages"].as_array().unwrap().clone();
        assert_eq!(msgs.len(), 3, "{msgs:?}");
        let uses = msgs[1]["content"].as_array().unwrap();
        let results = msgs[2]["content"].as_array().unwrap();
        assert_eq!(uses.len(), 2);
        assert_eq!(results.len(), 2);
        for (u, res) in uses.iter().zip(results) {
            assert_eq!(u["type"], "tool_use");
            assert_eq!(res["tool_use_id"], u["id"]);
        }
        assert_eq!(uses[0]["input"], json!({"location": "Paris"}));
    }
}

#[tokio::test]
async fn stop_reasons_end_the_response_completed_or_incomplete_with_the_reason() {
    let (_up, relay) = anthropic_relay().await;
    for (model, status, reason) in [
        ("fake-model", "completed", Value::Null),
        (
            "fake-model?finish=length",
            "incomplete",
            json!("max_output_tokens"),
        ),
        (
            "fake-model?refusal=1",
            "incomplete",
            json!("content_filter"),
        ),
    ] {
        let (code, r) = relay.create(&json!({"model": model, "input": "hi"})).await;
        assert_eq!(code, 200, "{r}");
        assert_eq!(r["status"], status, "{model}: {r}");
        assert_eq!(r["incomplete_details"]["reason"], reason, "{model}: {r}");
    }
}

/// The thinking and redacted blocks the fake made for `reasoning` deltas of "think ".
fn fake_thinking_blocks(msg: &Value) -> (Value, Value) {
    let content = msg["content"].as_array().unwrap();
    (content[0].clone(), content[1].clone())
}

#[tokio::test]
async fn signed_thinking_comes_back_verbatim_before_the_tool_use_within_a_run() {
    let (up, relay) = anthropic_relay().await;
    let server = mcp_server(mcp_test_server::Options::default()).await;
    let (status, r) = relay
        .create(&json!({"model": "fake-model?reasoning=2&redacted=1",
            "reasoning": {"effort": "low"},
            "input": "CALL add {\"a\":2,\"b\":3}", "tools": [mcp_tool("math", &server.url())]}))
        .await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["status"], "completed", "{r}");
    let sent = messages_requests(&up);
    assert_eq!(sent.len(), 2);
    assert_eq!(
        sent[0].body["thinking"],
        json!({"type": "enabled", "budget_tokens": 2048})
    );
    assert_eq!(sent[0].body["max_tokens"], 8192 + 2048);
    let msgs = sent[1].body["messages"].as_array().unwrap();
    let (thinking, redacted) = fake_thinking_blocks(&msgs[1]);
    assert_eq!(thinking["type"], "thinking");
    assert_eq!(thinking["thinking"], "think think ");
    assert!(
        thinking["signature"]
            .as_str()
            .is_some_and(|s| s.starts_with("EqQB")),
        "{thinking}"
    );
    assert_eq!(redacted["type"], "redacted_thinking");
    assert_eq!(msgs[1]["content"][2]["type"], "tool_use");
    // The reasoning item shows the thinking as its summary, and carries the signed blocks sealed (asked for
    // or not: the next turn needs them).
    // (The fake thinks on each of the run's two turns.)
    let reasoning = items_of(&r, "reasoning");
    assert_eq!(reasoning.len(), 2, "{r}");
    assert_eq!(
        reasoning[0]["summary"],
        json!([{"type": "summary_text", "text": "think think "}])
    );
    assert_eq!(reasoning[0]["content"], json!([]));
    let sealed = reasoning[0]["encrypted_content"].as_str().unwrap();
    assert!(sealed.starts_with("rr1."), "{sealed}");
    assert!(!sealed.contains("think"), "sealed, not shown");
}

/// A first turn with thinking that calls `get_weather`: the request body.
fn weather_request(extra: Value) -> Value {
    let mut b = json!({"model": "fake-model?reasoning=2&redacted=1", "reasoning": {"effort": "medium"},
        "input": "CALL get_weather {\"location\":\"Paris\"}",
        "tools": [{"type": "function", "name": "get_weather",
            "parameters": {"type": "object", "properties": {"location": {"type": "string"}}}}]});
    for (k, v) in extra.as_object().unwrap() {
        b[k] = v.clone();
    }
    b
}

#[tokio::test]
async fn signed_thinking_comes_back_through_previous_response_id() {
    let (up, relay) = anthropic_relay().await;
    let (status, first) = relay.create(&weather_request(json!({}))).await;
    assert_eq!(status, 200, "{first}");
    let call = items_of(&first, "function_call")[0].clone();
    let (status, second) = relay
        .create(&json!({"model": "fake-model", "reasoning": {"effort": "medium"},
            "previous_response_id": first["id"],
            "tools": weather_request(json!({}))["tools"],
            "input": [{"type": "function_call_output", "call_id": call["call_id"], "output": "sunny"}]}))
        .await;
    assert_eq!(status, 200, "{second}");
    assert_eq!(second["status"], "completed", "{second}");
    assert_eq!(message_text(&second), "Tool results: sunny");
    let sent = messages_requests(&up);
    let msgs = sent[1].body["messages"].as_array().unwrap();
    let (thinking, redacted) = fake_thinking_blocks(&msgs[1]);
    assert_eq!(
        (thinking["type"].clone(), redacted["type"].clone()),
        (json!("thinking"), json!("redacted_thinking"))
    );
}

#[tokio::test]
async fn signed_thinking_comes_back_statelessly_with_include_and_a_lost_one_is_refused() {
    let (up, relay) = anthropic_relay().await;
    let (status, first) = relay
        .create(&weather_request(
            json!({"store": false, "include": ["reasoning.encrypted_content"]}),
        ))
        .await;
    assert_eq!(status, 200, "{first}");
    let out = first["output"].as_array().unwrap().clone();
    let call = items_of(&first, "function_call")[0].clone();
    let next = |items: Vec<Value>| {
        let mut input =
            vec![json!({"role": "user", "content": "CALL get_weather {\"location\":\"Paris\"}"})];
        input.extend(items);
        input.push(
            json!({"type": "function_call_output", "call_id": call["call_id"], "output": "rainy"}),
        );
        json!({"model": "fake-model", "reasoning": {"effort": "medium"}, "store": false,
            "tools": weather_request(json!({}))["tools"], "input": input})
    };
    let (status, second) = relay.create(&next(out.clone())).await;
    assert_eq!(status, 200, "{second}");
    assert_eq!(message_text(&second), "Tool results: rainy", "{second}");
    let msgs = last_request(&up)["messages"].as_array().unwrap().clone();
    assert_eq!(msgs[1]["content"][0]["type"], "thinking", "{msgs:?}");
    assert_eq!(msgs[1]["content"][1]["type"], "redacted_thinking");

    // Without the reasoning item the model server refuses the turn (its 400 passes through)...
    let without: Vec<Value> = out
        .iter()
        .filter(|o| o["type"] != "reasoning")
        .cloned()
        .collect();
    let (status, refused) = relay.create(&next(without)).await;
    assert_eq!(status, 400, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("thinking"),
        "{refused}"
    );
    // ...and an altered seal is the relay's own 400, naming the item.
    let mut altered = out.clone();
    let r = altered
        .iter_mut()
        .find(|o| o["type"] == "reasoning")
        .unwrap();
    let sealed = r["encrypted_content"].as_str().unwrap().to_string();
    let flipped = if sealed.ends_with('A') { "B" } else { "A" };
    r["encrypted_content"] = json!(format!("{}{flipped}", &sealed[..sealed.len() - 1]));
    let (status, refused) = relay.create(&next(altered)).await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["error"]["code"], "invalid_encrypted_content");
}

#[tokio::test]
async fn overloaded_and_rate_limited_answers_are_retried() {
    let (up, relay) = anthropic_relay().await;
    for model in [
        "fake-model?fault=status529_once",
        "fake-model?fault=status429_once",
    ] {
        let (status, r) = relay.create(&json!({"model": model, "input": "hi"})).await;
        assert_eq!(status, 200, "{model}: {r}");
        assert_eq!(r["status"], "completed", "{model}: {r}");
    }
    assert_eq!(
        messages_requests(&up).len(),
        4,
        "each refused once, then answered"
    );
    // Always overloaded: the retries run out and the client gets a 5xx before any byte.
    let (status, r) = relay
        .create(&json!({"model": "fake-model?fault=status529", "input": "hi"}))
        .await;
    assert!(status >= 500, "{status}: {r}");
}

#[tokio::test]
async fn an_error_event_mid_stream_fails_the_response() {
    let (_up, relay) = anthropic_relay().await;
    let s = relay
        .stream(&json!({"model": "fake-model?fault=error_chunk", "input": "hi", "stream": true}))
        .await;
    let r = check_events(&s.events);
    let last = s.events.last().unwrap();
    assert_eq!(last["type"], "response.failed", "{last}");
    assert_eq!(r["status"], "failed");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("Overloaded"),
        "{r}"
    );
}

#[tokio::test]
async fn pings_count_as_liveness_for_the_idle_timeout() {
    let (_up, relay) = anthropic_relay_with(|c| {
        c.upstream_timeouts.idle = Duration::from_millis(300);
    })
    .await;
    // Eight pings 100 ms apart: 800 ms with no content, longer than the idle timeout.
    let (status, r) = relay
        .create(&json!({"model": "fake-model?pings=8&delay_ms=100&deltas=1", "input": "hi"}))
        .await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["status"], "completed", "{r}");
    // A stream that goes silent fails on the same timeout.
    let s = relay
        .stream(&json!({"model": "fake-model?fault=stall", "input": "hi", "stream": true}))
        .await;
    assert_eq!(s.events.last().unwrap()["type"], "response.failed");
}

#[tokio::test]
async fn models_lists_an_anthropic_upstreams_models_as_name_slash_id_and_routes_there() {
    let up = upstream().await;
    let refused = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}/v1", l.local_addr().unwrap())
    };
    let toml = format!(
        "[[upstreams]]\nname = \"claude\"\nurl = \"{}\"\napi = \"anthropic\"\napi_key = \"{KEY}\"\n",
        up.base_url()
    );
    let c = serve_config(&["--store", "memory", "--upstream-url", &refused], &toml).unwrap();
    let relay = relay(c).await;
    let (status, list) = get(&relay.url("/v1/models")).await;
    assert_eq!(status, 200, "{list}");
    let ids: Vec<&str> = list["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["id"].as_str())
        .collect();
    assert_eq!(ids, ["claude/fake-model"], "{list}");
    assert_eq!(list["data"][0]["owned_by"], "claude");
    let asked = up
        .requests()
        .into_iter()
        .find(|r| r.method == "GET")
        .unwrap();
    assert_eq!(asked.path, "/v1/models");
    assert_eq!(asked.header("x-api-key"), Some(KEY));
    assert_eq!(asked.header("anthropic-version"), Some("2023-06-01"));

    let (status, r) = relay
        .create(&json!({"model": "claude/fake-model", "input": "hi"}))
        .await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["model"], "claude/fake-model");
    assert_eq!(message_text(&r), "Hello! You said: hi");
    assert_eq!(last_request(&up)["model"], "fake-model");

    // `--upstream-api anthropic` reads the default upstream the same way.
    let c = serve_config(
        &[
            "--upstream-url",
            &up.base_url(),
            "--upstream-api",
            "anthropic",
        ],
        "",
    )
    .unwrap();
    assert_eq!(c.upstream_api, UpstreamApi::Anthropic);
}

#[tokio::test]
async fn thinking_streams_as_reasoning_summary_events() {
    let (_up, relay) = anthropic_relay().await;
    let s = relay
        .stream(
            &json!({"model": "fake-model?reasoning=2&deltas=2", "reasoning": {"effort": "minimal"},
            "input": "hi", "stream": true}),
        )
        .await;
    let r = check_events(&s.events);
    assert_eq!(r["status"], "completed", "{r}");
    let kinds: Vec<&str> = s
        .events
        .iter()
        .map(|e| e["type"].as_str().unwrap())
        .filter(|k| k.contains("reasoning"))
        .collect();
    assert_eq!(
        kinds,
        [
            "response.reasoning_summary_part.added",
            "response.reasoning_summary_text.delta",
            "response.reasoning_summary_text.delta",
            "response.reasoning_summary_text.done",
            "response.reasoning_summary_part.done",
        ]
    );
    let done = s
        .events
        .iter()
        .find(|e| e["type"] == "response.reasoning_summary_text.done")
        .unwrap();
    assert_eq!(done["text"], "think think ");
    assert_eq!(done["summary_index"], 0);
    assert_eq!(r["output"][0]["summary"][0]["text"], "think think ", "{r}");
    assert_eq!(streamed_text(&s.events), "Hello! You said: hi");
}

/// The blocks of a Messages request marked `cache_control`: (message index, block type, the
/// mark).
fn cache_marks(body: &Value) -> Vec<(usize, String, Value)> {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .flat_map(|(i, m)| {
            m["content"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .filter_map(move |b| {
                    let mark = b.get("cache_control")?.clone();
                    Some((i, b["type"].as_str().unwrap().to_string(), mark))
                })
        })
        .collect()
}

#[tokio::test]
async fn an_agent_loops_later_turns_read_its_prompt_cache_and_report_cached_tokens() {
    let (up, relay) = anthropic_relay().await;
    let server = mcp_server(mcp_test_server::Options::default()).await;
    let (status, r) = relay
        .create(
            &json!({"model": "fake-model", "input": "CALL add {\"a\":2,\"b\":3}",
            "tools": [mcp_tool("math", &server.url())]}),
        )
        .await;
    assert_eq!(status, 200, "{r}");
    let sent = messages_requests(&up);
    assert_eq!(sent.len(), 2);
    // Implicitly (as OpenAI caches): the conversation's end; then also the turn before the answer.
    let ephemeral = json!({"type": "ephemeral"});
    assert_eq!(
        cache_marks(&sent[0].body),
        [(0, "text".to_string(), ephemeral.clone())]
    );
    assert_eq!(
        cache_marks(&sent[1].body),
        [
            (0, "text".to_string(), ephemeral.clone()),
            (2, "tool_result".to_string(), ephemeral)
        ]
    );
    // The second turn read the first one's prefix back: the run reports cached tokens.
    let cached = r["usage"]["input_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap();
    assert!(cached > 0, "{}", r["usage"]);
}

#[tokio::test]
async fn explicit_breakpoints_are_the_clients_latest_four_with_the_longest_lifetime_asked() {
    let (up, relay) = anthropic_relay().await;
    let part = |t: &str| json!({"type": "input_text", "text": t, "prompt_cache_breakpoint": {}});
    let request = json!({"model": "fake-model",
        "prompt_cache_options": {"mode": "explicit", "ttl": "30m"},
        "input": [{"role": "user", "content": [part("a"), part("b"), part("c"), part("d"), part("e"),
            {"type": "input_text", "text": "not marked"}]}]});
    // Five marks would be refused by Anthropic (and the fake): the four latest go.
    let (status, r) = relay.create(&request).await;
    assert_eq!(status, 200, "{r}");
    let sent = messages_requests(&up);
    let marks = cache_marks(&sent[0].body);
    let hour = json!({"type": "ephemeral", "ttl": "1h"});
    let texts: Vec<&str> = sent[0].body["messages"][0]["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b.get("cache_control").is_some())
        .map(|b| b["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["b", "c", "d", "e"]);
    assert!(marks.iter().all(|(_, _, m)| *m == hour), "{marks:?}");
}

#[tokio::test]
async fn input_tokens_come_from_anthropics_count_endpoint_with_nothing_generated() {
    let (up, relay) = anthropic_relay().await;
    let body = json!({"model": "fake-model", "instructions": "Be brief.",
        "input": [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"},
            {"role": "user", "content": "count us"}]});
    let (status, r) = relay.post("/v1/responses/input_tokens", &body).await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["object"], "response.input_tokens");
    let sent = up.requests();
    assert_eq!(sent.len(), 1, "one count, no generation");
    assert_eq!(
        (sent[0].path.as_str(), sent[0].header("x-api-key")),
        ("/v1/messages/count_tokens", Some(KEY))
    );
    let counted = &sent[0].body;
    assert!(
        counted.get("max_tokens").is_none() && counted.get("stream").is_none(),
        "{counted}"
    );
    assert_eq!(counted["messages"].as_array().unwrap().len(), 3);
    // The count is what a turn of the same request reports.
    let (status, run) = relay.create(&body).await;
    assert_eq!(status, 200, "{run}");
    assert_eq!(r["input_tokens"], run["usage"]["input_tokens"], "{run}");
}
