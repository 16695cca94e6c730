//! The fake upstream model server: a small, real HTTP server that speaks the OpenAI Chat
//! Completions and stateless Responses wire formats, with a deterministic scripted model,
//! verbatim replay of recorded transcripts and fault injection, chosen by the `model` string.
//! Used by the tests, the benchmark and the SDK conformance scripts. Integration tests include
//! this file by path, so it uses crates only (never `crate::` paths).
//!
//! Model strings: `NAME` or `NAME?k=v&k=v`. `replay:FILE` streams `FIXTURES/FILE`; any other
//! name is the scripted model. Options: `deltas`, `delay_ms`, `reasoning`, `refusal`, `finish`,
//! `usage_on_finish`, `one_index`, `fault`, `fault_after_tools` (see [`Opts`] and
//! `fixtures/README.md`).
#![allow(dead_code)]

use std::collections::{HashMap, HashSet};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{CACHE_CONTROL, CONTENT_TYPE, HeaderValue, RETRY_AFTER};
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use serde_json::{Map, Value, json};
use tokio::net::TcpListener;
use tokio::sync::watch;

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

// ---------------------------------------------------------------------------------------------
// Routing and HTTP helpers

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Api {
    Chat,
    Responses,
}

async fn handle(state: Arc<State>, req: Request<Incoming>) -> Result<Response<Body>, Infallible> {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let headers: Vec<(String, String)> = if state.record {
        req.headers()
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_string(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect()
    } else {
        Vec::new()
    };
    let bytes = match req.into_body().collect().await {
        Ok(c) => c.to_bytes(),
        Err(_) => Bytes::new(),
    };
    let body: Value = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()))
    };
    if state.record {
        let rec = Recorded {
            method: method.to_string(),
            path: path.clone(),
            headers,
            body: body.clone(),
        };
        state.requests.lock().expect("requests lock").push(rec);
    }
    let resp = match (&method, path.as_str()) {
        (&Method::GET, "/v1/models") => json_response(
            StatusCode::OK,
            &json!({"object": "list", "data": [{"id": "fake-model", "object": "model", "created": 0, "owned_by": "fake"}]}),
        ),
        (&Method::POST, "/v1/chat/completions") => post(&state, Api::Chat, body).await,
        (&Method::POST, "/v1/responses") => post(&state, Api::Responses, body).await,
        _ => error_response(
            StatusCode::NOT_FOUND,
            &format!("Unknown route: {method} {path}"),
            "invalid_request_error",
            None,
            Some("not_found"),
        ),
    };
    Ok(resp)
}

fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never: Infallible| match never {})
        .boxed_unsync()
}

fn json_response(status: StatusCode, v: &Value) -> Response<Body> {
    let mut r = Response::new(full(serde_json::to_vec(v).expect("json serializes")));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

fn error_response(
    status: StatusCode,
    message: &str,
    kind: &str,
    param: Option<&str>,
    code: Option<&str>,
) -> Response<Body> {
    json_response(
        status,
        &json!({"error": {"message": message, "type": kind, "param": param, "code": code}}),
    )
}

fn bad_request(message: &str) -> Response<Body> {
    error_response(
        StatusCode::BAD_REQUEST,
        message,
        "invalid_request_error",
        None,
        None,
    )
}

/// Why a stream stops after its frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tail {
    /// The body ends normally.
    End,
    /// The connection is dropped mid-body (no terminating chunk).
    Abort,
    /// Nothing more is ever sent; the body stays open until the client goes away.
    Stall,
}

/// Decrements the open-stream count when the body stream is dropped.
struct OpenGuard(Arc<State>);

impl OpenGuard {
    fn new(state: &Arc<State>) -> Self {
        state.open.fetch_add(1, Ordering::SeqCst);
        OpenGuard(state.clone())
    }
}

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::SeqCst);
    }
}

/// An SSE response writing each frame with one write, `delay` apart, then `tail`.
fn sse_response(
    state: &Arc<State>,
    frames: Vec<Bytes>,
    delay: Duration,
    tail: Tail,
) -> Response<Body> {
    let guard = OpenGuard::new(state);
    let stream = async_stream::stream! {
        let _guard = guard;
        for (i, frame) in frames.into_iter().enumerate() {
            if i > 0 && !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            yield Ok::<_, std::io::Error>(Frame::data(frame));
        }
        match tail {
            Tail::End => {}
            Tail::Abort => {
                // Let hyper flush what was sent (it flushes when the body is pending), then drop
                // the connection: an error from the body aborts it without the final chunk.
                tokio::time::sleep(Duration::from_millis(20)).await;
                yield Err(std::io::Error::new(std::io::ErrorKind::ConnectionAborted, "fake upstream cut the stream"));
            }
            Tail::Stall => futures::future::pending::<()>().await,
        }
    };
    let mut r = Response::new(StreamBody::new(stream).boxed_unsync());
    let h = r.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

// ---------------------------------------------------------------------------------------------
// Model options

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    None,
    Status500,
    Status429,
    Status429Once,
    Status400,
    Cut,
    Malformed,
    NoDone,
    Stall,
    SlowHeaders,
    ErrorChunk,
}

/// Options from the model string's query part.
#[derive(Debug, Clone)]
struct Opts {
    /// Pieces the answer text is streamed in (default 8).
    deltas: usize,
    /// Sleep between chunks (before the headers with `fault=slow_headers`).
    delay: Duration,
    /// Leading reasoning deltas (`think `).
    reasoning: usize,
    refusal: bool,
    finish_length: bool,
    usage_on_finish: bool,
    /// Chat: every tool call of a turn at `index` 0, told apart only by its `id` (as Ollama and
    /// SGLang stream parallel calls).
    one_index: bool,
    fault: Fault,
    /// The fault hits only a turn that carries tool results (the model's turn after tools ran).
    fault_after_tools: bool,
}

impl Default for Opts {
    fn default() -> Self {
        Opts {
            deltas: 8,
            delay: Duration::ZERO,
            reasoning: 0,
            refusal: false,
            finish_length: false,
            usage_on_finish: false,
            one_index: false,
            fault: Fault::None,
            fault_after_tools: false,
        }
    }
}

