//! The agent loop of one run: model turn → tool calls → next turn, until the model answers
//! without calls or a bound is reached. Guarantees exactly one terminal event.
//!
//! Order of a run's items: the `mcp_list_tools` items (one per server listed for this run), then
//! per model turn its reasoning, text and calls; MCP calls of a turn run concurrently (bounded)
//! but their results are reported in output order, so logs are deterministic.

use std::sync::Arc;

use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use super::transcode::{McpCallStarted, ToolMap, Transcoder, TurnOutcome};
use super::turn::{model_view, turn_request_at};
use super::{McpSetup, Prepared};
use crate::api::output_as_input;
use crate::api::request::InputItem;
use crate::api::response::{McpCallError, McpListToolsItem, ResponseError};
use crate::api::{Event, ItemStatus, OutputItem, Usage};
use crate::app::App;
use crate::eventlog::emitter::{Emitter, Ending};
use crate::eventlog::log::RunLog;
use crate::upstream::{FinishReason, FunctionDef, ModelStream, UpstreamError};

/// Why a run stopped before the model finished.
enum Stop {
    Upstream(UpstreamError),
    Cancelled,
    Shutdown,
    Deadline(std::time::Duration),
    /// The store could not keep the run's events (it cancelled the run saying why).
    Store(String),
}

/// What stops a run early: its token (client gone, cancel, shutdown) or its time limit.
pub struct StopSignal {
    token: CancellationToken,
    timed_out: Arc<std::sync::atomic::AtomicBool>,
    /// The run's id, to ask the store whether it is the one that stopped the run.
    run: String,
}

/// Runs the whole agent loop and ends the log with one terminal event.
pub async fn drive(app: App, mut p: Prepared, log: Arc<RunLog>, cancel: CancellationToken) {
    let stop = StopSignal {
        token: cancel.child_token(),
        timed_out: Arc::default(),
        run: p.response.id.clone(),
    };
    let timer = {
        let (token, flag, limit) = (
            stop.token.clone(),
            stop.timed_out.clone(),
            app.config().limits.max_run_time,
        );
        tokio::spawn(async move {
            tokio::time::sleep(limit).await;
            flag.store(true, std::sync::atomic::Ordering::SeqCst);
            token.cancel();
        })
    };
    drive_run(&app, &mut p, log, &stop).await;
    timer.abort();
}

