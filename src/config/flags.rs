//! The command line: the clap [`Cli`] with its subcommands, every `serve` flag with its `RELAY_*`
//! environment variable ([`ServeArgs`]), and the value types the flags take.
//!
//! Invariant: every `serve` flag is an `Option` (or an empty `Vec`) when not given, so the TOML
//! file and the defaults can fill it in ([`super::Config::from_args`]); on/off flags take
//! `--flag=false` so the command line can turn off what the file turns on.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use serde::Deserialize;

use crate::store::usage::Since;

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
    /// Print tokens, runs and MCP calls per tenant, UTC day and model, read from a relay's store
    /// (an operator's report; the relay may be running or stopped).
    Usage(UsageArgs),
    /// Look after a relay's store: `store migrate --store URL`.
    #[command(subcommand)]
    Store(StoreCommand),
}

#[derive(Debug, Subcommand)]
pub enum StoreCommand {
    /// Move a Redis store's data kept in the key layout from before Redis Cluster support to
    /// today's (once, with every relay on it stopped; run again, it moves nothing).
    Migrate {
        /// The Redis: `redis://[:PASSWORD@]HOST:PORT/DB` (`rediss://` for TLS) or
        /// `redis+sentinel://HOST:PORT[,HOST:PORT...]/MASTER_NAME[/DB]`.
        #[arg(long, value_name = "URL", env = "RELAY_STORE")]
        store: String,
    },
}

#[derive(Debug, Args)]
pub struct UsageArgs {
    /// The relay's store: `sqlite:PATH` or `redis://[:PASSWORD@]HOST:PORT/DB` (`rediss://` for
    /// TLS).
    #[arg(long, value_name = "URL", value_parser = parse_report_store)]
    pub store: crate::store::StoreKind,
    /// Only this tenant's usage (every tenant's without it).
    #[arg(long, value_parser = parse_tenant)]
    pub tenant: Option<String>,
    /// From when: `7d` (days ago), `24h` (hours ago: from the UTC day that instant is in), or a
    /// UTC day `YYYY-MM-DD`.
    #[arg(long, default_value = "7d", value_parser = Since::parse)]
    pub since: Since,
    /// `text`: an aligned table with a total line; `json`: one JSON array of rows.
    #[arg(long, value_enum, default_value_t = ReportFormat::Text)]
    pub format: ReportFormat,
}

impl UsageArgs {
    /// Whether the report is written as JSON.
    pub fn json(&self) -> bool {
        self.format == ReportFormat::Json
    }
}

/// How `usage` writes its report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ReportFormat {
    Text,
    Json,
}

/// A store `usage` can read: one a relay keeps (a memory store is gone with its relay).
fn parse_report_store(s: &str) -> Result<crate::store::StoreKind, String> {
    match crate::store::StoreKind::parse(s)? {
        crate::store::StoreKind::Memory => Err(format!(
            "'{s}': a memory store lives and dies with its relay, there is nothing to read: give the relay's 'sqlite:PATH' or 'redis://' store"
        )),
        kind => Ok(kind),
    }
}

fn parse_tenant(s: &str) -> Result<String, String> {
    if super::keys::valid_tenant(s) {
        Ok(s.to_string())
    } else {
        Err(format!(
            "'{s}': a tenant is 1 to 64 of a-z, A-Z, 0-9, '-', '_', '.'"
        ))
    }
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
    /// Anthropic's Messages API (`POST /messages`).
    Anthropic,
    /// Google's Gemini API (`POST /models/{model}:streamGenerateContent`).
    Gemini,
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
    /// Serving lanes: single-threaded runtimes connections are shared among [default: one per core].
    #[arg(long, env = "RELAY_LANES", value_name = "N")]
    pub lanes: Option<usize>,
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
    /// Requests per minute each bare `--api-key` may use (without keys: the relay's one caller).
    #[arg(long, env = "RELAY_KEY_REQUESTS_PER_MINUTE", value_name = "N")]
    pub key_requests_per_minute: Option<i64>,
    /// Tokens (input + output) per minute each bare `--api-key` may use (without keys: the relay's one caller).
    #[arg(long, env = "RELAY_KEY_TOKENS_PER_MINUTE", value_name = "N")]
    pub key_tokens_per_minute: Option<i64>,
    /// Tokens (input + output) per UTC day each bare `--api-key` may use (without keys: the relay's one caller).
    #[arg(long, env = "RELAY_KEY_TOKENS_PER_DAY", value_name = "N")]
    pub key_tokens_per_day: Option<i64>,
    /// Runs going at once each bare `--api-key` may use (without keys: the relay's one caller).
    #[arg(long, env = "RELAY_KEY_CONCURRENT_RUNS", value_name = "N")]
    pub key_concurrent_runs: Option<i64>,
    /// MCP tool calls per minute each bare `--api-key` may use (without keys: the relay's one caller).
    #[arg(long, env = "RELAY_KEY_MCP_CALLS_PER_MINUTE", value_name = "N")]
    pub key_mcp_calls_per_minute: Option<i64>,
    /// Refuse requests (503) when the limits' shared counters (the Redis store) cannot be
    /// reached, instead of letting them through unlimited.
    #[arg(long, env = "RELAY_LIMITS_FAIL_CLOSED", num_args = 0..=1, require_equals = true, default_missing_value = "true", value_parser = switch())]
    pub limits_fail_closed: Option<bool>,
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
