//! Durable responses, run against both backends (memory and SQLite): fetch, re-stream and resume
//! a run's log, background runs and cancel, deletion, input items, continuation, item references,
//! retention, and the debugging tools (export, show, replay).
//! The SQLite store's own guarantees (what reaches the file, a database that cannot be written,
//! packed logs, disk space) are in `sqlite`.

mod sqlite;
mod sqlite_disk;

use serde_json::{Value, json};

use crate::support::*;
use responses_relay::config::StoreKind;

/// How many `responses` rows the SQLite file at `path` holds for run `id` (read-only).
fn responses_rows(path: &std::path::Path, id: &str) -> i64 {
    let db =
        rusqlite::Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
            .unwrap();
    db.query_row("SELECT COUNT(*) FROM responses WHERE id = ?1", [id], |r| {
        r.get::<_, i64>(0)
    })
    .unwrap()
}

/// Expires what the store of `app` holds past its TTL as of `secs` seconds from now; how many.
async fn expire_at(app: &responses_relay::App, secs: i64) -> usize {
    app.store()
        .expire(app.clock().now_unix() + secs)
        .await
        .unwrap()
}

/// Polls `GET /v1/responses/{id}` until the run has ended.
async fn wait_done(relay: &Relay, id: &str) -> Value {
    for _ in 0..1000 {
        let (_, r) = relay.get(&format!("/v1/responses/{id}")).await;
        if !matches!(r["status"].as_str(), Some("queued" | "in_progress")) {
            return r;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("response {id} never finished");
}

#[tokio::test]
async fn a_stored_run_replays_exactly_what_was_streamed() {
    let up = upstream().await;
    for (name, relay) in relays_over_stores(&up).await {
        let live = post_text(
            &relay.url("/v1/responses"),
            &json!({"model": "fake-model?reasoning=2", "input": "remember", "stream": true}),
        )
        .await;
        let body = parse_sse(&live);
        let id = body.events[0]["response"]["id"]
            .as_str()
            .unwrap()
            .to_string();
        let (status, replay) = relay.replay(&id).await;
        assert_eq!(status, 200, "{name}");
        assert_eq!(
            replay, live,
            "{name}: the replay differs from the live stream"
        );
        let (_, got) = relay.get(&format!("/v1/responses/{id}")).await;
        assert_eq!(got, body.events.last().unwrap()["response"], "{name}");
        // A cursor gives exactly the events after it.
        let (_, tail) =
            get_text(&relay.url(&format!("/v1/responses/{id}?stream=true&starting_after=5"))).await;
        let tail = parse_sse(&tail);
        assert!(tail.done);
        assert_eq!(tail.events, body.events[6..], "{name}");
    }
}

#[tokio::test]
async fn a_client_that_lost_the_connection_resumes_with_no_gap_and_no_duplicate() {
    let up = upstream().await;
    for (name, relay) in relays_over_stores(&up).await {
        // A background stream survives its client going away.
        let mut resp = relay.send(&json!({"model": "fake-model?deltas=40&delay_ms=10", "input": "long", "stream": true, "background": true})).await;
        let mut seen = String::new();
        while parse_sse(seen.trim_end_matches(|c| c != '\n')).events.len() < 6 {
            let chunk = resp.chunk().await.unwrap().expect("stream went on");
            seen.push_str(std::str::from_utf8(&chunk).unwrap());
        }
        drop(resp);
        let cut = &seen[..seen.rfind("\n\n").unwrap() + 2];
        let first = parse_sse(cut);
        let last_seq = first.events.last().unwrap()["sequence_number"]
            .as_u64()
            .unwrap();
        let id = first.events[0]["response"]["id"]
            .as_str()
            .unwrap()
            .to_string();
        let (_, rest) = get_text(&relay.url(&format!(
            "/v1/responses/{id}?stream=true&starting_after={last_seq}"
        )))
        .await;
        let rest = parse_sse(&rest);
        assert!(rest.done, "{name}");
        let mut all = first.events.clone();
        all.extend(rest.events.clone());
        let folded = check_events(&all);
        assert_eq!(
            folded["status"], "completed",
            "{name}: the run did not survive its client"
        );
        let (_, full) = relay.replay(&id).await;
        assert_eq!(parse_sse(&full).events, all, "{name}");
    }
}

#[tokio::test]
async fn concurrent_readers_of_a_live_run_see_the_same_log() {
    let up = upstream().await;
    for (name, relay) in relays_over_stores(&up).await {
        let (status, created) = relay.create(&json!({"model": "fake-model?deltas=30&delay_ms=10", "input": "share", "background": true}))
        .await;
        assert_eq!(status, 200);
        assert_eq!(created["status"], "queued", "{name}");
        let id = created["id"].as_str().unwrap().to_string();
        let readers: Vec<_> = (0..5)
            .map(|i| {
                let url = relay.url(&format!("/v1/responses/{id}?stream=true"));
                tokio::spawn(async move {
                    tokio::time::sleep(std::time::Duration::from_millis(i * 40)).await;
                    fetch_text(&url).await
                })
            })
            .collect();
        let mut logs = Vec::new();
        for r in readers {
            logs.push(r.await.unwrap());
        }
        assert!(
            logs.windows(2).all(|w| w[0] == w[1]),
            "{name}: readers saw different logs"
        );
        let body = parse_sse(&logs[0]);
        check_events(&body.events);
        let k = kinds(&body.events);
        assert_eq!(
            &k[..3],
            [
                "response.created",
                "response.queued",
                "response.in_progress"
            ],
            "{name}"
        );
    }
}

#[tokio::test]
async fn background_runs_can_be_cancelled_once_and_finished_ones_say_so() {
    let up = upstream().await;
    for (name, relay) in relays_over_stores(&up).await {
        let id = relay.start_stalled().await;
        eventually("the upstream stream is open", || up.open_streams() >= 1).await;
        let (status, cancelled) = relay.cancel(&id).await;
        assert_eq!(status, 200, "{name}: {cancelled}");
        assert_eq!(cancelled["status"], "cancelled");
        let (status, again) = relay.cancel(&id).await;
        assert_eq!(
            (status, &again),
            (200, &cancelled),
            "{name}: cancel is not idempotent"
        );
        let (_, log) = relay.replay(&id).await;
        let body = parse_sse(&log);
        check_events(&body.events);
        assert_eq!(terminal_status(&body), "cancelled");
        // A finished run cannot be cancelled; a synchronous one neither.
        let (_, done) = relay
            .create(&json!({"model": "fake-model", "input": "x", "background": true}))
            .await;
        let done_id = done["id"].as_str().unwrap().to_string();
        wait_done(&relay, &done_id).await;
        let (status, err) = relay.cancel(&done_id).await;
        assert_eq!(status, 400, "{name}: {err}");
        assert!(error_message(&err).contains("completed"));
        let (_, sync) = relay
            .create(&json!({"model": "fake-model", "input": "x"}))
            .await;
        let (status, _) = relay
            .post(
                &format!("/v1/responses/{}/cancel", sync["id"].as_str().unwrap()),
                &json!({}),
            )
            .await;
        assert_eq!(status, 400);
        let (status, _) = relay
            .post("/v1/responses/resp_unknown/cancel", &json!({}))
            .await;
        assert_eq!(status, 404);
    }
}

#[tokio::test]
async fn a_streaming_client_that_disconnects_leaves_a_cancelled_run() {
    let up = upstream().await;
    for (name, relay) in relays_over_stores(&up).await {
        let mut resp = relay
            .send(&json!({"model": "fake-model?fault=stall", "input": "x", "stream": true}))
            .await;
        let first = String::from_utf8(resp.chunk().await.unwrap().unwrap().to_vec()).unwrap();
        let id = parse_sse(&first).events[0]["response"]["id"]
            .as_str()
            .unwrap()
            .to_string();
        drop(resp);
        let r = wait_done(&relay, &id).await;
        assert_eq!(r["status"], "cancelled", "{name}");
    }
}

#[tokio::test]
async fn delete_removes_the_run_and_store_false_keeps_nothing() {
    let up = upstream().await;
    for (name, store) in stores() {
        let relay = relay_over_store(&up, &store).await;
        let (_, r) = relay
            .create(&json!({"model": "fake-model", "input": "x"}))
            .await;
        let id = r["id"].as_str().unwrap();
        let r2 = relay.delete(&format!("/v1/responses/{id}")).await;
        assert_eq!(r2.status(), 200, "{name}");
        let body: Value = r2.json().await.unwrap();
        assert_eq!(
            body,
            json!({"id": id, "object": "response", "deleted": true})
        );
        for path in run_paths(id) {
            let (status, _) = relay.get(&path).await;
            assert_eq!(status, 404, "{name} {path}");
        }
        let r3 = relay.delete(&format!("/v1/responses/{id}")).await;
        assert_eq!(r3.status(), 404);
        let (_, unstored) = relay
            .create(&json!({"model": "fake-model", "input": "x", "store": false}))
            .await;
        assert_eq!(unstored["store"], false);
        let (status, _) = relay
            .get(&format!(
                "/v1/responses/{}",
                unstored["id"].as_str().unwrap()
            ))
            .await;
        assert_eq!(status, 404, "{name}: a store:false run was kept");
        let previous =
            json!({"model": "fake-model", "input": "x", "previous_response_id": unstored["id"]});
        let (status, err) = relay.create(&previous).await;
        assert_eq!(
            code_error(status, &err),
            (400, Some("previous_response_not_found"))
        );
    }
}

#[tokio::test]
async fn input_items_paginate_as_openai_does() {
    let up = upstream().await;
    for (name, relay) in relays_over_stores(&up).await {
        let input: Vec<Value> = (0..5)
            .map(|i| json!({"role": "user", "content": format!("m{i}")}))
            .collect();
        let (_, r) = relay
            .create(&json!({"model": "fake-model", "input": input}))
            .await;
        let id = r["id"].as_str().unwrap();
        let (_, page) = relay
            .get(&format!("/v1/responses/{id}/input_items?limit=2"))
            .await;
        assert_eq!(page["object"], "list", "{name}");
        let texts = |p: &Value| -> Vec<String> {
            p["data"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| i["content"][0]["text"].as_str().unwrap().to_string())
                .collect()
        };
        assert_eq!(texts(&page), ["m4", "m3"], "default order is desc");
        assert_eq!(page["has_more"], true);
        assert_eq!(page["first_id"], page["data"][0]["id"]);
        let after = page["last_id"].as_str().unwrap();
        let (_, next) = relay
            .get(&format!(
                "/v1/responses/{id}/input_items?limit=2&after={after}"
            ))
            .await;
        assert_eq!(texts(&next), ["m2", "m1"]);
        let (_, asc) = relay
            .get(&format!(
                "/v1/responses/{id}/input_items?order=asc&limit=100"
            ))
            .await;
        assert_eq!(texts(&asc), ["m0", "m1", "m2", "m3", "m4"]);
        assert_eq!(asc["has_more"], false);
        assert!(
            asc["data"]
                .as_array()
                .unwrap()
                .iter()
                .all(|i| i["id"].as_str().unwrap().starts_with("msg_"))
        );
        let (status, _) = relay
            .get(&format!("/v1/responses/{id}/input_items?limit=0"))
            .await;
        assert_eq!(status, 400);
    }
}

/// A hosted MCP tool list of one server, called without approval.
fn mcp_tools(label: &str, url: &str) -> Value {
    json!([{"type": "mcp", "server_label": label, "server_url": url, "require_approval": "never"}])
}

/// A server that answers is listed by a background run, which then goes on as any other.
async fn an_answering_server_is_listed_by_the_background_run(listing: &Relay) {
    let server = mcp_server(crate::mcp_test_server::Options::default()).await;
    let (_, created) = listing.create(&json!({"model": "fake-model", "input": "CALL echo {\"text\":\"later\"}", "background": true, "tools": mcp_tools("s", &server.url())}))
    .await;
    let done = wait_done(listing, created["id"].as_str().unwrap()).await;
    assert_eq!(done["status"], "completed", "{done}");
    let kinds: Vec<&str> = strs(&done["output"], "type");
    assert_eq!(kinds, ["mcp_list_tools", "mcp_call", "message"], "{done}");
    assert_eq!(done["output"][1]["output"], "later");
    let (_, log) = listing.replay(done["id"].as_str().unwrap()).await;
    check_events(&parse_sse(&log).events);
}

/// Set to fail requests whose servers cannot be listed, the relay has answered `queued` already:
/// the run fails, saying which server.
async fn a_background_run_whose_server_cannot_be_listed_fails(
    up: &crate::fake_upstream::FakeUpstream,
) {
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mut c = config(&up.base_url());
    c.mcp.discovery_failure = responses_relay::config::DiscoveryFailure::Fail;
    let failing = relay(c).await;
    let (status, created) = failing.create(&json!({"model": "fake-model", "input": "hi", "background": true, "tools": mcp_tools("gone", &format!("http://{closed}/mcp"))}))
    .await;
    assert_eq!(status, 200, "{created}");
    let done = wait_done(&failing, created["id"].as_str().unwrap()).await;
    assert_eq!(done["status"], "failed", "{done}");
    assert!(error_message(&done).contains("'gone'"), "{done}");
    // Its list is shown, with the reason, before the run fails.
    let list = &done["output"][0];
    assert_eq!(
        (list["type"].as_str(), list["server_label"].as_str()),
        (Some("mcp_list_tools"), Some("gone")),
        "{done}"
    );
    assert!(
        list["error"].as_str().is_some_and(|e| e.contains("'gone'")),
        "{done}"
    );
    let (_, log) = failing.replay(done["id"].as_str().unwrap()).await;
    assert_eq!(check_events(&parse_sse(&log).events), done);
}

#[tokio::test]
async fn a_background_run_answers_queued_before_its_mcp_servers_are_listed() {
    use std::sync::atomic::Ordering;
    use std::time::Duration;
    let up = upstream().await;
    // A server that takes connections and never answers: listing it lasts until the relay gives
    // up (its MCP handshake timeout), which the client must not wait for.
    let silent = BlackHole::start().await;
    let (accepted, closed) = (silent.accepted.clone(), silent.closed.clone());
    let mut c = config(&up.base_url());
    c.mcp.discovery_timeout = Duration::from_secs(600);
    let listing = relay(c).await;
    let (status, created) = listing.create(&json!({"model": "fake-model", "input": "hi", "background": true, "tools": mcp_tools("silent", &silent.url())}))
    .await;
    assert_eq!(
        (status, created["status"].as_str()),
        (200, Some("queued")),
        "{created}"
    );
    // Answered while the relay is still listing the server: it has not let go of it.
    assert_eq!(
        closed.load(Ordering::SeqCst),
        0,
        "the background request was answered only after its server's listing ended"
    );
    eventually("the run connects to its MCP server", || {
        accepted.load(Ordering::SeqCst) >= 1
    })
    .await;
    let id = created["id"].as_str().unwrap();
    let (_, now) = listing.get(&format!("/v1/responses/{id}")).await;
    assert!(
        matches!(now["status"].as_str(), Some("queued" | "in_progress")),
        "{now}"
    );
    assert_eq!(now["output"], json!([]), "{now}");
    // Still listing, it can be cancelled, which stops the listing.
    let (status, cancelled) = listing.cancel(id).await;
    assert_eq!(
        (status, cancelled["status"].as_str()),
        (200, Some("cancelled")),
        "{cancelled}"
    );
    eventually("the cancelled run lets go of its server", || {
        closed.load(Ordering::SeqCst) >= 1
    })
    .await;
    // It ended before its server was listed: no list item (a run that listed its servers before
    // it was answered shows the failed list whenever it is cancelled).
    let (_, ended) = listing.get(&format!("/v1/responses/{id}")).await;
    assert_eq!(
        (ended["status"].as_str(), &ended["output"]),
        (Some("cancelled"), &json!([])),
        "{ended}"
    );

    an_answering_server_is_listed_by_the_background_run(&listing).await;
    a_background_run_whose_server_cannot_be_listed_fails(&up).await;
    // A bad tool is still refused before the run, naming the field.
    let (status, err) = listing.create(&json!({"model": "fake-model", "input": "hi", "background": true, "tools": [{"type": "mcp", "server_label": "x"}]}))
    .await;
    assert_eq!(status, 400, "{err}");
    assert!(
        err["error"]["param"]
            .as_str()
            .unwrap()
            .starts_with("tools[0]"),
        "{err}"
    );
}

#[tokio::test]
async fn input_items_list_message_content_as_parts_with_a_status() {
    // OpenAI's `ResponseInputMessageItem.content` is a list (typed SDKs iterate it), and items
    // returned by the API carry their `status`: a string given as content is listed as one part.
    let (up, relay) = plain_relay().await;
    let input = json!([
        {"role": "developer", "content": "be brief"},
        {"role": "assistant", "content": "earlier answer"},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "42"},
        {"role": "user", "content": [{"type": "input_text", "text": "as parts"}], "status": "incomplete"},
        {"role": "user", "content": "as a string"},
    ]);
    let (status, r) = relay
        .create(&json!({"model": "fake-model", "input": input}))
        .await;
    assert_eq!(status, 200, "{r}");
    let id = r["id"].as_str().unwrap();
    let (_, page) = relay
        .get(&format!("/v1/responses/{id}/input_items?order=asc"))
        .await;
    let data = page["data"].as_array().unwrap();
    let content = |i: usize| data[i]["content"].clone();
    assert_eq!(
        content(0),
        json!([{"type": "input_text", "text": "be brief"}])
    );
    assert_eq!(
        content(1),
        json!([{"type": "output_text", "text": "earlier answer", "annotations": []}])
    );
    assert_eq!(
        content(4),
        json!([{"type": "input_text", "text": "as parts"}])
    );
    assert_eq!(
        content(5),
        json!([{"type": "input_text", "text": "as a string"}])
    );
    let statuses: Vec<&str> = data.iter().map(|i| i["status"].as_str().unwrap()).collect();
    assert_eq!(
        statuses,
        [
            "completed",
            "completed",
            "completed",
            "completed",
            "incomplete",
            "completed"
        ],
        "{page}"
    );
    // What the model is sent is unchanged: a string stays a string.
    let sent = last_request(&up);
    assert_eq!(
        sent["messages"].as_array().unwrap().last().unwrap()["content"],
        "as a string"
    );
}

#[tokio::test]
async fn continuation_sees_the_whole_chain_in_order_and_references_resolve() {
    let up = upstream().await;
    for (name, relay) in relays_over_stores(&up).await {
        let mut prev: Option<String> = None;
        for i in 0..3 {
            let mut body = json!({"model": "fake-model", "input": format!("turn {i}")});
            if let Some(p) = &prev {
                body["previous_response_id"] = json!(p);
            }
            let (status, r) = relay.create(&body).await;
            assert_eq!(status, 200, "{name}: {r}");
            prev = Some(r["id"].as_str().unwrap().to_string());
        }
        let sent = last_request(&up);
        let msgs: Vec<(String, String)> = sent["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                (
                    m["role"].as_str().unwrap().to_string(),
                    m["content"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect();
        let roles: Vec<&str> = msgs.iter().map(|(r, _)| r.as_str()).collect();
        assert_eq!(
            roles,
            ["user", "assistant", "user", "assistant", "user"],
            "{name}"
        );
        assert_eq!(msgs[0].1, "turn 0");
        assert_eq!(msgs[4].1, "turn 2");
        // An item_reference to a stored output item brings that item back.
        let (_, last) = relay.get(&format!("/v1/responses/{}", prev.unwrap())).await;
        let msg_id = last["output"][0]["id"].as_str().unwrap();
        let (status, _) = relay.create(&json!({"model": "fake-model", "input": [{"type": "item_reference", "id": msg_id}, {"role": "user", "content": "and?"}]})).await;
        assert_eq!(status, 200);
        let sent = last_request(&up);
        assert_eq!(sent["messages"][0]["role"], "assistant", "{name}");
        assert_eq!(sent["messages"][0]["content"], "Hello! You said: turn 2");
    }
}

#[tokio::test]
async fn expired_runs_are_removed() {
    let up = upstream().await;
    for (name, mut c) in store_configs(&up) {
        c.store_ttl = Some(std::time::Duration::from_secs(60));
        let app = responses_relay::App::new(c);
        let relay = relay_app(app.clone()).await;
        let (_, r) = relay
            .create(&json!({"model": "fake-model", "input": "x"}))
            .await;
        let id = r["id"].as_str().unwrap();
        // The answer can arrive just before the run's task leaves the live map; live runs never
        // expire, so wait for it to have left.
        eventually("the run is no longer live", || {
            app.store().live(&Default::default(), id).is_none()
        })
        .await;
        app.store().flush().await;
        assert_eq!(expire_at(&app, 30).await, 0, "{name}: expired too early");
        assert_eq!(expire_at(&app, 61).await, 1, "{name}");
        let (status, _) = relay.get(&format!("/v1/responses/{id}")).await;
        assert_eq!(status, 404, "{name}");
    }
}

#[tokio::test]
async fn a_background_run_is_found_as_queued_before_its_task_first_runs() {
    // The test runtime has one thread: the run's task cannot start before this test yields, so
    // the lookups below happen in the window a fast client can hit after its create returned.
    for (name, store) in stores() {
        let up = upstream().await;
        let mut c = config(&up.base_url());
        c.store = store.clone();
        let app = responses_relay::app::App::new(c);
        let body = json!({"model": "fake-model?fault=stall", "input": "x", "background": true})
            .to_string();
        let request = responses_relay::api::request::parse_create(body.as_bytes()).unwrap();
        let prepared = responses_relay::run::prepare(
            &app,
            request,
            Default::default(),
            None,
            Default::default(),
        )
        .await
        .unwrap();
        let permit = responses_relay::run::Permit {
            relay: app.run_permit().unwrap(),
            key: None,
        };
        let handle = responses_relay::run::start(&app, prepared, permit);
        let found = app
            .store()
            .response(&Default::default(), &handle.id)
            .await
            .unwrap();
        let found =
            found.unwrap_or_else(|| panic!("{name}: a just-created background run is not found"));
        assert_eq!(
            (found.id.as_str(), found.background),
            (handle.id.as_str(), true),
            "{name}"
        );
        assert_eq!(
            serde_json::to_value(found.status).unwrap(),
            "queued",
            "{name}"
        );
        let record = app
            .store()
            .record(&Default::default(), &handle.id)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{name}: no record"));
        assert_eq!(record.response.id, handle.id);
        handle.cancel.cancel();
        handle.log.wait_finished().await;
    }
}

#[tokio::test]
async fn deleting_a_live_run_removes_it_for_good_with_its_log_and_items() {
    let up = upstream().await;
    for (name, store) in stores() {
        let relay = relay_over_store(&up, &store).await;
        let id = relay.start_stalled().await;
        // The run is live and has a message item (two deltas, then the model stalls).
        let mut message = String::new();
        for _ in 0..1000 {
            let (_, r) = relay.get(&format!("/v1/responses/{id}")).await;
            if let Some(m) = r["output"]
                .as_array()
                .and_then(|o| o.iter().find(|i| i["type"] == "message"))
            {
                message = m["id"].as_str().unwrap().to_string();
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert!(
            !message.is_empty(),
            "{name}: the run never showed its message"
        );
        let deleted = relay.delete(&format!("/v1/responses/{id}")).await;
        assert_eq!(deleted.status(), 200, "{name}");
        // Whatever the cancelled run still writes at its end, then another run through the same
        // writer: nothing of the deleted run may come back.
        eventually("the upstream stream is closed", || up.open_streams() == 0).await;
        let (status, _) = relay
            .create(&json!({"model": "fake-model", "input": "y"}))
            .await;
        assert_eq!(status, 200);
        for path in run_paths(&id) {
            let (status, _) = get_text(&relay.url(&path)).await;
            assert_eq!(status, 404, "{name} {path}");
        }
        let (status, err) = relay.create(&json!({"model": "fake-model", "input": [{"type": "item_reference", "id": message}]}))
        .await;
        assert_eq!(
            status, 400,
            "{name}: the deleted run's item is still found: {err}"
        );
        if let StoreKind::Sqlite(path) = &store {
            let db = rusqlite::Connection::open_with_flags(
                path,
                rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
            )
            .unwrap();
            for table in ["events", "items"] {
                let n: i64 = db
                    .query_row(
                        &format!("SELECT COUNT(*) FROM {table} WHERE response_id = ?1"),
                        [&id],
                        |r| r.get(0),
                    )
                    .unwrap();
                assert_eq!(n, 0, "rows of the deleted run written back to {table}");
            }
        }
        relay.shutdown().await;
    }
}

#[tokio::test]
async fn an_item_stays_with_the_run_that_first_stored_it() {
    let up = upstream().await;
    for (name, relay) in relays_over_stores(&up).await {
        let (_, a) = relay
            .create(
                &json!({"model": "fake-model", "input": [{"role": "user", "content": "first"}]}),
            )
            .await;
        let (_, a_items) = relay
            .get(&format!(
                "/v1/responses/{}/input_items",
                a["id"].as_str().unwrap()
            ))
            .await;
        let user_item = a_items["data"][0].clone();
        let user_id = user_item["id"].as_str().unwrap().to_string();
        // B sends A's input item back by reference; C sends it again, changed, under its id.
        let (status, b) = relay.create(&json!({"model": "fake-model", "input": [{"type": "item_reference", "id": user_id}]}))
        .await;
        assert_eq!(status, 200, "{name}: {b}");
        let (status, c) = relay.create(&json!({"model": "fake-model", "input": [{"type": "message", "id": user_id, "role": "user", "content": "changed"}]}))
        .await;
        assert_eq!(status, 200, "{name}: {c}");
        for later in [&b, &c] {
            let deleted = relay
                .delete(&format!("/v1/responses/{}", later["id"].as_str().unwrap()))
                .await;
            assert_eq!(deleted.status(), 200);
        }
        // Still A's, unchanged: the reference resolves to what A stored.
        let (status, d) = relay.create(&json!({"model": "fake-model", "input": [{"type": "item_reference", "id": user_id}]}))
        .await;
        assert_eq!(
            status, 200,
            "{name}: an item of a kept run was lost with a later run: {d}"
        );
        let (_, d_items) = relay
            .get(&format!(
                "/v1/responses/{}/input_items",
                d["id"].as_str().unwrap()
            ))
            .await;
        assert_eq!(
            d_items["data"][0]["content"], user_item["content"],
            "{name}: {d_items}"
        );
        relay.shutdown().await;
    }
}
