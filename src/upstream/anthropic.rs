//! Anthropic's Messages API (`POST /v1/messages`): the conversation as `system` and
//! `messages` of content blocks, and its streamed events as model events.
//!
//! What maps: text, images (URL and base64), PDFs as documents, function calls as `tool_use`
//! blocks and their outputs as `tool_result` blocks (ids made safe for Anthropic, the same on
//! both), `tool_choice` (`auto`, `any`, `tool`, `none`; `disable_parallel_tool_use`),
//! `reasoning.effort` as a `thinking` budget, `temperature`, `top_p`, the user as
//! `metadata.user_id`. Consecutive messages of one role merge into one message, as Anthropic
//! requires; system and developer messages join the instructions in `system`. A reasoning item's
//! signed blocks (`thinking` with its `signature`, `redacted_thinking`) go back verbatim where the
//! item stands, before the calls they led to; thinking text is the reasoning item's summary
//! (Anthropic's models summarize their thinking). What does not map: a structured-output
//! `text.format`, files by id, and the Responses-only options.

mod cache;

use std::collections::HashMap;
use std::time::Duration;

use serde::Serialize;
use serde_json::{Map, Value, json};

use super::{
    Body, FinishReason, ModelEvent, ModelStream, TurnRequest, TurnToolChoice, UpstreamError,
};
use crate::api::Usage;
use crate::api::request::{InputItem, InputPart, MessageContent, Role, ToolOutput};

/// The `anthropic-version` header every request carries.
pub const VERSION: &str = "2023-06-01";

/// `max_tokens` when the request sets no `max_output_tokens` (Anthropic requires one): the most
/// a model answers in one turn, reasoning budget not counted (it is added on top).
pub const DEFAULT_MAX_TOKENS: u64 = 8192;

/// The least thinking budget Anthropic takes.
const MIN_THINKING_BUDGET: u64 = 1024;

/// A tool as Anthropic takes it.
#[derive(Serialize)]
pub struct AnthropicTool<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    description: &'a str,
    input_schema: &'a Value,
}

/// The thinking budget for a `reasoning.effort` (`none`, or an unknown effort: no thinking).
pub fn thinking_budget(effort: &str) -> Option<u64> {
    Some(match effort {
        "minimal" => 1024,
        "low" => 2048,
        "medium" => 8192,
        "high" => 16384,
        "xhigh" => 32768,
        _ => return None,
    })
}

/// The `POST /messages` body for a turn.
pub fn request_body(req: &TurnRequest) -> Body<AnthropicTool<'_>> {
    let mut body = Map::new();
    body.insert("model".into(), json!(req.model));
    let (system, mut messages) = messages(req.instructions.as_deref(), &req.items, |i| {
        req.signed_reasoning.get(&i).map(Vec::as_slice)
    });
    cache::place(&req.responses_only, &mut messages);
    if !system.is_empty() {
        body.insert("system".into(), json!(system));
    }
    body.insert("messages".into(), Value::Array(messages));
    body.insert("stream".into(), json!(true));
    let budget = req.reasoning_effort.as_deref().and_then(thinking_budget);
    let (max_tokens, budget) = match (req.max_output_tokens, budget) {
        // The client's bound covers reasoning and answer, as OpenAI's does.
        (Some(n), b) => {
            let n = n.max(1);
            (
                n,
                b.map(|b| b.min(n - 1))
                    .filter(|b| *b >= MIN_THINKING_BUDGET),
            )
        }
        (None, Some(b)) => (DEFAULT_MAX_TOKENS + b, Some(b)),
        (None, None) => (DEFAULT_MAX_TOKENS, None),
    };
    body.insert("max_tokens".into(), json!(max_tokens));
    if let Some(b) = budget {
        body.insert(
            "thinking".into(),
            json!({"type": "enabled", "budget_tokens": b}),
        );
    }
    if let Some(t) = req.temperature {
        body.insert("temperature".into(), json!(t));
    }
    if let Some(p) = req.top_p {
        body.insert("top_p".into(), json!(p));
    }
    if let Some(u) = &req.user {
        body.insert("metadata".into(), json!({"user_id": u}));
    }
    let tools: Vec<AnthropicTool<'_>> = req
        .tools
        .iter()
        .map(|t| AnthropicTool {
            name: &t.name,
            description: &t.description,
            input_schema: &t.parameters,
        })
        .collect();
    if !tools.is_empty() {
        let mut choice = match &req.tool_choice {
            TurnToolChoice::Auto => json!({"type": "auto"}),
            TurnToolChoice::None => json!({"type": "none"}),
            TurnToolChoice::Required => json!({"type": "any"}),
            TurnToolChoice::Function(name) => json!({"type": "tool", "name": name}),
        };
        if !req.parallel_tool_calls && req.tool_choice != TurnToolChoice::None {
            choice["disable_parallel_tool_use"] = json!(true);
        }
        body.insert("tool_choice".into(), choice);
    }
    Body {
        fields: body,
        tools,
    }
}

