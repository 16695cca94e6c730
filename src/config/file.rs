//! The TOML file (`--config FILE`): its schema, with the same keys as the flags (snake_case), and
//! its reading.
//!
//! Invariant: unknown keys are refused (`deny_unknown_fields`), so a misspelt key fails start-up
//! naming `--config` instead of being ignored. Tables with rules of their own are described
//! beside the code that checks them: `[[keys]]` in [`super::keys`], `[mcp_servers.LABEL]` in
//! [`super::mcp`], `[[upstreams]]` in [`super::upstreams`].

use std::path::Path;

use serde::Deserialize;

use super::keys::{FileKey, FileTenant};
use super::mcp::FileMcpServer;
use super::upstreams;
use super::{ApiArg, ApprovalArg, ConfigError, DiscoveryFailure, HostedTools, LogFormat, bad};

/// `hosted_tools` of the TOML file: the policy alone, or a table of bindings.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum FileHostedTools {
    Policy(HostedTools),
    Table(FileHostedTable),
}

/// `[hosted_tools]`: `web_search = "LABEL:TOOL"` runs OpenAI's `web_search` through a registered
/// MCP server's tool; `policy` is `--hosted-tools`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileHostedTable {
    pub(super) web_search: Option<String>,
    pub(super) policy: Option<HostedTools>,
}

/// The TOML file: the same keys as the flags.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileConfig {
    /// `[[keys]]`: relay keys with their tenants.
    pub(super) keys: Option<Vec<FileKey>>,
    /// `[tenants.NAME]`: what each tenant's keys share (`limits`).
    pub(super) tenants: Option<std::collections::BTreeMap<String, FileTenant>>,
    pub(super) key_requests_per_minute: Option<i64>,
    pub(super) key_tokens_per_minute: Option<i64>,
    pub(super) key_tokens_per_day: Option<i64>,
    pub(super) key_concurrent_runs: Option<i64>,
    pub(super) key_mcp_calls_per_minute: Option<i64>,
    pub(super) limits_fail_closed: Option<bool>,
    /// `[mcp_servers.LABEL]`: MCP servers the operator registered.
    pub(super) mcp_servers: Option<std::collections::BTreeMap<String, FileMcpServer>>,
    /// `[[upstreams]]`: named model servers.
    pub(super) upstreams: Option<Vec<upstreams::FileUpstream>>,
    pub(super) log_format: Option<LogFormat>,
    pub(super) metrics_key: Option<String>,
    pub(super) otlp_endpoint: Option<String>,
    pub(super) otel_capture_content: Option<bool>,
    pub(super) listen: Option<String>,
    pub(super) lanes: Option<usize>,
    pub(super) upstream_url: Option<String>,
    pub(super) upstream_api_key: Option<String>,
    pub(super) secret_key: Option<String>,
    pub(super) upstream_api: Option<ApiArg>,
    pub(super) store: Option<String>,
    pub(super) store_ttl: Option<f64>,
    pub(super) api_keys: Option<Vec<String>>,
    pub(super) upstream_connect_timeout: Option<f64>,
    pub(super) upstream_first_byte_timeout: Option<f64>,
    pub(super) upstream_idle_timeout: Option<f64>,
    pub(super) upstream_retries: Option<u32>,
    pub(super) max_concurrent_runs: Option<usize>,
    pub(super) max_run_seconds: Option<f64>,
    pub(super) max_input_items: Option<usize>,
    pub(super) max_tools: Option<usize>,
    pub(super) client_stall_timeout: Option<f64>,
    pub(super) max_steps: Option<u64>,
    pub(super) upstream_vision: Option<bool>,
    pub(super) max_body_bytes: Option<usize>,
    pub(super) mcp_discovery_failure: Option<DiscoveryFailure>,
    /// `hosted_tools = "ignore"|"reject"`, or a `[hosted_tools]` table (`web_search`, `policy`).
    pub(super) hosted_tools: Option<FileHostedTools>,
    pub(super) default_require_approval: Option<ApprovalArg>,
    pub(super) max_mcp_servers: Option<usize>,
    pub(super) mcp_discovery_timeout: Option<f64>,
    pub(super) mcp_call_timeout: Option<f64>,
    pub(super) mcp_tools_ttl: Option<f64>,
    pub(super) mcp_max_output_bytes: Option<usize>,
    pub(super) mcp_allow_private_networks: Option<bool>,
    pub(super) mcp_allow_hosts: Option<Vec<String>>,
}

/// The file `--config` names, read and parsed; without one, every key is absent.
pub(super) fn read(path: Option<&Path>) -> Result<FileConfig, ConfigError> {
    let Some(path) = path else {
        return Ok(FileConfig::default());
    };
    let text = std::fs::read_to_string(path)
        .map_err(|e| bad("--config", format!("{}: {e}", path.display())))?;
    toml::from_str::<FileConfig>(&text)
        .map_err(|e| bad("--config", format!("{}: {e}", path.display())))
}

/// The file's `hosted_tools`, split: the policy (`--hosted-tools`), and the `web_search` binding.
pub(super) fn hosted_tools(h: Option<FileHostedTools>) -> (Option<HostedTools>, Option<String>) {
    match h {
        None => (None, None),
        Some(FileHostedTools::Policy(p)) => (Some(p), None),
        Some(FileHostedTools::Table(t)) => (t.policy, t.web_search),
    }
}
