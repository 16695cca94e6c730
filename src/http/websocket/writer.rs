//! The connection's writer task, the only one that writes to the socket: queued frames (errors,
//! steering notices, the close frame) and the events of the runs it is given, each read from its
//! run's log as a cursor, like an SSE body (nothing is queued per event); every ready event is
//! fed, then one flush.

use std::sync::Arc;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use futures::SinkExt;
use serde_json::Value;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::{Message, Utf8Bytes};
use tokio_util::sync::CancellationToken;

use super::Socket;

/// Silence after which the writer pings the client.
const KEEPALIVE: Duration = Duration::from_secs(15);
/// Events the writer takes from a run's log at a time.
const QUEUE: usize = 256;

/// What the writer is given to send.
pub(super) enum Out {
    /// One frame (an `error`, or the close frame, which ends the writer).
    Frame(Message),
    /// Every event of a run, read from its log as they come; `done` once the terminal event went.
    Run {
        log: Arc<crate::eventlog::log::RunLog>,
        lane: Option<String>,
        done: tokio::sync::oneshot::Sender<()>,
    },
}

/// The connection's writer: queued frames, and the events of the runs it is given, until the
/// close frame, the queue's end, or the client gone.
pub(super) async fn write_frames(
    mut sink: futures::stream::SplitSink<Socket, Message>,
    mut queue: mpsc::UnboundedReceiver<Out>,
    stall: Duration,
    gone: CancellationToken,
    span: tracing::Span,
) {
    let (mut taken, mut sending) = (Vec::with_capacity(16), Vec::<Sending>::new());
    let mut open = true;
    let client_gone = gone.cancelled();
    // A ping after KEEPALIVE without a frame, as an SSE body's `: keepalive` (one timer, set
    // again only when it fires: writes only note the time).
    let mut wrote_at = tokio::time::Instant::now();
    let keepalive = tokio::time::sleep(KEEPALIVE);
    tokio::pin!(client_gone, keepalive);
    while open || !sending.is_empty() {
        match write_ready(&mut sink, &mut taken, &mut sending, stall, &span).await {
            Ok((false, 0)) => {}
            Ok((false, _)) => wrote_at = tokio::time::Instant::now(),
            Ok((true, _)) | Err(()) => break,
        }
        tokio::select! {
            biased;
            _ = &mut client_gone => break,
            n = queue.recv_many(&mut taken, 16), if open => open = n > 0,
            _ = wait_for_events(&sending) => {}
            _ = &mut keepalive => {
                if wrote_at.elapsed() >= KEEPALIVE {
                    taken.push(Out::Frame(Message::Ping(Bytes::new())));
                    wrote_at = tokio::time::Instant::now();
                }
                keepalive.as_mut().reset(wrote_at + KEEPALIVE);
            }
        }
    }
    gone.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(1), sink.close()).await;
}

/// A run whose events are being sent: its log, how far it got, and whom to tell when it is done.
struct Sending {
    log: Arc<crate::eventlog::log::RunLog>,
    cursor: usize,
    lane: Option<String>,
    done: Option<tokio::sync::oneshot::Sender<()>>,
}

/// Feeds the frames taken from the queue and every event ready in the runs being sent, then
/// flushes once (a model's burst is one write). Runs are read from their logs as cursors:
/// nothing is queued per event. `Err`: the socket failed, or the client took nothing for
/// `stall` while frames waited (it is gone).
async fn write_ready(
    ws: &mut futures::stream::SplitSink<Socket, Message>,
    taken: &mut Vec<Out>,
    sending: &mut Vec<Sending>,
    stall: Duration,
    span: &tracing::Span,
) -> Result<(bool, usize), ()> {
    let writing = async {
        let (mut fed, mut closing) = (0usize, false);
        for out in taken.drain(..) {
            match out {
                Out::Frame(m) => {
                    closing |= matches!(m, Message::Close(_));
                    ws.feed(m).await?;
                    fed += 1;
                }
                Out::Run { log, lane, done } => sending.push(Sending {
                    log,
                    cursor: 0,
                    lane,
                    done: Some(done),
                }),
            }
        }
        for run in sending.iter_mut() {
            let batch = run.log.read(run.cursor, QUEUE);
            run.cursor += batch.entries.len();
            fed += batch.entries.len();
            for entry in &batch.entries {
                ws.feed(event_frame(&entry.json(), run.lane.as_deref()))
                    .await?;
            }
            if batch.finished {
                run.done.take().map(|d| d.send(()));
            }
        }
        sending.retain(|r| r.done.is_some());
        if fed > 0 {
            ws.flush().await?;
        }
        Ok::<_, tokio_tungstenite::tungstenite::Error>((closing, fed))
    };
    // The stall timer starts only when a write has to wait (a timer per event costs more than
    // the event: measured).
    tokio::pin!(writing);
    let wrote = match futures::poll!(&mut writing) {
        std::task::Poll::Ready(r) => Ok(r),
        std::task::Poll::Pending => tokio::time::timeout(stall, writing).await,
    };
    match wrote {
        Ok(Ok(wrote)) => Ok(wrote),
        Ok(Err(_)) => Err(()),
        Err(_) => {
            span.in_scope(|| {
                tracing::warn!(
                    stalled_ms = stall.as_millis() as u64,
                    "the WebSocket client stopped reading; cancelling its runs"
                )
            });
            Err(())
        }
    }
}

/// Until one of the runs being sent has more events visible (never, with none).
async fn wait_for_events(sending: &[Sending]) {
    match sending {
        [] => std::future::pending().await,
        [one] => one.log.wait_past(one.cursor).await,
        many => {
            let waits = many.iter().map(|r| Box::pin(r.log.wait_past(r.cursor)));
            futures::future::select_all(waits).await;
        }
    }
}

/// An event's text frame: its SSE `data:` JSON as it is, or with the lane's `stream_id` added.
fn event_frame(json: &Bytes, lane: Option<&str>) -> Message {
    let bytes = match lane {
        None => json.clone(),
        Some(lane) => {
            let mut buf = BytesMut::with_capacity(json.len() + lane.len() + 16);
            buf.put_slice(&json[..json.len() - 1]);
            buf.put_slice(b",\"stream_id\":");
            buf.put_slice(Value::from(lane).to_string().as_bytes());
            buf.put_u8(b'}');
            buf.freeze()
        }
    };
    // SAFETY: the log's events are serialized by serde_json, always UTF-8; a lane is a
    // JSON-encoded `&str`.
    Message::Text(unsafe { Utf8Bytes::from_bytes_unchecked(bytes) })
}
