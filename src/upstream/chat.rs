//! Chat Completions: the conversation as `messages`, and streamed chunks as model events.
//! Handles what real servers differ in: usage on its own chunk or on the finish chunk,
//! `reasoning_content` or `reasoning`, sparse or missing tool-call indices, comment lines,
//! error objects inside the stream, and streams that end without `[DONE]`.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::{
    Body, FinishReason, ModelEvent, ModelStream, TurnRequest, TurnToolChoice, UpstreamError,
};
use crate::api::Usage;
use crate::api::request::{InputItem, InputPart, MessageContent, Role, TextFormat};
use crate::api::response::{InputTokensDetails, OutputTokensDetails};

/// A tool as Chat Completions takes it.
#[derive(Serialize)]
pub struct ChatTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: ChatFunction<'a>,
}

#[derive(Serialize)]
struct ChatFunction<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    strict: Option<bool>,
}

/// The `POST /chat/completions` body for a turn.
pub fn request_body(req: &TurnRequest) -> Body<ChatTool<'_>> {
    let mut body = Map::new();
    body.insert("model".into(), json!(req.model));
    body.insert(
        "messages".into(),
        Value::Array(messages(req.instructions.as_deref(), &req.items)),
    );
    body.insert("stream".into(), json!(true));
    body.insert("stream_options".into(), json!({"include_usage": true}));
    let tools: Vec<ChatTool<'_>> = req
        .tools
        .iter()
        .map(|t| ChatTool {
            kind: "function",
            function: ChatFunction {
                name: &t.name,
                description: &t.description,
                parameters: &t.parameters,
                strict: t.strict,
            },
        })
        .collect();
    if !tools.is_empty() {
        body.insert("parallel_tool_calls".into(), json!(req.parallel_tool_calls));
        let choice = match &req.tool_choice {
            TurnToolChoice::Auto => json!("auto"),
            TurnToolChoice::None => json!("none"),
            TurnToolChoice::Required => json!("required"),
            TurnToolChoice::Function(name) => {
                json!({"type": "function", "function": {"name": name}})
            }
        };
        body.insert("tool_choice".into(), choice);
    }
    req.insert_sampling(&mut body, "max_tokens", 1);
    if let Some(e) = &req.reasoning_effort {
        body.insert("reasoning_effort".into(), json!(e));
    }
    match &req.text_format {
        None | Some(TextFormat::Text) => {}
        Some(TextFormat::JsonObject) => {
            body.insert("response_format".into(), json!({"type": "json_object"}));
        }
        Some(TextFormat::JsonSchema {
            name,
            schema,
            description,
            strict,
        }) => {
            let mut js = json!({"name": name, "schema": schema});
            if let Some(d) = description {
                js["description"] = json!(d);
            }
            if let Some(s) = strict {
                js["strict"] = json!(s);
            }
            body.insert(
                "response_format".into(),
                json!({"type": "json_schema", "json_schema": js}),
            );
        }
    }
    Body {
        fields: body,
        tools,
    }
}

