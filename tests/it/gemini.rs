//! A Gemini upstream (issue #37): `--upstream-api gemini` and `api = "gemini"` drive the fake
//! upstream's `POST /v1beta/models/{model}:streamGenerateContent?alt=sse` with `x-goog-api-key`;
//! text with images, tools (MCP through the real MCP test server, functions with every
//! `tool_choice`, parallel calls), finish reasons, usage (cached and reasoning tokens), thought
//! signatures kept across tool calls (in a run, through `previous_response_id`, and statelessly
//! with `include`), 429 and 503 retried, a mid-stream error, and `GET /v1/models`. The fake refuses
//! a signature sent back changed or missing (400, as Gemini does), so a lost one fails these tests.

use responses_relay::upstream::UpstreamApi;
use serde_json::{Value, json};

use crate::fake_upstream::FakeUpstream;
use crate::mcp_test_server;
use crate::support::*;

const KEY: &str = "AIza-test-key";

/// The fake upstream's Gemini base URL.
fn gemini_url(up: &FakeUpstream) -> String {
    format!("{}beta", up.base_url())
}

/// The fake upstream and a relay driving it as a Gemini upstream with [`KEY`].
async fn gemini_relay() -> (FakeUpstream, Relay) {
    let up = upstream().await;
    let url = gemini_url(&up);
    let relay = relay_for(&up, |c| {
        c.upstream_api = UpstreamApi::Gemini;
        c.upstream_url = url;
        c.upstream_api_key = Some(responses_relay::config::Secret(KEY.into()));
    })
    .await;
    (up, relay)
}

/// The `streamGenerateContent` requests the fake got, in order.
fn turns(up: &FakeUpstream) -> Vec<crate::fake_upstream::Recorded> {
    up.requests()
        .into_iter()
        .filter(|r| r.method == "POST" && r.path.ends_with(":streamGenerateContent"))
        .collect()
}

#[tokio::test]
async fn a_text_run_with_images_goes_to_stream_generate_content_with_the_key_as_x_goog_api_key() {
    let (up, relay) = gemini_relay().await;
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
    // 2 prompt "messages" (the system instruction and the user content) of 10 tokens each.
    assert_eq!(r["usage"]["input_tokens"], 20, "{r}");
    assert_eq!(r["usage"]["output_tokens"], 3, "{r}");
    assert_eq!(r["usage"]["total_tokens"], 23, "{r}");

    let sent = turns(&up);
    assert_eq!(sent.len(), 1);
    let req = &sent[0];
    // The model is one (percent-encoded) path segment; the fake refuses a turn without alt=sse
    // or with the key in the query.
    assert_eq!(
        req.path,
        "/v1beta/models/fake-model%3Fdeltas%3D3:streamGenerateContent"
    );
    assert_eq!(req.header("x-goog-api-key"), Some(KEY));
    assert_eq!(req.header("authorization"), None, "never a bearer");
    let b = &req.body;
    assert_eq!(
        b["systemInstruction"],
        json!({"parts": [{"text": "Be brief."}]})
    );
    assert!(
        b.get("generationConfig").is_none() && b.get("tools").is_none(),
        "{b}"
    );
    assert_eq!(
        b["contents"],
        json!([{"role": "user", "parts": [
            {"text": "hi"},
            {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}},
            {"fileData": {"mimeType": "image/png", "fileUri": "https://example.com/cat.png"}}]}])
    );

    // The client's bound, temperature and top_p go in generationConfig.
    let (status, _) = relay
        .create(
            &json!({"model": "fake-model", "input": "x", "max_output_tokens": 100,
            "temperature": 0.5, "top_p": 0.9}),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(
        last_request(&up)["generationConfig"],
        json!({"maxOutputTokens": 100, "temperature": 0.5, "topP": 0.9})
    );
}

