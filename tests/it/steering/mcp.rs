//! MCP runs steered: mid-stream (the turn's calls still run, then the response hands over), and
//! during a slow MCP call (announced at once, applied after the call, never cancelling it).

use serde_json::json;

use super::*;

#[tokio::test]
async fn an_mcp_run_steered_mid_stream_runs_the_turns_calls_then_hands_over_to_its_successor() {
    let (up, relay) = plain_relay().await;
    let server = gated_mcp().await;
    let mut ws = Ws::connect(&relay, None).await;
    ws.create(
        json!({"model": "fake-model?hold=m1", "input": "CALL echo {\"text\":\"one\"}",
        "tools": [mcp_tool("t", &server.url())]}),
    )
    .await;
    let id = ws.until("response.created").await["response"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    // The model's turn is held after its first chunks.
    ws.until("response.mcp_list_tools.completed").await;
    ws.steer(&id, json!("use the other file")).await;
    ws.until("response.steer.accepted").await;
    up.open_gate("m1");
    ws.terminals(2).await;
    let (runs, _) = responses(&ws.frames);
    let steered = check_events(&runs[0]);
    assert_eq!(steered["incomplete_details"]["reason"], "steered");
    // The turn's call ran to its end; no second model turn for the steered response.
    assert_eq!(output_types(&steered), ["mcp_list_tools", "mcp_call"]);
    assert_eq!(steered["output"][1]["status"], "completed");
    assert_eq!(steered["output"][1]["output"], "one");
    let successor = check_events(&runs[1]);
    assert_eq!(successor["previous_response_id"], id.as_str());
    assert_eq!(successor["tools"][0]["server_label"], "t");
    assert_eq!(
        message_text(&successor),
        "Hello! You said: use the other file"
    );
    // Its model request: the call and its output, then the steering text.
    let requests = model_requests(&up);
    assert_eq!(requests.len(), 2, "the steered response took one turn");
    let last = &requests[1];
    assert_eq!(roles(last), ["user", "assistant", "tool", "user"], "{last}");
    assert_eq!(last["messages"][2]["content"], "one");
    assert_eq!(
        user_texts(last),
        ["CALL echo {\"text\":\"one\"}", "use the other file"]
    );
}

#[tokio::test]
async fn a_steer_during_a_slow_mcp_call_takes_effect_after_the_call() {
    let (up, relay) = plain_relay().await;
    let server = gated_mcp().await;
    let mut ws = Ws::connect(&relay, None).await;
    ws.create(
        json!({"model": "fake-model", "input": "CALL gate {\"name\":\"slow\"}",
        "tools": [mcp_tool("t", &server.url())]}),
    )
    .await;
    let id = ws.until("response.created").await["response"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    ws.until("response.mcp_call.in_progress").await;
    ws.steer(&id, json!("stop, use the other file")).await;
    // Announced while the call still waits for its gate.
    let accepted = ws.until("response.steer.accepted").await;
    assert_eq!(accepted["steer"]["previous_response_id"], id.as_str());
    assert!(
        !has_kind(&ws.frames, "response.mcp_call.completed"),
        "{:#?}",
        kinds(&ws.frames)
    );
    server.open_gate("slow");
    ws.terminals(2).await;
    let (runs, _) = responses(&ws.frames);
    let steered = check_events(&runs[0]);
    assert_eq!(steered["incomplete_details"]["reason"], "steered");
    assert_eq!(steered["output"][1]["status"], "completed");
    assert_eq!(steered["output"][1]["output"], "gate slow opened");
    assert_eq!(server.cancelled_calls(), 0, "the call was never cut short");
    let at = |kind: &str| runs[0].iter().position(|e| e["type"] == kind).unwrap();
    assert!(at("response.steer.accepted") < at("response.mcp_call.completed"));
    assert!(at("response.mcp_call.completed") < at("response.incomplete"));
    let successor = check_events(&runs[1]);
    assert_eq!(successor["previous_response_id"], id.as_str());
    assert_eq!(
        message_text(&successor),
        "Hello! You said: stop, use the other file"
    );
    let last = model_requests(&up).pop().unwrap();
    assert_eq!(last["messages"][2]["content"], "gate slow opened");
}
