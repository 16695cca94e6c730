//! Tenants (SPEC §13): every stored thing belongs to the tenant of the key that made it; for any
//! other tenant it is exactly an unknown id, on every store, after a restart, and across relays
//! sharing Redis. Two keys of one tenant share its runs.

use std::time::Duration;

use serde_json::{Value, json};

use crate::fake_upstream::FakeUpstream;
use crate::support::*;
use responses_relay::Config;
use responses_relay::config::{KeyEntry, StoreKind};

/// Team A has two keys; `kb` is a bare key (a tenant of its own); team B has one.
fn keys() -> Vec<KeyEntry> {
    vec![
        KeyEntry::of_tenant("team-a-key-1", "team-a"),
        KeyEntry::of_tenant("team-a-key-2", "team-a"),
        KeyEntry::bare("kb"),
        KeyEntry::of_tenant("team-b-key", "team-b"),
    ]
}

async fn relay_with(up: &FakeUpstream, store: &StoreKind) -> Relay {
    let store = store.clone();
    relay(Config {
        store,
        deterministic: false,
        keys: keys(),
        ..config(&up.base_url())
    })
    .await
}

/// A request with `key` as the bearer: its status and body (JSON, or the text as a string).
async fn call(method: &str, url: &str, key: &str, body: Option<&Value>) -> (u16, Value) {
    let c = client();
    let mut req = match method {
        "GET" => c.get(url),
        "DELETE" => c.delete(url),
        _ => c.post(url),
    }
    .bearer_auth(key)
    .timeout(Duration::from_secs(30));
    if let Some(b) = body {
        req = req.json(b);
    }
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// What `key` gets for each way of reaching run `id` (and its first input item `item`), with
/// `id` and `item` written as `ID` and `ITEM` so answers about different ids compare.
async fn reach(base: &str, key: &str, id: &str, item: &str) -> Vec<(String, u16, String)> {
    let mut out = Vec::new();
    let ways: Vec<(&str, String, Option<Value>)> = vec![
        ("GET", format!("/v1/responses/{id}"), None),
        ("GET", format!("/v1/responses/{id}?stream=true"), None),
        ("GET", format!("/v1/responses/{id}/input_items"), None),
        ("POST", format!("/v1/responses/{id}/cancel"), None),
        (
            "POST",
            "/v1/responses".into(),
            Some(json!({"model": "fake-model", "input": "go on", "previous_response_id": id})),
        ),
        (
            "POST",
            "/v1/responses".into(),
            Some(json!({"model": "fake-model", "input": [{"type": "item_reference", "id": item}]})),
        ),
        ("DELETE", format!("/v1/responses/{id}"), None),
    ];
    for (method, path, body) in ways {
        let (status, answer) = call(method, &format!("{base}{path}"), key, body.as_ref()).await;
        let shown = answer.to_string().replace(id, "ID").replace(item, "ITEM");
        out.push((
            format!("{method} {}", path.replace(id, "ID")),
            status,
            shown,
        ));
    }
    out
}

/// Team A's stored run with a secret in its input, and its input item's id.
async fn team_a_run(base: &str) -> (String, String) {
    let (status, r) = call(
        "POST",
        &format!("{base}/v1/responses"),
        "team-a-key-1",
        Some(&json!({"model": "fake-model", "input": "the secret plan", "background": true})),
    )
    .await;
    assert_eq!(status, 200, "{r}");
    let id = r["id"].as_str().unwrap().to_string();
    let done = || async {
        let (_, r) = call(
            "GET",
            &format!("{base}/v1/responses/{id}"),
            "team-a-key-1",
            None,
        )
        .await;
        r["status"] == "completed"
    };
    for _ in 0..200 {
        if done().await {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(done().await, "team A's run completed");
    let (_, items) = call(
        "GET",
        &format!("{base}/v1/responses/{id}/input_items"),
        "team-a-key-2",
        None,
    )
    .await;
    let item = items["data"][0]["id"].as_str().unwrap().to_string();
    (id, item)
}

/// Another tenant gets, for team A's run, exactly what it gets for ids that do not exist; team
/// A's run is untouched by what the other tenant tried, and team A's other key reaches it.
async fn assert_scoped(base: &str, id: &str, item: &str) {
    let unknown_id = format!("resp_{}", "0".repeat(id.len() - "resp_".len()));
    let unknown_item = format!("msg_{}", "0".repeat(item.len().saturating_sub(4).max(8)));
    for other in ["kb", "team-b-key"] {
        let theirs = reach(base, other, id, item).await;
        let unknown = reach(base, other, &unknown_id, &unknown_item).await;
        assert_eq!(
            theirs, unknown,
            "another tenant must see team A's run as unknown"
        );
        for (way, status, body) in &theirs {
            assert_ne!(*status, 200, "{way} answered 200: {body}");
            assert!(!body.contains("secret plan"), "{way} leaked: {body}");
        }
    }
    let (status, r) = call(
        "GET",
        &format!("{base}/v1/responses/{id}/input_items"),
        "team-a-key-2",
        None,
    )
    .await;
    assert_eq!(status, 200, "team A's second key reaches the run: {r}");
    assert_eq!(r["data"][0]["content"][0]["text"], "the secret plan");
    let (status, next) = call(
        "POST",
        &format!("{base}/v1/responses"),
        "team-a-key-2",
        Some(&json!({"model": "fake-model", "input": "go on", "previous_response_id": id})),
    )
    .await;
    assert_eq!(status, 200, "team A continues its own chain: {next}");
    let (status, _) = call(
        "POST",
        &format!("{base}/v1/responses"),
        "team-a-key-1",
        Some(&json!({"model": "fake-model", "input": [{"type": "item_reference", "id": item}]})),
    )
    .await;
    assert_eq!(status, 200, "team A references its own item");
}

#[tokio::test]
async fn another_tenants_runs_are_unknown_ids_on_every_store() {
    for (name, store) in stores() {
        let up = upstream().await;
        let relay = relay_with(&up, &store).await;
        let base = relay.url("");
        let (id, item) = team_a_run(&base).await;
        assert_scoped(&base, &id, &item).await;
        if let StoreKind::Sqlite(_) = store {
            // Still scoped when the relay starts again on the same file.
            relay.shutdown().await;
            let relay = relay_with(&up, &store).await;
            assert_scoped(&relay.url(""), &id, &item).await;
        }
        eprintln!("{name}: scoped");
    }
}

#[tokio::test]
async fn a_tenants_live_background_run_is_unknown_to_another_on_a_second_relay_over_redis() {
    tenants_apart_on_two_relays(StoreKind::Redis(redis_db())).await;
}

/// The test above, on a shared `store` (one Redis or a cluster).
pub(crate) async fn tenants_apart_on_two_relays(store: StoreKind) {
    let up = upstream().await;
    let a = relay_with(&up, &store).await;
    let b = relay_with(&up, &store).await;
    let (status, r) = call(
        "POST",
        &a.url("/v1/responses"),
        "team-a-key-1",
        Some(&json!({"model": "fake-model?deltas=40&delay_ms=50", "input": "the secret plan", "background": true})),
    )
    .await;
    assert_eq!(status, 200, "{r}");
    let id = r["id"].as_str().unwrap().to_string();
    // Live on relay A: relay B does not give it to another tenant, not even to cancel it.
    for (method, path) in [
        ("GET", format!("/v1/responses/{id}")),
        ("GET", format!("/v1/responses/{id}?stream=true")),
        ("POST", format!("/v1/responses/{id}/cancel")),
        ("DELETE", format!("/v1/responses/{id}")),
    ] {
        let (status, body) = call(method, &b.url(&path), "kb", None).await;
        assert_eq!(status, 404, "{method} {path}: {body}");
    }
    // Team A tails it live on relay B and it was not cancelled.
    let (status, tail) = call(
        "GET",
        &b.url(&format!("/v1/responses/{id}?stream=true")),
        "team-a-key-2",
        None,
    )
    .await;
    assert_eq!(status, 200);
    let tail = tail.as_str().unwrap().to_string();
    assert!(tail.contains("response.completed"), "{tail}");
    // Finished: every way in, on either relay, is still closed to the other tenants.
    let (_, items) = call(
        "GET",
        &b.url(&format!("/v1/responses/{id}/input_items")),
        "team-a-key-1",
        None,
    )
    .await;
    let item = items["data"][0]["id"].as_str().unwrap().to_string();
    assert_scoped(&b.url(""), &id, &item).await;
    assert_scoped(&a.url(""), &id, &item).await;
}

#[tokio::test]
async fn data_kept_before_tenants_is_the_default_tenants() {
    // A SQLite file in the schema from before tenants: its run is found by a relay without keys.
    let dir = scratch("pre-tenant-sqlite");
    let path = dir.join("relay.sqlite3");
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        c.execute_batch(
            "CREATE TABLE responses (id TEXT PRIMARY KEY, created_at INTEGER NOT NULL, expires_at INTEGER,
                 status TEXT NOT NULL, response TEXT NOT NULL, input TEXT NOT NULL);
             CREATE TABLE events (response_id TEXT NOT NULL, seq INTEGER NOT NULL, offset_ms INTEGER NOT NULL,
                 kind TEXT NOT NULL, data TEXT NOT NULL, PRIMARY KEY (response_id, seq)) WITHOUT ROWID;
             CREATE TABLE journal (response_id TEXT NOT NULL, seq INTEGER NOT NULL, offset_ms INTEGER NOT NULL,
                 kind TEXT NOT NULL, data TEXT NOT NULL);
             CREATE TABLE items (id TEXT PRIMARY KEY, response_id TEXT NOT NULL, item TEXT NOT NULL);",
        )
        .unwrap();
        let response = json!({"id": "resp_old", "object": "response", "created_at": 1, "status": "completed",
            "background": false, "error": null, "incomplete_details": null, "instructions": null,
            "max_output_tokens": null, "max_tool_calls": null, "model": "m", "output": [],
            "parallel_tool_calls": true, "previous_response_id": null, "reasoning": {"effort": null, "summary": null},
            "store": true, "temperature": 1.0, "top_p": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0,
            "top_logprobs": 0, "text": {"format": {"type": "text"}}, "tool_choice": "auto", "tools": [],
            "truncation": "disabled", "usage": null, "user": null, "metadata": {}, "service_tier": "default",
            "safety_identifier": null, "prompt_cache_key": null, "prompt_cache_retention": null});
        let item =
            json!({"type": "message", "id": "msg_old", "role": "user", "content": "kept before"});
        c.execute(
            "INSERT INTO responses VALUES ('resp_old', 1, NULL, 'completed', ?1, ?2)",
            [response.to_string(), json!([item]).to_string()],
        )
        .unwrap();
        c.execute(
            "INSERT INTO items VALUES ('msg_old', 'resp_old', ?1)",
            [item.to_string()],
        )
        .unwrap();
    }
    let up = upstream().await;
    let mut c = config(&up.base_url());
    c.store = StoreKind::Sqlite(path.clone());
    let old = relay(c).await;
    let (status, r) = old.get("/v1/responses/resp_old").await;
    assert_eq!((status, r["id"].as_str()), (200, Some("resp_old")), "{r}");
    let (status, r) = old
        .create(
            &json!({"model": "fake-model", "input": [{"type": "item_reference", "id": "msg_old"}]}),
        )
        .await;
    assert_eq!(status, 200, "{r}");
    old.shutdown().await;
    // With keys, the old run is the default tenant's: a key of tenant `default` reaches it, a
    // key of another tenant does not.
    let mut c = config(&up.base_url());
    c.store = StoreKind::Sqlite(path);
    c.keys = vec![
        KeyEntry::of_tenant("old-team", "default"),
        KeyEntry::of_tenant("new-team", "other"),
    ];
    let keyed = relay(c).await;
    let url = keyed.url("/v1/responses/resp_old");
    assert_eq!(call("GET", &url, "old-team", None).await.0, 200);
    assert_eq!(call("GET", &url, "new-team", None).await.0, 404);

    // Redis: a run kept before tenants has no `tenant` in its hash.
    let up = upstream().await;
    let store = StoreKind::Redis(redis_db());
    let mut c = config(&up.base_url());
    c.deterministic = false;
    c.store = store.clone();
    let on_redis = relay(c).await;
    let id = on_redis
        .start(&json!({"model": "fake-model", "input": "kept before"}))
        .await;
    let StoreKind::Redis(url) = &store else {
        unreachable!()
    };
    let client = ::redis::Client::open(url.as_str()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let removed: i64 = ::redis::cmd("HDEL")
        .arg(format!("relay:resp:{{{id}}}"))
        .arg("tenant")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(removed, 1, "runs keep their tenant in their hash");
    let (status, r) = on_redis
        .get(&format!("/v1/responses/{id}/input_items"))
        .await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["data"][0]["content"][0]["text"], "kept before");
}

#[tokio::test]
async fn a_default_tenant_item_id_cannot_name_another_tenants_item_on_redis() {
    let up = upstream().await;
    let store = StoreKind::Redis(redis_db());
    let mut c = config(&up.base_url());
    c.deterministic = false;
    c.store = store;
    c.keys = vec![
        KeyEntry::of_tenant("old-key", "default"),
        KeyEntry::of_tenant("team-a-key-1", "team-a"),
    ];
    let relay = relay(c).await;
    let url = relay.url("/v1/responses");
    let message = |id: &str, text: &str| json!({"type": "message", "id": id, "role": "user", "content": text});
    // The default tenant stores an item whose id spells team A's key space first.
    let (status, _) = call(
        "POST",
        &url,
        "old-key",
        Some(&json!({"model": "fake-model", "input": [message("team-a:msg_y", "planted")]})),
    )
    .await;
    assert_eq!(status, 200);
    let (status, _) = call("POST", &url, "team-a-key-1", Some(&json!({"model": "fake-model", "input": [message("msg_x", "a's own"), message("msg_y", "a's real")]}))).await;
    assert_eq!(status, 200);
    let (status, r) = call("POST", &url, "old-key", Some(&json!({"model": "fake-model", "input": [{"type": "item_reference", "id": "team-a:msg_x"}]}))).await;
    assert_eq!(status, 400, "{r}");
    let (status, r) = call(
        "POST",
        &url,
        "team-a-key-1",
        Some(&json!({"model": "fake-model", "input": [{"type": "item_reference", "id": "msg_y"}]})),
    )
    .await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(first_text(&r), "Hello! You said: a's real");
}

#[tokio::test]
async fn a_keys_models_list_bounds_the_models_it_may_use() {
    let up = upstream().await;
    let mut c = config(&up.base_url());
    c.keys = vec![KeyEntry {
        models: Some(vec!["fake-*".into(), "exact-model".into()]),
        ..KeyEntry::of_tenant("limited-key", "limited")
    }];
    let relay = relay(c).await;
    // The fake model server answers any model name: only the key decides.
    for (model, allowed) in [
        ("fake-model", true),
        ("exact-model", true),
        ("other-model", false),
    ] {
        let body = json!({"model": model, "input": "hi"});
        for path in ["/v1/responses", "/v1/responses/input_tokens"] {
            let (status, r) = call("POST", &relay.url(path), "limited-key", Some(&body)).await;
            if allowed {
                assert_eq!(status, 200, "{model} {path}: {r}");
            } else {
                assert_eq!(status, 400, "{model} {path}: {r}");
                assert_eq!(r["error"]["param"], "model");
            }
        }
    }
}
