//! The Redis store when Redis misbehaves mid-run (issue 36, point 4): asleep (`DEBUG SLEEP`) or
//! paused (`CLIENT PAUSE`). Every stream ends with exactly one terminal event, `/healthz` keeps
//! answering (`degraded` while Redis does not), new stored runs get a clear 503 and unstored
//! ones run, and the relay reconnects by itself. (Redis stopped and restarted: `redis`.) A run
//! whose keys Redis dropped before the relay's expiry sweep leaves the indexes all the same.

use std::time::Duration;

use serde_json::{Value, json};

use crate::redis::{read_events, relay_over, rest_of};
use crate::support::*;

/// `GET /healthz`: its status and body.
async fn health(relay: &Relay) -> (u16, Value) {
    tokio::time::timeout(Duration::from_secs(5), relay.get("/healthz"))
        .await
        .expect("/healthz answers while Redis does not")
}

/// Sends `args` to the Redis on `port` from a thread of its own (it may block for a while).
fn in_background(port: u16, args: &'static [&'static str]) -> tokio::task::JoinHandle<()> {
    tokio::task::spawn_blocking(move || {
        let mut c = plain_connection(port);
        let mut cmd = ::redis::cmd(args[0]);
        for a in &args[1..] {
            cmd.arg(*a);
        }
        let _: ::redis::Value = cmd.query(&mut c).unwrap();
    })
}

#[tokio::test]
async fn redis_asleep_mid_run_ends_the_stream_once_healthz_says_degraded_and_the_relay_recovers() {
    let up = upstream().await;
    let server = RedisServer::start_with(RedisServer::free_port(), "--enable-debug-command yes");
    let relay = relay_over(&up, &server.url(0)).await;
    let mut live = relay
        .send(&json!({"model": "fake-model?deltas=400&delay_ms=10", "input": "x", "stream": true}))
        .await;
    let seen = read_events(&mut live, 6).await;
    assert_eq!(health(&relay).await, (200, json!({"status": "ok"})));
    let asleep = in_background(server.port, &["DEBUG", "SLEEP", "7"]);
    tokio::time::sleep(Duration::from_millis(200)).await;

    // While Redis does not answer: /healthz answers, degraded; a stored run is a clear 503
    // within about a second; an unstored one runs.
    let (status, h) = health(&relay).await;
    assert_eq!(
        (status, h["status"].as_str()),
        (200, Some("degraded")),
        "{h}"
    );
    let (status, err) = relay
        .create(&json!({"model": "fake-model", "input": "x"}))
        .await;
    assert_eq!(
        (status, err["error"]["code"].as_str()),
        (503, Some("store_unavailable")),
        "{err}"
    );
    let (status, r) = relay
        .create(&json!({"model": "fake-model", "input": "x", "store": false}))
        .await;
    assert_eq!(
        (status, r["status"].as_str()),
        (200, Some("completed")),
        "{r}"
    );
    // The stream whose events could not be kept ends, once.
    let body = rest_of(live, seen).await;
    let folded = check_events(&body.events);
    assert_eq!(folded["status"], "failed", "{folded}");
    let terminal = kinds(&body.events)
        .iter()
        .filter(|k| k.as_str() == "response.failed")
        .count();
    assert_eq!(terminal, 1);

    asleep.await.unwrap();
    // Awake again: the relay reconnected by itself.
    let mut kept = None;
    for _ in 0..100 {
        let (status, r) = relay
            .create(&json!({"model": "fake-model", "input": "again"}))
            .await;
        if status == 200 {
            kept = Some(r);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(kept.expect("kept again")["status"], "completed");
    assert_eq!(health(&relay).await, (200, json!({"status": "ok"})));
}

#[tokio::test]
async fn writes_held_by_a_paused_redis_are_kept_when_it_resumes_and_the_run_completes() {
    let up = upstream().await;
    let server = RedisServer::start();
    let relay = relay_over(&up, &server.url(0)).await;
    let mut live = relay
        .send(&json!({"model": "fake-model?deltas=200&delay_ms=10", "input": "x", "stream": true}))
        .await;
    let seen = read_events(&mut live, 6).await;
    in_background(server.port, &["CLIENT", "PAUSE", "2000", "WRITE"])
        .await
        .unwrap();
    let body = rest_of(live, seen).await;
    let folded = check_events(&body.events);
    assert_eq!(folded["status"], "completed", "{folded}");
    // The run was kept whole: its replay is the stream its client read.
    let id = folded["id"].as_str().unwrap();
    let (status, replay) = get_text(&relay.url(&format!("/v1/responses/{id}?stream=true"))).await;
    assert_eq!(status, 200);
    assert_eq!(parse_sse(&replay).raw, body.raw);
}

#[tokio::test]
async fn a_run_whose_keys_redis_already_dropped_leaves_the_indexes_at_the_expiry_sweep() {
    let up = upstream().await;
    let url = redis_db();
    let mut c = config(&up.base_url());
    c.store = responses_relay::config::StoreKind::Redis(url.clone());
    c.store_ttl = Some(Duration::from_secs(60));
    let app = responses_relay::App::new(c);
    let relay = relay_app(app.clone()).await;
    let (_, r) = relay
        .create(&json!({"model": "fake-model", "input": "x"}))
        .await;
    let id = r["id"].as_str().unwrap().to_string();
    eventually("the run is no longer live", || {
        app.store().live(&Default::default(), &id).is_none()
    })
    .await;
    app.store().flush().await;
    // Redis let its keys go first (as their own expiry does); the indexes still name it.
    let db: u32 = url.rsplit('/').next().unwrap().parse().unwrap();
    let mut redis = plain_connection(shared_redis().port);
    ::redis::cmd("SELECT")
        .arg(db)
        .query::<()>(&mut redis)
        .unwrap();
    ::redis::cmd("DEL")
        .arg(format!("relay:resp:{{{id}}}"))
        .query::<()>(&mut redis)
        .unwrap();
    let indexed = |redis: &mut ::redis::Connection| -> Vec<Option<f64>> {
        ["relay:expiry", "relay:runs:default"]
            .iter()
            .map(|k| {
                ::redis::cmd("ZSCORE")
                    .arg(*k)
                    .arg(&id)
                    .query(redis)
                    .unwrap()
            })
            .collect()
    };
    assert!(indexed(&mut redis).iter().all(Option::is_some));
    let removed = app
        .store()
        .expire(app.clock().now_unix() + 61)
        .await
        .unwrap();
    assert_eq!(removed, 0, "nothing was left to remove");
    assert_eq!(indexed(&mut redis), vec![None, None]);
}
