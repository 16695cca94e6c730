//! Usage per tenant: every run that ends (stored or `store: false`, streamed or not) is tallied
//! by tenant, UTC day and model; the tallies reach the store on `Store::flush` and on the graceful
//! shutdown; `responses-relay usage` prints them from a SQLite store (of a running or a stopped
//! relay) or from a Redis shared by two relays, as a table or JSON, for one tenant or all, from
//! `--since` on; bad values exit 64 naming their flag.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::mcp_test_server::Options;
use crate::support::*;
use responses_relay::config::{KeyEntry, StoreKind};
use responses_relay::store::usage::{day_number, day_of};
use responses_relay::{App, Config};

/// Two tenants, one key each.
fn keys() -> Vec<KeyEntry> {
    vec![
        KeyEntry::of_tenant("a-key", "team-a"),
        KeyEntry::of_tenant("b-key", "team-b"),
    ]
}

/// A relay's app over `store` with the two tenants' keys, real ids and a real clock (so runs
/// fall on today, and two relays sharing Redis never mint one id).
fn app_over(up: &crate::fake_upstream::FakeUpstream, store: &StoreKind) -> App {
    App::new(Config {
        store: store.clone(),
        deterministic: false,
        keys: keys(),
        ..config(&up.base_url())
    })
}

/// What the runs add up to per (tenant, day, model): runs, input, output tokens, MCP calls.
#[derive(Default)]
struct Expected(BTreeMap<(String, String, String), [u64; 4]>);

impl Expected {
    /// Adds one ended run of `tenant` on `model`, as its final Response tells.
    fn add(&mut self, tenant: &str, model: &str, response: &Value) {
        let usage = &response["usage"];
        let (input, output) = (
            usage["input_tokens"].as_u64().unwrap(),
            usage["output_tokens"].as_u64().unwrap(),
        );
        assert!(
            input > 0 && output > 0,
            "the upstream reports usage: {usage}"
        );
        let calls = items_of(response, "mcp_call").len() as u64;
        let day = day_of(response["created_at"].as_i64().unwrap());
        let row = self
            .0
            .entry((tenant.into(), day, model.into()))
            .or_default();
        for (n, add) in row.iter_mut().zip([1, input, output, calls]) {
            *n += add;
        }
    }

    /// The rows `usage --format json` prints, of `tenant` (or all) from `since` on.
    fn json(&self, tenant: Option<&str>, since: &str) -> Value {
        let rows = self
            .0
            .iter()
            .filter(|((t, day, _), _)| tenant.is_none_or(|w| w == t) && day.as_str() >= since)
            .map(|((t, day, model), [runs, input, output, calls])| {
                json!({"tenant": t, "day": day, "model": model, "runs": runs,
                    "input_tokens": input, "output_tokens": output,
                    "total_tokens": input + output, "mcp_calls": calls})
            })
            .collect();
        Value::Array(rows)
    }

    /// The one day the runs fell on (a test that straddles midnight UTC has two: it fails).
    fn day(&self) -> String {
        let mut days: Vec<&String> = self.0.keys().map(|(_, d, _)| d).collect();
        days.dedup();
        assert_eq!(days.len(), 1, "{days:?}");
        days[0].clone()
    }
}

/// `POST /v1/responses` of `body` with `key`, streamed when the body says so: the final Response.
async fn run_as(relay: &Relay, key: &str, body: Value) -> Value {
    let r = client()
        .post(relay.url("/v1/responses"))
        .bearer_auth(key)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let text = r.text().await.unwrap();
    if body["stream"] == true {
        let events = parse_sse(&text).events;
        check_events(&events)
    } else {
        serde_json::from_str(&text).unwrap()
    }
}

