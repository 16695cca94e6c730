//! The SSRF guard (`responses_relay::ssrf`). Refusals of non-loopback ranges are tested only at the
//! decision point (`check_url`, `check_ip`, the resolver over a fake lookup, a client whose
//! connections are diverted to a loopback trap), so that even a broken guard could not send a
//! packet there. End-to-end refusals use loopback spellings only and prove nothing reached the
//! local server.

use std::collections::HashMap;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use responses_relay::ssrf::{self, GuardedResolver, HostPattern, Lookup, Policy};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::*;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn hint_in(message: &str) {
    assert!(
        message.contains("--mcp-allow-private-networks") && message.contains("--mcp-allow-host"),
        "the refusal does not tell the operator about the flags: {message}"
    );
}

/// Hostile URLs with the range the guard must name (`None`: refused as a loopback name or a bad
/// URL, not by address).
const HOSTILE: &[(&str, Option<&str>)] = &[
    // Loopback in every IPv4 spelling the URL parser accepts.
    ("http://127.0.0.1/mcp", Some("127.0.0.0/8")),
    ("http://127.1/", Some("127.0.0.0/8")),
    ("http://127.0.1/", Some("127.0.0.0/8")),
    ("http://2130706433/", Some("127.0.0.0/8")),
    ("http://0x7f000001/", Some("127.0.0.0/8")),
    ("http://0X7F000001/", Some("127.0.0.0/8")),
    ("http://0177.0.0.1/", Some("127.0.0.0/8")),
    ("http://0177.1/", Some("127.0.0.0/8")),
    ("http://0x7f.1/", Some("127.0.0.0/8")),
    ("http://0x7f.0.0.1/", Some("127.0.0.0/8")),
    ("http://0x7f.0.0.0x1/", Some("127.0.0.0/8")),
    ("http://017700000001/", Some("127.0.0.0/8")),
    ("http://127.000.000.001/", Some("127.0.0.0/8")),
    ("http://127.0.0.1./", Some("127.0.0.0/8")),
    ("http://%31%32%37.0.0.1/", Some("127.0.0.0/8")),
    (
        "http://\u{ff11}\u{ff12}\u{ff17}.\u{ff10}.\u{ff10}.\u{ff11}/",
        Some("127.0.0.0/8"),
    ),
    ("http://127.255.255.254:8080/x", Some("127.0.0.0/8")),
    // Confusing URL syntax whose real host is loopback.
    ("http://public.example@127.0.0.1/", Some("127.0.0.0/8")),
    ("http://127.0.0.1#@public.example/", Some("127.0.0.0/8")),
    ("http://127.0.0.1\\@public.example/", Some("127.0.0.0/8")),
    ("http://127.0.0.1?@public.example/", Some("127.0.0.0/8")),
    // Unspecified.
    ("http://0/", Some("0.0.0.0/8")),
    ("http://0.0.0.0:80/", Some("0.0.0.0/8")),
    ("http://[::]/", Some("::/128")),
    // Private, CGNAT, link-local and the metadata endpoint.
    ("http://10.0.0.1/", Some("10.0.0.0/8")),
    ("http://012.0.0.1/", Some("10.0.0.0/8")),
    ("http://167772161/", Some("10.0.0.0/8")),
    ("http://172.16.0.1/", Some("172.16.0.0/12")),
    ("http://172.31.255.255/", Some("172.16.0.0/12")),
    ("http://192.168.1.1/", Some("192.168.0.0/16")),
    ("http://0xc0a80101/", Some("192.168.0.0/16")),
    ("http://100.64.0.1/", Some("100.64.0.0/10")),
    ("http://100.127.255.255/", Some("100.64.0.0/10")),
    (
        "http://169.254.169.254/latest/meta-data/",
        Some("169.254.169.254/32"),
    ),
    ("http://2852039166/", Some("169.254.169.254/32")),
    ("http://0xa9fea9fe/", Some("169.254.169.254/32")),
    ("http://0251.0376.0251.0376/", Some("169.254.169.254/32")),
    ("http://0xa9.0xfe.0xa9.0xfe/", Some("169.254.169.254/32")),
    ("http://169.254.0.1/", Some("169.254.0.0/16")),
    // Multicast, broadcast, reserved, special purpose, documentation, benchmarking.
    ("http://224.0.0.1/", Some("224.0.0.0/4")),
    ("http://239.255.255.250/", Some("224.0.0.0/4")),
    ("http://255.255.255.255/", Some("255.255.255.255/32")),
    ("http://4294967295/", Some("255.255.255.255/32")),
    ("http://240.0.0.1/", Some("240.0.0.0/4")),
    ("http://192.0.0.8/", Some("192.0.0.0/24")),
    ("http://192.0.2.1/", Some("192.0.2.0/24")),
    ("http://198.51.100.7/", Some("198.51.100.0/24")),
    ("http://203.0.113.9/", Some("203.0.113.0/24")),
    ("http://198.18.0.1/", Some("198.18.0.0/15")),
    ("http://198.19.255.255/", Some("198.18.0.0/15")),
    // IPv6, and IPv6 forms of refused IPv4 addresses.
    ("http://[::1]/", Some("::1/128")),
    ("http://[0:0:0:0:0:0:0:1]:8080/", Some("::1/128")),
    ("http://[::ffff:127.0.0.1]/", Some("127.0.0.0/8")),
    ("http://[::ffff:7f00:1]/", Some("127.0.0.0/8")),
    (
        "http://[::ffff:169.254.169.254]/",
        Some("169.254.169.254/32"),
    ),
    ("http://[::ffff:10.0.0.1]/", Some("10.0.0.0/8")),
    ("http://[::ffff:0:a00:1]/", Some("10.0.0.0/8")),
    ("http://[::127.0.0.1]/", Some("::/96")),
    ("http://[::8.8.8.8]/", Some("::/96")),
    ("http://[64:ff9b::10.0.0.1]/", Some("10.0.0.0/8")),
    ("http://[64:ff9b::a9fe:a9fe]/", Some("169.254.169.254/32")),
    ("http://[64:ff9b:1::8.8.8.8]/", Some("64:ff9b:1::/48")),
    ("http://[2002:7f00:1::]/", Some("127.0.0.0/8")),
    ("http://[2002:a9fe:a9fe::1]/", Some("169.254.169.254/32")),
    (
        "http://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/",
        Some("192.0.2.0/24"),
    ),
    ("http://[fc00::1]/", Some("fc00::/7")),
    ("http://[fd12:3456:789a::1]/", Some("fc00::/7")),
    ("http://[fe80::1]/", Some("fe80::/10")),
    ("http://[febf::1]/", Some("fe80::/10")),
    ("http://[fec0::1]/", Some("fec0::/10")),
    ("http://[ff02::1]/", Some("ff00::/8")),
    ("http://[2001:db8::1]/", Some("2001:db8::/32")),
    ("http://[100::1]/", Some("100::/64")),
    // Loopback names (RFC 6761), whatever they resolve to.
    ("http://localhost/", None),
    ("http://LOCALHOST:8080/", None),
    ("http://localhost./", None),
    ("http://mcp.localhost/", None),
    ("https://a.b.localhost./mcp", None),
    // Not http(s), or no usable URL at all.
    ("file:///etc/passwd", None),
    ("gopher://127.0.0.1:70/", None),
    ("ftp://public.example/", None),
    ("not a url", None),
];

