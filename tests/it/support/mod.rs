//! Test support, one module per kind of peer: the relay in-process or as a process, the fake
//! upstream, MCP servers, Redis, HTTP calls and event-stream reading. Tests `use
//! crate::support::*` and get all of it.

mod cluster;
mod http;
mod json;
mod mcp;
mod process;
mod redis;
mod relay;
mod sse;
mod upstream;

pub use cluster::*;
pub use http::*;
pub use json::*;
pub use mcp::*;
pub use process::*;
pub use redis::*;
pub use relay::*;
pub use sse::*;
pub use upstream::*;

/// Polls `f` until it is true, for at most ten seconds (a liveness bound, not a timing test).
pub async fn eventually(what: &str, f: impl FnMut() -> bool) {
    eventually_within(std::time::Duration::from_secs(10), what, f).await;
}

/// Polls `f` every 10 ms until it is true; fails the test if it is still false after `limit`.
pub async fn eventually_within(
    limit: std::time::Duration,
    what: &str,
    mut f: impl FnMut() -> bool,
) {
    let start = std::time::Instant::now();
    while !f() {
        assert!(start.elapsed() < limit, "never happened: {what}");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}
