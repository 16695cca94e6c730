//! Where the store's Redis is: one server (`redis://`, `rediss://`), the primary that a set of
//! Sentinels names (`redis+sentinel://HOST:PORT[,HOST:PORT...]/MASTER_NAME[/DB]`,
//! `rediss+sentinel://` for TLS to the primary and the Sentinels), or a Redis Cluster reached
//! through any of its nodes (`redis+cluster://HOST:PORT[,HOST:PORT...]`, `rediss+cluster://`).
//!
//! Invariant: behind Sentinel, the primary is whatever the Sentinels say now, never the server a
//! connection happens to reach: a connection is made to the address they give (after it
//! confirms its role), and [`Target::primary`] asks them again, so the store can drop a
//! connection to a server they no longer name. A URL's password is shown only masked.

use ::redis::cluster::{ClusterClient, ClusterClientBuilder};
use ::redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use ::redis::{Client, ConnectionAddr, RedisResult, TlsMode};

/// The Sentinels' default port.
const SENTINEL_PORT: u16 = 26379;
/// Redis's default port.
const REDIS_PORT: u16 = 6379;

/// A Redis the store connects to.
pub enum Target {
    Direct(Box<Client>),
    Sentinel(Box<Watched>),
    Cluster(Box<Nodes>),
}

/// A Redis Cluster: the nodes it is first reached through (it tells the rest itself), and the
/// credentials every node takes.
#[derive(Debug, PartialEq, Eq)]
pub struct Nodes {
    nodes: Vec<(String, u16)>,
    username: Option<String>,
    password: Option<String>,
    tls: bool,
}

impl Nodes {
    /// A client of the cluster whose connections give up connecting after `connect` and waiting
    /// for an answer after `response` (`None`: never, for blocking reads).
    pub fn client(
        &self,
        connect: std::time::Duration,
        response: Option<std::time::Duration>,
    ) -> RedisResult<ClusterClient> {
        let scheme = if self.tls { "rediss" } else { "redis" };
        let urls = self
            .nodes
            .iter()
            .map(|(host, port)| match host.contains(':') {
                true => format!("{scheme}://[{host}]:{port}"),
                false => format!("{scheme}://{host}:{port}"),
            });
        let mut b = ClusterClientBuilder::new(urls).connection_timeout(connect);
        b = match response {
            Some(r) => b.response_timeout(r),
            None => b.response_timeout(std::time::Duration::MAX),
        };
        if let Some(user) = &self.username {
            b = b.username(user);
        }
        if let Some(password) = &self.password {
            b = b.password(password);
        }
        if self.tls {
            b = b.tls(TlsMode::Secure);
        }
        b.build()
    }
}

/// A primary found through its Sentinels.
pub struct Watched {
    client: tokio::sync::Mutex<SentinelClient>,
    /// The URL, for a blocking client of its own (the start-up probe).
    url: String,
    /// The Sentinels and the master's name, and which Sentinel is asked which server is the
    /// primary (its index, and a connection kept to it).
    sentinels: Vec<ConnectionAddr>,
    master: String,
    asking: tokio::sync::Mutex<(usize, Option<::redis::aio::MultiplexedConnection>)>,
}

/// A `redis+sentinel://` URL, parsed.
#[derive(Debug, PartialEq, Eq)]
struct SentinelUrl {
    sentinels: Vec<(String, u16)>,
    master: String,
    db: i64,
    username: Option<String>,
    password: Option<String>,
    tls: bool,
}

impl Target {
    /// Whether `url` names Redis through Sentinel.
    pub fn is_sentinel(url: &str) -> bool {
        url.starts_with("redis+sentinel://") || url.starts_with("rediss+sentinel://")
    }

    /// Whether `url` names a Redis Cluster.
    pub fn is_cluster(url: &str) -> bool {
        url.starts_with("redis+cluster://") || url.starts_with("rediss+cluster://")
    }

