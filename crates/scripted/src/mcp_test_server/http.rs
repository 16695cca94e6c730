//! The HTTP side: every request logged, then the injected behaviours answered before rmcp sees
//! the request (the bearer check, `fail_http`, a refused lifecycle, `research` tasks, invalid
//! JSON), then the request handed to rmcp's Streamable HTTP service on `/mcp`.

use std::convert::Infallible;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::{Request, Response, body::Incoming};
use rmcp::transport::streamable_http_server::{
    StreamableHttpService, session::local::LocalSessionManager,
};

use super::tasks::task_answer;
use super::tools::TestServer;
use super::{SeenRequest, State};

/// The body of a `bad_json` answer.
const BAD_JSON_BODY: &str = "{not json";

/// Every answer of the server.
pub(super) type Resp = Response<BoxBody<Bytes, Infallible>>;

/// A `text/plain` answer.
fn text_resp(status: u16, body: &'static str) -> Resp {
    Response::builder()
        .status(status)
        .header("content-type", "text/plain")
        .body(Full::new(Bytes::from_static(body.as_bytes())).boxed())
        .expect("static response")
}

/// The JSON-RPC method of a body (`response` for a response; joined by `,` in a batch; empty
/// when it is not JSON-RPC).
fn rpc_method(body: &[u8]) -> String {
    fn one(v: &serde_json::Value) -> String {
        match v.get("method").and_then(|m| m.as_str()) {
            Some(m) => m.to_string(),
            None => "response".to_string(),
        }
    }
    match serde_json::from_slice::<serde_json::Value>(body) {
        Ok(serde_json::Value::Array(items)) => items.iter().map(one).collect::<Vec<_>>().join(","),
        Ok(v @ serde_json::Value::Object(_)) => one(&v),
        _ => String::new(),
    }
}

/// One HTTP request: logged, then answered by an injected behaviour if one applies, else by rmcp
/// (404 off `/mcp`).
pub(super) async fn handle(
    mcp: &mut StreamableHttpService<TestServer, LocalSessionManager>,
    state: &State,
    req: Request<Incoming>,
) -> Resp {
    let (parts, body) = req.into_parts();
    let body = match body.collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => return text_resp(400, "bad body"),
    };
    record(state, &parts, &body);
    if let Some(answer) = injected(state, &parts, &body) {
        return answer;
    }
    if parts.uri.path() != "/mcp" {
        return text_resp(404, "not found");
    }
    let mut parts = parts;
    let body = if state.opts.oldest && rpc_method(&body) == "initialize" {
        let mut v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        v["params"]["protocolVersion"] = "2024-11-05".into();
        parts.headers.remove(hyper::header::CONTENT_LENGTH);
        Bytes::from(v.to_string())
    } else {
        body
    };
    let req = Request::from_parts(parts, Full::new(body));
    match tower_service::Service::call(mcp, req).await {
        Ok(resp) => resp,
        Err(never) => match never {},
    }
}

/// Adds the request to the log (`McpTestServer::requests_seen`), its bearer token masked.
fn record(state: &State, parts: &hyper::http::request::Parts, body: &[u8]) {
    let headers = parts
        .headers
        .iter()
        .map(|(k, v)| {
            let value = if k == "authorization" {
                "***".to_string()
            } else {
                v.to_str().unwrap_or("?").to_string()
            };
            (k.as_str().to_string(), value)
        })
        .collect();
    state.seen.lock().unwrap().push(SeenRequest {
        http_method: parts.method.to_string(),
        rpc_method: rpc_method(body),
        headers,
        meta_traceparent: serde_json::from_slice::<serde_json::Value>(body)
            .ok()
            .and_then(|v| {
                v.pointer("/params/_meta/traceparent")?
                    .as_str()
                    .map(String::from)
            }),
    });
}

/// The answer of an injected behaviour, in this order: a missing or wrong bearer token (401),
/// `fail_http`, a lifecycle the server refuses (`-32601`), a `research` task, `bad_json`.
/// `None`: rmcp answers.
fn injected(state: &State, parts: &hyper::http::request::Parts, body: &Bytes) -> Option<Resp> {
    if let Some(token) = &state.opts.require_bearer {
        let ok = parts
            .headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            == Some(&format!("Bearer {token}"));
        if !ok {
            return Some(text_resp(401, "unauthorized"));
        }
    }
    if parts.method != hyper::Method::POST {
        return None;
    }
    if let Some(status) = state.opts.fail_http {
        return Some(
            Response::builder()
                .status(status)
                .header("content-type", "text/plain")
                .body(Full::new(Bytes::from_static(b"injected failure")).boxed())
                .unwrap_or_else(|_| text_resp(500, "bad status")),
        );
    }
    let method = rpc_method(body);
    if (state.opts.handshake_only && method == "server/discover")
        || (state.opts.modern_only && method == "initialize")
    {
        let id = serde_json::from_slice::<serde_json::Value>(body)
            .ok()
            .and_then(|v| v.get("id").cloned())
            .unwrap_or(serde_json::Value::Null);
        let answer = serde_json::json!({"jsonrpc": "2.0", "id": id,
            "error": {"code": -32601, "message": format!("Method not found: {method}")}});
        return Some(json_resp(Bytes::from(answer.to_string())));
    }
    if state.opts.long_tools
        && let Some(answer) = task_answer(state, body)
    {
        return Some(json_resp(Bytes::from(answer.to_string())));
    }
    if state.bad_json.load(Ordering::SeqCst) {
        return Some(json_resp(Bytes::from_static(BAD_JSON_BODY.as_bytes())));
    }
    None
}

/// `200 application/json` with this body.
fn json_resp(body: Bytes) -> Resp {
    Response::builder()
        .status(200)
        .header("content-type", "application/json")
        .body(Full::new(body).boxed())
        .unwrap_or_else(|_| text_resp(500, "bad response"))
}
