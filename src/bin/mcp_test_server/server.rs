//! A real MCP server (rmcp's Streamable HTTP server under plain hyper) for tests: known tools, an
//! optional bearer check, a paginated catalog, injected HTTP failures and invalid JSON answers,
//! sessions that can be expired on demand, and a log of what arrived.
//!
//! Uses external crates only, so tests can include it with `#[path = ...] mod ...;`.

#![allow(dead_code)]

use std::{
    collections::HashMap,
    convert::Infallible,
    io,
    net::SocketAddr,
    sync::{
        Arc, Mutex,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::{Request, Response, body::Incoming, service::service_fn};
use hyper_util::{
    rt::{TokioExecutor, TokioIo},
    server::conn::auto,
};
use rmcp::{
    ErrorData, ServerHandler,
    handler::server::{
        common::Extension,
        router::tool::ToolRouter,
        tool::ToolCallContext,
        wrapper::{Json, Parameters},
    },
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorCode,
        ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    },
    schemars,
    service::{RequestContext, RoleServer},
    tool, tool_handler, tool_router,
    transport::streamable_http_server::{
        StreamableHttpServerConfig, StreamableHttpService, session::local::LocalSessionManager,
    },
};
use tokio_util::sync::CancellationToken;

/// A 1x1 PNG, base64 (70 bytes decoded).
pub const TINY_PNG_BASE64: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";

/// Catalog tools are listed in pages of this many tools.
pub const PAGE_SIZE: usize = 10;

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
    /// List the long-running tools: `progress(ms, every)` (notifies progress while it works), and
    /// `research(ms)`, a tool with `execution.taskSupport: "required"` (protocol `2025-11-25`
    /// tasks): a plain call is refused with `-32601`; a call with `task` creates a task that
    /// completes after `ms` milliseconds (`tasks/get`, `tasks/result`, `tasks/cancel`).
    pub long_tools: bool,
}

/// The body of a `bad_json` answer.
pub const BAD_JSON_BODY: &str = "{not json";

const CATALOG_VERBS: &[&str] = &[
    "get", "create", "delete", "list", "update", "search", "send", "convert",
];
const CATALOG_TOPICS: &[&str] = &[
    "weather forecast",
    "invoice",
    "calendar event",
    "email message",
    "stock price",
    "flight booking",
    "hotel reservation",
    "currency exchange rate",
    "contact card",
    "shared document",
    "support ticket",
    "shipping label",
    "payroll record",
    "sales lead",
    "git repository",
    "database backup",
    "dns record",
    "podcast episode",
    "recipe",
    "fitness workout",
    "parking permit",
    "library loan",
    "tax return",
    "insurance claim",
    "train timetable",
];

