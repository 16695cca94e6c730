//! The tool list: listing a server's tools (every `tools/list` page, within a timeout) and the
//! per-key cache of the last list.
//!
//! Invariants: a listing stores its result only if nothing made the cache forget since the
//! listing began ([`ToolCache`]); a tool listed twice is kept once; a repeated cursor or more than
//! `max_list_pages` pages fails the listing; a [`ListError`] carries no secret.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::model::PaginatedRequestParams;
use serde_json::Value;
use tracing::Instrument;

use super::{ListError, ListedTool, Pool, Session};
use crate::mcp::ServerSpec;
use crate::mcp::errors::{Failure, human, scrub, service_failure};

/// One key's last tool list. Invariant: a listing stores its result only if nothing made the
/// cache forget since the listing began (`generation` unchanged), so a list that was already
/// stale when it arrived is never served.
#[derive(Default)]
pub(super) struct ToolCache {
    generation: AtomicU64,
    listed: Mutex<Option<(Instant, Arc<[ListedTool]>)>>,
}

impl ToolCache {
    pub(super) fn fresh(&self, ttl: Duration) -> Option<Arc<[ListedTool]>> {
        let listed = self.listed.lock().unwrap_or_else(|e| e.into_inner());
        listed
            .as_ref()
            .filter(|(at, _)| at.elapsed() < ttl)
            .map(|(_, tools)| tools.clone())
    }

    pub(super) fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    pub(super) fn keep(&self, generation: u64, tools: &[ListedTool]) {
        let mut listed = self.listed.lock().unwrap_or_else(|e| e.into_inner());
        if self.generation.load(Ordering::SeqCst) == generation {
            *listed = Some((Instant::now(), tools.into()));
        }
    }

    pub(super) fn forget(&self) {
        let mut listed = self.listed.lock().unwrap_or_else(|e| e.into_inner());
        self.generation.fetch_add(1, Ordering::SeqCst);
        *listed = None;
    }
}

impl Pool {
    /// Lists the server's tools, following `tools/list` pagination, all within `timeout`, or
    /// gives the list kept from a listing under the same key less than `tools_ttl` ago.
    /// Tools listed twice are kept once. `allowed_tools` is not applied here.
    pub async fn list_tools(
        &self,
        spec: &ServerSpec,
        timeout: Duration,
    ) -> Result<Vec<ListedTool>, ListError> {
        let ttl = self.inner.config.tools_ttl;
        let slot = self.slot(spec);
        if !ttl.is_zero()
            && let Some(tools) = slot.tools.fresh(ttl)
        {
            return Ok(tools.to_vec());
        }
        let span = crate::otel::mcp_span("tools/list", &spec.label, None);
        let traceparent = crate::otel::traceparent(&span);
        let work = async {
            let session = self.session(&slot, spec, timeout).await?;
            // Read once the session is settled (making one forgets the old list).
            let generation = slot.tools.generation();
            let result = self.list_pages(&session, traceparent.as_deref()).await;
            session.traced(&span);
            if let Err(f) = &result {
                session.note(f);
            }
            self.touch(&slot);
            result.map(|tools| (generation, tools))
        };
        let failure = match tokio::time::timeout(timeout, work.instrument(span.clone())).await {
            Ok(Ok((generation, tools))) => {
                if !ttl.is_zero() {
                    slot.tools.keep(generation, &tools);
                }
                return Ok(tools);
            }
            Ok(Err(f)) => f,
            Err(_) => Failure::Timeout { after: timeout },
        };
        crate::otel::failed(&span, &failure.kind());
        Err(list_error(spec, failure))
    }

    /// Every page of `tools/list`, each request carrying `traceparent` in `params._meta`.
    async fn list_pages(
        &self,
        session: &Session,
        traceparent: Option<&str>,
    ) -> Result<Vec<ListedTool>, Failure> {
        let mut tools = Vec::new();
        let mut names = HashSet::new();
        let mut cursors = HashSet::new();
        let mut cursor: Option<String> = None;
        for _ in 0..self.inner.config.max_list_pages {
            let meta = traceparent.map(with_traceparent);
            let params = (cursor.is_some() || meta.is_some()).then(|| {
                let mut p = PaginatedRequestParams::default().with_cursor(cursor.take());
                p.meta = meta;
                p
            });
            let page = session
                .client
                .list_tools(params)
                .await
                .map_err(|e| service_failure(&e))?;
            for t in page.tools {
                if !names.insert(t.name.to_string()) {
                    continue;
                }
                tools.push(ListedTool {
                    name: t.name.to_string(),
                    description: t.description.map(|d| d.to_string()),
                    input_schema: std::sync::Arc::new(Value::Object((*t.input_schema).clone())),
                    read_only: t
                        .annotations
                        .as_ref()
                        .and_then(|a| a.read_only_hint)
                        .unwrap_or(false),
                });
            }
            match page.next_cursor.filter(|c| !c.is_empty()) {
                None => return Ok(tools),
                Some(c) => {
                    if !cursors.insert(c.clone()) {
                        return Err(Failure::Protocol {
                            code: -32603,
                            message: "the server repeated a tools/list cursor".into(),
                        });
                    }
                    cursor = Some(c);
                }
            }
        }
        Err(Failure::Protocol {
            code: -32603,
            message: format!(
                "the tool list has more than {} pages",
                self.inner.config.max_list_pages
            ),
        })
    }
}

fn list_error(spec: &ServerSpec, f: Failure) -> ListError {
    let head = format!(
        "Error retrieving tool list from MCP server: '{}'.",
        spec.label
    );
    match f {
        Failure::Http { status, .. } if status != 0 => {
            let reason = reqwest::StatusCode::from_u16(status)
                .ok()
                .and_then(|s| s.canonical_reason())
                .unwrap_or("Unknown");
            ListError {
                message: format!("{head} Http status code: {status} ({reason})"),
                status: Some(status),
                timed_out: false,
            }
        }
        Failure::Http { message, .. } => ListError {
            message: format!("{head} {}", capitalize(&scrub(spec, &message))),
            status: None,
            timed_out: false,
        },
        Failure::Protocol { code, message } => ListError {
            message: format!("{head} MCP error {code}: {}", scrub(spec, &message)),
            status: None,
            timed_out: false,
        },
        Failure::Timeout { after } => ListError {
            message: format!("{head} Timed out after {}.", human(after)),
            status: None,
            timed_out: true,
        },
    }
}

fn capitalize(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().collect::<String>() + c.as_str(),
        None => String::new(),
    }
}

/// `_meta` carrying the W3C `traceparent` of the request's span (MCP's convention for trace
/// context; `mcp::http` copies it into the HTTP header too).
fn with_traceparent(traceparent: &str) -> rmcp::model::RequestMetaObject {
    let mut meta = rmcp::model::RequestMetaObject::new();
    meta.set_traceparent(traceparent);
    meta
}
