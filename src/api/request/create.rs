//! The create request's top-level shapes: the body as sent ([`CreateResponse`], parsed strictly,
//! unknown fields rejected) and as validated ([`CreateRequest`], defaults applied). Only what the
//! client sends lives here; what the relay sets for a request is `run::RelaySet`.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::{InputItem, ToolChoice, ToolParam};

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
    /// Which reasoning items the model sees again on later turns (`auto`, `current_turn`,
    /// `all_turns`): sent on to a Responses upstream.
    pub context: Option<String>,
    /// The reasoning execution mode (`standard`, `pro`, or a newer name): sent on to a
    /// Responses upstream.
    pub mode: Option<String>,
}

/// `reasoning` as validated: what the model is asked for, and what a Responses upstream gets.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reasoning {
    pub effort: Option<String>,
    pub summary: Option<String>,
    pub context: Option<String>,
    pub mode: Option<String>,
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
    /// `reasoning.context` and `reasoning.mode`, for a Responses upstream (Chat Completions has
    /// no place for them) and the echo.
    pub reasoning_context: Option<String>,
    pub reasoning_mode: Option<String>,
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
    pub background_options: Option<Map<String, Value>>,
    pub service_tier: Option<String>,
}
