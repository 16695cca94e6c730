//! The Redis store on a real Redis Cluster (three primaries, started by the tests on loopback):
//! a run's keys in one slot, served and replayed; the guarantees across relays (resume, item
//! references, cancel, a killed relay's run finished, tenants, conversations' locks, limits)
//! and the usage report as on one Redis; a run live while its slot moves to another primary,
//! and while its primary fails over or stops, ends whole with one terminal event; `store
//! migrate` moves data kept in the old key layout.

use std::time::Duration;

use serde_json::{Value, json};

use crate::redis::{read_events, relay_over, rest_of};
use crate::support::*;
use responses_relay::config::StoreKind;

const BIN: &str = env!("CARGO_BIN_EXE_responses-relay");

/// A stored run streamed through `relay` (`model` its fake model), read whole: its id and its
/// events.
async fn streamed(relay: &Relay, model: &str) -> (String, SseBody) {
    let body = relay
        .stream(&json!({"model": model, "input": "hi", "stream": true}))
        .await;
    assert!(body.done);
    let id = body.events[0]["response"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    (id, body)
}

/// A long stored run streamed through `relay` (`deltas` of them, 30 ms apart), its first events
/// read: the stream, the text read and the run's id.
async fn live_run(relay: &Relay, deltas: usize) -> (reqwest::Response, String, String) {
    let model = format!("fake-model?deltas={deltas}&delay_ms=30");
    let mut live = relay
        .send(&json!({"model": model, "input": "long", "stream": true}))
        .await;
    let seen = read_events(&mut live, 6).await;
    let id = parse_sse(&seen).events[0]["response"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    (live, seen, id)
}

#[tokio::test]
async fn a_run_on_a_cluster_keeps_its_keys_in_one_slot_and_is_served_and_replayed_as_streamed() {
    let cluster = shared_cluster();
    let up = upstream().await;
    let relay = relay_over(&up, &cluster.url()).await;
    let (id, body) = streamed(&relay, "fake-model?deltas=5").await;
    let folded = check_events(&body.events);
    assert_eq!(folded["status"], "completed");
    // Its hash and log share one slot, served by one primary, which holds them.
    let (resp, log) = (
        format!("relay:resp:{{{id}}}"),
        format!("relay:log:{{{id}}}"),
    );
    assert_eq!(cluster.slot(&resp), cluster.slot(&log));
    let (primary, _) = cluster.serving(cluster.slot(&resp));
    let mut node = cluster.node(primary);
    let status: Option<String> = ::redis::cmd("HGET")
        .arg(&resp)
        .arg("status")
        .query(&mut node)
        .unwrap();
    assert_eq!(status.as_deref(), Some("completed"));
    // Served and replayed as streamed; its input items and output items are kept.
    let (_, replay) = relay.replay(&id).await;
    assert_eq!(parse_sse(&replay).events, body.events);
    let (status, r) = relay.get(&format!("/v1/responses/{id}")).await;
    assert_eq!((status, &r), (200, &folded));
    let (status, items) = relay.get(&format!("/v1/responses/{id}/input_items")).await;
    assert_eq!(status, 200, "{items}");
    assert_eq!(items["data"][0]["content"][0]["text"], "hi");
    let msg = folded["output"][0]["id"].as_str().unwrap();
    let (status, follow) = relay
        .create(&json!({"model": "fake-model", "input": [{"type": "item_reference", "id": msg}]}))
        .await;
    assert_eq!(status, 200, "{follow}");
    // Deleted: gone, with its keys.
    assert_eq!(
        relay.delete(&format!("/v1/responses/{id}")).await.status(),
        200
    );
    let left: i64 = ::redis::cmd("EXISTS")
        .arg(&resp)
        .arg(&log)
        .query(&mut node)
        .unwrap();
    assert_eq!(left, 0);
}

#[tokio::test]
async fn on_a_cluster_a_run_is_resumed_and_read_live_on_another_relay() {
    crate::redis::resumed_and_read_live_on_another(shared_cluster().url()).await;
}

#[tokio::test]
async fn on_a_cluster_previous_response_id_and_item_references_work_across_relays() {
    crate::redis::references_across_relays(shared_cluster().url()).await;
}

#[tokio::test]
async fn on_a_cluster_a_cancel_through_another_relay_reaches_the_owner() {
    crate::redis::cancel_through_another_relay(shared_cluster().url()).await;
}

#[tokio::test]
async fn on_a_cluster_a_killed_relays_run_is_finished_as_failed_by_another() {
    crate::redis::killed_relay_run_finished_as_failed(shared_cluster().url()).await;
}

#[tokio::test]
async fn on_a_cluster_a_tenants_live_run_is_unknown_to_another_tenant_on_a_second_relay() {
    crate::tenants::tenants_apart_on_two_relays(StoreKind::Redis(shared_cluster().url())).await;
}

#[tokio::test]
async fn on_a_cluster_a_busy_conversation_is_locked_across_relays_until_its_run_ends() {
    crate::conversations::busy_conversation_refused_until_it_ends(StoreKind::Redis(
        shared_cluster().url(),
    ))
    .await;
}

#[tokio::test]
async fn on_a_cluster_two_relays_admit_concurrent_load_exactly_to_a_tenants_limit() {
    // A tenant of this test only (the cluster is shared by the binary's tests).
    let up = upstream().await;
    crate::quotas_redis::admitted_exactly_to_the_limit(
        &up,
        &shared_cluster().url(),
        "cluster-limits",
    )
    .await;
}

#[tokio::test]
async fn on_a_cluster_two_relays_add_up_their_tenants_usage_in_the_report() {
    // A cluster of its own: the report covers every tenant's usage in the store.
    let cluster = ClusterSet::start(3, 0);
    crate::usage::usage_added_up_across_relays(cluster.url()).await;
}

#[tokio::test]
async fn a_run_live_while_its_slot_moves_to_another_primary_ends_whole_on_the_new_one() {
    let cluster = ClusterSet::start(3, 0);
    let up = upstream().await;
    let relay = relay_over(&up, &cluster.url()).await;
    let (live, seen, id) = live_run(&relay, 60).await;
    // Moves the run's slot, its keys with it, while the run appends to its log: the relay's
    // writes meet `ASK` while the keys move and `MOVED` after.
    let slot = cluster.slot(&format!("relay:resp:{{{id}}}"));
    let (from, _) = cluster.serving(slot);
    let to = cluster.other_primary(from);
    move_slot(&cluster, slot, from, to).await;
    let body = rest_of(live, seen).await;
    let folded = check_events(&body.events);
    assert_eq!(folded["status"], "completed", "{folded}");
    assert_eq!(cluster.serving(slot).0, to);
    let on_new: i64 = ::redis::cmd("EXISTS")
        .arg(format!("relay:resp:{{{id}}}"))
        .query(&mut cluster.node(to))
        .unwrap();
    assert_eq!(on_new, 1, "the run's hash is on the new primary");
    let (_, replay) = relay.replay(&id).await;
    assert_eq!(parse_sse(&replay).events, body.events);
    let (_, r) = relay.get(&format!("/v1/responses/{id}")).await;
    assert_eq!(r, folded);
    // New runs land where the cluster says, including on the moved slot's primary.
    let (_, again) = streamed(&relay, "fake-model?deltas=3").await;
    assert_eq!(check_events(&again.events)["status"], "completed");
}

/// Moves `slot` from the primary on `from` to the one on `to`, key by key (as `redis-cli
/// --cluster reshard` does), pausing between keys so the move spans live writes.
async fn move_slot(cluster: &ClusterSet, slot: u16, from: u16, to: u16) {
    let (from_id, to_id) = (cluster.id_of(from), cluster.id_of(to));
    let setslot = |port: u16, how: &[&str]| {
        ::redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg(how)
            .query::<()>(&mut cluster.node(port))
            .unwrap();
    };
    setslot(to, &["IMPORTING", &from_id]);
    setslot(from, &["MIGRATING", &to_id]);
    loop {
        let keys: Vec<String> = ::redis::cmd("CLUSTER")
            .arg("GETKEYSINSLOT")
            .arg(slot)
            .arg(1)
            .query(&mut cluster.node(from))
            .unwrap();
        let Some(key) = keys.first() else { break };
        let _: Value = ::redis::cmd("MIGRATE")
            .arg("127.0.0.1")
            .arg(to)
            .arg(key)
            .arg(0)
            .arg(5000)
            .query(&mut cluster.node(from))
            .map(|_: ::redis::Value| Value::Null)
            .unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for n in &cluster.nodes {
        setslot(n.port, &["NODE", &to_id]);
    }
}

#[tokio::test]
async fn a_primary_failed_over_under_a_live_stream_loses_no_acknowledged_run() {
    let cluster = ClusterSet::start(3, 1);
    let up = upstream().await;
    let relay = relay_over(&up, &cluster.url()).await;
    // A run acknowledged before the failover.
    let (done_id, done) = streamed(&relay, "fake-model?deltas=3").await;
    let (live, seen, id) = live_run(&relay, 60).await;
    // The replica of the live run's primary takes over (as an operator's `CLUSTER FAILOVER`).
    let slot = cluster.slot(&format!("relay:resp:{{{id}}}"));
    let (primary, replicas) = cluster.serving(slot);
    let replica = replicas[0];
    ::redis::cmd("CLUSTER")
        .arg("FAILOVER")
        .query::<()>(&mut cluster.node(replica))
        .unwrap();
    cluster.until("the replica is the slot's primary", |c| {
        c.serving(slot).0 == replica
    });
    let body = rest_of(live, seen).await;
    // `check_events` holds it to exactly one terminal event, last.
    let folded = check_events(&body.events);
    assert_eq!(folded["status"], "completed", "{folded}");
    assert_eq!(
        cluster.roles()[&primary],
        "slave",
        "the old primary was demoted"
    );
    // Both runs read back whole from the promoted replica.
    let (_, replay) = relay.replay(&id).await;
    assert_eq!(parse_sse(&replay).events, body.events);
    let (_, replay) = relay.replay(&done_id).await;
    assert_eq!(parse_sse(&replay).events, done.events);
}

#[tokio::test]
async fn a_primary_stopped_under_a_live_stream_ends_it_once_and_loses_no_acknowledged_run() {
    let mut cluster = ClusterSet::start(3, 1);
    let up = upstream().await;
    let relay = relay_over(&up, &cluster.url()).await;
    let (live, seen, id) = live_run(&relay, 100).await;
    let slot = cluster.slot(&format!("relay:resp:{{{id}}}"));
    let (primary, replicas) = cluster.serving(slot);
    // Runs acknowledged before the primary goes (a third of them, by their ids, on it).
    let mut kept = Vec::new();
    for _ in 0..9 {
        kept.push(streamed(&relay, "fake-model?deltas=2").await);
    }
    cluster
        .nodes
        .iter_mut()
        .find(|n| n.port == primary)
        .unwrap()
        .stop();
    cluster.until("the replica took the slot over", |c| {
        c.serving(slot).0 == replicas[0]
    });
    // The live stream ends, once, whatever became of its writes meanwhile.
    let body = rest_of(live, seen).await;
    // `check_events` holds it to exactly one terminal event, last.
    check_events(&body.events);
    // Every acknowledged run reads back whole, on the promoted replica too.
    for (done_id, done) in &kept {
        let (status, replay) = relay.replay(done_id).await;
        assert_eq!(status, 200, "{done_id}");
        assert_eq!(&parse_sse(&replay).events, &done.events);
    }
    // The live run is finished in the store too (by its relay, or as failed once its lease
    // lapsed), and new runs are kept.
    let mut status = Value::Null;
    for _ in 0..200 {
        let (_, r) = relay.get(&format!("/v1/responses/{id}")).await;
        status = r["status"].clone();
        if status != "in_progress" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(status == "completed" || status == "failed", "{status}");
    let (_, again) = streamed(&relay, "fake-model?deltas=3").await;
    assert_eq!(check_events(&again.events)["status"], "completed");
}

#[tokio::test]
async fn store_migrate_moves_runs_and_conversations_kept_in_the_old_layout() {
    let server = RedisServer::start();
    let url = server.url(0);
    let up = upstream().await;
    let relay = relay_over(&up, &url).await;
    let (id, body) = streamed(&relay, "fake-model?deltas=3").await;
    let (_, conv) = relay
        .post(
            "/v1/conversations",
            &json!({"items": [{"role": "user", "content": "kept"}]}),
        )
        .await;
    let conv_id = conv["id"].as_str().unwrap().to_string();
    relay.shutdown().await;
    // Put back as a relay before hash tags kept them.
    let mut c = plain_connection(server.port);
    for (new, old) in [
        (format!("relay:resp:{{{id}}}"), format!("relay:resp:{id}")),
        (
            format!("relay:conv:{{default:{conv_id}}}"),
            format!("relay:conv:default:{conv_id}"),
        ),
        (
            format!("relay:conv-items:{{default:{conv_id}}}"),
            format!("relay:conv-items:default:{conv_id}"),
        ),
    ] {
        ::redis::cmd("RENAME")
            .arg(&new)
            .arg(&old)
            .query::<()>(&mut c)
            .unwrap();
    }
    ::redis::cmd("DEL")
        .arg("relay:layout")
        .query::<()>(&mut c)
        .unwrap();
    // A relay refuses to start on it, naming the command.
    let out = std::process::Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--store", &url])
        .args(["--upstream-url", &up.base_url()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("responses-relay store migrate"), "{err}");
    // Migrated (a second time moves nothing), then read as before.
    let migrate = || {
        std::process::Command::new(BIN)
            .args(["store", "migrate", "--store", &url])
            .output()
            .unwrap()
    };
    let first = migrate();
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    assert!(String::from_utf8_lossy(&first.stdout).contains("moved 3 keys"));
    let second = migrate();
    assert!(String::from_utf8_lossy(&second.stdout).contains("moved 0 keys"));
    let relay = relay_over(&up, &url).await;
    let (_, replay) = relay.replay(&id).await;
    assert_eq!(parse_sse(&replay).events, body.events);
    let (status, items) = relay
        .get(&format!("/v1/conversations/{conv_id}/items"))
        .await;
    assert_eq!(status, 200, "{items}");
    assert_eq!(items["data"][0]["content"][0]["text"], "kept");
}
