//! A run's event log, below the run and the stores: the in-memory log every reader reads
//! ([`RunLog`], with each event's SSE frame), the one [`Emitter`] that numbers and appends events,
//! and the [`LogSink`] through which a store keeps them before readers see them.
//!
//! Invariants: imports only [`crate::api`] (no run, store, hyper or store engine); sequence
//! numbers start at 0 and rise by 1; an event that would break the fold is never appended;
//! nothing is appended after the terminal event.

pub mod emitter;
pub mod log;
pub mod publish;

pub use emitter::{Clock, Emitter, Ending, Immediate, LogSink, end_as_failed};
pub use log::{LogEntry, RunLog};
