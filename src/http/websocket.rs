//! WebSocket mode (SPEC §12): `GET /v1/responses` upgraded to a socket on which each
//! `response.create` frame runs a response as `POST /v1/responses` with `stream: true` would,
//! every event going out as one text frame holding exactly the JSON of its SSE `data:` line;
//! `response.steer` frames steer a running response of the connection (`steer`, SPEC §22).
//! This file: the upgrade, the reader, the lanes and their creates; `writer` writes the socket.
//!
//! Invariants:
//! - Per connection: the reader task (client frames, lifetime, shutdown), one task per lane
//!   running its responses, and the writer task (`writer`), the only one that writes to the
//!   socket, reading each run's log itself as a cursor.
//! - Responses of one lane (`stream_id`, or none) run one after another; lanes run side by side,
//!   and every event (and `error`) of a named lane carries its `stream_id`. A steered response's
//!   successor runs next on its lane, before the lane's next create.
//! - Every client frame is answered: with its response's events, with steering events, or with
//!   an `error` frame (the SDKs' nested shape), after which the connection serves the next one.
//! - The connection remembers its last `store: false` responses (bounded) from their start, so a
//!   later create may chain to them with `previous_response_id` (stored ones chain from the
//!   store); one naming a response still running waits for its end.
//! - Upgraded connections are tracked by the app (`App::sockets`): a graceful shutdown waits for
//!   them (their runs' terminal events, then a 1001 close), as it waits for HTTP connections.
//! - The client gone (closed, dropped, or not reading for the stall timeout): its runs that are
//!   not `background` are cancelled, as an SSE client's are. At most [`Limits::websocket_lifetime`]
//!   after the upgrade, an `error` frame and a close frame say the connection is over.
//!
//! [`Limits::websocket_lifetime`]: crate::config::Limits

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures::StreamExt;
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode, header};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role, WebSocketConfig};
use tokio_tungstenite::tungstenite::{Message, Utf8Bytes};
use tokio_util::sync::CancellationToken;

use super::{Access, ApiError, Body, ErrorKind, full};
use crate::api::FieldError;
use crate::api::request::{InputItem, parse_create_value};
use crate::app::App;
use crate::run;
use steer::{Create, Steers, Target};
use writer::Out;

mod steer;
mod writer;

/// Responses a connection remembers for `previous_response_id`.
const REMEMBERED: usize = 16;
/// Bytes read from the socket at a time (tungstenite keeps a buffer this large per connection
/// and zeroes it on each read attempt: small, as client frames are few).
const READ_CHUNK: usize = 4096;
/// Creates that may wait in one lane.
const LANE_QUEUE: usize = 16;
/// Named lanes one connection may open.
const MAX_LANES: usize = 32;
const LIFETIME_MESSAGE: &str = "Responses websocket connection limit reached (60 minutes). Create a new websocket connection to continue.";

/// Whether `req` asks for a WebSocket upgrade.
pub fn is_upgrade<B>(req: &Request<B>) -> bool {
    req.headers()
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"))
}

/// Answers the upgrade (101) and serves the socket in a task of its own once hyper hands it over.
pub fn accept(
    app: &App,
    mut req: Request<Incoming>,
    access: Access,
) -> Result<Response<Body>, ApiError> {
    let bad = |message: &str| ApiError::new(ErrorKind::BadUpgrade, message);
    if req.version() != hyper::Version::HTTP_11 {
        return Err(bad("WebSocket mode needs an HTTP/1.1 upgrade."));
    }
    let version = req.headers().get(header::SEC_WEBSOCKET_VERSION);
    if version.is_none_or(|v| v.as_bytes() != b"13") {
        return Err(bad("Sec-WebSocket-Version must be 13."));
    }
    let Some(key) = req.headers().get(header::SEC_WEBSOCKET_KEY) else {
        return Err(bad("The upgrade has no Sec-WebSocket-Key."));
    };
    let accept_key = tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes());
    let bearer = super::responses::client_bearer(app, &req);
    let upgrade = hyper::upgrade::on(&mut req);
    let sockets = app.sockets().clone();
    let app = app.clone();
    let connection = async move {
        match upgrade.await {
            Ok(io) => {
                let config = WebSocketConfig::default()
                    .read_buffer_size(READ_CHUNK)
                    .write_buffer_size(64 * 1024)
                    .max_message_size(Some(app.config().max_body_bytes))
                    .max_frame_size(Some(app.config().max_body_bytes));
                let ws =
                    WebSocketStream::from_raw_socket(TokioIo::new(io), Role::Server, Some(config))
                        .await;
                serve(app, ws, access, bearer).await;
            }
            Err(e) => tracing::warn!(error = %e, "the WebSocket upgrade did not complete"),
        }
    };
    // The connection's log lines (and its runs') carry the upgrade's request id.
    sockets.spawn(tracing::Instrument::in_current_span(connection));
    Ok(Response::builder()
        .status(StatusCode::SWITCHING_PROTOCOLS)
        .header(header::UPGRADE, "websocket")
        .header(header::CONNECTION, "Upgrade")
        .header(header::SEC_WEBSOCKET_ACCEPT, accept_key)
        .body(full(Bytes::new()))
        .expect("valid response"))
}

