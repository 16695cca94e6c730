//! Everything before the first byte: limits, the store's availability, the context, the tool
//! set, the created Response, and the first model turn opened, so that every failure up to here
//! is an HTTP error and none comes later as one.

use serde_json::{Value, json};

use super::{Prepared, RelaySet, StartError, client_tools, context, tools, turn};
use crate::api::request::{CreateRequest, InputItem, NamespacedTool, ToolParam};
use crate::api::response::ReasoningEcho;
use crate::api::{FieldError, Response, ResponseStatus};
use crate::app::App;
use crate::config::HostedTools;
use crate::store::Tenant;

/// Validates the request against the relay's state, resolves its context and opens the first
/// model turn, so that every failure up to here is an HTTP error and none comes later as one.
pub async fn prepare(
    app: &App,
    request: CreateRequest,
    relay: RelaySet,
    client_bearer: Option<String>,
    tenant: Tenant,
) -> Result<Prepared, StartError> {
    prepare_for(app, request, relay, client_bearer, tenant, Purpose::Run).await
}

/// What a request is prepared for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// A run: its conversation is held and its first model turn opened.
    Run,
    /// Looking at the request without running it (token counts, compaction): no conversation
    /// held, no model turn opened.
    Inspect,
}

/// [`prepare`], for `purpose`; the trace spans a run's preparation makes are inside its
/// `invoke_agent` span.
pub async fn prepare_for(
    app: &App,
    request: CreateRequest,
    relay: RelaySet,
    client_bearer: Option<String>,
    tenant: Tenant,
    purpose: Purpose,
) -> Result<Prepared, StartError> {
    let span = match purpose {
        Purpose::Run => crate::otel::agent_span(&request.model),
        Purpose::Inspect => tracing::Span::none(),
    };
    if let Some(c) = &request.conversation {
        span.record("gen_ai.conversation.id", c.as_str());
    }
    let prepared = crate::otel::in_agent(
        span.clone(),
        prepare_in(app, request, relay, client_bearer, tenant, purpose),
    )
    .await;
    match prepared {
        Ok(mut p) => {
            p.span = span;
            Ok(p)
        }
        Err(e) => {
            crate::otel::failed(&span, e.kind());
            Err(e)
        }
    }
}

async fn prepare_in(
    app: &App,
    request: CreateRequest,
    relay: RelaySet,
    client_bearer: Option<String>,
    tenant: Tenant,
    purpose: Purpose,
) -> Result<Prepared, StartError> {
    admit(app, &request).await?;
    let conversation_lock = match &request.conversation {
        Some(c) if purpose == Purpose::Run => Some(
            app.store()
                .lock_conversation(&tenant, c)
                .await
                .map_err(StartError::Store)?
                .ok_or_else(|| StartError::ConversationBusy(c.clone()))?,
        ),
        _ => None,
    };
    let (history, input) = context::resolve(app, &tenant, &request, &relay).await?;
    // A background run is answered before its servers are listed (a slow server must not hold
    // the `queued` answer back), unless it answers approvals: those are checked against the
    // lists (usually reused from the chain) before the run is accepted.
    let tools_pending = request.background
        && relay.generate
        && !input
            .iter()
            .any(|i| matches!(i, InputItem::McpApprovalResponse(_)));
    let offered = client_tools::client_tool_params(&request, &history)?;
    let (mut tools, clients) = client_tools::client_tools(&offered);
    let mcp = if tools_pending || !relay.generate {
        // Nothing listed: a run that will not sample (`generate: false`) or lists them itself.
        tools::mcp_specs(app, &request, &relay)?;
        tools::McpSetup::default()
    } else {
        tools::resolve_mcp(
            app, &tenant, &request, &relay, &history, &input, &mut tools, true,
        )
        .await?
    };
    let response = template(app, &request);
    let answered = !mcp.answers.is_empty();
    let mut prepared = Prepared {
        response,
        tools,
        request,
        relay,
        input,
        history,
        first_turn: None,
        client_bearer,
        tenant,
        conversation_lock,
        mcp,
        clients: std::sync::Arc::new(clients),
        tools_pending,
        span: tracing::Span::none(),
    };
    // Approved calls run before the model samples again, so the first turn cannot open early.
    // A run that may compact first counts its context before its first turn.
    if let Some(lock) = &mut prepared.conversation_lock {
        lock.hold_for(&prepared.response.id).await;
    }
    if purpose == Purpose::Run
        && prepared.relay.generate
        && !prepared.request.background
        && !answered
        && !prepared.compacts()
        && prepared.request.compact_threshold.is_none()
    {
        // Open the first turn now: an upstream that is down is an HTTP error, not a failed stream.
        let limit = prepared.request.max_output_tokens;
        let first = turn::open(app, &prepared, &prepared.history, 0, &[], limit).await?;
        prepared.first_turn = Some(first);
    }
    Ok(prepared)
}

