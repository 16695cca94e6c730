//! rmcp client failures classified (JSON-RPC error, HTTP/transport failure, timeout) and turned
//! into OpenAI's `mcp_call.error` shapes, with every message scrubbed of the server's secrets.

use std::error::Error as StdError;
use std::time::Duration;

use rmcp::{
    ServiceError,
    service::ClientInitializeError,
    transport::streamable_http_client::{HttpStatusError, StreamableHttpError},
};

use super::ServerSpec;
use crate::api::response::McpCallError;
use crate::redact::mask_url;

type HttpErr = StreamableHttpError<reqwest::Error>;

/// Why a request to an MCP server failed.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Failure {
    /// The server answered with a JSON-RPC error (or an answer that is not what was asked).
    Protocol { code: i64, message: String },
    /// The HTTP exchange failed: `status` is 0 when no HTTP answer arrived.
    Http { status: u16, message: String },
    /// The request did not finish in time.
    Timeout { after: Duration },
}

impl Failure {
    /// A short, bounded name of the failure (a trace span's `error.type`): the JSON-RPC error
    /// code, the HTTP status, `transport_error` or `timeout`.
    pub(super) fn kind(&self) -> String {
        match self {
            Failure::Protocol { code, .. } => code.to_string(),
            Failure::Http { status: 0, .. } => "transport_error".into(),
            Failure::Http { status, .. } => status.to_string(),
            Failure::Timeout { .. } => "timeout".into(),
        }
    }

    /// Whether the session that saw this failure should not be used again.
    pub(super) fn breaks_session(&self) -> bool {
        matches!(self, Failure::Http { .. })
    }

    pub(super) fn into_call_error(self, spec: &ServerSpec) -> McpCallError {
        match self {
            Failure::Protocol { code, message } => McpCallError::McpProtocolError {
                code,
                message: scrub(spec, &message),
            },
            Failure::Http { status, message } => McpCallError::HttpError {
                code: status,
                message: scrub(spec, &message),
            },
            Failure::Timeout { after } => McpCallError::McpProtocolError {
                code: -32001,
                message: format!("Request timed out after {}", human(after)),
            },
        }
    }
}

/// `1.5s`, `300ms`, `10s`.
pub(super) fn human(d: Duration) -> String {
    if d.subsec_millis() == 0 && d.as_secs() > 0 {
        format!("{}s", d.as_secs())
    } else if d.as_secs() > 0 {
        format!("{:.1}s", d.as_secs_f64())
    } else {
        format!("{}ms", d.as_millis())
    }
}

pub(super) fn service_failure(e: &ServiceError) -> Failure {
    match e {
        ServiceError::McpError(ed) => Failure::Protocol {
            code: i64::from(ed.code.0),
            message: ed.message.to_string(),
        },
        ServiceError::TransportSend(dte) => transport_failure(dte.error.as_ref()),
        ServiceError::TransportClosed => Failure::Http {
            status: 0,
            message: "the connection to the MCP server was closed".into(),
        },
        ServiceError::Cancelled { .. } => Failure::Http {
            status: 0,
            message: "the MCP session was cancelled".into(),
        },
        ServiceError::Timeout { timeout } => Failure::Timeout { after: *timeout },
        other => Failure::Protocol {
            code: -32603,
            message: other.to_string(),
        },
    }
}

pub(super) fn init_failure(e: &ClientInitializeError) -> Failure {
    match e {
        ClientInitializeError::JsonRpcError(ed) => Failure::Protocol {
            code: i64::from(ed.code.0),
            message: ed.message.to_string(),
        },
        ClientInitializeError::TransportError { error, .. } => {
            transport_failure(error.error.as_ref())
        }
        ClientInitializeError::ConnectionClosed(_) | ClientInitializeError::Cancelled => {
            Failure::Http {
                status: 0,
                message: "the connection to the MCP server was closed during initialization".into(),
            }
        }
        other => Failure::Protocol {
            code: -32603,
            message: format!("initialization failed: {other}"),
        },
    }
}

/// A legacy SSE transport failure.
pub(super) fn sse_failure(e: &super::sse::SseError) -> Failure {
    use super::sse::SseError;
    match e {
        SseError::Status { status } => status_failure(*status, None),
        SseError::Request(re) => reqwest_failure(re),
        SseError::Stream(m) => Failure::Http {
            status: 0,
            message: m.clone(),
        },
    }
}

