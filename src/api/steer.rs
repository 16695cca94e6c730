//! Steering (SPEC §22), as the pinned SDK's beta types describe it
//! (`openai.types.beta.BetaResponseSteer*`): the `response.steer` client event's input checked,
//! and the steering events a WebSocket connection sends. `response.steer.accepted` is a run's own
//! event ([`Event::SteerAccepted`](super::Event)), numbered in its log; `pending` and `failed`
//! ([`SteerNotice`]) are the connection's, sent beside the log.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::response::{OutputItem, Response};

/// A steering submission as its events name it: its id and the response it steers.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SteerRef {
    pub id: String,
    pub previous_response_id: String,
}

/// The codes of `response.steer.failed` (`BetaResponseSteerErrorCode`).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum SteerErrorCode {
    /// No response with that id on this connection.
    ResponseNotFound,
    /// The event or its input failed validation.
    InvalidInput,
    /// The response cannot be steered (bound to a conversation, or compacting automatically).
    SteeringNotSupported,
    /// Too many submissions are queued for the response.
    TooManyPendingSteers,
    /// The response completed and takes no more steering input.
    ResponseAlreadyCompleted,
    /// The response ended otherwise (incomplete, failed, cancelled) or is being replaced.
    ResponseNotActive,
    /// The successor that was to commit the input could not start.
    SuccessorCreationFailed,
}

/// A failure's `error` (its `type` is always `invalid_request_error`).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct SteerError {
    pub code: SteerErrorCode,
    pub message: String,
    #[serde(rename = "type")]
    pub kind: ErrorType,
}

#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ErrorType {
    InvalidRequestError,
}

/// The submission a failure hands back: its id once one was given, and the input as sent.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct FailedSteer {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    pub previous_response_id: String,
    pub input: Value,
}

/// Why accepted input is still queued (`BetaResponseSteerPendingReason`).
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum PendingReason {
    WaitingForRequiredInput,
}

/// A stub of what the client owes before its response can go on: the identifying fields of the
/// input item it is to fill (`BetaResponseSteerRequiredInput`).
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum RequiredInput {
    FunctionCallOutput {
        call_id: String,
        name: String,
    },
    CustomToolCallOutput {
        call_id: String,
    },
    ComputerCallOutput {
        call_id: String,
    },
    ShellCallOutput {
        call_id: String,
    },
    ApplyPatchCallOutput {
        call_id: String,
    },
    ToolSearchOutput {
        call_id: String,
        execution: Execution,
    },
    McpApprovalResponse {
        approval_request_id: String,
    },
}

#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Execution {
    Client,
}

/// The steering events sent beside a response's log: after its terminal event, or at once for
/// a refusal.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(tag = "type")]
pub enum SteerNotice {
    #[serde(rename = "response.steer.pending")]
    Pending {
        steer: SteerRef,
        reason: PendingReason,
        required_input: Vec<RequiredInput>,
    },
    #[serde(rename = "response.steer.failed")]
    Failed {
        steer: FailedSteer,
        error: SteerError,
    },
}

impl SteerNotice {
    /// A `response.steer.failed` returning `steer`.
    pub fn failed(steer: FailedSteer, code: SteerErrorCode, message: impl Into<String>) -> Self {
        SteerNotice::Failed {
            steer,
            error: SteerError {
                code,
                message: message.into(),
                kind: ErrorType::InvalidRequestError,
            },
        }
    }

    /// The event's JSON text: its fields, `sequence_number`, and `stream_id` on a named lane.
    pub fn to_json(&self, sequence_number: u64, stream_id: Option<&str>) -> String {
        let mut v = serde_json::to_value(self).expect("notices serialize");
        v["sequence_number"] = Value::from(sequence_number);
        if let Some(lane) = stream_id {
            v["stream_id"] = Value::from(lane);
        }
        v.to_string()
    }
}

