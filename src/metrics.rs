//! The relay's Prometheus metrics (SPEC §16): one registry per app, served as text on
//! `GET /metrics`.
//!
//! Invariant: every label value is bounded whatever clients send: routes are templates, models
//! are the ones an upstream listed or the config names (else `other`), MCP servers are registered
//! labels (else `request`), upstreams are configured names (or `default`). Nothing here is
//! touched per streamed event: counts are taken per request, per run, per MCP call.

use std::collections::HashSet;
use std::sync::RwLock;
use std::time::Duration;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Metric, Registry};

type Labels = Vec<(&'static str, String)>;

/// Every metric, registered once.
pub struct Metrics {
    registry: Registry,
    http_requests: Family<Labels, Counter>,
    responses: Family<Labels, Counter>,
    in_flight: Gauge,
    response_duration: Histogram,
    ttft: Histogram,
    upstream_duration: Family<Labels, Histogram>,
    tokens: Family<Labels, Counter>,
    mcp_lists: Family<Labels, Counter>,
    mcp_calls: Family<Labels, Counter>,
    mcp_duration: Family<Labels, Histogram>,
    sse_streams: Gauge,
    store_ops: Family<Labels, Histogram>,
    rate_limited: Family<Labels, Counter>,
    limits_unavailable: Counter,
    /// Models a label may name: those an upstream listed, and those the config names.
    models: RwLock<HashSet<String>>,
}

/// How a run ended, for its metrics.
pub struct RunEnd<'a> {
    pub model: &'a str,
    pub upstream: &'a str,
    pub status: &'a str,
    pub duration: Duration,
    pub first_token: Option<Duration>,
    pub input_tokens: u64,
    pub output_tokens: u64,
}

impl Metrics {
    /// The metrics, `configured` models allowed as label values from the start. They are
    /// registered (and rendered) in this order: requests and runs, the upstream, MCP, streams and
    /// the store, then the process (build, traces).
    pub fn new(configured: impl IntoIterator<Item = String>) -> Self {
        let mut registry = Registry::default();
        let r = &mut registry;
        let http_requests = register(
            r,
            "relay_http_requests",
            "HTTP requests answered, by route and status code",
            Family::default(),
        );
        let responses = register(
            r,
            "relay_responses",
            "Responses run, by model, upstream and final status",
            Family::default(),
        );
        let in_flight = register(
            r,
            "relay_responses_in_flight",
            "Responses running now",
            Gauge::default(),
        );
        let response_duration = register(
            r,
            "relay_response_duration_seconds",
            "Time from a response's start to its terminal event",
            Histogram::new(exponential_buckets(0.05, 2.5, 12)),
        );
        let ttft = register(
            r,
            "relay_time_to_first_token_seconds",
            "Time from a response's start to its first output text delta",
            Histogram::new(exponential_buckets(0.01, 2.0, 14)),
        );
        let (upstream_duration, tokens) = register_upstream(r);
        let (mcp_lists, mcp_calls, mcp_duration) = register_mcp(r);
        let sse_streams = register(
            r,
            "relay_sse_streams_active",
            "SSE response bodies being written now",
            Gauge::default(),
        );
        let store_ops = register(
            r,
            "relay_store_operation_duration_seconds",
            "Duration of the store's reads and deletes, by backend and operation",
            Family::<Labels, Histogram>::new_with_constructor(
                (|| Histogram::new(exponential_buckets(0.0001, 3.0, 12))) as fn() -> Histogram,
            ),
        );
        let rate_limited = register(
            r,
            "relay_rate_limited",
            "Requests and MCP calls refused by a key's or tenant's limit, by tenant and limit",
            Family::default(),
        );
        let limits_unavailable = register(
            r,
            "relay_limits_unavailable",
            "Limit checks that could not reach their counters (let through, or refused under --limits-fail-closed)",
            Counter::default(),
        );
        register_process(r);
        Metrics {
            rate_limited,
            limits_unavailable,
            registry,
            http_requests,
            responses,
            in_flight,
            response_duration,
            ttft,
            upstream_duration,
            tokens,
            mcp_lists,
            mcp_calls,
            mcp_duration,
            sse_streams,
            store_ops,
            models: RwLock::new(configured.into_iter().collect()),
        }
    }

    /// The Prometheus text format of every metric.
    pub fn render(&self) -> String {
        let mut out = String::new();
        encode(&mut out, &self.registry).expect("writing to a String does not fail");
        out
    }

    pub fn http_request(&self, route: String, status: u16) {
        self.http_requests
            .get_or_create(&vec![("route", route), ("status_code", status.to_string())])
            .inc();
    }

