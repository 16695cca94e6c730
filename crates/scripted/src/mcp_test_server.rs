//! A real MCP server (rmcp's Streamable HTTP server under plain hyper) for tests: known tools, an
//! optional bearer check, a paginated catalog, injected HTTP failures and invalid JSON answers,
//! sessions that can be expired on demand, and a log of what arrived. This file holds the handle
//! tests hold (what arrived, switches flipped while running) and the accept loop; `http.rs` the
//! request path, `tools.rs` the MCP tools and catalog, `tasks.rs` the `research` tasks.

mod http;
mod tasks;
mod tools;

pub use tools::{TINY_PNG_BASE64, catalog_topic};

use std::{
    collections::HashMap,
    convert::Infallible,
    io,
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::Instant,
};

use hyper::{Request, body::Incoming, service::service_fn};
use hyper_util::{
    rt::{TokioExecutor, TokioIo},
    server::conn::auto,
};
use rmcp::{
    service::RoleServer,
    transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
    },
};
use tokio_util::sync::CancellationToken;

use http::{Resp, handle};
use tools::TestServer;

/// How the server behaves.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Every request must carry `Authorization: Bearer <this>`, else HTTP 401.
    pub require_bearer: Option<String>,
    /// Extra tools `tool_000`..`tool_{N-1}`; when non-zero, `tools/list` is paginated by 10.
    pub catalog: usize,
    /// Answer every POST with this HTTP status (text/plain body).
    pub fail_http: Option<u16>,
    /// Shifts which topic each catalog tool gets, so several servers have different catalogs.
    pub catalog_seed: usize,
    /// Answer every POST with `200 application/json` and the body `{not json` (can also be
    /// switched on and off while running: [`McpTestServer::set_bad_json`]).
    pub bad_json: bool,
    /// With a catalog: every page of `tools/list` names the same next cursor (a broken server
    /// that would page forever).
    pub repeat_cursor: bool,
    /// Speak only the `initialize` handshake: `server/discover` is answered with JSON-RPC
    /// `-32601` (method not found), as a server of an earlier revision answers it.
    pub handshake_only: bool,
    /// Speak only the `2026-07-28` lifecycle: `initialize` is answered with JSON-RPC `-32601`.
    pub modern_only: bool,
    /// Answer `initialize` with the oldest revision, `2024-11-05`, whatever the client offers (as a
    /// server that knows no later one does).
    pub oldest: bool,
    /// List the long-running tools: `progress(ms, every)` (notifies progress while it works),
    /// `gate(name)` (waits until the test opens that gate, `McpTestServer::open_gate`), and
    /// `research(ms)`, a tool with `execution.taskSupport: "required"` (protocol `2025-11-25`
    /// tasks): a plain call is refused with `-32601`; a call with `task` creates a task that
    /// completes after `ms` milliseconds (`tasks/get`, `tasks/result`, `tasks/cancel`).
    pub long_tools: bool,
}

/// One HTTP request the server received.
#[derive(Debug, Clone)]
pub struct SeenRequest {
    /// `POST`, `GET`, `DELETE`...
    pub http_method: String,
    /// The JSON-RPC method of a POST (`initialize`, `tools/call`, `notifications/cancelled`...),
    /// `response` for a JSON-RPC response, empty for requests without a body.
    pub rpc_method: String,
    /// Header names (lower case) and values; the value of `authorization` is replaced by `***`.
    pub headers: Vec<(String, String)>,
    /// `params._meta.traceparent` of a JSON-RPC request, if it carried one.
    pub meta_traceparent: Option<String>,
}

