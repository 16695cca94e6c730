//! `research` tasks (protocol `2025-11-25`, with `long_tools`): a plain call is refused with
//! `-32601`; a call with `task` creates a task that completes `ms` milliseconds later, which
//! `tasks/get`, `tasks/result` and `tasks/cancel` read and cancel. Answered as raw JSON-RPC,
//! before rmcp sees the request.

use std::time::{Duration, Instant};

use super::State;

/// The answer to a `research` call or a task request, as a `2025-11-25` task server gives it;
/// `None` for every other message.
pub(super) fn task_answer(state: &State, body: &[u8]) -> Option<serde_json::Value> {
    use serde_json::json;
    let rpc: serde_json::Value = serde_json::from_slice(body).ok()?;
    let id = rpc.get("id")?.clone();
    let params = rpc.get("params").cloned().unwrap_or_default();
    let task_id = params.get("taskId").and_then(|t| t.as_str()).unwrap_or("");
    let mut tasks = state.tasks.lock().unwrap();
    let status = |t: &(Instant, u64, bool)| {
        if t.2 {
            "cancelled"
        } else if t.0.elapsed() >= Duration::from_millis(t.1) {
            "completed"
        } else {
            "working"
        }
    };
    let result = match rpc.get("method")?.as_str()? {
        "tools/call" if params.get("name")? == "research" => {
            if params.get("task").is_none() {
                return Some(json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601,
                    "message": "Tool research requires task augmentation (taskSupport: 'required')"}}));
            }
            let ms = params
                .pointer("/arguments/ms")
                .and_then(|m| m.as_u64())
                .unwrap_or(0);
            let task = format!("task-{}", tasks.len() + 1);
            tasks.insert(task.clone(), (Instant::now(), ms, false));
            json!({"task": {"taskId": task, "status": "working", "pollInterval": 50,
                "createdAt": "2026-01-01T00:00:00Z", "lastUpdatedAt": "2026-01-01T00:00:00Z", "ttl": null}})
        }
        "tasks/get" => {
            let t = tasks.get(task_id)?;
            json!({"taskId": task_id, "status": status(t), "pollInterval": 50,
                "createdAt": "2026-01-01T00:00:00Z", "lastUpdatedAt": "2026-01-01T00:00:00Z", "ttl": null})
        }
        "tasks/result" => {
            let t = tasks.get(task_id)?;
            json!({"content": [{"type": "text", "text": format!("researched for {} ms", t.1)}]})
        }
        "tasks/cancel" => {
            let t = tasks.get_mut(task_id)?;
            t.2 = true;
            json!({"taskId": task_id, "status": "cancelled",
                "createdAt": "2026-01-01T00:00:00Z", "lastUpdatedAt": "2026-01-01T00:00:00Z", "ttl": null})
        }
        _ => return None,
    };
    Some(json!({"jsonrpc": "2.0", "id": id, "result": result}))
}
