//! The tools the client runs, offered to the model as functions: function, custom and
//! namespace tools, the client's tool search and the built-in tools (local shell, shell, apply
//! patch, computer), each under a model-facing name, with where each name leads
//! ([`ClientMap`]); and the tools a conversation added on the way (`additional_tools`, a
//! client's `tool_search_output`).
//!
//! Invariant: model-facing names are unique and valid for the upstream: plain functions and
//! custom tools keep their own names, a namespace's tools are `namespace__tool` (hashed when
//! needed, as MCP tools are), built-in tools take their type as name (`_` appended on a clash).

use std::collections::HashSet;
use std::sync::Arc;

use serde_json::{Value, json};

use super::StartError;
use super::transcode::{ClientKind, ClientMap, ClientTarget};
use crate::api::FieldError;
use crate::api::request::{BuiltinTool, CreateRequest, InputItem, NamespacedTool, ToolParam};
use crate::upstream::{CustomSpec, FunctionDef};

/// The tools the client runs, as functions the model can call, and where each model-facing
/// name leads (plain functions keep their own name and are not in the map). Names are unique
/// and valid for the upstream: a namespace's tools are `namespace__tool` (hashed when needed,
/// as MCP tools are); built-in tools take their type as name (`_` appended on a clash).
pub(super) fn client_tools(tools: &[ToolParam]) -> (Vec<FunctionDef>, ClientMap) {
    let mut defs = Vec::new();
    let mut map = ClientMap::new();
    let mut taken: HashSet<String> = tools
        .iter()
        .filter_map(|t| match t {
            ToolParam::Function(f) => Some(f.name.clone()),
            ToolParam::Custom(c) => Some(c.name.clone()),
            _ => None,
        })
        .collect();
    let target = |kind, name: &str, namespace: Option<&str>| ClientTarget {
        kind,
        name: name.to_string(),
        namespace: namespace.map(str::to_string),
    };
    let namespaces: Vec<(String, Vec<String>)> = tools
        .iter()
        .filter_map(|t| match t {
            ToolParam::Namespace(n) => Some((
                n.name.clone(),
                n.tools
                    .iter()
                    .map(|t| match t {
                        NamespacedTool::Function(f) => f.name.clone(),
                        NamespacedTool::Custom(c) => c.name.clone(),
                    })
                    .collect(),
            )),
            _ => None,
        })
        .collect();
    let mut ns_names = crate::mcp::model_names(&namespaces, &taken).into_iter();
    for t in tools {
        match t {
            ToolParam::Function(f) => defs.push(function_def(&f.name, f)),
            ToolParam::Custom(c) => {
                defs.push(custom_def(&c.name, c));
                map.insert(c.name.clone(), target(ClientKind::Custom, &c.name, None));
            }
            ToolParam::Namespace(n) => {
                for tool in &n.tools {
                    let (model_name, _, _) = ns_names.next().expect("one name per namespaced tool");
                    taken.insert(model_name.clone());
                    let (def, kind, own) = match tool {
                        NamespacedTool::Function(f) => {
                            (function_def(&model_name, f), ClientKind::Function, &f.name)
                        }
                        NamespacedTool::Custom(c) => {
                            (custom_def(&model_name, c), ClientKind::Custom, &c.name)
                        }
                    };
                    let mut def = def;
                    if !n.description.is_empty() {
                        def.description
                            .push_str(&format!(" ({}: {})", n.name, n.description));
                    }
                    defs.push(def);
                    map.insert(model_name, target(kind, own, Some(&n.name)));
                }
            }
            ToolParam::ToolSearch(ts) if t.is_client_search() => {
                let name = unique("tool_search", &mut taken);
                let description = ts.description.clone().unwrap_or_else(|| {
                    "Search for more tools by what you need (a few words); the tools found become callable in your next step.".into()
                });
                let parameters = ts.parameters.clone().unwrap_or_else(|| {
                    json!({"type": "object", "properties": {"query": {"type": "string", "description": "What the tool should do."}}, "required": ["query"]})
                });
                defs.push(def(&name, description, parameters));
                map.insert(name.clone(), target(ClientKind::ToolSearch, &name, None));
            }
            ToolParam::Builtin(kind, _) => {
                let (base, kind, description, parameters) = builtin_def(*kind);
                let name = unique(base, &mut taken);
                defs.push(def(&name, description.into(), parameters));
                map.insert(name.clone(), target(kind, base, None));
            }
            ToolParam::Mcp(_) | ToolParam::ToolSearch(_) | ToolParam::Hosted(..) => {}
        }
    }
    (defs, map)
}

