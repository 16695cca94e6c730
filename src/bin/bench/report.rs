//! The report: the table (one row per phase), the redis-server and store-scale lines, the
//! ratios to the floor, and the targets with PASS / FAIL / N/A (info lines never judged).

use std::time::Duration;

use crate::env::{Env, store_label};
use crate::load;
use crate::measure::Row;
use crate::options::Plan;
use crate::scale;
use crate::stream::{SOCKET, SSE_BESIDE, TRACED, UNTRACED};

pub fn fmt_opt(v: Option<f64>, prec: usize) -> String {
    match v {
        Some(x) if x.is_finite() => format!("{x:.prec$}"),
        _ => "–".into(),
    }
}

/// One target line: `Some(ok)` judged, `None` N/A; `info` lines are printed but never judged.
pub struct Target {
    pub what: String,
    pub ok: Option<bool>,
    pub got: String,
    pub info: bool,
}

/// Prints the table, the ratios and the targets (`extra`: those a scenario judged itself);
/// true when every target passed.
pub fn report(rows: &[Row], plan: &Plan, env: &Env, took: Duration, extra: Vec<Target>) -> bool {
    print_table(rows, plan, took);
    print_store_lines(rows);
    let mut targets = floor_ratios(rows, env);
    targets.extend(latency_target(rows));
    targets.extend(other_targets(rows, env));
    targets.extend(extra);
    print_targets(&targets, plan, env)
}

/// A row that was measured (not N/A).
fn measured(r: &&Row) -> bool {
    r.na.is_none()
}

/// The first measured row of `scenario` whose side starts with `side_prefix`.
fn find<'a>(rows: &'a [Row], scenario: &str, side_prefix: &str) -> Option<&'a Row> {
    rows.iter()
        .filter(measured)
        .find(|r| r.scenario == scenario && r.side.starts_with(side_prefix))
}

/// The store whose rows a store target judges. The store targets name SQLite: they are judged
/// on the SQLite rows; other stores' rows are shown beside them. With one explicit non-SQLite
/// `--store`, that store's row is judged (noted).
fn judged_store(rows: &[Row], env: &Env, scenario: &str, side_prefix: &str) -> Option<String> {
    let stores: Vec<&str> = rows
        .iter()
        .filter(|r| r.scenario == scenario && r.side.starts_with(side_prefix))
        .map(|r| r.store.as_str())
        .collect();
    if stores.contains(&"sqlite") {
        Some("sqlite".into())
    } else if env.explicit_store.is_some() {
        stores.first().map(|s| s.to_string())
    } else {
        None
    }
}

/// The heading and one table line per row.
pub fn print_table(rows: &[Row], plan: &Plan, took: Duration) {
    println!();
    println!(
        "Benchmark ({}; {} cores; upstream delay {} ms; window {:.1} s per phase; took {:.0} s)",
        if plan.smoke { "SMOKE" } else { "full" },
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0),
        plan.delay_ms,
        plan.window.as_secs_f64(),
        took.as_secs_f64()
    );
    println!();
    println!(
        "| scenario | process | store | clients | runs/s | events/s | CPU ms / 1k events | CPU ms / run | added latency p50 / p99 (µs) | first event p50 / p99 (ms) | peak RSS (MiB) | RSS / open stream (KiB) | errors |"
    );
    println!("|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|");
    for r in rows {
        let store = if r.store.is_empty() { "–" } else { &r.store };
        if let Some(why) = &r.na {
            println!(
                "| {} | {} | {store} | {why} | – | – | – | – | – | – | – | – | – |",
                r.scenario, r.side
            );
            continue;
        }
        let lat = match (r.lat_q(0.5), r.lat_q(0.99)) {
            (Some(a), Some(b)) => format!("{a} / {b}"),
            _ => "–".into(),
        };
        let ttfe = match (load::quantile(&r.ttfe, 0.5), load::quantile(&r.ttfe, 0.99)) {
            (Some(a), Some(b)) => format!("{:.2} / {:.2}", a as f64 / 1000.0, b as f64 / 1000.0),
            _ => "–".into(),
        };
        let clients = match r.open_streams {
            Some(o) => format!("{o} open"),
            None => r.clients.to_string(),
        };
        println!(
            "| {} | {} | {store} | {} | {} | {:.0} | {} | {} | {} | {} | {} | {} | {} |",
            r.scenario,
            r.side,
            clients,
            if r.scenario == "idle" {
                "–".into()
            } else {
                format!("{:.1}", r.runs as f64 / r.secs.max(1e-9))
            },
            r.events_per_s(),
            fmt_opt(r.cpu_ms_per_1k(), 1),
            if r.scenario == "idle" {
                "–".into()
            } else {
                fmt_opt(r.cpu_ms_per_run(), 3)
            },
            lat,
            ttfe,
            fmt_opt(r.peak_rss_kib.map(|k| k as f64 / 1024.0), 1),
            fmt_opt(r.rss_per_stream_kib, 1),
            r.errors
        );
    }
}

