//! The one integration-test binary: the relay end to end on loopback, against the project's own
//! fake upstream and MCP test servers.

mod approvals;
mod cli;
mod conversations;
mod core;
mod errors;
// The test servers, compiled once for every module that starts one (they are also binaries).
#[path = "../../src/bin/fake_upstream/server.rs"]
pub mod fake_upstream;
mod faults;
mod limits;
mod mcp_client;
mod mcp_loop;
#[path = "../../src/bin/mcp_test_server/server.rs"]
pub mod mcp_test_server;
mod observability;
mod process;
mod redis;
mod registered;
mod safety;
mod ssrf;
mod stored;
mod support;
mod surface;
mod tenants;
mod tool_search;
mod traces;
mod upstream_fixtures;
mod upstreams;
mod websocket;
