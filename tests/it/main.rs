//! The one integration-test binary: the relay end to end on loopback, against the project's own
//! fake upstream and MCP test servers.

mod anthropic;
mod approvals;
mod cli;
mod cluster;
mod conversations;
mod core;
mod errors;
mod faults;
mod gemini;
mod limits;
mod mcp_client;
mod mcp_loop;
mod observability;
mod process;
mod quotas;
mod quotas_redis;
mod redis;
mod redis_faults;
mod registered;
mod safety;
mod sentinel;
mod ssrf;
mod steering;
mod stored;
mod support;
mod surface;
mod tenants;
mod tool_search;
mod traces;
mod ui;
mod upstream_fixtures;
mod upstreams;
mod usage;
mod websocket;

// The test servers, from the workspace crate `relay-scripted` (they are also binaries).
pub use relay_scripted::{fake_upstream, mcp_test_server};
