//! The load generator: streaming clients that read SSE bodies (or WebSocket-mode frames) as
//! bytes, count events, take the time to the first event, and, where a text delta carries the
//! upstream's send stamp (`@T<µs>`), the latency from the upstream's send to this client's
//! receive. No JSON is parsed per event.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::upstream::now_micros;

/// How a body's events are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Responses events from the relay (`event: TYPE` first line); deltas carry stamps.
    Relay,
    /// Chat Completions chunks through the floor; every chunk with a stamp is a delta.
    Floor,
    /// Only count events (replayed logs: their stamps are old).
    Count,
    /// Responses events from the relay's WebSocket mode: `Req::url` is `ws://…/v1/responses`,
    /// `Req::body` the `response.create` frame; each client keeps one socket for all its runs.
    Socket,
}

/// Counters shared by every client of one phase.
#[derive(Default)]
pub struct Stats {
    pub events: AtomicU64,
    pub runs: AtomicU64,
    pub errors: AtomicU64,
    pub opened: AtomicU64,
    /// Samples are kept only while this is set (the measurement window).
    pub measuring: AtomicBool,
    pub stop: AtomicBool,
    pub latency_us: Mutex<Vec<u32>>,
    pub ttfe_us: Mutex<Vec<u32>>,
    /// Whole-run times (request sent to terminal event read) of runs that started in the window.
    pub run_us: Mutex<Vec<u32>>,
    pub first_error: Mutex<Option<String>>,
}

/// Most samples kept per phase (bounds the memory of a long run).
const MAX_SAMPLES: usize = 20_000_000;

impl Stats {
    /// Adds one run's latency samples (up to the bound on all samples).
    fn keep_latencies(&self, lat: &[u32]) {
        if lat.is_empty() {
            return;
        }
        let mut all = self.latency_us.lock().expect("lock");
        if all.len() < MAX_SAMPLES {
            all.extend_from_slice(lat);
        }
    }

    pub fn error(&self, e: String) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        let mut first = self.first_error.lock().expect("lock");
        if first.is_none() {
            *first = Some(e);
        }
    }
}

/// One request: a POST with a JSON body, or a GET.
#[derive(Clone)]
pub struct Req {
    pub url: String,
    pub body: Option<Bytes>,
}

