//! The Redis connection the store's scripts go through: one multiplexed connection, made on
//! first use and made again after an error that is not a server's reply; every failure to reach
//! Redis is [`StoreError::Unavailable`](super::StoreError).

use ::redis::aio::MultiplexedConnection;
use ::redis::{AsyncConnectionConfig, FromRedisValue, RedisError};

use super::StoreError;

pub fn script(body: &str, keys: &[String]) -> ::redis::Cmd {
    let mut c = ::redis::cmd("EVAL");
    c.arg(body).arg(keys.len()).arg(keys);
    c
}

pub(super) fn unavailable(e: RedisError) -> StoreError {
    StoreError::Unavailable(format!("Redis: {e}"))
}

/// One lazily (re)connected multiplexed connection to the primary: dropped after any error that
/// is not a server's reply, or a `READONLY` reply (the server was demoted), so the next use
/// reconnects (Redis restarted, network blip, failover); behind Sentinel, also when the
/// Sentinels name another primary ([`Conn::follow_primary`]).
pub struct Conn {
    target: super::target::Target,
    config: AsyncConnectionConfig,
    /// The connection, and the primary's address it was made to.
    cur: tokio::sync::Mutex<Option<(MultiplexedConnection, String)>>,
    /// Behind Sentinel: the replicas the primary has now (from its `ROLE`).
    replicas: std::sync::atomic::AtomicUsize,
}

impl Conn {
    pub(super) fn new(target: super::target::Target, config: AsyncConnectionConfig) -> Self {
        Conn {
            target,
            config,
            cur: tokio::sync::Mutex::new(None),
            replicas: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// Behind Sentinel, the replicas the primary had when last asked (0 for a plain Redis).
    pub(super) fn replicas(&self) -> usize {
        self.replicas.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub(super) fn target(&self) -> &super::target::Target {
        &self.target
    }

    pub(super) async fn get(&self) -> Result<MultiplexedConnection, RedisError> {
        let mut cur = self.cur.lock().await;
        if let Some((c, _)) = &*cur {
            return Ok(c.clone());
        }
        let client = self.target.primary().await?;
        let addr = client.get_connection_info().addr().to_string();
        let c = client
            .get_multiplexed_async_connection_with_config(&self.config)
            .await?;
        *cur = Some((c.clone(), addr));
        Ok(c)
    }

    pub(super) async fn failed(&self, e: &RedisError) {
        if e.code().is_none() || e.code() == Some("READONLY") {
            *self.cur.lock().await = None;
        }
    }

    /// Behind Sentinel: asks the Sentinels which server is the primary now, and drops the
    /// connection if it was made to another (a failover happened: whatever that server still
    /// accepts is lost when it is demoted). Nothing for a plain Redis.
    pub(super) async fn follow_primary(&self) {
        if !self.target.follows_sentinels() {
            return;
        }
        let Some(named) = self.target.named_primary().await else {
            tracing::debug!("no Sentinel names a primary now");
            return;
        };
        let current = self.cur.lock().await.as_ref().map(|(_, addr)| addr.clone());
        if let Some(addr) = current
            && addr != named
        {
            // Confirmed the way a connection is made (the Sentinels in order, the server's own
            // role), so that Sentinels that disagree for a moment do not make it flip back and
            // forth.
            let confirmed = self.target.primary().await;
            if let Ok(c) = confirmed
                && c.get_connection_info().addr().to_string() != addr
            {
                tracing::warn!(from = %addr, to = %named, "the Sentinels name a new Redis primary; reconnecting");
                let mut cur = self.cur.lock().await;
                if cur.as_ref().is_some_and(|(_, a)| *a == addr) {
                    *cur = None;
                }
            }
        }
        // `ROLE` of a primary: ["master", offset, [[host, port, offset], ...]].
        let role: Result<(String, i64, Vec<::redis::Value>), _> =
            self.query(&::redis::cmd("ROLE")).await;
        let replicas = match role {
            Ok((kind, _, replicas)) if kind == "master" => replicas.len(),
            _ => 0,
        };
        self.replicas
            .store(replicas, std::sync::atomic::Ordering::Relaxed);
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
