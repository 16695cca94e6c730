//! The SSRF guard for URLs the relay fetches on a user's behalf (MCP `server_url`s): which
//! addresses may be reached, checked at every point where a host becomes an address.
//!
//! - [`Policy::check_ip`] is the decision: by default every loopback, private, link-local, CGNAT,
//!   multicast, broadcast, unspecified, documentation, benchmarking or reserved address is refused,
//!   as are IPv6 forms that embed a refused IPv4 address (mapped, compatible, NAT64, 6to4, Teredo).
//! - [`Policy::check_url`] runs before connecting: it parses the URL with the same parser reqwest
//!   connects with (the `url` crate, which normalises `2130706433`, `0177.0.0.1`, `0x7f.1`, `127.1`
//!   to `127.0.0.1` per WHATWG), so IP-literal hosts, which never reach a resolver, are checked
//!   exactly as they will be dialled. Names are left to the resolver, except `localhost`.
//! - [`GuardedResolver`] is reqwest's resolver: it resolves a name, checks **every** address (one
//!   refused address refuses the name) and hands reqwest only checked addresses, so the connection
//!   goes to an address that was checked and DNS rebinding cannot win.
//! - [`redirect_policy`] follows at most [`MAX_REDIRECTS`] same-origin redirects, each re-checked;
//!   a redirect to another origin is refused (the request's MCP headers are user secrets meant for
//!   the host the user named).
//! - [`guarded_client`] puts it together (and turns off proxies, which would resolve names
//!   themselves, out of the guard's sight).
//!
//! `--mcp-allow-private-networks` turns the address check off; `--mcp-allow-host` exempts hosts
//! (exact, `*.suffix`, or an IP literal).

use std::collections::HashSet;
use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use futures::future::BoxFuture;

/// Most redirects followed for one request.
pub const MAX_REDIRECTS: usize = 5;

/// A host the operator allows whatever it resolves to (`--mcp-allow-host`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostPattern {
    /// This name exactly (lowercase, no trailing dot).
    Exact(String),
    /// Any name ending in `.suffix` (`*.suffix`; not `suffix` itself).
    Suffix(String),
    /// This IP literal.
    Ip(IpAddr),
}

impl HostPattern {
    /// Parses `example.com`, `*.corp.example`, `10.0.0.5`, `[fd00::1]` (or `fd00::1`). IPv4
    /// literals are normalised as in URLs (`127.1` is `127.0.0.1`).
    pub fn parse(pattern: &str) -> Result<HostPattern, String> {
        let p = pattern.trim();
        let bad = |why: &str| format!("'{pattern}': {why}");
        if p.is_empty() {
            return Err(bad("empty host"));
        }
        if p.contains(['/', '@', '?', '#', ' ']) {
            return Err(bad(
                "expected a host name, '*.suffix' or an IP address, not a URL",
            ));
        }
        if let Some(suffix) = p.strip_prefix("*.") {
            return match parse_host(suffix) {
                Some(Host::Name(n)) if !n.contains('*') => Ok(HostPattern::Suffix(n)),
                _ => Err(bad("'*.' must be followed by a domain name")),
            };
        }
        if p.contains('*') {
            return Err(bad("'*' is allowed only as a leading '*.'"));
        }
        if let Ok(v6) = p.parse::<Ipv6Addr>() {
            return Ok(HostPattern::Ip(IpAddr::V6(v6)));
        }
        if p.contains(':') && !p.starts_with('[') {
            return Err(bad("a port is not allowed"));
        }
        match parse_host(p) {
            Some(Host::Ip(ip)) => Ok(HostPattern::Ip(ip)),
            Some(Host::Name(n)) => Ok(HostPattern::Exact(n)),
            None => Err(bad("not a valid host")),
        }
    }

    fn matches(&self, host: &Host) -> bool {
        match (self, host) {
            (HostPattern::Exact(p), Host::Name(n)) => p == n,
            (HostPattern::Suffix(s), Host::Name(n)) => {
                n.len() > s.len() + 1
                    && n.ends_with(s.as_str())
                    && n.as_bytes()[n.len() - s.len() - 1] == b'.'
            }
            (HostPattern::Ip(p), Host::Ip(ip)) => p == ip,
            _ => false,
        }
    }
}

impl std::str::FromStr for HostPattern {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        HostPattern::parse(s)
    }
}

