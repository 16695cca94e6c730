//! The `compare` scenario: this build's relay beside another revision's (`--compare-relay`,
//! built by `bash scripts/bench.sh --compare REV`), in the same windows, half the clients each,
//! so a change's cost is a ratio measured on one machine at one time rather than two numbers
//! from different days. Each workload (plain `store: false` runs, stored runs on SQLite and on
//! the benchmark's Redis, MCP runs) is measured `--reps` times, the two relays started in alternating order, every rep on
//! fresh relays and stores; the rows merge the reps and the ratios list each rep's too.
//! `side_by_side` is that loop for any two relays (`kinds` runs it on two upstream kinds).

use std::path::Path;
use std::sync::Arc;

use serde_json::json;

use crate::env::{Env, RedisState, Store, StoreErr};
use crate::load::{Expect, Kind, Req};
use crate::mcp::mcp_body;
use crate::measure::{Phase, Row, measure_loop, responses_body};
use crate::options::Plan;
use crate::report::fmt_opt;

/// The table's name for this build's relay.
pub const THIS: &str = "this build";

/// One workload both relays run.
#[derive(Clone, Copy)]
pub struct Workload {
    /// `compare plain`, `compare stored`, `compare mcp`.
    pub scenario: &'static str,
    pub store: bool,
    pub mcp: bool,
    /// Where stored runs are kept.
    pub on: Store,
}

const WORKLOADS: [Workload; 4] = [
    Workload {
        scenario: "compare plain",
        store: false,
        mcp: false,
        on: Store::Sqlite,
    },
    Workload {
        scenario: "compare stored",
        store: true,
        mcp: false,
        on: Store::Sqlite,
    },
    Workload {
        scenario: "compare stored redis",
        store: true,
        mcp: false,
        on: Store::Redis,
    },
    Workload {
        scenario: "compare mcp",
        store: false,
        mcp: true,
        on: Store::Sqlite,
    },
];

/// One of the two relays measured side by side: its executable, its extra flags, its name in
/// the table.
#[derive(Clone, Copy)]
pub struct Contender<'a> {
    pub bin: &'a Path,
    pub flags: &'a [String],
    pub name: &'a str,
}

