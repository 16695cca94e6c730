//! The relay's shared state: configuration and the handles every request uses. Cheap to clone.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::api::id::IdSource;
use crate::config::Config;
use crate::eventlog::emitter::Clock;
use crate::store::Store;
use crate::upstream::{Upstream, Upstreams};

#[derive(Clone)]
pub struct App {
    inner: Arc<Inner>,
}

struct Inner {
    config: Config,
    upstream: Upstreams,
    metrics: Arc<crate::metrics::Metrics>,
    store: Store,
    mcp: crate::mcp::Pool,
    ids: IdSource,
    clock: Clock,
    shutdown: CancellationToken,
    /// WebSocket-mode connections (hyper stops tracking a connection once it is upgraded): the
    /// graceful shutdown waits for them too.
    sockets: tokio_util::task::TaskTracker,
    runs: Arc<tokio::sync::Semaphore>,
    limiter: crate::limits::Limiter,
    /// Each limited relay key's account, by the key's SHA-256; and, with no keys, the one
    /// caller's (if limited).
    accounts: std::collections::HashMap<[u8; 32], Arc<crate::limits::Account>>,
    anonymous: Option<Arc<crate::limits::Account>>,
    sealer: Arc<crate::seal::Sealer>,
}

impl App {
    /// Builds the relay over a memory store, or panics if the configured store cannot be opened
    /// (use [`App::open`] to handle that).
    pub fn new(config: Config) -> Self {
        Self::open(config).expect("the store opens")
    }

    /// Builds the relay: opens the store (finishing runs a previous process left unfinished) and
    /// starts the retention sweeper.
    pub fn open(config: Config) -> Result<Self, crate::store::StoreError> {
        Self::open_with_limits_clock(config, crate::limits::Clock::System)
    }

    /// [`App::open`], the limits reading the time from `clock` (a test's, moved by hand).
    pub fn open_with_limits_clock(
        config: Config,
        clock: crate::limits::Clock,
    ) -> Result<Self, crate::store::StoreError> {
        let store = crate::store::Store::open(&config.store, config.store_ttl)?;
        let sealer = sealer_for(&config)?;
        let app = Self::build(config, store, sealer, clock);
        if app.config().store_ttl.is_some() && tokio::runtime::Handle::try_current().is_ok() {
            let sweeper = app.clone();
            tokio::spawn(async move {
                use futures::StreamExt;
                let every = tokio::time::interval(std::time::Duration::from_secs(60));
                let ticks = tokio_stream::wrappers::IntervalStream::new(every)
                    .take_until(sweeper.shutdown_token().clone().cancelled_owned());
                tokio::pin!(ticks);
                while ticks.next().await.is_some() {
                    match sweeper.store().expire(sweeper.clock().now_unix()).await {
                        Ok(0) => {}
                        Ok(n) => tracing::info!(removed = n, "expired stored responses"),
                        Err(e) => tracing::warn!(error = %e, "could not expire stored responses"),
                    }
                }
            });
        }
        Ok(app)
    }

    fn build(
        config: Config,
        store: Store,
        sealer: crate::seal::Sealer,
        clock: crate::limits::Clock,
    ) -> Self {
        crate::install_tls();
        let named: Vec<(String, Upstream)> = config
            .upstreams
            .iter()
            .map(|u| {
                let key = u.api_key.as_ref().map(|k| k.0.clone());
                let up = Upstream::new(u.api, &u.url, key, u.timeouts.clone());
                (u.name.clone(), up)
            })
            .collect();
        // A named default shares its connection pool with its prefix route.
        let default = config
            .default_upstream
            .as_ref()
            .and_then(|d| named.iter().find(|(n, _)| n == d))
            .map(|(_, u)| u.clone())
            .unwrap_or_else(|| {
                Upstream::new(
                    config.upstream_api,
                    &config.upstream_url,
                    config.upstream_api_key.as_ref().map(|k| k.0.clone()),
                    config.upstream_timeouts.clone(),
                )
            });
        // Label values the config names: literal models of keys' `models`.
        let configured = config
            .keys
            .iter()
            .flat_map(|k| k.models.iter().flatten())
            .filter(|m| !m.contains('*'))
            .cloned();
        let metrics = Arc::new(crate::metrics::Metrics::new(configured));
        let upstream = Upstreams::new(
            default,
            config.default_upstream.clone(),
            named,
            metrics.clone(),
        );
        let limiter = crate::limits::Limiter::new(
            store.redis(),
            clock,
            config.limits_fail_closed,
            metrics.clone(),
        );
        let (accounts, anonymous) = accounts(&config);
        App {
            inner: Arc::new(Inner {
                limiter,
                accounts,
                anonymous,
                upstream,
                store: store.with_metrics(metrics.clone()),
                metrics,
                mcp: mcp_pool(&config),
                ids: if config.deterministic {
                    IdSource::sequential()
                } else {
                    IdSource::Random
                },
                clock: if config.deterministic {
                    Clock::Fixed(1_700_000_000)
                } else {
                    Clock::System
                },
                shutdown: CancellationToken::new(),
                sockets: tokio_util::task::TaskTracker::new(),
                runs: Arc::new(tokio::sync::Semaphore::new(
                    config.limits.max_concurrent_runs,
                )),
                sealer: Arc::new(sealer),
                config,
            }),
        }
    }

    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    pub fn upstream(&self) -> &Upstreams {
        &self.inner.upstream
    }