#[tokio::test]
async fn an_mcp_run_loops_through_function_call_and_function_response_parts() {
    let (up, relay) = gemini_relay().await;
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
    let sent = turns(&up);
    assert_eq!(sent.len(), 2, "two model turns");
    let decls = &sent[0].body["tools"][0]["functionDeclarations"];
    let add = decls
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == "math__add")
        .unwrap_or_else(|| panic!("{decls}"));
    assert_eq!(add["parameters"]["type"], "object", "{add}");
    assert!(
        !decls.to_string().contains("additionalProperties")
            && !decls.to_string().contains("$schema"),
        "{decls}"
    );
    let contents = sent[1].body["contents"].as_array().unwrap().clone();
    assert_eq!(contents.len(), 3, "{contents:?}");
    assert_eq!(contents[1]["role"], "model");
    let call = &contents[1]["parts"][0]["functionCall"];
    assert_eq!(call["name"], "math__add");
    assert_eq!(call["args"], json!({"a": 2, "b": 3}));
    assert_eq!(contents[2]["role"], "user");
    let response = &contents[2]["parts"][0]["functionResponse"];
    assert_eq!(response["name"], "math__add");
    assert_eq!(
        message_text(&r),
        format!("Tool results: {}", calls[0]["output"].as_str().unwrap())
    );
    assert_eq!(response["response"]["output"], calls[0]["output"]);
}

#[tokio::test]
async fn function_tools_take_every_tool_choice_and_parallel_calls_come_back_as_responses() {
    let (up, relay) = gemini_relay().await;
    let weather = json!({"type": "function", "name": "get_weather", "description": "Weather.",
        "parameters": {"type": "object", "properties": {"location": {"type": "string"}},
            "required": ["location"], "additionalProperties": false}, "strict": true});
    let lookup = json!({"type": "function", "name": "lookup",
        "parameters": {"type": "object", "properties": {"q": {"type": ["string", "null"]}}, "required": ["q"]}});
    let tools = json!([weather, lookup]);
    for (choice, want_config, want_calls) in [
        (
            json!("auto"),
            json!({"mode": "AUTO"}),
            vec!["get_weather", "lookup"],
        ),
        (
            json!("required"),
            json!({"mode": "ANY"}),
            vec!["get_weather"],
        ),
        (
            json!({"type": "function", "name": "lookup"}),
            json!({"mode": "ANY", "allowedFunctionNames": ["lookup"]}),
            vec!["lookup"],
        ),
        (json!("none"), json!({"mode": "NONE"}), vec![]),
    ] {
        let input = if choice == "auto" {
            "CALL get_weather {\"location\":\"Paris\"}\nCALL lookup {\"q\":\"x\"}"
        } else {
            "hello"
        };
        let (status, r) = relay
            .create(
                &json!({"model": "fake-model", "input": input, "tools": tools,
                "tool_choice": choice, "store": false}),
            )
            .await;
        assert_eq!(status, 200, "{choice}: {r}");
        let sent = last_request(&up);
        assert_eq!(
            sent["toolConfig"],
            json!({"functionCallingConfig": want_config}),
            "{choice}"
        );
        assert_eq!(
            sent["tools"][0]["functionDeclarations"][1]["parameters"],
            json!({"type": "object", "properties": {"q": {"type": "string", "nullable": true}}, "required": ["q"]})
        );
        let calls = items_of(&r, "function_call");
        let names: Vec<&str> = calls.iter().map(|c| c["name"].as_str().unwrap()).collect();
        assert_eq!(names, want_calls, "{choice}: {r}");
        if calls.len() < 2 {
            continue;
        }
        // Both responses back in one request: one model content of both calls, one user content
        // of both responses, in order.
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
        let contents = last_request(&up)["contents"].as_array().unwrap().clone();
        assert_eq!(contents.len(), 3, "{contents:?}");
        let calls: Vec<&Value> = contents[1]["parts"].as_array().unwrap().iter().collect();
        let responses: Vec<&Value> = contents[2]["parts"].as_array().unwrap().iter().collect();
        assert_eq!((calls.len(), responses.len()), (2, 2));
        for (c, res) in calls.iter().zip(&responses) {
            assert_eq!(res["functionResponse"]["name"], c["functionCall"]["name"]);
        }
        assert_eq!(
            calls[0]["functionCall"]["args"],
            json!({"location": "Paris"})
        );
    }
}

