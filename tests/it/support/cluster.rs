//! A real Redis Cluster for the tests: three primaries with a replica each (`redis-server
//! --cluster-enabled yes`, joined by `redis-cli --cluster create`), on loopback; one shared by
//! the tests that only use it, and ones of their own for the tests that reshard or fail over.

use std::collections::HashMap;
use std::time::Duration;

use super::redis::RedisServer;

/// The nodes of a cluster (primaries first, as created; roles change with failovers).
pub struct ClusterSet {
    pub nodes: Vec<RedisServer>,
}

impl ClusterSet {
    /// Starts `primaries` primaries with `replicas` replicas each and waits until every node
    /// says the cluster is `ok` and knows every other node.
    pub fn start(primaries: usize, replicas: usize) -> Self {
        let dir = super::scratch("cluster");
        let nodes: Vec<RedisServer> = (0..primaries * (1 + replicas))
            .map(|_| {
                // The cluster bus on a free port of its own (by default it is the port + 10000,
                // past 65535 for a high ephemeral port).
                let (port, bus) = (RedisServer::free_port(), RedisServer::free_port());
                RedisServer::start_with(
                    port,
                    &format!(
                        "--dir {} --cluster-enabled yes --cluster-config-file nodes-{port}.conf \
                         --cluster-port {bus} --cluster-node-timeout 1000",
                        dir.display()
                    ),
                )
            })
            .collect();
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let out = std::process::Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(&addrs)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .output()
            .expect("redis-cli runs");
        assert!(
            out.status.success(),
            "redis-cli --cluster create: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let set = ClusterSet { nodes };
        set.until("the cluster is ok on every node", |s| {
            s.nodes.iter().all(|n| {
                let info: String = ::redis::cmd("CLUSTER")
                    .arg("INFO")
                    .query(&mut super::plain_connection(n.port))
                    .unwrap_or_default();
                // Every node also knows each primary's replicas.
                let ranges: Vec<::redis::Value> = ::redis::cmd("CLUSTER")
                    .arg("SLOTS")
                    .query(&mut super::plain_connection(n.port))
                    .unwrap_or_default();
                info.contains("cluster_state:ok")
                    && info.contains(&format!("cluster_known_nodes:{}", s.nodes.len()))
                    && ranges.iter().all(|r| {
                        matches!(r, ::redis::Value::Array(parts) if parts.len() == 3 + replicas)
                    })
            })
        });
        // Each replica has caught up with its primary.
        set.until("every replica is in sync", |s| {
            s.nodes.iter().all(|n| {
                let info: String = ::redis::cmd("INFO")
                    .arg("replication")
                    .query(&mut super::plain_connection(n.port))
                    .unwrap_or_default();
                info.contains("role:master") || info.contains("master_link_status:up")
            })
        });
        set
    }

    /// The store URL naming the cluster through its first node only (it tells the rest).
    pub fn url(&self) -> String {
        format!("redis+cluster://127.0.0.1:{}", self.nodes[0].port)
    }

    /// A blocking connection to the node on `port`.
    pub fn node(&self, port: u16) -> ::redis::Connection {
        super::plain_connection(port)
    }

    /// The hash slot of `key`.
    pub fn slot(&self, key: &str) -> u16 {
        ::redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut self.node(self.nodes[0].port))
            .unwrap()
    }

    /// The port of the primary serving `slot` now, and of its replicas, as the first node that
    /// answers says (a stopped node does not).
    pub fn serving(&self, slot: u16) -> (u16, Vec<u16>) {
        for n in &self.nodes {
            let Ok(mut c) = ::redis::Client::open(format!("redis://127.0.0.1:{}/", n.port))
                .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(2)))
            else {
                continue;
            };
            let Ok(ranges) = ::redis::cmd("CLUSTER")
                .arg("SLOTS")
                .query::<Vec<::redis::Value>>(&mut c)
            else {
                continue;
            };
            for r in ranges {
                let ::redis::Value::Array(parts) = r else {
                    continue;
                };
                let int = |v: &::redis::Value| match v {
                    ::redis::Value::Int(i) => *i,
                    _ => -1,
                };
                let port_of = |v: &::redis::Value| match v {
                    ::redis::Value::Array(a) => int(&a[1]) as u16,
                    _ => 0,
                };
                if int(&parts[0]) <= slot as i64 && slot as i64 <= int(&parts[1]) {
                    return (port_of(&parts[2]), parts[3..].iter().map(port_of).collect());
                }
            }
        }
        panic!("no node serves slot {slot}");
    }

    /// The node id of the node on `port`.
    pub fn id_of(&self, port: u16) -> String {
        ::redis::cmd("CLUSTER")
            .arg("MYID")
            .query(&mut self.node(port))
            .unwrap()
    }

    /// A primary's port other than `port`.
    pub fn other_primary(&self, port: u16) -> u16 {
        let nodes: String = ::redis::cmd("CLUSTER")
            .arg("NODES")
            .query(&mut self.node(port))
            .unwrap();
        nodes
            .lines()
            .filter(|l| l.contains("master") && !l.contains("fail"))
            .filter_map(|l| {
                let addr = l.split(' ').nth(1)?;
                addr.split(['@', ':']).nth(1)?.parse::<u16>().ok()
            })
            .find(|p| *p != port)
            .expect("another primary")
    }

    /// Roles of every node by port (`master`/`slave`), as each says of itself.
    pub fn roles(&self) -> HashMap<u16, String> {
        self.nodes
            .iter()
            .filter_map(|n| {
                let role: Vec<::redis::Value> = ::redis::cmd("ROLE")
                    .query(&mut super::plain_connection(n.port))
                    .ok()?;
                match role.first() {
                    Some(::redis::Value::BulkString(b)) => {
                        Some((n.port, String::from_utf8_lossy(b).into_owned()))
                    }
                    _ => None,
                }
            })
            .collect()
    }

    /// Waits (a liveness bound of 30 s) until `ready`.
    pub fn until(&self, what: &str, ready: impl Fn(&Self) -> bool) {
        for _ in 0..300 {
            if ready(self) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("{what}: not within 30 s");
    }
}

/// The test binary's shared cluster (three primaries, no replicas), started on first use.
pub fn shared_cluster() -> &'static ClusterSet {
    static CLUSTER: std::sync::OnceLock<ClusterSet> = std::sync::OnceLock::new();
    CLUSTER.get_or_init(|| ClusterSet::start(3, 0))
}
