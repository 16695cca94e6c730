//! Regenerates the transcoder fuzz seeds (`fuzz/seeds/{chat_transcode,responses_transcode,
//! model_events}/`) from the recorded upstream transcripts in `fixtures/upstream/`, and checks that
//! every seed passes its target's invariants. Run from the repository root:
//! `cargo run --manifest-path fuzz/Cargo.toml --example make_seeds`.

use std::path::{Path, PathBuf};

use relay_fuzz::{APPROVAL_TOOL, MCP_TOOL, SEARCH_TOOL, Turn};
use serde_json::Value;

/// Seeds larger than this keep their first payloads and their last ones, up to this size.
const MAX_SEED: usize = 12 * 1024;

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("fuzz/ has a parent").to_path_buf();
    let fixtures = root.join("fixtures/upstream");
    let seeds = root.join("fuzz/seeds");
    let mut files = Vec::new();
    walk(&fixtures, &mut files);
    files.sort();
    let mut chat: Vec<(String, Vec<String>)> = Vec::new();
    let mut resp: Vec<(String, Vec<String>)> = Vec::new();
    for path in &files {
        let rel = path.strip_prefix(&fixtures).unwrap().to_string_lossy().replace('/', "__");
        let name = rel.trim_end_matches(".sse").trim_end_matches(".chunks.txt").trim_end_matches(".llama-stack-recording.json");
        let payloads = payloads(path);
        let first: Value = serde_json::from_str(&payloads[0]).expect("first payload is JSON");
        let lines = fit(payloads.iter().map(|p| one_line(p)).collect());
        if first.get("type").is_some() {
            resp.push((name.to_string(), lines));
        } else {
            chat.push((name.to_string(), lines));
        }
    }

    // Multi-turn runs: a turn whose tool calls go to the MCP tool (or the tool search) is
    // followed by the next turn; one needing approval ends the run with a request item.
    let find = |set: &[(String, Vec<String>)], n: &str| set.iter().find(|(k, _)| k.contains(n)).expect(n).1.clone();
    let chat_call = find(&chat, "groq__chat-tool-call");
    let chat_parallel = find(&chat, "openai__chat-parallel-tool-calls-gpt-4o");
    let chat_text = find(&chat, "openai__chat-text-include-usage");
    let resp_calls = find(&resp, "openai-responses__function-calls-parallel");
    let resp_text = find(&resp, "openai-responses__text");
    let multi = |first: Vec<String>, second: &[String]| {
        let mut v = first;
        v.push(String::new());
        v.extend_from_slice(second);
        v
    };
    let extra_chat = vec![
        ("multi__mcp-call-then-text".to_string(), multi(renamed(&chat_call, MCP_TOOL), &chat_text)),
        ("multi__search-then-call".to_string(), multi(renamed(&chat_call, SEARCH_TOOL), &chat_parallel)),
        ("multi__approval".to_string(), renamed(&chat_parallel, APPROVAL_TOOL)),
    ];
    let extra_resp = vec![
        ("multi__mcp-calls-then-text".to_string(), multi(renamed(&resp_calls, MCP_TOOL), &resp_text)),
        ("multi__approval".to_string(), renamed(&resp_calls, APPROVAL_TOOL)),
    ];
    chat.extend(extra_chat);
    resp.extend(extra_resp);

    let write = |dir: &str, name: &str, bytes: &[u8]| {
        let d = seeds.join(dir);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join(name), bytes).unwrap();
    };
    for dir in ["chat_transcode", "responses_transcode", "model_events"] {
        let _ = std::fs::remove_dir_all(seeds.join(dir));
    }
    for (api, set) in [("chat", &chat), ("responses", &resp)] {
        for (name, lines) in set.iter() {
            let text = lines.join("\n") + "\n";
            let turns = relay_fuzz::turns_of_lines(text.as_bytes());
            let parsed: Vec<Turn> = turns
                .iter()
                .map(|t| if api == "chat" { relay_fuzz::chat_turn(t) } else { relay_fuzz::responses_turn(t) })
                .collect();
            relay_fuzz::drive(parsed.clone());
            let ops = relay_fuzz::encode_ops(&parsed);
            relay_fuzz::drive(relay_fuzz::decode_ops(&ops));
            write(&format!("{api}_transcode"), &format!("{name}.txt"), text.as_bytes());
            write("model_events", &format!("{api}__{name}.bin"), &ops);
            println!("{api} {name}: {} bytes, {} ops bytes, {} turns", text.len(), ops.len(), parsed.len());
        }
    }

    // The request seeds are hand-written: say which parse, so the valid ones stay valid.
    let mut requests: Vec<PathBuf> =
        std::fs::read_dir(seeds.join("parse_request")).unwrap().map(|e| e.unwrap().path()).collect();
    requests.sort();
    for path in requests {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        match responses_relay::api::request::parse_create(&std::fs::read(&path).unwrap()) {
            Ok(r) => println!("request {name}: ok, {} input items, {} tools", r.input.len(), r.tools.len()),
            Err(e) => println!("request {name}: rejected at '{}': {}", e.param, e.message),
        }
    }
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let p = entry.unwrap().path();
        if p.is_dir() {
            // Anthropic's Messages and Gemini's streams have no fuzz target of their own yet.
            if !p.ends_with("anthropic") && !p.ends_with("gemini") {
                walk(&p, out);
            }
        } else {
            out.push(p);
        }
    }
}