#[tokio::test]
async fn finish_reasons_end_the_response_completed_or_incomplete_with_the_reason() {
    let (_up, relay) = gemini_relay().await;
    for (model, status, reason) in [
        ("fake-model", "completed", Value::Null),
        (
            "fake-model?finish=length",
            "incomplete",
            json!("max_output_tokens"),
        ),
        // `SAFETY`: Gemini blocked the answer.
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

#[tokio::test]
async fn usage_counts_cached_and_reasoning_tokens() {
    let (_up, relay) = gemini_relay().await;
    let (status, r) = relay
        .create(&json!({"model": "fake-model?reasoning=3&cached=6&deltas=2",
            "reasoning": {"effort": "low"}, "input": "hi"}))
        .await;
    assert_eq!(status, 200, "{r}");
    let u = &r["usage"];
    assert_eq!(u["input_tokens"], 10, "{u}");
    assert_eq!(u["input_tokens_details"]["cached_tokens"], 6, "{u}");
    // Output counts the thoughts (3) and the answer (2), as OpenAI's does.
    assert_eq!(u["output_tokens"], 5, "{u}");
    assert_eq!(u["output_tokens_details"]["reasoning_tokens"], 3, "{u}");
    assert_eq!(u["total_tokens"], 15, "{u}");
}

#[tokio::test]
async fn thoughts_stream_as_reasoning_summary_events() {
    let (up, relay) = gemini_relay().await;
    let s = relay
        .stream(
            &json!({"model": "fake-model?reasoning=2&deltas=2", "reasoning": {"effort": "medium"},
            "input": "hi", "stream": true}),
        )
        .await;
    let r = check_events(&s.events);
    assert_eq!(r["status"], "completed", "{r}");
    assert_eq!(
        last_request(&up)["generationConfig"]["thinkingConfig"],
        json!({"thinkingBudget": 8192, "includeThoughts": true})
    );
    let done = s
        .events
        .iter()
        .find(|e| e["type"] == "response.reasoning_summary_text.done")
        .unwrap();
    assert_eq!(done["text"], "think think ");
    assert_eq!(r["output"][0]["summary"][0]["text"], "think think ", "{r}");
    assert_eq!(streamed_text(&s.events), "Hello! You said: hi");
    // The last text part's signature is kept, sealed, in a reasoning item after the message.
    let last = r["output"].as_array().unwrap().last().unwrap();
    assert_eq!(last["type"], "reasoning", "{r}");
    assert!(
        last["encrypted_content"]
            .as_str()
            .unwrap()
            .starts_with("rr1.")
    );
}

/// The signature the fake's first call to `get_weather` in Paris carries.
fn signed_call(contents: &[Value]) -> &Value {
    contents
        .iter()
        .flat_map(|c| c["parts"].as_array().unwrap())
        .find(|p| p.get("functionCall").is_some())
        .unwrap()
}

#[tokio::test]
async fn thought_signatures_come_back_on_their_call_within_a_run() {
    let (up, relay) = gemini_relay().await;
    let server = mcp_server(mcp_test_server::Options::default()).await;
    let (status, r) = relay
        .create(
            &json!({"model": "fake-model?reasoning=2", "reasoning": {"effort": "low"},
            "input": "CALL add {\"a\":2,\"b\":3}", "tools": [mcp_tool("math", &server.url())]}),
        )
        .await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["status"], "completed", "{r}");
    let sent = turns(&up);
    assert_eq!(sent.len(), 2);
    let contents = sent[1].body["contents"].as_array().unwrap();
    let call = signed_call(contents);
    assert!(
        call["thoughtSignature"]
            .as_str()
            .is_some_and(|s| s.starts_with("CiQB")),
        "{call}"
    );
    let reasoning = items_of(&r, "reasoning");
    assert_eq!(
        reasoning[0]["summary"],
        json!([{"type": "summary_text", "text": "think think "}])
    );
    let sealed = reasoning[0]["encrypted_content"].as_str().unwrap();
    assert!(
        sealed.starts_with("rr1.") && !sealed.contains("CiQB"),
        "sealed, not shown"
    );
}

/// A first turn with thinking that calls `get_weather`: the request body.
fn weather_request(extra: Value) -> Value {
    let mut b = json!({"model": "fake-model?reasoning=2", "reasoning": {"effort": "medium"},
        "input": "CALL get_weather {\"location\":\"Paris\"}",
        "tools": [{"type": "function", "name": "get_weather",
            "parameters": {"type": "object", "properties": {"location": {"type": "string"}}}}]});
    for (k, v) in extra.as_object().unwrap() {
        b[k] = v.clone();
    }
    b
}

#[tokio::test]
async fn thought_signatures_come_back_through_previous_response_id() {
    let (up, relay) = gemini_relay().await;
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
    assert_eq!(message_text(&second), "Tool results: sunny");
    let sent = turns(&up);
    let contents = sent[1].body["contents"].as_array().unwrap();
    assert!(
        signed_call(contents).get("thoughtSignature").is_some(),
        "{contents:?}"
    );
}

#[tokio::test]
async fn thought_signatures_come_back_statelessly_with_include_and_a_lost_one_is_refused() {
    let (up, relay) = gemini_relay().await;
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
    let contents = last_request(&up)["contents"].as_array().unwrap().clone();
    assert!(signed_call(&contents).get("thoughtSignature").is_some());

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
            .contains("thought_signature"),
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
async fn unavailable_and_rate_limited_answers_are_retried() {
    let (up, relay) = gemini_relay().await;
    for model in [
        "fake-model?fault=status503_once",
        "fake-model?fault=status429_once",
    ] {
        let (status, r) = relay.create(&json!({"model": model, "input": "hi"})).await;
        assert_eq!(status, 200, "{model}: {r}");
        assert_eq!(r["status"], "completed", "{model}: {r}");
    }
    assert_eq!(turns(&up).len(), 4, "each refused once, then answered");
    // Always unavailable: the retries run out and the client gets a 5xx before any byte.
    let (status, r) = relay
        .create(&json!({"model": "fake-model?fault=status503", "input": "hi"}))
        .await;
    assert!(status >= 500, "{status}: {r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("overloaded"),
        "{r}"
    );
}

#[tokio::test]
async fn an_error_chunk_mid_stream_fails_the_response() {
    let (_up, relay) = gemini_relay().await;
    let s = relay
        .stream(&json!({"model": "fake-model?fault=error_chunk", "input": "hi", "stream": true}))
        .await;
    let r = check_events(&s.events);
    assert_eq!(s.events.last().unwrap()["type"], "response.failed");
    assert_eq!(r["status"], "failed");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("overloaded"),
        "{r}"
    );
    // A stream that ends without a finish reason fails too.
    let s = relay
        .stream(&json!({"model": "fake-model?fault=no_done", "input": "hi", "stream": true}))
        .await;
    assert_eq!(s.events.last().unwrap()["type"], "response.failed");
}

#[tokio::test]
async fn models_lists_a_gemini_upstreams_models_as_name_slash_id_and_routes_there() {
    let up = upstream().await;
    let refused = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}/v1", l.local_addr().unwrap())
    };
    let toml = format!(
        "[[upstreams]]\nname = \"gemini\"\nurl = \"{}\"\napi = \"gemini\"\napi_key = \"{KEY}\"\n",
        gemini_url(&up)
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
    assert_eq!(
        ids,
        ["gemini/fake-model"],
        "only what generates content: {list}"
    );
    assert_eq!(list["data"][0]["owned_by"], "gemini");
    let asked = up
        .requests()
        .into_iter()
        .find(|r| r.method == "GET")
        .unwrap();
    assert_eq!(asked.path, "/v1beta/models");
    assert_eq!(asked.header("x-goog-api-key"), Some(KEY));

    let (status, r) = relay
        .create(&json!({"model": "gemini/fake-model", "input": "hi"}))
        .await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["model"], "gemini/fake-model");
    assert_eq!(message_text(&r), "Hello! You said: hi");
    assert_eq!(
        turns(&up)[0].path,
        "/v1beta/models/fake-model:streamGenerateContent"
    );

    // `--upstream-api gemini` reads the default upstream the same way.
    let c = serve_config(
        &[
            "--upstream-url",
            &gemini_url(&up),
            "--upstream-api",
            "gemini",
        ],
        "",
    )
    .unwrap();
    assert_eq!(c.upstream_api, UpstreamApi::Gemini);
}