async fn drive_run(app: &App, p: &mut Prepared, log: Arc<RunLog>, signal: &StopSignal) {
    let app = app.clone();
    let mut em = Emitter::new(
        log,
        app.store().sink(&p.tenant, &p.response.id, p.request.store),
        app.ids().clone(),
        app.clock(),
    );
    em.emit(Event::Created {
        response: Box::new(p.response.clone()),
    });
    if p.request.background {
        em.emit(Event::Queued {
            response: Box::new(em.snapshot()),
        });
    }
    let mut snapshot = em.snapshot();
    snapshot.status = crate::api::ResponseStatus::InProgress;
    em.emit(Event::InProgress {
        response: Box::new(snapshot),
    });
    // A background run lists its MCP servers now, having answered `queued` (`run::prepare`).
    let unresolved = if p.tools_pending {
        tokio::select! {
            biased;
            stop = stopped(&app, signal) => Some(ending_for(stop)),
            resolved = super::tools::resolve_tools(&app, p) => resolved.err().map(|e| {
                Ending::Failed(ResponseError {
                    code: "server_error".into(),
                    message: e.to_string(),
                })
            }),
        }
    } else {
        None
    };
    emit_tool_lists(&mut em, p);

    let tools = p.mcp.tools.clone();
    let mut usage = Usage::default();
    // Each model turn's usage, kept beside the run for the viewer (the log carries only the sum).
    let mut turns: Vec<Usage> = Vec::new();
    let mut conversation = p.history.clone();
    conversation.extend(
        p.mcp
            .listed
            .iter()
            .filter(|(_, fresh)| *fresh)
            .map(|(l, _)| InputItem::McpListTools(l.clone())),
    );
    let mut first = p.first_turn.take();
    // Deferred tools found by earlier searches of the chain stay callable.
    let mut found: Vec<FunctionDef> = Vec::new();
    for item in &conversation {
        if let InputItem::ToolSearchOutput(out) = item {
            load_found(&p.mcp, &out.tools, &mut found);
        }
    }
    let mut calls_made: u64 = 0;
    let mut step = 0usize;
    // Output tokens spent on summaries (`context_management`): not counted against
    // `max_output_tokens`.
    let mut summarized: u64 = 0;
    let ending = 'run: {
        if let Some(ending) = unresolved {
            break 'run ending;
        }
        if !p.relay.generate {
            // The request's state is recorded; the model is not asked.
            break 'run Ending::Completed;
        }
        if p.compacts() {
            let turn = super::compact::summary_turn(p);
            break 'run compaction(&app, turn, &mut em, &mut usage, signal).await;
        }
        if !p.mcp.answers.is_empty() {
            match answer_approvals(&app, &p.mcp, &mut em, p.request.max_tool_calls, signal).await {
                Ok((_, _, true)) => break 'run Ending::Incomplete("max_tool_calls".into()),
                Ok((done, ran, false)) => {
                    calls_made += ran;
                    // One model turn: all the answered calls, then all their results.
                    conversation.extend(model_view(&done, &p.mcp.tools, &p.clients));
                }
                Err(stop) => break 'run ending_for(stop),
            }
        }
        loop {
            let stream = match first.take() {
                Some(s) => Ok(s),
                None => {
                    if let Some(threshold) = p.request.compact_threshold {
                        let before = usage.output_tokens;
                        let turns = (
                            turn_request_at(p, &conversation, step, &found),
                            super::compact::summary_turn_of(p, &conversation),
                        );
                        if let Err(ending) = compact_if_over(
                            &app,
                            turns,
                            threshold,
                            &mut em,
                            &mut usage,
                            signal,
                            &mut conversation,
                        )
                        .await
                        {
                            break ending;
                        }
                        // The summary is the relay's doing, not the client's answer.
                        summarized += usage.output_tokens - before;
                    }
                    let mut turn = turn_request_at(p, &conversation, step, &found);
                    // `max_output_tokens` bounds the whole response: a later turn gets what the
                    // earlier ones left (as the upstream counted them), none when it is spent.
                    if let Some(limit) = p.request.max_output_tokens {
                        let answered = usage.output_tokens.saturating_sub(summarized);
                        match limit.saturating_sub(answered) {
                            0 => break Ending::Incomplete("max_output_tokens".into()),
                            left => turn.max_output_tokens = Some(left),
                        }
                    }
                    tokio::select! {
                        biased;
                        stop = stopped(&app, signal) => Err(stop),
                        opened = app.upstream().open(&turn) => opened.map_err(Stop::Upstream),
                    }
                }
            };
            step += 1;
            let (outcome, stop) = match stream {
                Ok(stream) => {
                    let tc = Transcoder::with_clients(p.clients.clone()).sealing(
                        p.request
                            .include
                            .iter()
                            .any(|i| i == "reasoning.encrypted_content")
                            .then(|| app.sealer().clone()),
                    );
                    run_turn(&app, stream, &mut em, (&tools, tc), signal).await
                }
                Err(stop) => (TurnOutcome::default(), Some(stop)),
            };
            if let Some(u) = &outcome.usage {
                usage.add(u);
                turns.push(u.clone());
            }
            if let Some(stop) = stop {
                fail_open_calls(
                    &mut em,
                    &outcome.mcp_calls,
                    "The run stopped before this call ran.",
                );
                break ending_for(stop);
            }
            match outcome.finish {
                Some(FinishReason::Length) => {
                    fail_open_calls(
                        &mut em,
                        &outcome.mcp_calls,
                        "The model's output was cut off (max_output_tokens).",
                    );
                    break Ending::Incomplete("max_output_tokens".into());
                }
                Some(FinishReason::ContentFilter) => {
                    fail_open_calls(
                        &mut em,
                        &outcome.mcp_calls,
                        "The model's output was filtered.",
                    );
                    break Ending::Incomplete("content_filter".into());
                }
                _ => {}
            }
            conversation.extend(
                outcome
                    .items
                    .iter()
                    .filter(|i| !matches!(i, OutputItem::McpCall(_)))
                    .filter_map(output_as_input),
            );
            if !outcome.mcp_calls.is_empty() {
                let mut run_now = outcome.mcp_calls.clone();
                let over = over_budget(&mut run_now, p.request.max_tool_calls, calls_made);
                calls_made += run_now.len() as u64;
                match run_calls_with_images(&app, &p.mcp, &mut em, run_now, signal).await {
                    Ok((done, images)) => {
                        // This turn's calls and results as the model made them: one turn, so that
                        // consecutive tool-only turns stay separate turns for the model.
                        let done: Vec<InputItem> =
                            done.iter().filter_map(output_as_input).collect();
                        conversation.extend(model_view(&done, &p.mcp.tools, &p.clients));
                        conversation.extend(images);
                    }
                    Err(stop) => {
                        fail_open_calls(&mut em, &over, "The run stopped before this call ran.");
                        break ending_for(stop);
                    }
                }
                if !over.is_empty() {
                    fail_open_calls(&mut em, &over, OVER_LIMIT);
                    break Ending::Incomplete("max_tool_calls".into());
                }
            }
            for arguments in &outcome.searches {
                conversation.extend(run_search(&p.mcp, &mut em, arguments, &mut found));
            }
            for arguments in &outcome.web_searches {
                match web_search(&app, &p.mcp, &mut em, arguments, signal).await {
                    Ok(items) => conversation.extend(items),
                    Err(stop) => break 'run ending_for(stop),
                }
            }
            // Approval requests and client function calls hand the turn back to the client.
            let acted = !outcome.mcp_calls.is_empty()
                || !outcome.searches.is_empty()
                || !outcome.web_searches.is_empty();
            if !outcome.approvals.is_empty() || outcome.client_calls > 0 || !acted {
                break Ending::Completed;
            }
            let max_steps = p
                .request
                .max_steps
                .unwrap_or(u64::MAX)
                .min(app.config().limits.max_steps);
            if step as u64 >= max_steps {
                break Ending::Incomplete("max_steps".into());
            }
        }
    };
    let ending = keep_in_conversation(&app, p, &mut em, ending).await;
    em.finish(ending, Some(usage));
    let id = em.snapshot().id;
    app.store().finish_live(&id, em.log(), &turns).await;
}

