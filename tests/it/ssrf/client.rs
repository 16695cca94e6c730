//! The guard at work: the resolver refusing names with any refused address (and rebinding), the
//! guarded HTTP client that never connects where it must not (redirects re-checked), and the MCP
//! pool and the relay end to end on loopback with the guard on.

use super::*;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use responses_relay::ssrf::{self, GuardedResolver, Lookup, Policy};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::*;

#[tokio::test]
async fn every_loopback_spelling_really_dials_loopback() {
    // Why the spellings matter: an unguarded client reaches 127.0.0.1 through each of them.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let hits = Arc::new(AtomicUsize::new(0));
    tokio::spawn(serve(listener, hits.clone(), |_| {
        "HTTP/1.1 204 No Content\r\nconnection: close\r\n\r\n".to_string()
    }));
    responses_relay::install_tls();
    let plain = reqwest::Client::builder().no_proxy().build().unwrap();
    let spellings = [
        "2130706433",
        "0x7f000001",
        "0177.0.0.1",
        "0x7f.1",
        "127.1",
        "%31%32%37.0.0.1",
    ];
    for s in spellings {
        let url = format!("http://{s}:{port}/");
        assert_eq!(plain.get(&url).send().await.unwrap().status(), 204, "{url}");
        assert!(
            Policy::strict().check_url(&url).is_err(),
            "{url} passes the guard"
        );
    }
    assert_eq!(hits.load(Ordering::SeqCst), spellings.len());
}

#[tokio::test]
async fn the_resolver_refuses_names_with_any_refused_address() {
    let dns = Arc::new(hostile_dns());
    let r = resolver(Policy::strict(), dns.clone());
    for (name, range) in [
        ("internal.test", "10.0.0.0/8"),
        ("metadata.test", "169.254.169.254/32"),
        ("loop.test", "127.0.0.0/8"),
        ("mapped.test", "127.0.0.0/8"),
        ("nat64.test", "169.254.169.254/32"),
        ("ula.test", "fc00::/7"),
        ("cgnat.test", "100.64.0.0/10"),
        ("mixed.test", "10.0.0.0/8"),
        ("mixed6.test", "fe80::/10"),
        ("mixed-last.test", "192.168.0.0/16"),
    ] {
        let e = r.resolve_checked(name).await.expect_err(name);
        let refusal = e
            .refusal()
            .unwrap_or_else(|| panic!("{name}: not a refusal: {e}"));
        assert_eq!(refusal.range(), Some(range), "{name}");
        assert_eq!(refusal.host(), name);
        hint_in(&e.to_string());
    }
    assert_eq!(
        r.resolve_checked("public.test").await.unwrap(),
        vec![ip("93.184.216.34"), ip("2606:4700:4700::1111")]
    );
    // Lookup failures are not refusals.
    assert!(
        r.resolve_checked("nowhere.test")
            .await
            .unwrap_err()
            .refusal()
            .is_none()
    );
    assert!(
        r.resolve_checked("empty.test")
            .await
            .unwrap_err()
            .refusal()
            .is_none()
    );
}

#[tokio::test]
async fn dns_rebinding_is_checked_on_every_resolution() {
    let dns = Arc::new(hostile_dns());
    let r = resolver(Policy::strict(), dns.clone());
    // First answer public (what a pre-flight check would see), then loopback (what a second
    // lookup at connect time would get): the guard checks the answer it hands to the connector.
    assert_eq!(
        r.resolve_checked("rebind.test").await.unwrap(),
        vec![ip("93.184.216.34")]
    );
    let e = r.resolve_checked("rebind.test").await.unwrap_err();
    assert_eq!(e.refusal().unwrap().range(), Some("127.0.0.0/8"));
    assert_eq!(
        dns.asked().iter().filter(|h| *h == "rebind.test").count(),
        2
    );
}

#[tokio::test]
async fn allowed_hosts_resolve_to_anything_and_only_they_do() {
    let dns = Arc::new(hostile_dns());
    let policy =
        Policy::from_flags(false, &["internal.test".into(), "*.corp.test".into()]).unwrap();
    let r = resolver(policy, dns.clone());
    assert_eq!(
        r.resolve_checked("internal.test").await.unwrap(),
        vec![ip("10.0.0.1")]
    );
    assert_eq!(
        r.resolve_checked("mcp.corp.test").await.unwrap(),
        vec![ip("10.9.9.9")]
    );
    assert!(
        r.resolve_checked("corp.test")
            .await
            .unwrap_err()
            .refusal()
            .is_some()
    );
    assert!(
        r.resolve_checked("metadata.test")
            .await
            .unwrap_err()
            .refusal()
            .is_some()
    );
    let open = resolver(Policy::allow_private_networks(), dns);
    assert_eq!(
        open.resolve_checked("loop.test").await.unwrap(),
        vec![ip("127.0.0.1"), ip("::1")]
    );
}

