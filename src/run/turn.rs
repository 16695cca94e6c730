//! What the model is sent each turn: the conversation as the model sees it (MCP calls as
//! function calls and outputs, approval items left out), the offered tools, and the request's
//! sampling options mapped to a [`TurnRequest`]; and [`open`], the one function that opens a
//! run's model turn.

use serde_json::{Value, json};

use std::collections::{HashMap, HashSet};

use super::transcode::ClientKind;
use super::{Prepared, transcode};
use crate::api::request::BuiltinTool;
use crate::api::request::{
    InputFunctionCall, InputFunctionCallOutput, InputItem, InputMessage, InputPart, MessageContent,
    ToolOutput,
};
use crate::app::App;
use crate::upstream::{FunctionDef, ModelStream, TurnRequest, TurnToolChoice, UpstreamError};

/// Opens model turn `step` (0 = first) on `items`, the tools searches `found` added, its output
/// bounded by `max_output_tokens`: the one place the turns of a run's conversation are opened
/// (the first in `prepare`, before `response.created`, so that an upstream that is down is an
/// HTTP error; the later ones by the loop). A summary (`compact`) and a token count (`tokens`)
/// open one-off turns of their own. The turn is built at once; the future only opens it (it holds no
/// borrow of `p`, which is not `Sync`).
pub(super) fn open<'a>(
    app: &'a App,
    p: &Prepared,
    items: &[InputItem],
    step: usize,
    found: &[FunctionDef],
    max_output_tokens: Option<u64>,
) -> impl Future<Output = Result<ModelStream, UpstreamError>> + use<'a> {
    let mut turn = turn_request_at(p, items, step, found);
    turn.max_output_tokens = max_output_tokens;
    turn.signed_reasoning = signed_reasoning(app, &turn);
    async move { app.upstream().open(&turn).await }
}

/// The signed reasoning blocks sealed in `turn`'s reasoning items, by item index, for a turn
/// that goes to an Anthropic or Gemini upstream (the kinds that take them back), only that kind's
/// blocks (Gemini's are tagged `"gemini"`); none otherwise. A seal that does not open holds none
/// (a client's seals were checked in `context`).
pub(super) fn signed_reasoning(app: &App, turn: &TurnRequest) -> HashMap<usize, Vec<Value>> {
    use crate::upstream::UpstreamApi;
    let (upstream, _) = app.upstream().route(&turn.model);
    let gemini = match upstream.api {
        UpstreamApi::Anthropic => false,
        UpstreamApi::Gemini => true,
        UpstreamApi::Chat | UpstreamApi::Responses => return HashMap::new(),
    };
    let mut signed = HashMap::new();
    for (i, item) in turn.items.iter().enumerate() {
        let InputItem::Reasoning(r) = item else {
            continue;
        };
        let blocks = r
            .encrypted_content
            .as_deref()
            .and_then(|sealed| app.sealer().open(sealed).ok())
            .and_then(|plain| serde_json::from_slice::<Value>(&plain).ok())
            .and_then(|mut v| match v.get_mut("signed").map(Value::take) {
                Some(Value::Array(blocks)) => Some(blocks),
                _ => None,
            })
            .map(|blocks| {
                (blocks.into_iter())
                    .filter(|b| b.get("gemini").is_some() == gemini)
                    .collect::<Vec<_>>()
            })
            .filter(|blocks| !blocks.is_empty());
        if let Some(blocks) = blocks {
            signed.insert(i, blocks);
        }
    }
    signed
}

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
    let mut tools = p.tools.clone();
    if let ToolChoice::Allowed { tools: allowed, .. } = &r.tool_choice {
        let names = allowed_names(p, allowed);
        tools.retain(|f| names.contains(&f.name));
    }
    TurnRequest {
        model: r.model.clone(),
        instructions: r.instructions.clone(),
        items: model_view(items, &p.mcp.tools, &p.clients),
        tools,
        tool_choice: match &r.tool_choice {
            ToolChoice::Custom { name } => {
                TurnToolChoice::Function(client_name(p, ClientKind::Custom, name, None))
            }
            ToolChoice::Builtin(b) => {
                let (kind, base) = builtin_kind(*b);
                TurnToolChoice::Function(client_name(p, kind, base, None))
            }
            ToolChoice::Allowed { required: true, .. } => TurnToolChoice::Required,
            ToolChoice::Allowed {
                required: false, ..
            } => TurnToolChoice::Auto,
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
        text_format: updated(items, "/text/format")
            .and_then(|f| serde_json::from_value(f).ok())
            .or_else(|| r.text_format.clone()),
        reasoning_effort: updated(items, "/reasoning/effort")
            .and_then(|e| e.as_str().map(str::to_string))
            .or_else(|| r.reasoning_effort.clone()),
        user: r.user.clone(),
        client_bearer: p.client_bearer.clone(),
        responses_only: crate::upstream::ResponsesOptions {
            reasoning_summary: r.reasoning_summary.clone(),
            reasoning_context: r.reasoning_context.clone(),
            reasoning_mode: r.reasoning_mode.clone(),
            verbosity: r.verbosity.clone(),
            truncation: (r.truncation == "auto").then(|| r.truncation.clone()),
            prompt_cache_key: r.prompt_cache_key.clone(),
            prompt_cache_retention: r.prompt_cache_retention.clone(),
            prompt_cache_options: r.prompt_cache_options.clone(),
            safety_identifier: r.safety_identifier.clone(),
        },
        signed_reasoning: HashMap::new(),
    }
}

