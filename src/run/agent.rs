//! The agent loop of one run, as a `Run` that owns the loop's state: opened (the created
//! Response, the tool lists), then model turn → the turn's tool calls (MCP calls, tool search,
//! web search) → next turn, until the model answers without calls or a bound is reached; then
//! ended. Each method of `Run` is one of those steps.
//!
//! Invariants: a run ends with exactly one terminal event (`Run::end`), whatever stops it. Order
//! of a run's items: the `mcp_list_tools` items (one per server listed for this run), then per
//! model turn its reasoning, text and calls; MCP calls of a turn run concurrently (bounded) but
//! their results are reported in output order, so logs are deterministic.

use std::ops::ControlFlow;
use std::sync::Arc;

use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use super::mcp_call::{self, McpCallStarted, NOT_RUN, OVER_LIMIT};
use super::stop::{Stop, StopSignal, ending_for, stopped};
use super::transcode::{ToolMap, Transcoder, TurnOutcome};
use super::turn::{self, model_view, turn_request_at};
use super::{Prepared, approvals, compact, tool_search, tools, web_search};
use crate::api::output_as_input;
use crate::api::request::InputItem;
use crate::api::response::{McpListToolsItem, ResponseError};
use crate::api::{Event, OutputItem, Usage};
use crate::app::App;
use crate::eventlog::emitter::{Emitter, Ending};
use crate::eventlog::log::RunLog;
use crate::upstream::{FinishReason, FunctionDef, ModelStream};

/// `incomplete_details.reason` of a response that ended for queued steering input.
const STEERED: &str = "steered";

/// Runs the whole agent loop and ends the log with one terminal event.
/// Not an `async fn`: its arguments would be kept in the future beside the `Run` they are moved
/// into.
pub fn drive(
    app: App,
    p: Prepared,
    log: Arc<RunLog>,
    cancel: CancellationToken,
) -> impl std::future::Future<Output = ()> + Send {
    use futures::FutureExt;
    let steering = p.relay.steering.clone();
    let (signal, timer) = StopSignal::start(&app, &cancel, p.response.id.clone(), steering);
    Run::new(app, p, log, signal)
        .drive()
        .map(move |()| timer.abort())
}

/// One run in progress: the prepared request, the emitter that writes its log, and the loop's
/// state from one model turn to the next.
struct Run {
    app: App,
    p: Prepared,
    em: Emitter,
    signal: StopSignal,
    /// What the model sees before its next turn: the history, the fresh tool lists, then every
    /// turn's items and the results of its calls.
    conversation: Vec<InputItem>,
    /// The first model turn, when `prepare` opened it.
    first: Option<ModelStream>,
    /// Deferred tools found by searches (this run's or the chain's): callable from then on.
    found: Vec<FunctionDef>,
    /// The run's usage so far (summaries included).
    usage: Usage,
    /// Each model turn's usage, kept beside the run for the viewer (the log carries only the sum).
    turns: Vec<Usage>,
    /// Output tokens spent on summaries (`context_management`): not counted against
    /// `max_output_tokens`.
    summarized: u64,
    /// MCP calls run so far (against `max_tool_calls`).
    calls_made: u64,
    /// Tokens of `usage` charged to the key's limits so far.
    charged: u64,
    /// Model turns taken so far (against `max_steps`; a forced `tool_choice` is the first's only).
    step: usize,
}

impl Run {
    fn new(app: App, mut p: Prepared, log: Arc<RunLog>, signal: StopSignal) -> Self {
        let em = Emitter::new(
            log,
            app.store().sink(&p.tenant, &p.response.id, p.request.store),
            app.ids().clone(),
            app.clock(),
        );
        let first = p.first_turn.take();
        Run {
            app,
            p,
            em,
            signal,
            conversation: Vec::new(),
            first,
            found: Vec::new(),
            usage: Usage::default(),
            turns: Vec::new(),
            summarized: 0,
            calls_made: 0,
            charged: 0,
            step: 0,
        }
    }

    /// The run from its first event to its terminal one. Not an `async fn`: one would keep the
    /// `Run` twice in its future, as its argument and as the local the argument is moved into.
    fn drive(self) -> impl std::future::Future<Output = ()> + Send {
        let mut run = self;
        async move {
            let ending = run.run().await;
            // The rarer stages are boxed: a run's future is as large as its largest stage, and
            // it lives as long as the stream (measured: 20 KiB per run with every stage inline).
            Box::pin(run.end(ending)).await;
        }
    }

