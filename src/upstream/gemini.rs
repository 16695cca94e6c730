//! Google's Gemini API (`POST {base}/models/{model}:streamGenerateContent?alt=sse`, the key as
//! `x-goog-api-key`): the conversation as `systemInstruction` and `contents` of parts, and its
//! streamed `GenerateContentResponse` chunks as model events.
//!
//! What maps: text, images (a `data:` URL as `inlineData`, any other URL as `fileData`), files
//! (likewise), function calls as `functionCall` parts and their outputs as `functionResponse`
//! parts (`{"output": ...}`, matched by name and order), tools as `functionDeclarations` (their
//! schemas through [`schema`]), `tool_choice` (`AUTO`, `ANY`, `NONE`, `ANY` with
//! `allowedFunctionNames`), `reasoning.effort` as a `thinkingConfig` budget with
//! `includeThoughts`, `max_output_tokens`, `temperature`, `top_p`, a JSON `text.format` as
//! `responseMimeType` (and `responseJsonSchema`). Consecutive items of one role merge into one
//! content; system and developer messages join the instructions. Thought parts (`thought: true`)
//! are the reasoning item's summary. Every `thoughtSignature` the model gives is a signed
//! reasoning block ([`ModelEvent::SignedReasoning`], tagged `"gemini"`) and goes back on the part
//! it came on: a function call's on that call's `functionCall` part, a thought's on that thought,
//! a text part's on the text it closed. What does not map: `parallel_tool_calls: false` (Gemini
//! has no switch), `user`, files by id, images in tool outputs, the Responses-only options.

pub mod schema;

use std::collections::HashMap;
use std::time::Duration;

use serde::Serialize;
use serde_json::{Map, Value, json};

use super::{
    Body, FinishReason, ModelEvent, ModelStream, TurnRequest, TurnToolChoice, UpstreamError,
};
use crate::api::Usage;
use crate::api::request::{InputItem, InputPart, MessageContent, Role, TextFormat, ToolOutput};

/// The path of a streamed turn of `model` (percent-encoded: a model name is one path segment).
pub fn path(model: &str) -> String {
    format!("{}:streamGenerateContent?alt=sse", model_path(model))
}

/// The `countTokens` path of `model`.
pub fn count_path(model: &str) -> String {
    format!("{}:countTokens", model_path(model))
}

/// `/models/{model}`, the model one path segment (a leading `models/` dropped).
fn model_path(model: &str) -> String {
    let model = model.strip_prefix("models/").unwrap_or(model);
    let mut enc = String::with_capacity(model.len());
    for b in model.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            enc.push(b as char);
        } else {
            enc.push_str(&format!("%{b:02X}"));
        }
    }
    format!("/models/{enc}")
}

/// The `countTokens` body for a turn: the whole request as it would be generated
/// (`generateContentRequest`, so instructions and tools count too), and the model's name.
pub fn count_body(req: &TurnRequest, model: &str) -> Value {
    let mut request = serde_json::to_value(request_body(req)).unwrap_or_default();
    let model = model.strip_prefix("models/").unwrap_or(model);
    request["model"] = json!(format!("models/{model}"));
    json!({"generateContentRequest": request})
}

/// The thinking budget for a `reasoning.effort` (`none`: 0, thinking off; unknown: the model's
/// default, no `thinkingConfig`).
pub fn thinking_budget(effort: &str) -> Option<u64> {
    Some(match effort {
        "none" => 0,
        "minimal" => 512,
        "low" => 1024,
        "medium" => 8192,
        "high" => 16384,
        "xhigh" => 24576,
        _ => return None,
    })
}

/// The `tools` entry Gemini takes: one object holding every function declaration.
#[derive(Serialize)]
pub struct GeminiTools<'a> {
    #[serde(rename = "functionDeclarations")]
    function_declarations: Vec<Declaration<'a>>,
}

#[derive(Serialize)]
struct Declaration<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    description: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    parameters: Option<schema::Schema<'a>>,
}

