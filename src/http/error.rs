//! Every HTTP error the relay answers with: what went wrong ([`ErrorKind`], chosen where it
//! happens) and, here alone, the status, OpenAI error `type` and `code` (and `Retry-After`) each
//! kind answers with.
//!
//! Invariant: [`ErrorKind::row`] is the one table of error statuses: an exhaustive `match`, no
//! catch-all arm, so a new kind of failure cannot go out without its row.

use hyper::{Method, Response, StatusCode};
use serde_json::json;

use super::{Body, json_response};
use crate::api::{ErrorBody, FieldError};
use crate::run::StartError;
use crate::upstream::UpstreamError;

/// What went wrong, as the client is told it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ErrorKind {
    /// A field of the body (or a query parameter) at fault; the code is the field error's own
    /// (`invalid_value`, `missing_required_parameter`, ...).
    InvalidField(Option<&'static str>),
    /// The body could not be read, or a request the relay does not take for no field's sake.
    BadRequest,
    /// The body is over the relay's limit.
    TooLarge,
    /// `GET /v1/responses` sent without the WebSocket upgrade.
    UpgradeRequired,
    /// A WebSocket upgrade the relay cannot accept (not HTTP/1.1, no key, wrong version).
    BadUpgrade,
    /// A WebSocket event's `stream_id` is not a valid one.
    InvalidStreamId,
    /// A WebSocket client event other than `response.create` (or `response.steer`).
    UnsupportedClientEvent,
    /// A WebSocket connection opened too many stream ids, or queued too many creates on one.
    StreamLimit,
    /// A WebSocket connection is past its lifetime.
    ConnectionLimit,
    /// A missing or wrong API key.
    Unauthorized,
    /// No such route, response, conversation or item (for this key's tenant).
    NotFound,
    /// `previous_response_id` names no stored response of the tenant.
    PreviousNotFound,
    /// Cancelling a response that was not created in the background.
    NotCancellable,
    /// Cancelling a response that already ended otherwise.
    AlreadyFinished,
    /// Another run holds the conversation.
    ConversationLocked,
    /// An MCP server's tools could not be listed (under `--mcp-discovery-failure fail`).
    McpDiscovery,
    /// The relay runs as many responses as it may.
    Busy,
    /// Over a key's or tenant's limit: when to retry, and whether it is a spent daily budget
    /// (`insufficient_quota`, not worth retrying today) rather than a rate.
    RateLimited { retry_ms: u64, quota: bool },
    /// The limits' counters cannot be reached and the relay fails closed.
    LimitsUnavailable,
    /// The relay is shutting down.
    ShuttingDown,
    /// The store cannot be reached (Redis away): worth a retry.
    StoreUnavailable,
    /// The store's disk is full: no new stored run until space is freed (`store: false` is
    /// served).
    StoreFull,
    /// The store failed otherwise.
    StoreFailed,
    /// The upstream model server refused the request (a 4xx): its status, and its envelope's
    /// `type` and `code` when it sent them, passed on.
    UpstreamRejected {
        status: u16,
        kind: Option<String>,
        code: Option<String>,
        retry_after: Option<u64>,
    },
    /// The upstream model server did not answer in time.
    UpstreamTimeout,
    /// The upstream model server failed otherwise (unreachable, a 5xx, a broken answer).
    UpstreamFailed,
    /// A recording that cannot be replayed (`logs serve`).
    RecordingBroken,
}

const INVALID: &str = "invalid_request_error";
const SERVER: &str = "server_error";

/// One row of the status table: status, OpenAI error `type`, `code`, `Retry-After` seconds.
type Row<'a> = (StatusCode, &'a str, Option<&'a str>, Option<u64>);

/// A row of the client's fault (`invalid_request_error`).
fn client(status: StatusCode, code: Option<&str>) -> Row<'_> {
    (status, INVALID, code, None)
}

/// A row of the relay's or its dependencies' fault (`server_error`).
fn server(status: StatusCode, code: &str) -> Row<'_> {
    (status, SERVER, Some(code), None)
}