/// Splits `NAME?k=v&k=v` into the name and its options.
fn parse_model(model: &str) -> Result<(&str, Opts), String> {
    let (name, query) = match model.split_once('?') {
        Some((n, q)) => (n, q),
        None => (model, ""),
    };
    let mut o = Opts::default();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let num = || {
            v.parse::<u64>()
                .map_err(|_| format!("model option {k}={v}: not a number"))
        };
        let flag = || match v {
            "1" | "true" | "" => Ok(true),
            "0" | "false" => Ok(false),
            _ => Err(format!("model option {k}={v}: expected 1 or 0")),
        };
        match k {
            "deltas" => o.deltas = (num()? as usize).max(1),
            "delay_ms" => o.delay = Duration::from_millis(num()?),
            "reasoning" => o.reasoning = num()? as usize,
            "refusal" => o.refusal = flag()?,
            "usage_on_finish" => o.usage_on_finish = flag()?,
            "one_index" => o.one_index = flag()?,
            "fault_after_tools" => o.fault_after_tools = flag()?,
            "finish" => match v {
                "length" => o.finish_length = true,
                "stop" => o.finish_length = false,
                _ => return Err(format!("model option finish={v}: expected stop or length")),
            },
            "fault" => {
                o.fault = match v {
                    "status500" => Fault::Status500,
                    "status429" => Fault::Status429,
                    "status429_once" => Fault::Status429Once,
                    "status400" => Fault::Status400,
                    "cut" => Fault::Cut,
                    "malformed" => Fault::Malformed,
                    "no_done" => Fault::NoDone,
                    "stall" => Fault::Stall,
                    "slow_headers" => Fault::SlowHeaders,
                    "error_chunk" => Fault::ErrorChunk,
                    _ => return Err(format!("unknown fault '{v}'")),
                }
            }
            _ => return Err(format!("unknown model option '{k}'")),
        }
    }
    Ok((name, o))
}

async fn post(state: &Arc<State>, api: Api, body: Value) -> Response<Body> {
    let Some(model) = body.get("model").and_then(Value::as_str) else {
        return error_response(
            StatusCode::BAD_REQUEST,
            "model is required",
            "invalid_request_error",
            Some("model"),
            None,
        );
    };
    let (name, mut opts) = match parse_model(model) {
        Ok(p) => p,
        Err(e) => {
            return error_response(
                StatusCode::BAD_REQUEST,
                &e,
                "invalid_request_error",
                Some("model"),
                None,
            );
        }
    };
    if opts.fault_after_tools {
        let convo = match api {
            Api::Chat => Convo::from_chat(&body),
            Api::Responses => Convo::from_responses(&body),
        };
        if !matches!(convo.last, Last::ToolResults(_)) {
            opts.fault = Fault::None;
        }
    }
    match opts.fault {
        Fault::Status500 => {
            return error_response(
                StatusCode::INTERNAL_SERVER_ERROR,
                "The server had an error while processing your request.",
                "server_error",
                None,
                None,
            );
        }
        Fault::Status429 => return too_many_requests(),
        Fault::Status429Once => {
            let first = state
                .failed_once
                .lock()
                .expect("failed_once lock")
                .insert(model.to_string());
            if first {
                return too_many_requests();
            }
        }
        Fault::Status400 => {
            return error_response(
                StatusCode::BAD_REQUEST,
                "bad model param",
                "invalid_request_error",
                Some("model"),
                None,
            );
        }
        Fault::SlowHeaders => tokio::time::sleep(opts.delay).await,
        _ => {}
    }
    let stream = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
    if let Some(file) = name.strip_prefix("replay:") {
        return replay(state, api, file, &opts).await;
    }
    let convo = match api {
        Api::Chat => Convo::from_chat(&body),
        Api::Responses => Convo::from_responses(&body),
    };
    let script = Script::plan(&convo, &opts);
    let serial = state.serial.fetch_add(1, Ordering::Relaxed);
    match (api, stream) {
        (Api::Chat, true) => {
            let include_usage = body
                .pointer("/stream_options/include_usage")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            let (frames, tail) = chat_frames(&script, &opts, model, serial, include_usage);
            sse_response(state, frames, stream_delay(&opts), tail)
        }
        (Api::Chat, false) => {
            json_response(StatusCode::OK, &chat_completion(&script, model, serial))
        }
        (Api::Responses, true) => {
            let (frames, tail) = responses_frames(&script, &opts, &body, model, serial);
            sse_response(state, frames, stream_delay(&opts), tail)
        }
        (Api::Responses, false) => {
            let r = ResponsesBuilder::new(&body, model, serial);
            let mut evs = Vec::new();
            let output = r.output_events(&script, &mut evs);
            json_response(StatusCode::OK, &r.terminal(&script, output))
        }
    }
}

fn stream_delay(opts: &Opts) -> Duration {
    if opts.fault == Fault::SlowHeaders {
        Duration::ZERO
    } else {
        opts.delay
    }
}

fn too_many_requests() -> Response<Body> {
    let mut r = error_response(
        StatusCode::TOO_MANY_REQUESTS,
        "Rate limit reached for requests. Please try again in 1s.",
        "requests",
        None,
        Some("rate_limit_exceeded"),
    );
    r.headers_mut()
        .insert(RETRY_AFTER, HeaderValue::from_static("1"));
    r
}

// ---------------------------------------------------------------------------------------------
// The conversation, as the scripted model sees it

#[derive(Debug)]
enum Last {
    User,
    ToolResults(Vec<String>),
    Other,
}

#[derive(Debug)]
enum Choice {
    Auto,
    None,
    Required,
    Named(String),
}

#[derive(Debug)]
struct Tool {
    name: String,
    parameters: Value,
    /// A Responses `custom` tool: its calls are `custom_tool_call` items with raw `input`.
    custom: bool,
}

