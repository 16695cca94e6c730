//! Steering a running response (SPEC §22): the queue a WebSocket connection fills with accepted
//! `response.steer` input and the run drains.
//!
//! Invariants: a submission is accepted (queued, its id minted) only while the run takes steers;
//! the run announces each accepted one in its own log (`response.steer.accepted`, in submission
//! order) before its terminal event; the run stops taking steers (`close`) before it emits its
//! terminal event, so a submission is either in the queue the connection takes after the end or
//! refused, never lost. The run acts on a queued steer only at a safe boundary (`agent`: a model
//! turn and its MCP calls done), never mid-item, and never cancels anything for it.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Poll;

use futures::task::AtomicWaker;
use serde_json::Value;

use crate::api::Event;
use crate::api::steer::{SteerErrorCode, SteerRef};
use crate::eventlog::emitter::Emitter;

/// Submissions one response may hold queued at a time (the next one is refused with
/// `too_many_pending_steers`).
pub const MAX_PENDING_STEERS: usize = 8;

/// One accepted submission: its id and its input as the client sent it.
#[derive(Debug, Clone)]
pub struct Steer {
    pub id: String,
    pub input: Value,
}

/// A response's steering queue, shared by its run and the connection that started it.
#[derive(Debug, Default)]
pub struct Steering {
    state: Mutex<State>,
    /// Whether a queued submission waits to be announced (set and cleared under `state`'s lock;
    /// read without it: the run's waits poll it on every wake-up, so it costs no lock).
    fresh: AtomicBool,
    /// The run's task, woken when a submission is queued.
    arrived: AtomicWaker,
}

#[derive(Debug, Default)]
struct State {
    /// Accepted, not yet committed, in submission order.
    queued: Vec<Steer>,
    /// How many of `queued` the run has announced.
    announced: usize,
    /// Set once the run takes no more steers: whether it completed.
    closed: Option<bool>,
}

impl Steering {
    pub fn new() -> Self {
        Self::default()
    }

    /// Queues `input` for the response, its id minted by `mint`; or the refusal's code and
    /// message.
    pub fn offer(
        &self,
        input: Value,
        mint: impl FnOnce() -> String,
    ) -> Result<(), (SteerErrorCode, String)> {
        let mut state = self.state.lock().expect("not poisoned");
        match state.closed {
            Some(true) => {
                return Err((
                    SteerErrorCode::ResponseAlreadyCompleted,
                    "The response has completed; send its continuation with response.create."
                        .into(),
                ));
            }
            Some(false) => {
                return Err((
                    SteerErrorCode::ResponseNotActive,
                    "The response is no longer running and takes no steering input.".into(),
                ));
            }
            None => {}
        }
        if state.queued.len() >= MAX_PENDING_STEERS {
            return Err((
                SteerErrorCode::TooManyPendingSteers,
                format!(
                    "At most {MAX_PENDING_STEERS} steering submissions may be queued for one response; send this one after the successor has started."
                ),
            ));
        }
        state.queued.push(Steer { id: mint(), input });
        self.fresh.store(true, Ordering::Release);
        drop(state);
        self.arrived.wake();
        Ok(())
    }

    /// Whether accepted input waits: the run ends steered at its next safe boundary.
    pub(super) fn is_queued(&self) -> bool {
        !self.state.lock().expect("not poisoned").queued.is_empty()
    }

    /// Resolves when a submission is queued that the run has not announced yet.
    pub(super) async fn arrived(&self) {
        std::future::poll_fn(|cx| {
            if self.fresh.load(Ordering::Acquire) {
                return Poll::Ready(());
            }
            self.arrived.register(cx.waker());
            if self.fresh.load(Ordering::Acquire) {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await
    }

    /// Emits `response.steer.accepted` for each submission not announced yet, in order.
    pub(super) fn announce(&self, em: &mut Emitter, response_id: &str) {
        let fresh: Vec<String> = {
            let mut state = self.state.lock().expect("not poisoned");
            let fresh = (state.queued[state.announced..].iter())
                .map(|s| s.id.clone())
                .collect();
            state.announced = state.queued.len();
            self.fresh.store(false, Ordering::Release);
            fresh
        };
        for id in fresh {
            em.emit(Event::SteerAccepted {
                steer: SteerRef {
                    id,
                    previous_response_id: response_id.to_string(),
                },
            });
        }
    }

    /// The run takes no more steers (it is about to emit its terminal event; `completed`: that
    /// event is `response.completed`); what was accepted before is announced now.
    pub(super) fn close(&self, em: &mut Emitter, response_id: &str, completed: bool) {
        self.state.lock().expect("not poisoned").closed = Some(completed);
        self.announce(em, response_id);
    }

    /// After the run ended: the accepted submissions, in order, handed to whoever commits them
    /// (the queue is empty afterwards). A steering queue the connection gives up on (it closed)
    /// is closed and emptied the same way, so its run goes on as if never steered.
    pub fn take(&self) -> Vec<Steer> {
        let mut state = self.state.lock().expect("not poisoned");
        state.closed.get_or_insert(false);
        state.announced = 0;
        self.fresh.store(false, Ordering::Release);
        std::mem::take(&mut state.queued)
    }
}
