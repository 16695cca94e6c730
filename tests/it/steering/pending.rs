//! Steering input kept while a response waits for the client's own work: `response.steer.pending`
//! after `response.completed` with the stubs to fill, and the input prepended to the client's
//! continuation on that lane; with an approval request, and with a function call on a lane.

use serde_json::{Value, json};

use super::*;

#[tokio::test]
async fn a_response_waiting_for_an_approval_keeps_the_steering_input_for_the_continuation() {
    let (up, relay) = plain_relay().await;
    let server = gated_mcp().await;
    let mut ws = Ws::connect(&relay, None).await;
    let tool = json!({"type": "mcp", "server_label": "t", "server_url": server.url(), "require_approval": "always"});
    ws.create(
        json!({"model": "fake-model?hold=a1", "input": "CALL echo {\"text\":\"two\"}",
        "tools": [tool]}),
    )
    .await;
    let id = ws.until("response.created").await["response"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    ws.until("response.mcp_list_tools.completed").await;
    ws.steer(&id, json!("and say it twice")).await;
    let accepted = ws.until("response.steer.accepted").await;
    up.open_gate("a1");
    let done = ws.until("response.completed").await;
    let request = &done["response"]["output"][1];
    assert_eq!(request["type"], "mcp_approval_request");
    let pending = ws.until("response.steer.pending").await;
    assert_eq!(
        pending["sequence_number"].as_u64().unwrap(),
        done["sequence_number"].as_u64().unwrap() + 1
    );
    assert_eq!(
        pending["steer"],
        json!({"id": accepted["steer"]["id"], "previous_response_id": id})
    );
    assert_eq!(pending["reason"], "waiting_for_required_input");
    assert_eq!(
        pending["required_input"],
        json!([{"type": "mcp_approval_response", "approval_request_id": request["id"]}])
    );
    // No successor starts by itself: the client's continuation commits the input.
    assert_eq!(model_requests(&up).len(), 1);
    ws.create(json!({"model": "fake-model", "previous_response_id": id, "tools": [
        {"type": "mcp", "server_label": "t", "server_url": server.url(), "require_approval": "always"}],
        "input": [{"type": "mcp_approval_response", "approval_request_id": request["id"], "approve": true}]}))
        .await;
    let created = ws.until("response.created").await;
    let next = created["response"]["id"].as_str().unwrap();
    let done = ws.until("response.completed").await;
    assert_eq!(done["response"]["output"][0]["type"], "mcp_call");
    assert_eq!(done["response"]["output"][0]["output"], "two");
    // Its input: the steering message first, then the client's own.
    let (_, items) = get(&relay.url(&format!("/v1/responses/{next}/input_items?order=asc"))).await;
    let kinds: Vec<&str> = strs(&items["data"], "type");
    assert_eq!(kinds, ["message", "mcp_approval_response"], "{items}");
    assert_eq!(items["data"][0]["content"][0]["text"], "and say it twice");
    let last = model_requests(&up).pop().unwrap();
    assert!(
        user_texts(&last).contains(&"and say it twice".to_string()),
        "{last}"
    );
}

#[tokio::test]
async fn a_function_call_on_a_lane_keeps_the_steering_input_pending_for_that_lanes_continuation() {
    let (up, relay) = plain_relay().await;
    let mut ws = Ws::connect(&relay, None).await;
    let tools = json!([{"type": "function", "name": "lookup", "parameters":
        {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}]);
    ws.create(json!({"model": "fake-model?hold=f1", "stream_id": "work",
        "input": "CALL lookup {\"q\":\"x\"}", "tools": tools}))
        .await;
    let id = ws.until("response.created").await["response"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    ws.steer(&id, json!("prefer recent results")).await;
    let accepted = ws.until("response.steer.accepted").await;
    // Every steering event goes to the target's lane.
    assert_eq!(accepted["stream_id"], "work");
    up.open_gate("f1");
    let done = ws.until("response.completed").await;
    let call = &done["response"]["output"][0];
    assert_eq!(call["type"], "function_call");
    let pending = ws.until("response.steer.pending").await;
    assert_eq!(pending["stream_id"], "work");
    assert_eq!(
        pending["required_input"],
        json!([{"type": "function_call_output", "call_id": call["call_id"], "name": "lookup"}])
    );
    // A continuation on another lane does not take it.
    let output =
        json!([{"type": "function_call_output", "call_id": call["call_id"], "output": "r1"}]);
    ws.create(
        json!({"model": "fake-model", "previous_response_id": id, "tools": tools,
        "stream_id": "other", "input": output, "store": false}),
    )
    .await;
    let elsewhere = ws.until("response.completed").await;
    assert_eq!(elsewhere["stream_id"], "other");
    let before = model_requests(&up).pop().unwrap();
    assert!(!user_texts(&before).contains(&"prefer recent results".to_string()));
    // The lane's own continuation does, before its input.
    ws.create(
        json!({"model": "fake-model", "previous_response_id": id, "tools": tools,
        "stream_id": "work", "input": output}),
    )
    .await;
    let done = ws.until("response.completed").await;
    assert_eq!(done["stream_id"], "work");
    // The model gets the steering text right after the call's output (a Chat Completions server
    // wants the `tool` message next to its call).
    let last = model_requests(&up).pop().unwrap();
    assert_eq!(
        roles(&last),
        ["user", "assistant", "tool", "user"],
        "{last}"
    );
    assert_eq!(last["messages"][3]["content"], "prefer recent results");
    let next = done["response"]["id"].as_str().unwrap();
    let (_, items) = get(&relay.url(&format!("/v1/responses/{next}/input_items?order=asc"))).await;
    let kinds: Vec<&str> = strs(&items["data"], "type");
    assert_eq!(kinds, ["message", "function_call_output"], "{items}");
    let first: &Value = &items["data"][0];
    assert_eq!(first["role"], "user");
}

#[tokio::test]
async fn a_custom_tool_call_waits_and_a_continuation_that_fails_hands_the_steering_input_back() {
    let (up, relay) = plain_relay().await;
    let mut ws = Ws::connect(&relay, None).await;
    let tools = json!([{"type": "custom", "name": "patch", "description": "Applies a patch."}]);
    ws.create(
        json!({"model": "fake-model?hold=u1", "input": "CALL patch {\"input\":\"diff\"}",
        "tools": tools}),
    )
    .await;
    let id = ws.until("response.created").await["response"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    ws.steer(&id, json!("keep the old header")).await;
    let accepted = ws.until("response.steer.accepted").await;
    up.open_gate("u1");
    let done = ws.until("response.completed").await;
    let call = &done["response"]["output"][0];
    assert_eq!(call["type"], "custom_tool_call");
    let pending = ws.until("response.steer.pending").await;
    assert_eq!(
        pending["required_input"],
        json!([{"type": "custom_tool_call_output", "call_id": call["call_id"]}])
    );
    // The continuation is refused before it starts: its error, then the input handed back.
    let output = json!([{"type": "custom_tool_call_output", "call_id": call["call_id"], "output": "applied"}]);
    ws.create(
        json!({"model": "fake-model", "previous_response_id": id, "tools": tools,
        "input": output, "temperatur": 1}),
    )
    .await;
    let error = ws.next().await;
    assert_eq!(error["type"], "error", "{error}");
    assert_eq!(error["error"]["code"], "unknown_parameter");
    let failed = ws.until("response.steer.failed").await;
    assert_eq!(
        failed["error"]["code"], "successor_creation_failed",
        "{failed}"
    );
    assert_eq!(
        failed["steer"],
        json!({"id": accepted["steer"]["id"], "previous_response_id": id, "input": "keep the old header"})
    );
    assert_eq!(
        failed["sequence_number"].as_u64().unwrap(),
        pending["sequence_number"].as_u64().unwrap() + 1
    );
    // Handed back, it is no longer queued: a good continuation carries only its own input.
    ws.create(
        json!({"model": "fake-model", "previous_response_id": id, "tools": tools,
        "input": output}),
    )
    .await;
    let done = ws.until("response.completed").await;
    let next = done["response"]["id"].as_str().unwrap();
    let (_, items) = get(&relay.url(&format!("/v1/responses/{next}/input_items"))).await;
    assert_eq!(strs(&items["data"], "type"), ["custom_tool_call_output"]);
}
