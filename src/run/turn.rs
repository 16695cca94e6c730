//! What the model is sent each turn: the conversation as the model sees it (MCP calls as
//! function calls and outputs, approval items left out), the offered tools, and the request's
//! sampling options mapped to a [`TurnRequest`].

use super::{Prepared, transcode};
use crate::api::request::InputItem;
use crate::upstream::{FunctionDef, TurnRequest, TurnToolChoice};

/// The model turn for the given conversation.
pub fn turn_request(p: &Prepared, items: &[InputItem]) -> TurnRequest {
    turn_request_at(p, items, 0, &[])
}

/// The model turn `step` (0 = first) for the given conversation. A forced `tool_choice` applies
/// to the first turn only; later turns let the model answer.
pub fn turn_request_at(
    p: &Prepared,
    items: &[InputItem],
    step: usize,
    found: &[FunctionDef],
) -> TurnRequest {
    let mut t = turn_request_inner(p, items);
    t.tools.extend(found.iter().cloned());
    if step > 0
        && matches!(
            t.tool_choice,
            TurnToolChoice::Required | TurnToolChoice::Function(_)
        )
    {
        t.tool_choice = TurnToolChoice::Auto;
    }
    t
}

fn turn_request_inner(p: &Prepared, items: &[InputItem]) -> TurnRequest {
    use crate::api::request::ToolChoice;
    let r = &p.request;
    TurnRequest {
        model: r.model.clone(),
        instructions: r.instructions.clone(),
        items: model_view(items, &p.mcp.tools),
        tools: p.tools.clone(),
        tool_choice: match &r.tool_choice {
            ToolChoice::Auto => TurnToolChoice::Auto,
            ToolChoice::None => TurnToolChoice::None,
            ToolChoice::Required => TurnToolChoice::Required,
            ToolChoice::Function { name } => TurnToolChoice::Function(name.clone()),
            ToolChoice::Mcp { server_label, name } => {
                let mut matching: Vec<_> = p
                    .mcp
                    .tools
                    .iter()
                    .filter(|(_, t)| {
                        &t.server_label == server_label
                            && name.as_ref().is_none_or(|n| &t.tool == n)
                    })
                    .map(|(m, _)| m.clone())
                    .collect();
                matching.sort();
                match matching.as_slice() {
                    [one] => TurnToolChoice::Function(one.clone()),
                    _ => TurnToolChoice::Required,
                }
            }
        },
        parallel_tool_calls: r.parallel_tool_calls,
        max_output_tokens: r.max_output_tokens,
        temperature: r.temperature,
        top_p: r.top_p,
        text_format: r.text_format.clone(),
        reasoning_effort: r.reasoning_effort.clone(),
        user: r.user.clone(),
        client_bearer: p.client_bearer.clone(),
        responses_only: crate::upstream::ResponsesOptions {
            reasoning_summary: r.reasoning_summary.clone(),
            verbosity: r.verbosity.clone(),
            truncation: (r.truncation == "auto").then(|| r.truncation.clone()),
            prompt_cache_key: r.prompt_cache_key.clone(),
            prompt_cache_retention: r.prompt_cache_retention.clone(),
            safety_identifier: r.safety_identifier.clone(),
        },
    }
}

/// The conversation as the model sees it: MCP calls the relay ran become a function call (under
/// the model-facing name) and its output; approval items are the relay's business, not the model's.
pub(crate) fn model_view(items: &[InputItem], tools: &transcode::ToolMap) -> Vec<InputItem> {
    use crate::api::request::{InputFunctionCall, InputFunctionCallOutput, ToolOutput};
    let mut out = Vec::with_capacity(items.len());
    // Consecutive MCP calls become one assistant turn: all the calls, then all their results.
    let mut outputs = Vec::new();
    for (i, item) in items.iter().enumerate() {
        match item {
            InputItem::McpCall(c) => {
                let name = tools
                    .iter()
                    .find(|(_, t)| t.server_label == c.server_label && t.tool == c.name)
                    .map(|(n, _)| n.clone())
                    .unwrap_or_else(|| {
                        crate::mcp::model_names(
                            &[(c.server_label.clone(), vec![c.name.clone()])],
                            &Default::default(),
                        )[0]
                        .0
                        .clone()
                    });
                let text = match (&c.output, &c.error) {
                    (Some(o), _) => o.clone(),
                    (None, Some(e)) => {
                        serde_json::from_value::<crate::api::response::McpCallError>(e.clone())
                            .map(|e| crate::mcp::error_text(&e))
                            .unwrap_or_else(|_| format!("Error: {e}"))
                    }
                    (None, None) => String::new(),
                };
                out.push(InputItem::FunctionCall(InputFunctionCall {
                    id: None,
                    call_id: c.id.clone(),
                    name,
                    arguments: c.arguments.clone(),
                    status: None,
                }));
                outputs.push(InputItem::FunctionCallOutput(InputFunctionCallOutput {
                    id: None,
                    call_id: c.id.clone(),
                    output: ToolOutput::Text(text),
                    status: None,
                }));
                if !matches!(items.get(i + 1), Some(InputItem::McpCall(_))) {
                    out.append(&mut outputs);
                }
            }
            other => out.push(other.clone()),
        }
    }
    out
}
