//! The `peers` scenario (issue 34): the relay beside SMG and agentic-api (its peers, from the
//! benchmark's venv) and the pass-through floor, all in front of the same stamped Responses
//! upstream, measured in the same windows with the clients split evenly among them: plain
//! `store: false` runs, stored runs (the relay on SQLite, each peer on its own store) and MCP runs
//! (tools listed, one call, the text). Each workload is measured `--reps` times on fresh
//! processes started in rotating order; the rows merge the reps. A peer that is not installed, or
//! does not start, gets an N/A row saying why; a peer's failed runs are its row's errors.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::json;

use crate::env::{Env, Store, StoreErr, StoreUse};
use crate::gateways::{Peer, PeerProc};
use crate::load::{Expect, Kind, Req};
use crate::mcp::mcp_body;
use crate::measure::{Phase, Row, measure_loop, na_row, responses_body};
use crate::options::Plan;
use crate::procs::{self, Proc};

pub const FLOOR: &str = "floor (pass-through)";
pub const RELAY: &str = "relay";

/// One workload every gateway runs.
pub struct Workload {
    pub scenario: &'static str,
    pub store: bool,
    pub mcp: bool,
}

pub const WORKLOADS: [Workload; 3] = [
    Workload {
        scenario: "peers plain",
        store: false,
        mcp: false,
    },
    Workload {
        scenario: "peers stored",
        store: true,
        mcp: false,
    },
    Workload {
        scenario: "peers mcp",
        store: false,
        mcp: true,
    },
];

/// A gateway of the comparison.
#[derive(Clone)]
enum Gateway {
    Floor,
    Relay,
    Peer(Peer, PathBuf),
}

impl Gateway {
    fn name(&self) -> &'static str {
        match self {
            Gateway::Floor => FLOOR,
            Gateway::Relay => RELAY,
            Gateway::Peer(p, _) => p.name(),
        }
    }
}

/// Whether a row's side is a peer (its errors are its row's, not the benchmark's).
pub fn is_peer(side: &str) -> bool {
    Peer::ALL.iter().any(|p| p.name() == side)
}

/// The process a side runs in.
enum Running {
    Child(Proc),
    Peer(PeerProc),
}

/// One gateway started for one rep of a workload, with its store and request.
struct Side {
    name: &'static str,
    running: Running,
    store: StoreUse,
    store_label: String,
    req: Req,
    deltas: usize,
    mcp: bool,
}

impl Side {
    fn pid(&self) -> u32 {
        match &self.running {
            Running::Child(p) => p.pid(),
            Running::Peer(p) => p.pid(),
        }
    }

    fn origin(&self) -> String {
        match &self.running {
            Running::Child(p) => p.origin(),
            Running::Peer(p) => p.origin.clone(),
        }
    }
}

/// Starts `g` for workload `w` with a fresh SQLite file (the relay's store; agentic-api's
/// database; unused by the floor and SMG).
async fn start(env: &Env, plan: &Plan, w: &Workload, g: &Gateway) -> Result<Side, String> {
    let store = env.store(Store::Sqlite).map_err(StoreErr::into_msg)?;
    let db = store.sqlite_file.clone().unwrap_or_default();
    let running = match g {
        Gateway::Floor => Running::Child(env.floor()?),
        Gateway::Relay => Running::Child(
            env.relay_with(&store.url, &["--upstream-api".into(), "responses".into()])?,
        ),
        Gateway::Peer(p, program) => Running::Peer(
            crate::gateways::start(env, *p, program, &db)
                .await
                .inspect_err(|_| env.release(&store))?,
        ),
    };
    let floor = matches!(g, Gateway::Floor);
    let (body, deltas) = if w.mcp && !floor {
        (mcp_body(env, plan, false), plan.mcp_deltas)
    } else {
        let deltas = if w.mcp { plan.mcp_deltas } else { plan.deltas };
        let model = env.model(deltas, plan.delay_ms);
        (
            responses_body(&model, "hi", w.store && !floor, json!([])),
            deltas,
        )
    };
    let store_label = match g {
        Gateway::Floor => String::new(),
        _ if !w.store => "store:false".into(),
        Gateway::Relay => store.label.clone(),
        Gateway::Peer(p, _) => p.store_label().into(),
    };
    let mut side = Side {
        name: g.name(),
        running,
        store,
        store_label,
        req: Req {
            url: String::new(),
            body: Some(body),
        },
        deltas,
        mcp: w.mcp && !floor,
    };
    side.req.url = format!("{}/v1/responses", side.origin());
    Ok(side)
}

impl Side {
    async fn measure(&self, env: &Env, plan: &Plan, scenario: &str, clients: usize) -> Row {
        let req = self.req.clone();
        let mut row = measure_loop(
            env,
            plan,
            Phase {
                scenario,
                side: self.name,
                pid: self.pid(),
                kind: Kind::Relay,
                expect: Expect { mcp_call: self.mcp },
                clients,
                spread: plan.run_length(self.deltas),
                make: Arc::new(move || req.clone()),
                also: None,
            },
        )
        .await;
        row.store = self.store_label.clone();
        row
    }