/// The topic of catalog tool `i`: a verb and an object, unique for the first 200 tools of a seed.
pub fn catalog_topic(i: usize, seed: usize) -> String {
    let k = i + seed * 61;
    let verb = CATALOG_VERBS[k % CATALOG_VERBS.len()];
    let topic = CATALOG_TOPICS[(k / CATALOG_VERBS.len()) % CATALOG_TOPICS.len()];
    format!("{verb} {topic}")
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

    /// How many `slow` calls were cancelled before they finished.
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

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub struct EchoArgs {
    /// The text to echo.
    pub text: String,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub struct AddArgs {
    pub a: f64,
    pub b: f64,
}

#[derive(Debug, serde::Serialize, schemars::JsonSchema)]
pub struct AddOut {
    pub sum: f64,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub struct ProgressArgs {
    /// Milliseconds to work.
    pub ms: u64,
    /// Milliseconds between progress notifications.
    pub every: u64,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub struct SlowArgs {
    /// Milliseconds to wait.
    pub ms: u64,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
pub struct BigArgs {
    /// How many bytes of text to return.
    pub bytes: usize,
}

#[derive(Clone)]
struct TestServer {
    tool_router: ToolRouter<Self>,
    state: Arc<State>,
}

/// Counts a `slow` call as cancelled unless it finished.
struct CancelCounter(Arc<State>, bool);

impl Drop for CancelCounter {
    fn drop(&mut self) {
        if !self.1 {
            self.0.cancelled.fetch_add(1, Ordering::SeqCst);
        }
    }
}

const STANDARD_HEADERS: &[&str] = &[
    "accept",
    "accept-encoding",
    "authorization",
    "connection",
    "content-length",
    "content-type",
    "host",
    "last-event-id",
    "mcp-method",
    "mcp-name",
    "mcp-protocol-version",
    "mcp-session-id",
    "user-agent",
];

#[tool_router]
impl TestServer {
    fn new(state: Arc<State>) -> Self {
        TestServer {
            tool_router: Self::tool_router(),
            state,
        }
    }

    #[tool(
        description = "Echoes the text back",
        annotations(read_only_hint = true)
    )]
    async fn echo(&self, Parameters(EchoArgs { text }): Parameters<EchoArgs>) -> String {
        text
    }

    #[tool(description = "Adds two numbers (structured output)")]
    async fn add(&self, Parameters(AddArgs { a, b }): Parameters<AddArgs>) -> Json<AddOut> {
        Json(AddOut { sum: a + b })
    }

    #[tool(description = "Always fails with isError")]
    async fn fail(&self) -> Result<String, String> {
        match self.state.fail_bytes.load(Ordering::SeqCst) {
            0 => Err("tool failed on purpose".to_string()),
            n => Err("e".repeat(n)),
        }
    }

    #[tool(description = "Answers with a JSON-RPC error")]
    async fn boom(&self) -> Result<CallToolResult, ErrorData> {
        Err(ErrorData::new(ErrorCode(-32042), "boom", None))
    }

    #[tool(
        description = "Works ms milliseconds, notifying progress every `every` ms (to the call's progress token)"
    )]
    async fn progress(
        &self,
        Parameters(ProgressArgs { ms, every }): Parameters<ProgressArgs>,
        context: RequestContext<RoleServer>,
    ) -> Result<String, String> {
        let token = context
            .meta
            .get_progress_token()
            .ok_or("the call asked for no progress")?;
        let started = std::time::Instant::now();
        let mut sent = 0u32;
        while started.elapsed() < Duration::from_millis(ms) {
            tokio::time::sleep(Duration::from_millis(every.max(1))).await;
            sent += 1;
            let note = rmcp::model::ProgressNotificationParam::new(token.clone(), f64::from(sent));
            context
                .peer
                .notify_progress(note)
                .await
                .map_err(|e| e.to_string())?;
        }
        Ok(format!("worked {ms} ms, {sent} progress notifications"))
    }

    #[tool(description = "Waits ms milliseconds; stops when cancelled")]
    async fn slow(
        &self,
        Parameters(SlowArgs { ms }): Parameters<SlowArgs>,
        ct: CancellationToken,
    ) -> Result<String, String> {
        self.state.slow_started.fetch_add(1, Ordering::SeqCst);
        let mut counter = CancelCounter(self.state.clone(), false);
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(ms)) => {
                counter.1 = true;
                Ok(format!("waited {ms} ms"))
            }
            _ = ct.cancelled() => Err("cancelled".to_string()),
        }
    }

    #[tool(description = "Says whether the bearer token matched, and which custom headers arrived")]
    async fn whoami(&self, Extension(parts): Extension<hyper::http::request::Parts>) -> String {
        let auth = parts
            .headers
            .get("authorization")
            .and_then(|v| v.to_str().ok());
        let authorized = match (&self.state.opts.require_bearer, auth) {
            (Some(token), Some(got)) => got == format!("Bearer {token}"),
            (None, Some(got)) => got.starts_with("Bearer "),
            _ => false,
        };
        let mut names: Vec<String> = parts
            .headers
            .keys()
            .map(|k| k.as_str().to_string())
            .filter(|k| !STANDARD_HEADERS.contains(&k.as_str()))
            .collect();
        names.sort();
        names.dedup();
        format!(
            "{}; headers: {}",
            if authorized {
                "authorized"
            } else {
                "anonymous"
            },
            names.join(",")
        )
    }

    #[tool(description = "Returns an image and a text block")]
    async fn image(&self) -> CallToolResult {
        CallToolResult::success(vec![
            ContentBlock::image(TINY_PNG_BASE64, "image/png"),
            ContentBlock::text("a tiny image"),
        ])
    }

    #[tool(description = "Returns only structured content")]
    async fn structured(&self) -> CallToolResult {
        let mut r = CallToolResult::success(vec![]);
        r.structured_content = Some(serde_json::json!({"temperature": 21.5, "unit": "C"}));
        r
    }

    #[tool(description = "Returns a text of that many bytes")]
    async fn big(&self, Parameters(BigArgs { bytes }): Parameters<BigArgs>) -> String {
        "x".repeat(bytes)
    }
}

