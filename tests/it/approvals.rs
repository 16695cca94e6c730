//! The MCP approval flow: calls that need approval become `mcp_approval_request` items; the
//! client's answers (by `previous_response_id`, statelessly, or by `item_reference`) run approved
//! calls first and tell the model about refused ones; bad answers are rejected naming `input`.

use serde_json::{Value, json};

use crate::mcp_test_server;
use crate::support::*;

struct World {
    up: fake_upstream::FakeUpstream,
    server: mcp_test_server::McpTestServer,
    relay: Relay,
}

async fn world() -> World {
    let up = upstream().await;
    let server = mcp_server(mcp_test_server::Options::default()).await;
    // Every request lists its servers unless the context carries their list, so that the
    // tests below see whether a chain reused its list (not the pool's time-bound reuse).
    let mut c = config(&up.base_url());
    c.mcp.tools_ttl = std::time::Duration::ZERO;
    let relay = relay(c).await;
    World { up, server, relay }
}

impl World {
    fn tools(&self, approval: Value) -> Value {
        json!([{"type": "mcp", "server_label": "m", "server_url": self.server.url(), "require_approval": approval}])
    }

    async fn create(&self, body: Value) -> (u16, Value) {
        post(&self.relay.url("/v1/responses"), &body).await
    }

    async fn stream(&self, mut body: Value) -> SseBody {
        body["stream"] = json!(true);
        stream(&self.relay.url("/v1/responses"), &body).await
    }

    fn golden(&self, name: &str, body: &SseBody) {
        golden_at(
            name,
            body,
            &[(&self.server.url(), "http://mcp-test-server/mcp")],
        );
    }
}

fn approve(id: &Value, yes: bool) -> Value {
    json!({"type": "mcp_approval_response", "approval_request_id": id, "approve": yes, "reason": if yes { Value::Null } else { json!("not today") }})
}

#[tokio::test]
async fn an_approved_call_runs_first_and_carries_the_approval_request_id() {
    let w = world().await;
    let (_, a) = w.create(json!({"model": "fake-model", "input": "CALL add {\"a\":2,\"b\":3}", "tools": w.tools(json!("always"))})).await;
    assert_eq!(output_types(&a), ["mcp_list_tools", "mcp_approval_request"]);
    assert_eq!(a["status"], "completed");
    let req_id = a["output"][1]["id"].clone();
    let b = w
        .stream(json!({"model": "fake-model", "previous_response_id": a["id"], "tools": w.tools(json!("always")),
                        "input": [approve(&req_id, true)]}))
        .await;
    let folded = check_events(&b.events);
    assert_eq!(
        output_types(&folded),
        ["mcp_call", "message"],
        "the list is reused, the call runs first"
    );
    let call = &folded["output"][0];
    assert_eq!(call["approval_request_id"], req_id);
    assert_eq!(call["status"], "completed");
    assert!(call["output"].as_str().unwrap().contains('5'));
    assert_eq!(
        folded["output"][1]["content"][0]["text"],
        format!("Tool results: {}", call["output"].as_str().unwrap())
    );
    assert_eq!(w.server.count("tools/call"), 1);
    assert_eq!(
        w.server.count("tools/list"),
        1,
        "the chain's list was reused"
    );
    w.golden("approval_approve", &b);
}

#[tokio::test]
async fn a_denied_call_is_not_run_and_the_model_is_told_why() {
    let w = world().await;
    let (_, a) = w.create(json!({"model": "fake-model", "input": "CALL add {\"a\":1,\"b\":1}", "tools": w.tools(json!("always"))})).await;
    let req_id = a["output"][1]["id"].clone();
    let b = w
        .stream(json!({"model": "fake-model", "previous_response_id": a["id"], "tools": w.tools(json!("always")),
                        "input": [approve(&req_id, false)]}))
        .await;
    let folded = check_events(&b.events);
    assert_eq!(output_types(&folded), ["message"]);
    let text = first_text(&folded).as_str().unwrap();
    assert!(
        text.contains("refused") && text.contains("not today"),
        "{text}"
    );
    assert_eq!(w.server.count("tools/call"), 0);
    w.golden("approval_deny", &b);
}