/// What the conversation's last `configuration_update` item sets at `pointer` (`/text/format`,
/// `/reasoning/effort`): from there on it replaces the request's own setting.
fn updated(items: &[InputItem], pointer: &str) -> Option<Value> {
    items.iter().rev().find_map(|i| match i {
        InputItem::ConfigurationUpdate(t) => Value::Object(t.fields.clone())
            .pointer(pointer)
            .filter(|v| !v.is_null())
            .cloned(),
        _ => None,
    })
}

/// The model-facing name of a client tool (its own name when it is not in the map).
fn client_name(p: &Prepared, kind: ClientKind, name: &str, namespace: Option<&str>) -> String {
    model_name(&p.clients, kind, name, namespace)
}

/// The model-facing name of the client tool `kind` `name` (in `namespace`), by `clients`.
fn model_name(
    clients: &transcode::ClientMap,
    kind: ClientKind,
    name: &str,
    namespace: Option<&str>,
) -> String {
    clients
        .iter()
        .find(|(_, t)| t.kind == kind && t.name == name && t.namespace.as_deref() == namespace)
        .map(|(m, _)| m.clone())
        .unwrap_or_else(|| name.to_string())
}

/// A built-in client tool's kind and the name it is offered under before any clash.
fn builtin_kind(b: BuiltinTool) -> (ClientKind, &'static str) {
    match b {
        BuiltinTool::LocalShell => (ClientKind::LocalShell, "local_shell"),
        BuiltinTool::Shell => (ClientKind::Shell, "shell"),
        BuiltinTool::ApplyPatch => (ClientKind::ApplyPatch, "apply_patch"),
        BuiltinTool::Computer => (ClientKind::Computer, "computer"),
    }
}

/// The model-facing names an `allowed_tools` list lets through: functions and custom tools by
/// name, a namespace's tools, an MCP server's tools (or one of them), built-in tools by type.
fn allowed_names(p: &Prepared, allowed: &[Value]) -> HashSet<String> {
    let mut names = HashSet::new();
    for a in allowed {
        let kind = a.get("type").and_then(Value::as_str).unwrap_or_default();
        let name = a.get("name").and_then(Value::as_str);
        match kind {
            "function" => {
                let ns = a.get("namespace").and_then(Value::as_str);
                names.extend(name.map(|n| client_name(p, ClientKind::Function, n, ns)));
            }
            "custom" => names.extend(name.map(|n| client_name(p, ClientKind::Custom, n, None))),
            "namespace" => names.extend(
                p.clients
                    .iter()
                    .filter(|(_, t)| t.namespace.as_deref() == name)
                    .map(|(m, _)| m.clone()),
            ),
            "mcp" => {
                let label = a.get("server_label").and_then(Value::as_str);
                names.extend(
                    p.mcp
                        .tools
                        .iter()
                        .filter(|(_, t)| {
                            Some(t.server_label.as_str()) == label
                                && name.is_none_or(|n| t.tool == n)
                        })
                        .map(|(m, _)| m.clone()),
                );
            }
            "tool_search" => names.extend(
                p.clients
                    .iter()
                    .filter(|(_, t)| t.kind == ClientKind::ToolSearch)
                    .map(|(m, _)| m.clone())
                    .chain(p.mcp.search_tool.iter().map(|f| f.name.clone())),
            ),
            other => {
                let builtin = match other {
                    "local_shell" => Some(BuiltinTool::LocalShell),
                    "shell" => Some(BuiltinTool::Shell),
                    "apply_patch" => Some(BuiltinTool::ApplyPatch),
                    "computer" | "computer_use" | "computer_use_preview" => {
                        Some(BuiltinTool::Computer)
                    }
                    _ => None,
                };
                if let Some(b) = builtin {
                    let (kind, base) = builtin_kind(b);
                    names.insert(client_name(p, kind, base, None));
                }
            }
        }
    }
    names
}

