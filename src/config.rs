//! The command line (SPEC §3): flags, their `RELAY_*` environment variables, an optional TOML
//! file, and the validated [`Config`] the relay runs on. Flag beats environment beats file beats
//! default. A bad value is a [`ConfigError`] naming the flag; the binary exits 64 on it.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use serde::Deserialize;

pub use crate::store::StoreKind;
use crate::upstream::{Timeouts, UpstreamApi};

mod upstreams;
pub use upstreams::NamedUpstream;

#[derive(Debug, Parser)]
#[command(
    name = "responses-relay",
    version,
    about = "The OpenAI Responses API with hosted MCP tools, in front of any OpenAI-compatible model."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
// Parsed once at start-up: the size of `ServeArgs` costs nothing worth a box.
#[allow(clippy::large_enum_variant)]
pub enum Command {
    /// Run the relay.
    Serve(ServeArgs),
    /// Read recorded runs: `logs export ID`, `logs show ID|FILE`.
    #[command(subcommand)]
    Logs(LogsCommand),
    /// Serve a recorded run (an exported JSON Lines file) to any `POST /v1/responses`.
    Replay(ReplayArgs),
    /// Show the relay at work with no network and no model server: a scripted model, an MCP
    /// test server and a relay on loopback, one agent run printed, then served (with its viewer).
    Demo(DemoArgs),
}

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Address the demo relay listens on (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:8080", value_name = "ADDR")]
    pub listen: SocketAddr,
}

#[derive(Debug, Subcommand)]
pub enum LogsCommand {
    /// Write a stored run's event log as JSON Lines (one event a line with its time offset).
    Export {
        /// The response id.
        id: String,
        /// The store to read (works on the store of a stopped relay).
        #[arg(
            long,
            env = "RELAY_STORE",
            default_value = "sqlite:./relay-data/relay.sqlite3"
        )]
        store: String,
        /// Only a run of this tenant (an operator sees every tenant's runs without it).
        #[arg(long)]
        tenant: Option<String>,
    },
    /// Print a readable timeline of a stored run (by id) or of an exported file.
    Show {
        /// A response id, or the path of an exported JSON Lines file.
        target: String,
        #[arg(
            long,
            env = "RELAY_STORE",
            default_value = "sqlite:./relay-data/relay.sqlite3"
        )]
        store: String,
        /// Only a run of this tenant (an operator sees every tenant's runs without it).
        #[arg(long)]
        tenant: Option<String>,
    },
}

#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// An exported JSON Lines file (`responses-relay logs export ID > FILE`).
    pub file: PathBuf,
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:8080", value_name = "ADDR")]
    pub listen: SocketAddr,
    /// Playback speed: 1 = the original timing, 10 = ten times faster, `inf` = no waiting.
    #[arg(long, default_value_t = 1.0, value_parser = parse_speed)]
    pub speed: f64,
}

fn parse_speed(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(x) if x > 0.0 => Ok(x),
        _ => Err(format!("'{s}': expected a positive number (or inf)")),
    }
}