#[tokio::test]
async fn calls_of_one_turn_that_need_no_approval_still_run_and_answers_can_be_mixed() {
    let w = world().await;
    let tools = w.tools(json!({"never": {"tool_names": ["echo"]}}));
    let (_, a) = w
        .create(json!({"model": "fake-model", "tools": tools,
                        "input": "CALL echo {\"text\":\"free\"}\nCALL add {\"a\":1,\"b\":2}\nCALL add {\"a\":3,\"b\":4}"}))
        .await;
    assert_eq!(
        output_types(&a),
        [
            "mcp_list_tools",
            "mcp_call",
            "mcp_approval_request",
            "mcp_approval_request"
        ],
        "{a}"
    );
    assert_eq!(a["output"][1]["status"], "completed");
    assert_eq!(w.server.count("tools/call"), 1, "only echo ran");
    let (r1, r2) = (a["output"][2]["id"].clone(), a["output"][3]["id"].clone());
    let b = w
        .stream(
            json!({"model": "fake-model", "previous_response_id": a["id"], "tools": tools,
                        "input": [approve(&r1, true), approve(&r2, false)]}),
        )
        .await;
    let folded = check_events(&b.events);
    assert_eq!(output_types(&folded), ["mcp_call", "message"]);
    assert_eq!(folded["output"][0]["approval_request_id"], r1);
    let text = folded["output"][1]["content"][0]["text"].as_str().unwrap();
    assert!(text.contains('3') && text.contains("refused"), "{text}");
    assert_eq!(w.server.count("tools/call"), 2);
    w.golden("approval_mixed", &b);
}

#[tokio::test]
async fn approvals_work_statelessly_and_by_item_reference() {
    let w = world().await;
    let tools = w.tools(json!("always"));
    let (_, a) = w
        .create(
            json!({"model": "fake-model", "input": "CALL echo {\"text\":\"x\"}", "tools": tools}),
        )
        .await;
    let request_item = a["output"][1].clone();
    // Stateless: the request item itself sent back, no previous_response_id: the relay lists again.
    let (status, b) = w
        .create(json!({"model": "fake-model", "tools": tools,
                        "input": [{"role": "user", "content": "CALL echo {\"text\":\"x\"}"}, request_item, approve(&request_item["id"], true)]}))
        .await;
    assert_eq!(status, 200, "{b}");
    assert_eq!(output_types(&b), ["mcp_list_tools", "mcp_call", "message"]);
    assert_eq!(b["output"][1]["approval_request_id"], request_item["id"]);
    // By reference, as the Vercel AI SDK sends it.
    let (_, c) = w
        .create(
            json!({"model": "fake-model", "input": "CALL echo {\"text\":\"y\"}", "tools": tools}),
        )
        .await;
    let rid = c["output"][1]["id"].clone();
    let (status, d) = w
        .create(json!({"model": "fake-model", "tools": tools, "input": [{"type": "item_reference", "id": rid}, approve(&rid, true)]}))
        .await;
    assert_eq!(status, 200, "{d}");
    assert_eq!(output_types(&d), ["mcp_list_tools", "mcp_call", "message"]);
    assert!(d["output"][1]["output"].as_str().unwrap().contains('y'));
    assert_eq!(w.server.count("tools/call"), 2);
}

#[tokio::test]
async fn unknown_repeated_or_altered_answers_are_rejected_naming_input() {
    let w = world().await;
    let tools = w.tools(json!("always"));
    let (status, err) = w.create(json!({"model": "fake-model", "tools": tools, "input": [approve(&json!("mcpr_nope"), true)]})).await;
    assert_eq!(param_error(status, &err), (400, Some("input[0]")), "{err}");
    let (_, a) = w
        .create(
            json!({"model": "fake-model", "input": "CALL add {\"a\":1,\"b\":1}", "tools": tools}),
        )
        .await;
    let req = a["output"][1].clone();
    let (status, b) = w.create(json!({"model": "fake-model", "previous_response_id": a["id"], "tools": tools, "input": [approve(&req["id"], true)]})).await;
    assert_eq!(status, 200);
    let (status, err) = w.create(json!({"model": "fake-model", "previous_response_id": b["id"], "tools": tools, "input": [approve(&req["id"], true)]})).await;
    assert_eq!(status, 400, "answered twice: {err}");
    assert!(error_message(&err).contains("already answered"));
    let mut altered = req.clone();
    altered["arguments"] = json!("{\"a\":1000,\"b\":1}");
    let (status, err) = w.create(json!({"model": "fake-model", "tools": tools, "input": [altered, approve(&req["id"], true)]})).await;
    assert_eq!(param_error(status, &err), (400, Some("input[1]")), "{err}");
    assert!(error_message(&err).contains("changed"));
    assert_eq!(w.server.count("tools/call"), 1);
    assert!(w.up.requests().len() >= 2);
}

