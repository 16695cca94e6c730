//! The upstream model: an OpenAI-compatible Chat Completions or stateless Responses endpoint,
//! Anthropic's Messages API or Google's Gemini API, driven turn by turn and always streamed. Every adapter produces the
//! same [`ModelEvent`]s.
//!
//! Invariant: nothing here knows about Responses events, output indexes or the store; a turn is
//! a request in and a stream of model events out. Failures before the stream opens are
//! [`UpstreamError`]s the HTTP layer maps to a status; failures inside it end the run.

pub mod anthropic;
pub mod chat;
pub mod gemini;
pub mod responses;
mod routes;
pub mod sse;
mod wire;

pub use routes::Upstreams;

use std::pin::Pin;
use std::time::Duration;

use futures::Stream;
use serde_json::Value;

use crate::api::Usage;
use crate::api::request::{InputItem, TextFormat};

/// One thing the model did in a turn.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelEvent {
    Text(String),
    Refusal(String),
    Reasoning(String),
    /// Summarized reasoning (Anthropic's thinking text): a reasoning item's `summary`.
    ReasoningSummary(String),
    /// A tool-call fragment: `index` identifies the call within the turn; `id` and `name` come
    /// with the first fragment, `arguments` is the next piece of the JSON arguments.
    ToolCall {
        index: u32,
        id: Option<String>,
        name: Option<String>,
        arguments: String,
    },
    Usage(Usage),
    Finish(FinishReason),
    /// The model server's id of its answer (a chunk's `id`, a Responses stream's `response.id`),
    /// given once per turn, when first seen. Only the turn's trace span reads it
    /// (`gen_ai.response.id`).
    ResponseId(String),
    /// The `phase` of the assistant message the model opens next (a Responses upstream's
    /// `output_item.added` of a `message`; `None` when it gives none).
    MessagePhase(Option<crate::api::response::Phase>),
    /// A reasoning block the model server signed and needs back verbatim in a later turn
    /// (Anthropic's `thinking` with its `signature`, or `redacted_thinking`, given when the
    /// block ends; a Gemini part's `thoughtSignature`, tagged `"gemini"` with what it was on). Its text, if any, came before as [`ModelEvent::Reasoning`]; the run keeps the
    /// block sealed in the reasoning item's `encrypted_content`, and a later turn gets it back
    /// in [`TurnRequest::signed_reasoning`].
    SignedReasoning(Value),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    Stop,
    Length,
    ToolCalls,
    ContentFilter,
}

impl FinishReason {
    pub fn parse(s: &str) -> FinishReason {
        match s {
            "length" | "max_tokens" | "max_output_tokens" => FinishReason::Length,
            "tool_calls" | "function_call" => FinishReason::ToolCalls,
            "content_filter" => FinishReason::ContentFilter,
            _ => FinishReason::Stop,
        }
    }

    /// The reason as OpenAI's Chat Completions names it.
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::ToolCalls => "tool_calls",
            FinishReason::ContentFilter => "content_filter",
        }
    }
}

/// A function the model may call, as the upstream sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct FunctionDef {
    pub name: String,
    pub description: String,
    /// The JSON Schema, shared with the tool list it came from (turns never copy it).
    pub parameters: std::sync::Arc<Value>,
    pub strict: Option<bool>,
    /// A `custom` tool: a Responses upstream gets it as is (its own description and `format`);
    /// a chat upstream gets the function above (one string argument, `input`).
    pub custom: Option<std::sync::Arc<CustomSpec>>,
}

/// A `custom` tool as a Responses upstream takes it.
#[derive(Debug, Clone, PartialEq)]
pub struct CustomSpec {
    pub description: Option<String>,
    pub format: Option<Value>,
}

/// A turn's request body: its small fields as JSON values, and its tools written straight from
/// their shared schemas (a turn never copies a schema into a second JSON tree: with a large MCP
/// catalog, that copy and its drop were most of the cost of opening a turn).
pub struct Body<T> {
    pub fields: serde_json::Map<String, Value>,
    pub tools: Vec<T>,
}