/// The conversation as chat `messages`: instructions first as a system message; consecutive
/// calls merge into one assistant message with `tool_calls`; `developer` becomes `system`
/// (local servers reject the newer role). A user or system message that comes between calls and
/// their outputs (steering input prepended to a continuation's tool outputs, as OpenAI orders
/// it) follows the outputs: Chat Completions servers want each `tool` message right after the
/// call's assistant message.
pub fn messages(instructions: Option<&str>, items: &[InputItem]) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::with_capacity(items.len() + 1);
    if let Some(i) = instructions {
        out.push(json!({"role": "system", "content": i}));
    }
    // Calls of the last assistant message not answered yet, and the messages held back until
    // they are.
    let (mut unanswered, mut held): (Vec<&str>, Vec<Value>) = (Vec::new(), Vec::new());
    for item in items {
        match item {
            InputItem::Message(m) if m.role != Role::Assistant && !unanswered.is_empty() => {
                let mut one = messages(None, std::slice::from_ref(item));
                held.append(&mut one);
            }
            InputItem::Message(m) => {
                // An assistant message ends a group whose outputs never came: what was held
                // keeps its place before it.
                unanswered.clear();
                out.append(&mut held);
                let role = match m.role {
                    Role::User => "user",
                    Role::System | Role::Developer => "system",
                    Role::Assistant => "assistant",
                };
                let content = match (&m.content, m.role) {
                    (MessageContent::Text(t), _) => json!(t),
                    (MessageContent::Parts(parts), Role::User) => {
                        Value::Array(parts.iter().filter_map(user_part).collect())
                    }
                    (c @ MessageContent::Parts(_), _) => json!(c.text()),
                };
                out.push(json!({"role": role, "content": content}));
            }
            InputItem::FunctionCall(f) => {
                if out.last().is_none_or(|m| m["role"] != "assistant") {
                    unanswered.clear();
                    out.append(&mut held);
                }
                unanswered.push(&f.call_id);
                push_tool_call(&mut out, &f.call_id, &f.name, &f.arguments)
            }
            InputItem::FunctionCallOutput(o) => {
                out.push(
                    json!({"role": "tool", "tool_call_id": o.call_id, "content": o.output.text()}),
                );
                unanswered.retain(|id| *id != o.call_id);
                if unanswered.is_empty() {
                    out.append(&mut held);
                }
            }
            // Every tool's calls reach the upstream as function calls and outputs
            // (`run::turn::model_view`); the rest is not the model's business.
            _ => {}
        }
    }
    out.append(&mut held);
    out
}

fn push_tool_call(out: &mut Vec<Value>, call_id: &str, name: &str, arguments: &str) {
    let call = json!({"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}});
    if let Some(last) = out.last_mut()
        && last["role"] == "assistant"
    {
        match last.get_mut("tool_calls").and_then(Value::as_array_mut) {
            Some(calls) => calls.push(call),
            None => {
                last["tool_calls"] = json!([call]);
            }
        }
        return;
    }
    out.push(json!({"role": "assistant", "content": null, "tool_calls": [call]}));
}

fn user_part(p: &InputPart) -> Option<Value> {
    Some(match p {
        InputPart::InputText { text, .. } | InputPart::OutputText { text, .. } => {
            json!({"type": "text", "text": text})
        }
        InputPart::Refusal { refusal } => json!({"type": "text", "text": refusal}),
        InputPart::InputImage {
            image_url, detail, ..
        } => {
            let mut img = json!({"url": image_url.as_deref()?});
            if let Some(d) = detail {
                img["detail"] = json!(d);
            }
            json!({"type": "image_url", "image_url": img})
        }
        InputPart::InputFile {
            file_data,
            filename,
            ..
        } => {
            let mut f = json!({"file_data": file_data.as_deref()?});
            if let Some(n) = filename {
                f["filename"] = json!(n);
            }
            json!({"type": "file", "file": f})
        }
    })
}

#[derive(Deserialize)]
struct Chunk<'a> {
    /// Borrowed from the payload (no copy per chunk; only the first is kept).
    #[serde(default, borrow)]
    id: Option<std::borrow::Cow<'a, str>>,
    #[serde(default)]
    choices: Vec<Choice>,
    #[serde(default)]
    usage: Option<ChatUsage>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct Choice {
    #[serde(default)]
    delta: Option<Delta>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize, Default)]
struct Delta {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    refusal: Option<String>,
    #[serde(default)]
    reasoning_content: Option<String>,
    #[serde(default)]
    reasoning: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<ToolCallDelta>>,
}

#[derive(Deserialize)]
struct ToolCallDelta {
    #[serde(default)]
    index: Option<u32>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<FunctionDelta>,
}

#[derive(Deserialize)]
struct FunctionDelta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
}

#[derive(Deserialize)]
struct ChatUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
    #[serde(default)]
    total_tokens: Option<u64>,
    #[serde(default)]
    prompt_tokens_details: Option<Value>,
    #[serde(default)]
    completion_tokens_details: Option<Value>,
}

