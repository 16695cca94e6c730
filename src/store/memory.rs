//! The `memory` backend: stored runs in a map, for tests and `--store memory`.
//!
//! Invariant: runs and items are keyed by (tenant, id): a lookup of one tenant cannot find
//! another's.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use super::usage::{Tally, UsageRow};
use super::{Record, RunQuery, Tenant};
use crate::api::Response;
use crate::api::output_as_input;
use crate::api::request::InputItem;
use crate::api::response::{Conversation, Usage};
use crate::eventlog::log::RunLog;

struct Kept {
    record: Record,
    /// Insertion order: listings are newest first.
    order: u64,
    /// The usage of each model turn, once the run ended.
    turns: Option<Vec<Usage>>,
    log: Arc<RunLog>,
    expires_at: Option<i64>,
}

type Key = (Tenant, String);

#[derive(Default)]
struct State {
    runs: HashMap<Key, Kept>,
    inserted: u64,
    /// (tenant, item id) → (its run, the item).
    items: HashMap<Key, (String, InputItem)>,
    /// (tenant, conversation id) → the conversation and its items in order.
    conversations: HashMap<Key, (Conversation, Vec<InputItem>)>,
    /// (tenant, day, model) → the usage flushed so far, in the order reads answer in.
    usage: BTreeMap<(String, String, String), Tally>,
}

#[derive(Clone, Default)]
pub struct Memory {
    state: Arc<Mutex<State>>,
}

impl Memory {
    pub fn insert(&self, record: Record, log: Arc<RunLog>, expires_at: Option<i64>) {
        let mut st = self.state.lock().expect("memory store poisoned");
        let id = record.response.id.clone();
        let tenant = record.tenant.clone();
        for item in &record.input {
            // An item keeps the run that first stored it (see the SQLite store).
            if let Some(item_id) = item.id() {
                st.items
                    .entry((tenant.clone(), item_id.to_string()))
                    .or_insert_with(|| (id.clone(), item.clone()));
            }
        }
        st.inserted += 1;
        let order = st.inserted;
        st.runs.insert(
            (tenant, id),
            Kept {
                record,
                order,
                turns: None,
                log,
                expires_at,
            },
        );
    }

    /// Keeps `tenant`'s final Response and indexes its output items.
    pub fn finish(&self, tenant: &Tenant, response: &Response) {
        let mut st = self.state.lock().expect("memory store poisoned");
        let State { runs, items, .. } = &mut *st;
        let Some(kept) = runs.get_mut(&(tenant.clone(), response.id.clone())) else {
            return;
        };
        kept.record.response = response.clone();
        for o in &response.output {
            if let Some(i) = output_as_input(o) {
                items.insert(
                    (tenant.clone(), o.id().to_string()),
                    (response.id.clone(), i),
                );
            }
        }
    }

    pub fn record(&self, tenant: &Tenant, id: &str) -> Option<Record> {
        let st = self.state.lock().expect("memory store poisoned");
        let kept = st.runs.get(&(tenant.clone(), id.to_string()))?;
        let mut record = kept.record.clone();
        if let Some(r) = kept.log.snapshot() {
            record.response = r;
        }
        Some(record)
    }

    /// `tenant`'s runs as `query` wants them, newest first (up to `limit + 1`).
    pub fn runs(&self, tenant: &Tenant, query: &RunQuery) -> Vec<Response> {
        let st = self.state.lock().expect("memory store poisoned");
        let mut mine: Vec<&Kept> = st
            .runs
            .iter()
            .filter(|((t, _), _)| t == tenant)
            .map(|(_, k)| k)
            .collect();
        mine.sort_by_key(|k| std::cmp::Reverse(k.order));
        let start = match &query.after {
            Some(after) => mine
                .iter()
                .position(|k| &k.record.response.id == after)
                .map_or(mine.len(), |i| i + 1),
            None => 0,
        };
        mine[start..]
            .iter()
            .map(|k| {
                k.log
                    .snapshot()
                    .unwrap_or_else(|| k.record.response.clone())
            })
            .filter(|r| query.wants(&super::status_of(r), &r.model))
            .take(query.limit + 1)
            .collect()
    }

    pub fn keep_turns(&self, tenant: &Tenant, id: &str, turns: &[Usage]) {
        let mut st = self.state.lock().expect("memory store poisoned");
        if let Some(kept) = st.runs.get_mut(&(tenant.clone(), id.to_string())) {
            kept.turns = Some(turns.to_vec());
        }
    }

    pub fn turns(&self, tenant: &Tenant, id: &str) -> Option<Vec<Usage>> {
        let st = self.state.lock().expect("memory store poisoned");
        st.runs
            .get(&(tenant.clone(), id.to_string()))?
            .turns
            .clone()
    }

