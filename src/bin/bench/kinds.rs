//! The `upstream-kinds` scenario (issue 37): what a native upstream kind costs the relay. The
//! relay with `--upstream-api anthropic` (the model server's Anthropic Messages stream) beside
//! the relay with the default Chat Completions upstream, in the same windows, half the clients
//! each, the two started in alternating order every rep (`compare::side_by_side`). Both streams
//! carry the same stamped text deltas, so the clients read the same Responses events from both
//! relays and the added latency is measured through either framing. Workloads: plain
//! `store: false` runs and MCP runs (one `tool_use` block, then the text).

use crate::compare::{Contender, RepRatios, Workload, side_by_side};
use crate::env::{Env, Store};
use crate::measure::Row;
use crate::options::Plan;
use crate::report::{Target, fmt_opt};

pub const CHAT: &str = "relay, chat upstream";
pub const ANTHROPIC: &str = "relay, anthropic upstream";

/// Anthropic's CPU per event at most this many times Chat Completions' (issue 37, point 7).
pub const BOUND: f64 = 1.2;

const WORKLOADS: [Workload; 2] = [
    Workload {
        scenario: "upstream-kinds plain",
        store: false,
        mcp: false,
        on: Store::Sqlite,
    },
    Workload {
        scenario: "upstream-kinds mcp",
        store: false,
        mcp: true,
        on: Store::Sqlite,
    },
];

/// Runs both workloads `plan.reps` times on both relays; returns each rep's CPU-per-event ratio
/// (anthropic / chat) per workload.
pub async fn scenario(env: &Env, plan: &Plan, rows: &mut Vec<Row>) -> Result<RepRatios, String> {
    let bin = env.bin_dir.join("responses-relay");
    let chat = Contender {
        bin: &bin,
        flags: &[],
        name: CHAT,
    };
    let flags = ["--upstream-api".to_string(), "anthropic".to_string()];
    let anthropic = Contender {
        bin: &bin,
        flags: &flags,
        name: ANTHROPIC,
    };
    side_by_side(env, plan, &WORKLOADS, chat, anthropic, rows).await
}

/// One target per workload: the anthropic relay's CPU per event over the chat relay's, from the
/// merged rows, with each rep's ratio.
pub fn targets(rows: &[Row], ratios: &RepRatios) -> Vec<Target> {
    ratios
        .iter()
        .filter_map(|(scenario, per_rep)| {
            let find = |side: &str| {
                rows.iter()
                    .find(|r| r.scenario == *scenario && r.side == side)
            };
            let (chat, anthropic) = (find(CHAT)?, find(ANTHROPIC)?);
            let (c, a) = (chat.cpu_ms_per_1k(), anthropic.cpu_ms_per_1k());
            let ratio = a.zip(c).map(|(a, c)| a / c);
            let reps: Vec<String> = per_rep.iter().map(|r| fmt_opt(*r, 3)).collect();
            Some(Target {
                what: format!(
                    "{scenario}: relay CPU per event, anthropic upstream <= {BOUND}x chat upstream, \
                     measured side by side (issue 37)"
                ),
                ok: ratio.map(|r| r <= BOUND),
                got: format!(
                    "{}x ({} against {} µs per event; each rep: {})",
                    fmt_opt(ratio, 3),
                    fmt_opt(a, 1),
                    fmt_opt(c, 1),
                    reps.join(", ")
                ),
                info: false,
            })
        })
        .collect()
}