/// A URL's host as the connecting code sees it: an IP literal (never resolved) or a name
/// (lowercase, IDNA-encoded, without a trailing dot).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Host {
    Ip(IpAddr),
    Name(String),
}

impl Host {
    /// From a host as the `url` crate prints it (`127.0.0.1`, `[::1]`, `example.com`).
    fn from_url_host(h: &str) -> Host {
        if let Some(inner) = h.strip_prefix('[').and_then(|r| r.strip_suffix(']'))
            && let Ok(v6) = inner.parse::<Ipv6Addr>()
        {
            return Host::Ip(IpAddr::V6(v6));
        }
        if let Ok(v4) = h.parse::<Ipv4Addr>() {
            return Host::Ip(IpAddr::V4(v4));
        }
        Host::Name(normal_name(h))
    }

    fn shown(&self) -> String {
        match self {
            Host::Ip(IpAddr::V6(v6)) => format!("[{v6}]"),
            Host::Ip(ip) => ip.to_string(),
            Host::Name(n) => n.clone(),
        }
    }
}

fn normal_name(n: &str) -> String {
    n.trim_end_matches('.').to_ascii_lowercase()
}

/// A bare host, parsed as a URL's host would be.
fn parse_host(h: &str) -> Option<Host> {
    let u = reqwest::Url::parse(&format!("http://{h}/")).ok()?;
    if u.port().is_some() || !u.username().is_empty() || u.path() != "/" {
        return None;
    }
    Some(Host::from_url_host(u.host_str()?))
}

/// Why a URL or an address is refused. Its message names the range and tells the operator which
/// flags open the guard. It never carries the URL (whose query string may hold a secret), only
/// its host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    host: String,
    kind: Kind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    /// The address is in a refused range; `via` names the IPv6 form that embeds a refused IPv4
    /// address.
    Address {
        ip: IpAddr,
        range: &'static str,
        why: &'static str,
        via: Option<&'static str>,
    },
    /// `localhost` and `*.localhost` (RFC 6761: always loopback).
    LocalName,
    /// Not an `http(s)` URL with a host.
    Url(&'static str),
    /// A redirect that is not followed.
    Redirect(&'static str),
}

impl Refusal {
    /// The host as written in the URL (normalised), or the address.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The refused address, if the refusal is about one.
    pub fn address(&self) -> Option<IpAddr> {
        match self.kind {
            Kind::Address { ip, .. } => Some(ip),
            _ => None,
        }
    }

    /// The refused range (`10.0.0.0/8`, `169.254.169.254/32`...), if the refusal is about an
    /// address. For an IPv6 form of an IPv4 address this is the IPv4 range.
    pub fn range(&self) -> Option<&'static str> {
        match self.kind {
            Kind::Address { range, .. } => Some(range),
            _ => None,
        }
    }

    /// What the range is (`private (RFC 1918)`, `link-local`...) or why the URL is refused.
    pub fn reason(&self) -> &'static str {
        match self.kind {
            Kind::Address { why, .. } => why,
            Kind::LocalName => "loopback name (RFC 6761)",
            Kind::Url(w) | Kind::Redirect(w) => w,
        }
    }

    /// The IPv6 form through which an embedded IPv4 address was refused (`IPv4-mapped
    /// (::ffff:0:0/96)`...).
    pub fn via(&self) -> Option<&'static str> {
        match self.kind {
            Kind::Address { via, .. } => via,
            _ => None,
        }
    }

    fn address_refusal(
        host: String,
        ip: IpAddr,
        (range, why, via): (&'static str, &'static str, Option<&'static str>),
    ) -> Refusal {
        Refusal {
            host,
            kind: Kind::Address {
                ip,
                range,
                why,
                via,
            },
        }
    }
}

