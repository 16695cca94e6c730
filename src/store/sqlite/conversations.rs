//! Conversations in SQLite: `conversations` (one row each) and `conversation_items` (in order,
//! by `seq`), both keyed by tenant. Reads go through the read connection; writes through the
//! writer thread ([`Cmd::Conv`](super::writer::Cmd)), in its transactions.

use rusqlite::{OptionalExtension, params};
use serde_json::{Map, Value};
use tokio::sync::oneshot;

use super::writer::Cmd;
use super::{Sqlite, StoreError, Tenant};
use crate::api::request::InputItem;
use crate::api::response::Conversation;

/// What a [`Cmd::Conv`] does.
pub(super) enum ConvOp {
    Create {
        created_at: i64,
        metadata: String,
        items: Vec<(Option<String>, String)>,
    },
    Update {
        metadata: String,
    },
    Delete,
    Append {
        items: Vec<(Option<String>, String)>,
    },
    DeleteItem {
        item_id: String,
    },
}

impl Sqlite {
    async fn conv(&self, tenant: &Tenant, id: &str, op: ConvOp) -> Result<usize, StoreError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Cmd::Conv {
                tenant: tenant.as_str().to_string(),
                id: id.to_string(),
                op,
                reply,
            })
            .map_err(|_| StoreError::Internal("writer gone".into()))?;
        rx.await
            .map_err(|_| StoreError::Internal("writer gone".into()))?
    }

    pub async fn create_conversation(
        &self,
        tenant: &Tenant,
        c: &Conversation,
        items: &[InputItem],
    ) -> Result<(), StoreError> {
        let op = ConvOp::Create {
            created_at: c.created_at,
            metadata: serde_json::to_string(&c.metadata).expect("serializes"),
            items: conv_rows(items),
        };
        self.conv(tenant, &c.id, op).await.map(|_| ())
    }

    pub async fn conversation(
        &self,
        tenant: &Tenant,
        id: &str,
    ) -> Result<Option<Conversation>, StoreError> {
        let (tenant, id) = (tenant.as_str().to_string(), id.to_string());
        self.read(move |c| {
            let row: Option<(i64, String)> = c
                .query_row(
                    "SELECT created_at, metadata FROM conversations WHERE tenant = ?1 AND id = ?2",
                    [&tenant, &id],
                    |r| Ok((r.get(0)?, r.get(1)?)),
                )
                .optional()?;
            row.map(|(created_at, metadata)| {
                Ok(Conversation {
                    id: id.clone(),
                    object: "conversation".into(),
                    created_at,
                    metadata: serde_json::from_str(&metadata)
                        .map_err(|e| StoreError::Corrupt(e.to_string()))?,
                })
            })
            .transpose()
        })
        .await
    }

    pub async fn conversation_items(
        &self,
        tenant: &Tenant,
        id: &str,
    ) -> Result<Option<Vec<InputItem>>, StoreError> {
        let (tenant, id) = (tenant.as_str().to_string(), id.to_string());
        self.read(move |c| {
            let exists: Option<i64> = c
                .query_row(
                    "SELECT 1 FROM conversations WHERE tenant = ?1 AND id = ?2",
                    [&tenant, &id],
                    |r| r.get(0),
                )
                .optional()?;
            if exists.is_none() {
                return Ok(None);
            }
            let rows: Vec<String> = c
                .prepare_cached("SELECT item FROM conversation_items WHERE tenant = ?1 AND conversation_id = ?2 ORDER BY seq")?
                .query_map([&tenant, &id], |r| r.get(0))?
                .collect::<Result<_, _>>()?;
            rows.iter()
                .map(|s| serde_json::from_str(s).map_err(|e| StoreError::Corrupt(e.to_string())))
                .collect::<Result<Vec<_>, _>>()
                .map(Some)
        })
        .await
    }

    pub async fn update_conversation(
        &self,
        tenant: &Tenant,
        id: &str,
        metadata: &Map<String, Value>,
    ) -> Result<bool, StoreError> {
        let metadata = serde_json::to_string(metadata).expect("serializes");
        Ok(self.conv(tenant, id, ConvOp::Update { metadata }).await? > 0)
    }

    pub async fn delete_conversation(&self, tenant: &Tenant, id: &str) -> Result<bool, StoreError> {
        Ok(self.conv(tenant, id, ConvOp::Delete).await? > 0)
    }

    pub async fn append_conversation(
        &self,
        tenant: &Tenant,
        id: &str,
        items: &[InputItem],
    ) -> Result<bool, StoreError> {
        let op = ConvOp::Append {
            items: conv_rows(items),
        };
        Ok(self.conv(tenant, id, op).await? > 0)
    }

    pub async fn delete_conversation_item(
        &self,
        tenant: &Tenant,
        id: &str,
        item_id: &str,
    ) -> Result<bool, StoreError> {
        let op = ConvOp::DeleteItem {
            item_id: item_id.to_string(),
        };
        Ok(self.conv(tenant, id, op).await? > 0)
    }
}

