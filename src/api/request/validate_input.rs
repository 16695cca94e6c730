//! `input`: a string or a list of items, each item's `type` and `role` checked before it is
//! parsed (so the error names them), and the content parts the relay cannot take refused.

use serde_json::Value;

use super::parse::{from_value_at, quoted};
use super::{InputItem, InputMessage, InputPart, MessageContent, Role};
use crate::api::error::FieldError;

/// `input`: a string (one user message) or a list of items.
pub fn parse_input(value: Value) -> Result<Vec<InputItem>, FieldError> {
    match value {
        Value::String(text) => Ok(vec![InputItem::Message(InputMessage::user(
            MessageContent::Text(text),
        ))]),
        Value::Array(items) => {
            let mut out = Vec::with_capacity(items.len());
            for (i, mut item) in items.into_iter().enumerate() {
                let param = format!("input[{i}]");
                let Some(obj) = item.as_object_mut() else {
                    return Err(FieldError::new(
                        param,
                        format!("Invalid 'input[{i}]': expected an object."),
                    ));
                };
                // EasyInputMessage: `{role, content}` without a type is a message.
                if !obj.contains_key("type") || obj.get("type") == Some(&Value::Null) {
                    if obj.contains_key("role") {
                        obj.insert("type".into(), Value::String("message".into()));
                    } else if obj.contains_key("id") && obj.len() <= 2 {
                        obj.insert("type".into(), Value::String("item_reference".into()));
                    } else {
                        return Err(FieldError::missing(format!("{param}.type")));
                    }
                }
                without_sdk_fields(obj);
                check_item_kind(&item, &param)?;
                let parsed: InputItem = from_value_at(item, &param)?;
                check_input_item(&parsed, &param)?;
                out.push(parsed);
            }
            Ok(out)
        }
        _ => Err(FieldError::new(
            "input",
            "Invalid 'input': expected a string or an array of input items.",
        )),
    }
}

/// What the SDKs' own helpers add to the output items a client sends back as input: their
/// decoding of what the item already holds (`parsed_arguments` on a function call, from the Node
/// SDK's `responses.stream()`; `parsed` on output text, from both SDKs' parse helpers). Dropped:
/// the item's `arguments` and `text` are what the model sees.
fn without_sdk_fields(item: &mut serde_json::Map<String, Value>) {
    match item.get("type").and_then(Value::as_str) {
        Some("function_call") => {
            item.remove("parsed_arguments");
        }
        Some("message") => {
            if let Some(Value::Array(parts)) = item.get_mut("content") {
                for part in parts.iter_mut().filter_map(Value::as_object_mut) {
                    if part.get("type").and_then(Value::as_str) == Some("output_text") {
                        part.remove("parsed");
                    }
                }
            }
        }
        _ => {}
    }
}

const ITEM_TYPES: &[&str] = &[
    "message",
    "function_call",
    "function_call_output",
    "reasoning",
    "item_reference",
    "mcp_list_tools",
    "mcp_call",
    "mcp_approval_request",
    "mcp_approval_response",
    "tool_search_call",
    "tool_search_output",
    "custom_tool_call",
    "custom_tool_call_output",
    "local_shell_call",
    "local_shell_call_output",
    "shell_call",
    "shell_call_output",
    "apply_patch_call",
    "apply_patch_call_output",
    "computer_call",
    "computer_call_output",
    "file_search_call",
    "web_search_call",
    "image_generation_call",
    "code_interpreter_call",
    "program",
    "program_output",
    "additional_tools",
    "configuration_update",
    "compaction",
    "compaction_trigger",
];

const ROLES: &[&str] = &["user", "system", "developer", "assistant"];

/// Checks an item's `type` (and a message's `role`) before parsing, so the error names them.
fn check_item_kind(item: &Value, param: &str) -> Result<(), FieldError> {
    let kind = item.get("type").and_then(Value::as_str).unwrap_or_default();
    if !ITEM_TYPES.contains(&kind) {
        return Err(FieldError::invalid_value(
            format!("{param}.type"),
            format!(
                "Invalid value: '{kind}'. Supported values are: {}.",
                quoted(ITEM_TYPES)
            ),
        ));
    }
    if kind == "message" {
        match item.get("role") {
            None | Some(Value::Null) => return Err(FieldError::missing(format!("{param}.role"))),
            Some(Value::String(r)) if ROLES.contains(&r.as_str()) => {}
            Some(other) => {
                return Err(FieldError::invalid_value(
                    format!("{param}.role"),
                    format!(
                        "Invalid value: {other}. Supported values are: {}.",
                        quoted(ROLES)
                    ),
                ));
            }
        }
    }
    Ok(())
}

fn check_input_item(item: &InputItem, param: &str) -> Result<(), FieldError> {
    let InputItem::Message(m) = item else {
        return Ok(());
    };
    let MessageContent::Parts(parts) = &m.content else {
        return Ok(());
    };
    for (j, part) in parts.iter().enumerate() {
        let at = format!("{param}.content[{j}]");
        match part {
            InputPart::InputImage {
                image_url, file_id, ..
            } => {
                if file_id.is_some() {
                    return Err(FieldError::unsupported(
                        format!("{at}.file_id"),
                        "File ids are not supported by this relay (there is no Files API); send the image as 'image_url' (an https or data: URL).",
                    ));
                }
                if image_url.is_none() {
                    return Err(FieldError::missing(format!("{at}.image_url")));
                }
            }
            InputPart::InputFile {
                file_data,
                file_id,
                file_url,
                ..
            } => {
                if file_id.is_some() || file_url.is_some() {
                    let which = if file_id.is_some() {
                        "file_id"
                    } else {
                        "file_url"
                    };
                    return Err(FieldError::unsupported(
                        format!("{at}.{which}"),
                        format!(
                            "'{which}' is not supported by this relay; send the file inline as 'file_data' (a data: URL)."
                        ),
                    ));
                }
                if file_data.is_none() {
                    return Err(FieldError::missing(format!("{at}.file_data")));
                }
            }
            InputPart::OutputText { .. } | InputPart::Refusal { .. }
                if m.role != Role::Assistant =>
            {
                return Err(FieldError::invalid_value(
                    format!("{at}.type"),
                    "Output content parts ('output_text', 'refusal') are only valid in assistant messages.",
                ));
            }
            _ => {}
        }
    }
    Ok(())
}
