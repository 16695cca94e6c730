//! The MCP side of a run's tools: the request's `mcp` tools validated, listed (or reused from
//! lists in the context), filtered by `allowed_tools`, named for the model, with deferred
//! servers behind the tool-search function and `web_search` bound to its registered server; and
//! the client's approval answers matched. The tools the client runs are `client_tools`'.
//!
//! Invariants: servers are listed concurrently but their items keep request order (ids are
//! minted in that order); a server that could not be listed still has its item (with the
//! error), and under `--mcp-discovery-failure fail` fails the request after every list is kept.

use std::collections::HashSet;
use std::sync::Arc;

use serde_json::{Value, json};

use super::approvals::{ApprovalAnswer, approval_answers};
use super::client_tools::{def, unique};
use super::{Prepared, StartError, search, transcode};
use crate::api::FieldError;
use crate::api::request::{CreateRequest, InputItem, ToolParam};
use crate::api::response::{McpListToolsItem, McpToolInfo};
use crate::app::App;
use crate::upstream::FunctionDef;

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
    /// `web_search`'s registered server and the name of its tool's query argument.
    pub web_search: Option<(crate::mcp::ServerSpec, String)>,
}

/// Resolves the request's `mcp` tools: lists the servers (or reuses lists in the context),
/// matches the client's approval answers, and adds every tool the model may call to `tools`.
/// A server that could not be listed under `--mcp-discovery-failure fail` is an error, after
/// `p.mcp` holds every list (so that the run can show them before it fails).
pub(crate) async fn resolve_tools(app: &App, p: &mut Prepared) -> Result<(), StartError> {
    p.tools_pending = false;
    p.mcp = resolve_mcp(
        app,
        &p.tenant,
        &p.request,
        &p.relay,
        &p.history,
        &p.input,
        &mut p.tools,
        false,
    )
    .await?;
    unlisted_server(app, &p.mcp)
}

/// [`resolve_tools`] on a request's parts (`history` ends with `input`); with `strict`, a server
/// that could not be listed under `--mcp-discovery-failure fail` is an error at once.
#[allow(clippy::too_many_arguments)] // the request's parts, apart until a Prepared holds them
pub(super) async fn resolve_mcp(
    app: &App,
    tenant: &crate::store::Tenant,
    request: &CreateRequest,
    relay: &super::RelaySet,
    history: &[InputItem],
    input: &[InputItem],
    tools: &mut Vec<FunctionDef>,
    strict: bool,
) -> Result<McpSetup, StartError> {
    let earlier = history.len() - input.len();
    let mut mcp = mcp_setup(app, request, relay, history, tools).await?;
    if strict {
        unlisted_server(app, &mcp)?;
    }
    mcp.answers = approval_answers(
        app,
        tenant,
        &history[..earlier],
        input,
        &mcp.servers,
        &mcp.listed,
    )
    .await?;
    tools.extend(mcp_function_defs(&mcp));
    add_web_search(app, request, relay, &mut mcp, tools).await;
    Ok(mcp)
}

/// `[hosted_tools] web_search = "LABEL:TOOL"`: a request carrying OpenAI's `web_search` (any of
/// its dated names) gets a `web_search` function with one argument, `query`, run through that
/// registered server's tool (the query as its first string argument). Without the binding, or
/// for a key that may not use the server, or when the server cannot be listed, the hosted-tools
/// policy applies (the tool is left out).
async fn add_web_search(
    app: &App,
    request: &CreateRequest,
    relay: &super::RelaySet,
    mcp: &mut McpSetup,
    tools: &mut Vec<FunctionDef>,
) {
    let cfg = &app.config().mcp;
    let Some((label, tool)) = &cfg.web_search else {
        return;
    };
    let asked = request
        .tools
        .iter()
        .any(|t| matches!(t, ToolParam::Hosted(kind, _) if kind.starts_with("web_search")));
    let usable = relay
        .mcp_servers_allowed
        .as_ref()
        .is_none_or(|names| names.contains(label));
    let Some(registered) = cfg.registered.0.get(label).filter(|_| asked && usable) else {
        return;
    };
    let Ok(spec) = crate::mcp::validate_registered(registered, cfg.default_approval) else {
        return;
    };
    let argument = match app.mcp().list_tools(&spec, cfg.discovery_timeout).await {
        Ok(listed) => listed.iter().find(|t| &t.name == tool).map(|t| {
            t.input_schema
                .get("properties")
                .and_then(Value::as_object)
                .and_then(|p| {
                    p.iter()
                        .find(|(_, s)| s.get("type").and_then(Value::as_str) == Some("string"))
                        .map(|(k, _)| k.clone())
                })
                .unwrap_or_else(|| "query".into())
        }),
        Err(e) => {
            tracing::warn!(server = %label, error = %e, "web_search's MCP server could not be listed; web_search is left out");
            None
        }
    };
    let Some(argument) = argument else { return };
    let mut taken: HashSet<String> = tools.iter().map(|f| f.name.clone()).collect();
    taken.extend(mcp.tools.keys().cloned());
    let name = unique("web_search", &mut taken);
    tools.push(def(
        &name,
        "Search the web. Returns the results as text.".into(),
        json!({"type": "object", "properties": {"query": {"type": "string", "description": "What to search for."}}, "required": ["query"]}),
    ));
    mcp.tools.insert(
        name,
        transcode::McpTarget {
            server_label: label.clone(),
            tool: tool.clone(),
            needs_approval: false,
            search: false,
            web_search: true,
        },
    );
    mcp.web_search = Some((spec, argument));
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

/// `spec`'s server as a metric label: a registered server's label (the one it is registered at,
/// at its URL), else `request` (a client can name its own servers anything).
pub(super) fn metric_label<'a>(app: &'a App, spec: &crate::mcp::ServerSpec) -> &'a str {
    match app.config().mcp.registered.0.get_key_value(&spec.label) {
        Some((label, r))
            if spec.registered && r.tool.server_url.as_deref() == Some(spec.url.as_str()) =>
        {
            label
        }
        _ => "request",
    }
}

