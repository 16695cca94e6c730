//! Folds a stream of events into the Response it describes, checking every ordering rule the
//! strictest SDK accumulator checks (PROTOCOL §5.2). The relay folds its own events with this to
//! build the terminal and non-streaming Response; tests fold recorded streams with it too.

use crate::api::response::{ContentPart, ResponseError};
use crate::api::{Event, OutputItem, Response};

/// An event that breaks the stream rules, with the reason.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("event {kind}: {reason}")]
pub struct FoldError {
    pub kind: &'static str,
    pub reason: String,
}

/// The accumulated Response. Starts empty, takes `response.created` first.
#[derive(Debug, Clone, Default)]
pub struct Fold {
    response: Option<Response>,
    open: Vec<bool>,
    terminal: bool,
}

impl Fold {
    pub fn new() -> Self {
        Self::default()
    }

    /// The Response so far (`None` before `response.created`).
    pub fn response(&self) -> Option<&Response> {
        self.response.as_ref()
    }

    pub fn into_response(self) -> Option<Response> {
        self.response
    }

    /// Whether the output item at `index` was added and not yet done.
    pub fn is_open(&self, index: usize) -> bool {
        self.open.get(index).copied().unwrap_or(false)
    }

    pub fn is_terminal(&self) -> bool {
        self.terminal
    }

    /// After a terminal event that says the run completed (or ended incomplete), turns the
    /// Response into a failed one with `error` and returns the `response.failed` event that
    /// stands for it. `None` when there is no such terminal (no terminal yet, or it already says
    /// failed or cancelled).
    pub fn fail_terminal(&mut self, error: ResponseError) -> Option<Event> {
        use crate::api::ResponseStatus;
        let response = self.response.as_mut().filter(|_| self.terminal)?;
        if !matches!(
            response.status,
            ResponseStatus::Completed | ResponseStatus::Incomplete
        ) {
            return None;
        }
        response.status = ResponseStatus::Failed;
        response.completed_at = None;
        response.incomplete_details = None;
        response.error = Some(error);
        Some(Event::Failed {
            response: Box::new(response.clone()),
        })
    }

    /// Applies one event, or says which rule it breaks (the snapshot is then unchanged).
    pub fn apply(&mut self, event: &Event) -> Result<(), FoldError> {
        let err = |reason: String| FoldError {
            kind: event.kind(),
            reason,
        };
        if self.terminal {
            return Err(err("event after the terminal event".into()));
        }
        if let Some(r) = event.response() {
            match (event, &self.response) {
                (Event::Created { .. }, Some(_)) => {
                    return Err(err("second response.created".into()));
                }
                (Event::Created { .. }, None) => {}
                (_, None) => return Err(err("first event must be response.created".into())),
                (_, Some(prev)) if prev.id != r.id => {
                    return Err(err(format!("response id changed to {}", r.id)));
                }
                _ => {}
            }
            if event.is_terminal() {
                if let Some(i) = self.open.iter().position(|o| *o) {
                    return Err(err(format!("output item {i} is still open")));
                }
                let prev = self.response.as_ref().map(|p| p.output.len()).unwrap_or(0);
                if r.output.len() != prev {
                    return Err(err(format!(
                        "terminal response has {} output items, stream had {prev}",
                        r.output.len()
                    )));
                }
                self.terminal = true;
            }
            self.response = Some(r.clone());
            return Ok(());
        }
        let Some(resp) = self.response.as_mut() else {
            return Err(err("first event must be response.created".into()));
        };
        match event {
            Event::OutputItemAdded { output_index, item } => {
                if *output_index != resp.output.len() {
                    return Err(err(format!(
                        "output_index {output_index}, expected {}",
                        resp.output.len()
                    )));
                }
                if item.id().is_empty() || resp.output.iter().any(|o| o.id() == item.id()) {
                    return Err(err(format!(
                        "item id '{}' is empty or not unique",
                        item.id()
                    )));
                }
                resp.output.push(item.clone());
                self.open.push(true);
                Ok(())
            }
            Event::OutputItemDone { output_index, item } => {
                let slot = open_item(resp, &self.open, *output_index).map_err(err)?;
                if slot.id() != item.id() || slot.kind() != item.kind() {
                    return Err(err(format!(
                        "done item {} '{}' differs from added {} '{}'",
                        item.kind(),
                        item.id(),
                        slot.kind(),
                        slot.id()
                    )));
                }
                *slot = item.clone();
                self.open[*output_index] = false;
                Ok(())
            }
            // Steering changes nothing in the Response until the run ends.
            Event::SteerAccepted { .. } => Ok(()),
            _ => {
                let Some((item_id, index)) = event.item_scope() else {
                    return Err(err("unexpected event".into()));
                };
                let slot = open_item(resp, &self.open, index).map_err(err)?;
                if slot.id() != item_id {
                    return Err(err(format!(
                        "expected item_id '{}', got '{item_id}'",
                        slot.id()
                    )));
                }
                apply_item_event(slot, event).map_err(err)
            }
        }
    }
}

