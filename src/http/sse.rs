//! SSE bodies: a reader cursor over a run's log. Each event is written whole (`event:` line,
//! single-line `data:`, blank line); a batch of ready events goes out in one write; idle streams
//! get `: keepalive` comments; the stream ends with `data: [DONE]` after the terminal event.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use hyper::{Response, StatusCode, header};
use tokio_util::sync::CancellationToken;

use super::{Body, BoxErr};
use crate::run::log::RunLog;

const KEEPALIVE: Duration = Duration::from_secs(15);
const BATCH: usize = 256;

/// Cancels a run when its only client goes away before the run finished.
pub struct CancelOnDrop {
    token: CancellationToken,
    log: Arc<RunLog>,
}

impl CancelOnDrop {
    pub fn new(token: CancellationToken, log: Arc<RunLog>) -> Self {
        CancelOnDrop { token, log }
    }
}

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        if !self.log.is_finished() {
            self.token.cancel();
        }
    }
}

/// Streams `log` from entry `from` on; `guard` lives as long as the body does.
pub fn stream(log: Arc<RunLog>, from: usize, guard: Option<CancelOnDrop>) -> Response<Body> {
    let body = async_stream::stream! {
        let _guard = guard;
        let mut cursor = from;
        loop {
            let batch = log.read(cursor, BATCH);
            if !batch.entries.is_empty() {
                cursor += batch.entries.len();
                let mut buf = BytesMut::with_capacity(batch.entries.iter().map(|e| e.frame.len()).sum::<usize>() + 16);
                for e in &batch.entries {
                    buf.extend_from_slice(&e.frame);
                }
                if batch.finished {
                    buf.extend_from_slice(b"data: [DONE]\n\n");
                }
                yield Ok::<_, BoxErr>(Frame::data(buf.freeze()));
                if batch.finished {
                    break;
                }
                continue;
            }
            if batch.finished {
                yield Ok(Frame::data(Bytes::from_static(b"data: [DONE]\n\n")));
                break;
            }
            if tokio::time::timeout(KEEPALIVE, log.wait_past(cursor)).await.is_err() {
                yield Ok(Frame::data(Bytes::from_static(b": keepalive\n\n")));
            }
        }
    };
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .header("x-accel-buffering", "no")
        .body(BodyExt::boxed_unsync(StreamBody::new(body)))
        .expect("valid response")
}