    /// The target `url` names (checked, not connected to); the error says why, without the URL.
    pub fn open(url: &str) -> Result<Self, String> {
        if Self::is_sentinel(url) {
            let parsed = parse_sentinel(url)?;
            let client = sentinel_client(&parsed).map_err(|e| e.to_string())?;
            Ok(Target::Sentinel(Box::new(Watched {
                client: tokio::sync::Mutex::new(client),
                url: url.to_string(),
                sentinels: sentinel_addrs(&parsed).collect(),
                master: parsed.master,
                asking: tokio::sync::Mutex::new((0, None)),
            })))
        } else if Self::is_cluster(url) {
            let nodes = parse_cluster(url)?;
            // Checked the way it is used (the credentials each node takes, TLS).
            nodes
                .client(std::time::Duration::from_secs(1), None)
                .map_err(|e| e.to_string())?;
            Ok(Target::Cluster(Box::new(nodes)))
        } else {
            Client::open(url)
                .map(|c| Target::Direct(Box::new(c)))
                .map_err(|e| e.to_string())
        }
    }

    /// A client of the primary: the one server, or the one the Sentinels name now (which
    /// confirmed it is a primary). Not for a cluster (its nodes are [`Target::nodes`]).
    pub async fn primary(&self) -> RedisResult<Client> {
        match self {
            Target::Direct(c) => Ok(c.as_ref().clone()),
            Target::Sentinel(w) => w.client.lock().await.async_get_client().await,
            Target::Cluster(_) => Err(::redis::RedisError::from((
                ::redis::ErrorKind::InvalidClientConfig,
                "a Redis Cluster has no one primary",
            ))),
        }
    }

    /// The cluster's nodes, for a Redis Cluster.
    pub fn nodes(&self) -> Option<&Nodes> {
        match self {
            Target::Cluster(n) => Some(n),
            _ => None,
        }
    }

    /// Answers `PING` within `timeout`, blocking (the start-up probe).
    pub fn probe(&self, timeout: std::time::Duration) -> RedisResult<()> {
        let ping = ::redis::cmd("PING");
        match self {
            Target::Direct(c) => ping.query(&mut c.get_connection_with_timeout(timeout)?),
            Target::Cluster(n) => {
                ping.query(&mut n.client(timeout, Some(timeout))?.get_connection()?)
            }
            Target::Sentinel(_) => ping.query(&mut self.connection()?),
        }
    }

    /// A blocking connection to the one server or the primary (not for a cluster).
    pub fn connection(&self) -> RedisResult<::redis::Connection> {
        match self {
            Target::Direct(c) => c.get_connection_with_timeout(std::time::Duration::from_secs(2)),
            Target::Sentinel(w) => {
                let parsed = parse_sentinel(&w.url).map_err(|m| {
                    ::redis::RedisError::from((::redis::ErrorKind::InvalidClientConfig, "URL", m))
                })?;
                sentinel_client(&parsed)?.get_connection()
            }
            Target::Cluster(_) => Err(::redis::RedisError::from((
                ::redis::ErrorKind::InvalidClientConfig,
                "a Redis Cluster has no one primary",
            ))),
        }
    }

    /// Whether connections follow the Sentinels (and so should be checked against their word).
    pub fn follows_sentinels(&self) -> bool {
        matches!(self, Target::Sentinel(_))
    }

    /// Behind Sentinel, the `HOST:PORT` the Sentinels name the primary now (`None` for a plain
    /// Redis, or when no Sentinel answers): asked over one kept connection to a Sentinel, moving
    /// on to the next one when it fails.
    pub async fn named_primary(&self) -> Option<String> {
        let Target::Sentinel(w) = self else {
            return None;
        };
        let (sentinels, master) = (&w.sentinels, &w.master);
        let mut asking = w.asking.lock().await;
        for _ in 0..sentinels.len() {
            let at = asking.0 % sentinels.len();
            let conn = match asking.1.take() {
                Some(kept) => kept,
                None => {
                    let config = ::redis::AsyncConnectionConfig::new()
                        .set_connection_timeout(Some(std::time::Duration::from_millis(500)))
                        .set_response_timeout(Some(std::time::Duration::from_millis(500)));
                    let connected = match Client::open(sentinels[at].clone()) {
                        Ok(c) => {
                            c.get_multiplexed_async_connection_with_config(&config)
                                .await
                        }
                        Err(e) => Err(e),
                    };
                    match connected {
                        Ok(c) => c,
                        Err(_) => {
                            asking.0 += 1;
                            continue;
                        }
                    }
                }
            };
            let mut c = conn.clone();
            let named: RedisResult<Option<(String, u16)>> = ::redis::cmd("SENTINEL")
                .arg("GET-MASTER-ADDR-BY-NAME")
                .arg(master)
                .query_async(&mut c)
                .await;
            if let Ok(Some((host, port))) = named {
                asking.1 = Some(conn);
                return Some(format!("{host}:{port}"));
            }
            // This Sentinel failed or knows no primary: the next one.
            asking.0 += 1;
        }
        None
    }
}