#[derive(Debug, Default)]
pub struct RunOut {
    pub completed: bool,
    pub mcp_calls: u32,
    pub id: Option<String>,
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// The stamp after `@T` in a block, if any.
fn stamp(block: &[u8]) -> Option<u64> {
    let at = find(block, b"@T")? + 2;
    let digits = block[at..]
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .count();
    std::str::from_utf8(&block[at..at + digits])
        .ok()?
        .parse()
        .ok()
}

/// The first `"id":"..."` of a block (the response id in `response.created`).
fn response_id(block: &[u8]) -> Option<String> {
    let at = find(block, b"\"id\":\"")? + 6;
    let len = block[at..].iter().position(|b| *b == b'"')?;
    String::from_utf8(block[at..at + len].to_vec()).ok()
}

/// Sends `req` and reads its SSE body to the end. `on_first` runs at the first event.
pub async fn one_run(
    http: &reqwest::Client,
    req: &Req,
    kind: Kind,
    st: &Stats,
    mut on_first: impl FnMut(),
) -> Result<RunOut, String> {
    let t0 = Instant::now();
    let rb = match &req.body {
        Some(b) => http
            .post(&req.url)
            .header("content-type", "application/json")
            .body(b.clone()),
        None => http.get(&req.url),
    };
    let mut resp = rb.send().await.map_err(|e| format!("{}: {e}", req.url))?;
    if !resp.status().is_success() {
        let status = resp.status();
        let text = resp.text().await.unwrap_or_default();
        return Err(format!(
            "{}: HTTP {status}: {}",
            req.url,
            text.chars().take(300).collect::<String>()
        ));
    }
    let mut out = RunOut::default();
    let mut buf: Vec<u8> = Vec::with_capacity(8192);
    let mut first = true;
    let mut lat: Vec<u32> = Vec::new();
    let mut failure: Option<String> = None;
    loop {
        let chunk = match resp.chunk().await {
            Ok(Some(c)) => c,
            Ok(None) => break,
            Err(e) => return Err(format!("{}: body: {e}", req.url)),
        };
        let now = now_micros();
        let measuring = st.measuring.load(Ordering::Relaxed);
        buf.extend_from_slice(&chunk);
        let mut start = 0;
        let mut n = 0u64;
        while let Some(p) = find(&buf[start..], b"\n\n") {
            let block = &buf[start..start + p];
            start += p + 2;
            if block.is_empty() || block[0] == b':' || block.starts_with(b"data: [DONE]") {
                if block.starts_with(b"data: [DONE]") && kind == Kind::Floor {
                    out.completed = true;
                }
                continue;
            }
            n += 1;
            if first {
                first = false;
                if measuring {
                    st.ttfe_us
                        .lock()
                        .expect("lock")
                        .push(t0.elapsed().as_micros().min(u32::MAX as u128) as u32);
                }
                if kind != Kind::Floor {
                    out.id = response_id(block);
                }
                on_first();
            }
            let is_delta = match kind {
                Kind::Relay => block.starts_with(b"event: response.output_text.delta\n"),
                Kind::Floor => block.starts_with(b"data: {"),
                Kind::Count | Kind::Socket => false,
            };
            if is_delta
                && measuring
                && let Some(sent) = stamp(block)
            {
                lat.push(now.saturating_sub(sent).min(u32::MAX as u64) as u32);
            }
            if kind != Kind::Floor && block.starts_with(b"event: response.") {
                let ty = &block[b"event: response.".len()..];
                if ty.starts_with(b"completed\n") {
                    out.completed = true;
                } else if ty.starts_with(b"mcp_call.completed\n") {
                    out.mcp_calls += 1;
                } else if ty.starts_with(b"failed\n")
                    || ty.starts_with(b"incomplete\n")
                    || ty.starts_with(b"mcp_call.failed\n")
                {
                    failure.get_or_insert_with(|| {
                        String::from_utf8_lossy(&block[..block.len().min(400)]).into_owned()
                    });
                }
            }
        }
        buf.drain(..start);
        st.events.fetch_add(n, Ordering::Relaxed);
    }
    st.keep_latencies(&lat);
    if let Some(f) = failure {
        return Err(format!("{}: {f}", req.url));
    }
    Ok(out)
}

type Socket = tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>;

/// Runs one response over the client's socket (opened first if it has none): sends the create
/// frame and reads frames to the terminal event. A failed socket is dropped (the next run opens
/// another).
async fn one_socket_run(
    socket: &mut Option<Socket>,
    req: &Req,
    st: &Stats,
) -> Result<RunOut, String> {
    use futures::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    let t0 = Instant::now();
    if socket.is_none() {
        let host = req
            .url
            .strip_prefix("ws://")
            .and_then(|r| r.split('/').next())
            .ok_or_else(|| format!("{}: not a ws:// URL", req.url))?;
        let tcp = tokio::net::TcpStream::connect(host)
            .await
            .map_err(|e| format!("{}: {e}", req.url))?;
        tcp.set_nodelay(true).map_err(|e| e.to_string())?;
        let (ws, _) = tokio_tungstenite::client_async(req.url.as_str(), tcp)
            .await
            .map_err(|e| format!("{}: upgrade: {e}", req.url))?;
        *socket = Some(ws);
    }
    let ws = socket.as_mut().expect("opened above");
    let frame = req.body.clone().unwrap_or_default();
    let text = tokio_tungstenite::tungstenite::Utf8Bytes::try_from(frame)
        .map_err(|e| format!("the create frame is not UTF-8: {e}"))?;
    let result = async {
        ws.send(Message::Text(text))
            .await
            .map_err(|e| format!("{}: send: {e}", req.url))?;
        let mut out = RunOut::default();
        let mut first = true;
        let mut lat: Vec<u32> = Vec::new();
        loop {
            let frame = match ws.next().await {
                Some(Ok(Message::Text(t))) => t,
                Some(Ok(Message::Close(_))) | None => {
                    return Err(format!("{}: socket closed mid-response", req.url));
                }
                Some(Ok(_)) => continue,
                Some(Err(e)) => return Err(format!("{}: {e}", req.url)),
            };
            let now = now_micros();
            let measuring = st.measuring.load(Ordering::Relaxed);
            let block = frame.as_bytes();
            st.events.fetch_add(1, Ordering::Relaxed);
            if first {
                first = false;
                if measuring {
                    st.ttfe_us
                        .lock()
                        .expect("lock")
                        .push(t0.elapsed().as_micros().min(u32::MAX as u128) as u32);
                }
                out.id = response_id(block);
            }
            let Some(ty) = block.strip_prefix(b"{\"type\":\"") else {
                continue;
            };
            if ty.starts_with(b"response.output_text.delta\"") {
                if measuring && let Some(sent) = stamp(block) {
                    lat.push(now.saturating_sub(sent).min(u32::MAX as u64) as u32);
                }
            } else if ty.starts_with(b"response.completed\"") {
                out.completed = true;
                break;
            } else if ty.starts_with(b"response.mcp_call.completed\"") {
                out.mcp_calls += 1;
            } else if ty.starts_with(b"response.failed\"")
                || ty.starts_with(b"response.incomplete\"")
                || ty.starts_with(b"error\"")
            {
                return Err(format!(
                    "{}: {}",
                    req.url,
                    String::from_utf8_lossy(&block[..block.len().min(400)])
                ));
            }
        }
        st.keep_latencies(&lat);
        Ok(out)
    }
    .await;
    if result.is_err() {
        *socket = None;
    }
    result
}

/// What a looping client checks on each run.
#[derive(Clone, Copy)]
pub struct Expect {
    pub mcp_call: bool,
}

/// One looping client: what it sends, how it reads the answers, what it checks, where it counts.
pub struct Looper {
    pub http: reqwest::Client,
    pub make: Arc<dyn Fn() -> Req + Send + Sync>,
    pub kind: Kind,
    pub expect: Expect,
    pub st: Arc<Stats>,
}

/// Runs one request after the other until `stop`, `deadline` or `max_runs`, the first one after
/// `start_after` (clients start spread over one run's length, so runs begin and end at a steady
/// rate as they would with independent users, not all in the same millisecond).
pub async fn loop_runs(client: Looper, start_after: Duration, deadline: Instant, max_runs: u64) {
    let Looper {
        http,
        make,
        kind,
        expect,
        st,
    } = client;
    tokio::time::sleep(start_after).await;
    let mut n = 0;
    let mut socket: Option<Socket> = None;
    while !st.stop.load(Ordering::Relaxed) && Instant::now() < deadline && n < max_runs {
        n += 1;
        let req = make();
        let (t0, measured) = (Instant::now(), st.measuring.load(Ordering::Relaxed));
        let ran = if kind == Kind::Socket {
            one_socket_run(&mut socket, &req, &st).await
        } else {
            one_run(&http, &req, kind, &st, || {}).await
        };
        match ran {
            Ok(out) if !out.completed => st.error(format!(
                "{}: stream ended without its terminal event",
                req.url
            )),
            Ok(out) if expect.mcp_call && out.mcp_calls == 0 => {
                st.error(format!("{}: run completed without an mcp_call", req.url))
            }
            Ok(_) => {
                st.runs.fetch_add(1, Ordering::Relaxed);
                if measured {
                    let us = t0.elapsed().as_micros().min(u32::MAX as u128) as u32;
                    st.run_us.lock().expect("lock").push(us);
                }
            }
            Err(e) => {
                st.error(e);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// A plain HTTP/1.1 client (one connection per concurrent stream), as a browser or SDK would use.
pub fn http1_client(pool: usize) -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(pool)
        .tcp_nodelay(true)
        .connect_timeout(Duration::from_secs(10))
        .build()
        .expect("reqwest client builds")
}

/// An h2c client (prior knowledge): all its streams share one connection.
pub fn http2_client() -> reqwest::Client {
    reqwest::Client::builder()
        .http2_prior_knowledge()
        .tcp_nodelay(true)
        .connect_timeout(Duration::from_secs(10))
        .build()
        .expect("reqwest client builds")
}

/// The `q`-quantile (0..=1) of sorted samples.
pub fn quantile(sorted: &[u32], q: f64) -> Option<u32> {
    if sorted.is_empty() {
        return None;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    Some(sorted[i.min(sorted.len() - 1)])
}
