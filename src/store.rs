//! Where runs live: their Response (folded from the log), input items, conversation history and
//! event log. `memory` now; SQLite and Redis plug in behind the same methods.
//!
//! Invariant: a reader only sees events the store has accepted (the sink publishes them on the
//! run's log); a run not asked to be stored (`store: false`) is never kept after it ends.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

use crate::api::request::InputItem;
use crate::run::emitter::{Immediate, LogSink};
use crate::run::log::RunLog;
use crate::run::{Prepared, RunHandle, output_as_input};

/// A run as the store knows it.
#[derive(Clone)]
pub struct StoredRun {
    pub id: String,
    pub log: Arc<RunLog>,
    pub input: Arc<Vec<InputItem>>,
    pub history: Arc<Vec<InputItem>>,
    pub cancel: CancellationToken,
    pub background: bool,
}

#[derive(Default)]
struct State {
    runs: HashMap<String, StoredRun>,
    items: HashMap<String, InputItem>,
}

/// The store. Cheap to clone.
#[derive(Clone, Default)]
pub struct Store {
    state: Arc<Mutex<State>>,
}

impl Store {
    pub fn memory() -> Self {
        Self::default()
    }

    /// The sink the run's emitter appends through.
    pub fn sink(&self, _run: &Prepared) -> Arc<dyn LogSink> {
        Arc::new(Immediate)
    }

    /// Registers a starting run (if it is to be stored) and indexes its input items.
    pub fn insert_live(&self, p: &Prepared, h: &RunHandle) {
        if !p.request.store {
            return;
        }
        let mut st = self.state.lock().expect("store poisoned");
        for item in &p.input {
            if let Some(id) = item.id() {
                st.items.insert(id.to_string(), item.clone());
            }
        }
        st.runs.insert(
            h.id.clone(),
            StoredRun {
                id: h.id.clone(),
                log: h.log.clone(),
                input: Arc::new(p.input.clone()),
                history: Arc::new(p.history.clone()),
                cancel: h.cancel.clone(),
                background: h.background,
            },
        );
    }

    /// Indexes a finished run's output items for `item_reference`.
    pub fn finish_live(&self, log: &RunLog) {
        let Some(r) = log.snapshot() else { return };
        let mut st = self.state.lock().expect("store poisoned");
        if !st.runs.contains_key(&r.id) {
            return;
        }
        for item in &r.output {
            if let Some(input) = output_as_input(item) {
                st.items.insert(item.id().to_string(), input);
            }
        }
    }

    pub fn get(&self, id: &str) -> Option<StoredRun> {
        self.state.lock().expect("store poisoned").runs.get(id).cloned()
    }

    pub fn find_item(&self, id: &str) -> Option<InputItem> {
        self.state.lock().expect("store poisoned").items.get(id).cloned()
    }

    /// Removes a run and its log; false if there was none.
    pub fn delete(&self, id: &str) -> bool {
        self.state.lock().expect("store poisoned").runs.remove(id).is_some()
    }
}
