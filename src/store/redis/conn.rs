//! The Redis connection the store's scripts go through: one multiplexed connection (to the one
//! Redis, or the primary the Sentinels name), or one cluster connection (which follows `MOVED`
//! and `ASK` itself), made on first use and made again after an error that is not a server's
//! reply; every failure to reach Redis is [`StoreError::Unavailable`](super::StoreError).
//!
//! Invariant: every command and script names its keys, all of one hash slot ([`Conn::send`]
//! sends a batch as one pipeline per slot on a cluster, one pipeline otherwise), so the same
//! calls work on one Redis and on a cluster.

use std::collections::HashMap;
use std::time::Duration;

use ::redis::aio::{ConnectionLike, MultiplexedConnection};
use ::redis::cluster_async::ClusterConnection;
use ::redis::cluster_routing::Slot;
use ::redis::{
    AsyncConnectionConfig, Cmd, FromRedisValue, Pipeline, RedisError, RedisFuture, Value,
};

use super::StoreError;

pub fn script(body: &str, keys: &[String]) -> ::redis::Cmd {
    let mut c = ::redis::cmd("EVAL");
    c.arg(body).arg(keys.len()).arg(keys);
    c
}

pub(super) fn unavailable(e: RedisError) -> StoreError {
    StoreError::Unavailable(format!("Redis: {e}"))
}

/// A connection to one Redis or to a cluster (both multiplexed: cheap to clone).
#[derive(Clone)]
pub enum Link {
    One(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Link {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Link::One(c) => c.req_packed_command(cmd),
            Link::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Link::One(c) => c.req_packed_commands(pipeline, offset, count),
            Link::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Link::One(c) => c.get_db(),
            Link::Cluster(c) => c.get_db(),
        }
    }
}

/// How long a connection tries to connect, and waits for an answer (`None`: forever).
#[derive(Clone, Copy)]
pub struct Timeouts {
    pub connect: Duration,
    pub response: Option<Duration>,
}

/// One lazily (re)connected connection: to the one Redis or the primary, dropped after any error
/// that is not a server's reply, or a `READONLY` reply (the server was demoted), so the next use
/// reconnects (Redis restarted, network blip, failover); behind Sentinel, also when the
/// Sentinels name another primary ([`Conn::follow_primary`]). A cluster connection finds the
/// nodes and follows their slots itself.
pub struct Conn {
    target: super::target::Target,
    timeouts: Timeouts,
    /// The connection, and the primary's address it was made to.
    cur: tokio::sync::Mutex<Option<(Link, String)>>,
    /// Behind Sentinel: the replicas the primary has now (from its `ROLE`).
    replicas: std::sync::atomic::AtomicUsize,
}

