//! One tool call: its arguments checked, a session found, the call sent (as a task when the
//! server wants one), and its answer made into a [`CallOutcome`].
//!
//! Invariants: dropping the call, or running out of time, cancels it on the server; a call that
//! fails at the protocol level forgets the key's listed tools; a tool the server once ran as a
//! task is called as a task from then on (per key).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use rmcp::ServiceError;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use serde_json::{Map, Value};
use tracing::Instrument;

use super::{CallOutcome, Pool, Session, Slot, ToolResult};
use crate::api::response::McpCallError;
use crate::mcp::ServerSpec;
use crate::mcp::errors::{Failure, service_failure};

impl Pool {
    /// Calls tool `name` with `arguments_json` (a JSON object; empty means `{}`) within
    /// `timeout`. Dropping the future, or running out of time, cancels the call on the server.
    pub async fn call_tool(
        &self,
        spec: &ServerSpec,
        name: &str,
        arguments_json: &str,
        timeout: Duration,
    ) -> CallOutcome {
        let arguments = arguments(name, arguments_json)?;
        let span = crate::otel::mcp_span("tools/call", &spec.label, Some(name));
        crate::otel::content(&span, "gen_ai.tool.call.arguments", || {
            arguments_json.to_string()
        });
        let started = Instant::now();
        let slot = self.slot(spec);
        let session = match tokio::time::timeout(
            timeout,
            self.session(&slot, spec, timeout).instrument(span.clone()),
        )
        .await
        {
            Ok(Ok(s)) => s,
            Ok(Err(f)) => {
                crate::otel::failed(&span, &f.kind());
                return Err(f.into_call_error(spec));
            }
            Err(_) => {
                crate::otel::failed(&span, "timeout");
                return Err(Failure::Timeout { after: timeout }.into_call_error(spec));
            }
        };
        let remaining = timeout.saturating_sub(started.elapsed());
        let traceparent = crate::otel::traceparent(&span);
        let call = self.send(
            &session,
            &slot,
            name,
            arguments,
            remaining,
            traceparent.as_deref(),
        );
        let outcome = tokio::time::timeout(remaining, call)
            .instrument(span.clone())
            .await;
        session.traced(&span);
        self.touch(&slot);
        match outcome {
            Err(_) => {
                crate::otel::failed(&span, "timeout");
                Err(Failure::Timeout { after: timeout }.into_call_error(spec))
            }
            Ok(Err(e)) => {
                // The listed tools may be why the call failed (a tool the server no longer has).
                slot.tools.forget();
                let f = service_failure(&e);
                session.note(&f);
                crate::otel::failed(&span, &f.kind());
                Err(f.into_call_error(spec))
            }
            Ok(Ok(r)) => answer(&span, r),
        }
    }

    /// Sends the call on `session`: a plain `tools/call` (asking for progress), or a task when
    /// the server wants one (remembered in `slot` for the tool's next calls).
    async fn send(
        &self,
        session: &Session,
        slot: &Slot,
        name: &str,
        arguments: Map<String, Value>,
        remaining: Duration,
        traceparent: Option<&str>,
    ) -> Result<CallToolResult, ServiceError> {
        let tasked = slot
            .tasked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(name);
        if !tasked {
            let mut params =
                CallToolRequestParams::new(name.to_string()).with_arguments(arguments.clone());
            // Asking for progress lets a slow tool keep its call from looking idle: each
            // notice is read from the call's stream, which restarts the read timeout.
            let mut meta = rmcp::model::RequestMetaObject::with_progress_token(
                rmcp::model::ProgressToken(rmcp::model::NumberOrString::Number(
                    self.inner.progress.fetch_add(1, Ordering::Relaxed),
                )),
            );
            if let Some(tp) = traceparent {
                meta.set_traceparent(tp);
            }
            params.meta = Some(meta);
            let answer = session.client.call_tool(params).await;
            if !crate::mcp::tasks::needs_task(&answer) {
                return answer;
            }
        }
        // The server wants a task (SPEC §15): the call stays in progress while it runs.
        let r = crate::mcp::tasks::call(
            session.client.peer(),
            name,
            arguments,
            remaining,
            traceparent,
        )
        .await;
        if r.is_ok() && !tasked {
            slot.tasked
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(name.to_string());
        }
        r
    }
}

/// The call's arguments: `arguments_json` as a JSON object (empty means `{}`); anything else is
/// the `-32602` error the model gets back.
fn arguments(name: &str, arguments_json: &str) -> Result<Map<String, Value>, McpCallError> {
    if arguments_json.trim().is_empty() {
        return Ok(Map::new());
    }
    match serde_json::from_str::<Value>(arguments_json) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(McpCallError::McpProtocolError {
            code: -32602,
            message: format!("Invalid arguments for tool '{name}': expected a JSON object."),
        }),
        Err(e) => Err(McpCallError::McpProtocolError {
            code: -32602,
            message: format!("Invalid arguments for tool '{name}': not valid JSON ({e})."),
        }),
    }
}

/// The server's answer as a [`CallOutcome`]: its content blocks as MCP JSON, an `isError`
/// answer as the tool's execution error.
fn answer(span: &tracing::Span, r: CallToolResult) -> CallOutcome {
    let content: Vec<Value> = r
        .content
        .iter()
        .filter_map(|c| serde_json::to_value(c).ok())
        .collect();
    crate::otel::content(span, "gen_ai.tool.call.result", || {
        Value::Array(content.clone()).to_string()
    });
    if r.is_error == Some(true) {
        crate::otel::failed(span, "tool_error");
        Err(McpCallError::McpToolExecutionError {
            content: Value::Array(content),
        })
    } else {
        Ok(ToolResult {
            content,
            structured_content: r.structured_content.filter(|v| !v.is_null()),
        })
    }
}
