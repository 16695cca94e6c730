//! The Response object and its output items, exactly as OpenAI's SDKs and the Open Responses
//! schema expect them (every field present on every Response; see PROTOCOL §2.5, §4.4).

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ResponseStatus {
    Queued,
    InProgress,
    Completed,
    Incomplete,
    Failed,
    Cancelled,
}

impl ResponseStatus {
    pub fn is_terminal(self) -> bool {
        !matches!(self, ResponseStatus::Queued | ResponseStatus::InProgress)
    }
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ItemStatus {
    InProgress,
    Completed,
    Incomplete,
    Calling,
    Failed,
}

/// `response.error`: set on failed responses.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ResponseError {
    pub code: String,
    pub message: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct IncompleteDetails {
    pub reason: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct InputTokensDetails {
    pub cached_tokens: u64,
    #[serde(default)]
    pub cache_write_tokens: u64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct OutputTokensDetails {
    pub reasoning_tokens: u64,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Usage {
    pub input_tokens: u64,
    pub input_tokens_details: InputTokensDetails,
    pub output_tokens: u64,
    pub output_tokens_details: OutputTokensDetails,
    pub total_tokens: u64,
}

impl Usage {
    /// Sums another model turn's usage into this one (saturating: an upstream reporting absurd
    /// counts must not overflow the relay).
    pub fn add(&mut self, other: &Usage) {
        let sum = |a: &mut u64, b: u64| *a = a.saturating_add(b);
        sum(&mut self.input_tokens, other.input_tokens);
        sum(
            &mut self.input_tokens_details.cached_tokens,
            other.input_tokens_details.cached_tokens,
        );
        sum(
            &mut self.input_tokens_details.cache_write_tokens,
            other.input_tokens_details.cache_write_tokens,
        );
        sum(&mut self.output_tokens, other.output_tokens);
        sum(
            &mut self.output_tokens_details.reasoning_tokens,
            other.output_tokens_details.reasoning_tokens,
        );
        sum(&mut self.total_tokens, other.total_tokens);
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ReasoningEcho {
    pub effort: Option<String>,
    pub summary: Option<String>,
    /// `reasoning.context` and `reasoning.mode`, echoed when the request gave them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
}

/// The Response object. Serialized with every key present, nulls included.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Response {
    pub id: String,
    pub object: String,
    pub created_at: i64,
    pub completed_at: Option<i64>,
    pub status: ResponseStatus,
    pub background: bool,
    pub error: Option<ResponseError>,
    pub incomplete_details: Option<IncompleteDetails>,
    pub instructions: Option<String>,
    pub max_output_tokens: Option<u64>,
    pub max_tool_calls: Option<u64>,
    pub model: String,
    pub output: Vec<OutputItem>,
    pub parallel_tool_calls: bool,
    pub previous_response_id: Option<String>,
    pub reasoning: ReasoningEcho,
    pub store: bool,
    pub temperature: f64,
    pub top_p: f64,
    pub presence_penalty: f64,
    pub frequency_penalty: f64,
    pub top_logprobs: u32,
    pub text: Value,
    pub tool_choice: Value,
    pub tools: Vec<Value>,
    pub truncation: String,
    pub usage: Option<Usage>,
    pub user: Option<String>,
    pub metadata: Map<String, Value>,
    pub service_tier: String,
    pub safety_identifier: Option<String>,
    pub prompt_cache_key: Option<String>,
    pub prompt_cache_retention: Option<String>,
    /// The conversation the response belongs to (`conversation` of the request).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation: Option<ConversationRef>,
}

impl Response {
    /// An `in_progress` Response with no output and OpenAI's defaults in every echo field: what
    /// a run of a request that sets nothing starts as (for tests, fuzz targets and tools that
    /// feed the emitter without a request).
    pub fn in_progress(id: String, model: String, created_at: i64) -> Response {
        Response {
            id,
            object: "response".into(),
            created_at,
            completed_at: None,
            status: ResponseStatus::InProgress,
            background: false,
            error: None,
            incomplete_details: None,
            instructions: None,
            max_output_tokens: None,
            max_tool_calls: None,
            model,
            output: Vec::new(),
            parallel_tool_calls: true,
            previous_response_id: None,
            reasoning: ReasoningEcho::default(),
            store: false,
            temperature: 1.0,
            top_p: 1.0,
            presence_penalty: 0.0,
            frequency_penalty: 0.0,
            top_logprobs: 0,
            text: serde_json::json!({"format": {"type": "text"}}),
            tool_choice: serde_json::json!("auto"),
            tools: Vec::new(),
            truncation: "disabled".into(),
            usage: None,
            user: None,
            metadata: Map::new(),
            service_tier: "default".into(),
            safety_identifier: None,
            prompt_cache_key: None,
            prompt_cache_retention: None,
            conversation: None,
        }
    }
}

/// A part of a message or reasoning item's `content`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentPart {
    OutputText {
        text: String,
        annotations: Vec<Value>,
        logprobs: Vec<Value>,
    },
    Refusal {
        refusal: String,
    },
    ReasoningText {
        text: String,
    },
}

impl ContentPart {
    pub fn output_text(text: impl Into<String>) -> Self {
        ContentPart::OutputText {
            text: text.into(),
            annotations: Vec::new(),
            logprobs: Vec::new(),
        }
    }

    /// The text this part carries, whatever its kind.
    pub fn text_mut(&mut self) -> &mut String {
        match self {
            ContentPart::OutputText { text, .. } | ContentPart::ReasoningText { text } => text,
            ContentPart::Refusal { refusal } => refusal,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SummaryText {
    #[serde(rename = "type")]
    pub kind: String,
    pub text: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct MessageItem {
    pub id: String,
    pub status: ItemStatus,
    pub role: String,
    pub content: Vec<ContentPart>,
    /// What an assistant message is (gpt-5.x labels its messages): given by a Responses
    /// upstream, kept, and sent back with the message in later turns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
}

/// An assistant message's `phase`: intermediate commentary or the final answer. Clients are
/// asked to resend it on every assistant message they send back as history.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Commentary,
    FinalAnswer,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct FunctionCallItem {
    pub id: String,
    pub call_id: String,
    pub name: String,
    pub arguments: String,
    pub status: ItemStatus,
    /// The `namespace` tool the function belongs to (its `name` is the function's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// A call of a `custom` tool: the model's free-form `input`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CustomToolCallItem {
    pub id: String,
    pub call_id: String,
    pub name: String,
    pub input: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default = "completed")]
    pub status: ItemStatus,
}

/// A call of a built-in client tool (`local_shell_call`, `shell_call`, `apply_patch_call`,
/// `computer_call`): its kind-specific fields (`action`, `operation`, `pending_safety_checks`)
/// as the relay built them from the model's arguments.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ClientCallItem {
    pub id: String,
    pub call_id: String,
    pub status: ItemStatus,
    #[serde(flatten)]
    pub fields: Map<String, Value>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ReasoningItem {
    pub id: String,
    pub summary: Vec<SummaryText>,
    #[serde(default)]
    pub content: Vec<ContentPart>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted_content: Option<String>,
    pub status: ItemStatus,
}

/// A `reasoning` item as a client may send it back in `input` (status optional).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ReasoningItemInput {
    pub id: String,
    #[serde(default)]
    pub summary: Vec<SummaryText>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Vec<ContentPart>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encrypted_content: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ItemStatus>,
}

/// One tool of an `mcp_list_tools` item.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct McpToolInfo {
    pub name: String,
    pub description: Option<String>,
    /// Shared, never copied: a run's list item, its events, its fold and the function the
    /// model sees all point at the one schema the server listed.
    pub input_schema: Arc<Value>,
    pub annotations: Option<Value>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct McpListToolsItem {
    pub id: String,
    pub server_label: String,
    /// Shared: the item is cloned into its events, the fold and the next turn's context.
    pub tools: Arc<[McpToolInfo]>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// `mcp_call.error`: one of OpenAI's three structured shapes.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum McpCallError {
    McpProtocolError { code: i64, message: String },
    McpToolExecutionError { content: Value },
    HttpError { code: u16, message: String },
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct McpCallItem {
    pub id: String,
    pub server_label: String,
    pub name: String,
    pub arguments: String,
    pub output: Option<String>,
    pub error: Option<McpCallError>,
    pub status: ItemStatus,
    pub approval_request_id: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct McpApprovalRequestItem {
    pub id: String,
    pub server_label: String,
    pub name: String,
    pub arguments: String,
}

/// A server-side search of deferred tools (`defer_loading`), as the model asked for it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ToolSearchCallItem {
    /// Optional on input (the relay gives one); always set on output.
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub call_id: Option<String>,
    #[serde(default = "server")]
    pub execution: String,
    #[serde(default = "completed")]
    pub status: ItemStatus,
    /// The search arguments, e.g. `{"query": "..."}`.
    #[serde(default)]
    pub arguments: Value,
}

/// What a tool search found: tools grouped per MCP server as namespaces.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ToolSearchOutputItem {
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub call_id: Option<String>,
    #[serde(default = "server")]
    pub execution: String,
    #[serde(default = "completed")]
    pub status: ItemStatus,
    #[serde(default)]
    pub tools: Vec<Value>,
}

fn server() -> String {
    "server".into()
}

fn completed() -> ItemStatus {
    ItemStatus::Completed
}

/// A `compaction` item: the conversation before it, summarized by the model and sealed by the
/// relay (`encrypted_content`); a later request carrying it gives the model the summary.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CompactionItem {
    pub id: String,
    pub encrypted_content: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_by: Option<String>,
}

/// A `web_search_call`: OpenAI's web search, here run through a registered MCP server's tool.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct WebSearchCallItem {
    pub id: String,
    pub status: ItemStatus,
    /// `{type: "search", query}`.
    pub action: Value,
}

/// `{id}` of a conversation, as a Response names it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ConversationRef {
    pub id: String,
}

/// A conversation as the Conversations API shows it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Conversation {
    pub id: String,
    pub object: String,
    pub created_at: i64,
    pub metadata: Map<String, Value>,
}

/// An item of `response.output`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum OutputItem {
    Message(MessageItem),
    FunctionCall(FunctionCallItem),
    Reasoning(ReasoningItem),
    McpListTools(McpListToolsItem),
    McpCall(McpCallItem),
    McpApprovalRequest(McpApprovalRequestItem),
    ToolSearchCall(ToolSearchCallItem),
    ToolSearchOutput(ToolSearchOutputItem),
    CustomToolCall(CustomToolCallItem),
    LocalShellCall(ClientCallItem),
    ShellCall(ClientCallItem),
    ApplyPatchCall(ClientCallItem),
    ComputerCall(ClientCallItem),
    Compaction(CompactionItem),
    WebSearchCall(WebSearchCallItem),
}