/// The conversation as the model sees it: MCP calls the relay ran become a function call (under
/// the model-facing name) and its output; approval items are the relay's business, not the model's.
pub(crate) fn model_view(
    items: &[InputItem],
    tools: &transcode::ToolMap,
    clients: &transcode::ClientMap,
) -> Vec<InputItem> {
    let mut out = Vec::with_capacity(items.len());
    // Consecutive MCP calls become one assistant turn: all the calls, then all their results.
    let mut outputs = Vec::new();
    // Screenshots of computer calls, shown after the outputs they came with.
    let mut images = Vec::new();
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
                    namespace: None,
                    caller: None,
                    is_async: None,
                }));
                outputs.push(InputItem::FunctionCallOutput(InputFunctionCallOutput::new(
                    c.id.clone(),
                    ToolOutput::Text(text),
                )));
                if !matches!(items.get(i + 1), Some(InputItem::McpCall(_))) {
                    out.append(&mut outputs);
                }
            }
            other => {
                client_view(other, clients, &mut out, &mut images);
                // Screenshots follow the run of call outputs they came in (a chat model takes
                // no other message between a turn's tool results).
                if !matches!(items.get(i + 1), Some(next) if is_call_output(next)) {
                    out.append(&mut images);
                }
            }
        }
    }
    out.append(&mut images);
    out
}

/// Whether an item answers a call (a chat model's `tool` message).
fn is_call_output(item: &InputItem) -> bool {
    matches!(
        item,
        InputItem::FunctionCallOutput(_)
            | InputItem::CustomToolCallOutput(_)
            | InputItem::LocalShellCallOutput(_)
            | InputItem::ShellCallOutput(_)
            | InputItem::ApplyPatchCallOutput(_)
            | InputItem::ComputerCallOutput(_)
    ) || matches!(item, InputItem::ToolSearchOutput(t) if t.execution == "client")
}