#[tokio::test]
async fn a_signed_last_text_part_comes_back_on_the_text_it_closed() {
    let (up, relay) = gemini_relay().await;
    let (status, first) = relay
        .create(
            &json!({"model": "fake-model?reasoning=1&deltas=2", "reasoning": {"effort": "low"},
            "input": "hi"}),
        )
        .await;
    assert_eq!(status, 200, "{first}");
    let kinds: Vec<&str> = first["output"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["type"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["reasoning", "message", "reasoning"], "{first}");
    let (status, second) = relay
        .create(
            &json!({"model": "fake-model", "reasoning": {"effort": "low"},
            "previous_response_id": first["id"], "input": "again"}),
        )
        .await;
    assert_eq!(status, 200, "{second}");
    let contents = last_request(&up)["contents"].as_array().unwrap().clone();
    assert_eq!(contents.len(), 3, "{contents:?}");
    // The answer's text, then the empty part that carried the signature, as the model sent them.
    let parts = contents[1]["parts"].as_array().unwrap();
    assert_eq!(parts.len(), 2, "{parts:?}");
    assert_eq!(parts[0], json!({"text": "Hello! You said: hi"}));
    assert_eq!(parts[1]["text"], "");
    assert!(parts[1]["thoughtSignature"].is_string(), "{parts:?}");
}

#[tokio::test]
async fn the_fake_refuses_a_changed_signature_a_key_in_the_url_and_a_stream_without_sse() {
    let up = upstream().await;
    let url = |q: &str| {
        format!(
            "{}/models/fake-model:streamGenerateContent?{q}",
            gemini_url(&up)
        )
    };
    let http = reqwest::Client::new();
    let send = |u: String, body: Value| {
        let http = http.clone();
        async move {
            let r = http.post(u).json(&body).send().await.unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        }
    };
    let changed = json!({"contents": [
        {"role": "user", "parts": [{"text": "CALL get_weather {}"}]},
        {"role": "model", "parts": [{"functionCall": {"name": "get_weather", "args": {}},
            "thoughtSignature": "CiQBjz1rXchanged"}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "get_weather", "response": {"output": "sunny"}}}]}]});
    let (status, e) = send(url("alt=sse"), changed).await;
    assert_eq!(status, 400, "{e}");
    assert_eq!(e["error"]["status"], "INVALID_ARGUMENT");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("signature"),
        "{e}"
    );
    let hi = json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]});
    let (status, e) = send(url("alt=sse&key=secret"), hi.clone()).await;
    assert_eq!(status, 400, "{e}");
    let (status, e) = send(url(""), hi).await;
    assert_eq!(status, 400, "{e}");
}

