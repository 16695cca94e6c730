//! `POST /v1/responses` request body: parsed strictly (unknown fields rejected) and validated,
//! every rejection naming the offending `param` (e.g. `input[2].content[0].image_url`).

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

use super::error::FieldError;

/// The create request as the client sent it, after structural parsing.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct CreateResponse {
    pub model: Option<String>,
    pub input: Option<Value>,
    pub instructions: Option<String>,
    pub tools: Option<Vec<Value>>,
    pub tool_choice: Option<Value>,
    pub parallel_tool_calls: Option<bool>,
    pub max_output_tokens: Option<i64>,
    pub max_tool_calls: Option<i64>,
    pub max_steps: Option<i64>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub top_logprobs: Option<i64>,
    pub metadata: Option<Map<String, Value>>,
    pub user: Option<String>,
    pub store: Option<bool>,
    pub background: Option<bool>,
    pub previous_response_id: Option<String>,
    pub stream: Option<bool>,
    pub stream_options: Option<StreamOptions>,
    pub text: Option<TextParam>,
    pub reasoning: Option<ReasoningParam>,
    pub truncation: Option<String>,
    pub include: Option<Vec<String>>,
    pub service_tier: Option<String>,
    pub safety_identifier: Option<String>,
    pub prompt_cache_key: Option<String>,
    pub prompt_cache_retention: Option<String>,
    pub prompt_cache_options: Option<Map<String, Value>>,
    pub access_programs: Option<Map<String, Value>>,
    pub background_options: Option<Map<String, Value>>,
    pub context_management: Option<Value>,
    pub conversation: Option<Value>,
    pub image: Option<Map<String, Value>>,
    pub moderation: Option<Value>,
    pub prompt: Option<Value>,
    /// Not in the SDK's types, but accepted by OpenAI and sent by Codex on every request.
    pub client_metadata: Option<Map<String, Value>>,
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct StreamOptions {
    pub include_obfuscation: Option<bool>,
}

#[derive(Debug, Clone, Deserialize, Serialize, Default)]
#[serde(deny_unknown_fields)]
pub struct TextParam {
    pub format: Option<TextFormat>,
    pub verbosity: Option<String>,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum TextFormat {
    Text,
    JsonObject,
    JsonSchema {
        name: String,
        schema: Value,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        description: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        strict: Option<bool>,
    },
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ReasoningParam {
    pub effort: Option<String>,
    pub summary: Option<String>,
    pub generate_summary: Option<String>,
}

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

/// A message's role.
#[derive(Debug, Clone, Copy, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    User,
    System,
    Developer,
    Assistant,
}

/// One part of an input message's content.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum InputPart {
    InputText {
        text: String,
    },
    InputImage {
        #[serde(default)]
        image_url: Option<String>,
        #[serde(default)]
        file_id: Option<String>,
        #[serde(default)]
        detail: Option<String>,
    },
    InputFile {
        #[serde(default)]
        file_data: Option<String>,
        #[serde(default)]
        file_id: Option<String>,
        #[serde(default)]
        filename: Option<String>,
        #[serde(default)]
        file_url: Option<String>,
    },
    OutputText {
        text: String,
        // Absent, never `null`: strict Responses upstreams (openai-python's types) reject null.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        annotations: Option<Vec<Value>>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        logprobs: Option<Vec<Value>>,
    },
    Refusal {
        refusal: String,
    },
}

/// A message's content: a plain string or a list of parts.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(untagged)]
pub enum MessageContent {
    Text(String),
    Parts(Vec<InputPart>),
}

impl<'de> Deserialize<'de> for MessageContent {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        match Value::deserialize(d)? {
            Value::String(s) => Ok(MessageContent::Text(s)),
            Value::Array(parts) => {
                let mut out = Vec::with_capacity(parts.len());
                for (i, p) in parts.into_iter().enumerate() {
                    out.push(
                        serde_json::from_value(p)
                            .map_err(|e| D::Error::custom(format!("content[{i}]: {e}")))?,
                    );
                }
                Ok(MessageContent::Parts(out))
            }
            _ => Err(D::Error::custom(
                "content must be a string or an array of content parts",
            )),
        }
    }
}