#[derive(Debug)]
struct Convo {
    messages: usize,
    last: Last,
    /// The text of the last user message, its image and file parts.
    user_text: String,
    images: usize,
    files: usize,
    tools: Vec<Tool>,
    choice: Choice,
    /// Tool-call rounds the model already made since the last user message.
    rounds: usize,
}

fn text_of(content: &Value, images: &mut usize, files: &mut usize) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => {
            let mut texts: Vec<&str> = Vec::new();
            for p in parts {
                match p.get("type").and_then(Value::as_str).unwrap_or("") {
                    "text" | "input_text" | "output_text" => {
                        if let Some(t) = p.get("text").and_then(Value::as_str) {
                            texts.push(t);
                        }
                    }
                    "image_url" | "input_image" => *images += 1,
                    "file" | "input_file" => *files += 1,
                    _ => {}
                }
            }
            texts.join(" ")
        }
        _ => String::new(),
    }
}

fn plain_text(content: &Value) -> String {
    text_of(content, &mut 0, &mut 0)
}

fn tools_of(body: &Value) -> Vec<Tool> {
    let Some(tools) = body.get("tools").and_then(Value::as_array) else {
        return Vec::new();
    };
    tools
        .iter()
        .filter_map(|t| {
            let kind = t.get("type").and_then(Value::as_str);
            if !matches!(kind, None | Some("function") | Some("custom")) {
                return None;
            }
            let f = t.get("function").unwrap_or(t);
            let name = f.get("name").and_then(Value::as_str)?;
            Some(Tool {
                name: name.to_string(),
                parameters: f.get("parameters").cloned().unwrap_or(Value::Null),
                custom: kind == Some("custom"),
            })
        })
        .collect()
}

fn choice_of(body: &Value) -> Choice {
    match body.get("tool_choice") {
        Some(Value::String(s)) if s == "none" => Choice::None,
        Some(Value::String(s)) if s == "required" => Choice::Required,
        Some(v @ Value::Object(_)) => {
            match v
                .pointer("/function/name")
                .or_else(|| v.get("name"))
                .and_then(Value::as_str)
            {
                Some(n) => Choice::Named(n.to_string()),
                None => Choice::Required,
            }
        }
        _ => Choice::Auto,
    }
}

impl Convo {
    fn from_chat(body: &Value) -> Convo {
        let empty = Vec::new();
        let msgs = body
            .get("messages")
            .and_then(Value::as_array)
            .unwrap_or(&empty);
        let role = |m: &Value| {
            m.get("role")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        let last = match msgs.last().map(role).as_deref() {
            Some("user") => Last::User,
            Some("tool") | Some("function") => {
                let start = msgs
                    .iter()
                    .rposition(|m| !matches!(role(m).as_str(), "tool" | "function"))
                    .map(|i| i + 1)
                    .unwrap_or(0);
                Last::ToolResults(
                    msgs[start..]
                        .iter()
                        .map(|m| plain_text(m.get("content").unwrap_or(&Value::Null)))
                        .collect(),
                )
            }
            _ => Last::Other,
        };
        let (mut images, mut files) = (0, 0);
        let user_text = msgs
            .iter()
            .rev()
            .find(|m| role(m) == "user")
            .map(|m| {
                text_of(
                    m.get("content").unwrap_or(&Value::Null),
                    &mut images,
                    &mut files,
                )
            })
            .unwrap_or_default();
        let after_user = msgs
            .iter()
            .rposition(|m| role(m) == "user")
            .map(|i| i + 1)
            .unwrap_or(0);
        let rounds = msgs[after_user..]
            .iter()
            .filter(|m| {
                role(m) == "assistant"
                    && m.get("tool_calls")
                        .and_then(Value::as_array)
                        .is_some_and(|c| !c.is_empty())
            })
            .count();
        Convo {
            messages: msgs.len(),
            last,
            user_text,
            images,
            files,
            tools: tools_of(body),
            choice: choice_of(body),
            rounds,
        }
    }

    fn from_responses(body: &Value) -> Convo {
        let instructions = body
            .get("instructions")
            .and_then(Value::as_str)
            .is_some_and(|s| !s.is_empty()) as usize;
        let mut c = Convo {
            messages: instructions,
            last: Last::Other,
            user_text: String::new(),
            images: 0,
            files: 0,
            tools: tools_of(body),
            choice: choice_of(body),
            rounds: 0,
        };
        match body.get("input") {
            Some(Value::String(s)) => {
                c.messages += 1;
                c.last = Last::User;
                c.user_text = s.clone();
            }
            Some(Value::Array(items)) => {
                c.messages += items.len();
                let kind = |i: &Value| -> String {
                    match i.get("type").and_then(Value::as_str) {
                        Some(t) => t.to_string(),
                        None if i.get("role").is_some() => "message".into(),
                        None => String::new(),
                    }
                };
                let is_user = |i: &Value| {
                    kind(i) == "message" && i.get("role").and_then(Value::as_str) == Some("user")
                };
                c.last = match items.last() {
                    Some(i) if is_user(i) => Last::User,
                    Some(i) if kind(i).ends_with("call_output") => {
                        let start = items
                            .iter()
                            .rposition(|i| !kind(i).ends_with("call_output"))
                            .map(|i| i + 1)
                            .unwrap_or(0);
                        Last::ToolResults(
                            items[start..]
                                .iter()
                                .map(|i| plain_text(i.get("output").unwrap_or(&Value::Null)))
                                .collect(),
                        )
                    }
                    _ => Last::Other,
                };
                if let Some(u) = items.iter().rev().find(|i| is_user(i)) {
                    c.user_text = text_of(
                        u.get("content").unwrap_or(&Value::Null),
                        &mut c.images,
                        &mut c.files,
                    );
                }
                let after_user = items.iter().rposition(is_user).map(|i| i + 1).unwrap_or(0);
                let tail = &items[after_user..];
                c.rounds = tail
                    .iter()
                    .enumerate()
                    .filter(|(j, i)| {
                        let call = |k: String| k == "function_call" || k == "custom_tool_call";
                        call(kind(i)) && (*j == 0 || !call(kind(&tail[j - 1])))
                    })
                    .count();
            }
            _ => {}
        }
        c
    }
}

// ---------------------------------------------------------------------------------------------
// The scripted model

#[derive(Debug, Clone)]
struct Call {
    name: String,
    /// JSON arguments, or a custom tool's raw input.
    arguments: String,
    pieces: Vec<String>,
    custom: bool,
}

#[derive(Debug, Clone)]
enum Output {
    Text(String, Vec<String>),
    Refusal(String, Vec<String>),
    Calls(Vec<Call>),
}

/// What the scripted model answers, decided before the first byte.
#[derive(Debug, Clone)]
struct Script {
    reasoning: Vec<String>,
    output: Output,
    length: bool,
    prompt_tokens: u64,
    completion_tokens: u64,
}

const REFUSAL: &str = "I'm sorry, I can't help with that.";

impl Script {
    fn plan(c: &Convo, o: &Opts) -> Script {
        let output = match Self::calls(c) {
            Some(calls) => Output::Calls(calls),
            None => {
                let text = match &c.last {
                    Last::ToolResults(outs) => format!("Tool results: {}", outs.join("; ")),
                    _ => {
                        let mut t = format!(
                            "Hello! You said: {}",
                            c.user_text.chars().take(200).collect::<String>()
                        );
                        match c.images {
                            0 => {}
                            1 => t.push_str(" [1 image]"),
                            n => t.push_str(&format!(" [{n} images]")),
                        }
                        match c.files {
                            0 => {}
                            1 => t.push_str(" [1 file]"),
                            n => t.push_str(&format!(" [{n} files]")),
                        }
                        t
                    }
                };
                if o.refusal {
                    let pieces = split_padded(REFUSAL, o.deltas);
                    Output::Refusal(pieces.concat(), pieces)
                } else {
                    let pieces = split_padded(&text, o.deltas);
                    Output::Text(pieces.concat(), pieces)
                }
            }
        };
        let reasoning = vec!["think ".to_string(); o.reasoning];
        let out_deltas = match &output {
            Output::Text(_, p) | Output::Refusal(_, p) => p.len(),
            Output::Calls(calls) => calls.iter().map(|c| c.pieces.len()).sum(),
        };
        Script {
            completion_tokens: (reasoning.len() + out_deltas) as u64,
            reasoning,
            output,
            length: o.finish_length,
            prompt_tokens: c.messages as u64 * 10,
        }
    }