/// OpenAI's `web_search`, run through the registered server's tool (`[hosted_tools]`): a
/// `web_search_call` item (in progress, searching, completed or failed) whose `action` carries
/// the query; the tool's text goes back to the model as the function's output.
async fn web_search(
    app: &App,
    mcp: &McpSetup,
    em: &mut Emitter,
    arguments: &str,
    signal: &StopSignal,
) -> Result<Vec<InputItem>, Stop> {
    use crate::api::response::WebSearchCallItem;
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
    let called = tokio::select! {
        biased;
        stop = stopped(app, signal) => return Err(stop),
        r = app.mcp().call_tool(spec, &tool, &args, cfg.call_timeout) => r,
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

/// A run whose last input item is a `compaction_trigger`: its output is the conversation's
/// compaction item (added, `response.compaction.compacting`, then done with the sealed summary).
async fn compaction(
    app: &App,
    turn: crate::upstream::TurnRequest,
    em: &mut Emitter,
    usage: &mut Usage,
    signal: &StopSignal,
) -> Ending {
    match compact_into(app, turn, em, usage, signal).await {
        Ok(_) => Ending::Completed,
        Err(ending) => ending,
    }
}

/// Emits a compaction item for the conversation `turn` summarizes: added,
/// `response.compaction.compacting`, done with the sealed summary. Answers the summary, or how
/// the run ends when it cannot be made.
async fn compact_into(
    app: &App,
    turn: crate::upstream::TurnRequest,
    em: &mut Emitter,
    usage: &mut Usage,
    signal: &StopSignal,
) -> Result<String, Ending> {
    use crate::api::response::CompactionItem;
    let output_index = em.next_output_index();
    let id = em.mint("cmp");
    em.emit(Event::OutputItemAdded {
        output_index,
        item: OutputItem::Compaction(CompactionItem {
            id: id.clone(),
            encrypted_content: String::new(),
            created_by: None,
        }),
    });
    em.emit(Event::CompactionCompacting {
        item_id: id.clone(),
        output_index,
    });
    let summarized = tokio::select! {
        biased;
        stop = stopped(app, signal) => return Err(ending_for(stop)),
        s = super::compact::summarize(app, turn, id.clone()) => s,
    };
    match summarized {
        Ok((item, summary, used)) => {
            usage.add(&used);
            em.emit(Event::OutputItemDone {
                output_index,
                item: OutputItem::Compaction(item),
            });
            Ok(summary)
        }
        Err(e) => Err(Ending::Failed(ResponseError {
            code: "server_error".into(),
            message: format!("The conversation could not be compacted: {e}"),
        })),
    }
}

/// `context_management` compaction: when the next turn's context passes the threshold (as the
/// model server counts it), the conversation so far is compacted (a compaction item in the
/// output) and the model goes on from its user messages and the summary.
async fn compact_if_over(
    app: &App,
    (probe, summary_turn): (crate::upstream::TurnRequest, crate::upstream::TurnRequest),
    threshold: u64,
    em: &mut Emitter,
    usage: &mut Usage,
    signal: &StopSignal,
    conversation: &mut Vec<InputItem>,
) -> Result<(), Ending> {
    let counted = tokio::select! {
        biased;
        stop = stopped(app, signal) => return Err(ending_for(stop)),
        c = super::tokens::prompt_tokens(app, probe) => c,
    };
    match counted {
        Ok(n) if n > threshold => {
            let summary = compact_into(app, summary_turn, em, usage, signal).await?;
            let mut kept: Vec<InputItem> = conversation
                .iter()
                .filter(|i| matches!(i, InputItem::Message(m) if m.role == crate::api::request::Role::User))
                .cloned()
                .collect();
            kept.push(super::context::summary_message(&summary));
            *conversation = kept;
            Ok(())
        }
        Ok(_) => Ok(()),
        Err(e) => Err(ending_for(Stop::Upstream(e))),
    }
}

/// A run on a conversation that completed (or ended incomplete) adds its input and output items
/// to the conversation before its terminal event is shown, then lets the conversation go; a
/// conversation that cannot keep them fails the run.
async fn keep_in_conversation(
    app: &App,
    p: &mut Prepared,
    em: &mut Emitter,
    ending: Ending,
) -> Ending {
    let Some(conversation) = p.request.conversation.clone() else {
        return ending;
    };
    if !matches!(ending, Ending::Completed | Ending::Incomplete(_)) {
        p.conversation_lock.take();
        return ending;
    }
    em.close_open_items();
    let mut items = p.input.clone();
    items.extend(em.snapshot().output.iter().filter_map(output_as_input));
    let kept = app
        .store()
        .append_conversation(&p.tenant, &conversation, &items)
        .await;
    p.conversation_lock.take();
    match kept {
        Ok(true) => ending,
        Ok(false) => Ending::Failed(ResponseError {
            code: "server_error".into(),
            message: format!(
                "The conversation '{conversation}' was deleted while this response ran; its items were not added."
            ),
        }),
        Err(e) => Ending::Failed(ResponseError {
            code: "server_error".into(),
            message: format!("The conversation's items could not be kept: {e}"),
        }),
    }
}

/// Runs the approved calls (each an `mcp_call` carrying its `approval_request_id`; at most
/// `max_tool_calls`, the others fail as not run) and tells the model about refused ones. Returns
/// the conversation items to add, how many calls ran, and whether some were over the limit.
async fn answer_approvals(
    app: &App,
    mcp: &McpSetup,
    em: &mut Emitter,
    max_tool_calls: Option<u64>,
    cancel: &StopSignal,
) -> Result<(Vec<InputItem>, u64, bool), Stop> {
    use crate::api::request::InputMcpCall;
    use crate::api::response::McpCallItem;
    let mut started = Vec::new();
    for answer in mcp.answers.iter().filter(|a| a.approve) {
        let req = &answer.request;
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
        em.emit(Event::OutputItemAdded {
            output_index,
            item: OutputItem::McpCall(item.clone()),
        });
        em.emit(Event::McpCallInProgress {
            item_id: item.id.clone(),
            output_index,
        });
        if !req.arguments.is_empty() {
            em.emit(Event::McpCallArgumentsDelta {
                item_id: item.id.clone(),
                output_index,
                delta: req.arguments.clone(),
            });
        }
        em.emit(Event::McpCallArgumentsDone {
            item_id: item.id.clone(),
            output_index,
            arguments: req.arguments.clone(),
        });
        let item = McpCallItem {
            arguments: req.arguments.clone(),
            ..item
        };
        started.push(McpCallStarted {
            output_index,
            item,
            model_name: String::new(),
        });
    }
    let over = over_budget(&mut started, max_tool_calls, 0);
    let ran = started.len() as u64;
    let done = match run_calls(app, mcp, em, started, cancel).await {
        Ok(done) => done,
        Err(stop) => {
            fail_open_calls(em, &over, "The run stopped before this call ran.");
            return Err(stop);
        }
    };
    if !over.is_empty() {
        fail_open_calls(em, &over, OVER_LIMIT);
        return Ok((Vec::new(), ran, true));
    }
    // In answer order; a refused call reaches the model as a call whose result is the refusal
    // (it never becomes an `mcp_call` item of the Response).
    let mut items = Vec::with_capacity(mcp.answers.len());
    for answer in &mcp.answers {
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
    Ok((items, ran, false))
}

/// How many tools one search returns at most.
const SEARCH_TOP_K: usize = 5;

/// Runs one tool search: reports it as a `tool_search_call` and a `tool_search_output` item
/// (found tools grouped per server as namespaces), makes the found tools callable, and returns
/// what the model is told.
fn run_search(
    mcp: &McpSetup,
    em: &mut Emitter,
    arguments: &str,
    found: &mut Vec<FunctionDef>,
) -> Vec<InputItem> {
    use super::search;
    use crate::api::response::{ToolSearchCallItem, ToolSearchOutputItem};
    let args: serde_json::Value =
        serde_json::from_str(arguments).unwrap_or_else(|_| serde_json::json!({"query": arguments}));
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

    let mut namespaces: Vec<serde_json::Value> = Vec::new();
    for &i in &hits {
        let c = &mcp.deferred[i];
        let tool = serde_json::json!({"type": "function", "name": c.tool, "description": c.description, "parameters": c.parameters});
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
                namespaces.push(serde_json::json!({"type": "namespace", "name": c.label, "description": description, "tools": [tool]}));
            }
        }
    }
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

    let text = if hits.is_empty() {
        format!("No tools matched '{query}'. Search again with other words.")
    } else {
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
    };
    let name = mcp
        .search_tool
        .as_ref()
        .map(|t| t.name.clone())
        .unwrap_or_else(|| "tool_search".into());
    InputItem::call_with_output(call_id, name, arguments.to_string(), text).to_vec()
}

/// Makes the tools of `namespaces` (a `tool_search_output`'s tools) callable.
fn load_found(mcp: &McpSetup, namespaces: &[serde_json::Value], found: &mut Vec<FunctionDef>) {
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

/// Emits the `mcp_list_tools` items of servers listed for this run.
fn emit_tool_lists(em: &mut Emitter, p: &Prepared) {
    for (item, fresh) in &p.mcp.listed {
        if !*fresh {
            continue;
        }
        let output_index = em.next_output_index();
        let added = McpListToolsItem {
            id: item.id.clone(),
            server_label: item.server_label.clone(),
            tools: Arc::new([]),
            error: None,
        };
        em.emit(Event::OutputItemAdded {
            output_index,
            item: OutputItem::McpListTools(added),
        });
        em.emit(Event::McpListToolsInProgress {
            item_id: item.id.clone(),
            output_index,
        });
        em.emit(if item.error.is_some() {
            Event::McpListToolsFailed {
                item_id: item.id.clone(),
                output_index,
            }
        } else {
            Event::McpListToolsCompleted {
                item_id: item.id.clone(),
                output_index,
            }
        });
        em.emit(Event::OutputItemDone {
            output_index,
            item: OutputItem::McpListTools(item.clone()),
        });
    }
}

/// Runs a turn's MCP calls (at most `max_concurrent_calls` at a time, each with its timeout) and
/// reports each one's result in output order. Returns the finished items.
async fn run_calls(
    app: &App,
    mcp: &McpSetup,
    em: &mut Emitter,
    calls: Vec<McpCallStarted>,
    cancel: &StopSignal,
) -> Result<Vec<OutputItem>, Stop> {
    let (done, _) = run_calls_with_images(app, mcp, em, calls, cancel).await?;
    Ok(done)
}

/// As [`run_calls`], also returning a user message with the images the tools returned, for
/// upstreams that take images (`--upstream-vision`); otherwise the model gets the placeholders
/// in the call's text output.
async fn run_calls_with_images(
    app: &App,
    mcp: &McpSetup,
    em: &mut Emitter,
    calls: Vec<McpCallStarted>,
    cancel: &StopSignal,
) -> Result<(Vec<OutputItem>, Option<InputItem>), Stop> {
    use crate::api::request::{InputMessage, InputPart, MessageContent, Role};
    let cfg = &app.config().mcp;
    let mut results = futures::stream::iter(calls.clone().into_iter().map(|c| {
        let spec = mcp
            .servers
            .iter()
            .find(|s| s.label == c.item.server_label)
            .cloned();
        let pool = app.mcp().clone();
        let (timeout, cap) = (cfg.call_timeout, cfg.max_output_bytes);
        async move {
            let Some(spec) = spec else {
                return Err(McpCallError::McpProtocolError {
                    code: -32602,
                    message: "unknown MCP server".into(),
                });
            };
            let started = std::time::Instant::now();
            let outcome = pool
                .call_tool(&spec, &c.item.name, &c.item.arguments, timeout)
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
            outcome
                .map(|result| {
                    (
                        crate::mcp::result_text(&result, cap),
                        crate::mcp::result_images(&result),
                    )
                })
                .map_err(|e| crate::mcp::bounded_error(e, cap))
        }
    }))
    .buffered(cfg.max_concurrent_calls.max(1));
    let mut done = Vec::with_capacity(calls.len());
    let mut image_parts: Vec<InputPart> = Vec::new();
    for (i, call) in calls.iter().enumerate() {
        let result = tokio::select! {
            biased;
            stop = stopped(app, cancel) => {
                drop(results);
                fail_open_calls(em, &calls[i..], "The run stopped before this call finished.");
                return Err(stop);
            }
            r = results.next() => r.expect("one result per call"),
        };
        let mut item = call.item.clone();
        let (item_id, output_index) = (item.id.clone(), call.output_index);
        match result {
            Ok((text, images)) => {
                if app.config().upstream_vision && !images.is_empty() {
                    image_parts.push(InputPart::InputText {
                        text: format!(
                            "Images returned by the call {} of '{}' on MCP server '{}':",
                            item.id, item.name, item.server_label
                        ),
                    });
                    image_parts.extend(images.into_iter().map(|(mime, data)| {
                        InputPart::InputImage {
                            image_url: Some(format!("data:{mime};base64,{data}")),
                            file_id: None,
                            detail: None,
                        }
                    }));
                }
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
        done.push(item);
    }
    let images = (!image_parts.is_empty()).then_some(InputItem::Message(InputMessage {
        id: None,
        role: Role::User,
        content: MessageContent::Parts(image_parts),
        status: None,
        internal_chat_message_metadata_passthrough: None,
    }));
    Ok((done, images))
}

/// Closes MCP call items that will not run, as failed with `message`.
/// What a call beyond `max_tool_calls` fails with.
const OVER_LIMIT: &str = "Not run: the response reached its max_tool_calls limit.";

/// Leaves in `calls` those `max_tool_calls` still allows after `made` calls; returns the rest.
fn over_budget(
    calls: &mut Vec<McpCallStarted>,
    max_tool_calls: Option<u64>,
    made: u64,
) -> Vec<McpCallStarted> {
    let budget = max_tool_calls.map_or(usize::MAX, |m| m.saturating_sub(made) as usize);
    calls.split_off(calls.len().min(budget))
}

fn fail_open_calls(em: &mut Emitter, calls: &[McpCallStarted], message: &str) {
    for call in calls {
        let mut item = call.item.clone();
        item.status = ItemStatus::Failed;
        item.error = Some(McpCallError::McpToolExecutionError {
            content: serde_json::json!([{"type": "text", "text": message}]),
        });
        em.emit(Event::McpCallFailed {
            item_id: item.id.clone(),
            output_index: call.output_index,
        });
        em.emit(Event::OutputItemDone {
            output_index: call.output_index,
            item: OutputItem::McpCall(item),
        });
    }
}

/// Streams one model turn through the transcoder. On a stop, open items are closed as
/// incomplete so the terminal event can follow.
async fn run_turn(
    app: &App,
    mut stream: ModelStream,
    em: &mut Emitter,
    (tools, mut tc): (&ToolMap, Transcoder),
    cancel: &StopSignal,
) -> (TurnOutcome, Option<Stop>) {
    // One stop future for the whole turn (not a new registration with the token per event).
    let stopping = stopped(app, cancel);
    tokio::pin!(stopping);
    let stop = loop {
        tokio::select! {
            biased;
            stop = &mut stopping => break Some(stop),
            next = stream.next() => match next {
                None => break None,
                Some(Ok(ev)) => tc.on(ev, em, tools),
                Some(Err(e)) => break Some(Stop::Upstream(e)),
            },
        }
    };
    if stop.is_some() {
        tc.on(
            crate::upstream::ModelEvent::Finish(FinishReason::Length),
            em,
            tools,
        );
    }
    (tc.finish(em), stop)
}

/// Resolves when the run must stop: the relay is shutting down, the run was cancelled, or it ran
/// out of time.
async fn stopped(app: &App, stop: &StopSignal) -> Stop {
    stop.token.cancelled().await;
    if let Some(reason) = app.store().failure(&stop.run) {
        Stop::Store(reason)
    } else if app.shutdown_token().is_cancelled() {
        Stop::Shutdown
    } else if stop.timed_out.load(std::sync::atomic::Ordering::SeqCst) {
        Stop::Deadline(app.config().limits.max_run_time)
    } else {
        Stop::Cancelled
    }
}

fn ending_for(stop: Stop) -> Ending {
    match stop {
        Stop::Cancelled => Ending::Cancelled,
        Stop::Shutdown => Ending::Failed(ResponseError {
            code: "server_error".into(),
            message: "The relay shut down before the response finished.".into(),
        }),
        Stop::Store(message) => Ending::Failed(ResponseError {
            code: "server_error".into(),
            message,
        }),
        Stop::Deadline(limit) => Ending::Failed(ResponseError {
            code: "server_error".into(),
            message: format!(
                "The response took longer than the relay's limit of {} s.",
                limit.as_secs_f64()
            ),
        }),
        Stop::Upstream(e) => Ending::Failed(ResponseError {
            code: match e {
                UpstreamError::Status { status: 429, .. } => "rate_limit_exceeded".into(),
                _ => "server_error".into(),
            },
            message: e.to_string(),
        }),
    }
}