const HINT_PRIVATE: &str =
    "the relay's operator can allow non-public MCP servers with --mcp-allow-private-networks";

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let host = &self.host;
        match &self.kind {
            Kind::Address {
                ip,
                range,
                why,
                via,
            } => {
                write!(
                    f,
                    "The MCP server host '{host}' is refused: address {ip} is "
                )?;
                match via {
                    Some(v) => write!(f, "the {v} form of an address in {range}, {why}")?,
                    None => write!(f, "in {range}, {why}")?,
                }
                write!(
                    f,
                    ". By default the relay connects only to public addresses; {HINT_PRIVATE}, or allow this host with --mcp-allow-host {host}."
                )
            }
            Kind::LocalName => write!(
                f,
                "The MCP server host '{host}' is refused: it is a loopback name (RFC 6761). By default the relay connects only to public addresses; {HINT_PRIVATE}, or allow this host with --mcp-allow-host {host}."
            ),
            Kind::Url(why) => write!(f, "The MCP server URL is refused: {why}."),
            Kind::Redirect(why) => write!(
                f,
                "A redirect from the MCP server '{host}' was not followed: {why}. Give the final URL as server_url; private targets need --mcp-allow-private-networks or --mcp-allow-host."
            ),
        }
    }
}

impl std::error::Error for Refusal {}

type Range = (&'static str, &'static str, Option<&'static str>);

/// IPv4 ranges refused by default, most specific first (the first match names the refusal).
const V4: &[(u32, u8, &str, &str)] = &[
    (
        0xA9FE_A9FE,
        32,
        "169.254.169.254/32",
        "the cloud metadata endpoint (link-local)",
    ),
    (0xFFFF_FFFF, 32, "255.255.255.255/32", "limited broadcast"),
    (
        0x0000_0000,
        8,
        "0.0.0.0/8",
        "unspecified / \"this network\"",
    ),
    (0x0A00_0000, 8, "10.0.0.0/8", "private (RFC 1918)"),
    (
        0x6440_0000,
        10,
        "100.64.0.0/10",
        "shared address space / CGNAT (RFC 6598)",
    ),
    (0x7F00_0000, 8, "127.0.0.0/8", "loopback"),
    (0xA9FE_0000, 16, "169.254.0.0/16", "link-local"),
    (0xAC10_0000, 12, "172.16.0.0/12", "private (RFC 1918)"),
    (
        0xC000_0000,
        24,
        "192.0.0.0/24",
        "IETF protocol assignments (RFC 6890)",
    ),
    (
        0xC000_0200,
        24,
        "192.0.2.0/24",
        "documentation (TEST-NET-1)",
    ),
    (
        0xC058_6300,
        24,
        "192.88.99.0/24",
        "6to4 relay anycast (deprecated)",
    ),
    (0xC0A8_0000, 16, "192.168.0.0/16", "private (RFC 1918)"),
    (0xC612_0000, 15, "198.18.0.0/15", "benchmarking (RFC 2544)"),
    (
        0xC633_6400,
        24,
        "198.51.100.0/24",
        "documentation (TEST-NET-2)",
    ),
    (
        0xCB00_7100,
        24,
        "203.0.113.0/24",
        "documentation (TEST-NET-3)",
    ),
    (0xE000_0000, 4, "224.0.0.0/4", "multicast"),
    (0xF000_0000, 4, "240.0.0.0/4", "reserved (class E)"),
];

/// IPv6 ranges refused outright, most specific first.
const V6: &[(u128, u8, &str, &str)] = &[
    (0, 128, "::/128", "unspecified"),
    (1, 128, "::1/128", "loopback"),
    // IPv4-compatible (deprecated, RFC 4291): never a real destination.
    (0, 96, "::/96", "IPv4-compatible IPv6 (deprecated)"),
    (
        0x0100_0000_0000_0000_0000_0000_0000_0000,
        64,
        "100::/64",
        "discard-only (RFC 6666)",
    ),
    (
        0x0064_ff9b_0001_0000_0000_0000_0000_0000,
        48,
        "64:ff9b:1::/48",
        "local-use NAT64 (RFC 8215)",
    ),
    (
        0x2001_0002_0000_0000_0000_0000_0000_0000,
        48,
        "2001:2::/48",
        "benchmarking (RFC 5180)",
    ),
    (
        0x2001_0db8_0000_0000_0000_0000_0000_0000,
        32,
        "2001:db8::/32",
        "documentation",
    ),
    (
        0x3fff_0000_0000_0000_0000_0000_0000_0000,
        20,
        "3fff::/20",
        "documentation (RFC 9637)",
    ),
    (
        0xfc00_0000_0000_0000_0000_0000_0000_0000,
        7,
        "fc00::/7",
        "unique local (private)",
    ),
    (
        0xfe80_0000_0000_0000_0000_0000_0000_0000,
        10,
        "fe80::/10",
        "link-local",
    ),
    (
        0xfec0_0000_0000_0000_0000_0000_0000_0000,
        10,
        "fec0::/10",
        "site-local (deprecated)",
    ),
    (
        0xff00_0000_0000_0000_0000_0000_0000_0000,
        8,
        "ff00::/8",
        "multicast",
    ),
];

fn in_v4(ip: u32, net: u32, len: u8) -> bool {
    let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
    ip & mask == net & mask
}

fn in_v6(ip: u128, net: u128, len: u8) -> bool {
    let mask = if len == 0 {
        0
    } else {
        u128::MAX << (128 - len)
    };
    ip & mask == net & mask
}

fn v4_range(ip: Ipv4Addr) -> Option<(&'static str, &'static str)> {
    let n = u32::from(ip);
    V4.iter()
        .find(|(net, len, ..)| in_v4(n, *net, *len))
        .map(|(_, _, r, w)| (*r, *w))
}

/// The refused range of `ip`, if any: `(range, why, via)`.
fn classify(ip: IpAddr) -> Option<Range> {
    let v6 = match ip {
        IpAddr::V4(v4) => return v4_range(v4).map(|(r, w)| (r, w, None)),
        IpAddr::V6(v6) => v6,
    };
    let n = u128::from(v6);
    let low32 = Ipv4Addr::from((n & 0xffff_ffff) as u32);
    // Forms that carry an IPv4 address: refused when that address is.
    let embedded: [(u128, u8, &str, Ipv4Addr); 5] = [
        (
            0x0000_0000_0000_0000_0000_ffff_0000_0000,
            96,
            "IPv4-mapped (::ffff:0:0/96)",
            low32,
        ),
        (
            0x0000_0000_0000_0000_ffff_0000_0000_0000,
            96,
            "IPv4-translated (::ffff:0:0:0/96)",
            low32,
        ),
        (
            0x0064_ff9b_0000_0000_0000_0000_0000_0000,
            96,
            "NAT64 (64:ff9b::/96)",
            low32,
        ),
        (
            0x2002_0000_0000_0000_0000_0000_0000_0000,
            16,
            "6to4 (2002::/16)",
            Ipv4Addr::from(((n >> 80) & 0xffff_ffff) as u32),
        ),
        // Teredo: the client's address, inverted, in the low 32 bits.
        (
            0x2001_0000_0000_0000_0000_0000_0000_0000,
            32,
            "Teredo (2001::/32)",
            Ipv4Addr::from(!((n & 0xffff_ffff) as u32)),
        ),
    ];
    for (net, len, via, v4) in embedded {
        if in_v6(n, net, len) {
            if let Some((r, w)) = v4_range(v4) {
                return Some((r, w, Some(via)));
            }
            // Teredo also carries its server's address.
            if len == 32
                && let Some((r, w)) = v4_range(Ipv4Addr::from(((n >> 64) & 0xffff_ffff) as u32))
            {
                return Some((r, w, Some(via)));
            }
            return None;
        }
    }
    V6.iter()
        .find(|(net, len, ..)| in_v6(n, *net, *len))
        .map(|(_, _, r, w)| (*r, *w, None))
}

/// Which hosts and addresses MCP connections may reach. The default refuses every non-public
/// address.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    allow_private: bool,
    allow_hosts: Vec<HostPattern>,
}