/// What `response`, ended, waits for from its client: a stub per client-owned call and approval
/// request it ended with (nothing: it waits for nothing).
pub fn required_input(response: &Response) -> Vec<RequiredInput> {
    (response.output.iter())
        .filter_map(|item| match item {
            OutputItem::FunctionCall(f) => Some(RequiredInput::FunctionCallOutput {
                call_id: f.call_id.clone(),
                name: f.name.clone(),
            }),
            OutputItem::CustomToolCall(c) => Some(RequiredInput::CustomToolCallOutput {
                call_id: c.call_id.clone(),
            }),
            OutputItem::ComputerCall(c) => Some(RequiredInput::ComputerCallOutput {
                call_id: c.call_id.clone(),
            }),
            OutputItem::ShellCall(c) | OutputItem::LocalShellCall(c) => {
                Some(RequiredInput::ShellCallOutput {
                    call_id: c.call_id.clone(),
                })
            }
            OutputItem::ApplyPatchCall(c) => Some(RequiredInput::ApplyPatchCallOutput {
                call_id: c.call_id.clone(),
            }),
            OutputItem::ToolSearchCall(t) if t.execution == "client" => {
                Some(RequiredInput::ToolSearchOutput {
                    call_id: t.call_id.clone().unwrap_or_else(|| t.id.clone()),
                    execution: Execution::Client,
                })
            }
            OutputItem::McpApprovalRequest(a) => Some(RequiredInput::McpApprovalResponse {
                approval_request_id: a.id.clone(),
            }),
            _ => None,
        })
        .collect()
}

/// Checks a steer's `input` as the SDK describes it: a non-empty string, or a non-empty array of
/// user messages, each with only `type` (`message`), `role` (`user`) and `content` (a string, or
/// `input_text`, `input_image` and `input_file` parts). `Err`: the field at fault and why.
pub fn check_input(input: &Value) -> Result<(), (String, String)> {
    let bad = |param: String, why: String| Err((param, why));
    let items = match input {
        Value::String(s) if s.trim().is_empty() => {
            return bad("input".into(), "the steering text is empty.".into());
        }
        Value::String(_) => return Ok(()),
        Value::Array(items) if items.is_empty() => {
            return bad(
                "input".into(),
                "an empty array; send at least one user message.".into(),
            );
        }
        Value::Array(items) => items,
        _ => {
            return bad(
                "input".into(),
                "expected a string or an array of user messages.".into(),
            );
        }
    };
    for (i, item) in items.iter().enumerate() {
        let at = |field: &str| format!("input[{i}]{field}");
        let Some(fields) = item.as_object() else {
            return bad(at(""), "expected a user message object.".into());
        };
        match fields.get("type") {
            None | Some(Value::Null) => {}
            Some(Value::String(t)) if t == "message" => {}
            Some(t) => {
                return bad(
                    at(".type"),
                    format!("steering takes only user messages, not {t}."),
                );
            }
        }
        if let Some(extra) = fields
            .keys()
            .find(|k| !matches!(k.as_str(), "type" | "role" | "content"))
        {
            return bad(
                at(&format!(".{extra}")),
                "a steering message takes only 'type', 'role' and 'content'.".into(),
            );
        }
        match fields.get("role") {
            Some(Value::String(r)) if r == "user" => {}
            None => return bad(at(".role"), "missing; steering messages are 'user'.".into()),
            Some(r) => {
                return bad(
                    at(".role"),
                    format!("steering takes only the 'user' role, not {r}."),
                );
            }
        }
        match fields.get("content") {
            Some(Value::String(_)) => {}
            Some(Value::Array(parts)) if !parts.is_empty() => {
                for (j, part) in parts.iter().enumerate() {
                    let kind = part.get("type").and_then(Value::as_str);
                    if !matches!(kind, Some("input_text" | "input_image" | "input_file")) {
                        return bad(
                            at(&format!(".content[{j}].type")),
                            "steering content parts are 'input_text', 'input_image' or 'input_file'."
                                .into(),
                        );
                    }
                }
            }
            _ => {
                return bad(
                    at(".content"),
                    "expected a string or a non-empty array of content parts.".into(),
                );
            }
        }
    }
    Ok(())
}

