//! What may be shown of secrets: echoed `mcp` tools carry no `authorization` or `headers`, a
//! `server_url`'s userinfo, query string and fragment become `***` ([`mask_url`], also for log
//! lines), and a store URL's password becomes `***` ([`mask_password`]).

use serde_json::{Value, json};

use crate::api::request::McpToolParam;

/// `server_url` with its query string (and any userinfo) masked.
pub fn mask_url(url: &str) -> String {
    let (base, fragment) = match url.split_once('#') {
        Some((b, _)) => (b, "#***"),
        None => (url, ""),
    };
    let base = match base.split_once('?') {
        Some((b, _)) => format!("{b}?***"),
        None => base.to_string(),
    };
    // Userinfo (`https://user:pass@host`) is a secret too.
    let masked = match base.split_once("://") {
        Some((scheme, rest)) => {
            let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
            match rest[..authority_end].rfind('@') {
                Some(at) => format!("{scheme}://***@{}", &rest[at + 1..]),
                None => base,
            }
        }
        None => base,
    };
    format!("{masked}{fragment}")
}

/// The `mcp` tool as echoed in every Response; without `require_approval`, it shows
/// `default_approval`, the relay's default (`--default-require-approval`: `always` or `never`),
/// which is what the run applies.
pub fn mcp_tool_echo(m: &McpToolParam, default_approval: &str) -> Value {
    json!({
        "type": "mcp",
        "server_label": m.server_label,
        "server_url": m.server_url.as_deref().map(mask_url),
        "allowed_tools": m.allowed_tools,
        "authorization": null,
        "headers": null,
        "require_approval": m.require_approval.clone().unwrap_or_else(|| json!(default_approval)),
        "server_description": m.server_description,
        "defer_loading": m.defer_loading.unwrap_or(false),
    })
}

/// A URL with its password (if any) replaced by `***`, for logs and error messages about the
/// store (`--store redis://:PASSWORD@HOST`). Unlike [`mask_url`] it keeps the user name, the
/// query and the fragment, and shows the URL as parsed (normalised); one that does not parse is
/// shown as `<unparsable URL>`.
pub fn mask_password(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut u) if u.password().is_some() => {
            let _ = u.set_password(Some("***"));
            u.to_string()
        }
        Ok(u) => u.to_string(),
        // Several hosts (`redis+sentinel://:PW@h1:1,h2:2/name`) are no URL to the parser: the
        // userinfo is masked by hand.
        Err(_) => match url.split_once("://") {
            Some((scheme, rest)) => {
                let authority = rest.split('/').next().unwrap_or_default();
                match authority.rsplit_once('@') {
                    Some((userinfo, _)) if userinfo.contains(':') => {
                        let user = userinfo.split(':').next().unwrap_or_default();
                        format!("{scheme}://{user}:***@{}", &rest[userinfo.len() + 1..])
                    }
                    _ => url.to_string(),
                }
            }
            None => "<unparsable URL>".into(),
        },
    }
}
