//! One run = one Response: preparing it (everything that can fail before the first byte) and
//! driving it (the agent loop, in its own task, writing events through the one emitter).
//!
//! Invariant: never imports hyper or a store engine. A run always ends with exactly one terminal
//! event, whatever happens: upstream failure, client disconnect, relay shutdown.

pub mod agent;
pub mod emitter;
pub mod fold;
pub mod log;
pub mod search;
pub mod transcode;

use std::sync::Arc;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::api::request::{
    CreateRequest, InputItem, InputMessage, MessageContent, Role, ToolParam,
};
use crate::api::response::{McpApprovalRequestItem, McpListToolsItem, McpToolInfo, ReasoningEcho};
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
    /// Listing a server's tools failed and the relay is set to fail such requests (HTTP 424).
    #[error("{message}")]
    McpDiscovery { label: String, message: String },
    #[error("{0}")]
    Store(String),
}

/// The MCP side of a run: its servers, what was listed, and the model-facing names.
#[derive(Clone, Default)]
pub struct McpSetup {
    pub servers: Vec<crate::mcp::ServerSpec>,
    /// One `mcp_list_tools` item per server, in request order; `fresh` ones are emitted.
    pub listed: Vec<(McpListToolsItem, bool)>,
    pub tools: transcode::ToolMap,
    /// The client's answers to earlier approval requests, in input order.
    pub answers: Vec<ApprovalAnswer>,
    /// Tools of `defer_loading` servers: out of the model's first context, found by searching.
    pub deferred: Vec<search::Candidate>,
    /// The model-facing name of the tool-search function, when there is one.
    pub search_tool: Option<FunctionDef>,
}

/// An `mcp_approval_response` matched to the request it answers.
#[derive(Debug, Clone)]
pub struct ApprovalAnswer {
    pub request: McpApprovalRequestItem,
    pub approve: bool,
    pub reason: Option<String>,
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
    pub mcp: McpSetup,
    /// A background run answers `queued` at once: it lists its MCP servers itself, first thing
    /// ([`resolve_tools`]); `mcp` is empty and `tools` has only the function tools until then.
    pub tools_pending: bool,
}

/// A started run: its log and how to stop it.
#[derive(Clone)]
pub struct RunHandle {
    pub id: String,
    pub log: Arc<RunLog>,
    pub cancel: CancellationToken,
    pub background: bool,
    /// The Response as `response.created` carries it (`queued` for a background run).
    pub created: Arc<Response>,
}

