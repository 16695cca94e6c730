//! Named model servers: `[[upstreams]]` of the TOML file and `--upstream NAME=URL`, checked.
//!
//! Invariant: names are unique, non-empty and hold no `/` (a model `NAME/REST` picks one by its
//! first segment); at most one is the default; every URL is http(s) with no credentials in it.

use std::time::Duration;

use serde::Deserialize;

use super::{ApiArg, ConfigError, bad};
use crate::upstream::{Timeouts, UpstreamApi};

/// One named upstream, validated.
#[derive(Debug, Clone)]
pub struct NamedUpstream {
    pub name: String,
    pub url: String,
    pub api: UpstreamApi,
    /// Sent upstream as the bearer; never printed.
    pub api_key: Option<super::Secret>,
    pub timeouts: Timeouts,
}

/// One `[[upstreams]]` entry of the TOML file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileUpstream {
    name: Option<String>,
    url: Option<String>,
    api: Option<ApiArg>,
    api_key: Option<String>,
    api_key_env: Option<String>,
    #[serde(default)]
    default: bool,
    connect_timeout: Option<f64>,
    first_byte_timeout: Option<f64>,
    idle_timeout: Option<f64>,
    retries: Option<u32>,
}

/// The named upstreams (file entries, then flags; a flag replaces a file entry of its name), and
/// which one is the default, if any.
pub(super) fn resolve(
    file: Vec<FileUpstream>,
    flags: &[String],
    timeouts: &Timeouts,
) -> Result<(Vec<NamedUpstream>, Option<String>), ConfigError> {
    let mut out: Vec<NamedUpstream> = Vec::new();
    let mut default = None;
    for (i, u) in file.into_iter().enumerate() {
        let at = format!("upstreams[{i}]");
        let name = checked_name(&format!("{at}.name"), u.name.unwrap_or_default())?;
        let url = u
            .url
            .ok_or_else(|| bad(&format!("{at}.url"), "missing: the base URL, ending in /v1"))?;
        let api_key = match (u.api_key, u.api_key_env) {
            (Some(_), Some(_)) => {
                return Err(bad(&at, "give 'api_key' or 'api_key_env', not both"));
            }
            (Some(k), None) => Some(super::Secret(k)).filter(|k| !k.0.is_empty()),
            (None, Some(var)) => Some(super::Secret(super::from_env(
                &format!("{at}.api_key_env"),
                &var,
            )?)),
            (None, None) => None,
        };
        let secs = |field: &str, v: Option<f64>, d: Duration| {
            super::seconds(&format!("{at}.{field}"), v, d)
        };
        let entry = NamedUpstream {
            url: check_url(&format!("{at}.url"), &url)?,
            api: api(u.api),
            api_key,
            timeouts: Timeouts {
                retries: u.retries.unwrap_or(timeouts.retries),
                connect: secs("connect_timeout", u.connect_timeout, timeouts.connect)?,
                first_byte: secs(
                    "first_byte_timeout",
                    u.first_byte_timeout,
                    timeouts.first_byte,
                )?,
                idle: secs("idle_timeout", u.idle_timeout, timeouts.idle)?,
            },
            name,
        };
        if out.iter().any(|o| o.name == entry.name) {
            return Err(bad(
                &format!("{at}.name"),
                format!("'{}' names two upstreams", entry.name),
            ));
        }
        if u.default {
            if let Some(first) = &default {
                return Err(bad(
                    &format!("{at}.default"),
                    format!("'{first}' is already the default upstream"),
                ));
            }
            default = Some(entry.name.clone());
        }
        out.push(entry);
    }
    for flag in flags {
        let (name, url) = flag
            .split_once('=')
            .ok_or_else(|| bad("--upstream", format!("'{flag}': expected NAME=URL")))?;
        let entry = NamedUpstream {
            name: checked_name("--upstream", name.to_string())?,
            url: check_url("--upstream", url)?,
            api: UpstreamApi::Chat,
            api_key: None,
            timeouts: timeouts.clone(),
        };
        match out.iter_mut().find(|o| o.name == entry.name) {
            Some(o) => *o = entry,
            None => out.push(entry),
        }
    }
    Ok((out, default))
}

pub(super) fn api(a: Option<ApiArg>) -> UpstreamApi {
    match a {
        Some(ApiArg::Responses) => UpstreamApi::Responses,
        Some(ApiArg::Anthropic) => UpstreamApi::Anthropic,
        Some(ApiArg::Gemini) => UpstreamApi::Gemini,
        Some(ApiArg::Chat) | None => UpstreamApi::Chat,
    }
}

fn checked_name(field: &str, name: String) -> Result<String, ConfigError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if ok {
        Ok(name)
    } else {
        Err(bad(
            field,
            format!(
                "'{name}': a name of 1 to 64 letters, digits, '-', '_' or '.' (a model 'NAME/REST' goes to upstream NAME)"
            ),
        ))
    }
}

/// An upstream base URL: http or https, no credentials in it; returned without a trailing `/`.
pub(super) fn check_url(field: &str, u: &str) -> Result<String, ConfigError> {
    let parsed = reqwest::Url::parse(u).map_err(|e| bad(field, format!("'{u}': {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(bad(
            field,
            format!("'{u}': the scheme must be http or https"),
        ));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(bad(
            field,
            "credentials in the URL are not allowed; give the key as the upstream's API key",
        ));
    }
    Ok(u.trim_end_matches('/').to_string())
}