/// The `streamGenerateContent` body for a turn (the model goes in the path).
pub fn request_body(req: &TurnRequest) -> Body<GeminiTools<'_>> {
    let mut body = Map::new();
    let (system, contents) = contents(req.instructions.as_deref(), &req.items, |i| {
        req.signed_reasoning.get(&i).map(Vec::as_slice)
    });
    if !system.is_empty() {
        body.insert(
            "systemInstruction".into(),
            json!({"parts": [{"text": system}]}),
        );
    }
    body.insert("contents".into(), Value::Array(contents));
    let mut config = Map::new();
    if let Some(n) = req.max_output_tokens {
        config.insert("maxOutputTokens".into(), json!(n.max(1)));
    }
    if let Some(t) = req.temperature {
        config.insert("temperature".into(), json!(t));
    }
    if let Some(p) = req.top_p {
        config.insert("topP".into(), json!(p));
    }
    match &req.text_format {
        Some(TextFormat::JsonObject) => {
            config.insert("responseMimeType".into(), json!("application/json"));
        }
        Some(TextFormat::JsonSchema { schema, .. }) => {
            config.insert("responseMimeType".into(), json!("application/json"));
            config.insert("responseJsonSchema".into(), schema.clone());
        }
        Some(TextFormat::Text) | None => {}
    }
    if let Some(b) = req.reasoning_effort.as_deref().and_then(thinking_budget) {
        let thinking = if b == 0 {
            json!({"thinkingBudget": 0})
        } else {
            json!({"thinkingBudget": b, "includeThoughts": true})
        };
        config.insert("thinkingConfig".into(), thinking);
    }
    if !config.is_empty() {
        body.insert("generationConfig".into(), Value::Object(config));
    }
    let declarations: Vec<Declaration<'_>> = req
        .tools
        .iter()
        .map(|t| Declaration {
            name: &t.name,
            description: &t.description,
            parameters: (!schema::is_empty(&t.parameters)).then(|| schema::Schema(&t.parameters)),
        })
        .collect();
    let mut tools = Vec::new();
    if !declarations.is_empty() {
        let config = match &req.tool_choice {
            TurnToolChoice::Auto => json!({"mode": "AUTO"}),
            TurnToolChoice::None => json!({"mode": "NONE"}),
            TurnToolChoice::Required => json!({"mode": "ANY"}),
            TurnToolChoice::Function(name) => {
                json!({"mode": "ANY", "allowedFunctionNames": [name]})
            }
        };
        body.insert(
            "toolConfig".into(),
            json!({"functionCallingConfig": config}),
        );
        tools.push(GeminiTools {
            function_declarations: declarations,
        });
    }
    Body {
        fields: body,
        tools,
    }
}

/// The conversation as Gemini's system text and `contents`: instructions, system and developer
/// messages joined into the system text; every other item a part of a `user` or `model` content,
/// consecutive parts of one role in one content. `signed(i)` gives the signed reasoning blocks of
/// item `i`; each goes back on its part (see the module's notes).
pub fn contents<'s>(
    instructions: Option<&str>,
    items: &[InputItem],
    signed: impl Fn(usize) -> Option<&'s [Value]>,
) -> (String, Vec<Value>) {
    let mut system: Vec<String> = instructions
        .filter(|i| !i.is_empty())
        .map(str::to_string)
        .into_iter()
        .collect();
    let mut c = Contents::default();
    for (i, item) in items.iter().enumerate() {
        match item {
            InputItem::Message(m) => match m.role {
                Role::System | Role::Developer => {
                    let t = m.content.text();
                    if !t.is_empty() {
                        system.push(t);
                    }
                }
                Role::User => {
                    c.pending.clear();
                    c.push("user", content_parts(&m.content));
                }
                Role::Assistant => c.push("model", content_parts(&m.content)),
            },
            InputItem::Reasoning(_) => {
                c.pending.clear();
                for block in signed(i).unwrap_or_default() {
                    c.signed(block);
                }
            }
            InputItem::FunctionCall(f) => {
                let args = match serde_json::from_str::<Value>(&f.arguments) {
                    Ok(v @ Value::Object(_)) => v,
                    _ => json!({}),
                };
                c.names.insert(f.call_id.clone(), f.name.clone());
                let mut part = json!({"functionCall": {"name": f.name, "args": args}});
                let at = (c.pending.iter().position(|(n, _)| n == &f.name))
                    .or((!c.pending.is_empty()).then_some(0));
                if let Some(at) = at {
                    part["thoughtSignature"] = c.pending.remove(at).1;
                }
                c.push("model", vec![part]);
            }
            InputItem::FunctionCallOutput(o) => {
                let output = match &o.output {
                    ToolOutput::Text(t) => t.clone(),
                    ToolOutput::Parts(parts) => parts
                        .iter()
                        .filter_map(|p| p.get("text")?.as_str())
                        .collect::<Vec<_>>()
                        .join("\n"),
                };
                let name = c.names.get(&o.call_id).cloned().unwrap_or_default();
                c.push(
                    "user",
                    vec![
                        json!({"functionResponse": {"name": name, "response": {"output": output}}}),
                    ],
                );
            }
            // Every tool's calls reach the upstream as function calls and outputs
            // (`run::turn::model_view`); the rest is not the model's business.
            _ => {}
        }
    }
    // A user turn answers the calls first (steering input prepended to a continuation's outputs
    // comes before them in the input).
    let contents = c
        .out
        .into_iter()
        .map(|(role, mut parts)| {
            if role == "user" {
                parts.sort_by_key(|p| p.get("functionResponse").is_none());
            }
            json!({"role": role, "parts": parts})
        })
        .collect();
    (system.join("\n\n"), contents)
}

