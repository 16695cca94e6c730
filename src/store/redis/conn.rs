//! The Redis connection the store's scripts go through: one multiplexed connection, made on
//! first use and made again after an error that is not a server's reply; every failure to reach
//! Redis is [`StoreError::Unavailable`](super::StoreError).

use ::redis::aio::MultiplexedConnection;
use ::redis::{AsyncConnectionConfig, Client, FromRedisValue, RedisError};

use super::StoreError;

pub fn script(body: &str, keys: &[String]) -> ::redis::Cmd {
    let mut c = ::redis::cmd("EVAL");
    c.arg(body).arg(keys.len()).arg(keys);
    c
}

pub(super) fn unavailable(e: RedisError) -> StoreError {
    StoreError::Unavailable(format!("Redis: {e}"))
}

/// One lazily (re)connected multiplexed connection: dropped after any error that is not a
/// server's reply, so the next use reconnects (Redis restarted, network blip).
pub struct Conn {
    client: Client,
    config: AsyncConnectionConfig,
    cur: tokio::sync::Mutex<Option<MultiplexedConnection>>,
}

impl Conn {
    pub(super) fn new(client: Client, config: AsyncConnectionConfig) -> Self {
        Conn {
            client,
            config,
            cur: tokio::sync::Mutex::new(None),
        }
    }

    pub(super) async fn get(&self) -> Result<MultiplexedConnection, RedisError> {
        let mut cur = self.cur.lock().await;
        if let Some(c) = &*cur {
            return Ok(c.clone());
        }
        let c = self
            .client
            .get_multiplexed_async_connection_with_config(&self.config)
            .await?;
        *cur = Some(c.clone());
        Ok(c)
    }

    pub(super) async fn failed(&self, e: &RedisError) {
        if e.code().is_none() {
            *self.cur.lock().await = None;
        }
    }

    pub async fn query<T: FromRedisValue>(&self, cmd: &::redis::Cmd) -> Result<T, StoreError> {
        let mut c = self.get().await.map_err(unavailable)?;
        match cmd.query_async(&mut c).await {
            Ok(v) => Ok(v),
            Err(e) => {
                self.failed(&e).await;
                Err(unavailable(e))
            }
        }
    }
}
