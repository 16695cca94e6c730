//! The command line's benchmark options and the plan they make: every count and duration of a
//! run, with the smoke defaults applied and each value clamped to a sane range.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Scenario {
    Stream,
    Mcp,
    Idle,
    Replay,
    /// Many short stored runs, then stored and `store: false` runs on the same relay (issue 28).
    StoreScale,
    /// The relay with `--upstream-api anthropic` beside the relay with the default Chat
    /// Completions upstream, in the same windows: plain and MCP runs (issue 37).
    UpstreamKinds,
    /// This build's relay beside `--compare-relay` (another revision's), in the same windows:
    /// plain, stored and MCP runs (`bash scripts/bench.sh --compare REV`). Not part of `all`.
    Compare,
    /// The relay beside its peers (SMG and agentic-api, from `--peers-venv`) and the floor, in
    /// the same windows, the clients split evenly: plain, stored and MCP runs, all behind the
    /// same stamped Responses upstream (`bash scripts/bench.sh --scenario peers`). Not part of `all`.
    Peers,
    All,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum UpstreamKind {
    /// The benchmark's own server: stamps every delta with its send time (latency measurable).
    Stamp,
    /// The project's `fake-upstream` (no stamps: latency columns stay empty).
    Fake,
}

#[derive(Args, Debug, Clone)]
pub struct Opts {
    /// Which scenario to run.
    #[arg(long, value_enum, default_value_t = Scenario::All)]
    pub scenario: Scenario,
    /// A few seconds per scenario with small counts; reports targets but fails only on errors.
    #[arg(long)]
    pub smoke: bool,
    /// Concurrent streaming clients in `stream`, `mcp`, `upstream-kinds` and `compare` (the last
    /// two split them in half) [default: 256, smoke 8].
    #[arg(long)]
    pub clients: Option<usize>,
    /// Measurement window per phase, seconds [default: 10, smoke 1.5].
    #[arg(long)]
    pub seconds: Option<f64>,
    /// Text deltas per run in `stream` and `replay` [default: 200, smoke 20].
    #[arg(long)]
    pub deltas: Option<usize>,
    /// Text deltas after the tool call in `mcp`.
    #[arg(long, default_value_t = 50)]
    pub mcp_deltas: usize,
    /// Milliseconds between upstream deltas in `stream` and `mcp` (0: as fast as possible) [default: 10].
    #[arg(long)]
    pub delay_ms: Option<u64>,
    /// Open streams in `idle` (upstream sends one delta a second) [default: 10000, smoke 200].
    #[arg(long)]
    pub idle_streams: Option<usize>,
    /// Streams per client connection in `idle`: >0 is h2c with that many streams per connection,
    /// 0 is HTTP/1.1 (one connection per stream; needs 2 descriptors per stream in the relay).
    #[arg(long, default_value_t = 100)]
    pub idle_streams_per_conn: usize,
    /// Seconds all idle streams are held open while CPU and memory are read [default: 5, smoke 1.5].
    #[arg(long)]
    pub idle_seconds: Option<f64>,
    /// One store for every relay (`sqlite:PATH`, `redis://HOST:PORT/DB`, `memory`). Without it,
    /// the `stream` scenario's `store: true` phase and `replay` run twice: with SQLite (a fresh file
    /// in a temp dir) and with Redis (a `redis-server` the benchmark starts on a loopback port, or
    /// an N/A row when none is installed); the other phases use a fresh SQLite file.
    #[arg(long)]
    pub store: Option<String>,
    /// Concurrent readers in `replay` [default: 32, smoke 4].
    #[arg(long)]
    pub replay_clients: Option<usize>,
    /// Stored runs created (200 deltas each) and then replayed in `replay` [default: 256, smoke 16].
    #[arg(long)]
    pub replay_runs: Option<usize>,
    /// Short stored runs (20 deltas) that fill the store before `store-scale` measures
    /// [default: 20000, smoke 300].
    #[arg(long)]
    pub scale_runs: Option<usize>,
    /// Concurrent clients of `store-scale`'s measured phases [default: 64, smoke 8].
    #[arg(long)]
    pub scale_clients: Option<usize>,
    /// Model server the relay and the floor talk to.
    #[arg(long, value_enum, default_value_t = UpstreamKind::Stamp)]
    pub upstream: UpstreamKind,
    /// Do not run `cargo build` for the sibling binaries (responses-relay, mcp-test-server, fake-upstream).
    #[arg(long)]
    pub no_build: bool,
    /// An environment variable for every relay child, `KEY=VALUE` (repeatable), for experiments
    /// such as `LD_PRELOAD=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2`.
    #[arg(long = "relay-env", value_name = "KEY=VALUE")]
    pub relay_env: Vec<String>,
    /// `compare`: the other relay executable (another revision's `responses-relay`).
    #[arg(long, value_name = "PATH")]
    pub compare_relay: Option<PathBuf>,
    /// `compare`: this build's relay executable (default: the one beside `bench`).
    /// `scripts/bench.sh --compare` builds it the way it builds the other, so that the two
    /// differ only by their source.
    #[arg(long, value_name = "PATH")]
    pub this_relay: Option<PathBuf>,
    /// `compare`: what to call the other relay in the table (its revision).
    #[arg(long, default_value = "other")]
    pub compare_label: String,
    /// `compare`: flags for the other relay (split on spaces), e.g. this build with limits
    /// configured, to measure what they cost (`bash scripts/bench.sh --compare-limits`).
    #[arg(
        long,
        value_name = "FLAGS",
        allow_hyphen_values = true,
        default_value = ""
    )]
    pub compare_args: String,
    /// `peers`: the Python virtual environment holding `smg` and `agentic-server` (made by
    /// `scripts/bench.sh`); without it the peers' rows say they are not installed.
    #[arg(long, value_name = "DIR")]
    pub peers_venv: Option<PathBuf>,
    /// `peers`: clients of the plain and stored workloads, split evenly among the gateways
    /// [default: 128, smoke 8].
    #[arg(long)]
    pub peers_clients: Option<usize>,
    /// `peers`: clients of the MCP workload, split evenly among the gateways [default: 32, smoke 8].
    #[arg(long)]
    pub peers_mcp_clients: Option<usize>,
    /// `upstream-kinds`, `compare` and `peers`: repetitions of each workload, the gateways
    /// started in rotating order [default: 2, smoke 1].
    #[arg(long)]
    pub reps: Option<usize>,
    /// Directory for the children's stderr logs [default: $TMPDIR/relay-bench].
    #[arg(long)]
    pub log_dir: Option<PathBuf>,
}