/// What one connection shares between its reader, its lanes and its writer.
struct Conn {
    app: App,
    access: Access,
    bearer: Option<String>,
    out: mpsc::UnboundedSender<Out>,
    /// Cancelled when the client is gone or the connection's life is over: lanes stop, their
    /// runs cancelled unless `background`.
    over: CancellationToken,
    remembered: Mutex<Remembered>,
    /// The responses steers may name, and steering input waiting for a continuation.
    steers: Mutex<Steers>,
    /// Responses started on this connection.
    started: std::sync::atomic::AtomicU64,
}

/// The connection's last `store: false` responses, by id (oldest forgotten first), each
/// remembered from its start: a create on another lane may name one the moment it ends.
#[derive(Default)]
struct Remembered {
    order: VecDeque<String>,
    by_id: HashMap<String, Earlier>,
}

/// A remembered response: while it runs, what its model saw and its log; once it has ended, only
/// the chain it stands for (its log, every event of it, is not kept: measured, 16 logs per
/// socket were most of a busy socket's memory).
#[derive(Clone)]
enum Earlier {
    Running {
        history: Arc<Vec<InputItem>>,
        log: Arc<crate::eventlog::log::RunLog>,
    },
    /// Its chain; `None` when it did not end `completed` or `incomplete` (nothing to chain to).
    Ended(Option<Arc<Vec<InputItem>>>),
}

impl Earlier {
    /// The chain of a response that has ended: its history, then its output.
    fn chain(
        history: &[InputItem],
        log: &crate::eventlog::log::RunLog,
    ) -> Option<Arc<Vec<InputItem>>> {
        use crate::api::ResponseStatus::{Completed, Incomplete};
        let response = log.snapshot()?;
        if !matches!(response.status, Completed | Incomplete) {
            return None;
        }
        let mut chain = history.to_vec();
        chain.extend(
            response
                .output
                .iter()
                .filter_map(crate::api::history::output_as_input),
        );
        Some(Arc::new(chain))
    }
}

impl Remembered {
    fn insert(&mut self, id: String, earlier: Earlier) {
        if self.by_id.insert(id.clone(), earlier).is_none() {
            self.order.push_back(id);
        }
        while self.order.len() > REMEMBERED {
            if let Some(old) = self.order.pop_front() {
                self.by_id.remove(&old);
            }
        }
    }
}

pub(super) type Socket = WebSocketStream<TokioIo<hyper::upgrade::Upgraded>>;