    fn calls(c: &Convo) -> Option<Vec<Call>> {
        // `CALL` lines, in rounds separated by a `THEN` line: round k is made once the model
        // has seen the results of the k rounds before it.
        let round = match c.last {
            Last::User => 0,
            Last::ToolResults(_) if c.user_text.lines().any(|l| l.trim() == "THEN") => c.rounds,
            _ => return None,
        };
        let group: Vec<&str> = c
            .user_text
            .split('\n')
            .collect::<Vec<_>>()
            .split(|l| l.trim() == "THEN")
            .nth(round)?
            .to_vec();
        let lines: Vec<Call> = group
            .iter()
            .filter_map(|l| l.trim().strip_prefix("CALL "))
            .filter_map(|rest| {
                let rest = rest.trim_start();
                let (name, args) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
                if name.is_empty() {
                    return None;
                }
                let args = if args.trim().is_empty() {
                    "{}"
                } else {
                    args.trim()
                };
                let tool = c
                    .tools
                    .iter()
                    .find(|t| t.name == name)
                    .or_else(|| c.tools.iter().find(|t| t.name.ends_with(name)));
                match tool {
                    // A custom tool takes raw input: the `input` of the JSON written, if any.
                    Some(t) if t.custom => {
                        let input = serde_json::from_str::<Value>(args)
                            .ok()
                            .and_then(|v| v.get("input")?.as_str().map(str::to_string))
                            .unwrap_or_else(|| args.to_string());
                        Some(Call {
                            custom: true,
                            ..call(t.name.clone(), input)
                        })
                    }
                    Some(t) => Some(call(t.name.clone(), args.to_string())),
                    None => Some(call(name.to_string(), args.to_string())),
                }
            })
            .collect();
        if !lines.is_empty() {
            return Some(lines);
        }
        if round > 0 || c.tools.is_empty() {
            return None;
        }
        let tool = match &c.choice {
            Choice::None => return None,
            Choice::Required => &c.tools[0],
            Choice::Named(n) => match c.tools.iter().find(|t| &t.name == n) {
                Some(t) => t,
                None => return Some(vec![call(n.clone(), "{}".into())]),
            },
            Choice::Auto => {
                let text = c.user_text.to_lowercase();
                c.tools.iter().find(|t| {
                    let name = t.name.to_lowercase();
                    text.contains(&name) || (name == "get_weather" && text.contains("weather"))
                })?
            }
        };
        let args =
            serde_json::to_string(&sample_object(&tool.parameters)).expect("json serializes");
        Some(vec![call(tool.name.clone(), args)])
    }
}

fn call(name: String, arguments: String) -> Call {
    let n = arguments.chars().count().clamp(1, 4);
    let pieces = split_even(&arguments, n);
    Call {
        name,
        arguments,
        pieces,
        custom: false,
    }
}

/// Arguments satisfying a JSON schema's `required` properties.
fn sample_object(schema: &Value) -> Value {
    let mut obj = Map::new();
    let props = schema.get("properties");
    for name in schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        let prop = props.and_then(|p| p.get(name)).unwrap_or(&Value::Null);
        obj.insert(name.to_string(), sample_value(name, prop));
    }
    Value::Object(obj)
}

fn sample_value(name: &str, schema: &Value) -> Value {
    if let Some(first) = schema
        .get("enum")
        .and_then(Value::as_array)
        .and_then(|e| e.first())
    {
        return first.clone();
    }
    let ty = match schema.get("type") {
        Some(Value::String(t)) => t.as_str(),
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .find(|t| *t != "null")
            .unwrap_or("string"),
        _ => "string",
    };
    match ty {
        "number" | "integer" => json!(1),
        "boolean" => json!(true),
        "array" => json!([]),
        "object" => sample_object(schema),
        "null" => Value::Null,
        _ if matches!(name, "location" | "city") => json!("San Francisco"),
        _ => json!("x"),
    }
}