impl ErrorKind {
    /// The status, error `type`, `code` and `Retry-After` this kind answers with.
    pub fn row(&self) -> Row<'_> {
        use ErrorKind as K;
        use StatusCode as S;
        match self {
            K::InvalidField(code) => client(S::BAD_REQUEST, *code),
            K::BadRequest | K::NotCancellable => client(S::BAD_REQUEST, None),
            K::TooLarge => client(S::PAYLOAD_TOO_LARGE, Some("request_too_large")),
            K::UpgradeRequired => client(S::BAD_REQUEST, Some("websocket_upgrade_required")),
            K::BadUpgrade => client(S::BAD_REQUEST, Some("invalid_websocket_upgrade")),
            K::InvalidStreamId => client(S::BAD_REQUEST, Some("invalid_stream_id")),
            K::UnsupportedClientEvent => client(S::BAD_REQUEST, Some("unsupported_client_event")),
            K::StreamLimit => client(S::BAD_REQUEST, Some("websocket_stream_limit_reached")),
            K::ConnectionLimit => {
                client(S::BAD_REQUEST, Some("websocket_connection_limit_reached"))
            }
            K::Unauthorized => client(S::UNAUTHORIZED, Some("invalid_api_key")),
            K::NotFound => client(S::NOT_FOUND, None),
            K::PreviousNotFound => client(S::BAD_REQUEST, Some("previous_response_not_found")),
            K::AlreadyFinished => client(S::BAD_REQUEST, Some("response_already_finished")),
            K::ConversationLocked => client(S::CONFLICT, Some("conversation_locked")),
            K::McpDiscovery => (
                S::FAILED_DEPENDENCY,
                "external_connector_error",
                Some("http_error"),
                None,
            ),
            K::Busy => (S::SERVICE_UNAVAILABLE, SERVER, Some("server_busy"), Some(1)),
            K::RateLimited { retry_ms, quota } => {
                let (kind, code) = match quota {
                    true => ("insufficient_quota", "insufficient_quota"),
                    false => ("rate_limit_error", "rate_limit_exceeded"),
                };
                (
                    S::TOO_MANY_REQUESTS,
                    kind,
                    Some(code),
                    Some(retry_ms.div_ceil(1000).max(1)),
                )
            }
            K::LimitsUnavailable => (
                S::SERVICE_UNAVAILABLE,
                SERVER,
                Some("limits_unavailable"),
                Some(1),
            ),
            K::ShuttingDown => server(S::SERVICE_UNAVAILABLE, "server_shutting_down"),
            K::StoreUnavailable => (
                S::SERVICE_UNAVAILABLE,
                SERVER,
                Some("store_unavailable"),
                Some(1),
            ),
            K::StoreFull => (S::SERVICE_UNAVAILABLE, SERVER, Some("store_full"), Some(10)),
            K::StoreFailed => server(S::INTERNAL_SERVER_ERROR, "store_error"),
            K::UpstreamRejected {
                status,
                kind,
                code,
                retry_after,
            } => (
                S::from_u16(*status).unwrap_or(S::BAD_GATEWAY),
                kind.as_deref().unwrap_or(INVALID),
                Some(code.as_deref().unwrap_or("upstream_error")),
                *retry_after,
            ),
            K::UpstreamTimeout => server(S::GATEWAY_TIMEOUT, "upstream_timeout"),
            K::UpstreamFailed => server(S::BAD_GATEWAY, "upstream_error"),
            K::RecordingBroken => (S::INTERNAL_SERVER_ERROR, SERVER, None, None),
        }
    }
}

/// An error answer: its kind, its message, and the `param` it names (if any).
#[derive(Debug)]
pub struct ApiError {
    pub kind: ErrorKind,
    pub message: String,
    pub param: Option<String>,
}