impl MessageContent {
    /// The plain text of the message (text parts joined), for logs and replay summaries.
    pub fn text(&self) -> String {
        match self {
            MessageContent::Text(s) => s.clone(),
            MessageContent::Parts(parts) => parts
                .iter()
                .filter_map(|p| match p {
                    InputPart::InputText { text } | InputPart::OutputText { text, .. } => {
                        Some(text.as_str())
                    }
                    InputPart::Refusal { refusal } => Some(refusal.as_str()),
                    _ => None,
                })
                .collect::<Vec<_>>()
                .join(""),
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct InputMessage {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    pub role: Role,
    pub content: MessageContent,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// Sent by Codex on its input messages and tolerated by OpenAI; read, never kept or sent on.
    #[serde(default, skip_serializing)]
    pub internal_chat_message_metadata_passthrough: Option<Value>,
}

/// A `function_call_output.output`: a string or a list of content parts.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(untagged)]
pub enum ToolOutput {
    Text(String),
    Parts(Vec<Value>),
}

impl ToolOutput {
    pub fn text(&self) -> String {
        match self {
            ToolOutput::Text(s) => s.clone(),
            ToolOutput::Parts(parts) => parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join(""),
        }
    }
}

/// The input items that carry a [`ToolItem`] (client and hosted tools' items), as one pattern.
macro_rules! tool_items {
    ($t:ident) => {
        InputItem::CustomToolCall($t)
            | InputItem::CustomToolCallOutput($t)
            | InputItem::LocalShellCall($t)
            | InputItem::LocalShellCallOutput($t)
            | InputItem::ShellCall($t)
            | InputItem::ShellCallOutput($t)
            | InputItem::ApplyPatchCall($t)
            | InputItem::ApplyPatchCallOutput($t)
            | InputItem::ComputerCall($t)
            | InputItem::ComputerCallOutput($t)
            | InputItem::FileSearchCall($t)
            | InputItem::WebSearchCall($t)
            | InputItem::ImageGenerationCall($t)
            | InputItem::CodeInterpreterCall($t)
            | InputItem::Program($t)
            | InputItem::ProgramOutput($t)
            | InputItem::AdditionalTools($t)
            | InputItem::ConfigurationUpdate($t)
            | InputItem::CompactionTrigger($t)
    };
}

/// One item of `input` (and, with server-assigned ids, of a stored conversation).
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum InputItem {
    Message(InputMessage),
    FunctionCall(InputFunctionCall),
    FunctionCallOutput(InputFunctionCallOutput),
    Reasoning(super::response::ReasoningItemInput),
    ItemReference(ItemReference),
    McpListTools(super::response::McpListToolsItem),
    McpCall(InputMcpCall),
    McpApprovalRequest(super::response::McpApprovalRequestItem),
    McpApprovalResponse(McpApprovalResponse),
    ToolSearchCall(super::response::ToolSearchCallItem),
    ToolSearchOutput(super::response::ToolSearchOutputItem),
    CustomToolCall(ToolItem),
    CustomToolCallOutput(ToolItem),
    LocalShellCall(ToolItem),
    LocalShellCallOutput(ToolItem),
    ShellCall(ToolItem),
    ShellCallOutput(ToolItem),
    ApplyPatchCall(ToolItem),
    ApplyPatchCallOutput(ToolItem),
    ComputerCall(ToolItem),
    ComputerCallOutput(ToolItem),
    /// Calls of hosted tools (from a Response of OpenAI's): context the model cannot use here.
    FileSearchCall(ToolItem),
    WebSearchCall(ToolItem),
    ImageGenerationCall(ToolItem),
    CodeInterpreterCall(ToolItem),
    Program(ToolItem),
    ProgramOutput(ToolItem),
    /// Tools added mid-conversation (`role: developer`, `tools`): offered from then on.
    AdditionalTools(ToolItem),
    /// A change of `reasoning` or `text` mid-conversation.
    ConfigurationUpdate(ToolItem),
    /// A conversation compacted by the relay: opened (and checked) when a request carries it.
    Compaction(CompactionInput),
    /// As the last input item: the response compacts the conversation instead of answering.
    CompactionTrigger(ToolItem),
}

/// A `compaction` item sent back: its sealed summary.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
pub struct CompactionInput {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    pub encrypted_content: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_by: Option<String>,
}

/// An item of a client-executed or hosted tool as sent back in `input`: the fields the relay
/// reads (`id`, `call_id`, `status`) and the rest of the item as sent (its `action`,
/// `operation`, `input`, `output`, ...), kept and given back as is.
#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
pub struct ToolItem {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    #[serde(flatten)]
    pub fields: Map<String, Value>,
}

impl InputItem {
    /// A function call and its output, as the model is shown a call the relay ran.
    pub fn call_with_output(
        call_id: String,
        name: String,
        arguments: String,
        output: String,
    ) -> [InputItem; 2] {
        [
            InputItem::FunctionCall(InputFunctionCall {
                id: None,
                call_id: call_id.clone(),
                name,
                arguments,
                status: None,
                namespace: None,
                caller: None,
                is_async: None,
            }),
            InputItem::FunctionCallOutput(InputFunctionCallOutput {
                id: None,
                call_id,
                output: ToolOutput::Text(output),
                status: None,
                caller: None,
            }),
        ]
    }

    /// The item's [`ToolItem`], for the client and hosted tools' items.
    pub fn tool_item_mut(&mut self) -> Option<&mut ToolItem> {
        match self {
            tool_items!(t) => Some(t),
            _ => None,
        }
    }
}

impl ToolItem {
    /// A string field of the item (`name`, `input`, `namespace`, ...).
    pub fn str(&self, key: &str) -> Option<&str> {
        self.fields.get(key).and_then(Value::as_str)
    }
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct InputFunctionCall {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    pub call_id: String,
    pub name: String,
    pub arguments: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// The `namespace` tool the function belongs to, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caller: Option<Value>,
    #[serde(default, rename = "async", skip_serializing_if = "Option::is_none")]
    pub is_async: Option<bool>,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct InputFunctionCallOutput {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    pub call_id: String,
    pub output: ToolOutput,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub caller: Option<Value>,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ItemReference {
    pub id: String,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
pub struct InputMcpCall {
    pub id: String,
    pub server_label: String,
    pub name: String,
    pub arguments: String,
    #[serde(default)]
    pub output: Option<String>,
    #[serde(default)]
    pub error: Option<Value>,
    #[serde(default)]
    pub status: Option<String>,
    #[serde(default)]
    pub approval_request_id: Option<String>,
}

#[derive(Debug, Clone, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct McpApprovalResponse {
    #[serde(default)]
    pub id: Option<String>,
    pub approval_request_id: String,
    pub approve: bool,
    #[serde(default)]
    pub reason: Option<String>,
}

impl InputItem {
    /// The item as `GET /v1/responses/{id}/input_items` lists it, in OpenAI's shape: a message's
    /// content is always a list of parts (a string becomes one `input_text` part, or one
    /// `output_text` part for the assistant), and messages, calls and call outputs carry a
    /// `status` (`completed` where the client gave none). Kept as sent otherwise.
    pub fn listed(&self) -> InputItem {
        let done = |s: &Option<String>| s.clone().or_else(|| Some("completed".into()));
        match self {
            InputItem::Message(m) => {
                let content = match &m.content {
                    MessageContent::Text(text) if m.role == Role::Assistant => {
                        MessageContent::Parts(vec![InputPart::OutputText {
                            text: text.clone(),
                            annotations: Some(Vec::new()),
                            logprobs: None,
                        }])
                    }
                    MessageContent::Text(text) => {
                        MessageContent::Parts(vec![InputPart::InputText { text: text.clone() }])
                    }
                    parts => parts.clone(),
                };
                InputItem::Message(InputMessage {
                    content,
                    status: done(&m.status),
                    ..m.clone()
                })
            }
            InputItem::FunctionCall(f) => InputItem::FunctionCall(InputFunctionCall {
                status: done(&f.status),
                ..f.clone()
            }),
            InputItem::FunctionCallOutput(f) => {
                InputItem::FunctionCallOutput(InputFunctionCallOutput {
                    status: done(&f.status),
                    ..f.clone()
                })
            }
            other => other.clone(),
        }
    }

    pub fn id(&self) -> Option<&str> {
        match self {
            InputItem::Message(m) => m.id.as_deref(),
            InputItem::FunctionCall(f) => f.id.as_deref(),
            InputItem::FunctionCallOutput(f) => f.id.as_deref(),
            InputItem::Reasoning(r) => Some(&r.id),
            InputItem::ItemReference(r) => Some(&r.id),
            InputItem::McpListTools(l) => Some(&l.id),
            InputItem::McpCall(c) => Some(&c.id),
            InputItem::McpApprovalRequest(a) => Some(&a.id),
            InputItem::McpApprovalResponse(a) => a.id.as_deref(),
            InputItem::ToolSearchCall(t) => Some(&t.id),
            InputItem::ToolSearchOutput(t) => Some(&t.id),
            tool_items!(t) => t.id.as_deref(),
            InputItem::Compaction(c) => c.id.as_deref(),
        }
    }
}

/// A validated create request: defaults applied, every field checked.
#[derive(Debug, Clone)]
pub struct CreateRequest {
    pub model: String,
    pub input: Vec<InputItem>,
    pub instructions: Option<String>,
    pub tools: Vec<ToolParam>,
    /// `tool_choice` exactly as sent, for the echo (`"auto"` when absent).
    pub tool_choice_echo: Value,
    pub tool_choice: ToolChoice,
    pub parallel_tool_calls: bool,
    pub max_output_tokens: Option<u64>,
    pub max_tool_calls: Option<u64>,
    pub max_steps: Option<u64>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub metadata: Map<String, Value>,
    pub user: Option<String>,
    pub store: bool,
    pub background: bool,
    pub previous_response_id: Option<String>,
    pub stream: bool,
    pub text_format: Option<TextFormat>,
    pub verbosity: Option<String>,
    pub reasoning_effort: Option<String>,
    pub reasoning_summary: Option<String>,
    pub truncation: String,
    pub safety_identifier: Option<String>,
    pub prompt_cache_key: Option<String>,
    pub prompt_cache_retention: Option<String>,
    /// Forwarded to a Responses upstream as sent.
    pub prompt_cache_options: Option<Map<String, Value>>,
    /// `include` as sent (validated).
    pub include: Vec<String>,
    /// Hints accepted and echoed: they change nothing here.
    pub client_metadata: Option<Map<String, Value>>,
    /// The conversation whose items are the context, and to which the response's are added.
    pub conversation: Option<String>,
    /// `context_management` compaction: compact before a model turn whose context passes this
    /// many tokens.
    pub compact_threshold: Option<u64>,
    /// What the relay itself sets for the request (never the client's body).
    pub relay: RelaySet,
    pub background_options: Option<Map<String, Value>>,
    pub service_tier: Option<String>,
}

/// The parts of a request the relay sets, not the client: from its key, or from the door it
/// came in by (a WebSocket connection).
#[derive(Debug, Clone)]
pub struct RelaySet {
    /// The registered MCP servers the request's key may use (`None`: every one).
    pub mcp_servers_allowed: Option<Vec<String>>,
    /// `false` (WebSocket mode's `generate: false`): the response records its input and ends
    /// `completed` with no output, the model not asked.
    pub generate: bool,
    /// The history `previous_response_id` stands for, when the caller already holds it (a
    /// WebSocket connection remembers its responses, `store: false` ones too).
    pub prior_history: Option<std::sync::Arc<Vec<InputItem>>>,
}

impl Default for RelaySet {
    fn default() -> Self {
        RelaySet {
            mcp_servers_allowed: None,
            generate: true,
            prior_history: None,
        }
    }
}

const INCLUDE_VALUES: &[&str] = &[
    "file_search_call.results",
    "web_search_call.results",
    "web_search_call.action.sources",
    "message.input_image.image_url",
    "computer_call_output.output.image_url",
    "code_interpreter_call.outputs",
    "reasoning.encrypted_content",
    "message.output_text.logprobs",
];

const EFFORTS: &[&str] = &["none", "minimal", "low", "medium", "high", "xhigh"];

/// Parses and validates a create body. The error names the field at fault.
pub fn parse_create(body: &[u8]) -> Result<CreateRequest, FieldError> {
    let value: Value = serde_json::from_slice(body).map_err(|e| FieldError {
        param: String::new(),
        message: format!(
            "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP library correctly. The OpenAI API expects a JSON payload.) Parser error: {e}"
        ),
        code: None,
    })?;
    parse_create_value(value)
}

/// [`parse_create`] of a body already read as JSON (a WebSocket `response.create`, its own
/// fields taken out).
pub fn parse_create_value(value: Value) -> Result<CreateRequest, FieldError> {
    if !value.is_object() {
        return Err(FieldError::new(
            "",
            "The request body must be a JSON object.",
        ));
    }
    let raw: CreateResponse = from_value_at(value, "")?;
    validate(raw)
}

/// Deserializes `value`, turning a serde error into a [`FieldError`] whose `param` is the path of
/// the bad field below `base`.
pub fn from_value_at<T: serde::de::DeserializeOwned>(
    value: Value,
    base: &str,
) -> Result<T, FieldError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let mut param = join_path(base, if path == "." { "" } else { &path });
        let mut msg = e.inner().to_string();
        // Errors from inside a message's parts say where: `content[N]: ...`.
        if let Some((at, rest)) = msg.split_once(": ")
            && at.starts_with("content[")
            && at.ends_with(']')
        {
            param = join_path(&param, at);
            msg = rest.to_string();
        }
        if let Some(rest) = msg.strip_prefix("unknown field `") {
            // The path already ends in the unknown field's name, except inside buffered
            // (internally tagged) content, where it stops at the enclosing item.
            let name = rest.split('`').next().unwrap_or_default();
            if param != name && !param.ends_with(&format!(".{name}")) {
                param = join_path(&param, name);
            }
            return FieldError::unknown(param);
        }
        if let Some(rest) = msg.strip_prefix("missing field `") {
            let name = rest.split('`').next().unwrap_or_default();
            return FieldError::missing(join_path(&param, name));
        }
        if msg.starts_with("unknown variant `") {
            param = join_path(&param, "type");
            let got = msg
                .trim_start_matches("unknown variant `")
                .split('`')
                .next()
                .unwrap_or_default();
            let expected = msg
                .split("expected ")
                .nth(1)
                .unwrap_or("")
                .trim_end_matches('.');
            return FieldError::invalid_value(
                param.clone(),
                format!("Invalid value: '{got}'. Supported values for '{param}' are: {expected}."),
            );
        }
        let shown = if param.is_empty() {
            "body".to_string()
        } else {
            param.clone()
        };
        FieldError {
            code: Some("invalid_type"),
            ..FieldError::new(param, format!("Invalid '{shown}': {msg}"))
        }
    })
}

fn join_path(base: &str, rest: &str) -> String {
    match (base.is_empty(), rest.is_empty()) {
        (true, _) => rest.to_string(),
        (_, true) => base.to_string(),
        _ if rest.starts_with('[') => format!("{base}{rest}"),
        _ => format!("{base}.{rest}"),
    }
}

fn validate(raw: CreateResponse) -> Result<CreateRequest, FieldError> {
    let model = match raw.model {
        Some(m) if !m.trim().is_empty() => m,
        _ => return Err(FieldError::missing("model")),
    };
    let input = match raw.input {
        None | Some(Value::Null) if raw.previous_response_id.is_none() => {
            return Err(FieldError::missing("input"));
        }
        None | Some(Value::Null) => Vec::new(),
        Some(v) => parse_input(v)?,
    };
    let tools = parse_tools(raw.tools.unwrap_or_default(), "tools")?;
    let tool_choice_echo = raw
        .tool_choice
        .clone()
        .unwrap_or_else(|| Value::String("auto".into()));
    let tool_choice = parse_tool_choice(raw.tool_choice, &tools)?;
    let range = |name: &str, v: Option<f64>, lo: f64, hi: f64| -> Result<Option<f64>, FieldError> {
        match v {
            Some(x) if !(lo..=hi).contains(&x) || x.is_nan() => Err(FieldError::invalid_value(
                name,
                format!("Invalid '{name}': {x}. Expected a value between {lo} and {hi}."),
            )),
            other => Ok(other),
        }
    };
    let at_least = |name: &str, v: Option<i64>, lo: i64| -> Result<Option<u64>, FieldError> {
        match v {
            Some(x) if x < lo => Err(FieldError::invalid_value(
                name,
                format!(
                    "Invalid '{name}': integer below minimum value. Expected a value >= {lo}, but got {x} instead."
                ),
            )),
            other => Ok(other.map(|x| x as u64)),
        }
    };
    let temperature = range("temperature", raw.temperature, 0.0, 2.0)?;
    let top_p = range("top_p", raw.top_p, 0.0, 1.0)?;
    let max_output_tokens = at_least("max_output_tokens", raw.max_output_tokens, 16)?;
    let max_tool_calls = at_least("max_tool_calls", raw.max_tool_calls, 1)?;
    let max_steps = at_least("max_steps", raw.max_steps, 1)?;
    if let Some(n) = raw.top_logprobs
        && n != 0
    {
        return Err(FieldError::unsupported(
            "top_logprobs",
            "top_logprobs is not supported by this relay; omit it or send 0.",
        ));
    }
    let metadata = parse_metadata(raw.metadata.unwrap_or_default())?;
    let store = raw.store.unwrap_or(true);
    let background = raw.background.unwrap_or(false);
    if background && !store {
        return Err(FieldError::invalid_value(
            "background",
            "Background mode requires 'store' to be true.",
        ));
    }
    if let Some(id) = &raw.previous_response_id
        && id.trim().is_empty()
    {
        return Err(FieldError::invalid_value(
            "previous_response_id",
            "Invalid 'previous_response_id': empty string.",
        ));
    }
    let text = raw.text.unwrap_or_default();
    if let Some(v) = &text.verbosity
        && !["low", "medium", "high"].contains(&v.as_str())
    {
        return Err(FieldError::invalid_value(
            "text.verbosity",
            format!("Invalid value: '{v}'. Supported values are: 'low', 'medium', and 'high'."),
        ));
    }
    if let Some(TextFormat::JsonSchema { name, schema, .. }) = &text.format {
        if !valid_name(name) {
            return Err(FieldError::invalid_value(
                "text.format.name",
                format!(
                    "Invalid 'text.format.name': '{name}'. Expected a string that matches the pattern '^[a-zA-Z0-9_-]{{1,64}}$'."
                ),
            ));
        }
        if !schema.is_object() {
            return Err(FieldError::new(
                "text.format.schema",
                "Invalid 'text.format.schema': expected a JSON Schema object.",
            ));
        }
    }
    let reasoning = raw.reasoning.unwrap_or_default();
    if let Some(e) = &reasoning.effort
        && !EFFORTS.contains(&e.as_str())
    {
        return Err(FieldError::invalid_value(
            "reasoning.effort",
            format!(
                "Invalid value: '{e}'. Supported values are: {}.",
                quoted(EFFORTS)
            ),
        ));
    }
    let summary = reasoning.summary.or(reasoning.generate_summary);
    if let Some(s) = &summary
        && !["auto", "concise", "detailed"].contains(&s.as_str())
    {
        return Err(FieldError::invalid_value(
            "reasoning.summary",
            format!(
                "Invalid value: '{s}'. Supported values are: 'auto', 'concise', and 'detailed'."
            ),
        ));
    }
    let truncation = raw.truncation.unwrap_or_else(|| "disabled".into());
    if !["disabled", "auto"].contains(&truncation.as_str()) {
        return Err(FieldError::invalid_value(
            "truncation",
            format!("Invalid value: '{truncation}'. Supported values are: 'auto' and 'disabled'."),
        ));
    }
    for (i, inc) in raw.include.iter().flatten().enumerate() {
        if !INCLUDE_VALUES.contains(&inc.as_str()) {
            return Err(FieldError::invalid_value(
                format!("include[{i}]"),
                format!(
                    "Invalid value: '{inc}'. Supported values are: {}.",
                    quoted(INCLUDE_VALUES)
                ),
            ));
        }
    }
    if let Some(t) = &raw.service_tier
        && !SERVICE_TIERS.contains(&t.as_str())
    {
        return Err(FieldError::invalid_value(
            "service_tier",
            format!(
                "Invalid value: '{t}'. Supported values are: {}.",
                quoted(SERVICE_TIERS)
            ),
        ));
    }
    let conversation = parse_conversation(raw.conversation)?;
    if conversation.is_some() && raw.previous_response_id.is_some() {
        return Err(FieldError::invalid_value(
            "conversation",
            "Mutually exclusive parameters: 'conversation' and 'previous_response_id'. Ensure you are only providing one of: 'previous_response_id' or 'conversation'.",
        ));
    }
    refuse_present(
        "prompt",
        &raw.prompt,
        "Prompt templates live in OpenAI's prompt store, which this relay does not have: send 'instructions' and 'input' instead.",
    )?;
    refuse_present(
        "moderation",
        &raw.moderation,
        "This relay has no moderation model to score or block input and output with: leave 'moderation' out.",
    )?;
    let compact_threshold = parse_context_management(raw.context_management)?;
    Ok(CreateRequest {
        model,
        input,
        instructions: raw.instructions,
        tools,
        tool_choice_echo,
        tool_choice,
        parallel_tool_calls: raw.parallel_tool_calls.unwrap_or(true),
        max_output_tokens,
        max_tool_calls,
        max_steps,
        temperature,
        top_p,
        metadata,
        user: raw.user,
        store,
        background,
        previous_response_id: raw.previous_response_id,
        stream: raw.stream.unwrap_or(false),
        text_format: text.format,
        verbosity: text.verbosity,
        reasoning_effort: reasoning.effort,
        reasoning_summary: summary,
        truncation,
        safety_identifier: raw.safety_identifier,
        prompt_cache_key: raw.prompt_cache_key,
        prompt_cache_retention: raw.prompt_cache_retention,
        prompt_cache_options: raw.prompt_cache_options,
        include: raw.include.unwrap_or_default(),
        client_metadata: raw.client_metadata,
        conversation,
        compact_threshold,
        relay: RelaySet::default(),
        background_options: raw.background_options,
        service_tier: raw.service_tier,
    })
}

/// `metadata`: at most 16 string values, keys of at most 64 and values of at most 512 characters.
pub fn parse_metadata(metadata: Map<String, Value>) -> Result<Map<String, Value>, FieldError> {
    if metadata.len() > 16 {
        return Err(FieldError::invalid_value(
            "metadata",
            "Invalid 'metadata': at most 16 key-value pairs are allowed.",
        ));
    }
    for (k, v) in &metadata {
        if k.chars().count() > 64 {
            return Err(FieldError::invalid_value(
                format!("metadata.{k}"),
                "Invalid 'metadata': keys are at most 64 characters.",
            ));
        }
        match v {
            Value::String(s) if s.chars().count() <= 512 => {}
            Value::String(_) => {
                return Err(FieldError::invalid_value(
                    format!("metadata.{k}"),
                    "Invalid 'metadata': values are at most 512 characters.",
                ));
            }
            _ => {
                return Err(FieldError::new(
                    format!("metadata.{k}"),
                    "Invalid 'metadata': values must be strings.",
                ));
            }
        }
    }
    Ok(metadata)
}

/// `context_management`: at most one `{type: "compaction", compact_threshold}`; the threshold.
fn parse_context_management(v: Option<Value>) -> Result<Option<u64>, FieldError> {
    let entries = match v {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Array(a)) => a,
        Some(_) => {
            return Err(FieldError::new(
                "context_management",
                "Invalid 'context_management': expected an array.",
            ));
        }
    };
    let mut threshold = None;
    for (i, e) in entries.iter().enumerate() {
        let at = format!("context_management[{i}]");
        match e.get("type").and_then(Value::as_str) {
            Some("compaction") => {}
            Some(other) => {
                return Err(FieldError::invalid_value(
                    format!("{at}.type"),
                    format!("Invalid value: '{other}'. Supported values are: 'compaction'."),
                ));
            }
            None => return Err(FieldError::missing(format!("{at}.type"))),
        }
        match e.get("compact_threshold") {
            Some(Value::Number(n)) if n.as_u64().is_some_and(|n| n > 0) => {
                threshold = n.as_u64();
            }
            None | Some(Value::Null) => {
                return Err(FieldError {
                    code: Some("missing_required_parameter"),
                    ..FieldError::new(
                        format!("{at}.compact_threshold"),
                        "This relay cannot know the model's context window: give 'compact_threshold', the number of input tokens past which the conversation is compacted.",
                    )
                });
            }
            Some(_) => {
                return Err(FieldError::new(
                    format!("{at}.compact_threshold"),
                    "Invalid 'compact_threshold': expected a positive integer.",
                ));
            }
        }
    }
    Ok(threshold)
}

/// `conversation`: an id, or `{id}`.
fn parse_conversation(v: Option<Value>) -> Result<Option<String>, FieldError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(id)) if !id.trim().is_empty() => Ok(Some(id)),
        Some(Value::Object(o)) => match o.get("id") {
            Some(Value::String(id)) if !id.trim().is_empty() => Ok(Some(id.clone())),
            _ => Err(FieldError::missing("conversation.id")),
        },
        Some(_) => Err(FieldError::new(
            "conversation",
            "Invalid 'conversation': expected a conversation id or an object with 'id'.",
        )),
    }
}