/// Walks the error chain for an HTTP status and a message that does not carry the request URL.
fn transport_failure(e: &(dyn StdError + Send + Sync + 'static)) -> Failure {
    let mut cur: Option<&(dyn StdError + 'static)> = Some(e);
    while let Some(c) = cur {
        if let Some(se) = c.downcast_ref::<HttpErr>() {
            match se {
                StreamableHttpError::HttpStatus(h) => return status_failure(h.status, None),
                StreamableHttpError::AuthRequired(_) => {
                    return status_failure(401, Some("authorization required"));
                }
                StreamableHttpError::InsufficientScope(_) => {
                    return status_failure(403, Some("insufficient scope"));
                }
                StreamableHttpError::SessionExpired => {
                    return status_failure(404, Some("session expired"));
                }
                StreamableHttpError::UnexpectedServerResponse(m) => {
                    if let Some(code) = m
                        .strip_prefix("HTTP ")
                        .and_then(|r| r.get(..3))
                        .and_then(|c| c.parse::<u16>().ok())
                    {
                        return Failure::Http {
                            status: code,
                            message: m.to_string(),
                        };
                    }
                    return Failure::Http {
                        status: 0,
                        message: format!("unexpected server response: {m}"),
                    };
                }
                StreamableHttpError::Client(re) => return reqwest_failure(re),
                other => {
                    return Failure::Http {
                        status: 0,
                        message: other.to_string(),
                    };
                }
            }
        }
        if let Some(se) = c.downcast_ref::<super::sse::SseError>() {
            return sse_failure(se);
        }
        if let Some(h) = c.downcast_ref::<HttpStatusError>() {
            return status_failure(h.status, None);
        }
        if let Some(re) = c.downcast_ref::<reqwest::Error>() {
            return reqwest_failure(re);
        }
        cur = c.source();
    }
    Failure::Http {
        status: 0,
        message: e.to_string(),
    }
}

fn status_failure(status: u16, detail: Option<&str>) -> Failure {
    let reason = reqwest::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("");
    let message = match detail {
        Some(d) => format!("HTTP {status} {reason}: {d}"),
        None => format!("HTTP {status} {reason}"),
    };
    Failure::Http {
        status,
        message: message.replace("  ", " ").trim_end().to_string(),
    }
}

/// A reqwest failure without its URL: what went wrong, then the causes.
fn reqwest_failure(re: &reqwest::Error) -> Failure {
    if let Some(s) = re.status() {
        return status_failure(s.as_u16(), None);
    }
    let what = if re.is_connect() {
        "could not connect to the MCP server"
    } else if re.is_timeout() {
        "the HTTP request to the MCP server timed out"
    } else if re.is_body() || re.is_decode() {
        "error reading the MCP server's response"
    } else if re.is_redirect() {
        "too many redirects"
    } else {
        "error sending the request to the MCP server"
    };
    let mut message = what.to_string();
    let mut src = re.source();
    while let Some(s) = src {
        message.push_str(": ");
        message.push_str(&s.to_string());
        src = s.source();
    }
    Failure::Http { status: 0, message }
}

/// `text` with the server's URL masked and its token, header values and query string removed.
pub(super) fn scrub(spec: &ServerSpec, text: &str) -> String {
    let mut out = text.to_string();
    let mut urls = vec![spec.url.clone()];
    if let Ok(u) = reqwest::Url::parse(&spec.url) {
        urls.push(u.to_string());
    }
    for u in urls {
        if !u.is_empty() && out.contains(&u) {
            out = out.replace(&u, &mask_url(&u));
        }
    }
    let mut secrets: Vec<&str> = Vec::new();
    if let Some(t) = &spec.authorization {
        secrets.push(t);
    }
    secrets.extend(spec.headers.iter().map(|(_, v)| v.as_str()));
    if let Some((_, query)) = spec.url.split_once('?') {
        secrets.push(query.split('#').next().unwrap_or(""));
    }
    // Longest first, so a secret that contains another is removed whole.
    secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
    for s in secrets {
        if s.len() >= 3 && out.contains(s) {
            out = out.replace(s, "***");
        }
    }
    out
}
