//! Debugging tools over recorded runs: `logs export` (a run's event log as JSON Lines, each line
//! `{"offset_ms": N, "event": {...}}` with the event exactly as streamed), `logs show` (a readable
//! timeline), and `replay` (serves a recorded run to any `POST /v1/responses`, streamed with its
//! original timing or faster, or as the final Response, and the run viewer for it at `/ui/`).

use std::convert::Infallible;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use hyper::{Method, Request, Response, StatusCode, header};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::api::fold::Fold;
use crate::api::{Event, OutputItem, Sequenced};
use crate::eventlog::log::LogEntry;
use crate::http::{ApiError, Body, BoxErr, ErrorKind, json_response, ui};

/// One line of an exported log.
#[derive(Serialize, Deserialize)]
pub struct Line<'a> {
    pub offset_ms: u64,
    #[serde(borrow)]
    pub event: &'a RawValue,
}

/// A recorded run: its events (JSON exactly as streamed) with their time offsets.
pub struct Recording {
    pub events: Vec<(u64, String)>,
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct LogError(pub String);

impl Recording {
    pub fn from_entries(entries: &[LogEntry]) -> Self {
        Recording {
            events: entries
                .iter()
                .map(|e| (e.offset_ms, String::from_utf8_lossy(&e.json()).into_owned()))
                .collect(),
        }
    }

    /// Reads an exported JSON Lines file, checking that its events form a valid log.
    pub fn read(path: &Path) -> Result<Self, LogError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| LogError(format!("{}: {e}", path.display())))?;
        let mut events = Vec::new();
        for (n, line) in text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
        {
            let l: Line<'_> = serde_json::from_str(line)
                .map_err(|e| LogError(format!("{}:{}: {e}", path.display(), n + 1)))?;
            events.push((l.offset_ms, l.event.get().to_string()));
        }
        let rec = Recording { events };
        rec.fold()
            .map_err(|e| LogError(format!("{}: {e}", path.display())))?;
        Ok(rec)
    }

    /// The JSON Lines export.
    pub fn write(&self, out: &mut impl Write) -> std::io::Result<()> {
        for (offset_ms, json) in &self.events {
            crate::eventlog::log::write_export_line(out, *offset_ms, json.as_bytes())?;
        }
        Ok(())
    }

    fn parsed(&self) -> Result<Vec<(u64, Sequenced)>, LogError> {
        self.events
            .iter()
            .map(|(o, j)| {
                serde_json::from_str::<Sequenced>(j)
                    .map(|s| (*o, s))
                    .map_err(|e| LogError(format!("event: {e}")))
            })
            .collect()
    }

    /// Folds the recording, checking every stream rule.
    pub fn fold(&self) -> Result<Fold, LogError> {
        let mut fold = Fold::new();
        for (_, s) in self.parsed()? {
            fold.apply(&s.event)
                .map_err(|e| LogError(format!("event {}: {e}", s.sequence_number)))?;
        }
        Ok(fold)
    }

    /// A readable timeline: lifecycle, items with their durations, tool calls with their
    /// results or errors, text.
    pub fn timeline(&self) -> Result<String, LogError> {
        let mut out = String::new();
        let mut started: Vec<u64> = Vec::new();
        for (offset, s) in self.parsed()? {
            let at = format!("{:>8.3}s", offset as f64 / 1000.0);
            match &s.event {
                Event::Created { response } => out.push_str(&format!(
                    "{at}  response.created {} (model {})\n",
                    response.id, response.model
                )),
                Event::OutputItemAdded { output_index, .. } => {
                    if started.len() <= *output_index {
                        started.resize(output_index + 1, offset);
                    }
                    started[*output_index] = offset;
                }
                Event::OutputItemDone { output_index, item } => {
                    let took = offset
                        .saturating_sub(started.get(*output_index).copied().unwrap_or(offset));
                    out.push_str(&format!(
                        "{at}  [{output_index}] {} ({took} ms)\n",
                        describe(item)
                    ));
                }
                e if e.is_terminal() => {
                    let r = e.response().expect("terminal events carry the response");
                    let status = serde_json::to_value(r.status).unwrap_or_default();
                    let mut line = format!(
                        "{at}  {} status={}",
                        e.kind(),
                        status.as_str().unwrap_or("")
                    );
                    if let Some(u) = &r.usage {
                        line.push_str(&format!(
                            " usage: in {} out {}",
                            u.input_tokens, u.output_tokens
                        ));
                    }
                    if let Some(err) = &r.error {
                        line.push_str(&format!(" error: {} ({})", err.message, err.code));
                    }
                    if let Some(d) = &r.incomplete_details {
                        line.push_str(&format!(" reason: {}", d.reason));
                    }
                    out.push_str(&line);
                    out.push('\n');
                }
                Event::SteerAccepted { steer } => {
                    out.push_str(&format!("{at}  response.steer.accepted {}\n", steer.id))
                }
                _ => {}
            }
        }
        Ok(out)
    }

    /// The Response the recorded run ended with.
    pub fn final_response(&self) -> Result<crate::api::Response, LogError> {
        let fold = self.fold()?;
        if !fold.is_terminal() {
            return Err(LogError("the recording has no terminal event".into()));
        }
        fold.into_response()
            .ok_or_else(|| LogError("empty recording".into()))
    }
}

