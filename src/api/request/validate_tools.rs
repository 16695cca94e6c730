//! `tools`: each tool parsed by its `type`, names checked and unique, at most one of each
//! built-in client tool and of `tool_search`.

use serde_json::Value;

use super::parse::{from_value_at, quoted, valid_name};
use super::{
    BuiltinTool, CustomTool, FunctionTool, HOSTED_TOOL_TYPES, NamespaceTool, NamespacedTool,
    ToolParam, ToolSearchParam,
};
use crate::api::error::FieldError;

/// Parses a list of tools (`tools`, or the tools an input item adds, named from `base`).
pub fn parse_tools(tools: Vec<Value>, base: &str) -> Result<Vec<ToolParam>, FieldError> {
    let mut out = Vec::with_capacity(tools.len());
    for (i, mut tool) in tools.into_iter().enumerate() {
        let param = format!("{base}[{i}]");
        let Some(obj) = tool.as_object_mut() else {
            return Err(FieldError::new(
                param,
                format!("Invalid 'tools[{i}]': expected an object."),
            ));
        };
        let kind = match obj.remove("type") {
            Some(Value::String(k)) => k,
            None | Some(Value::Null) => return Err(FieldError::missing(format!("{param}.type"))),
            Some(_) => {
                return Err(FieldError::new(
                    format!("{param}.type"),
                    "Invalid type for 'type': expected a string.",
                ));
            }
        };
        match kind.as_str() {
            "function" => out.push(ToolParam::Function(parse_function(tool, &param)?)),
            "custom" => out.push(ToolParam::Custom(parse_custom(tool, &param)?)),
            "namespace" => out.push(ToolParam::Namespace(parse_namespace(tool, &param)?)),
            "mcp" => out.push(ToolParam::Mcp(from_value_at(tool, &param)?)),
            "tool_search" => {
                let t = parse_tool_search(tool, &param)?;
                if out.iter().any(|t| matches!(t, ToolParam::ToolSearch(_))) {
                    return Err(FieldError::invalid_value(
                        format!("{param}.type"),
                        "At most one 'tool_search' tool is allowed.",
                    ));
                }
                out.push(ToolParam::ToolSearch(t));
            }
            "local_shell" | "shell" | "apply_patch" | "computer" | "computer_use_preview" => {
                let builtin = match kind.as_str() {
                    "local_shell" => BuiltinTool::LocalShell,
                    "shell" => BuiltinTool::Shell,
                    "apply_patch" => BuiltinTool::ApplyPatch,
                    _ => BuiltinTool::Computer,
                };
                if out
                    .iter()
                    .any(|t| matches!(t, ToolParam::Builtin(b, _) if *b == builtin))
                {
                    return Err(FieldError::invalid_value(
                        format!("{param}.type"),
                        format!("At most one '{kind}' tool is allowed."),
                    ));
                }
                let mut spec = std::mem::take(obj);
                spec.insert("type".into(), Value::String(kind.clone()));
                out.push(ToolParam::Builtin(builtin, spec));
            }
            k if HOSTED_TOOL_TYPES.contains(&k) => {
                let mut spec = std::mem::take(obj);
                spec.insert("type".into(), Value::String(kind.clone()));
                out.push(ToolParam::Hosted(kind.clone(), spec));
            }
            other => {
                return Err(FieldError::invalid_value(
                    format!("{param}.type"),
                    format!(
                        "Invalid value: '{other}'. Supported tool types are: 'function', 'custom', 'namespace', 'mcp', 'tool_search', 'local_shell', 'shell', 'apply_patch', 'computer', 'computer_use_preview', and the hosted tools {}.",
                        quoted(HOSTED_TOOL_TYPES)
                    ),
                ));
            }
        }
    }
    check_unique_names(&out, base)?;
    Ok(out)
}

/// A `tool_search` tool: its `execution` is `server` or `client`.
fn parse_tool_search(tool: Value, param: &str) -> Result<ToolSearchParam, FieldError> {
    let t: ToolSearchParam = from_value_at(tool, param)?;
    if let Some(e) = t.execution.as_deref()
        && e != "server"
        && e != "client"
    {
        return Err(FieldError::invalid_value(
            format!("{param}.execution"),
            format!("Invalid value: '{e}'. Supported values are: 'server' and 'client'."),
        ));
    }
    Ok(t)
}

/// No two function or custom tools of `tools` (named from `base`) share a name.
fn check_unique_names(tools: &[ToolParam], base: &str) -> Result<(), FieldError> {
    let mut names = std::collections::HashSet::new();
    for (i, t) in tools.iter().enumerate() {
        let name = match t {
            ToolParam::Function(f) => &f.name,
            ToolParam::Custom(c) => &c.name,
            _ => continue,
        };
        if !names.insert(name.clone()) {
            return Err(FieldError::invalid_value(
                format!("{base}[{i}].name"),
                format!("Duplicate function tool name '{name}' in '{base}'."),
            ));
        }
    }
    Ok(())
}

