//! The SSRF guard (`responses_relay::ssrf`). Refusals of non-loopback ranges are tested only at the
//! decision point (`check_url`, `check_ip`, the resolver over a fake lookup, a client whose
//! connections are diverted to a loopback trap), so that even a broken guard could not send a
//! packet there. End-to-end refusals use loopback spellings only and prove nothing reached the
//! local server.
//! The resolver, the guarded HTTP client and the relay end to end are in `client`.

mod client;

use std::collections::HashMap;
use std::io;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use responses_relay::ssrf::{GuardedResolver, HostPattern, Lookup, Policy};

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