/// Items as conversation rows: their id and JSON.
pub(super) fn conv_rows(items: &[InputItem]) -> Vec<(Option<String>, String)> {
    items
        .iter()
        .map(|i| {
            (
                i.id().map(str::to_string),
                serde_json::to_string(i).expect("serializes"),
            )
        })
        .collect()
}

/// Applies a conversation write; how many rows it touched (0: no such conversation).
pub(super) fn apply_conv(
    tx: &rusqlite::Connection,
    tenant: &str,
    id: &str,
    op: &ConvOp,
) -> Result<usize, StoreError> {
    let append = |items: &[(Option<String>, String)]| -> Result<usize, StoreError> {
        let next: i64 = tx.query_row(
            "SELECT COALESCE(MAX(seq), -1) + 1 FROM conversation_items WHERE tenant = ?1 AND conversation_id = ?2",
            [tenant, id],
            |r| r.get(0),
        )?;
        let mut stmt = tx.prepare_cached(
            "INSERT INTO conversation_items (tenant, conversation_id, seq, item_id, item) VALUES (?1, ?2, ?3, ?4, ?5)",
        )?;
        for (k, (item_id, item)) in items.iter().enumerate() {
            stmt.execute(params![tenant, id, next + k as i64, item_id, item])?;
        }
        Ok(items.len())
    };
    let exists = || -> Result<bool, StoreError> {
        Ok(tx
            .query_row(
                "SELECT 1 FROM conversations WHERE tenant = ?1 AND id = ?2",
                [tenant, id],
                |_| Ok(()),
            )
            .optional()?
            .is_some())
    };
    Ok(match op {
        ConvOp::Create {
            created_at,
            metadata,
            items,
        } => {
            tx.execute(
                "INSERT INTO conversations (tenant, id, created_at, metadata) VALUES (?1, ?2, ?3, ?4)",
                params![tenant, id, created_at, metadata],
            )?;
            append(items)? + 1
        }
        ConvOp::Update { metadata } => tx.execute(
            "UPDATE conversations SET metadata = ?3 WHERE tenant = ?1 AND id = ?2",
            params![tenant, id, metadata],
        )?,
        ConvOp::Delete => {
            let n = tx.execute(
                "DELETE FROM conversations WHERE tenant = ?1 AND id = ?2",
                [tenant, id],
            )?;
            tx.execute(
                "DELETE FROM conversation_items WHERE tenant = ?1 AND conversation_id = ?2",
                [tenant, id],
            )?;
            n
        }
        ConvOp::Append { items } => {
            if !exists()? {
                return Ok(0);
            }
            append(items)? + 1
        }
        ConvOp::DeleteItem { item_id } => tx.execute(
            "DELETE FROM conversation_items WHERE tenant = ?1 AND conversation_id = ?2 AND item_id = ?3",
            [tenant, id, item_id],
        )?,
    })
}