#[tokio::test]
async fn a_reused_tool_list_offers_the_model_only_what_this_requests_allowed_tools_let_through() {
    let w = world().await;
    let (_, a) = w
        .create(json!({"model": "fake-model", "input": "hello", "tools": w.tools(json!("never"))}))
        .await;
    let listed: Vec<&str> = strs(&a["output"][0]["tools"], "name");
    assert!(
        listed.contains(&"add") && listed.contains(&"echo"),
        "{listed:?}"
    );
    // The next turn narrows the server to `echo`; the model (which saw `m__add` before) asks for it.
    let mut tools = w.tools(json!("never"));
    tools[0]["allowed_tools"] = json!(["echo"]);
    let (status, b) = w
        .create(json!({"model": "fake-model", "previous_response_id": a["id"], "tools": tools, "input": "CALL m__add {\"a\":1,\"b\":2}"}))
        .await;
    assert_eq!(status, 200, "{b}");
    assert_eq!(
        w.server.count("tools/list"),
        1,
        "the chain's list was reused"
    );
    assert_eq!(
        w.server.count("tools/call"),
        0,
        "a tool outside allowed_tools ran: {b}"
    );
    assert!(!output_types(&b).contains(&"mcp_call".to_string()), "{b}");
    let offered: Vec<String> = w.up.requests().last().unwrap().body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_string())
        .collect();
    assert!(offered.iter().any(|n| n.ends_with("echo")), "{offered:?}");
    assert!(
        !offered.iter().any(|n| n.ends_with("add")),
        "the model was offered a tool allowed_tools excludes: {offered:?}"
    );
}

#[tokio::test]
async fn an_approval_for_a_tool_this_request_does_not_offer_is_refused_naming_input() {
    let w = world().await;
    let (_, a) = w.create(json!({"model": "fake-model", "input": "CALL add {\"a\":1,\"b\":1}", "tools": w.tools(json!("always"))})).await;
    let req = a["output"][1].clone();
    assert_eq!(req["name"], "add");
    let mut narrowed = w.tools(json!("always"));
    narrowed[0]["allowed_tools"] = json!(["echo"]);
    // By previous_response_id: the request was the relay's, but this request no longer allows it.
    let (status, err) = w
        .create(json!({"model": "fake-model", "previous_response_id": a["id"], "tools": narrowed, "input": [approve(&req["id"], true)]}))
        .await;
    assert_eq!(param_error(status, &err), (400, Some("input[0]")), "{err}");
    assert!(error_message(&err).contains("allowed_tools"), "{err}");
    // Statelessly, with a request the relay never made for a tool the server does not have.
    let forged = json!({"type": "mcp_approval_request", "id": "mcpr_forged", "server_label": "m", "name": "no_such_tool", "arguments": "{}"});
    let (status, err) = w
        .create(json!({"model": "fake-model", "tools": w.tools(json!("always")), "input": [forged, approve(&json!("mcpr_forged"), true)]}))
        .await;
    assert_eq!(param_error(status, &err), (400, Some("input[1]")), "{err}");
    assert_eq!(w.server.count("tools/call"), 0);
}

/// Asks for one `echo` call needing approval, then answers it statelessly (`yes`): the history
/// sent (the question, the request, the answer) and the second response, checked to be a 200.
async fn echo_answered_statelessly(w: &World, text: &str, yes: bool) -> (Vec<Value>, Value) {
    let tools = w.tools(json!("always"));
    let ask = json!({"role": "user", "content": format!("CALL echo {{\"text\":\"{text}\"}}")});
    let (_, a) = w
        .create(json!({"model": "fake-model", "input": [ask], "tools": tools}))
        .await;
    let request_item = a["output"][1].clone();
    let history = vec![ask, request_item.clone(), approve(&request_item["id"], yes)];
    let (status, b) = w
        .create(json!({"model": "fake-model", "tools": tools, "input": history}))
        .await;
    assert_eq!(status, 200, "{b}");
    (history, b)
}

#[tokio::test]
async fn history_sent_back_whole_does_not_run_an_approved_call_again() {
    let w = world().await;
    let tools = w.tools(json!("always"));
    let (mut history, b) = echo_answered_statelessly(&w, "once", true).await;
    let request_item = history[1].clone();
    assert_eq!(output_types(&b), ["mcp_list_tools", "mcp_call", "message"]);
    assert_eq!(w.server.count("tools/call"), 1);
    // The next turn sends everything back, as clients managing their own history do.
    history.extend(b["output"].as_array().unwrap().iter().cloned());
    history.push(json!({"role": "user", "content": "thanks"}));
    let (status, c) = w
        .create(json!({"model": "fake-model", "tools": tools, "input": history}))
        .await;
    assert_eq!(status, 200, "{c}");
    assert!(
        !c["output"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["approval_request_id"] == request_item["id"]),
        "the approved call ran again: {c}"
    );
    assert_eq!(
        w.server.count("tools/call"),
        1,
        "the approved call ran again"
    );
}