impl Recording {
    /// The run viewer's JSON (`/ui/api/`, as the relay answers it) for this one recorded run:
    /// a listing of it, its summary, its log.
    fn viewer_api(&self, method: &Method, path: &str) -> Result<Response<Body>, ApiError> {
        let failed = |e: LogError| ApiError::new(ErrorKind::RecordingBroken, e.0);
        let response = self.final_response().map_err(failed)?;
        let offsets: Vec<(u64, String)> = self
            .parsed()
            .map_err(failed)?
            .into_iter()
            .map(|(o, s)| (o, s.event.kind().to_string()))
            .collect();
        let mut summary = ui::summary(&response, &offsets);
        // A recording keeps the events, not the run's input.
        summary["input_items"] = serde_json::Value::Null;
        summary["turns"] = serde_json::Value::Null;
        let rest = path.strip_prefix(ui::API_PREFIX).unwrap_or("");
        match (method, rest.split('/').collect::<Vec<_>>().as_slice()) {
            (&Method::GET, ["runs"]) => Ok(json_response(
                StatusCode::OK,
                serde_json::json!({"object": "list", "data": [summary], "has_more": false,
                    "last_id": response.id})
                .to_string(),
            )),
            (&Method::GET, ["runs", id]) if *id == response.id => {
                Ok(json_response(StatusCode::OK, summary.to_string()))
            }
            (&Method::GET, ["runs", id, "log"]) if *id == response.id => {
                let mut body = Vec::new();
                self.write(&mut body)
                    .map_err(|e| failed(LogError(e.to_string())))?;
                Ok(ui::jsonl(id, body))
            }
            (&Method::GET, ["runs", id] | ["runs", id, "log"]) => {
                Err(ApiError::response_not_found(id))
            }
            _ => Err(ApiError::not_found_route(method, path)),
        }
    }
}

fn clip(s: &str, n: usize) -> String {
    let one_line = s.replace('\n', " ");
    if one_line.chars().count() <= n {
        one_line
    } else {
        format!("{}…", one_line.chars().take(n).collect::<String>())
    }
}

fn describe(item: &OutputItem) -> String {
    match item {
        OutputItem::Message(m) => {
            let text: String = m
                .content
                .iter()
                .map(|p| p.clone().text_mut().clone())
                .collect();
            format!("message: {:?}", clip(&text, 120))
        }
        OutputItem::Reasoning(r) => {
            let text: String = r
                .content
                .iter()
                .map(|p| p.clone().text_mut().clone())
                .collect();
            format!("reasoning: {:?}", clip(&text, 80))
        }
        OutputItem::FunctionCall(f) => format!(
            "function_call {}({}) call_id={}",
            f.name,
            clip(&f.arguments, 80),
            f.call_id
        ),
        OutputItem::McpListTools(l) => match &l.error {
            Some(e) => format!("mcp_list_tools {}: FAILED {}", l.server_label, clip(e, 120)),
            None => format!("mcp_list_tools {}: {} tools", l.server_label, l.tools.len()),
        },
        OutputItem::McpCall(c) => {
            let result = match (&c.output, &c.error) {
                (_, Some(e)) => format!(
                    "FAILED {}",
                    clip(&serde_json::to_string(e).unwrap_or_default(), 120)
                ),
                (Some(o), None) => format!("→ {}", clip(o, 120)),
                (None, None) => String::new(),
            };
            format!(
                "mcp_call {}.{}({}) {result}",
                c.server_label,
                c.name,
                clip(&c.arguments, 80)
            )
        }
        OutputItem::McpApprovalRequest(a) => format!(
            "mcp_approval_request {}.{}({}) id={}",
            a.server_label,
            a.name,
            clip(&a.arguments, 80),
            a.id
        ),
        OutputItem::ToolSearchCall(t) => {
            format!("tool_search_call {}", clip(&t.arguments.to_string(), 120))
        }
        OutputItem::Compaction(c) => format!("compaction {} (sealed summary)", c.id),
        OutputItem::WebSearchCall(w) => {
            format!("web_search_call {}", clip(&w.action.to_string(), 100))
        }
        OutputItem::CustomToolCall(c) => format!(
            "custom_tool_call {}({}) call_id={}",
            c.name,
            clip(&c.input, 80),
            c.call_id
        ),
        OutputItem::LocalShellCall(c)
        | OutputItem::ShellCall(c)
        | OutputItem::ApplyPatchCall(c)
        | OutputItem::ComputerCall(c) => format!(
            "{} {} call_id={}",
            item.kind(),
            clip(
                &serde_json::Value::Object(c.fields.clone()).to_string(),
                100
            ),
            c.call_id
        ),
        OutputItem::ToolSearchOutput(t) => {
            let found: Vec<String> = t
                .tools
                .iter()
                .flat_map(|ns| {
                    let label = ns["name"].as_str().unwrap_or("").to_string();
                    ns["tools"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(move |f| format!("{label}.{}", f["name"].as_str().unwrap_or("")))
                })
                .collect();
            format!(
                "tool_search_output: {}",
                if found.is_empty() {
                    "nothing found".into()
                } else {
                    found.join(", ")
                }
            )
        }
    }
}

/// Serves `recording` to every `POST /v1/responses` until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    recording: Recording,
    speed: f64,
    shutdown: impl std::future::Future<Output = ()>,
) {
    use hyper::service::service_fn;
    use hyper_util::rt::{TokioExecutor, TokioIo};
    let rec = Arc::new(recording);
    let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let rec = rec.clone();
                let svc = service_fn(move |req| answer(rec.clone(), speed, req));
                let conn = builder.serve_connection(TokioIo::new(stream), svc).into_owned();
                tokio::spawn(async move { let _ = conn.await; });
            }
            _ = &mut shutdown => return,
        }
    }
}

