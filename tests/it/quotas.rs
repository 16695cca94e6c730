//! Limits per key and per tenant (issue 35): requests, tokens and MCP calls per minute, a daily
//! token budget and concurrent runs, from the config file as an operator writes it. Each limit
//! is hit and reset on a clock the test moves (no sleeps); refusals are OpenAI's 429 with its
//! headers; with the Redis store, relays share the counters.

use std::time::Duration;

use serde_json::{Value, json};

use crate::fake_upstream::FakeUpstream;
use crate::support::*;
use responses_relay::App;
use responses_relay::limits::Clock;

/// 2023-11-14T22:13:20Z: about 1 h 47 min before a UTC midnight.
pub(crate) const START_MS: u64 = 1_700_000_000_000;
const TO_MIDNIGHT: Duration = Duration::from_millis(1_700_006_400_000 - START_MS);

/// A relay configured by `toml` (a memory store unless `args` say otherwise) in front of `up`,
/// its limits on a clock at [`START_MS`] that only the test moves.
pub(crate) async fn limited(up: &FakeUpstream, args: &[&str], toml: &str) -> (Relay, Clock) {
    limited_at(up, args, toml, Clock::manual(START_MS)).await
}

pub(crate) async fn limited_at(
    up: &FakeUpstream,
    args: &[&str],
    toml: &str,
    clock: Clock,
) -> (Relay, Clock) {
    let base = up.base_url();
    let mut argv = vec![
        "--upstream-url",
        base.as_str(),
        "--mcp-allow-private-networks",
    ];
    if !args.contains(&"--store") {
        argv.extend(["--store", "memory"]);
    }
    argv.extend_from_slice(args);
    let config = serve_config(&argv, toml).expect("a valid config");
    let app = App::open_with_limits_clock(config, clock.clone()).unwrap();
    (relay_app(app).await, clock)
}

/// The answer to a request with `key` as the bearer: status, headers, JSON body.
pub(crate) async fn send(
    relay: &Relay,
    method: &str,
    path: &str,
    key: &str,
    body: Option<&Value>,
) -> (u16, reqwest::header::HeaderMap, Value) {
    let c = client();
    let url = relay.url(path);
    let mut req = match method {
        "GET" => c.get(&url),
        _ => c.post(&url),
    }
    .bearer_auth(key)
    .timeout(Duration::from_secs(30));
    if let Some(b) = body {
        req = req.json(b);
    }
    let r = req.send().await.unwrap();
    let (status, headers) = (r.status().as_u16(), r.headers().clone());
    let text = r.text().await.unwrap();
    let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
    (status, headers, body)
}

pub(crate) async fn create(
    relay: &Relay,
    key: &str,
    body: &Value,
) -> (u16, reqwest::header::HeaderMap, Value) {
    send(relay, "POST", "/v1/responses", key, Some(body)).await
}

pub(crate) fn hi() -> Value {
    json!({"model": "fake-model", "input": "hi"})
}

pub(crate) fn header<'a>(h: &'a reqwest::header::HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name).map(|v| v.to_str().unwrap())
}

/// The value of one sample of `/metrics` (0 when absent).
pub(crate) async fn metric(relay: &Relay, sample: &str) -> f64 {
    let text = client()
        .get(relay.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(sample)?.trim().parse().ok())
        .unwrap_or(0.0)
}

const TEAM_A: &str = r#"
[[keys]]
key = "ka"
tenant = "team-a"
limits = { requests_per_minute = 2 }
"#;

