//! The server-side tool search in a run: a search the model asked for is reported as a
//! `tool_search_call` item and a `tool_search_output` item (the found tools grouped per server
//! as namespaces), the found tools become callable from the next turn on, and the model is told
//! what it found. Ranking itself is [`super::search`]'s.
//!
//! Invariant: a deferred tool is callable only once a search (this run's, or one in the chain)
//! found it; found tools are never offered twice.

use serde_json::{Value, json};

use super::search;
use super::tools::McpSetup;
use crate::api::request::InputItem;
use crate::api::response::{ToolSearchCallItem, ToolSearchOutputItem};
use crate::api::{Event, ItemStatus, OutputItem};
use crate::eventlog::emitter::Emitter;
use crate::upstream::FunctionDef;

/// How many tools one search returns at most.
const SEARCH_TOP_K: usize = 5;

/// Runs one tool search: reports it as a `tool_search_call` and a `tool_search_output` item
/// (found tools grouped per server as namespaces), makes the found tools callable, and returns
/// what the model is told.
pub(super) fn run_search(
    mcp: &McpSetup,
    em: &mut Emitter,
    arguments: &str,
    found: &mut Vec<FunctionDef>,
) -> Vec<InputItem> {
    let args: Value =
        serde_json::from_str(arguments).unwrap_or_else(|_| json!({"query": arguments}));
    let query = search::query_of(&args);
    let call_id = em.mint("call");
    let mut call = ToolSearchCallItem {
        id: em.mint("tsc"),
        call_id: Some(call_id.clone()),
        execution: "server".into(),
        status: ItemStatus::InProgress,
        arguments: args,
    };
    let at = em.next_output_index();
    em.emit(Event::OutputItemAdded {
        output_index: at,
        item: OutputItem::ToolSearchCall(call.clone()),
    });
    let hits = search::rank(&query, &mcp.deferred, SEARCH_TOP_K);
    call.status = ItemStatus::Completed;
    em.emit(Event::OutputItemDone {
        output_index: at,
        item: OutputItem::ToolSearchCall(call),
    });

    let namespaces = namespaces_of(mcp, &hits);
    load_found(mcp, &namespaces, found);
    let output = ToolSearchOutputItem {
        id: em.mint("tso"),
        call_id: Some(call_id.clone()),
        execution: "server".into(),
        status: ItemStatus::Completed,
        tools: namespaces,
    };
    let at = em.next_output_index();
    em.emit(Event::OutputItemAdded {
        output_index: at,
        item: OutputItem::ToolSearchOutput(output.clone()),
    });
    em.emit(Event::OutputItemDone {
        output_index: at,
        item: OutputItem::ToolSearchOutput(output),
    });

    let name = mcp
        .search_tool
        .as_ref()
        .map(|t| t.name.clone())
        .unwrap_or_else(|| "tool_search".into());
    let text = told(mcp, &query, &hits);
    InputItem::call_with_output(call_id, name, arguments.to_string(), text).to_vec()
}

/// The deferred tools `hits` names, grouped per server as namespaces (in the order found).
fn namespaces_of(mcp: &McpSetup, hits: &[usize]) -> Vec<Value> {
    let mut namespaces: Vec<Value> = Vec::new();
    for &i in hits {
        let c = &mcp.deferred[i];
        let tool = json!({"type": "function", "name": c.tool, "description": c.description, "parameters": c.parameters});
        match namespaces
            .iter_mut()
            .find(|ns| ns["name"] == c.label.as_str())
        {
            Some(ns) => ns["tools"].as_array_mut().expect("tools array").push(tool),
            None => {
                let description = mcp
                    .servers
                    .iter()
                    .find(|s| s.label == c.label)
                    .and_then(|s| s.description.clone())
                    .unwrap_or_default();
                namespaces.push(json!({"type": "namespace", "name": c.label, "description": description, "tools": [tool]}));
            }
        }
    }
    namespaces
}

/// What the model is told a search for `query` found.
fn told(mcp: &McpSetup, query: &str, hits: &[usize]) -> String {
    if hits.is_empty() {
        return format!("No tools matched '{query}'. Search again with other words.");
    }
    let lines: Vec<String> = hits
        .iter()
        .map(|&i| {
            format!(
                "- {}: {}",
                mcp.deferred[i].model_name, mcp.deferred[i].description
            )
        })
        .collect();
    format!(
        "Found {} tools; you can call them now:\n{}",
        hits.len(),
        lines.join("\n")
    )
}

/// Makes the tools of `namespaces` (a `tool_search_output`'s tools) callable.
pub(super) fn load_found(mcp: &McpSetup, namespaces: &[Value], found: &mut Vec<FunctionDef>) {
    for ns in namespaces {
        let label = ns["name"].as_str().unwrap_or_default();
        for tool in ns["tools"].as_array().into_iter().flatten() {
            let name = tool["name"].as_str().unwrap_or_default();
            let Some(c) = mcp
                .deferred
                .iter()
                .find(|c| c.label == label && c.tool == name)
            else {
                continue;
            };
            if !found.iter().any(|f| f.name == c.model_name) {
                found.push(FunctionDef {
                    name: c.model_name.clone(),
                    description: c.description.clone(),
                    parameters: c.parameters.clone(),
                    strict: None,
                    custom: None,
                });
            }
        }
    }
}
