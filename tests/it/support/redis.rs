//! `redis-server` for the tests: one shared server for the whole binary (a fresh database per
//! test) and servers of their own for tests that stop and restart one.

/// A `redis-server` on a free loopback port, without persistence. It stops when dropped, and in
/// any case when the test process exits (a shell holding its stdin kills it on EOF).
pub struct RedisServer {
    pub port: u16,
    child: Option<std::process::Child>,
}

impl RedisServer {
    pub fn start() -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        Self::start_on(port)
    }

    /// Starts (or restarts) a server on `port`.
    pub fn start_on(port: u16) -> Self {
        Self::start_with(port, "")
    }

    /// A free loopback port.
    pub fn free_port() -> u16 {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }

    /// A server on `port` started as `redis-server [CONFIG_FILE] ARGS --port PORT ...` (`args`
    /// first: a config file, `--sentinel`, `--replicaof HOST PORT`).
    pub fn start_with(port: u16, args: &str) -> Self {
        let bin = std::process::Command::new("sh")
            .args(["-c", "command -v redis-server"])
            .output()
            .unwrap();
        assert!(
            bin.status.success(),
            "redis-server is not installed: run `bash scripts/test.sh --install-only` (or `apt-get install -y redis-server`)"
        );
        let script = format!(
            "redis-server {args} --port {port} --bind 127.0.0.1 --save '' --appendonly no --databases 4096 --loglevel warning >/dev/null 2>&1 & pid=$!; read _; kill $pid; wait $pid"
        );
        let mut child = std::process::Command::new("sh")
            .args(["-c", &script])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        for _ in 0..500 {
            if let Ok(mut c) = std::net::TcpStream::connect(("127.0.0.1", port)) {
                use std::io::{Read, Write};
                let _ = c.set_read_timeout(Some(std::time::Duration::from_secs(1)));
                let mut buf = [0u8; 64];
                if c.write_all(b"PING\r\n").is_ok()
                    && c.read(&mut buf)
                        .is_ok_and(|n| buf[..n].starts_with(b"+PONG"))
                {
                    return RedisServer {
                        port,
                        child: Some(child),
                    };
                }
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        // Closing its stdin ends the script, which stops the server it may have half started.
        drop(child.stdin.take());
        let _ = child.wait();
        panic!("redis-server did not start on port {port}");
    }

    pub fn url(&self, db: u32) -> String {
        format!("redis://127.0.0.1:{}/{db}", self.port)
    }

    /// Stops the server and waits until its port refuses connections.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            drop(child.stdin.take());
            let _ = child.wait();
            for _ in 0..500 {
                if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The test binary's shared `redis-server`, started on first use.
pub fn shared_redis() -> &'static RedisServer {
    static SERVER: std::sync::OnceLock<RedisServer> = std::sync::OnceLock::new();
    SERVER.get_or_init(RedisServer::start)
}

/// A Redis store URL no other test uses (its own database number on the shared server).
pub fn redis_db() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static DB: AtomicU32 = AtomicU32::new(1);
    shared_redis().url(DB.fetch_add(1, Ordering::Relaxed))
}

/// A primary, its replica and three Sentinels watching them as `mymaster`, on loopback.
pub struct SentinelSet {
    pub primary: RedisServer,
    pub replica: RedisServer,
    pub sentinels: Vec<RedisServer>,
}

impl SentinelSet {
    /// Starts them and waits until every Sentinel knows the replica and the other Sentinels.
    pub async fn start() -> Self {
        // Replication writes RDB files: into a scratch directory, not the tests' working one.
        let dir = super::scratch("sentinels");
        let at = format!("--dir {}", dir.display());
        let primary = RedisServer::start_with(RedisServer::free_port(), &at);
        let replica = RedisServer::start_with(
            RedisServer::free_port(),
            &format!("{at} --replicaof 127.0.0.1 {}", primary.port),
        );
        let sentinels: Vec<RedisServer> = (0..3)
            .map(|i| {
                let port = RedisServer::free_port();
                let file = dir.join(format!("sentinel-{i}.conf"));
                std::fs::write(
                    &file,
                    format!(
                        "sentinel monitor mymaster 127.0.0.1 {} 2\n\
                         sentinel down-after-milliseconds mymaster 1000\n\
                         sentinel failover-timeout mymaster 3000\n\
                         sentinel parallel-syncs mymaster 1\n",
                        primary.port
                    ),
                )
                .unwrap();
                RedisServer::start_with(port, &format!("{} --sentinel", file.display()))
            })
            .collect();
        let set = SentinelSet {
            primary,
            replica,
            sentinels,
        };
        set.until("the Sentinels know the replica and each other", |s| {
            s.sentinels.iter().all(|x| {
                let mut c = plain_connection(x.port);
                let replicas: Vec<std::collections::HashMap<String, String>> =
                    ::redis::cmd("SENTINEL")
                        .arg("REPLICAS")
                        .arg("mymaster")
                        .query(&mut c)
                        .unwrap_or_default();
                let others: Vec<::redis::Value> = ::redis::cmd("SENTINEL")
                    .arg("SENTINELS")
                    .arg("mymaster")
                    .query(&mut c)
                    .unwrap_or_default();
                replicas.iter().any(|r| {
                    r.get("flags").is_some_and(|f| f == "slave")
                        && r.get("master-link-status").is_some_and(|l| l == "ok")
                }) && others.len() == 2
            })
        })
        .await;
        set
    }

    /// The store URL naming the primary through the three Sentinels.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port))
            .collect();
        format!("redis+sentinel://{}/mymaster", hosts.join(","))
    }

    /// The port of the server the Sentinels name the primary now.
    pub fn primary_port(&self) -> Option<u16> {
        self.sentinels.iter().find_map(|s| {
            let mut c = plain_connection(s.port);
            let (_, port): (String, u16) = ::redis::cmd("SENTINEL")
                .arg("GET-MASTER-ADDR-BY-NAME")
                .arg("mymaster")
                .query(&mut c)
                .ok()?;
            Some(port)
        })
    }

    /// Waits (a liveness bound of 30 s) until `ready`.
    pub async fn until(&self, what: &str, ready: impl Fn(&Self) -> bool) {
        for _ in 0..300 {
            if ready(self) {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        panic!("{what}: not within 30 s");
    }
}

/// A blocking connection to the server on `port` (an unreachable one: a closed connection).
pub fn plain_connection(port: u16) -> ::redis::Connection {
    ::redis::Client::open(format!("redis://127.0.0.1:{port}/"))
        .unwrap()
        .get_connection_with_timeout(std::time::Duration::from_secs(2))
        .unwrap()
}
