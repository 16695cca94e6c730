//! Every HTTP error the relay answers with: its status and OpenAI's error envelope.

use hyper::{Method, Response, StatusCode};
use serde_json::json;

use super::{Body, json_response};
use crate::api::{ErrorBody, FieldError};
use crate::run::StartError;
use crate::upstream::UpstreamError;

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub body: ErrorBody,
    /// Seconds for a `Retry-After` header.
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(
        status: StatusCode,
        kind: &str,
        message: impl Into<String>,
        param: Option<&str>,
        code: Option<&str>,
    ) -> Self {
        ApiError {
            status,
            body: ErrorBody {
                message: message.into(),
                kind: kind.into(),
                param: param.map(str::to_string),
                code: code.map(str::to_string),
            },
            retry_after: None,
        }
    }

    /// The relay is running as many runs as it may.
    pub fn busy() -> Self {
        let mut e = Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "server_error",
            "The relay is running as many responses as it is configured for; retry shortly.",
            None,
            Some("server_busy"),
        );
        e.retry_after = Some(1);
        e
    }

    pub fn invalid(e: FieldError) -> Self {
        let param = (!e.param.is_empty()).then_some(e.param.as_str());
        Self::new(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            e.message.clone(),
            param,
            e.code,
        )
    }

    pub fn not_found_route(method: &Method, path: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            format!("Invalid URL ({method} {path})"),
            None,
            None,
        )
    }

    pub fn response_not_found(id: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            format!("No response found with id '{id}'."),
            None,
            None,
        )
    }

    pub fn store(message: &str) -> Self {
        tracing::error!(error = %message, "store failure");
        if message.contains(crate::store::UNAVAILABLE) {
            let mut e = Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "server_error",
                "The relay's store is unavailable; try again shortly.",
                None,
                Some("store_unavailable"),
            );
            e.retry_after = Some(1);
            return e;
        }
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "server_error",
            "The relay's store failed; try again.",
            None,
            Some("store_error"),
        )
    }

    pub fn unauthorized() -> Self {
        Self::new(
            StatusCode::UNAUTHORIZED,
            "invalid_request_error",
            "Incorrect or missing API key. Send one of the relay's keys as 'Authorization: Bearer <key>'.",
            None,
            Some("invalid_api_key"),
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
                let status = StatusCode::from_u16(*status).unwrap_or(StatusCode::BAD_GATEWAY);
                ApiError {
                    status,
                    body: ErrorBody {
                        message: format!("Upstream model server: {message}"),
                        kind: field("type").unwrap_or_else(|| "invalid_request_error".into()),
                        param: field("param"),
                        code: field("code").or_else(|| Some("upstream_error".into())),
                    },
                    retry_after: retry_after.map(|d| d.as_secs().max(1)),
                }
            }
            UpstreamError::Timeout(_) => Self::new(
                StatusCode::GATEWAY_TIMEOUT,
                "server_error",
                e.to_string(),
                None,
                Some("upstream_timeout"),
            ),
            _ => Self::new(
                StatusCode::BAD_GATEWAY,
                "server_error",
                e.to_string(),
                None,
                Some("upstream_error"),
            ),
        }
    }

    pub fn into_response(self) -> Response<Body> {
        let body = serde_json::to_vec(&json!({"error": self.body})).expect("serializes");
        let mut resp = json_response(self.status, body);
        if let Some(s) = self.retry_after {
            resp.headers_mut()
                .insert(hyper::header::RETRY_AFTER, s.into());
        }
        resp
    }
}

impl From<crate::store::StoreError> for ApiError {
    fn from(e: crate::store::StoreError) -> Self {
        use crate::store::StoreError as E;
        tracing::error!(error = %e, "store failure");
        match e {
            E::Unavailable(_) => {
                let mut e = Self::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "server_error",
                    "The relay's store is unavailable; try again shortly.",
                    None,
                    Some("store_unavailable"),
                );
                e.retry_after = Some(1);
                e
            }
            E::Corrupt(_)
            | E::ChainTooLong
            | E::Sqlite(_)
            | E::Redis(_)
            | E::Io(_)
            | E::Internal(_) => Self::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "server_error",
                "The relay's store failed; try again.",
                None,
                Some("store_error"),
            ),
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
        match e {
            StartError::Invalid(f) => ApiError::invalid(f),
            StartError::PreviousNotFound(_) => ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                e.to_string(),
                Some("previous_response_id"),
                Some("previous_response_not_found"),
            ),
            StartError::Upstream(u) => ApiError::upstream(&u),
            StartError::ConversationNotFound(_) => ApiError::new(
                StatusCode::NOT_FOUND,
                "invalid_request_error",
                e.to_string(),
                Some("conversation"),
                None,
            ),
            StartError::ConversationBusy(_) => ApiError::new(
                StatusCode::CONFLICT,
                "invalid_request_error",
                e.to_string(),
                Some("conversation"),
                Some("conversation_locked"),
            ),
            StartError::Store(_) => ApiError::store(&e.to_string()),
            StartError::McpDiscovery { .. } => ApiError::new(
                StatusCode::FAILED_DEPENDENCY,
                "external_connector_error",
                e.to_string(),
                Some("tools"),
                Some("http_error"),
            ),
        }
    }
}
