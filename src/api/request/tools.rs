//! The tools a request offers (`tools`) and how it constrains them (`tool_choice`), as wire types.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A `function` tool. `allowed_callers`, `defer_loading`, `output_schema` and `async` are
/// accepted (and echoed) but change nothing here: every function is offered from the first turn.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct FunctionTool {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_callers: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub defer_loading: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    #[serde(default, rename = "async", skip_serializing_if = "Option::is_none")]
    pub is_async: Option<bool>,
}

/// A `custom` tool: the model writes free-form `input` (optionally in a grammar `format`).
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CustomTool {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub format: Option<Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_callers: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub defer_loading: Option<bool>,
    #[serde(default, rename = "async", skip_serializing_if = "Option::is_none")]
    pub is_async: Option<bool>,
}

/// One tool of a `namespace`.
#[derive(Debug, Clone, PartialEq)]
pub enum NamespacedTool {
    Function(FunctionTool),
    Custom(CustomTool),
}

/// A `namespace` tool: functions (and custom tools) grouped under one name; a call carries the
/// `namespace` and the tool's own `name`.
#[derive(Debug, Clone, PartialEq)]
pub struct NamespaceTool {
    pub name: String,
    pub description: String,
    pub tools: Vec<NamespacedTool>,
}

/// A client-executed tool with a fixed shape of call (`local_shell`, `shell`, `apply_patch`,
/// `computer`, `computer_use_preview`): offered to the model as a function, its calls handed to
/// the client as the call item OpenAI sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BuiltinTool {
    LocalShell,
    Shell,
    ApplyPatch,
    Computer,
}

/// Server-executed tools the relay cannot run (`web_search`, `file_search`, ...): accepted and
/// echoed, or refused, per `--hosted-tools`; never offered to the model.
pub const HOSTED_TOOL_TYPES: &[&str] = &[
    "web_search",
    "web_search_2025_08_26",
    "web_search_preview",
    "web_search_preview_2025_03_11",
    "file_search",
    "code_interpreter",
    "image_generation",
    "programmatic_tool_calling",
];

/// An `mcp` tool as sent (validated further by the MCP layer).
#[derive(Debug, Clone, Deserialize, Default, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct McpToolParam {
    pub server_label: Option<String>,
    pub server_url: Option<String>,
    pub connector_id: Option<String>,
    pub tunnel_id: Option<String>,
    pub authorization: Option<String>,
    pub headers: Option<Map<String, Value>>,
    pub allowed_tools: Option<Value>,
    pub require_approval: Option<Value>,
    pub server_description: Option<String>,
    pub defer_loading: Option<bool>,
    pub allowed_callers: Option<Vec<String>>,
}

/// A `tool_search` tool: server-side search over deferred (`defer_loading`) MCP tools.
#[derive(Debug, Clone, Deserialize, Default, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ToolSearchParam {
    pub execution: Option<String>,
    pub description: Option<String>,
    pub parameters: Option<Value>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum ToolParam {
    Function(FunctionTool),
    Mcp(McpToolParam),
    /// Server-side (`execution: "server"`, the default) or client-side tool search.
    ToolSearch(ToolSearchParam),
    Custom(CustomTool),
    Namespace(NamespaceTool),
    /// A built-in client tool and the tool object as sent (echoed as is).
    Builtin(BuiltinTool, Map<String, Value>),
    /// A hosted tool the relay cannot run: its type and the tool object as sent.
    Hosted(String, Map<String, Value>),
}

impl ToolParam {
    /// Whether this is a `tool_search` the client runs (`execution: "client"`).
    pub fn is_client_search(&self) -> bool {
        matches!(self, ToolParam::ToolSearch(t) if t.execution.as_deref() == Some("client"))
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum ToolChoice {
    Auto,
    None,
    Required,
    Function {
        name: String,
    },
    Mcp {
        server_label: String,
        name: Option<String>,
    },
    Custom {
        name: String,
    },
    /// `{type: "apply_patch" | "shell" | "computer" | ...}`: that built-in client tool.
    Builtin(BuiltinTool),
    /// `allowed_tools`: only these tools (as `{type, name}` references), `required` or not.
    Allowed {
        required: bool,
        tools: Vec<Value>,
    },
}