async fn answer(
    rec: Arc<Recording>,
    speed: f64,
    req: Request<hyper::body::Incoming>,
) -> Result<Response<Body>, Infallible> {
    if req.method() == Method::GET && req.uri().path() == "/healthz" {
        return Ok(json_response(StatusCode::OK, r#"{"status":"ok"}"#));
    }
    if let Some(page) = ui::page(req.method(), req.uri().path()) {
        return Ok(page);
    }
    if ui::is_api(req.uri().path()) {
        return Ok(rec
            .viewer_api(req.method(), req.uri().path())
            .unwrap_or_else(ApiError::into_response));
    }
    if req.method() != Method::POST || req.uri().path().trim_end_matches('/') != "/v1/responses" {
        return Ok(ApiError::not_found_route(req.method(), req.uri().path()).into_response());
    }
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let stream = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v.get("stream")?.as_bool())
        .unwrap_or(false);
    if !stream {
        return Ok(match rec.final_response() {
            Ok(r) => json_response(StatusCode::OK, serde_json::to_vec(&r).expect("serializes")),
            Err(e) => ApiError::new(ErrorKind::RecordingBroken, e.0).into_response(),
        });
    }
    let frames = async_stream::stream! {
        let mut last = 0u64;
        for (offset, json) in rec.events.iter() {
            let wait = offset.saturating_sub(last);
            last = *offset;
            if wait > 0 && speed.is_finite() {
                tokio::time::sleep(Duration::from_secs_f64(wait as f64 / 1000.0 / speed)).await;
            }
            let kind = serde_json::from_str::<serde_json::Value>(json).ok().and_then(|v| v.get("type")?.as_str().map(str::to_string)).unwrap_or_default();
            yield Ok::<_, BoxErr>(Frame::data(LogEntry::frame_for(&kind, json.as_bytes())));
        }
        yield Ok(Frame::data(Bytes::from_static(b"data: [DONE]\n\n")));
    };
    Ok(Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(BodyExt::boxed_unsync(StreamBody::new(frames)))
        .expect("valid response"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::response::IncompleteDetails;
    use crate::api::steer::SteerRef;
    use crate::api::{Response, ResponseStatus};

    #[test]
    fn the_timeline_shows_when_a_steer_was_accepted_and_the_run_it_ended() {
        let r = Response::in_progress("resp_1".into(), "m".into(), 0);
        let mut ended = r.clone();
        ended.status = ResponseStatus::Incomplete;
        ended.incomplete_details = Some(IncompleteDetails {
            reason: "steered".into(),
        });
        let events = [
            Event::Created {
                response: Box::new(r),
            },
            Event::SteerAccepted {
                steer: SteerRef {
                    id: "steer_1".into(),
                    previous_response_id: "resp_1".into(),
                },
            },
            Event::Incomplete {
                response: Box::new(ended),
            },
        ];
        let recording = Recording {
            events: (events.iter().enumerate())
                .map(|(i, e)| {
                    let mut v = serde_json::to_value(e).unwrap();
                    v["sequence_number"] = i.into();
                    (i as u64 * 500, v.to_string())
                })
                .collect(),
        };
        let timeline = recording.timeline().unwrap();
        assert!(
            timeline.contains("   0.500s  response.steer.accepted steer_1\n"),
            "{timeline}"
        );
        assert!(timeline.contains("reason: steered"), "{timeline}");
    }
}
