//! The create request's checks beyond its shape: ranges, enumerations, field combinations; each
//! rejection names its `param` (the messages are OpenAI's where it has one).

use serde_json::{Map, Value};

use super::parse::{quoted, valid_name};
use super::tool_choice::parse_tool_choice;
use super::validate_input::parse_input;
use super::validate_tools::parse_tools;
use super::{CreateRequest, CreateResponse, Reasoning, ReasoningParam, TextFormat, TextParam};
use crate::api::error::FieldError;

const INCLUDE_VALUES: &[&str] = &[
    "file_search_call.results",
    "web_search_call.results",
    "web_search_call.action.sources",
    "message.input_image.image_url",
    "computer_call_output.output.image_url",
    "code_interpreter_call.outputs",
    "reasoning.encrypted_content",
    "message.output_text.logprobs",
];

const EFFORTS: &[&str] = &["none", "minimal", "low", "medium", "high", "xhigh"];

/// Every check of a create body, in the order its errors take precedence; the request with its
/// defaults applied.
pub(super) fn validate(raw: CreateResponse) -> Result<CreateRequest, FieldError> {
    let model = match raw.model {
        Some(m) if !m.trim().is_empty() => m,
        _ => return Err(FieldError::missing("model")),
    };
    let input = match raw.input {
        None | Some(Value::Null) if raw.previous_response_id.is_none() => {
            return Err(FieldError::missing("input"));
        }
        None | Some(Value::Null) => Vec::new(),
        Some(v) => parse_input(v)?,
    };
    let tools = parse_tools(raw.tools.unwrap_or_default(), "tools")?;
    let tool_choice_echo = raw
        .tool_choice
        .clone()
        .unwrap_or_else(|| Value::String("auto".into()));
    let tool_choice = parse_tool_choice(raw.tool_choice, &tools)?;
    let sampling = Sampling::check(
        (raw.temperature, raw.top_p, raw.top_logprobs),
        (raw.max_output_tokens, raw.max_tool_calls, raw.max_steps),
    )?;
    let metadata = parse_metadata(raw.metadata.unwrap_or_default())?;
    let store = raw.store.unwrap_or(true);
    let background = raw.background.unwrap_or(false);
    check_storage(store, background, raw.previous_response_id.as_deref())?;
    let text = check_text(raw.text.unwrap_or_default())?;
    let reasoning = check_reasoning(raw.reasoning.unwrap_or_default())?;
    let truncation = check_truncation(raw.truncation)?;
    check_include(raw.include.as_deref())?;
    check_service_tier(raw.service_tier.as_deref())?;
    let conversation = parse_conversation(raw.conversation)?;
    if conversation.is_some() && raw.previous_response_id.is_some() {
        return Err(FieldError::invalid_value(
            "conversation",
            "Mutually exclusive parameters: 'conversation' and 'previous_response_id'. Ensure you are only providing one of: 'previous_response_id' or 'conversation'.",
        ));
    }
    refuse_present(
        "prompt",
        &raw.prompt,
        "Prompt templates live in OpenAI's prompt store, which this relay does not have: send 'instructions' and 'input' instead.",
    )?;
    refuse_present(
        "moderation",
        &raw.moderation,
        "This relay has no moderation model to score or block input and output with: leave 'moderation' out.",
    )?;
    let compact_threshold = parse_context_management(raw.context_management)?;
    Ok(CreateRequest {
        model,
        input,
        instructions: raw.instructions,
        tools,
        tool_choice_echo,
        tool_choice,
        parallel_tool_calls: raw.parallel_tool_calls.unwrap_or(true),
        max_output_tokens: sampling.max_output_tokens,
        max_tool_calls: sampling.max_tool_calls,
        max_steps: sampling.max_steps,
        temperature: sampling.temperature,
        top_p: sampling.top_p,
        metadata,
        user: raw.user,
        store,
        background,
        previous_response_id: raw.previous_response_id,
        stream: raw.stream.unwrap_or(false),
        text_format: text.format,
        verbosity: text.verbosity,
        reasoning_effort: reasoning.effort,
        reasoning_summary: reasoning.summary,
        reasoning_context: reasoning.context,
        reasoning_mode: reasoning.mode,
        truncation,
        safety_identifier: raw.safety_identifier,
        prompt_cache_key: raw.prompt_cache_key,
        prompt_cache_retention: raw.prompt_cache_retention,
        prompt_cache_options: raw.prompt_cache_options,
        include: raw.include.unwrap_or_default(),
        client_metadata: raw.client_metadata,
        conversation,
        compact_threshold,
        background_options: raw.background_options,
        service_tier: raw.service_tier,
    })
}

/// `v`, when sent, between `lo` and `hi`.
fn range(name: &str, v: Option<f64>, lo: f64, hi: f64) -> Result<Option<f64>, FieldError> {
    match v {
        Some(x) if !(lo..=hi).contains(&x) || x.is_nan() => Err(FieldError::invalid_value(
            name,
            format!("Invalid '{name}': {x}. Expected a value between {lo} and {hi}."),
        )),
        other => Ok(other),
    }
}

