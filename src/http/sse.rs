//! SSE bodies: a reader cursor over a run's log. Each event is written whole (`event:` line,
//! single-line `data:`, blank line); a batch of ready events goes out in one write; idle streams
//! get `: keepalive` comments; the stream ends with `data: [DONE]` after the terminal event.
//! A run streamed to its only client is driven by that client's body ([`Driven`]): the run's
//! future is polled by the connection's task, so an event reaches the socket with no hop between
//! tasks, and a client that stops reading holds the run back instead of a queue growing.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use hyper::{Response, StatusCode, header};
use tokio_util::sync::CancellationToken;

use super::{Body, BoxErr};
use crate::eventlog::log::RunLog;
use crate::run::RunTask;

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

/// A run's task driven by its reader: polled from the reader's body while the reader lives, and
/// handed to a task of its own when the reader goes away or stalls, so the run always reaches
/// its terminal event.
///
/// The task is polled only when something it waits on woke it (and once at the start): the
/// reader's body is polled again after every frame it writes, and those polls leave the task
/// alone instead of walking it down to the upstream socket only to find nothing new.
#[derive(Clone)]
pub struct Driven {
    task: Arc<std::sync::Mutex<Option<RunTask>>>,
    wakeup: Arc<Wakeup>,
    /// The waker the task is polled with: [`Wakeup`], shared.
    waker: std::task::Waker,
}

/// Whether a driven task was woken since it was last polled; its wake wakes the reader too.
struct Wakeup {
    woken: std::sync::atomic::AtomicBool,
    reader: futures::task::AtomicWaker,
}

impl std::task::Wake for Wakeup {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref()
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, std::sync::atomic::Ordering::Release);
        self.reader.wake();
    }
}

impl Driven {
    pub fn new(task: RunTask) -> Self {
        let wakeup = Arc::new(Wakeup {
            woken: std::sync::atomic::AtomicBool::new(true),
            reader: futures::task::AtomicWaker::new(),
        });
        Driven {
            task: Arc::new(std::sync::Mutex::new(Some(task))),
            waker: std::task::Waker::from(wakeup.clone()),
            wakeup,
        }
    }

    /// Runs the task until it waits, if it was woken since it last waited; `Ready` once it has
    /// ended. Never ready once handed away (its events then come through the log alone).
    fn poll_run(&self, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        use std::sync::atomic::Ordering;
        use std::task::Poll;
        // Registered before the flag is read: a wake in between is not lost.
        self.wakeup.reader.register(cx.waker());
        if !self.wakeup.woken.swap(false, Ordering::AcqRel) {
            return Poll::Pending;
        }
        let mut slot = self.task.lock().expect("driven run poisoned");
        let Some(task) = slot.as_mut() else {
            return Poll::Pending;
        };
        match task
            .as_mut()
            .poll(&mut std::task::Context::from_waker(&self.waker))
        {
            Poll::Ready(()) => {
                *slot = None;
                Poll::Ready(())
            }
            Poll::Pending => Poll::Pending,
        }
    }

    /// Hands the task, if it has not ended, to a task of its own.
    fn release(&self) {
        let task = self.task.lock().expect("driven run poisoned").take();
        if let (Some(task), Ok(rt)) = (task, tokio::runtime::Handle::try_current()) {
            rt.spawn(task);
        }
    }

    /// Whether the task is still polled by its reader.
    fn held(&self) -> bool {
        self.task.lock().expect("driven run poisoned").is_some()
    }
}

/// Releases a driven run when the body that drove it is dropped.
struct ReleaseOnDrop(Option<Driven>);

impl Drop for ReleaseOnDrop {
    fn drop(&mut self) {
        if let Some(d) = &self.0 {
            d.release();
        }
    }
}

/// Streams `log` from entry `from` on; `guard` lives as long as the body does. With a guard
/// (a run this client owns), a client that stops reading for `stall` while events wait for it
/// cancels the run: the relay never waits on a reader forever (and never buffers for one: readers
/// are cursors over the run's one log). With `driven`, the body drives the run (see [`Driven`]):
/// a client that has not taken the last frame for `stall` cancels the run, which is handed to a
/// task of its own to end.
pub fn stream(
    log: Arc<RunLog>,
    from: usize,
    guard: Option<CancelOnDrop>,
    driven: Option<Driven>,
    stall: Duration,
    counted: crate::metrics::InFlight,
) -> Response<Body> {
    use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
    let started = tokio::time::Instant::now();
    // The time the body last moved (ms since `started`), its cursor, and whether a frame waits
    // for the client to take it.
    let progress = Arc::new((
        AtomicU64::new(0),
        AtomicUsize::new(from),
        AtomicBool::new(false),
    ));
    if let Some(g) = &guard {
        let (token, log, progress) = (g.token.clone(), log.clone(), Arc::downgrade(&progress));
        let driven = driven.clone();
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
                let waiting = log.len() > p.1.load(Ordering::Relaxed)
                    || (driven.as_ref().is_some_and(Driven::held) && p.2.load(Ordering::Relaxed));
                if waiting && idle > stall {
                    tracing::warn!(
                        stalled_ms = idle.as_millis() as u64,
                        "the client stopped reading; cancelling its run"
                    );
                    token.cancel();
                    if let Some(d) = &driven {
                        d.release();
                    }
                    return;
                }
            }
        });
    }
    let body = async_stream::stream! {
        // Dropped in reverse: the run is cancelled (a client gone) before it is handed away.
        let _release = ReleaseOnDrop(driven.clone());
        let _guard = guard;
        let _counted = counted;
        let mut cursor = from;
        // One subscription and one keepalive timer per reader, not one per wait.
        let mut keepalive = tokio::time::interval_at(tokio::time::Instant::now() + KEEPALIVE, KEEPALIVE);
        keepalive.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            progress.0.store(started.elapsed().as_millis() as u64, Ordering::Relaxed);
            progress.1.store(cursor, Ordering::Relaxed);
            progress.2.store(false, Ordering::Relaxed);
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
                progress.2.store(true, Ordering::Relaxed);
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
            let idle = wait(&log, cursor, driven.as_ref(), &mut keepalive).await;
            if idle {
                yield Ok(Frame::data(Bytes::from_static(b": keepalive\n\n")));
            }
        }
    };
    sse_response(body)
}

/// Waits for entries past `cursor` (or the log's end): `true` when the keepalive is due first.
/// A held driven run is polled first; its log is then watched for what only another party makes
/// visible (a store keeping entries), so an event the run writes wakes no one.
async fn wait(
    log: &RunLog,
    cursor: usize,
    driven: Option<&Driven>,
    keepalive: &mut tokio::time::Interval,
) -> bool {
    use std::task::Poll;
    let past = log.wait_past(cursor);
    tokio::pin!(past);
    std::future::poll_fn(|cx| {
        if let Some(d) = driven {
            let ended = d.poll_run(cx).is_ready();
            let (visible, pending, finished) = log.progress();
            if ended || finished || visible > cursor {
                return Poll::Ready(false);
            }
            if d.held() && !pending {
                return keepalive.poll_tick(cx).map(|_| true);
            }
        }
        if past.as_mut().poll(cx).is_ready() {
            return Poll::Ready(false);
        }
        keepalive.poll_tick(cx).map(|_| true)
    })
    .await
}

fn sse_response(
    body: impl futures::Stream<Item = Result<Frame<Bytes>, BoxErr>> + Send + 'static,
) -> Response<Body> {
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .header("x-accel-buffering", "no")
        .body(BodyExt::boxed_unsync(StreamBody::new(body)))
        .expect("valid response")
}
