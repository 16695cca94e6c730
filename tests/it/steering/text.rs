//! Text runs steered mid-stream: the steered response ends `incomplete`/`steered` at the end of
//! its turn (its message whole), a successor with its settings answers the steering input, the
//! store and the chain keep both; two steers in order; a steer racing the end of a response.

use serde_json::{Value, json};

use super::*;

#[tokio::test]
async fn a_steer_mid_stream_ends_the_response_steered_and_its_successor_answers_the_steering_text()
{
    let (up, relay) = plain_relay().await;
    let mut ws = Ws::connect(&relay, None).await;
    let model = "fake-model?hold=t1";
    ws.create(json!({"model": model, "input": "write the report", "instructions": "Be brief."}))
        .await;
    let created = ws.until("response.created").await;
    let id = created["response"]["id"].as_str().unwrap().to_string();
    ws.until("response.output_text.delta").await;
    ws.steer(&id, json!("also check the tests")).await;
    let accepted = ws.until("response.steer.accepted").await;
    assert_eq!(accepted["steer"]["previous_response_id"], id.as_str());
    let steer_id = accepted["steer"]["id"].as_str().unwrap();
    assert!(steer_id.starts_with("steer_"), "{accepted}");
    assert!(accepted.get("stream_id").is_none(), "{accepted}");
    // Held mid-message: the steer waits for the turn's end.
    up.open_gate("t1");
    ws.terminals(2).await;
    let (runs, notices) = responses(&ws.frames);
    assert_eq!(
        (runs.len(), notices.len()),
        (2, 0),
        "{:#?}",
        kinds(&ws.frames)
    );
    // The steered response: every event in one sequence (the acceptance among them), its message
    // whole, ended `incomplete` for the steer.
    let steered = check_events(&runs[0]);
    assert_eq!(steered["status"], "incomplete");
    assert_eq!(steered["incomplete_details"]["reason"], "steered");
    assert_eq!(message_text(&steered), "Hello! You said: write the report");
    let at = |kind: &str| runs[0].iter().position(|e| e["type"] == kind).unwrap();
    assert!(at("response.output_text.delta") < at("response.steer.accepted"));
    assert!(at("response.steer.accepted") < at("response.output_text.done"));
    // Its successor: started by itself, with the same settings, its input the steering text.
    let successor = check_events(&runs[1]);
    assert_eq!(successor["previous_response_id"], id.as_str());
    assert_eq!(
        (
            successor["model"].as_str(),
            successor["instructions"].as_str()
        ),
        (Some(model), Some("Be brief."))
    );
    assert_eq!(successor["status"], "completed");
    assert_eq!(
        message_text(&successor),
        "Hello! You said: also check the tests"
    );
    // The successor's model request carries the earlier turn and then the steering text.
    let requests = model_requests(&up);
    assert_eq!(requests.len(), 2);
    let last = &requests[1];
    assert_eq!(
        user_texts(last),
        ["write the report", "also check the tests"],
        "{last}"
    );
    assert_eq!(
        roles(last),
        ["system", "user", "assistant", "user"],
        "{last}"
    );
    assert_eq!(
        last["messages"][2]["content"],
        "Hello! You said: write the report"
    );
    // Stored: the steered response and its successor, linked; the successor's input is the
    // steering message; the stored log replays the acceptance in its place.
    let (_, stored) = get(&relay.url(&format!("/v1/responses/{id}"))).await;
    assert_eq!(stored["incomplete_details"]["reason"], "steered");
    let next = successor["id"].as_str().unwrap();
    let (_, items) = get(&relay.url(&format!("/v1/responses/{next}/input_items"))).await;
    let texts: Vec<&Value> = (items["data"].as_array().unwrap().iter())
        .map(|i| &i["content"][0]["text"])
        .collect();
    assert_eq!(texts, [&json!("also check the tests")], "{items}");
    let replay = get_text(&relay.url(&format!("/v1/responses/{id}?stream=true"))).await;
    let replayed = parse_sse(&replay.1);
    assert_eq!(replayed.events, runs[0]);
    // The chain goes on over HTTP from the successor: the model sees all of it.
    let (status, _) = post(
        &relay.url("/v1/responses"),
        &json!({"model": "fake-model", "input": "and now?", "previous_response_id": next}),
    )
    .await;
    assert_eq!(status, 200);
    let requests = model_requests(&up);
    assert_eq!(
        user_texts(requests.last().unwrap()),
        ["write the report", "also check the tests", "and now?"]
    );
}

