//! The current Responses surface (SPEC §10): request fields, tool types and input items that
//! today's clients send are honoured, mapped or refused by name, and client-executed tools'
//! calls come back as the items OpenAI sends, on both upstream kinds.

use serde_json::{Value, json};

use crate::support::*;
use responses_relay::config::HostedTools;
use responses_relay::upstream::UpstreamApi;

const APIS: [UpstreamApi; 2] = [UpstreamApi::Chat, UpstreamApi::Responses];

/// The function names the upstream was offered in its last request (both wire formats).
fn offered(up: &crate::fake_upstream::FakeUpstream) -> Vec<(String, Value)> {
    let body = last_request(up);
    body["tools"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .map(|t| {
            let f = t.get("function").cloned().unwrap_or(t);
            (f["name"].as_str().unwrap().to_string(), f)
        })
        .collect()
}

#[tokio::test]
async fn fields_openai_accepts_are_taken_or_refused_by_name() {
    let up = upstream().await;
    let relay = relay_over_api(&up, UpstreamApi::Responses).await;
    let url = relay.url("/v1/responses");
    for extra in [
        json!({"client_metadata": {"x-codex-turn": "1"}}),
        json!({"background_options": {"completion_window": "soonest"}}),
        json!({"service_tier": "flex"}),
        json!({"access_programs": {"cyber": "standard"}}),
        json!({"image": {"context_compression": "auto"}}),
        json!({"prompt_cache_options": {"mode": "implicit"}}),
        json!({"context_management": []}),
        json!({"context_management": [{"type": "compaction", "compact_threshold": 100000}]}),
        json!({"tools": [{"type": "function", "name": "f", "defer_loading": true, "output_schema": {"type": "object"}, "allowed_callers": ["direct"]}]}),
        json!({"input": [{"role": "user", "content": "hi", "internal_chat_message_metadata_passthrough": {"turn": 1}}]}),
    ] {
        let mut body = json!({"model": "fake-model", "input": "hi"});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let (status, r) = post(&url, &body).await;
        assert_eq!(status, 200, "{body} → {r}");
        assert_eq!(r["status"], "completed", "{body} → {r}");
    }
    // Forwarded to a Responses upstream as sent.
    post(
        &url,
        &json!({"model": "fake-model", "input": "hi", "prompt_cache_options": {"mode": "implicit", "ttl": "30m"}}),
    )
    .await;
    assert_eq!(
        up.requests().last().unwrap().body["prompt_cache_options"],
        json!({"mode": "implicit", "ttl": "30m"})
    );
    for (extra, param) in [
        (json!({"prompt": {"id": "pmpt_1"}}), "prompt"),
        (
            json!({"moderation": {"model": "omni-moderation-latest"}}),
            "moderation",
        ),
        (
            json!({"tool_choice": {"type": "web_search_preview"}, "tools": [{"type": "web_search_preview"}]}),
            "tool_choice",
        ),
    ] {
        let mut body = json!({"model": "fake-model", "input": "hi"});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        let (status, r) = post(&url, &body).await;
        assert_eq!(status, 400, "{body} → {r}");
        assert_eq!(r["error"]["param"], param, "{body} → {r}");
        assert_eq!(r["error"]["code"], "unsupported_parameter", "{body} → {r}");
        assert!(error_message(&r).len() > 40, "says why: {r}");
    }
    let (status, r) = post(
        &url,
        &json!({"model": "fake-model", "input": "hi", "no_such_field": 1}),
    )
    .await;
    assert_eq!(code_error(status, &r), (400, Some("unknown_parameter")));
}

#[tokio::test]
async fn hosted_tools_are_echoed_and_left_out_of_the_model_tools_by_default() {
    let up = upstream().await;
    for api in APIS {
        let relay = relay_over_api(&up, api).await;
        let web = json!({"type": "web_search", "external_web_access": false});
        let (status, r) = relay.create(&json!({"model": "fake-model", "input": "hi", "tools": [web, {"type": "function", "name": "f"}, {"type": "code_interpreter", "container": {"type": "auto"}}]}))
        .await;
        assert_eq!(status, 200, "{r}");
        assert_eq!(r["tools"][0], web);
        assert_eq!(r["tools"][2]["type"], "code_interpreter");
        let names: Vec<String> = offered(&up).into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["f"], "{api:?}");
    }
}

