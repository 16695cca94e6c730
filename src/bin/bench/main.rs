//! `bench`: the relay's benchmark (issue 8). Starts a stamping model server, the MCP test server,
//! the relay and a pass-through floor proxy as child processes on loopback, drives them with
//! in-process streaming clients, and prints one table with the floor beside the relay, the
//! ratios, and PASS/FAIL per target. `bench serve-upstream` / `bench serve-floor` /
//! `bench serve-sink` (an OTLP trace sink) are the child processes it starts from its own
//! executable.
//!
//! This file: the command line, the child-process subcommands, and the run in order. The rest:
//! `options` (flags and the plan), `env` (the shared processes, relays and stores), `measure`
//! (one phase's row), one file per scenario (`stream`, `mcp`, `idle`, `replay`, `scale`,
//! `kinds`, `compare`, `peers`),
//! `report` (the table, ratios and targets; `peers_report` the peers'), `load` (the clients),
//! `procs` (child processes and `/proc`), `gateways` (the peers SMG and agentic-api as child
//! processes), and the children's servers `upstream` (with `upstream_responses` and
//! `upstream_anthropic`), `floor` and `sink`.

mod compare;
mod env;
mod floor;
mod gateways;
mod idle;
mod kinds;
mod load;
mod mcp;
mod measure;
mod options;
mod peers;
mod peers_report;
mod procs;
mod replay;
mod report;
mod scale;
mod sink;
mod stream;
mod upstream;
mod upstream_anthropic;
mod upstream_responses;

/// The harness (load generator, model server, floor proxy) uses the same allocator as the relay,
/// so the floor is a pass-through proxy built like the relay and the harness leaves the machine's
/// two cores to what is measured.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::net::SocketAddr;
use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

use clap::{Parser, Subcommand};

use env::start_env;
use measure::Row;
use options::{Opts, Plan, Scenario};
use report::report;

#[derive(Parser, Debug)]
#[command(
    name = "bench",
    about = "Benchmark of the relay against a pass-through floor, measured in the same run."
)]
struct Cli {
    #[command(subcommand)]
    serve: Option<Serve>,
    #[command(flatten)]
    opts: Opts,
}

// The variants are the subcommands as typed (`serve-upstream`, `serve-floor`, `serve-sink`).
#[allow(clippy::enum_variant_names)]
#[derive(Subcommand, Debug)]
enum Serve {
    /// The stamping model server (started by the benchmark itself).
    ServeUpstream {
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: SocketAddr,
    },
    /// The pass-through floor proxy (started by the benchmark itself).
    ServeFloor {
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: SocketAddr,
        /// Upstream origin, `http://ADDR`.
        #[arg(long)]
        upstream: String,
    },
    /// The OTLP/HTTP trace sink the traced relay exports to (started by the benchmark itself).
    ServeSink {
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: SocketAddr,
    },
}

