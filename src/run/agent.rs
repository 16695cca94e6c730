//! The agent loop of one run: model turn → tool calls → next turn, until the model answers
//! without calls or a bound is reached. Guarantees exactly one terminal event.

use std::sync::Arc;

use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use super::emitter::{Emitter, Ending};
use super::log::RunLog;
use super::transcode::{ToolMap, Transcoder, TurnOutcome};
use super::{Prepared, output_as_input, turn_request};
use crate::api::response::ResponseError;
use crate::api::{Event, Usage};
use crate::app::App;
use crate::upstream::{FinishReason, ModelStream, UpstreamError};

/// Why a turn stopped before the model finished.
enum Stop {
    Upstream(UpstreamError),
    Cancelled,
    Shutdown,
}

/// Runs the whole agent loop and ends the log with one terminal event.
pub async fn drive(app: App, mut p: Prepared, log: Arc<RunLog>, cancel: CancellationToken) {
    let mut em = Emitter::new(log, app.store().sink(&p), app.ids().clone(), app.clock());
    let background = p.request.background;
    em.emit(Event::Created { response: Box::new(p.response.clone()) });
    if background {
        em.emit(Event::Queued { response: Box::new(em.snapshot()) });
    }
    let mut snapshot = em.snapshot();
    snapshot.status = crate::api::ResponseStatus::InProgress;
    em.emit(Event::InProgress { response: Box::new(snapshot) });

    let tools = ToolMap::new();
    let mut usage = Usage::default();
    let mut conversation = p.history.clone();
    let mut first = p.first_turn.take();
    let ending = loop {
        let stream = match first.take() {
            Some(s) => Ok(s),
            None => {
                let turn = turn_request(&p, &conversation);
                tokio::select! {
                    biased;
                    stop = stopped(&app, &cancel) => Err(stop),
                    opened = app.upstream().open(&turn) => opened.map_err(Stop::Upstream),
                }
            }
        };
        let (outcome, stop) = match stream {
            Ok(stream) => run_turn(&app, stream, &mut em, &tools, &cancel).await,
            Err(stop) => (TurnOutcome::default(), Some(stop)),
        };
        if let Some(u) = &outcome.usage {
            usage.add(u);
        }
        if let Some(stop) = stop {
            break ending_for(stop);
        }
        match outcome.finish {
            Some(FinishReason::Length) => break Ending::Incomplete("max_output_tokens".into()),
            Some(FinishReason::ContentFilter) => break Ending::Incomplete("content_filter".into()),
            _ => {}
        }
        if outcome.mcp_calls.is_empty() {
            break Ending::Completed;
        }
        conversation.extend(outcome.items.iter().filter_map(output_as_input));
    };
    em.finish(ending, Some(usage));
    app.store().finish_live(em.log());
}

/// Streams one model turn through the transcoder. On a stop, open items are closed as
/// incomplete so the terminal event can follow.
async fn run_turn(
    app: &App,
    mut stream: ModelStream,
    em: &mut Emitter,
    tools: &ToolMap,
    cancel: &CancellationToken,
) -> (TurnOutcome, Option<Stop>) {
    let mut tc = Transcoder::new();
    let stop = loop {
        tokio::select! {
            biased;
            stop = stopped(app, cancel) => break Some(stop),
            next = stream.next() => match next {
                None => break None,
                Some(Ok(ev)) => tc.on(ev, em, tools),
                Some(Err(e)) => break Some(Stop::Upstream(e)),
            },
        }
    };
    if stop.is_some() {
        tc.on(crate::upstream::ModelEvent::Finish(FinishReason::Length), em, tools);
    }
    (tc.finish(em), stop)
}

/// Resolves when the run must stop: the relay is shutting down, or the run was cancelled.
async fn stopped(app: &App, cancel: &CancellationToken) -> Stop {
    cancel.cancelled().await;
    if app.shutdown_token().is_cancelled() { Stop::Shutdown } else { Stop::Cancelled }
}

fn ending_for(stop: Stop) -> Ending {
    match stop {
        Stop::Cancelled => Ending::Cancelled,
        Stop::Shutdown => Ending::Failed(ResponseError {
            code: "server_error".into(),
            message: "The relay shut down before the response finished.".into(),
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
