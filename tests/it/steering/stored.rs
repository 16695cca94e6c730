//! A steered background response and its successor as the store keeps them: read back, their
//! logs resumed over SSE, the chain continued over HTTP, the viewer's summaries linking them;
//! and nothing of steering over HTTP.

use serde_json::{Value, json};

use super::*;

#[tokio::test]
async fn a_steered_background_response_and_its_successor_are_stored_resumed_and_chained() {
    let (up, relay) = plain_relay().await;
    let mut ws = Ws::connect(&relay, None).await;
    ws.create(
        json!({"model": "fake-model?hold=b1", "input": "work in the background",
        "background": true}),
    )
    .await;
    let created = ws.until("response.created").await;
    assert_eq!(created["response"]["status"], "queued");
    let id = created["response"]["id"].as_str().unwrap().to_string();
    ws.until("response.output_text.delta").await;
    ws.steer(&id, json!("and list the risks")).await;
    ws.until("response.steer.accepted").await;
    up.open_gate("b1");
    ws.terminals(2).await;
    let (runs, _) = responses(&ws.frames);
    let successor = check_events(&runs[1]);
    let next = successor["id"].as_str().unwrap().to_string();
    assert_eq!(successor["background"], true);
    // Read back: the steered one `incomplete`/`steered`, its successor linked to it.
    let (_, first) = get(&relay.url(&format!("/v1/responses/{id}"))).await;
    assert_eq!(
        (first["status"].as_str(), first["background"].as_bool()),
        (Some("incomplete"), Some(true))
    );
    assert_eq!(first["incomplete_details"]["reason"], "steered");
    let (_, second) = get(&relay.url(&format!("/v1/responses/{next}"))).await;
    assert_eq!(second["previous_response_id"], id.as_str());
    assert_eq!(message_text(&second), "Hello! You said: and list the risks");
    // Each log resumes over SSE from any point, the steer in its place.
    for (rid, frames) in [(&id, &runs[0]), (&next, &runs[1])] {
        let from = 2;
        let (status, text) = get_text(&relay.url(&format!(
            "/v1/responses/{rid}?stream=true&starting_after={from}"
        )))
        .await;
        assert_eq!(status, 200);
        assert_eq!(parse_sse(&text).events, frames[from as usize + 1..]);
    }
    // The chain goes on over HTTP (SSE), with nothing of steering in it.
    let body = stream(
        &relay.url("/v1/responses"),
        &json!({"model": "fake-model", "input": "summarize", "previous_response_id": next, "stream": true}),
    )
    .await;
    check_events(&body.events);
    assert!(!kinds(&body.events).iter().any(|k| k.contains("steer")));
    let last = model_requests(&up).pop().unwrap();
    assert_eq!(
        user_texts(&last),
        ["work in the background", "and list the risks", "summarize"]
    );
    // The viewer's summaries: the steer counted, the successor naming the steered run.
    let (_, page) = get(&relay.url("/ui/api/runs?limit=10")).await;
    let summary = |rid: &str| -> Value {
        (page["data"].as_array().unwrap().iter())
            .find(|r| r["id"] == rid)
            .cloned()
            .unwrap()
    };
    assert_eq!(summary(&id)["steers"], 1);
    assert_eq!(summary(&id)["error"], "incomplete: steered");
    assert_eq!(summary(&next)["previous_response_id"], id.as_str());
    assert_eq!(summary(&next)["steers"], 0);
}
