//! Running a transcript through parser → transcoder → emitter, and comparing what the relay
//! made of it with what the transcript says.

use super::*;

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use responses_relay::api::fold::Fold;
use responses_relay::api::id::IdSource;
use responses_relay::api::response::{ContentPart, ResponseError};
use responses_relay::api::{Event, OutputItem, Response, ResponseStatus, Sequenced, Usage};
use responses_relay::eventlog::emitter::{Clock, Emitter, Ending, Immediate};
use responses_relay::eventlog::log::RunLog;
use responses_relay::run::transcode::{ToolMap, Transcoder};
use responses_relay::upstream::chat::ChunkParser;
use responses_relay::upstream::responses::EventParser;
use responses_relay::upstream::{FinishReason, ModelEvent, UpstreamError};

pub(super) fn created_response() -> Response {
    Response::in_progress("resp_recorded".into(), "recorded".into(), 0)
}

/// The model events a parser makes of a transcript, and the error that stopped it (if any).
pub(super) fn parse_all(t: &Transcript) -> (Vec<ModelEvent>, Option<UpstreamError>) {
    let mut events = Vec::new();
    let mut chat = ChunkParser::new();
    let mut resp = EventParser::new();
    let mut anthropic = responses_relay::upstream::anthropic::EventParser::new();
    let mut gemini = responses_relay::upstream::gemini::ChunkParser::new();
    for p in &t.payloads {
        let r = match t.api {
            Api::Chat => chat.parse(p, &mut events),
            Api::Responses => resp.parse(p, &mut events),
            Api::Anthropic => anthropic.parse(p, &mut events),
            Api::Gemini => gemini.parse(p, &mut events),
        };
        if let Err(e) = r {
            return (events, Some(e));
        }
    }
    // A Gemini stream ends when its body does: the usage and finish come then.
    if t.api == Api::Gemini
        && let Err(e) = gemini.end(&mut events)
    {
        return (events, Some(e));
    }
    (events, None)
}

pub(super) struct Outcome {
    pub(super) response: Response,
    pub(super) finish: Option<FinishReason>,
    pub(super) error: Option<UpstreamError>,
    /// The log as the relay wrote it: each event's JSON line, in order.
    pub(super) log: Vec<String>,
}

/// Drives the events through a transcoder and emitter as the agent loop does, then checks the
/// log: sequence numbers 0..n, every JSON line deserializes and re-folds into the same Response.
pub(super) fn run(t: &Transcript) -> Outcome {
    let (events, error) = parse_all(t);
    let log = Arc::new(RunLog::new());
    let mut em = Emitter::new(
        log.clone(),
        Arc::new(Immediate),
        IdSource::sequential(),
        Clock::Fixed(0),
    );
    em.emit(Event::Created {
        response: Box::new(created_response()),
    });
    em.emit(Event::InProgress {
        response: Box::new(em.snapshot()),
    });
    let mut tc = Transcoder::new();
    let tools = ToolMap::new();
    for ev in events {
        tc.on(ev, &mut em, &tools);
    }
    if error.is_some() {
        tc.on(ModelEvent::Finish(FinishReason::Length), &mut em, &tools);
    }
    let outcome = tc.finish(&mut em);
    let ending = match (&error, outcome.finish) {
        (Some(e), _) => Ending::Failed(ResponseError {
            code: "server_error".into(),
            message: e.to_string(),
        }),
        (None, Some(FinishReason::Length)) => Ending::Incomplete("max_output_tokens".into()),
        (None, Some(FinishReason::ContentFilter)) => Ending::Incomplete("content_filter".into()),
        (None, _) => Ending::Completed,
    };
    let finished = em.finish(ending, outcome.usage.clone());

    let entries = log.entries_from(0);
    assert!(log.is_finished(), "{}: the log is not finished", t.name);
    let mut fold = Fold::new();
    for (i, entry) in entries.iter().enumerate() {
        assert_eq!(
            entry.seq, i as u64,
            "{}: log entry {i} has seq {}",
            t.name, entry.seq
        );
        let s: Sequenced = serde_json::from_slice(&entry.json()).unwrap_or_else(|e| {
            panic!(
                "{}: entry {i} is not an event ({e}): {}",
                t.name,
                String::from_utf8_lossy(&entry.json())
            )
        });
        assert_eq!(
            s.sequence_number, i as u64,
            "{}: entry {i} has sequence_number {}",
            t.name, s.sequence_number
        );
        assert_eq!(
            entry.kind(),
            s.event.kind(),
            "{}: entry {i}'s event line",
            t.name
        );
        fold.apply(&s.event)
            .unwrap_or_else(|e| panic!("{}: re-folding entry {i}: {e}", t.name));
    }
    assert!(
        fold.is_terminal(),
        "{}: the log does not end with a terminal event",
        t.name
    );
    let refolded = fold.into_response().expect("created");
    assert_eq!(
        refolded, finished,
        "{}: the re-folded Response differs from the emitted one",
        t.name
    );
    Outcome {
        response: finished,
        finish: outcome.finish,
        error,
        log: entries
            .iter()
            .map(|e| String::from_utf8(e.json().to_vec()).expect("UTF-8 event"))
            .collect(),
    }
}

