//! Shared code of the fuzz targets: decodes fuzz inputs into model turns, drives them through the
//! transcoder and the emitter the way the agent loop does, and checks that the run's log is a
//! well-ordered Responses event stream whatever the model sent.
//!
//! Input encodings (the seeds under `fuzz/seeds/` use them):
//! * `chat_transcode` / `responses_transcode`: UTF-8 text, one upstream `data:` payload (a JSON
//!   chunk or event) per line; an empty line ends a model turn and starts the next. A turn whose
//!   payloads end without a finish reason (chat) or terminal event (Responses) is cut, as the
//!   HTTP adapters report it.
//! * `model_events`: a compact binary list of model events, see [`decode_ops`] and [`encode_ops`].

use std::sync::Arc;

use responses_relay::api::id::IdSource;
use responses_relay::api::response::{InputTokensDetails, OutputTokensDetails, ResponseError};
use responses_relay::api::{Event, ItemStatus, OutputItem, Response, Sequenced, Usage};
use responses_relay::eventlog::emitter::{Clock, Emitter, Ending, Immediate};
use responses_relay::api::fold::Fold;
use responses_relay::eventlog::log::RunLog;
use responses_relay::run::mcp_call::McpCallStarted;
use responses_relay::run::transcode::{McpTarget, ToolMap, Transcoder};
use responses_relay::upstream::chat::ChunkParser;
use responses_relay::upstream::responses::EventParser;
use responses_relay::upstream::{FinishReason, ModelEvent, UpstreamError};
use serde_json::json;

/// Model-facing tool names the fuzzed runs know, besides client functions (any other name).
pub const MCP_TOOL: &str = "docs__search";
pub const APPROVAL_TOOL: &str = "docs__delete";
pub const SEARCH_TOOL: &str = "tool_search";
/// Names the structured target picks from (index 0..4), the last being a client function.
pub const NAMES: [&str; 4] = [MCP_TOOL, APPROVAL_TOOL, SEARCH_TOOL, "get_weather"];

/// One model turn: the events the upstream stream produced, and the error that stopped it.
#[derive(Debug, Default, Clone)]
pub struct Turn {
    pub events: Vec<ModelEvent>,
    pub error: Option<UpstreamError>,
}

/// The tool map of every fuzzed run: one MCP tool, one needing approval, the tool search.
pub fn tool_map() -> ToolMap {
    let mut m = ToolMap::new();
    let target = |tool: &str, needs_approval: bool, search: bool| McpTarget {
        server_label: "docs".into(),
        tool: tool.into(),
        needs_approval,
        search,
        web_search: false,
    };
    m.insert(MCP_TOOL.into(), target("search", false, false));
    m.insert(APPROVAL_TOOL.into(), target("delete", true, false));
    m.insert(SEARCH_TOOL.into(), target("tool_search", false, true));
    m
}

/// Splits text input into turns of payload lines (an empty line ends a turn).
pub fn turns_of_lines(data: &[u8]) -> Vec<Vec<&str>> {
    let text = match std::str::from_utf8(data) {
        Ok(t) => t,
        // The HTTP adapters only ever hand the parsers UTF-8 strings.
        Err(e) => std::str::from_utf8(&data[..e.valid_up_to()]).unwrap_or_default(),
    };
    let mut turns = vec![Vec::new()];
    for line in text.split('\n') {
        let line = line.strip_suffix('\r').unwrap_or(line);
        if line.is_empty() {
            if !turns.last().is_some_and(Vec::is_empty) {
                turns.push(Vec::new());
            }
        } else {
            turns.last_mut().expect("at least one turn").push(line);
        }
    }
    if turns.len() > 1 && turns.last().is_some_and(Vec::is_empty) {
        turns.pop();
    }
    turns
}

/// Chat chunk payloads of one turn through a fresh `ChunkParser`, as `upstream::chat::events`
/// reads a stream: the first error stops the turn; no finish reason at the end is a cut stream.
pub fn chat_turn(lines: &[&str]) -> Turn {
    let mut parser = ChunkParser::new();
    let mut turn = Turn::default();
    for line in lines {
        if line.trim() == "[DONE]" {
            return turn;
        }
        if let Err(e) = parser.parse(line, &mut turn.events) {
            turn.error = Some(e);
            return turn;
        }
    }
    if !parser.finished() {
        turn.error = Some(UpstreamError::Cut("no finish reason".into()));
    }
    turn
}

