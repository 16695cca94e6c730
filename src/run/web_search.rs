//! OpenAI's hosted `web_search` in a run, served by a registered MCP server's tool
//! (`[hosted_tools] web_search = "LABEL:TOOL"`, set up by `tools`): each search the model asked
//! for is a `web_search_call` item (added, in progress, searching, then completed or failed, and
//! done) whose `action` carries the query; the tool's text goes back to the model as the
//! function's output.
//!
//! Invariant: the call is counted in the MCP metrics and against the key's MCP limits as any tool
//! call is (over them, the search fails and the model is told why), and a stop while it runs
//! ends the run (the item is left for the terminal event to close).

use super::stop::{Stop, StopSignal, stopped};
use super::tools::McpSetup;
use crate::api::request::InputItem;
use crate::api::response::WebSearchCallItem;
use crate::api::{Event, ItemStatus, OutputItem};
use crate::app::App;
use crate::eventlog::emitter::Emitter;

/// OpenAI's `web_search`, run through the registered server's tool (`[hosted_tools]`): a
/// `web_search_call` item (in progress, searching, completed or failed) whose `action` carries
/// the query; the tool's text goes back to the model as the function's output.
pub(super) async fn web_search(
    app: &App,
    (mcp, account): (&McpSetup, Option<&crate::limits::Account>),
    em: &mut Emitter,
    arguments: &str,
    signal: &StopSignal,
) -> Result<Vec<InputItem>, Stop> {
    let Some((spec, argument)) = &mcp.web_search else {
        return Ok(Vec::new());
    };
    let tool = mcp
        .tools
        .iter()
        .find(|(_, t)| t.web_search)
        .map(|(name, t)| (name.clone(), t.tool.clone()));
    let Some((model_name, tool)) = tool else {
        return Ok(Vec::new());
    };
    let query = serde_json::from_str::<serde_json::Value>(arguments)
        .ok()
        .and_then(|v| v.get("query")?.as_str().map(str::to_string))
        .unwrap_or_else(|| arguments.to_string());
    let id = em.mint("ws");
    let output_index = em.next_output_index();
    let mut item = WebSearchCallItem {
        id: id.clone(),
        status: ItemStatus::InProgress,
        action: serde_json::json!({"type": "search", "query": query}),
    };
    em.emit(Event::OutputItemAdded {
        output_index,
        item: OutputItem::WebSearchCall(item.clone()),
    });
    em.emit(Event::WebSearchCallInProgress {
        item_id: id.clone(),
        output_index,
    });
    em.emit(Event::WebSearchCallSearching {
        item_id: id.clone(),
        output_index,
    });
    let cfg = &app.config().mcp;
    let args = serde_json::json!({ argument.as_str(): query }).to_string();
    let started = std::time::Instant::now();
    let refused = match account {
        Some(a) => app.limiter().mcp_call(a, Some(&spec.label)).await.err(),
        None => None,
    };
    let called = match refused {
        Some(refused) => Err(crate::api::response::McpCallError::HttpError {
            code: refused.status(),
            message: refused.message(),
        }),
        None => {
            let calling = app.mcp().call_tool(spec, &tool, &args, cfg.call_timeout);
            tokio::pin!(calling);
            loop {
                tokio::select! {
                    biased;
                    stop = stopped(app, signal) => return Err(stop),
                    // A steer is announced while the search runs, never cutting it short.
                    () = signal.steer_arrived() => signal.announce_steers(em),
                    r = &mut calling => break r,
                }
            }
        }
    };
    let result = if called.is_ok() { "ok" } else { "error" };
    app.metrics().mcp_called(
        super::tools::metric_label(app, spec),
        result,
        started.elapsed(),
    );
    let text = match called {
        Ok(result) => {
            item.status = ItemStatus::Completed;
            em.emit(Event::WebSearchCallCompleted {
                item_id: id.clone(),
                output_index,
            });
            crate::mcp::result_text(&result, cfg.max_output_bytes)
        }
        Err(e) => {
            item.status = ItemStatus::Failed;
            crate::mcp::error_text(&crate::mcp::bounded_error(e, cfg.max_output_bytes))
        }
    };
    em.emit(Event::OutputItemDone {
        output_index,
        item: OutputItem::WebSearchCall(item),
    });
    let call_id = em.mint("call");
    Ok(InputItem::call_with_output(call_id, model_name, arguments.to_string(), text).to_vec())
}