pub(super) fn refusal_of(r: &Response) -> String {
    texts_of(r, false)
}

/// The refusal parts of `r`'s messages, or (`reasoning`) the reasoning text of its reasoning
/// items (their summaries' and their content's), joined.
fn texts_of(r: &Response, reasoning: bool) -> String {
    let mut s = String::new();
    for item in &r.output {
        let parts = match (item, reasoning) {
            (OutputItem::Message(m), false) => &m.content,
            (OutputItem::Reasoning(x), true) => {
                x.summary.iter().for_each(|p| s.push_str(&p.text));
                &x.content
            }
            _ => continue,
        };
        for p in parts {
            match (p, reasoning) {
                (ContentPart::Refusal { refusal }, false) => s.push_str(refusal),
                (ContentPart::ReasoningText { text }, true) => s.push_str(text),
                _ => {}
            }
        }
    }
    s
}

pub(super) fn reasoning_of(r: &Response) -> String {
    texts_of(r, true)
}

pub(super) fn calls_of(r: &Response) -> Vec<(String, String)> {
    r.output
        .iter()
        .filter_map(|i| match i {
            OutputItem::FunctionCall(f) => Some((f.name.clone(), f.arguments.clone())),
            _ => None,
        })
        .collect()
}

/// What the relay made of the transcript, in the same shape as [`Expected`].
pub(super) fn actual(t: &Transcript, o: &Outcome, expected: &Expected) -> Expected {
    let r = &o.response;
    let finish = match t.api {
        Api::Chat => expected
            .finish
            .as_ref()
            .and(o.finish)
            .map(|f| format!("{f:?}")),
        Api::Responses | Api::Anthropic | Api::Gemini => expected
            .finish
            .as_ref()
            .and(Some(format!("response.{}", status_word(r.status)))),
    };
    Expected {
        text: r.output_text(),
        refusal: refusal_of(r),
        reasoning: reasoning_of(r),
        calls: calls_of(r),
        usage: if expected.usage.is_some() {
            r.usage.clone()
        } else {
            None
        },
        finish,
        error: o.error.as_ref().map(|e| match e {
            UpstreamError::Status { message, .. } => message.clone(),
            other => other.to_string(),
        }),
    }
}

pub(super) fn status_word(s: ResponseStatus) -> &'static str {
    match s {
        ResponseStatus::Completed => "completed",
        ResponseStatus::Incomplete => "incomplete",
        ResponseStatus::Failed => "failed",
        _ => "other",
    }
}

/// The expected values with the chat finish reason in parser terms.
pub(super) fn normalized(t: &Transcript, mut e: Expected) -> Expected {
    if t.api == Api::Chat {
        e.finish = e.finish.map(|f| format!("{:?}", FinishReason::parse(&f)));
    }
    e
}

/// Runs `check` on every transcript, collecting failures (panics included) so one report names
/// every transcript that breaks.
pub(super) fn check_all(ts: &[Transcript], check: impl Fn(&Transcript)) {
    let mut failures = Vec::new();
    for t in ts {
        if let Err(p) = std::panic::catch_unwind(AssertUnwindSafe(|| check(t))) {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            failures.push(format!("{}: {msg}", t.name));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} transcripts failed:\n{}",
        failures.len(),
        ts.len(),
        failures.join("\n\n")
    );
}

/// The set exercises every kind of output, so the comparisons cannot pass vacuously.
pub(super) fn assert_covers(ts: &[Transcript], expected: fn(&Transcript) -> Expected) {
    let all: Vec<Expected> = ts.iter().map(expected).collect();
    assert!(
        all.iter().any(|e| !e.text.is_empty()),
        "no transcript with text"
    );
    assert!(
        all.iter().any(|e| !e.refusal.is_empty()),
        "no transcript with a refusal"
    );
    assert!(
        all.iter().any(|e| !e.reasoning.is_empty()),
        "no transcript with reasoning"
    );
    assert!(
        all.iter().any(|e| e.calls.len() >= 2),
        "no transcript with parallel calls"
    );
    assert!(
        all.iter().any(|e| e.usage.is_some()),
        "no transcript with usage"
    );
}

pub(super) fn check_transcript(t: &Transcript) {
    let expected = match t.api {
        Api::Chat => chat_expected(t),
        Api::Responses => responses_expected(t),
        Api::Anthropic => anthropic_expected(t),
        Api::Gemini => gemini_expected(t),
    };
    let o = run(t);
    let got = actual(t, &o, &expected);
    let expected = normalized(t, expected);
    if expected.usage.is_none() {
        assert_eq!(
            o.response.usage,
            Some(Usage::default()),
            "{}: usage without a usage report",
            t.name
        );
    }
    assert_eq!(
        got, expected,
        "{}: what the relay made of the transcript differs from it",
        t.name
    );
}
