//! Routing: the routes (`POST /gates/NAME` opens a gate of `hold=NAME` streams, `GET /v1/models`, `POST /v1/chat/completions`, `POST /v1/responses`,
//! Anthropic's `POST /v1/messages`, Gemini's `GET /v1beta/models` and `POST
//! /v1beta/models/{model}:streamGenerateContent`), the request log, the status faults answered
//! before any body, and the choice between the scripted model and a replay. Every error body is
//! OpenAI's `{"error": {...}}`, except on the Anthropic and Gemini routes (their own shapes), and
//! a models list asked for with Anthropic's headers is in Anthropic's shape.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{CONTENT_TYPE, HeaderValue, RETRY_AFTER};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{Value, json};

use super::chat::{chat_completion, chat_frames};
use super::convo::{Convo, Last};
use super::options::{Fault, Opts, parse_model};
use super::replay::replay;
use super::responses::{response_object, responses_frames};
use super::script::Script;
use super::sse::sse_response;
use super::{Body, Recorded, State};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Api {
    Chat,
    Responses,
    Anthropic,
    Gemini,
}

pub(super) async fn handle(
    state: Arc<State>,
    req: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let query = req.uri().query().map(str::to_string);
    let anthropic_headers = ["x-api-key", "anthropic-version"]
        .iter()
        .any(|h| req.headers().contains_key(*h));
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
        (&Method::GET, "/v1/models") if anthropic_headers => {
            json_response(StatusCode::OK, &super::anthropic::models())
        }
        (&Method::GET, "/v1/models") => json_response(
            StatusCode::OK,
            &json!({"object": "list", "data": [{"id": "fake-model", "object": "model", "created": 0, "owned_by": "fake"}]}),
        ),
        (&Method::POST, "/v1/chat/completions") => post(&state, Api::Chat, body).await,
        (&Method::POST, "/v1/responses") => post(&state, Api::Responses, body).await,
        (&Method::POST, "/v1/messages") => post(&state, Api::Anthropic, body).await,
        (&Method::GET, "/v1beta/models") => json_response(StatusCode::OK, &super::gemini::models()),
        (&Method::POST, p)
            if (p.starts_with("/v1beta/models/") || p.starts_with("/v1/models/"))
                && p.ends_with(":countTokens") =>
        {
            json_response(StatusCode::OK, &super::gemini::count_tokens(&body))
        }
        (&Method::POST, p) if p.starts_with("/v1beta/models/") || p.starts_with("/v1/models/") => {
            match super::gemini::route(p, query.as_deref(), body) {
                Ok(body) => post(&state, Api::Gemini, body).await,
                Err((status, message)) => super::gemini::error(status, &message),
            }
        }
        (&Method::POST, p) if p.starts_with("/gates/") => {
            state.open_gate(&p["/gates/".len()..]);
            json_response(StatusCode::OK, &json!({"opened": &p["/gates/".len()..]}))
        }
        (&Method::POST, "/v1/messages/count_tokens") => {
            json_response(StatusCode::OK, &super::anthropic::count_tokens(&body))
        }
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

pub(super) fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never: Infallible| match never {})
        .boxed_unsync()
}

pub(super) fn json_response(status: StatusCode, v: &Value) -> Response<Body> {
    let mut r = Response::new(full(serde_json::to_vec(v).expect("json serializes")));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r
}