/// A listed tool's `readOnlyHint`, as its `mcp_list_tools` entry carries it.
pub(super) fn read_only(tool: &McpToolInfo) -> bool {
    tool.annotations
        .as_ref()
        .and_then(|a| a.get("read_only")?.as_bool())
        .unwrap_or(false)
}

/// The request's `mcp` tools, validated (the SSRF guard checks IP-literal hosts here, naming the
/// tool; names are checked address by address when connecting).
pub(super) fn mcp_specs(
    app: &App,
    request: &CreateRequest,
    relay: &super::RelaySet,
) -> Result<Vec<crate::mcp::ServerSpec>, StartError> {
    let cfg = &app.config().mcp;
    let specs = crate::mcp::specs_with(
        &request.tools,
        cfg.max_servers,
        cfg.default_approval,
        &cfg.registered,
        relay.mcp_servers_allowed.as_deref(),
    )?;
    // A registered server's URL is the operator's (its sessions connect through the registered
    // servers' guarded client); a request's own URLs are checked here, before any connection.
    for (i, spec) in specs.iter().filter(|(_, s)| !s.registered) {
        cfg.ssrf.check_url(&spec.url).map_err(|r| {
            FieldError::invalid_value(format!("tools[{i}].server_url"), r.to_string())
        })?;
    }
    Ok(specs.into_iter().map(|(_, s)| s).collect())
}

/// Validates the request's `mcp` tools, reuses tool lists already in the context, lists the
/// other servers concurrently, names every tool for the model, and puts deferred servers'
/// tools behind the tool-search function.
async fn mcp_setup(
    app: &App,
    request: &CreateRequest,
    relay: &super::RelaySet,
    history: &[InputItem],
    functions: &[FunctionDef],
) -> Result<McpSetup, StartError> {
    let servers = mcp_specs(app, request, relay)?;
    if servers.is_empty() {
        return Ok(McpSetup::default());
    }
    let listed = list_servers(app, &servers, history).await;
    let reserved: std::collections::HashSet<String> =
        functions.iter().map(|f| f.name.clone()).collect();
    let tools = name_tools(&servers, &listed, &reserved);
    let mut setup = McpSetup {
        servers,
        listed,
        tools,
        ..McpSetup::default()
    };
    add_tool_search(request, &mut setup, &reserved);
    Ok(setup)
}

/// One `mcp_list_tools` item per server, in request order: a list already in the context is
/// reused (PROTOCOL §1.5: that server is not listed again; marked not fresh), the other servers
/// are listed concurrently (fresh). A server that could not be listed has an item with its
/// error.
async fn list_servers(
    app: &App,
    servers: &[crate::mcp::ServerSpec],
    history: &[InputItem],
) -> Vec<(McpListToolsItem, bool)> {
    let known: std::collections::HashMap<&str, &McpListToolsItem> = history
        .iter()
        .filter_map(|i| match i {
            InputItem::McpListTools(l) if l.error.is_none() => Some((l.server_label.as_str(), l)),
            _ => None,
        })
        .collect();
    futures::future::join_all(servers.iter().map(|spec| async {
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
            return (item, false);
        }
        // Minted before listing (futures start in request order), so ids follow the request,
        // not whichever server answers first.
        let id = app.ids().mint("mcpl");
        (list_server(app, spec, id).await, true)
    }))
    .await
}

/// Lists one server's tools as the `mcp_list_tools` item `id`: the tools `allowed_tools` lets
/// through (an error when it lets none of them through), or the listing's error.
async fn list_server(app: &App, spec: &crate::mcp::ServerSpec, id: String) -> McpListToolsItem {
    let listed = app
        .mcp()
        .list_tools(spec, app.config().mcp.discovery_timeout)
        .await;
    app.metrics()
        .mcp_listed(metric_label(app, spec), listed.is_ok());
    match listed {
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
            McpListToolsItem {
                id,
                server_label: spec.label.clone(),
                tools,
                error,
            }
        }
        Err(e) => McpListToolsItem {
            id,
            server_label: spec.label.clone(),
            tools: Arc::new([]),
            error: Some(e.to_string()),
        },
    }
}

/// Every listed tool under its model-facing name (unique, none of `reserved`), with whether
/// its calls need the client's approval.
fn name_tools(
    servers: &[crate::mcp::ServerSpec],
    listed: &[(McpListToolsItem, bool)],
    reserved: &HashSet<String>,
) -> transcode::ToolMap {
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
    for (model_name, label, tool) in crate::mcp::model_names(&names, reserved) {
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
                web_search: false,
            },
        );
    }
    tools
}

/// With `defer_loading` servers (or a `tool_search` tool in the request): their tools become
/// the deferred candidates, out of the model's first context, and the tool-search function
/// (named apart from `reserved` and the MCP tools) is offered to find them.
fn add_tool_search(request: &CreateRequest, setup: &mut McpSetup, reserved: &HashSet<String>) {
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
    if deferred_labels.is_empty() && explicit.is_none() {
        return;
    }
    setup.deferred = mcp_function_defs_where(setup, |label| deferred_labels.contains(&label))
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
            web_search: false,
        },
    );
    setup.search_tool = Some(FunctionDef {
        name,
        description,
        parameters,
        strict: None,
        custom: None,
    });
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
                    custom: None,
                },
                t.server_label.clone(),
                t.tool.clone(),
            ))
        })
        .collect()
}
