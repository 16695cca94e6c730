//! The whole life of one `mcp_call` item, and the only place its events are emitted: opened
//! (`output_item.added`, `mcp_call.in_progress`), its arguments (`mcp_call_arguments.delta`,
//! `.done`), run on its server, then its result (`mcp_call.completed` or `mcp_call.failed`) and
//! `output_item.done`. The transcoder opens a model's calls and streams their arguments, the
//! approved-call path opens the calls the client approved, and the loop runs and closes them.
//!
//! Invariants: a call's events come in that order, each call opened is closed exactly once
//! (completed, failed, or failed as not run), and a turn's calls run concurrently (at most
//! `max_concurrent_calls` at a time, each with its timeout) but are closed in output order, so
//! logs are deterministic.

use crate::limits::Account;
use futures::StreamExt;

use super::stop::{Stop, StopSignal, stopped};
use super::tools::McpSetup;
use crate::api::request::{InputItem, InputMessage, InputPart, MessageContent};
use crate::api::response::{McpApprovalRequestItem, McpCallError, McpCallItem};
use crate::api::{Event, ItemStatus, OutputItem};
use crate::app::App;
use crate::eventlog::emitter::Emitter;
use crate::mcp::ServerSpec;

/// An MCP call the model made, its item open (arguments done), for the agent loop to run.
#[derive(Debug, Clone)]
pub struct McpCallStarted {
    pub output_index: usize,
    pub item: McpCallItem,
    /// The model-facing name and call id, for the conversation sent back to the model.
    pub model_name: String,
}

/// What a call beyond `max_tool_calls` fails with.
pub(super) const OVER_LIMIT: &str = "Not run: the response reached its max_tool_calls limit.";

/// What a call the run stopped before fails with.
pub(super) const NOT_RUN: &str = "The run stopped before this call ran.";

/// A call's text output (bounded) and the images it returned (mime type, base64 data).
type CallResult = Result<(String, Vec<(String, String)>), McpCallError>;

/// Opens a call's item at `output_index`: `output_item.added` (`item` as it is, in progress)
/// and `mcp_call.in_progress`.
pub(super) fn open(em: &mut Emitter, output_index: usize, item: McpCallItem) {
    let item_id = item.id.clone();
    em.emit(Event::OutputItemAdded {
        output_index,
        item: OutputItem::McpCall(item),
    });
    em.emit(Event::McpCallInProgress {
        item_id,
        output_index,
    });
}

/// The event that streams a delta of an open call's arguments.
pub(super) fn arguments_delta(item_id: String, output_index: usize, delta: String) -> Event {
    Event::McpCallArgumentsDelta {
        item_id,
        output_index,
        delta,
    }
}

/// Ends an open call's arguments (`mcp_call_arguments.done`, `item` carrying them whole): the
/// call is ready to run.
pub(super) fn arguments_done(
    em: &mut Emitter,
    output_index: usize,
    item: McpCallItem,
    model_name: String,
) -> McpCallStarted {
    em.emit(Event::McpCallArgumentsDone {
        item_id: item.id.clone(),
        output_index,
        arguments: item.arguments.clone(),
    });
    McpCallStarted {
        output_index,
        item,
        model_name,
    }
}

/// Opens the call the client approved with `req`: the whole opening at once (added, in
/// progress, its arguments as one delta when there are any, and done), the call carrying its
/// `approval_request_id`.
pub(super) fn open_approved(em: &mut Emitter, req: &McpApprovalRequestItem) -> McpCallStarted {
    let output_index = em.next_output_index();
    let item = McpCallItem {
        id: em.mint("mcp"),
        server_label: req.server_label.clone(),
        name: req.name.clone(),
        arguments: String::new(),
        output: None,
        error: None,
        status: ItemStatus::InProgress,
        approval_request_id: Some(req.id.clone()),
    };
    open(em, output_index, item.clone());
    if !req.arguments.is_empty() {
        em.emit(arguments_delta(
            item.id.clone(),
            output_index,
            req.arguments.clone(),
        ));
    }
    let item = McpCallItem {
        arguments: req.arguments.clone(),
        ..item
    };
    arguments_done(em, output_index, item, String::new())
}

/// Leaves in `calls` those `max_tool_calls` still allows after `made` calls; returns the rest.
pub(super) fn over_budget(
    calls: &mut Vec<McpCallStarted>,
    max_tool_calls: Option<u64>,
    made: u64,
) -> Vec<McpCallStarted> {
    let budget = max_tool_calls.map_or(usize::MAX, |m| m.saturating_sub(made) as usize);
    calls.split_off(calls.len().min(budget))
}

/// Closes calls that will not run, as failed with `message`.
pub(super) fn fail_open(em: &mut Emitter, calls: &[McpCallStarted], message: &str) {
    for call in calls {
        let error = McpCallError::McpToolExecutionError {
            content: serde_json::json!([{"type": "text", "text": message}]),
        };
        close(em, call, Err(error));
    }
}