/// The benchmark's redis-server CPU beside each relay that used it, and the store-scale lines.
fn print_store_lines(rows: &[Row]) {
    let redis_cpu: Vec<&Row> = rows
        .iter()
        .filter(measured)
        .filter(|r| r.store_cpu_s.is_some() && r.events > 0)
        .collect();
    if !redis_cpu.is_empty() {
        println!();
        println!("The benchmark's redis-server beside the relay (not in the relay's CPU column):");
        for r in redis_cpu {
            let s = r.store_cpu_s.unwrap_or(f64::NAN);
            println!(
                "- {} {}: redis-server {:.1} CPU ms / 1k events",
                r.scenario,
                r.side,
                s * 1000.0 / (r.events as f64 / 1000.0)
            );
        }
    }
    let scale: Vec<&Row> = rows
        .iter()
        .filter(measured)
        .filter(|r| r.scenario == "store-scale")
        .collect();
    if !scale.is_empty() {
        println!();
        println!("store-scale (what the store holds per run; whole-run times):");
        for r in scale {
            let q = |x| load::quantile(&r.run_us, x).map(|v| v as f64 / 1000.0);
            let held = r
                .store_bytes_per_run
                .map(|b| format!(", store holds {b:.0} bytes per run"))
                .unwrap_or_default();
            let ratio = r
                .store_files_to_checkpointed
                .map(|x| format!(" ({x:.3}x the database after a full checkpoint)"))
                .unwrap_or_default();
            println!(
                "- {}: {} runs, CPU {} ms per run, run time p50 {} / p99 {} ms{held}{ratio}",
                r.side,
                r.runs,
                fmt_opt(r.cpu_ms_per_run(), 3),
                fmt_opt(q(0.5), 1),
                fmt_opt(q(0.99), 1),
            );
        }
    }
}

/// Prints each `stream` relay row's ratios to the floor; returns the `stream` CPU targets.
fn floor_ratios(rows: &[Row], env: &Env) -> Vec<Target> {
    let mut targets: Vec<Target> = Vec::new();
    let Some(f) = find(rows, "stream", "floor") else {
        return targets;
    };
    println!();
    println!("Ratios to the floor (same upstream, same clients, same run):");
    let judged = judged_store(rows, env, "stream", "relay store:true");
    for r in rows
        .iter()
        .filter(measured)
        .filter(|r| r.scenario == "stream" && r.side.starts_with("relay"))
    {
        let cpu = r.cpu_ms_per_1k().zip(f.cpu_ms_per_1k()).map(|(a, b)| a / b);
        let lat = |q| {
            r.lat_q(q)
                .zip(f.lat_q(q))
                .map(|(a, b)| a as f64 / (b as f64).max(1.0))
        };
        println!(
            "- {}: CPU per event {}x, added latency p50 {}x, p99 {}x",
            r.side,
            fmt_opt(cpu, 2),
            fmt_opt(lat(0.5), 2),
            fmt_opt(lat(0.99), 2)
        );
        let got = format!("{}x", fmt_opt(cpu, 2));
        if r.side == TRACED {
            let beside = find(rows, "stream", UNTRACED).and_then(Row::cpu_ms_per_1k);
            let vs = r.cpu_ms_per_1k().zip(beside).map(|(a, b)| a / b);
            targets.push(Target {
                what: "relay CPU per event with traces (OTLP to a local sink) and /metrics \
                       scraped <= 1.05x without, measured side by side (store: false)"
                    .into(),
                ok: vs.map(|v| v <= 1.05),
                got: format!("{}x the untraced relay's", fmt_opt(vs, 3)),
                info: false,
            });
        } else if r.side == UNTRACED || r.side == SSE_BESIDE {
            // Judged only as the traced relay's and the socket's yardsticks.
        } else if r.side == SOCKET {
            let sse = find(rows, "stream", SSE_BESIDE).and_then(Row::cpu_ms_per_1k);
            let vs = r.cpu_ms_per_1k().zip(sse).map(|(a, b)| a / b);
            targets.push(Target {
                what: "relay CPU per event over WebSocket <= over SSE, measured side by side \
                       (store: false)"
                    .into(),
                ok: vs.map(|v| v <= 1.0),
                got: format!("{}x SSE's", fmt_opt(vs, 2)),
                info: false,
            });
        } else if r.side.contains("store:false") {
            let what = "relay CPU per streamed event <= 3x floor (store: false)".to_string();
            targets.push(Target {
                what,
                ok: cpu.map(|c| c <= 3.0),
                got,
                info: false,
            });
        } else {
            let info = judged.as_deref() != Some(r.store.as_str());
            let what = format!(
                "relay CPU per streamed event <= 5x floor (store: true, {})",
                r.store
            );
            targets.push(Target {
                what,
                ok: cpu.map(|c| c <= 5.0),
                got,
                info,
            });
        }
    }
    targets
}

