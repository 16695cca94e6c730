//! The relay as a process over its SQLite store: `kill -9` mid-run then restart (every unfinished
//! run ends failed, finished runs intact), export → show → replay round trips, and SIGTERM
//! mid-stream (SSE on every serving lane, WebSocket): every run ends, then the process.

use std::process::{Command, Stdio};

use serde_json::json;

use crate::support::*;

type Proc = RelayProcess;

fn spawn(args: &[&str]) -> Proc {
    spawn_relay(args, &[], Stdio::null())
}

fn relay_process(upstream: &str, db: &std::path::Path) -> Proc {
    let store = format!("sqlite:{}", db.display());
    spawn(&serve_args(upstream, &store, &[]))
}

#[tokio::test]
async fn after_kill_9_a_restarted_relay_finishes_unfinished_runs_and_keeps_finished_ones() {
    let up = upstream().await;
    let db = scratch("kill9").join("relay.sqlite3");
    let first = relay_process(&up.base_url(), &db);
    let (_, done) = first
        .create(&json!({"model": "fake-model", "input": "keep me", "stream": false}))
        .await;
    let done_id = done["id"].as_str().unwrap().to_string();
    let before = first.replay_text(&done_id).await;
    let id = first.start_stalled().await;
    eventually("the run is streaming", || up.open_streams() == 1).await;
    // Let the open message reach the store, then kill without any chance to clean up.
    first.until_kept(&id, "response.output_item.added").await;
    let mut first = first;
    signal(first.child.id(), "-9");
    let _ = first.child.wait();

    let second = relay_process(&up.base_url(), &db);
    let (status, r) = second.get(&format!("/v1/responses/{id}")).await;
    assert_eq!(status, 200);
    assert_eq!(r["status"], "failed", "{r}");
    assert!(error_message(&r).contains("stopped"));
    let log = second.replay_text(&id).await;
    let body = parse_sse(&log);
    assert!(body.done);
    let folded = check_events(&body.events);
    assert_eq!(body.events.last().unwrap()["type"], "response.failed");
    assert_eq!(
        folded["output"][0]["status"], "incomplete",
        "the open message was closed"
    );
    let after = second.replay_text(&done_id).await;
    assert_eq!(after, before, "a finished run changed across the crash");
}

#[tokio::test]
async fn an_exported_log_replays_exactly_the_original_stream() {
    let up = upstream().await;
    let dir = scratch("export");
    let db = dir.join("relay.sqlite3");
    let relay = relay_process(&up.base_url(), &db);
    let live = post_text(&relay.url("/v1/responses"), &json!({"model": "fake-model?reasoning=2&delay_ms=5", "input": "record me", "stream": true})).await;
    let original = parse_sse(&live);
    let id = id_of(&original);
    drop(relay); // the tools read the store of a stopped relay
    let store = format!("sqlite:{}", db.display());
    let out = run_relay(&["logs", "export", &id, "--store", &store]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // An operator sees every tenant's runs; `--tenant` narrows to one.
    for (tenant, found) in [("default", true), ("someone-else", false)] {
        let only = run_relay(&["logs", "export", &id, "--store", &store, "--tenant", tenant]);
        assert_eq!(only.status.success(), found, "--tenant {tenant}");
        if found {
            assert_eq!(only.stdout, out.stdout);
        } else {
            let err = String::from_utf8_lossy(&only.stderr);
            assert!(err.contains("of tenant 'someone-else'"), "{err}");
        }
    }
    let file = dir.join("run.jsonl");
    std::fs::write(&file, &out.stdout).unwrap();
    let lines: Vec<serde_json::Value> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), original.events.len());
    assert!(lines.iter().all(|l| l["offset_ms"].is_u64()));
    assert!(
        lines
            .windows(2)
            .all(|w| w[0]["offset_ms"].as_u64() <= w[1]["offset_ms"].as_u64())
    );

    for target in [id.as_str(), file.to_str().unwrap()] {
        let show = run_relay(&["logs", "show", target, "--store", &store]);
        assert!(show.status.success());
        let text = String::from_utf8(show.stdout).unwrap();
        assert!(
            text.contains("response.created")
                && text.contains("reasoning:")
                && text.contains("message: \"Hello! You said: record me\""),
            "{text}"
        );
        assert!(
            text.contains("response.completed status=completed"),
            "{text}"
        );
    }

    let replay = spawn(&[
        "replay",
        file.to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
        "--speed",
        "50",
    ]);
    let replayed = post_text(
        &replay.url("/v1/responses"),
        &json!({"model": "anything", "input": "ignored", "stream": true}),
    )
    .await;
    assert_eq!(
        replayed, live,
        "the replay differs from the original stream"
    );
    let (status, final_response) = replay
        .create(&json!({"model": "anything", "input": "x"}))
        .await;
    assert_eq!(status, 200);
    assert_eq!(final_response, original.events.last().unwrap()["response"]);
    let bad = run_relay(&["replay", "/nonexistent.jsonl"]);
    assert_eq!(bad.status.code(), Some(64));
    for command in ["export", "show"] {
        let bad = run_relay(&[
            "logs",
            command,
            "resp_x",
            "--store",
            "sqlite:/nonexistent/relay.sqlite3",
        ]);
        assert_eq!(bad.status.code(), Some(64), "logs {command}");
        assert!(
            String::from_utf8_lossy(&bad.stderr).contains("--store"),
            "logs {command}: the flag is not named"
        );
    }
}