impl TestServer {
    fn catalog_tools(&self) -> Vec<Tool> {
        let schema = serde_json::json!({"type": "object", "properties": {}});
        let schema = Arc::new(schema.as_object().cloned().unwrap_or_default());
        (0..self.state.catalog.load(Ordering::SeqCst))
            .map(|i| {
                let topic = catalog_topic(i, self.state.opts.catalog_seed);
                Tool::new(
                    format!("tool_{i:03}"),
                    format!("Catalog tool number {i}: {topic}"),
                    schema.clone(),
                )
            })
            .collect()
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for TestServer {
    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let mut all = self.tool_router.list_all();
        if !self.state.opts.long_tools {
            all.retain(|t| t.name != "progress");
        }
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all.extend(self.catalog_tools());
        if self.state.opts.long_tools {
            let schema = serde_json::json!({"type": "object", "properties": {"ms": {"type": "integer"}}, "required": ["ms"]});
            let research = Tool::new(
                "research",
                "Researches for ms milliseconds (a task)",
                Arc::new(schema.as_object().cloned().unwrap_or_default()),
            );
            all.push(research);
        }
        if self.state.catalog.load(Ordering::SeqCst) == 0 {
            return Ok(ListToolsResult::with_all_items(all));
        }
        let start = match request.and_then(|r| r.cursor) {
            None => 0,
            Some(c) => c
                .parse::<usize>()
                .ok()
                .filter(|s| *s <= all.len())
                .ok_or_else(|| ErrorData::invalid_params("bad cursor", None))?,
        };
        let end = (start + PAGE_SIZE).min(all.len());
        let mut page = ListToolsResult::with_all_items(all[start..end].to_vec());
        if self.state.opts.repeat_cursor {
            page.next_cursor = Some(PAGE_SIZE.to_string());
        } else if end < all.len() {
            page.next_cursor = Some(end.to_string());
        }
        Ok(page)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if let Some(n) = request.name.strip_prefix("tool_")
            && n.parse::<usize>()
                .is_ok_and(|n| n < self.state.catalog.load(Ordering::SeqCst))
        {
            return Ok(CallToolResult::success(vec![ContentBlock::text(format!(
                "called {}",
                request.name
            ))])
            .into());
        }
        self.tool_router
            .call(ToolCallContext::new(self, request, context))
            .await
    }

    fn accepted_subscription_filter(
        &self,
        _requested: &rmcp::model::SubscriptionFilter,
    ) -> Option<rmcp::model::SubscriptionFilter> {
        Some(
            rmcp::model::SubscriptionFilter::builder()
                .tools_list_changed()
                .build(),
        )
    }

    async fn listen(&self, context: rmcp::service::SubscriptionContext) -> Result<(), ErrorData> {
        self.state
            .listeners
            .lock()
            .unwrap()
            .push(context.sink().clone());
        context.cancelled().await;
        Ok(())
    }

    async fn on_initialized(&self, context: rmcp::service::NotificationContext<RoleServer>) {
        self.state.peers.lock().unwrap().push(context.peer);
    }

    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
        .with_instructions("responses-relay test server")
    }
}

type Resp = Response<BoxBody<Bytes, Infallible>>;

fn text_resp(status: u16, body: &'static str) -> Resp {
    Response::builder()
        .status(status)
        .header("content-type", "text/plain")
        .body(Full::new(Bytes::from_static(body.as_bytes())).boxed())
        .expect("static response")
}

fn rpc_method(body: &[u8]) -> String {
    fn one(v: &serde_json::Value) -> String {
        match v.get("method").and_then(|m| m.as_str()) {
            Some(m) => m.to_string(),
            None => "response".to_string(),
        }
    }
    match serde_json::from_slice::<serde_json::Value>(body) {
        Ok(serde_json::Value::Array(items)) => items.iter().map(one).collect::<Vec<_>>().join(","),
        Ok(v @ serde_json::Value::Object(_)) => one(&v),
        _ => String::new(),
    }
}

