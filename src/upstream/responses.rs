//! A stateless Responses upstream (`/v1/responses` with `store: false`): the conversation as
//! input items, and its streamed events as model events. The upstream's own item ids are never
//! shown to clients: the relay mints its own.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::time::Duration;

use serde_json::{Map, Value, json};

use super::{
    Body, FinishReason, ModelEvent, ModelStream, TurnRequest, TurnToolChoice, UpstreamError,
};
use crate::api::Usage;
use crate::api::request::{InputItem, TextFormat};

/// A tool as a Responses upstream takes it: a function, or a `custom` tool as the client sent it.
#[derive(serde::Serialize)]
pub struct ResponsesTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    parameters: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    strict: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    format: Option<&'a Value>,
}

/// The `POST /responses` body for a turn.
pub fn request_body(req: &TurnRequest) -> Body<ResponsesTool<'_>> {
    let mut body = Map::new();
    body.insert("model".into(), json!(req.model));
    let custom: HashSet<&str> = req
        .tools
        .iter()
        .filter(|t| t.custom.is_some())
        .map(|t| t.name.as_str())
        .collect();
    body.insert("input".into(), Value::Array(input(&req.items, &custom)));
    body.insert("stream".into(), json!(true));
    body.insert("store".into(), json!(false));
    if let Some(i) = &req.instructions {
        body.insert("instructions".into(), json!(i));
    }
    let tools: Vec<ResponsesTool<'_>> = req
        .tools
        .iter()
        .map(|t| match &t.custom {
            Some(c) => ResponsesTool {
                kind: "custom",
                name: &t.name,
                description: c.description.as_deref(),
                parameters: None,
                strict: None,
                format: c.format.as_ref(),
            },
            None => ResponsesTool {
                kind: "function",
                name: &t.name,
                description: Some(&t.description),
                parameters: Some(&t.parameters),
                strict: Some(t.strict.unwrap_or(false)),
                format: None,
            },
        })
        .collect();
    if !tools.is_empty() {
        body.insert("parallel_tool_calls".into(), json!(req.parallel_tool_calls));
        let choice = match &req.tool_choice {
            TurnToolChoice::Auto => json!("auto"),
            TurnToolChoice::None => json!("none"),
            TurnToolChoice::Required => json!("required"),
            TurnToolChoice::Function(name) if custom.contains(name.as_str()) => {
                json!({"type": "custom", "name": name})
            }
            TurnToolChoice::Function(name) => json!({"type": "function", "name": name}),
        };
        body.insert("tool_choice".into(), choice);
    }
    // OpenAI refuses a `max_output_tokens` below 16.
    req.insert_sampling(&mut body, "max_output_tokens", 16);
    let o = &req.responses_only;
    let mut reasoning = serde_json::Map::new();
    if let Some(e) = &req.reasoning_effort {
        reasoning.insert("effort".into(), json!(e));
    }
    if let Some(s) = &o.reasoning_summary {
        reasoning.insert("summary".into(), json!(s));
    }
    if let Some(c) = &o.reasoning_context {
        reasoning.insert("context".into(), json!(c));
    }
    if let Some(m) = &o.reasoning_mode {
        reasoning.insert("mode".into(), json!(m));
    }
    if !reasoning.is_empty() {
        body.insert("reasoning".into(), Value::Object(reasoning));
    }
    let mut text = serde_json::Map::new();
    if let Some(f) = &req.text_format
        && *f != TextFormat::Text
    {
        text.insert("format".into(), json!(f));
    }
    if let Some(v) = &o.verbosity {
        text.insert("verbosity".into(), json!(v));
    }
    if !text.is_empty() {
        body.insert("text".into(), Value::Object(text));
    }
    for (key, value) in [
        ("truncation", &o.truncation),
        ("prompt_cache_key", &o.prompt_cache_key),
        ("prompt_cache_retention", &o.prompt_cache_retention),
        ("safety_identifier", &o.safety_identifier),
    ] {
        if let Some(v) = value {
            body.insert(key.into(), json!(v));
        }
    }
    if let Some(o) = &o.prompt_cache_options {
        body.insert("prompt_cache_options".into(), Value::Object(o.clone()));
    }
    Body {
        fields: body,
        tools,
    }
}