/// Wraps the guarded resolver: records what the guard let through and diverts every such address
/// to a loopback trap, so no test connection ever leaves loopback, even if the guard were broken.
struct DivertToTrap {
    guard: GuardedResolver,
    trap: SocketAddr,
    passed: Arc<Mutex<Vec<IpAddr>>>,
}

impl reqwest::dns::Resolve for DivertToTrap {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let guard = self.guard.clone();
        let trap = self.trap;
        let passed = self.passed.clone();
        let name = name.as_str().to_string();
        Box::pin(async move {
            let addrs = guard.resolve_checked(&name).await?;
            passed.lock().unwrap().extend(addrs.iter().copied());
            let out: reqwest::dns::Addrs = Box::new(std::iter::once(trap));
            Ok(out)
        })
    }
}

/// A loopback HTTP server: counts requests, answers each with `answer(path)`.
async fn serve(
    listener: tokio::net::TcpListener,
    hits: Arc<AtomicUsize>,
    answer: fn(&str) -> String,
) {
    loop {
        let Ok((mut sock, _)) = listener.accept().await else {
            return;
        };
        hits.fetch_add(1, Ordering::SeqCst);
        tokio::spawn(async move {
            let mut buf = Vec::new();
            let mut chunk = [0u8; 1024];
            while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                match sock.read(&mut chunk).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
            let head = String::from_utf8_lossy(&buf).to_string();
            let path = head.split(' ').nth(1).unwrap_or("/").to_string();
            let _ = sock.write_all(answer(&path).as_bytes()).await;
            let _ = sock.shutdown().await;
        });
    }
}

async fn trap() -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let hits = Arc::new(AtomicUsize::new(0));
    tokio::spawn(serve(listener, hits.clone(), |_| {
        "HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok".to_string()
    }));
    (addr, hits)
}

fn diverted_client(
    policy: Policy,
    dns: Arc<FakeLookup>,
    trap: SocketAddr,
) -> (reqwest::Client, Arc<Mutex<Vec<IpAddr>>>) {
    responses_relay::install_tls();
    let policy = Arc::new(policy);
    let passed = Arc::new(Mutex::new(Vec::new()));
    let resolver = DivertToTrap {
        guard: GuardedResolver::new(policy.clone(), dns),
        trap,
        passed: passed.clone(),
    };
    let client = ssrf::guard(reqwest::Client::builder(), policy, Arc::new(resolver))
        .build()
        .unwrap();
    (client, passed)
}

fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        out.push_str(" | ");
        out.push_str(&c.to_string());
        cur = c.source();
    }
    out
}

#[tokio::test]
async fn the_guarded_client_fails_without_connecting_when_a_name_resolves_to_a_refused_address() {
    let (trap_addr, hits) = trap().await;
    let dns = Arc::new(hostile_dns());
    let (client, passed) = diverted_client(Policy::strict(), dns.clone(), trap_addr);
    for name in [
        "internal.test",
        "metadata.test",
        "mixed.test",
        "mapped.test",
    ] {
        let err = client
            .get(format!("http://{name}:{}/mcp", trap_addr.port()))
            .send()
            .await
            .unwrap_err();
        assert!(err.is_connect(), "{err:?}");
        let text = chain(&err);
        assert!(text.contains("is refused"), "{text}");
        hint_in(&text);
    }
    assert!(
        passed.lock().unwrap().is_empty(),
        "the guard let an address through: {:?}",
        passed.lock().unwrap()
    );
    assert_eq!(hits.load(Ordering::SeqCst), 0, "a connection was attempted");
    assert_eq!(
        dns.asked(),
        [
            "internal.test",
            "metadata.test",
            "mixed.test",
            "mapped.test"
        ]
    );

    // The control: a public name passes the guard and the trap sees it, so the test would notice.
    let r = client
        .get(format!("http://public.test:{}/mcp", trap_addr.port()))
        .send()
        .await
        .unwrap();
    assert_eq!(r.text().await.unwrap(), "ok");
    assert_eq!(hits.load(Ordering::SeqCst), 1);
    assert_eq!(
        *passed.lock().unwrap(),
        [ip("93.184.216.34"), ip("2606:4700:4700::1111")]
    );
}

