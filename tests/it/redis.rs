//! The Redis store across relays: two relays sharing one Redis serve, resume, read and cancel
//! each other's runs; a relay killed with `kill -9` has its runs finished as failed by another;
//! Redis going away mid-run fails the run for its live clients (also when only its end is lost),
//! and the relay recovers with it. A finished run is packed into one blob (its stream gone) and
//! served as streamed, as is one kept before packing and one packed away under a live tail.

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::*;
use responses_relay::config::StoreKind;

const BIN: &str = env!("CARGO_BIN_EXE_responses-relay");

/// An in-process relay over the Redis store at `url`, with random ids (so that two relays never
/// mint the same id).
pub(crate) async fn relay_over(up: &fake_upstream::FakeUpstream, url: &str) -> Relay {
    shared_store_relay(up, &StoreKind::Redis(url.to_string())).await
}

/// A fake upstream, a fresh Redis database's URL, and two in-process relays sharing it.
async fn two_relays() -> (fake_upstream::FakeUpstream, String, Relay, Relay) {
    two_relays_on(redis_db()).await
}

/// A fake upstream and two in-process relays sharing the Redis store at `url`.
async fn two_relays_on(url: String) -> (fake_upstream::FakeUpstream, String, Relay, Relay) {
    let up = upstream().await;
    let a = relay_over(&up, &url).await;
    let b = relay_over(&up, &url).await;
    (up, url, a, b)
}

