//! How the relay treats `mcp` tools ([`McpConfig`]): the MCP flags, the operator's registered
//! servers (`[mcp_servers.LABEL]` of the TOML file), the `web_search` binding, and the SSRF
//! policy for request-declared servers.
//!
//! Invariants: a registered server is checked as a request's `mcp` tool is (a bad one exits 64
//! naming `mcp_servers.LABEL`); `web_search` names a registered server and one of its tools; only
//! registered servers' sessions reach their hosts whatever they resolve to
//! ([`McpConfig::registered_policy`]).

use std::time::Duration;

use serde::Deserialize;

use super::file::FileConfig;
use super::{ApprovalArg, ConfigError, DiscoveryFailure, ServeArgs, bad, from_env, seconds};

/// One `[mcp_servers.LABEL]` of the TOML file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileMcpServer {
    url: Option<String>,
    authorization: Option<String>,
    authorization_env: Option<String>,
    headers: Option<serde_json::Map<String, serde_json::Value>>,
    description: Option<String>,
    require_approval: Option<serde_json::Value>,
    allowed_tools: Option<serde_json::Value>,
    transport: Option<String>,
    /// Calls per minute each key may make to this server.
    calls_per_minute: Option<i64>,
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
    /// `calls_per_minute` of `[mcp_servers.LABEL]`: what each key may call each server.
    pub calls_per_minute: Vec<(String, u64)>,
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

/// The `[mcp_servers]` table, checked as a request's `mcp` tools are (a bad one exits 64 naming
/// `mcp_servers.LABEL`).
fn registered(
    table: std::collections::BTreeMap<String, FileMcpServer>,
    default_approval: crate::mcp::Approval,
) -> Result<(crate::mcp::Registered, Vec<(String, u64)>), ConfigError> {
    let mut out = std::collections::BTreeMap::new();
    let mut per_minute = Vec::new();
    for (label, s) in table {
        let at = format!("mcp_servers.{label}");
        if let Some(n) = super::keys::limit(&format!("{at}.calls_per_minute"), s.calls_per_minute)?
        {
            per_minute.push((label.clone(), n));
        }
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
    Ok((crate::mcp::Registered(out), per_minute))
}

impl McpConfig {
    /// The MCP flags with a value each: discovery failure, default approval, how many servers,
    /// the timeouts and how long tool lists are reused.
    pub(super) fn set_limits(
        &mut self,
        args: &ServeArgs,
        file: &FileConfig,
    ) -> Result<(), ConfigError> {
        let secs = seconds;
        if let Some(f) = args.mcp_discovery_failure.or(file.mcp_discovery_failure) {
            self.discovery_failure = f;
        }
        if let Some(a) = args
            .default_require_approval
            .or(file.default_require_approval)
        {
            self.default_approval = match a {
                ApprovalArg::Always => crate::mcp::Approval::Always,
                ApprovalArg::Never => crate::mcp::Approval::Never,
            };
        }
        if let Some(n) = args.max_mcp_servers.or(file.max_mcp_servers) {
            if n == 0 {
                return Err(bad("--max-mcp-servers", "'0': at least 1"));
            }
            self.max_servers = n;
        }
        self.discovery_timeout = secs(
            "--mcp-discovery-timeout",
            args.mcp_discovery_timeout.or(file.mcp_discovery_timeout),
            self.discovery_timeout,
        )?;
        self.call_timeout = secs(
            "--mcp-call-timeout",
            args.mcp_call_timeout.or(file.mcp_call_timeout),
            self.call_timeout,
        )?;
        self.tools_ttl = match args.mcp_tools_ttl.or(file.mcp_tools_ttl) {
            None => self.tools_ttl,
            Some(s) => Duration::try_from_secs_f64(s).map_err(|_| {
                bad(
                    "--mcp-tools-ttl",
                    format!("'{s}': expected 0 or a positive number of seconds"),
                )
            })?,
        };
        Ok(())
    }

    /// The registered servers (`[mcp_servers]`) and the `web_search` binding (`LABEL:TOOL`) to
    /// one of them. Needs `default_approval` set.
    pub(super) fn set_servers(
        &mut self,
        table: Option<std::collections::BTreeMap<String, FileMcpServer>>,
        web_search: Option<String>,
    ) -> Result<(), ConfigError> {
        (self.registered, self.calls_per_minute) =
            registered(table.unwrap_or_default(), self.default_approval)?;
        if let Some(binding) = web_search {
            let (label, tool) = binding.split_once(':').unwrap_or((binding.as_str(), ""));
            if tool.is_empty() || !self.registered.0.contains_key(label) {
                return Err(bad(
                    "hosted_tools.web_search",
                    format!(
                        "'{binding}': expected 'LABEL:TOOL' with LABEL a registered MCP server ([mcp_servers.LABEL])"
                    ),
                ));
            }
            self.web_search = Some((label.to_string(), tool.to_string()));
        }
        Ok(())
    }

    /// What request-declared servers may reach (`--mcp-allow-private-networks`,
    /// `--mcp-allow-host`), and the largest tool output sent to the model.
    pub(super) fn set_reach(
        &mut self,
        args: &mut ServeArgs,
        file: &mut FileConfig,
    ) -> Result<(), ConfigError> {
        let allow_private = args
            .mcp_allow_private_networks
            .or(file.mcp_allow_private_networks)
            .unwrap_or(false);
        let allow_hosts = if args.mcp_allow_hosts.is_empty() {
            file.mcp_allow_hosts.take().unwrap_or_default()
        } else {
            std::mem::take(&mut args.mcp_allow_hosts)
        };
        self.ssrf = crate::ssrf::Policy::from_flags(allow_private, &allow_hosts)
            .map_err(|e| bad("--mcp-allow-host", e))?;
        if let Some(n) = args.mcp_max_output_bytes.or(file.mcp_max_output_bytes) {
            if n < 64 {
                return Err(bad("--mcp-max-output-bytes", format!("'{n}': at least 64")));
            }
            self.max_output_bytes = n;
        }
        Ok(())
    }
}