/// Team A: a stored run, and a `store: false` run on another model that calls an MCP tool once.
/// Team B: a streamed `store: false` run. Each is added to `expected`.
async fn runs(relay: &Relay, mcp: &str, expected: &mut Expected) {
    let stored = json!({"model": "fake-model", "input": "hello"});
    let r = run_as(relay, "a-key", stored).await;
    assert_eq!(r["status"], "completed", "{r}");
    expected.add("team-a", "fake-model", &r);
    let with_call = json!({"model": "fake-model?deltas=3", "input": "CALL add {\"a\":2,\"b\":3}",
        "store": false, "tools": [mcp_tool("math", mcp)]});
    let r = run_as(relay, "a-key", with_call).await;
    assert_eq!(items_of(&r, "mcp_call").len(), 1, "{r}");
    expected.add("team-a", "fake-model?deltas=3", &r);
    let streamed =
        json!({"model": "fake-model", "input": "hi there", "store": false, "stream": true});
    let r = run_as(relay, "b-key", streamed).await;
    assert_eq!(r["status"], "completed", "{r}");
    expected.add("team-b", "fake-model", &r);
}

/// `responses-relay usage --store STORE ARGS`, which must succeed: its stdout.
fn usage(store: &str, args: &[&str]) -> String {
    let mut argv = vec!["usage", "--store", store];
    argv.extend_from_slice(args);
    let out = run_relay(&argv);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{argv:?}: {:?}: {err}", out.status);
    String::from_utf8(out.stdout).unwrap()
}

/// `usage --format json`: the rows printed.
fn usage_json(store: &str, args: &[&str]) -> Value {
    let mut argv = vec!["--format", "json"];
    argv.extend_from_slice(args);
    serde_json::from_str(&usage(store, &argv)).unwrap()
}

/// Checks `usage`'s table against `expected`: a head line, one line per row with its counts and
/// total tokens, and a total line; every line as long as the others (the columns aligned, the
/// last right-aligned).
fn assert_table(text: &str, expected: &Value) {
    let lines: Vec<&str> = text.lines().collect();
    let words = |l: &str| l.split_whitespace().map(str::to_string).collect::<Vec<_>>();
    assert_eq!(
        words(lines[0]),
        [
            "tenant", "day", "model", "runs", "input", "tokens", "output", "tokens", "total",
            "tokens", "mcp", "calls"
        ]
    );
    let rows = expected.as_array().unwrap();
    assert_eq!(lines.len(), rows.len() + 2, "{text}");
    let mut total = [0u64; 5];
    for (line, row) in lines[1..].iter().zip(rows) {
        let counts = [
            "runs",
            "input_tokens",
            "output_tokens",
            "total_tokens",
            "mcp_calls",
        ];
        let mut want = vec![
            str_at(row, "tenant"),
            str_at(row, "day"),
            str_at(row, "model"),
        ]
        .into_iter()
        .map(str::to_string)
        .collect::<Vec<_>>();
        for (sum, c) in total.iter_mut().zip(counts) {
            *sum += row[c].as_u64().unwrap();
            want.push(row[c].to_string());
        }
        assert_eq!(words(line), want, "{text}");
    }
    let mut want_total = vec!["total".to_string()];
    want_total.extend(total.iter().map(u64::to_string));
    assert_eq!(words(lines.last().unwrap()), want_total, "{text}");
    assert!(
        lines.iter().all(|l| l.len() == lines[0].len()),
        "columns not aligned:\n{text}"
    );
}

/// The day after `day`.
fn next_day(day: &str) -> String {
    day_of((day_number(day).unwrap() + 1) * 86_400)
}

#[tokio::test]
async fn the_report_prints_a_sqlite_stores_usage_per_tenant_day_and_model_running_and_stopped() {
    let up = upstream().await;
    let mcp = mcp_server(Options::default()).await;
    let path = scratch("usage").join("relay.sqlite3");
    let app = app_over(&up, &StoreKind::Sqlite(path.clone()));
    let relay = relay_app(app.clone()).await;
    let store = format!("sqlite:{}", path.display());
    let mut expected = Expected::default();
    runs(&relay, &mcp.url(), &mut expected).await;
    // Store::flush writes the tallies: the report reads the running relay's file.
    app.store().flush().await;
    assert_eq!(usage_json(&store, &[]), expected.json(None, ""));
    // More runs, then a graceful shutdown, which flushes them: the counts add up.
    runs(&relay, &mcp.url(), &mut expected).await;
    relay.shutdown().await;
    let all = expected.json(None, "");
    assert_eq!(all[0]["runs"], 2, "{all}");
    assert_eq!(all[1]["mcp_calls"], 2, "{all}");
    assert_eq!(usage_json(&store, &[]), all);
    assert_table(&usage(&store, &[]), &all);
    let team_b = expected.json(Some("team-b"), "");
    assert_eq!(team_b.as_array().unwrap().len(), 1);
    assert_eq!(usage_json(&store, &["--tenant", "team-b"]), team_b);
    assert_table(&usage(&store, &["--tenant", "team-b"]), &team_b);
    assert_eq!(usage_json(&store, &["--tenant", "team-c"]), json!([]));
    assert_table(&usage(&store, &["--tenant", "team-c"]), &json!([]));
}

