//! Bounds and retries: upstream refusals before the first byte are retried (and only those),
//! the relay answers 503 with Retry-After when it runs as many runs as it may, runs have a time
//! limit, and requests have size limits with clear errors.

use std::time::Duration;

use serde_json::json;

use crate::support::*;

#[tokio::test]
async fn an_upstream_429_before_the_first_byte_is_retried_then_succeeds() {
    let (up, relay) = plain_relay().await;
    let model = "fake-model?fault=status429_once&deltas=3";
    let body = relay
        .stream(&json!({"model": model, "input": "x", "stream": true}))
        .await;
    let folded = check_events(&body.events);
    assert_eq!(folded["status"], "completed");
    let tries = up
        .requests()
        .iter()
        .filter(|r| r.body["model"] == model)
        .count();
    assert_eq!(tries, 2, "one refusal, one retry");
}

#[tokio::test]
async fn retries_are_bounded_and_never_happen_after_output_started() {
    let (up, relay) = configured_relay(|c| c.upstream_timeouts.retries = 2).await;
    let (status, _) = relay
        .create(&json!({"model": "fake-model?fault=status500", "input": "x"}))
        .await;
    assert_eq!(status, 502);
    assert_eq!(
        up.requests()
            .iter()
            .filter(|r| r.body["model"] == "fake-model?fault=status500")
            .count(),
        3
    );
    let body = relay.stream_input("fake-model?fault=cut", "x").await;
    assert_eq!(check_events(&body.events)["status"], "failed");
    assert_eq!(
        up.requests()
            .iter()
            .filter(|r| r.body["model"] == "fake-model?fault=cut")
            .count(),
        1,
        "a cut stream was retried"
    );
}

#[tokio::test]
async fn a_full_relay_answers_503_with_retry_after() {
    let (up, relay) = configured_relay(|c| c.limits.max_concurrent_runs = 1).await;
    let busy = relay
        .send(&json!({"model": "fake-model?fault=stall", "input": "x", "stream": true}))
        .await;
    eventually("the first run is streaming", || up.open_streams() == 1).await;
    let r = relay
        .send(&json!({"model": "fake-model", "input": "y"}))
        .await;
    assert_eq!(r.status(), 503);
    assert_eq!(r.headers()["retry-after"], "1");
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "server_busy");
    drop(busy);
    eventually("the first run ended", || up.open_streams() == 0).await;
    for _ in 0..100 {
        let (status, _) = relay
            .create(&json!({"model": "fake-model", "input": "y"}))
            .await;
        if status == 200 {
            return;
        }
        assert_eq!(status, 503);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the relay never freed the place of the finished run");
}

#[tokio::test]
async fn a_run_past_its_time_limit_ends_failed() {
    let (_up, relay) =
        configured_relay(|c| c.limits.max_run_time = Duration::from_millis(300)).await;
    let body = relay.stream_input("fake-model?fault=stall", "x").await;
    let folded = check_events(&body.events);
    assert_eq!(folded["status"], "failed");
    assert!(error_message(&folded).contains("limit"), "{folded}");
}

#[tokio::test]
async fn too_many_input_items_or_tools_are_rejected() {
    let (_up, relay) = configured_relay(|c| {
        c.limits.max_input_items = 2;
        c.limits.max_tools = 1;
    })
    .await;
    let input: Vec<_> = (0..3)
        .map(|i| json!({"role": "user", "content": format!("{i}")}))
        .collect();
    let (status, err) = relay.create(&json!({"model": "m", "input": input})).await;
    assert_eq!(param_error(status, &err), (400, Some("input")));
    let tools = json!([{"type": "function", "name": "a"}, {"type": "function", "name": "b"}]);
    let (status, err) = relay
        .create(&json!({"model": "m", "input": "x", "tools": tools}))
        .await;
    assert_eq!(param_error(status, &err), (400, Some("tools")));
}

#[tokio::test]
async fn a_client_that_stops_reading_has_its_run_cancelled() {
    let (up, relay) =
        configured_relay(|c| c.limits.client_stall = Duration::from_millis(300)).await;
    // A run that would stream for a minute (60,000 deltas 1 ms apart) to an HTTP/2 client that
    // never reads its body: it grants no flow-control window, the relay's writes stop after 64 KiB,
    // and the watchdog cancels the run long before the upstream would finish.
    let h2 = reqwest::Client::builder()
        .http2_prior_knowledge()
        .http2_initial_stream_window_size(65_535)
        .http2_initial_connection_window_size(65_535)
        .build()
        .unwrap();
    let resp = h2
        .post(relay.url("/v1/responses"))
        .json(&json!({"model": "fake-model?deltas=60000&delay_ms=1", "input": "flood", "stream": true, "store": false}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    stalled_run_is_cancelled(&up).await;
    drop(resp);
}
