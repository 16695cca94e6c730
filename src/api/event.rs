//! The Responses streaming events (only OpenAI's names) and their sequence-numbered envelope.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::response::{ContentPart, OutputItem, Response, SummaryText};

/// One streaming event. Serialized as `{"type": "...", ...fields}`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "type")]
pub enum Event {
    #[serde(rename = "response.created")]
    Created { response: Box<Response> },
    #[serde(rename = "response.queued")]
    Queued { response: Box<Response> },
    #[serde(rename = "response.in_progress")]
    InProgress { response: Box<Response> },
    #[serde(rename = "response.completed")]
    Completed { response: Box<Response> },
    #[serde(rename = "response.incomplete")]
    Incomplete { response: Box<Response> },
    #[serde(rename = "response.failed")]
    Failed { response: Box<Response> },

    #[serde(rename = "response.output_item.added")]
    OutputItemAdded {
        output_index: usize,
        item: OutputItem,
    },
    #[serde(rename = "response.output_item.done")]
    OutputItemDone {
        output_index: usize,
        item: OutputItem,
    },
    #[serde(rename = "response.content_part.added")]
    ContentPartAdded {
        item_id: String,
        output_index: usize,
        content_index: usize,
        part: ContentPart,
    },
    #[serde(rename = "response.content_part.done")]
    ContentPartDone {
        item_id: String,
        output_index: usize,
        content_index: usize,
        part: ContentPart,
    },

    #[serde(rename = "response.output_text.delta")]
    OutputTextDelta {
        item_id: String,
        output_index: usize,
        content_index: usize,
        delta: String,
        logprobs: Vec<Value>,
    },
    #[serde(rename = "response.output_text.done")]
    OutputTextDone {
        item_id: String,
        output_index: usize,
        content_index: usize,
        text: String,
        logprobs: Vec<Value>,
    },
    #[serde(rename = "response.refusal.delta")]
    RefusalDelta {
        item_id: String,
        output_index: usize,
        content_index: usize,
        delta: String,
    },
    #[serde(rename = "response.refusal.done")]
    RefusalDone {
        item_id: String,
        output_index: usize,
        content_index: usize,
        refusal: String,
    },
    #[serde(rename = "response.reasoning_text.delta")]
    ReasoningTextDelta {
        item_id: String,
        output_index: usize,
        content_index: usize,
        delta: String,
    },
    #[serde(rename = "response.reasoning_text.done")]
    ReasoningTextDone {
        item_id: String,
        output_index: usize,
        content_index: usize,
        text: String,
    },
    #[serde(rename = "response.reasoning_summary_part.added")]
    ReasoningSummaryPartAdded {
        item_id: String,
        output_index: usize,
        summary_index: usize,
        part: SummaryText,
    },
    #[serde(rename = "response.reasoning_summary_part.done")]
    ReasoningSummaryPartDone {
        item_id: String,
        output_index: usize,
        summary_index: usize,
        part: SummaryText,
    },
    #[serde(rename = "response.reasoning_summary_text.delta")]
    ReasoningSummaryTextDelta {
        item_id: String,
        output_index: usize,
        summary_index: usize,
        delta: String,
    },
    #[serde(rename = "response.reasoning_summary_text.done")]
    ReasoningSummaryTextDone {
        item_id: String,
        output_index: usize,
        summary_index: usize,
        text: String,
    },

    #[serde(rename = "response.function_call_arguments.delta")]
    FunctionCallArgumentsDelta {
        item_id: String,
        output_index: usize,
        delta: String,
    },
    #[serde(rename = "response.function_call_arguments.done")]
    FunctionCallArgumentsDone {
        item_id: String,
        name: String,
        output_index: usize,
        arguments: String,
    },