/// The client tools offered this turn: the request's tools, then those its history added (an
/// `additional_tools` item, or the tools a client's `tool_search_output` found). An added tool
/// that does not parse is a 400 naming the item it came in.
pub(super) fn client_tool_params(
    request: &CreateRequest,
    history: &[InputItem],
) -> Result<Vec<ToolParam>, StartError> {
    let mut offered = request.tools.clone();
    let earlier = history.len().saturating_sub(request.input.len());
    for (i, item) in history.iter().enumerate() {
        let added = match item {
            InputItem::AdditionalTools(t) => t.fields.get("tools").cloned(),
            InputItem::ToolSearchOutput(t) if t.execution == "client" => {
                Some(Value::Array(t.tools.clone()))
            }
            _ => None,
        };
        let Some(added) = added else { continue };
        let base = match i.checked_sub(earlier) {
            Some(j) => format!("input[{j}].tools"),
            None => "previous_response_id".to_string(),
        };
        let Value::Array(added) = added else {
            return Err(FieldError::new(base, "Invalid 'tools': expected an array.").into());
        };
        for tool in crate::api::request::parse_tools(added, &base)? {
            // Only client tools can be added mid-conversation; the rest was set up already.
            if !matches!(tool, ToolParam::Mcp(_) | ToolParam::ToolSearch(_))
                && !offered.contains(&tool)
            {
                offered.push(tool);
            }
        }
    }
    Ok(offered)
}

pub(super) fn def(name: &str, description: String, parameters: Value) -> FunctionDef {
    FunctionDef {
        name: name.to_string(),
        description,
        parameters: Arc::new(parameters),
        strict: None,
        custom: None,
    }
}

fn function_def(name: &str, f: &crate::api::request::FunctionTool) -> FunctionDef {
    FunctionDef {
        strict: f.strict,
        ..def(
            name,
            f.description.clone().unwrap_or_default(),
            f.parameters
                .clone()
                .unwrap_or_else(|| json!({"type": "object", "properties": {}})),
        )
    }
}

/// A `custom` tool as a function of one string argument, `input`, its format in the description.
fn custom_def(name: &str, c: &crate::api::request::CustomTool) -> FunctionDef {
    let mut description = c.description.clone().unwrap_or_default();
    let format = c.format.as_ref();
    if format.and_then(|f| f.get("type")?.as_str()) == Some("grammar") {
        let f = format.expect("checked");
        description.push_str(&format!(
            "\n\nPut the tool's whole input in the string argument 'input'. It must follow this {} grammar:\n{}",
            f.get("syntax").and_then(Value::as_str).unwrap_or("lark"),
            f.get("definition").and_then(Value::as_str).unwrap_or_default()
        ));
    } else {
        description.push_str(
            "\n\nPut the tool's whole input, as free-form text, in the string argument 'input'.",
        );
    }
    FunctionDef {
        custom: Some(Arc::new(CustomSpec {
            description: c.description.clone(),
            format: c.format.clone(),
        })),
        ..def(
            name,
            description.trim_start().to_string(),
            json!({"type": "object", "properties": {"input": {"type": "string", "description": "The tool's input."}}, "required": ["input"]}),
        )
    }
}

/// `base`, or `base` with `_` appended until it is not taken; then taken.
pub(super) fn unique(base: &str, taken: &mut HashSet<String>) -> String {
    let mut name = base.to_string();
    while taken.contains(&name) {
        name.push('_');
    }
    taken.insert(name.clone());
    name
}

/// A built-in client tool as a function: the name it is offered under before any clash, its
/// kind, and the function's description and parameters.
fn builtin_def(kind: BuiltinTool) -> (&'static str, ClientKind, &'static str, Value) {
    match kind {
        BuiltinTool::LocalShell => (
            "local_shell",
            ClientKind::LocalShell,
            "Run a command on the user's machine and get its output.",
            json!({"type": "object", "properties": {
                    "command": {"type": "array", "items": {"type": "string"}, "description": "The program and its arguments."},
                    "working_directory": {"type": "string"},
                    "timeout_ms": {"type": "integer"},
                    "env": {"type": "object", "additionalProperties": {"type": "string"}}
                }, "required": ["command"]}),
        ),
        BuiltinTool::Shell => (
            "shell",
            ClientKind::Shell,
            "Run shell commands on the user's machine and get their output.",
            json!({"type": "object", "properties": {
                    "commands": {"type": "array", "items": {"type": "string"}, "description": "Shell commands, run in order."},
                    "timeout_ms": {"type": "integer"},
                    "max_output_length": {"type": "integer"}
                }, "required": ["commands"]}),
        ),
        BuiltinTool::ApplyPatch => (
            "apply_patch",
            ClientKind::ApplyPatch,
            "Create, update or delete one file. For create_file and update_file, 'diff' is the file's content (create) or a unified diff of the change (update).",
            json!({"type": "object", "properties": {
                    "type": {"type": "string", "enum": ["create_file", "update_file", "delete_file"]},
                    "path": {"type": "string"},
                    "diff": {"type": "string"}
                }, "required": ["type", "path"]}),
        ),
        BuiltinTool::Computer => (
            "computer",
            ClientKind::Computer,
            "Act on the user's screen: click, double_click, drag, keypress, move, screenshot, scroll, type or wait.",
            json!({"type": "object", "properties": {
                    "type": {"type": "string", "enum": ["click", "double_click", "drag", "keypress", "move", "screenshot", "scroll", "type", "wait"]},
                    "x": {"type": "integer"}, "y": {"type": "integer"},
                    "button": {"type": "string", "enum": ["left", "right", "wheel", "back", "forward"]},
                    "keys": {"type": "array", "items": {"type": "string"}},
                    "text": {"type": "string"},
                    "scroll_x": {"type": "integer"}, "scroll_y": {"type": "integer"},
                    "path": {"type": "array", "items": {"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}}}}
                }, "required": ["type"]}),
        ),
    }
}