/// An on/off flag: bare (`--flag`) is on; `--flag=false` (or `RELAY_FLAG=false`, `0`, `no`, `off`)
/// is off, so the environment and the command line can turn off what the config file turns on.
fn switch() -> clap::builder::BoolishValueParser {
    clap::builder::BoolishValueParser::new()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ApiArg {
    Chat,
    Responses,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DiscoveryFailure {
    Continue,
    Fail,
}

/// What a hosted tool the relay cannot run (`web_search`, `file_search`, `code_interpreter`, ...)
/// does to a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum HostedTools {
    /// Accepted and echoed, never offered to the model.
    #[default]
    Ignore,
    /// A 400 naming the tool.
    Reject,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// One human-readable line per event (colours only on a terminal).
    #[default]
    Text,
    /// One JSON object per line: time, level, message, the request id and every field.
    Json,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ApprovalArg {
    Always,
    Never,
}

#[derive(Debug, Clone, Args, Default)]
pub struct ServeArgs {
    /// Address to listen on; port 0 picks a free port (printed as `listening on http://ADDR`).
    #[arg(long, env = "RELAY_LISTEN", value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
    /// Base URL of the OpenAI-compatible model API, ending in /v1 [env fallback: OPENAI_BASE_URL].
    #[arg(long, env = "RELAY_UPSTREAM_URL", value_name = "URL")]
    pub upstream_url: Option<String>,
    /// Key sent to the upstream [env fallback: OPENAI_API_KEY]; without it the client's bearer is forwarded.
    #[arg(
        long,
        env = "RELAY_UPSTREAM_API_KEY",
        value_name = "KEY",
        hide_env_values = true
    )]
    pub upstream_api_key: Option<String>,
    /// The secret that seals reasoning items' `encrypted_content` (any string; default: a key
    /// file `relay-secret.key` beside the SQLite store, made once). Relays sharing a Redis store
    /// need the same one.
    #[arg(
        long,
        env = "RELAY_SECRET_KEY",
        value_name = "SECRET",
        hide_env_values = true
    )]
    pub secret_key: Option<String>,
    /// Which upstream API to drive.
    #[arg(long, env = "RELAY_UPSTREAM_API", value_enum)]
    pub upstream_api: Option<ApiArg>,
    /// The bearer `GET /metrics` needs (default: it is open, as `/healthz` is).
    #[arg(
        long,
        env = "RELAY_METRICS_KEY",
        value_name = "KEY",
        hide_env_values = true
    )]
    pub metrics_key: Option<String>,
    /// How log lines are written: `text`, or `json` (one object per line).
    #[arg(long, env = "RELAY_LOG_FORMAT", value_enum)]
    pub log_format: Option<LogFormat>,
    /// Export traces over OTLP/HTTP (protobuf) to this collector base URL (`/v1/traces` is
    /// appended); `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, `OTEL_EXPORTER_OTLP_HEADERS` and
    /// `OTEL_SERVICE_NAME` are read as well.
    #[arg(long, env = "OTEL_EXPORTER_OTLP_ENDPOINT", value_name = "URL")]
    pub otlp_endpoint: Option<String>,
    /// Put prompts, model output, tool arguments and tool results into trace spans.
    #[arg(long, env = "RELAY_OTEL_CAPTURE_CONTENT", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = switch())]
    pub otel_capture_content: Option<bool>,
    /// A named Chat Completions upstream (repeatable): model `NAME/REST` goes to URL as `REST`.
    #[arg(long = "upstream", value_name = "NAME=URL")]
    pub upstreams: Vec<String>,
    /// Where runs are stored: `sqlite:PATH` (default `sqlite:./relay-data/relay.sqlite3`), `memory`, or
    /// `redis://[:PASSWORD@]HOST:PORT/DB` (`rediss://` for TLS) to share runs between relays.
    #[arg(long, env = "RELAY_STORE", value_name = "URL", hide_env_values = true)]
    pub store: Option<String>,
    /// Seconds a stored run is kept; expired runs are removed in the background (default 30 days).
    #[arg(long, env = "RELAY_STORE_TTL", value_name = "SECS")]
    pub store_ttl: Option<f64>,
    /// Relay key clients must send as `Authorization: Bearer KEY` (repeatable).
    #[arg(
        long = "api-key",
        env = "RELAY_API_KEYS",
        value_name = "KEY",
        value_delimiter = ',',
        hide_env_values = true
    )]
    pub api_keys: Vec<String>,
    /// Seconds to wait for the upstream's TCP connect.
    #[arg(long, env = "RELAY_UPSTREAM_CONNECT_TIMEOUT", value_name = "SECS")]
    pub upstream_connect_timeout: Option<f64>,
    /// Seconds to wait for the upstream's response headers.
    #[arg(long, env = "RELAY_UPSTREAM_FIRST_BYTE_TIMEOUT", value_name = "SECS")]
    pub upstream_first_byte_timeout: Option<f64>,
    /// Seconds of silence after which an upstream stream counts as stalled.
    #[arg(long, env = "RELAY_UPSTREAM_IDLE_TIMEOUT", value_name = "SECS")]
    pub upstream_idle_timeout: Option<f64>,
    /// Retries of an upstream request refused before its first byte (429, 5xx, no connection).
    #[arg(long, env = "RELAY_UPSTREAM_RETRIES", value_name = "N")]
    pub upstream_retries: Option<u32>,
    /// Most runs going at once; past it, new requests get 503 with Retry-After.
    #[arg(long, env = "RELAY_MAX_CONCURRENT_RUNS", value_name = "N")]
    pub max_concurrent_runs: Option<usize>,
    /// Longest a run may take, in seconds; then it ends with `response.failed`.
    #[arg(long, env = "RELAY_MAX_RUN_SECONDS", value_name = "SECS")]
    pub max_run_seconds: Option<f64>,
    /// Most input items one request may carry.
    #[arg(long, env = "RELAY_MAX_INPUT_ITEMS", value_name = "N")]
    pub max_input_items: Option<usize>,
    /// Most tools one request may carry.
    #[arg(long, env = "RELAY_MAX_TOOLS", value_name = "N")]
    pub max_tools: Option<usize>,
    /// Most model turns one run may take; then it ends `incomplete` (a request's `max_steps` can lower it).
    #[arg(long, env = "RELAY_MAX_STEPS", value_name = "N")]
    pub max_steps: Option<u64>,
    /// Seconds a streaming client may read nothing while events wait before its run is cancelled.
    #[arg(long, env = "RELAY_CLIENT_STALL_TIMEOUT", value_name = "SECS")]
    pub client_stall_timeout: Option<f64>,
    /// The upstream model takes images: images returned by MCP tools are shown to it (otherwise
    /// it gets a placeholder naming the image type).
    #[arg(long, env = "RELAY_UPSTREAM_VISION", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = switch())]
    pub upstream_vision: Option<bool>,
    /// Largest request body accepted, in bytes.
    #[arg(long, env = "RELAY_MAX_BODY_BYTES", value_name = "BYTES")]
    pub max_body_bytes: Option<usize>,
    /// What a server whose tools cannot be listed does to the run: `continue` (an `mcp_list_tools`
    /// item with `error`, the run goes on) or `fail` (HTTP 424 before any event).
    #[arg(long, env = "RELAY_MCP_DISCOVERY_FAILURE", value_enum)]
    pub mcp_discovery_failure: Option<DiscoveryFailure>,
    /// Hosted tools the relay cannot run (`web_search`, `file_search`, `code_interpreter`,
    /// `image_generation`, ...): `ignore` (accepted and echoed, not offered to the model) or
    /// `reject` (HTTP 400 naming the tool).
    #[arg(long, env = "RELAY_HOSTED_TOOLS", value_enum)]
    pub hosted_tools: Option<HostedTools>,
    /// `require_approval` for `mcp` tools that do not set it (OpenAI's default is `always`).
    #[arg(long, env = "RELAY_DEFAULT_REQUIRE_APPROVAL", value_enum)]
    pub default_require_approval: Option<ApprovalArg>,
    /// Most `mcp` tools one request may carry.
    #[arg(long, env = "RELAY_MAX_MCP_SERVERS", value_name = "N")]
    pub max_mcp_servers: Option<usize>,
    /// Seconds to connect to an MCP server and list its tools.
    #[arg(long, env = "RELAY_MCP_DISCOVERY_TIMEOUT", value_name = "SECS")]
    pub mcp_discovery_timeout: Option<f64>,
    /// Seconds one MCP tool call may take.
    #[arg(long, env = "RELAY_MCP_CALL_TIMEOUT", value_name = "SECS")]
    pub mcp_call_timeout: Option<f64>,
    /// Seconds a server's tool list is reused by later requests with the same server_url,
    /// headers and authorization [default: 30]; the server's `notifications/tools/list_changed`
    /// ends the reuse at once. 0 lists the tools on every request.
    #[arg(long, env = "RELAY_MCP_TOOLS_TTL", value_name = "SECS")]
    pub mcp_tools_ttl: Option<f64>,
    /// Largest tool output (bytes) sent to the model; longer outputs are truncated with a marker.
    #[arg(long, env = "RELAY_MCP_MAX_OUTPUT_BYTES", value_name = "BYTES")]
    pub mcp_max_output_bytes: Option<usize>,
    /// Allow MCP server_urls that resolve to loopback, private, link-local or other non-public
    /// addresses (off by default: the relay refuses them).
    #[arg(long, env = "RELAY_MCP_ALLOW_PRIVATE_NETWORKS", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = switch())]
    pub mcp_allow_private_networks: Option<bool>,
    /// Allow this MCP host (exact name, `*.suffix`, or an IP address) whatever it resolves to
    /// (repeatable).
    #[arg(
        long = "mcp-allow-host",
        env = "RELAY_MCP_ALLOW_HOST",
        value_name = "HOST",
        value_delimiter = ','
    )]
    pub mcp_allow_hosts: Vec<String>,
    /// TOML file with the same keys (snake_case); flags and environment override it.
    #[arg(long, env = "RELAY_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// One `[[keys]]` entry of the TOML file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileKey {
    key: Option<String>,
    key_env: Option<String>,
    key_sha256: Option<String>,
    tenant: Option<String>,
    mcp_servers: Option<Vec<String>>,
    models: Option<Vec<String>>,
}

