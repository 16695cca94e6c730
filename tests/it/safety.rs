//! Relay keys (401 in OpenAI's envelope, `/healthz` open, which bearer goes upstream) and secrets
//! (MCP `authorization`, `headers` and `server_url` query, the upstream key and the relay key)
//! never appearing in logs at trace level, streams, stored logs or error messages.

use std::io::Write;
use std::sync::{Arc, Mutex};

use responses_relay::Config;
use responses_relay::config::KeyEntry;
use serde_json::{Value, json};
use tracing_subscriber::util::SubscriberInitExt;

use crate::support::*;

/// A request with an optional `Authorization` header value; status and body text.
async fn send(method: &str, url: &str, auth: Option<&str>, body: Option<&Value>) -> (u16, String) {
    let mut rb = client().request(method.parse().unwrap(), url);
    if let Some(a) = auth {
        rb = rb.header("authorization", a);
    }
    if let Some(b) = body {
        rb = rb.json(b);
    }
    let r = rb.send().await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

fn hello() -> Value {
    json!({"model": "fake-model", "input": "hello"})
}

fn assert_unauthorized(status: u16, text: &str, what: &str) {
    assert_eq!(status, 401, "{what}: {text}");
    let v: Value =
        serde_json::from_str(text).unwrap_or_else(|_| panic!("{what}: not JSON: {text}"));
    let e = &v["error"];
    assert_eq!(e["type"], "invalid_request_error", "{what}: {v}");
    assert_eq!(e["code"], "invalid_api_key", "{what}: {v}");
    assert!(
        e["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{what}: {v}"
    );
    assert!(
        e.get("param").is_some(),
        "{what}: the envelope has no 'param': {v}"
    );
}

#[tokio::test]
async fn relay_keys_guard_every_route_but_healthz() {
    let up = upstream().await;
    let relay = relay(Config {
        keys: vec![KeyEntry::bare("k1"), KeyEntry::bare("second-key")],
        ..config(&up.base_url())
    })
    .await;
    let create = relay.url("/v1/responses");
    for (auth, what) in [
        (None, "no header"),
        (Some("Bearer k2"), "wrong key"),
        (Some("Bearer k1x"), "longer key"),
        (Some("Bearer k"), "prefix of a key"),
        (Some("Bearer "), "empty bearer"),
        (Some("Basic k1"), "not a bearer"),
        (Some("k1"), "no scheme"),
        (Some("Bearer second-key-"), "longer second key"),
    ] {
        let (status, text) = send("POST", &create, auth, Some(&hello())).await;
        assert_unauthorized(status, &text, what);
    }
    for (method, path) in [
        ("GET", "/v1/models"),
        ("GET", "/v1/responses/resp_x"),
        ("DELETE", "/v1/responses/resp_x"),
        ("GET", "/v1/nope"),
    ] {
        let (status, text) = send(method, &relay.url(path), None, None).await;
        assert_unauthorized(status, &text, path);
    }
    assert!(
        up.requests().is_empty(),
        "an unauthorized request reached the upstream"
    );

    let (status, text) = send("GET", &relay.url("/healthz"), None, None).await;
    assert_eq!((status, text.as_str()), (200, r#"{"status":"ok"}"#));

    for key in ["Bearer k1", "bearer second-key"] {
        let (status, text) = send("POST", &create, Some(key), Some(&hello())).await;
        assert_eq!(status, 200, "{key}: {text}");
    }
    // The relay key is the relay's: it is not forwarded upstream.
    let reqs = up.requests();
    assert_eq!(reqs.len(), 2);
    for r in &reqs {
        let auth = r.header("authorization");
        assert!(
            auth.is_none_or(|a| !a.contains("k1") && !a.contains("second-key")),
            "the relay key went upstream: {auth:?}"
        );
    }
}

#[tokio::test]
async fn without_relay_keys_the_clients_bearer_goes_upstream_unless_the_relay_has_an_upstream_key()
{
    let up = upstream().await;
    let open = relay(config(&up.base_url())).await;
    let (status, text) = Caller::new(&open.url(""), "client-own-key")
        .post(&hello())
        .await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(
        up.requests().last().unwrap().header("authorization"),
        Some("Bearer client-own-key")
    );
    let (status, _) = send("POST", &open.url("/v1/responses"), None, Some(&hello())).await;
    assert_eq!(status, 200);
    assert_eq!(up.requests().last().unwrap().header("authorization"), None);

    let keyed = relay(Config {
        upstream_api_key: Some(responses_relay::config::Secret("relay-upstream-key".into())),
        ..config(&up.base_url())
    })
    .await;
    for auth in [Some("Bearer client-own-key"), None] {
        let (status, text) = send("POST", &keyed.url("/v1/responses"), auth, Some(&hello())).await;
        assert_eq!(status, 200, "{text}");
        assert_eq!(
            up.requests().last().unwrap().header("authorization"),
            Some("Bearer relay-upstream-key")
        );
    }

    let both = relay(Config {
        upstream_api_key: Some(responses_relay::config::Secret("relay-upstream-key".into())),
        keys: vec![KeyEntry::bare("rk")],
        ..config(&up.base_url())
    })
    .await;
    let (status, text) = Caller::new(&both.url(""), "rk").post(&hello()).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(
        up.requests().last().unwrap().header("authorization"),
        Some("Bearer relay-upstream-key")
    );
}

#[test]
fn key_comparison_is_exact() {
    use responses_relay::http::constant_time_eq as eq;
    assert!(eq(b"k1", b"k1"));
    assert!(eq(b"", b""));
    for (a, b) in [
        (&b"k1"[..], &b"k2"[..]),
        (b"k1", b"k1 "),
        (b"k1", b"k"),
        (b"", b"k"),
        (b"abc", b"abd"),
        (b"\0", b""),
    ] {
        assert!(!eq(a, b) && !eq(b, a), "{a:?} {b:?}");
    }
}

// ---- Secrets ----

const SECRETS: [&str; 6] = [
    "SECRET-AUTH-1",
    "SECRET-HDR-2",
    "SECRET-QS-3",
    "SECRET-UP-4",
    "SECRET-RELAY-5",
    "SECRET-TENANT-6",
];

/// Where a secret was found, if anywhere.
fn leaks(place: &str, text: &str) -> Vec<String> {
    SECRETS
        .iter()
        .filter(|s| text.contains(*s))
        .map(|s| {
            let line = text.lines().find(|l| l.contains(s)).unwrap_or("");
            format!("{s} in {place}: {line}")
        })
        .collect()
}

/// A log sink shared with the subscriber.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

fn mcp_tool(url: &str) -> Value {
    json!({"type": "mcp", "server_label": "vault", "server_url": url, "require_approval": "never",
           "authorization": "SECRET-AUTH-1", "headers": {"x-key": "SECRET-HDR-2"}})
}

/// A client of the relay at `base` with one key, the answers as text.
struct Caller<'a> {
    base: &'a str,
    auth: String,
}

impl<'a> Caller<'a> {
    fn new(base: &'a str, key: &str) -> Self {
        let auth = format!("Bearer {key}");
        Caller { base, auth }
    }

    fn with_key(&self, key: &str) -> Self {
        Caller::new(self.base, key)
    }

    /// `POST /v1/responses` of `body`.
    async fn post(&self, body: &Value) -> (u16, String) {
        let url = format!("{}/v1/responses", self.base);
        send("POST", &url, Some(&self.auth), Some(body)).await
    }

    /// `GET PATH`.
    async fn get(&self, path: &str) -> (u16, String) {
        let url = format!("{}{path}", self.base);
        send("GET", &url, Some(&self.auth), None).await
    }
}

/// What the client saw in one scenario, every text concatenated by place.
#[derive(Default)]
struct Seen {
    places: Vec<(String, String)>,
}

impl Seen {
    fn add(&mut self, place: impl Into<String>, text: String) {
        self.places.push((place.into(), text));
    }
}

async fn full_run(relay_base: String, mcp_url: String, seen: &mut Seen) -> Value {
    let client = Caller::new(&relay_base, "SECRET-RELAY-5");
    let (wrong_key, tenant) = (
        client.with_key("SECRET-RELAY-5x"),
        client.with_key("SECRET-TENANT-6"),
    );
    let url = format!("{mcp_url}?token=SECRET-QS-3");
    let body = json!({"model": "fake-model", "input": "CALL whoami {}", "stream": true, "tools": [mcp_tool(&url)]});
    let (status, text) = client.post(&body).await;
    assert_eq!(status, 200, "{text}");
    let sse = parse_sse(&text);
    let folded = check_events(&sse.events);
    seen.add("the SSE body", text);
    let id = folded["id"].as_str().unwrap().to_string();
    for path in run_paths(&id) {
        let (status, text) = client.get(&path).await;
        assert_eq!(status, 200, "{path}: {text}");
        seen.add(format!("GET {path}"), text);
    }
    // Non-streaming, too.
    let body = json!({"model": "fake-model", "input": "CALL whoami {}", "tools": [mcp_tool(&url)]});
    let (status, text) = client.post(&body).await;
    assert_eq!(status, 200, "{text}");
    seen.add("the non-streaming answer", text);
    // The registered server, by label: its token reaches the server only.
    let body = json!({"model": "fake-model", "input": "CALL whoami {}", "stream": true,
        "tools": [{"type": "mcp", "server_label": "reg"}]});
    let (status, text) = client.post(&body).await;
    assert_eq!(status, 200, "{text}");
    assert!(
        text.contains("authorized; headers"),
        "the registered server got its token: {text}"
    );
    seen.add("the registered server's run", text);
    let (_, text) = client.get("/v1/mcp/servers").await;
    seen.add("GET /v1/mcp/servers", text);
    // A failing request whose error echoes the request.
    let (_, text) = client.post(&json!({"model": 1})).await;
    seen.add("a 400 answer", text);
    let (_, text) = wrong_key.post(&json!({})).await;
    seen.add("a 401 answer", text);
    // A key of another tenant (a `[[keys]]` entry): its own runs, and the first key's run unknown.
    let (status, text) = tenant
        .post(&json!({"model": "fake-model", "input": "hi"}))
        .await;
    assert_eq!(status, 200, "{text}");
    seen.add("another tenant's answer", text);
    let (status, text) = tenant.get(&format!("/v1/responses/{id}")).await;
    assert_eq!(status, 404, "{text}");
    seen.add("another tenant's 404", text);
    folded
}

async fn failing_runs(
    relay_base: String,
    fail_base: String,
    dead_url: String,
    unauthorized_url: String,
    seen: &mut Seen,
) {
    let client = Caller::new(&relay_base, "SECRET-RELAY-5");
    let failing = Caller::new(&fail_base, "SECRET-RELAY-5");
    for (label, url) in [("dead", &dead_url), ("401", &unauthorized_url)] {
        let url = format!("{url}?token=SECRET-QS-3");
        let body = json!({"model": "fake-model", "input": "CALL whoami {}", "stream": true, "tools": [mcp_tool(&url)]});
        let (status, text) = client.post(&body).await;
        assert_eq!(status, 200, "{label}: {text}");
        let folded = check_events(&parse_sse(&text).events);
        let error = folded["output"][0]["error"]
            .as_str()
            .unwrap_or_else(|| panic!("{label}: no list error: {folded}"))
            .to_string();
        assert!(error.contains("vault"), "{error}");
        seen.add(format!("the SSE body ({label} server)"), text);
        let (status, text) = failing.post(&body).await;
        assert_eq!(status, 424, "{label}: {text}");
        seen.add(format!("the 424 answer ({label} server)"), text);
    }
}

/// `c` with the relay's keys (one a tenant's), an upstream key, and a registered server `reg` at
/// `registered_url` holding the MCP token: every secret the scenario must not leak.
fn keyed(c: Config, registered_url: &str) -> Config {
    let mut c = Config {
        keys: vec![
            KeyEntry::bare("SECRET-RELAY-5"),
            KeyEntry::of_tenant("SECRET-TENANT-6", "team"),
        ],
        upstream_api_key: Some(responses_relay::config::Secret("SECRET-UP-4".into())),
        ..c
    };
    // A registered server holding the MCP token: clients name it, never see it.
    c.mcp.registered.0.insert(
        "reg".into(),
        responses_relay::mcp::RegisteredServer {
            tool: serde_json::from_value(json!({"server_label": "reg",
                "server_url": registered_url, "authorization": "SECRET-AUTH-1",
                "require_approval": "never"}))
            .unwrap(),
            transport: Default::default(),
        },
    );
    c
}

#[test]
fn secrets_never_leak_into_logs_streams_stored_logs_or_errors() {
    // The test servers and the client run on their own runtime (their logs are not the relay's);
    // the relays run on this thread's runtime, under a trace-level subscriber for this thread only
    // (tests share the process).
    let aux = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (up, server, unauthorized, dead) = aux.block_on(async {
        let server = mcp_server(requiring_bearer("SECRET-AUTH-1")).await;
        let unauthorized = mcp_server(requiring_bearer("another-token")).await;
        let dead = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        (
            upstream().await,
            server,
            unauthorized,
            format!("http://{dead}/mcp"),
        )
    });
    let logs = Captured::default();
    let sink = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(responses_relay::telemetry::RedactingMakeWriter(move || {
            sink.clone()
        }))
        .finish();
    let guard = subscriber.set_default();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let registered_url = server.url();
    let mut seen = Seen::default();
    let folded = rt.block_on(async {
        let relay_ok = relay(keyed(config(&up.base_url()), &registered_url)).await;
        let mut fail = config(&up.base_url());
        fail.mcp.discovery_failure = responses_relay::config::DiscoveryFailure::Fail;
        let relay_fail = relay(keyed(fail, &registered_url)).await;
        let (base, fail_base, mcp_url, unauth_url) = (
            relay_ok.url(""),
            relay_fail.url(""),
            server.url(),
            unauthorized.url(),
        );
        let task = aux.spawn(async move {
            let mut seen = Seen::default();
            let folded = full_run(base.clone(), mcp_url, &mut seen).await;
            failing_runs(base, fail_base, dead, unauth_url, &mut seen).await;
            (folded, seen)
        });
        let (folded, s) = task.await.unwrap();
        seen = s;
        relay_fail.shutdown().await;
        relay_ok.shutdown().await;
        folded
    });
    drop(guard);
    drop(rt);

    // The secrets did reach where they were meant to go.
    let call = find_item(&folded["output"], "mcp_call").unwrap();
    assert_eq!(call["status"], "completed", "{call}");
    assert!(server.requests_seen().iter().any(|r| {
        r.headers
            .iter()
            .any(|(k, v)| k == "x-key" && v == "SECRET-HDR-2")
    }));
    assert!(
        up.requests()
            .iter()
            .all(|r| r.header("authorization") == Some("Bearer SECRET-UP-4"))
    );

    // What the model server was sent (its own key aside, in a header) holds no secret.
    for r in up.requests() {
        seen.add("a request to the model server", r.body.to_string());
    }
    let log = logs.text();
    assert!(
        log.contains("MCP session initialized"),
        "the capture missed the relay's own logs:\n{log}"
    );
    assert!(
        log.lines().any(|l| l.contains("TRACE")),
        "no trace-level line was captured"
    );
    let mut found = leaks("the relay's logs", &log);
    for (place, text) in &seen.places {
        found.extend(leaks(place, text));
    }
    assert!(found.is_empty(), "secrets leaked:\n{}", found.join("\n"));
    drop(aux);
}