/// The connection's reader: client frames to their lanes, the lifetime, the relay's shutdown.
/// The writer is a task of its own (so the reader is polled only when the client sends, and
/// the writer only when there is something to send).
async fn serve(app: App, ws: Socket, access: Access, bearer: Option<String>) {
    let (sink, mut incoming) = ws.split();
    let (out, queue) = mpsc::unbounded_channel();
    // The client gone (it closed, dropped, or stopped reading): the writer stops at once.
    let gone = CancellationToken::new();
    let stall = app.config().limits.client_stall;
    let lifetime = app.config().limits.websocket_lifetime;
    // Not instrumented (a span entered on every poll is a cost per event an SSE body does not
    // pay): the writer enters the request's span only to log.
    let span = tracing::Span::current();
    let writer = tokio::spawn(writer::write_frames(sink, queue, stall, gone.clone(), span));
    let conn = Arc::new(Conn {
        app: app.clone(),
        access,
        bearer,
        out,
        over: gone.child_token(),
        remembered: Mutex::new(Remembered::default()),
        steers: Mutex::new(Steers::default()),
        started: Default::default(),
    });
    tracing::info!("websocket connection opened");
    let mut lanes: HashMap<Option<String>, mpsc::Sender<Value>> = HashMap::new();
    let mut tasks = tokio::task::JoinSet::new();
    let end = tokio::time::sleep(lifetime);
    let shutdown = app.shutdown_token().cancelled();
    tokio::pin!(end, shutdown);
    let writer_gone = gone.cancelled();
    tokio::pin!(writer_gone);
    let close = loop {
        tokio::select! {
            biased;
            _ = &mut writer_gone => break None,
            // What runs is sent to its end (the shutdown ends the runs), then the close.
            _ = &mut shutdown => break Some((CloseCode::Away, "the relay is shutting down")),
            _ = &mut end => {
                conn.send_error(None, &lifetime_error());
                conn.over.cancel();
                break Some((CloseCode::Normal, "connection limit reached (60 minutes)"));
            }
            frame = incoming.next() => match frame {
                Some(Ok(Message::Text(text))) => dispatch(&conn, text, &mut lanes, &mut tasks),
                Some(Ok(Message::Binary(_))) => {
                    let e = invalid(None, "Binary frames are not supported: send client events as JSON text frames.");
                    conn.send_error(None, &e);
                }
                Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_))) => {}
                // A frame the relay will not read: said, then closed (1009 too large, 1007 not
                // UTF-8), as the client's runs are cancelled.
                Some(Err(tokio_tungstenite::tungstenite::Error::Capacity(e))) => {
                    let limit = app.config().max_body_bytes;
                    let e = invalid(None, &format!("The frame is too large ({e}); at most {limit} bytes."));
                    conn.send_error(None, &e);
                    conn.over.cancel();
                    break Some((CloseCode::Size, "frame too large"));
                }
                Some(Err(tokio_tungstenite::tungstenite::Error::Utf8(_))) => {
                    conn.over.cancel();
                    break Some((CloseCode::Invalid, "a text frame was not UTF-8"));
                }
                Some(Ok(Message::Close(_))) | Some(Err(_)) | None => {
                    gone.cancel();
                    break None;
                }
            },
        }
    };
    // No more creates: each lane ends with what it runs (cancelled unless `background` when the
    // connection is over), then the close frame goes last.
    drop(lanes);
    while tasks.join_next().await.is_some() {}
    if let Some((code, reason)) = close {
        let frame = CloseFrame {
            code,
            reason: reason.into(),
        };
        let _ = conn.out.send(Out::Frame(Message::Close(Some(frame))));
    }
    let started = conn.started.load(std::sync::atomic::Ordering::Relaxed);
    drop(conn);
    let _ = writer.await;
    tracing::info!(responses = started, "websocket connection closed");
}

/// A client frame: a JSON object.
fn client_event(text: &Utf8Bytes) -> Result<Value, ApiError> {
    match serde_json::from_str(text.as_str()) {
        Ok(v @ Value::Object(_)) => Ok(v),
        Ok(_) => Err(invalid(None, "A client event must be a JSON object.")),
        Err(e) => Err(invalid(None, &format!("The frame is not valid JSON: {e}"))),
    }
}

/// The lane a create's `stream_id` names (`None`: the default one).
fn lane_of(value: &Value) -> Result<Option<String>, ApiError> {
    let lane = match value.get("stream_id") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if valid_stream_id(s) => Some(s.clone()),
        Some(_) => {
            return Err(ApiError::new(
                ErrorKind::InvalidStreamId,
                "Invalid 'stream_id': 1 to 256 letters, digits, '_', '.' or '-'.",
            )
            .at("stream_id"));
        }
    };
    Ok(lane)
}

/// Whether `value` is a `response.create`; any other client event (a steer among them) is
/// answered here (on `lane`).
fn is_create(conn: &Conn, value: &Value, lane: Option<&str>) -> bool {
    match value.get("type").and_then(Value::as_str) {
        Some("response.create") => true,
        Some("response.steer") => {
            steer::steer(conn, value);
            false
        }
        Some(other) => {
            let e = ApiError::new(
                ErrorKind::UnsupportedClientEvent,
                format!(
                    "The client event '{other}' is not supported by this relay; send 'response.create'."
                ),
            )
            .at("type");
            conn.send_error(lane, &e);
            false
        }
        None => {
            let e = ApiError::invalid(FieldError::missing("type"));
            conn.send_error(lane, &e);
            false
        }
    }
}