/// `text` in `n` non-empty pieces of near-equal length, padded with ` lorem` when too short.
fn split_padded(text: &str, n: usize) -> Vec<String> {
    let n = n.max(1);
    let mut s = text.to_string();
    let mut len = s.chars().count();
    while len < n {
        s.push_str(" lorem");
        len += 6;
    }
    split_even(&s, n)
}

/// `s` in `n` pieces on char boundaries (`n` ≤ its length, except for the empty string).
fn split_even(s: &str, n: usize) -> Vec<String> {
    let bounds: Vec<usize> = s
        .char_indices()
        .map(|(i, _)| i)
        .chain(std::iter::once(s.len()))
        .collect();
    let len = bounds.len() - 1;
    if len == 0 {
        return vec![String::new()];
    }
    let n = n.clamp(1, len);
    (0..n)
        .map(|i| s[bounds[i * len / n]..bounds[(i + 1) * len / n]].to_string())
        .collect()
}

/// Where a fault cuts the stream: after this many delta events (or none).
fn fault_cut(fault: Fault) -> Option<usize> {
    match fault {
        Fault::Cut => Some(3),
        Fault::Malformed | Fault::Stall | Fault::ErrorChunk => Some(2),
        _ => None,
    }
}

/// Frames of one stream before fault handling: each with whether it is a delta.
struct Frames {
    frames: Vec<(Bytes, bool)>,
}

impl Frames {
    /// Applies a mid-stream fault: keeps everything up to the cut point, then the fault's frames.
    fn finish(
        self,
        fault: Fault,
        fault_frames: impl FnOnce(usize) -> Vec<Bytes>,
    ) -> (Vec<Bytes>, Tail) {
        let mut frames = self.frames;
        if let Some(after) = fault_cut(fault) {
            let mut seen = 0;
            let mut cut = frames.len();
            for (i, (_, delta)) in frames.iter().enumerate() {
                if *delta {
                    seen += 1;
                    if seen == after {
                        cut = i + 1;
                        break;
                    }
                }
            }
            frames.truncate(cut);
            let mut out: Vec<Bytes> = frames.into_iter().map(|(b, _)| b).collect();
            let next = out.len();
            out.extend(fault_frames(next));
            let tail = match fault {
                Fault::Cut => Tail::Abort,
                Fault::Stall => Tail::Stall,
                _ => Tail::End,
            };
            return (out, tail);
        }
        let mut out: Vec<Bytes> = frames.into_iter().map(|(b, _)| b).collect();
        if fault == Fault::NoDone {
            out.pop();
        }
        (out, Tail::End)
    }
}

// ---------------------------------------------------------------------------------------------
// Chat Completions

fn data_frame(json: &str) -> Bytes {
    let mut b = Vec::with_capacity(json.len() + 8);
    b.extend_from_slice(b"data: ");
    b.extend_from_slice(json.as_bytes());
    b.extend_from_slice(b"\n\n");
    Bytes::from(b)
}

const DONE: &[u8] = b"data: [DONE]\n\n";

fn chat_usage(s: &Script) -> Value {
    json!({
        "prompt_tokens": s.prompt_tokens,
        "completion_tokens": s.completion_tokens,
        "total_tokens": s.prompt_tokens + s.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": s.reasoning.len()},
    })
}

fn chat_finish_reason(s: &Script) -> &'static str {
    match (&s.output, s.length) {
        (_, true) => "length",
        (Output::Calls(_), false) => "tool_calls",
        _ => "stop",
    }
}

/// The frames of a streamed chat answer.
fn chat_frames(
    s: &Script,
    o: &Opts,
    model: &str,
    serial: u64,
    include_usage: bool,
) -> (Vec<Bytes>, Tail) {
    // Every chunk shares this head; only the choice and usage differ.
    let head = format!(
        "{{\"id\":\"chatcmpl-fake{serial}\",\"object\":\"chat.completion.chunk\",\"created\":{},\"model\":{},\"system_fingerprint\":\"fp_fake\",\"choices\":[",
        unix_now(),
        Value::String(model.to_string())
    );
    let chunk = |delta: &Value, finish: Option<&str>, usage: Option<&Value>| -> Bytes {
        let finish = finish
            .map(|f| format!("\"{f}\""))
            .unwrap_or_else(|| "null".into());
        let mut json = String::with_capacity(head.len() + 128);
        json.push_str(&head);
        json.push_str("{\"index\":0,\"delta\":");
        json.push_str(&delta.to_string());
        json.push_str(",\"logprobs\":null,\"finish_reason\":");
        json.push_str(&finish);
        json.push_str("}]");
        if let Some(u) = usage {
            json.push_str(",\"usage\":");
            json.push_str(&u.to_string());
        }
        json.push('}');
        data_frame(&json)
    };
    let mut f = Frames { frames: Vec::new() };
    f.frames.push((
        chunk(&json!({"role": "assistant", "content": ""}), None, None),
        false,
    ));
    for r in &s.reasoning {
        f.frames
            .push((chunk(&json!({"reasoning_content": r}), None, None), true));
    }
    match &s.output {
        Output::Text(_, pieces) => {
            for p in pieces {
                f.frames
                    .push((chunk(&json!({"content": p}), None, None), true));
            }
        }
        Output::Refusal(_, pieces) => {
            for p in pieces {
                f.frames
                    .push((chunk(&json!({"refusal": p}), None, None), true));
            }
        }
        Output::Calls(calls) => {
            for (i, c) in calls.iter().enumerate() {
                let index = if o.one_index { 0 } else { i };
                let first = json!({"tool_calls": [{"index": index, "id": format!("call_{i}"), "type": "function",
                    "function": {"name": c.name, "arguments": ""}}]});
                f.frames.push((chunk(&first, None, None), false));
                for p in &c.pieces {
                    let d = json!({"tool_calls": [{"index": index, "function": {"arguments": p}}]});
                    f.frames.push((chunk(&d, None, None), true));
                }
            }
        }
    }
    let usage = chat_usage(s);
    let finish = chat_finish_reason(s);
    if o.usage_on_finish {
        f.frames
            .push((chunk(&json!({}), Some(finish), Some(&usage)), false));
    } else {
        f.frames
            .push((chunk(&json!({}), Some(finish), None), false));
        if include_usage {
            let mut json = head.clone();
            json.push_str("],\"usage\":");
            json.push_str(&usage.to_string());
            json.push('}');
            f.frames.push((data_frame(&json), false));
        }
    }
    f.frames.push((Bytes::from_static(DONE), false));
    f.finish(o.fault, |_| match o.fault {
        Fault::Malformed => vec![Bytes::from_static(b"data: {not json\n\n")],
        Fault::ErrorChunk => vec![
            data_frame(r#"{"error":{"message":"overloaded","code":503}}"#),
            Bytes::from_static(DONE),
        ],
        _ => Vec::new(),
    })
}

/// The non-streaming `chat.completion`.
fn chat_completion(s: &Script, model: &str, serial: u64) -> Value {
    let mut message = json!({"role": "assistant", "content": null, "refusal": null});
    match &s.output {
        Output::Text(t, _) => message["content"] = json!(t),
        Output::Refusal(t, _) => message["refusal"] = json!(t),
        Output::Calls(calls) => {
            message["tool_calls"] = Value::Array(
                calls
                    .iter()
                    .enumerate()
                    .map(|(i, c)| {
                        json!({"id": format!("call_{i}"), "type": "function",
                        "function": {"name": c.name, "arguments": c.arguments}})
                    })
                    .collect(),
            )
        }
    }
    if !s.reasoning.is_empty() {
        message["reasoning_content"] = json!(s.reasoning.concat());
    }
    json!({
        "id": format!("chatcmpl-fake{serial}"),
        "object": "chat.completion",
        "created": unix_now(),
        "model": model,
        "system_fingerprint": "fp_fake",
        "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": chat_finish_reason(s)}],
        "usage": chat_usage(s),
    })
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

