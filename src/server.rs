//! The accept loop: HTTP/1.1 and h2c on one listener, graceful shutdown that first ends every
//! run (each stream gets its terminal event), then waits a bounded time for connections to close.

use std::future::Future;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;

use crate::app::App;

/// Serves `app` on `listener` until `shutdown` resolves.
pub async fn serve_on(listener: TcpListener, app: App, shutdown: impl Future<Output = ()>) {
    let graceful = GracefulShutdown::new();
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(Duration::from_secs(30));
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let _ = stream.set_nodelay(true);
                let app = app.clone();
                let svc = service_fn(move |req| crate::http::handle(app.clone(), req));
                let conn = builder.serve_connection_with_upgrades(TokioIo::new(stream), svc).into_owned();
                let fut = graceful.watch(conn);
                tokio::spawn(async move {
                    let _ = fut.await;
                });
            }
            _ = &mut shutdown => break,
        }
    }
    drop(listener);
    // End every run first: their streams then finish with a terminal event and [DONE] (a
    // WebSocket, with the close frame).
    app.shutdown_token().cancel();
    app.sockets().close();
    let drained = futures::future::join(graceful.shutdown(), app.sockets().wait());
    if tokio::time::timeout(Duration::from_secs(10), drained)
        .await
        .is_err()
    {
        tracing::warn!("connections still open 10s after shutdown; closing them");
    }
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
