//! Test support, one module per kind of peer: the relay in-process or as a process, the fake
//! upstream, MCP servers, Redis, HTTP calls and event-stream reading. Tests `use
//! crate::support::*` and get all of it.

mod http;
mod mcp;
mod process;
mod redis;
mod relay;
mod sse;
mod upstream;

pub use http::*;
pub use mcp::*;
pub use process::*;
pub use redis::*;
pub use relay::*;
pub use sse::*;
pub use upstream::*;

/// Polls `f` until it is true, for at most ten seconds (a liveness bound, not a timing test).
pub async fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    for _ in 0..1000 {
        if f() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("never happened: {what}");
}