// ---------------------------------------------------------------------------------------------
// Responses

/// One Responses event before framing: its JSON without `sequence_number`, and whether it is a delta.
struct Ev {
    json: Value,
    delta: bool,
}

fn ev(json: Value) -> Ev {
    Ev { json, delta: false }
}

fn delta_ev(json: Value) -> Ev {
    Ev { json, delta: true }
}

/// `event: TYPE\ndata: JSON\n\n` with the sequence number set.
fn event_frame(mut json: Value, seq: usize) -> Bytes {
    json["sequence_number"] = json!(seq);
    let kind = json
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("message")
        .to_string();
    let data = json.to_string();
    let mut b = Vec::with_capacity(kind.len() + data.len() + 16);
    b.extend_from_slice(b"event: ");
    b.extend_from_slice(kind.as_bytes());
    b.extend_from_slice(b"\ndata: ");
    b.extend_from_slice(data.as_bytes());
    b.extend_from_slice(b"\n\n");
    Bytes::from(b)
}

struct ResponsesBuilder {
    id: String,
    serial: u64,
    base: Value,
}

impl ResponsesBuilder {
    fn new(body: &Value, model: &str, serial: u64) -> Self {
        let id = format!("resp_fake{serial}");
        let get = |k: &str| body.get(k).cloned().unwrap_or(Value::Null);
        let base = json!({
            "id": id,
            "object": "response",
            "created_at": unix_now(),
            "status": "in_progress",
            "background": false,
            "completed_at": null,
            "error": null,
            "incomplete_details": null,
            "instructions": get("instructions"),
            "max_output_tokens": get("max_output_tokens"),
            "max_tool_calls": null,
            "model": model,
            "output": [],
            "parallel_tool_calls": body.get("parallel_tool_calls").cloned().unwrap_or(json!(true)),
            "previous_response_id": null,
            "reasoning": {"effort": body.pointer("/reasoning/effort").cloned().unwrap_or(Value::Null), "summary": null},
            "store": false,
            "temperature": body.get("temperature").cloned().unwrap_or(json!(1.0)),
            "text": body.get("text").cloned().unwrap_or(json!({"format": {"type": "text"}})),
            "tool_choice": body.get("tool_choice").cloned().unwrap_or(json!("auto")),
            "tools": body.get("tools").cloned().unwrap_or(json!([])),
            "top_p": body.get("top_p").cloned().unwrap_or(json!(1.0)),
            "truncation": "disabled",
            "usage": null,
            "user": get("user"),
            "metadata": {},
        });
        ResponsesBuilder { id, serial, base }
    }

    fn item_id(&self, prefix: &str, index: usize) -> String {
        format!("{prefix}_fake{}_{index}", self.serial)
    }

