//! One run = one Response: preparing it (everything that can fail before the first byte) and
//! driving it (the agent loop, in its own task, writing events through the one emitter).
//!
//! Invariant: never imports hyper or a store engine. A run always ends with exactly one terminal
//! event, whatever happens: upstream failure, client disconnect, relay shutdown.

pub mod agent;
pub mod emitter;
pub mod fold;
pub mod log;
pub mod transcode;

use std::sync::Arc;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::api::request::{CreateRequest, InputItem, InputMessage, MessageContent, Role, ToolParam};
use crate::api::response::ReasoningEcho;
use crate::api::{FieldError, OutputItem, Response, ResponseStatus};
use crate::app::App;
use crate::upstream::{FunctionDef, ModelStream, TurnRequest, TurnToolChoice, UpstreamError};
use log::RunLog;

/// Why a run could not start. The HTTP layer maps each to a status.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Invalid(#[from] FieldError),
    #[error("Previous response with id '{0}' not found.")]
    PreviousNotFound(String),
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
}

/// A run ready to go: validated, its context resolved and its first model turn open.
pub struct Prepared {
    pub response: Response,
    pub request: CreateRequest,
    /// Input items as stored (ids assigned, references resolved).
    pub input: Vec<InputItem>,
    /// What the model sees before its own output: the chain's history and this input.
    pub history: Vec<InputItem>,
    pub tools: Vec<FunctionDef>,
    pub first_turn: Option<ModelStream>,
    pub client_bearer: Option<String>,
}

/// A started run: its log and how to stop it.
#[derive(Clone)]
pub struct RunHandle {
    pub id: String,
    pub log: Arc<RunLog>,
    pub cancel: CancellationToken,
    pub background: bool,
}

/// Validates the request against the relay's state, resolves its context and opens the first
/// model turn, so that every failure up to here is an HTTP error and none comes later as one.
pub async fn prepare(app: &App, request: CreateRequest, client_bearer: Option<String>) -> Result<Prepared, StartError> {
    let mut history = Vec::new();
    if let Some(prev) = &request.previous_response_id {
        let Some(stored) = app.store().get(prev) else {
            return Err(StartError::PreviousNotFound(prev.clone()));
        };
        history.extend(stored.history.iter().cloned());
        if let Some(r) = stored.log.snapshot() {
            history.extend(r.output.iter().filter_map(output_as_input));
        }
    }
    let mut input = Vec::with_capacity(request.input.len());
    for (i, item) in request.input.iter().enumerate() {
        match item {
            InputItem::ItemReference(r) => match app.store().find_item(&r.id) {
                Some(found) => input.push(found),
                None => {
                    return Err(StartError::Invalid(FieldError::invalid_value(
                        format!("input[{i}].id"),
                        format!("Item with id '{}' not found.", r.id),
                    )));
                }
            },
            other => input.push(with_id(app, other.clone())),
        }
    }
    for (i, t) in request.tools.iter().enumerate() {
        if let ToolParam::Mcp(_) = t {
            return Err(StartError::Invalid(FieldError::unsupported(
                format!("tools[{i}].type"),
                "Tool type 'mcp' is not available in this build of the relay yet.",
            )));
        }
    }
    history.extend(input.iter().cloned());
    let tools = function_defs(&request);
    let response = template(app, &request);
    let mut prepared =
        Prepared { response, request, input, history, tools, first_turn: None, client_bearer };
    if !prepared.request.background {
        // Open the first turn now: an upstream that is down is an HTTP error, not a failed stream.
        let turn = turn_request(&prepared, &prepared.history);
        prepared.first_turn = Some(app.upstream().open(&turn).await?);
    }
    Ok(prepared)
}

/// Starts the run's task; returns its handle at once.
pub fn start(app: &App, prepared: Prepared) -> RunHandle {
    let log = Arc::new(RunLog::new());
    let cancel = app.shutdown_token().child_token();
    let handle = RunHandle {
        id: prepared.response.id.clone(),
        log: log.clone(),
        cancel: cancel.clone(),
        background: prepared.request.background,
    };
    app.store().insert_live(&prepared, &handle);
    tokio::spawn(agent::drive(app.clone(), prepared, log, cancel));
    handle
}

fn with_id(app: &App, item: InputItem) -> InputItem {
    match item {
        InputItem::Message(mut m) => {
            m.id.get_or_insert_with(|| app.ids().mint("msg"));
            InputItem::Message(m)
        }
        InputItem::FunctionCall(mut f) => {
            f.id.get_or_insert_with(|| app.ids().mint("fc"));
            InputItem::FunctionCall(f)
        }
        InputItem::FunctionCallOutput(mut f) => {
            f.id.get_or_insert_with(|| app.ids().mint("fco"));
            InputItem::FunctionCallOutput(f)
        }
        InputItem::McpApprovalResponse(mut a) => {
            a.id.get_or_insert_with(|| app.ids().mint("mcpa"));
            InputItem::McpApprovalResponse(a)
        }
        other => other,
    }
}

