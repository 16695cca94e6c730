//! `fake-upstream`: runs the fake OpenAI-compatible model server (`relay_scripted::fake_upstream`,
//! which the `demo` command starts too) until SIGTERM or SIGINT. Prints `listening on
//! http://ADDR` once bound, for scripts to read the port.

use relay_scripted::fake_upstream as server;

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

/// A fake OpenAI-compatible model server (Chat Completions and Responses) for tests and benchmarks.
#[derive(Parser, Debug)]
#[command(name = "fake-upstream")]
struct Args {
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Directory holding the recorded transcripts that `replay:FILE` models stream.
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/upstream"))]
    fixtures: PathBuf,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let fake = match server::start_with(args.listen, args.fixtures, false).await {
        Ok(f) => f,
        Err(e) => {
            eprintln!("fake-upstream: cannot listen on {}: {e}", args.listen);
            return ExitCode::FAILURE;
        }
    };
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "listening on http://{}", fake.addr);
    let _ = out.flush();
    drop(out);
    shutdown_signal().await;
    fake.shutdown();
    ExitCode::SUCCESS
}

/// Resolves on SIGINT or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("signal handler");
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