/// The Sentinels' addresses of `u`.
fn sentinel_addrs(u: &SentinelUrl) -> impl Iterator<Item = ConnectionAddr> + '_ {
    u.sentinels.iter().map(|(host, port)| match u.tls {
        true => ConnectionAddr::TcpTls {
            host: host.clone(),
            port: *port,
            insecure: false,
            tls_params: None,
        },
        false => ConnectionAddr::Tcp(host.clone(), *port),
    })
}

/// The client asking the Sentinels of `u` for its primary.
fn sentinel_client(u: &SentinelUrl) -> RedisResult<SentinelClient> {
    let mut b =
        SentinelClientBuilder::new(sentinel_addrs(u), &u.master, SentinelServerType::Master)?
            .set_client_to_redis_db(u.db);
    if let Some(user) = &u.username {
        b = b.set_client_to_redis_username(user);
    }
    if let Some(password) = &u.password {
        b = b.set_client_to_redis_password(password);
    }
    if u.tls {
        b = b
            .set_client_to_redis_tls_mode(TlsMode::Secure)
            .set_client_to_sentinel_tls_mode(TlsMode::Secure);
    }
    b.build()
}

/// `redis+sentinel://[[USER]:PASSWORD@]HOST[:PORT][,HOST[:PORT]...]/MASTER_NAME[/DB]`: the
/// password (and user) is the primary's; the Sentinels are reached without one.
fn parse_sentinel(url: &str) -> Result<SentinelUrl, String> {
    let (tls, rest) = match url.split_once("://") {
        Some(("redis+sentinel", rest)) => (false, rest),
        Some(("rediss+sentinel", rest)) => (true, rest),
        _ => return Err("expected redis+sentinel:// or rediss+sentinel://".into()),
    };
    let (username, password, rest) = credentials(rest);
    let (hosts, path) = rest
        .split_once('/')
        .ok_or("no master name: expected .../MASTER_NAME[/DB]")?;
    let mut sentinels = Vec::new();
    for h in hosts.split(',').filter(|h| !h.is_empty()) {
        sentinels.push(host_port(h, SENTINEL_PORT)?);
    }
    if sentinels.is_empty() {
        return Err("no Sentinel address: expected HOST:PORT[,HOST:PORT...]".into());
    }
    let mut parts = path.trim_end_matches('/').split('/');
    let master = parts.next().unwrap_or_default().to_string();
    if master.is_empty() {
        return Err("no master name: expected .../MASTER_NAME[/DB]".into());
    }
    let db = match parts.next() {
        None => 0,
        Some(d) => d
            .parse()
            .map_err(|_| format!("'{d}': the database is a number"))?,
    };
    if parts.next().is_some() {
        return Err("expected .../MASTER_NAME[/DB] after the Sentinels".into());
    }
    Ok(SentinelUrl {
        sentinels,
        master,
        db,
        username,
        password,
        tls,
    })
}

/// The user name and password of a URL's authority (`[[USER]:PASSWORD@]...`), and the rest. The
/// user info ends at the last `@` (a password may hold `/`); user info without a `:` is a user
/// name, as for `redis://`; both are percent-decoded.
fn credentials(rest: &str) -> (Option<String>, Option<String>, &str) {
    let (userinfo, rest) = match rest.rsplit_once('@') {
        Some((u, r)) => (Some(u), r),
        None => (None, rest),
    };
    match userinfo.map(|u| u.split_once(':').unwrap_or((u, ""))) {
        Some((user, pass)) => (
            (!user.is_empty()).then(|| percent_decoded(user)),
            (!pass.is_empty()).then(|| percent_decoded(pass)),
            rest,
        ),
        None => (None, None, rest),
    }
}