    /// Appends the output items' events to `evs`; returns the finished items.
    fn output_events(&self, s: &Script, evs: &mut Vec<Ev>) -> Vec<Value> {
        let status = if s.length { "incomplete" } else { "completed" };
        let mut output = Vec::new();
        if !s.reasoning.is_empty() {
            let at = output.len();
            let id = self.item_id("rs", at);
            evs.push(ev(json!({"type": "response.output_item.added", "output_index": at,
                "item": {"id": id, "type": "reasoning", "status": "in_progress", "summary": [], "content": []}})));
            evs.push(ev(
                json!({"type": "response.content_part.added", "item_id": id, "output_index": at,
                "content_index": 0, "part": {"type": "reasoning_text", "text": ""}}),
            ));
            for r in &s.reasoning {
                evs.push(delta_ev(json!({"type": "response.reasoning_text.delta", "item_id": id, "output_index": at,
                    "content_index": 0, "delta": r})));
            }
            let text = s.reasoning.concat();
            let part = json!({"type": "reasoning_text", "text": text});
            evs.push(ev(
                json!({"type": "response.reasoning_text.done", "item_id": id, "output_index": at,
                "content_index": 0, "text": text}),
            ));
            evs.push(ev(
                json!({"type": "response.content_part.done", "item_id": id, "output_index": at,
                "content_index": 0, "part": part}),
            ));
            let item = json!({"id": id, "type": "reasoning", "status": "completed", "summary": [], "content": [part]});
            evs.push(ev(
                json!({"type": "response.output_item.done", "output_index": at, "item": item}),
            ));
            output.push(item);
        }
        match &s.output {
            Output::Text(text, pieces) | Output::Refusal(text, pieces) => {
                let refusal = matches!(s.output, Output::Refusal(..));
                let at = output.len();
                let id = self.item_id("msg", at);
                evs.push(ev(json!({"type": "response.output_item.added", "output_index": at,
                    "item": {"id": id, "type": "message", "status": "in_progress", "role": "assistant", "content": []}})));
                let (empty, full) = if refusal {
                    (
                        json!({"type": "refusal", "refusal": ""}),
                        json!({"type": "refusal", "refusal": text}),
                    )
                } else {
                    (
                        json!({"type": "output_text", "text": "", "annotations": [], "logprobs": []}),
                        json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []}),
                    )
                };
                evs.push(ev(
                    json!({"type": "response.content_part.added", "item_id": id, "output_index": at,
                    "content_index": 0, "part": empty}),
                ));
                for p in pieces {
                    evs.push(delta_ev(if refusal {
                        json!({"type": "response.refusal.delta", "item_id": id, "output_index": at, "content_index": 0, "delta": p})
                    } else {
                        json!({"type": "response.output_text.delta", "item_id": id, "output_index": at, "content_index": 0,
                            "delta": p, "logprobs": []})
                    }));
                }
                evs.push(ev(if refusal {
                    json!({"type": "response.refusal.done", "item_id": id, "output_index": at, "content_index": 0, "refusal": text})
                } else {
                    json!({"type": "response.output_text.done", "item_id": id, "output_index": at, "content_index": 0,
                        "text": text, "logprobs": []})
                }));
                evs.push(ev(
                    json!({"type": "response.content_part.done", "item_id": id, "output_index": at,
                    "content_index": 0, "part": full}),
                ));
                let item = json!({"id": id, "type": "message", "status": status, "role": "assistant", "content": [full]});
                evs.push(ev(
                    json!({"type": "response.output_item.done", "output_index": at, "item": item}),
                ));
                output.push(item);
            }
            Output::Calls(calls) => {
                for (i, c) in calls.iter().enumerate() {
                    let at = output.len();
                    let call_id = format!("call_{i}");
                    if c.custom {
                        let id = self.item_id("ctc", at);
                        evs.push(ev(
                            json!({"type": "response.output_item.added", "output_index": at,
                            "item": {"id": id, "type": "custom_tool_call", "input": "",
                                "call_id": call_id, "name": c.name}}),
                        ));
                        for p in &c.pieces {
                            evs.push(delta_ev(
                                json!({"type": "response.custom_tool_call_input.delta", "item_id": id,
                                "output_index": at, "delta": p}),
                            ));
                        }
                        evs.push(ev(
                            json!({"type": "response.custom_tool_call_input.done", "item_id": id,
                            "output_index": at, "input": c.arguments}),
                        ));
                        let item = json!({"id": id, "type": "custom_tool_call", "input": c.arguments,
                            "call_id": call_id, "name": c.name});
                        evs.push(ev(json!({"type": "response.output_item.done", "output_index": at, "item": item})));
                        output.push(item);
                        continue;
                    }
                    let id = self.item_id("fc", at);
                    evs.push(ev(json!({"type": "response.output_item.added", "output_index": at,
                        "item": {"id": id, "type": "function_call", "status": "in_progress", "arguments": "",
                            "call_id": call_id, "name": c.name}})));
                    for p in &c.pieces {
                        evs.push(delta_ev(
                            json!({"type": "response.function_call_arguments.delta", "item_id": id,
                            "output_index": at, "delta": p}),
                        ));
                    }
                    evs.push(ev(
                        json!({"type": "response.function_call_arguments.done", "item_id": id,
                        "output_index": at, "name": c.name, "arguments": c.arguments}),
                    ));
                    let item = json!({"id": id, "type": "function_call", "status": status, "arguments": c.arguments,
                        "call_id": call_id, "name": c.name});
                    evs.push(ev(json!({"type": "response.output_item.done", "output_index": at, "item": item})));
                    output.push(item);
                }
            }
        }
        output
    }

    fn usage(s: &Script) -> Value {
        json!({
            "input_tokens": s.prompt_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": s.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": s.reasoning.len()},
            "total_tokens": s.prompt_tokens + s.completion_tokens,
        })
    }

    /// The final Response: completed, or incomplete with `max_output_tokens`.
    fn terminal(&self, s: &Script, output: Vec<Value>) -> Value {
        let mut r = self.base.clone();
        r["output"] = Value::Array(output);
        r["usage"] = Self::usage(s);
        if s.length {
            r["status"] = json!("incomplete");
            r["incomplete_details"] = json!({"reason": "max_output_tokens"});
        } else {
            r["status"] = json!("completed");
            r["completed_at"] = json!(unix_now());
        }
        r
    }
}

/// The frames of a streamed Responses answer.
fn responses_frames(
    s: &Script,
    o: &Opts,
    body: &Value,
    model: &str,
    serial: u64,
) -> (Vec<Bytes>, Tail) {
    let b = ResponsesBuilder::new(body, model, serial);
    let mut evs = vec![
        ev(json!({"type": "response.created", "response": b.base})),
        ev(json!({"type": "response.in_progress", "response": b.base})),
    ];
    let output = b.output_events(s, &mut evs);
    let terminal = b.terminal(s, output);
    let kind = if s.length {
        "response.incomplete"
    } else {
        "response.completed"
    };
    evs.push(ev(json!({"type": kind, "response": terminal})));
    let frames = Frames {
        frames: evs
            .into_iter()
            .enumerate()
            .map(|(i, e)| (event_frame(e.json, i), e.delta))
            .collect(),
    };
    let failed = |seq: usize| {
        let mut r = b.base.clone();
        r["status"] = json!("failed");
        r["error"] = json!({"code": "server_error", "message": "overloaded"});
        vec![
            event_frame(
                json!({"type": "error", "code": "server_error", "message": "overloaded", "param": null}),
                seq,
            ),
            event_frame(json!({"type": "response.failed", "response": r}), seq + 1),
        ]
    };
    frames.finish(o.fault, |seq| match o.fault {
        Fault::Malformed => vec![Bytes::from_static(
            b"event: response.output_text.delta\ndata: {not json\n\n",
        )],
        Fault::ErrorChunk => failed(seq),
        _ => Vec::new(),
    })
}