/// Responses event payloads of one turn through a fresh `EventParser`, as
/// `upstream::responses::events` reads a stream: stops at the terminal event or the first error.
pub fn responses_turn(lines: &[&str]) -> Turn {
    let mut parser = EventParser::new();
    let mut turn = Turn::default();
    for line in lines {
        if line.trim() == "[DONE]" {
            break;
        }
        if let Err(e) = parser.parse(line, &mut turn.events) {
            turn.error = Some(e);
            return turn;
        }
        if parser.finished() {
            return turn;
        }
    }
    if !parser.finished() {
        turn.error = Some(UpstreamError::Cut("no terminal event".into()));
    }
    turn
}

/// The Response a run starts with.
pub fn created_response() -> Response {
    Response::in_progress("resp_fuzz".into(), "fuzz".into(), 0)
}

/// Closes MCP calls the run will not execute, as the agent loop does (`failed`).
fn fail_calls(em: &mut Emitter, calls: &[McpCallStarted]) {
    for call in calls {
        let mut item = call.item.clone();
        item.status = ItemStatus::Failed;
        item.error = Some(responses_relay::api::response::McpCallError::McpToolExecutionError {
            content: json!([{"type": "text", "text": "not run"}]),
        });
        em.emit(Event::McpCallFailed { item_id: item.id.clone(), output_index: call.output_index });
        em.emit(Event::OutputItemDone { output_index: call.output_index, item: OutputItem::McpCall(item) });
    }
}

/// Finishes MCP calls as a successful tool run would.
fn complete_calls(em: &mut Emitter, calls: &[McpCallStarted]) {
    for call in calls {
        let mut item = call.item.clone();
        item.status = ItemStatus::Completed;
        item.output = Some("ok".into());
        em.emit(Event::McpCallCompleted { item_id: item.id.clone(), output_index: call.output_index });
        em.emit(Event::OutputItemDone { output_index: call.output_index, item: OutputItem::McpCall(item) });
    }
}

/// Runs `turns` through transcoders and one emitter with the agent loop's control flow (a turn
/// that ran MCP calls or a tool search is followed by the next turn; anything else ends the run),
/// finishes the run, and checks its log. Panics on any broken invariant.
pub fn drive(turns: impl IntoIterator<Item = Turn>) {
    let log = Arc::new(RunLog::new());
    let mut em = Emitter::new(log.clone(), Arc::new(Immediate), IdSource::sequential(), Clock::Fixed(0));
    em.emit(Event::Created { response: Box::new(created_response()) });
    em.emit(Event::InProgress { response: Box::new(em.snapshot()) });
    let tools = tool_map();
    let mut usage = Usage::default();
    let mut ending = Ending::Completed;
    for turn in turns {
        let mut tc = Transcoder::new();
        for ev in turn.events {
            tc.on(ev, &mut em, &tools);
        }
        if turn.error.is_some() {
            tc.on(ModelEvent::Finish(FinishReason::Length), &mut em, &tools);
        }
        let outcome = tc.finish(&mut em);
        if let Some(u) = &outcome.usage {
            usage.add(u);
        }
        if let Some(e) = turn.error {
            fail_calls(&mut em, &outcome.mcp_calls);
            ending = Ending::Failed(ResponseError { code: "server_error".into(), message: e.to_string() });
            break;
        }
        match outcome.finish {
            Some(FinishReason::Length) => {
                fail_calls(&mut em, &outcome.mcp_calls);
                ending = Ending::Incomplete("max_output_tokens".into());
                break;
            }
            Some(FinishReason::ContentFilter) => {
                fail_calls(&mut em, &outcome.mcp_calls);
                ending = Ending::Incomplete("content_filter".into());
                break;
            }
            _ => {}
        }
        complete_calls(&mut em, &outcome.mcp_calls);
        let acted = !outcome.mcp_calls.is_empty() || !outcome.searches.is_empty();
        if !outcome.approvals.is_empty() || !outcome.function_calls.is_empty() || !acted {
            break;
        }
    }
    let finished = em.finish(ending, Some(usage));
    check_log(&log, &finished);
}