/// The `data:` payloads of a transcript file (SSE, one-per-line, or a llama-stack recording).
fn payloads(path: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(path).unwrap();
    let name = path.to_string_lossy();
    if name.ends_with(".sse") {
        let mut out = Vec::new();
        let mut data: Option<String> = None;
        for line in text.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l)).chain(std::iter::once("")) {
            if line.is_empty() {
                if let Some(d) = data.take()
                    && d.trim() != "[DONE]"
                {
                    out.push(d);
                }
            } else if let Some(v) = line.strip_prefix("data:") {
                let v = v.strip_prefix(' ').unwrap_or(v);
                match &mut data {
                    Some(d) => {
                        d.push('\n');
                        d.push_str(v);
                    }
                    None => data = Some(v.to_string()),
                }
            }
        }
        out
    } else if name.ends_with(".chunks.txt") {
        text.lines().map(str::trim).filter(|l| !l.is_empty()).map(str::to_string).collect()
    } else {
        let v: Value = serde_json::from_str(&text).unwrap();
        v.pointer("/response/body").and_then(Value::as_array).unwrap().iter().map(|c| c["__data__"].to_string()).collect()
    }
}

/// A payload on one line (a payload with raw newlines is re-serialized).
fn one_line(p: &str) -> String {
    if p.contains('\n') || p.contains('\r') {
        serde_json::from_str::<Value>(p).unwrap().to_string()
    } else {
        p.to_string()
    }
}

/// The lines of a seed no larger than [`MAX_SEED`]: the first ones and the last ones.
fn fit(lines: Vec<String>) -> Vec<String> {
    let size = |ls: &[String]| ls.iter().map(|l| l.len() + 1).sum::<usize>();
    if size(&lines) <= MAX_SEED {
        return lines;
    }
    let mut tail: Vec<String> = Vec::new();
    for l in lines.iter().rev().take(3) {
        if size(&tail) + l.len() + 1 <= MAX_SEED / 2 {
            tail.insert(0, l.clone());
        }
    }
    let mut head = Vec::new();
    for l in &lines[..lines.len() - tail.len()] {
        if size(&head) + size(&tail) + l.len() + 1 > MAX_SEED {
            break;
        }
        head.push(l.clone());
    }
    head.extend(tail);
    head
}

/// The lines with every tool call's name replaced by `name` (chat deltas and Responses items).
fn renamed(lines: &[String], name: &str) -> Vec<String> {
    lines
        .iter()
        .map(|l| {
            let Ok(mut v) = serde_json::from_str::<Value>(l) else { return l.clone() };
            for choice in v.get_mut("choices").and_then(Value::as_array_mut).into_iter().flatten() {
                for tc in choice.pointer_mut("/delta/tool_calls").and_then(Value::as_array_mut).into_iter().flatten() {
                    if let Some(n) = tc.pointer_mut("/function/name").filter(|n| n.as_str().is_some_and(|s| !s.is_empty())) {
                        *n = Value::String(name.into());
                    }
                }
            }
            if let Some(item) = v.get_mut("item").filter(|i| i["type"] == "function_call") {
                item["name"] = Value::String(name.into());
            }
            v.to_string()
        })
        .collect()
}