/// `hosted_tools` of the TOML file: the policy alone, or a table of bindings.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum FileHostedTools {
    Policy(HostedTools),
    Table(FileHostedTable),
}

/// `[hosted_tools]`: `web_search = "LABEL:TOOL"` runs OpenAI's `web_search` through a registered
/// MCP server's tool; `policy` is `--hosted-tools`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileHostedTable {
    web_search: Option<String>,
    policy: Option<HostedTools>,
}

/// One `[mcp_servers.LABEL]` of the TOML file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileMcpServer {
    url: Option<String>,
    authorization: Option<String>,
    authorization_env: Option<String>,
    headers: Option<serde_json::Map<String, serde_json::Value>>,
    description: Option<String>,
    require_approval: Option<serde_json::Value>,
    allowed_tools: Option<serde_json::Value>,
    transport: Option<String>,
}

/// A relay key, as kept after start-up: its SHA-256 (never the key), the tenant whose data it
/// reaches, and what it may use (`None`: everything).
#[derive(Clone, PartialEq, Eq)]
pub struct KeyEntry {
    pub sha256: [u8; 32],
    pub tenant: String,
    pub mcp_servers: Option<Vec<String>>,
    pub models: Option<Vec<String>>,
}

impl std::fmt::Debug for KeyEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyEntry")
            .field("tenant", &self.tenant)
            .finish_non_exhaustive()
    }
}