    #[serde(rename = "response.mcp_list_tools.in_progress")]
    McpListToolsInProgress {
        item_id: String,
        output_index: usize,
    },
    #[serde(rename = "response.mcp_list_tools.completed")]
    McpListToolsCompleted {
        item_id: String,
        output_index: usize,
    },
    #[serde(rename = "response.mcp_list_tools.failed")]
    McpListToolsFailed {
        item_id: String,
        output_index: usize,
    },
    #[serde(rename = "response.mcp_call.in_progress")]
    McpCallInProgress {
        item_id: String,
        output_index: usize,
    },
    #[serde(rename = "response.mcp_call.completed")]
    McpCallCompleted {
        item_id: String,
        output_index: usize,
    },
    #[serde(rename = "response.mcp_call.failed")]
    McpCallFailed {
        item_id: String,
        output_index: usize,
    },
    #[serde(rename = "response.mcp_call_arguments.delta")]
    McpCallArgumentsDelta {
        item_id: String,
        output_index: usize,
        delta: String,
    },
    #[serde(rename = "response.mcp_call_arguments.done")]
    McpCallArgumentsDone {
        item_id: String,
        output_index: usize,
        arguments: String,
    },
    #[serde(rename = "response.web_search_call.in_progress")]
    WebSearchCallInProgress {
        item_id: String,
        output_index: usize,
    },
    #[serde(rename = "response.web_search_call.searching")]
    WebSearchCallSearching {
        item_id: String,
        output_index: usize,
    },
    #[serde(rename = "response.web_search_call.completed")]
    WebSearchCallCompleted {
        item_id: String,
        output_index: usize,
    },
    #[serde(rename = "response.compaction.compacting")]
    CompactionCompacting {
        item_id: String,
        output_index: usize,
    },
    #[serde(rename = "response.custom_tool_call_input.delta")]
    CustomToolCallInputDelta {
        item_id: String,
        output_index: usize,
        delta: String,
    },
    #[serde(rename = "response.custom_tool_call_input.done")]
    CustomToolCallInputDone {
        item_id: String,
        output_index: usize,
        input: String,
    },

    /// WebSocket mode's steering (beta): a submission accepted and queued for this response.
    /// Scoped to no item: it may come between any two events of the run.
    #[serde(rename = "response.steer.accepted")]
    SteerAccepted { steer: super::steer::SteerRef },
}