/// Conversation items in the upstream's input format. Item ids are dropped (the upstream stores
/// nothing, so it could not resolve them); items only the relay understands are left out. Calls
/// of the `custom` tools named go back as `custom_tool_call` items (their `input` the function
/// form's one argument), with their outputs as `custom_tool_call_output`.
pub fn input(items: &[InputItem], custom: &HashSet<&str>) -> Vec<Value> {
    let mut out = Vec::with_capacity(items.len());
    let mut custom_calls: HashSet<&str> = HashSet::new();
    for item in items {
        match item {
            InputItem::Message(m) => {
                let mut v = serde_json::to_value(m).unwrap_or(Value::Null);
                if let Some(o) = v.as_object_mut() {
                    o.remove("id");
                    o.remove("status");
                    o.insert("type".into(), json!("message"));
                }
                out.push(v);
            }
            InputItem::FunctionCall(f) if custom.contains(f.name.as_str()) => {
                custom_calls.insert(&f.call_id);
                let input = serde_json::from_str::<Value>(&f.arguments)
                    .ok()
                    .and_then(|v| v.get("input")?.as_str().map(str::to_string))
                    .unwrap_or_else(|| f.arguments.clone());
                out.push(json!({
                    "type": "custom_tool_call", "call_id": f.call_id, "name": f.name, "input": input}))
            }
            InputItem::FunctionCall(f) => out.push(json!({
                "type": "function_call", "call_id": f.call_id, "name": f.name, "arguments": f.arguments})),
            InputItem::FunctionCallOutput(o) if custom_calls.contains(o.call_id.as_str()) => {
                out.push(json!({
                    "type": "custom_tool_call_output", "call_id": o.call_id, "output": o.output}))
            }
            InputItem::FunctionCallOutput(o) => out.push(json!({
                "type": "function_call_output", "call_id": o.call_id, "output": o.output})),
            // Every tool's calls reach the upstream as function calls and outputs
            // (`run::turn::model_view`); the rest is not the model's business.
            _ => {}
        }
    }
    out
}

/// Turns upstream Responses events into model events. Pure; one per turn.
#[derive(Debug, Default)]
pub struct EventParser {
    finished: bool,
    /// Whether the answer's id (`response.id` of `response.created` or a later lifecycle event)
    /// was passed on (once per turn).
    id_given: bool,
    saw_call: bool,
    /// Upstream output_index → our call index and how many argument bytes were passed on.
    calls: HashMap<u64, (u32, usize)>,
    /// The next call index (never reused, even if an upstream repeats an output_index).
    next_call: u32,
    /// Upstream output_index → a `custom_tool_call`'s call index and its input so far (passed
    /// on whole, as the function form's `{"input": ...}`, when the input is done).
    custom: HashMap<u64, (u32, String)>,
}

impl EventParser {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn finished(&self) -> bool {
        self.finished
    }

