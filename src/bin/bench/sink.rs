//! The trace sink: a minimal OTLP/HTTP collector on loopback for the benchmark's traced row. It
//! reads each export's body whole and answers 200 with an empty `ExportTraceServiceResponse`
//! (an empty protobuf message), doing what a local collector's receiver must do at the least.

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

/// Serves until the process is killed. Prints `listening on http://ADDR`.
pub async fn serve(listen: SocketAddr) -> std::io::Result<()> {
    let listener = TcpListener::bind(listen).await?;
    println!("listening on http://{}", listener.local_addr()?);
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        tokio::spawn(async move {
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service_fn(take))
                .await;
        });
    }
}

async fn take(req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let status = match req.into_body().collect().await {
        Ok(_) => StatusCode::OK,
        Err(_) => StatusCode::BAD_REQUEST,
    };
    Ok(Response::builder()
        .status(status)
        .header("content-type", "application/x-protobuf")
        .body(Full::new(Bytes::new()))
        .expect("a valid response"))
}