#[tokio::test]
async fn input_tokens_are_what_gemini_counts_for_the_request() {
    let (up, relay) = gemini_relay().await;
    let body = json!({"model": "fake-model", "instructions": "Be brief.", "input": "hi"});
    let (status, count) = relay.post("/v1/responses/input_tokens", &body).await;
    assert_eq!(status, 200, "{count}");
    // Gemini's own countTokens, with the whole request; nothing generated.
    let sent = up.requests();
    assert_eq!(sent.len(), 1, "one count, no generation");
    assert!(
        sent[0].path.ends_with("/models/fake-model:countTokens"),
        "{}",
        sent[0].path
    );
    assert_eq!(sent[0].header("x-goog-api-key"), Some(KEY));
    let counted = &sent[0].body["generateContentRequest"];
    assert_eq!(counted["model"], "models/fake-model");
    assert_eq!(
        counted["systemInstruction"]["parts"][0]["text"],
        "Be brief."
    );
    let (_, run) = relay.create(&body).await;
    assert_eq!(
        count["input_tokens"], run["usage"]["input_tokens"],
        "{count}"
    );
    assert_eq!(count["input_tokens"], 20);
}

#[tokio::test]
async fn every_step_of_a_turn_sends_its_own_signature_back() {
    let (up, relay) = gemini_relay().await;
    let server = mcp_server(mcp_test_server::Options::default()).await;
    let (status, r) = relay
        .create(
            &json!({"model": "fake-model?reasoning=1", "reasoning": {"effort": "low"},
            "input": "CALL add {\"a\":1,\"b\":2}\nTHEN\nCALL add {\"a\":3,\"b\":4}",
            "tools": [mcp_tool("math", &server.url())]}),
        )
        .await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(items_of(&r, "mcp_call").len(), 2, "{r}");
    let sent = turns(&up);
    assert_eq!(sent.len(), 3);
    // The last turn: two steps, each a model content whose call carries its own signature.
    let contents = sent[2].body["contents"].as_array().unwrap();
    let signatures: Vec<&str> = contents
        .iter()
        .filter(|c| c["role"] == "model")
        .map(|c| c["parts"][0]["thoughtSignature"].as_str().unwrap())
        .collect();
    assert_eq!(signatures.len(), 2, "{contents:?}");
    assert_ne!(signatures[0], signatures[1]);
}