    pub fn metrics(&self) -> &crate::metrics::Metrics {
        &self.inner.metrics
    }

    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    /// The MCP client sessions, shared by every run.
    pub fn mcp(&self) -> &crate::mcp::Pool {
        &self.inner.mcp
    }

    pub fn ids(&self) -> &IdSource {
        &self.inner.ids
    }

    pub fn clock(&self) -> Clock {
        self.inner.clock
    }

    /// What seals and opens reasoning items' `encrypted_content`.
    pub fn sealer(&self) -> &Arc<crate::seal::Sealer> {
        &self.inner.sealer
    }

    /// A place for one more run, if the relay is not full.
    pub fn run_permit(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        self.inner.runs.clone().try_acquire_owned().ok()
    }

    /// The limits' counters.
    pub fn limiter(&self) -> &crate::limits::Limiter {
        &self.inner.limiter
    }

    /// What the key with this SHA-256 is held to (`None`: a relay without keys), if anything.
    pub fn account(&self, key: Option<&[u8; 32]>) -> Option<Arc<crate::limits::Account>> {
        match key {
            Some(k) => self.inner.accounts.get(k).cloned(),
            None => self.inner.anonymous.clone(),
        }
    }

    /// Cancelled when the relay shuts down; every run's token is a child of it.
    pub fn shutdown_token(&self) -> &CancellationToken {
        &self.inner.shutdown
    }

    /// The upgraded (WebSocket-mode) connections.
    pub fn sockets(&self) -> &tokio_util::task::TaskTracker {
        &self.inner.sockets
    }
}

/// The accounts of the limited keys (their own limits, their tenant's, the registered servers'
/// calls per minute), and, without keys, the one caller's (`--key-*`, `[tenants.default]`).
#[allow(clippy::type_complexity)]
fn accounts(
    config: &Config,
) -> (
    std::collections::HashMap<[u8; 32], Arc<crate::limits::Account>>,
    Option<Arc<crate::limits::Account>>,
) {
    use crate::limits::Account;
    let servers = &config.mcp.calls_per_minute;
    let tenant = |t: &str| config.tenant_limits.get(t).copied().unwrap_or_default();
    let keyed = config
        .keys
        .iter()
        .filter_map(|k| {
            let id: String = k.sha256[..8].iter().map(|b| format!("{b:02x}")).collect();
            let account = Account::new(&id, &k.tenant, k.limits, tenant(&k.tenant), servers)?;
            Some((k.sha256, Arc::new(account)))
        })
        .collect();
    let anonymous = config.keys.is_empty().then(|| {
        let t = crate::store::DEFAULT_TENANT;
        Account::new("anonymous", t, config.bare_key_limits, tenant(t), servers).map(Arc::new)
    });
    (keyed, anonymous.flatten())
}

/// The MCP pool, sending through clients that connect only where the SSRF policies allow: the
/// request's, and the registered servers' (which also reaches their hosts).
fn mcp_pool(config: &Config) -> crate::mcp::Pool {
    let pool = crate::mcp::PoolConfig {
        tools_ttl: config.mcp.tools_ttl,
        ..Default::default()
    };
    crate::mcp::Pool::with_policies(
        pool,
        config.mcp.ssrf.clone(),
        config.mcp.registered_policy(),
    )
}

/// The relay's sealing key: `--secret-key`, else the key file beside the SQLite store (made
/// once), else one for this process.
fn sealer_for(config: &Config) -> Result<crate::seal::Sealer, crate::store::StoreError> {
    use crate::seal::{KEY_FILE, Sealer};
    if let Some(secret) = &config.secret_key {
        return Ok(Sealer::from_secret(&secret.0));
    }
    match &config.store {
        crate::config::StoreKind::Sqlite(path) => {
            let file = path
                .parent()
                .filter(|p| !p.as_os_str().is_empty())
                .unwrap_or(std::path::Path::new("."))
                .join(KEY_FILE);
            Sealer::from_key_file(&file).map_err(|e| {
                crate::store::StoreError::Io(format!("the sealing key {}: {e}", file.display()))
            })
        }
        crate::config::StoreKind::Redis(_) => {
            tracing::warn!(
                "no --secret-key: sealed reasoning and compaction items open only on this relay, until it restarts; relays sharing a Redis store need one --secret-key"
            );
            Ok(Sealer::random())
        }
        crate::config::StoreKind::Memory => Ok(Sealer::random()),
    }
}