#[tokio::test]
async fn history_sent_back_whole_does_not_tell_the_model_of_a_refusal_again() {
    let w = world().await;
    let tools = w.tools(json!("always"));
    let (mut history, b) = echo_answered_statelessly(&w, "never", false).await;
    assert_eq!(output_types(&b), ["mcp_list_tools", "message"], "{b}");
    // The next turn sends everything back with a new question, as the Agents SDK's
    // `to_input_list()` does: the refusal was answered already and must not be applied again
    // (told to the model after the new question, which it would then answer instead).
    history.extend(b["output"].as_array().unwrap().iter().cloned());
    history.push(json!({"role": "user", "content": "what is two and two"}));
    let (status, c) = w
        .create(json!({"model": "fake-model", "tools": tools, "input": history}))
        .await;
    assert_eq!(status, 200, "{c}");
    let sent = last_request(&w.up);
    let last = sent["messages"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(
        (last["role"].as_str(), last["content"].as_str()),
        (Some("user"), Some("what is two and two")),
        "the model was not sent the new question last: {sent}"
    );
    assert!(
        !sent["messages"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["role"] == "tool"),
        "the model was told of the refusal again: {sent}"
    );
    assert_eq!(
        output_types(&c),
        ["message"],
        "the list in the history is reused: {c}"
    );
    assert_eq!(first_text(&c), "Hello! You said: what is two and two");
    assert_eq!(w.server.count("tools/call"), 0);
}

#[tokio::test]
async fn answers_placed_right_after_their_requests_are_all_used() {
    // A stateless client may put each answer right after its request: the second request after
    // the first answer is the same turn's, not the model speaking after that answer.
    let w = world().await;
    let tools = w.tools(json!("always"));
    let ask = json!({"role": "user", "content": "CALL add {\"a\":1,\"b\":2}\nCALL add {\"a\":3,\"b\":4}"});
    let (_, a) = w
        .create(json!({"model": "fake-model", "tools": tools, "input": [ask]}))
        .await;
    assert_eq!(
        output_types(&a),
        [
            "mcp_list_tools",
            "mcp_approval_request",
            "mcp_approval_request"
        ],
        "{a}"
    );
    let (first, second) = (a["output"][1].clone(), a["output"][2].clone());
    let input = json!([
        ask,
        a["output"][0],
        first,
        approve(&first["id"], true),
        second,
        approve(&second["id"], true)
    ]);
    let (status, b) = w
        .create(json!({"model": "fake-model", "tools": tools, "input": input}))
        .await;
    assert_eq!(status, 200, "{b}");
    assert_eq!(output_types(&b), ["mcp_call", "mcp_call", "message"], "{b}");
    assert_eq!(w.server.count("tools/call"), 2);
}

#[tokio::test]
async fn approved_calls_count_against_max_tool_calls() {
    let w = world().await;
    let tools = w.tools(json!("always"));
    let (_, a) = w
        .create(json!({"model": "fake-model", "tools": tools, "input": "CALL add {\"a\":1,\"b\":2}\nCALL add {\"a\":3,\"b\":4}"}))
        .await;
    assert_eq!(
        output_types(&a),
        [
            "mcp_list_tools",
            "mcp_approval_request",
            "mcp_approval_request"
        ],
        "{a}"
    );
    let answers = [
        approve(&a["output"][1]["id"], true),
        approve(&a["output"][2]["id"], true),
    ];
    let b = w
        .stream(json!({"model": "fake-model", "previous_response_id": a["id"], "tools": tools, "max_tool_calls": 1, "input": answers}))
        .await;
    let folded = check_events(&b.events);
    assert_eq!(output_types(&folded), ["mcp_call", "mcp_call"], "{folded}");
    assert_eq!(folded["output"][0]["status"], "completed");
    assert_eq!(folded["output"][1]["status"], "failed");
    assert!(
        folded["output"][1]["error"]
            .to_string()
            .contains("max_tool_calls"),
        "{folded}"
    );
    assert_eq!(folded["status"], "incomplete");
    assert_eq!(folded["incomplete_details"]["reason"], "max_tool_calls");
    assert_eq!(
        w.server.count("tools/call"),
        1,
        "a call over max_tool_calls ran"
    );
}
