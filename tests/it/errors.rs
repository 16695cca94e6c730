//! Bad input and failing upstreams: clear errors in OpenAI's envelope before the first byte,
//! `response.failed` after it, and nothing left running when a client goes away.

use serde_json::{Value, json};

use crate::support::*;

/// A streamed run whose model stalls after its first deltas.
fn stalled_stream() -> Value {
    json!({"model": "fake-model?fault=stall", "input": "x", "stream": true})
}

fn envelope(body: &Value) -> &Value {
    let e = &body["error"];
    for k in ["message", "type", "param", "code"] {
        assert!(e.get(k).is_some(), "error envelope lacks '{k}': {body}");
    }
    e
}

/// Invalid requests (their JSON), the field each names (`error.param`) and its `error.code`.
const INVALID_REQUESTS: &[(&str, &str, Option<&str>)] = &[
    (
        r#"{"input": "x"}"#,
        "model",
        Some("missing_required_parameter"),
    ),
    (
        r#"{"model": "m"}"#,
        "input",
        Some("missing_required_parameter"),
    ),
    (
        r#"{"model": "m", "input": "x", "bogus": 1}"#,
        "bogus",
        Some("unknown_parameter"),
    ),
    (
        r#"{"model": 5, "input": "x"}"#,
        "model",
        Some("invalid_type"),
    ),
    (
        r#"{"model": "m", "input": "x", "temperature": 3}"#,
        "temperature",
        Some("invalid_value"),
    ),
    (
        r#"{"model": "m", "input": "x", "top_p": -1}"#,
        "top_p",
        Some("invalid_value"),
    ),
    (
        r#"{"model": "m", "input": "x", "max_output_tokens": 2}"#,
        "max_output_tokens",
        Some("invalid_value"),
    ),
    (r#"{"model": "m", "input": 7}"#, "input", None),
    (
        r#"{"model": "m", "input": [{"type": "message", "role": "robot", "content": "x"}]}"#,
        "input[0].role",
        Some("invalid_value"),
    ),
    (
        r#"{"model": "m", "input": [{"type": "message", "content": "x"}]}"#,
        "input[0].role",
        Some("missing_required_parameter"),
    ),
    (
        r#"{"model": "m", "input": [{"role": "user", "content": 5}]}"#,
        "input[0]",
        Some("invalid_type"),
    ),
    (
        r#"{"model": "m", "input": [{"role": "user", "content": "x", "extra": 1}]}"#,
        "input[0].extra",
        Some("unknown_parameter"),
    ),
    (
        r#"{"model": "m", "input": [{"type": "function_call_output", "output": "x"}]}"#,
        "input[0].call_id",
        Some("missing_required_parameter"),
    ),
    (
        r#"{"model": "m", "input": [{"type": "warp_drive"}]}"#,
        "input[0].type",
        Some("invalid_value"),
    ),
    (
        r#"{"model": "m", "input": [{"role": "user", "content": [{"type": "input_image", "file_id": "file-1"}]}]}"#,
        "input[0].content[0].file_id",
        Some("unsupported_parameter"),
    ),
    (
        r#"{"model": "m", "input": "x", "tools": [{"type": "teleport"}]}"#,
        "tools[0].type",
        Some("invalid_value"),
    ),
    (
        r#"{"model": "m", "input": "x", "tools": [{"type": "function", "name": "bad name"}]}"#,
        "tools[0].name",
        Some("invalid_value"),
    ),
    (
        r#"{"model": "m", "input": "x", "tools": [{"type": "function"}]}"#,
        "tools[0].name",
        Some("missing_required_parameter"),
    ),
    (
        r#"{"model": "m", "input": "x", "tools": [{"type": "function", "name": "f"}], "tool_choice": {"type": "function", "name": "g"}}"#,
        "tool_choice.name",
        Some("invalid_value"),
    ),
    (
        r#"{"model": "m", "input": "x", "tool_choice": "sometimes"}"#,
        "tool_choice",
        Some("invalid_value"),
    ),
    (
        r#"{"model": "m", "input": "x", "metadata": {"k": 1}}"#,
        "metadata.k",
        None,
    ),
    (
        r#"{"model": "m", "input": "x", "store": false, "background": true}"#,
        "background",
        Some("invalid_value"),
    ),
    (
        r#"{"model": "m", "input": "x", "reasoning": {"effort": "extreme"}}"#,
        "reasoning.effort",
        Some("invalid_value"),
    ),
    (
        r#"{"model": "m", "input": "x", "text": {"format": {"type": "json_schema", "name": "n"}}}"#,
        "text.format.schema",
        Some("missing_required_parameter"),
    ),
    (
        r#"{"model": "m", "input": "x", "include": ["nonsense"]}"#,
        "include[0]",
        Some("invalid_value"),
    ),
    (
        r#"{"model": "m", "input": "x", "top_logprobs": 3}"#,
        "top_logprobs",
        Some("unsupported_parameter"),
    ),
    (
        r#"{"model": "m", "previous_response_id": "resp_nope", "input": "x"}"#,
        "previous_response_id",
        Some("previous_response_not_found"),
    ),
    (
        r#"{"model": "m", "input": [{"type": "item_reference", "id": "msg_nope"}]}"#,
        "input[0].id",
        Some("invalid_value"),
    ),
];

#[tokio::test]
async fn invalid_requests_get_400_naming_the_field() {
    let (up, relay) = plain_relay().await;
    let url = relay.url("/v1/responses");
    for &(body, param, code) in INVALID_REQUESTS {
        let body: Value = serde_json::from_str(body).unwrap();
        let (status, resp) = post(&url, &body).await;
        assert_eq!(status, 400, "{body} → {resp}");
        let e = envelope(&resp);
        assert_eq!(e["type"], "invalid_request_error", "{body} → {resp}");
        assert_eq!(e["param"], param, "{body} → {resp}");
        if let Some(code) = code {
            assert_eq!(e["code"], code, "{body} → {resp}");
        }
        assert!(!e["message"].as_str().unwrap().is_empty());
    }
    assert!(
        up.requests().is_empty(),
        "an invalid request reached the upstream"
    );
}

#[tokio::test]
async fn malformed_json_and_oversized_bodies_are_rejected() {
    let (_up, relay) = configured_relay(|c| c.max_body_bytes = 2048).await;
    let r = client()
        .post(relay.url("/v1/responses"))
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let body: Value = r.json().await.unwrap();
    assert!(
        envelope(&body)["message"]
            .as_str()
            .unwrap()
            .contains("parse the JSON body")
    );
    let big = json!({"model": "m", "input": "x".repeat(4096)});
    let (status, body) = relay.create(&big).await;
    assert_eq!(status, 413);
    envelope(&body);
}

#[tokio::test]
async fn unknown_routes_and_ids_get_404_envelopes() {
    let (_up, relay) = plain_relay().await;
    let (status, body) = relay.get("/v1/nothing").await;
    assert_eq!(status, 404);
    envelope(&body);
    let (status, body) = relay.get("/v1/responses/resp_missing").await;
    assert_eq!(status, 404);
    assert_eq!(
        envelope(&body)["message"],
        "No response found with id 'resp_missing'."
    );
    let (status, _) = relay.get("/healthz").await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn models_are_passed_through_from_the_upstream() {
    let (_up, relay) = plain_relay().await;
    let (status, body) = relay.get("/v1/models").await;
    assert_eq!(status, 200);
    assert_eq!(body["data"][0]["id"], "fake-model");
}

#[tokio::test]
async fn upstream_failures_before_the_first_byte_are_http_errors() {
    let (_up, relay) = plain_relay().await;
    let url = relay.url("/v1/responses");
    for (model, stream, status) in [
        ("fake-model?fault=status500", true, 502),
        ("fake-model?fault=status500", false, 502),
        ("fake-model?fault=status429", true, 429),
    ] {
        let (got, body) = post(
            &url,
            &json!({"model": model, "input": "x", "stream": stream}),
        )
        .await;
        assert_eq!(got, status, "{model}: {body}");
        envelope(&body);
    }
    // The upstream's own 400 is passed on with its param.
    let (got, body) = post(
        &url,
        &json!({"model": "fake-model?fault=status400", "input": "x", "stream": true}),
    )
    .await;
    assert_eq!(got, 400);
    assert_eq!(envelope(&body)["param"], "model");
    assert!(error_message(&body).contains("bad model param"));
}

#[tokio::test]
async fn unreachable_upstream_is_502_and_slow_upstream_is_504() {
    // A port nothing listens on (bound then released).
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let r = relay(config(&format!("http://{closed}/v1"))).await;
    let (status, body) = r.create(&json!({"model": "m", "input": "x"})).await;
    assert_eq!(status, 502, "{body}");
    assert!(
        envelope(&body)["message"]
            .as_str()
            .unwrap()
            .contains("connect")
    );

    let up = upstream().await;
    let mut c = config(&up.base_url());
    c.upstream_timeouts.first_byte = std::time::Duration::from_millis(200);
    let r = relay(c).await;
    let (status, body) = r.create(&json!({"model": "fake-model?fault=slow_headers&delay_ms=3000", "input": "x", "stream": true})).await;
    assert_eq!(status, 504, "{body}");
    envelope(&body);
}

#[tokio::test]
async fn failures_after_the_first_event_end_with_response_failed() {
    let (_up, relay) = plain_relay().await;
    for fault in ["cut", "malformed", "error_chunk"] {
        let body = relay.stream(&json!({"model": format!("fake-model?fault={fault}"), "input": "x", "stream": true}))
        .await;
        assert!(body.done, "{fault}: no [DONE]");
        let folded = check_events(&body.events);
        let last = body.events.last().unwrap();
        assert_eq!(last["type"], "response.failed", "{fault}");
        assert_eq!(folded["status"], "failed");
        assert!(error_message(&folded).len() > 5, "{fault}: {folded}");
        // Text streamed before the failure is kept, its item closed as incomplete.
        assert_eq!(folded["output"][0]["status"], "incomplete", "{fault}");
    }
}

#[tokio::test]
async fn a_stream_without_done_still_completes_when_it_finished() {
    let (_up, relay) = plain_relay().await;
    let body = relay.stream_input("fake-model?fault=no_done", "x").await;
    check_events(&body.events);
    assert_eq!(body.events.last().unwrap()["type"], "response.completed");
}

/// Streams `model` through a relay whose upstream idle timeout is 300 ms.
async fn stream_with_a_300ms_idle_timeout(model: &str) -> SseBody {
    let (_up, relay) =
        configured_relay(|c| c.upstream_timeouts.idle = std::time::Duration::from_millis(300))
            .await;
    relay
        .stream(&json!({"model": model, "input": "x", "stream": true}))
        .await
}

#[tokio::test]
async fn stalled_upstream_fails_the_run_after_the_idle_timeout() {
    let body = stream_with_a_300ms_idle_timeout("fake-model?fault=stall").await;
    let folded = check_events(&body.events);
    assert_eq!(folded["status"], "failed");
    assert!(error_message(&folded).contains("timed out"));
}

#[tokio::test]
async fn a_model_slower_in_total_than_the_idle_timeout_completes_while_it_keeps_talking() {
    // Ten deltas 100 ms apart: a second of streaming, never 300 ms of silence.
    let body = stream_with_a_300ms_idle_timeout("fake-model?deltas=10&delay_ms=100").await;
    let folded = check_events(&body.events);
    assert_eq!(folded["status"], "completed", "{folded}");
    let deltas = body
        .events
        .iter()
        .filter(|e| e["type"] == "response.output_text.delta")
        .count();
    assert_eq!(deltas, 10);
}

#[tokio::test]
async fn client_disconnect_cancels_the_upstream_request() {
    let (up, relay) = plain_relay().await;
    let resp = relay.send(&stalled_stream()).await;
    assert_eq!(resp.status(), 200);
    eventually("the upstream stream is open", || up.open_streams() == 1).await;
    drop(resp);
    eventually(
        "the upstream stream is closed after the client left",
        || up.open_streams() == 0,
    )
    .await;
}

#[tokio::test]
async fn shutdown_mid_stream_ends_the_stream_with_a_terminal_event() {
    let (up, relay) = plain_relay().await;
    let resp = relay.send(&stalled_stream()).await;
    eventually("the upstream stream is open", || up.open_streams() == 1).await;
    let reading = tokio::spawn(async move { resp.text().await.unwrap() });
    relay.shutdown().await;
    let body = parse_sse(&reading.await.unwrap());
    assert!(body.done);
    let folded = check_events(&body.events);
    assert_eq!(folded["status"], "failed");
    assert!(error_message(&folded).contains("shut down"));
}

#[tokio::test]
async fn an_unknown_field_inside_a_content_part_is_named_exactly() {
    let (_up, relay) = plain_relay().await;
    let (status, body) = relay.create(&json!({"model": "m", "input": [{"role": "user", "content": [{"type": "input_text", "text": "x", "bogus": 1}]}]}))
    .await;
    assert_eq!(status, 400);
    assert_eq!(
        body["error"]["param"], "input[0].content[0].bogus",
        "{body}"
    );
    assert_eq!(body["error"]["code"], "unknown_parameter");
}

#[tokio::test]
async fn a_client_that_sends_its_whole_oversized_body_before_reading_gets_its_413() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (_up, relay) = configured_relay(|c| c.max_body_bytes = 1024 * 1024).await;
    // As Python's urllib and httpx do: the whole body first (64 MiB), then the answer.
    let size = 64 * 1024 * 1024;
    let mut s = tokio::net::TcpStream::connect(relay.addr).await.unwrap();
    let head = format!(
        "POST /v1/responses HTTP/1.1\r\nhost: relay\r\ncontent-type: application/json\r\ncontent-length: {size}\r\n\r\n"
    );
    s.write_all(head.as_bytes()).await.unwrap();
    let chunk = vec![b' '; 1024 * 1024];
    for i in 0..size / chunk.len() {
        s.write_all(&chunk)
            .await
            .unwrap_or_else(|e| panic!("the relay stopped reading after {i} MiB: {e}"));
    }
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    while !answer.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = s.read(&mut buf).await.unwrap();
        assert!(n > 0, "the connection closed without an answer");
        answer.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 413"), "{text}");
}
