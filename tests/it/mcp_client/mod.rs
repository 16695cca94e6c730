//! The MCP client layer (`responses_relay::mcp`) against real MCP servers on 127.0.0.1, one
//! module per concern: the request's MCP tools (validation, names), listing and calls with their
//! error shapes, session pooling and result text, and interop with other servers (the official
//! Python SDK's, the "everything" server, legacy SSE).

mod interop;
mod requests;
mod sessions;

pub(crate) use interop::python_server;

use crate::mcp_test_server;
use crate::support::{eventually_within, mcp_server};

use std::net::SocketAddr;
use std::time::Duration;

use responses_relay::api::request::{McpToolParam, ToolParam};
use responses_relay::mcp::{
    ApprovalPolicy, Pool, PoolConfig, ServerSpec, ToolFilter, ToolResult, result_text,
};
use serde_json::Value;

pub(crate) const T: Duration = Duration::from_secs(10);

pub(crate) fn spec(url: &str) -> ServerSpec {
    ServerSpec {
        label: "test".into(),
        url: url.into(),
        authorization: None,
        headers: vec![],
        allowed: ToolFilter::default(),
        approval: ApprovalPolicy::Never,
        description: None,
        defer_loading: false,
        registered: false,
        transport: Default::default(),
    }
}

/// A pool with `config`: the one place these tests build a pool.
pub(crate) fn pool_with(config: PoolConfig) -> Pool {
    Pool::new(
        config,
        responses_relay::ssrf::Policy::allow_private_networks(),
    )
}

pub(crate) fn pool() -> Pool {
    pool_with(PoolConfig::default())
}

pub(crate) fn mcp(v: Value) -> ToolParam {
    ToolParam::Mcp(serde_json::from_value::<McpToolParam>(v).expect("McpToolParam"))
}

pub(crate) fn text_of(r: &ToolResult) -> String {
    result_text(r, 100_000)
}

/// A port nothing listens on.
pub(crate) async fn dead_port() -> SocketAddr {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    l.local_addr().unwrap()
}

/// Calls `tool` with `args` (JSON text) through `pool`, which must succeed.
pub(crate) async fn call_ok(pool: &Pool, s: &ServerSpec, tool: &str, args: &str) -> ToolResult {
    pool.call_tool(s, tool, args, T).await.unwrap()
}
