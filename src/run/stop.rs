//! What stops a run before the model finishes, and the terminal event each stop ends it with.
//!
//! Invariant: every stop (client gone or cancelled, relay shutdown, the run's time limit, the
//! store failing, the upstream failing) maps to exactly one [`Ending`]; the loop and the calls it
//! runs wait on [`stopped`] and never decide the ending themselves.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::api::response::ResponseError;
use crate::app::App;
use crate::eventlog::emitter::Ending;
use crate::upstream::UpstreamError;

/// Why a run stopped before the model finished.
pub(super) enum Stop {
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
    /// The run's steering queue (WebSocket mode): the waits that take long also wake to
    /// announce accepted steers.
    steering: Option<Arc<super::steer::Steering>>,
}

impl StopSignal {
    /// The signal of run `run`, a child of `cancel`, with its time limit started (the timer's
    /// task is returned, to be aborted when the run ends).
    pub(super) fn start(
        app: &App,
        cancel: &CancellationToken,
        run: String,
        steering: Option<Arc<super::steer::Steering>>,
    ) -> (Self, tokio::task::JoinHandle<()>) {
        let signal = StopSignal {
            token: cancel.child_token(),
            timed_out: Arc::default(),
            run,
            steering,
        };
        let (token, flag, limit) = (
            signal.token.clone(),
            signal.timed_out.clone(),
            app.config().limits.max_run_time,
        );
        let timer = tokio::spawn(async move {
            tokio::time::sleep(limit).await;
            flag.store(true, std::sync::atomic::Ordering::SeqCst);
            token.cancel();
        });
        (signal, timer)
    }
}

impl StopSignal {
    /// Resolves when a steer was accepted that the run has not announced (never without a
    /// steering queue).
    pub(super) async fn steer_arrived(&self) {
        match &self.steering {
            Some(s) => s.arrived().await,
            None => std::future::pending().await,
        }
    }

    /// Announces the accepted steers not announced yet (`response.steer.accepted`).
    pub(super) fn announce_steers(&self, em: &mut crate::eventlog::emitter::Emitter) {
        if let Some(s) = &self.steering {
            s.announce(em, &self.run);
        }
    }

    /// Whether steering input is queued: the run ends `steered` at its next safe boundary.
    pub(super) fn steered(&self) -> bool {
        self.steering.as_ref().is_some_and(|s| s.is_queued())
    }

    /// The run takes no more steers; the accepted ones are announced (before its terminal
    /// event, which says `completed` or not).
    pub(super) fn close_steering(
        &self,
        em: &mut crate::eventlog::emitter::Emitter,
        completed: bool,
    ) {
        if let Some(s) = &self.steering {
            s.close(em, &self.run, completed);
        }
    }
}

/// Resolves when the run must stop: the relay is shutting down, the run was cancelled, or it ran
/// out of time.
pub(super) async fn stopped(app: &App, stop: &StopSignal) -> Stop {
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

/// How a run that stopped for `stop` ends.
pub(super) fn ending_for(stop: Stop) -> Ending {
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
