//! Validation of a request's `mcp` tools into [`ServerSpec`]s, with OpenAI-style 400 messages
//! that name the offending field (`tools[1].server_label`, `tools[0].headers.X-Key`...).

use std::collections::HashSet;

use reqwest::header::{HeaderName, HeaderValue};
use serde_json::{Map, Value};

use super::{Approval, ApprovalPolicy, Registered, RegisteredServer, ServerSpec, ToolFilter};
use crate::api::error::FieldError;
use crate::api::request::{McpToolParam, ToolParam};

/// Longest `server_label`.
const MAX_LABEL: usize = 64;

/// Header names a request may not set: the transport owns them.
const RESERVED_HEADERS: &[&str] = &[
    "accept",
    "connection",
    "content-length",
    "content-type",
    "host",
    "last-event-id",
    "mcp-protocol-version",
    "mcp-session-id",
    "te",
    "transfer-encoding",
    "upgrade",
];

/// Validates every `mcp` tool of `tools` (at most `max_servers` of them) and returns each with its
/// index in `tools`. `default_approval` applies when `require_approval` is absent.
pub fn specs(
    tools: &[ToolParam],
    max_servers: usize,
    default_approval: Approval,
) -> Result<Vec<(usize, ServerSpec)>, FieldError> {
    specs_with(
        tools,
        max_servers,
        default_approval,
        &Registered::default(),
        None,
    )
}

/// A registered server's `mcp` tool, checked as a request's would be.
pub fn validate_registered(
    r: &RegisteredServer,
    default_approval: Approval,
) -> Result<ServerSpec, FieldError> {
    let mut s = spec(0, &r.tool, default_approval)?;
    s.registered = true;
    s.transport = r.transport;
    Ok(s)
}

/// [`specs`], where an `mcp` tool without `server_url` names a registered server (by
/// `server_label`, or by `connector_id`) that `may_use` lets this request's key use (`None`:
/// every one): the server's URL and secrets are the operator's, and the request's
/// `allowed_tools`, `require_approval` and `defer_loading` can only narrow what it set.
pub fn specs_with(
    tools: &[ToolParam],
    max_servers: usize,
    default_approval: Approval,
    registered: &Registered,
    may_use: Option<&[String]>,
) -> Result<Vec<(usize, ServerSpec)>, FieldError> {
    let count = tools
        .iter()
        .filter(|t| matches!(t, ToolParam::Mcp(_)))
        .count();
    if count > max_servers {
        return Err(FieldError::invalid_value(
            "tools",
            format!(
                "Too many MCP servers: {count} 'mcp' tools were given, at most {max_servers} are allowed per request."
            ),
        ));
    }
    let mut out = Vec::with_capacity(count);
    let mut labels = HashSet::new();
    for (i, tool) in tools.iter().enumerate() {
        let ToolParam::Mcp(m) = tool else { continue };
        let spec = match registered_for(i, m, registered, may_use)? {
            Some(r) => narrowed(i, m, r, default_approval)?,
            None => spec(i, m, default_approval)?,
        };
        if !labels.insert(spec.label.to_ascii_lowercase()) {
            return Err(FieldError::invalid_value(
                format!("tools[{i}].server_label"),
                format!(
                    "Duplicate MCP server_label '{}' found in 'tools' parameter.",
                    spec.label
                ),
            ));
        }
        out.push((i, spec));
    }
    Ok(out)
}

/// The registered server an `mcp` tool without `server_url` names, if it names one the key may
/// use; one it may not use is answered as an unknown one.
fn registered_for<'a>(
    i: usize,
    m: &McpToolParam,
    registered: &'a Registered,
    may_use: Option<&[String]>,
) -> Result<Option<&'a RegisteredServer>, FieldError> {
    if m.server_url.is_some() {
        return Ok(None);
    }
    let (name, field) = match (&m.connector_id, &m.server_label) {
        (Some(c), _) => (c.as_str(), "connector_id"),
        (None, Some(l)) => (l.as_str(), "server_url"),
        (None, None) => return Ok(None),
    };
    let usable = may_use.is_none_or(|names| names.iter().any(|n| n == name));
    match registered.0.get(name).filter(|_| usable) {
        Some(r) => Ok(Some(r)),
        None if field == "connector_id" => Err(FieldError::invalid_value(
            format!("tools[{i}].connector_id"),
            format!("No MCP server '{name}' is registered on this relay."),
        )),
        // No such registered server: the tool lacks its `server_url`.
        None => Ok(None),
    }
}

