//! The `memory` backend: stored runs in a map, for tests and `--store memory`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::Record;
use crate::api::Response;
use crate::api::output_as_input;
use crate::api::request::InputItem;
use crate::eventlog::log::RunLog;

struct Kept {
    record: Record,
    log: Arc<RunLog>,
    expires_at: Option<i64>,
}

#[derive(Default)]
struct State {
    runs: HashMap<String, Kept>,
    /// Item id → (its run, the item).
    items: HashMap<String, (String, InputItem)>,
}

#[derive(Clone, Default)]
pub struct Memory {
    state: Arc<Mutex<State>>,
}

impl Memory {
    pub fn insert(&self, record: Record, log: Arc<RunLog>, expires_at: Option<i64>) {
        let mut st = self.state.lock().expect("memory store poisoned");
        let id = record.response.id.clone();
        for item in &record.input {
            // An item keeps the run that first stored it (see the SQLite store).
            if let Some(item_id) = item.id() {
                st.items
                    .entry(item_id.to_string())
                    .or_insert_with(|| (id.clone(), item.clone()));
            }
        }
        st.runs.insert(
            id,
            Kept {
                record,
                log,
                expires_at,
            },
        );
    }

    /// Keeps the final Response and indexes its output items.
    pub fn finish(&self, response: &Response) {
        let mut st = self.state.lock().expect("memory store poisoned");
        let State { runs, items } = &mut *st;
        let Some(kept) = runs.get_mut(&response.id) else {
            return;
        };
        kept.record.response = response.clone();
        for o in &response.output {
            if let Some(i) = output_as_input(o) {
                items.insert(o.id().to_string(), (response.id.clone(), i));
            }
        }
    }

    pub fn record(&self, id: &str) -> Option<Record> {
        let st = self.state.lock().expect("memory store poisoned");
        let kept = st.runs.get(id)?;
        let mut record = kept.record.clone();
        if let Some(r) = kept.log.snapshot() {
            record.response = r;
        }
        Some(record)
    }

    pub fn log(&self, id: &str) -> Option<Arc<RunLog>> {
        self.state
            .lock()
            .expect("memory store poisoned")
            .runs
            .get(id)
            .map(|k| k.log.clone())
    }

    pub fn find_item(&self, id: &str) -> Option<InputItem> {
        self.state
            .lock()
            .expect("memory store poisoned")
            .items
            .get(id)
            .map(|(_, i)| i.clone())
    }

    pub fn delete(&self, id: &str) -> bool {
        let mut st = self.state.lock().expect("memory store poisoned");
        st.items.retain(|_, (run, _)| run != id);
        st.runs.remove(id).is_some()
    }

    pub fn expire(&self, now: i64, live: &[String]) -> usize {
        let expired: Vec<String> = {
            let st = self.state.lock().expect("memory store poisoned");
            st.runs
                .iter()
                .filter(|(id, k)| k.expires_at.is_some_and(|t| t <= now) && !live.contains(id))
                .map(|(id, _)| id.clone())
                .collect()
        };
        expired.iter().filter(|id| self.delete(id)).count()
    }
}
