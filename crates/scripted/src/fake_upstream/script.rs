//! The scripted model: what it answers, decided from the conversation before the first byte.
//! `CALL tool {args}` lines in the user text make tool calls (rounds separated by `THEN` lines);
//! otherwise a tool the text names, or `tool_choice`, is called with sample arguments; otherwise
//! it echoes the user (or the tool results) in `deltas` pieces. Deterministic: the same request
//! gets the same script.

use serde_json::{Map, Value, json};

use super::convo::{Choice, Convo, Last};
use super::options::Opts;

#[derive(Debug, Clone)]
pub(super) struct Call {
    pub(super) name: String,
    /// JSON arguments, or a custom tool's raw input.
    pub(super) arguments: String,
    pub(super) pieces: Vec<String>,
    pub(super) custom: bool,
}

#[derive(Debug, Clone)]
pub(super) enum Output {
    Text(String, Vec<String>),
    Refusal(String, Vec<String>),
    Calls(Vec<Call>),
}

/// What the scripted model answers, decided before the first byte.
#[derive(Debug, Clone)]
pub(super) struct Script {
    pub(super) reasoning: Vec<String>,
    pub(super) output: Output,
    pub(super) length: bool,
    /// The `phase` on the assistant message (Responses only).
    pub(super) phase: Option<&'static str>,
    pub(super) prompt_tokens: u64,
    pub(super) completion_tokens: u64,
}

const REFUSAL: &str = "I'm sorry, I can't help with that.";

impl Script {
    pub(super) fn plan(c: &Convo, o: &Opts) -> Script {
        let output = match Self::calls(c) {
            Some(calls) => Output::Calls(calls),
            None => {
                let text = match &c.last {
                    Last::ToolResults(outs) => format!("Tool results: {}", outs.join("; ")),
                    _ => {
                        let mut t = format!(
                            "Hello! You said: {}",
                            c.user_text.chars().take(200).collect::<String>()
                        );
                        match c.images {
                            0 => {}
                            1 => t.push_str(" [1 image]"),
                            n => t.push_str(&format!(" [{n} images]")),
                        }
                        match c.files {
                            0 => {}
                            1 => t.push_str(" [1 file]"),
                            n => t.push_str(&format!(" [{n} files]")),
                        }
                        t
                    }
                };
                if o.refusal {
                    let pieces = split_padded(REFUSAL, o.deltas);
                    Output::Refusal(pieces.concat(), pieces)
                } else {
                    let pieces = split_padded(&text, o.deltas);
                    Output::Text(pieces.concat(), pieces)
                }
            }
        };
        let reasoning = vec!["think ".to_string(); o.reasoning];
        let out_deltas = match &output {
            Output::Text(_, p) | Output::Refusal(_, p) => p.len(),
            Output::Calls(calls) => calls.iter().map(|c| c.pieces.len()).sum(),
        };
        Script {
            completion_tokens: (reasoning.len() + out_deltas) as u64,
            reasoning,
            output,
            length: o.finish_length,
            phase: o.phase,
            prompt_tokens: c.messages as u64 * 10,
        }
    }

