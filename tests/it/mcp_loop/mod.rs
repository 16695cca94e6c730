//! Hosted MCP tools end to end: discovery, the agent loop, `mcp_call` results and failures,
//! approvals holding calls back, bounds, list reuse and secret redaction, with the relay in front
//! of the fake upstream and a real rmcp server on loopback.
//! How tool lists are reused (or listed again) across requests is in `tool_lists`.

mod tool_lists;

use serde_json::{Value, json};

use crate::support::*;

#[tokio::test]
async fn mcp_tool_call_runs_and_the_model_answers_with_its_result() {
    let (up, server, relay) = server_and_relay().await;
    let body = relay
        .stream(
            &json!({"model": "fake-model", "input": "CALL add {\"a\":2,\"b\":3}", "stream": true,
                "tools": [mcp_tool("math", &server.url())]}),
        )
        .await;
    let folded = check_events(&body.events);
    let out = folded["output"].as_array().unwrap();
    let types: Vec<&str> = out.iter().map(|i| i["type"].as_str().unwrap()).collect();
    assert_eq!(types, ["mcp_list_tools", "mcp_call", "message"]);
    let listed: Vec<&str> = strs(&out[0]["tools"], "name");
    assert!(
        listed.contains(&"add") && listed.contains(&"echo"),
        "{listed:?}"
    );
    assert_eq!(out[0]["server_label"], "math");
    let call = &out[1];
    assert_eq!(
        (call["name"].as_str(), call["server_label"].as_str()),
        (Some("add"), Some("math"))
    );
    assert_eq!(call["status"], "completed");
    assert_eq!(call["error"], Value::Null);
    assert_eq!(call["approval_request_id"], Value::Null);
    assert!(call["output"].as_str().unwrap().contains('5'), "{call}");
    assert_eq!(
        out[2]["content"][0]["text"],
        format!("Tool results: {}", call["output"].as_str().unwrap())
    );
    let k = kinds(&body.events);
    for needed in [
        "response.mcp_list_tools.in_progress",
        "response.mcp_list_tools.completed",
        "response.mcp_call.in_progress",
        "response.mcp_call_arguments.delta",
        "response.mcp_call_arguments.done",
        "response.mcp_call.completed",
    ] {
        assert!(k.iter().any(|x| x == needed), "missing {needed}");
    }
    // The model saw the MCP tool as a valid, unique function name and got the result back.
    let reqs = up.requests();
    let first = &reqs[reqs.len() - 2].body;
    let names: Vec<&str> = first["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert!(
        names
            .iter()
            .all(|n| responses_relay::api::request::valid_name(n))
    );
    assert!(
        first["tools"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["function"]["description"].is_string())
    );
    let second = &reqs[reqs.len() - 1].body;
    let last = second["messages"].as_array().unwrap().last().unwrap();
    assert_eq!(last["role"], "tool");
    assert_eq!(last["content"], call["output"]);
    assert_eq!(server.count("tools/call"), 1);
    golden_at(
        "mcp_call",
        &body,
        &[(&server.url(), "http://mcp-test-server/mcp")],
    );
}

#[tokio::test]
async fn failing_tools_are_data_and_the_run_goes_on() {
    let (_up, server, relay) = server_and_relay().await;
    let body = relay.stream(&json!({"model": "fake-model", "input": "CALL fail {}\nCALL boom {}\nCALL nope {}", "stream": true,
                "tools": [mcp_tool("t", &server.url())]}))
    .await;
    let folded = check_events(&body.events);
    assert_eq!(folded["status"], "completed");
    let calls = items_of(&folded, "mcp_call");
    assert_eq!(
        calls.len(),
        2,
        "the unknown tool is a function call for the client: {folded}"
    );
    assert_eq!(calls[0]["status"], "failed");
    assert_eq!(calls[0]["output"], Value::Null);
    assert_eq!(calls[0]["error"]["type"], "mcp_tool_execution_error");
    assert_eq!(
        calls[0]["error"]["content"][0]["text"],
        "tool failed on purpose"
    );
    assert_eq!(
        calls[1]["error"],
        json!({"type": "mcp_protocol_error", "code": -32042, "message": "boom"})
    );
    assert_eq!(
        kinds(&body.events)
            .iter()
            .filter(|k| *k == "response.mcp_call.failed")
            .count(),
        2
    );
}

