//! One run = one Response. This file is the module's map and its public face: a request is
//! [`prepare`]d (everything that can fail before the first byte) and [`start`]ed (the agent loop in
//! its own task, writing events through the run's one emitter). One request, in reading order:
//!
//! - [`prepare`](prepare()): limits and the store's availability, then `context` (the chain and
//!   item references), then the tools: `client_tools` (the tools the client runs, as functions)
//!   and `tools` (the MCP servers listed and named; `approvals` matched), then the created
//!   Response and the first model turn, opened by `turn::open`.
//! - [`agent`]: the loop, a `Run` that owns its state: opened (created, tool lists), approved
//!   calls, then model turn → the turn's tool calls → next turn, then ended (one terminal event).
//!   `stop`: what stops a run early and how each stop ends it. `steer`: the steering queue a
//!   WebSocket connection fills and the loop acts on at its safe boundaries.
//! - `turn`: what the model is sent each turn, and `turn::open`, the one function that opens a
//!   model turn (the first in `prepare`, the later ones in the loop).
//! - [`transcode`]: one model turn's events → Responses events.
//! - [`mcp_call`]: an `mcp_call` item's whole life (opened, arguments, run, result, done), the
//!   only place its events are made: for the transcoder, the loop and the approved calls.
//! - `tool_search`: the server-side tool search in a run (its items, the tools found);
//!   [`search`] ranks the deferred tools. `web_search`: OpenAI's `web_search` through a
//!   registered MCP server.
//! - `compact`: the conversation summarized by the model and sealed (compaction), for the
//!   compact endpoint, a `compaction_trigger`, and `context_management` in the loop.
//! - `tokens`: a request's input tokens, counted by the model server on a one-token turn.
//!
//! The log a run writes, and the emitter that writes it, are [`crate::eventlog`]'s; the store
//! keeps a started run as a [`LiveRun`] the run side hands it.
//!
//! Invariant: never imports hyper or a store engine. A run always ends with exactly one terminal
//! event, whatever happens: upstream failure, client disconnect, relay shutdown.

pub mod agent;
mod approvals;
mod client_tools;
mod compact;
mod context;
pub mod mcp_call;
mod prepare;
mod relay_set;
pub mod search;
pub mod steer;
mod stop;
mod tokens;
mod tool_search;
mod tools;
pub mod transcode;
mod turn;
mod web_search;

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

pub use approvals::ApprovalAnswer;
pub use compact::compact;
pub use prepare::{Purpose, prepare, prepare_for};
pub use relay_set::RelaySet;
pub use steer::Steering;
pub use tokens::count_input_tokens;
pub use tools::McpSetup;

use crate::api::request::{CreateRequest, InputItem};
use crate::api::{FieldError, Response};
use crate::app::App;
use crate::eventlog::RunLog;
use crate::store::{LiveRun, Tenant};
use crate::upstream::{FunctionDef, ModelStream, UpstreamError};

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
    Store(#[from] crate::store::StoreError),
    #[error("Conversation with id '{0}' not found.")]
    ConversationNotFound(String),
    /// Another run holds the conversation (its items would interleave with this run's).
    #[error(
        "Another response is in progress on conversation '{0}'; send this one when it has ended."
    )]
    ConversationBusy(String),
}

impl StartError {
    /// A short, bounded name of the failure (a trace span's `error.type`).
    pub fn kind(&self) -> &'static str {
        match self {
            StartError::Invalid(_) => "invalid_request",
            StartError::PreviousNotFound(_) | StartError::ConversationNotFound(_) => "not_found",
            StartError::Upstream(_) => "upstream_error",
            StartError::McpDiscovery { .. } => "mcp_discovery_failed",
            StartError::Store(_) => "store_unavailable",
            StartError::ConversationBusy(_) => "conversation_busy",
        }
    }
}

/// A run ready to go: validated, its context resolved and its first model turn open.
pub struct Prepared {
    pub response: Response,
    pub request: CreateRequest,
    /// What the relay set for the request (its key's MCP servers, the WebSocket door's).
    pub relay: RelaySet,
    /// Input items as stored (ids assigned, references resolved).
    pub input: Vec<InputItem>,
    /// What the model sees before its own output: the chain's history and this input.
    pub history: Vec<InputItem>,
    pub tools: Vec<FunctionDef>,
    pub first_turn: Option<ModelStream>,
    pub client_bearer: Option<String>,
    /// Whose run this is: every store lookup it makes is scoped by it.
    pub tenant: Tenant,
    /// The request's conversation, held from reading its items until this run's are added.
    pub conversation_lock: Option<crate::store::conversations::ConversationLock>,
    pub mcp: McpSetup,
    /// Where the model-facing names of client tools (namespaced, custom, built-in) lead.
    pub clients: Arc<transcode::ClientMap>,
    /// A background run answers `queued` at once: it lists its MCP servers itself, first thing
    /// (`tools::resolve_tools`); `mcp` is empty and `tools` has only the function tools until then.
    pub tools_pending: bool,
    /// The run's `invoke_agent` trace span (`Span::none()` when traces are off): the parent of
    /// the spans `prepare` and the run's task make (`otel::in_agent`).
    pub span: tracing::Span,
}

