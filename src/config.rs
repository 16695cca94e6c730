//! The validated [`Config`] the relay runs on (SPEC §3), assembled from the command line
//! (`flags`), their `RELAY_*` environment variables, an optional TOML file (`file`) and the
//! defaults. Flag beats environment beats file beats default. A bad value is a [`ConfigError`]
//! naming the flag; the binary exits 64 on it.
//!
//! [`Config::from_args`] is a sequence of steps, one concept each, run in a fixed order (when
//! several values are bad, the first step's error is the one reported): the listen address, the
//! upstream, the sealing secret, the store, the relay keys (`keys`), the named upstreams
//! (`upstreams`), the limits, the MCP settings (`mcp`), then logs and traces.

use std::net::SocketAddr;
use std::time::Duration;

use crate::upstream::{Timeouts, UpstreamApi};

mod file;
mod flags;
mod keys;
mod mcp;
mod upstreams;
pub use crate::store::{DEFAULT_TENANT, StoreKind};
pub use flags::{
    ApiArg, ApprovalArg, Cli, Command, DemoArgs, DiscoveryFailure, HostedTools, LogFormat,
    LogsCommand, ReplayArgs, ServeArgs, StoreCommand,
};
pub use keys::{KeyEntry, sha256, valid_tenant};
pub use mcp::McpConfig;
pub use upstreams::NamedUpstream;

use file::FileConfig;

#[derive(Debug, thiserror::Error)]
#[error("invalid value for '{flag}': {message}")]
pub struct ConfigError {
    pub flag: String,
    pub message: String,
}

/// A secret from the command line: `Debug` shows `***`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

/// Bounds on what one request or the whole relay may use.
#[derive(Debug, Clone)]
pub struct Limits {
    pub max_concurrent_runs: usize,
    pub max_run_time: Duration,
    pub max_input_items: usize,
    pub max_tools: usize,
    /// A streaming client that reads nothing for this long while events wait cancels its run.
    pub client_stall: Duration,
    /// Most model turns one run may take (a request's `max_steps` can only lower it).
    pub max_steps: u64,
    /// How long a WebSocket-mode connection may live (SPEC §12: 60 minutes).
    pub websocket_lifetime: Duration,
}

/// The validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    /// Serving lanes: single-threaded runtimes the binary's connections are shared among.
    pub lanes: usize,
    pub upstream_url: String,
    /// Never printed.
    pub upstream_api_key: Option<Secret>,
    /// `--secret-key`: never printed.
    pub secret_key: Option<Secret>,
    pub upstream_api: UpstreamApi,
    /// Named upstreams (`[[upstreams]]`, `--upstream`): model `NAME/REST` goes to `NAME`.
    pub upstreams: Vec<NamedUpstream>,
    /// Which of `upstreams` is the default (the one `upstream_*` describe), if one is.
    pub default_upstream: Option<String>,
    pub store: StoreKind,
    /// How long stored runs are kept.
    pub store_ttl: Option<Duration>,
    /// Relay keys (`--api-key`, `[[keys]]`): with any, every route but `/healthz` needs one,
    /// and the key decides the tenant; with none, everything is the one tenant
    /// [`DEFAULT_TENANT`].
    pub keys: Vec<KeyEntry>,
    /// `[tenants.NAME] limits`: what each tenant's keys share.
    pub tenant_limits: std::collections::BTreeMap<String, crate::limits::Spec>,
    /// The `--key-*` limits: every bare key's, and, without keys, the relay's one caller's.
    pub bare_key_limits: crate::limits::Spec,
    /// `--limits-fail-closed`: refuse (503) when the limits' counters cannot be reached.
    pub limits_fail_closed: bool,
    pub upstream_timeouts: Timeouts,
    pub max_body_bytes: usize,
    pub upstream_vision: bool,
    /// `--hosted-tools`.
    pub hosted_tools: HostedTools,
    pub limits: Limits,
    pub mcp: McpConfig,
    /// Sequential ids and a fixed clock, for golden tests.
    pub deterministic: bool,
    pub log_format: LogFormat,
    /// `--metrics-key`: never printed.
    pub metrics_key: Option<Secret>,
    /// Where traces go (`--otlp-endpoint` and the `OTEL_*` variables); `None`: no traces.
    pub traces: Option<crate::otel::TraceConfig>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: "127.0.0.1:8080".parse().expect("valid"),
            lanes: std::thread::available_parallelism().map_or(1, |n| n.get()),
            upstream_url: "http://127.0.0.1:11434/v1".into(),
            upstream_api_key: None,
            secret_key: None,
            upstream_api: UpstreamApi::Chat,
            upstreams: Vec::new(),
            default_upstream: None,
            store: StoreKind::Memory,
            store_ttl: None,
            keys: Vec::new(),
            tenant_limits: Default::default(),
            bare_key_limits: Default::default(),
            limits_fail_closed: false,
            upstream_timeouts: Timeouts {
                retries: 2,
                connect: Duration::from_secs(10),
                first_byte: Duration::from_secs(120),
                idle: Duration::from_secs(300),
            },
            max_body_bytes: 16 * 1024 * 1024,
            upstream_vision: false,
            hosted_tools: HostedTools::Ignore,
            limits: Limits {
                max_concurrent_runs: 1024,
                max_run_time: Duration::from_secs(3600),
                max_input_items: 4096,
                max_tools: 512,
                client_stall: Duration::from_secs(300),
                max_steps: 64,
                websocket_lifetime: Duration::from_secs(3600),
            },
            mcp: McpConfig {
                discovery_failure: DiscoveryFailure::Continue,
                default_approval: crate::mcp::Approval::Always,
                max_servers: 10,
                discovery_timeout: Duration::from_secs(15),
                call_timeout: Duration::from_secs(60),
                tools_ttl: Duration::from_secs(30),
                max_output_bytes: 64 * 1024,
                max_concurrent_calls: 8,
                ssrf: crate::ssrf::Policy::strict(),
                registered: crate::mcp::Registered::default(),
                web_search: None,
                calls_per_minute: Vec::new(),
            },
            deterministic: false,
            log_format: LogFormat::Text,
            metrics_key: None,
            traces: None,
        }
    }
}