impl SeenRequest {
    /// The value of header `name` (lower case) the request came with.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

#[derive(Debug, Default)]
struct State {
    opts: Options,
    seen: Mutex<Vec<SeenRequest>>,
    cancelled: AtomicUsize,
    slow_started: AtomicUsize,
    bad_json: std::sync::atomic::AtomicBool,
    /// When not 0, `fail` answers an error text of this many bytes.
    fail_bytes: AtomicUsize,
    /// How many catalog tools are listed now (starts at `opts.catalog`).
    catalog: AtomicUsize,
    /// Every initialized session's client, to send it notifications.
    peers: Mutex<Vec<rmcp::Peer<RoleServer>>>,
    /// Every open `subscriptions/listen` (2026-07-28) stream, to send it notifications.
    listeners: Mutex<Vec<rmcp::service::SubscriptionSink>>,
    /// `research` tasks: id -> (created, ms, cancelled).
    tasks: Mutex<HashMap<String, (Instant, u64, bool)>>,
    /// Gates opened so far (`gate` calls wait for theirs), and their opening's signal.
    gates: Mutex<std::collections::HashSet<String>>,
    gate_opened: tokio::sync::Notify,
}

impl State {
    /// Until the gate `name` is open.
    async fn gate(&self, name: &str) {
        loop {
            let opened = self.gate_opened.notified();
            tokio::pin!(opened);
            opened.as_mut().enable();
            if self.gates.lock().expect("gates lock").contains(name) {
                return;
            }
            opened.await;
        }
    }
}

/// A running test server.
pub struct McpTestServer {
    pub addr: SocketAddr,
    state: Arc<State>,
    sessions: Arc<LocalSessionManager>,
    ct: CancellationToken,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl McpTestServer {
    /// `http://ADDR/mcp`
    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    /// Every request seen so far, in arrival order.
    pub fn requests_seen(&self) -> Vec<SeenRequest> {
        self.state.seen.lock().unwrap().clone()
    }

    /// How many requests with this JSON-RPC method arrived.
    pub fn count(&self, rpc_method: &str) -> usize {
        self.state
            .seen
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.rpc_method == rpc_method)
            .count()
    }

    /// How many sessions clients began: `initialize` handshakes plus `server/discover` probes
    /// that were answered (a modern client makes no session, but probes once per connection).
    pub fn sessions_begun(&self) -> usize {
        let refused = |m: &str| {
            (m == "server/discover" && self.state.opts.handshake_only)
                || (m == "initialize" && self.state.opts.modern_only)
        };
        self.state
            .seen
            .lock()
            .unwrap()
            .iter()
            .filter(|r| matches!(r.rpc_method.as_str(), "initialize" | "server/discover"))
            .filter(|r| !refused(&r.rpc_method))
            .count()
    }

    /// How many `subscriptions/listen` streams are open.
    pub fn listening(&self) -> usize {
        self.state.listeners.lock().unwrap().len()
    }

    /// `research` tasks cancelled with `tasks/cancel` before they completed.
    pub fn tasks_cancelled(&self) -> usize {
        self.state
            .tasks
            .lock()
            .unwrap()
            .values()
            .filter(|t| t.2)
            .count()
    }

    /// Opens the gate `name`: `gate` calls waiting for it finish (and later ones do not wait).
    pub fn open_gate(&self, name: &str) {
        self.state
            .gates
            .lock()
            .expect("gates lock")
            .insert(name.to_string());
        self.state.gate_opened.notify_waiters();
    }

    /// How many `slow` (or `gate`) calls were cancelled before they finished.
    pub fn cancelled_calls(&self) -> usize {
        self.state.cancelled.load(Ordering::SeqCst)
    }

    /// How many `slow` calls started.
    pub fn slow_started(&self) -> usize {
        self.state.slow_started.load(Ordering::SeqCst)
    }

    /// From now on, `fail` answers an error text of `n` bytes (0: its usual short message).
    pub fn set_fail_bytes(&self, n: usize) {
        self.state.fail_bytes.store(n, Ordering::SeqCst);
    }

    /// From now on, answers every POST with invalid JSON (`true`) or serves normally (`false`).
    pub fn set_bad_json(&self, on: bool) {
        self.state.bad_json.store(on, Ordering::SeqCst);
    }

