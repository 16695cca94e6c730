//! The HTTP client rmcp sends through: reqwest, with two guarantees added. Every request of a
//! session stops when the session (or an abandoned connect attempt) is dropped — rmcp's own
//! workers do not stop an in-flight `initialize` — and errors never carry the URL (its query
//! string may hold a user's secret). A request whose `params._meta` carries a `traceparent` (the
//! relay's trace spans put it there: rmcp posts from its own task, where the run's span is not
//! current) is sent with that `traceparent` header as well.

use std::collections::HashMap;
use std::sync::Arc;

use futures::stream::BoxStream;
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::model::{ClientJsonRpcMessage, ClientRequest, JsonRpcMessage};
use rmcp::transport::streamable_http_client::SseError;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};
use sse_stream::Sse;
use tokio_util::sync::CancellationToken;

type Error = StreamableHttpError<reqwest::Error>;

/// The `mcp-session-id` a session's requests go with: none until the server gave one (never,
/// for a stateless server or the 2026-07-28 lifecycle). Shared by the session and its client.
#[derive(Clone, Default)]
pub struct SessionId(Arc<std::sync::Mutex<Option<Arc<str>>>>);

impl SessionId {
    /// The id the session's latest request went with.
    pub fn get(&self) -> Option<Arc<str>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    fn note(&self, id: &Option<Arc<str>>) {
        if let Some(id) = id {
            let mut kept = self.0.lock().unwrap_or_else(|e| e.into_inner());
            if kept.as_ref() != Some(id) {
                *kept = Some(id.clone());
            }
        }
    }
}

/// reqwest for one MCP session, stopped by `alive`.
#[derive(Clone)]
pub struct SessionClient {
    inner: reqwest::Client,
    alive: CancellationToken,
    session_id: SessionId,
}

impl SessionClient {
    /// A client whose requests all stop once `alive` is cancelled, noting in `session_id` the
    /// session id its requests go with.
    pub fn new(inner: reqwest::Client, alive: CancellationToken, session_id: SessionId) -> Self {
        SessionClient {
            inner,
            alive,
            session_id,
        }
    }

    async fn guarded<T>(
        &self,
        request: impl Future<Output = Result<T, Error>>,
    ) -> Result<T, Error> {
        tokio::select! {
            r = request => r.map_err(without_url),
            _ = self.alive.cancelled() => Err(StreamableHttpError::TransportChannelClosed),
        }
    }
}

/// `headers` with `traceparent` added when the message is a request whose `params._meta` has one.
pub(super) fn with_traceparent(
    message: &ClientJsonRpcMessage,
    mut headers: HashMap<HeaderName, HeaderValue>,
) -> HashMap<HeaderName, HeaderValue> {
    let JsonRpcMessage::Request(r) = message else {
        return headers;
    };
    let meta = match &r.request {
        ClientRequest::CallToolRequest(c) => c.params.meta.as_ref(),
        ClientRequest::ListToolsRequest(l) => l.params.as_ref().and_then(|p| p.meta.as_ref()),
        _ => None,
    };
    if let Some(value) = meta
        .and_then(|m| m.get_traceparent())
        .and_then(|tp| HeaderValue::from_str(tp).ok())
    {
        headers.insert(HeaderName::from_static("traceparent"), value);
    }
    headers
}

fn without_url(e: Error) -> Error {
    match e {
        StreamableHttpError::Client(re) => StreamableHttpError::Client(re.without_url()),
        other => other,
    }
}

impl StreamableHttpClient for SessionClient {
    type Error = reqwest::Error;

    fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> impl Future<Output = Result<StreamableHttpPostResponse, Error>> + Send + '_ {
        let custom_headers = with_traceparent(&message, custom_headers);
        self.session_id.note(&session_id);
        self.guarded(
            self.inner
                .post_message(uri, message, session_id, auth_header, custom_headers),
        )
    }

    fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> impl Future<Output = Result<StreamableHttpPostResponse, Error>> + Send + '_ {
        let custom_headers = with_traceparent(&message, custom_headers);
        self.session_id.note(&session_id);
        self.guarded(self.inner.post_message_with_max_sse_event_size(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            max_sse_event_size,
        ))
    }

    fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> impl Future<Output = Result<StreamableHttpPostResponse, Error>> + Send + '_ {
        let custom_headers = with_traceparent(&message, custom_headers);
        self.session_id.note(&session_id);
        self.guarded(self.inner.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            limits,
        ))
    }

    // Not guarded: ending the session politely happens after it was dropped.
    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), Error> {
        self.inner
            .delete_session(uri, session_id, auth_header, custom_headers)
            .await
            .map_err(without_url)
    }

    fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> impl Future<Output = Result<BoxStream<'static, Result<Sse, SseError>>, Error>> + Send + '_
    {
        self.guarded(self.inner.get_stream(
            uri,
            session_id,
            last_event_id,
            auth_header,
            custom_headers,
        ))
    }

    fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> impl Future<Output = Result<BoxStream<'static, Result<Sse, SseError>>, Error>> + Send + '_
    {
        self.guarded(self.inner.get_stream_with_max_sse_event_size(
            uri,
            session_id,
            last_event_id,
            auth_header,
            custom_headers,
            max_sse_event_size,
        ))
    }
}