/// The contents being built.
#[derive(Default)]
struct Contents {
    out: Vec<(&'static str, Vec<Value>)>,
    /// Function-call signatures of the last reasoning item, waiting for their calls: (name, sig).
    pending: Vec<(String, Value)>,
    /// Each call's function name, for its output's `functionResponse`.
    names: HashMap<String, String>,
}

impl Contents {
    fn push(&mut self, role: &'static str, parts: Vec<Value>) {
        if parts.is_empty() {
            return;
        }
        match self.out.last_mut() {
            Some((r, p)) if *r == role => p.extend(parts),
            _ => self.out.push((role, parts)),
        }
    }

    /// One signed block of a reasoning item, put back on its part.
    fn signed(&mut self, block: &Value) {
        let sig = block["thoughtSignature"].clone();
        let text = block["text"].as_str().unwrap_or_default();
        match block["gemini"].as_str() {
            Some("functionCall") => {
                let name = block["name"].as_str().unwrap_or_default().to_string();
                self.pending.push((name, sig));
            }
            Some("thought") => self.push(
                "model",
                vec![json!({"text": text, "thought": true, "thoughtSignature": sig})],
            ),
            Some("text") => {
                // The signed part's text ends the assistant text just before it: split it off
                // (the relay joined the streamed parts) and sign it again.
                if let Some((_, parts)) = self.out.last_mut().filter(|(r, _)| *r == "model")
                    && let Some(last) = parts.last_mut()
                    && last.get("thoughtSignature").is_none()
                    && last.get("thought").is_none()
                    && let Some(whole) = last.get("text").and_then(Value::as_str)
                    && let Some(head) = whole.strip_suffix(text)
                {
                    if head.is_empty() {
                        last["thoughtSignature"] = sig;
                        return;
                    }
                    last["text"] = json!(head);
                }
                self.push(
                    "model",
                    vec![json!({"text": text, "thoughtSignature": sig})],
                );
            }
            // Another provider's block (a conversation moved between upstream kinds).
            _ => {}
        }
    }
}

/// A message's content as Gemini parts (empty text left out).
fn content_parts(c: &MessageContent) -> Vec<Value> {
    match c {
        MessageContent::Text(t) if t.is_empty() => Vec::new(),
        MessageContent::Text(t) => vec![json!({"text": t})],
        MessageContent::Parts(parts) => parts.iter().filter_map(part).collect(),
    }
}

fn part(p: &InputPart) -> Option<Value> {
    match p {
        InputPart::InputText { text, .. } | InputPart::OutputText { text, .. } => {
            (!text.is_empty()).then(|| json!({"text": text}))
        }
        InputPart::Refusal { refusal } => (!refusal.is_empty()).then(|| json!({"text": refusal})),
        InputPart::InputImage { image_url, .. } => Some(media(image_url.as_deref()?, "image/jpeg")),
        InputPart::InputFile {
            file_data,
            file_url,
            filename,
            ..
        } => {
            let guess =
                mime_of(filename.as_deref().unwrap_or_default()).unwrap_or("application/pdf");
            match (file_data, file_url) {
                (Some(d), _) if d.starts_with("data:") => Some(media(d, guess)),
                (Some(d), _) => Some(json!({"inlineData": {"mimeType": guess, "data": d}})),
                (None, Some(u)) => Some(media(u, guess)),
                (None, None) => None,
            }
        }
    }
}

/// A `data:` URL as `inlineData`, any other URL as `fileData` (its MIME type from its extension,
/// else `fallback`).
fn media(url: &str, fallback: &str) -> Value {
    if let Some(rest) = url.strip_prefix("data:")
        && let Some((meta, data)) = rest.split_once(',')
        && let Some(mime) = meta.strip_suffix(";base64")
    {
        return json!({"inlineData": {"mimeType": mime, "data": data}});
    }
    let path = url.split(['?', '#']).next().unwrap_or(url);
    let mime = mime_of(path).unwrap_or(fallback);
    json!({"fileData": {"mimeType": mime, "fileUri": url}})
}

fn mime_of(name: &str) -> Option<&'static str> {
    let ext = name.rsplit_once('.')?.1.to_ascii_lowercase();
    Some(match ext.as_str() {
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "heic" => "image/heic",
        "pdf" => "application/pdf",
        "txt" => "text/plain",
        _ => return None,
    })
}

