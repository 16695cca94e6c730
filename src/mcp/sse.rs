//! The legacy HTTP+SSE transport (MCP 2024-11-05), as an rmcp client transport: a GET opens the
//! server's event stream, whose first `endpoint` event names the URL to POST messages to; the
//! server's answers and requests arrive as `message` events on the stream.
//!
//! Invariants: the endpoint must have the stream's origin (scheme, host and port), so a server
//! cannot send the session's credentials elsewhere, and every connection goes through the
//! session's guarded client (the SSRF policy checks each address). No event may grow past
//! [`MAX_EVENT_BYTES`]. Dropping the transport (or cancelling `alive`) stops the stream reader.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use eventsource_stream::Eventsource;
use futures::{Stream, StreamExt};
use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderName, HeaderValue};
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::service::RoleClient;
use rmcp::transport::Transport;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// The longest event (or run of bytes without an event boundary) read from the stream.
pub(super) const MAX_EVENT_BYTES: usize = 8 * 1024 * 1024;

/// Events waiting for the session to read them.
const QUEUE: usize = 64;

/// Why the legacy SSE transport failed.
#[derive(Debug, thiserror::Error)]
pub(super) enum SseError {
    /// The server answered the GET or a POST with this status.
    #[error("HTTP {status} {}", reqwest::StatusCode::from_u16(*status).ok().and_then(|s| s.canonical_reason()).unwrap_or(""))]
    Status { status: u16 },
    #[error(transparent)]
    Request(#[from] reqwest::Error),
    /// The stream ended, broke, or never named an endpoint the relay may use.
    #[error("{0}")]
    Stream(String),
}

/// One legacy SSE session's transport.
pub(super) struct SseTransport {
    http: reqwest::Client,
    endpoint: Arc<str>,
    headers: Arc<Vec<(HeaderName, HeaderValue)>>,
    incoming: mpsc::Receiver<ServerJsonRpcMessage>,
    /// Stops the stream reader when the transport is dropped.
    _reader: tokio_util::sync::DropGuard,
}

/// Opens `url`'s event stream with `headers` (and the bearer `token`), waits for its `endpoint`
/// event, and starts reading messages. `alive` stops everything when cancelled.
pub(super) async fn connect(
    http: reqwest::Client,
    url: &str,
    token: Option<&str>,
    custom: &HashMap<HeaderName, HeaderValue>,
    alive: CancellationToken,
) -> Result<SseTransport, SseError> {
    let base = reqwest::Url::parse(url).map_err(|_| SseError::Stream("invalid URL".into()))?;
    let mut headers: Vec<(HeaderName, HeaderValue)> =
        custom.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    if let Some(t) = token {
        let v = HeaderValue::from_str(&format!("Bearer {t}"))
            .map_err(|_| SseError::Stream("invalid authorization".into()))?;
        headers.push((AUTHORIZATION, v));
    }
    let mut get = http.get(base.clone()).header(ACCEPT, "text/event-stream");
    for (k, v) in &headers {
        get = get.header(k, v);
    }
    let response = tokio::select! {
        r = get.send() => r.map_err(|e| SseError::Request(e.without_url()))?,
        _ = alive.cancelled() => return Err(SseError::Stream("the session was closed".into())),
    };
    if !response.status().is_success() {
        return Err(SseError::Status {
            status: response.status().as_u16(),
        });
    }
    let mut events = Box::pin(bounded(response.bytes_stream()).eventsource());
    // The first event names the endpoint; anything before it is not a message of this MCP session.
    let endpoint = loop {
        let next = tokio::select! {
            e = events.next() => e,
            _ = alive.cancelled() => return Err(SseError::Stream("the session was closed".into())),
        };
        match next {
            Some(Ok(e)) if e.event == "endpoint" => break endpoint_url(&base, e.data.trim())?,
            Some(Ok(_)) => continue,
            Some(Err(e)) => return Err(SseError::Stream(format!("the event stream broke: {e}"))),
            None => {
                return Err(SseError::Stream(
                    "the event stream ended before naming an endpoint".into(),
                ));
            }
        }
    };
    let (tx, incoming) = mpsc::channel(QUEUE);
    let stop = alive.child_token();
    let reader = stop.clone();
    tokio::spawn(async move {
        loop {
            let next = tokio::select! {
                e = events.next() => e,
                _ = reader.cancelled() => return,
            };
            match next {
                Some(Ok(e)) if e.event.is_empty() || e.event == "message" => {
                    // A message that is not JSON-RPC is skipped, as the Streamable HTTP client
                    // does; the call it belonged to then times out.
                    match serde_json::from_str::<ServerJsonRpcMessage>(&e.data) {
                        Ok(m) => {
                            if tx.send(m).await.is_err() {
                                return;
                            }
                        }
                        Err(err) => {
                            tracing::debug!(error = %err, "an SSE message that is not JSON-RPC was skipped")
                        }
                    }
                }
                Some(Ok(_)) => {}
                // Dropping `tx` ends the session: rmcp reports its calls as closed.
                Some(Err(_)) | None => return,
            }
        }
    });
    Ok(SseTransport {
        http,
        endpoint: endpoint.as_str().into(),
        headers: Arc::new(headers),
        incoming,
        _reader: stop.drop_guard(),
    })
}

/// The `endpoint` event's URL, resolved against the stream's URL; it must keep the origin.
fn endpoint_url(base: &reqwest::Url, data: &str) -> Result<reqwest::Url, SseError> {
    let url = base
        .join(data)
        .map_err(|_| SseError::Stream("the server named an endpoint that is not a URL".into()))?;
    if url.origin() != base.origin() {
        return Err(SseError::Stream(
            "the server named an endpoint on another origin, which the relay does not follow"
                .into(),
        ));
    }
    Ok(url)
}

/// `stream`, ended with an error once [`MAX_EVENT_BYTES`] arrive without an event boundary.
fn bounded<S>(stream: S) -> impl Stream<Item = Result<Bytes, SseError>>
where
    S: Stream<Item = Result<Bytes, reqwest::Error>>,
{
    let mut since_boundary = 0usize;
    stream.map(move |chunk| {
        let chunk = chunk.map_err(|e| SseError::Request(e.without_url()))?;
        since_boundary = match last_boundary(&chunk) {
            Some(end) => chunk.len() - end,
            None => since_boundary + chunk.len(),
        };
        if since_boundary > MAX_EVENT_BYTES {
            return Err(SseError::Stream(format!(
                "an event is larger than {MAX_EVENT_BYTES} bytes"
            )));
        }
        Ok(chunk)
    })
}

/// Where the last blank line (`\n\n`, `\r\r` or `\r\n\r\n`) of `chunk` ends.
fn last_boundary(chunk: &[u8]) -> Option<usize> {
    let two = chunk
        .windows(2)
        .rposition(|w| w == b"\n\n" || w == b"\r\r")
        .map(|i| i + 2);
    let four = chunk
        .windows(4)
        .rposition(|w| w == b"\r\n\r\n")
        .map(|i| i + 4);
    two.max(four)
}

impl Transport<RoleClient> for SseTransport {
    type Error = SseError;

