//! The HTTP surface: routing, the handlers of SPEC §4, SSE bodies, and the only table of status
//! codes and OpenAI error envelopes.
//!
//! Invariant: before a response's first byte every failure is a status with the JSON envelope;
//! after it, the run's log carries the failure (`response.failed`) and the body ends normally.

pub mod conversations;
pub mod error;
pub mod responses;
pub mod sse;
pub mod ui;
pub mod websocket;

use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, combinators::UnsyncBoxBody};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode, header};

use std::sync::{Arc, OnceLock};

use crate::app::App;
use crate::limits::{Account, Lease, Refused, Snapshot};
use crate::run::RelaySet;
use crate::store::Tenant;
pub use error::{ApiError, ErrorKind};

pub type BoxErr = Box<dyn std::error::Error + Send + Sync>;
pub type Body = UnsyncBoxBody<Bytes, BoxErr>;

/// A whole body.
pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|e: Infallible| match e {})
        .boxed_unsync()
}

/// A JSON answer.
pub fn json_response(status: StatusCode, body: impl Into<Bytes>) -> Response<Body> {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "application/json")
        .body(full(body))
        .expect("valid response")
}

/// The routes of SPEC §4.
#[derive(Debug, PartialEq, Eq)]
pub enum Route<'a> {
    Create,
    /// `GET /v1/responses`: WebSocket mode.
    WebSocket,
    InputTokens,
    Compact,
    Get(&'a str),
    Delete(&'a str),
    Cancel(&'a str),
    InputItems(&'a str),
    Models,
    McpServers,
    /// `GET /v1/limits`: the key's and its tenant's limits, their use and resets.
    Limits,
    Health,
    /// `GET /metrics`: Prometheus text, open like `/healthz` or behind `--metrics-key`.
    Metrics,
    ConversationCreate,
    ConversationGet(&'a str),
    ConversationUpdate(&'a str),
    ConversationDelete(&'a str),
    ConversationItems(&'a str),
    ConversationAddItems(&'a str),
    ConversationItem(&'a str, &'a str),
    ConversationDeleteItem(&'a str, &'a str),
}

impl<'a> Route<'a> {
    /// The route as logs name it: the method and the path with ids as `{id}` (bounded whatever
    /// the client sent).
    pub fn template(method: &Method, path: &str) -> String {
        let Some(route) = Route::parse(method, path) else {
            return format!("{method} (no route)");
        };
        let path = match route {
            Route::Create if path.trim_end_matches('/').ends_with("/agent") => "/v1/agent",
            Route::Create | Route::WebSocket => "/v1/responses",
            Route::InputTokens => "/v1/responses/input_tokens",
            Route::Compact => "/v1/responses/compact",
            Route::Get(_) | Route::Delete(_) => "/v1/responses/{id}",
            Route::Cancel(_) => "/v1/responses/{id}/cancel",
            Route::InputItems(_) => "/v1/responses/{id}/input_items",
            Route::Models => "/v1/models",
            Route::McpServers => "/v1/mcp/servers",
            Route::Limits => "/v1/limits",
            Route::Health => "/healthz",
            Route::Metrics => "/metrics",
            Route::ConversationCreate => "/v1/conversations",
            Route::ConversationGet(_)
            | Route::ConversationUpdate(_)
            | Route::ConversationDelete(_) => "/v1/conversations/{id}",
            Route::ConversationItems(_) | Route::ConversationAddItems(_) => {
                "/v1/conversations/{id}/items"
            }
            Route::ConversationItem(..) | Route::ConversationDeleteItem(..) => {
                "/v1/conversations/{id}/items/{item_id}"
            }
        };
        format!("{method} {path}")
    }

    pub fn parse(method: &Method, path: &'a str) -> Option<Route<'a>> {
        let path = path.trim_end_matches('/');
        if path == "/healthz" && method == Method::GET {
            return Some(Route::Health);
        }
        if path == "/metrics" && method == Method::GET {
            return Some(Route::Metrics);
        }
        let rest = path.strip_prefix("/v1/")?;
        let parts: Vec<&str> = rest.split('/').collect();
        match (method, parts.as_slice()) {
            // Perplexity's name for the same endpoint (its Agent API's clients use it as written).
            (&Method::POST, ["responses"]) | (&Method::POST, ["agent"]) => Some(Route::Create),
            (&Method::GET, ["responses"]) => Some(Route::WebSocket),
            (&Method::POST, ["responses", "input_tokens"]) => Some(Route::InputTokens),
            (&Method::POST, ["responses", "compact"]) => Some(Route::Compact),
            (&Method::GET, ["models"]) => Some(Route::Models),
            (&Method::GET, ["mcp", "servers"]) => Some(Route::McpServers),
            (&Method::GET, ["limits"]) => Some(Route::Limits),
            (&Method::GET, ["responses", id]) if !id.is_empty() => Some(Route::Get(id)),
            (&Method::DELETE, ["responses", id]) if !id.is_empty() => Some(Route::Delete(id)),
            (&Method::POST, ["responses", id, "cancel"]) => Some(Route::Cancel(id)),
            (&Method::GET, ["responses", id, "input_items"]) => Some(Route::InputItems(id)),
            (&Method::POST, ["conversations"]) => Some(Route::ConversationCreate),
            (&Method::GET, ["conversations", id]) => Some(Route::ConversationGet(id)),
            (&Method::POST, ["conversations", id]) => Some(Route::ConversationUpdate(id)),
            (&Method::DELETE, ["conversations", id]) => Some(Route::ConversationDelete(id)),
            (&Method::GET, ["conversations", id, "items"]) => Some(Route::ConversationItems(id)),
            (&Method::POST, ["conversations", id, "items"]) => {
                Some(Route::ConversationAddItems(id))
            }
            (&Method::GET, ["conversations", id, "items", item]) => {
                Some(Route::ConversationItem(id, item))
            }
            (&Method::DELETE, ["conversations", id, "items", item]) => {
                Some(Route::ConversationDeleteItem(id, item))
            }
            _ => None,
        }
    }
}

/// Handles one request: under a span naming its request id (every log line of the request, its
/// run's included, carries it), answered with `x-request-id`; a rejection is logged once.
pub async fn handle(app: App, req: Request<Incoming>) -> Result<Response<Body>, Infallible> {
    use tracing::Instrument;
    let id = request_id(&req);
    // The trace's HTTP server span (nothing when traces are off), around the log's span.
    let traced = crate::otel::server_span(
        req.method().as_str(),
        || Route::template(req.method(), req.uri().path()),
        req.headers(),
    );
    let span = traced.in_scope(|| tracing::info_span!("request", request_id = %id));
    let mut resp = route(app, req)
        .instrument(span)
        .instrument(traced.clone())
        .await;
    crate::otel::server_answered(&traced, resp.status().as_u16());
    if let Ok(v) = header::HeaderValue::from_str(&id) {
        resp.headers_mut().insert("x-request-id", v);
    }
    Ok(resp)
}

/// The client's `x-request-id` when it is a sane one (1 to 128 of `A-Za-z0-9._:-`), else a new one.
fn request_id<B>(req: &Request<B>) -> String {
    let given = req
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .filter(|v| {
            (1..=128).contains(&v.len())
                && v.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b':' | b'-'))
        });
    match given {
        Some(v) => v.to_string(),
        None => format!("req_{:032x}", rand::random::<u128>()),
    }
}

async fn route(app: App, req: Request<Incoming>) -> Response<Body> {
    let path = req.uri().path().to_string();
    let method = req.method().clone();
    // The run viewer's pages and assets (SPEC §17) hold no data: served without a key.
    if let Some(page) = ui::page(&method, &path) {
        app.metrics()
            .http_request(format!("{method} /ui (page)"), page.status().as_u16());
        return page;
    }
    let access = check_auth(&app, &req);
    // A limited key's every answer carries OpenAI's `x-ratelimit-*` headers.
    let limited = access
        .as_ref()
        .ok()
        .and_then(|a| Some((a.account.clone()?, a.seen.clone())));
    let result = match access {
        Err(e) => Err(e),
        Ok(access) => match Route::parse(&method, &path) {
            Some(Route::Health) => Ok(health(&app).await),
            Some(Route::Metrics) => metrics(&app, &req),
            Some(Route::Create) => responses::create(&app, req, access).await,
            Some(Route::WebSocket) if websocket::is_upgrade(&req) => {
                websocket::accept(&app, req, access)
            }
            Some(Route::WebSocket) => Err(ApiError::new(
                ErrorKind::UpgradeRequired,
                "GET /v1/responses is WebSocket mode: send it as an upgrade (Upgrade: websocket).",
            )),
            Some(Route::InputTokens) => responses::input_tokens(&app, req, access).await,
            Some(Route::Compact) => responses::compact(&app, req, access).await,
            Some(Route::Get(id)) => {
                responses::get(&app, &access.tenant, id, req.uri().query()).await
            }
            Some(Route::Delete(id)) => responses::delete(&app, &access.tenant, id).await,
            Some(Route::Cancel(id)) => responses::cancel(&app, &access.tenant, id).await,
            Some(Route::InputItems(id)) => {
                responses::input_items(&app, &access.tenant, id, req.uri().query()).await
            }
            Some(Route::Models) => responses::models(&app, &req, &access).await,
            Some(Route::McpServers) => Ok(mcp_servers(&app, &access)),
            Some(Route::Limits) => limits(&app, &access).await,
            Some(Route::ConversationCreate) => {
                conversations::create(&app, &access.tenant, req).await
            }
            Some(Route::ConversationGet(id)) => conversations::get(&app, &access.tenant, id).await,
            Some(Route::ConversationUpdate(id)) => {
                conversations::update(&app, &access.tenant, id, req).await
            }
            Some(Route::ConversationDelete(id)) => {
                conversations::delete(&app, &access.tenant, id).await
            }
            Some(Route::ConversationItems(id)) => {
                conversations::items(&app, &access.tenant, id, req.uri().query()).await
            }
            Some(Route::ConversationAddItems(id)) => {
                conversations::add_items(&app, &access.tenant, id, req).await
            }
            Some(Route::ConversationItem(id, item)) => {
                conversations::item(&app, &access.tenant, id, item).await
            }
            Some(Route::ConversationDeleteItem(id, item)) => {
                conversations::delete_item(&app, &access.tenant, id, item).await
            }
            // The run viewer's JSON (SPEC §17), the key's tenant's only.
            None if ui::is_api(&path) => {
                ui::api(
                    &app,
                    &access.tenant,
                    access.operator,
                    &method,
                    &path,
                    req.uri().query(),
                )
                .await
            }
            None => Err(ApiError::not_found_route(&method, &path)),
        },
    };
    let template = match ui::is_api(&path) {
        true => format!("{method} {}", ui::template(&path)),
        false => Route::template(&method, &path),
    };
    let mut resp = result.unwrap_or_else(|e| {
        let body = e.body();
        tracing::info!(
            route = %template,
            status = e.status().as_u16(),
            code = body.code.as_deref().unwrap_or(""),
            param = body.param.as_deref().unwrap_or(""),
            error = %body.message,
            "request rejected"
        );
        e.into_response()
    });
    if let Some((account, seen)) = limited {
        let snapshot = match seen.get() {
            Some(s) => Some(*s),
            None => app.limiter().peek(&account).await,
        };
        if let Some(s) = snapshot {
            s.apply(resp.headers_mut());
        }
    }
    app.metrics().http_request(template, resp.status().as_u16());
    resp
}

/// `GET /healthz`: always 200 while the relay serves; `degraded` (with why) when its store
/// cannot keep runs now (new stored runs get 503, `store: false` ones are served).
async fn health(app: &App) -> Response<Body> {
    let body = match app.store().available().await {
        Ok(()) => serde_json::json!({"status": "ok"}),
        Err(e) => serde_json::json!({"status": "degraded", "store": e.to_string()}),
    };
    json_response(StatusCode::OK, body.to_string())
}

/// `GET /v1/limits`: every limit the key is held to (its own, its tenant's, the registered
/// servers'), with what is used and when each resets.
async fn limits(app: &App, access: &Access) -> Result<Response<Body>, ApiError> {
    let body = match &access.account {
        Some(account) => app
            .limiter()
            .report(account)
            .await
            .map_err(|r| ApiError::limited(&r))?,
        None => serde_json::json!({"object": "relay.limits",
            "tenant": access.tenant.as_str(), "limits": []}),
    };
    Ok(json_response(StatusCode::OK, body.to_string()))
}

/// `GET /metrics`: every metric in the Prometheus text format; with `--metrics-key`, only for
/// that bearer (relay keys do not open it: scrapers are not tenants).
fn metrics<B>(app: &App, req: &Request<B>) -> Result<Response<Body>, ApiError> {
    if let Some(key) = &app.config().metrics_key {
        let given = bearer(req).unwrap_or_default();
        if !constant_time_eq(given.as_bytes(), key.0.as_bytes()) {
            return Err(ApiError::unauthorized());
        }
    }
    Ok(Response::builder()
        .status(StatusCode::OK)
        .header(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )
        .body(full(app.metrics().render()))
        .expect("valid response"))
}

/// With relay keys configured, every route but `/healthz` needs one of them as the bearer; the
/// key decides the request's tenant. Without keys, every request is the default tenant's.
fn check_auth(app: &App, req: &Request<Incoming>) -> Result<Access, ApiError> {
    let keys = &app.config().keys;
    if matches!(req.uri().path(), "/healthz" | "/metrics") {
        return Ok(Access::default());
    }
    if keys.is_empty() {
        return Ok(Access {
            account: app.account(None),
            ..Access::default()
        });
    }
    let given = crate::config::sha256(bearer(req).unwrap_or_default().as_bytes());
    // Every key is compared (no early exit), each in constant time.
    let mut found = None;
    for k in keys {
        if constant_time_eq(&k.sha256, &given) && found.is_none() {
            found = Some(k);
        }
    }
    found
        .map(|k| Access {
            tenant: Tenant::new(&k.tenant),
            models: k.models.clone(),
            mcp_servers: k.mcp_servers.clone(),
            account: app.account(Some(&k.sha256)),
            operator: k.operator,
            seen: Default::default(),
        })
        .ok_or_else(ApiError::unauthorized)
}

/// What a request's key reaches: its tenant's data, and the models it may use (`None`: any).
#[derive(Debug, Clone, Default)]
pub struct Access {
    pub tenant: Tenant,
    pub models: Option<Vec<String>>,
    /// The registered MCP servers it may use (`None`: every one).
    pub mcp_servers: Option<Vec<String>>,
    /// What the key is held to (its limits, its tenant's), if anything.
    pub account: Option<Arc<Account>>,
    /// An operator's key: the run viewer lists any tenant's runs for it.
    pub operator: bool,
    /// What the limits said of this request, for its `x-ratelimit-*` headers.
    pub seen: Arc<OnceLock<Snapshot>>,
}

impl Access {
    /// `request` as this key may send it: its model checked; what the relay sets for it (the
    /// registered MCP servers it may use); and the tenant it runs for.
    pub fn admit(
        self,
        request: crate::api::request::CreateRequest,
    ) -> Result<(crate::api::request::CreateRequest, RelaySet, Tenant), ApiError> {
        self.check_model(&request.model)?;
        let relay = RelaySet {
            mcp_servers_allowed: self.mcp_servers,
            account: self.account,
            ..RelaySet::default()
        };
        Ok((request, relay, self.tenant))
    }

    /// Counts a request that starts a run against the key's limits: its concurrent-run slot
    /// (when limited), or a 429 naming the limit and when to retry.
    pub async fn admit_run(&self, app: &App) -> Result<Option<Lease>, ApiError> {
        let Some(account) = &self.account else {
            return Ok(None);
        };
        match app.limiter().admit(account).await {
            Ok(admitted) => {
                let _ = self.seen.set(admitted.snapshot);
                Ok(admitted.lease)
            }
            Err(refused) => Err(self.refused(refused)),
        }
    }

    /// Counts a request that starts no run (`compact`, `input_tokens`) against the key's limits.
    pub async fn admit_request(&self, app: &App) -> Result<(), ApiError> {
        let Some(account) = &self.account else {
            return Ok(());
        };
        match app.limiter().admit_request(account).await {
            Ok(snapshot) => {
                let _ = self.seen.set(snapshot);
                Ok(())
            }
            Err(refused) => Err(self.refused(refused)),
        }
    }

    fn refused(&self, refused: Refused) -> ApiError {
        if let Refused::Over { snapshot, .. } = &refused {
            let _ = self.seen.set(*snapshot);
        }
        ApiError::limited(&refused)
    }

    /// Whether the key may use the registered MCP server `label`.
    pub fn may_use_server(&self, label: &str) -> bool {
        self.mcp_servers
            .as_ref()
            .is_none_or(|names| names.iter().any(|n| n == label))
    }

    /// A 400 naming `model` when the key may not use it (patterns may hold `*`).
    pub fn check_model(&self, model: &str) -> Result<(), ApiError> {
        if self.may_use_model(model) {
            return Ok(());
        }
        Err(crate::api::FieldError::invalid_value(
            "model",
            format!("This key may not use the model '{model}'."),
        )
        .into())
    }

    /// Whether the key's `models` patterns (`*` for any run of characters) allow `model`.
    pub fn may_use_model(&self, model: &str) -> bool {
        self.models
            .as_ref()
            .is_none_or(|patterns| patterns.iter().any(|p| glob(p, model)))
    }
}

/// Whether `text` matches `pattern`, where `*` stands for any run of characters.
fn glob(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == text;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !text.starts_with(first) || !text[first.len()..].ends_with(last) {
        return false;
    }
    let mut rest = &text[first.len()..text.len() - last.len()];
    for middle in &parts[1..parts.len() - 1] {
        match rest.find(middle) {
            Some(i) => rest = &rest[i + middle.len()..],
            None => return false,
        }
    }
    true
}

/// `GET /v1/mcp/servers`: the registered MCP servers the key may use, with no secrets.
fn mcp_servers(app: &App, access: &Access) -> Response<Body> {
    let data: Vec<serde_json::Value> = app
        .config()
        .mcp
        .registered
        .0
        .iter()
        .filter(|(label, _)| access.may_use_server(label))
        .map(|(label, r)| {
            serde_json::json!({"label": label, "description": r.tool.server_description,
                "transport": r.transport.as_str()})
        })
        .collect();
    json_response(
        StatusCode::OK,
        serde_json::json!({"object": "list", "data": data}).to_string(),
    )
}

/// The request's bearer token, if any.
pub fn bearer<B>(req: &Request<B>) -> Option<String> {
    let v = req.headers().get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = v.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim().to_string())
}

/// Compares in time that depends only on the lengths.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = (a.len() != b.len()) as u8;
    for i in 0..a.len().max(b.len()) {
        diff |= a.get(i).copied().unwrap_or(0) ^ b.get(i).copied().unwrap_or(0);
    }
    diff == 0
}
