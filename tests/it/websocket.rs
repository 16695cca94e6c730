//! WebSocket mode (SPEC §12): `GET /v1/responses` upgraded; `response.create` frames answered
//! with the run's events, one text frame each, byte for byte the SSE `data:` JSON; errors as
//! `error` frames after which the connection goes on; keys checked on the upgrade.

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use crate::mcp_test_server;
use crate::support::*;

type Socket = tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>;

/// The fake upstream, a relay in front of it, and a socket on the relay.
async fn connected() -> (crate::fake_upstream::FakeUpstream, Relay, Ws) {
    let (up, relay) = plain_relay().await;
    let ws = Ws::connect(&relay, None).await.unwrap();
    (up, relay, ws)
}

/// A client socket on the relay's `/v1/responses`.
struct Ws {
    socket: Socket,
}

impl Ws {
    async fn connect(relay: &Relay, bearer: Option<&str>) -> Result<Ws, u16> {
        let mut req = format!("ws://{}/v1/responses", relay.addr)
            .into_client_request()
            .unwrap();
        req.headers_mut().insert(
            "openai-beta",
            "responses_websockets=2026-02-06".parse().unwrap(),
        );
        if let Some(b) = bearer {
            req.headers_mut()
                .insert("authorization", format!("Bearer {b}").parse().unwrap());
        }
        let tcp = tokio::net::TcpStream::connect(relay.addr).await.unwrap();
        match tokio_tungstenite::client_async(req, tcp).await {
            Ok((socket, resp)) => {
                assert_eq!(resp.status(), 101);
                Ok(Ws { socket })
            }
            Err(tokio_tungstenite::tungstenite::Error::Http(resp)) => Err(resp.status().as_u16()),
            Err(e) => panic!("upgrade failed: {e}"),
        }
    }

    /// Sends a `response.create` frame of `body`.
    async fn create(&mut self, body: Value) {
        self.send(create(body)).await;
    }

    /// Reads one response's events and checks them; returns the folded Response.
    async fn folded(&mut self) -> Value {
        check_events(&self.response().await.events)
    }

    async fn send(&mut self, v: Value) {
        self.socket
            .send(Message::Text(v.to_string().into()))
            .await
            .unwrap();
    }

    /// The next text frame, as sent (a liveness bound, not a timing test).
    async fn next_text(&mut self) -> Option<String> {
        loop {
            let m = tokio::time::timeout(Duration::from_secs(20), self.socket.next())
                .await
                .expect("a frame within 20 s");
            match m {
                Some(Ok(Message::Text(t))) => return Some(t.to_string()),
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return None,
                Some(Ok(_)) => {}
            }
        }
    }

    /// Frames up to and including the response's terminal event or an `error`.
    async fn response(&mut self) -> SseBody {
        let (mut events, mut raw) = (Vec::new(), Vec::new());
        while let Some(text) = self.next_text().await {
            let v: Value = serde_json::from_str(&text).unwrap();
            let end = matches!(
                v["type"].as_str(),
                Some("response.completed" | "response.failed" | "response.incomplete" | "error")
            );
            events.push(v);
            raw.push(text);
            if end {
                break;
            }
        }
        SseBody {
            events,
            raw,
            done: true,
        }
    }
}

fn create(body: Value) -> Value {
    let mut v = body;
    v["type"] = json!("response.create");
    v
}

#[tokio::test]
async fn websocket_frames_are_the_sse_events_of_the_same_run() {
    // The same request on fresh relays (deterministic ids and clock): over SSE it is the golden
    // `text`; over the socket, frame for frame the same.
    let (up, _relay, mut ws) = connected().await;
    ws.create(json!({"model": "fake-model", "input": "hi there"}))
        .await;
    let body = ws.response().await;
    check_events(&body.events);
    golden("text", &body);

    // An MCP run: listing, the call and its events, then the answer.
    let server = mcp_server(mcp_test_server::Options::default()).await;
    let relay = crate::support::relay(config(&up.base_url())).await;
    let mut ws = Ws::connect(&relay, None).await.unwrap();
    let tool = json!({"type": "mcp", "server_label": "math", "server_url": server.url(), "require_approval": "never"});
    // `stream: true`, as the Agents SDK sends it, changes nothing.
    ws.create(json!({"model": "fake-model", "input": "CALL add {\"a\":2,\"b\":3}", "tools": [tool], "stream": true})).await;
    let body = ws.response().await;
    golden_at(
        "mcp_call",
        &body,
        &[(&server.url(), "http://mcp-test-server/mcp")],
    );

    // A call needing approval: the listing and the approval request, then the run's end.
    let relay = crate::support::relay(config(&up.base_url())).await;
    let mut ws = Ws::connect(&relay, None).await.unwrap();
    let tool = json!({"type": "mcp", "server_label": "m", "server_url": server.url()});
    ws.create(
        json!({"model": "fake-model", "input": "CALL add {\"a\":1,\"b\":1}", "tools": [tool]}),
    )
    .await;
    let body = ws.response().await;
    golden_at(
        "mcp_approval_request",
        &body,
        &[(&server.url(), "http://mcp-test-server/mcp")],
    );
}