impl<T: serde::Serialize> serde::Serialize for Body<T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let tools = !self.tools.is_empty();
        let mut map = s.serialize_map(Some(self.fields.len() + usize::from(tools)))?;
        for (k, v) in &self.fields {
            map.serialize_entry(k, v)?;
        }
        if tools {
            map.serialize_entry("tools", &self.tools)?;
        }
        map.end()
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum TurnToolChoice {
    Auto,
    None,
    Required,
    Function(String),
}

/// Everything one model turn needs.
#[derive(Debug, Clone)]
pub struct TurnRequest {
    pub model: String,
    pub instructions: Option<String>,
    pub items: Vec<InputItem>,
    pub tools: Vec<FunctionDef>,
    pub tool_choice: TurnToolChoice,
    pub parallel_tool_calls: bool,
    pub max_output_tokens: Option<u64>,
    pub temperature: Option<f64>,
    pub top_p: Option<f64>,
    pub text_format: Option<TextFormat>,
    pub reasoning_effort: Option<String>,
    pub user: Option<String>,
    /// The client's own bearer token, forwarded when no upstream key is configured.
    pub client_bearer: Option<String>,
    /// Options only a Responses upstream has a place for (a chat upstream does not get them).
    pub responses_only: ResponsesOptions,
    /// The signed reasoning blocks ([`ModelEvent::SignedReasoning`]) of the reasoning items of
    /// `items`, by the item's index, opened from their seals: an Anthropic or Gemini upstream
    /// gets them back verbatim where the items stand (filled only for a turn that goes to one,
    /// with only that kind's blocks).
    pub signed_reasoning: std::collections::HashMap<usize, Vec<Value>>,
}

/// Request fields a Responses upstream takes as they are; Chat Completions has no equivalent.
#[derive(Debug, Clone, Default)]
pub struct ResponsesOptions {
    pub reasoning_summary: Option<String>,
    pub reasoning_context: Option<String>,
    pub reasoning_mode: Option<String>,
    pub verbosity: Option<String>,
    /// `auto` only (`disabled` is what every upstream does).
    pub truncation: Option<String>,
    pub prompt_cache_key: Option<String>,
    pub prompt_cache_retention: Option<String>,
    pub prompt_cache_options: Option<serde_json::Map<String, serde_json::Value>>,
    pub safety_identifier: Option<String>,
}

