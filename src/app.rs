//! The relay's shared state: configuration and the handles every request uses. Cheap to clone.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::api::id::IdSource;
use crate::config::Config;
use crate::run::emitter::Clock;
use crate::store::Store;
use crate::upstream::Upstream;

#[derive(Clone)]
pub struct App {
    inner: Arc<Inner>,
}

struct Inner {
    config: Config,
    upstream: Upstream,
    store: Store,
    mcp: crate::mcp::Pool,
    ids: IdSource,
    clock: Clock,
    shutdown: CancellationToken,
}

impl App {
    pub fn new(config: Config) -> Self {
        let upstream = Upstream::new(
            config.upstream_api,
            &config.upstream_url,
            config.upstream_api_key.clone(),
            config.upstream_timeouts.clone(),
        );
        App {
            inner: Arc::new(Inner {
                upstream,
                store: Store::memory(),
                mcp: crate::mcp::Pool::new(crate::mcp::PoolConfig::default()),
                ids: if config.deterministic { IdSource::sequential() } else { IdSource::Random },
                clock: if config.deterministic { Clock::Fixed(1_700_000_000) } else { Clock::System },
                shutdown: CancellationToken::new(),
                config,
            }),
        }
    }

    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    pub fn upstream(&self) -> &Upstream {
        &self.inner.upstream
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

    /// Cancelled when the relay shuts down; every run's token is a child of it.
    pub fn shutdown_token(&self) -> &CancellationToken {
        &self.inner.shutdown
    }
}