/// The added-latency target, judged at 256 clients, with the floor's and the harness's p99.
fn latency_target(rows: &[Row]) -> Option<Target> {
    let r = find(rows, "stream", "relay store:false")?;
    let floor = find(rows, "stream", "floor");
    let p99 = r.lat_q(0.99);
    let what = format!(
        "p99 added latency per event < 1 ms at 256 concurrent streams (measured at {})",
        r.clients
    );
    let ok = if r.clients == 256 {
        p99.map(|p| p < 1000)
    } else {
        None
    };
    let floor_p99 = floor
        .and_then(|f| f.lat_q(0.99))
        .map(|p| format!(", floor {p} µs"))
        .unwrap_or_default();
    let harness_p99 = find(rows, "stream", "harness alone")
        .and_then(|h| h.lat_q(0.99))
        .map(|p| format!(", harness alone {p} µs"))
        .unwrap_or_default();
    let got = format!(
        "{} µs{floor_p99}{harness_p99}",
        p99.map(|p| p.to_string()).unwrap_or("–".into())
    );
    Some(Target {
        what,
        ok,
        got,
        info: false,
    })
}

/// The `mcp`, `idle`, `replay` and `store-scale` targets, and an info line per N/A row.
fn other_targets(rows: &[Row], env: &Env) -> Vec<Target> {
    let mut targets: Vec<Target> = Vec::new();
    if let Some(r) = find(rows, "mcp", "relay") {
        let v = r.cpu_ms_per_run();
        let what = "relay CPU per mcp run (list from pool, 1 call, 50 deltas) < 1 ms".into();
        let floor = find(rows, "mcp", "floor").and_then(Row::cpu_ms_per_run);
        let floor = floor
            .map(|f| format!(" (the floor spends {f:.3} ms passing the same deltas alone)"))
            .unwrap_or_default();
        targets.push(Target {
            what,
            ok: v.map(|v| v < 1.0),
            got: format!("{} ms{floor}", fmt_opt(v, 3)),
            info: false,
        });
    }
    if let Some(r) = find(rows, "idle", "relay") {
        let open = r.open_streams.unwrap_or(0);
        let per = r.rss_per_stream_kib;
        let ok = per.map(|p| open >= 10_000 && p <= 32.0);
        let what = "idle: >= 10,000 open streams, relay RSS <= 32 KiB per stream (issue 34)".into();
        targets.push(Target {
            what,
            ok,
            got: format!("{open} open, {} KiB per stream", fmt_opt(per, 1)),
            info: false,
        });
    }
    let judged = judged_store(rows, env, "replay", "relay");
    for r in rows
        .iter()
        .filter(measured)
        .filter(|r| r.scenario == "replay")
    {
        let eps = r.events_per_s();
        let info = judged.as_deref() != Some(r.store.as_str());
        let what = format!("replay >= 200,000 events/s ({})", r.store);
        targets.push(Target {
            what,
            ok: Some(eps >= 200_000.0),
            got: format!("{eps:.0} events/s"),
            info,
        });
    }
    targets.extend(scale::targets(rows));
    for r in rows.iter().filter(|r| r.na.is_some()) {
        let what = format!("{} {}", r.scenario, r.side);
        targets.push(Target {
            what,
            ok: None,
            got: r.na.clone().unwrap_or_default(),
            info: true,
        });
    }
    targets
}

/// Prints the targets (judged first, then info) and the notes; true when none failed.
fn print_targets(targets: &[Target], plan: &Plan, env: &Env) -> bool {
    println!();
    println!(
        "Targets (issues 8, 28 and 37; the store targets are judged on SQLite, other stores shown as info, except Redis memory per stored run){}:",
        if plan.smoke {
            " — smoke mode: reported, not enforced"
        } else {
            ""
        }
    );
    let all = print_target_lines(targets);
    if !env.stamps {
        println!("(upstream without send stamps: latency not measured)");
    }
    if let Some(url) = &env.explicit_store
        && store_label(url) != "sqlite"
    {
        println!(
            "(the store targets name SQLite; this run used --store {})",
            store_label(url)
        );
    }
    println!("Child logs: {}", env.logs.display());
    all
}

/// Prints the target lines (judged first, then info); true when none failed.
pub fn print_target_lines(targets: &[Target]) -> bool {
    let mut all = true;
    for t in targets.iter().filter(|t| !t.info) {
        let verdict = match t.ok {
            Some(true) => "PASS",
            Some(false) => {
                all = false;
                "FAIL"
            }
            None => "N/A ",
        };
        println!("- {verdict} {}: {}", t.what, t.got);
    }
    for t in targets.iter().filter(|t| t.info) {
        let would = match t.ok {
            Some(true) => " (would pass)",
            Some(false) => " (would fail)",
            None => "",
        };
        println!("- info {}: {}{would}", t.what, t.got);
    }
    all
}
