//! Steering over WebSocket mode (issue 38, SPEC §22): `response.steer` frames against responses
//! held mid-stream by the fake upstream's gates (`hold=NAME`) or mid-call by the MCP test
//! server's `gate` tool, so every steer lands where the test means it to, with no timing. This
//! file: a raw-frame client and what the tests share; the behaviours in the files beside it.

mod mcp;
mod pending;
mod refusals;
mod sdk;
mod stored;
mod text;

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use crate::support::*;

type Socket = tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>;

/// A client socket on the relay's `/v1/responses`, keeping every frame it read.
pub struct Ws {
    socket: Socket,
    pub frames: Vec<Value>,
}

impl Ws {
    pub async fn connect(relay: &Relay, bearer: Option<&str>) -> Ws {
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
        let (socket, resp) = tokio_tungstenite::client_async(req, tcp).await.unwrap();
        assert_eq!(resp.status(), 101);
        Ws {
            socket,
            frames: Vec::new(),
        }
    }

    pub async fn send(&mut self, v: Value) {
        self.socket
            .send(Message::Text(v.to_string().into()))
            .await
            .unwrap();
    }

    pub async fn create(&mut self, body: Value) {
        let mut v = body;
        v["type"] = json!("response.create");
        self.send(v).await;
    }

    pub async fn steer(&mut self, previous_response_id: &str, input: Value) {
        self.send(json!({"type": "response.steer", "previous_response_id": previous_response_id, "input": input}))
            .await;
    }

    /// The next text frame (a liveness bound, not a timing test).
    pub async fn next(&mut self) -> Value {
        loop {
            let m = tokio::time::timeout(Duration::from_secs(20), self.socket.next())
                .await
                .expect("a frame within 20 s");
            match m {
                Some(Ok(Message::Text(t))) => {
                    let v: Value = serde_json::from_str(&t).unwrap();
                    self.frames.push(v.clone());
                    return v;
                }
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => {
                    panic!("the socket closed; frames: {:#?}", kinds(&self.frames))
                }
                Some(Ok(_)) => {}
            }
        }
    }

    /// Frames up to and including the first of type `kind`; that frame.
    pub async fn until(&mut self, kind: &str) -> Value {
        loop {
            let v = self.next().await;
            if v["type"] == kind {
                return v;
            }
            assert_ne!(v["type"], "error", "an error frame: {v}");
        }
    }

    /// The first frame of type `kind` read since frame `from`, or read now.
    pub async fn since(&mut self, from: usize, kind: &str) -> Value {
        match self.frames[from..].iter().find(|f| f["type"] == kind) {
            Some(f) => f.clone(),
            None => self.until(kind).await,
        }
    }

    /// Frames up to and including the `n`th terminal event from now; the last one.
    pub async fn terminals(&mut self, n: usize) -> Value {
        let mut seen = 0;
        loop {
            let v = self.next().await;
            assert_ne!(v["type"], "error", "an error frame: {v}");
            if is_terminal(&v) {
                seen += 1;
                if seen == n {
                    return v;
                }
            }
        }
    }

    /// The socket closed by the client.
    pub async fn close(mut self) {
        let _ = self.socket.close(None).await;
    }
}

pub fn is_terminal(v: &Value) -> bool {
    matches!(
        v["type"].as_str(),
        Some("response.completed" | "response.incomplete" | "response.failed")
    )
}

/// The frames of each response read so far, in order (each from its `response.created` to its
/// terminal event), and the steering notices (`pending`, `failed`) beside them.
pub fn responses(frames: &[Value]) -> (Vec<Vec<Value>>, Vec<Value>) {
    let (mut runs, mut notices): (Vec<Vec<Value>>, Vec<Value>) = (Vec::new(), Vec::new());
    for f in frames {
        match f["type"].as_str() {
            Some("response.steer.pending" | "response.steer.failed") => notices.push(f.clone()),
            Some("response.created") => runs.push(vec![f.clone()]),
            _ => runs
                .last_mut()
                .expect("an event before response.created")
                .push(f.clone()),
        }
    }
    (runs, notices)
}

/// The text of every user message a Chat Completions request sent, in order.
pub fn user_texts(request: &Value) -> Vec<String> {
    (request["messages"].as_array().unwrap().iter())
        .filter(|m| m["role"] == "user")
        .map(|m| match &m["content"] {
            Value::String(s) => s.clone(),
            parts => (parts.as_array().into_iter().flatten())
                .filter_map(|p| p["text"].as_str())
                .collect::<Vec<_>>()
                .join(""),
        })
        .collect()
}

/// The roles of a Chat Completions request's messages, in order.
pub fn roles(request: &Value) -> Vec<String> {
    (request["messages"].as_array().unwrap().iter())
        .map(|m| m["role"].as_str().unwrap().to_string())
        .collect()
}

/// The model requests the fake upstream received (Chat Completions), in order.
pub fn model_requests(up: &crate::fake_upstream::FakeUpstream) -> Vec<Value> {
    (up.requests().into_iter())
        .filter(|r| r.path == "/v1/chat/completions")
        .map(|r| r.body)
        .collect()
}

/// The MCP test server with its long-running tools (`gate` among them).
pub async fn gated_mcp() -> crate::mcp_test_server::McpTestServer {
    mcp_server(crate::mcp_test_server::Options {
        long_tools: true,
        ..Default::default()
    })
    .await
}
