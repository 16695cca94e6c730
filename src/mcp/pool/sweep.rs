//! The idle sweeper: sessions unused for `idle_ttl` are closed, by a background task while the
//! pool lives and on every slot lookup.
//!
//! Invariants: the sweeper holds the pool only weakly (it ends when the last clone of the pool is
//! dropped); sessions are closed outside the slots' lock.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use super::{Inner, Key, Slot};

/// Starts the sweeper, when there is a runtime to run it on: every half `idle_ttl`, between 1 and
/// 60 seconds.
pub(super) fn start(inner: &Arc<Inner>) {
    if let Ok(rt) = tokio::runtime::Handle::try_current() {
        let weak = Arc::downgrade(inner);
        let every =
            (inner.config.idle_ttl / 2).clamp(Duration::from_secs(1), Duration::from_secs(60));
        rt.spawn(sweeper(weak, every));
    }
}

pub(super) fn evict_idle(
    slots: &mut HashMap<Key, Arc<Slot>>,
    now: u64,
    ttl: Duration,
    evicted: &mut Vec<Arc<Slot>>,
) {
    let ttl = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
    let idle: Vec<Key> = slots
        .iter()
        .filter(|(_, s)| now.saturating_sub(s.last_used.load(Ordering::SeqCst)) >= ttl)
        .map(|(k, _)| k.clone())
        .collect();
    for k in idle {
        if let Some(s) = slots.remove(&k) {
            evicted.push(s);
        }
    }
}

async fn sweeper(inner: Weak<Inner>, every: Duration) {
    loop {
        tokio::time::sleep(every).await;
        let Some(inner) = inner.upgrade() else { return };
        let now = u64::try_from(inner.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        let mut evicted = Vec::new();
        evict_idle(
            &mut inner.slots.lock().unwrap_or_else(|e| e.into_inner()),
            now,
            inner.config.idle_ttl,
            &mut evicted,
        );
        drop(evicted);
    }
}