#[tokio::test]
async fn a_rebinding_name_is_connected_only_at_the_checked_answer() {
    let (trap_addr, hits) = trap().await;
    let dns = Arc::new(hostile_dns());
    let (client, passed) = diverted_client(Policy::strict(), dns, trap_addr);
    let url = format!("http://rebind.test:{}/", trap_addr.port());
    assert!(client.get(&url).send().await.unwrap().status().is_success());
    // The pool keeps no idle connection here (`connection: close`): the second request resolves
    // again, gets loopback, and is refused.
    let err = client.get(&url).send().await.unwrap_err();
    assert!(chain(&err).contains("127.0.0.0/8"), "{}", chain(&err));
    assert_eq!(*passed.lock().unwrap(), [ip("93.184.216.34")]);
    assert_eq!(hits.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn redirects_are_followed_only_within_the_origin_and_re_checked() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let hits = Arc::new(AtomicUsize::new(0));
    // Only literals in Location headers, all loopback: `/to/HOSTPORT` redirects to http://HOSTPORT/end.
    tokio::spawn(serve(listener, hits.clone(), |path| {
        let location = if let Some(target) = path.strip_prefix("/to/") {
            format!("http://{target}/end")
        } else if path == "/same" {
            "/end".to_string()
        } else if path == "/loop" {
            "/loop".to_string()
        } else {
            return "HTTP/1.1 200 OK\r\ncontent-length: 3\r\nconnection: close\r\n\r\nend"
                .to_string();
        };
        format!(
            "HTTP/1.1 307 Temporary Redirect\r\nlocation: {location}\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
        )
    }));
    let port = addr.port();
    let policy = Policy::from_flags(false, &["127.0.0.1".into()]).unwrap();
    let client = ssrf::guarded_client(policy, reqwest::Client::builder());
    let base = format!("http://127.0.0.1:{port}");

    let r = client.get(format!("{base}/same")).send().await.unwrap();
    assert_eq!(r.text().await.unwrap(), "end");
    assert_eq!(hits.swap(0, Ordering::SeqCst), 2);

    // Another spelling of the same address is the same origin once parsed.
    let r = client
        .get(format!("{base}/to/2130706433:{port}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.text().await.unwrap(), "end");
    assert_eq!(hits.swap(0, Ordering::SeqCst), 2);

    for target in [
        format!("localhost:{port}"),
        format!("[::1]:{port}"),
        format!("127.0.0.2:{port}"),
        format!("0x7f000002:{port}"),
    ] {
        let err = client
            .get(format!("{base}/to/{target}"))
            .send()
            .await
            .unwrap_err();
        assert!(err.is_redirect(), "{target}: {err:?}");
        assert!(chain(&err).contains("was not followed"), "{}", chain(&err));
        assert_eq!(
            hits.swap(0, Ordering::SeqCst),
            1,
            "{target}: the redirect was followed"
        );
    }

    let err = client.get(format!("{base}/loop")).send().await.unwrap_err();
    assert!(
        chain(&err).contains("too many redirects"),
        "{}",
        chain(&err)
    );
    assert_eq!(hits.swap(0, Ordering::SeqCst), ssrf::MAX_REDIRECTS + 1);
}

// ---- The MCP pool and the relay, end to end on loopback with the guard on. ----

fn spec(url: &str) -> responses_relay::mcp::ServerSpec {
    responses_relay::mcp::ServerSpec {
        label: "guarded".into(),
        url: url.into(),
        authorization: None,
        headers: Vec::new(),
        allowed: Default::default(),
        approval: responses_relay::mcp::ApprovalPolicy::Never,
        description: None,
        defer_loading: false,
        registered: false,
        transport: Default::default(),
    }
}

fn pool_through(policy: Policy, dns: Arc<dyn Lookup>) -> responses_relay::mcp::Pool {
    responses_relay::mcp::Pool::with_lookup(Default::default(), policy, dns)
}

#[tokio::test]
async fn the_pool_with_the_guarded_client_refuses_names_that_resolve_to_loopback() {
    let server = mcp_server(Default::default()).await;
    let port = server.addr.port();
    // Names mapped to loopback only: were the guard broken, they would reach the test server.
    let dns: Arc<dyn Lookup> = Arc::new(
        FakeLookup::default()
            .with("localhost", &[&["127.0.0.1"]])
            .with("mcp.corp.test", &[&["127.0.0.1"]])
            .with("twofaced.test", &[&["127.0.0.1", "::ffff:127.0.0.1"]]),
    );
    let strict = pool_through(Policy::strict(), dns.clone());
    for name in ["localhost", "twofaced.test", "mcp.corp.test"] {
        let e = strict
            .list_tools(
                &spec(&format!("http://{name}:{port}/mcp")),
                Duration::from_secs(10),
            )
            .await
            .unwrap_err();
        assert!(
            e.message.contains("'guarded'") && e.message.contains("is refused"),
            "{}",
            e.message
        );
        hint_in(&e.message);
    }
    // The real resolver with the default policy: `localhost` is loopback.
    let system = responses_relay::mcp::Pool::new(Default::default(), Policy::strict());
    let e = system
        .list_tools(
            &spec(&format!("http://localhost:{port}/mcp")),
            Duration::from_secs(10),
        )
        .await
        .unwrap_err();
    assert!(e.message.contains("is refused"), "{}", e.message);
    assert!(
        server.requests_seen().is_empty(),
        "a refused server was reached: {:?}",
        server.requests_seen()
    );

    // The controls: allowed by name, the same server is reached (the test server answers 403
    // to Host names it does not know, which proves the request arrived).
    let allowed = pool_through(
        Policy::from_flags(false, &["localhost".into(), "*.corp.test".into()]).unwrap(),
        dns,
    );
    let tools = allowed
        .list_tools(
            &spec(&format!("http://localhost:{port}/mcp")),
            Duration::from_secs(10),
        )
        .await
        .unwrap();
    assert!(tools.iter().any(|t| t.name == "echo"));
    assert!(server.sessions_begun() >= 1);
    let e = allowed
        .list_tools(
            &spec(&format!("http://mcp.corp.test:{port}/mcp")),
            Duration::from_secs(10),
        )
        .await
        .unwrap_err();
    assert_eq!(e.status, Some(403), "{}", e.message);
}

/// A relay with the default (strict) guard: not `support::config`, which tests may open up.
fn strict_config(upstream: &str) -> responses_relay::Config {
    responses_relay::Config {
        upstream_url: upstream.to_string(),
        deterministic: true,
        ..responses_relay::Config::default()
    }
}

#[tokio::test]
async fn the_relay_started_with_no_flags_refuses_loopback_mcp_servers_with_400() {
    let up = upstream().await;
    let server = mcp_server(Default::default()).await;
    let port = server.addr.port();
    let relay = relay(strict_config(&up.base_url())).await;
    let spellings = [
        format!("http://127.0.0.1:{port}/mcp"),
        format!("http://localhost:{port}/mcp"),
        format!("http://LocalHost.:{port}/mcp"),
        format!("http://[::1]:{port}/mcp"),
        format!("http://0x7f000001:{port}/mcp"),
        format!("http://2130706433:{port}/mcp"),
        format!("http://127.1:{port}/mcp"),
        format!("http://0177.0.0.1:{port}/mcp"),
        format!("http://0x7f.1:{port}/mcp"),
        format!("http://127.0.0.1.:{port}/mcp"),
        format!("http://[::ffff:127.0.0.1]:{port}/mcp"),
        format!("http://[::ffff:7f00:1]:{port}/mcp"),
        format!("http://x@127.0.0.1:{port}/mcp?token=SECRET-SSRF-QS"),
    ];
    for url in &spellings {
        for stream in [false, true] {
            let tools = json!([{"type": "function", "name": "f"}, {"type": "mcp", "server_label": "s", "server_url": url, "require_approval": "never"}]);
            let (status, body) = relay.create(&json!({"model": "fake-model", "input": "hi", "stream": stream, "tools": tools}))
            .await;
            assert_eq!(status, 400, "{url}: {body}");
            assert_eq!(body["error"]["type"], "invalid_request_error", "{body}");
            assert_eq!(body["error"]["param"], "tools[1].server_url", "{body}");
            let message = error_message(&body);
            hint_in(message);
            assert!(
                !message.contains("SECRET-SSRF-QS"),
                "the query string leaked: {message}"
            );
        }
    }
    assert!(
        server.requests_seen().is_empty(),
        "the relay reached a refused MCP server: {:?}",
        server.requests_seen()
    );
    assert!(
        up.requests().is_empty(),
        "the run started despite the refusal"
    );
}
