//! Measuring one phase: a table row, the looping clients driven against a process for the
//! plan's window (after a warmup), the CPU ticks, memory and samples read around that window,
//! and the per-store loop that gives a store not installed an N/A row.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use bytes::Bytes;
use serde_json::json;

use crate::env::{Env, StoreErr, StoreUse};
use crate::load::{self, Expect, Kind, Req, Stats};
use crate::options::Plan;
use crate::procs::{self};

/// One line of the table.
#[derive(Default)]
pub struct Row {
    pub scenario: String,
    pub side: String,
    /// The store the relay ran with (`sqlite`, `redis`, `memory`); empty for the floor.
    pub store: String,
    /// Not measured, and why (`redis-server not installed`).
    pub na: Option<String>,
    /// CPU seconds of the benchmark's own `redis-server` over the window.
    pub store_cpu_s: Option<f64>,
    pub clients: usize,
    pub secs: f64,
    pub runs: u64,
    pub events: u64,
    pub cpu_s: f64,
    pub lat: Vec<u32>,
    pub ttfe: Vec<u32>,
    /// Whole-run times (µs), sorted.
    pub run_us: Vec<u32>,
    /// `store-scale`: bytes the store holds per kept run (SQLite: every file of the database as
    /// it lies a few seconds after the fill, no checkpoint forced; Redis: `INFO memory`
    /// `used_memory`), over the runs of the fill.
    pub store_bytes_per_run: Option<f64>,
    /// `store-scale`, SQLite: those files over the database after a full checkpoint.
    pub store_files_to_checkpointed: Option<f64>,
    pub peak_rss_kib: Option<u64>,
    pub rss_per_stream_kib: Option<f64>,
    pub open_streams: Option<u64>,
    pub errors: u64,
    pub first_error: Option<String>,
    /// How busy the whole machine was over the window (0..=1 of all its cores; every process,
    /// the harness and anything else on the machine included).
    pub machine_busy: Option<f64>,
    /// How much of the machine the benchmark's own processes (itself and every child) used over
    /// the window (0..=1 of all its cores); read by the scenarios that measure it.
    pub bench_busy: Option<f64>,
}

impl Row {
    pub fn events_per_s(&self) -> f64 {
        self.events as f64 / self.secs.max(1e-9)
    }
    pub fn cpu_ms_per_1k(&self) -> Option<f64> {
        (self.events > 0).then(|| self.cpu_s * 1000.0 / (self.events as f64 / 1000.0))
    }
    pub fn cpu_ms_per_run(&self) -> Option<f64> {
        (self.runs > 0).then(|| self.cpu_s * 1000.0 / self.runs as f64)
    }
    pub fn lat_q(&self, q: f64) -> Option<u32> {
        load::quantile(&self.lat, q)
    }

    /// Adds another measurement of the same load to this row (its time, runs, events, CPU and
    /// samples), as if both windows were one.
    pub fn merge(&mut self, o: Row) {
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
        for (mine, theirs) in [
            (&mut self.machine_busy, o.machine_busy),
            (&mut self.bench_busy, o.bench_busy),
        ] {
            *mine = match (*mine, theirs) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            };
        }
        self.errors += o.errors;
        self.first_error = self.first_error.take().or(o.first_error);
    }
}

pub fn responses_body(model: &str, input: &str, store: bool, tools: serde_json::Value) -> Bytes {
    let mut b = json!({"model": model, "input": input, "stream": true, "store": store});
    if tools.as_array().is_some_and(|t| !t.is_empty()) {
        b["tools"] = tools;
    }
    Bytes::from(b.to_string())
}

/// One measured phase: the process measured and the clients that load it.
pub struct Phase<'a> {
    pub scenario: &'a str,
    pub side: &'a str,
    /// The process whose CPU (its whole process tree's) and peak memory are read.
    pub pid: u32,
    pub kind: Kind,
    pub expect: Expect,
    pub clients: usize,
    /// The clients' first runs are spread evenly over this (one run's nominal length).
    pub spread: Duration,
    /// Each run's request.
    pub make: Arc<dyn Fn() -> Req + Send + Sync>,
    /// Another process whose CPU is read over the same window (the benchmark's redis-server).
    pub also: Option<u32>,
}

/// Runs the phase's looping clients and measures its process over the plan's window. The
/// clients' first runs are spread evenly over `spread`, and the warmup lasts that much longer,
/// so the window sees a steady state rather than a synchronized herd.
pub async fn measure_loop(env: &Env, plan: &Plan, phase: Phase<'_>) -> Row {
    let Phase {
        scenario,
        side,
        pid,
        kind,
        expect,
        clients,
        spread,
        make,
        also,
    } = phase;
    let st = Arc::new(Stats::default());
    let http = load::http1_client(clients);
    let warmup = plan.warmup + spread;
    let hard_deadline = Instant::now() + warmup + plan.window + Duration::from_secs(60);
    let tasks: Vec<_> = (0..clients)
        .map(|i| {
            let start_after = spread.mul_f64(i as f64 / clients as f64);
            let client = load::Looper {
                http: http.clone(),
                make: make.clone(),
                kind,
                expect,
                st: st.clone(),
            };
            tokio::spawn(load::loop_runs(
                client,
                start_after,
                hard_deadline,
                10_000_000,
            ))
        })
        .collect();
    tokio::time::sleep(warmup).await;
    let (ev0, runs0, cpu0) = (
        st.events.load(Ordering::Relaxed),
        st.runs.load(Ordering::Relaxed),
        procs::tree_cpu_ticks(pid),
    );
    let machine0 = procs::machine_ticks();
    let also0 = also.and_then(procs::cpu_ticks);
    st.measuring.store(true, Ordering::Relaxed);
    let t0 = Instant::now();
    tokio::time::sleep(plan.window).await;
    st.measuring.store(false, Ordering::Relaxed);
    let cpu1 = procs::tree_cpu_ticks(pid);
    let machine1 = procs::machine_ticks();
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
        Window {
            scenario,
            side,
            clients,
            pid,
            secs,
            events: ev1 - ev0,
            runs: runs1 - runs0,
            cpu: (cpu0, cpu1),
        },
        env.ticks,
    );
    row.machine_busy = machine0.zip(machine1).and_then(|((b0, t0), (b1, t1))| {
        (t1 > t0).then(|| b1.saturating_sub(b0) as f64 / (t1 - t0) as f64)
    });
    row.store_cpu_s = also0
        .zip(also1)
        .map(|(a, b)| b.saturating_sub(a) as f64 / env.ticks);
    row
}

/// What one measurement window counted.
pub struct Window<'a> {
    pub scenario: &'a str,
    pub side: &'a str,
    pub clients: usize,
    /// The process measured (its peak RSS is read now).
    pub pid: u32,
    pub secs: f64,
    pub events: u64,
    pub runs: u64,
    /// The process's CPU ticks at the window's start and end.
    pub cpu: (Option<u64>, Option<u64>),
}

/// The row of a window: its counts, its CPU in seconds (`ticks` per second), and the samples
/// taken out of `st`, sorted. Prints the added latency's whole distribution to stderr.
pub fn finish_row(st: &Stats, w: Window<'_>, ticks: f64) -> Row {
    let Window {
        scenario,
        side,
        clients,
        pid,
        secs,
        events,
        runs,
        cpu: (cpu0, cpu1),
    } = w;
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

/// The row of a store that cannot be measured here.
pub fn na_row(scenario: &str, side: &str, store: &str, why: String) -> Row {
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
pub async fn per_store<'a, F, Fut>(
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
