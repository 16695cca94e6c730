//! `mcp-test-server`: the test MCP server as a process, for manual runs and out-of-process tests.
//!
//! `mcp-test-server --listen 127.0.0.1:0 [--require-bearer TOKEN] [--catalog N] [--fail-http STATUS] [--bad-json]
//! [--handshake-only|--modern-only]`
//! prints `listening on http://ADDR/mcp` and serves until interrupted.

// The server is `relay_scripted::mcp_test_server`, which the `demo` command starts too.
use relay_scripted::mcp_test_server as server;

use std::net::SocketAddr;

use clap::Parser;

#[derive(Parser, Debug)]
#[command(
    name = "mcp-test-server",
    about = "An MCP test server (Streamable HTTP) with known tools."
)]
struct Args {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Require `Authorization: Bearer TOKEN` on every request.
    #[arg(long)]
    require_bearer: Option<String>,
    /// Extra catalog tools tool_000..tool_{N-1}, listed in pages of 10.
    #[arg(long, default_value_t = 0)]
    catalog: usize,
    /// Answer every POST with this HTTP status.
    #[arg(long)]
    fail_http: Option<u16>,
    /// Answer every POST with `200 application/json` and an invalid JSON body.
    #[arg(long)]
    bad_json: bool,
    /// Speak only the `initialize` handshake (refuse `server/discover`).
    #[arg(long, conflicts_with = "modern_only")]
    handshake_only: bool,
    /// Speak only the `2026-07-28` lifecycle (refuse `initialize`).
    #[arg(long)]
    modern_only: bool,
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let args = Args::parse();
    let options = server::Options {
        require_bearer: args.require_bearer,
        catalog: args.catalog,
        fail_http: args.fail_http,
        catalog_seed: 0,
        bad_json: args.bad_json,
        repeat_cursor: false,
        handshake_only: args.handshake_only,
        modern_only: args.modern_only,
        long_tools: false,
        oldest: false,
    };
    let server = server::start(args.listen, options).await?;
    println!("listening on {}", server.url());
    let _ = tokio::signal::ctrl_c().await;
    server.shutdown().await;
    Ok(())
}