/// An output item as the model will see it in later turns.
pub fn output_as_input(item: &OutputItem) -> Option<InputItem> {
    use crate::api::request::{InputFunctionCall, InputMcpCall, InputPart};
    use crate::api::response::{ContentPart, ReasoningItemInput};
    Some(match item {
        OutputItem::Message(m) => InputItem::Message(InputMessage {
            id: Some(m.id.clone()),
            role: Role::Assistant,
            content: MessageContent::Parts(
                m.content
                    .iter()
                    .filter_map(|p| match p {
                        ContentPart::OutputText { text, .. } => {
                            Some(InputPart::OutputText { text: text.clone(), annotations: None, logprobs: None })
                        }
                        ContentPart::Refusal { refusal } => Some(InputPart::Refusal { refusal: refusal.clone() }),
                        ContentPart::ReasoningText { .. } => None,
                    })
                    .collect(),
            ),
            status: None,
        }),
        OutputItem::FunctionCall(f) => InputItem::FunctionCall(InputFunctionCall {
            id: Some(f.id.clone()),
            call_id: f.call_id.clone(),
            name: f.name.clone(),
            arguments: f.arguments.clone(),
            status: None,
        }),
        OutputItem::Reasoning(r) => InputItem::Reasoning(ReasoningItemInput {
            id: r.id.clone(),
            summary: r.summary.clone(),
            content: Some(r.content.clone()),
            encrypted_content: None,
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
    })
}

fn function_defs(request: &CreateRequest) -> Vec<FunctionDef> {
    request
        .tools
        .iter()
        .filter_map(|t| match t {
            ToolParam::Function(f) => Some(FunctionDef {
                name: f.name.clone(),
                description: f.description.clone().unwrap_or_default(),
                parameters: f.parameters.clone().unwrap_or_else(|| json!({"type": "object", "properties": {}})),
                strict: f.strict,
            }),
            ToolParam::Mcp(_) => None,
        })
        .collect()
}

/// The model turn for the given conversation.
pub fn turn_request(p: &Prepared, items: &[InputItem]) -> TurnRequest {
    use crate::api::request::ToolChoice;
    let r = &p.request;
    TurnRequest {
        model: r.model.clone(),
        instructions: r.instructions.clone(),
        items: items.to_vec(),
        tools: p.tools.clone(),
        tool_choice: match &r.tool_choice {
            ToolChoice::Auto => TurnToolChoice::Auto,
            ToolChoice::None => TurnToolChoice::None,
            ToolChoice::Required => TurnToolChoice::Required,
            ToolChoice::Function { name } => TurnToolChoice::Function(name.clone()),
            ToolChoice::Mcp { .. } => TurnToolChoice::Required,
        },
        parallel_tool_calls: r.parallel_tool_calls,
        max_output_tokens: r.max_output_tokens,
        temperature: r.temperature,
        top_p: r.top_p,
        text_format: r.text_format.clone(),
        reasoning_effort: r.reasoning_effort.clone(),
        user: r.user.clone(),
        client_bearer: p.client_bearer.clone(),
    }
}

/// The Response as `response.created` shows it: every echo field, no output yet.
fn template(app: &App, r: &CreateRequest) -> Response {
    let tools = r
        .tools
        .iter()
        .map(|t| match t {
            ToolParam::Function(f) => json!({"type": "function", "name": f.name, "description": f.description,
                "parameters": f.parameters, "strict": f.strict}),
            ToolParam::Mcp(m) => crate::redact::mcp_tool_echo(m),
        })
        .collect();
    let mut text = json!({"format": {"type": "text"}, "verbosity": r.verbosity.clone().unwrap_or_else(|| "medium".into())});
    if let Some(f) = &r.text_format {
        text["format"] = serde_json::to_value(f).unwrap_or(Value::Null);
    }
    Response {
        id: app.ids().mint("resp"),
        object: "response".into(),
        created_at: app.clock().now_unix(),
        completed_at: None,
        status: if r.background { ResponseStatus::Queued } else { ResponseStatus::InProgress },
        background: r.background,
        error: None,
        incomplete_details: None,
        instructions: r.instructions.clone(),
        max_output_tokens: r.max_output_tokens,
        max_tool_calls: r.max_tool_calls,
        model: r.model.clone(),
        output: Vec::new(),
        parallel_tool_calls: r.parallel_tool_calls,
        previous_response_id: r.previous_response_id.clone(),
        reasoning: ReasoningEcho { effort: r.reasoning_effort.clone(), summary: r.reasoning_summary.clone() },
        store: r.store,
        temperature: r.temperature.unwrap_or(1.0),
        top_p: r.top_p.unwrap_or(1.0),
        presence_penalty: 0.0,
        frequency_penalty: 0.0,
        top_logprobs: 0,
        text,
        tool_choice: r.tool_choice_echo.clone(),
        tools,
        truncation: r.truncation.clone(),
        usage: None,
        user: r.user.clone(),
        metadata: r.metadata.clone(),
        service_tier: "default".into(),
        safety_identifier: r.safety_identifier.clone(),
        prompt_cache_key: r.prompt_cache_key.clone(),
        prompt_cache_retention: r.prompt_cache_retention.clone(),
    }
}