/// Closes a call with its result: `mcp_call.completed` with its output, or `mcp_call.failed`
/// with its error; then `output_item.done`. Returns the finished item.
fn close(
    em: &mut Emitter,
    call: &McpCallStarted,
    result: Result<String, McpCallError>,
) -> OutputItem {
    let mut item = call.item.clone();
    let (item_id, output_index) = (item.id.clone(), call.output_index);
    match result {
        Ok(text) => {
            item.status = ItemStatus::Completed;
            item.output = Some(text);
            em.emit(Event::McpCallCompleted {
                item_id,
                output_index,
            });
        }
        Err(error) => {
            item.status = ItemStatus::Failed;
            item.error = Some(error);
            em.emit(Event::McpCallFailed {
                item_id,
                output_index,
            });
        }
    }
    let item = OutputItem::McpCall(item);
    em.emit(Event::OutputItemDone {
        output_index,
        item: item.clone(),
    });
    item
}

/// Runs a turn's MCP calls (at most `max_concurrent_calls` at a time, each with its timeout) and
/// closes each one with its result in output order. Returns the finished items, and a user
/// message with the images the tools returned for upstreams that take images
/// (`--upstream-vision`; otherwise the model gets the placeholders in the call's text output).
/// On a stop, the calls not finished yet fail. A call over the key's MCP limits (`account`)
/// fails with an error saying so, and is not made.
pub(super) async fn run(
    app: &App,
    (mcp, account): (&McpSetup, Option<&Account>),
    em: &mut Emitter,
    calls: Vec<McpCallStarted>,
    signal: &StopSignal,
) -> Result<(Vec<OutputItem>, Option<InputItem>), Stop> {
    let mut results = futures::stream::iter(calls.clone().into_iter().map(|c| {
        let spec = mcp
            .servers
            .iter()
            .find(|s| s.label == c.item.server_label)
            .cloned();
        call_within_limits(app, account, spec, c.item)
    }))
    .buffered(app.config().mcp.max_concurrent_calls.max(1));
    let mut done = Vec::with_capacity(calls.len());
    let mut image_parts: Vec<InputPart> = Vec::new();
    for (i, call) in calls.iter().enumerate() {
        let result = loop {
            tokio::select! {
                biased;
                stop = stopped(app, signal) => {
                    drop(results);
                    fail_open(em, &calls[i..], "The run stopped before this call finished.");
                    return Err(stop);
                }
                // A steer is announced while calls run; the calls are never cut short for it.
                () = signal.steer_arrived() => signal.announce_steers(em),
                r = results.next() => break r.expect("one result per call"),
            }
        };
        let result = result.map(|(text, images)| {
            if app.config().upstream_vision && !images.is_empty() {
                image_parts.extend(image_view(&call.item, images));
            }
            text
        });
        done.push(close(em, call, result));
    }
    let images = (!image_parts.is_empty()).then_some(InputItem::Message(InputMessage::user(
        MessageContent::Parts(image_parts),
    )));
    Ok((done, images))
}

/// One call, if the key's MCP limits allow it (a registered server's own `calls_per_minute`
/// too); otherwise its error says which limit was reached (an HTTP 429 to the model).
async fn call_within_limits(
    app: &App,
    account: Option<&Account>,
    spec: Option<ServerSpec>,
    item: McpCallItem,
) -> CallResult {
    if let Some(account) = account {
        let registered = spec
            .as_ref()
            .filter(|s| s.registered)
            .map(|s| s.label.as_str());
        if let Err(refused) = app.limiter().mcp_call(account, registered).await {
            return Err(McpCallError::HttpError {
                code: refused.status(),
                message: refused.message(),
            });
        }
    }
    call_on_server(app, spec, item).await
}

/// One call on its server (`None`: a server the request does not name), counted in the
/// metrics: the tool's text (bounded) and images, or its error (bounded).
async fn call_on_server(app: &App, spec: Option<ServerSpec>, item: McpCallItem) -> CallResult {
    let cfg = &app.config().mcp;
    let Some(spec) = spec else {
        return Err(McpCallError::McpProtocolError {
            code: -32602,
            message: "unknown MCP server".into(),
        });
    };
    let started = std::time::Instant::now();
    let outcome = app
        .mcp()
        .call_tool(&spec, &item.name, &item.arguments, cfg.call_timeout)
        .await;
    let result = match &outcome {
        Ok(_) => "ok",
        Err(McpCallError::McpToolExecutionError { .. }) => "tool_error",
        Err(_) => "error",
    };
    app.metrics().mcp_called(
        super::tools::metric_label(app, &spec),
        result,
        started.elapsed(),
    );
    let cap = cfg.max_output_bytes;
    outcome
        .map(|result| {
            (
                crate::mcp::result_text(&result, cap),
                crate::mcp::result_images(&result),
            )
        })
        .map_err(|e| crate::mcp::bounded_error(e, cap))
}

/// The images a call returned as the model is shown them: a line naming the call, then each
/// image.
fn image_view(item: &McpCallItem, images: Vec<(String, String)>) -> Vec<InputPart> {
    let mut parts = vec![InputPart::text(format!(
        "Images returned by the call {} of '{}' on MCP server '{}':",
        item.id, item.name, item.server_label
    ))];
    parts.extend(
        images
            .into_iter()
            .map(|(mime, data)| InputPart::image(format!("data:{mime};base64,{data}"))),
    );
    parts
}
