//! OpenTelemetry traces (SPEC §16): the spans a request makes, the W3C `traceparent` read from a
//! client and sent on to the model server and MCP servers, and the export pipeline: a bounded
//! queue drained by a thread of its own that batches spans and posts them as OTLP/HTTP protobuf.
//!
//! Invariants: with no endpoint configured nothing here does any work (every helper answers
//! `Span::none()` or `None` after one relaxed load). Exporting never waits on a run: a finished
//! span is put in the queue under a short lock, never waiting on the exporter, and one that does
//! not fit, or whose batch the collector refuses or does not take in time, is counted in
//! `relay_trace_spans_dropped_total`.
//! Spans carry no prompt, output, tool argument or tool result unless `--otel-capture-content`,
//! and never a header, key or URL query.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::TraceContextExt;
use opentelemetry_http::{Bytes, HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter, SpanProcessor};
use prometheus_client::metrics::counter::Counter;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The `tracing` target of every span made for export: the log layer never shows these, the
/// OpenTelemetry layer sees only these.
pub const TARGET: &str = "relay_otel";

static ON: AtomicBool = AtomicBool::new(false);
static CAPTURE: AtomicBool = AtomicBool::new(false);
/// Spans handed to the collector.
pub static SPANS_EXPORTED: LazyLock<Counter> = LazyLock::new(Counter::default);
/// Spans lost: the queue was full, or the collector refused or did not take their batch in time.
pub static SPANS_DROPPED: LazyLock<Counter> = LazyLock::new(Counter::default);

/// Whether traces are exported (an endpoint is configured and the pipeline started).
#[inline]
pub fn on() -> bool {
    ON.load(Ordering::Relaxed)
}

/// Whether spans may carry prompt, output and tool content (`--otel-capture-content`).
#[inline]
pub fn capture_content() -> bool {
    CAPTURE.load(Ordering::Relaxed)
}

/// Where and how traces go. Read from the flags and the standard `OTEL_*` variables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceConfig {
    /// The full URL spans are posted to (`…/v1/traces`).
    pub endpoint: String,
    pub service_name: String,
    pub capture_content: bool,
    /// Most spans waiting for export (`OTEL_BSP_MAX_QUEUE_SIZE`, default 2048).
    pub max_queue: usize,
    /// Most spans per export (`OTEL_BSP_MAX_EXPORT_BATCH_SIZE`, default 512).
    pub max_batch: usize,
    /// Longest a span waits for its batch (`OTEL_BSP_SCHEDULE_DELAY` ms, default 5000).
    pub delay: Duration,
    /// Longest one export may take (`OTEL_EXPORTER_OTLP_TIMEOUT` ms, default 10000).
    pub timeout: Duration,
}