/// The `POST /messages/count_tokens` body for a turn: what counts (system, messages, tools,
/// `tool_choice`), without what only a generation takes (`max_tokens`, `stream`, sampling,
/// `thinking`: the history's signed thinking is not opened for a count).
pub fn count_body(req: &TurnRequest) -> Body<AnthropicTool<'_>> {
    let mut b = request_body(req);
    for k in [
        "stream",
        "max_tokens",
        "temperature",
        "top_p",
        "metadata",
        "thinking",
    ] {
        b.fields.remove(k);
    }
    b
}

/// A call id as Anthropic takes a `tool_use` id (letters, digits, `_` and `-`): anything else
/// becomes `_`, the same on the call and its result.
pub fn tool_id(call_id: &str) -> String {
    let id: String = call_id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if id.is_empty() { "call".into() } else { id }
}

/// The conversation as Anthropic's `system` text and `messages`: instructions, system and
/// developer messages joined into `system`; every other item a content block of a user or
/// assistant message, consecutive blocks of one role in one message (a user message's
/// `tool_result` blocks first). `signed(i)` gives the signed
/// reasoning blocks of item `i` (a reasoning item without them is left out).
pub fn messages<'s>(
    instructions: Option<&str>,
    items: &[InputItem],
    signed: impl Fn(usize) -> Option<&'s [Value]>,
) -> (String, Vec<Value>) {
    let mut system: Vec<String> = instructions
        .filter(|i| !i.is_empty())
        .map(str::to_string)
        .into_iter()
        .collect();
    let mut out: Vec<(&'static str, Vec<Value>)> = Vec::with_capacity(items.len());
    let mut push = |role: &'static str, blocks: Vec<Value>| {
        if blocks.is_empty() {
            return;
        }
        match out.last_mut() {
            Some((r, b)) if *r == role => b.extend(blocks),
            _ => out.push((role, blocks)),
        }
    };
    for (i, item) in items.iter().enumerate() {
        match item {
            InputItem::Message(m) => match m.role {
                Role::System | Role::Developer => {
                    let t = m.content.text();
                    if !t.is_empty() {
                        system.push(t);
                    }
                }
                Role::User => push("user", content_blocks(&m.content)),
                Role::Assistant => push("assistant", content_blocks(&m.content)),
            },
            InputItem::Reasoning(_) => {
                if let Some(blocks) = signed(i) {
                    push("assistant", blocks.to_vec());
                }
            }
            InputItem::FunctionCall(f) => {
                let input = match serde_json::from_str::<Value>(&f.arguments) {
                    Ok(v @ Value::Object(_)) => v,
                    _ => json!({}),
                };
                push(
                    "assistant",
                    vec![
                        json!({"type": "tool_use", "id": tool_id(&f.call_id), "name": f.name, "input": input}),
                    ],
                );
            }
            InputItem::FunctionCallOutput(o) => {
                let content = match &o.output {
                    ToolOutput::Text(t) => json!(t),
                    ToolOutput::Parts(parts) => {
                        Value::Array(parts.iter().filter_map(output_part).collect())
                    }
                };
                push(
                    "user",
                    vec![
                        json!({"type": "tool_result", "tool_use_id": tool_id(&o.call_id), "content": content}),
                    ],
                );
            }
            // Every tool's calls reach the upstream as function calls and outputs
            // (`run::turn::model_view`); the rest is not the model's business.
            _ => {}
        }
    }
    // In a user message the tool results come first (Anthropic's rule; steering input prepended
    // to a continuation's outputs comes before them in the input).
    let messages = out
        .into_iter()
        .map(|(role, mut content)| {
            content.sort_by_key(|b| b["type"] != "tool_result");
            json!({"role": role, "content": content})
        })
        .collect();
    (system.join("\n\n"), messages)
}

