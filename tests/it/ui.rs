//! The run viewer (SPEC §17): its JSON under `/ui/api/` (the tenant's runs newest first,
//! filtered and paged, on every store; one run's summary; its log as `logs export` writes it) and
//! its pages (compiled in, served with a self-only Content-Security-Policy, open without a key).

use serde_json::{Value, json};

use crate::mcp_test_server;
use crate::support::*;
use responses_relay::config::KeyEntry;

async fn text(url: &str, bearer: Option<&str>) -> (u16, reqwest::header::HeaderMap, String) {
    let mut req = client().get(url);
    if let Some(k) = bearer {
        req = req.bearer_auth(k);
    }
    let r = req.send().await.unwrap();
    (
        r.status().as_u16(),
        r.headers().clone(),
        r.text().await.unwrap(),
    )
}

fn ids(page: &Value) -> Vec<String> {
    page["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn the_listing_shows_runs_newest_first_filtered_by_status_and_model_and_paged_on_every_store()
{
    let up = upstream().await;
    for (name, c) in store_configs(&up) {
        let relay = relay(c).await;
        let mut made = Vec::new();
        for model in [
            "fake-model",
            "other-model",
            "fake-model?fault=cut",
            "fake-model",
        ] {
            let id = relay
                .start(&json!({"model": model, "input": "hi", "background": true}))
                .await;
            for _ in 0..500 {
                let (_, got) = relay.get(&format!("/v1/responses/{id}")).await;
                if !matches!(got["status"].as_str(), Some("queued" | "in_progress")) {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            made.push(id);
        }
        made.reverse();
        let (status, all) = relay.get("/ui/api/runs").await;
        assert_eq!(status, 200, "{name}: {all}");
        assert_eq!(ids(&all), made, "{name}: newest first");
        assert_eq!(all["has_more"], false, "{name}");

        let (_, failed) = relay.get("/ui/api/runs?status=failed").await;
        assert_eq!(ids(&failed), [made[1].clone()], "{name}: {failed}");
        assert!(
            failed["data"][0]["error"]
                .as_str()
                .is_some_and(|e| !e.is_empty()),
            "{name}: a failed run names its error: {failed}"
        );
        let (_, other) = relay.get("/ui/api/runs?model=other-model").await;
        assert_eq!(ids(&other), [made[2].clone()], "{name}");

        let (_, first) = relay.get("/ui/api/runs?limit=3").await;
        assert_eq!(ids(&first), made[..3], "{name}");
        assert_eq!(first["has_more"], true, "{name}");
        assert_eq!(first["last_id"], made[2].as_str(), "{name}");
        let (_, second) = relay
            .get(&format!("/ui/api/runs?limit=3&after={}", made[2]))
            .await;
        assert_eq!(ids(&second), made[3..], "{name}");
        assert_eq!(second["has_more"], false, "{name}");

        let (_, completed) = relay
            .get("/ui/api/runs?status=completed&model=fake-model")
            .await;
        assert_eq!(
            ids(&completed),
            [made[0].clone(), made[3].clone()],
            "{name}"
        );
        let done = &completed["data"][0];
        assert!(done["duration_ms"].is_u64(), "{name}: {done}");
        assert!(done["ttft_ms"].is_u64(), "{name}: {done}");
        assert!(
            done["usage"]["total_tokens"].as_u64().unwrap() > 0,
            "{name}: {done}"
        );
    }
}

#[tokio::test]
async fn a_bad_filter_is_a_400_naming_its_parameter() {
    let (_up, relay) = plain_relay().await;
    for (query, param) in [
        ("status=done", "status"),
        ("limit=0", "limit"),
        ("limit=1000", "limit"),
        ("limit=x", "limit"),
    ] {
        let (status, body) = relay.get(&format!("/ui/api/runs?{query}")).await;
        assert_eq!(status, 400, "{query}: {body}");
        assert_eq!(body["error"]["param"], param, "{query}: {body}");
    }
    let (status, body) = relay.get("/ui/api/runs/resp_nope").await;
    assert_eq!(status, 404, "{body}");
    assert!(error_message(&body).contains("resp_nope"));
    let (status, _) = relay.get("/ui/api/nothing").await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn a_run_summary_counts_its_tool_calls_and_its_log_is_what_logs_export_writes() {
    let up = upstream().await;
    let server = mcp_server(mcp_test_server::Options::default()).await;
    let db = scratch("ui").join("relay.sqlite3");
    let mut c = config(&up.base_url());
    c.store = responses_relay::config::StoreKind::Sqlite(db.clone());
    let relay = relay(c).await;
    let body = relay.stream(&json!({"model": "fake-model", "input": "CALL add {\"a\":2,\"b\":3}\nCALL fail {}", "stream": true,
                "tools": [{"type": "mcp", "server_label": "math", "server_url": server.url(), "require_approval": "never"}]}))
    .await;
    let id = body.events[0]["response"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let (status, summary) = relay.get(&format!("/ui/api/runs/{id}")).await;
    assert_eq!(status, 200, "{summary}");
    assert_eq!(summary["status"], "completed");
    assert_eq!(summary["tool_calls"], 2, "{summary}");
    assert_eq!(summary["events"], body.events.len(), "{summary}");
    assert_eq!(summary["model"], "fake-model");
    assert_eq!(
        summary["input_items"],
        format!("/v1/responses/{id}/input_items")
    );

    let (status, headers, log) = text(&relay.url(&format!("/ui/api/runs/{id}/log")), None).await;
    assert_eq!(status, 200);
    assert_eq!(headers["content-type"], "application/jsonl");
    let lines: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let events: Vec<Value> = lines.iter().map(|l| l["event"].clone()).collect();
    assert_eq!(
        events, body.events,
        "the log is the stream, event for event"
    );
    assert!(lines.iter().all(|l| l["offset_ms"].is_u64()));
    let calls: Vec<&Value> = events
        .iter()
        .filter(|e| e["type"] == "response.output_item.done" && e["item"]["type"] == "mcp_call")
        .map(|e| &e["item"])
        .collect();
    assert_eq!(calls[0]["status"], "completed");
    assert_eq!(calls[1]["status"], "failed");

    relay.shutdown().await;
    let exported = std::process::Command::new(RELAY_BIN)
        .args([
            "logs",
            "export",
            &id,
            "--store",
            &format!("sqlite:{}", db.display()),
        ])
        .output()
        .unwrap();
    assert!(exported.status.success());
    assert_eq!(
        String::from_utf8(exported.stdout).unwrap(),
        log,
        "the download is `logs export`"
    );
}

#[tokio::test]
async fn pages_and_assets_are_compiled_in_and_may_load_from_this_origin_only() {
    let (_up, relay) = plain_relay().await;
    for (path, kind, needle) in [
        ("/ui/", "text/html", "/ui/assets/list.js"),
        ("/ui/runs/resp_123", "text/html", "/ui/assets/run.js"),
        ("/ui/playground", "text/html", "/ui/assets/playground.js"),
        (
            "/ui/assets/ui.css",
            "text/css",
            "prefers-color-scheme: dark",
        ),
        ("/ui/assets/common.js", "text/javascript", "sessionStorage"),
        ("/ui/assets/list.js", "text/javascript", "/ui/api/runs"),
        ("/ui/assets/run.js", "text/javascript", "?stream=true"),
        ("/ui/assets/playground.js", "text/javascript", "/v1/models"),
    ] {
        let (status, headers, body) = text(&relay.url(path), None).await;
        assert_eq!(status, 200, "{path}");
        assert!(
            headers["content-type"].to_str().unwrap().starts_with(kind),
            "{path}: {:?}",
            headers["content-type"]
        );
        let csp = headers["content-security-policy"].to_str().unwrap();
        assert!(
            csp.contains("default-src 'none'") && csp.contains("connect-src 'self'"),
            "{csp}"
        );
        assert_eq!(headers["x-content-type-options"], "nosniff");
        assert!(body.contains(needle), "{path} lacks {needle}");
        for other_host in ["http://", "https://", "//cdn", "@import"] {
            assert!(
                !body.contains(other_host),
                "{path} names another host: {other_host}"
            );
        }
    }
    let (status, _, _) = text(&relay.url("/ui/assets/nope.js"), None).await;
    assert_eq!(status, 404);
    let r = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .build()
        .unwrap()
        .get(relay.url("/ui"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 301);
    assert_eq!(r.headers()["location"], "/ui/");
}

#[tokio::test]
async fn with_relay_keys_pages_are_open_and_the_listing_is_the_keys_tenants_only() {
    let up = upstream().await;
    let mut c = config(&up.base_url());
    c.keys = vec![
        KeyEntry::of_tenant("key-a", "team-a"),
        KeyEntry::of_tenant("key-b", "team-b"),
    ];
    let relay = relay(c).await;
    let (_, a) = call(
        &relay.url("/v1/responses"),
        Some("key-a"),
        Some(&json!({"model": "fake-model", "input": "mine"})),
    )
    .await;
    let a_id = a["id"].as_str().unwrap();
    let (status, _, page) = text(&relay.url("/ui/"), None).await;
    assert_eq!(status, 200, "a page holds no data and needs no key");
    assert!(page.contains("key-form"));
    let (status, body) = call(&relay.url("/ui/api/runs"), None, None).await;
    assert_eq!(status, 401, "{body}");
    let (status, body) = call(&relay.url("/ui/api/runs"), Some("wrong"), None).await;
    assert_eq!(status, 401, "{body}");
    let (_, mine) = call(&relay.url("/ui/api/runs"), Some("key-a"), None).await;
    assert_eq!(ids(&mine), [a_id.to_string()]);
    let (_, theirs) = call(&relay.url("/ui/api/runs"), Some("key-b"), None).await;
    assert_eq!(ids(&theirs), Vec::<String>::new());
    for path in [
        format!("/ui/api/runs/{a_id}"),
        format!("/ui/api/runs/{a_id}/log"),
    ] {
        let (status, _) = call(&relay.url(&path), Some("key-b"), None).await;
        assert_eq!(status, 404, "{path}: another tenant's run is unknown");
        let (status, _, _) = text(&relay.url(&path), Some("key-a")).await;
        assert_eq!(status, 200, "{path}");
    }
}

/// A relay with keys of tenants `team-a` and `team-b` and an operator's key of tenant `ops`, with
/// one run made by each (returned in that order).
async fn relay_with_an_operator() -> (fake_upstream::FakeUpstream, Relay, [String; 3]) {
    let up = upstream().await;
    let mut c = config(&up.base_url());
    c.keys = vec![
        KeyEntry::of_tenant("key-a", "team-a"),
        KeyEntry::of_tenant("key-b", "team-b"),
        KeyEntry {
            operator: true,
            ..KeyEntry::of_tenant("key-op", "ops")
        },
    ];
    let relay = relay(c).await;
    let mut made = Vec::new();
    for key in ["key-a", "key-b", "key-op"] {
        let (status, run) = call(
            &relay.url("/v1/responses"),
            Some(key),
            Some(&json!({"model": "fake-model", "input": format!("made with {key}")})),
        )
        .await;
        assert_eq!(status, 200, "{run}");
        made.push(run["id"].as_str().unwrap().to_string());
    }
    (up, relay, made.try_into().unwrap())
}

#[tokio::test]
async fn an_operators_key_reads_the_tenant_it_names_and_its_own_without_one() {
    let (_up, relay, [_a, b, op]) = relay_with_an_operator().await;
    let op_key = Some("key-op");
    let (status, theirs) = call(&relay.url("/ui/api/runs?tenant=team-b"), op_key, None).await;
    assert_eq!(status, 200, "{theirs}");
    assert_eq!(ids(&theirs), [b.as_str()], "team B's runs only");
    let (_, mine) = call(&relay.url("/ui/api/runs"), op_key, None).await;
    assert_eq!(
        ids(&mine),
        [op.as_str()],
        "without tenant=, its own tenant's"
    );
    let (_, empty) = call(&relay.url("/ui/api/runs?tenant="), op_key, None).await;
    assert_eq!(ids(&empty), [op.as_str()], "an empty tenant= is no choice");
    let (_, filtered) = call(
        &relay.url("/ui/api/runs?tenant=team-b&status=completed&model=fake-model"),
        op_key,
        None,
    )
    .await;
    assert_eq!(ids(&filtered), [b.as_str()], "with the other filters");

    // One run of team B: its summary, its log, its input and its re-stream.
    let (status, summary) = call(
        &relay.url(&format!("/ui/api/runs/{b}?tenant=team-b")),
        op_key,
        None,
    )
    .await;
    assert_eq!(status, 200, "{summary}");
    assert_eq!(summary["status"], "completed");
    let input_items = summary["input_items"].as_str().unwrap();
    assert_eq!(
        input_items,
        format!("/ui/api/runs/{b}/input_items?tenant=team-b"),
        "its input is listed for the tenant the viewer reads"
    );
    let (status, input) = call(
        &relay.url(&format!("{input_items}&order=asc")),
        op_key,
        None,
    )
    .await;
    assert_eq!(status, 200, "{input}");
    assert!(
        input["data"][0]["content"][0]["text"] == "made with key-b",
        "{input}"
    );
    let (status, _, log) = text(
        &relay.url(&format!("/ui/api/runs/{b}/log?tenant=team-b")),
        op_key,
    )
    .await;
    assert_eq!(status, 200, "{log}");
    let (_, _, b_log) = text(&relay.url(&format!("/ui/api/runs/{b}/log")), Some("key-b")).await;
    assert_eq!(log, b_log, "the same log team B's key reads");
    let (status, headers, sse) = text(
        &relay.url(&format!(
            "/ui/api/runs/{b}/stream?tenant=team-b&starting_after=0"
        )),
        op_key,
    )
    .await;
    assert_eq!(status, 200, "{sse}");
    assert!(
        headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    assert!(
        !sse.contains("response.created") && sse.contains("response.completed"),
        "the log after event 0: {sse}"
    );

    // Its own run is not team B's, and the public API stays the key's own tenant's.
    let (status, _) = call(
        &relay.url(&format!("/ui/api/runs/{op}?tenant=team-b")),
        op_key,
        None,
    )
    .await;
    assert_eq!(status, 404);
    let (status, _) = call(&relay.url(&format!("/v1/responses/{b}")), op_key, None).await;
    assert_eq!(status, 404, "tenant= is the viewer's only");
    let (status, own) = call(&relay.url(&format!("/ui/api/runs/{op}")), op_key, None).await;
    assert_eq!(status, 200, "{own}");
    assert_eq!(
        own["input_items"],
        format!("/v1/responses/{op}/input_items")
    );
}

#[tokio::test]
async fn a_key_that_is_not_an_operators_naming_a_tenant_is_a_400_naming_tenant() {
    let (_up, relay, [a, b, _op]) = relay_with_an_operator().await;
    for path in [
        "/ui/api/runs?tenant=team-b".to_string(),
        format!("/ui/api/runs/{b}?tenant=team-b"),
        format!("/ui/api/runs/{b}/log?tenant=team-b"),
        format!("/ui/api/runs/{b}/input_items?tenant=team-b"),
        format!("/ui/api/runs/{b}/stream?tenant=team-b"),
        // Naming its own tenant is no different.
        "/ui/api/runs?tenant=team-a".to_string(),
    ] {
        let (status, body) = call(&relay.url(&path), Some("key-a"), None).await;
        assert_eq!(status, 400, "{path}: {body}");
        assert_eq!(body["error"]["type"], "invalid_request_error", "{path}");
        assert_eq!(body["error"]["param"], "tenant", "{path}");
        assert!(error_message(&body).contains("operator"), "{path}: {body}");
    }
    // An empty filter is no choice: the key's own runs, as before.
    let (status, mine) = call(&relay.url("/ui/api/runs?tenant="), Some("key-a"), None).await;
    assert_eq!(status, 200, "{mine}");
    assert_eq!(ids(&mine), [a]);
}

#[tokio::test]
async fn a_tenant_name_no_tenant_may_have_is_a_400_naming_tenant() {
    let (_up, relay, _) = relay_with_an_operator().await;
    let long = "t".repeat(65);
    for name in ["team%2Fb", "team%20b", "caf%C3%A9", long.as_str()] {
        let path = format!("/ui/api/runs?tenant={name}");
        let (status, body) = call(&relay.url(&path), Some("key-op"), None).await;
        assert_eq!(status, 400, "{path}: {body}");
        assert_eq!(body["error"]["param"], "tenant", "{path}");
        assert_eq!(body["error"]["code"], "invalid_value", "{path}");
    }
    // A well-formed name of no configured tenant is simply one with no runs.
    let (status, none) = call(
        &relay.url("/ui/api/runs?tenant=nobody"),
        Some("key-op"),
        None,
    )
    .await;
    assert_eq!(status, 200, "{none}");
    assert_eq!(ids(&none), Vec::<String>::new());
}

#[tokio::test]
async fn the_demo_runs_an_agent_run_prints_its_events_and_serves_its_viewer() {
    use std::io::{BufRead, BufReader};
    let child = std::process::Command::new(RELAY_BIN)
        .args(["demo", "--listen", "127.0.0.1:0"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Killed when dropped, should an assertion fail first.
    let mut demo = RelayProcess {
        child,
        base: String::new(),
    };
    let mut lines = BufReader::new(demo.child.stdout.take().unwrap()).lines();
    let mut printed = Vec::new();
    let viewer = loop {
        let line = lines
            .next()
            .expect("the demo prints until its viewer")
            .unwrap();
        printed.push(line.clone());
        if let Some(url) = line.strip_prefix("this run in the viewer: ") {
            break url.trim().to_string();
        }
    };
    let printed = printed.join("\n");
    for needed in [
        "response.created",
        "mcp_list_tools demo: add",
        "response.mcp_call_arguments.delta",
        "mcp_call demo.add {\"a\": 2, \"b\": 3} -> {\"sum\":5.0}",
        "response.output_text.delta",
        "response.completed",
    ] {
        assert!(printed.contains(needed), "{needed} not in:\n{printed}");
    }
    let base = viewer.split("/ui/").next().unwrap().to_string();
    let id = viewer.rsplit('/').next().unwrap();
    let (status, _, page) = text(&viewer, None).await;
    assert_eq!(status, 200);
    assert!(page.contains("/ui/assets/run.js"));
    let (_, runs) = get(&format!("{base}/ui/api/runs")).await;
    assert_eq!(ids(&runs), [id.to_string()], "{runs}");
    assert_eq!(runs["data"][0]["status"], "completed");
    assert_eq!(runs["data"][0]["tool_calls"], 1);
    // The playground lists the demo's registered MCP server and the scripted model.
    let (_, servers) = get(&format!("{base}/v1/mcp/servers")).await;
    assert_eq!(servers["data"][0]["label"], "demo", "{servers}");
    let (status, models) = get(&format!("{base}/v1/models")).await;
    assert_eq!(status, 200, "{models}");
    // Stopped with SIGTERM, it exits cleanly.
    std::process::Command::new("kill")
        .args(["-TERM", &demo.child.id().to_string()])
        .status()
        .unwrap();
    let status = demo.child.wait().unwrap();
    assert!(status.success(), "{status:?}");
}

#[tokio::test]
async fn replay_serves_the_viewer_for_its_recording() {
    let (_up, relay) = plain_relay().await;
    let id = relay
        .start(&json!({"model": "fake-model", "input": "record me"}))
        .await;
    let (_, _, log) = text(&relay.url(&format!("/ui/api/runs/{id}/log")), None).await;
    let file = scratch("ui-replay").join("run.jsonl");
    std::fs::write(&file, &log).unwrap();
    let replay = spawn_relay(
        &["replay", file.to_str().unwrap(), "--listen", "127.0.0.1:0"],
        &[],
        std::process::Stdio::null(),
    );
    let (status, headers, page) = text(&replay.url(&format!("/ui/runs/{id}")), None).await;
    assert_eq!(status, 200);
    assert!(
        headers["content-security-policy"]
            .to_str()
            .unwrap()
            .contains("default-src 'none'")
    );
    assert!(page.contains("/ui/assets/run.js"));
    let (_, list) = replay.get("/ui/api/runs").await;
    assert_eq!(ids(&list), [id.to_string()]);
    assert_eq!(list["data"][0]["status"], "completed");
    assert_eq!(
        list["data"][0]["input_items"],
        Value::Null,
        "a recording keeps no input"
    );
    let (_, _, served) = text(&replay.url(&format!("/ui/api/runs/{id}/log")), None).await;
    assert_eq!(served, log, "the recording, as exported");
    let (status, body) = replay.get("/ui/api/runs/resp_other/log").await;
    assert_eq!(status, 404, "{body}");
}

#[tokio::test]
async fn a_run_still_going_is_listed_as_in_progress_with_no_duration_until_it_ends() {
    let up = upstream().await;
    for (name, c) in store_configs(&up) {
        let relay = relay(c).await;
        let id = relay.start(&json!({"model": "fake-model?delay_ms=100&deltas=20", "input": "slowly", "background": true})).await;
        // Listed once the store kept its start (SQLite: the writer's next commit).
        let mut row = Value::Null;
        for _ in 0..200 {
            let (_, page) = relay.get("/ui/api/runs?status=in_progress").await;
            if let Some(r) = page["data"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["id"] == id.as_str())
            {
                row = r.clone();
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert_eq!(
            row["status"], "in_progress",
            "{name}: the live run is listed: {row}"
        );
        let (_, queued) = relay.get("/ui/api/runs?status=queued").await;
        assert_eq!(
            ids(&queued),
            Vec::<String>::new(),
            "{name}: it is no longer queued"
        );
        assert_eq!(row["duration_ms"], Value::Null, "{name}: {row}");
        let (_, log) = call(&relay.url(&format!("/ui/api/runs/{id}")), None, None).await;
        assert_eq!(log["status"], "in_progress", "{name}");
        let (_, cancel) = relay.cancel(&id).await;
        assert_eq!(cancel["status"], "cancelled", "{name}: {cancel}");
        let (_, after) = relay.get("/ui/api/runs?status=cancelled").await;
        assert_eq!(ids(&after), [id.as_str()], "{name}: {after}");
        assert!(after["data"][0]["duration_ms"].is_u64(), "{name}: {after}");
    }
}

#[test]
fn the_demo_on_an_address_in_use_exits_64_naming_listen() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let out = std::process::Command::new(RELAY_BIN)
        .args(["demo", "--listen", &addr])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("'--listen'") && err.contains(&addr), "{err}");
}

#[tokio::test]
async fn each_model_turns_usage_is_kept_beside_the_run_on_every_store() {
    let up = upstream().await;
    let server = mcp_server(mcp_test_server::Options::default()).await;
    for (name, c) in store_configs(&up) {
        let relay = relay(c).await;
        let (_, run) = relay.create(&json!({"model": "fake-model", "input": "CALL add {\"a\":1,\"b\":2}",
                    "tools": [{"type": "mcp", "server_label": "m", "server_url": server.url(), "require_approval": "never"}]}))
        .await;
        let id = run["id"].as_str().unwrap();
        let mut turns = Value::Null;
        for _ in 0..200 {
            let (_, summary) = relay.get(&format!("/ui/api/runs/{id}")).await;
            if !summary["turns"].is_null() {
                turns = summary["turns"].clone();
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        let turns = turns
            .as_array()
            .unwrap_or_else(|| panic!("{name}: no turns kept"));
        assert_eq!(
            turns.len(),
            2,
            "{name}: the call's turn, then the answer's: {turns:?}"
        );
        for key in ["input_tokens", "output_tokens", "total_tokens"] {
            let sum: u64 = turns.iter().map(|t| t[key].as_u64().unwrap()).sum();
            assert_eq!(
                sum,
                run["usage"][key].as_u64().unwrap(),
                "{name}: {key} sums to the run's"
            );
        }
        assert!(
            turns[1]["input_tokens"].as_u64() > turns[0]["input_tokens"].as_u64(),
            "{name}: the second turn also reads the tool's result: {turns:?}"
        );
        // Another tenant's or an unknown run has none to show.
        let (status, _) = relay.get("/ui/api/runs/resp_unknown").await;
        assert_eq!(status, 404, "{name}");
        // A deleted run's turns go with it.
        let (status, _) = call(&relay.url(&format!("/v1/responses/{id}")), None, None).await;
        assert_eq!(status, 200);
        let deleted = relay.delete(&format!("/v1/responses/{id}")).await;
        assert_eq!(deleted.status().as_u16(), 200, "{name}");
        let (status, _) = relay.get(&format!("/ui/api/runs/{id}")).await;
        assert_eq!(status, 404, "{name}");
    }
}

#[tokio::test]
async fn a_run_with_store_false_is_never_listed() {
    let (_up, relay) = plain_relay().await;
    let (_, kept) = relay
        .create(&json!({"model": "fake-model", "input": "keep"}))
        .await;
    let (_, unkept) = relay
        .create(&json!({"model": "fake-model", "input": "forget", "store": false}))
        .await;
    let (_, page) = relay.get("/ui/api/runs").await;
    assert_eq!(ids(&page), [kept["id"].as_str().unwrap()]);
    let unkept = unkept["id"].as_str().unwrap();
    let (status, _) = relay.get(&format!("/ui/api/runs/{unkept}")).await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn the_viewer_never_shows_an_mcp_servers_secrets() {
    let up = upstream().await;
    let server = mcp_server(requiring_bearer("VIEWER-SECRET-TOKEN")).await;
    let relay = relay(config(&up.base_url())).await;
    let (status, run) = relay
        .create(&json!({"model": "fake-model", "input": "CALL whoami {}",
                "tools": [{"type": "mcp", "server_label": "s", "require_approval": "never",
                           "server_url": format!("{}?key=VIEWER-SECRET-QUERY", server.url()),
                           "authorization": "VIEWER-SECRET-TOKEN",
                           "headers": {"x-team": "VIEWER-SECRET-HEADER"}}]}))
        .await;
    assert_eq!(status, 200, "{run}");
    // The secrets were used: the server saw the token and the header.
    let call = find_item(&run["output"], "mcp_call").unwrap();
    assert!(
        str_at(call, "output").starts_with("authorized; headers: x-team"),
        "{call}"
    );
    let id = run["id"].as_str().unwrap();
    for path in [
        "/ui/api/runs".to_string(),
        format!("/ui/api/runs/{id}"),
        format!("/ui/api/runs/{id}/log"),
    ] {
        let (status, _, body) = text(&relay.url(&path), None).await;
        assert_eq!(status, 200, "{path}");
        for secret in [
            "VIEWER-SECRET-TOKEN",
            "VIEWER-SECRET-HEADER",
            "VIEWER-SECRET-QUERY",
        ] {
            assert!(!body.contains(secret), "{path} shows {secret}");
        }
    }
}
