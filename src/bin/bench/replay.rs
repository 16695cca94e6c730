//! The `replay` scenario: stored runs created through a relay, then re-streamed
//! (`GET /v1/responses/{id}?stream=true`) by concurrent readers, once per store.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde_json::json;

use crate::env::{Env, StoreUse};
use crate::load::{self, Expect, Kind, Req, Stats};
use crate::measure::{Phase, Row, measure_loop, per_store, responses_body};
use crate::options::Plan;
use crate::procs::Proc;

pub async fn scenario(env: &Env, plan: &Plan, rows: &mut Vec<Row>, failures: &mut Vec<String>) {
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
pub async fn replay_one(
    env: &Env,
    plan: &Plan,
    relay: &Proc,
    su: &StoreUse,
) -> Result<Row, String> {
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
        Phase {
            scenario: "replay",
            side: &side,
            pid: relay.pid(),
            kind: Kind::Count,
            expect: Expect { mcp_call: false },
            clients: plan.replay_clients,
            spread: Duration::ZERO,
            make,
            also: su.redis_pid,
        },
    )
    .await;
    row.store = su.label.clone();
    Ok(row)
}
