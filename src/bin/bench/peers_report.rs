//! The `peers` scenario's report: per workload, how busy the machine was, the relay against the
//! floor and each peer against the relay (CPU per run and per event, added latency), then the
//! issue-34 targets with PASS / FAIL / N/A.

use std::time::Duration;

use crate::env::Env;
use crate::gateways::Peer;
use crate::measure::Row;
use crate::options::Plan;
use crate::peers::{FLOOR, RELAY, WORKLOADS};
use crate::report::{Target, fmt_opt, print_table, print_target_lines};

/// The measured row (not N/A) of `side` in `scenario`.
fn find<'a>(rows: &'a [Row], scenario: &str, side: &str) -> Option<&'a Row> {
    rows.iter()
        .find(|r| r.scenario == scenario && r.side == side && r.na.is_none())
}

/// `a / b` of a measure both rows have.
fn ratio(a: &Row, b: &Row, f: Measure) -> Option<f64> {
    f(a).zip(f(b)).map(|(x, y)| x / y)
}

/// `p50 / p99` added latency in µs.
fn lat(r: &Row) -> String {
    match (r.lat_q(0.5), r.lat_q(0.99)) {
        (Some(a), Some(b)) => format!("{a} / {b} µs"),
        _ => "–".into(),
    }
}

/// A measure of a row (CPU per run, CPU per 1,000 events).
type Measure = fn(&Row) -> Option<f64>;

/// Prints the table, the ratios and the targets; true when none failed.
pub fn report(rows: &[Row], plan: &Plan, env: &Env, took: Duration) -> bool {
    print_table(rows, plan, took);
    let targets = ratios(rows);
    println!();
    println!(
        "Targets (issue 34){}:",
        if plan.smoke {
            " — smoke mode: reported, not enforced"
        } else {
            ""
        }
    );
    let pass = print_target_lines(&targets);
    println!("Child logs: {}", env.logs.display());
    pass
}

/// Prints each workload's ratios; returns its targets.
fn ratios(rows: &[Row]) -> Vec<Target> {
    println!();
    println!(
        "Peers, measured in the same windows (clients split evenly; CPU of each gateway's whole process tree):"
    );
    let mut targets = Vec::new();
    for w in &WORKLOADS {
        let s = w.scenario;
        let (Some(relay), Some(floor)) = (find(rows, s, RELAY), find(rows, s, FLOOR)) else {
            println!("- {s}: not measured");
            continue;
        };
        let most = |f: Measure| {
            rows.iter()
                .filter(|r| r.scenario == s)
                .filter_map(f)
                .reduce(f64::max)
                .map(|b| b * 100.0)
        };
        println!(
            "- {s}: machine at most {}% busy over the windows, the benchmark's own processes at most {}%",
            fmt_opt(most(|r| r.machine_busy), 0),
            fmt_opt(most(|r| r.bench_busy), 0)
        );
        if most(|r| r.machine_busy).is_some_and(|b| b > 70.0) {
            println!(
                "  (the machine was above 70% busy: these ratios measure the scheduler as much as the code)"
            );
        }
        println!(
            "  relay / floor: CPU per run {}x, per event {}x; added latency relay {}, floor {}",
            fmt_opt(ratio(relay, floor, Row::cpu_ms_per_run), 2),
            fmt_opt(ratio(relay, floor, Row::cpu_ms_per_1k), 2),
            lat(relay),
            lat(floor)
        );
        let mut cheaper: Option<(f64, &str)> = None;
        let mut unjudged = Vec::new();
        for p in Peer::ALL {
            let Some(r) = find(rows, s, p.name()) else {
                let why = rows
                    .iter()
                    .find(|r| r.scenario == s && r.side == p.name())
                    .and_then(|r| r.na.clone())
                    .unwrap_or_else(|| "not measured".into());
                println!("  {}: {why}", p.name());
                unjudged.push(format!("{} {why}", p.name()));
                continue;
            };
            let per_run = ratio(r, relay, Row::cpu_ms_per_run);
            println!(
                "  {} / relay: CPU per run {}x, per event {}x; added latency {}{}",
                p.name(),
                fmt_opt(per_run, 2),
                fmt_opt(ratio(r, relay, Row::cpu_ms_per_1k), 2),
                lat(r),
                if r.errors > 0 {
                    format!(
                        "; {} errors, first: {}",
                        r.errors,
                        r.first_error.as_deref().unwrap_or("?")
                    )
                } else {
                    String::new()
                }
            );
            match per_run {
                Some(x) if r.errors == 0 && r.runs > 0 => {
                    if cheaper.is_none_or(|(c, _)| x < c) {
                        cheaper = Some((x, p.name()));
                    }
                }
                _ => unjudged.push(format!("{} not judged ({} errors)", p.name(), r.errors)),
            }
        }
        targets.push(floor_target(w.scenario, relay, floor));
        targets.push(peer_target(s, cheaper, &unjudged));
    }
    targets
}

/// The relay against the floor in the same windows: CPU per event for plain (<= 1.3x) and stored
/// (<= 1.4x) runs; CPU per run for MCP runs (<= 2x the floor carrying the same text deltas).
fn floor_target(scenario: &str, relay: &Row, floor: &Row) -> Target {
    let (what, limit, f): (&str, f64, Measure) = match scenario {
        "peers plain" => (
            "relay CPU per event <= 1.3x the floor (store: false)",
            1.3,
            Row::cpu_ms_per_1k,
        ),
        "peers stored" => (
            "relay CPU per event <= 1.4x the floor (stored, SQLite)",
            1.4,
            Row::cpu_ms_per_1k,
        ),
        _ => (
            "relay CPU per MCP run (list, 1 call, text) <= 2x the floor's per run carrying the same text deltas",
            2.0,
            Row::cpu_ms_per_run,
        ),
    };
    let v = ratio(relay, floor, f);
    Target {
        what: what.into(),
        ok: v.map(|v| v <= limit),
        got: format!("{}x", fmt_opt(v, 2)),
        info: false,
    }
}

/// The relay at least 1.5x cheaper per run than the cheaper peer measured without errors.
fn peer_target(scenario: &str, cheaper: Option<(f64, &str)>, unjudged: &[String]) -> Target {
    let what = format!("{scenario}: relay >= 1.5x cheaper (CPU per run) than the cheaper peer");
    let note = if unjudged.is_empty() {
        String::new()
    } else {
        format!(" ({})", unjudged.join("; "))
    };
    match cheaper {
        Some((x, name)) => Target {
            what,
            ok: Some(x >= 1.5),
            got: format!("{name} spends {x:.2}x the relay's{note}"),
            info: false,
        },
        None => Target {
            what,
            ok: None,
            got: format!("no peer measured{note}"),
            info: false,
        },
    }
}