fn open_item<'a>(
    resp: &'a mut Response,
    open: &[bool],
    index: usize,
) -> Result<&'a mut OutputItem, String> {
    if !open.get(index).copied().unwrap_or(false) {
        return Err(format!("output item {index} is not open"));
    }
    Ok(&mut resp.output[index])
}

fn expect_kind(item: &OutputItem, kinds: &[&str]) -> Result<(), String> {
    if kinds.contains(&item.kind()) {
        Ok(())
    } else {
        Err(format!(
            "targets a {} item, expected {}",
            item.kind(),
            kinds.join(" or ")
        ))
    }
}

/// Applies an event scoped to `item` (one whose [`Event::item_scope`] is the item's).
fn apply_item_event(item: &mut OutputItem, event: &Event) -> Result<(), String> {
    if apply_content_event(item, event)? || apply_summary_event(item, event)? {
        return Ok(());
    }
    apply_call_event(item, event)
}

/// A reasoning summary's event (its parts, in order, and their text): whether `event` is one.
fn apply_summary_event(item: &mut OutputItem, event: &Event) -> Result<bool, String> {
    let (index, new) = match event {
        Event::ReasoningSummaryPartAdded {
            summary_index,
            part,
            ..
        } => (*summary_index, Some(part)),
        Event::ReasoningSummaryPartDone { summary_index, .. }
        | Event::ReasoningSummaryTextDelta { summary_index, .. }
        | Event::ReasoningSummaryTextDone { summary_index, .. } => (*summary_index, None),
        _ => return Ok(false),
    };
    let OutputItem::Reasoning(r) = item else {
        return expect_kind(item, &["reasoning"]).map(|_| true);
    };
    if let Some(part) = new {
        if index != r.summary.len() {
            return Err(format!(
                "summary_index {index}, expected {}",
                r.summary.len()
            ));
        }
        r.summary.push(part.clone());
        return Ok(true);
    }
    let len = r.summary.len();
    let slot = r
        .summary
        .get_mut(index)
        .ok_or_else(|| format!("summary_index {index} out of range ({len} parts)"))?;
    match event {
        Event::ReasoningSummaryPartDone { part, .. } => *slot = part.clone(),
        Event::ReasoningSummaryTextDelta { delta, .. } => slot.text.push_str(delta),
        Event::ReasoningSummaryTextDone { text, .. } => slot.text = text.clone(),
        _ => unreachable!("matched above"),
    }
    Ok(true)
}

/// A content part's event (a message's or a reasoning item's parts and their text): whether
/// `event` is one.
fn apply_content_event(item: &mut OutputItem, event: &Event) -> Result<bool, String> {
    match event {
        Event::ContentPartAdded {
            content_index,
            part,
            ..
        } => {
            expect_kind(item, &["message", "reasoning"])?;
            let content = item.content_mut().expect("message or reasoning");
            if *content_index != content.len() {
                return Err(format!(
                    "content_index {content_index}, expected {}",
                    content.len()
                ));
            }
            content.push(part.clone());
            Ok(true)
        }
        Event::ContentPartDone {
            content_index,
            part,
            ..
        } => {
            expect_kind(item, &["message", "reasoning"])?;
            let slot = part_at(item, *content_index)?;
            *slot = part.clone();
            Ok(true)
        }
        Event::OutputTextDelta {
            content_index,
            delta,
            ..
        }
        | Event::RefusalDelta {
            content_index,
            delta,
            ..
        }
        | Event::ReasoningTextDelta {
            content_index,
            delta,
            ..
        } => {
            let (kind, part) = part_kind(event);
            expect_kind(item, &[kind])?;
            let slot = part_at(item, *content_index)?;
            check_part(slot, part)?;
            slot.text_mut().push_str(delta);
            Ok(true)
        }
        Event::OutputTextDone {
            content_index,
            text,
            ..
        }
        | Event::RefusalDone {
            content_index,
            refusal: text,
            ..
        }
        | Event::ReasoningTextDone {
            content_index,
            text,
            ..
        } => {
            let (kind, part) = part_kind(event);
            expect_kind(item, &[kind])?;
            let slot = part_at(item, *content_index)?;
            check_part(slot, part)?;
            *slot.text_mut() = text.clone();
            Ok(true)
        }
        _ => Ok(false),
    }
}