impl Policy {
    /// `allow_private` is `--mcp-allow-private-networks`; `allow_hosts` the `--mcp-allow-host`s.
    pub fn new(allow_private: bool, allow_hosts: Vec<HostPattern>) -> Policy {
        Policy {
            allow_private,
            allow_hosts,
        }
    }

    /// Refuses every non-public address (the default).
    pub fn strict() -> Policy {
        Policy::default()
    }

    /// Allows every address (`--mcp-allow-private-networks`).
    pub fn allow_private_networks() -> Policy {
        Policy {
            allow_private: true,
            allow_hosts: Vec::new(),
        }
    }

    /// Parses `--mcp-allow-host` values; the error names the bad one.
    pub fn from_flags(allow_private: bool, allow_hosts: &[String]) -> Result<Policy, String> {
        let patterns = allow_hosts
            .iter()
            .map(|h| HostPattern::parse(h))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Policy::new(allow_private, patterns))
    }

    /// This policy, also allowing `hosts` whatever they resolve to.
    pub fn also_allowing(&self, hosts: impl IntoIterator<Item = HostPattern>) -> Policy {
        let mut p = self.clone();
        p.allow_hosts.extend(hosts);
        p
    }

    pub fn allows_private(&self) -> bool {
        self.allow_private
    }

    pub fn allowed_hosts(&self) -> &[HostPattern] {
        &self.allow_hosts
    }

    /// The decision for one address: refused unless it is public (or private networks are
    /// allowed).
    pub fn check_ip(&self, ip: IpAddr) -> Result<(), Refusal> {
        let host = Host::Ip(ip);
        self.check_ip_for(&host, ip)
    }

    fn check_ip_for(&self, host: &Host, ip: IpAddr) -> Result<(), Refusal> {
        if self.allow_private {
            return Ok(());
        }
        match classify(ip) {
            None => Ok(()),
            Some(range) => Err(Refusal::address_refusal(host.shown(), ip, range)),
        }
    }

    fn host_allowed(&self, host: &Host) -> bool {
        self.allow_private || self.allow_hosts.iter().any(|p| p.matches(host))
    }

    /// Checks a URL before connecting. The host is taken exactly as reqwest will dial it: an IP
    /// literal (in any spelling the URL parser accepts) is checked here, since it never reaches a
    /// resolver; `localhost` names are refused; other names pass, to be checked address by
    /// address by [`GuardedResolver`] when connecting. Allowed hosts always pass.
    pub fn check_url(&self, url: &str) -> Result<(), Refusal> {
        let u = reqwest::Url::parse(url).map_err(|_| Refusal {
            host: String::new(),
            kind: Kind::Url("it is not a valid URL"),
        })?;
        self.check_parsed(&u)
    }

    fn check_parsed(&self, u: &reqwest::Url) -> Result<(), Refusal> {
        if !matches!(u.scheme(), "http" | "https") {
            return Err(Refusal {
                host: String::new(),
                kind: Kind::Url("the scheme must be http or https"),
            });
        }
        let Some(h) = u.host_str().filter(|h| !h.is_empty()) else {
            return Err(Refusal {
                host: String::new(),
                kind: Kind::Url("it has no host"),
            });
        };
        let host = Host::from_url_host(h);
        if self.host_allowed(&host) {
            return Ok(());
        }
        match &host {
            Host::Ip(ip) => self.check_ip_for(&host, *ip),
            Host::Name(n) if n == "localhost" || n.ends_with(".localhost") => Err(Refusal {
                host: n.clone(),
                kind: Kind::LocalName,
            }),
            Host::Name(_) => Ok(()),
        }
    }

    /// Checks every address `name` resolved to: all must pass (one refused address refuses the
    /// name: a name that resolves to both public and private addresses is hostile).
    pub fn check_resolved(&self, name: &str, addrs: &[IpAddr]) -> Result<(), Refusal> {
        let host = Host::Name(normal_name(name));
        if self.host_allowed(&host) {
            return Ok(());
        }
        addrs
            .iter()
            .try_for_each(|ip| self.check_ip_for(&host, *ip))
    }
}