/// SHA-256 of `bytes`.
pub fn sha256(bytes: &[u8]) -> [u8; 32] {
    let d = ring::digest::digest(&ring::digest::SHA256, bytes);
    let mut out = [0u8; 32];
    out.copy_from_slice(d.as_ref());
    out
}

impl KeyEntry {
    /// A bare `--api-key`: a tenant of its own, named after the key's hash (`key-` and 12 hex
    /// digits), so its data survives restarts and no other key reaches it.
    pub fn bare(key: &str) -> Self {
        let sha256 = sha256(key.as_bytes());
        let tenant = format!(
            "key-{}",
            sha256[..6]
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        );
        KeyEntry {
            sha256,
            tenant,
            mcp_servers: None,
            models: None,
        }
    }

    /// A key of a named tenant.
    pub fn of_tenant(key: &str, tenant: &str) -> Self {
        KeyEntry {
            tenant: tenant.to_string(),
            ..Self::bare(key)
        }
    }
}

/// The TOML file: the same keys as the flags.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    /// `[[keys]]`: relay keys with their tenants.
    keys: Option<Vec<FileKey>>,
    /// `[mcp_servers.LABEL]`: MCP servers the operator registered.
    mcp_servers: Option<std::collections::BTreeMap<String, FileMcpServer>>,
    /// `[[upstreams]]`: named model servers.
    upstreams: Option<Vec<upstreams::FileUpstream>>,
    log_format: Option<LogFormat>,
    metrics_key: Option<String>,
    otlp_endpoint: Option<String>,
    otel_capture_content: Option<bool>,
    listen: Option<String>,
    upstream_url: Option<String>,
    upstream_api_key: Option<String>,
    secret_key: Option<String>,
    upstream_api: Option<ApiArg>,
    store: Option<String>,
    store_ttl: Option<f64>,
    api_keys: Option<Vec<String>>,
    upstream_connect_timeout: Option<f64>,
    upstream_first_byte_timeout: Option<f64>,
    upstream_idle_timeout: Option<f64>,
    upstream_retries: Option<u32>,
    max_concurrent_runs: Option<usize>,
    max_run_seconds: Option<f64>,
    max_input_items: Option<usize>,
    max_tools: Option<usize>,
    client_stall_timeout: Option<f64>,
    max_steps: Option<u64>,
    upstream_vision: Option<bool>,
    max_body_bytes: Option<usize>,
    mcp_discovery_failure: Option<DiscoveryFailure>,
    /// `hosted_tools = "ignore"|"reject"`, or a `[hosted_tools]` table (`web_search`, `policy`).
    hosted_tools: Option<FileHostedTools>,
    default_require_approval: Option<ApprovalArg>,
    max_mcp_servers: Option<usize>,
    mcp_discovery_timeout: Option<f64>,
    mcp_call_timeout: Option<f64>,
    mcp_tools_ttl: Option<f64>,
    mcp_max_output_bytes: Option<usize>,
    mcp_allow_private_networks: Option<bool>,
    mcp_allow_hosts: Option<Vec<String>>,
}

