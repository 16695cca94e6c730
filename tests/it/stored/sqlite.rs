//! The SQLite store itself: kept runs reach the file while the relay runs, a run the database
//! cannot keep (locked by another writer) ends failed and is not kept half-written, finished logs
//! are packed in one row and replay byte for byte, and deleted runs give their disk space back.

use super::*;
use serde_json::{Value, json};

use crate::support::*;
use responses_relay::config::StoreKind;

#[tokio::test]
async fn kept_runs_reach_the_sqlite_file_itself_while_the_relay_runs() {
    // Checkpoints run beside the writer: a finished run gets from the WAL into the database file
    // without any commit waiting for it, and without the relay stopping.
    let up = upstream().await;
    let dir = scratch("checkpoint");
    let db = dir.join("relay.sqlite3");
    let mut c = config(&up.base_url());
    c.store = StoreKind::Sqlite(db.clone());
    let relay = relay(c).await;
    let (status, r) = relay
        .create(&json!({"model": "fake-model", "input": "to the file"}))
        .await;
    assert_eq!(status, 200, "{r}");
    let id = r["id"].as_str().unwrap().to_string();
    // The database file alone (a copy, without its WAL) says what was checkpointed.
    let copy = dir.join("copy.sqlite3");
    let in_file = || -> Option<String> {
        std::fs::copy(&db, &copy).ok()?;
        let c = rusqlite::Connection::open(&copy).ok()?;
        c.query_row("SELECT status FROM responses WHERE id = ?1", [&id], |r| {
            r.get(0)
        })
        .ok()
    };
    let mut status = None;
    for _ in 0..100 {
        status = in_file();
        if status.is_some() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(
        status.as_deref(),
        Some("completed"),
        "the run never reached the database file"
    );
}

#[tokio::test]
async fn a_run_sqlite_cannot_keep_ends_failed_for_its_client_and_is_not_kept() {
    use futures::StreamExt;
    let up = upstream().await;
    let path = scratch("locked").join("relay.sqlite3");
    let relay = relay_over_store(&up, &StoreKind::Sqlite(path.clone())).await;
    // Another process's write transaction holds the database past the writer's busy timeout.
    let other = rusqlite::Connection::open(&path).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let r = relay
        .send(&json!({"model": "fake-model?deltas=60&delay_ms=200", "input": "x", "stream": true}))
        .await;
    assert_eq!(r.status(), 200);
    let mut body = r.bytes_stream();
    // Nothing is shown before the store answered: the first bytes come once the commit failed.
    let mut text = String::from_utf8(body.next().await.unwrap().unwrap().to_vec()).unwrap();
    other.execute_batch("ROLLBACK").unwrap();
    while let Some(chunk) = body.next().await {
        text.push_str(std::str::from_utf8(&chunk.unwrap()).unwrap());
    }
    let sse = parse_sse(&text);
    let folded = check_events(&sse.events);
    assert_eq!(folded["status"], "failed", "{folded}");
    assert!(
        error_message(&folded).contains("could not keep"),
        "{folded}"
    );
    assert!(text.ends_with("data: [DONE]\n\n"));
    let id = folded["id"].as_str().unwrap();
    let (status, _) = relay.get(&format!("/v1/responses/{id}")).await;
    assert_eq!(
        status, 404,
        "a run that was not kept whole is not kept at all"
    );
    // The store works again for the next run.
    let (status, next) = relay
        .create(&json!({"model": "fake-model", "input": "y"}))
        .await;
    assert_eq!(status, 200);
    let (status, kept) = relay
        .get(&format!("/v1/responses/{}", next["id"].as_str().unwrap()))
        .await;
    assert_eq!((status, &kept["status"]), (200, &json!("completed")));
}

#[tokio::test]
async fn a_run_whose_end_sqlite_cannot_keep_is_not_reported_completed() {
    use futures::StreamExt;
    let up = upstream().await;
    let path = scratch("locked-terminal").join("relay.sqlite3");
    let relay = relay_over_store(&up, &StoreKind::Sqlite(path.clone())).await;
    // The model's last frames (finish, usage) come 400 ms after its last text delta.
    let r = relay
        .send(&json!({"model": "fake-model?deltas=3&delay_ms=400", "input": "x", "stream": true}))
        .await;
    assert_eq!(r.status(), 200);
    let mut body = r.bytes_stream();
    let mut text = String::new();
    let mut other = None;
    while let Some(chunk) = body.next().await {
        text.push_str(std::str::from_utf8(&chunk.unwrap()).unwrap());
        // Every text delta shown was kept; once all three are, another connection holds the
        // database past the writer's busy timeout, so the commit of the run's end fails.
        if other.is_none() && text.matches("event: response.output_text.delta\n").count() == 3 {
            let c = rusqlite::Connection::open(&path).unwrap();
            c.execute_batch("BEGIN IMMEDIATE").unwrap();
            other = Some(c);
            // The model's last frames come within a second; the writer waits 5 s for the lock.
            // Meanwhile the run has emitted its end, not kept yet: a poll must not call it
            // completed.
            tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
            let id =
                parse_sse(&text[..text.rfind("\n\n").unwrap() + 2]).events[0]["response"]["id"]
                    .as_str()
                    .unwrap()
                    .to_string();
            let (status, polled) = relay.get(&format!("/v1/responses/{id}")).await;
            assert_eq!(status, 200);
            assert_eq!(polled["status"], "in_progress", "{polled}");
            assert!(polled["completed_at"].is_null(), "{polled}");
        }
        if (text.contains("event: response.failed\n")
            || text.contains("event: response.completed\n"))
            && let Some(c) = other.take()
        {
            c.execute_batch("ROLLBACK").unwrap();
        }
    }
    assert!(
        other.is_none(),
        "the stream ended without a terminal event: {text}"
    );
    let sse = parse_sse(&text);
    let folded = check_events(&sse.events);
    let deltas: String = streamed_text(&sse.events);
    assert_eq!(deltas.len(), first_text(&folded).as_str().unwrap().len());
    // The model finished, but the run was not kept: its client is told it failed, not completed.
    assert_eq!(folded["status"], "failed", "{folded}");
    assert!(folded["completed_at"].is_null(), "{folded}");
    let message = error_message(&folded);
    assert!(message.contains("could not keep"), "{folded}");
    assert_eq!(folded["error"]["code"], "server_error");
    // The message item the client saw finish is still in the failed Response.
    assert_eq!(folded["output"][0]["status"], "completed", "{folded}");
    // Once the store works again the writer removes what was kept of it.
    let id = folded["id"].as_str().unwrap();
    let kept = || responses_rows(&path, id);
    eventually("the run is removed", || kept() == 0).await;
    let (status, left) = relay.get(&format!("/v1/responses/{id}")).await;
    assert_eq!(
        status, 404,
        "a run that was not kept whole is not kept at all: {left}"
    );
}

#[tokio::test]
async fn a_kept_run_whose_end_sqlite_cannot_keep_is_removed_once_the_store_works_again() {
    let up = upstream().await;
    let path = scratch("locked-end").join("relay.sqlite3");
    let relay = relay_over_store(&up, &StoreKind::Sqlite(path.clone())).await;
    let id = relay.start(&json!({"model": "fake-model?deltas=100&delay_ms=100", "input": "x", "background": true})).await;
    // Its start is kept...
    let kept = || responses_rows(&path, &id);
    eventually("the run's insert is committed", || kept() == 1).await;
    // ...then another connection holds the database past the busy timeout while the run ends.
    let other = rusqlite::Connection::open(&path).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let (status, _) = relay.cancel(&id).await;
    assert_eq!(status, 200);
    other.execute_batch("ROLLBACK").unwrap();
    // Once the store works again the writer removes it, even with nothing else to write: a run
    // not kept whole is not kept at all.
    eventually("the half-written run is removed", || kept() == 0).await;
    let (status, left) = relay.get(&format!("/v1/responses/{id}")).await;
    assert_eq!(status, 404, "the run was left half-written: {left}");
    assert_eq!(kept(), 0);
}

#[tokio::test]
async fn a_kept_run_broken_mid_run_by_a_failed_commit_is_removed_at_its_end() {
    let up = upstream().await;
    let path = scratch("locked-mid").join("relay.sqlite3");
    let relay = relay_over_store(&up, &StoreKind::Sqlite(path.clone())).await;
    let id = relay.start(&json!({"model": "fake-model?deltas=100&delay_ms=100", "input": "x", "background": true})).await;
    let kept = || responses_rows(&path, &id);
    eventually("the run's insert is committed", || kept() == 1).await;
    // A commit of its events fails: the run is failed through its hook while it still runs...
    let other = rusqlite::Connection::open(&path).unwrap();
    other.execute_batch("BEGIN IMMEDIATE").unwrap();
    let mut status = Value::Null;
    for _ in 0..1500 {
        let (_, r) = relay.get(&format!("/v1/responses/{id}")).await;
        status = r["status"].clone();
        if status == "failed" {
            assert!(error_message(&r).contains("could not keep"), "{r}");
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(status, "failed");
    // ...and once the store works again, its end (committed) removes what was kept of it.
    other.execute_batch("ROLLBACK").unwrap();
    eventually("the broken run is removed", || kept() == 0).await;
    let (status, _) = relay.get(&format!("/v1/responses/{id}")).await;
    assert_eq!(status, 404);
}

/// Bytes of every file of the SQLite store at `db` after a full checkpoint (database, WAL,
/// journal).
fn store_bytes(db: &std::path::Path) -> u64 {
    let c = rusqlite::Connection::open(db).unwrap();
    c.busy_timeout(std::time::Duration::from_secs(10)).unwrap();
    // A checkpoint of the relay's own (its checkpointer's, every 200 ms) makes this one answer
    // busy without truncating the WAL: tried again until it did.
    let mut tries = 0;
    while c
        .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
            r.get::<_, i64>(0)
        })
        .unwrap()
        != 0
    {
        tries += 1;
        assert!(tries < 100, "the WAL could not be checkpointed");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    drop(c);
    ["", "-wal", "-journal"]
        .iter()
        .filter_map(|s| std::fs::metadata(format!("{}{s}", db.display())).ok())
        .map(|m| m.len())
        .sum()
}

#[tokio::test]
async fn a_finished_runs_log_is_kept_packed_in_one_row_and_replays_byte_for_byte() {
    let up = upstream().await;
    let db = scratch("packed-log").join("relay.sqlite3");
    let relay = relay_over_store(&up, &StoreKind::Sqlite(db.clone())).await;
    let live = post_text(
        &relay.url("/v1/responses"),
        &json!({"model": "fake-model?deltas=60&reasoning=2", "input": "pack me", "stream": true}),
    )
    .await;
    let id = parse_sse(&live).events[0]["response"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let (_, replay) = relay.replay(&id).await;
    assert_eq!(replay, live);
    let (_, got) = relay.get(&format!("/v1/responses/{id}")).await;
    assert_eq!(got, parse_sse(&live).events.last().unwrap()["response"]);
    let c = rusqlite::Connection::open_with_flags(&db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .unwrap();
    let (blob, rows): (Vec<u8>, i64) = c
        .query_row(
            "SELECT log, (SELECT COUNT(*) FROM events WHERE response_id = ?1) FROM responses WHERE id = ?1",
            [&id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(rows, 0, "the log is kept twice: packed and as event rows");
    assert!(
        blob.len() * 4 < live.len(),
        "the packed log takes {} bytes for a {}-byte stream",
        blob.len(),
        live.len()
    );
}

#[tokio::test]
async fn a_run_kept_before_logs_were_packed_replays_byte_for_byte() {
    // A file in the previous layout: a finished run's events as rows of `events`, no `log`
    // column. Made from a run of today's relay, unpacked into those rows, the column dropped.
    let up = upstream().await;
    let db = scratch("unpacked-log").join("relay.sqlite3");
    let relay = relay_over_store(&up, &StoreKind::Sqlite(db.clone())).await;
    let live = post_text(
        &relay.url("/v1/responses"),
        &json!({"model": "fake-model?deltas=12", "input": "kept the old way", "stream": true}),
    )
    .await;
    let id = parse_sse(&live).events[0]["response"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    relay.shutdown().await;
    {
        let c = rusqlite::Connection::open(&db).unwrap();
        let blob: Vec<u8> = c
            .query_row("SELECT log FROM responses WHERE id = ?1", [&id], |r| {
                r.get(0)
            })
            .unwrap();
        let unpacked = responses_relay::store::packed::unpack(&blob).unwrap();
        c.execute(
            "UPDATE responses SET response = ?2 WHERE id = ?1",
            rusqlite::params![id, std::str::from_utf8(&unpacked.response).unwrap()],
        )
        .unwrap();
        for e in unpacked.entries {
            c.execute(
                "INSERT INTO events (response_id, seq, offset_ms, kind, data) VALUES (?1, ?2, ?3, ?4, ?5)",
                rusqlite::params![
                    id,
                    e.seq as i64,
                    e.offset_ms as i64,
                    e.kind(),
                    std::str::from_utf8(&e.json()).unwrap()
                ],
            )
            .unwrap();
        }
        c.execute_batch("ALTER TABLE responses DROP COLUMN log;")
            .unwrap();
    }
    let relay = relay_over_store(&up, &StoreKind::Sqlite(db.clone())).await;
    let (status, replay) = relay.replay(&id).await;
    assert_eq!(status, 200);
    assert_eq!(replay, live, "the old run's replay differs from its stream");
    let (_, got) = relay.get(&format!("/v1/responses/{id}")).await;
    assert_eq!(got, parse_sse(&live).events.last().unwrap()["response"]);
    // Deleting the old run removes its event rows.
    let deleted = relay.delete(&format!("/v1/responses/{id}")).await;
    assert_eq!(deleted.status(), 200);
    let c = rusqlite::Connection::open_with_flags(&db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .unwrap();
    let (rows, runs): (i64, i64) = c
        .query_row(
            "SELECT (SELECT COUNT(*) FROM events), (SELECT COUNT(*) FROM responses)",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!((rows, runs), (0, 0));
}

#[tokio::test]
async fn deleted_runs_give_their_disk_space_back() {
    let up = upstream().await;
    let db = scratch("vacuum").join("relay.sqlite3");
    let relay = relay_over_store(&up, &StoreKind::Sqlite(db.clone())).await;
    // 40 runs with 256 KiB inputs each (that do not compress): about 10 MiB kept.
    let mut ids = Vec::new();
    for i in 0..40u64 {
        let mut x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let input: String = (0..256 * 1024)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                char::from(b'a' + (x % 26) as u8)
            })
            .collect();
        let (status, r) = relay
            .create(&json!({"model": "fake-model", "input": input}))
            .await;
        assert_eq!(status, 200, "{r}");
        ids.push(r["id"].as_str().unwrap().to_string());
    }
    let full = store_bytes(&db);
    assert!(full > 10 << 20, "the store holds only {full} bytes");
    for id in &ids {
        let r = relay.delete(&format!("/v1/responses/{id}")).await;
        assert_eq!(r.status(), 200);
    }
    // Each delete's commit gave back a bounded number of pages; a few MiB stay free for reuse.
    let emptied = store_bytes(&db);
    assert!(
        emptied < full / 2,
        "the store still takes {emptied} bytes of {full} after every run was deleted"
    );
}
