//! Fault injection, MCP side: MCP servers that refuse, hang, fail, answer garbage, return huge
//! results, die or forget sessions, and clients that leave at each MCP stage. Each case checks the
//! exact items and events the client gets and that the stored (SQLite) log replays exactly what
//! was streamed, ending with a terminal event and `[DONE]`.

use std::sync::atomic::Ordering;

use responses_relay::Config;
use responses_relay::config::{DiscoveryFailure, StoreKind};
use serde_json::{Value, json};

use crate::mcp_test_server::{self, McpTestServer, Options};
use crate::support::*;

/// The fake upstream, the MCP test server with `options`, and a relay with a SQLite store.
async fn with_server(options: Options) -> (fake_upstream::FakeUpstream, McpTestServer, Relay) {
    let up = upstream().await;
    let server = mcp_server(options).await;
    let relay = relay(sqlite_config(&up)).await;
    (up, server, relay)
}

/// Continuing from `first`, `CALL echo {"text":"two"}` streams a completed call then a message,
/// and the call's output is `two`.
async fn echo_two_completes(relay: &Relay, first: &Value, tools: &Value) {
    let run = following(first, "CALL echo {\"text\":\"two\"}", tools.clone());
    let (body, second) = streamed_and_stored(relay, &run).await;
    assert_completed_shape(&body, &[&call_events(true), MESSAGE]);
    let call = items_of(&second, "mcp_call")[0];
    assert_completed(call, "two");
}

/// The fake upstream, a server hanging on `initialize`, and the test config (SQLite store)
/// with discovery timing out after `timeout`.
async fn hanging_discovery(
    timeout: std::time::Duration,
) -> (fake_upstream::FakeUpstream, BlackHole, Config) {
    let up = upstream().await;
    let hole = BlackHole::start().await;
    let mut c = sqlite_config(&up);
    c.mcp.discovery_timeout = timeout;
    (up, hole, c)
}

/// Options for a server of the initialize-handshake era (sessions that expire, connections
/// that drop).
fn handshake_only() -> Options {
    Options {
        handshake_only: true,
        ..Default::default()
    }
}

/// The test config with a SQLite store of its own.
fn sqlite_config(up: &fake_upstream::FakeUpstream) -> Config {
    let mut c = config(&up.base_url());
    c.store = StoreKind::Sqlite(scratch("faults").join("relay.sqlite3"));
    c
}

/// A port nothing listens on (bound, then released).
fn closed_port() -> std::net::SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// The event types of a stream, with each run of one `*.delta` type written once as `T*`.
fn shape(events: &[Value]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for k in kinds(events) {
        if k.ends_with(".delta") {
            let starred = format!("{k}*");
            if out.last() == Some(&starred) {
                continue;
            }
            out.push(starred);
        } else {
            out.push(k);
        }
    }
    out
}

const START: &[&str] = &["response.created", "response.in_progress"];

/// An `mcp_list_tools` item, listed (`ok`) or failed.
fn list_events(ok: bool) -> Vec<&'static str> {
    let end = [
        "response.mcp_list_tools.failed",
        "response.mcp_list_tools.completed",
    ][usize::from(ok)];
    vec![
        "response.output_item.added",
        "response.mcp_list_tools.in_progress",
        end,
        "response.output_item.done",
    ]
}

/// An MCP call streamed by the model, then its result (`ok`) or failure.
fn call_events(ok: bool) -> Vec<&'static str> {
    vec![
        "response.output_item.added",
        "response.mcp_call.in_progress",
        "response.mcp_call_arguments.delta*",
        "response.mcp_call_arguments.done",
        if ok {
            "response.mcp_call.completed"
        } else {
            "response.mcp_call.failed"
        },
        "response.output_item.done",
    ]
}

const MESSAGE: &[&str] = &[
    "response.output_item.added",
    "response.content_part.added",
    "response.output_text.delta*",
    "response.output_text.done",
    "response.content_part.done",
    "response.output_item.done",
];

fn expected(parts: &[&[&str]], terminal: &str) -> Vec<String> {
    let mut all: Vec<String> = START.iter().map(|s| s.to_string()).collect();
    for p in parts {
        all.extend(p.iter().map(|s| s.to_string()));
    }
    all.push(terminal.to_string());
    all
}

