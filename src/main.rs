//! The `responses-relay` binary: parses the command line, then serves.

use std::process::ExitCode;

use clap::Parser;
use responses_relay::config::{Cli, Command, Config};
use responses_relay::{App, server};

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { 64 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("RELAY_LOG").unwrap_or_else(|_| "info,rmcp=warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    responses_relay::install_tls();
    match cli.command {
        Command::Serve(args) => {
            let config = match Config::from_args(args, |k| std::env::var(k).ok()) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(64);
                }
            };
            let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
            rt.block_on(async move {
                let listener = match tokio::net::TcpListener::bind(config.listen).await {
                    Ok(l) => l,
                    Err(e) => {
                        eprintln!("error: invalid value for '--listen': cannot bind {}: {e}", config.listen);
                        return ExitCode::from(64);
                    }
                };
                let addr = listener.local_addr().expect("bound address");
                let signal = server::shutdown_signal();
                println!("listening on http://{addr}");
                tracing::info!(%addr, upstream = %config.upstream_url, "relay ready");
                let app = match App::open(config) {
                    Ok(app) => app,
                    Err(e) => {
                        eprintln!("error: invalid value for '--store': {e}");
                        return ExitCode::from(64);
                    }
                };
                server::serve_on(listener, app, signal).await;
                ExitCode::SUCCESS
            })
        }
    }
}
