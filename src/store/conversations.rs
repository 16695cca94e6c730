//! Conversations (the Conversations API, and `conversation` of a create): a conversation object
//! and its items in order, kept by every backend, scoped by tenant like runs.
//!
//! Invariants: items keep their ids and their order; a run on a conversation holds its lock from
//! the moment its context is read until its items are appended, so two runs on one conversation
//! never interleave (the second is refused while the first holds it; across relays sharing
//! Redis, the lock is a Redis key); another tenant's conversation is an unknown one.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use serde_json::{Map, Value};

use super::{Backend, Store, StoreError, Tenant};
use crate::api::request::InputItem;
use crate::api::response::Conversation;

/// Holds a conversation for one run; released when dropped.
pub struct ConversationLock {
    key: (Tenant, String),
    held: Arc<Mutex<HashSet<(Tenant, String)>>>,
    redis: Option<(super::redis::Redis, String)>,
}

impl ConversationLock {
    /// Names run `run_id` as the holder: across relays sharing Redis, once that run has ended
    /// (finished, or failed by another relay after this one stopped), the lock is free again.
    pub async fn hold_for(&mut self, run_id: &str) {
        if let Some((r, token)) = &mut self.redis {
            let (tenant, id) = &self.key;
            if r.hold_conversation(tenant, id, token, run_id).await {
                *token = run_id.to_string();
            }
        }
    }
}

impl Drop for ConversationLock {
    fn drop(&mut self) {
        self.held.lock().expect("locks poisoned").remove(&self.key);
        if let Some((r, token)) = self.redis.take() {
            let (tenant, id) = self.key.clone();
            if let Ok(handle) = tokio::runtime::Handle::try_current() {
                handle.spawn(async move { r.unlock_conversation(&tenant, &id, &token).await });
            }
        }
    }
}

impl std::fmt::Debug for ConversationLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("ConversationLock")
            .field(&self.key.1)
            .finish()
    }
}

impl Store {
    /// Keeps a new conversation of `tenant` with its first items.
    pub async fn create_conversation(
        &self,
        tenant: &Tenant,
        conversation: &Conversation,
        items: &[InputItem],
    ) -> Result<(), StoreError> {
        match &self.backend {
            Backend::Memory(m) => {
                m.create_conversation(tenant, conversation, items);
                Ok(())
            }
            Backend::Sqlite(s) => s.create_conversation(tenant, conversation, items).await,
            Backend::Redis(r) => r.create_conversation(tenant, conversation, items).await,
        }
    }

    /// `tenant`'s conversation `id`.
    pub async fn conversation(
        &self,
        tenant: &Tenant,
        id: &str,
    ) -> Result<Option<Conversation>, StoreError> {
        match &self.backend {
            Backend::Memory(m) => Ok(m.conversation(tenant, id)),
            Backend::Sqlite(s) => s.conversation(tenant, id).await,
            Backend::Redis(r) => r.conversation(tenant, id).await,
        }
    }

    /// The items of `tenant`'s conversation `id`, oldest first (`None`: no such conversation).
    pub async fn conversation_items(
        &self,
        tenant: &Tenant,
        id: &str,
    ) -> Result<Option<Vec<InputItem>>, StoreError> {
        match &self.backend {
            Backend::Memory(m) => Ok(m.conversation_items(tenant, id)),
            Backend::Sqlite(s) => s.conversation_items(tenant, id).await,
            Backend::Redis(r) => r.conversation_items(tenant, id).await,
        }
    }

    /// Replaces a conversation's metadata; the updated conversation, if there is one.
    pub async fn update_conversation(
        &self,
        tenant: &Tenant,
        id: &str,
        metadata: Map<String, Value>,
    ) -> Result<Option<Conversation>, StoreError> {
        let updated = match &self.backend {
            Backend::Memory(m) => m.update_conversation(tenant, id, &metadata),
            Backend::Sqlite(s) => s.update_conversation(tenant, id, &metadata).await?,
            Backend::Redis(r) => r.update_conversation(tenant, id, &metadata).await?,
        };
        if !updated {
            return Ok(None);
        }
        self.conversation(tenant, id).await
    }

    /// Removes a conversation with its items; false if unknown.
    pub async fn delete_conversation(&self, tenant: &Tenant, id: &str) -> Result<bool, StoreError> {
        match &self.backend {
            Backend::Memory(m) => Ok(m.delete_conversation(tenant, id)),
            Backend::Sqlite(s) => s.delete_conversation(tenant, id).await,
            Backend::Redis(r) => r.delete_conversation(tenant, id).await,
        }
    }

    /// Adds items at the end of a conversation; false if unknown.
    pub async fn append_conversation(
        &self,
        tenant: &Tenant,
        id: &str,
        items: &[InputItem],
    ) -> Result<bool, StoreError> {
        match &self.backend {
            Backend::Memory(m) => Ok(m.append_conversation(tenant, id, items)),
            Backend::Sqlite(s) => s.append_conversation(tenant, id, items).await,
            Backend::Redis(r) => r.append_conversation(tenant, id, items).await,
        }
    }

    /// Removes one item of a conversation; false if the conversation or the item is unknown.
    pub async fn delete_conversation_item(
        &self,
        tenant: &Tenant,
        id: &str,
        item_id: &str,
    ) -> Result<bool, StoreError> {
        match &self.backend {
            Backend::Memory(m) => Ok(m.delete_conversation_item(tenant, id, item_id)),
            Backend::Sqlite(s) => s.delete_conversation_item(tenant, id, item_id).await,
            Backend::Redis(r) => r.delete_conversation_item(tenant, id, item_id).await,
        }
    }

    /// Takes `tenant`'s conversation `id` for one run; `None` while another run holds it.
    pub async fn lock_conversation(
        &self,
        tenant: &Tenant,
        id: &str,
    ) -> Result<Option<ConversationLock>, StoreError> {
        let key = (tenant.clone(), id.to_string());
        if !self
            .conversation_locks
            .lock()
            .expect("locks poisoned")
            .insert(key.clone())
        {
            return Ok(None);
        }
        let mut lock = ConversationLock {
            key,
            held: self.conversation_locks.clone(),
            redis: None,
        };
        if let Backend::Redis(r) = &self.backend {
            match r.lock_conversation(tenant, id).await? {
                Some(token) => lock.redis = Some((r.clone(), token)),
                None => return Ok(None),
            }
        }
        Ok(Some(lock))
    }
}