#[tokio::test]
async fn hosted_tools_are_refused_naming_the_tool_under_reject() {
    let (up, relay) = configured_relay(|c| c.hosted_tools = HostedTools::Reject).await;
    let (status, r) = relay.create(&json!({"model": "fake-model", "input": "hi", "tools": [{"type": "function", "name": "f"}, {"type": "file_search", "vector_store_ids": ["vs_1"]}]}))
    .await;
    assert_eq!(status, 400, "{r}");
    assert_eq!(r["error"]["param"], "tools[1]");
    assert_eq!(r["error"]["code"], "unsupported_parameter");
    assert!(up.requests().is_empty(), "the model was not asked");
}

#[tokio::test]
async fn a_namespaced_function_call_carries_its_namespace_and_goes_back_under_its_model_name() {
    let up = upstream().await;
    let namespace = json!({"type": "namespace", "name": "mcp__files", "description": "Files on disk", "tools": [
        {"type": "function", "name": "read_file", "description": "Read a file", "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}
    ]});
    for api in APIS {
        let relay = relay_over_api(&up, api).await;
        let url = relay.url("/v1/responses");
        let (status, r) = post(
            &url,
            &json!({"model": "fake-model", "store": false, "input": "CALL mcp__files__read_file {\"path\":\"a.txt\"}", "tools": [namespace]}),
        )
        .await;
        assert_eq!(status, 200, "{r}");
        let call = &r["output"][0];
        assert_eq!(call["type"], "function_call", "{r}");
        assert_eq!(call["name"], "read_file");
        assert_eq!(call["namespace"], "mcp__files");
        assert_eq!(call["arguments"], "{\"path\":\"a.txt\"}");
        assert_eq!(r["tools"][0], namespace, "echoed as sent");
        let (name, def) = offered(&up).remove(0);
        assert_eq!(name, "mcp__files__read_file");
        assert!(
            def["description"]
                .as_str()
                .unwrap()
                .contains("Files on disk")
        );
        // The history sent back statelessly reaches the model under the same name.
        let (status, next) = post(
            &url,
            &json!({"model": "fake-model", "store": false, "tools": [namespace], "input": [
                {"role": "user", "content": "read it"},
                call,
                {"type": "function_call_output", "call_id": call["call_id"], "output": "contents of a"}
            ]}),
        )
        .await;
        assert_eq!(status, 200, "{next}");
        assert_eq!(
            next["output_text"].as_str().or(first_text(&next).as_str()),
            Some("Tool results: contents of a")
        );
        let sent = last_request(&up).to_string();
        assert!(sent.contains("mcp__files__read_file"), "{sent}");
    }
}

#[tokio::test]
async fn a_custom_tool_call_streams_its_input_and_its_history_goes_back_as_a_function() {
    let up = upstream().await;
    let custom = json!({"type": "custom", "name": "apply_patch", "description": "Edit files.",
        "format": {"type": "grammar", "syntax": "lark", "definition": "start: \"*** Begin Patch\" /(.|\\n)*/"}});
    let patch = "*** Begin Patch\n*** Add File: hello.txt\n+hello\n*** End Patch";
    let say = format!("CALL apply_patch {}", json!({ "input": patch }));
    for api in APIS {
        let relay = relay_over_api(&up, api).await;
        let url = relay.url("/v1/responses");
        let body = stream(
            &url,
            &json!({"model": "fake-model", "store": false, "stream": true, "input": say, "tools": [custom]}),
        )
        .await;
        let folded = check_events(&body.events);
        let kinds = kinds(&body.events);
        let at = |k: &str| {
            kinds
                .iter()
                .position(|x| x == k)
                .unwrap_or_else(|| panic!("{k} in {kinds:?}"))
        };
        assert!(at("response.output_item.added") < at("response.custom_tool_call_input.delta"));
        assert!(
            at("response.custom_tool_call_input.delta")
                < at("response.custom_tool_call_input.done")
        );
        assert!(at("response.custom_tool_call_input.done") < at("response.output_item.done"));
        let call = &folded["output"][0];
        assert_eq!(call["type"], "custom_tool_call", "{folded}");
        assert_eq!(call["name"], "apply_patch");
        assert_eq!(call["input"], patch);
        assert!(call["call_id"].as_str().unwrap().starts_with("call_"));
        let (name, def) = offered(&up).remove(0);
        assert_eq!(name, "apply_patch");
        match api {
            // A chat upstream gets a function of one string argument, the grammar described.
            UpstreamApi::Chat => {
                assert_eq!(def["parameters"]["required"], json!(["input"]));
                let description = def["description"].as_str().unwrap();
                assert!(description.contains("lark grammar"), "{def}");
            }
            // A Responses upstream gets the tool as the client sent it.
            UpstreamApi::Responses => assert_eq!(def, custom),
            UpstreamApi::Anthropic | UpstreamApi::Gemini => {
                unreachable!("not driven here (tests/it/anthropic.rs, gemini.rs)")
            }
        }
        let (status, next) = post(
            &url,
            &json!({"model": "fake-model", "store": false, "tools": [custom], "input": [
                {"role": "user", "content": "add hello.txt"},
                {"type": "custom_tool_call", "call_id": call["call_id"], "name": "apply_patch", "input": patch},
                {"type": "custom_tool_call_output", "call_id": call["call_id"], "output": "Done: A hello.txt"}
            ]}),
        )
        .await;
        assert_eq!(status, 200, "{next}");
        assert_eq!(first_text(&next), "Tool results: Done: A hello.txt");
        if api == UpstreamApi::Responses {
            let sent = up.requests().last().unwrap().body["input"].clone();
            assert_eq!(sent[1]["type"], "custom_tool_call", "{sent}");
            assert_eq!(sent[1]["input"], patch);
            assert_eq!(sent[2]["type"], "custom_tool_call_output", "{sent}");
        }
    }
}

#[tokio::test]
async fn built_in_client_tools_are_handed_back_as_their_call_items_and_their_outputs_reach_the_model()
 {
    let up = upstream().await;
    let tools = json!([
        {"type": "local_shell"},
        {"type": "shell", "environment": {"type": "local"}},
        {"type": "apply_patch"},
        {"type": "computer_use_preview", "display_width": 1024, "display_height": 768, "environment": "linux"}
    ]);
    let say = [
        "CALL local_shell {\"command\":[\"ls\",\"-l\"]}",
        "CALL shell {\"commands\":[\"echo hi\"]}",
        "CALL apply_patch {\"type\":\"create_file\",\"path\":\"a.txt\",\"diff\":\"+a\"}",
        "CALL computer {\"type\":\"click\",\"x\":1,\"y\":2,\"button\":\"left\"}",
    ]
    .join("\n");
    for api in APIS {
        let relay = relay_over_api(&up, api).await;
        let url = relay.url("/v1/responses");
        let (status, r) = post(
            &url,
            &json!({"model": "fake-model", "store": false, "input": say, "tools": tools}),
        )
        .await;
        assert_eq!(status, 200, "{r}");
        assert_eq!(
            output_types(&r),
            [
                "local_shell_call",
                "shell_call",
                "apply_patch_call",
                "computer_call"
            ],
            "{r}"
        );
        let out = &r["output"];
        assert_eq!(out[0]["action"]["type"], "exec");
        assert_eq!(out[0]["action"]["command"], json!(["ls", "-l"]));
        assert_eq!(out[1]["action"]["commands"], json!(["echo hi"]));
        assert_eq!(
            out[2]["operation"],
            json!({"type": "create_file", "path": "a.txt", "diff": "+a"})
        );
        assert_eq!(
            out[3]["action"],
            json!({"type": "click", "x": 1, "y": 2, "button": "left"})
        );
        assert_eq!(out[3]["pending_safety_checks"], json!([]));
        for item in out.as_array().unwrap() {
            assert!(
                item["call_id"].as_str().unwrap().starts_with("call_"),
                "{item}"
            );
            assert_eq!(item["status"], "completed");
        }
        assert_eq!(r["tools"], tools, "echoed as sent");
        let id = |i: usize| out[i]["call_id"].clone();
        let mut input = vec![json!({"role": "user", "content": "go"})];
        input.extend(out.as_array().unwrap().iter().cloned());
        input.extend([
            json!({"type": "local_shell_call_output", "call_id": id(0), "output": "total 0"}),
            json!({"type": "shell_call_output", "call_id": id(1), "output": [{"stdout": "hi\n", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}]}),
            json!({"type": "apply_patch_call_output", "call_id": id(2), "status": "completed", "output": "created"}),
            json!({"type": "computer_call_output", "call_id": id(3), "output": {"type": "computer_screenshot", "image_url": "data:image/png;base64,iVBORw0KGgo="}}),
        ]);
        let (status, next) = post(
            &url,
            &json!({"model": "fake-model", "store": false, "tools": tools, "input": input}),
        )
        .await;
        assert_eq!(status, 200, "{next}");
        let sent = last_request(&up).to_string();
        for seen in [
            "total 0",
            "hi\\\\n",
            "completed: created",
            "Screenshot taken",
            "iVBORw0KGgo=",
        ] {
            assert!(sent.contains(seen), "{seen} in {sent}");
        }
    }
}

#[tokio::test]
async fn a_client_tool_search_is_handed_back_and_the_tools_it_found_are_offered() {
    let up = upstream().await;
    let search =
        json!({"type": "tool_search", "execution": "client", "description": "Find tools."});
    for api in APIS {
        let relay = relay_over_api(&up, api).await;
        let url = relay.url("/v1/responses");
        let (status, r) = post(
            &url,
            &json!({"model": "fake-model", "store": false, "input": "CALL tool_search {\"query\":\"weather\"}", "tools": [search]}),
        )
        .await;
        assert_eq!(status, 200, "{r}");
        let call = &r["output"][0];
        assert_eq!(call["type"], "tool_search_call", "{r}");
        assert_eq!(call["execution"], "client");
        assert_eq!(call["arguments"], json!({"query": "weather"}));
        let (status, next) = post(
            &url,
            &json!({"model": "fake-model", "store": false, "tools": [search], "input": [
                {"role": "user", "content": "what is the weather"},
                call,
                {"type": "tool_search_output", "execution": "client", "call_id": call["call_id"], "status": "completed",
                 "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]},
                {"role": "user", "content": "CALL get_weather {\"city\":\"Oslo\"}"}
            ]}),
        )
        .await;
        assert_eq!(status, 200, "{next}");
        let names: Vec<String> = offered(&up).into_iter().map(|(n, _)| n).collect();
        assert!(names.contains(&"get_weather".to_string()), "{names:?}");
        assert_eq!(next["output"][0]["type"], "function_call", "{next}");
        assert_eq!(next["output"][0]["name"], "get_weather");
    }
}

#[tokio::test]
async fn allowed_tools_narrows_what_the_model_is_offered() {
    let up = upstream().await;
    let relay = relay_over_api(&up, UpstreamApi::Chat).await;
    let (status, r) = relay.create(&json!({"model": "fake-model", "input": "hi", "tools": [
            {"type": "function", "name": "a"}, {"type": "function", "name": "b"}, {"type": "custom", "name": "c"}
        ], "tool_choice": {"type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "b"}, {"type": "custom", "name": "c"}]}}))
    .await;
    assert_eq!(status, 200, "{r}");
    let names: Vec<String> = offered(&up).into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["b", "c"]);
    assert_eq!(
        up.requests().last().unwrap().body["tool_choice"],
        "required"
    );
}

#[tokio::test]
async fn reasoning_sealed_for_a_stateless_client_opens_only_with_the_relays_key() {
    let up = upstream().await;
    let dir = scratch("sealed-reasoning");
    let store = responses_relay::config::StoreKind::Sqlite(dir.join("relay.sqlite3"));
    let start = |secret: Option<&str>| {
        let mut c = config(&up.base_url());
        c.store = store.clone();
        c.secret_key = secret.map(|s| responses_relay::config::Secret(s.into()));
        relay_app(responses_relay::App::new(c))
    };
    let relay = start(None).await;
    let (status, r) = relay.create(&json!({"model": "fake-model?reasoning=3", "input": "think", "store": false, "include": ["reasoning.encrypted_content"]}))
    .await;
    assert_eq!(status, 200, "{r}");
    let reasoning = r["output"][0].clone();
    assert_eq!(reasoning["type"], "reasoning", "{r}");
    let sealed = reasoning["encrypted_content"].as_str().unwrap().to_string();
    assert!(sealed.starts_with("rr1."), "{sealed}");
    assert!(
        !sealed.contains("think"),
        "the reasoning is not readable in the seal"
    );
    // Sent back without its content, after a restart (the key file beside the store is reused).
    relay.shutdown().await;
    let relay = start(None).await;
    let back = json!({"type": "reasoning", "id": reasoning["id"], "summary": [], "encrypted_content": sealed});
    let (status, next) = relay.create(&json!({"model": "fake-model", "input": [{"role": "user", "content": "think"}, back, {"role": "user", "content": "go on"}]}))
    .await;
    assert_eq!(status, 200, "{next}");
    let (_, items) = relay
        .get(&format!(
            "/v1/responses/{}/input_items?order=asc",
            next["id"].as_str().unwrap()
        ))
        .await;
    assert_eq!(items["data"][1]["type"], "reasoning", "{items}");
    assert_eq!(
        items["data"][1]["content"], reasoning["content"],
        "restored from the seal"
    );
    // Changed, or sealed by another key: a 400 naming the item.
    let mut changed = sealed.clone().into_bytes();
    let at = changed.len() - 3;
    changed[at] = if changed[at] == b'x' { b'y' } else { b'x' };
    let changed = String::from_utf8(changed).unwrap();
    for (relay, seal) in [
        (&relay, changed.as_str()),
        (
            &start(Some("another relay's secret")).await,
            sealed.as_str(),
        ),
    ] {
        let (status, err) = relay.create(&json!({"model": "fake-model", "store": false, "input": [{"role": "user", "content": "x"}, {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": seal}]}))
        .await;
        assert_eq!(status, 400, "{err}");
        assert_eq!(err["error"]["param"], "input[1].encrypted_content");
    }
    // Without the include, no seal.
    let (_, plain) = relay
        .create(&json!({"model": "fake-model?reasoning=2", "input": "think", "store": false}))
        .await;
    assert!(
        plain["output"][0].get("encrypted_content").is_none(),
        "{plain}"
    );
}

#[tokio::test]
async fn a_configuration_update_item_changes_reasoning_and_text_from_there_on() {
    let up = upstream().await;
    let relay = relay_over_api(&up, UpstreamApi::Responses).await;
    let (status, r) = relay.create(&json!({"model": "fake-model", "reasoning": {"effort": "low"}, "input": [
            {"role": "user", "content": "first"},
            {"type": "configuration_update", "reasoning": {"effort": "high"}, "text": {"format": {"type": "json_object"}}},
            {"role": "user", "content": "then"}
        ]}))
    .await;
    assert_eq!(status, 200, "{r}");
    let sent = last_request(&up);
    assert_eq!(sent["reasoning"]["effort"], "high", "{sent}");
    assert_eq!(sent["text"]["format"]["type"], "json_object", "{sent}");
    assert_eq!(
        r["reasoning"]["effort"], "low",
        "the request's own setting is echoed"
    );
}

#[tokio::test]
async fn input_tokens_are_what_the_model_server_counts_for_the_request() {
    let up = upstream().await;
    for api in APIS {
        let relay = relay_over_api(&up, api).await;
        let body = json!({"model": "fake-model", "instructions": "be brief",
            "tools": [{"type": "function", "name": "lookup", "parameters": {"type": "object", "properties": {}}}],
            "input": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}]});
        let (status, count) = relay.post("/v1/responses/input_tokens", &body).await;
        assert_eq!(status, 200, "{count}");
        assert_eq!(count["object"], "response.input_tokens");
        // The model server was asked for one token of that very request, its tools included.
        let sent = last_request(&up);
        match api {
            UpstreamApi::Chat => assert_eq!(sent["max_tokens"], 1, "{sent}"),
            UpstreamApi::Responses => assert_eq!(sent["max_output_tokens"], 16, "{sent}"),
            UpstreamApi::Anthropic | UpstreamApi::Gemini => {
                unreachable!("not driven here (tests/it/anthropic.rs, gemini.rs)")
            }
        }
        assert_eq!(offered(&up)[0].0, "lookup");
        let (_, run) = relay.create(&body).await;
        assert_eq!(
            count["input_tokens"], run["usage"]["input_tokens"],
            "{api:?}: the count is the run's own prompt tokens"
        );
        assert!(count["input_tokens"].as_u64().unwrap() > 0);
    }
}

#[tokio::test]
async fn screenshots_of_parallel_computer_calls_follow_all_their_tool_results() {
    let up = upstream().await;
    let relay = relay_over_api(&up, UpstreamApi::Chat).await;
    let shot =
        json!({"type": "computer_screenshot", "image_url": "data:image/png;base64,iVBORw0KGgo="});
    let (status, r) = relay.create(&json!({"model": "fake-model", "tools": [{"type": "computer_use_preview", "display_width": 800, "display_height": 600, "environment": "linux"}],
            "input": [
                {"role": "user", "content": "look"},
                {"type": "computer_call", "call_id": "a", "action": {"type": "screenshot"}, "pending_safety_checks": [], "status": "completed"},
                {"type": "computer_call", "call_id": "b", "action": {"type": "screenshot"}, "pending_safety_checks": [], "status": "completed"},
                {"type": "computer_call_output", "call_id": "a", "output": shot},
                {"type": "computer_call_output", "call_id": "b", "output": shot}
            ]}))
    .await;
    assert_eq!(status, 200, "{r}");
    let sent = last_request(&up);
    let roles: Vec<&str> = strs(&sent["messages"], "role");
    assert_eq!(
        roles,
        ["user", "assistant", "tool", "tool", "user", "user"],
        "{sent}"
    );
}

#[tokio::test]
async fn post_v1_agent_is_the_create_endpoint_under_perplexitys_name() {
    let up = upstream().await;
    let relay = relay_over_api(&up, UpstreamApi::Chat).await;
    let (status, r) = relay
        .post(
            "/v1/agent",
            &json!({"model": "fake-model", "input": "hi agent"}),
        )
        .await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["object"], "response");
    assert_eq!(first_text(&r), "Hello! You said: hi agent");
    let id = r["id"].as_str().unwrap();
    let (status, again) = relay.get(&format!("/v1/responses/{id}")).await;
    assert_eq!(
        (status, again["id"].as_str()),
        (200, Some(id)),
        "the same stored resource"
    );
    let sse = stream(
        &relay.url("/v1/agent"),
        &json!({"model": "fake-model", "input": "streamed", "stream": true}),
    )
    .await;
    assert_eq!(check_events(&sse.events)["status"], "completed");

    // A background run made there is resumed and cancelled through /v1/responses.
    let (status, created) = relay
        .post(
            "/v1/agent",
            &json!({"model": "fake-model?fault=stall", "input": "x", "background": true}),
        )
        .await;
    assert_eq!(status, 200, "{created}");
    let id = created["id"].as_str().unwrap().to_string();
    eventually("the upstream stream is open", || up.open_streams() >= 1).await;
    let (status, cancelled) = relay.cancel(&id).await;
    assert_eq!(
        (status, cancelled["status"].as_str()),
        (200, Some("cancelled"))
    );
    let (_, log) = relay.replay(&id).await;
    let body = parse_sse(&log);
    assert_eq!(
        check_events(&body.events)["status"],
        "cancelled",
        "the stored run resumes to its end"
    );
    // Errors are the create endpoint's own.
    let bad = json!({"model": "fake-model", "input": "x", "temperature": "hot"});
    let via_agent = relay.post("/v1/agent", &bad).await;
    let via_responses = relay.create(&bad).await;
    assert_eq!(via_agent.0, 400);
    assert_eq!(via_agent.1["error"], via_responses.1["error"]);
}

#[tokio::test]
async fn phase_cache_breakpoints_and_reasoning_context_reach_a_responses_upstream_and_phase_comes_back()
 {
    let breakpoint = json!({"mode": "explicit", "ttl": "30m"});
    let body = |stream: bool| {
        json!({"model": "fake-model?phase=final_answer", "stream": stream,
        "reasoning": {"effort": "low", "context": "all_turns", "mode": "pro"},
        "input": [
            {"role": "user", "content": [
                {"type": "input_text", "text": "the long shared prefix", "prompt_cache_breakpoint": breakpoint},
                {"type": "input_file", "file_data": "data:text/plain;base64,aGk=", "filename": "a.txt", "detail": "low", "prompt_cache_breakpoint": breakpoint}
            ]},
            {"role": "assistant", "phase": "commentary", "content": [{"type": "output_text", "text": "Looking."}]},
            {"role": "user", "content": "go on"}
        ]})
    };
    for api in APIS {
        let up = upstream().await;
        let relay = relay_over_api(&up, api).await;
        let (status, r) = relay.create(&body(false)).await;
        assert_eq!(status, 200, "{api:?}: {r}");
        assert_eq!(
            r["reasoning"]["context"], "all_turns",
            "{api:?}: echoed: {r}"
        );
        assert_eq!(r["reasoning"]["mode"], "pro", "{api:?}: echoed: {r}");
        let sent = last_request(&up);
        let message = r["output"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["type"] == "message")
            .unwrap()
            .clone();
        match api {
            UpstreamApi::Responses => {
                let input = &sent["input"];
                assert_eq!(
                    input[0]["content"][0]["prompt_cache_breakpoint"], breakpoint,
                    "{sent}"
                );
                assert_eq!(
                    input[0]["content"][1]["prompt_cache_breakpoint"], breakpoint,
                    "{sent}"
                );
                assert_eq!(input[0]["content"][1]["detail"], "low", "{sent}");
                assert_eq!(input[1]["phase"], "commentary", "{sent}");
                assert_eq!(
                    sent["reasoning"],
                    json!({"effort": "low", "context": "all_turns", "mode": "pro"}),
                    "{sent}"
                );
                // The model's own phase is on the message it answered with, in the
                // Response and on every event that carries the item.
                assert_eq!(message["phase"], "final_answer", "{r}");
                let s = relay.stream(&body(true)).await;
                let carrying: Vec<&Value> = s
                    .events
                    .iter()
                    .filter(|e| e["item"]["type"] == "message")
                    .collect();
                assert_eq!(carrying.len(), 2, "added and done: {:?}", s.events);
                for e in carrying {
                    assert_eq!(e["item"]["phase"], "final_answer", "{e}");
                }
            }
            UpstreamApi::Chat => {
                // Chat Completions has no place for them: taken, not sent.
                let text = sent.to_string();
                for absent in [
                    "prompt_cache_breakpoint",
                    "\"phase\":",
                    "all_turns",
                    "\"pro\"",
                ] {
                    assert!(!text.contains(absent), "{absent} sent to Chat: {text}");
                }
                assert!(message.get("phase").is_none(), "{r}");
            }
            UpstreamApi::Anthropic | UpstreamApi::Gemini => {
                unreachable!("not driven here (tests/it/anthropic.rs, gemini.rs)")
            }
        }
        // The stored input keeps the assistant message's phase.
        let id = r["id"].as_str().unwrap();
        let (status, items) =
            get(&relay.url(&format!("/v1/responses/{id}/input_items?order=asc"))).await;
        assert_eq!(status, 200, "{items}");
        let assistant = items["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["role"] == "assistant")
            .unwrap_or_else(|| panic!("{items}"));
        assert_eq!(assistant["phase"], "commentary", "{api:?}: {items}");

        // A conversation's items keep both: the input's phase and the model's.
        let (_, conversation) = post(&relay.url("/v1/conversations"), &json!({})).await;
        let cid = conversation["id"].as_str().unwrap();
        let mut with = body(false);
        with["conversation"] = json!(cid);
        let (status, r) = relay.create(&with).await;
        assert_eq!(status, 200, "{r}");
        let (_, items) = get(&relay.url(&format!("/v1/conversations/{cid}/items?order=asc"))).await;
        let phases: Vec<&Value> = items["data"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|i| i["role"] == "assistant")
            .map(|i| &i["phase"])
            .collect();
        let model_phase = match api {
            UpstreamApi::Responses => json!("final_answer"),
            UpstreamApi::Chat | UpstreamApi::Anthropic | UpstreamApi::Gemini => Value::Null,
        };
        assert_eq!(
            phases,
            [&json!("commentary"), &model_phase],
            "{api:?}: {items}"
        );
    }
}

#[tokio::test]
async fn output_items_sent_back_with_the_sdk_helpers_own_fields_are_taken() {
    // The SDKs' helpers decode what an output item holds (`parsed_arguments` on a function call,
    // `parsed` on output text); a client sends their output back as input as it is.
    let (up, relay) = plain_relay().await;
    let body = json!({"model": "fake-model", "input": [
        {"role": "user", "content": "weather?"},
        {"type": "message", "role": "assistant", "content": [
            {"type": "output_text", "text": "Let me look.", "annotations": [], "parsed": null}]},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather",
            "arguments": "{\"city\":\"Paris\"}", "parsed_arguments": {"city": "Paris"}},
        {"type": "function_call_output", "call_id": "call_1", "output": "rainy"}],
        "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]});
    let (status, r) = relay.create(&body).await;
    assert_eq!(status, 200, "{r}");
    // Neither reaches the model server.
    let sent = up.requests().last().unwrap().body.to_string();
    assert!(!sent.contains("parsed"), "{sent}");
}
