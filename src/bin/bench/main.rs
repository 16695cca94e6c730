//! `bench`: the relay's benchmark (issue 8). Starts a stamping model server, the MCP test server,
//! the relay and a pass-through floor proxy as child processes on loopback, drives them with
//! in-process streaming clients, and prints one table with the floor beside the relay, the
//! ratios, and PASS/FAIL per target. `bench serve-upstream` / `bench serve-floor` /
//! `bench serve-sink` (an OTLP trace sink) are the child processes it starts from its own
//! executable.

mod floor;
mod load;
mod procs;
mod scale;
mod sink;
mod upstream;

/// The harness (load generator, model server, floor proxy) uses the same allocator as the relay,
/// so the floor is a pass-through proxy built like the relay and the harness leaves the machine's
/// two cores to what is measured.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::{Args, Parser, Subcommand, ValueEnum};
use serde_json::json;

use load::{Expect, Kind, Req, Stats};
use procs::{Proc, Redis};

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

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Scenario {
    Stream,
    Mcp,
    Idle,
    Replay,
    /// Many short stored runs, then stored and `store: false` runs on the same relay (issue 28).
    StoreScale,
    All,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum UpstreamKind {
    /// The benchmark's own server: stamps every delta with its send time (latency measurable).
    Stamp,
    /// The project's `fake-upstream` (no stamps: latency columns stay empty).
    Fake,
}

#[derive(Args, Debug, Clone)]
struct Opts {
    /// Which scenario to run.
    #[arg(long, value_enum, default_value_t = Scenario::All)]
    scenario: Scenario,
    /// A few seconds per scenario with small counts; reports targets but fails only on errors.
    #[arg(long)]
    smoke: bool,
    /// Concurrent streaming clients in `stream` and `mcp` [default: 256, smoke 8].
    #[arg(long)]
    clients: Option<usize>,
    /// Measurement window per phase, seconds [default: 10, smoke 1.5].
    #[arg(long)]
    seconds: Option<f64>,
    /// Text deltas per run in `stream` and `replay` [default: 200, smoke 20].
    #[arg(long)]
    deltas: Option<usize>,
    /// Text deltas after the tool call in `mcp`.
    #[arg(long, default_value_t = 50)]
    mcp_deltas: usize,
    /// Milliseconds between upstream deltas in `stream` and `mcp` (0: as fast as possible) [default: 10].
    #[arg(long)]
    delay_ms: Option<u64>,
    /// Open streams in `idle` (upstream sends one delta a second) [default: 10000, smoke 200].
    #[arg(long)]
    idle_streams: Option<usize>,
    /// Streams per client connection in `idle`: >0 is h2c with that many streams per connection,
    /// 0 is HTTP/1.1 (one connection per stream; needs 2 descriptors per stream in the relay).
    #[arg(long, default_value_t = 100)]
    idle_streams_per_conn: usize,
    /// Seconds all idle streams are held open while CPU and memory are read [default: 5, smoke 1.5].
    #[arg(long)]
    idle_seconds: Option<f64>,
    /// One store for every relay (`sqlite:PATH`, `redis://HOST:PORT/DB`, `memory`). Without it,
    /// the `stream` scenario's `store: true` phase and `replay` run twice: with SQLite (a fresh file
    /// in a temp dir) and with Redis (a `redis-server` the benchmark starts on a loopback port, or
    /// an N/A row when none is installed); the other phases use a fresh SQLite file.
    #[arg(long)]
    store: Option<String>,
    /// Concurrent readers in `replay` [default: 32, smoke 4].
    #[arg(long)]
    replay_clients: Option<usize>,
    /// Stored runs created (200 deltas each) and then replayed in `replay` [default: 256, smoke 16].
    #[arg(long)]
    replay_runs: Option<usize>,
    /// Short stored runs (20 deltas) that fill the store before `store-scale` measures
    /// [default: 20000, smoke 300].
    #[arg(long)]
    scale_runs: Option<usize>,
    /// Concurrent clients of `store-scale`'s measured phases [default: 64, smoke 8].
    #[arg(long)]
    scale_clients: Option<usize>,
    /// Model server the relay and the floor talk to.
    #[arg(long, value_enum, default_value_t = UpstreamKind::Stamp)]
    upstream: UpstreamKind,
    /// Do not run `cargo build` for the sibling binaries (responses-relay, mcp-test-server, fake-upstream).
    #[arg(long)]
    no_build: bool,
    /// An environment variable for every relay child, `KEY=VALUE` (repeatable), for experiments
    /// such as `LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2`.
    #[arg(long = "relay-env", value_name = "KEY=VALUE")]
    relay_env: Vec<String>,
    /// Directory for the children's stderr logs [default: $TMPDIR/relay-bench].
    #[arg(long)]
    log_dir: Option<PathBuf>,
}

/// Settings after the smoke defaults are applied.
#[derive(Clone)]
struct Plan {
    smoke: bool,
    clients: usize,
    window: Duration,
    warmup: Duration,
    deltas: usize,
    mcp_deltas: usize,
    delay_ms: u64,
    idle_streams: usize,
    idle_per_conn: usize,
    idle_hold: Duration,
    idle_ramp_timeout: Duration,
    replay_clients: usize,
    replay_runs: usize,
    scale_runs: usize,
    scale_clients: usize,
}

impl Plan {
    /// A text run's nominal length: `deltas` deltas `delay_ms` apart.
    fn run_length(&self, deltas: usize) -> Duration {
        Duration::from_millis(self.delay_ms.saturating_mul(deltas as u64))
    }

    fn new(o: &Opts) -> Plan {
        let s = o.smoke;
        let secs = |v: Option<f64>, full: f64, smoke: f64| {
            Duration::from_secs_f64(v.unwrap_or(if s { smoke } else { full }).clamp(0.2, 600.0))
        };
        Plan {
            smoke: s,
            clients: o.clients.unwrap_or(if s { 8 } else { 256 }).clamp(1, 5000),
            window: secs(o.seconds, 10.0, 1.5),
            warmup: Duration::from_millis(if s { 500 } else { 1500 }),
            deltas: o
                .deltas
                .unwrap_or(if s { 20 } else { 200 })
                .clamp(1, 10_000),
            mcp_deltas: o.mcp_deltas.clamp(1, 10_000),
            delay_ms: o.delay_ms.unwrap_or(10).min(1000),
            idle_streams: o
                .idle_streams
                .unwrap_or(if s { 200 } else { 10_000 })
                .clamp(1, 100_000),
            idle_per_conn: o.idle_streams_per_conn.min(10_000),
            idle_hold: secs(o.idle_seconds, 5.0, 1.5),
            idle_ramp_timeout: Duration::from_secs(if s { 20 } else { 240 }),
            replay_clients: o
                .replay_clients
                .unwrap_or(if s { 4 } else { 32 })
                .clamp(1, 5000),
            replay_runs: o
                .replay_runs
                .unwrap_or(if s { 16 } else { 256 })
                .clamp(1, 100_000),
            scale_runs: o
                .scale_runs
                .unwrap_or(if s { 300 } else { 20_000 })
                .clamp(1, 10_000_000),
            scale_clients: o
                .scale_clients
                .unwrap_or(if s { 8 } else { 64 })
                .clamp(1, 5000),
        }
    }
}

/// The `stream` row of the relay exporting traces with its metrics scraped, and the row of the
/// relay measured beside it (at the same time, with the other half of the clients).
const TRACED: &str = "relay traced store:false (OTLP, /metrics)";
const UNTRACED: &str = "relay untraced, beside it, store:false";
const SOCKET: &str = "relay websocket store:false";
const SSE_BESIDE: &str = "relay sse, beside the socket one, store:false";

/// Clients of the untraced relay when `clients` are split between it and the traced one.
fn plain_clients(clients: usize) -> usize {
    clients.div_ceil(2)
}

/// One line of the table.
#[derive(Default)]
struct Row {
    scenario: String,
    side: String,
    /// The store the relay ran with (`sqlite`, `redis`, `memory`); empty for the floor.
    store: String,
    /// Not measured, and why (`redis-server not installed`).
    na: Option<String>,
    /// CPU seconds of the benchmark's own `redis-server` over the window.
    store_cpu_s: Option<f64>,
    clients: usize,
    secs: f64,
    runs: u64,
    events: u64,
    cpu_s: f64,
    lat: Vec<u32>,
    ttfe: Vec<u32>,
    /// Whole-run times (µs), sorted.
    run_us: Vec<u32>,
    /// `store-scale`: bytes the store holds per kept run (SQLite: every file of the database
    /// after a checkpoint; Redis: `INFO memory` `used_memory`), over the runs of the fill.
    store_bytes_per_run: Option<f64>,
    peak_rss_kib: Option<u64>,
    rss_per_stream_kib: Option<f64>,
    open_streams: Option<u64>,
    errors: u64,
    first_error: Option<String>,
}

impl Row {
    fn events_per_s(&self) -> f64 {
        self.events as f64 / self.secs.max(1e-9)
    }
    fn cpu_ms_per_1k(&self) -> Option<f64> {
        (self.events > 0).then(|| self.cpu_s * 1000.0 / (self.events as f64 / 1000.0))
    }
    fn cpu_ms_per_run(&self) -> Option<f64> {
        (self.runs > 0).then(|| self.cpu_s * 1000.0 / self.runs as f64)
    }
    fn lat_q(&self, q: f64) -> Option<u32> {
        load::quantile(&self.lat, q)
    }

    /// Adds another measurement of the same load to this row (its time, runs, events, CPU and
    /// samples), as if both windows were one.
    fn merge(&mut self, o: Row) {
        self.secs += o.secs;
        self.runs += o.runs;
        self.events += o.events;
        self.cpu_s += o.cpu_s;
        self.store_cpu_s = match (self.store_cpu_s, o.store_cpu_s) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
        for (mine, theirs) in [
            (&mut self.lat, o.lat),
            (&mut self.ttfe, o.ttfe),
            (&mut self.run_us, o.run_us),
        ] {
            mine.extend(theirs);
            mine.sort_unstable();
        }
        self.peak_rss_kib = self.peak_rss_kib.max(o.peak_rss_kib);
        self.errors += o.errors;
        self.first_error = self.first_error.take().or(o.first_error);
    }
}

/// The running shared processes and where the binaries are.
struct Env {
    bin_dir: PathBuf,
    logs: PathBuf,
    ticks: f64,
    upstream: Proc,
    upstream_v1: String,
    model: String,
    stamps: bool,
    mcp: Proc,
    serial: std::sync::atomic::AtomicU64,
    /// `--store` as given; `None`: SQLite and Redis side by side.
    explicit_store: Option<String>,
    /// `--relay-env` pairs.
    relay_env: Vec<(String, String)>,
    /// A fresh temp dir for the SQLite files, removed when the benchmark ends.
    store_dir: TempDir,
    redis: RedisState,
}

/// The benchmark's own `redis-server`.
enum RedisState {
    /// Not needed (`--store` given, or no scenario with a store phase).
    NotWanted,
    /// `redis-server` is not on `PATH`: the Redis rows say N/A.
    Missing,
    /// Installed but it did not start: the Redis phases fail with this.
    Failed(String),
    Up(Redis),
}

/// A directory removed (with what it holds) when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Result<TempDir, String> {
        let d = std::env::temp_dir().join(format!("relay-bench-store-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).map_err(|e| format!("cannot create {}: {e}", d.display()))?;
        Ok(TempDir(d))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Which store a relay runs with.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Store {
    /// The `--store` URL given, else a fresh SQLite file.
    Default,
    /// A fresh SQLite file (ignores `--store`).
    Sqlite,
    /// The benchmark's own `redis-server` (ignores `--store`).
    Redis,
}

/// A store URL ready for a relay, and what to clean after the relay is gone.
struct StoreUse {
    url: String,
    label: String,
    /// The benchmark's `redis-server` when the relay uses it (its CPU is read too).
    redis_pid: Option<u32>,
    sqlite_file: Option<PathBuf>,
}

enum StoreErr {
    /// Cannot be measured on this machine: an N/A row, not an error.
    NotAvailable(String),
    Failed(String),
}

/// `sqlite`, `redis`, `memory`: the scheme of a store URL.
fn store_label(url: &str) -> String {
    match url.split(':').next().unwrap_or(url) {
        "rediss" => "redis".into(),
        s => s.to_string(),
    }
}

impl Env {
    fn log(&self, name: &str) -> PathBuf {
        let n = self.serial.fetch_add(1, Ordering::Relaxed);
        self.logs.join(format!("{n:02}-{name}.log"))
    }

    /// The stores the `store: true` and `replay` phases run with.
    fn phase_stores(&self) -> Vec<Store> {
        if self.explicit_store.is_some() {
            vec![Store::Default]
        } else {
            vec![Store::Sqlite, Store::Redis]
        }
    }

    /// A store for one relay: a fresh SQLite file, the emptied Redis, or the `--store` URL.
    fn store(&self, which: Store) -> Result<StoreUse, StoreErr> {
        let sqlite = || {
            let n = self.serial.fetch_add(1, Ordering::Relaxed);
            let f = self.store_dir.0.join(format!("{n:02}.sqlite3"));
            StoreUse {
                url: format!("sqlite:{}", f.display()),
                label: "sqlite".into(),
                redis_pid: None,
                sqlite_file: Some(f),
            }
        };
        match (which, &self.explicit_store) {
            (Store::Default, Some(url)) => Ok(StoreUse {
                url: url.clone(),
                label: store_label(url),
                redis_pid: None,
                sqlite_file: None,
            }),
            (Store::Default, None) | (Store::Sqlite, _) => Ok(sqlite()),
            (Store::Redis, _) => match &self.redis {
                RedisState::Up(r) => {
                    // A clean server for every phase: the previous phase's runs are gone.
                    r.command("FLUSHALL")
                        .map_err(|e| StoreErr::Failed(format!("redis-server FLUSHALL: {e}")))?;
                    Ok(StoreUse {
                        url: r.url(0),
                        label: "redis".into(),
                        redis_pid: Some(r.pid()),
                        sqlite_file: None,
                    })
                }
                RedisState::Missing => Err(StoreErr::NotAvailable(
                    "N/A: redis-server not installed".into(),
                )),
                RedisState::Failed(e) => Err(StoreErr::Failed(e.clone())),
                RedisState::NotWanted => {
                    Err(StoreErr::Failed("redis-server was not started".into()))
                }
            },
        }
    }

    /// Removes what a phase stored (after its relay has exited).
    fn release(&self, s: &StoreUse) {
        if let Some(f) = &s.sqlite_file {
            for suffix in ["", "-wal", "-shm", "-journal"] {
                let _ = std::fs::remove_file(format!("{}{suffix}", f.display()));
            }
        }
        if s.redis_pid.is_some()
            && let RedisState::Up(r) = &self.redis
        {
            let _ = r.command("FLUSHALL");
        }
    }

    fn relay(&self, store: &str) -> Result<Proc, String> {
        self.relay_with(store, &[])
    }

    /// A relay with `extra` flags after the usual ones.
    fn relay_with(&self, store: &str, extra: &[String]) -> Result<Proc, String> {
        // The MCP test server is on loopback, which the relay refuses unless allowed.
        let args: Vec<String> = [
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--upstream-url",
            &self.upstream_v1,
            "--store",
            store,
            "--mcp-allow-host",
            "127.0.0.1",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain(extra.iter().cloned())
        .collect();
        let envs: Vec<(&str, &str)> = self
            .relay_env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let p = Proc::spawn(
            "relay",
            &self.bin_dir.join("responses-relay"),
            &args,
            &envs,
            &self.log("relay"),
        )?;
        eprintln!("  relay pid {} at {} (--store {store})", p.pid(), p.url);
        Ok(p)
    }

    fn floor(&self) -> Result<Proc, String> {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let args = vec![
            "serve-floor".into(),
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--upstream".into(),
            self.upstream.origin(),
        ];
        let p = Proc::spawn("floor", &exe, &args, &[], &self.log("floor"))?;
        eprintln!("  floor pid {} at {}", p.pid(), p.url);
        Ok(p)
    }

    /// The trace sink a traced relay exports to.
    fn sink(&self) -> Result<Proc, String> {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let args = vec!["serve-sink".into(), "--listen".into(), "127.0.0.1:0".into()];
        let p = Proc::spawn("sink", &exe, &args, &[], &self.log("sink"))?;
        eprintln!("  trace sink pid {} at {}", p.pid(), p.url);
        Ok(p)
    }

    fn model(&self, deltas: usize, delay_ms: u64) -> String {
        format!("{}?deltas={deltas}&delay_ms={delay_ms}", self.model)
    }
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
        && let Err(e) = scenario_stream(&env, &plan, &mut rows, &mut failures).await
    {
        failures.push(format!("stream: {e}"));
    }
    if want(Scenario::Mcp)
        && let Err(e) = scenario_mcp(&env, &plan, &mut rows).await
    {
        failures.push(format!("mcp: {e}"));
    }
    if want(Scenario::Idle) {
        match scenario_idle(&env, &plan).await {
            Ok(r) => rows.push(r),
            Err(e) => failures.push(format!("idle: {e}")),
        }
    }
    if want(Scenario::Replay) {
        scenario_replay(&env, &plan, &mut rows, &mut failures).await;
    }
    if want(Scenario::StoreScale) {
        scale::scenario(&env, &plan, &mut rows, &mut failures).await;
    }
    let all_pass = report(&rows, &plan, &env, started.elapsed());
    for r in &rows {
        if r.errors > 0 {
            failures.push(format!(
                "{} {}: {} errors, first: {}",
                r.scenario,
                r.side,
                r.errors,
                r.first_error.as_deref().unwrap_or("?")
            ));
        }
    }
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

async fn start_env(o: &Opts, bin_dir: PathBuf, logs: PathBuf) -> Result<Env, String> {
    let serial = std::sync::atomic::AtomicU64::new(0);
    let upstream = match o.upstream {
        UpstreamKind::Stamp => {
            let exe = std::env::current_exe().map_err(|e| e.to_string())?;
            let args = vec![
                "serve-upstream".into(),
                "--listen".into(),
                "127.0.0.1:0".into(),
            ];
            Proc::spawn("upstream", &exe, &args, &[], &logs.join("upstream.log"))?
        }
        UpstreamKind::Fake => {
            let args = vec!["--listen".into(), "127.0.0.1:0".into()];
            Proc::spawn(
                "fake-upstream",
                &bin_dir.join("fake-upstream"),
                &args,
                &[],
                &logs.join("upstream.log"),
            )?
        }
    };
    let mcp_args = vec!["--listen".into(), "127.0.0.1:0".into()];
    let mcp = Proc::spawn(
        "mcp-test-server",
        &bin_dir.join("mcp-test-server"),
        &mcp_args,
        &[],
        &logs.join("mcp.log"),
    )?;
    eprintln!(
        "upstream pid {} at {}; MCP server pid {} at {}; logs in {}",
        upstream.pid(),
        upstream.url,
        mcp.pid(),
        mcp.url,
        logs.display()
    );
    let upstream_v1 = format!("{}/v1", upstream.origin());
    let (model, stamps) = match o.upstream {
        UpstreamKind::Stamp => ("bench".to_string(), true),
        UpstreamKind::Fake => ("fake-model".to_string(), false),
    };
    let wants_stores = matches!(
        o.scenario,
        Scenario::All | Scenario::Stream | Scenario::Replay | Scenario::StoreScale
    );
    let redis = if o.store.is_some() || !wants_stores {
        RedisState::NotWanted
    } else {
        match procs::find_redis_server() {
            None => {
                eprintln!("redis-server not on PATH: the Redis rows are N/A");
                RedisState::Missing
            }
            Some(prog) => match Redis::spawn(&prog, &logs.join("redis-server.log")) {
                Ok(r) => {
                    eprintln!("redis-server pid {} at {}", r.pid(), r.url(0));
                    RedisState::Up(r)
                }
                Err(e) => RedisState::Failed(e),
            },
        }
    };
    let store_dir = TempDir::new()?;
    Ok(Env {
        bin_dir,
        logs,
        ticks: procs::clock_ticks_per_sec(),
        upstream,
        upstream_v1,
        model,
        stamps,
        mcp,
        serial,
        explicit_store: o.store.clone(),
        relay_env: o
            .relay_env
            .iter()
            .map(|kv| {
                kv.split_once('=')
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .ok_or(format!("--relay-env {kv:?}: expected KEY=VALUE"))
            })
            .collect::<Result<_, _>>()?,
        store_dir,
        redis,
    })
}

fn responses_body(model: &str, input: &str, store: bool, tools: serde_json::Value) -> Bytes {
    let mut b = json!({"model": model, "input": input, "stream": true, "store": store});
    if tools.as_array().is_some_and(|t| !t.is_empty()) {
        b["tools"] = tools;
    }
    Bytes::from(b.to_string())
}

/// Runs `clients` looping clients against `make` and measures `pid` over the plan's window. The
/// clients' first runs are spread evenly over `spread` (one run's nominal length), and the warmup
/// lasts that much longer, so the window sees a steady state rather than a synchronized herd.
#[allow(clippy::too_many_arguments)]
async fn measure_loop(
    env: &Env,
    plan: &Plan,
    spread: Duration,
    pid: u32,
    scenario: &str,
    side: &str,
    kind: Kind,
    expect: Expect,
    clients: usize,
    make: Arc<dyn Fn() -> Req + Send + Sync>,
    also: Option<u32>,
) -> Row {
    let st = Arc::new(Stats::default());
    let http = load::http1_client(clients);
    let warmup = plan.warmup + spread;
    let hard_deadline = Instant::now() + warmup + plan.window + Duration::from_secs(60);
    let tasks: Vec<_> = (0..clients)
        .map(|i| {
            let start_after = spread.mul_f64(i as f64 / clients as f64);
            tokio::spawn(load::loop_runs(
                start_after,
                http.clone(),
                make.clone(),
                kind,
                expect,
                st.clone(),
                hard_deadline,
                10_000_000,
            ))
        })
        .collect();
    tokio::time::sleep(warmup).await;
    let (ev0, runs0, cpu0) = (
        st.events.load(Ordering::Relaxed),
        st.runs.load(Ordering::Relaxed),
        procs::cpu_ticks(pid),
    );
    let also0 = also.and_then(procs::cpu_ticks);
    st.measuring.store(true, Ordering::Relaxed);
    let t0 = Instant::now();
    tokio::time::sleep(plan.window).await;
    st.measuring.store(false, Ordering::Relaxed);
    let cpu1 = procs::cpu_ticks(pid);
    let also1 = also.and_then(procs::cpu_ticks);
    let secs = t0.elapsed().as_secs_f64();
    let (ev1, runs1) = (
        st.events.load(Ordering::Relaxed),
        st.runs.load(Ordering::Relaxed),
    );
    st.stop.store(true, Ordering::Relaxed);
    // Runs in flight finish (each is bounded by deltas × delay); stragglers are dropped.
    let grace = Instant::now() + Duration::from_secs(30);
    for t in tasks {
        let left = grace.saturating_duration_since(Instant::now());
        let abort = t.abort_handle();
        if tokio::time::timeout(left, t).await.is_err() {
            abort.abort();
        }
    }
    let mut row = finish_row(
        &st,
        scenario,
        side,
        clients,
        secs,
        ev1 - ev0,
        runs1 - runs0,
        cpu0,
        cpu1,
        env.ticks,
        pid,
    );
    row.store_cpu_s = also0
        .zip(also1)
        .map(|(a, b)| b.saturating_sub(a) as f64 / env.ticks);
    row
}

#[allow(clippy::too_many_arguments)]
fn finish_row(
    st: &Stats,
    scenario: &str,
    side: &str,
    clients: usize,
    secs: f64,
    events: u64,
    runs: u64,
    cpu0: Option<u64>,
    cpu1: Option<u64>,
    ticks: f64,
    pid: u32,
) -> Row {
    let mut lat = std::mem::take(&mut *st.latency_us.lock().expect("lock"));
    lat.sort_unstable();
    let mut ttfe = std::mem::take(&mut *st.ttfe_us.lock().expect("lock"));
    ttfe.sort_unstable();
    let mut run_us = std::mem::take(&mut *st.run_us.lock().expect("lock"));
    run_us.sort_unstable();
    // The whole distribution goes to stderr: the table's p50 / p99 cannot show whether a tail
    // is every event a little late or a few moments when everything is late.
    if !lat.is_empty() {
        let q = |x| load::quantile(&lat, x).unwrap_or(0);
        eprintln!(
            "  {scenario} {side}: added latency µs p50 {} p90 {} p95 {} p99 {} p99.9 {} max {} ({} samples)",
            q(0.5),
            q(0.9),
            q(0.95),
            q(0.99),
            q(0.999),
            q(1.0),
            lat.len()
        );
    }
    let cpu_s = match (cpu0, cpu1) {
        (Some(a), Some(b)) => (b.saturating_sub(a)) as f64 / ticks,
        _ => f64::NAN,
    };
    Row {
        scenario: scenario.into(),
        side: side.into(),
        clients,
        secs,
        runs,
        events,
        cpu_s,
        lat,
        ttfe,
        run_us,
        peak_rss_kib: procs::status_kib(pid, "VmHWM"),
        errors: st.errors.load(Ordering::Relaxed),
        first_error: st.first_error.lock().expect("lock").clone(),
        ..Row::default()
    }
}

impl StoreErr {
    fn into_msg(self) -> String {
        match self {
            StoreErr::NotAvailable(m) | StoreErr::Failed(m) => m,
        }
    }
}

impl Env {
    /// `sqlite`, `redis` or the `--store` URL's scheme, before the store is set up.
    fn which_label(&self, which: Store) -> String {
        match (which, &self.explicit_store) {
            (Store::Default, Some(url)) => store_label(url),
            (Store::Default, None) | (Store::Sqlite, _) => "sqlite".into(),
            (Store::Redis, _) => "redis".into(),
        }
    }
}

/// The row of a store that cannot be measured here.
fn na_row(scenario: &str, side: &str, store: &str, why: String) -> Row {
    Row {
        scenario: scenario.into(),
        side: side.into(),
        store: store.into(),
        na: Some(why),
        ..Row::default()
    }
}

/// Runs `phase` once per store of `env.phase_stores()`: an N/A row for a store not installed, an
/// error (and the other stores still measured) for a store that fails.
async fn per_store<'a, F, Fut>(
    env: &'a Env,
    scenario: &str,
    side: impl Fn(&str) -> String,
    rows: &mut Vec<Row>,
    failures: &mut Vec<String>,
    phase: F,
) where
    F: Fn(&'a Env, StoreUse) -> Fut,
    Fut: std::future::Future<Output = Result<Row, String>>,
{
    for which in env.phase_stores() {
        let label = env.which_label(which);
        match env.store(which) {
            Ok(su) => match phase(env, su).await {
                Ok(r) => rows.push(r),
                Err(e) => failures.push(format!("{scenario} ({label}): {e}")),
            },
            Err(StoreErr::NotAvailable(why)) => {
                eprintln!("{scenario} with {label}: {why}");
                rows.push(na_row(scenario, &side(&label), &label, why));
            }
            Err(StoreErr::Failed(e)) => failures.push(format!("{scenario} ({label}): {e}")),
        }
    }
}

async fn scenario_stream(
    env: &Env,
    plan: &Plan,
    rows: &mut Vec<Row>,
    failures: &mut Vec<String>,
) -> Result<(), String> {
    eprintln!(
        "stream: {} clients, {} deltas per run, {} ms apart",
        plan.clients, plan.deltas, plan.delay_ms
    );
    let model = env.model(plan.deltas, plan.delay_ms);
    rows.push(measure_direct(env, plan, "stream", plan.deltas).await?);
    rows.push(measure_floor(env, plan, "stream", plan.deltas).await?);
    {
        let su = env.store(Store::Default).map_err(StoreErr::into_msg)?;
        let relay = env.relay(&su.url)?;
        let req = Req {
            url: format!("{}/v1/responses", relay.origin()),
            body: Some(responses_body(&model, "hi", false, json!([]))),
        };
        let make: Arc<dyn Fn() -> Req + Send + Sync> = Arc::new(move || req.clone());
        let mut row = measure_loop(
            env,
            plan,
            plan.run_length(plan.deltas),
            relay.pid(),
            "stream",
            "relay store:false",
            Kind::Relay,
            Expect { mcp_call: false },
            plan.clients,
            make,
            None,
        )
        .await;
        row.store = su.label.clone();
        rows.push(row);
        // The same runs over WebSocket mode (one socket per client, each response a
        // `response.create` frame) measured side by side with SSE: two relays at once, half the
        // clients each, so both see the same machine (one after the other, rows of unchanged
        // code drifted 25-30% within a run on a shared machine).
        drop(relay);
        env.release(&su);
        let (su_sse, su_ws) = (
            env.store(Store::Default).map_err(StoreErr::into_msg)?,
            env.store(Store::Default).map_err(StoreErr::into_msg)?,
        );
        let (sse, ws) = (env.relay(&su_sse.url)?, env.relay(&su_ws.url)?);
        let sse_req = Req {
            url: format!("{}/v1/responses", sse.origin()),
            body: Some(responses_body(&model, "hi", false, json!([]))),
        };
        let mut frame: serde_json::Value =
            serde_json::from_slice(&responses_body(&model, "hi", false, json!([])))
                .expect("a JSON body");
        frame["type"] = json!("response.create");
        let ws_req = Req {
            url: format!(
                "ws://{}/v1/responses",
                ws.origin().trim_start_matches("http://")
            ),
            body: Some(Bytes::from(frame.to_string())),
        };
        let (mut sse_row, mut ws_row) = tokio::join!(
            measure_loop(
                env,
                plan,
                plan.run_length(plan.deltas),
                sse.pid(),
                "stream",
                SSE_BESIDE,
                Kind::Relay,
                Expect { mcp_call: false },
                plain_clients(plan.clients),
                Arc::new(move || sse_req.clone()),
                None,
            ),
            measure_loop(
                env,
                plan,
                plan.run_length(plan.deltas),
                ws.pid(),
                "stream",
                SOCKET,
                Kind::Socket,
                Expect { mcp_call: false },
                plan.clients - plain_clients(plan.clients),
                Arc::new(move || ws_req.clone()),
                None,
            )
        );
        sse_row.store = su_sse.label.clone();
        ws_row.store = su_ws.label.clone();
        drop((sse, ws));
        env.release(&su_sse);
        env.release(&su_ws);
        rows.push(sse_row);
        rows.push(ws_row);
        // What observability costs: two relays at once, half the clients each, one exporting
        // traces to a local sink with its /metrics scraped every second, the other not. Measured
        // in the same window, both see the same machine (other load on it moves both alike).
        let sink = env.sink()?;
        let (su_plain, su_traced) = (
            env.store(Store::Default).map_err(StoreErr::into_msg)?,
            env.store(Store::Default).map_err(StoreErr::into_msg)?,
        );
        let plain = env.relay(&su_plain.url)?;
        let traced = env.relay_with(&su_traced.url, &["--otlp-endpoint".into(), sink.origin()])?;
        let runs = |relay: &Proc| -> Arc<dyn Fn() -> Req + Send + Sync> {
            let req = Req {
                url: format!("{}/v1/responses", relay.origin()),
                body: Some(responses_body(&model, "hi", false, json!([]))),
            };
            Arc::new(move || req.clone())
        };
        let scrape = {
            let url = format!("{}/metrics", traced.origin());
            tokio::spawn(async move {
                let http = reqwest::Client::new();
                loop {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    if let Ok(r) = http.get(&url).send().await {
                        let _ = r.bytes().await;
                    }
                }
            })
        };
        let half = (
            plain_clients(plan.clients),
            plan.clients - plain_clients(plan.clients),
        );
        let (mut untraced_row, mut traced_row) = tokio::join!(
            measure_loop(
                env,
                plan,
                plan.run_length(plan.deltas),
                plain.pid(),
                "stream",
                UNTRACED,
                Kind::Relay,
                Expect { mcp_call: false },
                half.0,
                runs(&plain),
                None,
            ),
            measure_loop(
                env,
                plan,
                plan.run_length(plan.deltas),
                traced.pid(),
                "stream",
                TRACED,
                Kind::Relay,
                Expect { mcp_call: false },
                half.1,
                runs(&traced),
                None,
            )
        );
        scrape.abort();
        untraced_row.store = su_plain.label.clone();
        traced_row.store = su_traced.label.clone();
        drop((plain, traced, sink));
        env.release(&su_plain);
        env.release(&su_traced);
        rows.push(untraced_row);
        rows.push(traced_row);
    }
    let side = |label: &str| format!("relay store:true ({label})");
    let model = &model;
    per_store(env, "stream", side, rows, failures, |env, su| async move {
        let relay = env.relay(&su.url)?;
        let req = Req {
            url: format!("{}/v1/responses", relay.origin()),
            body: Some(responses_body(model, "hi", true, json!([]))),
        };
        let make: Arc<dyn Fn() -> Req + Send + Sync> = Arc::new(move || req.clone());
        let side = format!("relay store:true ({})", su.label);
        let mut row = measure_loop(
            env,
            plan,
            plan.run_length(plan.deltas),
            relay.pid(),
            "stream",
            &side,
            Kind::Relay,
            Expect { mcp_call: false },
            plan.clients,
            make,
            su.redis_pid,
        )
        .await;
        row.store = su.label.clone();
        drop(relay);
        env.release(&su);
        Ok(row)
    })
    .await;
    Ok(())
}

/// The pass-through floor carrying a plain stream of `deltas` deltas at the plan's pace.
async fn measure_floor(
    env: &Env,
    plan: &Plan,
    scenario: &str,
    deltas: usize,
) -> Result<Row, String> {
    measure_plain(env, plan, scenario, deltas, Some(env.floor()?)).await
}

/// The same plain stream with no proxy at all: the clients read the model server directly. What
/// the harness itself adds to "added latency" (its clients and model server share the machine's
/// two cores with what is measured); no CPU column (there is no proxy to account).
async fn measure_direct(
    env: &Env,
    plan: &Plan,
    scenario: &str,
    deltas: usize,
) -> Result<Row, String> {
    measure_plain(env, plan, scenario, deltas, None).await
}

/// A plain Chat Completions stream of `deltas` deltas through `floor`, or straight from the model
/// server when `floor` is `None`.
async fn measure_plain(
    env: &Env,
    plan: &Plan,
    scenario: &str,
    deltas: usize,
    floor: Option<Proc>,
) -> Result<Row, String> {
    let model = env.model(deltas, plan.delay_ms);
    let body = Bytes::from(
        json!({"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": true})
            .to_string(),
    );
    let req = Req {
        url: match &floor {
            Some(f) => format!("{}/v1/chat/completions", f.origin()),
            None => format!("{}/chat/completions", env.upstream_v1),
        },
        body: Some(body),
    };
    let make: Arc<dyn Fn() -> Req + Send + Sync> = Arc::new(move || req.clone());
    let (pid, side) = match &floor {
        Some(f) => (f.pid(), "floor (pass-through)"),
        None => (env.upstream.pid(), "harness alone (no proxy)"),
    };
    let mut row = measure_loop(
        env,
        plan,
        plan.run_length(deltas),
        pid,
        scenario,
        side,
        Kind::Floor,
        Expect { mcp_call: false },
        plan.clients,
        make,
        None,
    )
    .await;
    if floor.is_none() {
        // `pid` was the model server's: its CPU and memory are not a proxy's.
        row.cpu_s = f64::NAN;
        row.peak_rss_kib = None;
    }
    Ok(row)
}

/// The relay's agent loop, after the floor carrying the same text deltas alone: what moving
/// those bytes costs before any MCP or Responses work.
async fn scenario_mcp(env: &Env, plan: &Plan, rows: &mut Vec<Row>) -> Result<(), String> {
    eprintln!(
        "mcp: {} clients, list + 1 call + {} deltas, {} ms apart",
        plan.clients, plan.mcp_deltas, plan.delay_ms
    );
    rows.push(measure_floor(env, plan, "mcp", plan.mcp_deltas).await?);
    let su = env.store(Store::Default).map_err(StoreErr::into_msg)?;
    let relay = env.relay(&su.url)?;
    let tools = json!([{"type": "mcp", "server_label": "bench", "server_url": env.mcp.url, "require_approval": "never"}]);
    let body = responses_body(
        &env.model(plan.mcp_deltas, plan.delay_ms),
        "CALL echo {\"text\":\"hi\"}",
        false,
        tools,
    );
    let req = Req {
        url: format!("{}/v1/responses", relay.origin()),
        body: Some(body),
    };
    let make: Arc<dyn Fn() -> Req + Send + Sync> = Arc::new(move || req.clone());
    let mut row = measure_loop(
        env,
        plan,
        plan.run_length(plan.mcp_deltas),
        relay.pid(),
        "mcp",
        "relay store:false",
        Kind::Relay,
        Expect { mcp_call: true },
        plan.clients,
        make,
        None,
    )
    .await;
    row.store = su.label.clone();
    drop(relay);
    env.release(&su);
    rows.push(row);
    Ok(())
}

async fn scenario_idle(env: &Env, plan: &Plan) -> Result<Row, String> {
    let n = plan.idle_streams;
    let per_conn = plan.idle_per_conn;
    let transport = if per_conn > 0 {
        format!("h2c, {per_conn} streams per connection")
    } else {
        "HTTP/1.1".into()
    };
    eprintln!("idle: {n} streams ({transport}), upstream sends one delta a second");
    let su = env.store(Store::Default).map_err(StoreErr::into_msg)?;
    // Every idle stream is a run: room for all of them (the relay's default is 1,024).
    let relay = env.relay_with(
        &su.url,
        &["--max-concurrent-runs".into(), (n + 64).to_string()],
    )?;
    let pid = relay.pid();
    let url = format!("{}/v1/responses", relay.origin());
    // Warm the relay (runtime threads, pools, allocator arenas) before the baseline.
    let warm = Arc::new(Stats::default());
    let http1 = load::http1_client(8);
    let warm_req = Req {
        url: url.clone(),
        body: Some(responses_body(&env.model(5, 0), "hi", false, json!([]))),
    };
    for _ in 0..20 {
        if let Err(e) = load::one_run(&http1, &warm_req, Kind::Relay, &warm, || {}).await {
            return Err(format!("warm-up run: {e}"));
        }
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let base = procs::status_kib(pid, "VmRSS").ok_or("cannot read the relay's VmRSS")?;
    let st = Arc::new(Stats::default());
    // Each stream lasts at most this many seconds (one delta a second): longer than the ramp and hold.
    let life = (plan.idle_ramp_timeout + plan.idle_hold).as_secs() + 30;
    let req = Req {
        url,
        body: Some(responses_body(
            &env.model(life as usize, 1000),
            "hi",
            false,
            json!([]),
        )),
    };
    let clients: Vec<reqwest::Client> = if per_conn > 0 {
        (0..n.div_ceil(per_conn))
            .map(|_| load::http2_client())
            .collect()
    } else {
        vec![load::http1_client(n)]
    };
    let opening = Arc::new(tokio::sync::Semaphore::new(128));
    let t_ramp = Instant::now();
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let http = clients[i.checked_div(per_conn).unwrap_or(0)].clone();
            let (req, st, opening) = (req.clone(), st.clone(), opening.clone());
            tokio::spawn(async move {
                let Ok(permit) = opening.acquire_owned().await else {
                    return;
                };
                let mut permit = Some(permit);
                let st2 = st.clone();
                let r = load::one_run(&http, &req, Kind::Relay, &st, move || {
                    permit.take();
                    st2.opened.fetch_add(1, Ordering::Relaxed);
                })
                .await;
                if let Err(e) = r {
                    st.error(e);
                }
            })
        })
        .collect();
    let ramp_deadline = Instant::now() + plan.idle_ramp_timeout;
    while Instant::now() < ramp_deadline {
        let (opened, errors) = (
            st.opened.load(Ordering::Relaxed),
            st.errors.load(Ordering::Relaxed),
        );
        if opened + errors >= n as u64 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let ramp = t_ramp.elapsed();
    let opened = st.opened.load(Ordering::Relaxed);
    eprintln!(
        "  {opened} of {n} streams open after {:.1} s ({} errors)",
        ramp.as_secs_f64(),
        st.errors.load(Ordering::Relaxed)
    );
    let (ev0, cpu0) = (st.events.load(Ordering::Relaxed), procs::cpu_ticks(pid));
    st.measuring.store(true, Ordering::Relaxed);
    let t0 = Instant::now();
    tokio::time::sleep(plan.idle_hold).await;
    st.measuring.store(false, Ordering::Relaxed);
    let cpu1 = procs::cpu_ticks(pid);
    let secs = t0.elapsed().as_secs_f64();
    let ev1 = st.events.load(Ordering::Relaxed);
    let rss = procs::status_kib(pid, "VmRSS");
    let fds = procs::open_fds(pid);
    let still_open = st.opened.load(Ordering::Relaxed);
    for t in &tasks {
        t.abort();
    }
    for t in tasks {
        let _ = tokio::time::timeout(Duration::from_secs(5), t).await;
    }
    eprintln!(
        "  relay RSS {} KiB before, {} KiB with the streams open; {} descriptors",
        base,
        rss.unwrap_or(0),
        fds.unwrap_or(0)
    );
    let mut row = finish_row(
        &st,
        "idle",
        &format!("relay ({transport})"),
        n,
        secs,
        ev1 - ev0,
        0,
        cpu0,
        cpu1,
        env.ticks,
        pid,
    );
    row.open_streams = Some(still_open);
    row.rss_per_stream_kib = rss
        .filter(|_| still_open > 0)
        .map(|r| r.saturating_sub(base) as f64 / still_open as f64);
    row.store = su.label.clone();
    drop(relay);
    env.release(&su);
    Ok(row)
}

async fn scenario_replay(env: &Env, plan: &Plan, rows: &mut Vec<Row>, failures: &mut Vec<String>) {
    let side = |label: &str| format!("relay GET ?stream=true ({label})");
    per_store(env, "replay", side, rows, failures, |env, su| async move {
        let relay = env.relay(&su.url)?;
        let r = replay_one(env, plan, &relay, &su).await;
        drop(relay);
        env.release(&su);
        r
    })
    .await;
}

/// Creates the stored runs through `relay`, then re-streams them with `plan.replay_clients` readers.
async fn replay_one(env: &Env, plan: &Plan, relay: &Proc, su: &StoreUse) -> Result<Row, String> {
    eprintln!(
        "replay: {} stored runs of {} deltas, {} readers, --store {}",
        plan.replay_runs, plan.deltas, plan.replay_clients, su.label
    );
    let base = relay.origin();
    let create = Req {
        url: format!("{base}/v1/responses"),
        body: Some(responses_body(
            &env.model(plan.deltas, 0),
            "hi",
            true,
            json!([]),
        )),
    };
    let ids = Arc::new(std::sync::Mutex::new(Vec::new()));
    let st = Arc::new(Stats::default());
    let http = load::http1_client(16);
    let per_task = plan.replay_runs.div_ceil(16);
    let tasks: Vec<_> = (0..16)
        .map(|_| {
            let (http, create, ids, st) = (http.clone(), create.clone(), ids.clone(), st.clone());
            tokio::spawn(async move {
                for _ in 0..per_task {
                    match load::one_run(&http, &create, Kind::Relay, &st, || {}).await {
                        Ok(out) => match out.id {
                            Some(id) if out.completed => ids.lock().expect("lock").push(id),
                            _ => st.error("a stored run did not complete or had no id".into()),
                        },
                        Err(e) => st.error(e),
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        let _ = tokio::time::timeout(Duration::from_secs(120), t).await;
    }
    if st.errors.load(Ordering::Relaxed) > 0 {
        return Err(format!(
            "creating stored runs: {}",
            st.first_error
                .lock()
                .expect("lock")
                .clone()
                .unwrap_or_default()
        ));
    }
    let ids: Vec<String> = std::mem::take(&mut *ids.lock().expect("lock"));
    if ids.is_empty() {
        return Err("no stored run to replay".into());
    }
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let ids = Arc::new(ids);
    let make: Arc<dyn Fn() -> Req + Send + Sync> = Arc::new(move || {
        let i = next.fetch_add(1, Ordering::Relaxed) % ids.len();
        Req {
            url: format!("{base}/v1/responses/{}?stream=true", ids[i]),
            body: None,
        }
    });
    let side = format!("relay GET ?stream=true ({})", su.label);
    let mut row = measure_loop(
        env,
        plan,
        Duration::ZERO,
        relay.pid(),
        "replay",
        &side,
        Kind::Count,
        Expect { mcp_call: false },
        plan.replay_clients,
        make,
        su.redis_pid,
    )
    .await;
    row.store = su.label.clone();
    Ok(row)
}

fn fmt_opt(v: Option<f64>, prec: usize) -> String {
    match v {
        Some(x) if x.is_finite() => format!("{x:.prec$}"),
        _ => "–".into(),
    }
}

/// One target line: `Some(ok)` judged, `None` N/A; `info` lines are printed but never judged.
struct Target {
    what: String,
    ok: Option<bool>,
    got: String,
    info: bool,
}

/// Prints the table, the ratios and the targets; true when every target passed.
fn report(rows: &[Row], plan: &Plan, env: &Env, took: Duration) -> bool {
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
    let measured = |r: &&Row| r.na.is_none();
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
            println!(
                "- {}: {} runs, CPU {} ms per run, run time p50 {} / p99 {} ms{held}",
                r.side,
                r.runs,
                fmt_opt(r.cpu_ms_per_run(), 3),
                fmt_opt(q(0.5), 1),
                fmt_opt(q(0.99), 1),
            );
        }
    }
    let find = |scenario: &str, side_prefix: &str| {
        rows.iter()
            .filter(measured)
            .find(|r| r.scenario == scenario && r.side.starts_with(side_prefix))
    };
    // The store targets name SQLite: they are judged on the SQLite rows; other stores' rows are
    // shown beside them. With one explicit non-SQLite `--store`, that store's row is judged (noted).
    let judged_store = |scenario: &str, side_prefix: &str| -> Option<String> {
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
    };
    let floor = find("stream", "floor");
    let mut targets: Vec<Target> = Vec::new();
    if let Some(f) = floor {
        println!();
        println!("Ratios to the floor (same upstream, same clients, same run):");
        let judged = judged_store("stream", "relay store:true");
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
                let beside = find("stream", UNTRACED).and_then(Row::cpu_ms_per_1k);
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
                let sse = find("stream", SSE_BESIDE).and_then(Row::cpu_ms_per_1k);
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
    }
    if let Some(r) = find("stream", "relay store:false") {
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
        let harness_p99 = find("stream", "harness alone")
            .and_then(|h| h.lat_q(0.99))
            .map(|p| format!(", harness alone {p} µs"))
            .unwrap_or_default();
        let got = format!(
            "{} µs{floor_p99}{harness_p99}",
            p99.map(|p| p.to_string()).unwrap_or("–".into())
        );
        targets.push(Target {
            what,
            ok,
            got,
            info: false,
        });
    }
    if let Some(r) = find("mcp", "relay") {
        let v = r.cpu_ms_per_run();
        let what = "relay CPU per mcp run (list from pool, 1 call, 50 deltas) < 1 ms".into();
        let floor = find("mcp", "floor").and_then(Row::cpu_ms_per_run);
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
    if let Some(r) = find("idle", "relay") {
        let open = r.open_streams.unwrap_or(0);
        let per = r.rss_per_stream_kib;
        let ok = per.map(|p| open >= 10_000 && p < 64.0);
        let what = "idle: >= 10,000 open streams, relay RSS < 64 KiB per stream".into();
        targets.push(Target {
            what,
            ok,
            got: format!("{open} open, {} KiB per stream", fmt_opt(per, 1)),
            info: false,
        });
    }
    let judged = judged_store("replay", "relay");
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
    println!();
    println!(
        "Targets (issues 8 and 28; the store targets are judged on SQLite, other stores shown as info, except Redis memory per stored run){}:",
        if plan.smoke {
            " — smoke mode: reported, not enforced"
        } else {
            ""
        }
    );
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
