//! Writing a stream: SSE frames written one write each, `delay` apart, then how the body ends
//! (normally, cut, or stalled), and the mid-stream faults applied to a finished list of frames.
//! A stream counts as open (`FakeUpstream::open_streams`) from its response until its body is
//! dropped.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, StreamBody};
use hyper::Response;
use hyper::body::Frame;
use hyper::header::{CACHE_CONTROL, CONTENT_TYPE, HeaderValue};

use super::options::Fault;
use super::{Body, State};

/// Why a stream stops after its frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Tail {
    /// The body ends normally.
    End,
    /// The connection is dropped mid-body (no terminating chunk).
    Abort,
    /// Nothing more is ever sent; the body stays open until the client goes away.
    Stall,
}

/// Decrements the open-stream count when the body stream is dropped.
struct OpenGuard(Arc<State>);

impl OpenGuard {
    pub(super) fn new(state: &Arc<State>) -> Self {
        state.open.fetch_add(1, Ordering::SeqCst);
        OpenGuard(state.clone())
    }
}

impl Drop for OpenGuard {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Frames a `hold=NAME` stream writes before it waits for its gate.
const HOLD_AFTER: usize = 2;

/// An SSE response writing each frame with one write, `delay` apart, then `tail`; with `hold`,
/// waiting for that gate after the first [`HOLD_AFTER`] frames.
pub(super) fn sse_response(
    state: &Arc<State>,
    frames: Vec<Bytes>,
    delay: Duration,
    tail: Tail,
    hold: Option<String>,
) -> Response<Body> {
    let guard = OpenGuard::new(state);
    let gates = state.clone();
    let stream = async_stream::stream! {
        let _guard = guard;
        let hold_at = HOLD_AFTER.min(frames.len().saturating_sub(1));
        for (i, frame) in frames.into_iter().enumerate() {
            if i > 0 && !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            if i == hold_at && let Some(gate) = &hold {
                gates.gate(gate).await;
            }
            yield Ok::<_, std::io::Error>(Frame::data(frame));
        }
        match tail {
            Tail::End => {}
            Tail::Abort => {
                // Let hyper flush what was sent (it flushes when the body is pending), then drop
                // the connection: an error from the body aborts it without the final chunk.
                tokio::time::sleep(Duration::from_millis(20)).await;
                yield Err(std::io::Error::new(std::io::ErrorKind::ConnectionAborted, "fake upstream cut the stream"));
            }
            Tail::Stall => futures::future::pending::<()>().await,
        }
    };
    let mut r = Response::new(StreamBody::new(stream).boxed_unsync());
    let h = r.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    h.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

/// Where a fault cuts the stream: after this many delta events (or none).
fn fault_cut(fault: Fault) -> Option<usize> {
    match fault {
        Fault::Cut => Some(3),
        Fault::Malformed | Fault::Stall | Fault::ErrorChunk => Some(2),
        _ => None,
    }
}

/// Frames of one stream before fault handling: each with whether it is a delta.
pub(super) struct Frames {
    pub(super) frames: Vec<(Bytes, bool)>,
}

impl Frames {
    /// Applies a mid-stream fault: keeps everything up to the cut point, then the fault's frames.
    pub(super) fn finish(
        self,
        fault: Fault,
        fault_frames: impl FnOnce(usize) -> Vec<Bytes>,
    ) -> (Vec<Bytes>, Tail) {
        let mut frames = self.frames;
        if let Some(after) = fault_cut(fault) {
            let mut seen = 0;
            let mut cut = frames.len();
            for (i, (_, delta)) in frames.iter().enumerate() {
                if *delta {
                    seen += 1;
                    if seen == after {
                        cut = i + 1;
                        break;
                    }
                }
            }
            frames.truncate(cut);
            let mut out: Vec<Bytes> = frames.into_iter().map(|(b, _)| b).collect();
            let next = out.len();
            out.extend(fault_frames(next));
            let tail = match fault {
                Fault::Cut => Tail::Abort,
                Fault::Stall => Tail::Stall,
                _ => Tail::End,
            };
            return (out, tail);
        }
        let mut out: Vec<Bytes> = frames.into_iter().map(|(b, _)| b).collect();
        if fault == Fault::NoDone {
            out.pop();
        }
        (out, Tail::End)
    }
}

pub(super) fn data_frame(json: &str) -> Bytes {
    let mut b = Vec::with_capacity(json.len() + 8);
    b.extend_from_slice(b"data: ");
    b.extend_from_slice(json.as_bytes());
    b.extend_from_slice(b"\n\n");
    Bytes::from(b)
}

pub(super) const DONE: &[u8] = b"data: [DONE]\n\n";