    /// From now on lists `n` catalog tools; with `notify`, first tells every initialized session
    /// (`notifications/tools/list_changed` on its event stream) and returns once they were sent.
    pub async fn set_catalog(&self, n: usize, notify: bool) -> usize {
        self.state.catalog.store(n, Ordering::SeqCst);
        if !notify {
            return 0;
        }
        let peers = self.state.peers.lock().unwrap().clone();
        let mut told = 0;
        for peer in peers {
            if peer.notify_tool_list_changed().await.is_ok() {
                told += 1;
            }
        }
        let listeners = self.state.listeners.lock().unwrap().clone();
        for sink in listeners {
            let changed =
                rmcp::model::ServerNotification::ToolListChangedNotification(Default::default());
            if sink.send(changed).await.is_ok() {
                told += 1;
            }
        }
        told
    }

    /// Forgets every MCP session, as a server that restarted or expired them would: requests
    /// carrying an old `Mcp-Session-Id` get 404 until the client initializes again.
    pub async fn expire_sessions(&self) {
        let gone: Vec<_> = self.sessions.sessions.write().await.drain().collect();
        drop(gone);
    }

    /// How many MCP sessions the server holds.
    pub async fn session_count(&self) -> usize {
        self.sessions.sessions.read().await.len()
    }

    /// Stops accepting, closes every connection and waits for the accept loop to end.
    pub async fn shutdown(mut self) {
        self.ct.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for McpTestServer {
    fn drop(&mut self) {
        self.ct.cancel();
    }
}

/// Starts the server on `addr` (use port 0 for any port).
pub async fn start(addr: SocketAddr, options: Options) -> io::Result<McpTestServer> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let addr = listener.local_addr()?;
    let bad_json = options.bad_json;
    let catalog = AtomicUsize::new(options.catalog);
    let state = Arc::new(State {
        opts: options,
        catalog,
        ..State::default()
    });
    state.bad_json.store(bad_json, Ordering::SeqCst);
    let ct = CancellationToken::new();
    let config = StreamableHttpServerConfig::default()
        .with_cancellation_token(ct.child_token())
        .with_sse_keep_alive(None);
    let st = state.clone();
    let sessions = Arc::new(LocalSessionManager::default());
    let mcp = StreamableHttpService::new(
        move || Ok(TestServer::new(st.clone())),
        sessions.clone(),
        config,
    );
    let accept_ct = ct.clone();
    let accept_state = state.clone();
    let task = tokio::spawn(async move {
        let mut conns = tokio::task::JoinSet::new();
        loop {
            let stream = tokio::select! {
                r = listener.accept() => match r {
                    // No Nagle delay: an SSE answer is written in several small pieces, and the
                    // client's delayed ACK would otherwise hold each later piece for ~40 ms.
                    Ok((s, _)) => {
                        let _ = s.set_nodelay(true);
                        s
                    }
                    Err(_) => continue,
                },
                _ = accept_ct.cancelled() => break,
            };
            let mcp = mcp.clone();
            let state = accept_state.clone();
            let conn_ct = accept_ct.clone();
            let svc = service_fn(move |req: Request<Incoming>| {
                let mut mcp = mcp.clone();
                let state = state.clone();
                async move { Ok::<Resp, Infallible>(handle(&mut mcp, &state, req).await) }
            });
            conns.spawn(async move {
                let builder = auto::Builder::new(TokioExecutor::new());
                let conn = builder.serve_connection(TokioIo::new(stream), svc);
                tokio::select! {
                    _ = conn => {}
                    _ = conn_ct.cancelled() => {}
                }
            });
            while conns.try_join_next().is_some() {}
        }
        drop(listener);
        conns.abort_all();
        while conns.join_next().await.is_some() {}
    });
    Ok(McpTestServer {
        addr,
        state,
        sessions,
        ct,
        task: Some(task),
    })
}