/// `v`, when sent, at least `lo`.
fn at_least(name: &str, v: Option<i64>, lo: i64) -> Result<Option<u64>, FieldError> {
    match v {
        Some(x) if x < lo => Err(FieldError::invalid_value(
            name,
            format!(
                "Invalid '{name}': integer below minimum value. Expected a value >= {lo}, but got {x} instead."
            ),
        )),
        other => Ok(other.map(|x| x as u64)),
    }
}

/// The sampling and budget numbers, each within its range.
struct Sampling {
    temperature: Option<f64>,
    top_p: Option<f64>,
    max_output_tokens: Option<u64>,
    max_tool_calls: Option<u64>,
    max_steps: Option<u64>,
}

impl Sampling {
    /// `(temperature, top_p, top_logprobs)` and `(max_output_tokens, max_tool_calls, max_steps)`
    /// as sent.
    fn check(
        (temperature, top_p, top_logprobs): (Option<f64>, Option<f64>, Option<i64>),
        (max_output_tokens, max_tool_calls, max_steps): (Option<i64>, Option<i64>, Option<i64>),
    ) -> Result<Sampling, FieldError> {
        let temperature = range("temperature", temperature, 0.0, 2.0)?;
        let top_p = range("top_p", top_p, 0.0, 1.0)?;
        let max_output_tokens = at_least("max_output_tokens", max_output_tokens, 16)?;
        let max_tool_calls = at_least("max_tool_calls", max_tool_calls, 1)?;
        let max_steps = at_least("max_steps", max_steps, 1)?;
        if let Some(n) = top_logprobs
            && n != 0
        {
            return Err(FieldError::unsupported(
                "top_logprobs",
                "top_logprobs is not supported by this relay; omit it or send 0.",
            ));
        }
        Ok(Sampling {
            temperature,
            top_p,
            max_output_tokens,
            max_tool_calls,
            max_steps,
        })
    }
}

/// `background` needs `store`; `previous_response_id`, when sent, is not empty.
fn check_storage(
    store: bool,
    background: bool,
    previous_response_id: Option<&str>,
) -> Result<(), FieldError> {
    if background && !store {
        return Err(FieldError::invalid_value(
            "background",
            "Background mode requires 'store' to be true.",
        ));
    }
    if let Some(id) = previous_response_id
        && id.trim().is_empty()
    {
        return Err(FieldError::invalid_value(
            "previous_response_id",
            "Invalid 'previous_response_id': empty string.",
        ));
    }
    Ok(())
}

/// `text`: its `verbosity` one of OpenAI's, a `json_schema` format named validly with an object
/// schema.
fn check_text(text: TextParam) -> Result<TextParam, FieldError> {
    if let Some(v) = &text.verbosity
        && !["low", "medium", "high"].contains(&v.as_str())
    {
        return Err(FieldError::invalid_value(
            "text.verbosity",
            format!("Invalid value: '{v}'. Supported values are: 'low', 'medium', and 'high'."),
        ));
    }
    if let Some(TextFormat::JsonSchema { name, schema, .. }) = &text.format {
        if !valid_name(name) {
            return Err(FieldError::invalid_value(
                "text.format.name",
                format!(
                    "Invalid 'text.format.name': '{name}'. Expected a string that matches the pattern '^[a-zA-Z0-9_-]{{1,64}}$'."
                ),
            ));
        }
        if !schema.is_object() {
            return Err(FieldError::new(
                "text.format.schema",
                "Invalid 'text.format.schema': expected a JSON Schema object.",
            ));
        }
    }
    Ok(text)
}

/// `reasoning`: its effort and its summary (`summary`, or the older `generate_summary`).
fn check_reasoning(reasoning: ReasoningParam) -> Result<Reasoning, FieldError> {
    if let Some(e) = &reasoning.effort
        && !EFFORTS.contains(&e.as_str())
    {
        return Err(FieldError::invalid_value(
            "reasoning.effort",
            format!(
                "Invalid value: '{e}'. Supported values are: {}.",
                quoted(EFFORTS)
            ),
        ));
    }
    let summary = reasoning.summary.or(reasoning.generate_summary);
    if let Some(s) = &summary
        && !["auto", "concise", "detailed"].contains(&s.as_str())
    {
        return Err(FieldError::invalid_value(
            "reasoning.summary",
            format!(
                "Invalid value: '{s}'. Supported values are: 'auto', 'concise', and 'detailed'."
            ),
        ));
    }
    if let Some(c) = &reasoning.context
        && !["auto", "current_turn", "all_turns"].contains(&c.as_str())
    {
        return Err(FieldError::invalid_value(
            "reasoning.context",
            format!(
                "Invalid value: '{c}'. Supported values are: 'auto', 'current_turn', and 'all_turns'."
            ),
        ));
    }
    Ok(Reasoning {
        effort: reasoning.effort,
        summary,
        context: reasoning.context,
        mode: reasoning.mode,
    })
}