#[derive(Debug, thiserror::Error)]
#[error("invalid value for '{flag}': {message}")]
pub struct ConfigError {
    pub flag: String,
    pub message: String,
}

/// The `[mcp_servers]` table, checked as a request's `mcp` tools are (a bad one exits 64 naming
/// `mcp_servers.LABEL`).
fn registered(
    table: std::collections::BTreeMap<String, FileMcpServer>,
    default_approval: crate::mcp::Approval,
) -> Result<crate::mcp::Registered, ConfigError> {
    let mut out = std::collections::BTreeMap::new();
    for (label, s) in table {
        let at = format!("mcp_servers.{label}");
        let transport = match s.transport.as_deref() {
            None | Some("auto") => crate::mcp::Transport::Auto,
            Some("streamable-http") => crate::mcp::Transport::StreamableHttp,
            Some("sse") => crate::mcp::Transport::Sse,
            Some(other) => {
                return Err(bad(
                    &format!("{at}.transport"),
                    format!("'{other}': expected 'auto', 'streamable-http' or 'sse'"),
                ));
            }
        };
        let authorization = match (s.authorization, s.authorization_env) {
            (Some(_), Some(_)) => {
                return Err(bad(
                    &at,
                    "give 'authorization' or 'authorization_env', not both",
                ));
            }
            (Some(a), None) => Some(a),
            (None, Some(var)) => Some(from_env(&format!("{at}.authorization_env"), &var)?),
            (None, None) => None,
        };
        let param = crate::api::request::McpToolParam {
            server_label: Some(label.clone()),
            server_url: s.url,
            authorization,
            headers: s.headers,
            allowed_tools: s.allowed_tools,
            require_approval: s.require_approval,
            server_description: s.description,
            ..Default::default()
        };
        let server = crate::mcp::RegisteredServer {
            tool: param,
            transport,
        };
        crate::mcp::validate_registered(&server, default_approval)
            .map_err(|e| bad(&at, e.message.replace("tools[0].", "")))?;
        out.insert(label, server);
    }
    Ok(crate::mcp::Registered(out))
}

/// A `[[keys]]` entry, checked: exactly one of `key`, `key_env`, `key_sha256`, and a tenant.
fn file_key(i: usize, k: FileKey) -> Result<KeyEntry, ConfigError> {
    let at = format!("keys[{i}]");
    let sources = [k.key.is_some(), k.key_env.is_some(), k.key_sha256.is_some()];
    if sources.iter().filter(|s| **s).count() != 1 {
        return Err(bad(
            &at,
            "give exactly one of 'key', 'key_env' (an environment variable holding the key) or 'key_sha256' (the key's SHA-256, 64 hex digits)",
        ));
    }
    let tenant = match k.tenant {
        Some(t) if valid_tenant(&t) => t,
        Some(t) => {
            return Err(bad(
                &format!("{at}.tenant"),
                format!("'{t}': a tenant is 1 to 64 of a-z, A-Z, 0-9, '-', '_', '.'"),
            ));
        }
        None => {
            return Err(bad(
                &format!("{at}.tenant"),
                "missing: every key belongs to a tenant",
            ));
        }
    };
    let sha256 = if let Some(key) = k.key {
        if key.is_empty() {
            return Err(bad(&format!("{at}.key"), "empty"));
        }
        sha256(key.as_bytes())
    } else if let Some(var) = k.key_env {
        sha256(from_env(&format!("{at}.key_env"), &var)?.as_bytes())
    } else {
        let hex = k.key_sha256.unwrap_or_default();
        let mut out = [0u8; 32];
        let ok = hex.len() == 64
            && hex.is_ascii()
            && out.iter_mut().enumerate().all(|(j, b)| {
                u8::from_str_radix(&hex[2 * j..2 * j + 2], 16)
                    .map(|v| *b = v)
                    .is_ok()
            });
        if !ok {
            return Err(bad(&format!("{at}.key_sha256"), "expected 64 hex digits"));
        }
        out
    };
    Ok(KeyEntry {
        sha256,
        tenant,
        mcp_servers: k.mcp_servers,
        models: k.models,
    })
}