#[tokio::test]
async fn the_sqlite_journal_stays_bounded_and_a_long_run_keeps_its_events_across_trims() {
    let up = upstream().await;
    let db = scratch("journal").join("relay.sqlite3");
    let relay = relay_process(&up.base_url(), &db);
    let short = json!({"model": "fake-model?deltas=40", "input": "short", "stream": false});
    let url = relay.url("/v1/responses");
    let mut finished = Vec::new();
    for _ in 0..200 {
        let (status, r) = post(&url, &short).await;
        assert_eq!(status, 200, "{r}");
        finished.push(r["id"].as_str().unwrap().to_string());
    }
    // ~10,000 events went through the journal; only rows of live runs (none now) and the last
    // few thousand not yet trimmed may stay.
    let rows = |db: &std::path::Path| -> i64 {
        let c =
            rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
                .unwrap();
        c.query_row("SELECT COUNT(*) FROM journal", [], |r| r.get(0))
            .unwrap()
    };
    let kept = rows(&db);
    assert!(
        kept < 5000,
        "the journal kept {kept} rows after 200 finished runs"
    );
    // A run that stays live while thousands of rows go by and are trimmed keeps all of its own.
    let id = relay.start_stalled().await;
    relay.until_kept(&id, "response.output_item.added").await;
    for _ in 0..150 {
        let (status, r) = post(&url, &short).await;
        assert_eq!(status, 200, "{r}");
        finished.push(r["id"].as_str().unwrap().to_string());
    }
    let mut relay = relay;
    signal(relay.child.id(), "-9");
    let _ = relay.child.wait();
    let again = relay_process(&up.base_url(), &db);
    let log = again.replay_text(&id).await;
    let body = parse_sse(&log);
    let folded = check_events(&body.events);
    assert_eq!(folded["status"], "failed", "{folded}");
    assert_eq!(
        folded["output"][0]["status"], "incomplete",
        "the open message was not rebuilt and closed"
    );
    // Every finished run replays whole: its events were moved out of the journal when it ended.
    for done in [&finished[0], &finished[199], &finished[349]] {
        let log = again.replay_text(done).await;
        let body = parse_sse(&log);
        assert_eq!(check_events(&body.events)["status"], "completed");
        assert_eq!(
            body.events
                .iter()
                .filter(|e| e["type"] == "response.output_text.delta")
                .count(),
            40
        );
    }
    assert_eq!(rows(&db), 0, "restart left journal rows of finished runs");
}

#[tokio::test]
async fn on_sigterm_a_websocket_client_gets_its_runs_end_and_a_going_away_close() {
    use futures::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    let up = upstream().await;
    let db = scratch("process-ws").join("relay.sqlite3");
    let relay = relay_process(&up.base_url(), &db);
    let host = relay.base.trim_start_matches("http://").to_string();
    let tcp = tokio::net::TcpStream::connect(&host).await.unwrap();
    let (mut ws, _) = tokio_tungstenite::client_async(format!("ws://{host}/v1/responses"), tcp)
        .await
        .unwrap();
    let create = json!({"type": "response.create", "model": "fake-model?delay_ms=200&deltas=100", "input": "long"});
    ws.send(Message::Text(create.to_string().into()))
        .await
        .unwrap();
    let first = ws.next().await.unwrap().unwrap();
    assert!(first.to_text().unwrap().contains("response.created"));
    // SIGTERM: the process ends gracefully, the socket's run ends first, then the close frame
    // (hyper no longer tracks an upgraded connection: the relay must wait for it itself).
    Command::new("kill")
        .args(["-TERM", &relay.child.id().to_string()])
        .status()
        .unwrap();
    let mut last = String::new();
    let close = loop {
        match tokio::time::timeout(std::time::Duration::from_secs(20), ws.next())
            .await
            .expect("frames within 20 s")
        {
            Some(Ok(Message::Text(t))) => last = t.to_string(),
            Some(Ok(Message::Close(f))) => break f,
            Some(Ok(_)) => {}
            other => panic!("the socket ended without a close frame: {other:?} (last: {last})"),
        }
    };
    assert!(
        last.contains("\"response.failed\"") || last.contains("\"response.incomplete\""),
        "the run's terminal event came before the close: {last}"
    );
    assert_eq!(close.map(|f| u16::from(f.code)), Some(1001));
}

#[tokio::test]
async fn on_sigterm_sse_streams_on_every_lane_end_with_a_terminal_event_and_the_process_exits_0() {
    let up = upstream().await;
    let db = scratch("process-lanes").join("relay.sqlite3");
    let store = format!("sqlite:{}", db.display());
    let mut relay = spawn(&serve_args(&up.base_url(), &store, &["--lanes", "2"]));
    // Four clients, each on a connection of its own: handed to the two lanes in turn, stored and
    // unstored runs on each.
    let mut readers = Vec::new();
    for i in 0..4 {
        let resp = reqwest::Client::new()
            .post(format!("{}/v1/responses", relay.base))
            .json(&json!({"model": "fake-model?delay_ms=200&deltas=100", "input": "long", "stream": true, "store": i < 2}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        readers.push(tokio::spawn(async move { resp.text().await.unwrap() }));
    }
    eventually("every run's model stream is open", || {
        up.open_streams() == 4
    })
    .await;
    Command::new("kill")
        .args(["-TERM", &relay.child.id().to_string()])
        .status()
        .unwrap();
    for reader in readers {
        let body = parse_sse(&reader.await.unwrap());
        assert!(body.done, "the stream ends with [DONE]");
        let folded = check_events(&body.events);
        assert_eq!(folded["status"], "failed");
        assert!(error_message(&folded).contains("shut down"), "{folded}");
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let status = loop {
        if let Some(status) = relay.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the relay did not exit"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert_eq!(status.code(), Some(0));
}
