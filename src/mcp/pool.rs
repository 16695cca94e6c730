//! MCP client sessions, pooled across requests and keyed by (url, headers, authorization, whether
//! the server is registered, its transport): list a server's tools, call a tool. A session
//! speaks the `2026-07-28` lifecycle (`server/discover`) or the `initialize` handshake, over
//! Streamable HTTP or the legacy HTTP+SSE transport ([`super::sse`]), whichever the server
//! answers to, tried in that order; the way that worked is kept for the key's next MCP session. Idle sessions are evicted, the pool is
//! bounded (least recently used goes first), and a session that failed at the transport level is
//! dropped and re-made on next use. A server's tool list is reused for `tools_ttl` under the same
//! key, and forgotten at once when the server says `notifications/tools/list_changed`, when its
//! session is re-made, or when a call to it fails.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use reqwest::header::{HeaderName, HeaderValue};
use rmcp::{
    ClientHandler, ErrorData,
    model::{
        CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation,
        PaginatedRequestParams, ProtocolVersion,
    },
    service::{
        ClientCacheConfig, ClientLifecycleMode, ClientServiceExt, NotificationContext,
        RequestContext, RoleClient, RunningService,
    },
    transport::{
        StreamableHttpClientTransport, streamable_http_client::StreamableHttpClientTransportConfig,
    },
};
use serde_json::{Map, Value};
use tracing::Instrument;

use super::ServerSpec;
use super::errors::{Failure, human, init_failure, scrub, service_failure};
use crate::api::response::McpCallError;

/// Pool settings.
#[derive(Debug, Clone)]
pub struct PoolConfig {
    /// A session unused this long is closed.
    pub idle_ttl: Duration,
    /// At most this many sessions are kept; the least recently used goes first.
    pub max_sessions: usize,
    /// TCP (and TLS) connect timeout.
    pub connect_timeout: Duration,
    /// Longest silence while reading a response (not a total timeout: SSE answers may be long).
    pub read_timeout: Duration,
    /// Longest connect + `initialize` (further capped by each operation's own timeout).
    pub init_timeout: Duration,
    /// Most `tools/list` pages followed for one server.
    pub max_list_pages: usize,
    /// How long a listed server's tools are reused by later listings under the same key (zero:
    /// every listing asks the server).
    pub tools_ttl: Duration,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            idle_ttl: Duration::from_secs(300),
            max_sessions: 256,
            connect_timeout: Duration::from_secs(5),
            read_timeout: Duration::from_secs(120),
            init_timeout: Duration::from_secs(10),
            max_list_pages: 100,
            tools_ttl: Duration::ZERO,
        }
    }
}

/// A tool as the server listed it.
#[derive(Debug, Clone, PartialEq)]
pub struct ListedTool {
    pub name: String,
    pub description: Option<String>,
    /// The tool's input JSON Schema, unchanged (shared by everything that shows it).
    pub input_schema: std::sync::Arc<Value>,
    /// The `readOnlyHint` annotation (false when missing).
    pub read_only: bool,
}

/// Listing a server's tools failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct ListError {
    /// Human message naming the server, e.g. `Error retrieving tool list from MCP server:
    /// 'github'. Http status code: 401 (Unauthorized)`. Carries no secret.
    pub message: String,
    /// The HTTP status the server answered with, if it answered with one.
    pub status: Option<u16>,
    /// Whether the listing ran out of time.
    pub timed_out: bool,
}

/// A successful tool call: the `CallToolResult` content blocks as MCP JSON
/// (`{"type":"text","text":..}`, `{"type":"image","data":..,"mimeType":..}`...) and
/// `structuredContent`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ToolResult {
    pub content: Vec<Value>,
    pub structured_content: Option<Value>,
}

/// What a tool call gives: its result, or the `mcp_call.error` to report.
pub type CallOutcome = Result<ToolResult, McpCallError>;

type Client = RunningService<RoleClient, Listener>;

/// The client side of a session: announces the relay, and forgets the server's listed tools when
/// the server says they changed.
struct Listener {
    info: ClientConfig,
    tools: Arc<ToolCache>,
}

