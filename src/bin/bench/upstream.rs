//! The benchmark's model server: Chat Completions streaming whose every text delta carries the
//! moment it left the server (`@T<µs since the Unix epoch> `), so a client can measure the latency
//! a proxy adds per event. Model string `NAME?deltas=N&delay_ms=N` as in the fake upstream; a
//! user line `CALL <tool> <json>` gets one tool call (to the tool whose name ends with `<tool>`);
//! a conversation ending in tool results gets the text stream. `POST /v1/responses` is the same
//! as a stateless Responses stream (`upstream_responses`), `POST /v1/messages` as an Anthropic
//! Messages stream (`upstream_anthropic`); `GET /health` answers 200 (gateways that probe their
//! workers, such as SMG, find it healthy).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{CACHE_CONTROL, CONTENT_TYPE, HeaderValue};
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use serde_json::Value;
use tokio::net::TcpListener;

pub type Body = UnsyncBoxBody<Bytes, std::io::Error>;

/// Microseconds since the Unix epoch (the clock both this server and the load generator read).
pub fn now_micros() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

/// Serves until the process is killed. Prints `listening on http://ADDR/v1`.
pub async fn serve(listen: SocketAddr) -> std::io::Result<()> {
    let listener = TcpListener::bind(listen).await?;
    println!("listening on http://{}/v1", listener.local_addr()?);
    let builder = auto::Builder::new(TokioExecutor::new());
    loop {
        let stream = match listener.accept().await {
            Ok((s, _)) => s,
            Err(_) => {
                // Out of descriptors and the like: back off instead of spinning.
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let conn = builder
            .serve_connection(TokioIo::new(stream), service_fn(handle))
            .into_owned();
        tokio::spawn(async move {
            let _ = conn.await;
        });
    }
}

fn full(bytes: impl Into<Bytes>, status: StatusCode, ct: &'static str) -> Response<Body> {
    let mut r = Response::new(
        Full::new(bytes.into())
            .map_err(|never: Infallible| match never {})
            .boxed_unsync(),
    );
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(ct));
    r
}

async fn handle(req: Request<Incoming>) -> Result<Response<Body>, Infallible> {
    let route = (req.method().clone(), req.uri().path().to_string());
    let body = match req.into_body().collect().await {
        Ok(c) => c.to_bytes(),
        Err(_) => Bytes::new(),
    };
    Ok(match (&route.0, route.1.as_str()) {
        (&Method::POST, "/v1/chat/completions") => with_json(&body, chat),
        (&Method::POST, "/v1/responses") => with_json(&body, crate::upstream_responses::responses),
        (&Method::POST, "/v1/messages") => with_json(&body, crate::upstream_anthropic::messages),
        (&Method::GET, "/health") => full("{}", StatusCode::OK, "application/json"),
        (&Method::GET, "/v1/models") => full(
            r#"{"object":"list","data":[{"id":"bench","object":"model","created":0,"owned_by":"bench"}]}"#,
            StatusCode::OK,
            "application/json",
        ),
        _ => full(
            r#"{"error":{"message":"not found"}}"#,
            StatusCode::NOT_FOUND,
            "application/json",
        ),
    })
}

/// `answer` of the JSON request body, or a 400 when it is not JSON.
fn with_json(body: &[u8], answer: fn(&Value) -> Response<Body>) -> Response<Body> {
    match serde_json::from_slice::<Value>(body) {
        Ok(v) => answer(&v),
        Err(e) => full(
            format!("{{\"error\":{{\"message\":\"bad json: {e}\"}}}}"),
            StatusCode::BAD_REQUEST,
            "application/json",
        ),
    }
}

/// `(deltas, delay)` from `NAME?deltas=N&delay_ms=N` (defaults 8 and 0).
pub fn options(model: &str) -> (usize, Duration) {
    let (mut deltas, mut delay) = (8usize, 0u64);
    if let Some((_, q)) = model.split_once('?') {
        for pair in q.split('&') {
            match pair.split_once('=') {
                Some(("deltas", v)) => deltas = v.parse().unwrap_or(8),
                Some(("delay_ms", v)) => delay = v.parse().unwrap_or(0),
                _ => {}
            }
        }
    }
    (
        deltas.clamp(1, 100_000),
        Duration::from_millis(delay.min(60_000)),
    )
}

pub fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(" "),
        _ => String::new(),
    }
}

