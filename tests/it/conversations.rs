//! Conversations (SPEC §11): the Conversations API on every store, responses on a conversation
//! (its items the context, the response's items added), one run at a time per conversation, and
//! conversations shared by relays over Redis and scoped by tenant.

use std::time::Duration;

use serde_json::{Value, json};

use crate::fake_upstream::FakeUpstream;
use crate::support::*;
use responses_relay::config::{KeyEntry, StoreKind};

/// A fake upstream of its own and a relay over `store` in front of it.
async fn own_upstream_and_relay(store: &StoreKind) -> (FakeUpstream, Relay) {
    let up = upstream().await;
    let relay = shared_store_relay(&up, store).await;
    (up, relay)
}

async fn send(method: &str, url: &str, body: Option<Value>) -> (u16, Value) {
    let c = client();
    let mut req = match method {
        "GET" => c.get(url),
        "DELETE" => c.delete(url),
        _ => c.post(url),
    };
    if let Some(b) = body {
        req = req.json(&b);
    }
    let r = req.send().await.unwrap();
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

fn texts(list: &Value) -> Vec<String> {
    list["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["content"][0]["text"].as_str().unwrap_or("").to_string())
        .collect()
}

#[tokio::test]
async fn the_conversations_api_keeps_items_and_metadata_on_every_store() {
    for (name, store) in stores() {
        let (up, relay) = own_upstream_and_relay(&store).await;
        let base = relay.url("/v1/conversations");
        let (status, conv) = send(
            "POST",
            &base,
            Some(json!({"metadata": {"topic": "plans"}, "items": [
                {"type": "message", "role": "user", "content": "one"},
                {"type": "message", "role": "assistant", "content": "two", "id": "msg_client_2"}
            ]})),
        )
        .await;
        assert_eq!(status, 200, "{name}: {conv}");
        let id = conv["id"].as_str().unwrap().to_string();
        assert!(id.starts_with("conv_"), "{conv}");
        assert_eq!(conv["object"], "conversation");
        assert_eq!(conv["metadata"], json!({"topic": "plans"}));
        assert!(conv["created_at"].is_i64());
        let one = |p: &str| format!("{base}/{id}{p}");
        assert_eq!(send("GET", &one(""), None).await.1, conv, "{name}");
        let (_, updated) = send(
            "POST",
            &one(""),
            Some(json!({"metadata": {"topic": "done"}})),
        )
        .await;
        assert_eq!(updated["metadata"], json!({"topic": "done"}), "{name}");
        let (_, added) = send(
            "POST",
            &one("/items"),
            Some(json!({"items": [{"type": "message", "role": "user", "content": "three"}]})),
        )
        .await;
        assert_eq!(added["object"], "list", "{name}: {added}");
        assert_eq!(texts(&added), ["three"]);
        let (_, asc) = send("GET", &one("/items?order=asc"), None).await;
        assert_eq!(texts(&asc), ["one", "two", "three"], "{name}");
        let (_, desc) = send("GET", &one("/items?limit=2"), None).await;
        assert_eq!(texts(&desc), ["three", "two"], "{name}: newest first");
        assert_eq!(desc["has_more"], true);
        let (_, rest) = send(
            "GET",
            &one(&format!(
                "/items?limit=2&after={}",
                desc["last_id"].as_str().unwrap()
            )),
            None,
        )
        .await;
        assert_eq!(texts(&rest), ["one"], "{name}");
        let (status, item) = send("GET", &one("/items/msg_client_2"), None).await;
        assert_eq!(
            (status, item["content"][0]["text"].as_str()),
            (200, Some("two")),
            "{name}: the item keeps its id"
        );
        let (status, after_delete) = send("DELETE", &one("/items/msg_client_2"), None).await;
        assert_eq!(
            (status, after_delete["id"].as_str()),
            (200, Some(id.as_str())),
            "{name}"
        );
        assert_eq!(
            texts(&send("GET", &one("/items?order=asc"), None).await.1),
            ["one", "three"]
        );
        assert_eq!(
            send("GET", &one("/items/msg_client_2"), None).await.0,
            404,
            "{name}"
        );
        if let StoreKind::Sqlite(_) = store {
            relay.shutdown().await;
            let relay = shared_store_relay(&up, &store).await;
            let (_, kept) = send(
                "GET",
                &relay.url(&format!("/v1/conversations/{id}/items?order=asc")),
                None,
            )
            .await;
            assert_eq!(texts(&kept), ["one", "three"], "kept across a restart");
            continue;
        }
        let (status, deleted) = send("DELETE", &one(""), None).await;
        assert_eq!(status, 200);
        assert_eq!(
            deleted,
            json!({"id": id, "object": "conversation.deleted", "deleted": true})
        );
        let (status, err) = send("GET", &one(""), None).await;
        assert_eq!(status, 404, "{name}");
        assert_eq!(
            err["error"]["message"],
            format!("Conversation with id '{id}' not found.")
        );
        assert_eq!(send("GET", &one("/items"), None).await.0, 404, "{name}");
    }
}

#[tokio::test]
async fn a_response_on_a_conversation_sees_its_items_and_adds_its_own() {
    for (name, store) in stores() {
        let (up, relay) = own_upstream_and_relay(&store).await;
        let (_, conv) = send(
            "POST",
            &relay.url("/v1/conversations"),
            Some(json!({"items": [{"type": "message", "role": "user", "content": "earlier"}]})),
        )
        .await;
        let id = conv["id"].as_str().unwrap().to_string();
        let create = relay.url("/v1/responses");
        for (turn, text) in ["first turn", "second turn"].iter().enumerate() {
            let body = if turn == 0 {
                json!({"model": "fake-model", "input": text, "conversation": id})
            } else {
                json!({"model": "fake-model", "input": text, "conversation": {"id": id}, "stream": true})
            };
            let r = if turn == 0 {
                let (status, r) = post(&create, &body).await;
                assert_eq!(status, 200, "{name}: {r}");
                r
            } else {
                let sse = stream(&create, &body).await;
                check_events(&sse.events)
            };
            assert_eq!(r["conversation"], json!({"id": id}), "{name}: {r}");
            assert_eq!(r["status"], "completed");
        }
        // The second turn's model saw everything before it.
        let turns = [
            "earlier",
            "first turn",
            "Hello! You said: first turn",
            "second turn",
        ];
        assert_sent(&up, &turns, name);
        let (_, items) = send(
            "GET",
            &relay.url(&format!("/v1/conversations/{id}/items?order=asc")),
            None,
        )
        .await;
        assert_eq!(
            texts(&items),
            [
                "earlier",
                "first turn",
                "Hello! You said: first turn",
                "second turn",
                "Hello! You said: second turn"
            ],
            "{name}"
        );
        let (status, err) = post(
            &create,
            &json!({"model": "fake-model", "input": "x", "conversation": id, "previous_response_id": "resp_1"}),
        )
        .await;
        assert_eq!(
            param_error(status, &err),
            (400, Some("conversation")),
            "{name}"
        );
        let (status, err) = post(
            &create,
            &json!({"model": "fake-model", "input": "x", "conversation": "conv_nope"}),
        )
        .await;
        assert_eq!(
            param_error(status, &err),
            (404, Some("conversation")),
            "{name}: {err}"
        );
    }
}

#[tokio::test]
async fn a_second_response_on_a_busy_conversation_is_refused_until_the_first_ends() {
    busy_conversation_refused_until_it_ends(StoreKind::Redis(redis_db())).await;
}

/// The test above, on a shared store (one Redis or a cluster).
pub(crate) async fn busy_conversation_refused_until_it_ends(redis: StoreKind) {
    let up = upstream().await;
    let (a, b) = (
        shared_store_relay(&up, &redis).await,
        shared_store_relay(&up, &redis).await,
    );
    let (_, conv) = send("POST", &a.url("/v1/conversations"), Some(json!({}))).await;
    let id = conv["id"].as_str().unwrap().to_string();
    let slow = {
        let url = a.url("/v1/responses");
        let id = id.clone();
        tokio::spawn(async move {
            post(&url, &json!({"model": "fake-model?deltas=20&delay_ms=50", "input": "slow", "conversation": id})).await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Refused on the same relay and on the other one (the lock is in Redis).
    for relay in [&a, &b] {
        let (status, err) = relay
            .create(&json!({"model": "fake-model", "input": "fast", "conversation": id}))
            .await;
        assert_eq!(status, 409, "{err}");
        assert_eq!(err["error"]["code"], "conversation_locked");
    }
    // Counting its tokens neither waits for the conversation nor holds it.
    let count_tokens = json!({"model": "fake-model", "input": "fast", "conversation": id});
    let (status, count) = b.post("/v1/responses/input_tokens", &count_tokens).await;
    assert_eq!(status, 200, "{count}");
    let (status, first) = slow.await.unwrap();
    assert_eq!(
        (status, first["status"].as_str()),
        (200, Some("completed")),
        "{first}"
    );
    // Continued on the other relay, which sees every item.
    let (status, second) = b
        .create(&json!({"model": "fake-model", "input": "fast", "conversation": id}))
        .await;
    assert_eq!(status, 200, "{second}");
    let (_, items) = send(
        "GET",
        &a.url(&format!("/v1/conversations/{id}/items?order=asc")),
        None,
    )
    .await;
    assert_eq!(texts(&items).len(), 4, "{items}");
    assert_eq!(texts(&items)[2], "fast");
}

#[tokio::test]
async fn another_tenants_conversation_is_an_unknown_one() {
    for (name, store) in stores() {
        let (_up, relay) = configured_relay(|c| {
            c.deterministic = false;
            c.store = store.clone();
            c.keys = vec![KeyEntry::bare("key-a"), KeyEntry::bare("key-b")];
        })
        .await;
        let with = |key: &str, method: &str, path: &str, body: Option<Value>| {
            let (url, key, method) = (relay.url(path), key.to_string(), method.to_string());
            async move {
                let c = client();
                let req = match method.as_str() {
                    "GET" => c.get(&url),
                    "DELETE" => c.delete(&url),
                    _ => c.post(&url),
                }
                .bearer_auth(key);
                let req = match body {
                    Some(b) => req.json(&b),
                    None => req,
                };
                let r = req.send().await.unwrap();
                (
                    r.status().as_u16(),
                    r.json::<Value>().await.unwrap_or(Value::Null),
                )
            }
        };
        let (_, conv) = with(
            "key-a",
            "POST",
            "/v1/conversations",
            Some(json!({"items": [{"role": "user", "content": "a's secret"}]})),
        )
        .await;
        let id = conv["id"].as_str().unwrap().to_string();
        for (method, path, body) in [
            ("GET", format!("/v1/conversations/{id}"), None),
            ("GET", format!("/v1/conversations/{id}/items"), None),
            (
                "POST",
                format!("/v1/conversations/{id}"),
                Some(json!({"metadata": {}})),
            ),
            (
                "POST",
                format!("/v1/conversations/{id}/items"),
                Some(json!({"items": []})),
            ),
            ("DELETE", format!("/v1/conversations/{id}"), None),
            (
                "POST",
                "/v1/responses".to_string(),
                Some(json!({"model": "fake-model", "input": "x", "conversation": id})),
            ),
        ] {
            let (status, body) = with("key-b", method, &path, body).await;
            assert_eq!(status, 404, "{name}: {method} {path}: {body}");
            assert!(!body.to_string().contains("a's secret"));
        }
        let (status, items) = with(
            "key-a",
            "GET",
            &format!("/v1/conversations/{id}/items"),
            None,
        )
        .await;
        assert_eq!(
            (status, texts(&items)),
            (200, vec!["a's secret".to_string()]),
            "{name}"
        );
    }
}

#[tokio::test]
async fn compaction_summarizes_a_conversation_and_its_summary_stands_in_for_it() {
    let up = upstream().await;
    let relay = shared_store_relay(&up, &StoreKind::Memory).await;
    let history = json!([
        {"role": "user", "content": "the long plan: details of part A"},
        {"role": "assistant", "content": "noted"},
        {"role": "user", "content": "and part B"}
    ]);
    let (status, compacted) = relay
        .post(
            "/v1/responses/compact",
            &json!({"model": "fake-model", "input": history, "instructions": "You plan projects."}),
        )
        .await;
    assert_eq!(status, 200, "{compacted}");
    assert_eq!(compacted["object"], "response.compaction");
    let out = compacted["output"].as_array().unwrap();
    let kinds: Vec<&str> = out.iter().map(|i| i["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        ["message", "message", "compaction"],
        "the user messages kept, then the summary"
    );
    assert_eq!(out[0]["role"], "user");
    let sealed = out[2]["encrypted_content"].as_str().unwrap().to_string();
    assert!(
        sealed.starts_with("rr1.") && !sealed.contains("part A"),
        "{sealed}"
    );
    let asked = last_request(&up).to_string();
    assert!(
        asked.contains("compacting a conversation") && asked.contains("You plan projects."),
        "{asked}"
    );
    assert!(compacted["usage"]["input_tokens"].as_u64().unwrap() > 0);
    // A later request with the compaction item: the model gets the summary, not what it replaced.
    let (status, next) = relay.create(&json!({"model": "fake-model", "input": [out[2], {"role": "user", "content": "go on"}]}))
    .await;
    assert_eq!(status, 200, "{next}");
    let sent = last_request(&up).to_string();
    assert!(
        sent.contains("A summary of the conversation so far"),
        "{sent}"
    );
    assert!(
        sent.contains("Hello! You said: Write the summary"),
        "the model's summary: {sent}"
    );
    assert!(
        !sent.contains("details of part A"),
        "the compacted text is no longer sent: {sent}"
    );
    // A changed seal is refused, naming the item.
    let mut changed = out[2].clone();
    changed["encrypted_content"] = json!(format!("{}x", &sealed[..sealed.len() - 1]));
    let (status, err) = relay.create(&json!({"model": "fake-model", "input": [changed, {"role": "user", "content": "go on"}]}))
    .await;
    assert_eq!(status, 400, "{err}");
    assert_eq!(err["error"]["param"], "input[0].encrypted_content");
    assert_eq!(err["error"]["code"], "invalid_encrypted_content");
    // From a stored chain, too.
    let (_, first) = relay
        .create(&json!({"model": "fake-model", "input": "remember the chain"}))
        .await;
    let (status, from_chain) = relay
        .post(
            "/v1/responses/compact",
            &json!({"model": "fake-model", "previous_response_id": first["id"]}),
        )
        .await;
    assert_eq!(status, 200, "{from_chain}");
    assert_eq!(first_text(&from_chain), "remember the chain");
}

#[tokio::test]
async fn a_compaction_trigger_makes_the_response_the_compaction_with_its_events() {
    let (up, relay) = configured_relay(|c| c.store = StoreKind::Memory).await;
    let body = relay
        .stream(
            &json!({"model": "fake-model", "stream": true, "store": false, "input": [
                {"role": "user", "content": "a long task"},
                {"role": "assistant", "content": "working on it"},
                {"type": "compaction_trigger"}
            ]}),
        )
        .await;
    let folded = check_events(&body.events);
    assert_eq!(
        kinds(&body.events),
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.compaction.compacting",
            "response.output_item.done",
            "response.completed"
        ]
    );
    let item = &folded["output"][0];
    assert_eq!(item["type"], "compaction", "{folded}");
    let sealed = item["encrypted_content"].as_str().unwrap().to_string();
    assert!(sealed.starts_with("rr1."));
    assert_eq!(up.requests().len(), 1, "one model turn: the summary");
    golden_at("compaction_trigger", &body, &[(sealed.as_str(), "SEALED")]);
}

#[tokio::test]
async fn context_management_compacts_before_a_turn_whose_context_passes_the_threshold() {
    let up = upstream().await;
    let relay = shared_store_relay(&up, &StoreKind::Memory).await;
    let input = json!([
        {"role": "user", "content": "alpha"},
        {"role": "assistant", "content": "beta-answer"},
        {"role": "user", "content": "gamma"}
    ]);
    // The fake model server counts 10 prompt tokens per message: 30 here.
    let before = up.requests().len();
    let (status, r) = relay.create(&json!({"model": "fake-model", "input": input, "context_management": [{"type": "compaction", "compact_threshold": 25}]}))
    .await;
    assert_eq!(status, 200, "{r}");
    let kinds: Vec<&str> = strs(&r["output"], "type");
    assert_eq!(kinds, ["compaction", "message"], "{r}");
    assert!(
        r["output"][0]["encrypted_content"]
            .as_str()
            .unwrap()
            .starts_with("rr1.")
    );
    assert_eq!(
        up.requests().len() - before,
        3,
        "counted, summarized, then answered"
    );
    let sent = last_request(&up).to_string();
    assert!(
        sent.contains("A summary of the conversation so far") && sent.contains("gamma"),
        "{sent}"
    );
    assert!(!sent.contains("beta-answer"), "compacted away: {sent}");
    // The next turn on the chain starts from the compaction, not from what it replaced.
    let (status, next) = relay.create(&json!({"model": "fake-model", "input": "delta", "previous_response_id": r["id"],
            "store": true, "context_management": [{"type": "compaction", "compact_threshold": 1000}]}))
    .await;
    assert_eq!(status, 200, "{next}");
    let sent = last_request(&up).to_string();
    assert!(
        sent.contains("A summary of the conversation so far") && sent.contains("delta"),
        "{sent}"
    );
    assert!(!sent.contains("beta-answer"), "{sent}");
    // Under the threshold: counted, then answered as it is.
    let before = up.requests().len();
    let (_, r) = relay.create(&json!({"model": "fake-model", "input": input, "context_management": [{"type": "compaction", "compact_threshold": 1000}]}))
    .await;
    let kinds: Vec<&str> = strs(&r["output"], "type");
    assert_eq!(kinds, ["message"], "{r}");
    assert_eq!(up.requests().len() - before, 2);
    assert!(
        up.requests()
            .last()
            .unwrap()
            .body
            .to_string()
            .contains("beta-answer")
    );
    let (status, err) = relay.create(&json!({"model": "fake-model", "input": "x", "context_management": [{"type": "compaction"}]}))
    .await;
    assert_eq!(status, 400);
    assert_eq!(
        err["error"]["param"],
        "context_management[0].compact_threshold"
    );
}

#[tokio::test]
async fn a_background_run_on_a_conversation_adds_its_items_and_a_cancelled_one_does_not() {
    let up = upstream().await;
    let store = StoreKind::Sqlite(scratch("conv-background").join("relay.sqlite3"));
    let relay = shared_store_relay(&up, &store).await;
    let (_, conv) = send("POST", &relay.url("/v1/conversations"), Some(json!({}))).await;
    let id = conv["id"].as_str().unwrap().to_string();
    let create = relay.url("/v1/responses");
    let (_, r) = post(&create, &json!({"model": "fake-model", "input": "in the background", "background": true, "conversation": id})).await;
    assert_eq!(r["status"], "queued", "{r}");
    let rid = r["id"].as_str().unwrap().to_string();
    let url = relay.url(&format!("/v1/responses/{rid}"));
    let mut done = false;
    for _ in 0..400 {
        if get(&url).await.1["status"] == "completed" {
            done = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(done, "the background run completed");
    let (_, items) = send(
        "GET",
        &relay.url(&format!("/v1/conversations/{id}/items?order=asc")),
        None,
    )
    .await;
    assert_eq!(
        texts(&items),
        ["in the background", "Hello! You said: in the background"]
    );
    // Its log replays; a cancelled run adds nothing and lets the conversation go.
    let (status, _) = relay.get(&format!("/v1/responses/{rid}?stream=true")).await;
    assert_eq!(status, 200);
    let (_, slow) = post(&create, &json!({"model": "fake-model?deltas=40&delay_ms=50", "input": "to be cancelled", "background": true, "conversation": id})).await;
    let sid = slow["id"].as_str().unwrap().to_string();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (status, cancelled) = relay.cancel(&sid).await;
    assert_eq!(
        (status, cancelled["status"].as_str()),
        (200, Some("cancelled")),
        "{cancelled}"
    );
    let (_, items) = send(
        "GET",
        &relay.url(&format!("/v1/conversations/{id}/items")),
        None,
    )
    .await;
    assert_eq!(texts(&items).len(), 2, "{items}");
    let (status, after) = post(
        &create,
        &json!({"model": "fake-model", "input": "next", "conversation": id}),
    )
    .await;
    assert_eq!(status, 200, "the lock was let go: {after}");
}

#[tokio::test]
async fn a_conversation_lock_left_by_a_stopped_relay_is_free_once_its_run_has_ended() {
    let up = upstream().await;
    let url = redis_db();
    let relay = shared_store_relay(&up, &StoreKind::Redis(url.clone())).await;
    let (_, conv) = send("POST", &relay.url("/v1/conversations"), Some(json!({}))).await;
    let id = conv["id"].as_str().unwrap().to_string();
    let create = relay.url("/v1/responses");
    let (_, first) = post(
        &create,
        &json!({"model": "fake-model", "input": "one", "conversation": id}),
    )
    .await;
    let ended = first["id"].as_str().unwrap().to_string();
    let client = ::redis::Client::open(url.as_str()).unwrap();
    let conn = client.get_multiplexed_async_connection().await.unwrap();
    let key = format!("relay:conv-lock:{{default:{id}}}");
    let hold = |holder: String| {
        let (mut conn, key) = (conn.clone(), key.clone());
        async move {
            let _: () = ::redis::cmd("SET")
                .arg(&key)
                .arg(holder)
                .arg("PX")
                .arg(600_000)
                .query_async(&mut conn)
                .await
                .unwrap();
        }
    };
    // Left by a relay that stopped: held for a run that has ended since (a relay finished it).
    hold(ended.clone()).await;
    let (status, r) = post(
        &create,
        &json!({"model": "fake-model", "input": "two", "conversation": id}),
    )
    .await;
    assert_eq!(status, 200, "{r}");
    // Held by a run being prepared elsewhere (no run named yet): still held.
    hold("lock-elsewhere-1".into()).await;
    let (status, r) = post(
        &create,
        &json!({"model": "fake-model", "input": "three", "conversation": id}),
    )
    .await;
    assert_eq!(status, 409, "{r}");
}
