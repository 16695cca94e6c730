//! The accept loop: HTTP/1.1 and h2c on one listener, graceful shutdown that first ends every
//! run (each stream gets its terminal event), then waits a bounded time for connections to close.
//! The binary serves on lanes ([`serve_on_lanes`]): one single-threaded runtime per core, each
//! connection (and every run it starts) living on one lane, so an event is read, turned into
//! Responses events and written on one thread, waking no other.

use std::future::Future;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;

use crate::app::App;

const DRAIN: Duration = Duration::from_secs(10);

fn connection_builder() -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(Duration::from_secs(30));
    builder
}

/// Serves one accepted connection on the current runtime, watched by `graceful`.
fn serve_connection(
    builder: &auto::Builder<TokioExecutor>,
    graceful: &GracefulShutdown,
    app: &App,
    stream: tokio::net::TcpStream,
) {
    let _ = stream.set_nodelay(true);
    let app = app.clone();
    let svc = service_fn(move |req| crate::http::handle(app.clone(), req));
    let conn = builder
        .serve_connection_with_upgrades(TokioIo::new(stream), svc)
        .into_owned();
    let fut = graceful.watch(conn);
    tokio::spawn(async move {
        let _ = fut.await;
    });
}

/// Ends every run first (their streams then finish with a terminal event and [DONE]; a
/// WebSocket, with the close frame), then waits up to 10 s for `connections` to close.
async fn drain(app: &App, connections: impl Future<Output = ()>) {
    app.shutdown_token().cancel();
    app.sockets().close();
    let drained = futures::future::join(connections, app.sockets().wait());
    if tokio::time::timeout(DRAIN, drained).await.is_err() {
        tracing::warn!("connections still open 10s after shutdown; closing them");
    }
}

/// Serves `app` on `listener` until `shutdown` resolves, every connection on the current runtime.
pub async fn serve_on(listener: TcpListener, app: App, shutdown: impl Future<Output = ()>) {
    let graceful = GracefulShutdown::new();
    let builder = connection_builder();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                serve_connection(&builder, &graceful, &app, stream);
            }
            _ = &mut shutdown => break,
        }
    }
    drop(listener);
    drain(&app, graceful.shutdown()).await;
}

/// A serving lane: a thread running a single-threaded runtime, fed accepted connections.
struct Lane {
    connections: tokio::sync::mpsc::UnboundedSender<std::net::TcpStream>,
    thread: std::thread::JoinHandle<()>,
}

impl Lane {
    /// Starts lane `n`: it serves what it is handed until `stop`, then drains its connections.
    fn start(
        n: usize,
        app: App,
        stop: tokio_util::sync::CancellationToken,
    ) -> std::io::Result<Lane> {
        let (connections, mut handed) = tokio::sync::mpsc::unbounded_channel();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let thread = std::thread::Builder::new()
            .name(format!("relay-lane-{n}"))
            .spawn(move || {
                runtime.block_on(async move {
                    let graceful = GracefulShutdown::new();
                    let builder = connection_builder();
                    loop {
                        let stream = tokio::select! {
                            s = handed.recv() => s,
                            _ = stop.cancelled() => None,
                        };
                        let Some(stream) = stream else { break };
                        if let Ok(stream) = tokio::net::TcpStream::from_std(stream) {
                            serve_connection(&builder, &graceful, &app, stream);
                        }
                    }
                    drain(&app, graceful.shutdown()).await;
                });
            })?;
        Ok(Lane {
            connections,
            thread,
        })
    }
}

/// [`serve_on`] with `lanes` serving lanes: this task accepts, and hands each connection to the
/// next lane in turn. A lane that cannot start is an error before the first connection.
pub async fn serve_on_lanes(
    listener: TcpListener,
    app: App,
    shutdown: impl Future<Output = ()>,
    lanes: usize,
) -> std::io::Result<()> {
    let stop = tokio_util::sync::CancellationToken::new();
    let lanes = (0..lanes.max(1))
        .map(|n| Lane::start(n, app.clone(), stop.clone()))
        .collect::<std::io::Result<Vec<_>>>()?;
    tokio::pin!(shutdown);
    let mut next = 0;
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let Ok(stream) = stream.into_std() else { continue };
                let _ = lanes[next % lanes.len()].connections.send(stream);
                next += 1;
            }
            _ = &mut shutdown => break,
        }
    }
    drop(listener);
    app.shutdown_token().cancel();
    stop.cancel();
    let threads: Vec<_> = lanes.into_iter().map(|l| l.thread).collect();
    let _ = tokio::task::spawn_blocking(move || {
        for t in threads {
            let _ = t.join();
        }
    })
    .await;
    Ok(())
}

/// Installs the SIGINT and SIGTERM handlers now; the future resolves on either signal.
/// (Installed before the listening line is printed, so a signal sent right after it is handled.)
pub fn shutdown_signal() -> impl Future<Output = ()> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
        let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
        async move {
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
        }
    }
    #[cfg(not(unix))]
    {
        async {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