#[tokio::test]
async fn a_running_relay_writes_its_tallies_to_the_store_within_ten_seconds_without_a_flush() {
    let up = upstream().await;
    let mcp = mcp_server(Options::default()).await;
    let path = scratch("usage").join("relay.sqlite3");
    let started = std::time::Instant::now();
    let relay = relay_app(app_over(&up, &StoreKind::Sqlite(path.clone()))).await;
    let mut expected = Expected::default();
    runs(&relay, &mcp.url(), &mut expected).await;
    let read = || responses_relay::store::sqlite::usage_at(&path, None, "2000-01-01").unwrap();
    // Not written per run: nothing yet, short of the first flush.
    if started.elapsed() < std::time::Duration::from_secs(9) {
        assert!(read().is_empty(), "written per run: {:?}", read());
    }
    while read().len() < 3 {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(15),
            "not written within 15 s"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    let store = format!("sqlite:{}", path.display());
    assert_eq!(usage_json(&store, &[]), expected.json(None, ""));
}

#[tokio::test]
async fn since_takes_days_hours_or_a_day_and_the_report_starts_there() {
    let up = upstream().await;
    let mcp = mcp_server(Options::default()).await;
    let path = scratch("usage").join("relay.sqlite3");
    let relay = relay_app(app_over(&up, &StoreKind::Sqlite(path.clone()))).await;
    let mut expected = Expected::default();
    runs(&relay, &mcp.url(), &mut expected).await;
    relay.shutdown().await;
    let store = format!("sqlite:{}", path.display());
    let all = expected.json(None, "");
    let today = expected.day();
    for since in ["7d", "30d", "24h", "0d", "2000-01-01", today.as_str()] {
        assert_eq!(
            usage_json(&store, &["--since", since]),
            all,
            "--since {since}"
        );
    }
    // The default is 7d.
    assert_eq!(usage_json(&store, &[]), all);
    let tomorrow = next_day(&today);
    assert_eq!(usage_json(&store, &["--since", &tomorrow]), json!([]));
}

#[tokio::test]
async fn two_relays_sharing_redis_add_up_their_tenants_usage_in_the_report() {
    usage_added_up_across_relays(redis_db()).await;
}

/// The test above, on the Redis store at `url` (one server or a cluster) that no other test uses.
pub(crate) async fn usage_added_up_across_relays(url: String) {
    let up = upstream().await;
    let mcp = mcp_server(Options::default()).await;
    let a = relay_app(app_over(&up, &StoreKind::Redis(url.clone()))).await;
    let b = relay_app(app_over(&up, &StoreKind::Redis(url.clone()))).await;
    let mut expected = Expected::default();
    runs(&a, &mcp.url(), &mut expected).await;
    runs(&b, &mcp.url(), &mut expected).await;
    a.shutdown().await;
    b.shutdown().await;
    let all = expected.json(None, "");
    assert_eq!(all.as_array().unwrap().len(), 3, "{all}");
    assert!(
        all.as_array().unwrap().iter().all(|r| r["runs"] == 2),
        "{all}"
    );
    assert_eq!(usage_json(&url, &[]), all);
    assert_table(&usage(&url, &[]), &all);
    let team_a = expected.json(Some("team-a"), "");
    assert_eq!(usage_json(&url, &["--tenant", "team-a"]), team_a);
    let tomorrow = next_day(&expected.day());
    assert_eq!(usage_json(&url, &["--since", &tomorrow]), json!([]));
    assert_eq!(
        usage_json(&url, &["--since", "24h", "--tenant", "team-b"]),
        expected.json(Some("team-b"), "")
    );
}

#[tokio::test]
async fn a_memory_store_keeps_its_usage_readable_through_the_store() {
    let up = upstream().await;
    let mcp = mcp_server(Options::default()).await;
    let app = app_over(&up, &StoreKind::Memory);
    let relay = relay_app(app.clone()).await;
    let mut expected = Expected::default();
    runs(&relay, &mcp.url(), &mut expected).await;
    let rows = app.store().usage(None, "2000-01-01").await.unwrap();
    let as_json: Vec<Value> = serde_json::from_str(&responses_relay::usage::json(&rows)).unwrap();
    assert_eq!(Value::Array(as_json), expected.json(None, ""));
    let team_a = responses_relay::store::Tenant::new("team-a");
    let rows = app
        .store()
        .usage(Some(&team_a), "2000-01-01")
        .await
        .unwrap();
    assert_eq!(rows.len(), 2);
    assert!(rows.iter().all(|r| r.tenant == "team-a"));
}

#[test]
fn bad_usage_values_exit_64_naming_the_flag() {
    let store = format!("sqlite:{}", scratch("usage").join("none.sqlite3").display());
    let s = store.as_str();
    for (args, flag, says) in [
        (vec!["--store", s, "--since", "7w"], "--since", "'7w'"),
        (
            vec!["--store", s, "--since", "2023-02-29"],
            "--since",
            "YYYY-MM-DD",
        ),
        (vec!["--store", s, "--since", ""], "--since", "7d"),
        (
            vec!["--store", s, "--tenant", "a b"],
            "--tenant",
            "a tenant is",
        ),
        (vec!["--store", s, "--format", "csv"], "--format", "csv"),
        (vec!["--store", "memory"], "--store", "memory store"),
        (vec!["--store", "postgres://x"], "--store", "sqlite:PATH"),
        (vec!["--store", s], "--store", "no such database file"),
        (
            vec!["--store", "redis://127.0.0.1:9/0"],
            "--store",
            "cannot reach Redis",
        ),
        (vec![], "--store", "required"),
    ] {
        let mut argv = vec!["usage"];
        argv.extend_from_slice(&args);
        let out = run_relay(&argv);
        let err = String::from_utf8(out.stderr).unwrap();
        assert_eq!(out.status.code(), Some(64), "{argv:?}: {err}");
        assert!(
            err.contains(flag),
            "{argv:?}: stderr does not name {flag}: {err}"
        );
        assert!(
            err.contains(says),
            "{argv:?}: stderr does not say {says}: {err}"
        );
        assert!(out.stdout.is_empty(), "{argv:?}");
    }
}

#[tokio::test]
async fn a_relay_process_stopped_by_sigterm_writes_its_usage_on_every_lane_for_the_report() {
    let up = upstream().await;
    let db = scratch("usage-process").join("relay.sqlite3");
    let store = format!("sqlite:{}", db.display());
    let mut relay = spawn_relay(
        &serve_args(&up.base_url(), &store, &["--lanes", "2"]),
        &[],
        std::process::Stdio::null(),
    );
    let mut expected = Expected::default();
    // Each request on a connection of its own: the two lanes take them in turn.
    for stored in [true, false, true] {
        let (status, r) = relay
            .create(&json!({"model": "fake-model", "input": "hi", "store": stored}))
            .await;
        assert_eq!(status, 200, "{r}");
        expected.add("default", "fake-model", &r);
    }
    signal(relay.child.id(), "-TERM");
    let exited = tokio::task::spawn_blocking(move || relay.child.wait().unwrap())
        .await
        .unwrap();
    assert!(exited.success(), "{exited:?}");
    let all = expected.json(None, "");
    assert_eq!(all[0]["runs"], 3, "{all}");
    assert_eq!(usage_json(&store, &[]), all);
}
