//! Reading event streams: an SSE body checked for framing, the stream rules checked by folding
//! the events, golden event logs, and the event and item types of a run.

use responses_relay::api::Sequenced;
use responses_relay::api::fold::Fold;
use serde_json::Value;

use super::{client, manifest_dir};

/// A whole SSE body, checked for framing: each event `event: T\ndata: JSON\n\n` with T equal to
/// the JSON's `type`, no `id:` lines, `\n` endings, and `data: [DONE]` last.
#[derive(Debug)]
pub struct SseBody {
    pub events: Vec<Value>,
    /// Each event's `data:` line exactly as the relay wrote it.
    pub raw: Vec<String>,
    pub done: bool,
}

pub fn parse_sse(text: &str) -> SseBody {
    assert!(!text.contains('\r'), "CR in SSE body");
    let mut events = Vec::new();
    let mut raw = Vec::new();
    let mut done = false;
    for block in text.split("\n\n").filter(|b| !b.is_empty()) {
        if block.starts_with(':') {
            continue;
        }
        assert!(!done, "data after [DONE]: {block}");
        if block == "data: [DONE]" {
            done = true;
            continue;
        }
        let lines: Vec<&str> = block.split('\n').collect();
        assert_eq!(
            lines.len(),
            2,
            "event is not exactly an event line and one data line: {block:?}"
        );
        let name = lines[0]
            .strip_prefix("event: ")
            .unwrap_or_else(|| panic!("no event line: {block:?}"));
        let data = lines[1]
            .strip_prefix("data: ")
            .unwrap_or_else(|| panic!("no data line: {block:?}"));
        let v: Value = serde_json::from_str(data).unwrap();
        assert_eq!(v["type"], name, "event name differs from type");
        events.push(v);
        raw.push(data.to_string());
    }
    SseBody { events, raw, done }
}

/// POSTs a streaming request and reads the whole SSE body.
pub async fn stream(url: &str, body: &Value) -> SseBody {
    let r = client().post(url).json(body).send().await.unwrap();
    assert_eq!(
        r.status(),
        200,
        "stream request failed: {}",
        r.text().await.unwrap()
    );
    assert_eq!(r.headers()["content-type"], "text/event-stream");
    parse_sse(&r.text().await.unwrap())
}

/// Checks the stream rules (sequence from 0 by 1, fold accepts every event, exactly one
/// terminal event, last) and returns the folded Response as JSON.
pub fn check_events(events: &[Value]) -> Value {
    let mut fold = Fold::new();
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e["sequence_number"], i as u64, "sequence gap at {i}: {e}");
        let s: Sequenced = serde_json::from_value(e.clone())
            .unwrap_or_else(|err| panic!("event {i} does not parse ({err}): {e}"));
        fold.apply(&s.event)
            .unwrap_or_else(|err| panic!("event {i} breaks the rules: {err}"));
    }
    let terminal: Vec<_> = events
        .iter()
        .filter(|e| {
            matches!(
                e["type"].as_str(),
                Some("response.completed" | "response.incomplete" | "response.failed")
            )
        })
        .collect();
    assert_eq!(terminal.len(), 1, "expected exactly one terminal event");
    assert!(fold.is_terminal(), "the terminal event is not last");
    serde_json::to_value(fold.into_response().unwrap()).unwrap()
}

/// Compares an event log, byte for byte, with `fixtures/golden/NAME.jsonl` (one event's JSON per
/// line, as the relay wrote it). Set `UPDATE_GOLDEN=1` to rewrite the file.
pub fn golden(name: &str, body: &SseBody) {
    golden_at(name, body, &[]);
}

/// As [`golden`], with loopback addresses of test servers (random ports) written as names.
pub fn golden_at(name: &str, body: &SseBody, addresses: &[(&str, &str)]) {
    let path = manifest_dir()
        .join("fixtures/golden")
        .join(format!("{name}.jsonl"));
    let mut actual: String = body.raw.iter().map(|e| format!("{e}\n")).collect();
    for (addr, placeholder) in addresses {
        actual = actual.replace(addr, placeholder);
    }
    if std::env::var("UPDATE_GOLDEN").is_ok_and(|v| v == "1") {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|_| {
        panic!(
            "missing golden {} (run with UPDATE_GOLDEN=1)",
            path.display()
        )
    });
    if expected != actual {
        for (i, (a, b)) in expected.lines().zip(actual.lines()).enumerate() {
            assert_eq!(a, b, "golden {name} differs at line {}", i + 1);
        }
        assert_eq!(
            expected.lines().count(),
            actual.lines().count(),
            "golden {name}: different number of events"
        );
    }
}

/// The `type`s of a Response's output items.
pub fn output_types(r: &Value) -> Vec<String> {
    r["output"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["type"].as_str().unwrap().to_string())
        .collect()
}

/// The `type`s of a list of events.
pub fn kinds(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| e["type"].as_str().unwrap().to_string())
        .collect()
}

/// Whether any of `events` is of type `kind`.
pub fn has_kind(events: &[Value], kind: &str) -> bool {
    events.iter().any(|e| e["type"] == kind)
}

/// The text of a run's `response.output_text.delta` events, joined.
pub fn streamed_text(events: &[Value]) -> String {
    events
        .iter()
        .filter(|e| e["type"] == "response.output_text.delta")
        .map(|e| e["delta"].as_str().unwrap())
        .collect()
}

/// The status of the Response in a run's last event.
pub fn terminal_status(body: &SseBody) -> &Value {
    &body.events.last().unwrap()["response"]["status"]
}