/// A steer's input as input items of a create: a string is one user message.
pub fn input_items(input: &Value) -> Vec<Value> {
    match input {
        Value::String(s) => {
            vec![serde_json::json!({"type": "message", "role": "user", "content": s})]
        }
        Value::Array(items) => items.clone(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn steering_input_is_text_or_user_messages_only() {
        assert!(check_input(&json!("also check the tests")).is_ok());
        let parts = json!([{"role": "user", "content": [
            {"type": "input_text", "text": "look"},
            {"type": "input_image", "image_url": "data:image/png;base64,AA=="},
            {"type": "input_file", "file_data": "data:text/plain;base64,AA==", "filename": "a.txt"}]}]);
        assert!(check_input(&parts).is_ok());
        let refused = [
            (json!(""), "input"),
            (json!([]), "input"),
            (json!(3), "input"),
            (
                json!([{"role": "assistant", "content": "x"}]),
                "input[0].role",
            ),
            (json!([{"role": "system", "content": "x"}]), "input[0].role"),
            (
                json!([{"type": "function_call_output", "call_id": "c", "output": "x"}]),
                "input[0].type",
            ),
            (
                json!([{"role": "user", "content": "x", "id": "msg_1"}]),
                "input[0].id",
            ),
            (
                json!([{"role": "user", "content": [{"type": "output_text", "text": "x"}]}]),
                "input[0].content[0].type",
            ),
            (json!([{"role": "user", "content": []}]), "input[0].content"),
        ];
        for (input, param) in refused {
            let (at, _) = check_input(&input).expect_err(&input.to_string());
            assert_eq!(at, param, "{input}");
        }
    }

    #[test]
    fn a_response_waits_for_each_client_call_and_approval_request_it_ended_with() {
        let mut r = Response::in_progress("resp_1".into(), "m".into(), 0);
        let items = json!([
            {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                "content": [{"type": "output_text", "text": "x", "annotations": [], "logprobs": []}]},
            {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "lookup",
                "arguments": "{}", "status": "completed"},
            {"type": "custom_tool_call", "id": "ctc_1", "call_id": "call_2", "name": "patch",
                "input": "x", "status": "completed"},
            {"type": "mcp_approval_request", "id": "mcpr_1", "server_label": "s", "name": "t",
                "arguments": "{}"},
            {"type": "shell_call", "id": "sh_1", "call_id": "call_3", "status": "completed",
                "action": {"commands": ["ls"]}}
        ]);
        r.output = serde_json::from_value(items).unwrap();
        let stubs = serde_json::to_value(required_input(&r)).unwrap();
        assert_eq!(
            stubs,
            json!([
                {"type": "function_call_output", "call_id": "call_1", "name": "lookup"},
                {"type": "custom_tool_call_output", "call_id": "call_2"},
                {"type": "mcp_approval_response", "approval_request_id": "mcpr_1"},
                {"type": "shell_call_output", "call_id": "call_3"}
            ])
        );
    }

    #[test]
    fn a_failed_notice_is_the_sdks_shape() {
        let steer = FailedSteer {
            id: None,
            previous_response_id: "resp_1".into(),
            input: json!("x"),
        };
        let text = SteerNotice::failed(steer, SteerErrorCode::ResponseNotFound, "no")
            .to_json(0, Some("lane-a"));
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            v,
            json!({"type": "response.steer.failed", "sequence_number": 0, "stream_id": "lane-a",
                "steer": {"previous_response_id": "resp_1", "input": "x"},
                "error": {"code": "response_not_found", "message": "no", "type": "invalid_request_error"}})
        );
    }
}
