//! MCP tasks (protocol `2025-11-25`): a tool whose `execution.taskSupport` is `required` is
//! called with a `task` parameter; the server answers with a task, which the relay polls
//! (`tasks/get`) until it ends, then fetches its result (`tasks/result`). A task whose call is
//! dropped (the run cancelled, the call timed out) is cancelled on the server (`tasks/cancel`).
//!
//! rmcp 3.11 keeps neither a tool's `execution` nor this revision's task requests, so the relay
//! learns a tool needs a task from the server's answer to a plain call (`-32601`, as the
//! specification has servers answer it: a JSON-RPC error, or, as the TypeScript SDK reports an
//! error a tool raised, an `isError` result reading `MCP error -32601: ...`) and sends the task
//! requests as custom requests. The pool remembers such tools, so only their first call pays.

use std::time::Duration;

use rmcp::model::{
    CallToolResult, ClientRequest, CustomRequest, ErrorCode, ErrorData, ServerResult,
};
use rmcp::service::{Peer, RoleClient, ServiceError};
use serde_json::{Map, Value, json};

/// Polling bounds when the server suggests an interval (`pollInterval`), and the default.
const MIN_POLL: Duration = Duration::from_millis(50);
const MAX_POLL: Duration = Duration::from_secs(2);
const DEFAULT_POLL: Duration = Duration::from_millis(250);

/// Whether a plain call's answer says the tool must be called as a task.
pub(super) fn needs_task(answer: &Result<CallToolResult, ServiceError>) -> bool {
    match answer {
        Err(ServiceError::McpError(d)) => d.code == ErrorCode::METHOD_NOT_FOUND,
        Ok(r) if r.is_error == Some(true) => r.content.first().is_some_and(|c| {
            c.as_text()
                .is_some_and(|t| t.text.starts_with("MCP error -32601:") && t.text.contains("task"))
        }),
        _ => false,
    }
}

/// What a task-augmented call gave: the tool's result, or (for a server that ran the call at
/// once instead) its plain result.
pub(super) async fn call(
    peer: &Peer<RoleClient>,
    name: &str,
    arguments: Map<String, Value>,
    ttl: Duration,
    traceparent: Option<&str>,
) -> Result<CallToolResult, ServiceError> {
    let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
    let mut params = json!({"name": name, "arguments": arguments, "task": {"ttl": ttl_ms}});
    if let Some(tp) = traceparent {
        params["_meta"] = json!({"traceparent": tp});
    }
    let created = request(peer, "tools/call", params).await?;
    let Some(task) = task_of(&created) else {
        return call_result(created);
    };
    let Some(id) = task
        .get("taskId")
        .and_then(Value::as_str)
        .map(str::to_owned)
    else {
        return Err(protocol("the server's task has no taskId"));
    };
    let mut guard = CancelOnDrop {
        peer: peer.clone(),
        task: Some(id.clone()),
    };
    let mut status = task;
    loop {
        match status.get("status").and_then(Value::as_str) {
            // Ended, or waiting for input the server asks for through `tasks/result` (which the
            // relay declines): the result request waits for the end.
            Some("completed" | "failed" | "cancelled" | "input_required") => break,
            Some("working") | None => {}
            Some(other) => return Err(protocol(&format!("unknown task status '{other}'"))),
        }
        let poll = status
            .get("pollInterval")
            .and_then(Value::as_u64)
            .map(Duration::from_millis)
            .unwrap_or(DEFAULT_POLL)
            .clamp(MIN_POLL, MAX_POLL);
        tokio::time::sleep(poll).await;
        let got = request(peer, "tasks/get", json!({"taskId": id})).await?;
        status = task_of(&got).unwrap_or(got);
    }
    let result = request(peer, "tasks/result", json!({"taskId": id})).await;
    guard.task = None;
    call_result(result?)
}

async fn request(
    peer: &Peer<RoleClient>,
    method: &str,
    params: Value,
) -> Result<Value, ServiceError> {
    let r = peer
        .send_request(ClientRequest::CustomRequest(CustomRequest::new(
            method,
            Some(params),
        )))
        .await?;
    Ok(as_json(r))
}

/// The result as the server sent it (rmcp parses results by shape; its JSON is what matters).
fn as_json(r: ServerResult) -> Value {
    match r {
        ServerResult::CustomResult(c) => c.0,
        other => serde_json::to_value(other).unwrap_or(Value::Null),
    }
}

/// The task a result carries: `{task: {...}}` (a created task) or the task's own fields
/// (`tasks/get`).
fn task_of(v: &Value) -> Option<Value> {
    if let Some(t) = v.get("task").filter(|t| t.is_object()) {
        return Some(t.clone());
    }
    v.get("taskId").is_some().then(|| v.clone())
}

fn call_result(v: Value) -> Result<CallToolResult, ServiceError> {
    serde_json::from_value(v).map_err(|e| protocol(&format!("not a tool result: {e}")))
}

fn protocol(message: &str) -> ServiceError {
    ServiceError::McpError(ErrorData::new(
        ErrorCode::INTERNAL_ERROR,
        message.to_string(),
        None,
    ))
}

/// Cancels the task on the server unless it ended (its `task` taken).
struct CancelOnDrop {
    peer: Peer<RoleClient>,
    task: Option<String>,
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        let Some(id) = self.task.take() else { return };
        let peer = self.peer.clone();
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let cancel = request(&peer, "tasks/cancel", json!({"taskId": id}));
                let _ = tokio::time::timeout(Duration::from_secs(5), cancel).await;
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_is_found_in_a_created_task_or_a_task_status() {
        let created = json!({"task": {"taskId": "t1", "status": "working"}});
        assert_eq!(task_of(&created).unwrap()["taskId"], "t1");
        let polled = json!({"taskId": "t1", "status": "completed"});
        assert_eq!(task_of(&polled).unwrap()["status"], "completed");
        assert!(task_of(&json!({"content": []})).is_none());
    }
}