impl Event {
    /// The `type` string of this event.
    pub fn kind(&self) -> &'static str {
        match self {
            Event::Created { .. } => "response.created",
            Event::Queued { .. } => "response.queued",
            Event::InProgress { .. } => "response.in_progress",
            Event::Completed { .. } => "response.completed",
            Event::Incomplete { .. } => "response.incomplete",
            Event::Failed { .. } => "response.failed",
            Event::OutputItemAdded { .. } => "response.output_item.added",
            Event::OutputItemDone { .. } => "response.output_item.done",
            Event::ContentPartAdded { .. } => "response.content_part.added",
            Event::ContentPartDone { .. } => "response.content_part.done",
            Event::OutputTextDelta { .. } => "response.output_text.delta",
            Event::OutputTextDone { .. } => "response.output_text.done",
            Event::RefusalDelta { .. } => "response.refusal.delta",
            Event::RefusalDone { .. } => "response.refusal.done",
            Event::ReasoningTextDelta { .. } => "response.reasoning_text.delta",
            Event::ReasoningTextDone { .. } => "response.reasoning_text.done",
            Event::ReasoningSummaryPartAdded { .. } => "response.reasoning_summary_part.added",
            Event::ReasoningSummaryPartDone { .. } => "response.reasoning_summary_part.done",
            Event::ReasoningSummaryTextDelta { .. } => "response.reasoning_summary_text.delta",
            Event::ReasoningSummaryTextDone { .. } => "response.reasoning_summary_text.done",
            Event::FunctionCallArgumentsDelta { .. } => "response.function_call_arguments.delta",
            Event::FunctionCallArgumentsDone { .. } => "response.function_call_arguments.done",
            Event::CustomToolCallInputDelta { .. } => "response.custom_tool_call_input.delta",
            Event::CompactionCompacting { .. } => "response.compaction.compacting",
            Event::WebSearchCallInProgress { .. } => "response.web_search_call.in_progress",
            Event::WebSearchCallSearching { .. } => "response.web_search_call.searching",
            Event::WebSearchCallCompleted { .. } => "response.web_search_call.completed",
            Event::CustomToolCallInputDone { .. } => "response.custom_tool_call_input.done",
            Event::McpListToolsInProgress { .. } => "response.mcp_list_tools.in_progress",
            Event::McpListToolsCompleted { .. } => "response.mcp_list_tools.completed",
            Event::McpListToolsFailed { .. } => "response.mcp_list_tools.failed",
            Event::McpCallInProgress { .. } => "response.mcp_call.in_progress",
            Event::McpCallCompleted { .. } => "response.mcp_call.completed",
            Event::McpCallFailed { .. } => "response.mcp_call.failed",
            Event::McpCallArgumentsDelta { .. } => "response.mcp_call_arguments.delta",
            Event::McpCallArgumentsDone { .. } => "response.mcp_call_arguments.done",
            Event::SteerAccepted { .. } => "response.steer.accepted",
        }
    }

    /// The Response a lifecycle event carries.
    pub fn response(&self) -> Option<&Response> {
        match self {
            Event::Created { response }
            | Event::Queued { response }
            | Event::InProgress { response }
            | Event::Completed { response }
            | Event::Incomplete { response }
            | Event::Failed { response } => Some(response),
            _ => None,
        }
    }

    /// Whether this event ends the stream (`completed`, `incomplete` or `failed`).
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            Event::Completed { .. } | Event::Incomplete { .. } | Event::Failed { .. }
        )
    }

    /// `(item_id, output_index)` for events scoped to one output item.
    pub fn item_scope(&self) -> Option<(&str, usize)> {
        match self {
            Event::ContentPartAdded {
                item_id,
                output_index,
                ..
            }
            | Event::ContentPartDone {
                item_id,
                output_index,
                ..
            }
            | Event::OutputTextDelta {
                item_id,
                output_index,
                ..
            }
            | Event::OutputTextDone {
                item_id,
                output_index,
                ..
            }
            | Event::RefusalDelta {
                item_id,
                output_index,
                ..
            }
            | Event::RefusalDone {
                item_id,
                output_index,
                ..
            }
            | Event::ReasoningTextDelta {
                item_id,
                output_index,
                ..
            }
            | Event::ReasoningTextDone {
                item_id,
                output_index,
                ..
            }
            | Event::ReasoningSummaryPartAdded {
                item_id,
                output_index,
                ..
            }
            | Event::ReasoningSummaryPartDone {
                item_id,
                output_index,
                ..
            }
            | Event::ReasoningSummaryTextDelta {
                item_id,
                output_index,
                ..
            }
            | Event::ReasoningSummaryTextDone {
                item_id,
                output_index,
                ..
            }
            | Event::FunctionCallArgumentsDelta {
                item_id,
                output_index,
                ..
            }
            | Event::FunctionCallArgumentsDone {
                item_id,
                output_index,
                ..
            }
            | Event::CustomToolCallInputDelta {
                item_id,
                output_index,
                ..
            }
            | Event::CompactionCompacting {
                item_id,
                output_index,
            }
            | Event::WebSearchCallInProgress {
                item_id,
                output_index,
            }
            | Event::WebSearchCallSearching {
                item_id,
                output_index,
            }
            | Event::WebSearchCallCompleted {
                item_id,
                output_index,
            }
            | Event::CustomToolCallInputDone {
                item_id,
                output_index,
                ..
            }
            | Event::McpListToolsInProgress {
                item_id,
                output_index,
            }
            | Event::McpListToolsCompleted {
                item_id,
                output_index,
            }
            | Event::McpListToolsFailed {
                item_id,
                output_index,
            }
            | Event::McpCallInProgress {
                item_id,
                output_index,
            }
            | Event::McpCallCompleted {
                item_id,
                output_index,
            }
            | Event::McpCallFailed {
                item_id,
                output_index,
            }
            | Event::McpCallArgumentsDelta {
                item_id,
                output_index,
                ..
            }
            | Event::McpCallArgumentsDone {
                item_id,
                output_index,
                ..
            } => Some((item_id, *output_index)),
            _ => None,
        }
    }
}

/// An event with its place in the run's log.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Sequenced {
    #[serde(flatten)]
    pub event: Event,
    pub sequence_number: u64,
}
