//! The `idle` scenario: thousands of open streams on one relay (the model sends one delta a
//! second), opened at most 128 at a time over h2c or HTTP/1.1, then held while the relay's CPU,
//! resident memory per stream and descriptors are read.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::env::{Env, Store, StoreErr};
use crate::load::{self, Kind, Req, Stats};
use crate::measure::{Row, Window, finish_row, responses_body};
use crate::options::Plan;
use crate::procs;

/// Runs the scenario on one relay with the default store.
pub async fn scenario(env: &Env, plan: &Plan) -> Result<Row, String> {
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
    warm_up(env, &url).await?;
    let base = procs::status_kib(pid, "VmRSS").ok_or("cannot read the relay's VmRSS")?;
    let st = Arc::new(Stats::default());
    let tasks = open_streams(env, plan, url, &st).await;
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
        Window {
            scenario: "idle",
            side: &format!("relay ({transport})"),
            clients: n,
            pid,
            secs,
            events: ev1 - ev0,
            runs: 0,
            cpu: (cpu0, cpu1),
        },
        env.ticks,
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

/// Warms the relay (runtime threads, pools, allocator arenas) with 20 short runs, before its
/// memory is read as the baseline.
async fn warm_up(env: &Env, url: &str) -> Result<(), String> {
    let warm = Arc::new(Stats::default());
    let http1 = load::http1_client(8);
    let warm_req = Req {
        url: url.to_string(),
        body: Some(responses_body(&env.model(5, 0), "hi", false, json!([]))),
    };
    for _ in 0..20 {
        if let Err(e) = load::one_run(&http1, &warm_req, Kind::Relay, &warm, || {}).await {
            return Err(format!("warm-up run: {e}"));
        }
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    Ok(())
}

/// Opens `plan.idle_streams` streams, at most 128 opening at once, and waits until all are open
/// (or failed) or the ramp times out. Each stream is a task that reads until aborted.
async fn open_streams(
    env: &Env,
    plan: &Plan,
    url: String,
    st: &Arc<Stats>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let (n, per_conn) = (plan.idle_streams, plan.idle_per_conn);
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
    tasks
}
