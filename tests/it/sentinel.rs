//! The Redis store behind Sentinel (issue 36): `redis+sentinel://` finds the primary through
//! three real Sentinels and follows a failover, polite (`SENTINEL FAILOVER`) or not (the primary
//! killed under a live stream): every stream ends with exactly one terminal event, runs kept
//! before the failover stay readable, and new runs are kept on the primary the Sentinels name.

use std::time::Duration;

use serde_json::{Value, json};

use crate::redis::{read_events, rest_of};
use crate::support::*;
use responses_relay::config::StoreKind;

/// A relay over the Sentinels' primary, with real ids and clock.
async fn relay_behind(up: &crate::fake_upstream::FakeUpstream, set: &SentinelSet) -> Relay {
    shared_store_relay(up, &StoreKind::Redis(set.url())).await
}

/// A stored run, answered 200 within 15 s (retrying while the relay finds the new primary).
async fn kept_run(relay: &Relay, input: &str) -> Value {
    for _ in 0..150 {
        let (status, r) = relay
            .create(&json!({"model": "fake-model", "input": input}))
            .await;
        if status == 200 && r["status"] == "completed" {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("no stored run was kept within 15 s");
}

/// Whether the server on `port` holds run `id`.
fn holds(port: u16, id: &str) -> bool {
    let mut c = plain_connection(port);
    ::redis::cmd("EXISTS")
        .arg(format!("relay:resp:{{{id}}}"))
        .query::<i64>(&mut c)
        .unwrap()
        == 1
}

/// A live stream of a slow run: the response, and its first events.
async fn live_stream(relay: &Relay) -> (reqwest::Response, String) {
    let mut live = relay
        .send(
            &json!({"model": "fake-model?deltas=300&delay_ms=10", "input": "long", "stream": true}),
        )
        .await;
    let seen = read_events(&mut live, 6).await;
    (live, seen)
}

/// The stream ends with exactly one terminal event, the log folds, and (if it failed) says the
/// store could not keep it.
fn ends_once(body: &SseBody) -> Value {
    let terminal = body
        .events
        .iter()
        .filter(|e| {
            matches!(
                e["type"].as_str(),
                Some("response.completed" | "response.failed" | "response.incomplete")
            )
        })
        .count();
    assert_eq!(terminal, 1, "{:?}", kinds(&body.events));
    check_events(&body.events)
}

#[tokio::test]
async fn behind_sentinel_the_relay_follows_a_polite_failover_and_keeps_every_acknowledged_run() {
    let up = upstream().await;
    let set = SentinelSet::start().await;
    let relay = relay_behind(&up, &set).await;
    let before = kept_run(&relay, "before").await;
    let id = before["id"].as_str().unwrap().to_string();
    assert!(holds(set.primary.port, &id));
    let (live, seen) = live_stream(&relay).await;

    let mut s = plain_connection(set.sentinels[0].port);
    let _: String = ::redis::cmd("SENTINEL")
        .arg("FAILOVER")
        .arg("mymaster")
        .query(&mut s)
        .unwrap();
    let new_port = set.replica.port;
    set.until("the replica is promoted", |s| {
        s.primary_port() == Some(new_port)
    })
    .await;

    let folded = ends_once(&rest_of(live, seen).await);
    assert!(
        matches!(folded["status"].as_str(), Some("completed" | "failed")),
        "{folded}"
    );
    // Runs acknowledged before the failover are on the promoted replica.
    let (status, read) = relay.get(&format!("/v1/responses/{id}")).await;
    assert_eq!((status, &read), (200, &before));
    assert!(holds(new_port, &id));
    // New runs go where the Sentinels say, not to the old primary (which, for a moment after a
    // polite failover, still takes writes and loses them when it is demoted).
    let after = kept_run(&relay, "after").await;
    let after_id = after["id"].as_str().unwrap();
    assert!(holds(new_port, after_id));
    let (status, read) = relay.get(&format!("/v1/responses/{after_id}")).await;
    assert_eq!((status, &read), (200, &after));
}

#[tokio::test]
async fn behind_sentinel_a_primary_killed_under_a_live_stream_ends_it_once_and_the_relay_goes_on() {
    let up = upstream().await;
    let mut set = SentinelSet::start().await;
    let relay = relay_behind(&up, &set).await;
    let before = kept_run(&relay, "before").await;
    let id = before["id"].as_str().unwrap().to_string();
    let (live, seen) = live_stream(&relay).await;

    set.primary.stop();
    let folded = ends_once(&rest_of(live, seen).await);
    assert_eq!(folded["status"], "failed", "{folded}");
    assert!(error_message(&folded).contains("store"), "{folded}");
    let new_port = set.replica.port;
    set.until("the Sentinels fail the primary over", |s| {
        s.primary_port() == Some(new_port)
    })
    .await;
    // The run acknowledged before (the replica had it) is there; the relay serves new runs.
    let after = kept_run(&relay, "after").await;
    assert!(holds(new_port, after["id"].as_str().unwrap()));
    let (status, read) = relay.get(&format!("/v1/responses/{id}")).await;
    assert_eq!((status, &read), (200, &before));
}

#[test]
fn a_bad_sentinel_url_is_refused_naming_store_and_its_password_masked() {
    for (url, why) in [
        ("redis+sentinel://:pw@127.0.0.1:1", "no master name"),
        ("redis+sentinel://:pw@127.0.0.1:x/m", "port"),
    ] {
        let e = StoreKind::parse(url).unwrap_err();
        assert!(e.contains(why), "{e}");
        assert!(!e.contains("pw"), "{e}");
    }
    assert!(StoreKind::parse("redis+sentinel://127.0.0.1:1,127.0.0.1:2/m/3").is_ok());
}