/// The stream invariants: the log is finished; sequence numbers are 0..n in the log and in every
/// event's JSON; every entry deserializes and re-folds without an ordering error; exactly one
/// terminal event, and it is last; the re-folded Response equals the one the emitter finished.
pub fn check_log(log: &RunLog, finished: &Response) {
    assert!(log.is_finished(), "the log is not finished");
    let entries = log.entries_from(0);
    let mut fold = Fold::new();
    let mut terminals = 0;
    for (i, entry) in entries.iter().enumerate() {
        let json = entry.json();
        assert_eq!(entry.seq, i as u64, "log entry {i} has seq {}", entry.seq);
        let s: Sequenced = serde_json::from_slice(&json)
            .unwrap_or_else(|e| panic!("entry {i} is not an event ({e}): {}", String::from_utf8_lossy(&json)));
        assert_eq!(s.sequence_number, i as u64, "entry {i} has sequence_number {}", s.sequence_number);
        assert_eq!(entry.kind(), s.event.kind(), "entry {i}'s event line");
        if s.event.is_terminal() {
            terminals += 1;
            assert_eq!(i + 1, entries.len(), "terminal event {} at {i} is not last of {}", s.event.kind(), entries.len());
        }
        fold.apply(&s.event).unwrap_or_else(|e| panic!("re-folding entry {i}: {e}"));
    }
    assert_eq!(terminals, 1, "{terminals} terminal events");
    assert!(fold.is_terminal(), "the log does not end with a terminal event");
    let refolded = fold.into_response().expect("response.created was folded");
    assert!(
        refolded.output.iter().all(|item| item_status(item) != Some(ItemStatus::InProgress)),
        "an item is still in progress in the terminal Response"
    );
    assert_eq!(&refolded, finished, "the re-folded Response differs from the emitted one");
}