impl OutputItem {
    pub fn id(&self) -> &str {
        match self {
            OutputItem::Message(m) => &m.id,
            OutputItem::FunctionCall(f) => &f.id,
            OutputItem::Reasoning(r) => &r.id,
            OutputItem::McpListTools(l) => &l.id,
            OutputItem::McpCall(c) => &c.id,
            OutputItem::McpApprovalRequest(a) => &a.id,
            OutputItem::ToolSearchCall(t) => &t.id,
            OutputItem::ToolSearchOutput(t) => &t.id,
            OutputItem::CustomToolCall(c) => &c.id,
            OutputItem::LocalShellCall(c)
            | OutputItem::ShellCall(c)
            | OutputItem::ApplyPatchCall(c)
            | OutputItem::ComputerCall(c) => &c.id,
            OutputItem::Compaction(c) => &c.id,
            OutputItem::WebSearchCall(w) => &w.id,
        }
    }

    pub fn kind(&self) -> &'static str {
        match self {
            OutputItem::Message(_) => "message",
            OutputItem::FunctionCall(_) => "function_call",
            OutputItem::Reasoning(_) => "reasoning",
            OutputItem::McpListTools(_) => "mcp_list_tools",
            OutputItem::McpCall(_) => "mcp_call",
            OutputItem::McpApprovalRequest(_) => "mcp_approval_request",
            OutputItem::ToolSearchCall(_) => "tool_search_call",
            OutputItem::ToolSearchOutput(_) => "tool_search_output",
            OutputItem::CustomToolCall(_) => "custom_tool_call",
            OutputItem::LocalShellCall(_) => "local_shell_call",
            OutputItem::ShellCall(_) => "shell_call",
            OutputItem::ApplyPatchCall(_) => "apply_patch_call",
            OutputItem::ComputerCall(_) => "computer_call",
            OutputItem::Compaction(_) => "compaction",
            OutputItem::WebSearchCall(_) => "web_search_call",
        }
    }

    /// The item's content parts, for items that have them.
    pub fn content_mut(&mut self) -> Option<&mut Vec<ContentPart>> {
        match self {
            OutputItem::Message(m) => Some(&mut m.content),
            OutputItem::Reasoning(r) => Some(&mut r.content),
            _ => None,
        }
    }
}

impl Response {
    /// The concatenated `output_text` of every message, as the SDKs' `output_text` helper does.
    pub fn output_text(&self) -> String {
        let mut out = String::new();
        for item in &self.output {
            if let OutputItem::Message(m) = item {
                for part in &m.content {
                    if let ContentPart::OutputText { text, .. } = part {
                        out.push_str(text);
                    }
                }
            }
        }
        out
    }
}
