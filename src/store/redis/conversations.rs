//! Conversations in Redis: `relay:conv:{TENANT:ID}` (a hash: `created_at`, `metadata`) and
//! `relay:conv-items:{TENANT:ID}` (a list of item JSON, in order), changed only by scripts that
//! first check the conversation exists; and the lock one run at a time takes on a conversation
//! across relays (`relay:conv-lock:{TENANT:ID}`: a token, then the holder run's id; free again
//! once that run ended, and lapsing after [`CONV_LOCK_MS`] at most). The braces are a hash tag:
//! a conversation's keys share one slot on a cluster.

use super::conn::script;
use super::scripts::{
    CONV_APPEND, CONV_CREATE, CONV_DELETE_ITEM, CONV_HOLD, CONV_ITEMS, CONV_LOCK, CONV_TAKE,
    CONV_UPDATE, UNLOCK,
};
use super::{Redis, StoreError, Tenant};
use crate::api::request::InputItem;
use crate::api::response::Conversation;

/// How long a conversation's lock lasts at most (`--max-run-seconds`' default): the bound for a
/// `store: false` run, whose end Redis does not see, on a relay that stopped.
pub(super) const CONV_LOCK_MS: u64 = 3_600_000;

impl Redis {
    fn conv_key(tenant: &Tenant, id: &str) -> String {
        format!("relay:conv:{{{}:{id}}}", tenant.as_str())
    }

    fn conv_items_key(tenant: &Tenant, id: &str) -> String {
        format!("relay:conv-items:{{{}:{id}}}", tenant.as_str())
    }

    fn conv_lock_key(tenant: &Tenant, id: &str) -> String {
        format!("relay:conv-lock:{{{}:{id}}}", tenant.as_str())
    }

    pub async fn create_conversation(
        &self,
        tenant: &Tenant,
        c: &Conversation,
        items: &[InputItem],
    ) -> Result<(), StoreError> {
        let mut cmd = script(
            CONV_CREATE,
            &[
                Self::conv_key(tenant, &c.id),
                Self::conv_items_key(tenant, &c.id),
            ],
        );
        cmd.arg(c.created_at)
            .arg(serde_json::to_string(&c.metadata).expect("serializes"));
        for i in items {
            cmd.arg(serde_json::to_string(i).expect("serializes"));
        }
        let _: i64 = self.inner.conn.query(&cmd).await?;
        Ok(())
    }

    pub async fn conversation(
        &self,
        tenant: &Tenant,
        id: &str,
    ) -> Result<Option<Conversation>, StoreError> {
        let mut cmd = ::redis::cmd("HMGET");
        cmd.arg(Self::conv_key(tenant, id))
            .arg("created_at")
            .arg("metadata");
        let f: Vec<Option<String>> = self.inner.conn.query(&cmd).await?;
        let (Some(created_at), Some(metadata)) = (f[0].clone(), f[1].clone()) else {
            return Ok(None);
        };
        Ok(Some(Conversation {
            id: id.to_string(),
            object: "conversation".into(),
            created_at: created_at.parse().unwrap_or(0),
            metadata: serde_json::from_str(&metadata)
                .map_err(|e| StoreError::Corrupt(e.to_string()))?,
        }))
    }

    pub async fn conversation_items(
        &self,
        tenant: &Tenant,
        id: &str,
    ) -> Result<Option<Vec<InputItem>>, StoreError> {
        let mut cmd = script(
            CONV_ITEMS,
            &[Self::conv_key(tenant, id), Self::conv_items_key(tenant, id)],
        );
        cmd.arg(0);
        let rows: Option<Vec<String>> = self.inner.conn.query(&cmd).await?;
        rows.map(|rows| {
            rows.iter()
                .map(|s| serde_json::from_str(s).map_err(|e| StoreError::Corrupt(e.to_string())))
                .collect::<Result<Vec<_>, _>>()
        })
        .transpose()
    }

    pub async fn update_conversation(
        &self,
        tenant: &Tenant,
        id: &str,
        metadata: &serde_json::Map<String, serde_json::Value>,
    ) -> Result<bool, StoreError> {
        let mut cmd = script(CONV_UPDATE, &[Self::conv_key(tenant, id)]);
        cmd.arg(serde_json::to_string(metadata).expect("serializes"));
        let n: i64 = self.inner.conn.query(&cmd).await?;
        Ok(n == 1)
    }