/// `truncation`: `disabled` (the default) or `auto`.
fn check_truncation(truncation: Option<String>) -> Result<String, FieldError> {
    let truncation = truncation.unwrap_or_else(|| "disabled".into());
    if !["disabled", "auto"].contains(&truncation.as_str()) {
        return Err(FieldError::invalid_value(
            "truncation",
            format!("Invalid value: '{truncation}'. Supported values are: 'auto' and 'disabled'."),
        ));
    }
    Ok(truncation)
}

/// `include`: each one of OpenAI's values.
fn check_include(include: Option<&[String]>) -> Result<(), FieldError> {
    for (i, inc) in include.into_iter().flatten().enumerate() {
        if !INCLUDE_VALUES.contains(&inc.as_str()) {
            return Err(FieldError::invalid_value(
                format!("include[{i}]"),
                format!(
                    "Invalid value: '{inc}'. Supported values are: {}.",
                    quoted(INCLUDE_VALUES)
                ),
            ));
        }
    }
    Ok(())
}

/// `service_tier`: one of OpenAI's (accepted and echoed as `default`).
fn check_service_tier(tier: Option<&str>) -> Result<(), FieldError> {
    if let Some(t) = tier
        && !SERVICE_TIERS.contains(&t)
    {
        return Err(FieldError::invalid_value(
            "service_tier",
            format!(
                "Invalid value: '{t}'. Supported values are: {}.",
                quoted(SERVICE_TIERS)
            ),
        ));
    }
    Ok(())
}

/// `metadata`: at most 16 string values, keys of at most 64 and values of at most 512 characters.
pub fn parse_metadata(metadata: Map<String, Value>) -> Result<Map<String, Value>, FieldError> {
    if metadata.len() > 16 {
        return Err(FieldError::invalid_value(
            "metadata",
            "Invalid 'metadata': at most 16 key-value pairs are allowed.",
        ));
    }
    for (k, v) in &metadata {
        if k.chars().count() > 64 {
            return Err(FieldError::invalid_value(
                format!("metadata.{k}"),
                "Invalid 'metadata': keys are at most 64 characters.",
            ));
        }
        match v {
            Value::String(s) if s.chars().count() <= 512 => {}
            Value::String(_) => {
                return Err(FieldError::invalid_value(
                    format!("metadata.{k}"),
                    "Invalid 'metadata': values are at most 512 characters.",
                ));
            }
            _ => {
                return Err(FieldError::new(
                    format!("metadata.{k}"),
                    "Invalid 'metadata': values must be strings.",
                ));
            }
        }
    }
    Ok(metadata)
}

/// `context_management`: at most one `{type: "compaction", compact_threshold}`; the threshold.
fn parse_context_management(v: Option<Value>) -> Result<Option<u64>, FieldError> {
    let entries = match v {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Array(a)) => a,
        Some(_) => {
            return Err(FieldError::new(
                "context_management",
                "Invalid 'context_management': expected an array.",
            ));
        }
    };
    let mut threshold = None;
    for (i, e) in entries.iter().enumerate() {
        let at = format!("context_management[{i}]");
        match e.get("type").and_then(Value::as_str) {
            Some("compaction") => {}
            Some(other) => {
                return Err(FieldError::invalid_value(
                    format!("{at}.type"),
                    format!("Invalid value: '{other}'. Supported values are: 'compaction'."),
                ));
            }
            None => return Err(FieldError::missing(format!("{at}.type"))),
        }
        match e.get("compact_threshold") {
            Some(Value::Number(n)) if n.as_u64().is_some_and(|n| n > 0) => {
                threshold = n.as_u64();
            }
            None | Some(Value::Null) => {
                return Err(FieldError {
                    code: Some("missing_required_parameter"),
                    ..FieldError::new(
                        format!("{at}.compact_threshold"),
                        "This relay cannot know the model's context window: give 'compact_threshold', the number of input tokens past which the conversation is compacted.",
                    )
                });
            }
            Some(_) => {
                return Err(FieldError::new(
                    format!("{at}.compact_threshold"),
                    "Invalid 'compact_threshold': expected a positive integer.",
                ));
            }
        }
    }
    Ok(threshold)
}

/// `conversation`: an id, or `{id}`.
fn parse_conversation(v: Option<Value>) -> Result<Option<String>, FieldError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(id)) if !id.trim().is_empty() => Ok(Some(id)),
        Some(Value::Object(o)) => match o.get("id") {
            Some(Value::String(id)) if !id.trim().is_empty() => Ok(Some(id.clone())),
            _ => Err(FieldError::missing("conversation.id")),
        },
        Some(_) => Err(FieldError::new(
            "conversation",
            "Invalid 'conversation': expected a conversation id or an object with 'id'.",
        )),
    }
}

const SERVICE_TIERS: &[&str] = &["auto", "default", "flex", "scale", "priority", "fast"];

/// A 400 naming `name` when the field is present (not null): it cannot be honoured here.
fn refuse_present(name: &str, value: &Option<Value>, why: &str) -> Result<(), FieldError> {
    match value {
        None | Some(Value::Null) => Ok(()),
        Some(_) => Err(FieldError::unsupported(name, why)),
    }
}
