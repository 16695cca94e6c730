//! Test support: the relay in-process on loopback, the fake upstream and the test MCP server
//! (the project's own programs, included by path), an SSE reader that checks framing, and golden
//! event-log comparison.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use responses_relay::api::Sequenced;
use responses_relay::api::fold::Fold;
use responses_relay::{App, Config};
use serde_json::Value;
use tokio::sync::oneshot;

pub use crate::fake_upstream;

pub fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub async fn upstream() -> fake_upstream::FakeUpstream {
    fake_upstream::start(
        "127.0.0.1:0".parse().unwrap(),
        manifest_dir().join("fixtures/upstream"),
    )
    .await
    .expect("fake upstream starts")
}

/// A relay served in-process on a loopback port.
pub struct Relay {
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    done: Option<tokio::task::JoinHandle<()>>,
}

impl Relay {
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Begins a graceful shutdown and waits for it to finish.
    pub async fn shutdown(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(d) = self.done.take() {
            d.await.unwrap();
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

/// A deterministic config (sequential ids, fixed clock) pointing at `upstream_base`, with MCP
/// servers on loopback allowed (`--mcp-allow-private-networks`).
pub fn config(upstream_base: &str) -> Config {
    let mut c = Config {
        upstream_url: upstream_base.to_string(),
        deterministic: true,
        ..Config::default()
    };
    c.mcp.ssrf = responses_relay::ssrf::Policy::allow_private_networks();
    c
}

pub async fn relay(config: Config) -> Relay {
    relay_app(App::new(config)).await
}

/// Serves an already built app (for tests that also use the app's handles).
pub async fn relay_app(app: App) -> Relay {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    relay_on(app, listener).await
}

/// A relay whose connections have a small kernel send buffer (accepted sockets inherit it from
/// the listener): a client that stops reading blocks the relay's writes within kilobytes.
pub async fn relay_with_small_send_buffers(config: Config) -> Relay {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_send_buffer_size(4096).unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    relay_on(App::new(config), socket.listen(64).unwrap()).await
}

async fn relay_on(app: App, listener: tokio::net::TcpListener) -> Relay {
    responses_relay::install_tls();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = oneshot::channel();
    let done = tokio::spawn(responses_relay::server::serve_on(listener, app, async {
        let _ = rx.await;
    }));
    Relay {
        addr,
        stop: Some(tx),
        done: Some(done),
    }
}

/// The relay binary.
pub const RELAY_BIN: &str = env!("CARGO_BIN_EXE_responses-relay");

/// The relay as a process; killed when dropped.
pub struct RelayProcess {
    pub child: std::process::Child,
    /// `http://ADDR`, from its `listening on` line.
    pub base: String,
}

impl Drop for RelayProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `responses-relay ARGS` started with `env` set and its stderr going to `stderr`; returns once
/// it printed `listening on`.
pub fn spawn_relay(
    args: &[&str],
    env: &[(&str, &str)],
    stderr: std::process::Stdio,
) -> RelayProcess {
    use std::io::{BufRead, BufReader};
    let mut child = std::process::Command::new(RELAY_BIN)
        .args(args)
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::piped())
        .stderr(stderr)
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let base = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("no listening line: {line:?}"))
        .to_string();
    RelayProcess { child, base }
}

/// A GET (no body) or a POST of `body`, with `bearer` if given: the status and the JSON answer.
pub async fn call(url: &str, bearer: Option<&str>, body: Option<&Value>) -> (u16, Value) {
    let c = client();
    let req = match body {
        Some(b) => c.post(url).json(b),
        None => c.get(url),
    };
    let req = match bearer {
        Some(k) => req.bearer_auth(k),
        None => req,
    };
    let r = req.send().await.unwrap();
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

/// The config `serve ARGS --config FILE` makes, FILE holding `toml`; deterministic.
pub fn serve_config(
    args: &[&str],
    toml: &str,
) -> Result<Config, responses_relay::config::ConfigError> {
    use clap::Parser;
    let file = scratch("config").join("relay.toml");
    std::fs::write(&file, toml).unwrap();
    let mut argv = vec!["responses-relay", "serve"];
    argv.extend_from_slice(args);
    argv.extend(["--config", file.to_str().unwrap()]);
    let cli = responses_relay::config::Cli::try_parse_from(argv).unwrap();
    let responses_relay::config::Command::Serve(serve) = cli.command else {
        unreachable!("parsed as serve")
    };
    let mut c = Config::from_args(serve, |_| None)?;
    c.deterministic = true;
    Ok(c)
}

/// A fresh scratch directory under the system temp dir.
pub fn scratch(name: &str) -> PathBuf {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "relay-{name}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The store backends every storage test runs against (Redis: a fresh database of the test
/// binary's shared `redis-server`).
pub fn stores() -> Vec<(&'static str, responses_relay::config::StoreKind)> {
    vec![
        ("memory", responses_relay::config::StoreKind::Memory),
        (
            "sqlite",
            responses_relay::config::StoreKind::Sqlite(scratch("store").join("relay.sqlite3")),
        ),
        (
            "redis",
            responses_relay::config::StoreKind::Redis(redis_db()),
        ),
    ]
}

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

pub fn client() -> reqwest::Client {
    responses_relay::install_tls();
    reqwest::Client::builder().no_proxy().build().unwrap()
}

/// POSTs JSON; returns status and body as JSON.
pub async fn post(url: &str, body: &Value) -> (u16, Value) {
    let r = client().post(url).json(body).send().await.unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

pub async fn get(url: &str) -> (u16, Value) {
    let r = client().get(url).send().await.unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// A whole SSE body, checked for framing: each event `event: T\ndata: JSON\n\n` with T equal to
/// the JSON's `type`, no `id:` lines, `\n` endings, and `data: [DONE]` last.
#[derive(Debug)]
pub struct SseBody {
    pub events: Vec<Value>,
    /// Each event's `data:` line exactly as the relay wrote it.
    pub raw: Vec<String>,
    pub done: bool,
}

pub fn parse_sse(text: &str) -> SseBody {
    assert!(!text.contains('\r'), "CR in SSE body");
    let mut events = Vec::new();
    let mut raw = Vec::new();
    let mut done = false;
    for block in text.split("\n\n").filter(|b| !b.is_empty()) {
        if block.starts_with(':') {
            continue;
        }
        assert!(!done, "data after [DONE]: {block}");
        if block == "data: [DONE]" {
            done = true;
            continue;
        }
        let lines: Vec<&str> = block.split('\n').collect();
        assert_eq!(
            lines.len(),
            2,
            "event is not exactly an event line and one data line: {block:?}"
        );
        let name = lines[0]
            .strip_prefix("event: ")
            .unwrap_or_else(|| panic!("no event line: {block:?}"));
        let data = lines[1]
            .strip_prefix("data: ")
            .unwrap_or_else(|| panic!("no data line: {block:?}"));
        let v: Value = serde_json::from_str(data).unwrap();
        assert_eq!(v["type"], name, "event name differs from type");
        events.push(v);
        raw.push(data.to_string());
    }
    SseBody { events, raw, done }
}

/// POSTs a request and returns the raw body text (a whole SSE stream for `stream: true`).
pub async fn post_text(url: &str, body: &Value) -> String {
    client()
        .post(url)
        .json(body)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// POSTs a streaming request and reads the whole SSE body.
pub async fn stream(url: &str, body: &Value) -> SseBody {
    let r = client().post(url).json(body).send().await.unwrap();
    assert_eq!(
        r.status(),
        200,
        "stream request failed: {}",
        r.text().await.unwrap()
    );
    assert_eq!(r.headers()["content-type"], "text/event-stream");
    parse_sse(&r.text().await.unwrap())
}

/// Checks the stream rules (sequence from 0 by 1, fold accepts every event, exactly one
/// terminal event, last) and returns the folded Response as JSON.
pub fn check_events(events: &[Value]) -> Value {
    let mut fold = Fold::new();
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e["sequence_number"], i as u64, "sequence gap at {i}: {e}");
        let s: Sequenced = serde_json::from_value(e.clone())
            .unwrap_or_else(|err| panic!("event {i} does not parse ({err}): {e}"));
        fold.apply(&s.event)
            .unwrap_or_else(|err| panic!("event {i} breaks the rules: {err}"));
    }
    let terminal: Vec<_> = events
        .iter()
        .filter(|e| {
            matches!(
                e["type"].as_str(),
                Some("response.completed" | "response.incomplete" | "response.failed")
            )
        })
        .collect();
    assert_eq!(terminal.len(), 1, "expected exactly one terminal event");
    assert!(fold.is_terminal(), "the terminal event is not last");
    serde_json::to_value(fold.into_response().unwrap()).unwrap()
}

/// Compares an event log, byte for byte, with `fixtures/golden/NAME.jsonl` (one event's JSON per
/// line, as the relay wrote it). Set `UPDATE_GOLDEN=1` to rewrite the file.
pub fn golden(name: &str, body: &SseBody) {
    golden_at(name, body, &[]);
}

/// As [`golden`], with loopback addresses of test servers (random ports) written as names.
pub fn golden_at(name: &str, body: &SseBody, addresses: &[(&str, &str)]) {
    let path = manifest_dir()
        .join("fixtures/golden")
        .join(format!("{name}.jsonl"));
    let mut actual: String = body.raw.iter().map(|e| format!("{e}\n")).collect();
    for (addr, placeholder) in addresses {
        actual = actual.replace(addr, placeholder);
    }
    if std::env::var("UPDATE_GOLDEN").is_ok_and(|v| v == "1") {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|_| {
        panic!(
            "missing golden {} (run with UPDATE_GOLDEN=1)",
            path.display()
        )
    });
    if expected != actual {
        for (i, (a, b)) in expected.lines().zip(actual.lines()).enumerate() {
            assert_eq!(a, b, "golden {name} differs at line {}", i + 1);
        }
        assert_eq!(
            expected.lines().count(),
            actual.lines().count(),
            "golden {name}: different number of events"
        );
    }
}

/// The `type`s of a Response's output items.
pub fn output_types(r: &Value) -> Vec<String> {
    r["output"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["type"].as_str().unwrap().to_string())
        .collect()
}

/// The `type`s of a list of events.
pub fn kinds(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| e["type"].as_str().unwrap().to_string())
        .collect()
}

/// Polls `f` until it is true, for at most ten seconds (a liveness bound, not a timing test).
pub async fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    for _ in 0..1000 {
        if f() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("never happened: {what}");
}

/// A loopback listener that accepts connections and never answers: an MCP server hanging on
/// `initialize`. Counts the connections it accepted and those the other side closed.
pub struct BlackHole {
    addr: std::net::SocketAddr,
    pub accepted: Arc<AtomicUsize>,
    pub closed: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl BlackHole {
    pub async fn start() -> BlackHole {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (accepted, closed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (a, c) = (accepted.clone(), closed.clone());
        let task = tokio::spawn(async move {
            while let Ok((mut sock, _)) = listener.accept().await {
                a.fetch_add(1, Ordering::SeqCst);
                let c = c.clone();
                tokio::spawn(async move {
                    use tokio::io::AsyncReadExt;
                    let mut buf = [0u8; 4096];
                    // Reads (and ignores) what arrives until the other side closes.
                    while matches!(sock.read(&mut buf).await, Ok(n) if n > 0) {}
                    c.fetch_add(1, Ordering::SeqCst);
                });
            }
        });
        BlackHole {
            addr,
            accepted,
            closed,
            task,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }
}

impl Drop for BlackHole {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A GET's status and body as text.
pub async fn get_text(url: &str) -> (u16, String) {
    let r = client().get(url).send().await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}
