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
        let bin = std::process::Command::new("sh")
            .args(["-c", "command -v redis-server"])
            .output()
            .unwrap();
        assert!(
            bin.status.success(),
            "redis-server is not installed: run `bash scripts/test.sh --install-only` (or `apt-get install -y redis-server`)"
        );
        let script = format!(
            "redis-server --port {port} --bind 127.0.0.1 --save '' --appendonly no --databases 4096 --loglevel warning >/dev/null 2>&1 & pid=$!; read _; kill $pid; wait $pid"
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