    /// Everything before the terminal event: how the run ends.
    async fn run(&mut self) -> Ending {
        if let ControlFlow::Break(ending) = Box::pin(self.open()).await {
            return ending;
        }
        if !self.p.relay.generate {
            // The request's state is recorded; the model is not asked.
            return Ending::Completed;
        }
        if self.p.compacts() {
            let turn = compact::summary_turn(&self.p);
            let (em, usage) = (&mut self.em, &mut self.usage);
            return Box::pin(compact::compaction(
                &self.app,
                turn,
                em,
                usage,
                &self.signal,
            ))
            .await;
        }
        if !self.p.mcp.answers.is_empty()
            && let ControlFlow::Break(ending) = Box::pin(self.answer_approvals()).await
        {
            return ending;
        }
        // The approved calls were a turn of their own: a safe boundary.
        if !self.p.mcp.answers.is_empty() && self.signal.steered() {
            return Ending::Incomplete(STEERED.into());
        }
        loop {
            if let ControlFlow::Break(ending) = self.step().await {
                return ending;
            }
        }
    }

    /// Opens the run: `response.created` (then `queued` for a background run) and
    /// `in_progress`; a background run lists its MCP servers now, having answered `queued`
    /// (`run::prepare`); then the `mcp_list_tools` items and the conversation the model sees.
    /// Breaks when listing failed or the run stopped meanwhile.
    async fn open(&mut self) -> ControlFlow<Ending> {
        let em = &mut self.em;
        em.emit(Event::Created {
            response: Box::new(self.p.response.clone()),
        });
        if self.p.request.background {
            em.emit(Event::Queued {
                response: Box::new(em.snapshot()),
            });
        }
        let mut snapshot = em.snapshot();
        snapshot.status = crate::api::ResponseStatus::InProgress;
        em.emit(Event::InProgress {
            response: Box::new(snapshot),
        });
        let unresolved = if self.p.tools_pending {
            let (app, signal, em) = (&self.app, &self.signal, &mut self.em);
            let resolving = tools::resolve_tools(app, &mut self.p);
            tokio::pin!(resolving);
            loop {
                tokio::select! {
                    biased;
                    stop = stopped(app, signal) => break Some(ending_for(stop)),
                    () = signal.steer_arrived() => signal.announce_steers(em),
                    resolved = &mut resolving => break resolved.err().map(|e| {
                        Ending::Failed(ResponseError {
                            code: "server_error".into(),
                            message: e.to_string(),
                        })
                    }),
                }
            }
        } else {
            None
        };
        emit_tool_lists(&mut self.em, &self.p.mcp.listed);
        self.conversation = self.p.history.clone();
        self.conversation.extend(
            (self.p.mcp.listed.iter())
                .filter(|(_, fresh)| *fresh)
                .map(|(l, _)| InputItem::McpListTools(l.clone())),
        );
        // Deferred tools found by earlier searches of the chain stay callable.
        for item in &self.conversation {
            if let InputItem::ToolSearchOutput(out) = item {
                tool_search::load_found(&self.p.mcp, &out.tools, &mut self.found);
            }
        }
        match unresolved {
            Some(ending) => ControlFlow::Break(ending),
            None => ControlFlow::Continue(()),
        }
    }

    /// Acts on the client's approval answers before the model samples again: the approved calls
    /// and the refusals are one model turn (all the answered calls, then all their results).
    async fn answer_approvals(&mut self) -> ControlFlow<Ending> {
        let max_tool_calls = self.p.request.max_tool_calls;
        let (app, mcp, em) = (&self.app, &self.p.mcp, &mut self.em);
        let account = self.p.relay.account.as_deref();
        match approvals::answer_approvals(app, (mcp, account), em, max_tool_calls, &self.signal)
            .await
        {
            Ok(answered) if answered.over_limit => {
                ControlFlow::Break(Ending::Incomplete("max_tool_calls".into()))
            }
            Ok(answered) => {
                self.calls_made += answered.ran;
                let view = model_view(&answered.items, &self.p.mcp.tools, &self.p.clients);
                self.conversation.extend(view);
                ControlFlow::Continue(())
            }
            Err(stop) => ControlFlow::Break(ending_for(stop)),
        }
    }

    /// One step of the loop: a model turn (the one `prepare` opened, or the next), then its
    /// tool calls; breaks with how the run ends when it does.
    async fn step(&mut self) -> ControlFlow<Ending> {
        let stream = match self.first.take() {
            Some(s) => Ok(s),
            None => Box::pin(self.open_turn()).await?,
        };
        self.step += 1;
        let outcome = self.model_turn(stream).await?;
        Box::pin(self.turn_calls(&outcome)).await?;
        self.next_or_end(&outcome)
    }

