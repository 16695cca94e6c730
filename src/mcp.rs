//! The relay's MCP client layer: validated `mcp` tool specs, model-facing tool names, a pool of
//! Streamable HTTP sessions (list tools, call tools, errors mapped to OpenAI's shapes), and the
//! text a tool result becomes for the model. The rest of the crate never names rmcp types.
//!
//! - [`specs`] validates the request's `mcp` tools into [`ServerSpec`]s.
//! - [`model_names`] gives every MCP tool a unique, upstream-valid function name.
//! - [`Pool`] lists and calls tools; sessions are shared across requests.
//! - [`result_text`], [`result_images`], [`error_text`] and [`bounded_error`] turn results (and failures) into what the model sees, bounded.

mod errors;
mod http;
mod names;
mod pool;
mod result;
mod sse;
mod tasks;
mod validate;

pub use names::model_names;
pub use pool::{CallOutcome, ListError, ListedTool, Pool, PoolConfig, ToolResult};
pub use result::{bounded_error, error_text, result_images, result_text};
pub use validate::{specs, specs_with, validate_registered};

/// A filter over a server's tools (`allowed_tools`, or one side of `require_approval`).
///
/// A tool matches when (`tool_names` is absent or contains its name) and (`read_only` is absent or
/// equals its `readOnlyHint`, a missing hint counting as false). The default filter matches
/// every tool.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolFilter {
    pub tool_names: Option<Vec<String>>,
    pub read_only: Option<bool>,
}

impl ToolFilter {
    /// Whether the tool `name` (with its `readOnlyHint`) passes this filter.
    pub fn allows(&self, name: &str, read_only: bool) -> bool {
        self.tool_names
            .as_ref()
            .is_none_or(|names| names.iter().any(|n| n == name))
            && self.read_only.is_none_or(|r| r == read_only)
    }

    /// Whether this filter lets every tool through.
    pub fn is_all(&self) -> bool {
        self.tool_names.is_none() && self.read_only.is_none()
    }
}

/// MCP servers the operator registered (`[mcp_servers.LABEL]`), each as the `mcp` tool a request
/// would send for it (secrets included: they never leave the relay; `Debug` shows labels only)
/// and the transport the operator chose.
#[derive(Clone, Default)]
pub struct Registered(pub std::collections::BTreeMap<String, RegisteredServer>);

/// One `[mcp_servers.LABEL]`.
#[derive(Clone)]
pub struct RegisteredServer {
    pub tool: crate::api::request::McpToolParam,
    pub transport: Transport,
}

/// How the relay talks to an MCP server.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Transport {
    /// Streamable HTTP, falling back to the legacy HTTP+SSE transport when the server answers a
    /// POST with 404 or 405, or when the URL's path ends in `/sse`.
    #[default]
    Auto,
    /// Streamable HTTP only.
    StreamableHttp,
    /// The legacy HTTP+SSE transport (protocol 2024-11-05): a GET opens an event stream whose
    /// `endpoint` event names where to POST.
    Sse,
}

impl Transport {
    /// As `transport` says it in the config file and `GET /v1/mcp/servers`.
    pub fn as_str(self) -> &'static str {
        match self {
            Transport::Auto => "auto",
            Transport::StreamableHttp => "streamable-http",
            Transport::Sse => "sse",
        }
    }
}

impl std::fmt::Debug for Registered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.0.keys()).finish()
    }
}

/// The relay's default when a request's `mcp` tool has no `require_approval` (OpenAI: `Always`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Approval {
    #[default]
    Always,
    Never,
}

/// `require_approval` of one server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApprovalPolicy {
    Always,
    Never,
    /// A registered server's policy and a request's: approval when either asks for it.
    Both(Box<ApprovalPolicy>, Box<ApprovalPolicy>),
    /// `{always?: filter, never?: filter}`; `otherwise` decides tools that match neither side when
    /// both sides or neither are given (the relay's default).
    Filter {
        always: Option<ToolFilter>,
        never: Option<ToolFilter>,
        otherwise: Approval,
    },
}

impl Approval {
    /// As `require_approval` says it.
    pub fn as_str(self) -> &'static str {
        match self {
            Approval::Always => "always",
            Approval::Never => "never",
        }
    }
}

impl ApprovalPolicy {
    /// Whether a call of `tool_name` needs the client's approval (PROTOCOL §1.4 trigger rule):
    /// `always`; or the tool matches `always`; or it does not match `never` (an object with only
    /// `never` means "everything else needs approval", one with only `always` means "everything
    /// else does not").
    pub fn needs_approval(&self, tool_name: &str, read_only: bool) -> bool {
        match self {
            ApprovalPolicy::Both(a, b) => {
                a.needs_approval(tool_name, read_only) || b.needs_approval(tool_name, read_only)
            }
            ApprovalPolicy::Always => true,
            ApprovalPolicy::Never => false,
            ApprovalPolicy::Filter {
                always,
                never,
                otherwise,
            } => {
                if always
                    .as_ref()
                    .is_some_and(|f| f.allows(tool_name, read_only))
                {
                    return true;
                }
                if never
                    .as_ref()
                    .is_some_and(|f| f.allows(tool_name, read_only))
                {
                    return false;
                }
                match (always.is_some(), never.is_some()) {
                    (false, true) => true,
                    (true, false) => false,
                    _ => *otherwise == Approval::Always,
                }
            }
        }
    }
}

/// One validated `mcp` tool of a request. Its `Debug` output hides the secrets.
#[derive(Clone, PartialEq, Eq)]
pub struct ServerSpec {
    pub label: String,
    pub url: String,
    /// The bearer token, without the `Bearer ` prefix.
    pub authorization: Option<String>,
    /// Extra headers, names as given.
    pub headers: Vec<(String, String)>,
    /// `allowed_tools` (the default filter when absent).
    pub allowed: ToolFilter,
    pub approval: ApprovalPolicy,
    pub description: Option<String>,
    pub defer_loading: bool,
    /// A registered server: reached with the operator's network reach (its host may be private),
    /// never shared with a request-declared server's session.
    pub registered: bool,
    pub transport: Transport,
}

impl std::fmt::Debug for ServerSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerSpec")
            .field("label", &self.label)
            .field("url", &crate::redact::mask_url(&self.url))
            .field("authorization", &self.authorization.as_ref().map(|_| "***"))
            .field(
                "headers",
                &self
                    .headers
                    .iter()
                    .map(|(k, _)| k.as_str())
                    .collect::<Vec<_>>(),
            )
            .field("allowed", &self.allowed)
            .field("approval", &self.approval)
            .field("description", &self.description)
            .field("defer_loading", &self.defer_loading)
            .field("registered", &self.registered)
            .field("transport", &self.transport)
            .finish()
    }
}
