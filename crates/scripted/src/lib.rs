//! The relay's scripted peers, real servers on loopback that the `demo` command, the
//! `fake-upstream` and `mcp-test-server` binaries, the integration tests and the conformance
//! scripts talk to: [`fake_upstream`], an OpenAI-compatible model server whose answers the request
//! decides (a scripted model, recorded transcripts, injected faults), and [`mcp_test_server`], an
//! MCP server with known tools and switchable misbehaviour. Neither knows the relay: they use
//! external crates only.

pub mod fake_upstream;
pub mod mcp_test_server;