/// Routes one client frame: a `response.create` to its lane, anything else answered at once.
fn dispatch(
    conn: &Arc<Conn>,
    text: Utf8Bytes,
    lanes: &mut HashMap<Option<String>, mpsc::Sender<Value>>,
    tasks: &mut tokio::task::JoinSet<()>,
) {
    let value = match client_event(&text) {
        Ok(event) => event,
        Err(e) => return conn.send_error(None, &e),
    };
    // A steer's lane is its response's: its `stream_id` is refused by the steer itself.
    let lane = match value.get("type").and_then(Value::as_str) {
        Some("response.steer") => None,
        _ => match lane_of(&value) {
            Ok(lane) => lane,
            Err(e) => return conn.send_error(None, &e),
        },
    };
    if !is_create(conn, &value, lane.as_deref()) {
        return;
    }
    if !lanes.contains_key(&lane) {
        if lane.is_some() && lanes.keys().filter(|k| k.is_some()).count() >= MAX_LANES {
            let e = ApiError::new(
                ErrorKind::StreamLimit,
                format!("A connection may open at most {MAX_LANES} stream ids."),
            )
            .at("stream_id");
            return conn.send_error(lane.as_deref(), &e);
        }
        let (tx, rx) = mpsc::channel(LANE_QUEUE);
        tasks.spawn(tracing::Instrument::in_current_span(run_lane(
            conn.clone(),
            lane.clone(),
            rx,
        )));
        lanes.insert(lane.clone(), tx);
    }
    if lanes[&lane].try_send(value).is_err() {
        let e = ApiError::new(
            ErrorKind::StreamLimit,
            format!(
                "At most {LANE_QUEUE} responses may wait in one stream id; send this one when an earlier one has ended."
            ),
        )
        .at("stream_id");
        conn.send_error(lane.as_deref(), &e);
    }
}

/// A lane: its creates, one response after another.
async fn run_lane(conn: Arc<Conn>, lane: Option<String>, mut creates: mpsc::Receiver<Value>) {
    while let Some(create) = creates.recv().await {
        if conn.over.is_cancelled() {
            // Answered still (a client past the lifetime reads it; a gone one does not).
            conn.send_error(lane.as_deref(), &lifetime_error());
            continue;
        }
        // A response steered starts its successor on this lane, and so on.
        let mut next = Some(Create {
            body: create,
            commits: None,
        });
        while let Some(create) = next.take() {
            next = conn.create(create, lane.as_deref()).await;
        }
    }
}

impl Conn {
    /// Runs one create of the lane: the client's (with the steering input waiting for its
    /// continuation, if any), or a successor's. A client's create that fails before its first
    /// event is answered with an `error` frame; input it was to commit is handed back. Returns
    /// the successor to start when the response ended with steering input queued.
    async fn create(&self, create: Create, lane: Option<&str>) -> Option<Create> {
        let Create { mut body, commits } = create;
        let commits = match commits {
            Some(commits) => Some(commits),
            None => self.take_waiting(&mut body, lane),
        };
        let automatic = commits.as_ref().is_some_and(|c| c.automatic());
        match self.respond(body, lane).await {
            Ok(next) => next,
            Err(e) => {
                if !automatic {
                    self.send_error(lane, &e);
                }
                if let Some(commits) = commits {
                    self.commit_failed(commits, &e.body().message);
                }
                None
            }
        }
    }