impl From<ChatUsage> for Usage {
    fn from(u: ChatUsage) -> Usage {
        let detail = |v: &Option<Value>, k: &str| {
            v.as_ref()
                .and_then(|d| d.get(k))
                .and_then(Value::as_u64)
                .unwrap_or(0)
        };
        Usage {
            input_tokens: u.prompt_tokens,
            input_tokens_details: InputTokensDetails {
                cached_tokens: detail(&u.prompt_tokens_details, "cached_tokens"),
                cache_write_tokens: 0,
            },
            output_tokens: u.completion_tokens,
            output_tokens_details: OutputTokensDetails {
                reasoning_tokens: detail(&u.completion_tokens_details, "reasoning_tokens"),
            },
            total_tokens: u
                .total_tokens
                .unwrap_or(u.prompt_tokens.saturating_add(u.completion_tokens)),
        }
    }
}

/// Turns chunk payloads into model events. Pure; one per turn.
#[derive(Debug, Default)]
pub struct ChunkParser {
    finished: bool,
    /// Whether the answer's id was passed on (once per turn).
    id_given: bool,
    /// The turn's tool calls, as the upstream names them.
    calls: CallNames,
}

/// A turn's tool calls in order of appearance (a call's position is the index it is given), and
/// how the upstream names them: the latest call at each `index`, and each call's `id`, once seen.
#[derive(Debug, Default)]
struct CallNames {
    ids: Vec<Option<String>>,
    /// The call the last delta went to.
    current: Option<usize>,
    by_index: std::collections::HashMap<u32, usize>,
    by_id: std::collections::HashMap<String, usize>,
}

impl ChunkParser {
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether a finish reason was seen.
    pub fn finished(&self) -> bool {
        self.finished
    }

    /// Which of the turn's calls a tool-call delta continues, or a new one. A delta belongs to
    /// the latest call with its `index`, unless it names a function and carries another `id`:
    /// some servers (Ollama, SGLang) send every call of a turn at index 0, told apart only by
    /// their ids, while others send a fresh id with every delta of one call (argument deltas name
    /// no function). Without an index, a delta naming a function under a new id starts a call,
    /// one with a known id continues that call, and any other the call the last delta went to.
    fn call_index(&mut self, index: Option<u32>, id: Option<&str>, named: bool) -> u32 {
        let c = &mut self.calls;
        let found = match (index, id) {
            (Some(i), _) => c.by_index.get(&i).copied(),
            (None, Some(id)) => c
                .by_id
                .get(id)
                .copied()
                .or(if named { None } else { c.current }),
            (None, None) => c.current,
        };
        let another_call = |p: usize| {
            named && matches!((c.ids[p].as_deref(), id), (Some(known), Some(id)) if known != id)
        };
        let position = match found {
            Some(p) if !another_call(p) => p,
            _ => {
                c.ids.push(None);
                c.ids.len() - 1
            }
        };
        c.current = Some(position);
        if let Some(i) = index {
            c.by_index.insert(i, position);
        }
        if let Some(id) = id
            && c.ids[position].is_none()
        {
            c.ids[position] = Some(id.to_string());
            c.by_id.insert(id.to_string(), position);
        }
        u32::try_from(position).unwrap_or(u32::MAX)
    }

