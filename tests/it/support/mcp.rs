//! MCP peers for the tests: the project's MCP test server on a loopback port, and a listener
//! that accepts and never answers.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};

use crate::mcp_test_server::{self, McpTestServer, Options};

/// The MCP test server with `options` on a free loopback port.
pub async fn mcp_server(options: Options) -> McpTestServer {
    mcp_test_server::start("127.0.0.1:0".parse().unwrap(), options)
        .await
        .expect("the MCP test server starts")
}

/// The fake upstream, the MCP test server (default options) and a relay with the test config.
pub async fn server_and_relay() -> (
    super::fake_upstream::FakeUpstream,
    McpTestServer,
    super::Relay,
) {
    let up = super::upstream().await;
    let server = mcp_server(Options::default()).await;
    let relay = super::relay(super::config(&up.base_url())).await;
    (up, server, relay)
}

/// Options for a server that refuses any request without `Authorization: Bearer TOKEN`.
pub fn requiring_bearer(token: &str) -> Options {
    Options {
        require_bearer: Some(token.into()),
        ..Default::default()
    }
}

/// A hosted MCP tool for the server labelled `label` at `url`, called without approval.
pub fn mcp_tool(label: &str, url: &str) -> Value {
    json!({"type": "mcp", "server_label": label, "server_url": url, "require_approval": "never"})
}

/// A loopback listener that accepts connections and never answers: an MCP server hanging on
/// `initialize`. Counts the connections it accepted and those the other side closed.
pub struct BlackHole {
    addr: std::net::SocketAddr,
    pub accepted: Arc<AtomicUsize>,
    pub closed: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl BlackHole {
    pub async fn start() -> BlackHole {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (accepted, closed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (a, c) = (accepted.clone(), closed.clone());
        let task = tokio::spawn(async move {
            while let Ok((mut sock, _)) = listener.accept().await {
                a.fetch_add(1, Ordering::SeqCst);
                let c = c.clone();
                tokio::spawn(async move {
                    use tokio::io::AsyncReadExt;
                    let mut buf = [0u8; 4096];
                    // Reads (and ignores) what arrives until the other side closes.
                    while matches!(sock.read(&mut buf).await, Ok(n) if n > 0) {}
                    c.fetch_add(1, Ordering::SeqCst);
                });
            }
        });
        BlackHole {
            addr,
            accepted,
            closed,
            task,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }
}

impl Drop for BlackHole {
    fn drop(&mut self) {
        self.task.abort();
    }
}