    pub fn log(&self, tenant: &Tenant, id: &str) -> Option<Arc<RunLog>> {
        self.state
            .lock()
            .expect("memory store poisoned")
            .runs
            .get(&(tenant.clone(), id.to_string()))
            .map(|k| k.log.clone())
    }

    pub fn find_item(&self, tenant: &Tenant, id: &str) -> Option<InputItem> {
        self.state
            .lock()
            .expect("memory store poisoned")
            .items
            .get(&(tenant.clone(), id.to_string()))
            .map(|(_, i)| i.clone())
    }

    pub fn delete(&self, tenant: &Tenant, id: &str) -> bool {
        let mut st = self.state.lock().expect("memory store poisoned");
        st.items
            .retain(|(t, _), (run, _)| !(t == tenant && run == id));
        st.runs.remove(&(tenant.clone(), id.to_string())).is_some()
    }

    pub fn expire(&self, now: i64, live: &[String]) -> usize {
        let expired: Vec<Key> = {
            let st = self.state.lock().expect("memory store poisoned");
            st.runs
                .iter()
                .filter(|((_, id), k)| k.expires_at.is_some_and(|t| t <= now) && !live.contains(id))
                .map(|(key, _)| key.clone())
                .collect()
        };
        expired.iter().filter(|(t, id)| self.delete(t, id)).count()
    }
}

impl Memory {
    /// Adds flushed usage tallies to those kept.
    pub fn add_usage(&self, rows: &[UsageRow]) {
        let mut st = self.state.lock().expect("memory store poisoned");
        for r in rows {
            st.usage
                .entry((r.tenant.clone(), r.day.clone(), r.model.clone()))
                .or_default()
                .add(&r.tally);
        }
    }

    /// The usage of `tenant` (or every tenant) from `since_day` on, by tenant, day and model.
    pub fn usage(&self, tenant: Option<&Tenant>, since_day: &str) -> Vec<UsageRow> {
        let st = self.state.lock().expect("memory store poisoned");
        st.usage
            .iter()
            .filter(|((t, day, _), _)| {
                tenant.is_none_or(|w| w.as_str() == t) && day.as_str() >= since_day
            })
            .map(|((t, day, model), tally)| UsageRow {
                tenant: t.clone(),
                day: day.clone(),
                model: model.clone(),
                tally: *tally,
            })
            .collect()
    }
}

impl Memory {
    pub fn create_conversation(&self, tenant: &Tenant, c: &Conversation, items: &[InputItem]) {
        self.state
            .lock()
            .expect("memory store poisoned")
            .conversations
            .insert((tenant.clone(), c.id.clone()), (c.clone(), items.to_vec()));
    }

    pub fn conversation(&self, tenant: &Tenant, id: &str) -> Option<Conversation> {
        let st = self.state.lock().expect("memory store poisoned");
        st.conversations
            .get(&(tenant.clone(), id.to_string()))
            .map(|(c, _)| c.clone())
    }

    pub fn conversation_items(&self, tenant: &Tenant, id: &str) -> Option<Vec<InputItem>> {
        let st = self.state.lock().expect("memory store poisoned");
        st.conversations
            .get(&(tenant.clone(), id.to_string()))
            .map(|(_, items)| items.clone())
    }

    pub fn update_conversation(
        &self,
        tenant: &Tenant,
        id: &str,
        metadata: &serde_json::Map<String, serde_json::Value>,
    ) -> bool {
        let mut st = self.state.lock().expect("memory store poisoned");
        match st.conversations.get_mut(&(tenant.clone(), id.to_string())) {
            Some((c, _)) => {
                c.metadata = metadata.clone();
                true
            }
            None => false,
        }
    }

    pub fn delete_conversation(&self, tenant: &Tenant, id: &str) -> bool {
        let mut st = self.state.lock().expect("memory store poisoned");
        st.conversations
            .remove(&(tenant.clone(), id.to_string()))
            .is_some()
    }

    pub fn append_conversation(&self, tenant: &Tenant, id: &str, items: &[InputItem]) -> bool {
        let mut st = self.state.lock().expect("memory store poisoned");
        match st.conversations.get_mut(&(tenant.clone(), id.to_string())) {
            Some((_, kept)) => {
                kept.extend(items.iter().cloned());
                true
            }
            None => false,
        }
    }

    pub fn delete_conversation_item(&self, tenant: &Tenant, id: &str, item_id: &str) -> bool {
        let mut st = self.state.lock().expect("memory store poisoned");
        match st.conversations.get_mut(&(tenant.clone(), id.to_string())) {
            Some((_, kept)) => {
                let before = kept.len();
                kept.retain(|i| i.id() != Some(item_id));
                kept.len() < before
            }
            None => false,
        }
    }
}