/// What is checked before anything is read: the store can keep the run, and the request is
/// within the relay's limits (input items, tools, hosted tools).
async fn admit(app: &App, request: &CreateRequest) -> Result<(), StartError> {
    let limits = &app.config().limits;
    if request.store {
        // A store that cannot keep the run now (Redis away) is a 503 before the first byte.
        app.store().available().await.map_err(StartError::Store)?;
    }
    if request.input.len() > limits.max_input_items {
        return Err(StartError::Invalid(FieldError::invalid_value(
            "input",
            format!(
                "Too many input items: {} (this relay accepts at most {}).",
                request.input.len(),
                limits.max_input_items
            ),
        )));
    }
    if request.tools.len() > limits.max_tools {
        return Err(StartError::Invalid(FieldError::invalid_value(
            "tools",
            format!(
                "Too many tools: {} (this relay accepts at most {}).",
                request.tools.len(),
                limits.max_tools
            ),
        )));
    }
    if app.config().hosted_tools == HostedTools::Reject
        && let Some((i, kind)) = request.tools.iter().enumerate().find_map(|(i, t)| match t {
            ToolParam::Hosted(kind, _) => Some((i, kind)),
            _ => None,
        })
    {
        return Err(StartError::Invalid(FieldError::unsupported(
            format!("tools[{i}]"),
            format!(
                "The hosted tool '{kind}' cannot run on this relay (it runs only function, custom, namespace, mcp and client tools); remove it, or start the relay with --hosted-tools ignore to have it left out of the model's tools."
            ),
        )));
    }
    Ok(())
}

/// The Response as `response.created` shows it: every echo field, no output yet.
fn template(app: &App, r: &CreateRequest) -> Response {
    let tools = r
        .tools
        .iter()
        .map(|t| match t {
            ToolParam::Function(f) => {
                json!({"type": "function", "name": f.name, "description": f.description,
                "parameters": f.parameters, "strict": f.strict})
            }
            ToolParam::Mcp(m) => {
                crate::redact::mcp_tool_echo(m, app.config().mcp.default_approval.as_str())
            }
            ToolParam::ToolSearch(t) => json!({"type": "tool_search",
                "execution": t.execution.as_deref().unwrap_or("server"),
                "description": t.description, "parameters": t.parameters}),
            ToolParam::Custom(c) => tagged("custom", c),
            ToolParam::Namespace(n) => json!({"type": "namespace", "name": n.name,
                "description": n.description,
                "tools": n.tools.iter().map(|t| match t {
                    NamespacedTool::Function(f) => tagged("function", f),
                    NamespacedTool::Custom(c) => tagged("custom", c),
                }).collect::<Vec<_>>()}),
            ToolParam::Builtin(_, spec) | ToolParam::Hosted(_, spec) => Value::Object(spec.clone()),
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
        status: if r.background {
            ResponseStatus::Queued
        } else {
            ResponseStatus::InProgress
        },
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
        reasoning: ReasoningEcho {
            effort: r.reasoning_effort.clone(),
            summary: r.reasoning_summary.clone(),
            context: r.reasoning_context.clone(),
            mode: r.reasoning_mode.clone(),
        },
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
        conversation: r
            .conversation
            .as_ref()
            .map(|id| crate::api::response::ConversationRef { id: id.clone() }),
    }
}

/// A tool object serialized with its `type` first.
fn tagged(kind: &str, tool: &impl serde::Serialize) -> Value {
    let mut out = serde_json::Map::new();
    out.insert("type".into(), json!(kind));
    if let Ok(Value::Object(fields)) = serde_json::to_value(tool) {
        out.extend(fields);
    }
    Value::Object(out)
}