/// Name resolution under the guard: the system resolver, or a fake one in tests.
pub trait Lookup: Send + Sync + 'static {
    /// Every address of `host`.
    fn lookup(&self, host: String) -> BoxFuture<'static, io::Result<Vec<IpAddr>>>;
}

/// The system resolver (`getaddrinfo` through tokio).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemLookup;

impl Lookup for SystemLookup {
    fn lookup(&self, host: String) -> BoxFuture<'static, io::Result<Vec<IpAddr>>> {
        Box::pin(async move {
            Ok(tokio::net::lookup_host((host.as_str(), 0))
                .await?
                .map(|a| a.ip())
                .collect())
        })
    }
}

/// Resolving a name under the guard failed.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    #[error("{0}")]
    Refused(#[from] Refusal),
    #[error("could not resolve '{host}': {source}")]
    Lookup { host: String, source: io::Error },
}

impl ResolveError {
    pub fn refusal(&self) -> Option<&Refusal> {
        match self {
            ResolveError::Refused(r) => Some(r),
            ResolveError::Lookup { .. } => None,
        }
    }
}

/// reqwest's resolver under the guard: resolves through `inner`, checks every address, and
/// returns only checked addresses (reqwest connects to nothing else).
#[derive(Clone)]
pub struct GuardedResolver {
    policy: Arc<Policy>,
    inner: Arc<dyn Lookup>,
}