    /// Runs one `response.create`, sending its events; an error before the first event is
    /// returned (for an `error` frame). Returns the successor's create when the response ended
    /// with steering input queued.
    async fn respond(
        &self,
        mut create: Value,
        lane: Option<&str>,
    ) -> Result<Option<Create>, ApiError> {
        let app = &self.app;
        if app.shutdown_token().is_cancelled() {
            return Err(ApiError::new(
                ErrorKind::ShuttingDown,
                "The relay is shutting down.",
            ));
        }
        let body = create.as_object_mut().expect("dispatched objects only");
        body.remove("type");
        body.remove("stream_id");
        // Implicit over a socket: every response is streamed.
        match body.remove("stream") {
            None | Some(Value::Bool(_)) | Some(Value::Null) => {}
            Some(_) => {
                return Err(invalid(
                    Some("stream"),
                    "Invalid 'stream': expected a boolean.",
                ));
            }
        }
        let generate = match body.remove("generate") {
            None | Some(Value::Null) | Some(Value::Bool(true)) => true,
            Some(Value::Bool(false)) => false,
            Some(_) => {
                return Err(invalid(
                    Some("generate"),
                    "Invalid 'generate': expected a boolean.",
                ));
            }
        };
        // A successor inherits the settings as the client sent them.
        let settings = create.clone();
        let request = parse_create_value(create)?;
        let (mut request, mut relay, tenant) = self.access.clone().admit(request)?;
        request.stream = true;
        relay.generate = generate;
        // Conversation-bound and automatically compacting responses are not steered (as OpenAI).
        let steerable = request.conversation.is_none() && request.compact_threshold.is_none();
        let steering = steerable.then(|| Arc::new(run::Steering::new()));
        relay.steering = steering.clone();
        let model = request.model.clone();
        if let Some(prev) = &request.previous_response_id {
            relay.prior_history = self.chain_of(prev).await;
        }
        let relay_permit = app.run_permit().ok_or_else(ApiError::busy)?;
        let permit = run::Permit {
            relay: relay_permit,
            key: self.access.admit_run(app).await?,
        };
        let prepared = tokio::select! {
            prepared = run::prepare(app, request, relay, self.bearer.clone(), tenant) => prepared?,
            // Nobody to answer: nothing is started.
            _ = self.over.cancelled() => return Ok(None),
        };
        let history = (!prepared.request.store).then(|| Arc::new(prepared.history.clone()));
        let handle = run::start(app, prepared, permit);
        // A steer may name it from its `response.created` on.
        let target = Target {
            lane: lane.map(str::to_string),
            model,
            steering: steering.clone(),
        };
        (self.steers.lock().expect("not poisoned")).register(handle.id.clone(), target);
        // A stored response chains from the store; only `store: false` ones need remembering.
        if let Some(history) = &history {
            let earlier = Earlier::Running {
                history: history.clone(),
                log: handle.log.clone(),
            };
            let mut remembered = self.remembered.lock().expect("not poisoned");
            remembered.insert(handle.id.clone(), earlier);
        }
        self.started
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let (done, sent) = tokio::sync::oneshot::channel();
        let run = Out::Run {
            log: handle.log.clone(),
            lane: lane.map(str::to_string),
            done,
        };
        let delivered = self.out.send(run).is_ok()
            && tokio::select! {
                sent = sent => sent.is_ok(),
                _ = self.over.cancelled() => false,
            };
        if !delivered {
            // As for an SSE client that went away: a background run goes on without it, and
            // unsteered (its queued input is dropped: no successor would start).
            if let Some(steering) = &steering {
                steering.take();
            }
            if !handle.background {
                handle.cancel.cancel();
            }
            return Ok(None);
        }
        if let Some(history) = history {
            let ended = Earlier::Ended(Earlier::chain(&history, &handle.log));
            let mut remembered = self.remembered.lock().expect("not poisoned");
            if let Some(entry) = remembered.by_id.get_mut(&handle.id) {
                *entry = ended;
            }
        }
        let queued = steering.map(|s| s.take()).unwrap_or_default();
        if queued.is_empty() {
            return Ok(None);
        }
        Ok(self.after_steered(&handle, settings, queued, lane))
    }

    /// The chain a remembered response stands for (its history, then its output), once it has
    /// ended (a create naming one still running waits for it); `None` when the connection does
    /// not remember `id` or it did not end `completed` or `incomplete`.
    async fn chain_of(&self, id: &str) -> Option<Arc<Vec<InputItem>>> {
        let earlier = self
            .remembered
            .lock()
            .expect("not poisoned")
            .by_id
            .get(id)
            .cloned()?;
        match earlier {
            Earlier::Ended(chain) => chain,
            Earlier::Running { history, log } => {
                tokio::select! {
                    _ = log.wait_finished() => {}
                    _ = self.over.cancelled() => return None,
                }
                Earlier::chain(&history, &log)
            }
        }
    }

    /// Sends `e` as an `error` frame (logged: a rejection always is).
    fn send_error(&self, lane: Option<&str>, e: &ApiError) {
        let body = e.body();
        tracing::info!(
            status = e.status().as_u16(),
            code = body.code.as_deref().unwrap_or(""),
            param = body.param.as_deref().unwrap_or(""),
            error = %body.message,
            "websocket error frame"
        );
        let mut frame = json!({"type": "error", "status": e.status().as_u16(), "error": body});
        if let Some(lane) = lane {
            frame["stream_id"] = Value::from(lane);
        }
        let text = Utf8Bytes::from(frame.to_string());
        let _ = self.out.send(Out::Frame(Message::Text(text)));
    }
}

fn valid_stream_id(s: &str) -> bool {
    (1..=256).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// A 400 with no code, naming `param` if any.
fn invalid(param: Option<&str>, message: &str) -> ApiError {
    ApiError::invalid(FieldError::new(param.unwrap_or_default(), message))
}

fn lifetime_error() -> ApiError {
    ApiError::new(ErrorKind::ConnectionLimit, LIFETIME_MESSAGE)
}