#[tokio::test]
async fn over_requests_per_minute_a_key_gets_openais_429_and_headers_until_the_minute_drains() {
    let up = upstream().await;
    let (relay, clock) = limited(&up, &[], TEAM_A).await;
    let (status, h, _) = create(&relay, "ka", &hi()).await;
    assert_eq!(status, 200);
    assert_eq!(header(&h, "x-ratelimit-limit-requests"), Some("2"));
    assert_eq!(header(&h, "x-ratelimit-remaining-requests"), Some("1"));
    // One request of two a minute drains in 30 s.
    assert_eq!(header(&h, "x-ratelimit-reset-requests"), Some("30s"));
    assert_eq!(
        header(&h, "x-ratelimit-limit-tokens"),
        None,
        "no token limit"
    );
    let (status, h, r) = create(&relay, "ka", &hi()).await;
    assert_eq!(status, 200);
    assert_eq!(header(&h, "x-ratelimit-remaining-requests"), Some("0"));
    assert_eq!(header(&h, "x-ratelimit-reset-requests"), Some("1m0s"));
    let id = r["id"].as_str().unwrap().to_string();

    let (status, h, r) = create(&relay, "ka", &hi()).await;
    assert_eq!(status, 429, "{r}");
    assert_eq!(r["error"]["type"], "rate_limit_error");
    assert_eq!(r["error"]["code"], "rate_limit_exceeded");
    let message = r["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("requests per minute")
            && message.contains("limit 2")
            && message.contains("30s"),
        "{message}"
    );
    assert_eq!(header(&h, "retry-after"), Some("30"));
    assert_eq!(header(&h, "retry-after-ms"), Some("30000"));
    assert_eq!(header(&h, "x-ratelimit-remaining-requests"), Some("0"));
    assert!(h.get("x-request-id").is_some());

    // Every answer to a limited key carries the headers; reads are not counted.
    let (status, h, _) = send(&relay, "GET", &format!("/v1/responses/{id}"), "ka", None).await;
    assert_eq!(status, 200);
    assert_eq!(header(&h, "x-ratelimit-remaining-requests"), Some("0"));

    clock.advance(Duration::from_secs(29));
    assert_eq!(create(&relay, "ka", &hi()).await.0, 429);
    clock.advance(Duration::from_secs(1));
    let (status, h, _) = create(&relay, "ka", &hi()).await;
    assert_eq!(status, 200);
    assert_eq!(header(&h, "x-ratelimit-remaining-requests"), Some("0"));
    let refused = r#"relay_rate_limited_total{tenant="team-a",limit="requests_per_minute"}"#;
    assert_eq!(metric(&relay, refused).await, 2.0);
}

#[tokio::test]
async fn a_tenants_limits_are_shared_by_all_its_keys_and_a_key_without_limits_is_not_counted() {
    let up = upstream().await;
    let toml = r#"
[[keys]]
key = "k1"
tenant = "team-a"
[[keys]]
key = "k2"
tenant = "team-a"
[[keys]]
key = "kb"
tenant = "team-b"
[tenants.team-a]
limits = { requests_per_minute = 2 }
"#;
    let (relay, _clock) = limited(&up, &[], toml).await;
    assert_eq!(create(&relay, "k1", &hi()).await.0, 200);
    assert_eq!(create(&relay, "k2", &hi()).await.0, 200);
    let (status, _, r) = create(&relay, "k1", &hi()).await;
    assert_eq!(status, 429);
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("tenant 'team-a'"),
        "{r}"
    );
    assert_eq!(create(&relay, "k2", &hi()).await.0, 429);
    for _ in 0..5 {
        let (status, h, _) = create(&relay, "kb", &hi()).await;
        assert_eq!(status, 200);
        assert_eq!(header(&h, "x-ratelimit-limit-requests"), None);
    }
}

