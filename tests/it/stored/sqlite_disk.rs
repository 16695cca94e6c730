//! The SQLite store's disk: its files, as they lie on disk soon after a load, are within 1.2x of
//! what it holds (the database after a full checkpoint), with no checkpoint forced from outside;
//! and a full disk fails the runs being written whole, refuses new stored runs with a 503
//! (`store: false` still served), and the store recovers by itself once space is back.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::*;
use responses_relay::Config;
use responses_relay::config::StoreKind;

/// The files of the SQLite store at `db`, as `du` sees them: the database, its WAL, its
/// shared-memory index and a rollback journal.
fn store_files(db: &Path) -> Vec<PathBuf> {
    ["", "-wal", "-shm", "-journal"]
        .iter()
        .map(|s| PathBuf::from(format!("{}{s}", db.display())))
        .collect()
}

/// Bytes of every file of the store at `db`, as they lie (no checkpoint).
fn bytes_on_disk(db: &Path) -> u64 {
    store_files(db)
        .iter()
        .filter_map(|f| std::fs::metadata(f).ok())
        .map(|m| m.len())
        .sum()
}

/// Bytes of the database at `db` after a full (TRUNCATE) checkpoint, measured on a copy in
/// `scratch` (the WAL copied before the database, so no frame is lost), so that the running
/// relay's files are left as they are.
fn checkpointed_copy(db: &Path, scratch: &Path) -> u64 {
    let copy = scratch.join("copy.sqlite3");
    for f in store_files(&copy) {
        let _ = std::fs::remove_file(f);
    }
    let wal = PathBuf::from(format!("{}-wal", db.display()));
    if wal.exists() {
        std::fs::copy(&wal, format!("{}-wal", copy.display())).unwrap();
    }
    std::fs::copy(db, &copy).unwrap();
    let c = rusqlite::Connection::open(&copy).unwrap();
    let busy: i64 = c
        .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0))
        .unwrap();
    assert_eq!(
        busy, 0,
        "a copy nothing else opened is checkpointed at once"
    );
    drop(c);
    std::fs::metadata(&copy).unwrap().len()
}

/// Runs `runs` short stored runs through `relay`, `clients` at a time; their ids.
async fn load(relay: &Relay, runs: usize, clients: usize) -> Vec<String> {
    use futures::StreamExt;
    let url = relay.url("/v1/responses");
    futures::stream::iter(0..runs)
        .map(|i| {
            let url = url.clone();
            async move {
                let body = json!({"model": "fake-model?deltas=20", "input": format!("run {i}")});
                let (status, r) = post(&url, &body).await;
                assert_eq!(status, 200, "{r}");
                assert_eq!(r["status"], "completed", "{r}");
                r["id"].as_str().unwrap().to_string()
            }
        })
        .buffer_unordered(clients)
        .collect()
        .await
}

/// Replays run `id` and checks its log: complete, folding, exactly one terminal event (last);
/// answers the folded Response.
async fn replayed(relay: &Relay, id: &str) -> Value {
    let (status, text) = relay.replay(id).await;
    assert_eq!(status, 200, "{id}: {text}");
    check_events(&parse_sse(&text).events)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sqlite_stores_files_come_within_1_2x_of_what_it_holds_soon_after_a_load() {
    let up = upstream().await;
    let dir = scratch("disk-bound");
    let db = dir.join("relay.sqlite3");
    let relay = relay_for(&up, |c| {
        c.store = StoreKind::Sqlite(db.clone());
        // Thousands of runs from one test: real ids, so none collides.
        c.deterministic = false;
    })
    .await;
    let started = Instant::now();
    let ids = load(&relay, 3000, 32).await;
    let loaded = started.elapsed();
    let peak = bytes_on_disk(&db);
    // No checkpoint from outside: the relay's own rule brings its files down, within a
    // liveness bound.
    let ended = Instant::now();
    let limit = Duration::from_secs(20);
    let (on_disk, held) = loop {
        let (on_disk, held) = (bytes_on_disk(&db), checkpointed_copy(&db, &dir));
        if on_disk as f64 <= 1.2 * held as f64 {
            break (on_disk, held);
        }
        assert!(
            ended.elapsed() < limit,
            "{:?} after the load the store's files take {on_disk} bytes for {held} held",
            ended.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    eprintln!(
        "disk bound: 3000 runs in {loaded:?}; files {peak} bytes at the load's end, {on_disk} \
         {:?} later, database after a full checkpoint {held} ({:.2}x)",
        ended.elapsed(),
        on_disk as f64 / held as f64
    );
    // Every run's log is complete, with exactly one terminal event: a sample through the whole
    // load, and its last runs.
    for id in ids.iter().step_by(25).chain(ids.iter().rev().take(40)) {
        assert_eq!(replayed(&relay, id).await["status"], "completed", "{id}");
    }
    // What was measured on copies holds for the store's own files once the relay stopped.
    relay.shutdown().await;
    let c = rusqlite::Connection::open(&db).unwrap();
    let runs: i64 = c
        .query_row(
            "SELECT COUNT(*) FROM responses WHERE status = 'completed'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(runs, 3000);
    let _: i64 = c
        .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0))
        .unwrap();
    drop(c);
    let own = std::fs::metadata(&db).unwrap().len();
    assert!(
        on_disk as f64 <= 1.2 * own as f64,
        "{on_disk} bytes on disk for {own} held"
    );
}

/// `len` bytes of text that does not compress (a seeded xorshift over the alphabet).
fn incompressible(len: usize, seed: u64) -> String {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            char::from(b'a' + (x % 26) as u8)
        })
        .collect()
}

