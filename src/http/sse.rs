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
use crate::eventlog::log::RunLog;

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

/// Streams `log` from entry `from` on; `guard` lives as long as the body does. With a guard
/// (a run this client owns), a client that stops reading for `stall` while events wait for it
/// cancels the run: the relay never waits on a reader forever (and never buffers for one: readers
/// are cursors over the run's one log).
pub fn stream(
    log: Arc<RunLog>,
    from: usize,
    guard: Option<CancelOnDrop>,
    stall: Duration,
    counted: crate::metrics::InFlight,
) -> Response<Body> {
    use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
    let started = tokio::time::Instant::now();
    let progress = Arc::new((AtomicU64::new(0), AtomicUsize::new(from)));
    if let Some(g) = &guard {
        let (token, log, progress) = (g.token.clone(), log.clone(), Arc::downgrade(&progress));
        tokio::spawn(async move {
            let tick = (stall / 4).clamp(Duration::from_millis(10), Duration::from_secs(1));
            loop {
                tokio::time::sleep(tick).await;
                let Some(p) = progress.upgrade() else { return };
                if log.is_finished() && p.1.load(Ordering::Relaxed) >= log.len() {
                    return;
                }
                let idle = started
                    .elapsed()
                    .saturating_sub(Duration::from_millis(p.0.load(Ordering::Relaxed)));
                if log.len() > p.1.load(Ordering::Relaxed) && idle > stall {
                    tracing::warn!(
                        stalled_ms = idle.as_millis() as u64,
                        "the client stopped reading; cancelling its run"
                    );
                    token.cancel();
                    return;
                }
            }
        });
    }
    let body = async_stream::stream! {
        let _guard = guard;
        let _counted = counted;
        let mut cursor = from;
        // One subscription and one keepalive timer per reader, not one per wait.
        let mut keepalive = tokio::time::interval_at(tokio::time::Instant::now() + KEEPALIVE, KEEPALIVE);
        keepalive.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            progress.0.store(started.elapsed().as_millis() as u64, Ordering::Relaxed);
            progress.1.store(cursor, Ordering::Relaxed);
            let batch = log.read(cursor, BATCH);
            if !batch.entries.is_empty() {
                cursor += batch.entries.len();
                let frame = match batch.entries.as_slice() {
                    // The common case while a model streams: one event, handed over as it is.
                    [one] if !batch.finished => one.frame.clone(),
                    entries => {
                        let mut buf = BytesMut::with_capacity(entries.iter().map(|e| e.frame.len()).sum::<usize>() + 16);
                        for e in entries {
                            buf.extend_from_slice(&e.frame);
                        }
                        if batch.finished {
                            buf.extend_from_slice(b"data: [DONE]\n\n");
                        }
                        buf.freeze()
                    }
                };
                yield Ok::<_, BoxErr>(Frame::data(frame));
                if batch.finished {
                    break;
                }
                continue;
            }
            if batch.finished {
                yield Ok(Frame::data(Bytes::from_static(b"data: [DONE]\n\n")));
                break;
            }
            let idle = tokio::select! {
                _ = log.wait_past(cursor) => false,
                _ = keepalive.tick() => true,
            };
            if idle {
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
