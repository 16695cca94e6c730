//! Every refusal of a steer: `response.steer.failed` with the SDK's code, a message naming what
//! is wrong, and the submission handed back; and the socket closing with steering queued.

use serde_json::{Value, json};

use super::*;

/// Sends a steer and reads its refusal.
async fn refused(ws: &mut Ws, previous: &str, input: Value) -> Value {
    ws.steer(previous, input).await;
    ws.until("response.steer.failed").await
}

#[tokio::test]
async fn every_refusal_of_a_steer_names_its_code_and_hands_the_input_back() {
    let (up, relay) = plain_relay().await;
    let mut ws = Ws::connect(&relay, None).await;
    // No such response on this connection (one created over HTTP is not this connection's).
    let (_, over_http) = post(
        &relay.url("/v1/responses"),
        &json!({"model": "fake-model", "input": "elsewhere"}),
    )
    .await;
    for id in ["resp_nowhere", over_http["id"].as_str().unwrap()] {
        let f = refused(&mut ws, id, json!("x")).await;
        assert_eq!(f["error"]["code"], "response_not_found", "{f}");
        assert_eq!(
            f["steer"],
            json!({"previous_response_id": id, "input": "x"})
        );
        assert_eq!(f["sequence_number"], 0);
    }
    // A running response on a lane: its refusals carry the lane.
    ws.create(json!({"model": "fake-model?hold=r1", "input": "keep going", "stream_id": "l1"}))
        .await;
    let id = ws.until("response.created").await["response"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let invalid = [
        (
            json!([{"role": "assistant", "content": "x"}]),
            "input[0].role",
        ),
        (
            json!([{"role": "developer", "content": "x"}]),
            "input[0].role",
        ),
        (
            json!([{"type": "function_call_output", "call_id": "c1", "output": "x"}]),
            "input[0].type",
        ),
        (json!([]), "input"),
        (json!(""), "input"),
        (
            json!([{"role": "user", "content": [{"type": "input_text"}]}]),
            "input[0].content[0].text",
        ),
    ];
    for (input, param) in invalid {
        let f = refused(&mut ws, &id, input.clone()).await;
        assert_eq!(f["error"]["code"], "invalid_input", "{f}");
        let message = f["error"]["message"].as_str().unwrap();
        assert!(message.contains(param), "{param}: {message}");
        assert_eq!(f["steer"]["input"], input);
        assert_eq!(f["stream_id"], "l1");
    }
    // Only `type`, `previous_response_id` and `input`: a `stream_id` is refused, named.
    ws.send(json!({"type": "response.steer", "previous_response_id": id, "input": "x", "stream_id": "l1"}))
        .await;
    let f = ws.until("response.steer.failed").await;
    assert_eq!(f["error"]["code"], "invalid_input");
    assert!(
        f["error"]["message"]
            .as_str()
            .unwrap()
            .contains("'stream_id'")
    );
    ws.send(
        json!({"type": "response.steer", "previous_response_id": id, "input": "x", "urgent": true}),
    )
    .await;
    let f = ws.until("response.steer.failed").await;
    assert!(
        f["error"]["message"].as_str().unwrap().contains("'urgent'"),
        "{f}"
    );
    // At most 8 queued: the ninth is refused; the eight are committed in order.
    for i in 0..8 {
        ws.steer(&id, json!(format!("note {i}"))).await;
    }
    let f = refused(&mut ws, &id, json!("one too many")).await;
    assert_eq!(f["error"]["code"], "too_many_pending_steers", "{f}");
    assert!(f["steer"].get("id").is_none());
    up.open_gate("r1");
    ws.terminals(2).await;
    let (runs, _) = responses(&ws.frames);
    let accepted = kinds(&runs[0])
        .iter()
        .filter(|k| *k == "response.steer.accepted")
        .count();
    assert_eq!(accepted, 8);
    let last = model_requests(&up).pop().unwrap();
    let notes: Vec<String> = (0..8).map(|i| format!("note {i}")).collect();
    assert_eq!(user_texts(&last)[1..], notes[..]);
    // The steered response, replaced by its successor, takes no more.
    let f = refused(&mut ws, &id, json!("again")).await;
    assert_eq!(f["error"]["code"], "response_not_active", "{f}");
}

#[tokio::test]
async fn conversation_bound_and_compacting_responses_are_not_steered() {
    let (up, relay) = plain_relay().await;
    let (_, conversation) = post(&relay.url("/v1/conversations"), &json!({})).await;
    let mut ws = Ws::connect(&relay, None).await;
    let bodies = [
        json!({"model": "fake-model?hold=c1", "input": "in a conversation",
            "conversation": conversation["id"]}),
        json!({"model": "fake-model?hold=c1", "input": "compacting",
            "context_management": [{"type": "compaction", "compact_threshold": 100000}]}),
    ];
    for body in bodies {
        ws.create(body).await;
        let id = ws.until("response.created").await["response"]["id"]
            .as_str()
            .unwrap()
            .to_string();
        let f = refused(&mut ws, &id, json!("steer me")).await;
        assert_eq!(f["error"]["code"], "steering_not_supported", "{f}");
        up.open_gate("c1");
        let done = ws.until("response.completed").await;
        assert_eq!(done["response"]["id"], id.as_str());
    }
}

#[tokio::test]
async fn a_successor_a_limit_refuses_hands_the_steering_input_back() {
    let up = upstream().await;
    let toml = "[[keys]]\nkey = \"k1\"\ntenant = \"t\"\nlimits = { requests_per_minute = 1 }\n";
    let (relay, _clock) = crate::quotas::limited(&up, &[], toml).await;
    let mut ws = Ws::connect(&relay, Some("k1")).await;
    ws.create(json!({"model": "fake-model?hold=s1", "input": "start"}))
        .await;
    let id = ws.until("response.created").await["response"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    ws.steer(&id, json!("then this")).await;
    let accepted = ws.until("response.steer.accepted").await;
    up.open_gate("s1");
    let end = ws.until("response.incomplete").await;
    let f = ws.until("response.steer.failed").await;
    assert_eq!(f["error"]["code"], "successor_creation_failed", "{f}");
    assert!(
        f["error"]["message"]
            .as_str()
            .unwrap()
            .contains("Rate limit"),
        "{f}"
    );
    assert_eq!(
        f["steer"],
        json!({"id": accepted["steer"]["id"], "previous_response_id": id, "input": "then this"})
    );
    assert_eq!(
        f["sequence_number"].as_u64().unwrap(),
        end["sequence_number"].as_u64().unwrap() + 1
    );
    assert_eq!(model_requests(&up).len(), 1, "no successor started");
}

#[tokio::test]
async fn the_socket_closing_with_steering_queued_leaves_nothing_running() {
    let (up, relay) = plain_relay().await;
    let mut ws = Ws::connect(&relay, None).await;
    ws.create(json!({"model": "fake-model?hold=z1", "input": "long work"}))
        .await;
    let id = ws.until("response.created").await["response"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    ws.steer(&id, json!("never mind")).await;
    ws.until("response.steer.accepted").await;
    ws.close().await;
    // The run is cancelled as for any client gone; no successor is created.
    let url = relay.url(&format!("/v1/responses/{id}"));
    let mut status = Value::Null;
    for _ in 0..1000 {
        status = get(&url).await.1["status"].clone();
        if status == "cancelled" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(status, "cancelled");
    eventually("the held stream is closed", || up.open_streams() == 0).await;
    up.open_gate("z1");
    // A later run on a new socket is the only other one the upstream sees.
    let mut again = Ws::connect(&relay, None).await;
    again
        .create(json!({"model": "fake-model", "input": "fresh start"}))
        .await;
    let done = again.until("response.completed").await;
    assert_eq!(done["response"]["previous_response_id"], Value::Null);
    let seen = user_texts(model_requests(&up).last().unwrap());
    assert_eq!(seen, ["fresh start"]);
    assert_eq!(model_requests(&up).len(), 2);
}