impl Config {
    /// Builds the configuration from parsed flags (with their env values), the environment's
    /// fallbacks, and the TOML file they name.
    pub fn from_args(
        mut args: ServeArgs,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        let mut file = file::read(args.config.as_deref())?;
        let (a, f) = (&mut args, &mut file);
        let mut c = Config::default();
        c.set_listen(a, f)?;
        let explicit_url = c.set_upstream(a, f, &env)?;
        if let Some(k) = a.secret_key.take().or(f.secret_key.take()) {
            if k.len() < 16 {
                return Err(bad("--secret-key", "at least 16 characters"));
            }
            c.secret_key = Some(Secret(k));
        }
        // The binary's embedded default is SQLite; `Config::default()` (tests) keeps `memory`.
        let store = a
            .store
            .take()
            .or(f.store.take())
            .unwrap_or_else(|| "sqlite:./relay-data/relay.sqlite3".into());
        c.store = StoreKind::parse(&store).map_err(|m| bad("--store", m))?;
        c.set_key_limits(a, f)?;
        c.keys = keys::collect(
            std::mem::take(&mut a.api_keys),
            f.api_keys.take(),
            f.keys.take(),
            c.bare_key_limits,
        )?;
        c.set_upstreams(a, f, explicit_url)?;
        c.set_limits(a, f)?;
        c.upstream_vision = a.upstream_vision.or(f.upstream_vision).unwrap_or(false);
        let ttl = seconds(
            "--store-ttl",
            a.store_ttl.or(f.store_ttl),
            Duration::from_secs(30 * 24 * 3600),
        )?;
        c.store_ttl = Some(ttl);
        if let Some(n) = a.max_body_bytes.or(f.max_body_bytes) {
            if n < 1024 {
                return Err(bad("--max-body-bytes", format!("'{n}': at least 1024")));
            }
            c.max_body_bytes = n;
        }
        let (file_policy, web_search) = file::hosted_tools(f.hosted_tools.take());
        if let Some(h) = a.hosted_tools.or(file_policy) {
            c.hosted_tools = h;
        }
        c.mcp.set_limits(a, f)?;
        c.mcp.set_servers(f.mcp_servers.take(), web_search)?;
        keys::check_servers(&c.keys, &c.mcp.registered)?;
        c.mcp.set_reach(a, f)?;
        c.deterministic = env("RELAY_DETERMINISTIC").is_some_and(|v| v == "1");
        c.set_observability(a, f, &env);
        Ok(c)
    }