    /// Stops the gateway (its whole process tree), then removes its store.
    fn end(self, env: &Env) {
        let Side { running, store, .. } = self;
        drop(running);
        env.release(&store);
    }
}

/// The share of the machine's cores the benchmark's whole process tree (the clients, the model
/// and MCP servers, every gateway) uses over the window `measure_loop` measures (it starts after
/// the same warmup and lasts as long).
async fn bench_busy(env: &Env, plan: &Plan, deltas: usize) -> Option<f64> {
    let me = std::process::id();
    tokio::time::sleep(plan.warmup + plan.run_length(deltas)).await;
    let (t0, c0) = (std::time::Instant::now(), procs::tree_cpu_ticks(me)?);
    tokio::time::sleep(plan.window).await;
    let c1 = procs::tree_cpu_ticks(me)?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    Some(c1.saturating_sub(c0) as f64 / env.ticks / t0.elapsed().as_secs_f64() / cores)
}

/// The gateways to measure: the floor, the relay, and each peer found in `venv`; an N/A row per
/// workload for each peer that is not.
fn gateways(venv: Option<&Path>, rows: &mut Vec<Row>) -> Vec<Gateway> {
    let mut out = vec![Gateway::Floor, Gateway::Relay];
    for p in Peer::ALL {
        match p.find(venv) {
            Ok(program) => out.push(Gateway::Peer(p, program)),
            Err(why) => {
                eprintln!("peers: {} {why}: not measured", p.name());
                for w in &WORKLOADS {
                    rows.push(na_row(w.scenario, p.name(), "", why.clone()));
                }
            }
        }
    }
    out
}

/// Runs every workload `plan.reps` times with every gateway in the same windows.
pub async fn scenario(
    env: &Env,
    plan: &Plan,
    venv: Option<&Path>,
    rows: &mut Vec<Row>,
    failures: &mut Vec<String>,
) {
    let all = gateways(venv, rows);
    for w in &WORKLOADS {
        let clients = if w.mcp {
            plan.peers_mcp_clients
        } else {
            plan.peers_clients
        };
        if let Err(e) = workload(env, plan, w, &all, clients, rows).await {
            failures.push(format!("{}: {e}", w.scenario));
        }
    }
}

/// One workload's reps: the gateways started in an order rotated each rep, then measured at
/// once, `clients / gateways` clients each. A peer that does not start gets an N/A row and is
/// left out of the later reps; the floor or the relay not starting ends the workload (an error).
async fn workload(
    env: &Env,
    plan: &Plan,
    w: &Workload,
    all: &[Gateway],
    clients: usize,
    rows: &mut Vec<Row>,
) -> Result<(), String> {
    let mut live: Vec<Gateway> = all.to_vec();
    let mut merged: Vec<Row> = Vec::new();
    for rep in 0..plan.reps {
        let per = clients.div_ceil(live.len()).max(1);
        eprintln!(
            "{} (rep {}/{}): {} gateways, {per} clients each",
            w.scenario,
            rep + 1,
            plan.reps,
            live.len()
        );
        let mut sides = Vec::new();
        let mut order = live.clone();
        order.rotate_left(rep % live.len());
        for g in &order {
            match start(env, plan, w, g).await {
                Ok(s) => sides.push(s),
                Err(e) if !matches!(g, Gateway::Peer(..)) => {
                    sides.into_iter().for_each(|s: Side| s.end(env));
                    return Err(format!("{}: {e}", g.name()));
                }
                Err(e) => {
                    eprintln!("  {}: {e}", g.name());
                    live.retain(|l| l.name() != g.name());
                    merged.retain(|r| r.side != g.name());
                    rows.push(na_row(
                        w.scenario,
                        g.name(),
                        "",
                        format!("did not start: {e}"),
                    ));
                }
            }
        }
        let deltas = if w.mcp { plan.mcp_deltas } else { plan.deltas };
        let (mut measured, bench) = tokio::join!(
            futures::future::join_all(sides.iter().map(|s| s.measure(env, plan, w.scenario, per)),),
            bench_busy(env, plan, deltas)
        );
        sides.into_iter().for_each(|s| s.end(env));
        let machine = measured.first().and_then(|r| r.machine_busy);
        eprintln!(
            "  machine busy {}% of all cores over the window, the benchmark's own processes {}%",
            crate::report::fmt_opt(machine.map(|b| b * 100.0), 0),
            crate::report::fmt_opt(bench.map(|b| b * 100.0), 0)
        );
        measured.iter_mut().for_each(|r| r.bench_busy = bench);
        for r in measured {
            match merged.iter_mut().find(|m| m.side == r.side) {
                Some(m) => m.merge(r),
                None => merged.push(r),
            }
        }
    }
    // The table lists the gateways in a fixed order: floor, relay, peers.
    merged.sort_by_key(|r| all.iter().position(|g| g.name() == r.side));
    rows.extend(merged);
    Ok(())
}
