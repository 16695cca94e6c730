//! The client's answers to approval requests. Before the first byte, each
//! `mcp_approval_response` is matched to the request it answers (in the stored chain, or sent
//! back statelessly), checked (unknown, already answered, altered, or for a tool this request
//! does not offer: a 400 naming the item), and an answer the model already acted on told apart as
//! history. Then the loop acts on them before the model samples again: approved calls run (at
//! most `max_tool_calls`), refused ones reach the model as calls whose result is the refusal.

use super::StartError;
use super::mcp_call::{self, NOT_RUN, OVER_LIMIT};
use super::stop::{Stop, StopSignal};
use super::tools::McpSetup;
use crate::api::request::{InputItem, InputMcpCall};
use crate::api::response::{McpApprovalRequestItem, McpListToolsItem};
use crate::api::{FieldError, OutputItem, output_as_input};
use crate::app::App;
use crate::eventlog::emitter::Emitter;
use crate::limits::Account;
use crate::mcp::ServerSpec;

/// An `mcp_approval_response` matched to the request it answers.
#[derive(Debug, Clone)]
pub struct ApprovalAnswer {
    pub request: McpApprovalRequestItem,
    pub approve: bool,
    pub reason: Option<String>,
}

/// Matches each `mcp_approval_response` of the input to the request it answers: a request in
/// the stored chain (`previous_response_id`), or sent back in the input (statelessly, or by
/// `item_reference`), against the request's `servers` and their `listed` tools. Unknown, already
/// answered, or altered requests are rejected naming `input`.
pub(super) async fn approval_answers(
    app: &App,
    tenant: &crate::store::Tenant,
    earlier: &[InputItem],
    input: &[InputItem],
    servers: &[ServerSpec],
    listed: &[(McpListToolsItem, bool)],
) -> Result<Vec<ApprovalAnswer>, StartError> {
    let mut answers: Vec<ApprovalAnswer> = Vec::new();
    for (i, item) in input.iter().enumerate() {
        let InputItem::McpApprovalResponse(resp) = item else {
            continue;
        };
        let param = format!("input[{i}]");
        let bad = |message: String| {
            StartError::Invalid(FieldError::invalid_value(param.clone(), message))
        };
        let rid = &resp.approval_request_id;
        // History sent back whole (stateless): a later model turn follows this answer (the
        // `mcp_call` it approved, or the model's reply to a refusal), so the answer was used; it
        // is context now, not a call to run or a refusal to tell the model again.
        if model_spoke_after(input, i) {
            continue;
        }
        let found = earlier.iter().chain(input.iter()).find_map(|it| match it {
            InputItem::McpApprovalRequest(a) if &a.id == rid => Some(a.clone()),
            _ => None,
        });
        let Some(req) = found else {
            return Err(bad(format!(
                "No mcp_approval_request with id '{rid}' found for this mcp_approval_response."
            )));
        };
        // A request sent back statelessly must be the one the relay made, unchanged.
        if !earlier
            .iter()
            .any(|it| matches!(it, InputItem::McpApprovalRequest(a) if &a.id == rid))
            && let Some(InputItem::McpApprovalRequest(kept)) = app
                .store()
                .find_item(tenant, rid)
                .await
                .map_err(StartError::Store)?
            && (kept.arguments != req.arguments
                || kept.name != req.name
                || kept.server_label != req.server_label)
        {
            return Err(bad(format!(
                "The mcp_approval_request '{rid}' was changed: its call does not match the request the relay made."
            )));
        }
        let answered_before = earlier.iter().any(|it| match it {
            InputItem::McpApprovalResponse(r) => &r.approval_request_id == rid,
            InputItem::McpCall(c) => c.approval_request_id.as_ref() == Some(rid),
            _ => false,
        }) || answers.iter().any(|a| &a.request.id == rid);
        if answered_before {
            return Err(bad(format!(
                "The mcp_approval_request '{rid}' was already answered."
            )));
        }
        let Some(server) = servers.iter().find(|s| s.label == req.server_label) else {
            return Err(bad(format!(
                "The approved call belongs to MCP server '{}', which is not in this request's 'tools'; send the mcp tool again.",
                req.server_label
            )));
        };
        // Only a tool this request offers may run: in the server's list (when it could be
        // listed) and let through by this request's `allowed_tools`.
        let offered = match listed
            .iter()
            .find(|(l, _)| l.server_label == req.server_label)
        {
            Some((l, _)) if l.error.is_none() => l.tools.iter().any(|t| t.name == req.name),
            _ => server.allowed.allows(&req.name, false),
        };
        if !offered {
            return Err(bad(format!(
                "The approved call's tool '{}' is not among the tools MCP server '{}' offers in this request (see its 'allowed_tools').",
                req.name, req.server_label
            )));
        }
        answers.push(ApprovalAnswer {
            request: req,
            approve: resp.approve,
            reason: resp.reason.clone(),
        });
    }
    Ok(answers)
}

