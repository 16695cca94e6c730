//! Which backend the store keeps runs in ([`StoreKind`]), and how `--store` names one.
//!
//! Invariant: a Redis URL (it may carry a password) is shown only masked
//! ([`mask_password`]): in `Debug`, in errors, in logs.

use std::path::PathBuf;

use crate::redact::mask_password;

#[derive(Clone, PartialEq, Eq)]
pub enum StoreKind {
    Memory,
    Sqlite(PathBuf),
    /// `redis://` or `rediss://` URL, `redis+sentinel://` / `rediss+sentinel://`, or
    /// `redis+cluster://` / `rediss+cluster://` (it may carry
    /// a password: show it only through [`mask_password`]; `Debug` masks it).
    Redis(String),
}

impl std::fmt::Debug for StoreKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreKind::Memory => f.write_str("Memory"),
            StoreKind::Sqlite(p) => f.debug_tuple("Sqlite").field(p).finish(),
            StoreKind::Redis(u) => f.debug_tuple("Redis").field(&mask_password(u)).finish(),
        }
    }
}

impl StoreKind {
    /// The backend `--store` names: `memory`, `sqlite:PATH`, or a `redis://` / `rediss://` URL
    /// (checked, not connected to). The error says why, the URL masked.
    pub fn parse(store: &str) -> Result<Self, String> {
        Ok(match store {
            "memory" => StoreKind::Memory,
            s if s.starts_with("sqlite:") && s.len() > "sqlite:".len() => {
                StoreKind::Sqlite(PathBuf::from(&s["sqlite:".len()..]))
            }
            s if [
                "redis://",
                "rediss://",
                "redis+sentinel://",
                "rediss+sentinel://",
                "redis+cluster://",
                "rediss+cluster://",
            ]
            .iter()
            .any(|p| s.starts_with(p)) =>
            {
                if let Err(e) = super::redis::check_url(s) {
                    return Err(format!("'{}': {e}", mask_password(s)));
                }
                StoreKind::Redis(s.to_string())
            }
            other => {
                let shown = if other.contains("://") {
                    mask_password(other)
                } else {
                    other.to_string()
                };
                return Err(format!(
                    "'{shown}': expected 'sqlite:PATH', 'memory', 'redis://[:PASSWORD@]HOST:PORT/DB' (rediss:// for TLS), 'redis+sentinel://HOST:PORT[,HOST:PORT...]/MASTER_NAME[/DB]' or 'redis+cluster://HOST:PORT[,HOST:PORT...]'"
                ));
            }
        })
    }
}