/// A message's content as Anthropic blocks (empty text left out: Anthropic refuses it).
fn content_blocks(c: &MessageContent) -> Vec<Value> {
    match c {
        MessageContent::Text(t) if t.is_empty() => Vec::new(),
        MessageContent::Text(t) => vec![json!({"type": "text", "text": t})],
        MessageContent::Parts(parts) => parts.iter().filter_map(part_block).collect(),
    }
}

/// A part as an Anthropic block; a part the client marked as the end of a reusable prefix
/// (`prompt_cache_breakpoint`) is marked for [`cache::place`].
fn part_block(p: &InputPart) -> Option<Value> {
    let mut block = plain_block(p)?;
    if let InputPart::InputText {
        prompt_cache_breakpoint: Some(_),
        ..
    }
    | InputPart::InputImage {
        prompt_cache_breakpoint: Some(_),
        ..
    }
    | InputPart::InputFile {
        prompt_cache_breakpoint: Some(_),
        ..
    } = p
    {
        block["cache_control"] = cache::marked();
    }
    Some(block)
}

fn plain_block(p: &InputPart) -> Option<Value> {
    match p {
        InputPart::InputText { text, .. } | InputPart::OutputText { text, .. } => {
            (!text.is_empty()).then(|| json!({"type": "text", "text": text}))
        }
        InputPart::Refusal { refusal } => {
            (!refusal.is_empty()).then(|| json!({"type": "text", "text": refusal}))
        }
        InputPart::InputImage { image_url, .. } => {
            Some(json!({"type": "image", "source": source(image_url.as_deref()?)}))
        }
        InputPart::InputFile {
            file_data,
            file_url,
            ..
        } => {
            let src = match (file_data, file_url) {
                (Some(d), _) => source(d),
                (None, Some(u)) => source(u),
                (None, None) => return None,
            };
            Some(json!({"type": "document", "source": src}))
        }
    }
}

/// A part of a tool's output: text and images as Anthropic takes them.
fn output_part(p: &Value) -> Option<Value> {
    match p.get("type")?.as_str()? {
        "input_text" | "output_text" | "text" => {
            let t = p.get("text")?.as_str()?;
            (!t.is_empty()).then(|| json!({"type": "text", "text": t}))
        }
        "input_image" => {
            let url = p.get("image_url")?.as_str()?;
            Some(json!({"type": "image", "source": source(url)}))
        }
        _ => None,
    }
}

/// An image or document source: a `data:` URL as base64 with its media type, else a URL.
fn source(url: &str) -> Value {
    if let Some(rest) = url.strip_prefix("data:")
        && let Some((meta, data)) = rest.split_once(',')
        && let Some(media) = meta.strip_suffix(";base64")
    {
        return json!({"type": "base64", "media_type": media, "data": data});
    }
    json!({"type": "url", "url": url})
}

/// An Anthropic model object (`{type, id, display_name, created_at}`) as the relay lists models
/// (`object: "model"`, `owned_by`), its own fields kept.
pub fn model_object(mut m: Value) -> Value {
    if let Some(o) = m.as_object_mut() {
        o.entry("object").or_insert_with(|| json!("model"));
        o.entry("created").or_insert_with(|| json!(0));
        o.entry("owned_by").or_insert_with(|| json!("anthropic"));
    }
    m
}

/// One content block of the answer being streamed.
#[derive(Debug)]
enum Block {
    Text,
    /// A tool call: its call index, and whether any argument bytes were passed on.
    ToolUse {
        index: u32,
        args: bool,
    },
    Thinking {
        text: String,
        signature: String,
    },
    Redacted {
        data: Value,
    },
    Other,
}

/// A stream's most frequent event, a `content_block_delta` carrying a `text_delta`, read in one
/// pass without building a tree: the other fields are skipped, the text borrowed unless escaped.
#[derive(serde::Deserialize)]
struct TextDelta<'a> {
    #[serde(rename = "type", borrow)]
    kind: std::borrow::Cow<'a, str>,
    #[serde(default)]
    index: u64,
    #[serde(borrow)]
    delta: TextDeltaBody<'a>,
}

#[derive(serde::Deserialize)]
struct TextDeltaBody<'a> {
    #[serde(rename = "type", borrow)]
    kind: std::borrow::Cow<'a, str>,
    #[serde(default, borrow)]
    text: std::borrow::Cow<'a, str>,
}

impl TextDelta<'_> {
    /// A text delta's block index and text; `None` for any other event, or one this shape
    /// does not read (a field of another type or twice, not JSON), which the general path reads.
    fn parse(data: &str) -> Option<(u64, std::borrow::Cow<'_, str>)> {
        let ev: TextDelta<'_> = serde_json::from_str(data).ok()?;
        (ev.kind == "content_block_delta" && ev.delta.kind == "text_delta")
            .then_some((ev.index, ev.delta.text))
    }
}