#[test]
fn at_least_forty_hostile_urls_are_refused_naming_their_range() {
    assert!(HOSTILE.len() >= 40);
    let strict = Policy::strict();
    for (url, range) in HOSTILE {
        let r = strict.check_url(url).expect_err(url);
        assert_eq!(r.range(), *range, "{url}: {r}");
        if range.is_some() || url.contains("localhost") {
            hint_in(&r.to_string());
        }
        // The message carries the host only, never the rest of the URL.
        assert!(!r.to_string().contains("meta-data"), "{r}");
    }
}

#[test]
fn the_url_parser_normalises_every_ipv4_spelling_before_the_check() {
    // The same parser reqwest dials with: the guard sees the host exactly as it is connected to.
    for (spelling, host) in [
        ("2130706433", "127.0.0.1"),
        ("0x7f000001", "127.0.0.1"),
        ("0177.0.0.1", "127.0.0.1"),
        ("0x7f.1", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("127.0.1", "127.0.0.1"),
        ("0177.0x0.0.01", "127.0.0.1"),
        ("127.0.0.1.", "127.0.0.1"),
        ("%31%32%37.0.0.1", "127.0.0.1"),
        ("0", "0.0.0.0"),
        ("0xa9fea9fe", "169.254.169.254"),
        ("[::ffff:127.0.0.1]", "[::ffff:7f00:1]"),
        ("[0:0:0:0:0:0:0:1]", "[::1]"),
    ] {
        let u = reqwest::Url::parse(&format!("http://{spelling}:81/")).unwrap();
        assert_eq!(u.host_str(), Some(host), "{spelling}");
    }
    // Not numbers: names, left to the resolver.
    for name in ["127.0.0.1x", "0x7g.1", "1.2.3.4.5"] {
        // Rejected outright is fine too.
        if let Ok(u) = reqwest::Url::parse(&format!("http://{name}/")) {
            assert!(u.host_str().unwrap().parse::<IpAddr>().is_err(), "{name}");
        }
    }
}

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

#[test]
fn public_addresses_pass() {
    let strict = Policy::strict();
    for url in [
        "https://example.com/mcp",
        "https://mcp.example.com:8443/mcp?x=1",
        "http://8.8.8.8/",
        "http://1.1.1.1:8080/",
        "http://134744072/", // 8.8.8.8
        "http://100.63.255.255/",
        "http://100.128.0.0/",
        "http://172.15.255.255/",
        "http://172.32.0.0/",
        "http://192.169.0.1/",
        "http://198.17.255.255/",
        "http://198.20.0.0/",
        "http://223.255.255.255/",
        "http://[2606:4700:4700::1111]/",
        "http://[::ffff:8.8.8.8]/",
        "http://[64:ff9b::8.8.8.8]/",
        "http://[2002:808:808::1]/",
        "http://notlocalhost/",
        "http://localhost.example.com/",
    ] {
        strict
            .check_url(url)
            .unwrap_or_else(|r| panic!("{url}: {r}"));
    }
    for a in [
        "8.8.8.8",
        "93.184.216.34",
        "2606:4700:4700::1111",
        "2a00:1450:4001::200e",
        "::ffff:1.1.1.1",
    ] {
        strict
            .check_ip(ip(a))
            .unwrap_or_else(|r| panic!("{a}: {r}"));
    }
}

#[test]
fn check_ip_names_the_range_and_the_embedding() {
    let strict = Policy::strict();
    let r = strict.check_ip(ip("::ffff:192.168.0.1")).unwrap_err();
    assert_eq!(r.range(), Some("192.168.0.0/16"));
    assert!(r.via().unwrap().contains("IPv4-mapped"), "{r}");
    assert_eq!(r.address(), Some(ip("::ffff:192.168.0.1")));
    let r = strict.check_ip(ip("169.254.169.254")).unwrap_err();
    assert!(r.reason().contains("metadata"), "{r}");
    hint_in(&r.to_string());
    assert_eq!(
        strict.check_ip(ip("100.64.1.1")).unwrap_err().reason(),
        "shared address space / CGNAT (RFC 6598)"
    );
    assert!(
        strict
            .check_ip(ip("64:ff9b::7f00:1"))
            .unwrap_err()
            .via()
            .unwrap()
            .contains("NAT64")
    );
    assert!(
        strict
            .check_ip(ip("2002:c0a8:101::"))
            .unwrap_err()
            .via()
            .unwrap()
            .contains("6to4")
    );
}

#[test]
fn allow_private_networks_and_allow_host_open_the_guard() {
    let open = Policy::allow_private_networks();
    for (url, _) in HOSTILE.iter().filter(|(u, _)| u.starts_with("http")) {
        open.check_url(url).unwrap_or_else(|r| panic!("{url}: {r}"));
    }
    open.check_ip(ip("169.254.169.254")).unwrap();

    let p = Policy::from_flags(
        false,
        &[
            "mcp.internal".into(),
            "*.corp.example".into(),
            "10.1.2.3".into(),
            "[fd00::5]".into(),
            "localhost".into(),
        ],
    )
    .unwrap();
    for ok in [
        "http://mcp.internal/",
        "http://MCP.Internal.:9000/",
        "http://a.corp.example/",
        "http://a.b.corp.example/",
        "http://10.1.2.3/",
        "http://167838211/", // 10.1.2.3
        "http://[fd00::5]/",
        "http://localhost:1234/",
    ] {
        p.check_url(ok).unwrap_or_else(|r| panic!("{ok}: {r}"));
    }
    for refused in [
        "http://10.1.2.4/",
        "http://[fd00::6]/",
        "http://a.localhost/",
        "http://127.0.0.1/",
    ] {
        assert!(p.check_url(refused).is_err(), "{refused}");
    }
    // `*.suffix` is strict about label boundaries and does not cover the suffix itself.
    let hosts = ["corp.example", "evilcorp.example", "a.corp.example.evil"];
    for h in hosts {
        assert!(p.check_resolved(h, &[ip("10.0.0.1")]).is_err(), "{h}");
    }
    assert!(
        p.check_resolved("x.corp.example", &[ip("10.0.0.1")])
            .is_ok()
    );
    assert!(
        p.check_resolved("MCP.INTERNAL.", &[ip("127.0.0.1")])
            .is_ok()
    );
}

#[test]
fn host_patterns_parse_and_bad_ones_are_named() {
    assert_eq!(
        HostPattern::parse("Example.COM.").unwrap(),
        HostPattern::Exact("example.com".into())
    );
    assert_eq!(
        HostPattern::parse("*.Corp.Example").unwrap(),
        HostPattern::Suffix("corp.example".into())
    );
    assert_eq!(
        HostPattern::parse("127.1").unwrap(),
        HostPattern::Ip(ip("127.0.0.1"))
    );
    assert_eq!(
        HostPattern::parse("0x0a000001").unwrap(),
        HostPattern::Ip(ip("10.0.0.1"))
    );
    assert_eq!(
        HostPattern::parse("fd00::1").unwrap(),
        HostPattern::Ip(ip("fd00::1"))
    );
    assert_eq!(
        HostPattern::parse("[fd00::1]").unwrap(),
        HostPattern::Ip(ip("fd00::1"))
    );
    for bad in [
        "",
        " ",
        "http://x/",
        "a*.b",
        "*.",
        "host:80",
        "user@host",
        "*.*.x",
    ] {
        let e = HostPattern::parse(bad).expect_err(bad);
        assert!(e.contains(&format!("'{bad}'")), "{e}");
    }
    assert!(
        Policy::from_flags(false, &["ok.example".into(), "bad/x".into()])
            .unwrap_err()
            .contains("bad/x")
    );
}

/// A fake resolver: each name has a list of answers, one per lookup (the last repeats).
#[derive(Default)]
struct FakeLookup {
    answers: HashMap<String, Vec<Vec<IpAddr>>>,
    asked: Mutex<Vec<String>>,
}

impl FakeLookup {
    fn with(mut self, name: &str, answers: &[&[&str]]) -> Self {
        self.answers.insert(
            name.into(),
            answers
                .iter()
                .map(|a| a.iter().map(|s| ip(s)).collect())
                .collect(),
        );
        self
    }

    fn asked(&self) -> Vec<String> {
        self.asked.lock().unwrap().clone()
    }
}

impl Lookup for FakeLookup {
    fn lookup(&self, host: String) -> BoxFuture<'static, io::Result<Vec<IpAddr>>> {
        let n = {
            let mut asked = self.asked.lock().unwrap();
            asked.push(host.clone());
            asked.iter().filter(|h| **h == host).count()
        };
        let answer = self
            .answers
            .get(&host)
            .map(|a| a[(n - 1).min(a.len() - 1)].clone());
        Box::pin(async move {
            answer.ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no such host"))
        })
    }
}