    pub(super) fn calls(c: &Convo) -> Option<Vec<Call>> {
        // `CALL` lines, in rounds separated by a `THEN` line: round k is made once the model
        // has seen the results of the k rounds before it.
        let round = match c.last {
            Last::User => 0,
            Last::ToolResults(_) if c.user_text.lines().any(|l| l.trim() == "THEN") => c.rounds,
            _ => return None,
        };
        let group: Vec<&str> = c
            .user_text
            .split('\n')
            .collect::<Vec<_>>()
            .split(|l| l.trim() == "THEN")
            .nth(round)?
            .to_vec();
        let lines: Vec<Call> = group
            .iter()
            .filter_map(|l| l.trim().strip_prefix("CALL "))
            .filter_map(|rest| {
                let rest = rest.trim_start();
                let (name, args) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
                if name.is_empty() {
                    return None;
                }
                let args = if args.trim().is_empty() {
                    "{}"
                } else {
                    args.trim()
                };
                let tool = c
                    .tools
                    .iter()
                    .find(|t| t.name == name)
                    .or_else(|| c.tools.iter().find(|t| t.name.ends_with(name)));
                match tool {
                    // A custom tool takes raw input: the `input` of the JSON written, if any.
                    Some(t) if t.custom => {
                        let input = serde_json::from_str::<Value>(args)
                            .ok()
                            .and_then(|v| v.get("input")?.as_str().map(str::to_string))
                            .unwrap_or_else(|| args.to_string());
                        Some(Call {
                            custom: true,
                            ..call(t.name.clone(), input)
                        })
                    }
                    Some(t) => Some(call(t.name.clone(), args.to_string())),
                    None => Some(call(name.to_string(), args.to_string())),
                }
            })
            .collect();
        if !lines.is_empty() {
            return Some(lines);
        }
        if round > 0 || c.tools.is_empty() {
            return None;
        }
        let tool = match &c.choice {
            Choice::None => return None,
            Choice::Required => &c.tools[0],
            Choice::Named(n) => match c.tools.iter().find(|t| &t.name == n) {
                Some(t) => t,
                None => return Some(vec![call(n.clone(), "{}".into())]),
            },
            Choice::Auto => {
                let text = c.user_text.to_lowercase();
                c.tools.iter().find(|t| {
                    let name = t.name.to_lowercase();
                    text.contains(&name) || (name == "get_weather" && text.contains("weather"))
                })?
            }
        };
        let args =
            serde_json::to_string(&sample_object(&tool.parameters)).expect("json serializes");
        Some(vec![call(tool.name.clone(), args)])
    }
}

pub(super) fn call(name: String, arguments: String) -> Call {
    let n = arguments.chars().count().clamp(1, 4);
    let pieces = split_even(&arguments, n);
    Call {
        name,
        arguments,
        pieces,
        custom: false,
    }
}

/// Arguments satisfying a JSON schema's `required` properties.
fn sample_object(schema: &Value) -> Value {
    let mut obj = Map::new();
    let props = schema.get("properties");
    for name in schema
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        let prop = props.and_then(|p| p.get(name)).unwrap_or(&Value::Null);
        obj.insert(name.to_string(), sample_value(name, prop));
    }
    Value::Object(obj)
}

fn sample_value(name: &str, schema: &Value) -> Value {
    if let Some(first) = schema
        .get("enum")
        .and_then(Value::as_array)
        .and_then(|e| e.first())
    {
        return first.clone();
    }
    let ty = match schema.get("type") {
        Some(Value::String(t)) => t.as_str(),
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .find(|t| *t != "null")
            .unwrap_or("string"),
        _ => "string",
    };
    match ty {
        "number" | "integer" => json!(1),
        "boolean" => json!(true),
        "array" => json!([]),
        "object" => sample_object(schema),
        "null" => Value::Null,
        _ if matches!(name, "location" | "city") => json!("San Francisco"),
        _ => json!("x"),
    }
}

/// `text` in `n` non-empty pieces of near-equal length, padded with ` lorem` when too short.
fn split_padded(text: &str, n: usize) -> Vec<String> {
    let n = n.max(1);
    let mut s = text.to_string();
    let mut len = s.chars().count();
    while len < n {
        s.push_str(" lorem");
        len += 6;
    }
    split_even(&s, n)
}

/// `s` in `n` pieces on char boundaries (`n` ≤ its length, except for the empty string).
fn split_even(s: &str, n: usize) -> Vec<String> {
    let bounds: Vec<usize> = s
        .char_indices()
        .map(|(i, _)| i)
        .chain(std::iter::once(s.len()))
        .collect();
    let len = bounds.len() - 1;
    if len == 0 {
        return vec![String::new()];
    }
    let n = n.clamp(1, len);
    (0..n)
        .map(|i| s[bounds[i * len / n]..bounds[(i + 1) * len / n]].to_string())
        .collect()
}