    /// Parses one event and dispatches it by family: the answer's id, text, custom tool calls,
    /// function calls, the lifecycle. Most events take one typed pass (`parse_typed`);
    /// the rest a second one, into a `Value`.
    pub fn parse(&mut self, data: &str, out: &mut Vec<ModelEvent>) -> Result<(), UpstreamError> {
        if let Some(parsed) = self.parse_typed(data, out) {
            return parsed;
        }
        let ev: Value = serde_json::from_str(data).map_err(|e| {
            UpstreamError::Protocol(format!(
                "event is not valid JSON ({e}): {}",
                super::chat::preview(data)
            ))
        })?;
        let kind = ev.get("type").and_then(Value::as_str).unwrap_or_default();
        self.response_id(ev.pointer("/response/id").and_then(Value::as_str), out);
        let at = || ev["output_index"].as_u64().unwrap_or(0);
        match kind {
            "response.output_text.delta" => out.push(ModelEvent::Text(text(&ev, "delta"))),
            "response.refusal.delta" => out.push(ModelEvent::Refusal(text(&ev, "delta"))),
            "response.reasoning_text.delta" | "response.reasoning_summary_text.delta" => {
                out.push(ModelEvent::Reasoning(text(&ev, "delta")))
            }
            "response.output_item.added" if ev["item"]["type"] == "message" => out.push(
                ModelEvent::MessagePhase(serde_json::from_value(ev["item"]["phase"].clone()).ok()),
            ),
            "response.output_item.added" if ev["item"]["type"] == "custom_tool_call" => {
                self.custom_added(at(), &ev["item"], out)
            }
            "response.custom_tool_call_input.delta" => {
                self.custom_input(at(), &text(&ev, "delta"))?
            }
            "response.custom_tool_call_input.done" => {
                self.custom_done(at(), ev["input"].as_str(), out)
            }
            "response.output_item.done" if ev["item"]["type"] == "custom_tool_call" => {
                // Servers that skip the input events: the item carries it whole.
                self.custom_done(at(), ev["item"]["input"].as_str(), out)
            }
            "response.output_item.added" if ev["item"]["type"] == "function_call" => {
                self.call_added(at(), &ev["item"], out)
            }
            "response.function_call_arguments.delta" => {
                self.arguments_delta(at(), text(&ev, "delta"), out)?
            }
            // Some servers (LM Studio) send the arguments only whole, at the end: pass on
            // whatever the deltas did not carry.
            "response.function_call_arguments.done" => {
                self.arguments_done(at(), ev["arguments"].as_str(), out)
            }
            "response.output_item.done" if ev["item"]["type"] == "function_call" => {
                self.arguments_done(at(), ev["item"]["arguments"].as_str(), out)
            }
            "response.completed" | "response.incomplete" => {
                let r = &ev["response"];
                self.finish(
                    kind == "response.completed",
                    r.get("usage"),
                    r.get("incomplete_details"),
                    out,
                )
            }
            "response.failed" => {
                return Err(failure(
                    &ev["response"]["error"],
                    "the upstream response failed",
                ));
            }
            "error" => return Err(failure(ev.get("error").unwrap_or(&ev), "upstream error")),
            _ => {}
        }
        Ok(())
    }

    /// The events a stream is mostly made of, read in one typed pass that builds no tree: the
    /// text and argument deltas, the lifecycle events (their `response` read for its id, usage
    /// and `incomplete_details` only, its `output` and echoed request skipped), and the events
    /// this parser has no use for. `None` leaves the event to the general path: one that opens
    /// or closes items and calls, or one this shape does not read (a field of another type or
    /// twice, not JSON), which the general path reads the same way, or reports.
    fn parse_typed(
        &mut self,
        data: &str,
        out: &mut Vec<ModelEvent>,
    ) -> Option<Result<(), UpstreamError>> {
        let ev = serde_json::from_str::<Typed<'_>>(data).ok()?;
        let at = ev.output_index.unwrap_or(0);
        let delta = ev.delta.as_deref().unwrap_or_default();
        match &*ev.kind {
            "response.output_text.delta" => out.push(ModelEvent::Text(delta.into())),
            "response.refusal.delta" => out.push(ModelEvent::Refusal(delta.into())),
            "response.reasoning_text.delta" | "response.reasoning_summary_text.delta" => {
                out.push(ModelEvent::Reasoning(delta.into()))
            }
            "response.function_call_arguments.delta" => {
                return Some(self.arguments_delta(at, delta.into(), out));
            }
            "response.custom_tool_call_input.delta" => return Some(self.custom_input(at, delta)),
            // Read by the general path.
            "response.output_item.added"
            | "response.custom_tool_call_input.done"
            | "response.function_call_arguments.done"
            | "response.failed"
            | "error" => return None,
            "response.output_item.done" => {
                let call = ev
                    .item
                    .is_none_or(|i| matches!(&*i.kind, "function_call" | "custom_tool_call"));
                if call {
                    return None;
                }
            }
            kind => {
                let terminal = matches!(kind, "response.completed" | "response.incomplete");
                // A later `in_progress` (or any lifecycle event but the last) has nothing
                // left to give once the id is known: its echoed response is not read again.
                if !terminal && self.id_given {
                    return Some(Ok(()));
                }
                let r = match ev.response {
                    Some(r) => r,
                    None if !terminal => return Some(Ok(())),
                    None => return None,
                };
                self.response_id(r.id.as_deref(), out);
                if terminal {
                    self.finish(
                        kind == "response.completed",
                        r.usage.as_ref(),
                        r.incomplete_details.as_ref(),
                        out,
                    );
                }
            }
        }
        Some(Ok(()))
    }