/// A call's event (its arguments or input, its progress), or a status-only item's.
fn apply_call_event(item: &mut OutputItem, event: &Event) -> Result<(), String> {
    match event {
        Event::FunctionCallArgumentsDelta { delta, .. } => match item {
            OutputItem::FunctionCall(f) => {
                f.arguments.push_str(delta);
                Ok(())
            }
            _ => expect_kind(item, &["function_call"]),
        },
        Event::FunctionCallArgumentsDone { arguments, .. } => match item {
            OutputItem::FunctionCall(f) => {
                f.arguments = arguments.clone();
                Ok(())
            }
            _ => expect_kind(item, &["function_call"]),
        },
        Event::CompactionCompacting { .. } => expect_kind(item, &["compaction"]),
        Event::WebSearchCallInProgress { .. }
        | Event::WebSearchCallSearching { .. }
        | Event::WebSearchCallCompleted { .. } => expect_kind(item, &["web_search_call"]),
        Event::CustomToolCallInputDelta { delta, .. } => match item {
            OutputItem::CustomToolCall(c) => {
                c.input.push_str(delta);
                Ok(())
            }
            _ => expect_kind(item, &["custom_tool_call"]),
        },
        Event::CustomToolCallInputDone { input, .. } => match item {
            OutputItem::CustomToolCall(c) => {
                c.input = input.clone();
                Ok(())
            }
            _ => expect_kind(item, &["custom_tool_call"]),
        },
        Event::McpCallArgumentsDelta { delta, .. } => match item {
            OutputItem::McpCall(c) => {
                c.arguments.push_str(delta);
                Ok(())
            }
            _ => expect_kind(item, &["mcp_call"]),
        },
        Event::McpCallArgumentsDone { arguments, .. } => match item {
            OutputItem::McpCall(c) => {
                c.arguments = arguments.clone();
                Ok(())
            }
            _ => expect_kind(item, &["mcp_call"]),
        },
        Event::McpCallInProgress { .. }
        | Event::McpCallCompleted { .. }
        | Event::McpCallFailed { .. } => expect_kind(item, &["mcp_call"]),
        Event::McpListToolsInProgress { .. }
        | Event::McpListToolsCompleted { .. }
        | Event::McpListToolsFailed { .. } => expect_kind(item, &["mcp_list_tools"]),
        _ => Err("unexpected event".into()),
    }
}

fn part_kind(event: &Event) -> (&'static str, &'static str) {
    match event {
        Event::OutputTextDelta { .. } | Event::OutputTextDone { .. } => ("message", "output_text"),
        Event::RefusalDelta { .. } | Event::RefusalDone { .. } => ("message", "refusal"),
        _ => ("reasoning", "reasoning_text"),
    }
}

fn part_at(item: &mut OutputItem, index: usize) -> Result<&mut ContentPart, String> {
    let content = item.content_mut().ok_or("item has no content")?;
    let len = content.len();
    content
        .get_mut(index)
        .ok_or_else(|| format!("content_index {index} out of range ({len} parts)"))
}

fn check_part(part: &ContentPart, expected: &str) -> Result<(), String> {
    let actual = match part {
        ContentPart::OutputText { .. } => "output_text",
        ContentPart::Refusal { .. } => "refusal",
        ContentPart::ReasoningText { .. } => "reasoning_text",
    };
    if actual == expected {
        Ok(())
    } else {
        Err(format!("targets a {actual} part, expected {expected}"))
    }
}