    /// Models an upstream listed become label values.
    pub fn models_listed<'a>(&self, ids: impl IntoIterator<Item = &'a str>) {
        let mut models = self.models.write().expect("not poisoned");
        for id in ids {
            if models.len() >= 10_000 {
                break;
            }
            models.insert(id.to_string());
        }
    }

    /// `model` as a label value: itself when known, else `other`.
    fn model_label(&self, model: &str) -> String {
        if self.models.read().expect("not poisoned").contains(model) {
            model.to_string()
        } else {
            "other".into()
        }
    }

    /// A running response, counted until the guard drops.
    pub fn run_started(&self) -> InFlight {
        self.in_flight.inc();
        InFlight(self.in_flight.clone())
    }

    pub fn run_ended(&self, end: RunEnd<'_>) {
        self.responses
            .get_or_create(&vec![
                ("model", self.model_label(end.model)),
                ("upstream", end.upstream.to_string()),
                ("status", end.status.to_string()),
            ])
            .inc();
        self.response_duration.observe(end.duration.as_secs_f64());
        if let Some(t) = end.first_token {
            self.ttft.observe(t.as_secs_f64());
        }
        for (kind, n) in [("input", end.input_tokens), ("output", end.output_tokens)] {
            if n > 0 {
                self.tokens
                    .get_or_create(&vec![("token_type", kind.to_string())])
                    .inc_by(n);
            }
        }
    }

    pub fn upstream_request(&self, upstream: &str, took: Duration) {
        self.upstream_duration
            .get_or_create(&vec![("upstream", upstream.to_string())])
            .observe(took.as_secs_f64());
    }

    /// `server` is already bounded (a registered label or `request`).
    pub fn mcp_listed(&self, server: &str, ok: bool) {
        self.mcp_lists
            .get_or_create(&vec![
                ("server_label", server.to_string()),
                ("result", if ok { "ok" } else { "error" }.to_string()),
            ])
            .inc();
    }

    /// `server` is already bounded (a registered label or `request`).
    pub fn mcp_called(&self, server: &str, result: &str, took: Duration) {
        self.mcp_calls
            .get_or_create(&vec![
                ("server_label", server.to_string()),
                ("result", result.to_string()),
            ])
            .inc();
        self.mcp_duration
            .get_or_create(&vec![("server_label", server.to_string())])
            .observe(took.as_secs_f64());
    }

    pub fn store_operation(&self, backend: &'static str, operation: &'static str, took: Duration) {
        self.store_ops
            .get_or_create(&vec![
                ("backend", backend.to_string()),
                ("operation", operation.to_string()),
            ])
            .observe(took.as_secs_f64());
    }

    /// A refusal by `limit` of `tenant` (a configured name: bounded).
    pub fn rate_limited(&self, tenant: &str, limit: &'static str) {
        self.rate_limited
            .get_or_create(&vec![
                ("tenant", tenant.to_string()),
                ("limit", limit.to_string()),
            ])
            .inc();
    }

    /// A limit check whose counters could not be reached.
    pub fn limits_unavailable(&self) {
        self.limits_unavailable.inc();
    }

    /// An SSE body being written, counted until the guard drops.
    pub fn sse_stream(&self) -> InFlight {
        self.sse_streams.inc();
        InFlight(self.sse_streams.clone())
    }
}

/// Holds one unit of a gauge; gives it back when dropped.
pub struct InFlight(Gauge);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Registers `metric` under `name` with `help`, and gives it back (a handle on the same metric).
fn register<M: Metric + Clone>(r: &mut Registry, name: &str, help: &str, metric: M) -> M {
    r.register(name, help, metric.clone());
    metric
}

/// The model servers: how long they took to answer a turn, and the tokens they reported.
fn register_upstream(r: &mut Registry) -> (Family<Labels, Histogram>, Family<Labels, Counter>) {
    let duration = register(
        r,
        "relay_upstream_request_duration_seconds",
        "Time until the model server answered a turn's request (its headers)",
        Family::<Labels, Histogram>::new_with_constructor(
            (|| Histogram::new(exponential_buckets(0.01, 2.0, 14))) as fn() -> Histogram,
        ),
    );
    let tokens = register(
        r,
        "relay_tokens",
        "Tokens the model servers reported, by type",
        Family::default(),
    );
    (duration, tokens)
}

/// MCP: tool listings and tool calls by server and result, and the calls' durations.
fn register_mcp(
    r: &mut Registry,
) -> (
    Family<Labels, Counter>,
    Family<Labels, Counter>,
    Family<Labels, Histogram>,
) {
    let lists = register(
        r,
        "relay_mcp_list_tools",
        "MCP tool listings, by server and result",
        Family::default(),
    );
    let calls = register(
        r,
        "relay_mcp_tool_calls",
        "MCP tool calls, by server and result",
        Family::default(),
    );
    let duration = register(
        r,
        "relay_mcp_tool_duration_seconds",
        "Duration of MCP tool calls, by server",
        Family::<Labels, Histogram>::new_with_constructor(
            (|| Histogram::new(exponential_buckets(0.005, 2.2, 13))) as fn() -> Histogram,
        ),
    );
    (lists, calls, duration)
}

/// The process: the relay's version, and the trace export's process-wide counters.
fn register_process(r: &mut Registry) {
    let build = Family::<Labels, Gauge>::default();
    build
        .get_or_create(&vec![("version", env!("CARGO_PKG_VERSION").to_string())])
        .set(1);
    r.register("relay_build_info", "The relay's version", build);
    // Traces (`--otlp-endpoint`): process-wide counters of the one export pipeline.
    r.register(
        "relay_trace_spans_exported",
        "Trace spans the OTLP collector accepted",
        crate::otel::SPANS_EXPORTED.clone(),
    );
    r.register(
        "relay_trace_spans_dropped",
        "Trace spans lost: the export queue was full, or the collector refused or did not take their batch in time",
        crate::otel::SPANS_DROPPED.clone(),
    );
}