    /// The answer's id (`response.id` of `response.created` or a later lifecycle event), passed
    /// on once per turn.
    fn response_id(&mut self, id: Option<&str>, out: &mut Vec<ModelEvent>) {
        if !self.id_given
            && let Some(id) = id.filter(|id| !id.is_empty())
        {
            self.id_given = true;
            out.push(ModelEvent::ResponseId(id.to_string()));
        }
    }

    /// A `custom_tool_call` item opened at upstream output index `at`: a new call, its input
    /// gathered until it is done.
    fn custom_added(&mut self, at: u64, item: &Value, out: &mut Vec<ModelEvent>) {
        let index = self.next_call;
        self.next_call = self.next_call.saturating_add(1);
        self.saw_call = true;
        let input = item["input"].as_str().unwrap_or_default().to_string();
        self.custom.insert(at, (index, input));
        out.push(ModelEvent::ToolCall {
            index,
            id: item["call_id"].as_str().map(str::to_string),
            name: item["name"].as_str().map(str::to_string),
            arguments: String::new(),
        });
    }

    /// More input of the custom tool call at `at`.
    fn custom_input(&mut self, at: u64, delta: &str) -> Result<(), UpstreamError> {
        let Some((_, input)) = self.custom.get_mut(&at) else {
            return Err(UpstreamError::Protocol(format!(
                "input for unknown output item {at}"
            )));
        };
        input.push_str(delta);
        Ok(())
    }

    /// The custom tool call at `at` is done (`whole`: its input, when the event carries it):
    /// its input goes on whole, as the function form's `{"input": ...}`.
    fn custom_done(&mut self, at: u64, whole: Option<&str>, out: &mut Vec<ModelEvent>) {
        if let Some((index, mut input)) = self.custom.remove(&at) {
            if let Some(whole) = whole {
                input = whole.to_string();
            }
            out.push(ModelEvent::ToolCall {
                index,
                id: None,
                name: None,
                arguments: json!({ "input": input }).to_string(),
            });
        }
    }

    /// A `function_call` item opened at `at`: a new call, with whatever arguments it carries.
    fn call_added(&mut self, at: u64, item: &Value, out: &mut Vec<ModelEvent>) {
        let index = self.next_call;
        self.next_call = self.next_call.saturating_add(1);
        let arguments = item["arguments"].as_str().unwrap_or_default().to_string();
        self.calls.insert(at, (index, arguments.len()));
        self.saw_call = true;
        out.push(ModelEvent::ToolCall {
            index,
            id: item["call_id"].as_str().map(str::to_string),
            name: item["name"].as_str().map(str::to_string),
            arguments,
        });
    }

    /// More arguments of the function call at `at`.
    fn arguments_delta(
        &mut self,
        at: u64,
        delta: String,
        out: &mut Vec<ModelEvent>,
    ) -> Result<(), UpstreamError> {
        let Some((index, seen)) = self.calls.get_mut(&at) else {
            return Err(UpstreamError::Protocol(format!(
                "arguments for unknown output item {at}"
            )));
        };
        *seen += delta.len();
        out.push(ModelEvent::ToolCall {
            index: *index,
            id: None,
            name: None,
            arguments: delta,
        });
        Ok(())
    }

    /// The function call at `at` is done with arguments `whole`: the part the deltas did not
    /// carry goes on.
    fn arguments_done(&mut self, at: u64, whole: Option<&str>, out: &mut Vec<ModelEvent>) {
        if let (Some(whole), Some((index, seen))) = (whole, self.calls.get_mut(&at))
            && whole.len() > *seen
            && whole.is_char_boundary(*seen)
        {
            let rest = whole[*seen..].to_string();
            *seen = whole.len();
            out.push(ModelEvent::ToolCall {
                index: *index,
                id: None,
                name: None,
                arguments: rest,
            });
        }
    }

