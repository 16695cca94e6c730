//! `tool_choice`: a mode string or a tool reference, checked against the request's `tools`.

use serde_json::{Map, Value};

use super::{BuiltinTool, HOSTED_TOOL_TYPES, ToolChoice, ToolParam};
use crate::api::error::FieldError;

/// `tool_choice` as sent (absent or null: `auto`), checked against `tools`.
pub(super) fn parse_tool_choice(
    choice: Option<Value>,
    tools: &[ToolParam],
) -> Result<ToolChoice, FieldError> {
    let Some(choice) = choice else {
        return Ok(ToolChoice::Auto);
    };
    let bad = |msg: String| FieldError::invalid_value("tool_choice", msg);
    match &choice {
        Value::Null => Ok(ToolChoice::Auto),
        Value::String(s) => match s.as_str() {
            "auto" => Ok(ToolChoice::Auto),
            "none" => Ok(ToolChoice::None),
            "required" if tools.is_empty() => Err(bad(
                "Invalid 'tool_choice': 'required' needs at least one tool in 'tools'.".into(),
            )),
            "required" => Ok(ToolChoice::Required),
            other => Err(bad(format!(
                "Invalid value: '{other}'. Supported values are: 'none', 'auto', and 'required'."
            ))),
        },
        Value::Object(o) => tool_reference(o, tools),
        _ => Err(bad(
            "Invalid 'tool_choice': expected a string or an object.".into(),
        )),
    }
}

/// An object `tool_choice`, by its `type`: one tool of `tools`, or `allowed_tools`.
fn tool_reference(o: &Map<String, Value>, tools: &[ToolParam]) -> Result<ToolChoice, FieldError> {
    let kind = o.get("type").and_then(Value::as_str).unwrap_or_default();
    let str_field = |k: &str| o.get(k).and_then(Value::as_str).map(str::to_string);
    match kind {
        "function" => {
            let name = str_field("name").ok_or_else(|| FieldError::missing("tool_choice.name"))?;
            let known = tools
                .iter()
                .any(|t| matches!(t, ToolParam::Function(f) if f.name == name));
            if !known {
                return Err(FieldError::invalid_value(
                    "tool_choice.name",
                    format!("Tool choice '{name}' not found in 'tools' parameter."),
                ));
            }
            Ok(ToolChoice::Function { name })
        }
        "mcp" => {
            let server_label = str_field("server_label")
                .ok_or_else(|| FieldError::missing("tool_choice.server_label"))?;
            let known = tools.iter().any(
                |t| matches!(t, ToolParam::Mcp(m) if m.server_label.as_deref() == Some(server_label.as_str())),
            );
            if !known {
                return Err(FieldError::invalid_value(
                    "tool_choice.server_label",
                    format!(
                        "MCP server '{server_label}' named in 'tool_choice' is not in 'tools'."
                    ),
                ));
            }
            Ok(ToolChoice::Mcp {
                server_label,
                name: str_field("name"),
            })
        }
        "custom" => {
            let name = str_field("name").ok_or_else(|| FieldError::missing("tool_choice.name"))?;
            let known = tools
                .iter()
                .any(|t| matches!(t, ToolParam::Custom(c) if c.name == name));
            if !known {
                return Err(FieldError::invalid_value(
                    "tool_choice.name",
                    format!("Tool choice '{name}' not found in 'tools' parameter."),
                ));
            }
            Ok(ToolChoice::Custom { name })
        }
        "apply_patch"
        | "shell"
        | "local_shell"
        | "computer"
        | "computer_use"
        | "computer_use_preview" => builtin(kind, tools),
        "allowed_tools" => allowed_tools(o),
        k if HOSTED_TOOL_TYPES.contains(&k) || k == "programmatic_tool_calling" => {
            Err(FieldError::unsupported(
                "tool_choice",
                format!(
                    "The hosted tool '{k}' cannot run on this relay, so it cannot be forced: choose 'auto', 'required', or one of the request's client tools."
                ),
            ))
        }
        "" => Err(FieldError::missing("tool_choice.type")),
        other => Err(FieldError::invalid_value(
            "tool_choice.type",
            format!(
                "Invalid value: '{other}'. Supported values are: 'function', 'mcp', 'custom', 'allowed_tools', 'apply_patch', 'shell', 'local_shell', 'computer', or the strings 'none', 'auto', 'required'."
            ),
        )),
    }
}

/// `{type: "apply_patch" | "shell" | ...}`: the built-in client tool of that type, in `tools`.
fn builtin(kind: &str, tools: &[ToolParam]) -> Result<ToolChoice, FieldError> {
    let builtin = match kind {
        "apply_patch" => BuiltinTool::ApplyPatch,
        "shell" => BuiltinTool::Shell,
        "local_shell" => BuiltinTool::LocalShell,
        _ => BuiltinTool::Computer,
    };
    if !tools
        .iter()
        .any(|t| matches!(t, ToolParam::Builtin(b, _) if *b == builtin))
    {
        return Err(FieldError::invalid_value(
            "tool_choice.type",
            format!("Tool choice '{kind}' needs a '{kind}' tool in 'tools'."),
        ));
    }
    Ok(ToolChoice::Builtin(builtin))
}

/// `{type: "allowed_tools", mode, tools}`: a `mode` of `auto` or `required`, each tool reference
/// with a `type`.
fn allowed_tools(o: &Map<String, Value>) -> Result<ToolChoice, FieldError> {
    let required = match o.get("mode").and_then(Value::as_str) {
        Some("auto") | None => false,
        Some("required") => true,
        Some(m) => {
            return Err(FieldError::invalid_value(
                "tool_choice.mode",
                format!("Invalid value: '{m}'. Supported values are: 'auto' and 'required'."),
            ));
        }
    };
    let Some(Value::Array(list)) = o.get("tools") else {
        return Err(FieldError::missing("tool_choice.tools"));
    };
    for (i, t) in list.iter().enumerate() {
        if t.get("type").and_then(Value::as_str).is_none() {
            return Err(FieldError::missing(format!("tool_choice.tools[{i}].type")));
        }
    }
    Ok(ToolChoice::Allowed {
        required,
        tools: list.clone(),
    })
}