impl TurnRequest {
    /// Puts the sampling fields both wire formats share (same names in both) into `body`, and
    /// `max_output_tokens` under the format's own name for it, at least `least` (a later turn
    /// of a run gets only what earlier turns left, which may be below a format's minimum).
    pub(crate) fn insert_sampling(
        &self,
        body: &mut serde_json::Map<String, Value>,
        max_tokens_key: &str,
        least: u64,
    ) {
        let mut put = |k: &str, v: Option<Value>| {
            if let Some(v) = v {
                body.insert(k.to_string(), v);
            }
        };
        put(
            max_tokens_key,
            self.max_output_tokens.map(|n| Value::from(n.max(least))),
        );
        put("temperature", self.temperature.map(Value::from));
        put("top_p", self.top_p.map(Value::from));
        put("user", self.user.clone().map(Value::from));
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum UpstreamError {
    #[error("could not connect to the upstream model server: {0}")]
    Connect(String),
    #[error("the upstream model server timed out: {0}")]
    Timeout(String),
    #[error("the upstream model server answered HTTP {status}: {message}")]
    Status {
        status: u16,
        message: String,
        body: Option<Value>,
        retry_after: Option<Duration>,
    },
    #[error("the upstream model server sent an invalid stream: {0}")]
    Protocol(String),
    #[error("the upstream model stream ended early: {0}")]
    Cut(String),
}

impl UpstreamError {
    /// A short, bounded name of the failure (a trace span's `error.type`).
    pub fn kind(&self) -> String {
        match self {
            UpstreamError::Connect(_) => "connect_error".into(),
            UpstreamError::Timeout(_) => "timeout".into(),
            UpstreamError::Status { status, .. } => status.to_string(),
            UpstreamError::Protocol(_) => "protocol_error".into(),
            UpstreamError::Cut(_) => "stream_cut".into(),
        }
    }
}

pub type ModelStream = Pin<Box<dyn Stream<Item = Result<ModelEvent, UpstreamError>> + Send>>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpstreamApi {
    Chat,
    Responses,
    /// Anthropic's Messages API (`POST /messages`, `x-api-key`, `anthropic-version`).
    Anthropic,
    /// Google's Gemini API (`POST /models/{model}:streamGenerateContent?alt=sse`,
    /// `x-goog-api-key`).
    Gemini,
}

#[derive(Debug, Clone)]
pub struct Timeouts {
    /// Retries of a request that failed before its first byte (429, 5xx, connect failure).
    pub retries: u32,
    pub connect: Duration,
    /// Until the response headers arrive.
    pub first_byte: Duration,
    /// Between two chunks of a streaming answer.
    pub idle: Duration,
}

/// The configured upstream. Cheap to clone.
#[derive(Clone)]
pub struct Upstream {
    pub api: UpstreamApi,
    base: String,
    key: Option<String>,
    /// Tells this upstream's HTTP clients apart in each thread's [`CLIENTS`].
    id: u64,
    timeouts: Timeouts,
}

thread_local! {
    /// Each thread's HTTP client per upstream: a connection's task then runs on the thread whose
    /// runs read it (on a serving lane, the lane itself), and no event crosses threads.
    static CLIENTS: std::cell::RefCell<std::collections::HashMap<u64, reqwest::Client>> =
        std::cell::RefCell::default();
}

impl Upstream {
    pub fn new(api: UpstreamApi, base: &str, key: Option<String>, timeouts: Timeouts) -> Self {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        Upstream {
            api,
            base: base.trim_end_matches('/').to_string(),
            key,
            id: NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            timeouts,
        }
    }

    /// This thread's HTTP client to the upstream (built on first use in the thread).
    fn http(&self) -> reqwest::Client {
        CLIENTS.with(|clients| {
            clients
                .borrow_mut()
                .entry(self.id)
                .or_insert_with(|| {
                    reqwest::Client::builder()
                        .connect_timeout(self.timeouts.connect)
                        .pool_idle_timeout(Duration::from_secs(60))
                        .tcp_nodelay(true)
                        .build()
                        .expect("reqwest client builds")
                })
                .clone()
        })
    }

    pub fn base_url(&self) -> &str {
        &self.base
    }

    fn bearer<'a>(&'a self, client: Option<&'a str>) -> Option<&'a str> {
        self.key.as_deref().or(client)
    }

    /// Starts one model turn, sent as `model` (a routed turn drops its upstream's prefix);
    /// returns once the upstream answered with a streaming 200.
    pub async fn open(&self, req: &TurnRequest, model: &str) -> Result<ModelStream, UpstreamError> {
        let model = ("model".to_string(), Value::from(model));
        let (path, body) = match self.api {
            UpstreamApi::Chat => ("/chat/completions".to_string(), {
                let mut b = chat::request_body(req);
                b.fields.insert(model.0, model.1);
                serde_json::to_vec(&b)
            }),
            UpstreamApi::Responses => ("/responses".to_string(), {
                let mut b = responses::request_body(req);
                b.fields.insert(model.0, model.1);
                serde_json::to_vec(&b)
            }),
            UpstreamApi::Anthropic => ("/messages".to_string(), {
                let mut b = anthropic::request_body(req);
                b.fields.insert(model.0, model.1);
                serde_json::to_vec(&b)
            }),
            // The model goes in the path, not the body.
            UpstreamApi::Gemini => (
                gemini::path(model.1.as_str().unwrap_or_default()),
                serde_json::to_vec(&gemini::request_body(req)),
            ),
        };
        let body = bytes::Bytes::from(body.expect("request bodies always serialize"));
        let answer = self.post(&path, body, req.client_bearer.as_deref()).await?;
        let (body, idle) = (answer.body, self.timeouts.idle);
        Ok(match self.api {
            UpstreamApi::Chat => chat::events(body, idle),
            UpstreamApi::Responses => responses::events(body, idle),
            UpstreamApi::Anthropic => anthropic::events(body, idle),
            UpstreamApi::Gemini => gemini::events(body, idle),
        })
    }

    /// The prompt tokens of `req` (sent as `model`) from the model server's own count endpoint,
    /// where its API has one (Anthropic's `POST /messages/count_tokens`, Gemini's
    /// `models/{model}:countTokens`; neither generates anything); `None` for the others.
    pub async fn count_tokens(
        &self,
        req: &TurnRequest,
        model: &str,
    ) -> Result<Option<u64>, UpstreamError> {
        let (path, body, field) = match self.api {
            UpstreamApi::Anthropic => {
                let mut b = anthropic::count_body(req);
                b.fields.insert("model".into(), Value::from(model));
                let body = serde_json::to_vec(&b).expect("request bodies always serialize");
                ("/messages/count_tokens".to_string(), body, "input_tokens")
            }
            UpstreamApi::Gemini => {
                let body = gemini::count_body(req, model).to_string().into_bytes();
                (gemini::count_path(model), body, "totalTokens")
            }
            UpstreamApi::Chat | UpstreamApi::Responses => return Ok(None),
        };
        let answer = self
            .post(&path, body.into(), req.client_bearer.as_deref())
            .await?;
        let counted = answer.body.json("the token count").await?;
        counted[field]
            .as_u64()
            .map(Some)
            .ok_or_else(|| UpstreamError::Protocol(format!("the token count has no {field}")))
    }

    /// This upstream's credentials as headers: the key (or the client's bearer) as the bearer,
    /// or, to an Anthropic upstream, as `x-api-key` with the `anthropic-version` it speaks, or, to
    /// a Gemini upstream, as `x-goog-api-key` (never as `Authorization`, never in the URL).
    fn credentials(&self, client_bearer: Option<&str>) -> Vec<(&'static str, String)> {
        let key = self.bearer(client_bearer);
        let mut headers = Vec::with_capacity(2);
        match self.api {
            UpstreamApi::Anthropic => {
                headers.push(("anthropic-version", anthropic::VERSION.to_string()));
                if let Some(k) = key {
                    headers.push(("x-api-key", k.to_string()));
                }
            }
            UpstreamApi::Gemini => {
                if let Some(k) = key {
                    headers.push(("x-goog-api-key", k.to_string()));
                }
            }
            UpstreamApi::Chat | UpstreamApi::Responses => {
                if let Some(k) = key {
                    headers.push(("authorization", format!("Bearer {k}")));
                }
            }
        }
        headers
    }

    /// Sends one request to `{base}{path}` with the credentials: a POST of `body`, or a GET.
    async fn send(
        &self,
        path: &str,
        post: Option<bytes::Bytes>,
        extra: &[(&'static str, &str)],
        client_bearer: Option<&str>,
    ) -> Result<wire::Answer, UpstreamError> {
        let url = format!("{}{path}", self.base);
        let credentials = self.credentials(client_bearer);
        let headers: Vec<(&'static str, &str)> = (extra.iter().copied())
            .chain(credentials.iter().map(|(k, v)| (*k, v.as_str())))
            .collect();
        let req = wire::Request {
            post: post.is_some(),
            url: &url,
            headers: &headers,
            body: post.unwrap_or_default(),
        };
        wire::send(req, self.timeouts.connect, || self.http()).await
    }

    /// Sends a turn, retrying (with backoff, honouring `Retry-After` up to a bound) while the
    /// upstream refuses before any byte of an answer: 429, 5xx, or no connection. Never retries
    /// once an answer started.
    async fn post(
        &self,
        path: &str,
        body: bytes::Bytes,
        client_bearer: Option<&str>,
    ) -> Result<wire::Answer, UpstreamError> {
        let mut attempt = 0;
        // The turn's `chat` span is current here (when traces are on).
        let traceparent = crate::otel::traceparent_current();
        let mut headers = vec![
            ("content-type", "application/json"),
            ("accept", "text/event-stream"),
        ];
        if let Some(tp) = &traceparent {
            headers.push(("traceparent", tp.as_str()));
        }
        loop {
            let sent = self.send(path, Some(body.clone()), &headers, client_bearer);
            let result = match tokio::time::timeout(self.timeouts.first_byte, sent).await {
                Err(_) => Err(UpstreamError::Timeout(format!(
                    "no response within {:?}",
                    self.timeouts.first_byte
                ))),
                Ok(sent) => match sent {
                    Ok(answer) => check_status(answer).await,
                    Err(e) => Err(e),
                },
            };
            let wait = match &result {
                Err(UpstreamError::Status {
                    status,
                    retry_after,
                    ..
                }) if *status == 429 || *status >= 500 => {
                    retry_after.unwrap_or_else(|| backoff(attempt))
                }
                Err(UpstreamError::Connect(_)) => backoff(attempt),
                _ => return result,
            };
            if attempt >= self.timeouts.retries || wait > MAX_RETRY_WAIT {
                return result;
            }
            attempt += 1;
            tracing::warn!(
                attempt,
                wait_ms = wait.as_millis() as u64,
                "retrying the upstream request"
            );
            tokio::time::sleep(wait).await;
        }
    }

    /// `GET {base}/models`: the upstream's model objects (its `data`), waiting at most `wait`.
    pub async fn models(
        &self,
        client_bearer: Option<&str>,
        wait: Duration,
    ) -> Result<Vec<Value>, UpstreamError> {
        // Anthropic and Gemini page their lists (20 and 50 by default): one page of the most
        // they give.
        let query = match self.api {
            UpstreamApi::Anthropic => "?limit=1000",
            UpstreamApi::Gemini => "?pageSize=1000",
            UpstreamApi::Chat | UpstreamApi::Responses => "",
        };
        let wait = wait.min(self.timeouts.first_byte);
        let path = format!("/models{query}");
        let listed = async {
            let answer = check_status(self.send(&path, None, &[], client_bearer).await?).await?;
            let body = answer.body.json("the model list").await?;
            match body {
                // Gemini's `models`: those that generate content, by their short id.
                Value::Object(mut o) if self.api == UpstreamApi::Gemini => match o.remove("models")
                {
                    Some(Value::Array(models)) => Ok(models
                        .into_iter()
                        .filter_map(gemini::model_object)
                        .collect()),
                    None => Ok(Vec::new()),
                    Some(_) => Err(UpstreamError::Protocol(
                        "the model list's 'models' is not an array".into(),
                    )),
                },
                Value::Object(mut o) => match o.remove("data") {
                    Some(Value::Array(data)) if self.api == UpstreamApi::Anthropic => {
                        Ok(data.into_iter().map(anthropic::model_object).collect())
                    }
                    Some(Value::Array(data)) => Ok(data),
                    _ => Err(UpstreamError::Protocol(
                        "the model list has no 'data' array".into(),
                    )),
                },
                _ => Err(UpstreamError::Protocol(
                    "the model list is not a JSON object".into(),
                )),
            }
        };
        tokio::time::timeout(wait, listed)
            .await
            .map_err(|_| UpstreamError::Timeout(format!("no model list within {wait:?}")))?
    }
}

/// A reqwest failure as an upstream error, with the innermost cause (never the URL's secrets:
/// upstream URLs carry no credentials; keys travel in headers).
pub(crate) fn transport_error(e: reqwest::Error) -> UpstreamError {
    let mut msg = e.to_string();
    let mut src = std::error::Error::source(&e);
    while let Some(s) = src {
        msg = format!("{msg}: {s}");
        src = s.source();
    }
    if e.is_timeout() {
        UpstreamError::Timeout(msg)
    } else if e.is_connect() {
        UpstreamError::Connect(msg)
    } else {
        UpstreamError::Protocol(msg)
    }
}

/// The longest `Retry-After` the relay waits out before giving up.
const MAX_RETRY_WAIT: Duration = Duration::from_secs(10);

fn backoff(attempt: u32) -> Duration {
    Duration::from_millis(200 * 2u64.pow(attempt.min(6)))
}

async fn check_status(answer: wire::Answer) -> Result<wire::Answer, UpstreamError> {
    let status = answer.status;
    if (200..300).contains(&status) {
        return Ok(answer);
    }
    let retry_after = (answer.retry_after.as_deref())
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
        .map(Duration::from_secs_f64);
    let bytes = answer.body.all(wire::MAX_JSON).await.unwrap_or_default();
    let body: Option<Value> = serde_json::from_slice(&bytes).ok();
    let retry_after = retry_after.or_else(|| body.as_ref().and_then(retry_delay));
    let message = body
        .as_ref()
        .and_then(|b| {
            b.pointer("/error/message")
                .or_else(|| b.get("message"))
                .or_else(|| b.get("error"))
        })
        .and_then(|m| m.as_str().map(str::to_string))
        .unwrap_or_else(|| {
            String::from_utf8_lossy(&bytes[..bytes.len().min(512)])
                .trim()
                .to_string()
        });
    Err(UpstreamError::Status {
        status,
        message,
        body,
        retry_after,
    })
}

/// The wait an error body asks for when no `Retry-After` header does: Google's `RetryInfo`
/// detail (`{"error": {"details": [{"retryDelay": "1.5s"}]}}`).
fn retry_delay(body: &Value) -> Option<Duration> {
    body.pointer("/error/details")?
        .as_array()?
        .iter()
        .filter_map(|d| d.get("retryDelay")?.as_str()?.strip_suffix('s'))
        .filter_map(|s| s.trim().parse::<f64>().ok())
        .find(|s| s.is_finite() && *s >= 0.0)
        .map(Duration::from_secs_f64)
}

/// A pure parser of one wire format's streamed answer: SSE `data` in, model events out (each
/// adapter's `ChunkParser` or `EventParser`).
pub(crate) trait StreamParser: Send + 'static {
    fn parse(&mut self, data: &str, out: &mut Vec<ModelEvent>) -> Result<(), UpstreamError>;
    /// Whether the answer is complete (its terminal event read), so nothing after it is read.
    fn complete(&self) -> bool {
        false
    }
    /// What a body that ends before the answer is complete lacks (the default [`end`]'s error).
    ///
    /// [`end`]: StreamParser::end
    const UNFINISHED: &'static str = "the stream ended before the answer was complete";
    /// At `[DONE]` (`done`) or the end of the body: what is still owed, or why the answer was
    /// cut. By default: nothing, once complete.
    fn end(&mut self, _done: bool, _out: &mut Vec<ModelEvent>) -> Result<(), UpstreamError> {
        match self.complete() {
            true => Ok(()),
            false => Err(UpstreamError::Cut(Self::UNFINISHED.into())),
        }
    }
}

/// The model events of a streamed answer, read by `parser`: the one loop every adapter's
/// `events` is. Reads the body's SSE events with an idle timeout between them (`[DONE]` ends) and
/// parses each event's data where the decoder holds it: one stream layer, no copy per event.
pub(crate) fn parsed_events(
    mut body: wire::Body,
    idle: Duration,
    mut parser: impl StreamParser,
) -> ModelStream {
    let mut decoder = sse::SseDecoder::new();
    Box::pin(async_stream::stream! {
        let mut buf = Vec::new();
        // One timer for the whole answer. Taking events only notes the time (no timer-wheel
        // work per event); when the timer fires early for that reason, it is set again to the
        // end of the real silence.
        let mut heard = tokio::time::Instant::now();
        let silence = tokio::time::sleep(idle);
        tokio::pin!(silence);
        // `true` when `[DONE]` ended the answer, `false` when the body just ended.
        let done = 'read: loop {
            let chunk = tokio::select! {
                biased;
                c = body.next() => c,
                _ = &mut silence => {
                    let due = heard + idle;
                    if due > tokio::time::Instant::now() {
                        silence.as_mut().reset(due);
                        continue;
                    }
                    yield Err(UpstreamError::Timeout(format!("no data for {idle:?}")));
                    return;
                }
            };
            let chunk = match chunk {
                None => break 'read false,
                Some(Err(e)) => { yield Err(UpstreamError::Cut(e)); return; }
                Some(Ok(c)) => c,
            };
            decoder.push(chunk);
            let mut had_events = false;
            while let Some(data) = decoder.next_data() {
                had_events = true;
                let data = match data {
                    Ok(d) => d,
                    Err(e) => { yield Err(UpstreamError::Cut(e.to_string())); return; }
                };
                if data.trim() == "[DONE]" {
                    break 'read true;
                }
                if let Err(e) = parser.parse(data, &mut buf) { yield Err(e); return; }
                for ev in buf.drain(..) { yield Ok(ev); }
                if parser.complete() { return; }
            }
            if had_events {
                // We run again only when the reader asks for more: the silence counts from now,
                // not from when the events arrived (a reader busy with them is not a silent model).
                heard = tokio::time::Instant::now();
            }
        };
        let ended = parser.end(done, &mut buf);
        for ev in buf.drain(..) { yield Ok(ev); }
        if let Err(e) = ended { yield Err(e); }
    })
}