fn hostile_dns() -> FakeLookup {
    FakeLookup::default()
        .with("public.test", &[&["93.184.216.34", "2606:4700:4700::1111"]])
        .with("internal.test", &[&["10.0.0.1"]])
        .with("metadata.test", &[&["169.254.169.254"]])
        .with("loop.test", &[&["127.0.0.1", "::1"]])
        .with("mapped.test", &[&["::ffff:127.0.0.1"]])
        .with("nat64.test", &[&["64:ff9b::a9fe:a9fe"]])
        .with("ula.test", &[&["fd00::1"]])
        .with("cgnat.test", &[&["100.100.100.100"]])
        .with("mixed.test", &[&["93.184.216.34", "10.0.0.1"]])
        .with("mixed6.test", &[&["2606:4700:4700::1111", "fe80::1"]])
        .with("mixed-last.test", &[&["8.8.8.8", "1.1.1.1", "192.168.0.1"]])
        .with("rebind.test", &[&["93.184.216.34"], &["127.0.0.1"]])
        .with("empty.test", &[&[]])
        .with("corp.test", &[&["10.9.9.9"]])
        .with("mcp.corp.test", &[&["10.9.9.9"]])
}

fn resolver(policy: Policy, dns: Arc<FakeLookup>) -> GuardedResolver {
    GuardedResolver::new(Arc::new(policy), dns)
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
    responses_relay::install_tls();
    let policy = Arc::new(policy);
    let builder = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(5))
        .read_timeout(Duration::from_secs(30));
    let client = ssrf::guard(
        builder,
        policy.clone(),
        Arc::new(GuardedResolver::new(policy, dns)),
    )
    .build()
    .unwrap();
    pool_over(client)
}

/// A pool (default settings) whose HTTP client is `client`: the one place these tests build one.
fn pool_over(client: reqwest::Client) -> responses_relay::mcp::Pool {
    responses_relay::mcp::Pool::with_http_client(Default::default(), client)
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
    let system = pool_over(ssrf::guarded_client(
        Policy::strict(),
        reqwest::Client::builder(),
    ));
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