#[tokio::test]
async fn two_steers_are_committed_in_order_by_one_successor_with_the_store_false_settings() {
    let (up, relay) = plain_relay().await;
    let mut ws = Ws::connect(&relay, None).await;
    ws.create(
        json!({"model": "fake-model?hold=t2", "input": "draft it", "store": false,
        "metadata": {"task": "t2"}}),
    )
    .await;
    let id = ws.until("response.created").await["response"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    ws.steer(&id, json!("first: shorter")).await;
    ws.steer(
        &id,
        json!([{"role": "user", "content": [{"type": "input_text", "text": "second: in French"}]}]),
    )
    .await;
    let one = ws.until("response.steer.accepted").await;
    let two = ws.until("response.steer.accepted").await;
    assert_ne!(one["steer"]["id"], two["steer"]["id"]);
    assert_eq!(
        one["sequence_number"].as_u64().unwrap() + 1,
        two["sequence_number"].as_u64().unwrap()
    );
    up.open_gate("t2");
    ws.terminals(2).await;
    let (runs, _) = responses(&ws.frames);
    assert_eq!(
        runs.len(),
        2,
        "one successor for both: {:#?}",
        kinds(&ws.frames)
    );
    let successor = check_events(&runs[1]);
    assert_eq!(successor["previous_response_id"], id.as_str());
    assert_eq!(successor["store"], false);
    assert_eq!(successor["metadata"], json!({"task": "t2"}));
    // Not stored, yet chained: the connection remembers the steered response.
    let last = model_requests(&up).pop().unwrap();
    assert_eq!(
        user_texts(&last),
        ["draft it", "first: shorter", "second: in French"]
    );
    assert_eq!(
        message_text(&successor),
        "Hello! You said: second: in French"
    );
    let (status, _) = get(&relay.url(&format!("/v1/responses/{id}"))).await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn a_steer_after_the_response_completed_is_refused_and_its_input_returned() {
    let (_up, relay) = plain_relay().await;
    let mut ws = Ws::connect(&relay, None).await;
    ws.create(json!({"model": "fake-model", "input": "done quickly"}))
        .await;
    let done = ws.until("response.completed").await;
    let id = done["response"]["id"].as_str().unwrap();
    ws.steer(id, json!("too late")).await;
    let failed = ws.until("response.steer.failed").await;
    assert_eq!(failed["error"]["code"], "response_already_completed");
    assert_eq!(failed["error"]["type"], "invalid_request_error");
    assert_eq!(
        failed["steer"],
        json!({"previous_response_id": id, "input": "too late"})
    );
}

#[tokio::test]
async fn a_steer_racing_the_end_of_a_response_is_either_committed_or_refused_never_lost() {
    let (_up, relay) = plain_relay().await;
    let mut ws = Ws::connect(&relay, None).await;
    let (mut committed, mut refused) = (0, 0);
    for round in 0..6 {
        let input = format!("race {round}");
        ws.create(json!({"model": "fake-model", "input": input}))
            .await;
        let id = ws.until("response.created").await["response"]["id"]
            .as_str()
            .unwrap()
            .to_string();
        // Sent at once: it reaches the run anywhere from its first turn to after its end.
        let steering = format!("steer {round}");
        ws.steer(&id, json!(steering)).await;
        let from = ws.frames.len();
        let end = ws.terminals(1).await;
        let accepted = ws.frames[from..]
            .iter()
            .any(|f| f["type"] == "response.steer.accepted");
        if accepted {
            // Accepted before the end: the response ended steered (or completed), and a
            // successor commits the input.
            assert!(
                end["response"]["incomplete_details"]["reason"] == "steered"
                    || end["type"] == "response.completed",
                "{end}"
            );
            let created = ws.until("response.created").await;
            assert_eq!(created["response"]["previous_response_id"], id.as_str());
            let done = ws.until("response.completed").await;
            assert_eq!(
                message_text(&done["response"]),
                format!("Hello! You said: {steering}")
            );
            committed += 1;
        } else {
            // A refusal is sent at once: it may come before the terminal event.
            let failed = ws.since(from, "response.steer.failed").await;
            assert_eq!(
                failed["error"]["code"], "response_already_completed",
                "{failed}"
            );
            assert_eq!(failed["steer"]["input"], steering.as_str());
            assert!(failed["steer"].get("id").is_none(), "{failed}");
            refused += 1;
        }
    }
    assert_eq!(committed + refused, 6);
    // Nothing else follows: the next create's response is the next frame's.
    ws.create(json!({"model": "fake-model", "input": "after the races"}))
        .await;
    let next = ws.next().await;
    assert_eq!(next["type"], "response.created", "{next}");
    let done = ws.until("response.completed").await;
    assert_eq!(
        message_text(&done["response"]),
        "Hello! You said: after the races"
    );
}

#[tokio::test]
async fn a_steer_goes_to_its_responses_lane_and_the_successor_runs_there_while_another_lane_goes_on()
 {
    let (up, relay) = plain_relay().await;
    let mut ws = Ws::connect(&relay, None).await;
    ws.create(json!({"model": "fake-model?hold=la", "input": "lane a work", "stream_id": "a"}))
        .await;
    let id = ws.until("response.created").await["response"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    ws.create(json!({"model": "fake-model?hold=lb", "input": "lane b work", "stream_id": "b"}))
        .await;
    let other = ws.until("response.created").await;
    assert_eq!(other["stream_id"], "b");
    ws.steer(&id, json!("lane a, change course")).await;
    let accepted = ws.until("response.steer.accepted").await;
    assert_eq!(accepted["stream_id"], "a");
    up.open_gate("la");
    // Lane a: steered, then its successor; lane b still held all along.
    ws.terminals(2).await;
    let lane = |name: &str| -> Vec<Value> {
        (ws.frames.iter())
            .filter(|f| f["stream_id"] == name)
            .cloned()
            .collect()
    };
    let a = lane("a");
    let (runs, _) = responses(&a);
    assert_eq!(runs.len(), 2, "{:#?}", kinds(&a));
    assert_eq!(
        check_events(&runs[0])["incomplete_details"]["reason"],
        "steered"
    );
    let successor = check_events(&runs[1]);
    assert_eq!(successor["previous_response_id"], id.as_str());
    assert!(!lane("b").iter().any(is_terminal), "lane b is still held");
    up.open_gate("lb");
    let done = ws.until("response.completed").await;
    assert_eq!(done["stream_id"], "b");
    assert_eq!(
        message_text(&done["response"]),
        "Hello! You said: lane b work"
    );
    assert_eq!(done["response"]["previous_response_id"], Value::Null);
}