/// Whether `t` may name a tenant (it becomes part of store keys).
pub fn valid_tenant(t: &str) -> bool {
    !t.is_empty()
        && t.len() <= 64
        && t.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
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

/// A URL with its password (if any) replaced by `***`, for logs and error messages.
pub fn mask_url(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut u) if u.password().is_some() => {
            let _ = u.set_password(Some("***"));
            u.to_string()
        }
        Ok(u) => u.to_string(),
        Err(_) => "<unparsable URL>".into(),
    }
}

/// How the relay treats `mcp` tools.
#[derive(Debug, Clone)]
pub struct McpConfig {
    pub discovery_failure: DiscoveryFailure,
    pub default_approval: crate::mcp::Approval,
    pub max_servers: usize,
    pub discovery_timeout: Duration,
    pub call_timeout: Duration,
    /// How long a listed server's tools are reused under the same (url, headers, authorization);
    /// zero lists on every request.
    pub tools_ttl: Duration,
    pub max_output_bytes: usize,
    /// Calls of one model turn run at most this many at a time.
    pub max_concurrent_calls: usize,
    /// Which MCP servers a request may name by URL (`--mcp-allow-private-networks`,
    /// `--mcp-allow-host`); strict by default.
    pub ssrf: crate::ssrf::Policy,
    /// `[mcp_servers.LABEL]`.
    pub registered: crate::mcp::Registered,
    /// `[hosted_tools] web_search = "LABEL:TOOL"`: the registered server and its tool.
    pub web_search: Option<(String, String)>,
}