fn item_status(item: &OutputItem) -> Option<ItemStatus> {
    match item {
        OutputItem::Message(m) => Some(m.status),
        OutputItem::Reasoning(r) => Some(r.status),
        OutputItem::FunctionCall(f) => Some(f.status),
        OutputItem::McpCall(c) => Some(c.status),
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------------
// The structured encoding of model events (target `model_events`)

/// Reads the structured encoding: a list of ops, each a tag byte then its operands. Strings are a
/// length byte then that many bytes (invalid UTF-8 replaced). Tags (low 3 bits of the byte):
/// 0 text, 1 refusal, 2 reasoning, 3 tool call (index byte, flags byte: bit 0 an id, bits 1..3
/// the name: 0 none, 1..=4 [`NAMES`], 5..=7 a string operand; then the arguments string),
/// 4 usage (three u64 operands, 8 bytes LE each, any value: input, output, total; bit 3
/// of the tag: no total), 5 finish (reason byte: stop, length, tool_calls, content_filter), 6 end of the turn,
/// 7 an upstream error that ends the turn. Input that runs out ends the last op early.
pub fn decode_ops(data: &[u8]) -> Vec<Turn> {
    let mut r = Reader { data, at: 0 };
    let mut turns = vec![Turn::default()];
    while let Some(tag) = r.byte() {
        let turn = turns.last_mut().expect("a turn");
        match tag & 7 {
            0 => turn.events.push(ModelEvent::Text(r.string())),
            1 => turn.events.push(ModelEvent::Refusal(r.string())),
            2 => turn.events.push(ModelEvent::Reasoning(r.string())),
            3 => {
                let index = u32::from(r.byte().unwrap_or(0));
                let flags = r.byte().unwrap_or(0);
                let id = (flags & 1 == 1).then(|| format!("call_{index}"));
                let name = match (flags >> 1) & 7 {
                    0 => None,
                    n @ 1..=4 => Some(NAMES[usize::from(n) - 1].to_string()),
                    _ => Some(r.string()),
                };
                let arguments = r.string();
                turn.events.push(ModelEvent::ToolCall { index, id, name, arguments });
            }
            4 => {
                // Any counts, absurd ones included: summing them must saturate, not overflow
                // (the overflow this target found is fixed; its input is a seed).
                let input_tokens = r.u64();
                let output_tokens = r.u64();
                let total = r.u64();
                let total_tokens = if tag & 8 == 8 { input_tokens.saturating_add(output_tokens) } else { total };
                turn.events.push(ModelEvent::Usage(Usage {
                    input_tokens,
                    input_tokens_details: InputTokensDetails::default(),
                    output_tokens,
                    output_tokens_details: OutputTokensDetails::default(),
                    total_tokens,
                }));
            }
            5 => {
                let reason = match r.byte().unwrap_or(0) % 4 {
                    0 => FinishReason::Stop,
                    1 => FinishReason::Length,
                    2 => FinishReason::ToolCalls,
                    _ => FinishReason::ContentFilter,
                };
                turn.events.push(ModelEvent::Finish(reason));
            }
            6 => turns.push(Turn::default()),
            _ => {
                turn.error = Some(UpstreamError::Protocol("fuzzed upstream error".into()));
                turns.push(Turn::default());
            }
        }
    }
    turns
}

/// Writes model events in the encoding [`decode_ops`] reads (for seeds). Strings longer than 255
/// bytes are split into several events of the same kind; names not in [`NAMES`] are written out.
pub fn encode_ops(turns: &[Turn]) -> Vec<u8> {
    let mut out = Vec::new();
    for (t, turn) in turns.iter().enumerate() {
        if t > 0 && turns[t - 1].error.is_none() {
            out.push(6);
        }
        for ev in &turn.events {
            match ev {
                ModelEvent::Text(s) => push_split(&mut out, 0, s),
                ModelEvent::Refusal(s) => push_split(&mut out, 1, s),
                ModelEvent::Reasoning(s) => push_split(&mut out, 2, s),
                ModelEvent::ToolCall { index, id, name, arguments } => {
                    let pieces = chunks(arguments);
                    for (k, piece) in pieces.iter().enumerate() {
                        out.push(3);
                        out.push((*index).min(255) as u8);
                        let mut flags = u8::from(id.is_some() && k == 0);
                        let name = name.as_deref().filter(|_| k == 0);
                        let known = name.and_then(|n| NAMES.iter().position(|x| *x == n));
                        flags |= match (name, known) {
                            (None, _) => 0,
                            (Some(_), Some(i)) => (i as u8 + 1) << 1,
                            (Some(_), None) => 5 << 1,
                        };
                        out.push(flags);
                        if let (Some(n), None) = (name, known) {
                            push_string(&mut out, n);
                        }
                        push_string(&mut out, piece);
                    }
                }
                ModelEvent::Usage(u) => {
                    out.push(4);
                    for n in [u.input_tokens, u.output_tokens, u.total_tokens] {
                        out.extend_from_slice(&n.to_le_bytes());
                    }
                }
                ModelEvent::Finish(reason) => {
                    out.push(5);
                    out.push(match reason {
                        FinishReason::Stop => 0,
                        FinishReason::Length => 1,
                        FinishReason::ToolCalls => 2,
                        FinishReason::ContentFilter => 3,
                    });
                }
                // Not encoded: the transcoder passes over it.
                ModelEvent::ResponseId(_) | ModelEvent::MessagePhase(_) => {}
                // Not in this encoding ([`decode_ops`] never makes them: only the Anthropic and
                // Gemini adapters do).
                ModelEvent::ReasoningSummary(_) | ModelEvent::SignedReasoning(_) => {}
            }
        }
        if turn.error.is_some() {
            out.push(7);
        }
    }
    out
}

fn push_split(out: &mut Vec<u8>, tag: u8, s: &str) {
    for piece in chunks(s) {
        out.push(tag);
        push_string(out, piece);
    }
}

/// `s` in pieces of at most 255 bytes, split at char boundaries (one empty piece for "").
fn chunks(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = s;
    loop {
        let mut end = rest.len().min(255);
        while !rest.is_char_boundary(end) {
            end -= 1;
        }
        out.push(&rest[..end]);
        rest = &rest[end..];
        if rest.is_empty() {
            return out;
        }
    }
}

fn push_string(out: &mut Vec<u8>, s: &str) {
    debug_assert!(s.len() <= 255);
    out.push(s.len() as u8);
    out.extend_from_slice(s.as_bytes());
}

struct Reader<'a> {
    data: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn byte(&mut self) -> Option<u8> {
        let b = self.data.get(self.at).copied()?;
        self.at += 1;
        Some(b)
    }

    fn string(&mut self) -> String {
        let len = usize::from(self.byte().unwrap_or(0));
        let end = (self.at + len).min(self.data.len());
        let s = String::from_utf8_lossy(&self.data[self.at..end]).into_owned();
        self.at = end;
        s
    }

    fn u64(&mut self) -> u64 {
        let mut buf = [0u8; 8];
        let end = (self.at + 8).min(self.data.len());
        buf[..end - self.at].copy_from_slice(&self.data[self.at..end]);
        self.at = end;
        u64::from_le_bytes(buf)
    }
}