const SERVICE_TIERS: &[&str] = &["auto", "default", "flex", "scale", "priority", "fast"];

/// A 400 naming `name` when the field is present (not null): it cannot be honoured here.
fn refuse_present(name: &str, value: &Option<Value>, why: &str) -> Result<(), FieldError> {
    match value {
        None | Some(Value::Null) => Ok(()),
        Some(_) => Err(FieldError::unsupported(name, why)),
    }
}

fn quoted(values: &[&str]) -> String {
    values
        .iter()
        .map(|v| format!("'{v}'"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether `name` is a valid function name for OpenAI-compatible upstreams.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// `input`: a string (one user message) or a list of items.
pub fn parse_input(value: Value) -> Result<Vec<InputItem>, FieldError> {
    match value {
        Value::String(text) => Ok(vec![InputItem::Message(InputMessage {
            id: None,
            role: Role::User,
            content: MessageContent::Text(text),
            status: None,
            internal_chat_message_metadata_passthrough: None,
        })]),
        Value::Array(items) => {
            let mut out = Vec::with_capacity(items.len());
            for (i, mut item) in items.into_iter().enumerate() {
                let param = format!("input[{i}]");
                let Some(obj) = item.as_object_mut() else {
                    return Err(FieldError::new(
                        param,
                        format!("Invalid 'input[{i}]': expected an object."),
                    ));
                };
                // EasyInputMessage: `{role, content}` without a type is a message.
                if !obj.contains_key("type") || obj.get("type") == Some(&Value::Null) {
                    if obj.contains_key("role") {
                        obj.insert("type".into(), Value::String("message".into()));
                    } else if obj.contains_key("id") && obj.len() <= 2 {
                        obj.insert("type".into(), Value::String("item_reference".into()));
                    } else {
                        return Err(FieldError::missing(format!("{param}.type")));
                    }
                }
                check_item_kind(&item, &param)?;
                let parsed: InputItem = from_value_at(item, &param)?;
                check_input_item(&parsed, &param)?;
                out.push(parsed);
            }
            Ok(out)
        }
        _ => Err(FieldError::new(
            "input",
            "Invalid 'input': expected a string or an array of input items.",
        )),
    }
}

const ITEM_TYPES: &[&str] = &[
    "message",
    "function_call",
    "function_call_output",
    "reasoning",
    "item_reference",
    "mcp_list_tools",
    "mcp_call",
    "mcp_approval_request",
    "mcp_approval_response",
    "tool_search_call",
    "tool_search_output",
    "custom_tool_call",
    "custom_tool_call_output",
    "local_shell_call",
    "local_shell_call_output",
    "shell_call",
    "shell_call_output",
    "apply_patch_call",
    "apply_patch_call_output",
    "computer_call",
    "computer_call_output",
    "file_search_call",
    "web_search_call",
    "image_generation_call",
    "code_interpreter_call",
    "program",
    "program_output",
    "additional_tools",
    "configuration_update",
    "compaction",
    "compaction_trigger",
];

const ROLES: &[&str] = &["user", "system", "developer", "assistant"];

/// Checks an item's `type` (and a message's `role`) before parsing, so the error names them.
fn check_item_kind(item: &Value, param: &str) -> Result<(), FieldError> {
    let kind = item.get("type").and_then(Value::as_str).unwrap_or_default();
    if !ITEM_TYPES.contains(&kind) {
        return Err(FieldError::invalid_value(
            format!("{param}.type"),
            format!(
                "Invalid value: '{kind}'. Supported values are: {}.",
                quoted(ITEM_TYPES)
            ),
        ));
    }
    if kind == "message" {
        match item.get("role") {
            None | Some(Value::Null) => return Err(FieldError::missing(format!("{param}.role"))),
            Some(Value::String(r)) if ROLES.contains(&r.as_str()) => {}
            Some(other) => {
                return Err(FieldError::invalid_value(
                    format!("{param}.role"),
                    format!(
                        "Invalid value: {other}. Supported values are: {}.",
                        quoted(ROLES)
                    ),
                ));
            }
        }
    }
    Ok(())
}

fn check_input_item(item: &InputItem, param: &str) -> Result<(), FieldError> {
    let InputItem::Message(m) = item else {
        return Ok(());
    };
    let MessageContent::Parts(parts) = &m.content else {
        return Ok(());
    };
    for (j, part) in parts.iter().enumerate() {
        let at = format!("{param}.content[{j}]");
        match part {
            InputPart::InputImage {
                image_url, file_id, ..
            } => {
                if file_id.is_some() {
                    return Err(FieldError::unsupported(
                        format!("{at}.file_id"),
                        "File ids are not supported by this relay (there is no Files API); send the image as 'image_url' (an https or data: URL).",
                    ));
                }
                if image_url.is_none() {
                    return Err(FieldError::missing(format!("{at}.image_url")));
                }
            }
            InputPart::InputFile {
                file_data,
                file_id,
                file_url,
                ..
            } => {
                if file_id.is_some() || file_url.is_some() {
                    let which = if file_id.is_some() {
                        "file_id"
                    } else {
                        "file_url"
                    };
                    return Err(FieldError::unsupported(
                        format!("{at}.{which}"),
                        format!(
                            "'{which}' is not supported by this relay; send the file inline as 'file_data' (a data: URL)."
                        ),
                    ));
                }
                if file_data.is_none() {
                    return Err(FieldError::missing(format!("{at}.file_data")));
                }
            }
            InputPart::OutputText { .. } | InputPart::Refusal { .. }
                if m.role != Role::Assistant =>
            {
                return Err(FieldError::invalid_value(
                    format!("{at}.type"),
                    "Output content parts ('output_text', 'refusal') are only valid in assistant messages.",
                ));
            }
            _ => {}
        }
    }
    Ok(())
}

/// Parses a list of tools (`tools`, or the tools an input item adds, named from `base`).
pub fn parse_tools(tools: Vec<Value>, base: &str) -> Result<Vec<ToolParam>, FieldError> {
    let mut out = Vec::with_capacity(tools.len());
    for (i, mut tool) in tools.into_iter().enumerate() {
        let param = format!("{base}[{i}]");
        let Some(obj) = tool.as_object_mut() else {
            return Err(FieldError::new(
                param,
                format!("Invalid 'tools[{i}]': expected an object."),
            ));
        };
        let kind = match obj.remove("type") {
            Some(Value::String(k)) => k,
            None | Some(Value::Null) => return Err(FieldError::missing(format!("{param}.type"))),
            Some(_) => {
                return Err(FieldError::new(
                    format!("{param}.type"),
                    "Invalid type for 'type': expected a string.",
                ));
            }
        };
        match kind.as_str() {
            "function" => out.push(ToolParam::Function(parse_function(tool, &param)?)),
            "custom" => out.push(ToolParam::Custom(parse_custom(tool, &param)?)),
            "namespace" => out.push(ToolParam::Namespace(parse_namespace(tool, &param)?)),
            "mcp" => out.push(ToolParam::Mcp(from_value_at(tool, &param)?)),
            "tool_search" => {
                let t: ToolSearchParam = from_value_at(tool, &param)?;
                if let Some(e) = t.execution.as_deref()
                    && e != "server"
                    && e != "client"
                {
                    return Err(FieldError::invalid_value(
                        format!("{param}.execution"),
                        format!(
                            "Invalid value: '{e}'. Supported values are: 'server' and 'client'."
                        ),
                    ));
                }
                if out.iter().any(|t| matches!(t, ToolParam::ToolSearch(_))) {
                    return Err(FieldError::invalid_value(
                        format!("{param}.type"),
                        "At most one 'tool_search' tool is allowed.",
                    ));
                }
                out.push(ToolParam::ToolSearch(t));
            }
            "local_shell" | "shell" | "apply_patch" | "computer" | "computer_use_preview" => {
                let builtin = match kind.as_str() {
                    "local_shell" => BuiltinTool::LocalShell,
                    "shell" => BuiltinTool::Shell,
                    "apply_patch" => BuiltinTool::ApplyPatch,
                    _ => BuiltinTool::Computer,
                };
                if out
                    .iter()
                    .any(|t| matches!(t, ToolParam::Builtin(b, _) if *b == builtin))
                {
                    return Err(FieldError::invalid_value(
                        format!("{param}.type"),
                        format!("At most one '{kind}' tool is allowed."),
                    ));
                }
                let mut spec = std::mem::take(obj);
                spec.insert("type".into(), Value::String(kind.clone()));
                out.push(ToolParam::Builtin(builtin, spec));
            }
            k if HOSTED_TOOL_TYPES.contains(&k) => {
                let mut spec = std::mem::take(obj);
                spec.insert("type".into(), Value::String(kind.clone()));
                out.push(ToolParam::Hosted(kind.clone(), spec));
            }
            other => {
                return Err(FieldError::invalid_value(
                    format!("{param}.type"),
                    format!(
                        "Invalid value: '{other}'. Supported tool types are: 'function', 'custom', 'namespace', 'mcp', 'tool_search', 'local_shell', 'shell', 'apply_patch', 'computer', 'computer_use_preview', and the hosted tools {}.",
                        quoted(HOSTED_TOOL_TYPES)
                    ),
                ));
            }
        }
    }
    let mut names = std::collections::HashSet::new();
    for (i, t) in out.iter().enumerate() {
        let name = match t {
            ToolParam::Function(f) => &f.name,
            ToolParam::Custom(c) => &c.name,
            _ => continue,
        };
        if !names.insert(name.clone()) {
            return Err(FieldError::invalid_value(
                format!("{base}[{i}].name"),
                format!("Duplicate function tool name '{name}' in '{base}'."),
            ));
        }
    }
    Ok(out)
}

fn parse_function(tool: Value, param: &str) -> Result<FunctionTool, FieldError> {
    let f: FunctionTool = from_value_at(tool, param)?;
    if !valid_name(&f.name) {
        return Err(FieldError::invalid_value(
            format!("{param}.name"),
            format!(
                "Invalid '{param}.name': string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$' of at most 64 characters."
            ),
        ));
    }
    if let Some(p) = &f.parameters
        && !p.is_object()
    {
        return Err(FieldError::new(
            format!("{param}.parameters"),
            "Invalid 'parameters': expected a JSON Schema object.",
        ));
    }
    Ok(f)
}

fn parse_custom(tool: Value, param: &str) -> Result<CustomTool, FieldError> {
    let c: CustomTool = from_value_at(tool, param)?;
    if !valid_name(&c.name) {
        return Err(FieldError::invalid_value(
            format!("{param}.name"),
            format!(
                "Invalid '{param}.name': string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$' of at most 64 characters."
            ),
        ));
    }
    if let Some(f) = &c.format {
        match f.get("type").and_then(Value::as_str) {
            Some("text") => {}
            Some("grammar") => {
                let syntax = f.get("syntax").and_then(Value::as_str);
                if !matches!(syntax, Some("lark" | "regex")) {
                    return Err(FieldError::invalid_value(
                        format!("{param}.format.syntax"),
                        "Invalid 'format.syntax': expected 'lark' or 'regex'.",
                    ));
                }
                if f.get("definition").and_then(Value::as_str).is_none() {
                    return Err(FieldError::missing(format!("{param}.format.definition")));
                }
            }
            _ => {
                return Err(FieldError::invalid_value(
                    format!("{param}.format.type"),
                    "Invalid 'format.type': expected 'text' or 'grammar'.",
                ));
            }
        }
    }
    Ok(c)
}

fn parse_namespace(mut tool: Value, param: &str) -> Result<NamespaceTool, FieldError> {
    let obj = tool.as_object_mut().expect("checked to be an object");
    let name = match obj.remove("name") {
        Some(Value::String(n)) if valid_name(&n) => n,
        Some(Value::String(n)) => {
            return Err(FieldError::invalid_value(
                format!("{param}.name"),
                format!(
                    "Invalid '{param}.name': '{n}'. Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$' of at most 64 characters."
                ),
            ));
        }
        None | Some(Value::Null) => return Err(FieldError::missing(format!("{param}.name"))),
        Some(_) => {
            return Err(FieldError::new(
                format!("{param}.name"),
                "Invalid type for 'name': expected a string.",
            ));
        }
    };
    let description = match obj.remove("description") {
        Some(Value::String(d)) => d,
        None | Some(Value::Null) => String::new(),
        Some(_) => {
            return Err(FieldError::new(
                format!("{param}.description"),
                "Invalid type for 'description': expected a string.",
            ));
        }
    };
    let tools = match obj.remove("tools") {
        Some(Value::Array(t)) => t,
        None | Some(Value::Null) => return Err(FieldError::missing(format!("{param}.tools"))),
        Some(_) => {
            return Err(FieldError::new(
                format!("{param}.tools"),
                "Invalid type for 'tools': expected an array.",
            ));
        }
    };
    if let Some(k) = obj.keys().next() {
        return Err(FieldError::unknown(format!("{param}.{k}")));
    }
    let mut out = Vec::with_capacity(tools.len());
    let mut names = std::collections::HashSet::new();
    for (j, mut t) in tools.into_iter().enumerate() {
        let at = format!("{param}.tools[{j}]");
        let kind = t
            .as_object_mut()
            .and_then(|o| o.remove("type"))
            .and_then(|k| k.as_str().map(str::to_string));
        let parsed = match kind.as_deref() {
            Some("function") => NamespacedTool::Function(parse_function(t, &at)?),
            Some("custom") => NamespacedTool::Custom(parse_custom(t, &at)?),
            None => return Err(FieldError::missing(format!("{at}.type"))),
            Some(other) => {
                return Err(FieldError::invalid_value(
                    format!("{at}.type"),
                    format!(
                        "Invalid value: '{other}'. Supported values are: 'function' and 'custom'."
                    ),
                ));
            }
        };
        let tool_name = match &parsed {
            NamespacedTool::Function(f) => f.name.clone(),
            NamespacedTool::Custom(c) => c.name.clone(),
        };
        if !names.insert(tool_name.clone()) {
            return Err(FieldError::invalid_value(
                format!("{at}.name"),
                format!("Duplicate tool name '{tool_name}' in namespace '{name}'."),
            ));
        }
        out.push(parsed);
    }
    Ok(NamespaceTool {
        name,
        description,
        tools: out,
    })
}

fn parse_tool_choice(choice: Option<Value>, tools: &[ToolParam]) -> Result<ToolChoice, FieldError> {
    let Some(choice) = choice else {
        return Ok(ToolChoice::Auto);
    };
    let bad = |msg: String| FieldError::invalid_value("tool_choice", msg);
    match &choice {
        Value::Null => Ok(ToolChoice::Auto),
        Value::String(s) => match s.as_str() {
            "auto" => Ok(ToolChoice::Auto),
            "none" => Ok(ToolChoice::None),
            "required" if tools.is_empty() => Err(bad(
                "Invalid 'tool_choice': 'required' needs at least one tool in 'tools'.".into(),
            )),
            "required" => Ok(ToolChoice::Required),
            other => Err(bad(format!(
                "Invalid value: '{other}'. Supported values are: 'none', 'auto', and 'required'."
            ))),
        },
        Value::Object(o) => {
            let kind = o.get("type").and_then(Value::as_str).unwrap_or_default();
            let str_field = |k: &str| o.get(k).and_then(Value::as_str).map(str::to_string);
            match kind {
                "function" => {
                    let name =
                        str_field("name").ok_or_else(|| FieldError::missing("tool_choice.name"))?;
                    let known = tools
                        .iter()
                        .any(|t| matches!(t, ToolParam::Function(f) if f.name == name));
                    if !known {
                        return Err(FieldError::invalid_value(
                            "tool_choice.name",
                            format!("Tool choice '{name}' not found in 'tools' parameter."),
                        ));
                    }
                    Ok(ToolChoice::Function { name })
                }
                "mcp" => {
                    let server_label = str_field("server_label")
                        .ok_or_else(|| FieldError::missing("tool_choice.server_label"))?;
                    let known = tools.iter().any(
                        |t| matches!(t, ToolParam::Mcp(m) if m.server_label.as_deref() == Some(server_label.as_str())),
                    );
                    if !known {
                        return Err(FieldError::invalid_value(
                            "tool_choice.server_label",
                            format!(
                                "MCP server '{server_label}' named in 'tool_choice' is not in 'tools'."
                            ),
                        ));
                    }
                    Ok(ToolChoice::Mcp {
                        server_label,
                        name: str_field("name"),
                    })
                }
                "custom" => {
                    let name =
                        str_field("name").ok_or_else(|| FieldError::missing("tool_choice.name"))?;
                    let known = tools
                        .iter()
                        .any(|t| matches!(t, ToolParam::Custom(c) if c.name == name));
                    if !known {
                        return Err(FieldError::invalid_value(
                            "tool_choice.name",
                            format!("Tool choice '{name}' not found in 'tools' parameter."),
                        ));
                    }
                    Ok(ToolChoice::Custom { name })
                }
                "apply_patch"
                | "shell"
                | "local_shell"
                | "computer"
                | "computer_use"
                | "computer_use_preview" => {
                    let builtin = match kind {
                        "apply_patch" => BuiltinTool::ApplyPatch,
                        "shell" => BuiltinTool::Shell,
                        "local_shell" => BuiltinTool::LocalShell,
                        _ => BuiltinTool::Computer,
                    };
                    if !tools
                        .iter()
                        .any(|t| matches!(t, ToolParam::Builtin(b, _) if *b == builtin))
                    {
                        return Err(FieldError::invalid_value(
                            "tool_choice.type",
                            format!("Tool choice '{kind}' needs a '{kind}' tool in 'tools'."),
                        ));
                    }
                    Ok(ToolChoice::Builtin(builtin))
                }
                "allowed_tools" => {
                    let required = match o.get("mode").and_then(Value::as_str) {
                        Some("auto") | None => false,
                        Some("required") => true,
                        Some(m) => {
                            return Err(FieldError::invalid_value(
                                "tool_choice.mode",
                                format!(
                                    "Invalid value: '{m}'. Supported values are: 'auto' and 'required'."
                                ),
                            ));
                        }
                    };
                    let Some(Value::Array(list)) = o.get("tools") else {
                        return Err(FieldError::missing("tool_choice.tools"));
                    };
                    for (i, t) in list.iter().enumerate() {
                        if t.get("type").and_then(Value::as_str).is_none() {
                            return Err(FieldError::missing(format!(
                                "tool_choice.tools[{i}].type"
                            )));
                        }
                    }
                    Ok(ToolChoice::Allowed {
                        required,
                        tools: list.clone(),
                    })
                }
                k if HOSTED_TOOL_TYPES.contains(&k) || k == "programmatic_tool_calling" => {
                    Err(FieldError::unsupported(
                        "tool_choice",
                        format!(
                            "The hosted tool '{k}' cannot run on this relay, so it cannot be forced: choose 'auto', 'required', or one of the request's client tools."
                        ),
                    ))
                }
                "" => Err(FieldError::missing("tool_choice.type")),
                other => Err(FieldError::invalid_value(
                    "tool_choice.type",
                    format!(
                        "Invalid value: '{other}'. Supported values are: 'function', 'mcp', 'custom', 'allowed_tools', 'apply_patch', 'shell', 'local_shell', 'computer', or the strings 'none', 'auto', 'required'."
                    ),
                )),
            }
        }
        _ => Err(bad(
            "Invalid 'tool_choice': expected a string or an object.".into(),
        )),
    }
}