#[tokio::test]
async fn failed_calls_are_told_to_the_model_which_answers() {
    let (_up, server, relay) = server_and_relay().await;
    let (status, r) = relay.create(&json!({"model": "fake-model", "input": "CALL fail {}", "tools": [mcp_tool("t", &server.url())]}))
    .await;
    assert_eq!(status, 200);
    let text = items_of(&r, "message")[0]["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(text.contains("tool failed on purpose"), "{text}");
    golden_response_kinds(&r, &["mcp_list_tools", "mcp_call", "message"]);
}

fn golden_response_kinds(r: &Value, expected: &[&str]) {
    let got: Vec<&str> = strs(&r["output"], "type");
    assert_eq!(got, expected, "{r}");
}

#[tokio::test]
async fn unreachable_server_is_reported_in_its_list_item_or_fails_with_424() {
    let up = upstream().await;
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let dead = format!("http://{closed}/mcp");
    let relay_continue = relay(config(&up.base_url())).await;
    let body = relay_continue.stream(&json!({"model": "fake-model", "input": "hello", "stream": true, "tools": [mcp_tool("gone", &dead)]}))
    .await;
    let folded = check_events(&body.events);
    assert_eq!(folded["status"], "completed");
    let list = &folded["output"][0];
    assert_eq!(list["type"], "mcp_list_tools");
    assert_eq!(list["tools"], json!([]));
    assert!(list["error"].as_str().unwrap().contains("gone"), "{list}");
    assert!(has_kind(&body.events, "response.mcp_list_tools.failed"));

    let mut c = config(&up.base_url());
    c.mcp.discovery_failure = responses_relay::config::DiscoveryFailure::Fail;
    let relay_fail = relay(c).await;
    let (status, err) = relay_fail.create(&json!({"model": "fake-model", "input": "hello", "stream": true, "tools": [mcp_tool("gone", &dead)]}))
    .await;
    assert_eq!(status, 424, "{err}");
    assert_eq!(err["error"]["type"], "external_connector_error");
    assert_eq!(err["error"]["param"], "tools");
    assert!(error_message(&err).contains("'gone'"));
}

#[tokio::test]
async fn calls_needing_approval_are_requested_not_run() {
    let (_up, server, relay) = server_and_relay().await;
    // No require_approval: the relay's default is OpenAI's `always`.
    let tool = json!({"type": "mcp", "server_label": "m", "server_url": server.url()});
    let body = relay.stream(&json!({"model": "fake-model", "input": "CALL add {\"a\":1,\"b\":1}", "stream": true, "tools": [tool]}))
    .await;
    let folded = check_events(&body.events);
    assert_eq!(folded["status"], "completed");
    golden_response_kinds(&folded, &["mcp_list_tools", "mcp_approval_request"]);
    let req = &folded["output"][1];
    assert!(req["id"].as_str().unwrap().starts_with("mcpr_"));
    assert_eq!(
        (req["name"].as_str(), req["server_label"].as_str()),
        (Some("add"), Some("m"))
    );
    assert_eq!(req["arguments"], "{\"a\":1,\"b\":1}");
    assert_eq!(
        server.count("tools/call"),
        0,
        "a call that needs approval ran"
    );
    golden_at(
        "mcp_approval_request",
        &body,
        &[(&server.url(), "http://mcp-test-server/mcp")],
    );
}

#[tokio::test]
async fn a_client_function_call_in_the_same_turn_ends_the_run_after_the_mcp_calls() {
    let (up, server, relay) = server_and_relay().await;
    let (status, r) = relay
        .create(
            &json!({"model": "fake-model", "input": "CALL echo {\"text\":\"hi\"}\nCALL local {}",
                "tools": [mcp_tool("s", &server.url()), {"type": "function", "name": "local"}]}),
        )
        .await;
    assert_eq!(status, 200);
    golden_response_kinds(&r, &["mcp_list_tools", "mcp_call", "function_call"]);
    assert_eq!(r["output"][1]["status"], "completed");
    assert_eq!(r["output"][2]["name"], "local");
    assert_eq!(r["status"], "completed");
    assert_eq!(
        up.requests().len(),
        1,
        "the model must not be sampled again before the client answers"
    );
}

#[tokio::test]
async fn max_tool_calls_ends_the_run_incomplete_without_running_the_rest() {
    let (_up, server, relay) = server_and_relay().await;
    let body = relay.stream(&json!({"model": "fake-model", "input": "CALL echo {\"text\":\"1\"}\nCALL echo {\"text\":\"2\"}", "stream": true,
                "max_tool_calls": 1, "tools": [mcp_tool("s", &server.url())]}))
    .await;
    let folded = check_events(&body.events);
    assert_eq!(folded["status"], "incomplete");
    assert_eq!(folded["incomplete_details"]["reason"], "max_tool_calls");
    let calls = items_of(&folded, "mcp_call");
    assert_eq!(
        (calls[0]["status"].as_str(), calls[1]["status"].as_str()),
        (Some("completed"), Some("failed"))
    );
    assert_eq!(server.count("tools/call"), 1);
}

#[tokio::test]
async fn echoed_tools_and_the_event_log_carry_no_secrets() {
    let (_up, server, relay) = server_and_relay().await;
    let url = format!("{}?token=SECRET-QUERY", server.url());
    let tool = json!({"type": "mcp", "server_label": "s", "server_url": url, "require_approval": "never",
                      "authorization": "SECRET-TOKEN", "headers": {"x-api-key": "SECRET-HEADER"}});
    let r = relay.send(&json!({"model": "fake-model", "input": "CALL whoami {}", "stream": true, "tools": [tool]})).await;
    let text = r.text().await.unwrap();
    for secret in ["SECRET-QUERY", "SECRET-TOKEN", "SECRET-HEADER"] {
        assert!(!text.contains(secret), "{secret} leaked into the stream");
    }
    let body = parse_sse(&text);
    let folded = check_events(&body.events);
    let echo = &folded["tools"][0];
    assert_eq!(echo["headers"], Value::Null);
    // Both keys are there, null (SPEC §6), as a client reading them expects.
    assert_eq!(echo.get("authorization"), Some(&Value::Null), "{echo}");
    assert_eq!(echo["server_url"], format!("{}?***", server.url()));
    // The secrets did reach the MCP server.
    let call = items_of(&folded, "mcp_call")[0];
    assert!(
        call["output"].as_str().unwrap().contains("authorized") || call["status"] == "completed",
        "{call}"
    );
    assert!(
        server
            .requests_seen()
            .iter()
            .any(|r| r.headers.iter().any(|(k, _)| k == "x-api-key"))
    );
}

#[tokio::test]
async fn tool_images_reach_vision_upstreams_and_others_get_a_placeholder() {
    let up = upstream().await;
    let server = mcp_server(Default::default()).await;
    for vision in [false, true] {
        let mut c = config(&up.base_url());
        c.upstream_vision = vision;
        let relay = relay(c).await;
        let (status, r) = relay.create(&json!({"model": "fake-model", "input": "CALL image {}", "tools": [mcp_tool("pics", &server.url())]}))
        .await;
        assert_eq!(status, 200);
        let call = items_of(&r, "mcp_call")[0];
        assert!(
            call["output"]
                .as_str()
                .unwrap()
                .contains("[image: image/png"),
            "{call}"
        );
        let sent = last_request(&up);
        let messages = sent["messages"].as_array().unwrap();
        let image_urls: Vec<&str> = messages
            .iter()
            .filter(|m| m["role"] == "user")
            .flat_map(|m| m["content"].as_array().into_iter().flatten())
            .filter_map(|p| p["image_url"]["url"].as_str())
            .collect();
        if vision {
            assert_eq!(image_urls.len(), 1, "{sent}");
            assert!(image_urls[0].starts_with("data:image/png;base64,"));
        } else {
            assert!(image_urls.is_empty());
        }
    }
}

#[tokio::test]
async fn structured_and_oversized_results_become_bounded_text() {
    let up = upstream().await;
    let server = mcp_server(Default::default()).await;
    let mut c = config(&up.base_url());
    c.mcp.max_output_bytes = 1000;
    let relay = relay(c).await;
    let (_, r) = relay.create(&json!({"model": "fake-model", "input": "CALL structured {}\nCALL big {\"bytes\":100000}", "tools": [mcp_tool("s", &server.url())]}))
    .await;
    let calls = items_of(&r, "mcp_call");
    let structured: Value = serde_json::from_str(calls[0]["output"].as_str().unwrap()).unwrap();
    assert_eq!(structured, json!({"temperature": 21.5, "unit": "C"}));
    let big = calls[1]["output"].as_str().unwrap();
    assert!(
        big.len() < 1100 && big.contains("truncated"),
        "{} bytes",
        big.len()
    );
    let sent = last_request(&up).to_string();
    assert!(sent.len() < 20_000, "the whole output reached the model");
}

#[tokio::test]
async fn oversized_errors_of_failed_calls_are_bounded_like_results() {
    let up = upstream().await;
    let server = mcp_server(Default::default()).await;
    let mut c = config(&up.base_url());
    c.mcp.max_output_bytes = 1000;
    let relay = relay(c).await;
    server.set_fail_bytes(200_000);
    let text = post_text(
        &relay.url("/v1/responses"),
        &json!({"model": "fake-model", "input": "CALL fail {}", "stream": true, "tools": [mcp_tool("s", &server.url())]}),
    )
    .await;
    assert!(
        text.len() < 50_000,
        "the whole error reached the client: {} bytes",
        text.len()
    );
    let folded = check_events(&parse_sse(&text).events);
    let call = items_of(&folded, "mcp_call")[0];
    assert_eq!(call["status"], "failed");
    let error_text = call["error"]["content"][0]["text"].as_str().unwrap();
    assert!(
        error_text.starts_with("eee")
            && error_text.contains("truncated")
            && error_text.len() < 1100,
        "{call}"
    );
    let sent = last_request(&up).to_string();
    assert!(
        sent.len() < 20_000,
        "the whole error reached the model: {} bytes",
        sent.len()
    );
}

#[tokio::test]
async fn max_steps_ends_the_run_incomplete_after_that_many_model_turns() {
    let (up, server, relay) = server_and_relay().await;
    let script = "CALL echo {\"text\":\"1\"}\nTHEN\nCALL echo {\"text\":\"2\"}\nTHEN\nCALL echo {\"text\":\"3\"}";
    let body = relay.stream(&json!({"model": "fake-model", "input": script, "stream": true, "max_steps": 2, "tools": [mcp_tool("s", &server.url())]}))
    .await;
    let folded = check_events(&body.events);
    assert_eq!(folded["status"], "incomplete");
    assert_eq!(folded["incomplete_details"]["reason"], "max_steps");
    assert_eq!(
        items_of(&folded, "mcp_call").len(),
        2,
        "two steps, two calls"
    );
    assert_eq!(server.count("tools/call"), 2);
    let turns = up
        .requests()
        .iter()
        .filter(|r| r.body["messages"][0]["content"] == script)
        .count();
    assert_eq!(turns, 2, "the model was sampled exactly max_steps times");
}

#[tokio::test]
async fn tool_choice_naming_an_mcp_tool_forces_that_call_first_then_lets_the_model_answer() {
    let (up, server, relay) = server_and_relay().await;
    let (status, r) = relay.create(&json!({"model": "fake-model", "input": "say hi", "tools": [mcp_tool("s", &server.url())],
                "tool_choice": {"type": "mcp", "server_label": "s", "name": "echo"}}))
    .await;
    assert_eq!(status, 200, "{r}");
    let reqs = up.requests();
    let first = &reqs[reqs.len() - 2].body;
    assert_eq!(first["tool_choice"]["type"], "function");
    let forced = first["tool_choice"]["function"]["name"].as_str().unwrap();
    assert!(forced.ends_with("echo"), "{forced}");
    assert_eq!(
        reqs[reqs.len() - 1].body["tool_choice"],
        "auto",
        "the force applies to the first turn only"
    );
    let calls = items_of(&r, "mcp_call");
    assert_eq!((calls.len(), calls[0]["name"].as_str()), (1, Some("echo")));
    assert_eq!(r["status"], "completed");
    let tools = json!([mcp_tool("s", &server.url())]);
    let other = json!({"type": "mcp", "server_label": "other"});
    let (status, err) = relay
        .create(&json!({"model": "fake-model", "input": "x", "tools": tools, "tool_choice": other}))
        .await;
    assert_eq!(
        param_error(status, &err),
        (400, Some("tool_choice.server_label"))
    );
}

#[tokio::test]
async fn usage_is_summed_over_every_model_turn() {
    let (up, server, relay) = server_and_relay().await;
    let (_, r) = relay.create(&json!({"model": "fake-model", "input": "CALL echo {\"text\":\"a\"}\nTHEN\nCALL echo {\"text\":\"b\"}", "tools": [mcp_tool("s", &server.url())]}))
    .await;
    let reqs = up.requests();
    let turns = &reqs[reqs.len() - 3..];
    // The fake model reports 10 prompt tokens per message it was sent.
    let prompt: u64 = turns
        .iter()
        .map(|t| t.body["messages"].as_array().unwrap().len() as u64 * 10)
        .sum();
    assert_eq!(r["usage"]["input_tokens"], prompt, "{}", r["usage"]);
    assert_eq!(
        r["usage"]["total_tokens"].as_u64().unwrap(),
        r["usage"]["input_tokens"].as_u64().unwrap()
            + r["usage"]["output_tokens"].as_u64().unwrap()
    );
}

#[tokio::test]
async fn a_model_that_calls_tools_forever_is_stopped_by_the_relay_step_cap() {
    let up = upstream().await;
    let server = mcp_server(Default::default()).await;
    let mut c = config(&up.base_url());
    c.limits.max_steps = 5;
    let relay = relay(c).await;
    // A model that keeps calling tools (here a 20-round script): the relay's cap ends the run.
    let script = (0..20)
        .map(|i| format!("CALL echo {{\"text\":\"{i}\"}}"))
        .collect::<Vec<_>>()
        .join("\nTHEN\n");
    let (_, r) = relay.create(&json!({"model": "fake-model", "input": script, "tools": [mcp_tool("s", &server.url())]}))
    .await;
    assert_eq!(r["status"], "incomplete");
    assert_eq!(r["incomplete_details"]["reason"], "max_steps");
    assert_eq!(server.count("tools/call"), 5);
}

#[tokio::test]
async fn an_mcp_tool_without_require_approval_echoes_the_default_the_relay_applies() {
    let up = upstream().await;
    let server = mcp_server(Default::default()).await;
    use responses_relay::mcp::Approval;
    for (default, echoed, call_runs) in [
        (Approval::Never, "never", true),
        (Approval::Always, "always", false),
    ] {
        let mut c = config(&up.base_url());
        c.mcp.default_approval = default;
        let relay = relay(c).await;
        let tool = json!({"type": "mcp", "server_label": "s", "server_url": server.url()});
        let (status, r) = relay.create(&json!({"model": "fake-model", "input": "CALL echo {\"text\":\"x\"}", "tools": [tool]}))
        .await;
        assert_eq!(status, 200, "{r}");
        assert_eq!(r["tools"][0]["require_approval"], echoed, "{r}");
        let types: Vec<&str> = strs(&r["output"], "type");
        assert_eq!(
            types.contains(&"mcp_call"),
            call_runs,
            "{default:?}: {types:?}"
        );
        assert_eq!(
            types.contains(&"mcp_approval_request"),
            !call_runs,
            "{default:?}: {types:?}"
        );
        relay.shutdown().await;
    }
}

#[tokio::test]
async fn max_output_tokens_bounds_the_whole_response_not_each_turn() {
    let (up, server, relay) = server_and_relay().await;
    let url = relay.url("/v1/responses");
    let model = "fake-model?reasoning=20";
    let ask = "CALL echo {\"text\":\"budget\"}";
    // The first turn alone (its call held for approval) tells what the model spends on it.
    let held = json!([{"type": "mcp", "server_label": "s", "server_url": server.url(), "require_approval": "always"}]);
    let (_, first) = post(&url, &json!({"model": model, "input": ask, "tools": held})).await;
    let spent = first["usage"]["output_tokens"].as_u64().unwrap();
    assert!(spent >= 20, "{first}");
    let tools = json!([mcp_tool("s", &server.url())]);
    let turns = || -> Vec<Value> {
        up.requests()
            .iter()
            .filter(|r| r.path == "/v1/chat/completions")
            .map(|r| r.body.clone())
            .collect()
    };

    // Room left after the first turn: the second is asked for only what is left.
    let before = turns().len();
    let (status, r) = post(
        &url,
        &json!({"model": model, "input": ask, "tools": tools, "max_output_tokens": spent + 20}),
    )
    .await;
    assert_eq!(
        (status, r["status"].as_str()),
        (200, Some("completed")),
        "{r}"
    );
    let sent = turns();
    assert_eq!(sent.len(), before + 2);
    assert_eq!(sent[before]["max_tokens"], spent + 20);
    assert_eq!(sent[before + 1]["max_tokens"], 20);

    // Spent by the first turn: its call still runs (the model asked for it), but the model is
    // not sampled again and the response ends incomplete, its usage within what the turn spent.
    let before = turns().len();
    let calls = server.count("tools/call");
    let (status, r) = post(
        &url,
        &json!({"model": model, "input": ask, "tools": tools, "max_output_tokens": 16}),
    )
    .await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["status"], "incomplete", "{r}");
    assert_eq!(r["incomplete_details"]["reason"], "max_output_tokens");
    assert_eq!(turns().len(), before + 1, "the model was sampled again");
    assert_eq!(server.count("tools/call"), calls + 1);
    assert_eq!(items_of(&r, "mcp_call")[0]["status"], "completed", "{r}");
    assert_eq!(r["usage"]["output_tokens"], spent);

    // A Responses upstream refuses fewer than 16: what is left is asked for as at least 16.
    let mut c = config(&up.base_url());
    c.upstream_api = responses_relay::upstream::UpstreamApi::Responses;
    let on_responses = crate::support::relay(c).await;
    let (status, r) = on_responses
        .create(
            &json!({"model": model, "input": ask, "tools": tools, "max_output_tokens": spent + 5}),
        )
        .await;
    assert_eq!(
        (status, r["status"].as_str()),
        (200, Some("completed")),
        "{r}"
    );
    let sent: Vec<Value> = up
        .requests()
        .iter()
        .filter(|r| r.path == "/v1/responses")
        .map(|r| r.body.clone())
        .collect();
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[0]["max_output_tokens"], spent + 5);
    assert_eq!(sent[1]["max_output_tokens"], 16);
}

#[tokio::test]
async fn parallel_calls_streamed_at_one_index_stay_separate_calls() {
    // Ollama and SGLang stream every tool call of a turn at `index` 0, told apart only by their
    // ids; merged by index, the second call's arguments would be glued onto the first's.
    let (up, server, relay) = server_and_relay().await;
    let body = relay
        .stream(&json!({"model": "fake-model?one_index=1", "stream": true,
                "input": "CALL echo {\"text\":\"first\"}\nCALL add {\"a\":2,\"b\":3}",
                "tools": [mcp_tool("s", &server.url())]}))
        .await;
    let sent = up.requests()[0].body["model"].clone();
    assert_eq!(sent, "fake-model?one_index=1");
    let folded = check_events(&body.events);
    assert_eq!(folded["status"], "completed", "{folded}");
    let calls = items_of(&folded, "mcp_call");
    let seen: Vec<(&str, &str, &str)> = calls
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap(),
                c["arguments"].as_str().unwrap(),
                c["status"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("echo", "{\"text\":\"first\"}", "completed"),
            ("add", "{\"a\":2,\"b\":3}", "completed")
        ],
        "{folded}"
    );
    assert_eq!(calls[0]["output"], "first");
    assert_eq!(server.count("tools/call"), 2);
}