/// Reads a streaming response until it holds at least `n` whole events; returns the text read.
pub(crate) async fn read_events(resp: &mut reqwest::Response, n: usize) -> String {
    let mut seen = String::new();
    while parse_sse(&seen[..seen.rfind("\n\n").map(|i| i + 2).unwrap_or(0)])
        .events
        .len()
        < n
    {
        let chunk = resp.chunk().await.unwrap().expect("the stream went on");
        seen.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    seen[..seen.rfind("\n\n").unwrap() + 2].to_string()
}

/// Reads the rest of a live stream after `seen` (it must end within 20 s, with `[DONE]`).
pub(crate) async fn rest_of(live: reqwest::Response, seen: String) -> SseBody {
    let rest = tokio::time::timeout(Duration::from_secs(20), live.text())
        .await
        .expect("the run ended")
        .unwrap();
    let body = parse_sse(&(seen + &rest));
    assert!(body.done);
    body
}

#[tokio::test]
async fn a_run_created_on_one_relay_is_resumed_and_read_live_on_another() {
    resumed_and_read_live_on_another(redis_db()).await;
}

/// The test above, on the Redis store at `url` (one server or a cluster).
pub(crate) async fn resumed_and_read_live_on_another(url: String) {
    let (_up, _url, a, b) = two_relays_on(url).await;
    let mut live = a.send(&json!({"model": "fake-model?deltas=40&delay_ms=10", "input": "long", "stream": true, "background": true})).await;
    let first = parse_sse(&read_events(&mut live, 6).await);
    let id = first.events[0]["response"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let last_seq = first.events.last().unwrap()["sequence_number"]
        .as_u64()
        .unwrap();
    // While A still runs it, B streams the rest: the kept events, then the live ones.
    let (_, mid) = b.get(&format!("/v1/responses/{id}")).await;
    assert_eq!(mid["status"], "in_progress", "{mid}");
    let (status, rest) = get_text(&b.url(&format!(
        "/v1/responses/{id}?stream=true&starting_after={last_seq}"
    )))
    .await;
    assert_eq!(status, 200);
    let rest = parse_sse(&rest);
    assert!(rest.done);
    let mut all = first.events.clone();
    all.extend(rest.events);
    let folded = check_events(&all);
    assert_eq!(folded["status"], "completed");
    // Every relay replays the same log, byte for byte, and answers the same Response.
    let (_, on_a) = a.replay(&id).await;
    let (_, on_b) = b.replay(&id).await;
    assert_eq!(on_a, on_b);
    assert_eq!(parse_sse(&on_b).events, all);
    let (_, ra) = a.get(&format!("/v1/responses/{id}")).await;
    let (_, rb) = b.get(&format!("/v1/responses/{id}")).await;
    assert_eq!(ra, rb);
    assert_eq!(rb, folded);
    let (status, items) = b.get(&format!("/v1/responses/{id}/input_items")).await;
    assert_eq!(status, 200);
    assert_eq!(
        items["data"][0]["content"],
        json!([{"type": "input_text", "text": "long"}]),
        "{items}"
    );
}

#[tokio::test]
async fn previous_response_id_and_item_references_work_across_relays() {
    references_across_relays(redis_db()).await;
}

/// The test above, on the Redis store at `url` (one server or a cluster).
pub(crate) async fn references_across_relays(url: String) {
    let (up, _url, a, b) = two_relays_on(url).await;
    let (status, first) = a
        .create(&json!({"model": "fake-model", "input": "turn 0"}))
        .await;
    assert_eq!(status, 200, "{first}");
    let (status, second) = b
        .create(
            &json!({"model": "fake-model", "input": "turn 1", "previous_response_id": first["id"]}),
        )
        .await;
    assert_eq!(status, 200, "{second}");
    let sent = last_request(&up);
    let roles: Vec<&str> = strs(&sent["messages"], "role");
    assert_eq!(roles, ["user", "assistant", "user"]);
    assert_eq!(sent["messages"][0]["content"], "turn 0");
    // An output item kept by B, referenced through A.
    let msg_id = second["output"][0]["id"].as_str().unwrap();
    let (status, _) =
        a.create(&json!({"model": "fake-model", "input": [{"type": "item_reference", "id": msg_id}, {"role": "user", "content": "and?"}]}))
            .await;
    assert_eq!(status, 200);
    let sent = last_request(&up);
    assert_eq!(sent["messages"][0]["content"], "Hello! You said: turn 1");
    // Deleted through B: gone for A too.
    let r = b
        .delete(&format!("/v1/responses/{}", first["id"].as_str().unwrap()))
        .await;
    assert_eq!(r.status(), 200);
    let (status, _) = a
        .get(&format!("/v1/responses/{}", first["id"].as_str().unwrap()))
        .await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn cancel_through_another_relay_reaches_the_owner_within_a_second() {
    cancel_through_another_relay(redis_db()).await;
}

/// The test above, on the Redis store at `url` (one server or a cluster).
pub(crate) async fn cancel_through_another_relay(url: String) {
    let (up, _url, a, b) = two_relays_on(url).await;
    let id = a.start_stalled().await;
    eventually("the upstream stream is open", || up.open_streams() >= 1).await;
    let started = Instant::now();
    let (status, cancelled) = b.cancel(&id).await;
    let took = started.elapsed();
    assert_eq!(status, 200, "{cancelled}");
    assert_eq!(cancelled["status"], "cancelled");
    assert!(took < Duration::from_millis(1500), "cancel took {took:?}");
    let (_, on_a) = a.get(&format!("/v1/responses/{id}")).await;
    assert_eq!(on_a, cancelled);
    let (status, again) = a.cancel(&id).await;
    assert_eq!((status, &again), (200, &cancelled));
    let (_, log) = b.replay(&id).await;
    let body = parse_sse(&log);
    check_events(&body.events);
    assert_eq!(terminal_status(&body), "cancelled");
}

fn relay_process(upstream: &str, store: &str) -> RelayProcess {
    spawn_relay(
        &serve_args(upstream, store, &[]),
        &[],
        std::process::Stdio::null(),
    )
}

#[tokio::test]
async fn when_a_relay_is_killed_mid_run_another_finishes_its_run_as_failed() {
    killed_relay_run_finished_as_failed(redis_db()).await;
}

/// The test above, on the Redis store at `url` (one server or a cluster).
pub(crate) async fn killed_relay_run_finished_as_failed(url: String) {
    let up = upstream().await;
    let a = relay_process(&up.base_url(), &url);
    let b = relay_over(&up, &url).await;
    let id = a.start_stalled().await;
    eventually("the run is streaming", || up.open_streams() == 1).await;
    b.until_output(&id, 500).await;
    // A reader on B tails the run live when A dies.
    let mut tail = client()
        .get(b.url(&format!("/v1/responses/{id}?stream=true")))
        .send()
        .await
        .unwrap();
    let seen = read_events(&mut tail, 3).await;
    let mut a = a;
    signal(a.child.id(), "-9");
    let _ = a.child.wait();
    let killed = Instant::now();
    let rest = tokio::time::timeout(Duration::from_secs(20), tail.text())
        .await
        .expect("B finished the run")
        .unwrap();
    assert!(
        killed.elapsed() < Duration::from_secs(10),
        "took {:?}",
        killed.elapsed()
    );
    let body = parse_sse(&(seen + &rest));
    assert!(body.done);
    let folded = check_events(&body.events);
    assert_eq!(folded["status"], "failed", "{folded}");
    assert!(error_message(&folded).contains("stopped"), "{folded}");
    assert_eq!(
        folded["output"][0]["status"], "incomplete",
        "the open message was closed"
    );
    let (_, r) = b.get(&format!("/v1/responses/{id}")).await;
    assert_eq!(r, folded);
}

#[tokio::test]
async fn redis_going_away_mid_run_fails_the_run_and_the_relay_recovers_with_it() {
    let up = upstream().await;
    let mut server = RedisServer::start();
    let port = server.port;
    let relay = relay_over(&up, &server.url(0)).await;
    let mut live = relay
        .send(&json!({"model": "fake-model?deltas=400&delay_ms=10", "input": "x", "stream": true}))
        .await;
    let seen = read_events(&mut live, 6).await;
    server.stop();
    let body = rest_of(live, seen).await;
    let folded = check_events(&body.events);
    assert_eq!(folded["status"], "failed", "{folded}");
    assert!(error_message(&folded).contains("store"), "{folded}");
    // While Redis is away, a new stored run is refused clearly; an unstored one still runs.
    let (status, err) = relay
        .create(&json!({"model": "fake-model", "input": "x"}))
        .await;
    assert_eq!(status, 503, "{err}");
    assert_eq!(err["error"]["code"], "store_unavailable");
    let unstored_run = json!({"model": "fake-model", "input": "x", "store": false});
    let (status, unstored) = relay.create(&unstored_run).await;
    assert_eq!(
        (status, unstored["status"].as_str()),
        (200, Some("completed"))
    );
    // Redis is back (empty: it kept nothing on disk): new runs are kept again.
    let _server = RedisServer::start_on(port);
    let mut ok: Option<Value> = None;
    for _ in 0..100 {
        let (status, r) = relay
            .create(&json!({"model": "fake-model", "input": "again"}))
            .await;
        if status == 200 {
            ok = Some(r);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let r = ok.expect("the relay recovered with Redis");
    assert_eq!(r["status"], "completed");
    let (status, kept) = relay
        .get(&format!("/v1/responses/{}", r["id"].as_str().unwrap()))
        .await;
    assert_eq!((status, &kept), (200, &r));
}

#[tokio::test]
async fn a_run_whose_end_redis_cannot_keep_is_not_reported_completed() {
    let up = upstream().await;
    let mut server = RedisServer::start();
    let relay = relay_over(&up, &server.url(0)).await;
    // The model's frames come 400 ms apart: the run ends (items done, terminal event) when its
    // last frames come, well after its text deltas were kept.
    let mut live = relay
        .send(&json!({"model": "fake-model?deltas=2&delay_ms=400", "input": "x", "stream": true}))
        .await;
    let mut seen = String::new();
    while seen.matches("event: response.output_text.delta\n").count() < 2 {
        let chunk = live.chunk().await.unwrap().expect("the stream went on");
        seen.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    assert!(!seen.contains("event: response.output_text.done"), "{seen}");
    // Redis goes away before the run's end is written.
    server.stop();
    let body = rest_of(live, seen).await;
    // The model finished, but the run was not kept: its client is told it failed.
    let folded = check_events(&body.events);
    assert_eq!(folded["status"], "failed", "{folded}");
    assert!(error_message(&folded).contains("was not kept"), "{folded}");
    assert_eq!(folded["output"][0]["status"], "completed", "{folded}");
}

#[tokio::test]
async fn runs_deleted_or_taken_over_in_redis_fail_while_runs_beside_them_are_kept() {
    let up = upstream().await;
    let url = redis_db();
    let relay = relay_over(&up, &url).await;
    let mut streams = Vec::new();
    for _ in 0..3 {
        let mut live = relay
            .send(
                &json!({"model": "fake-model?deltas=150&delay_ms=5", "input": "x", "stream": true}),
            )
            .await;
        let seen = read_events(&mut live, 4).await;
        streams.push((live, seen));
    }
    let ids: Vec<String> = streams
        .iter()
        .map(|(_, seen)| {
            parse_sse(seen).events[0]["response"]["id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    // The three runs' events share the writer's batches: one run's hash is deleted, another is
    // claimed by some other relay, the third must go on being kept.
    let mut redis = ::redis::Client::open(url.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    ::redis::cmd("DEL")
        .arg(format!("relay:resp:{{{}}}", ids[0]))
        .exec(&mut redis)
        .unwrap();
    ::redis::cmd("HSET")
        .arg(format!("relay:resp:{{{}}}", ids[1]))
        .arg("owner")
        .arg("relay-elsewhere")
        .exec(&mut redis)
        .unwrap();
    let mut bodies = Vec::new();
    for (live, seen) in streams {
        bodies.push(rest_of(live, seen).await);
    }
    let deleted = check_events(&bodies[0].events);
    assert_ne!(deleted["status"], "completed", "{deleted}");
    if deleted["status"] == "failed" {
        assert!(error_message(&deleted).contains("deleted"), "{deleted}");
    }
    let taken = check_events(&bodies[1].events);
    assert_eq!(taken["status"], "failed", "{taken}");
    assert!(
        error_message(&taken).contains("took this response over"),
        "{taken}"
    );
    let kept = check_events(&bodies[2].events);
    assert_eq!(kept["status"], "completed", "{kept}");
    let (status, replay) =
        get_text(&relay.url(&format!("/v1/responses/{}?stream=true", ids[2]))).await;
    assert_eq!(status, 200);
    assert_eq!(
        parse_sse(&replay).events,
        bodies[2].events,
        "the run beside them was not kept whole"
    );
    let (status, _) = relay.get(&format!("/v1/responses/{}", ids[0])).await;
    assert_eq!(status, 404);
}

#[test]
fn a_redis_url_is_never_shown_with_its_password() {
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let store = format!("redis://:hunter2@127.0.0.1:{dead}/0");
    let out = Command::new(BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--store", &store])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--store") && err.contains("***"), "{err}");
    assert!(!err.contains("hunter2"), "the password was shown: {err}");
    let kind = StoreKind::Redis(store);
    assert!(!format!("{kind:?}").contains("hunter2"));
    let out = Command::new(BIN)
        .args(["serve", "--store", "redis-not-a-url"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
}

#[tokio::test]
async fn a_run_deleted_in_redis_while_another_relay_tails_it_ends_there_with_a_terminal_event() {
    let (_up, url, a, b) = two_relays().await;
    let id = a.start(&json!({"model": "fake-model?deltas=400&delay_ms=20", "input": "long", "background": true})).await;
    let mut tailed = client()
        .get(b.url(&format!("/v1/responses/{id}?stream=true")))
        .send()
        .await
        .unwrap();
    let mut seen = read_events(&mut tailed, 6).await;
    // The run's hash and log disappear (deleted elsewhere, or expired) while B tails it.
    let mut redis = ::redis::Client::open(url.as_str())
        .unwrap()
        .get_connection()
        .unwrap();
    ::redis::cmd("DEL")
        .arg(format!("relay:resp:{{{id}}}"))
        .arg(format!("relay:log:{{{id}}}"))
        .exec(&mut redis)
        .unwrap();
    while let Some(chunk) = tailed.chunk().await.unwrap() {
        seen.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    let body = parse_sse(&seen);
    assert!(body.done, "the stream was cut");
    let folded = check_events(&body.events);
    assert_eq!(folded["status"], "failed", "{folded}");
    assert!(error_message(&folded).contains("deleted"), "{folded}");
}

/// A plain connection to the Redis at `url` (to look at and rewrite what the relays keep).
fn plain(url: &str) -> ::redis::Connection {
    ::redis::Client::open(url)
        .unwrap()
        .get_connection()
        .unwrap()
}

/// Whether run `id` is kept packed: its stream gone, its hash holding the packed log and no
/// `response` (the packed log holds it).
fn is_packed(redis: &mut ::redis::Connection, id: &str) -> bool {
    let stream: i64 = ::redis::cmd("EXISTS")
        .arg(format!("relay:log:{{{id}}}"))
        .query(redis)
        .unwrap();
    let (blob, response): (Option<Vec<u8>>, Option<String>) = ::redis::cmd("HMGET")
        .arg(format!("relay:resp:{{{id}}}"))
        .arg("packed")
        .arg("response")
        .query(redis)
        .unwrap();
    stream == 0 && blob.is_some_and(|b| !b.is_empty()) && response.is_none()
}

/// Polls until run `id` is kept packed, for at most `secs` seconds.
async fn until_packed(redis: &mut ::redis::Connection, id: &str, secs: u64) {
    let start = Instant::now();
    while !is_packed(redis, id) {
        assert!(
            start.elapsed() < Duration::from_secs(secs),
            "run {id} was not packed within {secs} s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A 20-delta run streamed whole from relay `r` with `input`, once it is kept packed: its live
/// stream as read, that stream parsed, and its id.
async fn packed_run(
    r: &Relay,
    redis: &mut ::redis::Connection,
    input: &str,
) -> (String, SseBody, String) {
    let live = post_text(
        &r.url("/v1/responses"),
        &json!({"model": "fake-model?deltas=20", "input": input, "stream": true}),
    )
    .await;
    let body = parse_sse(&live);
    assert!(body.done, "{live}");
    let id = id_of(&body);
    until_packed(redis, &id, 10).await;
    (live, body, id)
}

/// An SSE body's events and `[DONE]`, as written (comment lines left out).
fn frames(text: &str) -> String {
    text.split_inclusive("\n\n")
        .filter(|b| !b.starts_with(':'))
        .collect()
}

/// Checks what relay `r` serves of finished run `id` against its live stream (`live`, the text
/// its client read): the replay whole and after a few of its events, byte for byte; its Response; its
/// input items (`input`); the viewer's summary. Returns the viewer's log of the run (`logs
/// export`'s lines).
async fn serves_as_streamed(r: &Relay, id: &str, live: &str, input: &str) -> (Value, String) {
    let body = parse_sse(live);
    let (status, whole) = r.replay(id).await;
    assert_eq!(status, 200);
    assert_eq!(
        frames(&whole),
        frames(live),
        "the replay is not the live stream"
    );
    let all = frames(live);
    let blocks: Vec<&str> = all.split_inclusive("\n\n").collect();
    for after in [0, 1, body.events.len() / 2, body.events.len() - 2] {
        let (status, rest) = get_text(&r.url(&format!(
            "/v1/responses/{id}?stream=true&starting_after={after}"
        )))
        .await;
        assert_eq!(status, 200);
        assert_eq!(
            frames(&rest),
            blocks[after + 1..].concat(),
            "starting_after={after}"
        );
    }
    let (status, response) = r.get(&format!("/v1/responses/{id}")).await;
    assert_eq!(status, 200);
    assert_eq!(response, check_events(&body.events));
    let (status, items) = r.get(&format!("/v1/responses/{id}/input_items")).await;
    assert_eq!(status, 200);
    assert_eq!(
        items["data"][0]["content"],
        json!([{"type": "input_text", "text": input}]),
        "{items}"
    );
    let (status, listed) = r.get("/ui/api/runs").await;
    assert_eq!(status, 200);
    assert!(
        listed["data"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["id"] == id && s["status"] == "completed"),
        "{listed}"
    );
    let (status, summary) = r.get(&format!("/ui/api/runs/{id}")).await;
    assert_eq!(status, 200);
    assert_eq!(summary["events"], body.events.len(), "{summary}");
    let (status, log) = get_text(&r.url(&format!("/ui/api/runs/{id}/log"))).await;
    assert_eq!(status, 200);
    let lines: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let events: Vec<Value> = lines.iter().map(|l| l["event"].clone()).collect();
    assert_eq!(events, body.events, "the viewer's log is the stream");
    assert!(lines.iter().all(|l| l["offset_ms"].is_u64()));
    (summary, log)
}

/// Rewrites finished run `id` (kept packed) as runs were kept before packing: its first `n`
/// events in its stream (`log`: the viewer's lines, for their offsets; `body`: the stream, for
/// each event's bytes), its final Response in `response`, no packed log.
fn unpack_by_hand(
    redis: &mut ::redis::Connection,
    id: &str,
    body: &SseBody,
    log: &str,
    response: &str,
    n: usize,
) {
    let lines: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mut pipe = ::redis::pipe();
    pipe.atomic();
    for (i, (line, data)) in lines.iter().zip(&body.raw).enumerate().take(n) {
        pipe.cmd("XADD")
            .arg(format!("relay:log:{{{id}}}"))
            .arg(format!("0-{}", i + 1))
            .arg("seq")
            .arg(i)
            .arg("offset_ms")
            .arg(line["offset_ms"].as_u64().unwrap())
            .arg("kind")
            .arg(body.events[i]["type"].as_str().unwrap())
            .arg("data")
            .arg(data)
            .ignore();
    }
    pipe.cmd("HSET")
        .arg(format!("relay:resp:{{{id}}}"))
        .arg("response")
        .arg(response)
        .ignore();
    pipe.cmd("HDEL")
        .arg(format!("relay:resp:{{{id}}}"))
        .arg("packed")
        .ignore();
    pipe.exec(redis).unwrap();
}

#[tokio::test]
async fn a_finished_run_is_packed_into_one_blob_and_every_relay_serves_it_as_streamed() {
    let (_up, url, a, b) = two_relays().await;
    let mut redis = plain(&url);
    // Once its end was kept, the run's stream is replaced by one packed blob.
    let (live, body, id) = packed_run(&a, &mut redis, "pack me").await;
    let (summary, log) = serves_as_streamed(&a, &id, &live, "pack me").await;
    assert_eq!(
        serves_as_streamed(&b, &id, &live, "pack me").await,
        (summary.clone(), log.clone())
    );
    // A run kept before runs were packed (a stream, its Response in `response`) reads the same.
    let (_, response) = get_text(&b.url(&format!("/v1/responses/{id}"))).await;
    unpack_by_hand(&mut redis, &id, &body, &log, &response, body.events.len());
    assert!(!is_packed(&mut redis, &id));
    for r in [&a, &b] {
        assert_eq!(
            serves_as_streamed(r, &id, &live, "pack me").await,
            (summary.clone(), log.clone())
        );
    }
    // Deleting a packed run removes it and the output items it kept (found in its packed log).
    let (status, other) = a
        .create(&json!({"model": "fake-model", "input": "delete me"}))
        .await;
    assert_eq!(status, 200, "{other}");
    let other_id = other["id"].as_str().unwrap();
    let msg = format!("relay:item:{}", other["output"][0]["id"].as_str().unwrap());
    until_packed(&mut redis, other_id, 10).await;
    let kept: i64 = ::redis::cmd("EXISTS").arg(&msg).query(&mut redis).unwrap();
    assert_eq!(kept, 1, "the output item is kept");
    let r = b.delete(&format!("/v1/responses/{other_id}")).await;
    assert_eq!(r.status(), 200);
    let left: i64 = ::redis::cmd("EXISTS")
        .arg(format!("relay:resp:{{{other_id}}}"))
        .arg(&msg)
        .query(&mut redis)
        .unwrap();
    assert_eq!(left, 0, "the run's hash or its output item stayed");
    let (status, _) = a.get(&format!("/v1/responses/{other_id}")).await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn a_run_tailed_on_another_relay_reaches_it_whole_at_once_and_is_packed_after() {
    let (_up, url, a, b) = two_relays().await;
    let mut redis = plain(&url);
    let mut live = a.send(&json!({"model": "fake-model?deltas=40&delay_ms=10", "input": "tail me", "stream": true})).await;
    let seen = read_events(&mut live, 4).await;
    let id = id_of(&parse_sse(&seen));
    let tailed = client()
        .get(b.url(&format!("/v1/responses/{id}?stream=true")))
        .send()
        .await
        .unwrap();
    assert_eq!(tailed.status(), 200);
    // B marks the run as tailed (so A does not pack its stream away under B's blocking read).
    let mark = format!("relay:tail:{{{id}}}");
    eventually("B marks the run as tailed", || {
        ::redis::cmd("EXISTS")
            .arg(&mark)
            .query::<i64>(&mut redis)
            .unwrap()
            == 1
    })
    .await;
    let (on_a, on_b) = tokio::join!(
        async {
            let rest = live.text().await.unwrap();
            (seen + &rest, Instant::now())
        },
        async { (tailed.text().await.unwrap(), Instant::now()) }
    );
    assert!(parse_sse(&on_a.0).done);
    assert_eq!(
        frames(&on_b.0),
        frames(&on_a.0),
        "B's tail is not A's stream"
    );
    let later = on_b.1.saturating_duration_since(on_a.1);
    assert!(
        later < Duration::from_millis(900),
        "B's stream ended {later:?} after A's"
    );
    // Once B's mark lapsed, A packs the run; both serve it as streamed.
    until_packed(&mut redis, &id, 20).await;
    for r in [&a, &b] {
        serves_as_streamed(r, &id, &on_a.0, "tail me").await;
    }
}

#[tokio::test]
async fn a_tailed_run_whose_stream_is_packed_away_under_the_tail_still_ends_whole() {
    let (_up, url, a, b) = two_relays().await;
    let mut redis = plain(&url);
    // A real run, kept packed: its events, offsets, Response and packed log.
    let (live, body, id) = packed_run(&a, &mut redis, "x").await;
    let (_, log) = get_text(&a.url(&format!("/ui/api/runs/{id}/log"))).await;
    let (_, response) = get_text(&a.url(&format!("/v1/responses/{id}"))).await;
    let key = format!("relay:resp:{{{id}}}");
    let blob: Vec<u8> = ::redis::cmd("HGET")
        .arg(&key)
        .arg("packed")
        .query(&mut redis)
        .unwrap();
    // Made live again, as if a relay that still holds its lease ran it: its first five events
    // kept in its stream.
    unpack_by_hand(&mut redis, &id, &body, &log, &response, 5);
    let lease = (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        + 3_600_000)
        .to_string();
    let created = serde_json::to_string(&body.events[0]["response"]).unwrap();
    let log_key = format!("relay:log:{{{id}}}");
    ::redis::pipe()
        .cmd("HSET")
        .arg(&key)
        .arg("status")
        .arg("in_progress")
        .arg("owner")
        .arg("relay-elsewhere")
        .arg("lease")
        .arg(&lease)
        .arg("response")
        .arg(&created)
        .ignore()
        .exec(&mut redis)
        .unwrap();
    let mut tailed = client()
        .get(b.url(&format!("/v1/responses/{id}?stream=true")))
        .send()
        .await
        .unwrap();
    let seen = read_events(&mut tailed, 5).await;
    let mark = format!("relay:tail:{{{id}}}");
    eventually("B marks the run as tailed", || {
        ::redis::cmd("EXISTS")
            .arg(&mark)
            .query::<i64>(&mut redis)
            .unwrap()
            == 1
    })
    .await;
    // Its owner keeps the rest and its end, and packs it in the same moment, B's mark
    // notwithstanding: B's blocking read is never woken by the stream it waits on.
    let mut end = ::redis::pipe();
    end.atomic();
    for (i, data) in body.raw.iter().enumerate().skip(5) {
        end.cmd("XADD")
            .arg(&log_key)
            .arg(format!("0-{}", i + 1))
            .arg("seq")
            .arg(i)
            .arg("offset_ms")
            .arg(0)
            .arg("kind")
            .arg(body.events[i]["type"].as_str().unwrap())
            .arg("data")
            .arg(data)
            .ignore();
    }
    end.cmd("HSET")
        .arg(&key)
        .arg("status")
        .arg("completed")
        .arg("packed")
        .arg(blob)
        .ignore()
        .cmd("HDEL")
        .arg(&key)
        .arg("response")
        .arg("owner")
        .arg("lease")
        .ignore()
        .cmd("DEL")
        .arg(&log_key)
        .ignore();
    end.exec(&mut redis).unwrap();
    let rest = tokio::time::timeout(Duration::from_secs(5), tailed.text())
        .await
        .expect("B's stream ended")
        .unwrap();
    assert_eq!(
        frames(&(seen + &rest)),
        frames(&live),
        "B read the packed log to its end"
    );
    serves_as_streamed(&b, &id, &live, "x").await;
}
