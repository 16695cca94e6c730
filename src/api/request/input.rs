//! The items of `input` (messages, calls, their outputs, tool items, references), as wire types:
//! what a client sends and a store keeps. A client's or hosted tool's item keeps every field it
//! was sent with.

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

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
        /// Marks the end of a reusable prompt prefix: sent on to a Responses upstream as given
        /// (Chat Completions has no place for it).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        prompt_cache_breakpoint: Option<Value>,
    },
    InputImage {
        #[serde(default)]
        image_url: Option<String>,
        #[serde(default)]
        file_id: Option<String>,
        #[serde(default)]
        detail: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        prompt_cache_breakpoint: Option<Value>,
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
        /// The detail level a Responses upstream reads the file at, sent on as given.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        detail: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        prompt_cache_breakpoint: Option<Value>,
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

impl InputPart {
    /// An `input_text` part.
    pub fn text(text: String) -> InputPart {
        InputPart::InputText {
            text,
            prompt_cache_breakpoint: None,
        }
    }

    /// An `input_image` part showing the image at `url` (an https or data: URL).
    pub fn image(url: String) -> InputPart {
        InputPart::InputImage {
            image_url: Some(url),
            file_id: None,
            detail: None,
            prompt_cache_breakpoint: None,
        }
    }
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
                    InputPart::InputText { text, .. } | InputPart::OutputText { text, .. } => {
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
    /// An assistant message's `phase` (`commentary` or `final_answer`): kept with the item and
    /// sent on to a Responses upstream; Chat Completions has no place for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<crate::api::response::Phase>,
    /// Sent by Codex on its input messages and tolerated by OpenAI; read, never kept or sent on.
    #[serde(default, skip_serializing)]
    pub internal_chat_message_metadata_passthrough: Option<Value>,
}

impl InputMessage {
    /// A user message the relay writes itself (a string input, a summary, images for the model).
    pub fn user(content: MessageContent) -> InputMessage {
        InputMessage {
            id: None,
            role: Role::User,
            content,
            status: None,
            phase: None,
            internal_chat_message_metadata_passthrough: None,
        }
    }
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
    Reasoning(crate::api::response::ReasoningItemInput),
    ItemReference(ItemReference),
    McpListTools(crate::api::response::McpListToolsItem),
    McpCall(InputMcpCall),
    McpApprovalRequest(crate::api::response::McpApprovalRequestItem),
    McpApprovalResponse(McpApprovalResponse),
    ToolSearchCall(crate::api::response::ToolSearchCallItem),
    ToolSearchOutput(crate::api::response::ToolSearchOutputItem),
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
            InputItem::FunctionCallOutput(InputFunctionCallOutput::new(
                call_id,
                ToolOutput::Text(output),
            )),
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
    /// The tool (and its `namespace`) that produced the output: kept with the item. The model
    /// is told whose output it is by `call_id`, under the name the relay gave the tool, so these
    /// are not sent on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

impl InputFunctionCallOutput {
    /// A call's output as the relay writes it for the model.
    pub fn new(call_id: String, output: ToolOutput) -> InputFunctionCallOutput {
        InputFunctionCallOutput {
            id: None,
            call_id,
            output,
            status: None,
            caller: None,
            name: None,
            namespace: None,
        }
    }
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
                        MessageContent::Parts(vec![InputPart::text(text.clone())])
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
