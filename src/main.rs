//! The `responses-relay` binary: parses the command line, then runs the subcommand (`serve`,
//! `logs`, `replay`, `demo`, `usage`, `store`); a bad flag value exits 64 naming the flag.

use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;

use clap::Parser;
use responses_relay::config::{Cli, Command, Config, DemoArgs, LogsCommand, ReplayArgs, ServeArgs};
use responses_relay::logs::Recording;
use responses_relay::{App, server};

/// mimalloc instead of the system allocator: the relay allocates small, short-lived buffers on
/// every event from several threads, where glibc's malloc spent about a quarter of the relay's CPU
/// in the benchmark (`scripts/bench.sh`; the numbers are in docs/decisions.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // No transparent huge pages for the relay: mimalloc asks for them on its arenas, which cost
    // about 13 KiB of RSS per idle stream with thousands of streams open (measured with
    // `bench --scenario idle`: 66 KiB per stream with them, 53 KiB without).
    // SAFETY: prctl with PR_SET_THP_DISABLE takes integer arguments and touches no memory of ours.
    unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { 64 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    if !matches!(cli.command, Command::Serve(_)) {
        responses_relay::telemetry::init(Default::default());
    }
    responses_relay::install_tls();
    match cli.command {
        Command::Logs(cmd) => logs(cmd),
        Command::Replay(args) => replay(args),
        Command::Demo(args) => demo(args),
        Command::Serve(args) => serve(args),
        Command::Usage(args) => usage(
            &args.store,
            args.tenant.as_deref(),
            &args.since,
            args.json(),
        ),
        Command::Store(responses_relay::config::StoreCommand::Migrate { store }) => migrate(&store),
    }
}

/// `store migrate`: moves a Redis store to today's key layout, and says what it moved.
fn migrate(url: &str) -> ExitCode {
    use responses_relay::store::StoreError;
    match responses_relay::store::redis::migrate(url) {
        Ok(m) => {
            println!(
                "moved {} keys to the current layout; dropped {} live-tail marks",
                m.moved, m.dropped
            );
            ExitCode::SUCCESS
        }
        Err(e @ StoreError::Redis(_)) => {
            eprintln!("error: invalid value for '--store': {e}");
            ExitCode::from(64)
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

/// The multi-threaded runtime each serving subcommand runs on.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// A listener on `addr`, or the exit code (64, naming `--listen`) when it cannot be bound.
async fn bind(addr: SocketAddr) -> Result<tokio::net::TcpListener, ExitCode> {
    tokio::net::TcpListener::bind(addr).await.map_err(|e| {
        eprintln!("error: invalid value for '--listen': cannot bind {addr}: {e}");
        ExitCode::from(64)
    })
}

/// `replay FILE`: serves a recorded run to any `POST /v1/responses`.
fn replay(args: ReplayArgs) -> ExitCode {
    let rec = match Recording::read(&args.file) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: invalid value for '<FILE>': {e}");
            return ExitCode::from(64);
        }
    };
    runtime().block_on(async move {
        let listener = match bind(args.listen).await {
            Ok(l) => l,
            Err(code) => return code,
        };
        let signal = server::shutdown_signal();
        let addr = listener.local_addr().expect("bound address");
        println!("listening on http://{addr}");
        if let Ok(r) = rec.final_response() {
            // Not println!: a reader that took the first line only may have closed stdout.
            let _ = writeln!(
                std::io::stdout(),
                "the recorded run in the viewer: http://{addr}/ui/runs/{}",
                r.id
            );
        }
        responses_relay::logs::serve(listener, rec, args.speed, signal).await;
        ExitCode::SUCCESS
    })
}

/// `demo`: a scripted model, an MCP test server and a relay on loopback.
fn demo(args: DemoArgs) -> ExitCode {
    runtime().block_on(async move {
        let mut out = std::io::stdout();
        match responses_relay::demo::run(args.listen, &mut out, server::shutdown_signal()).await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(e.exit_code())
            }
        }
    })
}

