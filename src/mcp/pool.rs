//! MCP client sessions, pooled across requests and keyed by (url, headers, authorization, whether
//! the server is registered, its transport): list a server's tools ([`tools`]), call a tool
//! ([`call`]). A session ([`session`]) speaks the `2026-07-28` lifecycle (`server/discover`) or
//! the `initialize` handshake, over Streamable HTTP or the legacy HTTP+SSE transport
//! ([`super::sse`]), whichever the server answers to, tried in that order; the way that worked is
//! kept for the key's next MCP session. Idle sessions are evicted ([`sweep`]), the pool is
//! bounded (least recently used goes first), and a session that failed at the transport level is
//! dropped and re-made on next use. A server's tool list is reused for `tools_ttl` under the same
//! key, and forgotten at once when the server says `notifications/tools/list_changed`, when its
//! session is re-made, or when a call to it fails.
//!
//! Invariant: every HTTP request of the pool goes through a client built by
//! [`crate::ssrf::guarded_client`] (or [`crate::ssrf::guarded_client_with`]): the constructors
//! take SSRF policies, never a client.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::ServerSpec;
use crate::api::response::McpCallError;
use crate::ssrf::{Lookup, Policy};

mod call;
mod session;
mod sweep;
mod tools;

use session::{Session, Way};
use sweep::evict_idle;
use tools::ToolCache;

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

impl Pool {
    /// A pool whose HTTP client connects only where `policy` allows, for request-declared and
    /// registered servers alike. Installs the process-wide TLS provider if none is yet.
    pub fn new(config: PoolConfig, policy: Policy) -> Pool {
        Pool::with_policies(config, policy.clone(), policy)
    }

    /// A pool that connects to request-declared servers where `policy` allows, and to registered
    /// ones where `registered` allows (which also reaches their hosts).
    pub fn with_policies(config: PoolConfig, policy: Policy, registered: Policy) -> Pool {
        let http = crate::ssrf::guarded_client(policy, client_builder(&config));
        let registered_http = crate::ssrf::guarded_client(registered, client_builder(&config));
        Pool::with_http_clients(config, http, registered_http)
    }

    /// A pool like [`Pool::new`] whose names are resolved by `lookup` (a test's fake DNS), each
    /// address still checked against `policy`.
    pub fn with_lookup(config: PoolConfig, policy: Policy, lookup: Arc<dyn Lookup>) -> Pool {
        let http = crate::ssrf::guarded_client_with(policy, lookup, client_builder(&config));
        Pool::with_http_clients(config, http.clone(), http)
    }

    /// A pool that sends to request-declared servers through `http` and to registered ones
    /// through `registered_http`, both guarded clients.
    fn with_http_clients(
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
        sweep::start(&inner);
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
}

/// The pool's HTTP client settings (before the SSRF guard): connect and read timeouts from
/// `config`, not a total timeout (SSE answers may be long).
fn client_builder(config: &PoolConfig) -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .connect_timeout(config.connect_timeout)
        .read_timeout(config.read_timeout)
        // Keep connections to MCP servers alive across calls (measured: a new TCP connection
        // per MCP request dominated the relay's CPU per MCP run); no Nagle delay on them.
        .pool_idle_timeout(std::time::Duration::from_secs(90))
        .tcp_nodelay(true)
}