impl Conn {
    pub(super) fn new(target: super::target::Target, timeouts: Timeouts) -> Self {
        Conn {
            target,
            timeouts,
            cur: tokio::sync::Mutex::new(None),
            replicas: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// Behind Sentinel, the replicas the primary had when last asked; on a cluster, the replicas
    /// it has (0 for a plain Redis).
    pub(super) fn replicas(&self) -> usize {
        self.replicas.load(std::sync::atomic::Ordering::Relaxed)
    }

    pub(super) fn target(&self) -> &super::target::Target {
        &self.target
    }

    /// Whether the store is a Redis Cluster.
    pub(super) fn is_cluster(&self) -> bool {
        self.target.nodes().is_some()
    }

    /// `items` in groups that one script call may take: by the hash slot of each one's `key` on
    /// a cluster, all in one group otherwise; each group in the items' order.
    pub(super) fn by_slot<T>(
        &self,
        items: impl IntoIterator<Item = T>,
        key: impl Fn(&T) -> String,
    ) -> Vec<Vec<T>> {
        let mut groups: Vec<(Option<Slot>, Vec<T>)> = Vec::new();
        for item in items {
            let slot = self.group_of(&key(&item));
            match groups.iter_mut().find(|(s, _)| *s == slot) {
                Some((_, g)) => g.push(item),
                None => groups.push((slot, vec![item])),
            }
        }
        groups.into_iter().map(|(_, g)| g).collect()
    }

    /// What [`Conn::send`] sends together with `key`'s commands: its slot on a cluster, all
    /// together (`None`) otherwise.
    pub(super) fn group_of(&self, key: &str) -> Option<Slot> {
        self.is_cluster().then(|| Slot::for_key(key))
    }

    /// A new connection of its own (not the shared one), with these timeouts: for blocking
    /// reads.
    pub(super) async fn open(&self, timeouts: Timeouts) -> Result<(Link, String), RedisError> {
        if let Some(nodes) = self.target.nodes() {
            let client = nodes.client(timeouts.connect, timeouts.response)?;
            return Ok((
                Link::Cluster(client.get_async_connection().await?),
                "cluster".into(),
            ));
        }
        let client = self.target.primary().await?;
        let addr = client.get_connection_info().addr().to_string();
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(timeouts.connect))
            .set_response_timeout(timeouts.response);
        let c = client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        Ok((Link::One(c), addr))
    }

    pub(super) async fn get(&self) -> Result<Link, RedisError> {
        let mut cur = self.cur.lock().await;
        if let Some((c, _)) = &*cur {
            return Ok(c.clone());
        }
        let (c, addr) = self.open(self.timeouts).await?;
        *cur = Some((c.clone(), addr));
        Ok(c)
    }

    pub(super) async fn failed(&self, e: &RedisError) {
        // A cluster connection reconnects to its nodes and refreshes its slots by itself.
        if self.is_cluster() {
            return;
        }
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

    /// On a cluster: counts the replicas its nodes list (those not failing), so that the writer
    /// waits for one to have each batch. Nothing otherwise.
    pub(super) async fn count_replicas(&self) {
        if !self.is_cluster() {
            return;
        }
        let mut cmd = ::redis::cmd("CLUSTER");
        cmd.arg("NODES");
        if let Ok(nodes) = self.query::<String>(&cmd).await {
            let replicas = nodes
                .lines()
                .filter(|l| {
                    let flags = l.split(' ').nth(2).unwrap_or_default();
                    flags.contains("slave") && !flags.contains("fail")
                })
                .count();
            self.replicas
                .store(replicas, std::sync::atomic::Ordering::Relaxed);
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

    /// Sends `cmds` pipelined, answering each one's reply (or error) in order: in one pipeline to
    /// one Redis; to a cluster, in one pipeline per hash slot, all at once (the commands of one
    /// slot in their order). `then`: commands sent at the end of every pipeline, whose replies
    /// are not answered (`WAIT`).
    pub async fn send(&self, cmds: Vec<Cmd>, then: &[Cmd]) -> Vec<Result<Value, String>> {
        if cmds.is_empty() {
            return Vec::new();
        }
        let n = cmds.len();
        let groups: Vec<Vec<usize>> = if self.is_cluster() {
            let mut by_slot: HashMap<Option<Slot>, Vec<usize>> = HashMap::new();
            let mut order = Vec::new();
            for (i, c) in cmds.iter().enumerate() {
                let slot = slot_of(c);
                by_slot
                    .entry(slot)
                    .or_insert_with(|| {
                        order.push(slot);
                        Vec::new()
                    })
                    .push(i);
            }
            order
                .into_iter()
                .map(|s| by_slot.remove(&s).unwrap_or_default())
                .collect()
        } else {
            vec![(0..cmds.len()).collect()]
        };
        let link = match self.get().await {
            Ok(l) => l,
            Err(e) => return vec![Err(e.to_string()); n],
        };
        // Each command moved into its group's pipeline (not copied: they carry whole Responses).
        let mut cmds: Vec<Option<Cmd>> = cmds.into_iter().map(Some).collect();
        let pipes: Vec<::redis::Pipeline> = groups
            .iter()
            .map(|g| {
                let mut pipe = ::redis::pipe();
                pipe.ignore_errors();
                for i in g {
                    if let Some(c) = cmds[*i].take() {
                        pipe.add_command(c);
                    }
                }
                for c in then {
                    pipe.add_command(c.clone());
                }
                pipe
            })
            .collect();
        let sent = pipes.into_iter().map(|pipe| {
            let mut link = link.clone();
            async move {
                pipe.query_async::<Vec<::redis::RedisResult<Value>>>(&mut link)
                    .await
            }
        });
        let replies = futures::future::join_all(sent).await;
        let mut out: Vec<Result<Value, String>> = vec![Err("no reply".into()); n];
        for (g, reply) in groups.iter().zip(replies) {
            match reply {
                Ok(v) => {
                    // A demoted primary answers each write `READONLY`: look for the new one.
                    if let Some(e) = v
                        .iter()
                        .filter_map(|r| r.as_ref().err())
                        .find(|e| e.code() == Some("READONLY"))
                    {
                        self.failed(e).await;
                    }
                    for (i, r) in g.iter().zip(v) {
                        out[*i] = r.map_err(|e| e.to_string());
                    }
                }
                Err(e) => {
                    self.failed(&e).await;
                    for i in g {
                        out[*i] = Err(e.to_string());
                    }
                }
            }
        }
        out
    }
}

/// The hash slot of a command's (first) key, `None` for a command without keys: the store's
/// commands name their key first, scripts as `EVAL body numkeys key...`.
fn slot_of(cmd: &Cmd) -> Option<Slot> {
    let mut args = cmd.args_iter().filter_map(|a| match a {
        ::redis::Arg::Simple(b) => Some(b),
        _ => None,
    });
    let name = args.next()?;
    let key = if name.eq_ignore_ascii_case(b"EVAL") || name.eq_ignore_ascii_case(b"EVALSHA") {
        let numkeys = args.nth(1)?;
        (numkeys != b"0").then(|| args.next()).flatten()?
    } else {
        args.next()?
    };
    Some(Slot::for_key(key))
}