/// A Gemini model (`{name: "models/ID", displayName, supportedGenerationMethods, ...}`) as the
/// relay lists models (`id` without `models/`, `object: "model"`, `owned_by`), its own fields
/// kept; `None` for a model that cannot `generateContent` (embeddings and the like).
pub fn model_object(mut m: Value) -> Option<Value> {
    let generates = m["supportedGenerationMethods"]
        .as_array()
        .is_some_and(|ms| ms.iter().any(|x| x == "generateContent"));
    let id = m["name"].as_str()?;
    let id = id.strip_prefix("models/").unwrap_or(id).to_string();
    let o = m.as_object_mut().filter(|_| generates)?;
    o.insert("id".into(), json!(id));
    o.entry("object").or_insert_with(|| json!("model"));
    o.entry("created").or_insert_with(|| json!(0));
    o.entry("owned_by").or_insert_with(|| json!("google"));
    Some(m)
}

/// Turns Gemini's streamed chunks into model events. Pure; one per turn.
#[derive(Debug, Default)]
pub struct ChunkParser {
    next_call: u32,
    saw_call: bool,
    id_sent: bool,
    finish: Option<String>,
    /// The prompt was blocked (`promptFeedback.blockReason`).
    blocked: Option<String>,
    /// The last `usageMetadata` (each chunk may repeat the counts so far).
    usage: Option<Value>,
}

impl ChunkParser {
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether a chunk gave a finish reason (or a blocked prompt).
    pub fn finished(&self) -> bool {
        self.finish.is_some() || self.blocked.is_some()
    }

    /// Parses one chunk's `data`.
    pub fn parse(&mut self, data: &str, out: &mut Vec<ModelEvent>) -> Result<(), UpstreamError> {
        let chunk: Value = serde_json::from_str(data).map_err(|e| {
            UpstreamError::Protocol(format!(
                "chunk is not valid JSON ({e}): {}",
                super::chat::preview(data)
            ))
        })?;
        if let Some(e) = chunk.get("error") {
            return Err(error(e));
        }
        if !self.id_sent
            && let Some(id) = chunk["responseId"].as_str().filter(|id| !id.is_empty())
        {
            self.id_sent = true;
            out.push(ModelEvent::ResponseId(id.to_string()));
        }
        if let Some(r) = chunk
            .pointer("/promptFeedback/blockReason")
            .and_then(Value::as_str)
        {
            self.blocked = Some(r.to_string());
        }
        if let Some(u) = chunk.get("usageMetadata").filter(|u| u.is_object()) {
            self.usage = Some(u.clone());
        }
        let candidate = &chunk["candidates"][0];
        for part in candidate
            .pointer("/content/parts")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default()
        {
            self.part(part, out);
        }
        if let Some(r) = candidate["finishReason"].as_str() {
            self.finish = Some(r.to_string());
        }
        Ok(())
    }

    fn part(&mut self, part: &Value, out: &mut Vec<ModelEvent>) {
        let sig = part["thoughtSignature"].as_str().filter(|s| !s.is_empty());
        let text = part["text"].as_str();
        if let Some(call) = part.get("functionCall") {
            let name = call["name"].as_str().unwrap_or_default();
            if let Some(sig) = sig {
                out.push(ModelEvent::SignedReasoning(
                    json!({"gemini": "functionCall", "name": name, "thoughtSignature": sig}),
                ));
            }
            let index = self.next_call;
            self.next_call = self.next_call.saturating_add(1);
            self.saw_call = true;
            let args = match call.get("args") {
                Some(a @ Value::Object(_)) => a.to_string(),
                _ => "{}".into(),
            };
            out.push(ModelEvent::ToolCall {
                index,
                id: call["id"].as_str().map(str::to_string),
                name: Some(name.to_string()),
                arguments: args,
            });
        } else if part["thought"].as_bool() == Some(true) {
            let text = text.unwrap_or_default();
            if !text.is_empty() {
                out.push(ModelEvent::ReasoningSummary(text.to_string()));
            }
            if let Some(sig) = sig {
                out.push(ModelEvent::SignedReasoning(
                    json!({"gemini": "thought", "text": text, "thoughtSignature": sig}),
                ));
            }
        } else if let Some(text) = text {
            if !text.is_empty() {
                out.push(ModelEvent::Text(text.to_string()));
            }
            if let Some(sig) = sig {
                out.push(ModelEvent::SignedReasoning(
                    json!({"gemini": "text", "text": text, "thoughtSignature": sig}),
                ));
            }
        } else if let Some(sig) = sig {
            // A signature on a part the relay does not show: kept, as an empty text part's.
            out.push(ModelEvent::SignedReasoning(
                json!({"gemini": "text", "text": "", "thoughtSignature": sig}),
            ));
        }
    }

