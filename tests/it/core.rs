//! The relay core end to end: the event stream, the folded non-streaming answer, golden logs,
//! function tools and continuation, against the fake upstream on loopback.

use responses_relay::upstream::UpstreamApi;
use serde_json::{Value, json};

use crate::support::*;

#[tokio::test]
async fn text_stream_is_well_ordered_and_ends_with_done() {
    let (_up, relay) = plain_relay().await;
    let body = relay.stream_input("fake-model", "hi there").await;
    assert!(body.done, "no [DONE]");
    let folded = check_events(&body.events);
    let k = kinds(&body.events);
    assert_eq!(
        &k[..4],
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added"
        ]
    );
    assert_eq!(k.last().unwrap(), "response.completed");
    let terminal = &body.events.last().unwrap()["response"];
    assert_eq!(terminal["status"], "completed");
    assert_eq!(
        terminal["output"], folded["output"],
        "terminal output differs from the folded stream"
    );
    let text: String = streamed_text(&body.events);
    assert_eq!(text, "Hello! You said: hi there");
    assert_eq!(*first_text(terminal), text);
    assert!(
        body.events
            .iter()
            .filter(|e| e["type"] == "response.output_text.delta")
            .all(|e| e["logprobs"] == json!([]))
    );
    assert_eq!(terminal["usage"]["output_tokens"], 8);
    golden("text", &body);
}

