//! Relay keys and tenants: `--api-key` (bare keys, each a tenant of its own) and `[[keys]]` of
//! the TOML file (keys of named tenants, with what they may use), kept as SHA-256 hashes.
//!
//! Invariants: no key is kept in the clear after start-up (only its SHA-256); a key belongs to
//! one tenant; a tenant name is 1 to 64 of `a-z A-Z 0-9 - _ .` (it becomes part of store keys);
//! a key's `mcp_servers` name registered servers only; every limit is a whole number of at
//! least 1 (left out: no limit).

use serde::Deserialize;

use super::{ConfigError, bad, from_env};
use crate::limits::Spec;

/// One `[[keys]]` entry of the TOML file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileKey {
    key: Option<String>,
    key_env: Option<String>,
    key_sha256: Option<String>,
    tenant: Option<String>,
    mcp_servers: Option<Vec<String>>,
    models: Option<Vec<String>>,
    limits: Option<FileLimits>,
    /// An operator's key: the run viewer lists any tenant's runs for it (`?tenant=`).
    operator: Option<bool>,
}

/// `limits = { ... }` of a `[[keys]]` entry or a `[tenants.NAME]` table.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileLimits {
    requests_per_minute: Option<i64>,
    tokens_per_minute: Option<i64>,
    tokens_per_day: Option<i64>,
    concurrent_runs: Option<i64>,
    mcp_calls_per_minute: Option<i64>,
}

/// One `[tenants.NAME]` table: what the tenant's keys share.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileTenant {
    limits: Option<FileLimits>,
}

/// One limit's value, named `at` in errors: a whole number of at least 1.
pub(super) fn limit(at: &str, v: Option<i64>) -> Result<Option<u64>, ConfigError> {
    match v {
        None => Ok(None),
        Some(n) if n >= 1 => Ok(Some(n as u64)),
        Some(n) => Err(bad(
            at,
            format!("'{n}': a limit is a whole number of at least 1 (leave it out for no limit)"),
        )),
    }
}

impl FileLimits {
    /// The limits, each checked (`at` names the table in errors).
    pub(super) fn checked(self, at: &str) -> Result<Spec, ConfigError> {
        let one = |name: &str, v| limit(&format!("{at}.{name}"), v);
        Ok(Spec {
            requests_per_minute: one("requests_per_minute", self.requests_per_minute)?,
            tokens_per_minute: one("tokens_per_minute", self.tokens_per_minute)?,
            tokens_per_day: one("tokens_per_day", self.tokens_per_day)?,
            concurrent_runs: one("concurrent_runs", self.concurrent_runs)?,
            mcp_calls_per_minute: one("mcp_calls_per_minute", self.mcp_calls_per_minute)?,
        })
    }
}

/// The `[tenants]` table: each tenant's limits (shared by all its keys).
pub(super) fn tenants(
    table: Option<std::collections::BTreeMap<String, FileTenant>>,
) -> Result<std::collections::BTreeMap<String, Spec>, ConfigError> {
    let mut out = std::collections::BTreeMap::new();
    for (name, t) in table.unwrap_or_default() {
        let at = format!("tenants.{name}");
        if !valid_tenant(&name) {
            return Err(bad(
                &at,
                format!("'{name}': a tenant is 1 to 64 of a-z, A-Z, 0-9, '-', '_', '.'"),
            ));
        }
        let spec = t
            .limits
            .unwrap_or_default()
            .checked(&format!("{at}.limits"))?;
        out.insert(name, spec);
    }
    Ok(out)
}

/// A relay key, as kept after start-up: its SHA-256 (never the key), the tenant whose data it
/// reaches, and what it may use (`None`: everything).
#[derive(Clone, PartialEq, Eq)]
pub struct KeyEntry {
    pub sha256: [u8; 32],
    pub tenant: String,
    pub mcp_servers: Option<Vec<String>>,
    pub models: Option<Vec<String>>,
    /// The key's own limits (its tenant's are [`super::Config::tenant_limits`]).
    pub limits: Spec,
    /// An operator's key: the run viewer lists any tenant's runs for it.
    pub operator: bool,
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
            limits: Spec::default(),
            operator: false,
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
        limits: k
            .limits
            .unwrap_or_default()
            .checked(&format!("{at}.limits"))?,
        operator: k.operator.unwrap_or(false),
    })
}

/// Whether `t` may name a tenant (it becomes part of store keys).
pub fn valid_tenant(t: &str) -> bool {
    !t.is_empty()
        && t.len() <= 64
        && t.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// The relay keys: the bare `--api-key`s (else the file's `api_keys`), each held to
/// `bare_limits`, then the `[[keys]]` entries; a key given twice must name one tenant.
pub(super) fn collect(
    flags: Vec<String>,
    file_bare: Option<Vec<String>>,
    file_keys: Option<Vec<FileKey>>,
    bare_limits: Spec,
) -> Result<Vec<KeyEntry>, ConfigError> {
    let bare = if flags.is_empty() {
        file_bare.unwrap_or_default()
    } else {
        flags
    };
    let mut keys: Vec<KeyEntry> = bare
        .iter()
        .filter(|k| !k.is_empty())
        .map(|k| KeyEntry {
            limits: bare_limits,
            ..KeyEntry::bare(k)
        })
        .collect();
    for (i, k) in file_keys.unwrap_or_default().into_iter().enumerate() {
        keys.push(file_key(i, k)?);
    }
    for (i, a) in keys.iter().enumerate() {
        if let Some(b) = keys[..i].iter().find(|b| b.sha256 == a.sha256)
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
    Ok(keys)
}

/// Every key's `mcp_servers` names a server of `registered`.
pub(super) fn check_servers(
    keys: &[KeyEntry],
    registered: &crate::mcp::Registered,
) -> Result<(), ConfigError> {
    for (i, k) in keys.iter().enumerate() {
        if let Some(unknown) = k
            .mcp_servers
            .iter()
            .flatten()
            .find(|n| !registered.0.contains_key(*n))
        {
            return Err(bad(
                &format!("keys[{i}].mcp_servers"),
                format!("'{unknown}' is not a registered MCP server ([mcp_servers.{unknown}])"),
            ));
        }
    }
    Ok(())
}
