//! The Gemini writer and checks: the route (`POST /v1beta/models/{model}:streamGenerateContent`,
//! `alt=sse` required, a `key=` in the query refused), a script as `GenerateContentResponse`
//! chunks, the conversation read from a `contents` request, and Gemini's checks of the thought
//! signatures sent back. With `reasoning=N` the fake thinks (thought parts) and signs: the first
//! `functionCall` part of its answer, or a last empty text part, carries a `thoughtSignature` over
//! what the part holds. A signature that comes back changed, or (thinking on) a step of the
//! current turn whose first `functionCall` part has none, is refused with a 400, as Gemini does.
//! Errors are Gemini's `{"error": {code, message, status}}`; a 429 says when to retry in a
//! `RetryInfo` detail, not a header.

use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::{Response, StatusCode};
use serde_json::{Value, json};

use super::Body;
use super::convo::{Choice, Convo, Last, Tool};
use super::options::{Fault, Opts};
use super::script::{Output, Script};
use super::sse::{Frames, Tail, data_frame};

/// The fake's signature over what a part holds (a stable hash; Gemini's is opaque).
pub(super) fn signature(kind: &str, content: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in format!("fake-gemini/{kind}/")
        .bytes()
        .chain(content.bytes())
    {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("CiQBjz1rX{h:016x}")
}

/// The signature a part should carry.
fn expected_signature(part: &Value) -> String {
    if let Some(call) = part.get("functionCall") {
        let name = call["name"].as_str().unwrap_or_default();
        return signature("call", &format!("{name}{}", call["args"]));
    }
    let text = part["text"].as_str().unwrap_or_default();
    if part["thought"] == true {
        signature("thought", text)
    } else {
        signature("text", text)
    }
}

/// A Gemini error answer.
pub(super) fn error(status: StatusCode, message: &str) -> Response<Body> {
    let name = match status.as_u16() {
        400 => "INVALID_ARGUMENT",
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        429 => "RESOURCE_EXHAUSTED",
        503 => "UNAVAILABLE",
        504 => "DEADLINE_EXCEEDED",
        _ => "INTERNAL",
    };
    let mut e = json!({"code": status.as_u16(), "message": message, "status": name});
    if status == StatusCode::TOO_MANY_REQUESTS {
        e["details"] =
            json!([{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "1s"}]);
    }
    super::routes::json_response(status, &json!({"error": e}))
}

/// A status fault's answer in Gemini's error shape (its status and message kept).
pub(super) async fn fault_error(refused: Response<Body>) -> Response<Body> {
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
    error(status, &message)
}

/// The request of `POST {prefix}/models/{model}:{method}?{query}`: the body with its model (from
/// the path, percent-decoded) as `model`, or the refusal's status and message.
pub(super) fn route(
    path: &str,
    query: Option<&str>,
    mut body: Value,
) -> Result<Value, (StatusCode, String)> {
    let rest = path
        .strip_prefix("/v1beta/models/")
        .or_else(|| path.strip_prefix("/v1/models/"))
        .unwrap_or_default();
    let Some((model, method)) = rest.rsplit_once(':') else {
        return Err((StatusCode::NOT_FOUND, format!("no method in {path}")));
    };
    if method != "streamGenerateContent" {
        return Err((
            StatusCode::NOT_FOUND,
            format!("the fake serves only streamGenerateContent, not {method}"),
        ));
    }
    let params: Vec<&str> = query.unwrap_or_default().split('&').collect();
    if params.iter().any(|p| p.starts_with("key=")) {
        return Err((
            StatusCode::BAD_REQUEST,
            "the key goes in x-goog-api-key, not the URL".into(),
        ));
    }
    if !params.contains(&"alt=sse") {
        return Err((
            StatusCode::BAD_REQUEST,
            "without alt=sse Gemini streams a JSON array".into(),
        ));
    }
    match body.as_object_mut() {
        Some(o) => {
            o.insert("model".into(), json!(percent_decode(model)));
            Ok(body)
        }
        None => Err((
            StatusCode::BAD_REQUEST,
            "the body is not a JSON object".into(),
        )),
    }
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        if b[i] == b'%'
            && let (Some(h), Some(l)) = (
                b.get(i + 1).copied().and_then(hex),
                b.get(i + 2).copied().and_then(hex),
            )
        {
            out.push((h * 16 + l) as u8);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn parts(c: &Value) -> &[Value] {
    c["parts"].as_array().map(Vec::as_slice).unwrap_or_default()
}

/// A user content that is more than function responses: where a turn starts.
fn starts_turn(c: &Value) -> bool {
    c["role"] == "user" && parts(c).iter().any(|p| p.get("functionResponse").is_none())
}

/// Gemini's checks of the signatures sent back: every signature as the fake made it for its
/// part, and (thinking on) the first `functionCall` part of each step of the current turn signed.
/// The refusal, if any.
pub(super) fn check_signatures(body: &Value) -> Option<Response<Body>> {
    let contents = body.get("contents").and_then(Value::as_array)?;
    for (i, c) in contents.iter().enumerate() {
        for (j, p) in parts(c).iter().enumerate() {
            if let Some(sig) = p.get("thoughtSignature")
                && sig.as_str() != Some(expected_signature(p).as_str())
            {
                return Some(error(
                    StatusCode::BAD_REQUEST,
                    &format!("contents[{i}].parts[{j}]: Corrupted thought signature."),
                ));
            }
        }
    }
    let thinking =
        body.pointer("/generationConfig/thinkingConfig/includeThoughts") == Some(&json!(true));
    let start = contents.iter().rposition(starts_turn).map_or(0, |i| i + 1);
    for (i, c) in contents.iter().enumerate().skip(start) {
        let first_call = parts(c).iter().find(|p| p.get("functionCall").is_some());
        if thinking
            && c["role"] == "model"
            && let Some(call) = first_call
            && call.get("thoughtSignature").is_none()
        {
            return Some(error(
                StatusCode::BAD_REQUEST,
                &format!(
                    "Function call is missing a thought_signature in functionCall parts. This is required for tools to work correctly, and missing thought_signature may lead to degraded model performance. Additional data, function call `default_api:{}` , position {}. Please refer to https://ai.google.dev/gemini-api/docs/thought-signatures for more details.",
                    call["functionCall"]["name"].as_str().unwrap_or_default(),
                    i + 1
                ),
            ));
        }
    }
    None
}

impl Convo {
    /// The conversation of a `streamGenerateContent` request.
    pub(super) fn from_gemini(body: &Value) -> Convo {
        let empty = Vec::new();
        let contents = body
            .get("contents")
            .and_then(Value::as_array)
            .unwrap_or(&empty);
        let only_responses =
            |c: &Value| c["role"] == "user" && !parts(c).is_empty() && !starts_turn(c);
        let last = match contents.last() {
            Some(c) if starts_turn(c) => Last::User,
            Some(c) if only_responses(c) => Last::ToolResults(
                parts(c)
                    .iter()
                    .map(|p| match &p["functionResponse"]["response"]["output"] {
                        Value::String(s) => s.clone(),
                        _ => p["functionResponse"]["response"].to_string(),
                    })
                    .collect(),
            ),
            _ => Last::Other,
        };
        let (mut images, mut files) = (0, 0);
        let after_user = contents.iter().rposition(starts_turn);
        let mut texts: Vec<&str> = Vec::new();
        for p in after_user.map(|i| parts(&contents[i])).unwrap_or_default() {
            let mime = p
                .pointer("/inlineData/mimeType")
                .or_else(|| p.pointer("/fileData/mimeType"))
                .and_then(Value::as_str);
            match (p["text"].as_str(), mime) {
                (Some(t), _) => texts.push(t),
                (None, Some(m)) if m.starts_with("image/") => images += 1,
                (None, Some(_)) => files += 1,
                _ => {}
            }
        }
        let rounds = contents[after_user.map_or(0, |i| i + 1)..]
            .iter()
            .filter(|c| {
                c["role"] == "model" && parts(c).iter().any(|p| p.get("functionCall").is_some())
            })
            .count();
        let tools = body
            .get("tools")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|t| t["functionDeclarations"].as_array())
            .flatten()
            .filter_map(|d| {
                Some(Tool {
                    name: d["name"].as_str()?.to_string(),
                    parameters: d.get("parameters").cloned().unwrap_or(json!({})),
                    custom: false,
                })
            })
            .collect();
        let config = body.pointer("/toolConfig/functionCallingConfig");
        let allowed = config
            .and_then(|c| c["allowedFunctionNames"].as_array())
            .filter(|a| a.len() == 1)
            .and_then(|a| a[0].as_str());
        let choice = match (config.and_then(|c| c["mode"].as_str()), allowed) {
            (Some("NONE"), _) => Choice::None,
            (Some("ANY"), Some(name)) => Choice::Named(name.to_string()),
            (Some("ANY"), None) => Choice::Required,
            _ => Choice::Auto,
        };
        let system = body.get("systemInstruction").is_some() as usize;
        Convo {
            messages: system + contents.len(),
            last,
            user_text: texts.join(" "),
            images,
            files,
            tools,
            choice,
            rounds,
        }
    }
}

/// The frames of a streamed answer: thought parts, then text parts (or every call in one chunk,
/// the first signed when thinking), then a last chunk with the finish reason and usage.
pub(super) fn gemini_frames(s: &Script, o: &Opts, model: &str, serial: u64) -> (Vec<Bytes>, Tail) {
    let id = format!("fake-gemini-{serial}");
    let chunk = |parts: Vec<Value>| {
        data_frame(
            &json!({"candidates": [{"content": {"parts": parts, "role": "model"}, "index": 0}],
                "modelVersion": model, "responseId": id})
            .to_string(),
        )
    };
    let thinking = !s.reasoning.is_empty();
    let mut f = Frames { frames: Vec::new() };
    for r in &s.reasoning {
        f.frames
            .push((chunk(vec![json!({"text": r, "thought": true})]), true));
    }
    let mut last_parts = Vec::new();
    let finish = match &s.output {
        Output::Text(_, pieces) => {
            for p in pieces {
                f.frames.push((chunk(vec![json!({"text": p})]), true));
            }
            if thinking {
                last_parts.push(json!({"text": "", "thoughtSignature": signature("text", "")}));
            }
            "STOP"
        }
        // Gemini has no refusal: the answer is blocked.
        Output::Refusal(..) => "SAFETY",
        Output::Calls(calls) => {
            let parts = calls
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    let args = match serde_json::from_str::<Value>(&c.arguments) {
                        Ok(v @ Value::Object(_)) => v,
                        _ => json!({"input": c.arguments}),
                    };
                    let mut part = json!({"functionCall": {"name": c.name, "args": args}});
                    if thinking && i == 0 {
                        part["thoughtSignature"] = json!(expected_signature(&part));
                    }
                    part
                })
                .collect();
            f.frames.push((chunk(parts), true));
            "STOP"
        }
    };
    let finish = if s.length { "MAX_TOKENS" } else { finish };
    let thoughts = s.reasoning.len() as u64;
    let answer = s.completion_tokens - thoughts;
    let mut usage = json!({"promptTokenCount": s.prompt_tokens, "candidatesTokenCount": answer,
        "totalTokenCount": s.prompt_tokens + s.completion_tokens});
    if thoughts > 0 {
        usage["thoughtsTokenCount"] = json!(thoughts);
    }
    if o.cached > 0 {
        usage["cachedContentTokenCount"] = json!(o.cached.min(s.prompt_tokens));
    }
    let mut candidate = json!({"finishReason": finish, "index": 0});
    if !last_parts.is_empty() {
        candidate["content"] = json!({"parts": last_parts, "role": "model"});
    }
    if finish == "SAFETY" {
        candidate["safetyRatings"] = json!([{"category": "HARM_CATEGORY_DANGEROUS_CONTENT",
            "probability": "HIGH", "blocked": true}]);
    }
    let last = json!({"candidates": [candidate], "usageMetadata": usage, "modelVersion": model,
        "responseId": id});
    f.frames.push((data_frame(&last.to_string()), false));
    f.finish(o.fault, |_| match o.fault {
        Fault::Malformed => vec![Bytes::from_static(b"data: {not json\n\n")],
        Fault::ErrorChunk => vec![data_frame(
            &json!({"error": {"code": 503, "message": "The model is overloaded. Please try again later.",
                "status": "UNAVAILABLE"}})
            .to_string(),
        )],
        _ => Vec::new(),
    })
}

/// The models list as Gemini answers `GET /v1beta/models`: one that generates content, one
/// that only embeds.
pub(super) fn models() -> Value {
    json!({"models": [
        {"name": "models/fake-model", "version": "001", "displayName": "Fake Model",
            "inputTokenLimit": 1048576, "outputTokenLimit": 65536,
            "supportedGenerationMethods": ["generateContent", "countTokens"], "thinking": true},
        {"name": "models/fake-embedding", "version": "001", "displayName": "Fake Embedding",
            "supportedGenerationMethods": ["embedContent"]}]})
}

/// `POST .../models/{model}:countTokens` with a `generateContentRequest`: its prompt's tokens as
/// the scripted model counts them (the `promptTokenCount` a turn of it reports).
pub(super) fn count_tokens(body: &Value) -> Value {
    let request = body.get("generateContentRequest").unwrap_or(body);
    json!({"totalTokens": Convo::from_gemini(request).messages as u64 * 10})
}
