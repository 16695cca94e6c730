//! What an operator sees (SPEC §16, request ids and logs): `x-request-id` on every answer, every
//! rejection logged once with its route, status, code, `param` and request id, the request id on
//! the log lines of what the request started, `--log-format json` one object per line. The relay
//! runs as a process, its stderr read back.

use futures::StreamExt;
use serde_json::{Value, json};

use crate::support::*;

/// The relay as a process (killed when this drops), its stderr written to `log`.
struct Proc {
    _relay: RelayProcess,
    base: String,
    log: std::path::PathBuf,
}

fn spawn(upstream: &str, format: &str) -> Proc {
    let log = scratch("observability").join("relay.err");
    let args = serve_args(upstream, "memory", &["--log-format", format]);
    let stderr = std::fs::File::create(&log).unwrap();
    let relay = spawn_relay(&args, &[("RELAY_LOG", "info")], stderr.into());
    Proc {
        base: relay.base.clone(),
        _relay: relay,
        log,
    }
}

impl RelayApi for Proc {
    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }
}

impl Proc {
    fn lines(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// The JSON log lines (every line must be one object).
    fn json_lines(&self) -> Vec<Value> {
        self.lines()
            .iter()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
            .collect()
    }
}

/// `GET /healthz` sending `id` as its `x-request-id`.
async fn healthz_with_id(relay: &Proc, id: &str) -> reqwest::Response {
    let request = client().get(relay.url("/healthz"));
    request.header("x-request-id", id).send().await.unwrap()
}

fn request_id(r: &reqwest::Response) -> String {
    r.headers()
        .get("x-request-id")
        .expect("every answer has x-request-id")
        .to_str()
        .unwrap()
        .to_string()
}

/// In the JSON log `lines`: the bad request's rejection logged once with its fields, the missing
/// run's 404, nothing rejected for the good request, and the socket's opening, error frame and
/// closing, each under its request id.
fn logged_by_request_id(
    lines: &[Value],
    bad_id: &str,
    missing_id: &str,
    good_id: &str,
    ws_id: &str,
) {
    let of = |id: &str| -> Vec<&Value> {
        lines
            .iter()
            .filter(|l| l["span"]["request_id"] == id)
            .collect()
    };
    let rejected: Vec<&Value> = of(bad_id)
        .into_iter()
        .filter(|l| l["message"] == "request rejected")
        .collect();
    assert_eq!(rejected.len(), 1, "logged once: {lines:?}");
    let r = rejected[0];
    assert_eq!(r["level"], "INFO");
    assert_eq!(r["route"], "POST /v1/responses");
    assert_eq!(r["status"], 400);
    assert_eq!(r["code"], "unknown_parameter");
    assert_eq!(r["param"], "temperatur");
    assert!(r["timestamp"].is_string());
    let nf = of(missing_id);
    assert_eq!(nf.len(), 1, "{lines:?}");
    assert_eq!(nf[0]["route"], "GET /v1/responses/{id}");
    assert_eq!(nf[0]["status"], 404);
    assert!(
        of(good_id)
            .iter()
            .all(|l| l["message"] != "request rejected"),
        "a good request is not logged as rejected"
    );
    let socket: Vec<&str> = of(ws_id)
        .iter()
        .map(|l| l["message"].as_str().unwrap())
        .collect();
    assert_eq!(
        socket,
        [
            "websocket connection opened",
            "websocket error frame",
            "websocket connection closed"
        ],
        "{lines:?}"
    );
}

#[tokio::test]
async fn every_answer_has_a_request_id_and_every_rejection_is_logged_once_with_it() {
    let up = upstream().await;
    let relay = spawn(&up.base_url(), "json");
    let c = client();
    let ok = c.get(relay.url("/healthz")).send().await.unwrap();
    assert!(request_id(&ok).starts_with("req_"));
    // A sane id of the client's is kept; anything else is replaced.
    let given = healthz_with_id(&relay, "trace-42.a").await;
    assert_eq!(request_id(&given), "trace-42.a");
    let bogus = healthz_with_id(&relay, "no spaces allowed").await;
    assert!(request_id(&bogus).starts_with("req_"));

    let bad = relay
        .send(&json!({"model": "fake-model", "input": "x", "temperatur": 1}))
        .await;
    assert_eq!(bad.status(), 400);
    let bad_id = request_id(&bad);
    let missing = c
        .get(relay.url("/v1/responses/resp_nope"))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    let missing_id = request_id(&missing);
    let good = relay
        .send(&json!({"model": "fake-model", "input": "fine"}))
        .await;
    assert_eq!(good.status(), 200);
    let good_id = request_id(&good);

    // The upgrade's answer too, and the socket's own log lines carry its id.
    let url = format!("{}/v1/responses", relay.base.replace("http://", "ws://"));
    let tcp = tokio::net::TcpStream::connect(relay.base.trim_start_matches("http://"))
        .await
        .unwrap();
    let (mut ws, resp) = tokio_tungstenite::client_async(url, tcp).await.unwrap();
    let ws_id = resp.headers()["x-request-id"].to_str().unwrap().to_string();
    assert!(ws_id.starts_with("req_"));
    use futures::SinkExt;
    ws.send(tokio_tungstenite::tungstenite::Message::Text(
        json!({"type": "response.create", "model": "fake-model", "input": "x", "bogus": 1})
            .to_string()
            .into(),
    ))
    .await
    .unwrap();
    let _ = ws.next().await;
    drop(ws);

    let mut lines = Vec::new();
    for _ in 0..200 {
        lines = relay.json_lines();
        if lines
            .iter()
            .any(|l| l["message"] == "websocket connection closed")
        {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    logged_by_request_id(&lines, &bad_id, &missing_id, &good_id, &ws_id);
}

#[tokio::test]
async fn text_logs_name_the_request_id_too() {
    let up = upstream().await;
    let relay = spawn(&up.base_url(), "text");
    let bad = relay.send(&json!({"model": "fake-model"})).await;
    let id = request_id(&bad);
    let mut found = None;
    for _ in 0..200 {
        found = relay
            .lines()
            .into_iter()
            .find(|l| l.contains("request rejected"));
        if found.is_some() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let line = found.expect("the rejection is logged");
    assert!(line.contains(&format!("request_id={id}")), "{line}");
    assert!(line.contains("status=400"), "{line}");
    assert!(!line.contains('\u{1b}'), "no colours in a log file: {line}");
}

/// `/metrics` parsed: each sample line's name with its labels (as written) and value.
async fn scrape(relay: &Relay, key: Option<&str>) -> std::collections::HashMap<String, f64> {
    let mut req = client().get(relay.url("/metrics"));
    if let Some(k) = key {
        req = req.bearer_auth(k);
    }
    let r = req.send().await.unwrap();
    assert_eq!(r.status(), 200);
    let text = r.text().await.unwrap();
    assert!(text.trim_end().ends_with("# EOF"), "{text}");
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').unwrap_or_else(|| panic!("{l}"));
            (series.to_string(), value.parse::<f64>().unwrap())
        })
        .collect()
}

fn delta(
    before: &std::collections::HashMap<String, f64>,
    after: &std::collections::HashMap<String, f64>,
    series: &str,
) -> f64 {
    after.get(series).copied().unwrap_or(0.0) - before.get(series).copied().unwrap_or(0.0)
}

#[tokio::test]
async fn metrics_count_requests_runs_tokens_and_mcp_calls_with_bounded_labels() {
    let up = upstream().await;
    let server = mcp_server(crate::mcp_test_server::Options::default()).await;
    let relay = relay(config(&up.base_url())).await;
    let before = scrape(&relay, None).await;
    let url = relay.url("/v1/responses");
    let (status, _) = post(&url, &json!({"model": "fake-model", "input": "hi"})).await;
    assert_eq!(status, 200);
    let (status, _) = post(
        &url,
        &json!({"model": "fake-model", "input": "hi", "bogus": 1}),
    )
    .await;
    assert_eq!(status, 400);
    let tool = json!({"type": "mcp", "server_label": "mine", "server_url": server.url(), "require_approval": "never"});
    let (status, r) = post(
        &url,
        &json!({"model": "fake-model", "input": "CALL add {\"a\":1,\"b\":2}\nCALL fail {}", "tools": [tool]}),
    )
    .await;
    assert_eq!(status, 200, "{r}");
    // Forty model names no upstream listed and no config names: one label value, `other`.
    for i in 0..40 {
        let model = format!("fake-model-{i}-{:x}", rand::random::<u32>());
        let (status, _) = post(&url, &json!({"model": model, "input": "x"})).await;
        assert_eq!(status, 200);
    }
    let after = scrape(&relay, None).await;
    let d = |s: &str| delta(&before, &after, s);
    assert_eq!(
        d(r#"relay_http_requests_total{route="POST /v1/responses",status_code="200"}"#),
        42.0
    );
    assert_eq!(
        d(r#"relay_http_requests_total{route="POST /v1/responses",status_code="400"}"#),
        1.0
    );
    assert_eq!(
        d(r#"relay_responses_total{model="other",upstream="default",status="completed"}"#),
        42.0
    );
    let models: std::collections::HashSet<&str> = after
        .keys()
        .filter(|k| k.starts_with("relay_responses_total{"))
        .map(|k| {
            k.split("model=\"")
                .nth(1)
                .unwrap()
                .split('"')
                .next()
                .unwrap()
        })
        .collect();
    assert_eq!(
        models,
        ["other"].into_iter().collect(),
        "labels stay bounded"
    );
    assert_eq!(
        d(r#"relay_mcp_tool_calls_total{server_label="request",result="ok"}"#),
        1.0
    );
    assert_eq!(
        d(r#"relay_mcp_tool_calls_total{server_label="request",result="tool_error"}"#),
        1.0
    );
    assert_eq!(
        d(r#"relay_mcp_list_tools_total{server_label="request",result="ok"}"#),
        1.0
    );
    assert_eq!(
        d(r#"relay_mcp_tool_duration_seconds_count{server_label="request"}"#),
        2.0
    );
    assert_eq!(d("relay_response_duration_seconds_count"), 42.0);
    assert_eq!(d("relay_time_to_first_token_seconds_count"), 42.0);
    assert!(d(r#"relay_tokens_total{token_type="input"}"#) >= 42.0 * 10.0);
    assert!(d(r#"relay_tokens_total{token_type="output"}"#) > 0.0);
    assert!(
        d(r#"relay_upstream_request_duration_seconds_count{upstream="default"}"#) >= 43.0,
        "one per model turn"
    );
    assert_eq!(after["relay_responses_in_flight"], 0.0);
    assert_eq!(after["relay_sse_streams_active"], 0.0);
    assert_eq!(
        after[&format!(
            "relay_build_info{{version=\"{}\"}}",
            env!("CARGO_PKG_VERSION")
        )],
        1.0
    );
}

#[tokio::test]
async fn metrics_are_open_like_healthz_or_behind_the_metrics_key() {
    let (up, relay) =
        configured_relay(|c| c.keys = vec![responses_relay::config::KeyEntry::bare("relay-key")])
            .await;
    // Relay keys do not close it.
    scrape(&relay, None).await;
    let mut c = config(&up.base_url());
    c.metrics_key = Some(responses_relay::config::Secret("scrape-key".into()));
    let locked = crate::support::relay(c).await;
    let r = client().get(locked.url("/metrics")).send().await.unwrap();
    assert_eq!(r.status(), 401);
    let r = get_as(&locked.url("/metrics"), "wrong").await;
    assert_eq!(r.status(), 401);
    scrape(&locked, Some("scrape-key")).await;
}

#[tokio::test]
async fn a_model_an_upstream_listed_is_its_own_label() {
    let (_up, relay) = plain_relay().await;
    let (status, _) = relay.get("/v1/models").await;
    assert_eq!(status, 200);
    let (status, r) = relay
        .create(&json!({"model": "fake-model", "input": "hi"}))
        .await;
    assert_eq!(status, 200);
    // Read back from the store once the run has ended: a timed store read.
    let url = relay.url(&format!("/v1/responses/{}", r["id"].as_str().unwrap()));
    let m = scrape(&relay, None).await;
    assert_eq!(
        m[r#"relay_responses_total{model="fake-model",upstream="default",status="completed"}"#],
        1.0
    );
    let reads = |m: &std::collections::HashMap<String, f64>| {
        m.get(
            r#"relay_store_operation_duration_seconds_count{backend="memory",operation="record"}"#,
        )
        .copied()
        .unwrap_or(0.0)
    };
    let mut after = m.clone();
    for _ in 0..100 {
        assert_eq!(get(&url).await.0, 200);
        after = scrape(&relay, None).await;
        if reads(&after) > reads(&m) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(reads(&after) > reads(&m), "the store read was timed");
}

#[tokio::test]
async fn an_unstored_stream_whose_client_left_still_ends_cancelled_and_counted() {
    // A `store: false` run streamed to its one client is driven by that client's connection;
    // when the client goes, the run is handed to a task of its own and still ends (cancelled),
    // with its upstream stream closed and its metrics recorded.
    let up = upstream().await;
    let relay = relay(config(&up.base_url())).await;
    let before = scrape(&relay, None).await;
    let resp = client()
        .post(relay.url("/v1/responses"))
        .json(&json!({"model": "fake-model?fault=stall", "input": "x", "stream": true, "store": false}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    eventually("the upstream stream is open", || up.open_streams() == 1).await;
    assert_eq!(scrape(&relay, None).await["relay_responses_in_flight"], 1.0);
    drop(resp);
    eventually("the upstream stream is closed", || up.open_streams() == 0).await;
    let cancelled = r#"relay_responses_total{model="other",upstream="default",status="cancelled"}"#;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let after = scrape(&relay, None).await;
        if delta(&before, &after, cancelled) == 1.0 && after["relay_responses_in_flight"] == 0.0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never counted as ended: {after:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}
