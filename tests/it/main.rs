//! The one integration-test binary: the relay end to end on loopback, against the project's own
//! fake upstream and MCP test servers.

mod approvals;
mod cli;
mod core;
mod errors;
mod faults;
mod limits;
mod mcp_client;
mod mcp_loop;
mod process;
mod redis;
mod safety;
mod ssrf;
mod stored;
mod support;
mod tool_search;
mod upstream_fixtures;