    /// Parses one `data:` payload.
    pub fn parse(&mut self, data: &str, out: &mut Vec<ModelEvent>) -> Result<(), UpstreamError> {
        let chunk: Chunk<'_> = serde_json::from_str(data).map_err(|e| {
            UpstreamError::Protocol(format!("chunk is not valid JSON ({e}): {}", preview(data)))
        })?;
        if let Some(err) = chunk.error {
            let message = err
                .get("message")
                .and_then(Value::as_str)
                .map(str::to_string)
                .unwrap_or_else(|| err.to_string());
            let status = err
                .get("code")
                .and_then(Value::as_u64)
                .filter(|c| (400..600).contains(c))
                .unwrap_or(502) as u16;
            return Err(UpstreamError::Status {
                status,
                message,
                body: Some(err),
                retry_after: None,
            });
        }
        if !self.id_given
            && let Some(id) = chunk.id.filter(|id| !id.is_empty())
        {
            self.id_given = true;
            out.push(ModelEvent::ResponseId(id.into_owned()));
        }
        for choice in chunk.choices {
            if let Some(delta) = choice.delta {
                if let Some(r) = delta
                    .reasoning_content
                    .or(delta.reasoning)
                    .filter(|r| !r.is_empty())
                {
                    out.push(ModelEvent::Reasoning(r));
                }
                if let Some(t) = delta.content.filter(|t| !t.is_empty()) {
                    out.push(ModelEvent::Text(t));
                }
                if let Some(r) = delta.refusal.filter(|r| !r.is_empty()) {
                    out.push(ModelEvent::Refusal(r));
                }
                for call in delta.tool_calls.into_iter().flatten() {
                    let id = call.id.filter(|i| !i.is_empty());
                    let (name, arguments) = match call.function {
                        Some(f) => (
                            f.name.filter(|n| !n.is_empty()),
                            f.arguments.unwrap_or_default(),
                        ),
                        None => (None, String::new()),
                    };
                    let index = self.call_index(call.index, id.as_deref(), name.is_some());
                    out.push(ModelEvent::ToolCall {
                        index,
                        id,
                        name,
                        arguments,
                    });
                }
            }
            if let Some(reason) = choice.finish_reason.filter(|r| !r.is_empty()) {
                self.finished = true;
                out.push(ModelEvent::Finish(FinishReason::parse(&reason)));
            }
        }
        if let Some(u) = chunk.usage {
            out.push(ModelEvent::Usage(u.into()));
        }
        Ok(())
    }
}

pub(crate) fn preview(s: &str) -> String {
    let mut end = s.len().min(200);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

/// The model events of a streaming chat answer.
pub(crate) fn events(body: super::wire::Body, idle: Duration) -> ModelStream {
    super::parsed_events(body, idle, ChunkParser::new())
}

impl super::StreamParser for ChunkParser {
    fn parse(&mut self, data: &str, out: &mut Vec<ModelEvent>) -> Result<(), UpstreamError> {
        ChunkParser::parse(self, data, out)
    }

    /// Usage may follow the finish reason: read on to `[DONE]` or the body's end.
    fn end(&mut self, done: bool, _out: &mut Vec<ModelEvent>) -> Result<(), UpstreamError> {
        if done || self.finished() {
            return Ok(());
        }
        Err(UpstreamError::Cut(
            "the stream ended without a finish reason or [DONE]".into(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_between_calls_and_their_outputs_follows_the_outputs() {
        let items: Vec<InputItem> = serde_json::from_value(json!([
            {"type": "message", "role": "user", "content": "look it up"},
            {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": "{}"},
            {"type": "function_call", "call_id": "c2", "name": "lookup", "arguments": "{}"},
            {"type": "message", "role": "user", "content": "prefer recent results"},
            {"type": "function_call_output", "call_id": "c1", "output": "r1"},
            {"type": "function_call_output", "call_id": "c2", "output": "r2"},
            {"type": "message", "role": "assistant", "content": "done"},
            {"type": "function_call", "call_id": "c3", "name": "lookup", "arguments": "{}"},
            {"type": "message", "role": "user", "content": "never answered"},
            {"type": "message", "role": "assistant", "content": "moving on"}
        ]))
        .unwrap();
        let out = messages(None, &items);
        let shape: Vec<(&str, &str)> = (out.iter())
            .map(|m| {
                let what = m["content"].as_str().or(m["tool_call_id"].as_str());
                (m["role"].as_str().unwrap(), what.unwrap_or("calls"))
            })
            .collect();
        assert_eq!(
            shape,
            [
                ("user", "look it up"),
                ("assistant", "calls"),
                ("tool", "r1"),
                ("tool", "r2"),
                ("user", "prefer recent results"),
                ("assistant", "done"),
                ("user", "never answered"),
                ("assistant", "moving on"),
            ]
        );
        assert_eq!(out[1]["tool_calls"].as_array().unwrap().len(), 2);
        assert_eq!(out[5]["tool_calls"][0]["id"], "c3");
    }
}