impl ClientHandler for Listener {
    fn get_info(&self) -> ClientConfig {
        self.info.clone()
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.tools.forget();
    }

    // A server's requests mid-call are answered at once: the relay declares no client
    // capability, so sampling is refused (rmcp's default: method not found), elicitation is
    // declined (rmcp's default), and roots are refused here (rmcp would answer an empty list).
    #[allow(deprecated)] // roots are deprecated by the 2026-07-28 revision, still sent by older servers
    async fn list_roots(
        &self,
        _context: RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ListRootsResult, ErrorData> {
        Err(ErrorData::method_not_found::<
            rmcp::model::ListRootsRequestMethod,
        >())
    }
}

/// The wire a server was reached on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wire {
    StreamableHttp,
    /// The legacy HTTP+SSE transport.
    Sse,
}

/// The lifecycle a server spoke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Era {
    /// `2026-07-28`: `server/discover`, no session, the version in every request.
    Modern,
    /// The `initialize` handshake (`2025-11-25` down to `2024-11-05`).
    Handshake,
}

/// How a server was last reached: the key's next MCP session tries that way first, then the others
/// (so a server that changed is probed again).
type Way = (Wire, Era);

/// Ways remembered at most (past it the memory starts over).
const MAX_REMEMBERED: usize = 4096;

/// One key's last tool list. Invariant: a listing stores its result only if nothing made the
/// cache forget since the listing began (`generation` unchanged), so a list that was already
/// stale when it arrived is never served.
#[derive(Default)]
struct ToolCache {
    generation: AtomicU64,
    listed: Mutex<Option<(Instant, Arc<[ListedTool]>)>>,
}

impl ToolCache {
    fn fresh(&self, ttl: Duration) -> Option<Arc<[ListedTool]>> {
        let listed = self.listed.lock().unwrap_or_else(|e| e.into_inner());
        listed
            .as_ref()
            .filter(|(at, _)| at.elapsed() < ttl)
            .map(|(_, tools)| tools.clone())
    }

    fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    fn keep(&self, generation: u64, tools: &[ListedTool]) {
        let mut listed = self.listed.lock().unwrap_or_else(|e| e.into_inner());
        if self.generation.load(Ordering::SeqCst) == generation {
            *listed = Some((Instant::now(), tools.into()));
        }
    }

    fn forget(&self) {
        let mut listed = self.listed.lock().unwrap_or_else(|e| e.into_inner());
        self.generation.fetch_add(1, Ordering::SeqCst);
        *listed = None;
    }
}

/// Pooled MCP client sessions. Cheap to clone; clones share the sessions.
#[derive(Clone)]
pub struct Pool {
    inner: Arc<Inner>,
}

struct Inner {
    config: PoolConfig,
    /// For request-declared servers.
    http: reqwest::Client,
    /// For registered servers (the operator's reach: their hosts may be private).
    registered_http: reqwest::Client,
    slots: Mutex<HashMap<Key, Arc<Slot>>>,
    /// How each key's server was last reached; outlives its slot.
    ways: Mutex<HashMap<Key, Way>>,
    /// The next call's progress token.
    progress: std::sync::atomic::AtomicI64,
    epoch: Instant,
}

/// What makes two sessions interchangeable. Holds secrets: never logged (its `Debug` hides them).
#[derive(Clone, PartialEq, Eq, Hash)]
struct Key {
    url: String,
    registered: bool,
    transport: super::Transport,
    headers: Vec<(String, String)>,
    authorization: Option<String>,
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Key(***)")
    }
}

impl Key {
    fn of(spec: &ServerSpec) -> Key {
        let mut headers: Vec<(String, String)> = spec
            .headers
            .iter()
            .map(|(k, v)| (k.to_ascii_lowercase(), v.clone()))
            .collect();
        headers.sort();
        Key {
            url: spec.url.clone(),
            registered: spec.registered,
            transport: spec.transport,
            headers,
            authorization: spec.authorization.clone(),
        }
    }
}

struct Slot {
    session: tokio::sync::Mutex<Option<Arc<Session>>>,
    /// Tools the server said must be called as tasks.
    tasked: Mutex<HashSet<String>>,
    /// Shared with the session's [`Listener`].
    tools: Arc<ToolCache>,
    /// Milliseconds since the pool's epoch.
    last_used: AtomicU64,
}

