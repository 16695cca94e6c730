//! What a tool result (or a failed call) becomes for the model: text with placeholders for media,
//! structured content as compact JSON when there is no text, capped in size; and the images, for
//! upstreams that take them.

use serde_json::Value;

use super::ToolResult;
use crate::api::response::McpCallError;

/// The text the model sees for a successful call, at most `cap_bytes` (plus a truncation marker).
///
/// Text blocks are joined with newlines; images and audio become `[image: image/png, 67 bytes]`
/// placeholders; embedded resources give their text (or a placeholder for blobs); resource links
/// become `[resource: uri]`. `structuredContent` is used, as compact JSON, only when no block
/// carries text.
pub fn result_text(result: &ToolResult, cap_bytes: usize) -> String {
    let (parts, has_text) = content_parts(&result.content);
    let mut parts = parts;
    if !has_text && let Some(s) = result.structured_content.as_ref().filter(|s| !s.is_null()) {
        parts.insert(0, s.to_string());
    }
    truncate(parts.join("\n"), cap_bytes)
}

/// The images of a result as `(mime type, base64 data)`.
pub fn result_images(result: &ToolResult) -> Vec<(String, String)> {
    result
        .content
        .iter()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("image"))
        .filter_map(|b| {
            let data = b.get("data")?.as_str()?;
            let mime = b
                .get("mimeType")
                .and_then(Value::as_str)
                .unwrap_or("application/octet-stream");
            Some((mime.to_string(), data.to_string()))
        })
        .collect()
}

/// A failed call's error as it is kept, streamed and shown to the model: at most `cap_bytes` of
/// it. An execution error whose content is larger (a long text, an image) becomes one text block
/// of its text, images and blobs as placeholders, truncated like a result; messages of the other
/// kinds are truncated.
pub fn bounded_error(err: McpCallError, cap_bytes: usize) -> McpCallError {
    match err {
        McpCallError::McpToolExecutionError { content }
            if content.to_string().len() > cap_bytes =>
        {
            McpCallError::McpToolExecutionError {
                content: serde_json::json!([{"type": "text", "text": truncate(execution_error_text(&content), cap_bytes)}]),
            }
        }
        McpCallError::McpProtocolError { code, message } => McpCallError::McpProtocolError {
            code,
            message: truncate(message, cap_bytes),
        },
        McpCallError::HttpError { code, message } => McpCallError::HttpError {
            code,
            message: truncate(message, cap_bytes),
        },
        small => small,
    }
}

/// What the model is told when a call failed.
pub fn error_text(err: &McpCallError) -> String {
    match err {
        McpCallError::McpToolExecutionError { content } => {
            let text = execution_error_text(content);
            if text.is_empty() {
                "Error: the tool reported an error.".to_string()
            } else {
                format!("Error: {text}")
            }
        }
        McpCallError::McpProtocolError { code, message } => {
            format!("Error: MCP error {code}: {message}")
        }
        McpCallError::HttpError { code: 0, message } => {
            format!("Error: could not reach the MCP server: {message}")
        }
        McpCallError::HttpError { code, message } => {
            format!("Error: the MCP server answered HTTP {code}: {message}")
        }
    }
}

/// The text of an execution error's content (blocks as in a result: media as placeholders).
fn execution_error_text(content: &Value) -> String {
    match content {
        Value::Array(blocks) => content_parts(blocks).0.join("\n"),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The text of every block, and whether any block carried text.
fn content_parts(blocks: &[Value]) -> (Vec<String>, bool) {
    let mut parts = Vec::with_capacity(blocks.len());
    let mut has_text = false;
    for b in blocks {
        let s = |k: &str| b.get(k).and_then(Value::as_str);
        match s("type").unwrap_or("") {
            "text" => {
                has_text = true;
                parts.push(s("text").unwrap_or("").to_string());
            }
            kind @ ("image" | "audio") => {
                let mime = s("mimeType").unwrap_or("application/octet-stream");
                parts.push(format!(
                    "[{kind}: {mime}, {} bytes]",
                    base64_len(s("data").unwrap_or(""))
                ));
            }
            "resource" => {
                let r = b.get("resource").unwrap_or(&Value::Null);
                let rs = |k: &str| r.get(k).and_then(Value::as_str);
                let uri = rs("uri").unwrap_or("");
                if let Some(text) = rs("text") {
                    has_text = true;
                    parts.push(text.to_string());
                } else {
                    let mime = rs("mimeType").unwrap_or("application/octet-stream");
                    parts.push(format!(
                        "[resource: {uri}, {mime}, {} bytes]",
                        base64_len(rs("blob").unwrap_or(""))
                    ));
                }
            }
            "resource_link" => parts.push(format!("[resource: {}]", s("uri").unwrap_or(""))),
            _ => parts.push(b.to_string()),
        }
    }
    (parts, has_text)
}

/// Decoded size of base64 `data`.
fn base64_len(data: &str) -> usize {
    let n = data.bytes().filter(|b| !b.is_ascii_whitespace()).count();
    let pad = data
        .trim_end()
        .bytes()
        .rev()
        .take_while(|b| *b == b'=')
        .count()
        .min(2);
    (n / 4 * 3
        + match n % 4 {
            2 => 1,
            3 => 2,
            _ => 0,
        })
    .saturating_sub(pad)
}

fn truncate(mut text: String, cap: usize) -> String {
    if text.len() <= cap {
        return text;
    }
    let mut cut = cap;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    let omitted = text.len() - cut;
    text.truncate(cut);
    text.push_str(&format!("… [truncated: {omitted} bytes omitted]"));
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_sizes() {
        assert_eq!(base64_len("aGk="), 2);
        assert_eq!(base64_len("aGVsbG8="), 5);
        assert_eq!(base64_len("aGVsbG8h"), 6);
        assert_eq!(base64_len(""), 0);
    }

    #[test]
    fn truncates_on_char_boundary() {
        let t = truncate("héllo".to_string(), 2);
        assert_eq!(t, "h… [truncated: 5 bytes omitted]");
    }
}