pub(super) fn error_response(
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

pub(super) fn bad_request(message: &str) -> Response<Body> {
    error_response(
        StatusCode::BAD_REQUEST,
        message,
        "invalid_request_error",
        None,
        None,
    )
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
        let convo = convo_of(api, &body);
        if !matches!(convo.last, Last::ToolResults(_)) {
            opts.fault = Fault::None;
        }
    }
    if let Some(refused) = status_fault(state, model, &opts).await {
        return match api {
            Api::Anthropic => anthropic_error(refused).await,
            Api::Gemini => super::gemini::fault_error(refused).await,
            _ => refused,
        };
    }
    if api == Api::Gemini
        && let Some(refused) = super::gemini::check_signatures(&body)
    {
        return refused;
    }
    if api == Api::Anthropic
        && let Some(refused) = super::anthropic::check_thinking(&body)
    {
        return refused;
    }
    let cached = match api {
        Api::Anthropic => match super::anthropic::cache_usage(&state.prompt_cache, &body) {
            Ok(c) => c,
            Err(message) => {
                return super::anthropic::error(
                    StatusCode::BAD_REQUEST,
                    "invalid_request_error",
                    &message,
                );
            }
        },
        _ => (0, 0),
    };
    let stream = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
    if let Some(file) = name.strip_prefix("replay:") {
        return replay(state, api, file, &opts).await;
    }
    let convo = convo_of(api, &body);
    let script = Script::plan(&convo, &opts);
    let serial = state.serial.fetch_add(1, Ordering::Relaxed);
    match (api, stream) {
        (Api::Chat, true) => {
            let include_usage = body
                .pointer("/stream_options/include_usage")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            let (frames, tail) = chat_frames(&script, &opts, model, serial, include_usage);
            sse_response(state, frames, stream_delay(&opts), tail, opts.hold.clone())
        }
        (Api::Chat, false) => {
            json_response(StatusCode::OK, &chat_completion(&script, model, serial))
        }
        (Api::Responses, true) => {
            let (frames, tail) = responses_frames(&script, &opts, &body, model, serial);
            sse_response(state, frames, stream_delay(&opts), tail, opts.hold.clone())
        }
        (Api::Responses, false) => json_response(
            StatusCode::OK,
            &response_object(&script, &body, model, serial),
        ),
        (Api::Gemini, _) => {
            let (frames, tail) = super::gemini::gemini_frames(&script, &opts, model, serial);
            sse_response(state, frames, stream_delay(&opts), tail, opts.hold.clone())
        }
        (Api::Anthropic, _) => {
            let (frames, tail) =
                super::anthropic::anthropic_frames(&script, &opts, model, serial, cached);
            sse_response(state, frames, stream_delay(&opts), tail, opts.hold.clone())
        }
    }
}

fn convo_of(api: Api, body: &Value) -> Convo {
    match api {
        Api::Chat => Convo::from_chat(body),
        Api::Responses => Convo::from_responses(body),
        Api::Anthropic => Convo::from_anthropic(body),
        Api::Gemini => Convo::from_gemini(body),
    }
}

/// A status fault's answer in Anthropic's error shape (its status kept).
async fn anthropic_error(refused: Response<Body>) -> Response<Body> {
    let status = refused.status();
    let body = refused
        .into_body()
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    let message = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| v.pointer("/error/message")?.as_str().map(str::to_string))
        .unwrap_or_default();
    let kind = match status.as_u16() {
        400 => "invalid_request_error",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        _ => "api_error",
    };
    super::anthropic::error(status, kind, &message)
}

/// The faults answered before any body (an HTTP error status), or `None` to go on; with
/// `fault=slow_headers`, waits `delay` first. `status429_once` fails once per model string.
async fn status_fault(state: &State, model: &str, opts: &Opts) -> Option<Response<Body>> {
    match opts.fault {
        Fault::Status500 => {
            return Some(error_response(
                StatusCode::INTERNAL_SERVER_ERROR,
                "The server had an error while processing your request.",
                "server_error",
                None,
                None,
            ));
        }
        Fault::Status429 => return Some(too_many_requests()),
        Fault::Status529 => return Some(overloaded()),
        Fault::Status503 => return Some(unavailable()),
        Fault::Status503Once => {
            let first = state
                .failed_once
                .lock()
                .expect("failed_once lock")
                .insert(model.to_string());
            if first {
                return Some(unavailable());
            }
        }
        Fault::Status529Once => {
            let first = state
                .failed_once
                .lock()
                .expect("failed_once lock")
                .insert(model.to_string());
            if first {
                return Some(overloaded());
            }
        }
        Fault::Status429Once => {
            let first = state
                .failed_once
                .lock()
                .expect("failed_once lock")
                .insert(model.to_string());
            if first {
                return Some(too_many_requests());
            }
        }
        Fault::Status400 => {
            return Some(error_response(
                StatusCode::BAD_REQUEST,
                "bad model param",
                "invalid_request_error",
                Some("model"),
                None,
            ));
        }
        Fault::SlowHeaders => tokio::time::sleep(opts.delay).await,
        _ => {}
    }
    None
}

fn stream_delay(opts: &Opts) -> Duration {
    if opts.fault == Fault::SlowHeaders {
        Duration::ZERO
    } else {
        opts.delay
    }
}

fn overloaded() -> Response<Body> {
    error_response(
        StatusCode::from_u16(529).expect("a valid status"),
        "Overloaded",
        "overloaded_error",
        None,
        None,
    )
}

fn unavailable() -> Response<Body> {
    error_response(
        StatusCode::SERVICE_UNAVAILABLE,
        "The model is overloaded. Please try again later.",
        "server_error",
        None,
        None,
    )
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