    /// `response.completed` (`completed`) or `response.incomplete` of `response` `r`: its usage,
    /// then why the turn ended.
    fn finish(
        &mut self,
        completed: bool,
        usage: Option<&Value>,
        incomplete: Option<&Value>,
        out: &mut Vec<ModelEvent>,
    ) {
        if let Some(u) = usage.filter(|u| u.is_object()) {
            out.push(ModelEvent::Usage(
                serde_json::from_value::<Usage>(u.clone()).unwrap_or_else(|_| lenient_usage(u)),
            ));
        }
        let reason = if completed {
            if self.saw_call {
                FinishReason::ToolCalls
            } else {
                FinishReason::Stop
            }
        } else {
            FinishReason::parse(
                incomplete
                    .and_then(|d| d.get("reason"))
                    .and_then(Value::as_str)
                    .unwrap_or("length"),
            )
        };
        self.finished = true;
        out.push(ModelEvent::Finish(reason));
    }
}

/// An event as [`EventParser::parse_typed`] reads it, in one pass over its text: `delta`
/// borrowed unless escaped, `item`'s type and what `response` tells, every other field skipped.
/// An `item` or `response` of another shape fails the whole event, which the general path then
/// reads (as it did the events whose `item` or `response` it must read itself).
#[derive(serde::Deserialize)]
struct Typed<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(default)]
    output_index: Option<u64>,
    #[serde(default, borrow)]
    delta: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    item: Option<Kind<'a>>,
    #[serde(default, borrow)]
    response: Option<Lifecycle<'a>>,
}

/// An item's `type`, the rest skipped.
#[derive(serde::Deserialize)]
struct Kind<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
}

/// What a lifecycle event's `response` tells the parser; its output and echoed request skipped.
#[derive(serde::Deserialize)]
struct Lifecycle<'a> {
    #[serde(default, borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(default)]
    usage: Option<Value>,
    #[serde(default)]
    incomplete_details: Option<Value>,
}

