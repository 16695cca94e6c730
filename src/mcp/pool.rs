//! MCP client sessions (rmcp Streamable HTTP), pooled across requests and keyed by (url, headers,
//! authorization): list a server's tools, call a tool. Idle sessions are evicted, the pool is
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
    ClientHandler, ServiceExt,
    model::{
        CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation,
        PaginatedRequestParams, ProtocolVersion,
    },
    service::{ClientCacheConfig, NotificationContext, RoleClient, RunningService},
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
}

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
    http: reqwest::Client,
    slots: Mutex<HashMap<Key, Arc<Slot>>>,
    epoch: Instant,
}

/// What makes two sessions interchangeable. Holds secrets: never logged (its `Debug` hides them).
#[derive(Clone, PartialEq, Eq, Hash)]
struct Key {
    url: String,
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
            headers,
            authorization: spec.authorization.clone(),
        }
    }
}

struct Slot {
    session: tokio::sync::Mutex<Option<Arc<Session>>>,
    /// Shared with the session's [`Listener`].
    tools: Arc<ToolCache>,
    /// Milliseconds since the pool's epoch.
    last_used: AtomicU64,
}

struct Session {
    client: Client,
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
}

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
        let inner = Arc::new(Inner {
            config,
            http,
            slots: Mutex::new(HashMap::new()),
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
        let mut params = CallToolRequestParams::new(name.to_string()).with_arguments(arguments);
        params.meta = crate::otel::traceparent(&span)
            .as_deref()
            .map(with_traceparent);
        let outcome = tokio::time::timeout(remaining, session.client.call_tool(params))
            .instrument(span.clone())
            .await;
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
        if let Some(s) = current.as_ref()
            && !s.broken.load(Ordering::SeqCst)
        {
            return Ok(s.clone());
        }
        // A broken session is closed here (dropping it cancels its worker). A new session may
        // find a server that changed (restarted, redeployed): its tools are listed again.
        *current = None;
        slot.tools.forget();
        let init_timeout = timeout.min(self.inner.config.init_timeout);
        let session = Arc::new(self.connect(spec, slot.tools.clone(), init_timeout).await?);
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

    async fn connect(
        &self,
        spec: &ServerSpec,
        tools: Arc<ToolCache>,
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
        let mut config =
            StreamableHttpClientTransportConfig::with_uri(spec.url.clone()).custom_headers(headers);
        if let Some(token) = &spec.authorization {
            config = config.auth_header(token.clone());
        }
        // Reconnects of the session's event stream are few and quick: a server that went away is
        // reported, not waited for until the call times out.
        let mut retry = rmcp::transport::common::client_side_sse::ExponentialBackoff::default();
        retry.max_times = Some(2);
        retry.base_duration = Duration::from_millis(100);
        retry.max_delay = Some(Duration::from_secs(1));
        config.retry_config = Arc::new(retry);
        // Dropping `alive` (this attempt timing out, or the session going away) stops its requests.
        let alive = tokio_util::sync::CancellationToken::new();
        let guard = alive.clone().drop_guard();
        let http = super::http::SessionClient::new(self.inner.http.clone(), alive);
        let transport = StreamableHttpClientTransport::with_client(http, config);
        let info = ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("responses-relay", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE);
        // The session outlives the request that opens it, so its serve loop starts on a task of
        // its own, outside the request's spans: rmcp keeps the current span for the loop's life,
        // and a trace's span is exported only once nothing holds it.
        let serving = tokio_util::task::AbortOnDropHandle::new(tokio::spawn(
            Listener { info, tools }.serve(transport),
        ));
        let client = match tokio::time::timeout(timeout, serving).await {
            Err(_) => return Err(Failure::Timeout { after: timeout }),
            Ok(Err(join)) => {
                return Err(Failure::Http {
                    status: 0,
                    message: format!("the session could not start: {join}"),
                });
            }
            Ok(Ok(Err(e))) => return Err(init_failure(&e)),
            Ok(Ok(Ok(c))) => c,
        };
        client
            .peer()
            .set_response_cache_config(ClientCacheConfig::disabled())
            .await;
        tracing::debug!(server_label = %spec.label, "MCP session initialized");
        Ok(Session {
            client,
            broken: AtomicBool::new(false),
            _alive: guard,
        })
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
        Failure::Http { status, message } if status != 0 => {
            let reason = reqwest::StatusCode::from_u16(status)
                .ok()
                .and_then(|s| s.canonical_reason())
                .unwrap_or("Unknown");
            // What a server speaking only the legacy HTTP+SSE transport answers a POST (a 404
            // for a session the server forgot is not that).
            let hint = if matches!(status, 404 | 405) && !message.contains("session expired") {
                " The relay speaks MCP Streamable HTTP only (POST to the server URL); a legacy \
                 SSE endpoint (often `/sse`) is not supported."
            } else {
                ""
            };
            ListError {
                message: format!("{head} Http status code: {status} ({reason}){hint}"),
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
