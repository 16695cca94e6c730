//! The Redis key layout: the keys of a run, and of a conversation, carry a hash tag (`{...}`) so
//! they share one slot on a cluster. Data kept in the layout from before the tags
//! (`relay:resp:ID`, `relay:conv:TENANT:ID`, ...) is moved once by `responses-relay store
//! migrate`; a store that finds such data refuses to start until it is (none of it would read).
//!
//! Invariant: `relay:layout` holds the layout's version once this Redis was checked or
//! migrated, so a relay scans for old keys only on a Redis never checked before.

use super::StoreError;
use super::target::Target;

/// The key holding the layout's version, and the version these relays write.
const LAYOUT: &str = "relay:layout";
const VERSION: &str = "2";

/// Keys of the old layout: their prefix, and (for those moved) the new key of the rest.
const OLD: [(&str, Option<&str>); 6] = [
    ("relay:resp:", Some("relay:resp:")),
    ("relay:log:", Some("relay:log:")),
    ("relay:conv:", Some("relay:conv:")),
    ("relay:conv-items:", Some("relay:conv-items:")),
    ("relay:conv-lock:", Some("relay:conv-lock:")),
    // A live tail's mark lapses in seconds: dropped, not moved.
    ("relay:tail:", None),
];

/// What a migration moved.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Migrated {
    pub moved: usize,
    pub dropped: usize,
}

/// At a store's start: fine on a cluster (it never held the old layout) and on a Redis marked
/// with this layout; otherwise scans for keys of the old layout (an error naming the command
/// that moves them) and, finding none, marks the Redis.
pub(super) fn check_layout(target: &Target) -> Result<(), String> {
    if target.nodes().is_some() {
        return Ok(());
    }
    let mut c = target.connection().map_err(|e| e.to_string())?;
    let version: Option<String> = ::redis::cmd("GET")
        .arg(LAYOUT)
        .query(&mut c)
        .map_err(|e| e.to_string())?;
    if version.as_deref() == Some(VERSION) {
        return Ok(());
    }
    if let Some(key) = old_keys(&mut c).map_err(|e| e.to_string())?.first() {
        return Err(format!(
            "it holds data in the key layout from before Redis Cluster support (e.g. '{key}'); \
             stop every relay on it and run `responses-relay store migrate --store URL` once"
        ));
    }
    ::redis::cmd("SET")
        .arg(LAYOUT)
        .arg(VERSION)
        .query::<()>(&mut c)
        .map_err(|e| e.to_string())
}

/// Every key of the old layout (a full `SCAN`).
fn old_keys(c: &mut ::redis::Connection) -> ::redis::RedisResult<Vec<String>> {
    let mut found = Vec::new();
    for (prefix, _) in OLD {
        // Keys of the prefix whose rest does not start with the hash tag's brace.
        let pattern = format!("{prefix}[^{{]*");
        let keys: ::redis::Iter<'_, String> = ::redis::cmd("SCAN")
            .cursor_arg(0)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(1000)
            .clone()
            .iter(c)?;
        // `relay:conv:` also matches `relay:conv-items:...`'s old keys; each is taken once,
        // under its own prefix.
        found.extend(keys.filter_map(Result::ok).filter(|k| owner(k) == prefix));
    }
    Ok(found)
}

/// The prefix of [`OLD`] a key is of (the longest that matches).
fn owner(key: &str) -> &'static str {
    OLD.iter()
        .map(|(p, _)| *p)
        .filter(|p| key.starts_with(p))
        .max_by_key(|p| p.len())
        .unwrap_or("")
}

/// The key `key` of the old layout moves to (`None`: dropped).
fn new_key(key: &str) -> Option<String> {
    let prefix = owner(key);
    let (_, to) = OLD.iter().find(|(p, _)| *p == prefix)?;
    to.map(|to| format!("{to}{{{}}}", &key[prefix.len()..]))
}

/// `responses-relay store migrate`: moves the Redis at `url` (one server, or behind Sentinel) to
/// this layout, in place (`RENAME`: values and expiries kept), and marks it. Run it with every
/// relay on that Redis stopped; run again, it moves nothing.
pub fn migrate(url: &str) -> Result<Migrated, StoreError> {
    crate::install_tls();
    let shown = crate::redact::mask_password(url);
    let target = Target::open(url).map_err(|e| StoreError::Redis(format!("{shown}: {e}")))?;
    if target.nodes().is_some() {
        return Err(StoreError::Redis(format!(
            "{shown}: a cluster never held the old layout; migrate the Redis the data is on"
        )));
    }
    let failed = |e: ::redis::RedisError| StoreError::Redis(format!("Redis at {shown}: {e}"));
    let mut c = target.connection().map_err(failed)?;
    let mut done = Migrated::default();
    for key in old_keys(&mut c).map_err(failed)? {
        match new_key(&key) {
            Some(to) => {
                // Not over a key of the new layout (a relay of this version wrote it).
                let moved: i64 = ::redis::cmd("RENAMENX")
                    .arg(&key)
                    .arg(&to)
                    .query(&mut c)
                    .map_err(failed)?;
                if moved == 1 {
                    done.moved += 1;
                } else {
                    tracing::warn!(key = %key, "left in place: its key in the new layout exists");
                }
            }
            None => {
                ::redis::cmd("DEL")
                    .arg(&key)
                    .query::<i64>(&mut c)
                    .map_err(failed)?;
                done.dropped += 1;
            }
        }
    }
    ::redis::cmd("SET")
        .arg(LAYOUT)
        .arg(VERSION)
        .query::<()>(&mut c)
        .map_err(failed)?;
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_old_key_moves_under_its_hash_tag_and_a_tail_mark_is_dropped() {
        assert_eq!(
            new_key("relay:resp:resp_1").as_deref(),
            Some("relay:resp:{resp_1}")
        );
        assert_eq!(
            new_key("relay:log:resp_1").as_deref(),
            Some("relay:log:{resp_1}")
        );
        assert_eq!(
            new_key("relay:conv:acme:conv_9").as_deref(),
            Some("relay:conv:{acme:conv_9}")
        );
        assert_eq!(
            new_key("relay:conv-items:default:conv_9").as_deref(),
            Some("relay:conv-items:{default:conv_9}")
        );
        assert_eq!(new_key("relay:tail:resp_1"), None);
    }
}