impl TraceConfig {
    /// Traces are on when `base` (`--otlp-endpoint`, or `OTEL_EXPORTER_OTLP_ENDPOINT`) or
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set; the latter is used as written, the former
    /// gets `/v1/traces`.
    pub fn from_env(
        base: Option<&str>,
        capture_content: bool,
        env: impl Fn(&str) -> Option<String>,
    ) -> Option<TraceConfig> {
        let nonempty = |k: &str| env(k).filter(|v| !v.trim().is_empty());
        let endpoint = match nonempty("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
            Some(full) => full,
            None => format!(
                "{}/v1/traces",
                base.filter(|b| !b.trim().is_empty())?.trim_end_matches('/')
            ),
        };
        let number = |k: &str, default: u64| {
            nonempty(k)
                .and_then(|v| v.trim().parse::<u64>().ok())
                .unwrap_or(default)
        };
        Some(TraceConfig {
            endpoint,
            service_name: nonempty("OTEL_SERVICE_NAME").unwrap_or_else(|| "responses-relay".into()),
            capture_content,
            max_queue: number("OTEL_BSP_MAX_QUEUE_SIZE", 2048).max(1) as usize,
            max_batch: number("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 512).max(1) as usize,
            delay: Duration::from_millis(number("OTEL_BSP_SCHEDULE_DELAY", 5000)),
            timeout: Duration::from_millis(
                number("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", 0)
                    .max(number("OTEL_EXPORTER_OTLP_TIMEOUT", 10_000)),
            ),
        })
    }
}

/// Builds the tracer provider exporting to `config.endpoint` (headers from
/// `OTEL_EXPORTER_OTLP_HEADERS` / `OTEL_EXPORTER_OTLP_TRACES_HEADERS`, as the exporter reads
/// them) and turns the span helpers on. Shut the provider down to send what is queued.
pub fn start(config: &TraceConfig) -> Result<SdkTracerProvider, String> {
    let http = reqwest::Client::builder()
        .timeout(config.timeout)
        .build()
        .map_err(|e| format!("the trace exporter's HTTP client: {e}"))?;
    let mut exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_http_client(Http(http))
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .with_endpoint(config.endpoint.clone())
        .with_timeout(config.timeout)
        .build()
        .map_err(|e| format!("invalid value for '--otlp-endpoint': {e}"))?;
    let resource = opentelemetry_sdk::Resource::builder()
        .with_service_name(config.service_name.clone())
        .with_attribute(opentelemetry::KeyValue::new(
            "service.version",
            env!("CARGO_PKG_VERSION"),
        ))
        .build();
    exporter.set_resource(&resource);
    let processor = Queue::start(exporter, config)?;
    let provider = SdkTracerProvider::builder()
        .with_resource(resource)
        .with_span_processor(processor)
        .build();
    CAPTURE.store(config.capture_content, Ordering::Relaxed);
    ON.store(true, Ordering::Relaxed);
    Ok(provider)
}

/// reqwest (the relay's own client) as the exporter's HTTP client.
#[derive(Debug)]
struct Http(reqwest::Client);

impl HttpClient for Http {
    fn send_bytes<'a, 'b>(
        &'a self,
        request: Request<Bytes>,
    ) -> Pin<Box<dyn Future<Output = Result<Response<Bytes>, HttpError>> + Send + 'b>>
    where
        'a: 'b,
        Self: 'b,
    {
        Box::pin(async move {
            let request = reqwest::Request::try_from(request)?;
            let answer = self.0.execute(request).await?;
            let mut response = Response::builder().status(answer.status());
            for (k, v) in answer.headers() {
                response = response.header(k, v);
            }
            let body = answer.bytes().await?;
            Ok(response.body(body)?)
        })
    }
}

enum Control {
    /// Export everything queued, then answer.
    Flush(std::sync::mpsc::Sender<()>),
    /// Export everything queued, answer, and end the thread.
    Stop(std::sync::mpsc::Sender<()>),
}

/// The span processor: a finished span is put in a bounded queue without waiting; a thread with
/// its own small runtime takes what is queued every `delay`, or at once when a batch is full,
/// and exports it a batch at a time. The thread is woken once per batch, not once per span (a
/// wake-up per span was a futex call and a context switch on the run's worker, for each of a
/// run's three spans). The SDK's batch processor drops silently; this one counts what it drops.
#[derive(Debug)]
struct Queue {
    shared: std::sync::Arc<Shared>,
    control: tokio::sync::mpsc::UnboundedSender<Control>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

#[derive(Debug)]
struct Shared {
    /// Finished spans waiting for the export thread (at most `max_queue`).
    spans: Mutex<Vec<SpanData>>,
    max_queue: usize,
    /// How many waiting spans make a batch worth waking the thread for.
    batch: usize,
    full: tokio::sync::Notify,
}

impl Queue {
    fn start(
        exporter: opentelemetry_otlp::SpanExporter,
        config: &TraceConfig,
    ) -> Result<Queue, String> {
        let shared = std::sync::Arc::new(Shared {
            spans: Mutex::new(Vec::new()),
            max_queue: config.max_queue,
            batch: config.max_batch.min(config.max_queue),
            full: tokio::sync::Notify::new(),
        });
        let (control, control_rx) = tokio::sync::mpsc::unbounded_channel();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("the trace exporter's runtime: {e}"))?;
        let (max_batch, delay) = (config.max_batch, config.delay);
        let queued = shared.clone();
        let thread = std::thread::Builder::new()
            .name("otlp-export".into())
            .spawn(move || rt.block_on(export_loop(exporter, queued, control_rx, max_batch, delay)))
            .map_err(|e| format!("the trace exporter's thread: {e}"))?;
        Ok(Queue {
            shared,
            control,
            thread: Mutex::new(Some(thread)),
        })
    }