/// A registered server's spec, narrowed by the request's own `allowed_tools`,
/// `require_approval` and `defer_loading`.
fn narrowed(
    i: usize,
    m: &McpToolParam,
    registered: &RegisteredServer,
    default_approval: Approval,
) -> Result<ServerSpec, FieldError> {
    let r = &registered.tool;
    let mut s = spec(i, r, default_approval)?;
    s.registered = true;
    s.transport = registered.transport;
    s.label = validate_label(
        &format!("tools[{i}].server_label"),
        m.server_label.as_deref(),
    )?;
    let asked = spec(
        i,
        &McpToolParam {
            server_url: r.server_url.clone(),
            connector_id: None,
            authorization: None,
            headers: None,
            ..m.clone()
        },
        default_approval,
    )?;
    if m.allowed_tools.is_some() {
        s.allowed = ToolFilter {
            tool_names: match (s.allowed.tool_names.take(), asked.allowed.tool_names) {
                (Some(a), Some(b)) => Some(a.into_iter().filter(|n| b.contains(n)).collect()),
                (a, b) => a.or(b),
            },
            read_only: s.allowed.read_only.or(asked.allowed.read_only),
        };
    }
    if m.require_approval.is_some() {
        s.approval = ApprovalPolicy::Both(Box::new(s.approval), Box::new(asked.approval));
    }
    s.defer_loading = asked.defer_loading;
    if asked.description.is_some() {
        s.description = asked.description;
    }
    Ok(s)
}

fn spec(i: usize, m: &McpToolParam, default_approval: Approval) -> Result<ServerSpec, FieldError> {
    let at = |field: &str| format!("tools[{i}].{field}");
    let label = validate_label(&at("server_label"), m.server_label.as_deref())?;

    if m.connector_id.is_some() && m.server_url.is_some() {
        return Err(FieldError::invalid_value(
            at("connector_id"),
            "Give 'connector_id' (a registered MCP server) or 'server_url', not both.",
        ));
    }
    if m.tunnel_id.is_some() {
        return Err(FieldError::unsupported(
            at("tunnel_id"),
            "MCP tunnels are not available on this relay: 'tunnel_id' is not supported; give 'server_url' instead.",
        ));
    }
    let url = validate_url(&at("server_url"), m.server_url.as_deref())?;

    let authorization = match m.authorization.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(token) => {
            let token = strip_bearer(token);
            if token.is_empty() || HeaderValue::from_str(&format!("Bearer {token}")).is_err() {
                return Err(FieldError::invalid_value(
                    at("authorization"),
                    format!(
                        "Invalid '{}': the token must be printable ASCII with no line breaks.",
                        at("authorization")
                    ),
                ));
            }
            Some(token.to_string())
        }
    };

    let headers = validate_headers(&at("headers"), m.headers.as_ref(), authorization.is_some())?;
    let allowed = match &m.allowed_tools {
        None | Some(Value::Null) => ToolFilter::default(),
        Some(Value::Array(items)) => ToolFilter {
            tool_names: Some(string_list(&at("allowed_tools"), items)?),
            read_only: None,
        },
        Some(Value::Object(obj)) => filter_object(&at("allowed_tools"), obj)?,
        Some(_) => {
            return Err(FieldError::new(
                at("allowed_tools"),
                format!(
                    "Invalid '{}': expected a list of tool names or an object with 'tool_names' and 'read_only'.",
                    at("allowed_tools")
                ),
            ));
        }
    };
    let approval = validate_approval(
        &at("require_approval"),
        m.require_approval.as_ref(),
        default_approval,
    )?;

    Ok(ServerSpec {
        label,
        url,
        authorization,
        headers,
        allowed,
        approval,
        description: m
            .server_description
            .clone()
            .filter(|d| !d.trim().is_empty()),
        defer_loading: m.defer_loading.unwrap_or(false),
        registered: false,
        transport: super::Transport::Auto,
    })
}

fn validate_label(param: &str, label: Option<&str>) -> Result<String, FieldError> {
    let label = match label {
        None | Some("") => return Err(FieldError::missing(param)),
        Some(l) => l,
    };
    let chars = label.chars().count();
    if chars > MAX_LABEL {
        return Err(FieldError::invalid_value(
            param,
            format!(
                "Invalid '{param}': string too long. Expected a string with maximum length {MAX_LABEL}, but got a string with length {chars} instead."
            ),
        ));
    }
    let mut bytes = label.bytes();
    let first_ok = bytes.next().is_some_and(|b| b.is_ascii_alphabetic());
    if !first_ok || !bytes.all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_') {
        return Err(FieldError::invalid_value(
            param,
            format!(
                "Invalid input {label}: 'server_label' must start with a letter and consist of only letters, digits, '-' and '_'"
            ),
        ));
    }
    Ok(label.to_string())
}

fn validate_url(param: &str, url: Option<&str>) -> Result<String, FieldError> {
    let url = match url.map(str::trim) {
        None | Some("") => return Err(FieldError::missing(param)),
        Some(u) => u,
    };
    let bad = || {
        FieldError::invalid_value(
            param,
            format!(
                "Invalid '{param}': expected an absolute http or https URL of a Streamable HTTP MCP server."
            ),
        )
    };
    let parsed = reqwest::Url::parse(url).map_err(|_| bad())?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none_or(str::is_empty) {
        return Err(bad());
    }
    Ok(url.to_string())
}