/// Settings after the smoke defaults are applied.
#[derive(Clone)]
pub struct Plan {
    pub smoke: bool,
    pub clients: usize,
    pub window: Duration,
    pub warmup: Duration,
    pub deltas: usize,
    pub mcp_deltas: usize,
    pub delay_ms: u64,
    pub idle_streams: usize,
    pub idle_per_conn: usize,
    pub idle_hold: Duration,
    pub idle_ramp_timeout: Duration,
    pub replay_clients: usize,
    pub replay_runs: usize,
    pub scale_runs: usize,
    pub scale_clients: usize,
    pub reps: usize,
    pub peers_clients: usize,
    pub peers_mcp_clients: usize,
}

impl Plan {
    /// A text run's nominal length: `deltas` deltas `delay_ms` apart.
    pub fn run_length(&self, deltas: usize) -> Duration {
        Duration::from_millis(self.delay_ms.saturating_mul(deltas as u64))
    }

    pub fn new(o: &Opts) -> Plan {
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
            peers_clients: o
                .peers_clients
                .unwrap_or(if s { 8 } else { 128 })
                .clamp(1, 5000),
            peers_mcp_clients: o
                .peers_mcp_clients
                .unwrap_or(if s { 8 } else { 32 })
                .clamp(1, 5000),
            reps: o.reps.unwrap_or(if s { 1 } else { 2 }).clamp(1, 100),
        }
    }
}