    /// Opens the next model turn (through [`turn::open`]): compacts the conversation first when
    /// it passed the threshold (`context_management`), and gives the turn what the earlier ones
    /// left of `max_output_tokens`. Breaks when the run ends before the turn opens.
    async fn open_turn(&mut self) -> ControlFlow<Ending, Result<ModelStream, Stop>> {
        if let Some(threshold) = self.p.request.compact_threshold {
            let before = self.usage.output_tokens;
            let turns = (
                turn_request_at(&self.p, &self.conversation, self.step, &self.found),
                compact::summary_turn_of(&self.p, &self.conversation),
            );
            let (em, usage, conversation) = (&mut self.em, &mut self.usage, &mut self.conversation);
            let compacted = compact::compact_if_over(
                &self.app,
                turns,
                threshold,
                em,
                usage,
                &self.signal,
                conversation,
            );
            if let Err(ending) = compacted.await {
                return ControlFlow::Break(ending);
            }
            // The summary is the relay's doing, not the client's answer.
            self.summarized += self.usage.output_tokens - before;
        }
        // `max_output_tokens` bounds the whole response: a later turn gets what the earlier ones
        // left (as the upstream counted them), none when it is spent.
        let mut limit = None;
        if let Some(max) = self.p.request.max_output_tokens {
            let answered = self.usage.output_tokens.saturating_sub(self.summarized);
            match max.saturating_sub(answered) {
                0 => return ControlFlow::Break(Ending::Incomplete("max_output_tokens".into())),
                left => limit = Some(left),
            }
        }
        let (p, conversation) = (&self.p, &self.conversation);
        let opening = turn::open(&self.app, p, conversation, self.step, &self.found, limit);
        tokio::pin!(opening);
        ControlFlow::Continue(loop {
            tokio::select! {
                biased;
                stop = stopped(&self.app, &self.signal) => break Err(stop),
                () = self.signal.steer_arrived() => self.signal.announce_steers(&mut self.em),
                opened = &mut opening => break opened.map_err(Stop::Upstream),
            }
        })
    }

    /// Streams one model turn through the transcoder and counts its usage. Breaks when the
    /// turn could not open, the run stopped during it, or the model was cut off (the turn's MCP
    /// calls then fail, not run).
    async fn model_turn(
        &mut self,
        stream: Result<ModelStream, Stop>,
    ) -> ControlFlow<Ending, TurnOutcome> {
        let (outcome, stop) = match stream {
            Ok(stream) => {
                let sealing = (self.p.request.include.iter())
                    .any(|i| i == "reasoning.encrypted_content")
                    .then(|| self.app.sealer().clone());
                let tc = Transcoder::with_clients(self.p.clients.clone())
                    .sealing(sealing)
                    .signing(self.app.sealer().clone());
                let (em, tools) = (&mut self.em, &self.p.mcp.tools);
                run_turn(&self.app, stream, em, (tools, tc), &self.signal).await
            }
            Err(stop) => (TurnOutcome::default(), Some(stop)),
        };
        if let Some(u) = &outcome.usage {
            self.usage.add(u);
            self.turns.push(u.clone());
            self.charge_tokens();
        }
        if let Some(stop) = stop {
            mcp_call::fail_open(&mut self.em, &outcome.mcp_calls, NOT_RUN);
            return ControlFlow::Break(ending_for(stop));
        }
        let cut = match outcome.finish {
            Some(FinishReason::Length) => Some((
                "The model's output was cut off (max_output_tokens).",
                "max_output_tokens",
            )),
            Some(FinishReason::ContentFilter) => {
                Some(("The model's output was filtered.", "content_filter"))
            }
            _ => None,
        };
        if let Some((message, reason)) = cut {
            mcp_call::fail_open(&mut self.em, &outcome.mcp_calls, message);
            return ControlFlow::Break(Ending::Incomplete(reason.into()));
        }
        ControlFlow::Continue(outcome)
    }

    /// The turn's items join the conversation, then its tool calls run: its MCP calls, its tool
    /// searches, its web searches, each adding what the model is told. Breaks when the run
    /// stops or reaches `max_tool_calls`.
    async fn turn_calls(&mut self, outcome: &TurnOutcome) -> ControlFlow<Ending> {
        self.conversation.extend(
            (outcome.items.iter())
                .filter(|i| !matches!(i, OutputItem::McpCall(_)))
                .filter_map(output_as_input),
        );
        if !outcome.mcp_calls.is_empty() {
            self.mcp_calls(&outcome.mcp_calls).await?;
        }
        for arguments in &outcome.searches {
            let (mcp, em) = (&self.p.mcp, &mut self.em);
            let told = tool_search::run_search(mcp, em, arguments, &mut self.found);
            self.conversation.extend(told);
        }
        for arguments in &outcome.web_searches {
            let (app, mcp, em) = (&self.app, &self.p.mcp, &mut self.em);
            let account = self.p.relay.account.as_deref();
            match web_search::web_search(app, (mcp, account), em, arguments, &self.signal).await {
                Ok(items) => self.conversation.extend(items),
                Err(stop) => return ControlFlow::Break(ending_for(stop)),
            }
        }
        ControlFlow::Continue(())
    }