// ---------------------------------------------------------------------------------------------
// Replay of recorded transcripts

struct Replay {
    api: Api,
    frames: Vec<Bytes>,
}

async fn replay(state: &Arc<State>, api: Api, file: &str, opts: &Opts) -> Response<Body> {
    let cached = state
        .replays
        .lock()
        .expect("replays lock")
        .get(file)
        .cloned();
    let replay = match cached {
        Some(r) => r,
        None => match load_replay(&state.fixtures, file).await {
            Ok(r) => {
                let r = Arc::new(r);
                state
                    .replays
                    .lock()
                    .expect("replays lock")
                    .insert(file.to_string(), r.clone());
                r
            }
            Err((status, msg)) => {
                return error_response(
                    status,
                    &msg,
                    "invalid_request_error",
                    Some("model"),
                    Some("model_not_found"),
                );
            }
        },
    };
    if replay.api != api {
        let (what, route) = match replay.api {
            Api::Chat => ("a Chat Completions", "/v1/chat/completions"),
            Api::Responses => ("a Responses", "/v1/responses"),
        };
        return bad_request(&format!(
            "replay file '{file}' is {what} transcript: POST it to {route}"
        ));
    }
    sse_response(state, replay.frames.clone(), opts.delay, Tail::End)
}

async fn load_replay(dir: &Path, file: &str) -> Result<Replay, (StatusCode, String)> {
    let rel = Path::new(file);
    if file.is_empty() || rel.components().any(|c| !matches!(c, Component::Normal(_))) {
        return Err((
            StatusCode::BAD_REQUEST,
            format!("replay file '{file}' must be a relative path inside the fixtures"),
        ));
    }
    let bytes = tokio::fs::read(dir.join(rel)).await.map_err(|e| {
        (
            StatusCode::NOT_FOUND,
            format!("replay file '{file}' cannot be read: {e}"),
        )
    })?;
    let bad = |m: String| {
        (
            StatusCode::BAD_REQUEST,
            format!("replay file '{file}': {m}"),
        )
    };
    if file.ends_with(".sse") {
        let frames = split_sse(&bytes);
        let payloads: Vec<&[u8]> = frames.iter().flat_map(|f| data_lines(f)).collect();
        let api = detect_api(payloads.into_iter()).ok_or_else(|| bad("no JSON payload".into()))?;
        Ok(Replay { api, frames })
    } else if file.ends_with(".chunks.txt") {
        let text = std::str::from_utf8(&bytes).map_err(|e| bad(e.to_string()))?;
        let lines: Vec<&str> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        let api = detect_api(lines.iter().map(|l| l.as_bytes()))
            .ok_or_else(|| bad("no JSON payload".into()))?;
        let mut frames: Vec<Bytes> = match api {
            Api::Chat => lines.iter().map(|l| data_frame(l)).collect(),
            Api::Responses => lines
                .iter()
                .map(|l| {
                    let kind = serde_json::from_str::<Value>(l)
                        .ok()
                        .and_then(|v| v.get("type").and_then(Value::as_str).map(str::to_string));
                    match kind {
                        Some(k) => Bytes::from(format!("event: {k}\ndata: {l}\n\n")),
                        None => data_frame(l),
                    }
                })
                .collect(),
        };
        if api == Api::Chat {
            frames.push(Bytes::from_static(DONE));
        }
        Ok(Replay { api, frames })
    } else if file.ends_with(".json") {
        // A llama-stack recording: `response.body[*].__data__` are the chunks.
        let v: Value = serde_json::from_slice(&bytes).map_err(|e| bad(e.to_string()))?;
        let chunks = v
            .pointer("/response/body")
            .and_then(Value::as_array)
            .ok_or_else(|| bad("no response.body list".into()))?;
        let mut frames: Vec<Bytes> = chunks
            .iter()
            .filter_map(|c| c.get("__data__"))
            .map(|d| data_frame(&d.to_string()))
            .collect();
        frames.push(Bytes::from_static(DONE));
        Ok(Replay {
            api: Api::Chat,
            frames,
        })
    } else {
        Err(bad(
            "expected a .sse, .chunks.txt or llama-stack .json file".into(),
        ))
    }
}

/// Splits an SSE body into events, each with its trailing blank line (as recorded).
fn split_sse(bytes: &[u8]) -> Vec<Bytes> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i + 1 < bytes.len() {
        if bytes[i] == b'\n' && bytes[i + 1] == b'\n' {
            out.push(Bytes::copy_from_slice(&bytes[start..i + 2]));
            start = i + 2;
            i += 2;
        } else {
            i += 1;
        }
    }
    if start < bytes.len() {
        out.push(Bytes::copy_from_slice(&bytes[start..]));
    }
    out
}

fn data_lines(frame: &[u8]) -> Vec<&[u8]> {
    frame
        .split(|b| *b == b'\n')
        .filter_map(|l| l.strip_prefix(b"data:"))
        .map(|l| l.strip_prefix(b" ").unwrap_or(l))
        .collect()
}

/// Which API a transcript belongs to, from its first JSON payload.
fn detect_api<'a>(payloads: impl Iterator<Item = &'a [u8]>) -> Option<Api> {
    for p in payloads {
        let Ok(v) = serde_json::from_slice::<Value>(p) else {
            continue;
        };
        if v.get("type").and_then(Value::as_str).is_some() {
            return Some(Api::Responses);
        }
        if v.get("choices").is_some() || v.get("object").is_some() {
            return Some(Api::Chat);
        }
    }
    None
}
