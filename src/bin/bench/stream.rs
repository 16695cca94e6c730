//! The `stream` scenario: plain text runs through the harness alone, the pass-through floor and
//! the relay (`store: false`), then side by side WebSocket against SSE and traced against
//! untraced, then `store: true` once per store. The floor and harness rows are also what the
//! `mcp` scenario compares with.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::json;

use crate::env::{Env, Store, StoreErr};
use crate::load::{Expect, Kind, Req};
use crate::measure::{Phase, Row, measure_loop, per_store, responses_body};
use crate::options::Plan;
use crate::procs::Proc;

/// The `stream` row of the relay exporting traces with its metrics scraped, and the row of the
/// relay measured beside it (at the same time, with the other half of the clients).
pub const TRACED: &str = "relay traced store:false (OTLP, /metrics)";
pub const UNTRACED: &str = "relay untraced, beside it, store:false";
pub const SOCKET: &str = "relay websocket store:false";
pub const SSE_BESIDE: &str = "relay sse, beside the socket one, store:false";

/// Clients of the untraced relay when `clients` are split between it and the traced one.
pub fn plain_clients(clients: usize) -> usize {
    clients.div_ceil(2)
}

/// Runs the scenario; its `store: true` phase once per store.
pub async fn scenario(
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
    relay_unstored(env, plan, &model, rows).await?;
    socket_beside_sse(env, plan, &model, rows).await?;
    traced_beside_untraced(env, plan, &model, rows).await?;
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
            Phase {
                scenario: "stream",
                side: &side,
                pid: relay.pid(),
                kind: Kind::Relay,
                expect: Expect { mcp_call: false },
                clients: plan.clients,
                spread: plan.run_length(plan.deltas),
                make,
                also: su.redis_pid,
            },
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

/// The relay alone, `store: false`, with every client.
async fn relay_unstored(
    env: &Env,
    plan: &Plan,
    model: &str,
    rows: &mut Vec<Row>,
) -> Result<(), String> {
    let su = env.store(Store::Default).map_err(StoreErr::into_msg)?;
    let relay = env.relay(&su.url)?;
    let req = Req {
        url: format!("{}/v1/responses", relay.origin()),
        body: Some(responses_body(model, "hi", false, json!([]))),
    };
    let make: Arc<dyn Fn() -> Req + Send + Sync> = Arc::new(move || req.clone());
    let mut row = measure_loop(
        env,
        plan,
        Phase {
            scenario: "stream",
            side: "relay store:false",
            pid: relay.pid(),
            kind: Kind::Relay,
            expect: Expect { mcp_call: false },
            clients: plan.clients,
            spread: plan.run_length(plan.deltas),
            make,
            also: None,
        },
    )
    .await;
    row.store = su.label.clone();
    rows.push(row);
    drop(relay);
    env.release(&su);
    Ok(())
}

/// The same runs over WebSocket mode (one socket per client, each response a
/// `response.create` frame) measured side by side with SSE: two relays at once, half the
/// clients each, so both see the same machine (one after the other, rows of unchanged
/// code drifted 25-30% within a run on a shared machine).
async fn socket_beside_sse(
    env: &Env,
    plan: &Plan,
    model: &str,
    rows: &mut Vec<Row>,
) -> Result<(), String> {
    let (su_sse, su_ws) = (
        env.store(Store::Default).map_err(StoreErr::into_msg)?,
        env.store(Store::Default).map_err(StoreErr::into_msg)?,
    );
    let (sse, ws) = (env.relay(&su_sse.url)?, env.relay(&su_ws.url)?);
    let sse_req = Req {
        url: format!("{}/v1/responses", sse.origin()),
        body: Some(responses_body(model, "hi", false, json!([]))),
    };
    let mut frame: serde_json::Value =
        serde_json::from_slice(&responses_body(model, "hi", false, json!([])))
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
            Phase {
                scenario: "stream",
                side: SSE_BESIDE,
                pid: sse.pid(),
                kind: Kind::Relay,
                expect: Expect { mcp_call: false },
                clients: plain_clients(plan.clients),
                spread: plan.run_length(plan.deltas),
                make: Arc::new(move || sse_req.clone()),
                also: None,
            }
        ),
        measure_loop(
            env,
            plan,
            Phase {
                scenario: "stream",
                side: SOCKET,
                pid: ws.pid(),
                kind: Kind::Socket,
                expect: Expect { mcp_call: false },
                clients: plan.clients - plain_clients(plan.clients),
                spread: plan.run_length(plan.deltas),
                make: Arc::new(move || ws_req.clone()),
                also: None,
            }
        )
    );
    sse_row.store = su_sse.label.clone();
    ws_row.store = su_ws.label.clone();
    drop((sse, ws));
    env.release(&su_sse);
    env.release(&su_ws);
    rows.push(sse_row);
    rows.push(ws_row);
    Ok(())
}

/// What observability costs: two relays at once, half the clients each, one exporting
/// traces to a local sink with its /metrics scraped every second, the other not. Measured
/// in the same window, both see the same machine (other load on it moves both alike).
async fn traced_beside_untraced(
    env: &Env,
    plan: &Plan,
    model: &str,
    rows: &mut Vec<Row>,
) -> Result<(), String> {
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
            body: Some(responses_body(model, "hi", false, json!([]))),
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
            Phase {
                scenario: "stream",
                side: UNTRACED,
                pid: plain.pid(),
                kind: Kind::Relay,
                expect: Expect { mcp_call: false },
                clients: half.0,
                spread: plan.run_length(plan.deltas),
                make: runs(&plain),
                also: None,
            }
        ),
        measure_loop(
            env,
            plan,
            Phase {
                scenario: "stream",
                side: TRACED,
                pid: traced.pid(),
                kind: Kind::Relay,
                expect: Expect { mcp_call: false },
                clients: half.1,
                spread: plan.run_length(plan.deltas),
                make: runs(&traced),
                also: None,
            }
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
    Ok(())
}

/// The pass-through floor carrying a plain stream of `deltas` deltas at the plan's pace.
pub async fn measure_floor(
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
pub async fn measure_direct(
    env: &Env,
    plan: &Plan,
    scenario: &str,
    deltas: usize,
) -> Result<Row, String> {
    measure_plain(env, plan, scenario, deltas, None).await
}

/// A plain Chat Completions stream of `deltas` deltas through `floor`, or straight from the model
/// server when `floor` is `None`.
pub async fn measure_plain(
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
        Phase {
            scenario,
            side,
            pid,
            kind: Kind::Floor,
            expect: Expect { mcp_call: false },
            clients: plan.clients,
            spread: plan.run_length(deltas),
            make,
            also: None,
        },
    )
    .await;
    if floor.is_none() {
        // `pid` was the model server's: its CPU and memory are not a proxy's.
        row.cpu_s = f64::NAN;
        row.peak_rss_kib = None;
    }
    Ok(row)
}