/// The string field `k` of `ev` (empty when missing).
fn text(ev: &Value, k: &str) -> String {
    ev.get(k)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// The error `e` of a failed answer (`response.failed`, `error`) as a 502, its message or
/// `otherwise`.
fn failure(e: &Value, otherwise: &str) -> UpstreamError {
    let message = e
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or(otherwise)
        .to_string();
    UpstreamError::Status {
        status: 502,
        message,
        body: Some(e.clone()),
        retry_after: None,
    }
}

fn lenient_usage(u: &Value) -> Usage {
    let n = |p: &str| u.pointer(p).and_then(Value::as_u64).unwrap_or(0);
    let mut usage = Usage {
        input_tokens: n("/input_tokens"),
        output_tokens: n("/output_tokens"),
        ..Usage::default()
    };
    usage.input_tokens_details.cached_tokens = n("/input_tokens_details/cached_tokens");
    usage.output_tokens_details.reasoning_tokens = n("/output_tokens_details/reasoning_tokens");
    usage.total_tokens = u
        .get("total_tokens")
        .and_then(Value::as_u64)
        .unwrap_or(usage.input_tokens.saturating_add(usage.output_tokens));
    usage
}

/// The model events of a streaming Responses answer.
pub(crate) fn events(body: super::wire::Body, idle: Duration) -> ModelStream {
    super::parsed_events(body, idle, EventParser::new())
}

impl super::StreamParser for EventParser {
    fn parse(&mut self, data: &str, out: &mut Vec<ModelEvent>) -> Result<(), UpstreamError> {
        EventParser::parse(self, data, out)
    }

    const UNFINISHED: &'static str = "the stream ended without a terminal response event";

    fn complete(&self) -> bool {
        self.finished()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(data: &str) -> Vec<ModelEvent> {
        let mut out = Vec::new();
        EventParser::new().parse(data, &mut out).unwrap();
        out
    }

    fn texts(events: &[ModelEvent]) -> Vec<(&'static str, &str)> {
        events
            .iter()
            .map(|e| match e {
                ModelEvent::Text(t) => ("text", t.as_str()),
                ModelEvent::Refusal(t) => ("refusal", t.as_str()),
                ModelEvent::Reasoning(t) => ("reasoning", t.as_str()),
                other => panic!("not a delta: {other:?}"),
            })
            .collect()
    }

    #[test]
    fn text_deltas_are_read_whole_escapes_and_all_whatever_else_the_event_carries() {
        let delta = |kind: &str, rest: &str| {
            format!(
                r#"{{"type":"{kind}","sequence_number":4,"item_id":"msg_1","output_index":0,"content_index":0,{rest}"logprobs":[{{"token":"x","bytes":[1],"top_logprobs":[]}}],"obfuscation":"abc"}}"#
            )
        };
        assert_eq!(
            texts(&parse(&delta(
                "response.output_text.delta",
                r#""delta":"plain","#
            ))),
            [("text", "plain")]
        );
        assert_eq!(
            texts(&parse(&delta(
                "response.output_text.delta",
                r#""delta":"a \"quote\"\n\u00e9\ud83d\ude00","#
            ))),
            [("text", "a \"quote\"\n\u{e9}\u{1f600}")]
        );
        assert_eq!(
            texts(&parse(&delta("response.refusal.delta", r#""delta":"no","#))),
            [("refusal", "no")]
        );
        for kind in [
            "response.reasoning_text.delta",
            "response.reasoning_summary_text.delta",
        ] {
            assert_eq!(
                texts(&parse(&delta(kind, r#""delta":"think","#))),
                [("reasoning", "think")]
            );
        }
        // A delta without its text, with `null`, or with something that is not a string:
        // an empty delta, as before.
        for rest in [
            "",
            r#""delta":null,"#,
            r#""delta":7,"#,
            r#""delta":{"a":1},"#,
        ] {
            assert_eq!(
                texts(&parse(&delta("response.output_text.delta", rest))),
                [("text", "")],
                "{rest}"
            );
        }
    }

    #[test]
    fn a_function_calls_arguments_stream_in_and_the_rest_comes_with_its_end() {
        let mut parser = EventParser::new();
        let mut out = Vec::new();
        parser
            .parse(
                r#"{"type":"response.created","response":{"id":"resp_up","status":"in_progress","output":[]}}"#,
                &mut out,
            )
            .unwrap();
        parser
            .parse(
                r#"{"type":"response.output_item.added","output_index":1,"item":{"type":"function_call","call_id":"call_1","name":"f","arguments":""}}"#,
                &mut out,
            )
            .unwrap();
        parser
            .parse(
                r#"{"type":"response.function_call_arguments.delta","output_index":1,"delta":"{\"a\""}"#,
                &mut out,
            )
            .unwrap();
        assert!(matches!(&out[0], ModelEvent::ResponseId(id) if id == "resp_up"));
        assert!(
            matches!(&out[1], ModelEvent::ToolCall { index: 0, name: Some(n), .. } if n == "f")
        );
        assert!(
            matches!(&out[2], ModelEvent::ToolCall { index: 0, arguments, .. } if arguments == "{\"a\"")
        );
        parser
            .parse(
                r#"{"type":"response.function_call_arguments.done","output_index":1,"arguments":"{\"a\":1}"}"#,
                &mut out,
            )
            .unwrap();
        assert!(
            matches!(&out[3], ModelEvent::ToolCall { index: 0, arguments, .. } if arguments == ":1}"),
            "{:?}",
            out[3]
        );
        let err = parser.parse("{not json", &mut out).unwrap_err();
        assert!(
            matches!(&err, UpstreamError::Protocol(m) if m.contains("not valid JSON")),
            "{err:?}"
        );
    }

    #[test]
    fn a_custom_tool_calls_input_is_gathered_and_given_whole_and_stray_deltas_are_errors() {
        let mut parser = EventParser::new();
        let mut out = Vec::new();
        for data in [
            r#"{"type":"response.output_item.added","output_index":2,"item":{"type":"custom_tool_call","call_id":"call_c","name":"apply_patch","input":""}}"#,
            r#"{"type":"response.custom_tool_call_input.delta","output_index":2,"item_id":"ctc_1","delta":"*** Begin \"Patch\"\n"}"#,
            r#"{"type":"response.custom_tool_call_input.delta","output_index":2,"item_id":"ctc_1","delta":"*** End"}"#,
            r#"{"type":"response.custom_tool_call_input.done","output_index":2,"item_id":"ctc_1"}"#,
        ] {
            parser.parse(data, &mut out).unwrap();
        }
        assert!(
            matches!(&out[0], ModelEvent::ToolCall { index: 0, name: Some(n), .. } if n == "apply_patch")
        );
        assert_eq!(
            out[1],
            ModelEvent::ToolCall {
                index: 0,
                id: None,
                name: None,
                arguments: json!({"input": "*** Begin \"Patch\"\n*** End"}).to_string(),
            }
        );
        for stray in [
            r#"{"type":"response.custom_tool_call_input.delta","output_index":9,"delta":"x"}"#,
            r#"{"type":"response.function_call_arguments.delta","output_index":9,"delta":"x"}"#,
        ] {
            let err = parser.parse(stray, &mut out).unwrap_err();
            assert!(
                matches!(&err, UpstreamError::Protocol(m) if m.contains("unknown output item 9")),
                "{err:?}"
            );
        }
    }

    /// The lifecycle of a turn that answers with text, as OpenAI streams it: the created and
    /// in-progress events echo the request, the terminal one carries the whole output.
    fn lifecycle(kind: &str, rest: &str) -> String {
        format!(
            r#"{{"type":"{kind}","sequence_number":0,"response":{{"id":"resp_up","object":"response","status":"x","instructions":"be brief","tools":[{{"type":"function","name":"f","parameters":{{"type":"object"}}}}],"output":[{{"type":"message","id":"msg_1","role":"assistant","content":[{{"type":"output_text","text":"Hi \"there\"","annotations":[]}}]}}]{rest}}}}}"#
        )
    }

    #[test]
    fn a_turns_lifecycle_gives_its_id_once_then_usage_and_the_finish_reason() {
        let mut parser = EventParser::new();
        let mut out = Vec::new();
        for data in [
            lifecycle("response.created", ""),
            lifecycle("response.in_progress", ""),
            r#"{"type":"response.output_item.added","output_index":0,"item":{"type":"message","id":"msg_1","role":"assistant","content":[],"phase":"final_answer"}}"#.into(),
            r#"{"type":"response.content_part.added","output_index":0,"content_index":0,"part":{"type":"output_text","text":""}}"#.into(),
            r#"{"type":"response.output_text.delta","output_index":0,"content_index":0,"delta":"Hi"}"#.into(),
            r#"{"type":"response.output_text.done","output_index":0,"content_index":0,"text":"Hi"}"#.into(),
            r#"{"type":"response.output_item.done","output_index":0,"item":{"type":"message","id":"msg_1","content":[{"type":"output_text","text":"Hi"}]}}"#.into(),
            lifecycle(
                "response.completed",
                r#","usage":{"input_tokens":5,"input_tokens_details":{"cached_tokens":2},"output_tokens":7,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":12}"#,
            ),
        ] {
            parser.parse(&data, &mut out).unwrap();
        }
        assert!(parser.finished());
        let mut usage = Usage {
            input_tokens: 5,
            output_tokens: 7,
            total_tokens: 12,
            ..Usage::default()
        };
        usage.input_tokens_details.cached_tokens = 2;
        assert_eq!(
            out,
            vec![
                ModelEvent::ResponseId("resp_up".into()),
                ModelEvent::MessagePhase(Some(crate::api::response::Phase::FinalAnswer)),
                ModelEvent::Text("Hi".into()),
                ModelEvent::Usage(usage),
                ModelEvent::Finish(FinishReason::Stop),
            ]
        );
    }

    #[test]
    fn an_incomplete_or_odd_terminal_event_still_finishes_the_turn() {
        let finish = |data: &str| {
            let mut parser = EventParser::new();
            let mut out = Vec::new();
            parser.parse(data, &mut out).unwrap();
            assert!(parser.finished(), "{data}");
            out.pop()
        };
        assert_eq!(
            finish(&lifecycle(
                "response.incomplete",
                r#","incomplete_details":{"reason":"content_filter"}"#
            )),
            Some(ModelEvent::Finish(FinishReason::parse("content_filter")))
        );
        assert_eq!(
            finish(&lifecycle(
                "response.incomplete",
                r#","incomplete_details":null"#
            )),
            Some(ModelEvent::Finish(FinishReason::parse("length")))
        );
        // No response object, or an id that is not a string: the general path reads them.
        assert_eq!(
            finish(r#"{"type":"response.completed","response":null}"#),
            Some(ModelEvent::Finish(FinishReason::Stop))
        );
        assert_eq!(
            finish(
                r#"{"type":"response.completed","response":{"id":7,"usage":{"input_tokens":1,"output_tokens":1,"total_tokens":2}}}"#
            ),
            Some(ModelEvent::Finish(FinishReason::Stop))
        );
    }
}