/// The answer to a `research` call or a task request, as a `2025-11-25` task server gives it;
/// `None` for every other message.
fn task_answer(state: &State, body: &[u8]) -> Option<serde_json::Value> {
    use serde_json::json;
    let rpc: serde_json::Value = serde_json::from_slice(body).ok()?;
    let id = rpc.get("id")?.clone();
    let params = rpc.get("params").cloned().unwrap_or_default();
    let task_id = params.get("taskId").and_then(|t| t.as_str()).unwrap_or("");
    let mut tasks = state.tasks.lock().unwrap();
    let status = |t: &(Instant, u64, bool)| {
        if t.2 {
            "cancelled"
        } else if t.0.elapsed() >= Duration::from_millis(t.1) {
            "completed"
        } else {
            "working"
        }
    };
    let result = match rpc.get("method")?.as_str()? {
        "tools/call" if params.get("name")? == "research" => {
            if params.get("task").is_none() {
                return Some(json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601,
                    "message": "Tool research requires task augmentation (taskSupport: 'required')"}}));
            }
            let ms = params
                .pointer("/arguments/ms")
                .and_then(|m| m.as_u64())
                .unwrap_or(0);
            let task = format!("task-{}", tasks.len() + 1);
            tasks.insert(task.clone(), (Instant::now(), ms, false));
            json!({"task": {"taskId": task, "status": "working", "pollInterval": 50,
                "createdAt": "2026-01-01T00:00:00Z", "lastUpdatedAt": "2026-01-01T00:00:00Z", "ttl": null}})
        }
        "tasks/get" => {
            let t = tasks.get(task_id)?;
            json!({"taskId": task_id, "status": status(t), "pollInterval": 50,
                "createdAt": "2026-01-01T00:00:00Z", "lastUpdatedAt": "2026-01-01T00:00:00Z", "ttl": null})
        }
        "tasks/result" => {
            let t = tasks.get(task_id)?;
            json!({"content": [{"type": "text", "text": format!("researched for {} ms", t.1)}]})
        }
        "tasks/cancel" => {
            let t = tasks.get_mut(task_id)?;
            t.2 = true;
            json!({"taskId": task_id, "status": "cancelled",
                "createdAt": "2026-01-01T00:00:00Z", "lastUpdatedAt": "2026-01-01T00:00:00Z", "ttl": null})
        }
        _ => return None,
    };
    Some(json!({"jsonrpc": "2.0", "id": id, "result": result}))
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

async fn handle(
    mcp: &mut StreamableHttpService<TestServer, LocalSessionManager>,
    state: &State,
    req: Request<Incoming>,
) -> Resp {
    let (parts, body) = req.into_parts();
    let body = match body.collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => return text_resp(400, "bad body"),
    };
    let headers = parts
        .headers
        .iter()
        .map(|(k, v)| {
            let value = if k == "authorization" {
                "***".to_string()
            } else {
                v.to_str().unwrap_or("?").to_string()
            };
            (k.as_str().to_string(), value)
        })
        .collect();
    state.seen.lock().unwrap().push(SeenRequest {
        http_method: parts.method.to_string(),
        rpc_method: rpc_method(&body),
        headers,
        meta_traceparent: serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| {
                v.pointer("/params/_meta/traceparent")?
                    .as_str()
                    .map(String::from)
            }),
    });
    if let Some(token) = &state.opts.require_bearer {
        let ok = parts
            .headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            == Some(&format!("Bearer {token}"));
        if !ok {
            return text_resp(401, "unauthorized");
        }
    }
    if let Some(status) = state.opts.fail_http
        && parts.method == hyper::Method::POST
    {
        return Response::builder()
            .status(status)
            .header("content-type", "text/plain")
            .body(Full::new(Bytes::from_static(b"injected failure")).boxed())
            .unwrap_or_else(|_| text_resp(500, "bad status"));
    }
    if parts.method == hyper::Method::POST {
        let method = rpc_method(&body);
        if (state.opts.handshake_only && method == "server/discover")
            || (state.opts.modern_only && method == "initialize")
        {
            let id = serde_json::from_slice::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| v.get("id").cloned())
                .unwrap_or(serde_json::Value::Null);
            let answer = serde_json::json!({"jsonrpc": "2.0", "id": id,
                "error": {"code": -32601, "message": format!("Method not found: {method}")}});
            return Response::builder()
                .status(200)
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from(answer.to_string())).boxed())
                .unwrap_or_else(|_| text_resp(500, "bad response"));
        }
    }
    if state.opts.long_tools
        && parts.method == hyper::Method::POST
        && let Some(answer) = task_answer(state, &body)
    {
        return Response::builder()
            .status(200)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(answer.to_string())).boxed())
            .unwrap_or_else(|_| text_resp(500, "bad response"));
    }
    if state.bad_json.load(Ordering::SeqCst) && parts.method == hyper::Method::POST {
        return Response::builder()
            .status(200)
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from_static(BAD_JSON_BODY.as_bytes())).boxed())
            .unwrap_or_else(|_| text_resp(500, "bad response"));
    }
    if parts.uri.path() != "/mcp" {
        return text_resp(404, "not found");
    }
    let mut parts = parts;
    let body = if state.opts.oldest && rpc_method(&body) == "initialize" {
        let mut v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        v["params"]["protocolVersion"] = "2024-11-05".into();
        parts.headers.remove(hyper::header::CONTENT_LENGTH);
        Bytes::from(v.to_string())
    } else {
        body
    };
    let req = Request::from_parts(parts, Full::new(body));
    match tower_service::Service::call(mcp, req).await {
        Ok(resp) => resp,
        Err(never) => match never {},
    }
}