#[tokio::test]
async fn a_connection_remembers_its_last_16_store_false_responses() {
    let (_up, _relay, mut ws) = connected().await;
    let mut ids = Vec::new();
    for i in 0..17 {
        ws.create(json!({"model": "fake-model", "input": format!("n{i}"), "store": false}))
            .await;
        let done = ws.folded().await;
        ids.push(done["id"].clone());
    }
    // The oldest was forgotten; the 16 after it chain.
    ws.create(json!({"model": "fake-model", "input": "x", "store": false,
        "previous_response_id": ids[0]}))
        .await;
    let e = ws.response().await.events.pop().unwrap();
    assert_eq!(
        (e["type"].as_str(), e["error"]["code"].as_str()),
        (Some("error"), Some("previous_response_not_found")),
        "{e}"
    );
    ws.create(json!({"model": "fake-model", "input": "x", "store": false,
        "previous_response_id": ids[1]}))
        .await;
    let done = ws.folded().await;
    assert_eq!(done["status"], "completed", "{done}");
}

#[tokio::test]
async fn several_responses_share_a_connection_and_store_false_ones_chain() {
    let (up, relay, mut ws) = connected().await;
    ws.create(json!({"model": "fake-model", "input": "first words", "store": false}))
        .await;
    let first = ws.response().await;
    let first = check_events(&first.events);
    assert_eq!(first["store"], false);
    // Not stored: over HTTP it does not exist.
    let (status, _) = relay
        .get(&format!("/v1/responses/{}", first["id"].as_str().unwrap()))
        .await;
    assert_eq!(status, 404);

    ws.create(
        json!({"model": "fake-model", "input": "second words", "store": false,
        "previous_response_id": first["id"]}),
    )
    .await;
    let second = ws.folded().await;
    assert_eq!(second["status"], "completed");
    assert_eq!(second["previous_response_id"], first["id"]);
    let sent = up.requests().last().unwrap().body["messages"].clone();
    let texts: Vec<&str> = sent
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        texts,
        [
            "first words",
            "Hello! You said: first words",
            "second words"
        ],
        "the model saw the chain"
    );

    // A stored response chains too, and is there over HTTP.
    ws.create(json!({"model": "fake-model", "input": "kept"}))
        .await;
    let kept = ws.folded().await;
    let (status, got) = relay
        .get(&format!("/v1/responses/{}", kept["id"].as_str().unwrap()))
        .await;
    assert_eq!(status, 200);
    assert_eq!(got["output"], kept["output"]);

    // Another connection does not know the first one's store:false responses.
    let mut other = Ws::connect(&relay, None).await.unwrap();
    other
        .send(create(
            json!({"model": "fake-model", "input": "x", "store": false,
            "previous_response_id": first["id"]}),
        ))
        .await;
    let e = other.response().await.events.pop().unwrap();
    assert_eq!(e["type"], "error");
    assert_eq!(e["error"]["code"], "previous_response_not_found", "{e}");
}