/// Each rep's CPU-per-event ratio (b / a), per workload.
pub type RepRatios = Vec<(&'static str, Vec<Option<f64>>)>;

/// Runs every workload `plan.reps` times on both relays; pushes one merged row per workload and
/// relay, and returns each rep's CPU-per-event ratio (other / this) per workload.
pub async fn scenario(
    env: &Env,
    plan: &Plan,
    this: Option<&Path>,
    (other, other_flags): (&Path, &[String]),
    label: &str,
    rows: &mut Vec<Row>,
) -> Result<RepRatios, String> {
    let bin = this.map_or_else(|| env.bin_dir.join("responses-relay"), Path::to_path_buf);
    let this = Contender {
        bin: &bin,
        flags: &[],
        name: THIS,
    };
    let other = Contender {
        bin: other,
        flags: other_flags,
        name: label,
    };
    side_by_side(env, plan, &workloads(env), this, other, rows).await
}

/// The workloads this machine can run: the Redis one only with the benchmark's `redis-server`.
pub fn workloads(env: &Env) -> Vec<Workload> {
    WORKLOADS
        .into_iter()
        .filter(|w| w.on != Store::Redis || matches!(env.redis, RedisState::Up(_)))
        .collect()
}

/// Runs each workload `plan.reps` times on relays `a` and `b` in the same windows, half the
/// clients each, the two started in alternating order, every rep on fresh relays and SQLite
/// stores. Pushes one merged row per workload and relay (`a`'s first); returns each rep's
/// CPU-per-event ratio (b / a) per workload.
pub async fn side_by_side(
    env: &Env,
    plan: &Plan,
    workloads: &[Workload],
    a: Contender<'_>,
    b: Contender<'_>,
    rows: &mut Vec<Row>,
) -> Result<RepRatios, String> {
    let mut ratios = Vec::new();
    for w in workloads {
        eprintln!(
            "{}: {} beside {}, {} clients each, {} reps",
            w.scenario,
            a.name,
            b.name,
            plan.clients.div_ceil(2),
            plan.reps
        );
        let (mut rows_a, mut rows_b): (Option<Row>, Option<Row>) = (None, None);
        let mut per_rep = Vec::new();
        for rep in 0..plan.reps {
            let (sa, sb) = if rep % 2 == 0 {
                let sa = side(env, plan, w, a).await?;
                (sa, side(env, plan, w, b).await?)
            } else {
                let sb = side(env, plan, w, b).await?;
                (side(env, plan, w, a).await?, sb)
            };
            let (ra, rb) = tokio::join!(sa.measure(env, plan), sb.measure(env, plan));
            sa.end(env);
            sb.end(env);
            per_rep.push(
                rb.cpu_ms_per_1k()
                    .zip(ra.cpu_ms_per_1k())
                    .map(|(b, a)| b / a),
            );
            merge(&mut rows_a, ra);
            merge(&mut rows_b, rb);
        }
        rows.extend(rows_a);
        rows.extend(rows_b);
        ratios.push((w.scenario, per_rep));
    }
    Ok(ratios)
}

/// Adds `row` to the merged row of its side.
fn merge(into: &mut Option<Row>, row: Row) {
    match into {
        Some(r) => r.merge(row),
        None => *into = Some(row),
    }
}

/// One relay started for one rep of a workload, with its store and request.
struct Side {
    relay: crate::procs::Proc,
    store: crate::env::StoreUse,
    name: String,
    scenario: &'static str,
    mcp: bool,
    req: Req,
    deltas: usize,
}

async fn side(env: &Env, plan: &Plan, w: &Workload, c: Contender<'_>) -> Result<Side, String> {
    let store = env.store(w.on).map_err(StoreErr::into_msg)?;
    let relay = env.relay_from(c.bin, &store.url, c.flags)?;
    let (body, deltas) = if w.mcp {
        (mcp_body(env, plan, w.store), plan.mcp_deltas)
    } else {
        let model = env.model(plan.deltas, plan.delay_ms);
        (
            responses_body(&model, "hi", w.store, json!([])),
            plan.deltas,
        )
    };
    let req = Req {
        url: format!("{}/v1/responses", relay.origin()),
        body: Some(body),
    };
    Ok(Side {
        relay,
        store,
        name: c.name.to_string(),
        scenario: w.scenario,
        mcp: w.mcp,
        req,
        deltas,
    })
}

impl Side {
    async fn measure(&self, env: &Env, plan: &Plan) -> Row {
        let req = self.req.clone();
        let mut row = measure_loop(
            env,
            plan,
            Phase {
                scenario: self.scenario,
                side: &self.name,
                pid: self.relay.pid(),
                kind: Kind::Relay,
                expect: Expect { mcp_call: self.mcp },
                clients: plan.clients.div_ceil(2),
                spread: plan.run_length(self.deltas),
                make: Arc::new(move || req.clone()),
                also: None,
            },
        )
        .await;
        row.store = self.store.label.clone();
        row
    }

    /// Stops the relay, then removes its store.
    fn end(self, env: &Env) {
        let Side { relay, store, .. } = self;
        drop(relay);
        env.release(&store);
    }
}

/// Prints the other relay's CPU per event and per run as a ratio to this build's, per workload,
/// with each rep's ratio (below 1: the other revision is cheaper).
pub fn print_ratios(rows: &[Row], label: &str, ratios: &RepRatios) {
    println!();
    println!("{label} against {THIS}, measured side by side (CPU per event, other / this):");
    for (scenario, per_rep) in ratios {
        let find = |side: &str| {
            rows.iter()
                .find(|r| r.scenario == *scenario && r.side == side)
        };
        let (Some(this), Some(other)) = (find(THIS), find(label)) else {
            continue;
        };
        let ratio = |f: fn(&Row) -> Option<f64>| f(other).zip(f(this)).map(|(o, t)| o / t);
        let reps: Vec<String> = per_rep.iter().map(|r| fmt_opt(*r, 3)).collect();
        println!(
            "- {scenario}: {}x per event ({}x per run); each rep: {}",
            fmt_opt(ratio(Row::cpu_ms_per_1k), 3),
            fmt_opt(ratio(Row::cpu_ms_per_run), 3),
            reps.join(", ")
        );
    }
}