/// Turns Anthropic stream events into model events. Pure; one per turn.
#[derive(Debug, Default)]
pub struct EventParser {
    finished: bool,
    blocks: HashMap<u64, Block>,
    next_call: u32,
    saw_call: bool,
    stop_reason: Option<String>,
    /// Counts as Anthropic reports them: `message_start`'s, updated by each `message_delta`.
    usage: Map<String, Value>,
}

impl EventParser {
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether `message_stop` was seen.
    pub fn finished(&self) -> bool {
        self.finished
    }

    /// Parses one event's `data`.
    pub fn parse(&mut self, data: &str, out: &mut Vec<ModelEvent>) -> Result<(), UpstreamError> {
        if let Some((index, text)) = TextDelta::parse(data)
            && self.blocks.contains_key(&index)
        {
            if !text.is_empty() {
                out.push(ModelEvent::Text(text.into_owned()));
            }
            return Ok(());
        }
        let ev: Value = serde_json::from_str(data).map_err(|e| {
            UpstreamError::Protocol(format!(
                "event is not valid JSON ({e}): {}",
                super::chat::preview(data)
            ))
        })?;
        let at = ev["index"].as_u64().unwrap_or(0);
        match ev["type"].as_str().unwrap_or_default() {
            "message_start" => {
                let m = &ev["message"];
                if let Some(id) = m["id"].as_str().filter(|id| !id.is_empty()) {
                    out.push(ModelEvent::ResponseId(id.to_string()));
                }
                self.note_usage(&m["usage"]);
            }
            "content_block_start" => self.block_start(at, &ev["content_block"], out),
            "content_block_delta" => self.block_delta(at, &ev["delta"], out)?,
            "content_block_stop" => self.block_stop(at, out),
            "message_delta" => {
                if let Some(r) = ev.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    self.stop_reason = Some(r.to_string());
                }
                self.note_usage(&ev["usage"]);
            }
            "message_stop" => self.finish(out),
            "error" => return Err(stream_error(ev.get("error").unwrap_or(&ev))),
            // `ping` keeps the answer alive (any event re-dates the idle timer); unknown events
            // are for newer clients.
            _ => {}
        }
        Ok(())
    }

    fn note_usage(&mut self, u: &Value) {
        if let Some(u) = u.as_object() {
            for (k, v) in u {
                if v.is_u64() {
                    self.usage.insert(k.clone(), v.clone());
                }
            }
        }
    }

    fn block_start(&mut self, at: u64, b: &Value, out: &mut Vec<ModelEvent>) {
        let s = |k: &str| b[k].as_str().unwrap_or_default().to_string();
        let block = match b["type"].as_str().unwrap_or_default() {
            "text" => {
                let t = s("text");
                if !t.is_empty() {
                    out.push(ModelEvent::Text(t));
                }
                Block::Text
            }
            "tool_use" => {
                let index = self.next_call;
                self.next_call = self.next_call.saturating_add(1);
                self.saw_call = true;
                out.push(ModelEvent::ToolCall {
                    index,
                    id: b["id"].as_str().map(str::to_string),
                    name: b["name"].as_str().map(str::to_string),
                    arguments: String::new(),
                });
                Block::ToolUse { index, args: false }
            }
            "thinking" => {
                let text = s("thinking");
                if !text.is_empty() {
                    out.push(ModelEvent::ReasoningSummary(text.clone()));
                }
                Block::Thinking {
                    text,
                    signature: s("signature"),
                }
            }
            "redacted_thinking" => Block::Redacted {
                data: b["data"].clone(),
            },
            _ => Block::Other,
        };
        self.blocks.insert(at, block);
    }

    fn block_delta(
        &mut self,
        at: u64,
        d: &Value,
        out: &mut Vec<ModelEvent>,
    ) -> Result<(), UpstreamError> {
        let s = |k: &str| d[k].as_str().unwrap_or_default().to_string();
        let Some(block) = self.blocks.get_mut(&at) else {
            return Err(UpstreamError::Protocol(format!(
                "a delta for content block {at}, which did not start"
            )));
        };
        match (d["type"].as_str().unwrap_or_default(), block) {
            ("text_delta", _) => {
                let t = s("text");
                if !t.is_empty() {
                    out.push(ModelEvent::Text(t));
                }
            }
            ("input_json_delta", Block::ToolUse { index, args }) => {
                let piece = s("partial_json");
                if !piece.is_empty() {
                    *args = true;
                    out.push(ModelEvent::ToolCall {
                        index: *index,
                        id: None,
                        name: None,
                        arguments: piece,
                    });
                }
            }
            ("thinking_delta", Block::Thinking { text, .. }) => {
                let t = s("thinking");
                if !t.is_empty() {
                    text.push_str(&t);
                    out.push(ModelEvent::ReasoningSummary(t));
                }
            }
            ("signature_delta", Block::Thinking { signature, .. }) => {
                signature.push_str(&s("signature"))
            }
            _ => {}
        }
        Ok(())
    }

    fn block_stop(&mut self, at: u64, out: &mut Vec<ModelEvent>) {
        match self.blocks.remove(&at) {
            // A call with no input streamed: its arguments are the empty object.
            Some(Block::ToolUse { index, args: false }) => out.push(ModelEvent::ToolCall {
                index,
                id: None,
                name: None,
                arguments: "{}".into(),
            }),
            Some(Block::Thinking { text, signature }) => out.push(ModelEvent::SignedReasoning(
                json!({"type": "thinking", "thinking": text, "signature": signature}),
            )),
            Some(Block::Redacted { data }) => out.push(ModelEvent::SignedReasoning(
                json!({"type": "redacted_thinking", "data": data}),
            )),
            _ => {}
        }
    }

    /// `message_stop`: the turn's usage, then why it ended.
    fn finish(&mut self, out: &mut Vec<ModelEvent>) {
        if !self.usage.is_empty() {
            out.push(ModelEvent::Usage(usage(&self.usage)));
        }
        let reason = match self.stop_reason.as_deref() {
            Some("max_tokens" | "model_context_window_exceeded") => FinishReason::Length,
            Some("refusal") => FinishReason::ContentFilter,
            Some("tool_use") => FinishReason::ToolCalls,
            _ if self.saw_call => FinishReason::ToolCalls,
            _ => FinishReason::Stop,
        };
        self.finished = true;
        out.push(ModelEvent::Finish(reason));
    }
}

