//! The conversation as the scripted model sees it, read from a Chat Completions or a Responses
//! request alike: how it ends (a user message, tool results), the last user text, its images and
//! files, the tools offered, the tool choice, and the tool-call rounds since the user spoke.

use serde_json::Value;

#[derive(Debug)]
pub(super) enum Last {
    User,
    ToolResults(Vec<String>),
    Other,
}

#[derive(Debug)]
pub(super) enum Choice {
    Auto,
    None,
    Required,
    Named(String),
}

#[derive(Debug)]
pub(super) struct Tool {
    pub(super) name: String,
    pub(super) parameters: Value,
    /// A Responses `custom` tool: its calls are `custom_tool_call` items with raw `input`.
    pub(super) custom: bool,
}

#[derive(Debug)]
pub(super) struct Convo {
    pub(super) messages: usize,
    pub(super) last: Last,
    /// The text of the last user message, its image and file parts.
    pub(super) user_text: String,
    pub(super) images: usize,
    pub(super) files: usize,
    pub(super) tools: Vec<Tool>,
    pub(super) choice: Choice,
    /// Tool-call rounds the model already made since the last user message.
    pub(super) rounds: usize,
}

fn text_of(content: &Value, images: &mut usize, files: &mut usize) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => {
            let mut texts: Vec<&str> = Vec::new();
            for p in parts {
                match p.get("type").and_then(Value::as_str).unwrap_or("") {
                    "text" | "input_text" | "output_text" => {
                        if let Some(t) = p.get("text").and_then(Value::as_str) {
                            texts.push(t);
                        }
                    }
                    "image_url" | "input_image" => *images += 1,
                    "file" | "input_file" => *files += 1,
                    _ => {}
                }
            }
            texts.join(" ")
        }
        _ => String::new(),
    }
}

fn plain_text(content: &Value) -> String {
    text_of(content, &mut 0, &mut 0)
}

fn tools_of(body: &Value) -> Vec<Tool> {
    let Some(tools) = body.get("tools").and_then(Value::as_array) else {
        return Vec::new();
    };
    tools
        .iter()
        .filter_map(|t| {
            let kind = t.get("type").and_then(Value::as_str);
            if !matches!(kind, None | Some("function") | Some("custom")) {
                return None;
            }
            let f = t.get("function").unwrap_or(t);
            let name = f.get("name").and_then(Value::as_str)?;
            Some(Tool {
                name: name.to_string(),
                parameters: f.get("parameters").cloned().unwrap_or(Value::Null),
                custom: kind == Some("custom"),
            })
        })
        .collect()
}

fn choice_of(body: &Value) -> Choice {
    match body.get("tool_choice") {
        Some(Value::String(s)) if s == "none" => Choice::None,
        Some(Value::String(s)) if s == "required" => Choice::Required,
        Some(v @ Value::Object(_)) => {
            match v
                .pointer("/function/name")
                .or_else(|| v.get("name"))
                .and_then(Value::as_str)
            {
                Some(n) => Choice::Named(n.to_string()),
                None => Choice::Required,
            }
        }
        _ => Choice::Auto,
    }
}

impl Convo {
    pub(super) fn from_chat(body: &Value) -> Convo {
        let empty = Vec::new();
        let msgs = body
            .get("messages")
            .and_then(Value::as_array)
            .unwrap_or(&empty);
        let role = |m: &Value| {
            m.get("role")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        let last = match msgs.last().map(role).as_deref() {
            Some("user") => Last::User,
            Some("tool") | Some("function") => {
                let start = msgs
                    .iter()
                    .rposition(|m| !matches!(role(m).as_str(), "tool" | "function"))
                    .map(|i| i + 1)
                    .unwrap_or(0);
                Last::ToolResults(
                    msgs[start..]
                        .iter()
                        .map(|m| plain_text(m.get("content").unwrap_or(&Value::Null)))
                        .collect(),
                )
            }
            _ => Last::Other,
        };
        let (mut images, mut files) = (0, 0);
        let user_text = msgs
            .iter()
            .rev()
            .find(|m| role(m) == "user")
            .map(|m| {
                text_of(
                    m.get("content").unwrap_or(&Value::Null),
                    &mut images,
                    &mut files,
                )
            })
            .unwrap_or_default();
        let after_user = msgs
            .iter()
            .rposition(|m| role(m) == "user")
            .map(|i| i + 1)
            .unwrap_or(0);
        let rounds = msgs[after_user..]
            .iter()
            .filter(|m| {
                role(m) == "assistant"
                    && m.get("tool_calls")
                        .and_then(Value::as_array)
                        .is_some_and(|c| !c.is_empty())
            })
            .count();
        Convo {
            messages: msgs.len(),
            last,
            user_text,
            images,
            files,
            tools: tools_of(body),
            choice: choice_of(body),
            rounds,
        }
    }

    pub(super) fn from_responses(body: &Value) -> Convo {
        let instructions = body
            .get("instructions")
            .and_then(Value::as_str)
            .is_some_and(|s| !s.is_empty()) as usize;
        let mut c = Convo {
            messages: instructions,
            last: Last::Other,
            user_text: String::new(),
            images: 0,
            files: 0,
            tools: tools_of(body),
            choice: choice_of(body),
            rounds: 0,
        };
        match body.get("input") {
            Some(Value::String(s)) => {
                c.messages += 1;
                c.last = Last::User;
                c.user_text = s.clone();
            }
            Some(Value::Array(items)) => {
                c.messages += items.len();
                let kind = |i: &Value| -> String {
                    match i.get("type").and_then(Value::as_str) {
                        Some(t) => t.to_string(),
                        None if i.get("role").is_some() => "message".into(),
                        None => String::new(),
                    }
                };
                let is_user = |i: &Value| {
                    kind(i) == "message" && i.get("role").and_then(Value::as_str) == Some("user")
                };
                c.last = match items.last() {
                    Some(i) if is_user(i) => Last::User,
                    Some(i) if kind(i).ends_with("call_output") => {
                        let start = items
                            .iter()
                            .rposition(|i| !kind(i).ends_with("call_output"))
                            .map(|i| i + 1)
                            .unwrap_or(0);
                        Last::ToolResults(
                            items[start..]
                                .iter()
                                .map(|i| plain_text(i.get("output").unwrap_or(&Value::Null)))
                                .collect(),
                        )
                    }
                    _ => Last::Other,
                };
                if let Some(u) = items.iter().rev().find(|i| is_user(i)) {
                    c.user_text = text_of(
                        u.get("content").unwrap_or(&Value::Null),
                        &mut c.images,
                        &mut c.files,
                    );
                }
                let after_user = items.iter().rposition(is_user).map(|i| i + 1).unwrap_or(0);
                let tail = &items[after_user..];
                c.rounds = tail
                    .iter()
                    .enumerate()
                    .filter(|(j, i)| {
                        let call = |k: String| k == "function_call" || k == "custom_tool_call";
                        call(kind(i)) && (*j == 0 || !call(kind(&tail[j - 1])))
                    })
                    .count();
            }
            _ => {}
        }
        c
    }
}
