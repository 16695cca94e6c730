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
/// store (`--store redis://:PASSWORD@HOST`, `redis+sentinel://:PASSWORD@H1:P1,H2:P2/name`).
/// Unlike [`mask_url`] it keeps the user name, the hosts, the path and the query. The user info
/// ends at the last `@` (a password may hold `/`, `@` or `:`); user info without a `:` is masked
/// whole. Text without `://` is shown as `<unparsable URL>`.
pub fn mask_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return "<unparsable URL>".into();
    };
    match rest.rfind('@') {
        Some(at) => match rest[..at].split_once(':') {
            Some((user, _)) => format!("{scheme}://{user}:***@{}", &rest[at + 1..]),
            None => format!("{scheme}://***@{}", &rest[at + 1..]),
        },
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::mask_password;

    #[test]
    fn a_store_urls_password_never_shows_whatever_it_holds() {
        for (url, shown) in [
            ("redis://:pw@h:6379/0", "redis://:***@h:6379/0"),
            ("redis://user:pw@h:6379/0", "redis://user:***@h:6379/0"),
            ("redis://:ab/cd@h:6379/0", "redis://:***@h:6379/0"),
            ("redis://:a@b:c@h/0", "redis://:***@h/0"),
            ("redis://s3cret@h/0", "redis://***@h/0"),
            (
                "redis+sentinel://:pw@h1:1,h2:2/m",
                "redis+sentinel://:***@h1:1,h2:2/m",
            ),
            (
                "rediss+sentinel://s3cret@h1:1/m",
                "rediss+sentinel://***@h1:1/m",
            ),
            ("redis://h:6379/0", "redis://h:6379/0"),
            ("not a url", "<unparsable URL>"),
        ] {
            assert_eq!(mask_password(url), shown, "{url}");
        }
    }
}