/// Free pages of the database at `db` (read-only: what is committed).
fn free_pages(db: &Path) -> u64 {
    let c = rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .unwrap();
    c.query_row("PRAGMA freelist_count", [], |r| r.get::<_, i64>(0))
        .unwrap() as u64
}

#[tokio::test]
async fn a_full_disk_fails_the_runs_it_breaks_refuses_new_stored_runs_and_recovers() {
    use futures::StreamExt;
    let up = upstream().await;
    let db = scratch("disk-full").join("relay.sqlite3");
    let app = responses_relay::App::new(Config {
        store: StoreKind::Sqlite(db.clone()),
        ..config(&up.base_url())
    });
    let relay = relay_app(app.clone()).await;
    let stored =
        |input: String| json!({"model": "fake-model?deltas=30", "input": input, "stream": true});
    let kept = relay.stream(&stored("before".into())).await;
    assert_eq!(terminal_status(&kept), "completed");
    // A run streaming while the disk fills up...
    let slow = relay
        .send(
            &json!({"model": "fake-model?deltas=40&delay_ms=50", "input": "slow", "stream": true}),
        )
        .await;
    assert_eq!(slow.status(), 200);
    let mut slow = slow.bytes_stream();
    let mut slow_text = String::from_utf8(slow.next().await.unwrap().unwrap().to_vec()).unwrap();
    // ...then the disk is full: the database cannot grow past its size (SQLITE_FULL), and a run
    // whose input needs more than the free pages left cannot be kept.
    let store = app.store();
    store.set_sqlite_max_page_count(1).await.unwrap().unwrap();
    let big = (free_pages(&db) as usize + 64) * 4096;
    let broken = relay.stream(&stored(incompressible(big, 1))).await;
    let failed = check_events(&broken.events);
    assert_eq!(failed["status"], "failed", "{failed}");
    assert!(error_message(&failed).contains("disk is full"), "{failed}");
    // The run streaming meanwhile ends with one terminal event too (failed if the full disk
    // broke it, completed if its every event was kept before).
    while let Some(chunk) = slow.next().await {
        slow_text.push_str(std::str::from_utf8(&chunk.unwrap()).unwrap());
    }
    let slow_run = check_events(&parse_sse(&slow_text).events);
    assert!(
        matches!(slow_run["status"].as_str(), Some("failed" | "completed")),
        "{slow_run}"
    );
    // New stored runs get a 503 saying why; `store: false` is served; earlier runs are read.
    for body in [
        json!({"model": "fake-model", "input": "x"}),
        json!({"model": "fake-model", "input": "x", "stream": true}),
    ] {
        let r = relay.send(&body).await;
        assert_eq!(r.status(), 503);
        assert!(r.headers().contains_key("retry-after"));
        let err: Value = r.json().await.unwrap();
        assert_eq!(err["error"]["code"], "store_full", "{err}");
        assert!(
            str_at(&err["error"], "message").contains("disk is full"),
            "{err}"
        );
    }
    let (status, r) = relay
        .create(&json!({"model": "fake-model", "input": "x", "store": false}))
        .await;
    assert_eq!((status, &r["status"]), (200, &json!("completed")), "{r}");
    let (status, _) = relay.get(&format!("/v1/responses/{}", id_of(&kept))).await;
    assert_eq!(status, 200);
    let (_, health) = relay.get("/healthz").await;
    assert_eq!(health["status"], "degraded", "{health}");
    assert!(
        str_at(&health, "store").contains("disk is full"),
        "{health}"
    );
    // What the full disk broke is not kept, not even in part.
    let failed_id = failed["id"].as_str().unwrap().to_string();
    eventually("the broken run is removed", || {
        super::responses_rows(&db, &failed_id) == 0
    })
    .await;
    if slow_run["status"] == "failed" {
        let slow_id = slow_run["id"].as_str().unwrap().to_string();
        eventually("the broken run is removed", || {
            super::responses_rows(&db, &slow_id) == 0
        })
        .await;
    }
    // Space is back: the store takes stored runs again by itself, within a bounded wait.
    store
        .set_sqlite_max_page_count(u32::MAX as u64)
        .await
        .unwrap()
        .unwrap();
    let back = std::time::Instant::now();
    let again = loop {
        let r = relay.send(&stored(incompressible(big, 2))).await;
        if r.status() == 200 {
            break parse_sse(&r.text().await.unwrap());
        }
        assert_eq!(r.status(), 503);
        assert!(
            back.elapsed() < std::time::Duration::from_secs(10),
            "stored runs are still refused"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert_eq!(terminal_status(&again), "completed");
    assert_eq!(relay.get("/healthz").await.1["status"], "ok");
    let id = id_of(&again);
    let (_, replay) = relay.replay(&id).await;
    assert_eq!(
        check_events(&parse_sse(&replay).events)["status"],
        "completed"
    );
}