    pub async fn delete_conversation(&self, tenant: &Tenant, id: &str) -> Result<bool, StoreError> {
        let mut cmd = ::redis::cmd("DEL");
        cmd.arg(Self::conv_key(tenant, id))
            .arg(Self::conv_items_key(tenant, id));
        let n: i64 = self.inner.conn.query(&cmd).await?;
        Ok(n > 0)
    }

    pub async fn append_conversation(
        &self,
        tenant: &Tenant,
        id: &str,
        items: &[InputItem],
    ) -> Result<bool, StoreError> {
        let mut cmd = script(
            CONV_APPEND,
            &[Self::conv_key(tenant, id), Self::conv_items_key(tenant, id)],
        );
        for i in items {
            cmd.arg(serde_json::to_string(i).expect("serializes"));
        }
        let n: i64 = self.inner.conn.query(&cmd).await?;
        Ok(n == 1)
    }

    pub async fn delete_conversation_item(
        &self,
        tenant: &Tenant,
        id: &str,
        item_id: &str,
    ) -> Result<bool, StoreError> {
        let mut cmd = script(
            CONV_DELETE_ITEM,
            &[Self::conv_key(tenant, id), Self::conv_items_key(tenant, id)],
        );
        cmd.arg(item_id);
        let n: i64 = self.inner.conn.query(&cmd).await?;
        Ok(n == 1)
    }

    /// Takes a conversation for one run of any relay sharing this Redis: the lock's token, or
    /// `None` while another run holds it. A lock whose holder run (see `hold_conversation`) has
    /// ended is free: a relay that stopped holding one does not lock the conversation beyond its
    /// run, which another relay finishes once its lease lapses. Every lock lapses after the
    /// default longest a run may take (an hour).
    pub async fn lock_conversation(
        &self,
        tenant: &Tenant,
        id: &str,
    ) -> Result<Option<String>, StoreError> {
        let token = format!(
            "lock-{}-{:016x}",
            self.inner.instance,
            rand::random::<u64>()
        );
        let key = Self::conv_lock_key(tenant, id);
        let mut cmd = script(CONV_LOCK, std::slice::from_ref(&key));
        cmd.arg(&token).arg(CONV_LOCK_MS);
        let took: ::redis::Value = self.inner.conn.query(&cmd).await?;
        let holder = match took {
            ::redis::Value::Int(1) => return Ok(Some(token)),
            other => {
                <String as ::redis::FromRedisValue>::from_redis_value(other).unwrap_or_default()
            }
        };
        // Held by a run: free once that run ended (its hash is in its own slot, so read apart).
        if !holder.starts_with("resp_") {
            return Ok(None);
        }
        let status = self.fields(&holder, &["status"]).await?.remove(0);
        if status.is_none_or(|s| super::unfinished(&s)) {
            return Ok(None);
        }
        let mut take = script(CONV_TAKE, &[key]);
        take.arg(&token).arg(CONV_LOCK_MS).arg(&holder);
        let took: i64 = self.inner.conn.query(&take).await?;
        Ok((took == 1).then_some(token))
    }

    /// Makes run `run_id` the holder of a lock taken with `token`; whether it still held it.
    pub async fn hold_conversation(
        &self,
        tenant: &Tenant,
        id: &str,
        token: &str,
        run_id: &str,
    ) -> bool {
        let mut cmd = script(CONV_HOLD, &[Self::conv_lock_key(tenant, id)]);
        cmd.arg(token).arg(run_id);
        matches!(self.inner.conn.query::<i64>(&cmd).await, Ok(1))
    }

    pub async fn unlock_conversation(&self, tenant: &Tenant, id: &str, token: &str) {
        let mut cmd = script(UNLOCK, &[Self::conv_lock_key(tenant, id)]);
        cmd.arg(token);
        if let Err(e) = self.inner.conn.query::<i64>(&cmd).await {
            tracing::warn!(error = %e, "could not release a conversation's lock (it lapses on its own)");
        }
    }
}
