//! Prompt caching on an Anthropic upstream: Anthropic caches a prompt's prefix only up to blocks
//! marked `cache_control`, at most four per request; OpenAI caches implicitly unless told
//! otherwise. So the Responses request's caching settings become breakpoints:
//!
//! - **implicit** (the default, as OpenAI's): the end of the conversation (its last block, which
//!   caches tools, system and every message before it: the next turn of an agent loop reads the
//!   whole prefix back), and the end of the turn before the last answer (so a turn that added
//!   more than Anthropic's 20-block lookback still finds the earlier write);
//! - **explicit** (`prompt_cache_options.mode = "explicit"`): only the parts the client marked
//!   with `prompt_cache_breakpoint`;
//! - a client's `prompt_cache_breakpoint`s are kept in either mode, the latest first;
//! - never more than four in all: the client's latest breakpoints, then the implicit ones.
//!
//! The lifetime: a `prompt_cache_options.ttl` (a minimum: `30m`, `12h`) or
//! `prompt_cache_retention: "24h"` asks for Anthropic's longest, `1h`; otherwise its default
//! (5 minutes). `prompt_cache_key` has no Anthropic counterpart (its cache is keyed by the prefix
//! itself) and changes nothing.

use serde_json::{Value, json};

use crate::upstream::ResponsesOptions;

/// The most `cache_control` blocks Anthropic takes in one request.
pub const MAX_BREAKPOINTS: usize = 4;

/// A block marked by the client (its `prompt_cache_breakpoint`), before the lifetime is known.
pub(super) fn marked() -> Value {
    json!({"type": "ephemeral"})
}

/// The `cache_control` a turn's breakpoints carry.
fn control(o: &ResponsesOptions) -> Value {
    let long = o
        .prompt_cache_options
        .as_ref()
        .is_some_and(|c| c.get("ttl").is_some_and(|t| !t.is_null()))
        || o.prompt_cache_retention.as_deref() == Some("24h");
    match long {
        true => json!({"type": "ephemeral", "ttl": "1h"}),
        false => marked(),
    }
}

/// Whether the client turned implicit breakpoints off.
fn explicit_only(o: &ResponsesOptions) -> bool {
    o.prompt_cache_options
        .as_ref()
        .and_then(|o| o.get("mode"))
        .and_then(Value::as_str)
        == Some("explicit")
}

/// Places a turn's breakpoints in `messages` (whose blocks the client marked carry [`marked`]),
/// as its caching options `o` say. The tools and the system text get none of their own: they
/// come first in Anthropic's prefix, so a breakpoint in the messages caches them too.
pub(super) fn place(o: &ResponsesOptions, messages: &mut [Value]) {
    let control = control(o);
    // Every block that may carry a breakpoint, in prompt order: (message, block). Anthropic
    // refuses one on a thinking block.
    let blocks: Vec<(usize, usize)> = messages
        .iter()
        .enumerate()
        .flat_map(|(m, msg)| {
            let content = msg["content"].as_array().map(Vec::as_slice).unwrap_or(&[]);
            content
                .iter()
                .enumerate()
                .filter(|(_, b)| {
                    !matches!(b["type"].as_str(), Some("thinking" | "redacted_thinking"))
                })
                .map(move |(b, _)| (m, b))
        })
        .collect();
    let is_marked = |messages: &[Value], (m, b): (usize, usize)| {
        messages[m]["content"][b].get("cache_control").is_some()
    };
    // The client's, latest first, at most four.
    let mut kept: Vec<(usize, usize)> = blocks
        .iter()
        .rev()
        .copied()
        .filter(|at| is_marked(messages, *at))
        .collect();
    for at in kept.split_off(kept.len().min(MAX_BREAKPOINTS)) {
        unmark(messages, at);
    }
    if !explicit_only(o) {
        for at in implicit(messages, &blocks) {
            if kept.len() < MAX_BREAKPOINTS && !kept.contains(&at) {
                kept.push(at);
            }
        }
    }
    for (m, b) in kept {
        messages[m]["content"][b]["cache_control"] = control.clone();
    }
}

/// The implicit breakpoints: the conversation's last block, then the last block before its last
/// assistant message.
fn implicit(messages: &[Value], blocks: &[(usize, usize)]) -> Vec<(usize, usize)> {
    let mut out: Vec<(usize, usize)> = blocks.last().copied().into_iter().collect();
    let last_answer = messages.iter().rposition(|m| m["role"] == "assistant");
    if let Some(a) = last_answer
        && let Some(before) = blocks.iter().rev().find(|(m, _)| *m < a)
    {
        out.push(*before);
    }
    out
}

fn unmark(messages: &mut [Value], (m, b): (usize, usize)) {
    if let Some(block) = messages[m]["content"][b].as_object_mut() {
        block.remove("cache_control");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(role: &str, blocks: &[&str]) -> Value {
        let content: Vec<Value> = blocks
            .iter()
            .map(|t| match t.strip_suffix('*') {
                Some(t) => json!({"type": "text", "text": t, "cache_control": marked()}),
                None => json!({"type": "text", "text": t}),
            })
            .collect();
        json!({"role": role, "content": content})
    }

    fn turn(options: Option<Value>, retention: Option<&str>) -> ResponsesOptions {
        ResponsesOptions {
            prompt_cache_options: options.and_then(|o| o.as_object().cloned()),
            prompt_cache_retention: retention.map(str::to_string),
            ..Default::default()
        }
    }

    fn marks(messages: &[Value]) -> Vec<(String, Option<String>)> {
        messages
            .iter()
            .flat_map(|m| m["content"].as_array().unwrap().iter())
            .filter_map(|b| {
                let c = b.get("cache_control")?;
                Some((
                    b["text"].as_str().unwrap().to_string(),
                    c.get("ttl").and_then(Value::as_str).map(str::to_string),
                ))
            })
            .collect()
    }

    #[test]
    fn implicitly_the_conversations_end_and_the_turn_before_the_last_answer_are_cached() {
        let mut m = vec![
            msg("user", &["u1"]),
            msg("assistant", &["a1"]),
            msg("user", &["r1", "r2"]),
            msg("assistant", &["a2"]),
            msg("user", &["r3"]),
        ];
        place(&turn(None, None), &mut m);
        assert_eq!(
            marks(&m),
            [("r2".to_string(), None), ("r3".to_string(), None)]
        );
    }

    #[test]
    fn explicit_mode_keeps_only_the_clients_latest_four_and_a_long_ttl_asks_for_an_hour() {
        let mut m = vec![
            msg("user", &["a*", "b*", "c*"]),
            msg("assistant", &["x"]),
            msg("user", &["d*", "e*", "f"]),
        ];
        let options = json!({"mode": "explicit", "ttl": "30m"});
        place(&turn(Some(options), None), &mut m);
        let hour = Some("1h".to_string());
        assert_eq!(
            marks(&m),
            [
                ("b".to_string(), hour.clone()),
                ("c".to_string(), hour.clone()),
                ("d".to_string(), hour.clone()),
                ("e".to_string(), hour)
            ]
        );
    }

    #[test]
    fn the_clients_breakpoints_come_before_the_implicit_ones_within_four() {
        let mut m = vec![
            msg("user", &["a*", "b*", "c*"]),
            msg("assistant", &["x"]),
            msg("user", &["y"]),
        ];
        place(&turn(None, Some("24h")), &mut m);
        let texts: Vec<String> = marks(&m).into_iter().map(|(t, _)| t).collect();
        assert_eq!(texts, ["a", "b", "c", "y"]);
    }
}
