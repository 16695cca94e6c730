//! From bytes to a validated request, and serde's errors turned into [`FieldError`]s whose `param`
//! is the path of the field at fault (`input[2].content[0].image_url`).

use serde_json::Value;

use super::validate::validate;
use super::{CreateRequest, CreateResponse};
use crate::api::error::FieldError;

/// Parses and validates a create body. The error names the field at fault.
pub fn parse_create(body: &[u8]) -> Result<CreateRequest, FieldError> {
    let value: Value = serde_json::from_slice(body).map_err(|e| FieldError {
        param: String::new(),
        message: format!(
            "We could not parse the JSON body of your request. (HINT: This likely means you aren't using your HTTP library correctly. The OpenAI API expects a JSON payload.) Parser error: {e}"
        ),
        code: None,
    })?;
    parse_create_value(value)
}

/// [`parse_create`] of a body already read as JSON (a WebSocket `response.create`, its own
/// fields taken out).
pub fn parse_create_value(value: Value) -> Result<CreateRequest, FieldError> {
    if !value.is_object() {
        return Err(FieldError::new(
            "",
            "The request body must be a JSON object.",
        ));
    }
    let raw: CreateResponse = from_value_at(value, "")?;
    validate(raw)
}

/// Deserializes `value`, turning a serde error into a [`FieldError`] whose `param` is the path of
/// the bad field below `base`.
pub fn from_value_at<T: serde::de::DeserializeOwned>(
    value: Value,
    base: &str,
) -> Result<T, FieldError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let mut param = join_path(base, if path == "." { "" } else { &path });
        let mut msg = e.inner().to_string();
        // Errors from inside a message's parts say where: `content[N]: ...`.
        if let Some((at, rest)) = msg.split_once(": ")
            && at.starts_with("content[")
            && at.ends_with(']')
        {
            param = join_path(&param, at);
            msg = rest.to_string();
        }
        if let Some(rest) = msg.strip_prefix("unknown field `") {
            // The path already ends in the unknown field's name, except inside buffered
            // (internally tagged) content, where it stops at the enclosing item.
            let name = rest.split('`').next().unwrap_or_default();
            if param != name && !param.ends_with(&format!(".{name}")) {
                param = join_path(&param, name);
            }
            return FieldError::unknown(param);
        }
        if let Some(rest) = msg.strip_prefix("missing field `") {
            let name = rest.split('`').next().unwrap_or_default();
            return FieldError::missing(join_path(&param, name));
        }
        if msg.starts_with("unknown variant `") {
            param = join_path(&param, "type");
            let got = msg
                .trim_start_matches("unknown variant `")
                .split('`')
                .next()
                .unwrap_or_default();
            let expected = msg
                .split("expected ")
                .nth(1)
                .unwrap_or("")
                .trim_end_matches('.');
            return FieldError::invalid_value(
                param.clone(),
                format!("Invalid value: '{got}'. Supported values for '{param}' are: {expected}."),
            );
        }
        let shown = if param.is_empty() {
            "body".to_string()
        } else {
            param.clone()
        };
        FieldError {
            code: Some("invalid_type"),
            ..FieldError::new(param, format!("Invalid '{shown}': {msg}"))
        }
    })
}

fn join_path(base: &str, rest: &str) -> String {
    match (base.is_empty(), rest.is_empty()) {
        (true, _) => rest.to_string(),
        (_, true) => base.to_string(),
        _ if rest.starts_with('[') => format!("{base}{rest}"),
        _ => format!("{base}.{rest}"),
    }
}

pub(super) fn quoted(values: &[&str]) -> String {
    values
        .iter()
        .map(|v| format!("'{v}'"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether `name` is a valid function name for OpenAI-compatible upstreams.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}