    fn send(
        &mut self,
        item: ClientJsonRpcMessage,
    ) -> impl Future<Output = Result<(), SseError>> + Send + 'static {
        let http = self.http.clone();
        let endpoint = self.endpoint.clone();
        let headers = self.headers.clone();
        // The request's `_meta.traceparent`, as a header too (as over Streamable HTTP).
        let traced = super::http::with_traceparent(&item, HashMap::new());
        async move {
            let body = serde_json::to_vec(&item)
                .map_err(|e| SseError::Stream(format!("unserializable message: {e}")))?;
            let mut post = http
                .post(&*endpoint)
                .header(CONTENT_TYPE, "application/json")
                .body(body);
            for (k, v) in headers.iter().map(|(k, v)| (k, v)).chain(traced.iter()) {
                post = post.header(k, v);
            }
            let response = post.send().await.map_err(|e| e.without_url())?;
            if !response.status().is_success() {
                return Err(SseError::Status {
                    status: response.status().as_u16(),
                });
            }
            Ok(())
        }
    }

    async fn receive(&mut self) -> Option<ServerJsonRpcMessage> {
        self.incoming.recv().await
    }

    async fn close(&mut self) -> Result<(), SseError> {
        self.incoming.close();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endpoint_on_the_streams_origin_is_taken_and_another_origin_refused() {
        let base = reqwest::Url::parse("http://127.0.0.1:9000/sse").unwrap();
        assert_eq!(
            endpoint_url(&base, "/messages/?session_id=ab")
                .unwrap()
                .as_str(),
            "http://127.0.0.1:9000/messages/?session_id=ab"
        );
        assert!(endpoint_url(&base, "http://127.0.0.1:9001/messages").is_err());
        assert!(endpoint_url(&base, "https://127.0.0.1:9000/messages").is_err());
        assert!(endpoint_url(&base, "//evil.example/messages").is_err());
    }

    #[test]
    fn the_byte_count_restarts_after_each_event_boundary() {
        assert_eq!(last_boundary(b"data: x\n\ndata: y"), Some(9));
        assert_eq!(last_boundary(b"data: x\r\n\r\n"), Some(11));
        assert_eq!(last_boundary(b"data: x\n"), None);
    }
}