    /// The limits of bare keys (`--key-*`), the tenants' (`[tenants.NAME]`), and what a limit
    /// check does when its counters cannot be reached.
    fn set_key_limits(
        &mut self,
        args: &ServeArgs,
        file: &mut FileConfig,
    ) -> Result<(), ConfigError> {
        let one = |flag: &str, a: Option<i64>, f: Option<i64>| keys::limit(flag, a.or(f));
        self.bare_key_limits = crate::limits::Spec {
            requests_per_minute: one(
                "--key-requests-per-minute",
                args.key_requests_per_minute,
                file.key_requests_per_minute,
            )?,
            tokens_per_minute: one(
                "--key-tokens-per-minute",
                args.key_tokens_per_minute,
                file.key_tokens_per_minute,
            )?,
            tokens_per_day: one(
                "--key-tokens-per-day",
                args.key_tokens_per_day,
                file.key_tokens_per_day,
            )?,
            concurrent_runs: one(
                "--key-concurrent-runs",
                args.key_concurrent_runs,
                file.key_concurrent_runs,
            )?,
            mcp_calls_per_minute: one(
                "--key-mcp-calls-per-minute",
                args.key_mcp_calls_per_minute,
                file.key_mcp_calls_per_minute,
            )?,
        };
        self.tenant_limits = keys::tenants(file.tenants.take())?;
        self.limits_fail_closed = args
            .limits_fail_closed
            .or(file.limits_fail_closed)
            .unwrap_or(false);
        Ok(())
    }

    /// `--listen` and `--lanes`.
    fn set_listen(&mut self, args: &ServeArgs, file: &mut FileConfig) -> Result<(), ConfigError> {
        match args.lanes.or(file.lanes) {
            Some(0) => return Err(bad("--lanes", "'0': at least 1")),
            Some(n) => self.lanes = n,
            None => {}
        }
        if let Some(l) = args.listen {
            self.listen = l;
        } else if let Some(l) = file.listen.take() {
            self.listen = l
                .parse()
                .map_err(|e| bad("--listen", format!("'{l}': {e}")))?;
        }
        Ok(())
    }

    /// The default upstream: its URL (else `OPENAI_BASE_URL`), key (else `OPENAI_API_KEY`) and
    /// API. Whether the URL was given explicitly (a flag or the file, not the fallback).
    fn set_upstream(
        &mut self,
        args: &mut ServeArgs,
        file: &mut FileConfig,
        env: &impl Fn(&str) -> Option<String>,
    ) -> Result<bool, ConfigError> {
        let explicit_url = args.upstream_url.take().or(file.upstream_url.take());
        let explicit = explicit_url.is_some();
        let url = explicit_url.or_else(|| env("OPENAI_BASE_URL").filter(|s| !s.is_empty()));
        if let Some(u) = url {
            self.upstream_url = upstreams::check_url("--upstream-url", &u)?;
        }
        self.upstream_api_key = args
            .upstream_api_key
            .take()
            .or(file.upstream_api_key.take())
            .or_else(|| env("OPENAI_API_KEY"))
            .filter(|k| !k.is_empty())
            .map(Secret);
        self.upstream_api = upstreams::api(args.upstream_api.or(file.upstream_api));
        Ok(explicit)
    }