impl fmt::Debug for GuardedResolver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GuardedResolver")
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

impl GuardedResolver {
    pub fn new(policy: Arc<Policy>, inner: Arc<dyn Lookup>) -> GuardedResolver {
        GuardedResolver { policy, inner }
    }

    /// Through the system resolver.
    pub fn system(policy: Arc<Policy>) -> GuardedResolver {
        GuardedResolver::new(policy, Arc::new(SystemLookup))
    }

    /// The addresses of `name`, all checked.
    pub async fn resolve_checked(&self, name: &str) -> Result<Vec<IpAddr>, ResolveError> {
        let lookup = |source| ResolveError::Lookup {
            host: name.to_string(),
            source,
        };
        let found = self.inner.lookup(name.to_string()).await.map_err(lookup)?;
        let mut seen = HashSet::new();
        let addrs: Vec<IpAddr> = found.into_iter().filter(|a| seen.insert(*a)).collect();
        if addrs.is_empty() {
            return Err(lookup(io::Error::new(
                io::ErrorKind::NotFound,
                "no addresses",
            )));
        }
        self.policy.check_resolved(name, &addrs)?;
        Ok(addrs)
    }
}

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let this = self.clone();
        let name = name.as_str().to_string();
        Box::pin(async move {
            let addrs = this.resolve_checked(&name).await?;
            let out: reqwest::dns::Addrs =
                Box::new(addrs.into_iter().map(|ip| SocketAddr::new(ip, 0)));
            Ok(out)
        })
    }
}

/// Follows at most [`MAX_REDIRECTS`] redirects, each to the same origin (scheme, host, port) as
/// the request's URL and each re-checked with [`Policy::check_url`]; anything else fails the
/// request with a [`Refusal`].
pub fn redirect_policy(policy: Arc<Policy>) -> reqwest::redirect::Policy {
    reqwest::redirect::Policy::custom(move |attempt| {
        let host = attempt
            .previous()
            .first()
            .and_then(|u| u.host_str())
            .unwrap_or("")
            .to_string();
        let refuse = |why| Refusal {
            host: host.clone(),
            kind: Kind::Redirect(why),
        };
        if attempt.previous().len() > MAX_REDIRECTS {
            return attempt.error(refuse("too many redirects"));
        }
        let same_origin = attempt
            .previous()
            .first()
            .is_some_and(|first| first.origin() == attempt.url().origin());
        if !same_origin {
            return attempt.error(refuse("it leads to another origin"));
        }
        match policy.check_parsed(attempt.url()) {
            Ok(()) => attempt.follow(),
            Err(r) => attempt.error(r),
        }
    })
}

/// Applies the guard to `builder`: `resolver` (a [`GuardedResolver`], or one wrapping it), the
/// redirect policy, and no proxy (a proxy would resolve names out of the guard's sight).
pub fn guard(
    builder: reqwest::ClientBuilder,
    policy: Arc<Policy>,
    resolver: Arc<dyn reqwest::dns::Resolve>,
) -> reqwest::ClientBuilder {
    builder
        .dns_resolver(resolver)
        .redirect(redirect_policy(policy))
        .no_proxy()
}

/// An HTTP client that connects only where `policy` allows (names through the system resolver).
/// URLs with IP-literal hosts must still pass [`Policy::check_url`] before they are requested.
/// Installs the process-wide TLS provider if none is yet.
pub fn guarded_client(policy: Policy, builder: reqwest::ClientBuilder) -> reqwest::Client {
    guarded_client_with(policy, Arc::new(SystemLookup), builder)
}

/// [`guarded_client`] with names resolved by `lookup` (a test's fake DNS), every address still
/// checked against `policy`.
pub fn guarded_client_with(
    policy: Policy,
    lookup: Arc<dyn Lookup>,
    builder: reqwest::ClientBuilder,
) -> reqwest::Client {
    crate::install_tls();
    let policy = Arc::new(policy);
    guard(
        builder,
        policy.clone(),
        Arc::new(GuardedResolver::new(policy, lookup)),
    )
    .build()
    .expect("an HTTP client with a TLS provider installed")
}
