//! Ids for responses and items (`resp_`, `msg_`, `fc_`, ...), random in production and
//! sequential under test so golden event logs compare exactly.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Where a run's ids come from. Cheap to clone; one per relay.
#[derive(Clone, Debug)]
pub enum IdSource {
    Random,
    /// `prefix_` + a zero-padded counter shared by every id the relay mints.
    Sequential(Arc<AtomicU64>),
}

impl IdSource {
    pub fn sequential() -> Self {
        IdSource::Sequential(Arc::new(AtomicU64::new(1)))
    }

    /// A fresh id with the given prefix (`resp`, `msg`, `fc`, `call`, `rs`, `mcp`, `mcpl`, `mcpr`).
    pub fn mint(&self, prefix: &str) -> String {
        match self {
            IdSource::Random => {
                let bytes: [u8; 24] = rand::random();
                let mut s = String::with_capacity(prefix.len() + 1 + 48);
                s.push_str(prefix);
                s.push('_');
                for b in bytes {
                    use std::fmt::Write;
                    let _ = write!(s, "{b:02x}");
                }
                s
            }
            IdSource::Sequential(n) => format!("{prefix}_{:04}", n.fetch_add(1, Ordering::Relaxed)),
        }
    }
}