const HEAD: &str = r#"{"id":"chatcmpl-bench","object":"chat.completion.chunk","created":1700000000,"model":"bench","choices":[{"index":0,"delta":"#;

fn chunk(delta: &str, finish: &str) -> Bytes {
    Bytes::from(format!(
        "data: {HEAD}{delta},\"logprobs\":null,\"finish_reason\":{finish}}}]}}\n\n"
    ))
}

pub fn sse(stream: impl futures::Stream<Item = Bytes> + Send + 'static) -> Response<Body> {
    use futures::StreamExt;
    let body = StreamBody::new(stream.map(|b| Ok::<_, std::io::Error>(Frame::data(b))));
    let mut r = Response::new(BodyExt::boxed_unsync(body));
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    r.headers_mut()
        .insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

fn chat(body: &Value) -> Response<Body> {
    let model = body.get("model").and_then(Value::as_str).unwrap_or("bench");
    let (deltas, delay) = options(model);
    let empty = Vec::new();
    let messages = body
        .get("messages")
        .and_then(Value::as_array)
        .unwrap_or(&empty);
    let last_role = messages
        .last()
        .and_then(|m| m.get("role"))
        .and_then(Value::as_str)
        .unwrap_or("");
    if last_role == "user" {
        let text = text_of(
            messages
                .last()
                .and_then(|m| m.get("content"))
                .unwrap_or(&Value::Null),
        );
        let tools = body
            .get("tools")
            .and_then(Value::as_array)
            .unwrap_or(&empty);
        let names = tools
            .iter()
            .filter_map(|t| t.pointer("/function/name").and_then(Value::as_str));
        if let Some((full_name, args)) = called_tool(&text, names) {
            let delta = serde_json::json!({"role": "assistant", "content": null, "tool_calls": [{"index": 0,
                "id": "call_bench", "type": "function", "function": {"name": full_name, "arguments": args}}]});
            let frames = vec![
                chunk(&delta.to_string(), "null"),
                chunk("{}", "\"tool_calls\""),
                Bytes::from_static(b"data: [DONE]\n\n"),
            ];
            return sse(futures::stream::iter(frames));
        }
    }
    let stream = async_stream::stream! {
        yield chunk(r#"{"role":"assistant","content":""}"#, "null");
        for await stamp in stamps(deltas, delay) {
            yield chunk(&format!("{{\"content\":\"{stamp}\"}}"), "null");
        }
        yield chunk("{}", "\"stop\"");
        yield Bytes::from_static(b"data: [DONE]\n\n");
    };
    sse(stream)
}

/// `(tool, arguments)` of the first `CALL <tool> <json>` line of `text`: the first of `tools`
/// named `<tool>` or ending with it (a gateway's prefixed name), else `<tool>` as written.
pub fn called_tool<'a>(
    text: &str,
    mut tools: impl Iterator<Item = &'a str>,
) -> Option<(String, String)> {
    let call = text.lines().find_map(|l| l.trim().strip_prefix("CALL "))?;
    let (name, args) = call
        .trim()
        .split_once(char::is_whitespace)
        .unwrap_or((call.trim(), "{}"));
    let full = tools
        .find(|n| *n == name || n.ends_with(name))
        .unwrap_or(name);
    Some((full.to_string(), args.trim().to_string()))
}

/// A text stream's deltas, `@T<µs> ` each, stamped when it is handed on. Delta `i` is due at
/// `start + i × delay` on the stream's own schedule: a delta sent late does not push the next
/// ones back, so streams that started at different moments do not drift into step with each
/// other (relative sleeps did: after any hiccup, every late stream re-armed in the same
/// millisecond, and the whole machine then saw all streams' deltas as one burst).
pub fn stamps(deltas: usize, delay: Duration) -> impl futures::Stream<Item = String> {
    async_stream::stream! {
        let start = tokio::time::Instant::now();
        for i in 0..deltas {
            if i > 0 && !delay.is_zero() {
                tokio::time::sleep_until(start + delay * i as u32).await;
            }
            yield format!("@T{} ", now_micros());
        }
    }
}