struct Session {
    client: Client,
    /// The `mcp-session-id` its requests go with (Streamable HTTP with the handshake only).
    id: super::http::SessionId,
    broken: AtomicBool,
    /// Stops every HTTP request of the session when the session is dropped.
    _alive: tokio_util::sync::DropGuard,
}

impl Session {
    fn note(&self, f: &Failure) {
        if f.breaks_session() {
            self.broken.store(true, Ordering::SeqCst);
        }
    }

    /// Records the session's id on an MCP request's trace span (`mcp.session.id`), when it has
    /// one. An id longer than [`MAX_TRACED_SESSION_ID`] bytes (a server's own choice) is left out.
    fn traced(&self, span: &tracing::Span) {
        if span.is_disabled() {
            return;
        }
        if let Some(id) = self.id.get().filter(|id| id.len() <= MAX_TRACED_SESSION_ID) {
            span.record("mcp.session.id", &*id);
        }
    }
}

/// The longest session id put on a trace span.
const MAX_TRACED_SESSION_ID: usize = 256;

impl Pool {
    /// A pool with its own HTTP client (connect and read timeouts from `config`). Installs the
    /// process-wide TLS provider if none is yet.
    pub fn new(config: PoolConfig) -> Pool {
        crate::install_tls();
        let http = reqwest::Client::builder()
            .connect_timeout(config.connect_timeout)
            .read_timeout(config.read_timeout)
            // Keep connections to MCP servers alive across calls (measured: a new TCP connection
            // per MCP request dominated the relay's CPU per MCP run); no Nagle delay on them.
            .pool_idle_timeout(std::time::Duration::from_secs(90))
            .tcp_nodelay(true)
            .build()
            .expect("an HTTP client with a TLS provider installed");
        Pool::with_http_client(config, http)
    }

    /// A pool that sends through `http` (for example one whose resolver refuses private
    /// addresses). `http` should have a connect and a read timeout, not a total timeout.
    pub fn with_http_client(config: PoolConfig, http: reqwest::Client) -> Pool {
        Pool::with_http_clients(config, http.clone(), http)
    }