    fn ask(
        &self,
        make: fn(std::sync::mpsc::Sender<()>) -> Control,
        wait: Duration,
    ) -> OTelSdkResult {
        let (tx, rx) = std::sync::mpsc::channel();
        self.control
            .send(make(tx))
            .map_err(|_| OTelSdkError::AlreadyShutdown)?;
        rx.recv_timeout(wait)
            .map_err(|_| OTelSdkError::Timeout(wait))
    }
}

impl SpanProcessor for Queue {
    fn on_start(&self, _span: &mut opentelemetry_sdk::trace::Span, _cx: &opentelemetry::Context) {}

    fn on_end(&self, span: SpanData) {
        let mut spans = self.shared.spans.lock().unwrap_or_else(|e| e.into_inner());
        if spans.len() >= self.shared.max_queue {
            drop(spans);
            drop(span);
            SPANS_DROPPED.inc();
            return;
        }
        spans.push(span);
        let full = spans.len() == self.shared.batch;
        drop(spans);
        if full {
            self.shared.full.notify_one();
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.ask(Control::Flush, Duration::from_secs(5))
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        let answered = self.ask(Control::Stop, timeout);
        if answered.is_ok()
            && let Some(thread) = self.thread.lock().unwrap().take()
        {
            let _ = thread.join();
        }
        answered
    }
}

async fn export_loop(
    exporter: opentelemetry_otlp::SpanExporter,
    queued: std::sync::Arc<Shared>,
    mut control: tokio::sync::mpsc::UnboundedReceiver<Control>,
    max_batch: usize,
    delay: Duration,
) {
    let mut tick = tokio::time::interval(delay.max(Duration::from_millis(1)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failures = 0u64;
    loop {
        let mut answer = None;
        let mut stop = false;
        tokio::select! {
            _ = queued.full.notified() => {}
            _ = tick.tick() => {}
            c = control.recv() => match c {
                Some(Control::Flush(ack)) => answer = Some(ack),
                Some(Control::Stop(ack)) => { answer = Some(ack); stop = true; }
                None => stop = true,
            },
        }
        let mut batch =
            std::mem::take(&mut *queued.spans.lock().unwrap_or_else(|e| e.into_inner()));
        while !batch.is_empty() {
            let rest = batch.split_off(batch.len().min(max_batch));
            let sending = std::mem::replace(&mut batch, rest);
            let n = sending.len() as u64;
            match exporter.export(sending).await {
                Ok(()) => {
                    SPANS_EXPORTED.inc_by(n);
                }
                Err(e) => {
                    SPANS_DROPPED.inc_by(n);
                    failures += 1;
                    // The first failure, then one in a hundred: a collector that is down must
                    // not fill the log.
                    if failures % 100 == 1 {
                        tracing::warn!(spans = n, failures, "trace export failed: {e}");
                    }
                }
            }
        }
        if let Some(ack) = answer {
            let _ = ack.send(());
        }
        if stop {
            let _ = exporter.shutdown();
            return;
        }
    }
}

/// The W3C trace context of a request's headers, if it carries a valid `traceparent`.
fn incoming(headers: &hyper::HeaderMap) -> Option<opentelemetry::Context> {
    headers.get("traceparent")?;
    let propagator = opentelemetry_sdk::propagation::TraceContextPropagator::new();
    let cx = propagator.extract(&opentelemetry_http::HeaderExtractor(headers));
    cx.span().span_context().is_valid().then_some(cx)
}

/// `traceparent` for a request made inside `span` (`None` when traces are off or the span is
/// not recorded).
pub fn traceparent(span: &Span) -> Option<String> {
    if !on() || span.is_disabled() {
        return None;
    }
    let cx = span.context();
    let otel = cx.span();
    let sc = otel.span_context();
    sc.is_valid().then(|| {
        format!(
            "00-{}-{}-{:02x}",
            sc.trace_id(),
            sc.span_id(),
            sc.trace_flags().to_u8()
        )
    })
}

/// [`traceparent`] of the current span.
pub fn traceparent_current() -> Option<String> {
    if !on() {
        return None;
    }
    traceparent(&Span::current())
}

/// The HTTP server span of one request (`POST /v1/responses`), the incoming `traceparent` its
/// parent. Make the request's log span inside it, and enter that one last: what the request
/// starts then carries the log span (which the OpenTelemetry layer passes over cheaply), and
/// spans made under it find the server span as their parent.
pub fn server_span(
    method: &str,
    route: impl FnOnce() -> String,
    headers: &hyper::HeaderMap,
) -> Span {
    if !on() {
        return Span::none();
    }
    let route = route();
    let span = tracing::info_span!(
        target: TARGET,
        "http",
        otel.name = %route,
        otel.kind = "server",
        http.request.method = method,
        http.route = route.split_once(' ').map_or("", |(_, p)| p),
        http.response.status_code = tracing::field::Empty,
        error.type = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    );
    if let Some(parent) = incoming(headers) {
        let _ = span.set_parent(parent);
    }
    span
}

/// Records the answer's status on a server span (5xx is an error).
pub fn server_answered(span: &Span, status: u16) {
    if span.is_disabled() {
        return;
    }
    span.record("http.response.status_code", status as i64);
    if status >= 500 {
        span.record("error.type", status.to_string());
        span.record("otel.status_code", "error");
    }
}

tokio::task_local! {
    /// The `invoke_agent` span of the run this task works for: the parent of the spans the run
    /// makes. A task-local, not an entered span: the run's task is polled once or more per
    /// streamed event, and every enter and exit of a span is work for the subscriber (the
    /// registry's span stack, the log layer's per-layer filter); swapping a task-local is not.
    static AGENT: Span;
}

/// Runs `work` with `agent` as the parent of the trace spans it makes.
pub fn in_agent<F: Future>(agent: Span, work: F) -> impl Future<Output = F::Output> {
    AGENT.scope(agent, work)
}

/// Makes a span inside the current run's `invoke_agent` span, if there is one.
fn under_agent(make: impl FnOnce() -> Span) -> Span {
    match AGENT.try_with(Span::clone) {
        Ok(agent) if !agent.is_disabled() => agent.in_scope(make),
        _ => make(),
    }
}

/// `invoke_agent`: one run, from its preparation to its terminal event.
pub fn agent_span(model: &str) -> Span {
    if !on() {
        return Span::none();
    }
    tracing::info_span!(
        target: TARGET,
        "invoke_agent",
        otel.name = "invoke_agent",
        otel.kind = "internal",
        gen_ai.operation.name = "invoke_agent",
        gen_ai.request.model = model,
        gen_ai.response.id = tracing::field::Empty,
        gen_ai.conversation.id = tracing::field::Empty,
        gen_ai.usage.input_tokens = tracing::field::Empty,
        gen_ai.usage.output_tokens = tracing::field::Empty,
        error.type = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    )
}

/// `chat {model}`: one model turn, from its request to the end of its stream.
pub fn chat_span(model: &str, provider: &str) -> Span {
    if !on() {
        return Span::none();
    }
    under_agent(|| {
        tracing::info_span!(
            target: TARGET,
            "chat",
            otel.name = format!("chat {model}"),
            otel.kind = "client",
            gen_ai.operation.name = "chat",
            gen_ai.provider.name = provider,
            gen_ai.request.model = model,
            gen_ai.response.id = tracing::field::Empty,
            gen_ai.usage.input_tokens = tracing::field::Empty,
            gen_ai.usage.output_tokens = tracing::field::Empty,
            gen_ai.input.messages = tracing::field::Empty,
            gen_ai.system_instructions = tracing::field::Empty,
            gen_ai.output.messages = tracing::field::Empty,
            error.type = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
        )
    })
}

/// `tools/list {label}` or `tools/call {tool}`: one MCP request (MCP semantic conventions).
pub fn mcp_span(method: &'static str, server_label: &str, tool: Option<&str>) -> Span {
    if !on() {
        return Span::none();
    }
    let name = format!("{method} {}", tool.unwrap_or(server_label));
    let span = under_agent(|| {
        tracing::info_span!(
            target: TARGET,
            "mcp",
            otel.name = name,
            otel.kind = "client",
            mcp.method.name = method,
            mcp.server.label = server_label,
            mcp.session.id = tracing::field::Empty,
            gen_ai.operation.name = tracing::field::Empty,
            gen_ai.tool.name = tracing::field::Empty,
            gen_ai.tool.call.arguments = tracing::field::Empty,
            gen_ai.tool.call.result = tracing::field::Empty,
            error.type = tracing::field::Empty,
            otel.status_code = tracing::field::Empty,
        )
    });
    if let Some(tool) = tool {
        span.record("gen_ai.operation.name", "execute_tool");
        span.record("gen_ai.tool.name", tool);
    }
    span
}

/// Marks `span` failed with `error_type` (a bounded code, never a message).
pub fn failed(span: &Span, error_type: &str) {
    if span.is_disabled() {
        return;
    }
    span.record("error.type", error_type);
    span.record("otel.status_code", "error");
}

/// Records `value` under `key` only with `--otel-capture-content`.
pub fn content(span: &Span, key: &'static str, value: impl FnOnce() -> String) {
    if span.is_disabled() || !capture_content() {
        return;
    }
    span.record(key, value());
}

/// Records a string array attribute (`gen_ai.response.finish_reasons`).
pub fn string_list(span: &Span, key: &'static str, values: &[&'static str]) {
    if span.is_disabled() {
        return;
    }
    let list = values
        .iter()
        .map(|v| opentelemetry::StringValue::from(*v))
        .collect();
    span.set_attribute(
        key,
        opentelemetry::Value::Array(opentelemetry::Array::String(list)),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            vars.iter()
                .find(|(name, _)| *name == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn traces_are_off_without_an_endpoint() {
        assert_eq!(TraceConfig::from_env(None, true, env(&[])), None);
        assert_eq!(TraceConfig::from_env(Some(" "), false, env(&[])), None);
    }

    #[test]
    fn the_base_endpoint_gets_v1_traces_and_the_traces_endpoint_is_used_as_written() {
        let c = TraceConfig::from_env(Some("http://127.0.0.1:4318/"), false, env(&[])).unwrap();
        assert_eq!(c.endpoint, "http://127.0.0.1:4318/v1/traces");
        assert_eq!(c.service_name, "responses-relay");
        assert_eq!((c.max_queue, c.max_batch), (2048, 512));
        assert_eq!(c.delay, Duration::from_secs(5));
        assert_eq!(c.timeout, Duration::from_secs(10));
        let c = TraceConfig::from_env(
            None,
            true,
            env(&[
                (
                    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                    "http://collector/otlp/traces",
                ),
                ("OTEL_SERVICE_NAME", "edge-relay"),
                ("OTEL_BSP_MAX_QUEUE_SIZE", "64"),
                ("OTEL_BSP_SCHEDULE_DELAY", "250"),
                ("OTEL_EXPORTER_OTLP_TIMEOUT", "not a number"),
            ]),
        )
        .unwrap();
        assert_eq!(c.endpoint, "http://collector/otlp/traces");
        assert_eq!(c.service_name, "edge-relay");
        assert!(c.capture_content);
        assert_eq!(c.max_queue, 64);
        assert_eq!(c.delay, Duration::from_millis(250));
        assert_eq!(c.timeout, Duration::from_secs(10));
    }
}