fn strip_bearer(token: &str) -> &str {
    match token.get(..7) {
        Some(p) if p.eq_ignore_ascii_case("bearer ") => token[7..].trim_start(),
        _ => token,
    }
}

fn validate_headers(
    param: &str,
    headers: Option<&Map<String, Value>>,
    has_authorization: bool,
) -> Result<Vec<(String, String)>, FieldError> {
    let Some(headers) = headers else {
        return Ok(Vec::new());
    };
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(headers.len());
    for (name, value) in headers {
        let at = format!("{param}.{name}");
        let Value::String(value) = value else {
            return Err(FieldError::new(
                at.clone(),
                format!("Invalid '{at}': header values must be strings."),
            ));
        };
        let Ok(parsed) = HeaderName::from_bytes(name.as_bytes()) else {
            return Err(FieldError::invalid_value(
                at.clone(),
                format!("Invalid '{param}': '{name}' is not a valid HTTP header name."),
            ));
        };
        let lower = parsed.as_str();
        if RESERVED_HEADERS.contains(&lower) {
            return Err(FieldError::invalid_value(
                at,
                format!(
                    "Invalid '{param}': the header '{name}' is set by the MCP transport and cannot be given."
                ),
            ));
        }
        if lower == "authorization" && has_authorization {
            return Err(FieldError::invalid_value(
                at,
                format!(
                    "Invalid '{param}': 'authorization' is given both as a field and in 'headers'; give it once."
                ),
            ));
        }
        if HeaderValue::from_str(value).is_err() {
            return Err(FieldError::invalid_value(
                at,
                format!(
                    "Invalid '{param}': the value of '{name}' must be printable ASCII with no line breaks."
                ),
            ));
        }
        if !seen.insert(lower.to_string()) {
            return Err(FieldError::invalid_value(
                at,
                format!("Invalid '{param}': the header '{name}' is given more than once."),
            ));
        }
        out.push((name.clone(), value.clone()));
    }
    Ok(out)
}

fn string_list(param: &str, items: &[Value]) -> Result<Vec<String>, FieldError> {
    items
        .iter()
        .enumerate()
        .map(|(j, v)| match v {
            Value::String(s) => Ok(s.clone()),
            _ => Err(FieldError::new(
                format!("{param}[{j}]"),
                format!("Invalid '{param}[{j}]': expected a string."),
            )),
        })
        .collect()
}

/// `{tool_names?: [string], read_only?: bool}`, nothing else.
fn filter_object(param: &str, obj: &Map<String, Value>) -> Result<ToolFilter, FieldError> {
    let mut filter = ToolFilter::default();
    for (key, value) in obj {
        let at = format!("{param}.{key}");
        match (key.as_str(), value) {
            (_, Value::Null) if key == "tool_names" || key == "read_only" => {}
            ("tool_names", Value::Array(items)) => {
                filter.tool_names = Some(string_list(&at, items)?)
            }
            ("tool_names", _) => {
                return Err(FieldError::new(
                    at.clone(),
                    format!("Invalid '{at}': expected a list of tool names."),
                ));
            }
            ("read_only", Value::Bool(b)) => filter.read_only = Some(*b),
            ("read_only", _) => {
                return Err(FieldError::new(
                    at.clone(),
                    format!("Invalid '{at}': expected a boolean."),
                ));
            }
            _ => return Err(FieldError::unknown(at)),
        }
    }
    Ok(filter)
}

fn validate_approval(
    param: &str,
    value: Option<&Value>,
    default: Approval,
) -> Result<ApprovalPolicy, FieldError> {
    let bad = || {
        FieldError::invalid_value(
            param,
            format!(
                "Invalid '{param}': expected 'always', 'never', or an object with 'always' and/or 'never' tool filters."
            ),
        )
    };
    match value {
        None | Some(Value::Null) => Ok(match default {
            Approval::Always => ApprovalPolicy::Always,
            Approval::Never => ApprovalPolicy::Never,
        }),
        Some(Value::String(s)) => match s.as_str() {
            "always" => Ok(ApprovalPolicy::Always),
            "never" => Ok(ApprovalPolicy::Never),
            _ => Err(bad()),
        },
        Some(Value::Object(obj)) => {
            let mut always = None;
            let mut never = None;
            for (key, value) in obj {
                let at = format!("{param}.{key}");
                let side = match value {
                    Value::Null => None,
                    Value::Object(f) => Some(filter_object(&at, f)?),
                    _ => {
                        return Err(FieldError::new(
                            at.clone(),
                            format!(
                                "Invalid '{at}': expected an object with 'tool_names' and/or 'read_only'."
                            ),
                        ));
                    }
                };
                match key.as_str() {
                    "always" => always = side,
                    "never" => never = side,
                    _ => return Err(FieldError::unknown(at)),
                }
            }
            Ok(ApprovalPolicy::Filter {
                always,
                never,
                otherwise: default,
            })
        }
        Some(_) => Err(bad()),
    }
}