/// Validates the request against the relay's state, resolves its context and opens the first
/// model turn, so that every failure up to here is an HTTP error and none comes later as one.
pub async fn prepare(
    app: &App,
    request: CreateRequest,
    client_bearer: Option<String>,
) -> Result<Prepared, StartError> {
    let limits = &app.config().limits;
    if request.store {
        // A store that cannot keep the run now (Redis away) is a 503 before the first byte.
        app.store()
            .available()
            .await
            .map_err(|e| StartError::Store(e.to_string()))?;
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
    let mut history = Vec::new();
    if let Some(prev) = &request.previous_response_id {
        match app
            .store()
            .history(prev)
            .await
            .map_err(|e| StartError::Store(e.to_string()))?
        {
            Some(h) => history = h,
            None => return Err(StartError::PreviousNotFound(prev.clone())),
        }
    }
    let mut input = Vec::with_capacity(request.input.len());
    for (i, item) in request.input.iter().enumerate() {
        match item {
            InputItem::ItemReference(r) => match app
                .store()
                .find_item(&r.id)
                .await
                .map_err(|e| StartError::Store(e.to_string()))?
            {
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
    history.extend(input.iter().cloned());
    // A background run is answered before its servers are listed (a slow server must not hold
    // the `queued` answer back), unless it answers approvals: those are checked against the
    // lists (usually reused from the chain) before the run is accepted.
    let tools_pending = request.background
        && !input
            .iter()
            .any(|i| matches!(i, InputItem::McpApprovalResponse(_)));
    let mut tools = function_defs(&request);
    let mcp = if tools_pending {
        mcp_specs(app, &request)?;
        McpSetup::default()
    } else {
        resolve_mcp(app, &request, &history, &input, &mut tools, true).await?
    };
    let response = template(app, &request);
    let answered = !mcp.answers.is_empty();
    let mut prepared = Prepared {
        response,
        tools,
        request,
        input,
        history,
        first_turn: None,
        client_bearer,
        mcp,
        tools_pending,
    };
    // Approved calls run before the model samples again, so the first turn cannot open early.
    if !prepared.request.background && !answered {
        // Open the first turn now: an upstream that is down is an HTTP error, not a failed stream.
        let turn = turn_request(&prepared, &prepared.history);
        prepared.first_turn = Some(app.upstream().open(&turn).await?);
    }
    Ok(prepared)
}

/// Resolves the request's `mcp` tools: lists the servers (or reuses lists in the context),
/// matches the client's approval answers, and adds every tool the model may call to `tools`.
/// A server that could not be listed under `--mcp-discovery-failure fail` is an error, after
/// `p.mcp` holds every list (so that the run can show them before it fails).
pub(crate) async fn resolve_tools(app: &App, p: &mut Prepared) -> Result<(), StartError> {
    p.tools_pending = false;
    p.mcp = resolve_mcp(app, &p.request, &p.history, &p.input, &mut p.tools, false).await?;
    unlisted_server(app, &p.mcp)
}

/// [`resolve_tools`] on a request's parts (`history` ends with `input`); with `strict`, a server
/// that could not be listed under `--mcp-discovery-failure fail` is an error at once.
async fn resolve_mcp(
    app: &App,
    request: &CreateRequest,
    history: &[InputItem],
    input: &[InputItem],
    tools: &mut Vec<FunctionDef>,
    strict: bool,
) -> Result<McpSetup, StartError> {
    let earlier = history.len() - input.len();
    let mut mcp = mcp_setup(app, request, history, tools).await?;
    if strict {
        unlisted_server(app, &mcp)?;
    }
    mcp.answers = approval_answers(app, request, &history[..earlier], input, &mcp).await?;
    tools.extend(mcp_function_defs(&mcp));
    Ok(mcp)
}

/// Under `--mcp-discovery-failure fail`, the first server whose tools could not be listed.
fn unlisted_server(app: &App, mcp: &McpSetup) -> Result<(), StartError> {
    use crate::config::DiscoveryFailure;
    match mcp.listed.iter().find(|(l, _)| l.error.is_some()) {
        Some((item, _)) if app.config().mcp.discovery_failure == DiscoveryFailure::Fail => {
            Err(StartError::McpDiscovery {
                label: item.server_label.clone(),
                message: item.error.clone().unwrap_or_default(),
            })
        }
        _ => Ok(()),
    }
}

/// Matches each `mcp_approval_response` of the input to the request it answers: a request in
/// the stored chain (`previous_response_id`), or sent back in the input (statelessly, or by
/// `item_reference`). Unknown, already answered, or altered requests are rejected naming `input`.
async fn approval_answers(
    app: &App,
    request: &CreateRequest,
    earlier: &[InputItem],
    input: &[InputItem],
    mcp: &McpSetup,
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
                .find_item(rid)
                .await
                .map_err(|e| StartError::Store(e.to_string()))?
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
        let Some(server) = mcp.servers.iter().find(|s| s.label == req.server_label) else {
            return Err(bad(format!(
                "The approved call belongs to MCP server '{}', which is not in this request's 'tools'; send the mcp tool again.",
                req.server_label
            )));
        };
        // Only a tool this request offers may run: in the server's list (when it could be
        // listed) and let through by this request's `allowed_tools`.
        let offered = match mcp
            .listed
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
    let _ = request;
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
        | InputItem::ToolSearchOutput(_) => true,
        InputItem::McpListTools(_)
        | InputItem::McpApprovalRequest(_)
        | InputItem::FunctionCallOutput(_)
        | InputItem::ItemReference(_)
        | InputItem::McpApprovalResponse(_) => false,
    })
}

/// A listed tool's `readOnlyHint`, as its `mcp_list_tools` entry carries it.
fn read_only(tool: &McpToolInfo) -> bool {
    tool.annotations
        .as_ref()
        .and_then(|a| a.get("read_only")?.as_bool())
        .unwrap_or(false)
}

/// The request's `mcp` tools, validated (the SSRF guard checks IP-literal hosts here, naming the
/// tool; names are checked address by address when connecting).
fn mcp_specs(
    app: &App,
    request: &CreateRequest,
) -> Result<Vec<crate::mcp::ServerSpec>, StartError> {
    let cfg = &app.config().mcp;
    let specs = crate::mcp::specs(&request.tools, cfg.max_servers, cfg.default_approval)?;
    for (i, spec) in &specs {
        cfg.ssrf.check_url(&spec.url).map_err(|r| {
            FieldError::invalid_value(format!("tools[{i}].server_url"), r.to_string())
        })?;
    }
    Ok(specs.into_iter().map(|(_, s)| s).collect())
}

/// Validates the request's `mcp` tools, reuses tool lists already in the context, lists the
/// other servers concurrently, and names every tool for the model.
async fn mcp_setup(
    app: &App,
    request: &CreateRequest,
    history: &[InputItem],
    functions: &[FunctionDef],
) -> Result<McpSetup, StartError> {
    let cfg = &app.config().mcp;
    let servers = mcp_specs(app, request)?;
    if servers.is_empty() {
        return Ok(McpSetup::default());
    }
    // Lists already in the context (PROTOCOL §1.5): that server is not listed again.
    let known: std::collections::HashMap<&str, &McpListToolsItem> = history
        .iter()
        .filter_map(|i| match i {
            InputItem::McpListTools(l) if l.error.is_none() => Some((l.server_label.as_str(), l)),
            _ => None,
        })
        .collect();
    let listings = futures::future::join_all(servers.iter().map(|spec| async {
        if let Some(l) = known.get(spec.label.as_str()) {
            // Reused, but only what this request's `allowed_tools` lets through reaches the
            // model (PROTOCOL §1.5): an earlier list may hold tools this request excludes.
            let mut item = (*l).clone();
            if !spec.allowed.is_all() {
                item.tools = item
                    .tools
                    .iter()
                    .filter(|t| spec.allowed.allows(&t.name, read_only(t)))
                    .cloned()
                    .collect();
            }
            return Ok((item, false));
        }
        // Minted before listing (futures start in request order), so ids follow the request,
        // not whichever server answers first.
        let id = app.ids().mint("mcpl");
        let listed = app.mcp().list_tools(spec, cfg.discovery_timeout).await;
        Ok::<_, StartError>(match listed {
            Ok(tools) => {
                let total = tools.len();
                let tools: Arc<[McpToolInfo]> = tools
                    .into_iter()
                    .filter(|t| spec.allowed.allows(&t.name, t.read_only))
                    .map(|t| McpToolInfo {
                        name: t.name,
                        description: t.description,
                        input_schema: t.input_schema,
                        annotations: Some(json!({"read_only": t.read_only})),
                    })
                    .collect();
                let error = (tools.is_empty() && total > 0 && !spec.allowed.is_all()).then(|| {
                    format!(
                        "No tool of MCP server '{}' matches 'allowed_tools'.",
                        spec.label
                    )
                });
                (
                    McpListToolsItem {
                        id,
                        server_label: spec.label.clone(),
                        tools,
                        error,
                    },
                    true,
                )
            }
            Err(e) => {
                let error = Some(e.to_string());
                (
                    McpListToolsItem {
                        id,
                        server_label: spec.label.clone(),
                        tools: Arc::new([]),
                        error,
                    },
                    true,
                )
            }
        })
    }))
    .await;
    let mut listed = Vec::with_capacity(listings.len());
    for l in listings {
        listed.push(l?);
    }
    let reserved: std::collections::HashSet<String> =
        functions.iter().map(|f| f.name.clone()).collect();
    let names: Vec<(String, Vec<String>)> = listed
        .iter()
        .map(|(l, _)| {
            (
                l.server_label.clone(),
                l.tools.iter().map(|t| t.name.clone()).collect(),
            )
        })
        .collect();
    let mut tools = transcode::ToolMap::new();
    for (model_name, label, tool) in crate::mcp::model_names(&names, &reserved) {
        let spec = servers
            .iter()
            .find(|s| s.label == label)
            .expect("named server exists");
        let read_only = listed
            .iter()
            .find(|(l, _)| l.server_label == label)
            .and_then(|(l, _)| l.tools.iter().find(|t| t.name == tool))
            .is_some_and(read_only);
        let needs_approval = spec.approval.needs_approval(&tool, read_only);
        tools.insert(
            model_name,
            transcode::McpTarget {
                server_label: label,
                tool,
                needs_approval,
                search: false,
            },
        );
    }
    let mut setup = McpSetup {
        servers,
        listed,
        tools,
        ..McpSetup::default()
    };
    let deferred_labels: Vec<&str> = setup
        .servers
        .iter()
        .filter(|s| s.defer_loading)
        .map(|s| s.label.as_str())
        .collect();
    let explicit = request.tools.iter().find_map(|t| match t {
        ToolParam::ToolSearch(ts) => Some(ts.clone()),
        _ => None,
    });
    if !deferred_labels.is_empty() || explicit.is_some() {
        setup.deferred = mcp_function_defs_where(&setup, |label| deferred_labels.contains(&label))
            .into_iter()
            .map(|(f, label, tool)| search::Candidate {
                model_name: f.name,
                label,
                tool,
                description: f.description,
                parameters: f.parameters,
            })
            .collect();
        let mut name = "tool_search".to_string();
        while reserved.contains(&name) || setup.tools.contains_key(&name) {
            name.push('_');
        }
        let servers: Vec<String> = setup
            .servers
            .iter()
            .filter(|s| s.defer_loading)
            .map(|s| {
                let n = setup.deferred.iter().filter(|c| c.label == s.label).count();
                format!(
                    "- '{}'{} ({n} tools)",
                    s.label,
                    s.description
                        .as_deref()
                        .map(|d| format!(": {d}"))
                        .unwrap_or_default()
                )
            })
            .collect();
        let explicit = explicit.unwrap_or_default();
        let description = explicit.description.clone().unwrap_or_else(|| {
            format!(
                "Search the tools of these MCP servers by what you need (a few words); the tools found become callable in your next step. Search again with other words if nothing fits.\n{}",
                servers.join("\n")
            )
        });
        let parameters = Arc::new(explicit.parameters.clone().unwrap_or_else(|| {
            json!({"type": "object", "properties": {"query": {"type": "string", "description": "What the tool should do."}}, "required": ["query"]})
        }));
        setup.tools.insert(
            name.clone(),
            transcode::McpTarget {
                server_label: String::new(),
                tool: String::new(),
                needs_approval: false,
                search: true,
            },
        );
        setup.search_tool = Some(FunctionDef {
            name,
            description,
            parameters,
            strict: None,
        });
    }
    Ok(setup)
}

/// The MCP tools the model sees from the start (deferred servers' tools are found by search),
/// plus the tool-search function, in a stable order.
fn mcp_function_defs(mcp: &McpSetup) -> Vec<FunctionDef> {
    let deferred: Vec<&str> = mcp
        .servers
        .iter()
        .filter(|s| s.defer_loading)
        .map(|s| s.label.as_str())
        .collect();
    let mut defs: Vec<FunctionDef> =
        mcp_function_defs_where(mcp, |label| !deferred.contains(&label))
            .into_iter()
            .map(|(f, _, _)| f)
            .collect();
    defs.extend(mcp.search_tool.clone());
    defs
}

/// The MCP tools of the servers `keep` selects, as functions with their label and tool name.
fn mcp_function_defs_where(
    mcp: &McpSetup,
    keep: impl Fn(&str) -> bool,
) -> Vec<(FunctionDef, String, String)> {
    let mut names: Vec<_> = mcp
        .tools
        .iter()
        .filter(|(_, t)| !t.search && keep(&t.server_label))
        .collect();
    names.sort_by(|a, b| a.0.cmp(b.0));
    names
        .into_iter()
        .filter_map(|(model_name, t)| {
            let (item, _) = mcp
                .listed
                .iter()
                .find(|(l, _)| l.server_label == t.server_label)?;
            let info = item.tools.iter().find(|i| i.name == t.tool)?;
            let spec = mcp.servers.iter().find(|s| s.label == t.server_label)?;
            let mut description = info
                .description
                .clone()
                .unwrap_or_else(|| format!("The '{}' tool.", t.tool));
            description.push_str(&format!(
                " (Tool '{}' of MCP server '{}'",
                t.tool, t.server_label
            ));
            if let Some(d) = &spec.description {
                description.push_str(&format!(": {d}"));
            }
            description.push(')');
            let parameters = match info.input_schema.is_object() {
                true => info.input_schema.clone(),
                false => Arc::new(json!({"type": "object", "properties": {}})),
            };
            Some((
                FunctionDef {
                    name: model_name.clone(),
                    description,
                    parameters,
                    strict: None,
                },
                t.server_label.clone(),
                t.tool.clone(),
            ))
        })
        .collect()
}

/// Starts the run's task (holding its place among the relay's concurrent runs); returns its
/// handle at once.
pub fn start(
    app: &App,
    prepared: Prepared,
    permit: tokio::sync::OwnedSemaphorePermit,
) -> RunHandle {
    let log = Arc::new(RunLog::new());
    let cancel = app.shutdown_token().child_token();
    let handle = RunHandle {
        id: prepared.response.id.clone(),
        log: log.clone(),
        cancel: cancel.clone(),
        background: prepared.request.background,
        created: Arc::new(prepared.response.clone()),
    };
    app.store().insert_live(&prepared, &handle);
    let app = app.clone();
    tokio::spawn(async move {
        agent::drive(app, prepared, log, cancel).await;
        drop(permit);
    });
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
        OutputItem::ToolSearchCall(t) => InputItem::ToolSearchCall(t.clone()),
        OutputItem::ToolSearchOutput(t) => InputItem::ToolSearchOutput(t.clone()),
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
                parameters: Arc::new(
                    f.parameters
                        .clone()
                        .unwrap_or_else(|| json!({"type": "object", "properties": {}})),
                ),
                strict: f.strict,
            }),
            ToolParam::Mcp(_) | ToolParam::ToolSearch(_) => None,
        })
        .collect()
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
            ToolParam::Mcp(m) => crate::redact::mcp_tool_echo(m, app.config().mcp.default_approval),
            ToolParam::ToolSearch(t) => json!({"type": "tool_search", "execution": "server",
                "description": t.description, "parameters": t.parameters}),
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
    }
}