impl McpConfig {
    /// What registered servers' sessions may reach: `ssrf`, and the registered servers' hosts (a
    /// registered server may be on a private network: the operator chose it). Only their own
    /// sessions get that reach; a request naming the same host by URL does not.
    pub fn registered_policy(&self) -> crate::ssrf::Policy {
        self.ssrf
            .also_allowing(self.registered.0.values().filter_map(|r| {
                let url = reqwest::Url::parse(r.tool.server_url.as_deref()?).ok()?;
                let host = url
                    .host_str()?
                    .trim_start_matches('[')
                    .trim_end_matches(']');
                crate::ssrf::HostPattern::parse(host).ok()
            }))
    }
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
    /// [`DEFAULT_TENANT`](crate::store::DEFAULT_TENANT).
    pub keys: Vec<KeyEntry>,
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
            upstream_url: "http://127.0.0.1:11434/v1".into(),
            upstream_api_key: None,
            secret_key: None,
            upstream_api: UpstreamApi::Chat,
            upstreams: Vec::new(),
            default_upstream: None,
            store: StoreKind::Memory,
            store_ttl: None,
            keys: Vec::new(),
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
        args: ServeArgs,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        let file = match &args.config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| bad("--config", format!("{}: {e}", path.display())))?;
                toml::from_str::<FileConfig>(&text)
                    .map_err(|e| bad("--config", format!("{}: {e}", path.display())))?
            }
            None => FileConfig::default(),
        };
        let mut c = Config::default();
        if let Some(l) = args.listen {
            c.listen = l;
        } else if let Some(l) = file.listen {
            c.listen = l
                .parse()
                .map_err(|e| bad("--listen", format!("'{l}': {e}")))?;
        }
        let explicit_url = args.upstream_url.or(file.upstream_url);
        let explicit = explicit_url.is_some();
        let url = explicit_url.or_else(|| env("OPENAI_BASE_URL").filter(|s| !s.is_empty()));
        if let Some(u) = url {
            c.upstream_url = upstreams::check_url("--upstream-url", &u)?;
        }
        c.upstream_api_key = args
            .upstream_api_key
            .or(file.upstream_api_key)
            .or_else(|| env("OPENAI_API_KEY"))
            .filter(|k| !k.is_empty())
            .map(Secret);
        if let Some(k) = args.secret_key.or(file.secret_key) {
            if k.len() < 16 {
                return Err(bad("--secret-key", "at least 16 characters"));
            }
            c.secret_key = Some(Secret(k));
        }
        c.upstream_api = upstreams::api(args.upstream_api.or(file.upstream_api));
        // The binary's embedded default is SQLite; `Config::default()` (tests) keeps `memory`.
        let store = args
            .store
            .or(file.store)
            .unwrap_or_else(|| "sqlite:./relay-data/relay.sqlite3".into());
        c.store = StoreKind::parse(&store).map_err(|m| bad("--store", m))?;
        let bare = if args.api_keys.is_empty() {
            file.api_keys.unwrap_or_default()
        } else {
            args.api_keys
        };
        c.keys = bare
            .iter()
            .filter(|k| !k.is_empty())
            .map(|k| KeyEntry::bare(k))
            .collect();
        for (i, k) in file.keys.unwrap_or_default().into_iter().enumerate() {
            c.keys.push(file_key(i, k)?);
        }
        for (i, a) in c.keys.iter().enumerate() {
            if let Some(b) = c.keys[..i].iter().find(|b| b.sha256 == a.sha256)
                && b.tenant != a.tenant
            {
                return Err(bad(
                    &format!("keys[{i}]"),
                    format!(
                        "this key is also a key of tenant '{}': a key belongs to one tenant",
                        b.tenant
                    ),
                ));
            }
        }
        let secs = seconds;
        let d = c.upstream_timeouts.clone();
        c.upstream_timeouts = Timeouts {
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
            file.upstreams.unwrap_or_default(),
            &args.upstreams,
            &c.upstream_timeouts,
        )?;
        if let Some(name) = &default {
            if explicit {
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
            c.upstream_url = d.url.clone();
            c.upstream_api = d.api;
            c.upstream_api_key = d.api_key.clone();
            c.upstream_timeouts = d.timeouts.clone();
        }
        c.upstreams = named;
        c.default_upstream = default;
        let positive =
            |flag: &str, v: Option<usize>, default: usize| -> Result<usize, ConfigError> {
                match v {
                    Some(0) => Err(bad(flag, "'0': at least 1")),
                    Some(n) => Ok(n),
                    None => Ok(default),
                }
            };
        c.limits.max_concurrent_runs = positive(
            "--max-concurrent-runs",
            args.max_concurrent_runs.or(file.max_concurrent_runs),
            c.limits.max_concurrent_runs,
        )?;
        c.limits.max_input_items = positive(
            "--max-input-items",
            args.max_input_items.or(file.max_input_items),
            c.limits.max_input_items,
        )?;
        c.limits.max_tools = positive(
            "--max-tools",
            args.max_tools.or(file.max_tools),
            c.limits.max_tools,
        )?;
        c.limits.max_steps = positive(
            "--max-steps",
            args.max_steps.or(file.max_steps).map(|n| n as usize),
            c.limits.max_steps as usize,
        )? as u64;
        c.limits.client_stall = secs(
            "--client-stall-timeout",
            args.client_stall_timeout.or(file.client_stall_timeout),
            c.limits.client_stall,
        )?;
        c.limits.max_run_time = secs(
            "--max-run-seconds",
            args.max_run_seconds.or(file.max_run_seconds),
            c.limits.max_run_time,
        )?;
        c.upstream_vision = args
            .upstream_vision
            .or(file.upstream_vision)
            .unwrap_or(false);
        let ttl = secs(
            "--store-ttl",
            args.store_ttl.or(file.store_ttl),
            Duration::from_secs(30 * 24 * 3600),
        )?;
        c.store_ttl = Some(ttl);
        if let Some(n) = args.max_body_bytes.or(file.max_body_bytes) {
            if n < 1024 {
                return Err(bad("--max-body-bytes", format!("'{n}': at least 1024")));
            }
            c.max_body_bytes = n;
        }
        if let Some(f) = args.mcp_discovery_failure.or(file.mcp_discovery_failure) {
            c.mcp.discovery_failure = f;
        }
        let (file_policy, web_search) = match file.hosted_tools {
            None => (None, None),
            Some(FileHostedTools::Policy(p)) => (Some(p), None),
            Some(FileHostedTools::Table(t)) => (t.policy, t.web_search),
        };
        if let Some(h) = args.hosted_tools.or(file_policy) {
            c.hosted_tools = h;
        }
        if let Some(a) = args
            .default_require_approval
            .or(file.default_require_approval)
        {
            c.mcp.default_approval = match a {
                ApprovalArg::Always => crate::mcp::Approval::Always,
                ApprovalArg::Never => crate::mcp::Approval::Never,
            };
        }
        if let Some(n) = args.max_mcp_servers.or(file.max_mcp_servers) {
            if n == 0 {
                return Err(bad("--max-mcp-servers", "'0': at least 1"));
            }
            c.mcp.max_servers = n;
        }
        c.mcp.discovery_timeout = secs(
            "--mcp-discovery-timeout",
            args.mcp_discovery_timeout.or(file.mcp_discovery_timeout),
            c.mcp.discovery_timeout,
        )?;
        c.mcp.call_timeout = secs(
            "--mcp-call-timeout",
            args.mcp_call_timeout.or(file.mcp_call_timeout),
            c.mcp.call_timeout,
        )?;
        c.mcp.tools_ttl = match args.mcp_tools_ttl.or(file.mcp_tools_ttl) {
            None => c.mcp.tools_ttl,
            Some(s) => Duration::try_from_secs_f64(s).map_err(|_| {
                bad(
                    "--mcp-tools-ttl",
                    format!("'{s}': expected 0 or a positive number of seconds"),
                )
            })?,
        };
        let allow_private = args
            .mcp_allow_private_networks
            .or(file.mcp_allow_private_networks)
            .unwrap_or(false);
        let allow_hosts = if args.mcp_allow_hosts.is_empty() {
            file.mcp_allow_hosts.unwrap_or_default()
        } else {
            args.mcp_allow_hosts
        };
        c.mcp.registered =
            registered(file.mcp_servers.unwrap_or_default(), c.mcp.default_approval)?;
        if let Some(binding) = web_search {
            let (label, tool) = binding.split_once(':').unwrap_or((binding.as_str(), ""));
            if tool.is_empty() || !c.mcp.registered.0.contains_key(label) {
                return Err(bad(
                    "hosted_tools.web_search",
                    format!(
                        "'{binding}': expected 'LABEL:TOOL' with LABEL a registered MCP server ([mcp_servers.LABEL])"
                    ),
                ));
            }
            c.mcp.web_search = Some((label.to_string(), tool.to_string()));
        }
        for (i, k) in c.keys.iter().enumerate() {
            if let Some(unknown) = k
                .mcp_servers
                .iter()
                .flatten()
                .find(|n| !c.mcp.registered.0.contains_key(*n))
            {
                return Err(bad(
                    &format!("keys[{i}].mcp_servers"),
                    format!("'{unknown}' is not a registered MCP server ([mcp_servers.{unknown}])"),
                ));
            }
        }
        c.mcp.ssrf = crate::ssrf::Policy::from_flags(allow_private, &allow_hosts)
            .map_err(|e| bad("--mcp-allow-host", e))?;
        if let Some(n) = args.mcp_max_output_bytes.or(file.mcp_max_output_bytes) {
            if n < 64 {
                return Err(bad("--mcp-max-output-bytes", format!("'{n}': at least 64")));
            }
            c.mcp.max_output_bytes = n;
        }
        c.deterministic = env("RELAY_DETERMINISTIC").is_some_and(|v| v == "1");
        c.log_format = args.log_format.or(file.log_format).unwrap_or_default();
        c.metrics_key = args
            .metrics_key
            .or(file.metrics_key)
            .filter(|k| !k.is_empty())
            .map(Secret);
        c.traces = crate::otel::TraceConfig::from_env(
            args.otlp_endpoint.or(file.otlp_endpoint).as_deref(),
            args.otel_capture_content
                .or(file.otel_capture_content)
                .unwrap_or(false),
            &env,
        );
        Ok(c)
    }
}
