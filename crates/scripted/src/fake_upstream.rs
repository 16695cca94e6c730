//! The fake upstream model server: a small, real HTTP server that speaks the OpenAI Chat
//! Completions, stateless Responses, Anthropic Messages and Gemini wire formats, with a deterministic scripted model,
//! verbatim replay of recorded transcripts and fault injection, chosen by the `model` string.
//! Used by the tests, the benchmark, the SDK conformance scripts and the `demo` command.
//!
//! Model strings: `NAME` or `NAME?k=v&k=v`. `replay:FILE` streams `FIXTURES/FILE`; any other
//! name is the scripted model. Options: `deltas`, `delay_ms`, `reasoning`, `refusal`, `finish`,
//! `usage_on_finish`, `one_index`, `phase`, `pings`, `redacted`, `cached`, `hold`, `fault`, `fault_after_tools`
//! (see `options.rs` and `fixtures/README.md`).
//!
//! This file: the handle a test holds (the requests received, the streams open) and the accept
//! loop. A request goes `routes` (route, log, status faults) → `convo` (what the model sees) →
//! `script` (what it answers) → `chat`, `responses`, `anthropic` or `gemini` (the wire format) → `sse` (pacing and
//! mid-stream faults); `replay:` models go `routes` → `replay` → `sse`.

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::watch;

use replay::Replay;
use routes::handle;

mod anthropic;
mod chat;
mod convo;
mod gemini;
mod options;
mod replay;
mod responses;
mod routes;
mod script;
mod sse;

/// Every response body the server writes.
type Body = UnsyncBoxBody<Bytes, std::io::Error>;

/// One request the fake received.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    /// The JSON body; `Null` when empty, a string when it was not JSON.
    pub body: Value,
}

impl Recorded {
    /// The first header with this (case-insensitive) name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

struct State {
    fixtures: PathBuf,
    record: bool,
    requests: Mutex<Vec<Recorded>>,
    open: AtomicUsize,
    /// Model strings that already got their one `status429_once` failure.
    failed_once: Mutex<HashSet<String>>,
    replays: Mutex<HashMap<String, Arc<Replay>>>,
    serial: AtomicU64,
    /// Anthropic's prompt cache: the prefixes written at `cache_control` breakpoints.
    prompt_cache: Mutex<HashSet<u64>>,
    /// Gates opened so far (`hold=NAME` streams wait for theirs), and their opening's signal.
    gates: Mutex<HashSet<String>>,
    gate_opened: tokio::sync::Notify,
}

impl State {
    fn open_gate(&self, name: &str) {
        self.gates
            .lock()
            .expect("gates lock")
            .insert(name.to_string());
        self.gate_opened.notify_waiters();
    }

    /// Until the gate `name` is open.
    async fn gate(&self, name: &str) {
        loop {
            let opened = self.gate_opened.notified();
            tokio::pin!(opened);
            opened.as_mut().enable();
            if self.gates.lock().expect("gates lock").contains(name) {
                return;
            }
            opened.await;
        }
    }
}

/// A running fake upstream. Stops accepting and closes every connection on drop or [`shutdown`].
///
/// [`shutdown`]: FakeUpstream::shutdown
pub struct FakeUpstream {
    pub addr: SocketAddr,
    state: Arc<State>,
    stop: watch::Sender<bool>,
}

impl FakeUpstream {
    /// `http://ADDR/v1`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<Recorded> {
        self.state.requests.lock().expect("requests lock").clone()
    }

    /// Streaming bodies currently alive (being written, or stalled). A body is dropped when it
    /// ends or when its connection closes, so this falls when a client goes away.
    pub fn open_streams(&self) -> usize {
        self.state.open.load(Ordering::SeqCst)
    }

    /// Polls [`open_streams`](Self::open_streams) until it equals `n`; false on timeout.
    pub async fn wait_open_streams(&self, n: usize, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if self.open_streams() == n {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Opens the gate `name`: streams of `hold=NAME` models go on (and later ones do not wait).
    pub fn open_gate(&self, name: &str) {
        self.state.open_gate(name);
    }

    /// Stops accepting and closes every open connection. Idempotent.
    pub fn shutdown(&self) {
        self.stop.send_replace(true);
    }
}

impl Drop for FakeUpstream {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Binds `addr` and serves in the background; records every request.
pub async fn start(addr: SocketAddr, fixtures_dir: PathBuf) -> std::io::Result<FakeUpstream> {
    start_with(addr, fixtures_dir, true).await
}

/// As [`start`], choosing whether requests are recorded (the benchmark does not record).
pub async fn start_with(
    addr: SocketAddr,
    fixtures_dir: PathBuf,
    record: bool,
) -> std::io::Result<FakeUpstream> {
    let listener = TcpListener::bind(addr).await?;
    let addr = listener.local_addr()?;
    let state = Arc::new(State {
        fixtures: fixtures_dir,
        record,
        requests: Mutex::new(Vec::new()),
        open: AtomicUsize::new(0),
        failed_once: Mutex::new(HashSet::new()),
        replays: Mutex::new(HashMap::new()),
        serial: AtomicU64::new(1),
        prompt_cache: Mutex::default(),
        gates: Mutex::default(),
        gate_opened: tokio::sync::Notify::new(),
    });
    let (stop, stopped) = watch::channel(false);
    tokio::spawn(accept_loop(listener, state.clone(), stopped));
    Ok(FakeUpstream { addr, state, stop })
}

async fn accept_loop(listener: TcpListener, state: Arc<State>, mut stopped: watch::Receiver<bool>) {
    let builder = auto::Builder::new(TokioExecutor::new());
    let for_conns = stopped.clone();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let stream = match accepted {
                    Ok((stream, _)) => stream,
                    Err(_) => {
                        // Out of file descriptors and the like: back off instead of spinning.
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let st = state.clone();
                let svc = service_fn(move |req| handle(st.clone(), req));
                let conn = builder.serve_connection(TokioIo::new(stream), svc).into_owned();
                let mut stop = for_conns.clone();
                tokio::spawn(async move {
                    tokio::select! {
                        _ = conn => {}
                        _ = stopped_signal(&mut stop) => {}
                    }
                });
            }
            _ = stopped_signal(&mut stopped) => break,
        }
    }
}

/// Resolves once shutdown was asked for (or the handle is gone).
async fn stopped_signal(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}

/// Seconds since the Unix epoch (the `created` of chunks and Responses).
fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}
