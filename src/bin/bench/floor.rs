//! The floor: a pass-through proxy on the relay's serving lanes and hyper's auto server with the
//! same settings, with a reqwest upstream client per lane (what a Rust proxy is usually made of;
//! the relay reads `http://` model servers with its own client, `upstream/wire.rs`). It forwards
//! the request bytes to the upstream and the response bytes back, chunk for chunk, parsing
//! neither.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{AUTHORIZATION, CONTENT_TYPE};
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use responses_relay::server::{LaneService, Lanes};
use tokio::net::TcpListener;

type BoxErr = Box<dyn std::error::Error + Send + Sync>;
type Body = UnsyncBoxBody<Bytes, BoxErr>;

/// Serves until the process is killed; `upstream` is an origin (`http://ADDR`), request paths are
/// appended unchanged. Prints `listening on http://ADDR`. Like the relay, it serves on one lane
/// per core (`responses_relay::server::Lanes`), each with its own upstream client, so the floor
/// keeps every connection's bytes on one thread as the relay does.
pub async fn serve(listen: SocketAddr, upstream: String) -> std::io::Result<()> {
    let listener = TcpListener::bind(listen).await?;
    println!("listening on http://{}", listener.local_addr()?);
    let upstream: std::sync::Arc<str> = upstream.trim_end_matches('/').into();
    let lanes = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut lanes = Lanes::start(lanes, move || FloorLane::new(upstream.clone()))?;
    loop {
        match listener.accept().await {
            Ok((stream, _)) => lanes.hand(stream),
            Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
        }
    }
}

/// The floor on one lane: its HTTP server settings and its own upstream client.
struct FloorLane {
    builder: auto::Builder<TokioExecutor>,
    http: reqwest::Client,
    upstream: std::sync::Arc<str>,
}

impl FloorLane {
    fn new(upstream: std::sync::Arc<str>) -> Self {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .pool_idle_timeout(Duration::from_secs(60))
            .tcp_nodelay(true)
            .build()
            .expect("reqwest client builds");
        let mut builder = auto::Builder::new(TokioExecutor::new());
        builder
            .http1()
            .timer(hyper_util::rt::TokioTimer::new())
            .header_read_timeout(Duration::from_secs(30));
        FloorLane {
            builder,
            http,
            upstream,
        }
    }
}

impl LaneService for FloorLane {
    fn serve(&self, stream: tokio::net::TcpStream) {
        let _ = stream.set_nodelay(true);
        let (http, upstream) = (self.http.clone(), self.upstream.clone());
        let svc = service_fn(move |req| forward(http.clone(), upstream.clone(), req));
        let conn = self
            .builder
            .serve_connection_with_upgrades(TokioIo::new(stream), svc)
            .into_owned();
        tokio::spawn(async move {
            let _ = conn.await;
        });
    }

    async fn drain(self) {}
}

async fn forward(
    http: reqwest::Client,
    upstream: std::sync::Arc<str>,
    req: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let (parts, body) = req.into_parts();
    let bytes = match body.collect().await {
        Ok(c) => c.to_bytes(),
        Err(e) => return Ok(status(StatusCode::BAD_REQUEST, e.to_string())),
    };
    let path = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or("/");
    let mut out = http
        .request(parts.method, format!("{upstream}{path}"))
        .body(bytes);
    for name in [CONTENT_TYPE, AUTHORIZATION] {
        if let Some(v) = parts.headers.get(&name) {
            out = out.header(name, v.clone());
        }
    }
    let up = match out.send().await {
        Ok(r) => r,
        Err(e) => return Ok(status(StatusCode::BAD_GATEWAY, e.to_string())),
    };
    let mut resp = Response::builder().status(up.status());
    if let Some(ct) = up.headers().get(CONTENT_TYPE) {
        resp = resp.header(CONTENT_TYPE, ct.clone());
    }
    let frames = up
        .bytes_stream()
        .map(|r| r.map(Frame::data).map_err(|e| Box::new(e) as BoxErr));
    Ok(resp
        .body(BodyExt::boxed_unsync(StreamBody::new(frames)))
        .unwrap_or_else(|e| status(StatusCode::BAD_GATEWAY, e.to_string())))
}

fn status(code: StatusCode, message: String) -> Response<Body> {
    let mut r = Response::new(
        Full::new(Bytes::from(message))
            .map_err(|never: Infallible| -> BoxErr { match never {} })
            .boxed_unsync(),
    );
    *r.status_mut() = code;
    r
}