impl ApiError {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        ApiError {
            kind,
            message: message.into(),
            param: None,
        }
    }

    /// The error, naming `param`.
    pub fn at(mut self, param: &str) -> Self {
        self.param = Some(param.to_string());
        self
    }

    pub fn status(&self) -> StatusCode {
        self.kind.row().0
    }

    /// OpenAI's error envelope's inside: `message`, `type`, `param`, `code`.
    pub fn body(&self) -> ErrorBody {
        let (_, kind, code, _) = self.kind.row();
        ErrorBody {
            message: self.message.clone(),
            kind: kind.into(),
            param: self.param.clone(),
            code: code.map(str::to_string),
        }
    }

    /// Seconds for a `Retry-After` header.
    pub fn retry_after(&self) -> Option<u64> {
        self.kind.row().3
    }

    /// The relay is running as many runs as it may.
    pub fn busy() -> Self {
        Self::new(
            ErrorKind::Busy,
            "The relay is running as many responses as it is configured for; retry shortly.",
        )
    }

    pub fn invalid(e: FieldError) -> Self {
        ApiError {
            kind: ErrorKind::InvalidField(e.code),
            param: (!e.param.is_empty()).then_some(e.param),
            message: e.message,
        }
    }

    pub fn not_found_route(method: &Method, path: &str) -> Self {
        Self::new(
            ErrorKind::NotFound,
            format!("Invalid URL ({method} {path})"),
        )
    }

    pub fn response_not_found(id: &str) -> Self {
        Self::new(
            ErrorKind::NotFound,
            format!("No response found with id '{id}'."),
        )
    }

    /// The store cannot be reached; worth a retry.
    pub fn store_unavailable() -> Self {
        Self::new(
            ErrorKind::StoreUnavailable,
            "The relay's store is unavailable; try again shortly.",
        )
    }

    /// The store's disk is full.
    pub fn store_full() -> Self {
        Self::new(
            ErrorKind::StoreFull,
            "The relay's disk is full: it cannot keep new stored responses until space is freed. \
             Send `store: false` to run without keeping the response, or retry later.",
        )
    }

    /// The store failed otherwise.
    pub fn store_failed() -> Self {
        Self::new(
            ErrorKind::StoreFailed,
            "The relay's store failed; try again.",
        )
    }

    pub fn unauthorized() -> Self {
        Self::new(
            ErrorKind::Unauthorized,
            "Incorrect or missing API key. Send one of the relay's keys as 'Authorization: Bearer <key>'.",
        )
    }

    pub fn upstream(e: &UpstreamError) -> Self {
        match e {
            UpstreamError::Status {
                status,
                message,
                body,
                retry_after,
            } if (400..500).contains(status) => {
                // The upstream's own 4xx, passed on with its envelope when it has one.
                let inner = body
                    .as_ref()
                    .and_then(|b| b.get("error"))
                    .filter(|e| e.is_object());
                let field = |k: &str| {
                    inner
                        .and_then(|i| i.get(k))
                        .and_then(|v| v.as_str())
                        .map(str::to_string)
                };
                ApiError {
                    kind: ErrorKind::UpstreamRejected {
                        status: *status,
                        kind: field("type"),
                        code: field("code"),
                        retry_after: retry_after.map(|d| d.as_secs().max(1)),
                    },
                    message: format!("Upstream model server: {message}"),
                    param: field("param"),
                }
            }
            UpstreamError::Timeout(_) => Self::new(ErrorKind::UpstreamTimeout, e.to_string()),
            _ => Self::new(ErrorKind::UpstreamFailed, e.to_string()),
        }
    }

    /// A refusal by the key's or tenant's limits.
    pub fn limited(refused: &crate::limits::Refused) -> Self {
        let kind = match refused {
            crate::limits::Refused::Over { retry_ms, .. } => ErrorKind::RateLimited {
                retry_ms: *retry_ms,
                quota: refused.is_quota(),
            },
            crate::limits::Refused::Unavailable => ErrorKind::LimitsUnavailable,
        };
        Self::new(kind, refused.message())
    }

    pub fn into_response(self) -> Response<Body> {
        let body = serde_json::to_vec(&json!({"error": self.body()})).expect("serializes");
        let mut resp = json_response(self.status(), body);
        let headers = resp.headers_mut();
        if let Some(s) = self.retry_after() {
            headers.insert(hyper::header::RETRY_AFTER, s.into());
        }
        if let ErrorKind::RateLimited { retry_ms, quota } = self.kind {
            // The OpenAI SDKs read `retry-after-ms` first; a spent daily budget is not worth
            // their retries (`x-should-retry: false`).
            headers.insert("retry-after-ms", retry_ms.into());
            if quota {
                headers.insert(
                    "x-should-retry",
                    hyper::header::HeaderValue::from_static("false"),
                );
            }
        }
        resp
    }
}

impl From<crate::store::StoreError> for ApiError {
    fn from(e: crate::store::StoreError) -> Self {
        use crate::store::StoreError as E;
        tracing::error!(error = %e, "store failure");
        match e {
            E::Unavailable(_) => Self::store_unavailable(),
            E::Full(_) => Self::store_full(),
            E::Corrupt(_)
            | E::ChainTooLong
            | E::Sqlite(_)
            | E::Redis(_)
            | E::Io(_)
            | E::Internal(_) => Self::store_failed(),
        }
    }
}

impl From<FieldError> for ApiError {
    fn from(e: FieldError) -> Self {
        ApiError::invalid(e)
    }
}

impl From<StartError> for ApiError {
    fn from(e: StartError) -> Self {
        let message = e.to_string();
        match e {
            StartError::Invalid(f) => ApiError::invalid(f),
            StartError::PreviousNotFound(_) => {
                ApiError::new(ErrorKind::PreviousNotFound, message).at("previous_response_id")
            }
            StartError::Upstream(u) => ApiError::upstream(&u),
            StartError::ConversationNotFound(_) => {
                ApiError::new(ErrorKind::NotFound, message).at("conversation")
            }
            StartError::ConversationBusy(_) => {
                ApiError::new(ErrorKind::ConversationLocked, message).at("conversation")
            }
            StartError::Store(s) => ApiError::from(s),
            StartError::McpDiscovery { .. } => {
                ApiError::new(ErrorKind::McpDiscovery, message).at("tools")
            }
        }
    }
}