/// Whether an item after `input[i]` is one only a later model turn produces: an assistant
/// message, a call, reasoning or a tool search. Approval requests and tool lists do not count: a
/// client may put each answer right after its request, before the turn's other requests.
fn model_spoke_after(input: &[InputItem], i: usize) -> bool {
    use crate::api::request::Role;
    input[i + 1..].iter().any(|it| match it {
        InputItem::Message(m) => m.role == Role::Assistant,
        InputItem::FunctionCall(_)
        | InputItem::Reasoning(_)
        | InputItem::McpCall(_)
        | InputItem::ToolSearchCall(_)
        | InputItem::ToolSearchOutput(_)
        | InputItem::CustomToolCall(_)
        | InputItem::LocalShellCall(_)
        | InputItem::ShellCall(_)
        | InputItem::ApplyPatchCall(_)
        | InputItem::ComputerCall(_)
        | InputItem::FileSearchCall(_)
        | InputItem::WebSearchCall(_)
        | InputItem::ImageGenerationCall(_)
        | InputItem::CodeInterpreterCall(_)
        | InputItem::Program(_) => true,
        InputItem::McpListTools(_)
        | InputItem::McpApprovalRequest(_)
        | InputItem::FunctionCallOutput(_)
        | InputItem::ItemReference(_)
        | InputItem::McpApprovalResponse(_)
        | InputItem::CustomToolCallOutput(_)
        | InputItem::LocalShellCallOutput(_)
        | InputItem::ShellCallOutput(_)
        | InputItem::ApplyPatchCallOutput(_)
        | InputItem::ComputerCallOutput(_)
        | InputItem::ProgramOutput(_)
        | InputItem::AdditionalTools(_)
        | InputItem::ConfigurationUpdate(_)
        | InputItem::CompactionTrigger(_) => false,
        InputItem::Compaction(_) => true,
    })
}

/// What answering the approvals left the run with.
pub(super) struct Answered {
    /// The conversation items to add, in answer order: each approved call with its result, each
    /// refused one as a call whose result is the refusal.
    pub items: Vec<InputItem>,
    /// How many calls ran.
    pub ran: u64,
    /// Whether some approved calls were over `max_tool_calls` (they failed as not run).
    pub over_limit: bool,
}

/// Runs the approved calls (each an `mcp_call` carrying its `approval_request_id`; at most
/// `max_tool_calls`, the others fail as not run) and tells the model about refused ones.
pub(super) async fn answer_approvals(
    app: &App,
    (mcp, account): (&McpSetup, Option<&Account>),
    em: &mut Emitter,
    max_tool_calls: Option<u64>,
    signal: &StopSignal,
) -> Result<Answered, Stop> {
    let mut started: Vec<_> = (mcp.answers.iter().filter(|a| a.approve))
        .map(|answer| mcp_call::open_approved(em, &answer.request))
        .collect();
    let over = mcp_call::over_budget(&mut started, max_tool_calls, 0);
    let ran = started.len() as u64;
    let done = match mcp_call::run(app, (mcp, account), em, started, signal).await {
        Ok((done, _)) => done,
        Err(stop) => {
            mcp_call::fail_open(em, &over, NOT_RUN);
            return Err(stop);
        }
    };
    if !over.is_empty() {
        mcp_call::fail_open(em, &over, OVER_LIMIT);
        return Ok(Answered {
            items: Vec::new(),
            ran,
            over_limit: true,
        });
    }
    Ok(Answered {
        items: answered_items(&mcp.answers, &done),
        ran,
        over_limit: false,
    })
}

/// The answers as the model is told them, in answer order; a refused call reaches the model as
/// a call whose result is the refusal (it never becomes an `mcp_call` item of the Response).
fn answered_items(answers: &[ApprovalAnswer], done: &[OutputItem]) -> Vec<InputItem> {
    let mut items = Vec::with_capacity(answers.len());
    for answer in answers {
        let req = &answer.request;
        if answer.approve {
            let ran = done.iter().find(|o| matches!(o, OutputItem::McpCall(c) if c.approval_request_id.as_ref() == Some(&req.id)));
            items.extend(ran.and_then(output_as_input));
            continue;
        }
        let mut text = format!(
            "The user refused this call of '{}' on MCP server '{}'.",
            req.name, req.server_label
        );
        if let Some(r) = answer.reason.as_deref().filter(|r| !r.is_empty()) {
            text.push_str(&format!(" Reason: {r}"));
        }
        items.push(InputItem::McpCall(InputMcpCall {
            id: req.id.clone(),
            server_label: req.server_label.clone(),
            name: req.name.clone(),
            arguments: req.arguments.clone(),
            output: Some(text),
            error: None,
            status: None,
            approval_request_id: Some(req.id.clone()),
        }));
    }
    items
}