#[tokio::test]
async fn tokens_per_minute_are_charged_from_each_turns_usage_and_refuse_only_when_spent() {
    let (up, server) = (upstream().await, mcp_server(Default::default()).await);
    let toml = r#"
[[keys]]
key = "ka"
tenant = "team-a"
limits = { tokens_per_minute = 1000 }
"#;
    let (relay, clock) = limited(&up, &[], toml).await;
    // An MCP run: two model turns, both charged.
    let body = json!({"model": "fake-model", "input": "CALL add {\"a\":2,\"b\":3}",
        "tools": [mcp_tool("math", &server.url())]});
    let (status, h, r) = create(&relay, "ka", &body).await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(header(&h, "x-ratelimit-limit-tokens"), Some("1000"));
    assert_eq!(
        header(&h, "x-ratelimit-remaining-tokens"),
        Some("1000"),
        "charged after"
    );
    let usage = &r["usage"];
    let total = usage["input_tokens"].as_u64().unwrap() + usage["output_tokens"].as_u64().unwrap();
    assert!(up.requests().len() >= 2, "two model turns");
    let (_, _, limits) = send(&relay, "GET", "/v1/limits", "ka", None).await;
    assert_eq!(limits["tenant"], "team-a");
    let tpm = &limits["limits"][0];
    assert_eq!(
        (
            tpm["limit"].as_str(),
            tpm["scope"].as_str(),
            tpm["used"].as_u64()
        ),
        (Some("tokens_per_minute"), Some("key"), Some(total)),
        "{limits}"
    );

    // Spend the rest: runs admitted while anything is left may overrun it.
    let mut runs = 1;
    loop {
        let (status, h, r) = create(&relay, "ka", &hi()).await;
        if status == 429 {
            assert_eq!(r["error"]["code"], "rate_limit_exceeded", "{r}");
            assert!(
                r["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("tokens per minute")
            );
            assert_eq!(header(&h, "x-ratelimit-remaining-tokens"), Some("0"));
            let wait: u64 = header(&h, "retry-after-ms").unwrap().parse().unwrap();
            assert!(wait > 0 && wait <= 60_000, "{wait}");
            clock.advance(Duration::from_millis(wait));
            break;
        }
        assert_eq!(status, 200, "{r}");
        runs += 1;
        assert!(runs < 200, "a budget of 1,000 tokens was never spent");
    }
    assert_eq!(create(&relay, "ka", &hi()).await.0, 200);
}

#[tokio::test]
async fn a_daily_budget_spent_mid_run_lets_the_run_finish_and_refuses_the_next_until_midnight() {
    let up = upstream().await;
    let toml = r#"
[[keys]]
key = "ka"
tenant = "team-a"
[tenants.team-a]
limits = { tokens_per_day = 5 }
"#;
    let (relay, clock) = limited(&up, &[], toml).await;
    let (status, _, r) = create(
        &relay,
        "ka",
        &json!({"model": "fake-model", "input": "hello there", "stream": true}),
    )
    .await;
    assert_eq!(status, 200);
    // The run that overran the budget finished whole.
    let text = r.as_str().unwrap();
    assert!(text.contains("event: response.completed"), "{text}");

    let (status, h, r) = create(&relay, "ka", &hi()).await;
    assert_eq!(status, 429, "{r}");
    assert_eq!(
        (r["error"]["type"].as_str(), r["error"]["code"].as_str()),
        (Some("insufficient_quota"), Some("insufficient_quota"))
    );
    let message = r["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("tenant 'team-a'") && message.contains("00:00 UTC"),
        "{message}"
    );
    // Not worth the SDK's retries today.
    assert_eq!(header(&h, "x-should-retry"), Some("false"));
    assert_eq!(
        header(&h, "retry-after-ms").map(|v| v.parse::<u128>().unwrap()),
        Some(TO_MIDNIGHT.as_millis())
    );
    assert_eq!(header(&h, "x-ratelimit-remaining-tokens"), Some("0"));
    let quota = r#"relay_rate_limited_total{tenant="team-a",limit="tokens_per_day"}"#;
    assert_eq!(metric(&relay, quota).await, 1.0);

    clock.advance(TO_MIDNIGHT - Duration::from_secs(1));
    assert_eq!(create(&relay, "ka", &hi()).await.0, 429);
    clock.advance(Duration::from_secs(1));
    assert_eq!(create(&relay, "ka", &hi()).await.0, 200);
}

#[tokio::test]
async fn concurrent_runs_count_live_background_runs_and_a_slot_frees_when_one_ends() {
    let up = upstream().await;
    let toml = r#"
[[keys]]
key = "ka"
tenant = "team-a"
limits = { concurrent_runs = 1 }
"#;
    let (relay, _clock) = limited(&up, &[], toml).await;
    let stalled = json!({"model": "fake-model?fault=stall", "input": "hi", "background": true});
    let (status, _, r) = create(&relay, "ka", &stalled).await;
    assert_eq!(status, 200, "{r}");
    let id = r["id"].as_str().unwrap().to_string();
    let (status, h, r) = create(&relay, "ka", &hi()).await;
    assert_eq!(status, 429, "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("concurrent runs"),
        "{r}"
    );
    assert_eq!(header(&h, "retry-after"), Some("1"));
    let (status, _, r) = send(
        &relay,
        "POST",
        &format!("/v1/responses/{id}/cancel"),
        "ka",
        None,
    )
    .await;
    assert_eq!(status, 200, "{r}");
    // The slot is given back as the run ends, however it ends.
    let mut answered = 0;
    for _ in 0..100 {
        answered = create(&relay, "ka", &hi()).await.0;
        if answered == 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(answered, 200);
}

#[tokio::test]
async fn mcp_calls_over_a_limit_fail_as_calls_that_tell_the_model_and_the_run_completes() {
    let (up, server) = (upstream().await, mcp_server(Default::default()).await);
    let toml = format!(
        r#"
[[keys]]
key = "ka"
tenant = "team-a"
limits = {{ mcp_calls_per_minute = 1 }}
[[keys]]
key = "kb"
tenant = "team-b"
[[keys]]
key = "kc"
tenant = "team-c"
[mcp_servers.math]
url = "{}"
require_approval = "never"
calls_per_minute = 1
"#,
        server.url()
    );
    let (relay, clock) = limited(&up, &[], &toml).await;
    let two_calls = "CALL add {\"a\":1,\"b\":1}\nCALL add {\"a\":2,\"b\":2}";
    let request = json!({"model": "fake-model", "input": two_calls,
        "tools": [mcp_tool("other", &server.url())]});
    let (status, _, r) = create(&relay, "ka", &request).await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["status"], "completed");
    let calls: Vec<&Value> = r["output"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["type"] == "mcp_call")
        .collect();
    assert_eq!(calls.len(), 2, "{r}");
    assert_eq!(calls[0]["status"], "completed");
    assert_eq!(calls[1]["status"], "failed");
    let error = calls[1]["error"].to_string();
    assert!(
        error.contains("MCP calls per minute") && error.contains("429"),
        "{error}"
    );
    // The model was told, like any failed call.
    let last = up.requests().last().unwrap().body.to_string();
    assert!(last.contains("MCP calls per minute"), "{last}");
    // A minute later the key may call again.
    clock.advance(Duration::from_secs(60));
    let one_call = json!({"model": "fake-model", "input": "CALL add {\"a\":1,\"b\":1}",
        "tools": [mcp_tool("other", &server.url())]});
    let (_, _, r) = create(&relay, "ka", &one_call).await;
    assert_eq!(r["output"][1]["status"], "completed", "{r}");
    clock.advance(Duration::from_secs(60));

    // A registered server's calls_per_minute holds every key, each on its own count: each of
    // two keys makes its first call and has its second refused; a key's next run has both
    // refused.
    let request = json!({"model": "fake-model", "input": two_calls,
        "tools": [{"type": "mcp", "server_label": "math"}]});
    let statuses = |r: &Value| -> Vec<String> {
        r["output"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|i| i["type"] == "mcp_call")
            .map(|i| i["status"].as_str().unwrap().to_string())
            .collect()
    };
    for (key, expected) in [
        ("kb", ["completed", "failed"]),
        ("kc", ["completed", "failed"]),
        ("kb", ["failed", "failed"]),
    ] {
        let (status, _, r) = create(&relay, key, &request).await;
        assert_eq!(status, 200, "{r}");
        assert_eq!(statuses(&r), expected, "{key}: {r}");
        let failed = r["output"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["type"] == "mcp_call" && i["status"] == "failed")
            .unwrap();
        assert!(
            failed["error"].to_string().contains("MCP server 'math'"),
            "{failed}"
        );
    }
    let refusals =
        |t: &str| format!(r#"relay_rate_limited_total{{tenant="{t}",limit="calls_per_minute"}}"#);
    assert_eq!(metric(&relay, &refusals("team-b")).await, 3.0);
    assert_eq!(metric(&relay, &refusals("team-c")).await, 1.0);
}

#[tokio::test]
async fn get_limits_shows_each_limit_of_the_key_its_tenant_and_the_servers_with_use_and_reset() {
    let up = upstream().await;
    let toml = r#"
[[keys]]
key = "ka"
tenant = "team-a"
limits = { requests_per_minute = 600, concurrent_runs = 8 }
[tenants.team-a]
limits = { tokens_per_day = 2_000_000, tokens_per_minute = 200_000 }
"#;
    let (relay, _clock) = limited(&up, &[], toml).await;
    assert_eq!(create(&relay, "ka", &hi()).await.0, 200);
    // The run's slot is given back as its task ends, a moment after its answer.
    let mut r = Value::Null;
    for _ in 0..100 {
        let (status, _, limits) = send(&relay, "GET", "/v1/limits", "ka", None).await;
        assert_eq!(status, 200, "{limits}");
        r = limits;
        let runs = r["limits"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["limit"] == "concurrent_runs");
        if runs.is_some_and(|l| l["used"] == 0) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let rows: Vec<(String, String, u64, u64)> = r["limits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["limit"].as_str().unwrap().to_string(),
                l["scope"].as_str().unwrap().to_string(),
                l["max"].as_u64().unwrap(),
                l["used"].as_u64().unwrap(),
            )
        })
        .collect();
    let tokens = rows.iter().find(|r| r.0 == "tokens_per_day").unwrap().3;
    assert!(tokens > 0);
    assert_eq!(
        rows,
        [
            ("requests_per_minute".into(), "key".into(), 600, 1),
            ("concurrent_runs".into(), "key".into(), 8, 0),
            ("tokens_per_minute".into(), "tenant".into(), 200_000, tokens),
            ("tokens_per_day".into(), "tenant".into(), 2_000_000, tokens),
        ]
    );
    let day = r["limits"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["limit"] == "tokens_per_day")
        .unwrap();
    assert_eq!(day["resets_at"], 1_700_006_400);
}

#[tokio::test]
async fn without_keys_the_key_flags_hold_the_relays_one_caller() {
    let up = upstream().await;
    let (relay, _clock) = limited(&up, &["--key-requests-per-minute", "1"], "").await;
    assert_eq!(create(&relay, "", &hi()).await.0, 200);
    let (status, h, _) = create(&relay, "", &hi()).await;
    assert_eq!(status, 429);
    assert_eq!(header(&h, "x-ratelimit-limit-requests"), Some("1"));
}

#[test]
fn bad_limit_values_are_refused_naming_the_entry() {
    let key =
        |limits: &str| format!("[[keys]]\nkey = \"k\"\ntenant = \"t\"\nlimits = {{ {limits} }}\n");
    for (args, toml, named) in [
        (
            vec![],
            key("requests_per_minute = 0"),
            "keys[0].limits.requests_per_minute",
        ),
        (
            vec![],
            key("tokens_per_day = -5"),
            "keys[0].limits.tokens_per_day",
        ),
        (
            vec![],
            "[tenants.t]\nlimits = { concurrent_runs = 0 }\n".to_string(),
            "tenants.t.limits.concurrent_runs",
        ),
        (
            vec![],
            "[tenants.\"bad name\"]\n".to_string(),
            "tenants.bad name",
        ),
        (
            vec!["--key-mcp-calls-per-minute", "0"],
            String::new(),
            "--key-mcp-calls-per-minute",
        ),
        (
            vec![],
            "[mcp_servers.m]\nurl = \"http://127.0.0.1:1/mcp\"\ncalls_per_minute = 0\n".to_string(),
            "mcp_servers.m.calls_per_minute",
        ),
        // A misspelt limit is not ignored.
        (vec![], key("request_per_minute = 5"), "--config"),
    ] {
        let e = serve_config(&args, &toml).expect_err(&toml);
        assert_eq!(e.flag, named, "{toml}: {e}");
    }
}

/// The OpenAI Python SDK against a limited relay (real clock): it reads the 429's envelope and
/// headers, its own retry waits `retry-after-ms` and succeeds, and a spent daily budget is not
/// retried (`x-should-retry: false`).
const SDK_SCRIPT: &str = r#"
import json, sys, time
import httpx, openai
base = sys.argv[1] + "/v1"
seen = []
http = httpx.Client(event_hooks={"response": [lambda r: seen.append(r.status_code)]})
def client(key, retries):
    return openai.OpenAI(base_url=base, api_key=key, max_retries=retries, http_client=http)
out = {}
quick = client("ka", 0)
# Spend the minute's requests; stop at a refusal that asks for a wait of a second or more, so
# that the next request (a few ms later) is refused too and the SDK's own retry is what lets
# it through (a refusal asking for less: wait it out and go on).
for i in range(300):
    try:
        quick.responses.create(model="fake-model", input="hi")
    except openai.RateLimitError as e:
        h = e.response.headers
        out["refused"] = {"after": i, "status": e.status_code, "type": e.type, "code": e.code,
            "retry_after_ms": h.get("retry-after-ms"), "limit": h.get("x-ratelimit-limit-requests"),
            "remaining": h.get("x-ratelimit-remaining-requests")}
        wait = float(h.get("retry-after-ms"))
        if wait >= 1000:
            break
        time.sleep(wait / 1000)
seen.clear()
raw = client("ka", 2).responses.with_raw_response.create(model="fake-model", input="hi")
out["retried"] = {"statuses": list(seen), "status": raw.parse().status,
    "limit": raw.headers.get("x-ratelimit-limit-requests")}
budget = client("kq", 2)
budget.responses.create(model="fake-model", input="hi")
seen.clear()
try:
    budget.responses.create(model="fake-model", input="hi")
except openai.RateLimitError as e:
    out["quota"] = {"code": e.code, "type": e.type, "statuses": list(seen)}
print(json.dumps(out))
"#;

#[tokio::test]
async fn the_openai_python_sdk_reads_the_429_and_its_own_retry_waits_and_succeeds() {
    let up = upstream().await;
    let toml = r#"
[[keys]]
key = "ka"
tenant = "team-a"
limits = { requests_per_minute = 20 }
[[keys]]
key = "kq"
tenant = "team-q"
limits = { tokens_per_day = 1 }
"#;
    let (relay, _) = limited_at(&up, &[], toml, Clock::System).await;
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let python = std::env::var("RELAY_TEST_PYTHON")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| root.join(".venv/bin/python"));
    let mut command = std::process::Command::new(&python);
    command
        .args(["-c", SDK_SCRIPT, &relay.url("")])
        .env("NO_PROXY", "*");
    let run = tokio::task::spawn_blocking(move || command.output());
    let out = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("the SDK script ends")
        .unwrap()
        .unwrap_or_else(|e| {
            panic!(
                "{}: {e} (run `bash scripts/test.sh --install-only`)",
                python.display()
            )
        });
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let refused = &r["refused"];
    assert_eq!(
        (
            refused["status"].as_u64(),
            refused["type"].as_str(),
            refused["code"].as_str()
        ),
        (
            Some(429),
            Some("rate_limit_error"),
            Some("rate_limit_exceeded")
        ),
        "{r}"
    );
    assert!(refused["after"].as_u64().unwrap() >= 19, "{r}");
    assert_eq!(
        (refused["limit"].as_str(), refused["remaining"].as_str()),
        (Some("20"), Some("0"))
    );
    // One request of twenty a minute comes back every 3 s.
    let wait: f64 = refused["retry_after_ms"].as_str().unwrap().parse().unwrap();
    assert!((1_000.0..=3_000.0).contains(&wait), "{r}");
    // The SDK's own retry: refused, it waited, then the same call succeeded.
    assert_eq!(r["retried"]["statuses"], json!([429, 200]), "{r}");
    assert_eq!(r["retried"]["status"], "completed");
    assert_eq!(r["retried"]["limit"], "20");
    assert_eq!(
        r["quota"],
        json!({"code": "insufficient_quota", "type": "insufficient_quota", "statuses": [429]}),
        "{r}"
    );
}

#[tokio::test]
async fn a_web_search_through_a_registered_server_counts_against_its_calls_per_minute() {
    let (up, server) = (upstream().await, mcp_server(Default::default()).await);
    let toml = format!(
        "[[keys]]\nkey = \"kb\"\ntenant = \"team-b\"\n[mcp_servers.search]\nurl = \"{}\"\ncalls_per_minute = 1\n[hosted_tools]\nweb_search = \"search:echo\"\n",
        server.url()
    );
    let (relay, _clock) = limited(&up, &[], &toml).await;
    let web = json!({"type": "web_search"});
    let two = "CALL web_search {\"query\":\"a\"}\nCALL web_search {\"query\":\"b\"}";
    let (status, _, r) = create(
        &relay,
        "kb",
        &json!({"model": "fake-model", "input": two, "tools": [web]}),
    )
    .await;
    assert_eq!(status, 200, "{r}");
    let searches: Vec<&str> = r["output"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["type"] == "web_search_call")
        .map(|i| i["status"].as_str().unwrap())
        .collect();
    assert_eq!(searches, ["completed", "failed"], "{r}");
    let told = up.requests().last().unwrap().body.to_string();
    assert!(told.contains("MCP server 'search'"), "{told}");
}