    /// A pool that sends to request-declared servers through `http` and to registered ones
    /// through `registered_http`.
    pub fn with_http_clients(
        config: PoolConfig,
        http: reqwest::Client,
        registered_http: reqwest::Client,
    ) -> Pool {
        let inner = Arc::new(Inner {
            config,
            http,
            registered_http,
            slots: Mutex::new(HashMap::new()),
            ways: Mutex::new(HashMap::new()),
            progress: std::sync::atomic::AtomicI64::new(1),
            epoch: Instant::now(),
        });
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let weak = Arc::downgrade(&inner);
            let every =
                (inner.config.idle_ttl / 2).clamp(Duration::from_secs(1), Duration::from_secs(60));
            rt.spawn(sweeper(weak, every));
        }
        Pool { inner }
    }

    /// How many sessions are pooled.
    pub fn len(&self) -> usize {
        self.inner
            .slots
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Closes every pooled session (in-flight calls finish on theirs).
    pub fn clear(&self) {
        let drained: Vec<_> = self
            .inner
            .slots
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain()
            .collect();
        drop(drained);
    }

    /// Lists the server's tools, following `tools/list` pagination, all within `timeout`, or
    /// gives the list kept from a listing under the same key less than `tools_ttl` ago.
    /// Tools listed twice are kept once. `allowed_tools` is not applied here.
    pub async fn list_tools(
        &self,
        spec: &ServerSpec,
        timeout: Duration,
    ) -> Result<Vec<ListedTool>, ListError> {
        let ttl = self.inner.config.tools_ttl;
        let slot = self.slot(spec);
        if !ttl.is_zero()
            && let Some(tools) = slot.tools.fresh(ttl)
        {
            return Ok(tools.to_vec());
        }
        let span = crate::otel::mcp_span("tools/list", &spec.label, None);
        let traceparent = crate::otel::traceparent(&span);
        let work = async {
            let session = self.session(&slot, spec, timeout).await?;
            // Read once the session is settled (making one forgets the old list).
            let generation = slot.tools.generation();
            let result = self.list_pages(&session, traceparent.as_deref()).await;
            session.traced(&span);
            if let Err(f) = &result {
                session.note(f);
            }
            self.touch(&slot);
            result.map(|tools| (generation, tools))
        };
        let failure = match tokio::time::timeout(timeout, work.instrument(span.clone())).await {
            Ok(Ok((generation, tools))) => {
                if !ttl.is_zero() {
                    slot.tools.keep(generation, &tools);
                }
                return Ok(tools);
            }
            Ok(Err(f)) => f,
            Err(_) => Failure::Timeout { after: timeout },
        };
        crate::otel::failed(&span, &failure.kind());
        Err(list_error(spec, failure))
    }

    /// Every page of `tools/list`, each request carrying `traceparent` in `params._meta`.
    async fn list_pages(
        &self,
        session: &Session,
        traceparent: Option<&str>,
    ) -> Result<Vec<ListedTool>, Failure> {
        let mut tools = Vec::new();
        let mut names = HashSet::new();
        let mut cursors = HashSet::new();
        let mut cursor: Option<String> = None;
        for _ in 0..self.inner.config.max_list_pages {
            let meta = traceparent.map(with_traceparent);
            let params = (cursor.is_some() || meta.is_some()).then(|| {
                let mut p = PaginatedRequestParams::default().with_cursor(cursor.take());
                p.meta = meta;
                p
            });
            let page = session
                .client
                .list_tools(params)
                .await
                .map_err(|e| service_failure(&e))?;
            for t in page.tools {
                if !names.insert(t.name.to_string()) {
                    continue;
                }
                tools.push(ListedTool {
                    name: t.name.to_string(),
                    description: t.description.map(|d| d.to_string()),
                    input_schema: std::sync::Arc::new(Value::Object((*t.input_schema).clone())),
                    read_only: t
                        .annotations
                        .as_ref()
                        .and_then(|a| a.read_only_hint)
                        .unwrap_or(false),
                });
            }
            match page.next_cursor.filter(|c| !c.is_empty()) {
                None => return Ok(tools),
                Some(c) => {
                    if !cursors.insert(c.clone()) {
                        return Err(Failure::Protocol {
                            code: -32603,
                            message: "the server repeated a tools/list cursor".into(),
                        });
                    }
                    cursor = Some(c);
                }
            }
        }
        Err(Failure::Protocol {
            code: -32603,
            message: format!(
                "the tool list has more than {} pages",
                self.inner.config.max_list_pages
            ),
        })
    }

    /// Calls tool `name` with `arguments_json` (a JSON object; empty means `{}`) within
    /// `timeout`. Dropping the future, or running out of time, cancels the call on the server.
    pub async fn call_tool(
        &self,
        spec: &ServerSpec,
        name: &str,
        arguments_json: &str,
        timeout: Duration,
    ) -> CallOutcome {
        let arguments: Map<String, Value> = if arguments_json.trim().is_empty() {
            Map::new()
        } else {
            match serde_json::from_str::<Value>(arguments_json) {
                Ok(Value::Object(m)) => m,
                Ok(_) => {
                    return Err(McpCallError::McpProtocolError {
                        code: -32602,
                        message: format!(
                            "Invalid arguments for tool '{name}': expected a JSON object."
                        ),
                    });
                }
                Err(e) => {
                    return Err(McpCallError::McpProtocolError {
                        code: -32602,
                        message: format!(
                            "Invalid arguments for tool '{name}': not valid JSON ({e})."
                        ),
                    });
                }
            }
        };
        let span = crate::otel::mcp_span("tools/call", &spec.label, Some(name));
        crate::otel::content(&span, "gen_ai.tool.call.arguments", || {
            arguments_json.to_string()
        });
        let started = Instant::now();
        let slot = self.slot(spec);
        let session = match tokio::time::timeout(
            timeout,
            self.session(&slot, spec, timeout).instrument(span.clone()),
        )
        .await
        {
            Ok(Ok(s)) => s,
            Ok(Err(f)) => {
                crate::otel::failed(&span, &f.kind());
                return Err(f.into_call_error(spec));
            }
            Err(_) => {
                crate::otel::failed(&span, "timeout");
                return Err(Failure::Timeout { after: timeout }.into_call_error(spec));
            }
        };
        let remaining = timeout.saturating_sub(started.elapsed());
        let traceparent = crate::otel::traceparent(&span);
        let call = async {
            let tasked = slot
                .tasked
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .contains(name);
            if !tasked {
                let mut params =
                    CallToolRequestParams::new(name.to_string()).with_arguments(arguments.clone());
                // Asking for progress lets a slow tool keep its call from looking idle: each
                // notice is read from the call's stream, which restarts the read timeout.
                let mut meta = rmcp::model::RequestMetaObject::with_progress_token(
                    rmcp::model::ProgressToken(rmcp::model::NumberOrString::Number(
                        self.inner.progress.fetch_add(1, Ordering::Relaxed),
                    )),
                );
                if let Some(tp) = &traceparent {
                    meta.set_traceparent(tp);
                }
                params.meta = Some(meta);
                let answer = session.client.call_tool(params).await;
                if !super::tasks::needs_task(&answer) {
                    return answer;
                }
            }
            // The server wants a task (SPEC §15): the call stays in progress while it runs.
            let r = super::tasks::call(
                session.client.peer(),
                name,
                arguments,
                remaining,
                traceparent.as_deref(),
            )
            .await;
            if r.is_ok() && !tasked {
                slot.tasked
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(name.to_string());
            }
            r
        };
        let outcome = tokio::time::timeout(remaining, call)
            .instrument(span.clone())
            .await;
        session.traced(&span);
        self.touch(&slot);
        match outcome {
            Err(_) => {
                crate::otel::failed(&span, "timeout");
                Err(Failure::Timeout { after: timeout }.into_call_error(spec))
            }
            Ok(Err(e)) => {
                // The listed tools may be why the call failed (a tool the server no longer has).
                slot.tools.forget();
                let f = service_failure(&e);
                session.note(&f);
                crate::otel::failed(&span, &f.kind());
                Err(f.into_call_error(spec))
            }
            Ok(Ok(r)) => {
                let content: Vec<Value> = r
                    .content
                    .iter()
                    .filter_map(|c| serde_json::to_value(c).ok())
                    .collect();
                crate::otel::content(&span, "gen_ai.tool.call.result", || {
                    Value::Array(content.clone()).to_string()
                });
                if r.is_error == Some(true) {
                    crate::otel::failed(&span, "tool_error");
                    Err(McpCallError::McpToolExecutionError {
                        content: Value::Array(content),
                    })
                } else {
                    Ok(ToolResult {
                        content,
                        structured_content: r.structured_content.filter(|v| !v.is_null()),
                    })
                }
            }
        }
    }

    /// A live session for `spec` (whose slot is `slot`): the pooled one, or a new one (connect +
    /// initialize within `timeout` and the pool's `init_timeout`).
    async fn session(
        &self,
        slot: &Slot,
        spec: &ServerSpec,
        timeout: Duration,
    ) -> Result<Arc<Session>, Failure> {
        let mut current = slot.session.lock().await;
        // A session whose transport ended (a legacy SSE stream that dropped) is as good as broken.
        if let Some(s) = current.as_ref()
            && !s.broken.load(Ordering::SeqCst)
            && !s.client.peer().is_transport_closed()
        {
            return Ok(s.clone());
        }
        // A broken session is closed here (dropping it cancels its worker). A new session may
        // find a server that changed (restarted, redeployed): its tools are listed again, and
        // the way it was reached tried first.
        *current = None;
        slot.tools.forget();
        let init_timeout = timeout.min(self.inner.config.init_timeout);
        let session = Arc::new(self.reach(spec, slot, init_timeout).await?);
        *current = Some(session.clone());
        Ok(session)
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.inner.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Marks `slot` used now (a slot already evicted keeps nothing alive by it).
    fn touch(&self, slot: &Slot) {
        slot.last_used.store(self.now_ms(), Ordering::SeqCst);
    }

    /// The slot of `spec`'s key, made if missing; evicts idle slots and, past the bound, the least
    /// recently used ones.
    fn slot(&self, spec: &ServerSpec) -> Arc<Slot> {
        let key = Key::of(spec);
        let now = self.now_ms();
        let mut evicted = Vec::new();
        let slot = {
            let mut slots = self.inner.slots.lock().unwrap_or_else(|e| e.into_inner());
            evict_idle(&mut slots, now, self.inner.config.idle_ttl, &mut evicted);
            let slot = slots
                .entry(key.clone())
                .or_insert_with(|| {
                    Arc::new(Slot {
                        session: tokio::sync::Mutex::new(None),
                        tasked: Mutex::new(HashSet::new()),
                        tools: Arc::default(),
                        last_used: AtomicU64::new(now),
                    })
                })
                .clone();
            slot.last_used.store(now, Ordering::SeqCst);
            let max = self.inner.config.max_sessions.max(1);
            while slots.len() > max {
                let Some(oldest) = slots
                    .iter()
                    .filter(|(k, _)| **k != key)
                    .min_by_key(|(_, s)| s.last_used.load(Ordering::SeqCst))
                    .map(|(k, _)| k.clone())
                else {
                    break;
                };
                if let Some(s) = slots.remove(&oldest) {
                    evicted.push(s);
                }
            }
            slot
        };
        // Sessions are closed outside the lock.
        drop(evicted);
        slot
    }

    /// A new session with `spec`'s server within `timeout`: the way it was last reached, else
    /// the modern lifecycle, then the handshake, then (for `auto` servers whose Streamable HTTP
    /// endpoint answered 404 or 405) the legacy SSE transport. What worked is remembered.
    async fn reach(
        &self,
        spec: &ServerSpec,
        slot: &Slot,
        timeout: Duration,
    ) -> Result<Session, Failure> {
        use super::Transport;
        let key = Key::of(spec);
        let remembered = self
            .inner
            .ways
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
            .copied();
        let sse_path = reqwest::Url::parse(&spec.url)
            .is_ok_and(|u| u.path().trim_end_matches('/').ends_with("/sse"));
        let mut ways: Vec<Way> = match spec.transport {
            Transport::Sse => vec![(Wire::Sse, Era::Handshake)],
            Transport::Auto if sse_path => vec![(Wire::Sse, Era::Handshake)],
            Transport::StreamableHttp => vec![
                (Wire::StreamableHttp, Era::Modern),
                (Wire::StreamableHttp, Era::Handshake),
            ],
            Transport::Auto => vec![
                (Wire::StreamableHttp, Era::Modern),
                (Wire::StreamableHttp, Era::Handshake),
                (Wire::Sse, Era::Handshake),
            ],
        };
        if let Some(way) = remembered
            && let Some(at) = ways.iter().position(|w| *w == way)
        {
            ways[..=at].rotate_right(1);
        }
        let started = Instant::now();
        let mut last = None;
        for (wire, era) in ways {
            match &last {
                // A timeout spent the budget.
                Some(Failure::Timeout { .. }) => break,
                // The SSE fallback follows only a Streamable HTTP endpoint answering 404 or 405.
                Some(f)
                    if wire == Wire::Sse
                        && !matches!(
                            f,
                            Failure::Http {
                                status: 404 | 405,
                                ..
                            }
                        ) =>
                {
                    break;
                }
                _ => {}
            }
            let left = timeout.saturating_sub(started.elapsed());
            match self
                .connect(spec, slot.tools.clone(), wire, era, left)
                .await
            {
                Ok(session) => {
                    if remembered != Some((wire, era)) {
                        let mut ways = self.inner.ways.lock().unwrap_or_else(|e| e.into_inner());
                        if ways.len() >= MAX_REMEMBERED {
                            ways.clear();
                        }
                        ways.insert(key.clone(), (wire, era));
                    }
                    return Ok(session);
                }
                Err(Failure::Timeout { .. }) => {
                    last = Some(Failure::Timeout { after: timeout });
                }
                Err(f) => {
                    tracing::debug!(server_label = %spec.label, ?wire, ?era, failure = ?f, "MCP server not reached this way");
                    // A fallback to SSE that found no event stream either: the server's answer
                    // to the POST says more.
                    let no_stream = matches!(
                        f,
                        Failure::Http {
                            status: 400 | 404 | 405,
                            ..
                        }
                    );
                    if !(wire == Wire::Sse && no_stream && last.is_some()) {
                        last = Some(f);
                    }
                }
            }
        }
        Err(last.unwrap_or(Failure::Timeout { after: timeout }))
    }

    async fn connect(
        &self,
        spec: &ServerSpec,
        tools: Arc<ToolCache>,
        wire: Wire,
        era: Era,
        timeout: Duration,
    ) -> Result<Session, Failure> {
        let mut headers: HashMap<HeaderName, HeaderValue> = HashMap::new();
        for (k, v) in &spec.headers {
            let (Ok(name), Ok(value)) = (
                HeaderName::from_bytes(k.as_bytes()),
                HeaderValue::from_str(v),
            ) else {
                return Err(Failure::Http {
                    status: 0,
                    message: format!("invalid header '{k}'"),
                });
            };
            headers.insert(name, value);
        }
        let http = if spec.registered {
            &self.inner.registered_http
        } else {
            &self.inner.http
        };
        // Dropping `alive` (this attempt timing out, or the session going away) stops its requests.
        let alive = tokio_util::sync::CancellationToken::new();
        let guard = alive.clone().drop_guard();
        let info = ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("responses-relay", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE);
        let lifecycle = match era {
            Era::Modern => ClientLifecycleMode::Discover {
                preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            },
            Era::Handshake => ClientLifecycleMode::Initialize,
        };
        let listener = Listener {
            info,
            tools: tools.clone(),
        };
        let (url, token) = (spec.url.clone(), spec.authorization.clone());
        let (http, alive_for_work) = (http.clone(), alive.clone());
        let id = super::http::SessionId::default();
        let id_for_work = id.clone();
        let work = async move {
            match wire {
                Wire::StreamableHttp => {
                    let mut config =
                        StreamableHttpClientTransportConfig::with_uri(url).custom_headers(headers);
                    if let Some(token) = token {
                        config = config.auth_header(token);
                    }
                    // Reconnects of the session's event stream are few and quick: a server that
                    // went away is reported, not waited for until the call times out.
                    let mut retry =
                        rmcp::transport::common::client_side_sse::ExponentialBackoff::default();
                    retry.max_times = Some(2);
                    retry.base_duration = Duration::from_millis(100);
                    retry.max_delay = Some(Duration::from_secs(1));
                    config.retry_config = Arc::new(retry);
                    let http = super::http::SessionClient::new(http, alive_for_work, id_for_work);
                    let transport = StreamableHttpClientTransport::with_client(http, config);
                    listener
                        .serve_with_lifecycle(transport, lifecycle)
                        .await
                        .map_err(|e| init_failure(&e))
                }
                Wire::Sse => {
                    let transport =
                        super::sse::connect(http, &url, token.as_deref(), &headers, alive_for_work)
                            .await
                            .map_err(|e| super::errors::sse_failure(&e))?;
                    listener
                        .serve_with_lifecycle(transport, lifecycle)
                        .await
                        .map_err(|e| init_failure(&e))
                }
            }
        };
        // The session outlives the request that opens it, so its serve loop starts on a task of
        // its own, outside the request's spans: rmcp keeps the current span for the loop's life,
        // and a trace's span is exported only once nothing holds it.
        let serving = tokio_util::task::AbortOnDropHandle::new(tokio::spawn(work));
        let client = match tokio::time::timeout(timeout, serving).await {
            Err(_) => return Err(Failure::Timeout { after: timeout }),
            Ok(Err(join)) => {
                return Err(Failure::Http {
                    status: 0,
                    message: format!("the session could not start: {join}"),
                });
            }
            Ok(Ok(Err(f))) => return Err(f),
            Ok(Ok(Ok(c))) => c,
        };
        client
            .peer()
            .set_response_cache_config(ClientCacheConfig::disabled())
            .await;
        if era == Era::Modern
            && client
                .peer()
                .peer_info()
                .and_then(|i| i.capabilities.tools.as_ref()?.list_changed)
                == Some(true)
        {
            tokio::spawn(listen_for_tool_changes(
                client.peer().clone(),
                tools,
                alive.clone(),
            ));
        }
        tracing::debug!(server_label = %spec.label, ?wire, ?era, "MCP session initialized");
        Ok(Session {
            client,
            id,
            broken: AtomicBool::new(false),
            _alive: guard,
        })
    }
}

/// A 2026-07-28 session has no event stream of its own: it asks for tool-list changes with
/// `subscriptions/listen`, and forgets the key's tool list at each one, until the session goes
/// (`alive` cancelled). A stream that ends is opened again a second later; one the server refuses
/// is not (the tool list then lives for `--mcp-tools-ttl`).
async fn listen_for_tool_changes(
    peer: rmcp::Peer<RoleClient>,
    tools: Arc<ToolCache>,
    alive: tokio_util::sync::CancellationToken,
) {
    use rmcp::model::{ServerNotification, SubscriptionFilter};
    loop {
        let filter = SubscriptionFilter::builder().tools_list_changed().build();
        let mut subscription = tokio::select! {
            s = peer.listen(filter) => match s {
                Ok(s) => s,
                Err(e) => {
                    tracing::debug!(error = %e, "the MCP server refused subscriptions/listen");
                    return;
                }
            },
            _ = alive.cancelled() => return,
        };
        loop {
            let next = tokio::select! {
                n = subscription.next() => n,
                _ = alive.cancelled() => return,
            };
            match next {
                Ok(Some(ServerNotification::ToolListChangedNotification(_))) => tools.forget(),
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => break,
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = alive.cancelled() => return,
        }
    }
}

fn evict_idle(
    slots: &mut HashMap<Key, Arc<Slot>>,
    now: u64,
    ttl: Duration,
    evicted: &mut Vec<Arc<Slot>>,
) {
    let ttl = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
    let idle: Vec<Key> = slots
        .iter()
        .filter(|(_, s)| now.saturating_sub(s.last_used.load(Ordering::SeqCst)) >= ttl)
        .map(|(k, _)| k.clone())
        .collect();
    for k in idle {
        if let Some(s) = slots.remove(&k) {
            evicted.push(s);
        }
    }
}

async fn sweeper(inner: Weak<Inner>, every: Duration) {
    loop {
        tokio::time::sleep(every).await;
        let Some(inner) = inner.upgrade() else { return };
        let now = u64::try_from(inner.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        let mut evicted = Vec::new();
        evict_idle(
            &mut inner.slots.lock().unwrap_or_else(|e| e.into_inner()),
            now,
            inner.config.idle_ttl,
            &mut evicted,
        );
        drop(evicted);
    }
}

fn list_error(spec: &ServerSpec, f: Failure) -> ListError {
    let head = format!(
        "Error retrieving tool list from MCP server: '{}'.",
        spec.label
    );
    match f {
        Failure::Http { status, .. } if status != 0 => {
            let reason = reqwest::StatusCode::from_u16(status)
                .ok()
                .and_then(|s| s.canonical_reason())
                .unwrap_or("Unknown");
            ListError {
                message: format!("{head} Http status code: {status} ({reason})"),
                status: Some(status),
                timed_out: false,
            }
        }
        Failure::Http { message, .. } => ListError {
            message: format!("{head} {}", capitalize(&scrub(spec, &message))),
            status: None,
            timed_out: false,
        },
        Failure::Protocol { code, message } => ListError {
            message: format!("{head} MCP error {code}: {}", scrub(spec, &message)),
            status: None,
            timed_out: false,
        },
        Failure::Timeout { after } => ListError {
            message: format!("{head} Timed out after {}.", human(after)),
            status: None,
            timed_out: true,
        },
    }
}

fn capitalize(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().collect::<String>() + c.as_str(),
        None => String::new(),
    }
}

/// `_meta` carrying the W3C `traceparent` of the request's span (MCP's convention for trace
/// context; `mcp::http` copies it into the HTTP header too).
fn with_traceparent(traceparent: &str) -> rmcp::model::RequestMetaObject {
    let mut meta = rmcp::model::RequestMetaObject::new();
    meta.set_traceparent(traceparent);
    meta
}
