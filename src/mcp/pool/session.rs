//! One pooled MCP session: reaching a server (which wire and lifecycle it speaks, probed in order
//! and remembered per key), opening the session within a timeout, and what a session keeps (its
//! client, its `mcp-session-id`, whether it broke).
//!
//! Invariants: a session's HTTP requests all stop when it is dropped (its `DropGuard`); a session
//! that broke at the transport level, or whose transport closed, is never handed out again; making
//! a new session forgets the key's listed tools; the ways remembered are bounded
//! ([`MAX_REMEMBERED`]).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use reqwest::header::{HeaderName, HeaderValue};
use rmcp::{
    ClientHandler, ErrorData,
    model::{ClientCapabilities, ClientConfig, Implementation, ProtocolVersion},
    service::{
        ClientCacheConfig, ClientLifecycleMode, ClientServiceExt, NotificationContext,
        RequestContext, RoleClient, RunningService,
    },
    transport::{
        StreamableHttpClientTransport, streamable_http_client::StreamableHttpClientTransportConfig,
    },
};

use super::{Key, Pool, Slot, ToolCache};
use crate::mcp::ServerSpec;
use crate::mcp::errors::{Failure, init_failure};

pub(super) type Client = RunningService<RoleClient, Listener>;

/// The client side of a session: announces the relay, and forgets the server's listed tools when
/// the server says they changed.
pub(super) struct Listener {
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
pub(super) enum Wire {
    StreamableHttp,
    /// The legacy HTTP+SSE transport.
    Sse,
}

/// The lifecycle a server spoke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Era {
    /// `2026-07-28`: `server/discover`, no session, the version in every request.
    Modern,
    /// The `initialize` handshake (`2025-11-25` down to `2024-11-05`).
    Handshake,
}

/// How a server was last reached: the key's next MCP session tries that way first, then the others
/// (so a server that changed is probed again).
pub(super) type Way = (Wire, Era);

/// Ways remembered at most (past it the memory starts over).
const MAX_REMEMBERED: usize = 4096;

pub(super) struct Session {
    pub(super) client: Client,
    /// The `mcp-session-id` its requests go with (Streamable HTTP with the handshake only).
    id: crate::mcp::http::SessionId,
    broken: AtomicBool,
    /// Stops every HTTP request of the session when the session is dropped.
    _alive: tokio_util::sync::DropGuard,
}

impl Session {
    pub(super) fn note(&self, f: &Failure) {
        if f.breaks_session() {
            self.broken.store(true, Ordering::SeqCst);
        }
    }

    /// Records the session's id on an MCP request's trace span (`mcp.session.id`), when it has
    /// one. An id longer than [`MAX_TRACED_SESSION_ID`] bytes (a server's own choice) is left out.
    pub(super) fn traced(&self, span: &tracing::Span) {
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
    /// A live session for `spec` (whose slot is `slot`): the pooled one, or a new one (connect +
    /// initialize within `timeout` and the pool's `init_timeout`).
    pub(super) async fn session(
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

    /// A new session with `spec`'s server within `timeout`: the way it was last reached, else
    /// the modern lifecycle, then the handshake, then (for `auto` servers whose Streamable HTTP
    /// endpoint answered 404 or 405) the legacy SSE transport. What worked is remembered.
    async fn reach(
        &self,
        spec: &ServerSpec,
        slot: &Slot,
        timeout: Duration,
    ) -> Result<Session, Failure> {
        let key = Key::of(spec);
        let remembered = self
            .inner
            .ways
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
            .copied();
        let ways = ways_to_try(spec, remembered);
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

    /// One attempt at a session with `spec`'s server on `wire` and `era`, within `timeout`.
    async fn connect(
        &self,
        spec: &ServerSpec,
        tools: Arc<ToolCache>,
        wire: Wire,
        era: Era,
        timeout: Duration,
    ) -> Result<Session, Failure> {
        let headers = header_map(spec)?;
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
        let id = crate::mcp::http::SessionId::default();
        let attempt = Attempt {
            url: spec.url.clone(),
            token: spec.authorization.clone(),
            headers,
            http: http.clone(),
            alive: alive.clone(),
            id: id.clone(),
        };
        let work = attempt.serve(wire, listener, lifecycle);
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

/// The ways to try for `spec`, in order: what its transport allows (a URL ending in `/sse` is
/// the legacy transport), the way `remembered` first.
fn ways_to_try(spec: &ServerSpec, remembered: Option<Way>) -> Vec<Way> {
    use crate::mcp::Transport;
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
    ways
}

/// `spec`'s headers as HTTP headers; a name or value that is not valid HTTP fails the attempt.
fn header_map(spec: &ServerSpec) -> Result<HashMap<HeaderName, HeaderValue>, Failure> {
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
    Ok(headers)
}

/// What one attempt at a session takes onto its own task.
struct Attempt {
    url: String,
    token: Option<String>,
    headers: HashMap<HeaderName, HeaderValue>,
    http: reqwest::Client,
    /// Cancelled when the attempt or its session goes: stops every HTTP request of it.
    alive: tokio_util::sync::CancellationToken,
    /// Filled with the server's `mcp-session-id`, if it gives one.
    id: crate::mcp::http::SessionId,
}

impl Attempt {
    /// Opens the transport of `wire` and runs `lifecycle` on it (discover or initialize).
    async fn serve(
        self,
        wire: Wire,
        listener: Listener,
        lifecycle: ClientLifecycleMode,
    ) -> Result<Client, Failure> {
        let Attempt {
            url,
            token,
            headers,
            http,
            alive,
            id,
        } = self;
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
                let http = crate::mcp::http::SessionClient::new(http, alive, id);
                let transport = StreamableHttpClientTransport::with_client(http, config);
                listener
                    .serve_with_lifecycle(transport, lifecycle)
                    .await
                    .map_err(|e| init_failure(&e))
            }
            Wire::Sse => {
                let transport =
                    crate::mcp::sse::connect(http, &url, token.as_deref(), &headers, alive)
                        .await
                        .map_err(|e| crate::mcp::errors::sse_failure(&e))?;
                listener
                    .serve_with_lifecycle(transport, lifecycle)
                    .await
                    .map_err(|e| init_failure(&e))
            }
        }
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