/// `redis+cluster://[[USER]:PASSWORD@]HOST[:PORT][,HOST[:PORT]...][/]`: any nodes of the cluster
/// (it names the rest); the credentials are every node's.
fn parse_cluster(url: &str) -> Result<Nodes, String> {
    let (tls, rest) = match url.split_once("://") {
        Some(("redis+cluster", rest)) => (false, rest),
        Some(("rediss+cluster", rest)) => (true, rest),
        _ => return Err("expected redis+cluster:// or rediss+cluster://".into()),
    };
    let (username, password, rest) = credentials(rest);
    let hosts = rest.strip_suffix('/').unwrap_or(rest);
    if hosts.contains('/') {
        return Err(
            "a cluster has no database or master name: expected HOST:PORT[,HOST:PORT...]".into(),
        );
    }
    let nodes = hosts
        .split(',')
        .filter(|h| !h.is_empty())
        .map(|h| host_port(h, REDIS_PORT))
        .collect::<Result<Vec<_>, _>>()?;
    if nodes.is_empty() {
        return Err("no node address: expected HOST:PORT[,HOST:PORT...]".into());
    }
    Ok(Nodes {
        nodes,
        username,
        password,
        tls,
    })
}

/// `s` with its `%XX` escapes decoded (one that is not a valid escape kept as it is).
fn percent_decoded(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        if b[i] == b'%'
            && i + 2 < b.len()
            && let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2]))
        {
            out.push((h * 16 + l) as u8);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `HOST[:PORT]` or `[V6]:PORT` (`default`: the port when none is given).
fn host_port(h: &str, default: u16) -> Result<(String, u16), String> {
    let (host, port) = match h.strip_prefix('[') {
        Some(v6) => {
            let (host, after) = v6.split_once(']').ok_or(format!("'{h}': unclosed '['"))?;
            (host, after.strip_prefix(':'))
        }
        None => match h.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (h, None),
        },
    };
    let port = match port {
        None => default,
        Some(p) => p
            .parse()
            .map_err(|_| format!("'{h}': the port is a number"))?,
    };
    if host.is_empty() {
        return Err(format!("'{h}': no host"));
    }
    Ok((host.to_string(), port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sentinel_url_names_its_sentinels_master_database_and_the_primarys_password() {
        let u = parse_sentinel("redis+sentinel://:s3cret@10.0.0.1:26380,h2,[::1]:5/mymaster/2")
            .unwrap();
        assert_eq!(
            u,
            SentinelUrl {
                sentinels: vec![
                    ("10.0.0.1".into(), 26380),
                    ("h2".into(), 26379),
                    ("::1".into(), 5)
                ],
                master: "mymaster".into(),
                db: 2,
                username: None,
                password: Some("s3cret".into()),
                tls: false,
            }
        );
        let u = parse_sentinel("rediss+sentinel://h:1/m").unwrap();
        assert_eq!((u.tls, u.db, u.master.as_str()), (true, 0, "m"));
        // A password holding `/` or escapes; a lone user name.
        let u = parse_sentinel("redis+sentinel://:ab/c%2Fd%40@h:1/m").unwrap();
        assert_eq!(
            (u.password.as_deref(), u.sentinels[0].0.as_str()),
            (Some("ab/c/d@"), "h")
        );
        let u = parse_sentinel("redis+sentinel://alice@h:1/m").unwrap();
        assert_eq!((u.username.as_deref(), u.password), (Some("alice"), None));
    }

    #[test]
    fn a_cluster_url_names_its_nodes_and_their_password() {
        let n = parse_cluster("redis+cluster://:p%40ss@127.0.0.1:7000,h2,[::1]:7002/").unwrap();
        assert_eq!(
            n,
            Nodes {
                nodes: vec![
                    ("127.0.0.1".into(), 7000),
                    ("h2".into(), 6379),
                    ("::1".into(), 7002)
                ],
                username: None,
                password: Some("p@ss".into()),
                tls: false,
            }
        );
        assert!(parse_cluster("rediss+cluster://h:1").unwrap().tls);
        for bad in [
            "redis+cluster://",
            "redis+cluster://h:1/0",
            "redis+cluster://h:x",
            "redis://h:1",
        ] {
            assert!(parse_cluster(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_sentinel_url_without_a_master_or_sentinels_is_refused() {
        for bad in [
            "redis+sentinel://h:1",
            "redis+sentinel://h:1/",
            "redis+sentinel:///m",
            "redis+sentinel://h:x/m",
            "redis+sentinel://h:1/m/notanumber",
            "redis+sentinel://h:1/m/0/extra",
        ] {
            assert!(parse_sentinel(bad).is_err(), "{bad}");
        }
    }
}