#[tokio::test]
async fn non_streaming_answer_is_the_terminal_response_of_the_stream() {
    let up = upstream().await;
    let request = json!({"model": "fake-model?reasoning=2", "input": "fold me", "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {}}}]});
    // Two relays with fresh deterministic ids: the same request must give byte-equal Responses.
    let streamed = {
        let r = relay(config(&up.base_url())).await;
        let mut req = request.clone();
        req["stream"] = json!(true);
        let body = r.stream(&req).await;
        check_events(&body.events);
        body.events.last().unwrap()["response"].clone()
    };
    let r = relay(config(&up.base_url())).await;
    let (status, plain) = r.create(&request).await;
    assert_eq!(status, 200, "{plain}");
    assert_eq!(plain, streamed);
    assert_eq!(plain["output"][0]["type"], "reasoning");
    assert_eq!(plain["output"][1]["type"], "message");
}

#[tokio::test]
async fn response_object_carries_every_field_clients_validate() {
    let (_up, relay) = plain_relay().await;
    let (status, r) = relay
        .create(&json!({"model": "fake-model", "input": "x", "metadata": {"k": "v"}}))
        .await;
    assert_eq!(status, 200);
    for key in [
        "id",
        "object",
        "created_at",
        "completed_at",
        "status",
        "incomplete_details",
        "model",
        "previous_response_id",
        "instructions",
        "output",
        "error",
        "tools",
        "tool_choice",
        "truncation",
        "parallel_tool_calls",
        "text",
        "top_p",
        "presence_penalty",
        "frequency_penalty",
        "top_logprobs",
        "temperature",
        "reasoning",
        "usage",
        "max_output_tokens",
        "max_tool_calls",
        "store",
        "background",
        "service_tier",
        "metadata",
        "safety_identifier",
        "prompt_cache_key",
    ] {
        assert!(r.get(key).is_some(), "Response lacks '{key}': {r}");
    }
    assert_eq!(r["object"], "response");
    assert!(r["created_at"].is_i64());
    assert!(r["completed_at"].is_i64());
    assert_eq!(r["metadata"], json!({"k": "v"}));
    assert_eq!(r["text"]["format"]["type"], "text");
    assert_eq!(r["usage"]["input_tokens_details"]["cached_tokens"], 0);
    assert_eq!(r["usage"]["output_tokens_details"]["reasoning_tokens"], 0);
    let part = &r["output"][0]["content"][0];
    assert_eq!(part["annotations"], json!([]));
    assert_eq!(part["logprobs"], json!([]));
}

#[tokio::test]
async fn function_call_streams_arguments_and_round_trips_with_previous_response_id() {
    let (up, relay) = plain_relay().await;
    let tools = json!([{"type": "function", "name": "get_weather", "description": "Weather for a place",
        "parameters": {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]}}]);
    let body = relay.stream(&json!({"model": "fake-model", "input": "weather?", "tools": tools, "tool_choice": {"type": "function", "name": "get_weather"}, "stream": true}))
    .await;
    let folded = check_events(&body.events);
    for needed in [
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
    ] {
        assert!(has_kind(&body.events, needed), "missing {needed}");
    }
    let call = &folded["output"][0];
    assert_eq!(call["type"], "function_call");
    assert_eq!(call["name"], "get_weather");
    assert_eq!(
        serde_json::from_str::<Value>(call["arguments"].as_str().unwrap()).unwrap(),
        json!({"location": "San Francisco"})
    );
    assert_eq!(call["status"], "completed");
    golden("function_call", &body);

    let first_id = folded["id"].as_str().unwrap().to_string();
    let call_id = call["call_id"].as_str().unwrap().to_string();
    let (status, second) = relay.create(&json!({"model": "fake-model", "previous_response_id": first_id, "tools": tools,
                "input": [{"type": "function_call_output", "call_id": call_id, "output": "64 degrees and clear"}]}))
    .await;
    assert_eq!(status, 200, "{second}");
    assert_eq!(second["status"], "completed");
    assert_eq!(second["previous_response_id"], first_id);
    assert_eq!(second.get("output_text"), None);
    let text = first_text(&second).as_str().unwrap();
    assert_eq!(text, "Tool results: 64 degrees and clear");
    // The upstream saw the whole chain in order: user, assistant tool call, tool result.
    let last = last_request(&up);
    let roles: Vec<&str> = strs(&last["messages"], "role");
    assert_eq!(roles, ["user", "assistant", "tool"]);
    assert_eq!(last["messages"][1]["tool_calls"][0]["id"], call_id);
    assert_eq!(last["messages"][2]["tool_call_id"], call_id);
}

#[tokio::test]
async fn parallel_function_calls_each_get_their_own_item_and_call_id() {
    let (_up, relay) = plain_relay().await;
    let tools = json!([{"type": "function", "name": "a"}, {"type": "function", "name": "b"}]);
    let body = relay.stream(&json!({"model": "fake-model", "input": "CALL a {\"x\":1}\nCALL b {\"y\":2}", "tools": tools, "stream": true}))
    .await;
    let folded = check_events(&body.events);
    let out = folded["output"].as_array().unwrap();
    assert_eq!(out.len(), 2);
    assert_eq!(
        (out[0]["name"].as_str(), out[1]["name"].as_str()),
        (Some("a"), Some("b"))
    );
    assert_ne!(out[0]["call_id"], out[1]["call_id"]);
    assert_eq!(out[0]["arguments"], "{\"x\":1}");
    assert_eq!(out[1]["arguments"], "{\"y\":2}");
}

#[tokio::test]
async fn reasoning_deltas_become_a_reasoning_item_before_the_message() {
    let (_up, relay) = plain_relay().await;
    let body = relay.stream_input("fake-model?reasoning=3", "think").await;
    let folded = check_events(&body.events);
    assert_eq!(folded["output"][0]["type"], "reasoning");
    assert_eq!(folded["output"][0]["content"][0]["type"], "reasoning_text");
    assert_eq!(folded["output"][1]["type"], "message");
    assert!(has_kind(&body.events, "response.reasoning_text.delta"));
    golden("reasoning", &body);
}

#[tokio::test]
async fn refusal_is_a_refusal_content_part() {
    let (_up, relay) = plain_relay().await;
    let body = relay.stream_input("fake-model?refusal=1", "bad").await;
    let folded = check_events(&body.events);
    let part = &folded["output"][0]["content"][0];
    assert_eq!(part["type"], "refusal");
    assert_eq!(part["refusal"], "I'm sorry, I can't help with that.");
    assert!(has_kind(&body.events, "response.refusal.done"));
}

#[tokio::test]
async fn length_finish_ends_incomplete_with_max_output_tokens() {
    let (_up, relay) = plain_relay().await;
    let body = relay.stream(&json!({"model": "fake-model?finish=length", "input": "long", "stream": true, "max_output_tokens": 16})).await;
    let folded = check_events(&body.events);
    let last = body.events.last().unwrap();
    assert_eq!(last["type"], "response.incomplete");
    assert_eq!(folded["status"], "incomplete");
    assert_eq!(folded["incomplete_details"]["reason"], "max_output_tokens");
    assert_eq!(folded["output"][0]["status"], "incomplete");
    golden("length", &body);
}

#[tokio::test]
async fn request_fields_reach_the_chat_upstream() {
    let (up, relay) = plain_relay().await;
    let (status, _) = relay.create(&json!({"model": "fake-model", "instructions": "be brief", "temperature": 0.5, "top_p": 0.9,
            "max_output_tokens": 100, "user": "u1", "reasoning": {"effort": "low"},
            "text": {"format": {"type": "json_schema", "name": "out", "schema": {"type": "object"}, "strict": true}},
            "input": [{"role": "developer", "content": "dev"},
                      {"role": "user", "content": [{"type": "input_text", "text": "look"},
                          {"type": "input_image", "image_url": "data:image/png;base64,AAAA", "detail": "low"},
                          {"type": "input_file", "filename": "a.pdf", "file_data": "data:application/pdf;base64,AAAA"}]}]}))
    .await;
    assert_eq!(status, 200);
    let sent = last_request(&up);
    assert_eq!(sent["stream"], true);
    assert_eq!(sent["stream_options"]["include_usage"], true);
    assert_eq!(sent["temperature"], 0.5);
    assert_eq!(sent["top_p"], 0.9);
    assert_eq!(sent["max_tokens"], 100);
    assert_eq!(sent["user"], "u1");
    assert_eq!(sent["reasoning_effort"], "low");
    assert_eq!(sent["response_format"]["type"], "json_schema");
    assert_eq!(sent["response_format"]["json_schema"]["name"], "out");
    assert_eq!(
        sent["messages"][0],
        json!({"role": "system", "content": "be brief"})
    );
    assert_eq!(
        sent["messages"][1],
        json!({"role": "system", "content": "dev"})
    );
    let parts = &sent["messages"][2]["content"];
    assert_eq!(parts[0], json!({"type": "text", "text": "look"}));
    assert_eq!(parts[1]["image_url"]["url"], "data:image/png;base64,AAAA");
    assert_eq!(parts[2]["file"]["filename"], "a.pdf");
}

#[tokio::test]
async fn responses_upstream_gives_the_same_events_as_chat_upstream() {
    let up = upstream().await;
    let mut logs = Vec::new();
    for api in [UpstreamApi::Chat, UpstreamApi::Responses] {
        let r = relay_over_api(&up, api).await;
        let tools = json!([{"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]}}]);
        let body = r.stream(&json!({"model": "fake-model?reasoning=2", "input": "CALL get_weather {\"location\":\"Paris\"}", "tools": tools, "stream": true})).await;
        check_events(&body.events);
        logs.push(kinds(&body.events));
    }
    assert_eq!(logs[0], logs[1]);
    assert!(up.requests().iter().any(|r| r.path == "/v1/responses"));
}

#[tokio::test]
async fn assistant_text_goes_back_to_a_responses_upstream_with_annotations_and_no_nulls() {
    let up = upstream().await;
    let mut c = config(&up.base_url());
    c.upstream_api = responses_relay::upstream::UpstreamApi::Responses;
    let r = relay(c).await;
    let (status, a) = r
        .create(&json!({"model": "fake-model", "input": "hello"}))
        .await;
    assert_eq!(status, 200, "{a}");
    let (status, b) = r
        .create(&json!({"model": "fake-model", "input": "again", "previous_response_id": a["id"]}))
        .await;
    assert_eq!(status, 200, "{b}");
    let sent = last_request(&up);
    let assistant = sent["input"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["role"] == "assistant")
        .expect("the earlier answer was sent");
    let part = &assistant["content"][0];
    assert_eq!(part["type"], "output_text");
    assert_eq!(part["text"], *first_text(&a));
    assert_eq!(part["annotations"], json!([]), "{assistant}");
    assert!(
        part.as_object().unwrap().values().all(|v| !v.is_null()),
        "a null reached the upstream: {assistant}"
    );
}

#[tokio::test]
async fn responses_only_fields_reach_a_responses_upstream_and_stay_off_chat() {
    let up = upstream().await;
    let body = json!({"model": "fake-model", "input": "hi", "reasoning": {"effort": "low", "summary": "auto"},
                      "text": {"verbosity": "low"}, "truncation": "auto", "prompt_cache_key": "cache-1", "prompt_cache_retention": "24h", "safety_identifier": "user-1"});
    for api in [UpstreamApi::Responses, UpstreamApi::Chat] {
        let r = relay_over_api(&up, api).await;
        let (status, answer) = r.create(&body).await;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["reasoning"]["summary"], "auto");
        let sent = last_request(&up);
        if api == responses_relay::upstream::UpstreamApi::Responses {
            assert_eq!(
                sent["reasoning"],
                json!({"effort": "low", "summary": "auto"}),
                "{sent}"
            );
            assert_eq!(sent["text"]["verbosity"], "low", "{sent}");
            assert_eq!(sent["truncation"], "auto");
            assert_eq!(sent["prompt_cache_key"], "cache-1");
            assert_eq!(sent["prompt_cache_retention"], "24h");
            assert_eq!(sent["safety_identifier"], "user-1");
        } else {
            assert_eq!(sent["reasoning_effort"], "low", "{sent}");
            for key in [
                "reasoning",
                "text",
                "truncation",
                "prompt_cache_key",
                "prompt_cache_retention",
                "safety_identifier",
            ] {
                assert!(
                    sent.get(key).is_none(),
                    "{key} reached the chat upstream: {sent}"
                );
            }
        }
        r.shutdown().await;
    }
}