/// A client tool's items as the model made them: each call a function call under the
/// model-facing name, each output a function output (a computer's screenshot also as an image
/// the next user message shows); hosted tools' items are left out (the model cannot use them
/// here). Anything else is kept as is.
fn client_view(
    item: &InputItem,
    clients: &transcode::ClientMap,
    out: &mut Vec<InputItem>,
    images: &mut Vec<InputItem>,
) {
    use transcode::ClientKind;
    let builtin_name = |kind: ClientKind, base: &str| model_name(clients, kind, base, None);
    match item {
        InputItem::FunctionCall(f) if f.namespace.is_some() => {
            out.push(InputItem::FunctionCall(InputFunctionCall {
                name: model_name(
                    clients,
                    ClientKind::Function,
                    &f.name,
                    f.namespace.as_deref(),
                ),
                namespace: None,
                ..f.clone()
            }))
        }
        InputItem::CustomToolCall(t) => out.push(call(
            &t.call_id,
            model_name(
                clients,
                ClientKind::Custom,
                t.str("name").unwrap_or_default(),
                t.str("namespace"),
            ),
            json!({"input": t.str("input").unwrap_or_default()}).to_string(),
        )),
        InputItem::LocalShellCall(t) => out.push(call(
            &t.call_id,
            builtin_name(ClientKind::LocalShell, "local_shell"),
            arguments(field(t, "action"), true),
        )),
        InputItem::ShellCall(t) => out.push(call(
            &t.call_id,
            builtin_name(ClientKind::Shell, "shell"),
            arguments(field(t, "action"), false),
        )),
        InputItem::ApplyPatchCall(t) => out.push(call(
            &t.call_id,
            builtin_name(ClientKind::ApplyPatch, "apply_patch"),
            arguments(field(t, "operation"), false),
        )),
        InputItem::ComputerCall(t) => out.push(call(
            &t.call_id,
            builtin_name(ClientKind::Computer, "computer"),
            arguments(field(t, "action"), false),
        )),
        InputItem::ToolSearchCall(t) if t.execution == "client" => out.push(call(
            &t.call_id,
            builtin_name(ClientKind::ToolSearch, "tool_search"),
            t.arguments.to_string(),
        )),
        InputItem::ToolSearchOutput(t) if t.execution == "client" => out.push(output(
            &t.call_id,
            ToolOutput::Text(format!(
                "Tools found (callable from now on): {}",
                Value::Array(t.tools.clone())
            )),
        )),
        InputItem::CustomToolCallOutput(t) | InputItem::LocalShellCallOutput(t) => {
            out.push(output(&t.call_id, output_text(field(t, "output"))))
        }
        InputItem::ShellCallOutput(t) => {
            out.push(output(&t.call_id, output_text(field(t, "output"))))
        }
        InputItem::ApplyPatchCallOutput(t) => {
            let status = t.status.clone().unwrap_or_else(|| "completed".into());
            let said = t.str("output").unwrap_or_default();
            out.push(output(
                &t.call_id,
                ToolOutput::Text(format!(
                    "{status}{}{said}",
                    if said.is_empty() { "" } else { ": " }
                )),
            ))
        }
        InputItem::ComputerCallOutput(t) => {
            out.push(output(
                &t.call_id,
                ToolOutput::Text("Screenshot taken: it follows as an image.".into()),
            ));
            images.extend(screenshot(t));
        }
        InputItem::FileSearchCall(_)
        | InputItem::WebSearchCall(_)
        | InputItem::ImageGenerationCall(_)
        | InputItem::CodeInterpreterCall(_)
        | InputItem::Program(_)
        | InputItem::ProgramOutput(_)
        | InputItem::AdditionalTools(_)
        | InputItem::ConfigurationUpdate(_) => {}
        other => out.push(other.clone()),
    }
}

/// A client tool's call as the model made it: a function call.
fn call(call_id: &Option<String>, name: String, arguments: String) -> InputItem {
    InputItem::FunctionCall(InputFunctionCall {
        id: None,
        call_id: call_id.clone().unwrap_or_default(),
        name,
        arguments,
        status: None,
        namespace: None,
        caller: None,
        is_async: None,
    })
}

/// A client tool's output as the model is given it: a function call's output.
fn output(call_id: &Option<String>, output: ToolOutput) -> InputItem {
    InputItem::FunctionCallOutput(InputFunctionCallOutput::new(
        call_id.clone().unwrap_or_default(),
        output,
    ))
}

/// A field of a client tool's item (null when absent).
fn field(t: &crate::api::request::ToolItem, key: &str) -> Value {
    t.fields.get(key).cloned().unwrap_or(Value::Null)
}

/// A tool's output value as a function output: a string as text, content parts as parts,
/// anything else as its JSON.
fn output_text(v: Value) -> ToolOutput {
    match v {
        Value::String(s) => ToolOutput::Text(s),
        Value::Array(parts) if parts.iter().all(|p| p.get("type").is_some()) => {
            ToolOutput::Parts(parts)
        }
        Value::Null => ToolOutput::Text(String::new()),
        other => ToolOutput::Text(other.to_string()),
    }
}

/// A built-in tool's action (or operation) as a function's JSON arguments, its `type` dropped
/// when `drop_type`.
fn arguments(v: Value, drop_type: bool) -> String {
    match v {
        Value::Object(mut o) => {
            if drop_type {
                o.remove("type");
            }
            Value::Object(o).to_string()
        }
        other => other.to_string(),
    }
}

/// A computer call's screenshot as a user message showing the image, when it has one.
fn screenshot(t: &crate::api::request::ToolItem) -> Option<InputItem> {
    let shot = field(t, "output");
    let url = shot.get("image_url").and_then(Value::as_str)?.to_string();
    Some(InputItem::Message(InputMessage::user(
        MessageContent::Parts(vec![InputPart::image(url)]),
    )))
}
