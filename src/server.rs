//! The accept loop: HTTP/1.1 and h2c on one listener, graceful shutdown that first ends every
//! run (each stream gets its terminal event), then waits a bounded time for connections to close,
//! then flushes the store (what it has yet to keep, the usage tallies too).
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
    // Boxed: the handler's future (preparing a run: about 24 KiB) is freed once it answers,
    // instead of sizing the stream's task (or the HTTP/1.1 connection's slot) for as long as
    // the response streams.
    let svc = service_fn(move |req| Box::pin(crate::http::handle(app.clone(), req)));
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
    // What the ended runs left to keep (their usage tallies too) is written before returning.
    app.store().flush().await;
}

/// What a serving lane does with the connections it is handed. Made on the lane's own thread, so
/// what it builds (an HTTP client, a graceful-shutdown watcher) belongs to that lane.
pub trait LaneService: 'static {
    /// Serves one connection, on the lane's runtime.
    fn serve(&self, stream: tokio::net::TcpStream);
    /// Ends the lane's connections, on the lane's runtime, once no more are handed to it.
    fn drain(self) -> impl Future<Output = ()>;
}

/// Single-threaded runtimes, each on a thread of its own, that accepted connections are handed to
/// in turn ([`Lanes::hand`]): a connection and every task it starts stay on one thread.
pub struct Lanes {
    lanes: Vec<(
        tokio::sync::mpsc::UnboundedSender<std::net::TcpStream>,
        std::thread::JoinHandle<()>,
    )>,
    next: usize,
    stop: tokio_util::sync::CancellationToken,
}

impl Lanes {
    /// Starts `n` lanes (at least one), each serving through the service `make` builds for it.
    pub fn start<S: LaneService>(
        n: usize,
        make: impl Fn() -> S + Send + Sync + 'static,
    ) -> std::io::Result<Lanes> {
        let make = std::sync::Arc::new(make);
        let stop = tokio_util::sync::CancellationToken::new();
        let lanes = (0..n.max(1))
            .map(|i| {
                let (handed, mut connections) = tokio::sync::mpsc::unbounded_channel();
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?;
                let (make, stop) = (make.clone(), stop.clone());
                let thread = std::thread::Builder::new()
                    .name(format!("relay-lane-{i}"))
                    .spawn(move || {
                        runtime.block_on(async move {
                            crate::eventlog::publish::Home::install();
                            let service = make();
                            loop {
                                let stream = tokio::select! {
                                    s = connections.recv() => s,
                                    _ = stop.cancelled() => None,
                                };
                                let Some(stream) = stream else { break };
                                if let Ok(stream) = tokio::net::TcpStream::from_std(stream) {
                                    service.serve(stream);
                                }
                            }
                            service.drain().await;
                        });
                    })?;
                Ok((handed, thread))
            })
            .collect::<std::io::Result<Vec<_>>>()?;
        Ok(Lanes {
            lanes,
            next: 0,
            stop,
        })
    }

    /// Hands an accepted connection to the next lane.
    pub fn hand(&mut self, stream: tokio::net::TcpStream) {
        if let Ok(stream) = stream.into_std() {
            let _ = self.lanes[self.next % self.lanes.len()].0.send(stream);
            self.next += 1;
        }
    }

    /// Stops handing and waits for every lane to drain and end.
    pub async fn stop(self) {
        self.stop.cancel();
        let threads: Vec<_> = self.lanes.into_iter().map(|(_, t)| t).collect();
        let _ = tokio::task::spawn_blocking(move || {
            for t in threads {
                let _ = t.join();
            }
        })
        .await;
    }
}

/// The relay on one lane: its connections, watched for the graceful shutdown.
struct RelayLane {
    app: App,
    graceful: GracefulShutdown,
    builder: auto::Builder<TokioExecutor>,
}

impl LaneService for RelayLane {
    fn serve(&self, stream: tokio::net::TcpStream) {
        serve_connection(&self.builder, &self.graceful, &self.app, stream);
    }

    async fn drain(self) {
        drain(&self.app, self.graceful.shutdown()).await;
    }
}

/// [`serve_on`] on `lanes` serving [`Lanes`]: this task accepts, and hands each connection to the
/// next lane in turn. A lane that cannot start is an error before the first connection.
pub async fn serve_on_lanes(
    listener: TcpListener,
    app: App,
    shutdown: impl Future<Output = ()>,
    lanes: usize,
) -> std::io::Result<()> {
    let lane_app = app.clone();
    let mut lanes = Lanes::start(lanes, move || RelayLane {
        app: lane_app.clone(),
        graceful: GracefulShutdown::new(),
        builder: connection_builder(),
    })?;
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                lanes.hand(stream);
            }
            _ = &mut shutdown => break,
        }
    }
    drop(listener);
    app.shutdown_token().cancel();
    lanes.stop().await;
    // What the ended runs left to keep (their usage tallies too) is written before returning.
    app.store().flush().await;
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