/// Anthropic's counts as OpenAI's: input counts every prompt token (Anthropic's `input_tokens`
/// leaves out those read from or written to its cache), `cached_tokens` those read from the
/// cache, `cache_write_tokens` those written. Anthropic does not count thinking tokens apart from
/// the answer's, so `reasoning_tokens` stays 0.
pub fn usage(u: &Map<String, Value>) -> Usage {
    let n = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
    let (read, written) = (
        n("cache_read_input_tokens"),
        n("cache_creation_input_tokens"),
    );
    let mut usage = Usage {
        input_tokens: n("input_tokens")
            .saturating_add(read)
            .saturating_add(written),
        output_tokens: n("output_tokens"),
        ..Usage::default()
    };
    usage.input_tokens_details.cached_tokens = read;
    usage.input_tokens_details.cache_write_tokens = written;
    usage.total_tokens = usage.input_tokens.saturating_add(usage.output_tokens);
    usage
}

/// The HTTP status Anthropic gives an error `type`.
pub fn error_status(kind: &str) -> u16 {
    match kind {
        "invalid_request_error" => 400,
        "authentication_error" => 401,
        "permission_error" => 403,
        "not_found_error" => 404,
        "request_too_large" => 413,
        "rate_limit_error" => 429,
        "overloaded_error" => 529,
        _ => 500,
    }
}

/// An `error` event inside the stream (`{"type": "overloaded_error", "message": ...}`).
fn stream_error(e: &Value) -> UpstreamError {
    let kind = e["type"].as_str().unwrap_or("api_error");
    UpstreamError::Status {
        status: error_status(kind),
        message: e["message"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| format!("upstream {kind}")),
        body: Some(e.clone()),
        retry_after: None,
    }
}

/// The model events of a streaming Messages answer.
pub(crate) fn events(body: super::wire::Body, idle: Duration) -> ModelStream {
    super::parsed_events(body, idle, EventParser::new())
}

impl super::StreamParser for EventParser {
    fn parse(&mut self, data: &str, out: &mut Vec<ModelEvent>) -> Result<(), UpstreamError> {
        EventParser::parse(self, data, out)
    }

    const UNFINISHED: &'static str = "the stream ended without message_stop";

    fn complete(&self) -> bool {
        self.finished()
    }
}

#[cfg(test)]
mod tests;