impl Prepared {
    /// Whether the run compacts the conversation instead of answering (its last input item is a
    /// `compaction_trigger`).
    pub fn compacts(&self) -> bool {
        matches!(self.input.last(), Some(InputItem::CompactionTrigger(_)))
    }
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

/// A finished run's metrics: its final status, duration, time to its first text delta (from the
/// log's time offsets) and the tokens the upstream reported; and its tenant's usage tally (runs,
/// tokens, MCP calls), stored or not.
fn record_end(
    app: &App,
    tenant: &Tenant,
    model: &str,
    log: &RunLog,
    took: std::time::Duration,
    span: &tracing::Span,
) {
    let Some(response) = log.snapshot() else {
        return;
    };
    if !span.is_disabled() {
        let usage = response.usage.clone().unwrap_or_default();
        span.record("gen_ai.response.id", response.id.as_str());
        span.record("gen_ai.usage.input_tokens", usage.input_tokens as i64);
        span.record("gen_ai.usage.output_tokens", usage.output_tokens as i64);
        if let Some(e) = &response.error {
            crate::otel::failed(span, &e.code);
        }
    }
    let first_token = log
        .offset_of_first("response.output_text.delta")
        .map(std::time::Duration::from_millis);
    let usage = response.usage.unwrap_or_default();
    let mcp_calls = response
        .output
        .iter()
        .filter(|o| matches!(o, crate::api::response::OutputItem::McpCall(_)))
        .count();
    app.store()
        .tally(tenant, response.created_at, model, &usage, mcp_calls as u64);
    let status = serde_json::to_value(response.status)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    app.metrics().run_ended(crate::metrics::RunEnd {
        model,
        upstream: app.upstream().name_for(model),
        status: &status,
        duration: took,
        first_token,
        input_tokens: usage.input_tokens,
        output_tokens: usage.output_tokens,
    });
}

/// Items as a store keeps them: each with an id (the client's, or one minted now).
pub fn with_ids(app: &App, items: Vec<InputItem>) -> Vec<InputItem> {
    items
        .into_iter()
        .map(|i| context::with_id(app, i))
        .collect()
}

/// A run's place among the relay's concurrent runs, and among its key's (when limited): held
/// until the run ends, however it ends.
pub struct Permit {
    pub relay: tokio::sync::OwnedSemaphorePermit,
    pub key: Option<crate::limits::Lease>,
}

/// Starts the run's task (holding its place among the relay's concurrent runs); returns its
/// handle at once.
pub fn start(app: &App, prepared: Prepared, permit: Permit) -> RunHandle {
    let (handle, task) = start_driven(app, prepared, permit);
    tokio::spawn(task);
    handle
}

/// A run's whole work as one future (instrumented with the request's span), for its only reader
/// to drive: polled by the reader's own task, the events the run writes reach that reader with
/// no hop between tasks. Whoever holds it must keep polling it to its end (or hand it to a task
/// of its own); dropping it half-way abandons the run without its terminal event.
pub type RunTask = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

/// [`start`], with the run's task handed back instead of spawned.
pub fn start_driven(app: &App, prepared: Prepared, permit: Permit) -> (RunHandle, RunTask) {
    let log = Arc::new(RunLog::new());
    let cancel = app.shutdown_token().child_token();
    let handle = RunHandle {
        id: prepared.response.id.clone(),
        log: log.clone(),
        cancel: cancel.clone(),
        background: prepared.request.background,
        created: Arc::new(prepared.response.clone()),
    };
    if prepared.request.store {
        app.store().insert_live(
            &handle.id,
            LiveRun {
                tenant: prepared.tenant.clone(),
                log: handle.log.clone(),
                cancel: handle.cancel.clone(),
                background: handle.background,
                input: Arc::new(prepared.input.clone()),
                created: handle.created.clone(),
            },
        );
    }
    let app = app.clone();
    let prepared_span = prepared.span.clone();
    // The run's log lines carry the request's span (its request id), whoever reads the run.
    let model = prepared.request.model.clone();
    let tenant = prepared.tenant.clone();
    let span = prepared.span.clone();
    // Boxed: awaited inside this block, it would be kept twice (as the block's capture and as
    // the future awaited).
    let drive = Box::pin(agent::drive(app.clone(), prepared, log.clone(), cancel));
    let run = async move {
        let counted = app.metrics().run_started();
        let started = std::time::Instant::now();
        drive.await;
        drop(counted);
        record_end(&app, &tenant, &model, &log, started.elapsed(), &span);
        drop(permit);
    };
    // The run's log lines carry the request's span; the trace spans it makes are inside its
    // `invoke_agent` span (when traces are on).
    let task: RunTask = if prepared_span.is_disabled() {
        Box::pin(tracing::Instrument::in_current_span(run))
    } else {
        Box::pin(tracing::Instrument::in_current_span(crate::otel::in_agent(
            prepared_span,
            run,
        )))
    };
    (handle, task)
}