/// `serve`: the configuration, logs and traces, then the relay until a shutdown signal.
fn serve(args: ServeArgs) -> ExitCode {
    let config = match Config::from_args(args, |k| std::env::var(k).ok()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(64);
        }
    };
    let traces = match &config.traces {
        None => {
            responses_relay::telemetry::init(config.log_format);
            None
        }
        Some(t) => match responses_relay::otel::start(t) {
            Ok(provider) => {
                responses_relay::telemetry::init_with_traces(config.log_format, &provider);
                Some(provider)
            }
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(64);
            }
        },
    };
    runtime().block_on(async move {
        let listener = match bind(config.listen).await {
            Ok(l) => l,
            Err(code) => return code,
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
        let lanes = app.config().lanes;
        if let Err(e) = server::serve_on_lanes(listener, app, signal, lanes).await {
            eprintln!("error: cannot start the serving lanes: {e}");
            return ExitCode::from(70);
        }
        // What is queued goes to the collector, waiting a bounded time.
        if let Some(provider) = traces {
            let _ = tokio::task::spawn_blocking(move || {
                provider.shutdown_with_timeout(std::time::Duration::from_secs(5))
            })
            .await;
        }
        ExitCode::SUCCESS
    })
}

/// `logs export ID` and `logs show ID|FILE`.
fn logs(cmd: LogsCommand) -> ExitCode {
    let (target, store, tenant) = match &cmd {
        LogsCommand::Export { id, store, tenant }
        | LogsCommand::Show {
            target: id,
            store,
            tenant,
        } => (id.clone(), store.clone(), tenant.clone()),
    };
    let from_file =
        matches!(cmd, LogsCommand::Show { .. }) && std::path::Path::new(&target).is_file();
    let recording = if from_file {
        Recording::read(std::path::Path::new(&target))
    } else {
        let Some(path) = store.strip_prefix("sqlite:") else {
            eprintln!(
                "error: invalid value for '--store': '{store}': logs are read from a 'sqlite:PATH' store"
            );
            return ExitCode::from(64);
        };
        if !std::path::Path::new(path).is_file() {
            eprintln!("error: invalid value for '--store': '{store}': no such database file");
            return ExitCode::from(64);
        }
        match responses_relay::store::sqlite::export(
            std::path::Path::new(path),
            &target,
            tenant.as_deref(),
        ) {
            Ok(Some(entries)) => Ok(Recording::from_entries(&entries)),
            Ok(None) => {
                match &tenant {
                    Some(t) => {
                        eprintln!("error: no response with id '{target}' of tenant '{t}' in {path}")
                    }
                    None => eprintln!("error: no response with id '{target}' in {path}"),
                }
                return ExitCode::from(1);
            }
            Err(e) => Err(responses_relay::logs::LogError(e.to_string())),
        }
    };
    let recording = match recording {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
    };
    let mut out = std::io::stdout().lock();
    let written = match cmd {
        LogsCommand::Export { .. } => recording.write(&mut out),
        LogsCommand::Show { .. } => match recording.timeline() {
            Ok(t) => std::io::Write::write_all(&mut out, t.as_bytes()),
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(1);
            }
        },
    };
    match written {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

/// `usage`: runs, tokens and MCP calls per tenant, UTC day and model, read from a relay's store
/// (running or stopped) without opening it as a relay does.
fn usage(
    store: &responses_relay::config::StoreKind,
    tenant: Option<&str>,
    since: &responses_relay::store::usage::Since,
    json: bool,
) -> ExitCode {
    use responses_relay::config::StoreKind;
    use responses_relay::store::{StoreError, Tenant};
    if let StoreKind::Sqlite(path) = store
        && !path.is_file()
    {
        eprintln!(
            "error: invalid value for '--store': 'sqlite:{}': no such database file",
            path.display()
        );
        return ExitCode::from(64);
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let since_day = since.first_day(now);
    let tenant = tenant.map(Tenant::new);
    let read = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
        .block_on(responses_relay::store::usage::read(
            store,
            tenant.as_ref(),
            &since_day,
        ));
    let rows = match read {
        Ok(rows) => rows,
        Err(e @ StoreError::Redis(_)) => {
            eprintln!("error: invalid value for '--store': {e}");
            return ExitCode::from(64);
        }
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
    };
    let report = if json {
        responses_relay::usage::json(&rows)
    } else {
        responses_relay::usage::text(&rows)
    };
    match std::io::stdout().lock().write_all(report.as_bytes()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}
