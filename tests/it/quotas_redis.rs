//! Limits shared by relays on one Redis (issue 35, point 5): counters admitted exactly to the
//! limit under concurrent load on two relays, a slot taken on one seen by the other and renewed
//! while its run lives, and Redis away (fail open with a metric, or closed with a 503).

use std::time::Duration;

use serde_json::json;

use crate::quotas::{START_MS, create, header, hi, limited, limited_at, metric};
use crate::support::*;
use responses_relay::limits::Clock;

#[tokio::test]
async fn concurrent_load_on_two_relays_over_redis_is_admitted_exactly_to_the_limit() {
    let up = upstream().await;
    let store = redis_db();
    let args = ["--store", store.as_str()];
    admitted_exactly_to_the_limit(&up, &store, "team-a").await;
    // A slot taken on one relay is seen by the other.
    let toml = r#"
[[keys]]
key = "kc"
tenant = "team-c"
limits = { concurrent_runs = 1 }
"#;
    let (c, _) = limited_at(&up, &args, toml, Clock::manual(START_MS)).await;
    let (d, _) = limited_at(&up, &args, toml, Clock::manual(START_MS)).await;
    let stalled = json!({"model": "fake-model?fault=stall", "input": "hi", "background": true});
    let (status, _, r) = create(&c, "kc", &stalled).await;
    assert_eq!(status, 200, "{r}");
    let (status, _, r) = create(&d, "kc", &hi()).await;
    assert_eq!(status, 429, "{r}");
    let id = r["id"].as_str().map(str::to_string);
    assert_eq!(id, None);
}

/// Two relays on the Redis store at `store` take 40 concurrent creates of a key of `tenant`
/// limited to 12 requests a minute: exactly 12 are admitted.
pub(crate) async fn admitted_exactly_to_the_limit(
    up: &fake_upstream::FakeUpstream,
    store: &str,
    tenant: &str,
) {
    let args = ["--store", store];
    let toml = format!(
        "[[keys]]\nkey = \"ka\"\ntenant = \"{tenant}\"\nlimits = {{ requests_per_minute = 12 }}\n"
    );
    let (a, _) = limited_at(up, &args, &toml, Clock::manual(START_MS)).await;
    let (b, _) = limited_at(up, &args, &toml, Clock::manual(START_MS)).await;
    let statuses = futures::future::join_all((0..40).map(|i| {
        let relay = if i % 2 == 0 { &a } else { &b };
        async move { create(relay, "ka", &hi()).await.0 }
    }))
    .await;
    let count = |s: u16| statuses.iter().filter(|x| **x == s).count();
    assert_eq!((count(200), count(429)), (12, 28), "{statuses:?}");
}

#[tokio::test]
async fn with_redis_down_limits_fail_open_with_a_metric_or_closed_with_a_503() {
    let up = upstream().await;
    let mut server = RedisServer::start();
    let store = server.url(0);
    let toml = r#"
[[keys]]
key = "ka"
tenant = "team-a"
limits = { requests_per_minute = 100 }
"#;
    let args = ["--store", store.as_str()];
    let (open, _) = limited(&up, &args, toml).await;
    let closed_args = ["--store", store.as_str(), "--limits-fail-closed"];
    let (closed, _) = limited(&up, &closed_args, toml).await;
    let unstored = json!({"model": "fake-model", "input": "hi", "store": false});
    assert_eq!(create(&open, "ka", &unstored).await.0, 200);
    assert_eq!(create(&closed, "ka", &unstored).await.0, 200);
    server.stop();

    let (status, h, r) = create(&open, "ka", &unstored).await;
    assert_eq!(status, 200, "fails open: {r}");
    assert_eq!(
        header(&h, "x-ratelimit-limit-requests"),
        None,
        "nothing known to say"
    );
    assert!(metric(&open, "relay_limits_unavailable_total").await >= 1.0);

    let (status, h, r) = create(&closed, "ka", &unstored).await;
    assert_eq!(status, 503, "{r}");
    assert_eq!(r["error"]["code"], "limits_unavailable");
    assert_eq!(header(&h, "retry-after"), Some("1"));
}

#[tokio::test]
async fn a_live_runs_slot_in_redis_is_renewed_with_its_keys_expiry_so_a_long_run_keeps_it() {
    let up = upstream().await;
    let store = redis_db();
    let args = ["--store", store.as_str()];
    let toml = r#"
[[keys]]
key = "ka"
tenant = "team-a"
limits = { concurrent_runs = 1 }
"#;
    let (relay, _) = limited_at(&up, &args, toml, Clock::System).await;
    let stalled = json!({"model": "fake-model?fault=stall", "input": "hi", "background": true});
    let (status, _, r) = create(&relay, "ka", &stalled).await;
    assert_eq!(status, 200, "{r}");
    let id: String = responses_relay::config::sha256(b"ka")[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let key = format!("relay:limit:{{team-a}}:key:{id}:concurrent_runs");
    let db: u32 = store.rsplit('/').next().unwrap().parse().unwrap();
    let mut redis =
        ::redis::Client::open(format!("redis://127.0.0.1:{}/{db}", shared_redis().port))
            .unwrap()
            .get_connection()
            .unwrap();
    let pttl =
        |c: &mut ::redis::Connection| -> i64 { ::redis::cmd("PTTL").arg(&key).query(c).unwrap() };
    let first = pttl(&mut redis);
    assert!(first > 0, "the slot's key expires: {first}");
    // Past the renewal period (10 s), the key's expiry was pushed back: left alone it would be
    // 11 s lower than at first.
    tokio::time::sleep(Duration::from_secs(11)).await;
    let later = pttl(&mut redis);
    assert!(
        later > first - 5_000,
        "the slot's key was not renewed: {first} ms, then {later} ms"
    );
    assert_eq!(
        create(&relay, "ka", &hi()).await.0,
        429,
        "the slot is still held"
    );
}