/// A streamed run of `input` with `tools` on the fake model.
fn streaming(input: &str, tools: Value) -> Value {
    json!({"model": "fake-model", "input": input, "stream": true, "tools": tools})
}

/// A streamed run of `input` with the tools of `server`, labelled `s`.
fn call_on(server: &McpTestServer, input: &str) -> Value {
    streaming(input, json!([mcp_tool("s", &server.url())]))
}

/// As [`streaming`], continuing from the Response `previous`.
fn following(previous: &Value, input: &str, tools: Value) -> Value {
    let mut request = streaming(input, tools);
    request["previous_response_id"] = previous["id"].clone();
    request
}

/// The stream is of a completed run whose output streams as `parts`.
fn assert_completed_shape(body: &SseBody, parts: &[&[&str]]) {
    assert_eq!(shape(&body.events), expected(parts, "response.completed"));
}

/// An `mcp_call` item that completed with `output`.
fn assert_completed(call: &Value, output: &str) {
    assert_eq!(
        (call["status"].as_str(), call["output"].as_str()),
        (Some("completed"), Some(output)),
        "{call}"
    );
}

fn message_text(response: &Value) -> String {
    items_of(response, "message")[0]["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Streams a request; checks the events (framing, order, one terminal event last, `[DONE]`) and
/// that the stored log replays exactly the same events. Returns the body and the folded Response.
async fn streamed_and_stored(relay: &Relay, request: &Value) -> (SseBody, Value) {
    let body = relay.stream(request).await;
    assert!(body.done, "the stream did not end with [DONE]");
    let folded = check_events(&body.events);
    assert_stored(relay, &id_of(&body), &body.raw).await;
    (body, folded)
}

/// The stored log of `id` (read once the run has ended): complete, well-ordered, ending with
/// `[DONE]`, and starting with exactly the events `live` (what a client saw, maybe cut short).
/// Returns the folded stored Response.
async fn assert_stored(relay: &Relay, id: &str, live: &[String]) -> Value {
    let text = relay.replay_text(id).await;
    let stored = parse_sse(&text);
    assert!(
        stored.done,
        "the stored log of {id} does not end with [DONE]: {text}"
    );
    let folded = check_events(&stored.events);
    assert!(
        stored.raw.len() >= live.len(),
        "the stored log of {id} lacks events the client saw"
    );
    assert_eq!(
        &stored.raw[..live.len()],
        live,
        "the stored log of {id} differs from what was streamed"
    );
    let (status, got) = relay.get(&format!("/v1/responses/{id}")).await;
    assert_eq!(status, 200);
    assert_eq!(
        got,
        stored.events.last().unwrap()["response"],
        "GET {id} differs from the log's terminal event"
    );
    folded
}

/// The stored log of `id` as events.
async fn stored_events(relay: &Relay, id: &str) -> Vec<Value> {
    let text = relay.replay_text(id).await;
    parse_sse(&text).events
}

/// Polls `GET /v1/responses/{id}` until the run has ended; returns it.
async fn ended(relay: &Relay, id: &str) -> Value {
    for _ in 0..1000 {
        let (status, r) = relay.get(&format!("/v1/responses/{id}")).await;
        if status == 200 && !matches!(r["status"].as_str(), Some("queued" | "in_progress")) {
            return r;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("response {id} never ended");
}

/// Reads SSE from `resp` into `seen` until `until` holds for the events received so far.
async fn read_until(
    resp: &mut reqwest::Response,
    seen: &mut Vec<u8>,
    until: impl Fn(&[Value]) -> bool,
) -> SseBody {
    loop {
        let end = seen
            .windows(2)
            .rposition(|w| w == b"\n\n")
            .map_or(0, |i| i + 2);
        let body = parse_sse(std::str::from_utf8(&seen[..end]).unwrap());
        if until(&body.events) {
            return body;
        }
        let chunk = resp
            .chunk()
            .await
            .unwrap()
            .expect("the stream ended before the awaited event");
        seen.extend_from_slice(&chunk);
    }
}

async fn open_stream(relay: &Relay, request: &Value) -> reqwest::Response {
    let resp = relay.send(request).await;
    assert_eq!(resp.status(), 200);
    resp
}

// ------------------------------------------------------------------ discovery faults

#[tokio::test]
async fn a_refused_connection_at_discovery_fails_the_list_and_the_run_still_answers() {
    let up = upstream().await;
    let dead = format!("http://{}/mcp", closed_port());
    let relay = relay(sqlite_config(&up)).await;
    let request = json!({"model": "fake-model", "input": "hello", "stream": true, "tools": [mcp_tool("gone", &dead)]});
    let (body, folded) = streamed_and_stored(&relay, &request).await;
    assert_completed_shape(&body, &[&list_events(false), MESSAGE]);
    assert_eq!(folded["status"], "completed");
    assert_eq!(output_types(&folded), ["mcp_list_tools", "message"]);
    let list = &folded["output"][0];
    assert_eq!(list["tools"], json!([]));
    let error = list["error"].as_str().unwrap();
    assert!(
        error.starts_with("Error retrieving tool list from MCP server: 'gone'. Could not connect to the MCP server"),
        "{error}"
    );

    let mut c = sqlite_config(&up);
    c.mcp.discovery_failure = DiscoveryFailure::Fail;
    let strict = crate::support::relay(c).await;
    let before = up.requests().len();
    let (status, err) = strict.create(&request).await;
    assert_eq!(status, 424, "{err}");
    assert_eq!(err["error"]["type"], "external_connector_error");
    assert_eq!(err["error"]["message"], error);
    assert_eq!(
        up.requests().len(),
        before,
        "a refused request reached the model"
    );
}

#[tokio::test]
async fn a_server_hanging_on_initialize_times_discovery_out() {
    let (_up, hole, mut c) = hanging_discovery(std::time::Duration::from_millis(300)).await;
    let relay = relay(c.clone()).await;
    let request = streaming("hello", json!([mcp_tool("hang", &hole.url())]));
    let (body, folded) = streamed_and_stored(&relay, &request).await;
    assert_completed_shape(&body, &[&list_events(false), MESSAGE]);
    assert_eq!(output_types(&folded), ["mcp_list_tools", "message"]);
    let expected_error =
        "Error retrieving tool list from MCP server: 'hang'. Timed out after 300ms.";
    assert_eq!(folded["output"][0]["error"], expected_error);
    assert!(
        hole.accepted.load(Ordering::SeqCst) >= 1,
        "the relay never connected"
    );

    c.mcp.discovery_failure = DiscoveryFailure::Fail;
    let strict = crate::support::relay(c).await;
    let (status, err) = strict.create(&request).await;
    assert_eq!(status, 424, "{err}");
    assert_eq!(err["error"]["message"], expected_error);
    assert_eq!(err["error"]["param"], "tools");
}

#[tokio::test]
async fn a_server_answering_500_fails_the_list_naming_the_status() {
    let (_up, server, relay) = with_server(Options {
        fail_http: Some(500),
        ..Options::default()
    })
    .await;
    let request = streaming("hello", json!([mcp_tool("broken", &server.url())]));
    let (body, folded) = streamed_and_stored(&relay, &request).await;
    assert_completed_shape(&body, &[&list_events(false), MESSAGE]);
    assert_eq!(
        folded["output"][0]["error"],
        "Error retrieving tool list from MCP server: 'broken'. Http status code: 500 (Internal Server Error)"
    );
    assert_eq!(folded["status"], "completed");
}

#[tokio::test]
async fn invalid_json_from_the_server_fails_the_list_or_the_call_and_the_run_completes() {
    // At discovery.
    let (_up, garbage, relay) = with_server(Options {
        bad_json: true,
        ..Options::default()
    })
    .await;
    let (body, folded) = streamed_and_stored(
        &relay,
        &streaming("hello", json!([mcp_tool("junk", &garbage.url())])),
    )
    .await;
    assert_completed_shape(&body, &[&list_events(false), MESSAGE]);
    let error = folded["output"][0]["error"].as_str().unwrap();
    assert!(
        error.starts_with("Error retrieving tool list from MCP server: 'junk'. "),
        "{error}"
    );
    assert!(
        error.len() > "Error retrieving tool list from MCP server: 'junk'. ".len() + 5,
        "{error}"
    );

    // At call time: listed fine in turn 1, garbage for the call in turn 2.
    let server = mcp_server(Options::default()).await;
    let tools = json!([mcp_tool("s", &server.url())]);
    let run = streaming("hi", tools.clone());
    let (_, first) = streamed_and_stored(&relay, &run).await;
    server.set_bad_json(true);
    let run = following(&first, "CALL echo {\"text\":\"x\"}", tools.clone());
    let (body, second) = streamed_and_stored(&relay, &run).await;
    assert_completed_shape(&body, &[&call_events(false), MESSAGE]);
    let call = items_of(&second, "mcp_call")[0];
    assert_eq!(call["status"], "failed");
    assert_eq!(call["output"], Value::Null);
    let kind = call["error"]["type"].as_str().unwrap();
    assert!(
        matches!(kind, "http_error" | "mcp_protocol_error"),
        "{call}"
    );
    assert!(
        call["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{call}"
    );
    assert!(
        message_text(&second).starts_with("Tool results: Error"),
        "{second}"
    );

    // The server recovers: the next call on it works.
    server.set_bad_json(false);
    let run = following(&second, "CALL echo {\"text\":\"back\"}", tools.clone());
    let (_, third) = streamed_and_stored(&relay, &run).await;
    let call = items_of(&third, "mcp_call")[0];
    assert_completed(call, "back");
}

// ------------------------------------------------------------------ call faults

#[tokio::test]
async fn a_refused_connection_at_call_time_is_an_http_error_with_code_0() {
    let (_up, server, relay) = with_server(Options::default()).await;
    let tools = json!([mcp_tool("s", &server.url())]);
    let run = streaming("hi", tools.clone());
    let (_, first) = streamed_and_stored(&relay, &run).await;
    assert_eq!(output_types(&first), ["mcp_list_tools", "message"]);
    server.shutdown().await;
    let run = following(&first, "CALL echo {\"text\":\"x\"}", tools.clone());
    let (body, second) = streamed_and_stored(&relay, &run).await;
    assert_completed_shape(&body, &[&call_events(false), MESSAGE]);
    assert_eq!(output_types(&second), ["mcp_call", "message"]);
    let call = &second["output"][0];
    assert_eq!(call["status"], "failed");
    assert_eq!(call["error"]["type"], "http_error", "{call}");
    assert_eq!(call["error"]["code"], 0, "{call}");
    assert!(error_message(call).contains("connect"), "{call}");
    assert!(
        message_text(&second).starts_with("Tool results: Error"),
        "{second}"
    );
}

#[tokio::test]
async fn a_hanging_call_times_out_and_the_server_sees_it_cancelled() {
    let up = upstream().await;
    let server = mcp_server(Options::default()).await;
    let mut c = sqlite_config(&up);
    c.mcp.call_timeout = std::time::Duration::from_millis(500);
    let relay = relay(c).await;
    let (body, folded) =
        streamed_and_stored(&relay, &call_on(&server, "CALL slow {\"ms\":60000}")).await;
    assert_completed_shape(&body, &[&list_events(true), &call_events(false), MESSAGE]);
    let call = items_of(&folded, "mcp_call")[0];
    assert_eq!(
        call["error"],
        json!({"type": "mcp_protocol_error", "code": -32001, "message": "Request timed out after 500ms"})
    );
    assert_eq!(folded["status"], "completed");
    assert_eq!(server.slow_started(), 1);
    let cancelled = || server.cancelled_calls() == 1;
    eventually("the server sees the timed-out call cancelled", cancelled).await;
}

#[tokio::test]
async fn a_json_rpc_error_is_an_mcp_protocol_error() {
    let (_up, server, relay) = with_server(Options::default()).await;
    let (body, folded) = streamed_and_stored(&relay, &call_on(&server, "CALL boom {}")).await;
    assert_completed_shape(&body, &[&list_events(true), &call_events(false), MESSAGE]);
    let call = items_of(&folded, "mcp_call")[0];
    assert_eq!(
        call["error"],
        json!({"type": "mcp_protocol_error", "code": -32042, "message": "boom"})
    );
    assert_eq!(call["output"], Value::Null);
    assert_eq!(
        message_text(&folded),
        "Tool results: Error: MCP error -32042: boom"
    );
}

#[tokio::test]
async fn a_ten_megabyte_result_is_truncated_with_a_marker_for_client_and_model() {
    let (up, server, relay) = with_server(Options::default()).await;
    let (body, folded) =
        streamed_and_stored(&relay, &call_on(&server, "CALL big {\"bytes\":10000000}")).await;
    assert_completed_shape(&body, &[&list_events(true), &call_events(true), MESSAGE]);
    let cap = 64 * 1024;
    let call = items_of(&folded, "mcp_call")[0];
    let output = call["output"].as_str().unwrap();
    assert_eq!(
        output,
        format!(
            "{}… [truncated: {} bytes omitted]",
            "x".repeat(cap),
            10_000_000 - cap
        )
    );
    let streamed: usize = body.raw.iter().map(String::len).sum();
    assert!(streamed < 1_000_000, "the client got {streamed} bytes");
    let sent = last_request(&up).to_string();
    assert!(
        sent.len() < 2 * cap,
        "the model's request has {} bytes",
        sent.len()
    );
}

#[tokio::test]
async fn a_server_dying_mid_call_fails_the_call_and_the_run_completes() {
    let up = upstream().await;
    // Sessions, their expiry and a dropped connection are of the initialize-handshake era.
    let server = mcp_server(handshake_only()).await;
    let mut c = sqlite_config(&up);
    c.mcp.call_timeout = std::time::Duration::from_secs(10);
    let relay = relay(c).await;
    let request = call_on(&server, "CALL slow {\"ms\":60000}");
    let url = relay.url("/v1/responses");
    let reading = tokio::spawn(async move { stream(&url, &request).await });
    eventually("the slow call is running", || server.slow_started() == 1).await;
    server.shutdown().await;
    let body = reading.await.unwrap();
    assert!(body.done);
    let folded = check_events(&body.events);
    assert_stored(&relay, &id_of(&body), &body.raw).await;
    assert_completed_shape(&body, &[&list_events(true), &call_events(false), MESSAGE]);
    let call = items_of(&folded, "mcp_call")[0];
    let error = &call["error"];
    match error["type"].as_str() {
        Some("http_error") => assert_eq!(error["code"], 0, "{call}"),
        Some("mcp_protocol_error") => assert_ne!(
            error["code"], -32001,
            "the relay waited for the call timeout: {call}"
        ),
        _ => panic!("unexpected error shape: {call}"),
    }
    assert!(
        error["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{call}"
    );
    assert_eq!(folded["status"], "completed");
}

#[tokio::test]
async fn an_expired_session_is_reinitialised_and_the_call_succeeds() {
    // Sessions, their expiry and a dropped connection are of the initialize-handshake era.
    let (_up, server, relay) = with_server(handshake_only()).await;
    let tools = json!([mcp_tool("s", &server.url())]);
    let run = streaming("CALL echo {\"text\":\"one\"}", tools.clone());
    let (_, first) = streamed_and_stored(&relay, &run).await;
    assert_eq!(items_of(&first, "mcp_call")[0]["output"], "one");
    assert_eq!(server.sessions_begun(), 1);
    server.expire_sessions().await;
    assert_eq!(server.session_count().await, 0);
    echo_two_completes(&relay, &first, &tools).await;
    assert_eq!(
        server.sessions_begun(),
        2,
        "the pool did not start a new session"
    );
    assert_eq!(
        server.count("tools/call"),
        3,
        "one call before, and the expired one retried once"
    );
}

#[tokio::test]
async fn a_restarted_server_gets_a_new_session_and_the_call_succeeds() {
    let up = upstream().await;
    // Sessions, their expiry and a dropped connection are of the initialize-handshake era.
    let server = mcp_server(handshake_only()).await;
    let addr = server.addr;
    let relay = relay(sqlite_config(&up)).await;
    let tools = json!([mcp_tool("s", &server.url())]);
    let run = streaming("CALL echo {\"text\":\"one\"}", tools.clone());
    let (_, first) = streamed_and_stored(&relay, &run).await;
    assert_eq!(items_of(&first, "mcp_call")[0]["output"], "one");
    server.shutdown().await;
    let server = mcp_test_server::start(addr, handshake_only())
        .await
        .expect("restart on the same port");
    echo_two_completes(&relay, &first, &tools).await;
    assert_eq!(
        server.sessions_begun(),
        1,
        "no new session on the restarted server"
    );
}

// ------------------------------------------------------------------ clients that leave

#[tokio::test]
async fn a_client_leaving_during_discovery_abandons_the_request_and_its_mcp_connection() {
    let (up, hole, mut c) = hanging_discovery(std::time::Duration::from_secs(120)).await;
    c.limits.max_concurrent_runs = 1;
    let relay = relay(c).await;
    let url = relay.url("/v1/responses");
    let request = streaming("hello", json!([mcp_tool("hang", &hole.url())]));
    let leaving = tokio::spawn(async move { client().post(url).json(&request).send().await });
    eventually("the relay connects to the MCP server", || {
        hole.accepted.load(Ordering::SeqCst) == 1
    })
    .await;
    leaving.abort();
    let _ = leaving.await;
    // The abandoned request gives back the relay's one run slot (so it can never reach the
    // model): the next request runs.
    let next = json!({"model": "fake-model", "input": "next", "stream": true});
    let mut admitted = false;
    for _ in 0..1000 {
        let r = relay.send(&next).await;
        if r.status() != 503 {
            assert_eq!(r.status(), 200);
            let body = parse_sse(&r.text().await.unwrap());
            assert_completed_shape(&body, &[MESSAGE]);
            check_events(&body.events);
            assert_stored(&relay, &id_of(&body), &body.raw).await;
            admitted = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(
        admitted,
        "the request of the client that left still holds the run slot"
    );
    let asked: Vec<String> = up
        .requests()
        .iter()
        .map(|r| r.body["messages"].to_string())
        .collect();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert!(
        asked[0].contains("next") && !asked[0].contains("hello"),
        "{asked:?}"
    );
    eventually("the relay drops its connection to the MCP server", || {
        hole.closed.load(Ordering::SeqCst) == 1
    })
    .await;
}

#[tokio::test]
async fn a_timed_out_discovery_keeps_no_connection_to_the_server() {
    let up = upstream().await;
    let hole = BlackHole::start().await;
    let mut c = config(&up.base_url());
    c.mcp.discovery_timeout = std::time::Duration::from_millis(300);
    let relay = relay(c).await;
    let (status, r) = relay
        .create(
            &json!({"model": "fake-model", "input": "hello", "tools": [mcp_tool("hang", &hole.url())]}),
        )
        .await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(
        r["output"][0]["error"],
        "Error retrieving tool list from MCP server: 'hang'. Timed out after 300ms."
    );
    assert_eq!(hole.accepted.load(Ordering::SeqCst), 1);
    eventually(
        "the relay closes its connection to the server it gave up on",
        || hole.closed.load(Ordering::SeqCst) == 1,
    )
    .await;
}

#[tokio::test]
async fn a_client_leaving_during_a_call_cancels_the_run_and_the_call() {
    let (up, server, relay) = with_server(Options::default()).await;
    let mut resp = open_stream(&relay, &call_on(&server, "CALL slow {\"ms\":60000}")).await;
    let mut seen = Vec::new();
    let live = read_until(&mut resp, &mut seen, |events| {
        events
            .iter()
            .any(|e| e["type"] == "response.mcp_call_arguments.done")
    })
    .await;
    eventually("the slow call is running", || server.slow_started() == 1).await;
    drop(resp);
    eventually("the server sees the call cancelled", || {
        server.cancelled_calls() == 1
    })
    .await;
    let id = id_of(&live);
    let r = ended(&relay, &id).await;
    assert_eq!(r["status"], "cancelled", "{r}");
    let stored = assert_stored(&relay, &id, &live.raw).await;
    assert_eq!(stored["status"], "cancelled");
    assert_eq!(
        shape(&stored_events(&relay, &id).await),
        expected(
            &[&list_events(true), &call_events(false)],
            "response.failed"
        )
    );
    assert_eq!(output_types(&stored), ["mcp_list_tools", "mcp_call"]);
    let call = &stored["output"][1];
    assert_eq!(call["status"], "failed");
    assert_eq!(call["error"]["type"], "mcp_tool_execution_error");
    assert_eq!(
        call["error"]["content"][0]["text"],
        "The run stopped before this call finished."
    );
    assert_eq!(
        up.requests().len(),
        1,
        "the model was asked again for a client that is gone"
    );
}

#[tokio::test]
async fn a_client_leaving_right_after_a_call_completed_cancels_the_run() {
    let (up, server, relay) = with_server(Options::default()).await;
    // A slow model: the answer after the call streams for seconds.
    let mut resp = open_stream(
        &relay,
        &json!({"model": "fake-model?deltas=200&delay_ms=50", "input": "CALL echo {\"text\":\"done\"}", "stream": true,
                "tools": [mcp_tool("s", &server.url())]}),
    )
    .await;
    let mut seen = Vec::new();
    let live = read_until(&mut resp, &mut seen, |events| {
        events
            .iter()
            .any(|e| e["type"] == "response.output_item.done" && e["item"]["type"] == "mcp_call")
    })
    .await;
    drop(resp);
    let id = id_of(&live);
    let r = ended(&relay, &id).await;
    assert_eq!(r["status"], "cancelled", "{r}");
    let stored = assert_stored(&relay, &id, &live.raw).await;
    assert_eq!(stored["status"], "cancelled");
    let events = shape(&stored_events(&relay, &id).await);
    let through_call = expected(&[&list_events(true), &call_events(true)], "response.failed");
    assert_eq!(
        events[..through_call.len() - 1],
        through_call[..through_call.len() - 1],
        "{events:?}"
    );
    assert_eq!(events.last().unwrap(), "response.failed");
    let types = output_types(&stored);
    assert!(
        types == ["mcp_list_tools", "mcp_call"]
            || types == ["mcp_list_tools", "mcp_call", "message"],
        "{types:?}"
    );
    let call = &stored["output"][1];
    assert_completed(call, "done");
    if let Some(message) = stored["output"].get(2) {
        assert_eq!(message["status"], "incomplete", "{message}");
    }
    assert_eq!(server.count("tools/call"), 1);
    eventually("the model's stream is closed after the client left", || {
        up.open_streams() == 0
    })
    .await;
}

#[tokio::test]
async fn the_model_failing_after_the_mcp_calls_ran_ends_the_stream_with_response_failed() {
    // The turn after the tools ran is the model's: its upstream answering 500 (retried, then
    // given up) or cutting its stream midway fails the run in the stream, after the call's items,
    // never as a cut connection; the stored log says the same.
    let (_up, server, relay) = with_server(Options::default()).await;
    for (fault, text_started) in [("status500", false), ("cut", true)] {
        let model = format!("fake-model?fault={fault}&fault_after_tools=1");
        let request = json!({"model": model, "input": "CALL echo {\"text\":\"ran\"}", "stream": true,
                             "tools": [mcp_tool("s", &server.url())]});
        let (body, folded) = streamed_and_stored(&relay, &request).await;
        let (list, call) = (list_events(true), call_events(true));
        let mut parts: Vec<&[&str]> = vec![&list, &call];
        if text_started {
            parts.push(MESSAGE);
        }
        assert_eq!(
            shape(&body.events),
            expected(&parts, "response.failed"),
            "{fault}"
        );
        assert_eq!(folded["status"], "failed", "{fault}: {folded}");
        assert_eq!(folded["error"]["code"], "server_error", "{fault}: {folded}");
        let call = items_of(&folded, "mcp_call")[0];
        assert_eq!(
            (call["status"].as_str(), call["output"].as_str()),
            (Some("completed"), Some("ran")),
            "{fault}"
        );
    }
    assert_eq!(server.count("tools/call"), 2);
}
