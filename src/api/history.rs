//! An output item as the model sees it in later turns: the input item it becomes in a chain's
//! history (`previous_response_id`), in `input_items`, and in the agent loop's next turn.

use super::OutputItem;
use super::request::{
    InputFunctionCall, InputItem, InputMcpCall, InputMessage, InputPart, MessageContent, Role,
    ToolItem,
};
use super::response::{ClientCallItem, ContentPart, ReasoningItemInput};
use serde_json::{Map, Value};

/// An output item as the model will see it in later turns.
pub fn output_as_input(item: &OutputItem) -> Option<InputItem> {
    Some(match item {
        OutputItem::Message(m) => InputItem::Message(InputMessage {
            id: Some(m.id.clone()),
            role: Role::Assistant,
            content: MessageContent::Parts(
                m.content
                    .iter()
                    .filter_map(|p| match p {
                        ContentPart::OutputText {
                            text, annotations, ..
                        } => Some(InputPart::OutputText {
                            text: text.clone(),
                            annotations: Some(annotations.clone()),
                            logprobs: None,
                        }),
                        ContentPart::Refusal { refusal } => Some(InputPart::Refusal {
                            refusal: refusal.clone(),
                        }),
                        ContentPart::ReasoningText { .. } => None,
                    })
                    .collect(),
            ),
            status: None,
            phase: m.phase,
            internal_chat_message_metadata_passthrough: None,
        }),
        OutputItem::FunctionCall(f) => InputItem::FunctionCall(InputFunctionCall {
            id: Some(f.id.clone()),
            call_id: f.call_id.clone(),
            name: f.name.clone(),
            arguments: f.arguments.clone(),
            status: None,
            namespace: f.namespace.clone(),
            caller: None,
            is_async: None,
        }),
        OutputItem::Reasoning(r) => InputItem::Reasoning(ReasoningItemInput {
            id: r.id.clone(),
            summary: r.summary.clone(),
            content: Some(r.content.clone()),
            // Kept: it may seal what the model server needs back (signed reasoning blocks).
            encrypted_content: r.encrypted_content.clone(),
            status: None,
        }),
        OutputItem::McpListTools(l) => InputItem::McpListTools(l.clone()),
        OutputItem::McpCall(c) => InputItem::McpCall(InputMcpCall {
            id: c.id.clone(),
            server_label: c.server_label.clone(),
            name: c.name.clone(),
            arguments: c.arguments.clone(),
            output: c.output.clone(),
            error: c.error.as_ref().and_then(|e| serde_json::to_value(e).ok()),
            status: None,
            approval_request_id: c.approval_request_id.clone(),
        }),
        OutputItem::McpApprovalRequest(a) => InputItem::McpApprovalRequest(a.clone()),
        OutputItem::ToolSearchCall(t) => InputItem::ToolSearchCall(t.clone()),
        OutputItem::ToolSearchOutput(t) => InputItem::ToolSearchOutput(t.clone()),
        OutputItem::CustomToolCall(c) => {
            let mut fields = Map::new();
            fields.insert("name".into(), Value::String(c.name.clone()));
            fields.insert("input".into(), Value::String(c.input.clone()));
            if let Some(ns) = &c.namespace {
                fields.insert("namespace".into(), Value::String(ns.clone()));
            }
            InputItem::CustomToolCall(ToolItem {
                id: Some(c.id.clone()),
                call_id: Some(c.call_id.clone()),
                status: None,
                fields,
            })
        }
        OutputItem::LocalShellCall(c) => InputItem::LocalShellCall(client_call(c)),
        OutputItem::ShellCall(c) => InputItem::ShellCall(client_call(c)),
        OutputItem::ApplyPatchCall(c) => InputItem::ApplyPatchCall(client_call(c)),
        OutputItem::ComputerCall(c) => InputItem::ComputerCall(client_call(c)),
        // The search's results reached the model as a function output in its run; the call
        // itself is context a later turn keeps (as OpenAI's `web_search_call` is).
        OutputItem::WebSearchCall(w) => InputItem::WebSearchCall(ToolItem {
            id: Some(w.id.clone()),
            call_id: None,
            status: None,
            fields: serde_json::to_value(w)
                .ok()
                .and_then(|v| v.as_object().cloned())
                .map(|mut o| {
                    o.remove("id");
                    o.remove("status");
                    o
                })
                .unwrap_or_default(),
        }),
        // A compaction that never finished (its run failed or was cancelled) stands for nothing.
        OutputItem::Compaction(c) if c.encrypted_content.is_empty() => return None,
        OutputItem::Compaction(c) => InputItem::Compaction(super::request::CompactionInput {
            id: Some(c.id.clone()),
            encrypted_content: c.encrypted_content.clone(),
            created_by: c.created_by.clone(),
        }),
    })
}

fn client_call(c: &ClientCallItem) -> ToolItem {
    ToolItem {
        id: Some(c.id.clone()),
        call_id: Some(c.call_id.clone()),
        status: None,
        fields: c.fields.clone(),
    }
}