    /// The default upstream's timeouts, then the named upstreams (`[[upstreams]]`, `--upstream`);
    /// a named default replaces the default upstream, unless a URL was given explicitly.
    fn set_upstreams(
        &mut self,
        args: &ServeArgs,
        file: &mut FileConfig,
        explicit_url: bool,
    ) -> Result<(), ConfigError> {
        let secs = seconds;
        let d = self.upstream_timeouts.clone();
        self.upstream_timeouts = Timeouts {
            retries: args
                .upstream_retries
                .or(file.upstream_retries)
                .unwrap_or(d.retries),
            connect: secs(
                "--upstream-connect-timeout",
                args.upstream_connect_timeout
                    .or(file.upstream_connect_timeout),
                d.connect,
            )?,
            first_byte: secs(
                "--upstream-first-byte-timeout",
                args.upstream_first_byte_timeout
                    .or(file.upstream_first_byte_timeout),
                d.first_byte,
            )?,
            idle: secs(
                "--upstream-idle-timeout",
                args.upstream_idle_timeout.or(file.upstream_idle_timeout),
                d.idle,
            )?,
        };
        let (named, default) = upstreams::resolve(
            file.upstreams.take().unwrap_or_default(),
            &args.upstreams,
            &self.upstream_timeouts,
        )?;
        if let Some(name) = &default {
            if explicit_url {
                return Err(bad(
                    "upstreams",
                    format!(
                        "upstream '{name}' is the default, and --upstream-url (or upstream_url) names another"
                    ),
                ));
            }
            let d = named
                .iter()
                .find(|u| &u.name == name)
                .expect("the default is named");
            self.upstream_url = d.url.clone();
            self.upstream_api = d.api;
            self.upstream_api_key = d.api_key.clone();
            self.upstream_timeouts = d.timeouts.clone();
        }
        self.upstreams = named;
        self.default_upstream = default;
        Ok(())
    }

    /// [`Limits`]: runs at once, input items, tools, steps, the client stall and the run time.
    fn set_limits(&mut self, args: &ServeArgs, file: &FileConfig) -> Result<(), ConfigError> {
        let secs = seconds;
        let positive =
            |flag: &str, v: Option<usize>, default: usize| -> Result<usize, ConfigError> {
                match v {
                    Some(0) => Err(bad(flag, "'0': at least 1")),
                    Some(n) => Ok(n),
                    None => Ok(default),
                }
            };
        let l = &mut self.limits;
        l.max_concurrent_runs = positive(
            "--max-concurrent-runs",
            args.max_concurrent_runs.or(file.max_concurrent_runs),
            l.max_concurrent_runs,
        )?;
        l.max_input_items = positive(
            "--max-input-items",
            args.max_input_items.or(file.max_input_items),
            l.max_input_items,
        )?;
        l.max_tools = positive(
            "--max-tools",
            args.max_tools.or(file.max_tools),
            l.max_tools,
        )?;
        l.max_steps = positive(
            "--max-steps",
            args.max_steps.or(file.max_steps).map(|n| n as usize),
            l.max_steps as usize,
        )? as u64;
        l.client_stall = secs(
            "--client-stall-timeout",
            args.client_stall_timeout.or(file.client_stall_timeout),
            l.client_stall,
        )?;
        l.max_run_time = secs(
            "--max-run-seconds",
            args.max_run_seconds.or(file.max_run_seconds),
            l.max_run_time,
        )?;
        Ok(())
    }

    /// Log lines, the `/metrics` key, and traces (`--otlp-endpoint` and the `OTEL_*` variables).
    fn set_observability(
        &mut self,
        args: &mut ServeArgs,
        file: &mut FileConfig,
        env: &impl Fn(&str) -> Option<String>,
    ) {
        self.log_format = args.log_format.or(file.log_format).unwrap_or_default();
        self.metrics_key = args
            .metrics_key
            .take()
            .or(file.metrics_key.take())
            .filter(|k| !k.is_empty())
            .map(Secret);
        self.traces = crate::otel::TraceConfig::from_env(
            args.otlp_endpoint
                .take()
                .or(file.otlp_endpoint.take())
                .as_deref(),
            args.otel_capture_content
                .or(file.otel_capture_content)
                .unwrap_or(false),
            env,
        );
    }
}

/// A positive number of seconds, or `default` when not given.
fn seconds(flag: &str, v: Option<f64>, default: Duration) -> Result<Duration, ConfigError> {
    match v {
        None => Ok(default),
        Some(s) if s > 0.0 && s.is_finite() => Ok(Duration::from_secs_f64(s)),
        Some(s) => Err(bad(
            flag,
            format!("'{s}': expected a positive number of seconds"),
        )),
    }
}

/// The value of the environment variable `var` that `field` names; it must be set and non-empty.
fn from_env(field: &str, var: &str) -> Result<String, ConfigError> {
    match std::env::var(var) {
        Ok(v) if !v.is_empty() => Ok(v),
        _ => Err(bad(
            field,
            format!("the environment variable '{var}' is not set (or empty)"),
        )),
    }
}

fn bad(flag: &str, message: impl Into<String>) -> ConfigError {
    ConfigError {
        flag: flag.to_string(),
        message: message.into(),
    }
}