    /// Runs the turn's MCP calls that `max_tool_calls` still allows (the others fail, not run,
    /// and end the run incomplete); their calls and results join the conversation as one model
    /// turn, so that consecutive tool-only turns stay separate turns for the model.
    async fn mcp_calls(&mut self, calls: &[McpCallStarted]) -> ControlFlow<Ending> {
        let mut run_now = calls.to_vec();
        let over =
            mcp_call::over_budget(&mut run_now, self.p.request.max_tool_calls, self.calls_made);
        self.calls_made += run_now.len() as u64;
        let (app, mcp, em) = (&self.app, &self.p.mcp, &mut self.em);
        let account = self.p.relay.account.as_deref();
        match mcp_call::run(app, (mcp, account), em, run_now, &self.signal).await {
            Ok((done, images)) => {
                let done: Vec<InputItem> = done.iter().filter_map(output_as_input).collect();
                let view = model_view(&done, &self.p.mcp.tools, &self.p.clients);
                self.conversation.extend(view);
                self.conversation.extend(images);
            }
            Err(stop) => {
                mcp_call::fail_open(&mut self.em, &over, NOT_RUN);
                return ControlFlow::Break(ending_for(stop));
            }
        }
        if !over.is_empty() {
            mcp_call::fail_open(&mut self.em, &over, OVER_LIMIT);
            return ControlFlow::Break(Ending::Incomplete("max_tool_calls".into()));
        }
        ControlFlow::Continue(())
    }

    /// Whether the loop takes another turn: approval requests and client calls hand the turn
    /// back to the client, a turn that ran nothing is the answer, and `max_steps` bounds the
    /// turns.
    /// A turn whose calls are done is a safe boundary: with steering queued the response ends
    /// `steered` there (unless it waits for the client's own calls or approvals: the steering
    /// input then waits for the client's continuation).
    fn next_or_end(&self, outcome: &TurnOutcome) -> ControlFlow<Ending> {
        let acted = !outcome.mcp_calls.is_empty()
            || !outcome.searches.is_empty()
            || !outcome.web_searches.is_empty();
        if !outcome.approvals.is_empty() || outcome.client_calls > 0 {
            return ControlFlow::Break(Ending::Completed);
        }
        if self.signal.steered() {
            return ControlFlow::Break(Ending::Incomplete(STEERED.into()));
        }
        if !acted {
            return ControlFlow::Break(Ending::Completed);
        }
        let max_steps =
            (self.p.request.max_steps.unwrap_or(u64::MAX)).min(self.app.config().limits.max_steps);
        if self.step as u64 >= max_steps {
            return ControlFlow::Break(Ending::Incomplete("max_steps".into()));
        }
        ControlFlow::Continue(())
    }

    /// Charges the tokens used since the last charge (model turns, summaries) to the key's
    /// token limits, if it has any.
    fn charge_tokens(&mut self) {
        let Some(account) = &self.p.relay.account else {
            return;
        };
        let used = self.usage.input_tokens + self.usage.output_tokens;
        self.app
            .limiter()
            .charge(account, used.saturating_sub(self.charged));
        self.charged = used;
    }

    /// Ends the run: a run on a conversation adds its items to it first, then the one terminal
    /// event is emitted, and the store keeps the finished run with each turn's usage.
    async fn end(&mut self, ending: Ending) {
        self.charge_tokens();
        let ending = keep_in_conversation(&self.app, &mut self.p, &mut self.em, ending).await;
        let completed = matches!(ending, Ending::Completed);
        self.signal.close_steering(&mut self.em, completed);
        self.em
            .finish(ending, Some(std::mem::take(&mut self.usage)));
        let id = self.em.snapshot().id;
        self.app
            .store()
            .finish_live(&id, self.em.log(), &self.turns)
            .await;
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

/// Emits the `mcp_list_tools` items of servers listed for this run.
fn emit_tool_lists(em: &mut Emitter, listed: &[(McpListToolsItem, bool)]) {
    for (item, fresh) in listed {
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
    let steered = cancel.steer_arrived();
    tokio::pin!(stopping, steered);
    let stop = loop {
        tokio::select! {
            biased;
            stop = &mut stopping => break Some(stop),
            // Announced at once, acted on only at the turn's end (never mid-item).
            () = &mut steered => {
                cancel.announce_steers(em);
                steered.set(cancel.steer_arrived());
            }
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