fn single_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    match cli.serve {
        // The model server runs on one thread: it only sleeps and writes, and one thread leaves
        // more of the machine to what is measured.
        Some(Serve::ServeUpstream { listen }) => {
            match single_thread().block_on(upstream::serve(listen)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("serve-upstream: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Some(Serve::ServeFloor { listen, upstream }) => {
            responses_relay::install_tls();
            match rt.block_on(floor::serve(listen, upstream)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("serve-floor: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Some(Serve::ServeSink { listen }) => match single_thread().block_on(sink::serve(listen)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("serve-sink: {e}");
                ExitCode::FAILURE
            }
        },
        None => {
            responses_relay::install_tls();
            rt.block_on(bench(cli.opts))
        }
    }
}

/// Builds the sibling binaries with the profile this executable was built with.
fn build_siblings(bin_dir: &Path) -> Result<(), String> {
    let release = bin_dir.file_name().is_some_and(|n| n == "release");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml");
    let mut cmd = std::process::Command::new(cargo);
    cmd.args([
        "build",
        "--manifest-path",
        manifest,
        "--bin",
        "responses-relay",
        "--bin",
        "mcp-test-server",
        "--bin",
        "fake-upstream",
    ]);
    if release {
        cmd.arg("--release");
    } else {
        eprintln!("warning: bench is a debug build; numbers are meaningless (use --release)");
    }
    let status = cmd.status().map_err(|e| format!("cargo build: {e}"))?;
    if !status.success() {
        return Err(format!("cargo build failed: {status}"));
    }
    Ok(())
}

/// One line per row whose runs failed. A peer's failed runs are its row's (shown in the table
/// and the peers' lines), not the benchmark's.
fn row_errors(rows: &[Row]) -> Vec<String> {
    rows.iter()
        .filter(|r| r.errors > 0 && !peers::is_peer(&r.side))
        .map(|r| {
            format!(
                "{} {}: {} errors, first: {}",
                r.scenario,
                r.side,
                r.errors,
                r.first_error.as_deref().unwrap_or("?")
            )
        })
        .collect()
}

async fn bench(o: Opts) -> ExitCode {
    let plan = Plan::new(&o);
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("bench: {e}");
            return ExitCode::from(2);
        }
    };
    let bin_dir = exe
        .parent()
        .expect("executable has a directory")
        .to_path_buf();
    if !o.no_build
        && let Err(e) = build_siblings(&bin_dir)
    {
        eprintln!("bench: {e}");
        return ExitCode::from(2);
    }
    let logs = o
        .log_dir
        .clone()
        .unwrap_or_else(|| std::env::temp_dir().join("relay-bench"));
    if let Err(e) = std::fs::create_dir_all(&logs) {
        eprintln!("bench: cannot create {}: {e}", logs.display());
        return ExitCode::from(2);
    }
    let env = match start_env(&o, bin_dir, logs).await {
        Ok(e) => e,
        Err(e) => {
            eprintln!("bench: {e}");
            return ExitCode::from(2);
        }
    };
    let mut rows: Vec<Row> = Vec::new();
    let mut failures: Vec<String> = Vec::new();
    let want = |s: Scenario| o.scenario == s || o.scenario == Scenario::All;
    let started = Instant::now();
    if want(Scenario::Stream)
        && let Err(e) = stream::scenario(&env, &plan, &mut rows, &mut failures).await
    {
        failures.push(format!("stream: {e}"));
    }
    if want(Scenario::Mcp)
        && let Err(e) = mcp::scenario(&env, &plan, &mut rows).await
    {
        failures.push(format!("mcp: {e}"));
    }
    if want(Scenario::Idle) {
        match idle::scenario(&env, &plan).await {
            Ok(r) => rows.push(r),
            Err(e) => failures.push(format!("idle: {e}")),
        }
    }
    if want(Scenario::Replay) {
        replay::scenario(&env, &plan, &mut rows, &mut failures).await;
    }
    if want(Scenario::StoreScale) {
        scale::scenario(&env, &plan, &mut rows, &mut failures).await;
    }
    let mut extra_targets = Vec::new();
    if want(Scenario::UpstreamKinds) {
        match kinds::scenario(&env, &plan, &mut rows).await {
            Ok(ratios) => extra_targets = kinds::targets(&rows, &ratios),
            Err(e) => failures.push(format!("upstream-kinds: {e}")),
        }
    }
    let mut compared = None;
    if o.scenario == Scenario::Compare {
        match &o.compare_relay {
            None => failures.push("compare: --compare-relay PATH is needed".into()),
            Some(other) => {
                let extra: Vec<String> = o
                    .compare_args
                    .split_whitespace()
                    .map(str::to_string)
                    .collect();
                let other = (other.as_path(), extra.as_slice());
                let this = o.this_relay.as_deref();
                match compare::scenario(&env, &plan, this, other, &o.compare_label, &mut rows).await
                {
                    Ok(r) => compared = Some(r),
                    Err(e) => failures.push(format!("compare: {e}")),
                }
            }
        }
    }
    let all_pass = if o.scenario == Scenario::Peers {
        let venv = o.peers_venv.as_deref();
        peers::scenario(&env, &plan, venv, &mut rows, &mut failures).await;
        peers_report::report(&rows, &plan, &env, started.elapsed())
    } else {
        report(&rows, &plan, &env, started.elapsed(), extra_targets)
    };
    if let Some(ratios) = &compared {
        compare::print_ratios(&rows, &o.compare_label, ratios);
    }
    failures.extend(row_errors(&rows));
    if !failures.is_empty() {
        println!("\nERRORS:");
        for f in &failures {
            println!("- {f}");
        }
        return ExitCode::from(2);
    }
    if !all_pass && !plan.smoke {
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}