#[tokio::test]
async fn errors_are_error_frames_and_the_connection_serves_the_next_create() {
    let (_up, _relay, mut ws) = connected().await;
    let cases = [
        (
            create(json!({"model": "fake-model", "input": "x", "temperatur": 1})),
            400,
            "temperatur",
            Some("unknown_parameter"),
        ),
        (
            create(
                json!({"model": "fake-model", "input": "x", "previous_response_id": "resp_nope"}),
            ),
            400,
            "previous_response_id",
            Some("previous_response_not_found"),
        ),
        (
            create(json!({"model": "fake-model?fault=status400", "input": "x"})),
            400,
            "",
            None,
        ),
        (
            json!({"type": "response.cancel"}),
            400,
            "type",
            Some("unsupported_client_event"),
        ),
        (
            create(json!({"model": "fake-model", "input": "x", "generate": "yes"})),
            400,
            "generate",
            None,
        ),
    ];
    for (frame, status, param, code) in cases {
        ws.send(frame.clone()).await;
        let got = ws.response().await;
        assert_eq!(got.events.len(), 1, "{frame}: {:?}", got.events);
        let e = &got.events[0];
        assert_eq!(e["type"], "error", "{frame}: {e}");
        assert_eq!(e["status"], status, "{frame}: {e}");
        assert!(
            e["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{e}"
        );
        assert!(e["error"]["type"].is_string(), "{e}");
        if !param.is_empty() {
            assert_eq!(e["error"]["param"], param, "{frame}: {e}");
        }
        if let Some(code) = code {
            assert_eq!(e["error"]["code"], code, "{frame}: {e}");
        }
    }
    // A steer naming no response of this connection gets the SDK's own refusal, its input back
    // (steering itself: tests/it/steering/).
    ws.send(json!({"type": "response.steer", "input": "faster", "previous_response_id": "resp_1"}))
        .await;
    let steer: Value = serde_json::from_str(&ws.next_text().await.unwrap()).unwrap();
    assert_eq!(steer["type"], "response.steer.failed", "{steer}");
    assert_eq!(steer["error"]["code"], "response_not_found");
    assert_eq!(steer["steer"]["previous_response_id"], "resp_1");
    assert_eq!(steer["steer"]["input"], "faster");
    // Not JSON at all, then a binary frame: still answered.
    ws.socket
        .send(Message::Text("{not json".into()))
        .await
        .unwrap();
    assert_eq!(ws.response().await.events[0]["type"], "error");
    ws.socket
        .send(Message::Binary(vec![1u8, 2, 3].into()))
        .await
        .unwrap();
    assert_eq!(ws.response().await.events[0]["type"], "error");
    // And the next good create runs.
    ws.create(json!({"model": "fake-model", "input": "after errors"}))
        .await;
    let ok = ws.folded().await;
    assert_eq!(first_text(&ok), "Hello! You said: after errors");
}

#[tokio::test]
async fn lanes_run_side_by_side_and_every_frame_of_a_lane_names_it() {
    let (_up, _relay, mut ws) = connected().await;
    // A slow response in lane a, a quick one in lane b: b's finishes first.
    ws.create(
        json!({"model": "fake-model?delay_ms=40&deltas=10", "input": "slow one", "stream_id": "a"}),
    )
    .await;
    ws.create(json!({"model": "fake-model", "input": "quick", "stream_id": "b"}))
        .await;
    let mut ends = Vec::new();
    let mut seen = std::collections::HashMap::<String, Vec<Value>>::new();
    while ends.len() < 2 {
        let text = ws.next_text().await.expect("frames");
        let v: Value = serde_json::from_str(&text).unwrap();
        let lane = v["stream_id"]
            .as_str()
            .expect("every frame names its lane")
            .to_string();
        if v["type"] == "response.completed" {
            ends.push(lane.clone());
        }
        seen.entry(lane).or_default().push(v);
    }
    assert_eq!(ends, ["b", "a"]);
    for events in seen.values() {
        for (i, e) in events.iter().enumerate() {
            assert_eq!(e["sequence_number"], i as u64);
        }
    }
    // An error in a lane names it too; a bad lane name is refused.
    ws.create(json!({"model": "fake-model", "input": "x", "bogus": 1, "stream_id": "b"}))
        .await;
    let e = ws.response().await.events.pop().unwrap();
    assert_eq!(
        (e["type"].as_str(), e["stream_id"].as_str()),
        (Some("error"), Some("b"))
    );
    ws.create(json!({"model": "fake-model", "input": "x", "stream_id": "no spaces"}))
        .await;
    let e = ws.response().await.events.pop().unwrap();
    assert_eq!(e["error"]["code"], "invalid_stream_id", "{e}");
}

#[tokio::test]
async fn relay_keys_are_checked_on_the_upgrade() {
    let (_up, relay) =
        configured_relay(|c| c.keys = vec![responses_relay::config::KeyEntry::bare("ws-key-1")])
            .await;
    assert_eq!(Ws::connect(&relay, None).await.err(), Some(401));
    assert_eq!(Ws::connect(&relay, Some("wrong")).await.err(), Some(401));
    let mut ws = Ws::connect(&relay, Some("ws-key-1")).await.unwrap();
    ws.create(json!({"model": "fake-model", "input": "hi"}))
        .await;
    assert_eq!(ws.folded().await["status"], "completed");
    // A plain GET is told it needs the upgrade.
    let r = get_as(&relay.url("/v1/responses"), "ws-key-1").await;
    assert_eq!(r.status(), 400);
    let e: Value = r.json().await.unwrap();
    assert_eq!(e["error"]["code"], "websocket_upgrade_required");
}

#[tokio::test]
async fn generate_false_records_the_input_without_asking_the_model() {
    let (up, _relay, mut ws) = connected().await;
    // As Codex warms up: store:false, the base instructions as a developer message.
    ws.create(
        json!({"model": "fake-model", "store": false, "generate": false,
        "input": [{"type": "message", "role": "developer", "content": "You are terse."}]}),
    )
    .await;
    let warm = ws.response().await;
    assert_eq!(
        kinds(&warm.events),
        [
            "response.created",
            "response.in_progress",
            "response.completed"
        ]
    );
    let warm = check_events(&warm.events);
    assert_eq!(warm["output"], json!([]));
    assert!(
        up.requests().iter().all(|r| r.method != "POST"),
        "the model was not asked"
    );
    ws.create(json!({"model": "fake-model", "store": false, "input": "go",
        "previous_response_id": warm["id"]}))
        .await;
    ws.folded().await;
    let sent = up.requests().last().unwrap().body["messages"].clone();
    assert_eq!(sent[0]["content"], "You are terse.", "{sent}");
    assert_eq!(sent[1]["content"], "go");
}

#[tokio::test]
async fn a_dropped_socket_cancels_its_runs_but_not_background_ones() {
    let (_up, relay, mut ws) = connected().await;
    ws.create(json!({"model": "fake-model?delay_ms=200&deltas=50", "input": "long"}))
        .await;
    let created: Value = serde_json::from_str(&ws.next_text().await.unwrap()).unwrap();
    let id = created["response"]["id"].as_str().unwrap().to_string();
    drop(ws);
    let url = relay.url(&format!("/v1/responses/{id}"));
    let mut status = Value::Null;
    for _ in 0..500 {
        status = get(&url).await.1["status"].clone();
        if status != "in_progress" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(status, "cancelled");

    let mut ws = Ws::connect(&relay, None).await.unwrap();
    ws.create(json!({"model": "fake-model?delay_ms=100&deltas=20", "input": "goes on", "background": true})).await;
    let created: Value = serde_json::from_str(&ws.next_text().await.unwrap()).unwrap();
    assert_eq!(created["response"]["status"], "queued");
    let id = created["response"]["id"].as_str().unwrap().to_string();
    drop(ws);
    let url = relay.url(&format!("/v1/responses/{id}"));
    let mut status = Value::Null;
    for _ in 0..500 {
        status = get(&url).await.1["status"].clone();
        if status != "in_progress" && status != "queued" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(status, "completed");
}

#[tokio::test]
async fn a_connection_past_its_lifetime_is_told_so_and_closed() {
    let (_up, relay) =
        configured_relay(|c| c.limits.websocket_lifetime = Duration::from_millis(300)).await;
    let mut ws = Ws::connect(&relay, None).await.unwrap();
    ws.socket
        .send(Message::Ping(vec![7u8].into()))
        .await
        .unwrap();
    let pong = tokio::time::timeout(Duration::from_secs(10), ws.socket.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(pong, Message::Pong(vec![7u8].into()));
    let e: Value = serde_json::from_str(&ws.next_text().await.unwrap()).unwrap();
    assert_eq!(e["type"], "error");
    assert_eq!(e["error"]["code"], "websocket_connection_limit_reached");
    let close = tokio::time::timeout(Duration::from_secs(10), ws.socket.next())
        .await
        .unwrap();
    match close {
        Some(Ok(Message::Close(Some(f)))) => {
            assert_eq!(u16::from(f.code), 1000);
            assert!(f.reason.contains("60 minutes"), "{}", f.reason);
        }
        other => panic!("expected a close frame, got {other:?}"),
    }
}

#[tokio::test]
async fn a_socket_client_that_stops_reading_has_its_run_cancelled() {
    let up = upstream().await;
    let mut c = config(&up.base_url());
    c.limits.client_stall = Duration::from_millis(300);
    let relay = relay_with_small_send_buffers(c).await;
    // A client with a tiny receive buffer that never reads: a run that would stream for a minute
    // (60,000 deltas 1 ms apart) fills the socket within seconds, and the writer's stall timeout
    // cancels it.
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.set_recv_buffer_size(4096).unwrap();
    let tcp = sock.connect(relay.addr).await.unwrap();
    let url = format!("ws://{}/v1/responses", relay.addr);
    let (mut socket, _) = tokio_tungstenite::client_async(url.as_str(), tcp)
        .await
        .unwrap();
    let frame = create(
        json!({"model": "fake-model?deltas=60000&delay_ms=1", "input": "flood", "store": false}),
    );
    socket
        .send(Message::Text(frame.to_string().into()))
        .await
        .unwrap();
    stalled_run_is_cancelled(&up).await;
    drop(socket);
}

#[tokio::test]
async fn another_tenants_response_is_not_found_over_the_socket() {
    let up = upstream().await;
    let mut c = config(&up.base_url());
    c.keys = vec![
        responses_relay::config::KeyEntry::of_tenant("key-of-a", "a"),
        responses_relay::config::KeyEntry::of_tenant("key-of-b", "b"),
    ];
    let relay = relay(c).await;
    let mut a = Ws::connect(&relay, Some("key-of-a")).await.unwrap();
    a.create(json!({"model": "fake-model", "input": "a's secret"}))
        .await;
    let mine = a.folded().await;
    let mut b = Ws::connect(&relay, Some("key-of-b")).await.unwrap();
    b.create(json!({"model": "fake-model", "input": "x", "previous_response_id": mine["id"]}))
        .await;
    let e = b.response().await.events.pop().unwrap();
    assert_eq!(e["type"], "error");
    assert_eq!(e["error"]["code"], "previous_response_not_found", "{e}");
    // Its own key's other socket chains to it.
    let mut a2 = Ws::connect(&relay, Some("key-of-a")).await.unwrap();
    a2.create(json!({"model": "fake-model", "input": "y", "previous_response_id": mine["id"]}))
        .await;
    assert_eq!(a2.folded().await["status"], "completed");
}

#[tokio::test]
async fn creates_on_one_lane_run_one_after_another() {
    let (_up, _relay, mut ws) = connected().await;
    // Sent back to back: the second starts only after the first has ended, and the error of a
    // bad third one comes after the second's events.
    ws.create(json!({"model": "fake-model?delay_ms=20&deltas=10", "input": "one"}))
        .await;
    ws.create(json!({"model": "fake-model", "input": "two"}))
        .await;
    ws.create(json!({"model": "fake-model", "input": "x", "bogus": 1}))
        .await;
    let mut seen: Vec<String> = Vec::new();
    while seen.iter().filter(|k| *k == "response.completed").count() < 2
        || !seen.iter().any(|k| k == "error")
    {
        let v: Value = serde_json::from_str(&ws.next_text().await.unwrap()).unwrap();
        seen.push(v["type"].as_str().unwrap().to_string());
    }
    let at = |kind: &str, nth: usize| {
        seen.iter()
            .enumerate()
            .filter(|(_, k)| k.as_str() == kind)
            .nth(nth)
            .unwrap()
            .0
    };
    assert!(
        at("response.completed", 0) < at("response.created", 1),
        "{seen:?}"
    );
    assert_eq!(seen.last().unwrap(), "error", "{seen:?}");
}

#[tokio::test]
async fn on_shutdown_a_socket_gets_its_runs_ends_then_a_going_away_close() {
    let (_up, relay, mut ws) = connected().await;
    ws.create(json!({"model": "fake-model?delay_ms=200&deltas=100", "input": "long"}))
        .await;
    let created: Value = serde_json::from_str(&ws.next_text().await.unwrap()).unwrap();
    assert_eq!(created["type"], "response.created");
    let stopping = tokio::spawn(relay.shutdown());
    let mut last = Value::Null;
    let close = loop {
        let m = tokio::time::timeout(Duration::from_secs(20), ws.socket.next())
            .await
            .expect("frames within 20 s");
        match m {
            Some(Ok(Message::Text(t))) => last = serde_json::from_str(&t).unwrap(),
            Some(Ok(Message::Close(f))) => break f,
            Some(Ok(_)) => {}
            other => panic!("the socket ended without a close frame: {other:?}"),
        }
    };
    assert!(
        matches!(
            last["type"].as_str(),
            Some("response.failed" | "response.incomplete" | "response.completed")
        ),
        "the run's terminal event came before the close: {last}"
    );
    assert_eq!(close.map(|f| u16::from(f.code)), Some(1001));
    stopping.await.unwrap();
}

#[tokio::test]
async fn a_create_on_another_lane_chains_to_a_response_still_running() {
    let (up, _relay, mut ws) = connected().await;
    ws.create(
        json!({"model": "fake-model?delay_ms=30&deltas=10", "input": "first words",
        "store": false, "stream_id": "a"}),
    )
    .await;
    let created: Value = serde_json::from_str(&ws.next_text().await.unwrap()).unwrap();
    let id = created["response"]["id"].clone();
    // Named while it still runs: the fork waits for its end, then sees its output.
    ws.create(
        json!({"model": "fake-model", "input": "and then", "store": false,
        "previous_response_id": id, "stream_id": "b"}),
    )
    .await;
    let mut ended = std::collections::HashMap::new();
    while ended.len() < 2 {
        let v: Value = serde_json::from_str(&ws.next_text().await.unwrap()).unwrap();
        if matches!(v["type"].as_str(), Some("response.completed" | "error")) {
            ended.insert(v["stream_id"].as_str().unwrap().to_string(), v);
        }
    }
    assert_eq!(ended["b"]["type"], "response.completed", "{}", ended["b"]);
    let sent = up.requests().last().unwrap().body["messages"].clone();
    let texts: Vec<&str> = sent
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        texts,
        ["first words", "Hello! You said: first words", "and then"]
    );
}

#[tokio::test]
async fn a_frame_over_the_body_limit_is_refused_and_the_socket_closed_with_1009() {
    let (_up, relay) = configured_relay(|c| c.max_body_bytes = 4096).await;
    let mut ws = Ws::connect(&relay, None).await.unwrap();
    let input = "x".repeat(10_000);
    ws.create(json!({"model": "fake-model", "input": input}))
        .await;
    let e: Value = serde_json::from_str(&ws.next_text().await.expect("an error frame")).unwrap();
    assert_eq!(e["type"], "error");
    assert!(error_message(&e).contains("4096"), "{e}");
    let close = tokio::time::timeout(Duration::from_secs(10), ws.socket.next())
        .await
        .unwrap();
    match close {
        Some(Ok(Message::Close(Some(f)))) => assert_eq!(u16::from(f.code), 1009),
        other => panic!("expected a 1009 close, got {other:?}"),
    }
}

#[tokio::test]
async fn a_create_over_a_keys_limit_gets_an_error_frame_with_status_429_and_the_socket_goes_on() {
    let up = upstream().await;
    let mut c = config(&up.base_url());
    c.keys = vec![responses_relay::config::KeyEntry {
        limits: responses_relay::limits::Spec {
            requests_per_minute: Some(1),
            ..Default::default()
        },
        ..responses_relay::config::KeyEntry::of_tenant("ka", "team-a")
    }];
    let clock = responses_relay::limits::Clock::manual(1_700_000_000_000);
    let app = responses_relay::App::open_with_limits_clock(c, clock.clone()).unwrap();
    let relay = relay_app(app).await;
    let mut ws = Ws::connect(&relay, Some("ka")).await.unwrap();
    ws.create(json!({"model": "fake-model", "input": "hi"}))
        .await;
    assert_eq!(ws.folded().await["status"], "completed");
    ws.create(json!({"model": "fake-model", "input": "hi"}))
        .await;
    let e = ws.response().await.events.pop().unwrap();
    assert_eq!(
        (e["type"].as_str(), e["status"].as_u64()),
        (Some("error"), Some(429)),
        "{e}"
    );
    assert_eq!(e["error"]["type"], "rate_limit_error");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("requests per minute"),
        "{e}"
    );
    // The same connection runs the next create once the minute has drained.
    clock.advance(Duration::from_secs(60));
    ws.create(json!({"model": "fake-model", "input": "hi"}))
        .await;
    assert_eq!(ws.folded().await["status"], "completed");
}