    /// The stream ended: the turn's usage, then why it ended (an error if it never said, or
    /// ended on a malformed call).
    pub fn end(&mut self, out: &mut Vec<ModelEvent>) -> Result<(), UpstreamError> {
        let reason = match (&self.blocked, &self.finish) {
            (Some(_), _) => FinishReason::ContentFilter,
            (None, Some(r)) => match finish_reason(r, self.saw_call) {
                Some(r) => r,
                None => {
                    return Err(UpstreamError::Protocol(format!(
                        "the model's turn ended with {r}"
                    )));
                }
            },
            (None, None) => {
                return Err(UpstreamError::Cut(
                    "the stream ended without a finish reason".into(),
                ));
            }
        };
        if let Some(u) = &self.usage {
            out.push(ModelEvent::Usage(usage(u)));
        }
        out.push(ModelEvent::Finish(reason));
        Ok(())
    }
}

/// A Gemini `finishReason` as a finish reason; `None` for a turn that failed (a malformed or
/// unexpected tool call).
pub fn finish_reason(r: &str, saw_call: bool) -> Option<FinishReason> {
    Some(match r {
        "MAX_TOKENS" => FinishReason::Length,
        "SAFETY"
        | "RECITATION"
        | "LANGUAGE"
        | "BLOCKLIST"
        | "PROHIBITED_CONTENT"
        | "SPII"
        | "IMAGE_SAFETY"
        | "IMAGE_PROHIBITED_CONTENT"
        | "IMAGE_RECITATION" => FinishReason::ContentFilter,
        "MALFORMED_FUNCTION_CALL" | "UNEXPECTED_TOOL_CALL" | "TOO_MANY_TOOL_CALLS" => return None,
        _ if saw_call => FinishReason::ToolCalls,
        _ => FinishReason::Stop,
    })
}

/// Gemini's counts as OpenAI's: input is `promptTokenCount` (cached tokens included, as
/// `cachedContentTokenCount`) plus any tool-use prompt; output is the answer's
/// (`candidatesTokenCount`) plus the thoughts' (`thoughtsTokenCount`, also `reasoning_tokens`).
pub fn usage(u: &Value) -> Usage {
    let n = |k: &str| u[k].as_u64().unwrap_or(0);
    let thoughts = n("thoughtsTokenCount");
    let mut usage = Usage {
        input_tokens: n("promptTokenCount").saturating_add(n("toolUsePromptTokenCount")),
        output_tokens: n("candidatesTokenCount").saturating_add(thoughts),
        ..Usage::default()
    };
    usage.input_tokens_details.cached_tokens = n("cachedContentTokenCount");
    usage.output_tokens_details.reasoning_tokens = thoughts;
    usage.total_tokens = usage.input_tokens.saturating_add(usage.output_tokens);
    usage
}

/// Gemini's error envelope (`{code, message, status}`) as an upstream error with its status.
fn error(e: &Value) -> UpstreamError {
    let status = e["code"]
        .as_u64()
        .and_then(|c| u16::try_from(c).ok())
        .unwrap_or(500);
    UpstreamError::Status {
        status,
        message: e["message"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| format!("upstream {}", e["status"].as_str().unwrap_or("error"))),
        body: Some(json!({"error": e})),
        retry_after: None,
    }
}

/// The model events of a streamed answer (no `[DONE]`: the stream ends when the body does).
pub(crate) fn events(body: super::wire::Body, idle: Duration) -> ModelStream {
    super::parsed_events(body, idle, ChunkParser::new())
}

impl super::StreamParser for ChunkParser {
    fn parse(&mut self, data: &str, out: &mut Vec<ModelEvent>) -> Result<(), UpstreamError> {
        ChunkParser::parse(self, data, out)
    }

    /// Gemini sends no `[DONE]`: the answer ends with the body.
    fn end(&mut self, _done: bool, out: &mut Vec<ModelEvent>) -> Result<(), UpstreamError> {
        ChunkParser::end(self, out)
    }
}

#[cfg(test)]
mod tests;