fn parse_function(tool: Value, param: &str) -> Result<FunctionTool, FieldError> {
    let f: FunctionTool = from_value_at(tool, param)?;
    if !valid_name(&f.name) {
        return Err(FieldError::invalid_value(
            format!("{param}.name"),
            format!(
                "Invalid '{param}.name': string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$' of at most 64 characters."
            ),
        ));
    }
    if let Some(p) = &f.parameters
        && !p.is_object()
    {
        return Err(FieldError::new(
            format!("{param}.parameters"),
            "Invalid 'parameters': expected a JSON Schema object.",
        ));
    }
    Ok(f)
}

fn parse_custom(tool: Value, param: &str) -> Result<CustomTool, FieldError> {
    let c: CustomTool = from_value_at(tool, param)?;
    if !valid_name(&c.name) {
        return Err(FieldError::invalid_value(
            format!("{param}.name"),
            format!(
                "Invalid '{param}.name': string does not match pattern. Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$' of at most 64 characters."
            ),
        ));
    }
    if let Some(f) = &c.format {
        match f.get("type").and_then(Value::as_str) {
            Some("text") => {}
            Some("grammar") => {
                let syntax = f.get("syntax").and_then(Value::as_str);
                if !matches!(syntax, Some("lark" | "regex")) {
                    return Err(FieldError::invalid_value(
                        format!("{param}.format.syntax"),
                        "Invalid 'format.syntax': expected 'lark' or 'regex'.",
                    ));
                }
                if f.get("definition").and_then(Value::as_str).is_none() {
                    return Err(FieldError::missing(format!("{param}.format.definition")));
                }
            }
            _ => {
                return Err(FieldError::invalid_value(
                    format!("{param}.format.type"),
                    "Invalid 'format.type': expected 'text' or 'grammar'.",
                ));
            }
        }
    }
    Ok(c)
}

fn parse_namespace(mut tool: Value, param: &str) -> Result<NamespaceTool, FieldError> {
    let obj = tool.as_object_mut().expect("checked to be an object");
    let name = match obj.remove("name") {
        Some(Value::String(n)) if valid_name(&n) => n,
        Some(Value::String(n)) => {
            return Err(FieldError::invalid_value(
                format!("{param}.name"),
                format!(
                    "Invalid '{param}.name': '{n}'. Expected a string that matches the pattern '^[a-zA-Z0-9_-]+$' of at most 64 characters."
                ),
            ));
        }
        None | Some(Value::Null) => return Err(FieldError::missing(format!("{param}.name"))),
        Some(_) => {
            return Err(FieldError::new(
                format!("{param}.name"),
                "Invalid type for 'name': expected a string.",
            ));
        }
    };
    let description = match obj.remove("description") {
        Some(Value::String(d)) => d,
        None | Some(Value::Null) => String::new(),
        Some(_) => {
            return Err(FieldError::new(
                format!("{param}.description"),
                "Invalid type for 'description': expected a string.",
            ));
        }
    };
    let tools = match obj.remove("tools") {
        Some(Value::Array(t)) => t,
        None | Some(Value::Null) => return Err(FieldError::missing(format!("{param}.tools"))),
        Some(_) => {
            return Err(FieldError::new(
                format!("{param}.tools"),
                "Invalid type for 'tools': expected an array.",
            ));
        }
    };
    if let Some(k) = obj.keys().next() {
        return Err(FieldError::unknown(format!("{param}.{k}")));
    }
    let mut out = Vec::with_capacity(tools.len());
    let mut names = std::collections::HashSet::new();
    for (j, mut t) in tools.into_iter().enumerate() {
        let at = format!("{param}.tools[{j}]");
        let kind = t
            .as_object_mut()
            .and_then(|o| o.remove("type"))
            .and_then(|k| k.as_str().map(str::to_string));
        let parsed = match kind.as_deref() {
            Some("function") => NamespacedTool::Function(parse_function(t, &at)?),
            Some("custom") => NamespacedTool::Custom(parse_custom(t, &at)?),
            None => return Err(FieldError::missing(format!("{at}.type"))),
            Some(other) => {
                return Err(FieldError::invalid_value(
                    format!("{at}.type"),
                    format!(
                        "Invalid value: '{other}'. Supported values are: 'function' and 'custom'."
                    ),
                ));
            }
        };
        let tool_name = match &parsed {
            NamespacedTool::Function(f) => f.name.clone(),
            NamespacedTool::Custom(c) => c.name.clone(),
        };
        if !names.insert(tool_name.clone()) {
            return Err(FieldError::invalid_value(
                format!("{at}.name"),
                format!("Duplicate tool name '{tool_name}' in namespace '{name}'."),
            ));
        }
        out.push(parsed);
    }
    Ok(NamespaceTool {
        name,
        description,
        tools: out,
    })
}
