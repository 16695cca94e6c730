//! OpenTelemetry traces (SPEC §16): the relay runs as a process exporting to an OTLP/HTTP
//! receiver on loopback that decodes each `ExportTraceServiceRequest`; the tests check span names,
//! attributes and parentage, the client's `traceparent` as the trace, the `traceparent` the fake
//! upstream and the rmcp test server received (header and `params._meta`), that no prompt or tool
//! content is exported without `--otel-capture-content`, and that a collector that is down costs
//! spans (counted), never a run.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use http_body_util::BodyExt;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use prost::Message;
use serde_json::{Value, json};

use crate::mcp_test_server;
use crate::mcp_test_server::McpTestServer;
use crate::support::*;

/// One exported span, flattened.
#[derive(Debug, Clone)]
struct Span {
    name: String,
    trace_id: String,
    span_id: String,
    parent: String,
    /// OTLP `SpanKind`: 2 server, 3 client.
    kind: i32,
    attrs: HashMap<String, Value>,
    /// `Status.code`: 2 is error.
    status: i32,
    /// Start and end, Unix nanoseconds.
    start: u64,
    end: u64,
}

impl Span {
    fn attr(&self, key: &str) -> &Value {
        self.attrs.get(key).unwrap_or(&Value::Null)
    }
}

fn value(v: Option<&Any>) -> Value {
    match v {
        Some(Any::StringValue(s)) => json!(s),
        Some(Any::IntValue(i)) => json!(i),
        Some(Any::BoolValue(b)) => json!(b),
        Some(Any::DoubleValue(d)) => json!(d),
        Some(Any::ArrayValue(a)) => {
            Value::Array(a.values.iter().map(|x| value(x.value.as_ref())).collect())
        }
        _ => Value::Null,
    }
}

/// An OTLP/HTTP trace receiver on loopback: every span posted to `/v1/traces`, decoded, with
/// the service name its resource gave.
struct Collector {
    addr: std::net::SocketAddr,
    spans: Arc<Mutex<Vec<Span>>>,
    services: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Collector {
    async fn start() -> Collector {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let spans = Arc::new(Mutex::new(Vec::new()));
        let services = Arc::new(Mutex::new(Vec::new()));
        let (s, n) = (spans.clone(), services.clone());
        let task = tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                let (s, n) = (s.clone(), n.clone());
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(
                        move |req: hyper::Request<hyper::body::Incoming>| {
                            let (s, n) = (s.clone(), n.clone());
                            async move {
                                assert_eq!(req.uri().path(), "/v1/traces");
                                assert_eq!(req.headers()["content-type"], "application/x-protobuf");
                                let body = req.into_body().collect().await.unwrap().to_bytes();
                                let export = ExportTraceServiceRequest::decode(body).unwrap();
                                for rs in export.resource_spans {
                                    for a in rs.resource.iter().flat_map(|r| &r.attributes) {
                                        if a.key == "service.name" {
                                            let v = value(
                                                a.value.as_ref().and_then(|v| v.value.as_ref()),
                                            );
                                            n.lock().unwrap().push(v.as_str().unwrap().to_string());
                                        }
                                    }
                                    for span in rs.scope_spans.into_iter().flat_map(|ss| ss.spans) {
                                        s.lock().unwrap().push(Span {
                                            name: span.name,
                                            trace_id: hex(&span.trace_id),
                                            span_id: hex(&span.span_id),
                                            parent: hex(&span.parent_span_id),
                                            kind: span.kind,
                                            attrs: span
                                                .attributes
                                                .iter()
                                                .map(|a| {
                                                    (
                                                        a.key.clone(),
                                                        value(
                                                            a.value
                                                                .as_ref()
                                                                .and_then(|v| v.value.as_ref()),
                                                        ),
                                                    )
                                                })
                                                .collect(),
                                            status: span.status.map(|s| s.code).unwrap_or(0),
                                            start: span.start_time_unix_nano,
                                            end: span.end_time_unix_nano,
                                        });
                                    }
                                }
                                Ok::<_, std::convert::Infallible>(
                                    hyper::Response::builder()
                                        .header("content-type", "application/x-protobuf")
                                        .body(http_body_util::Full::new(bytes::Bytes::new()))
                                        .unwrap(),
                                )
                            }
                        },
                    );
                    let io = hyper_util::rt::TokioIo::new(sock);
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(io, service)
                        .await;
                });
            }
        });
        Collector {
            addr,
            spans,
            services,
            task,
        }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn spans(&self) -> Vec<Span> {
        self.spans.lock().unwrap().clone()
    }

    /// Waits until a span named `name` arrived; then every span of `trace_id`.
    async fn trace(&self, trace_id: &str, name: &str) -> Vec<Span> {
        eventually(&format!("a '{name}' span exported"), || {
            self.spans()
                .iter()
                .any(|s| s.name == name && s.trace_id == trace_id)
        })
        .await;
        self.spans()
            .into_iter()
            .filter(|s| s.trace_id == trace_id)
            .collect()
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn named<'a>(spans: &'a [Span], name: &str) -> Vec<&'a Span> {
    spans.iter().filter(|s| s.name == name).collect()
}

fn one<'a>(spans: &'a [Span], name: &str) -> &'a Span {
    let found = named(spans, name);
    assert_eq!(found.len(), 1, "one '{name}' span: {spans:#?}");
    found[0]
}

/// `(trace id, parent span id)` of a `traceparent` value.
fn parts(traceparent: &str) -> (String, String) {
    let p: Vec<&str> = traceparent.split('-').collect();
    assert_eq!(p.len(), 4, "{traceparent}");
    assert_eq!((p[0], p[3]), ("00", "01"), "{traceparent}");
    (p[1].to_string(), p[2].to_string())
}

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

/// The relay exporting to `collector` (batches every 50 ms), with `extra` flags.
fn traced_relay(up: &str, collector: &str, extra: &[&str], env: &[(&str, &str)]) -> RelayProcess {
    let mut args = serve_args(
        up,
        "memory",
        &["--mcp-allow-private-networks", "--otlp-endpoint", collector],
    );
    args.extend_from_slice(extra);
    let mut env = env.to_vec();
    env.push(("OTEL_BSP_SCHEDULE_DELAY", "50"));
    spawn_relay(&args, &env, std::process::Stdio::null())
}

const PROMPT: &str = "CALL add {\"a\":20,\"b\":22}";

/// Streams one run that lists the MCP server's tools, calls `add` and answers, sent with the
/// client's `traceparent`; returns the response's id.
async fn run_with_a_tool_call(relay: &RelayProcess, mcp_url: &str) -> String {
    let body = json!({"model": "fake-model", "input": PROMPT, "stream": true,
        "tools": [{"type": "mcp", "server_label": "math", "server_url": mcp_url,
                   "require_approval": "never"}]});
    let text = client()
        .post(relay.url("/v1/responses"))
        .header("traceparent", format!("00-{TRACE}-{CLIENT_SPAN}-01"))
        .json(&body)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let sse = parse_sse(&text);
    let folded = check_events(&sse.events);
    assert_eq!(folded["status"], "completed", "{folded}");
    assert_eq!(
        output_types(&folded),
        ["mcp_list_tools", "mcp_call", "message"]
    );
    folded["id"].as_str().unwrap().to_string()
}

/// The MCP server got the trace on tools/list and tools/call, in the header and in `_meta`,
/// each naming its span (`list`, `call`) as the parent; the server has no session.
fn mcp_requests_carry_their_spans(mcp: &McpTestServer, list: &Span, call: &Span) {
    for (method, span) in [("tools/list", list), ("tools/call", call)] {
        let seen: Vec<_> = mcp
            .requests_seen()
            .into_iter()
            .filter(|r| r.rpc_method == method)
            .collect();
        assert_eq!(seen.len(), 1, "{method}: {seen:?}");
        let header = seen[0]
            .header("traceparent")
            .expect("traceparent header at the MCP server")
            .to_string();
        assert_eq!(parts(&header), (TRACE.to_string(), span.span_id.clone()));
        assert_eq!(seen[0].meta_traceparent.as_deref(), Some(header.as_str()));
        // The server speaks the 2026-07-28 lifecycle, which has no session: no session id.
        assert!(seen[0].headers.iter().all(|(k, _)| k != "mcp-session-id"));
        assert_eq!(span.attr("mcp.session.id"), &Value::Null, "{span:#?}");
    }
}

/// Every span lies within its parent's time, and none carries content (the prompt, the tool's
/// arguments) without --otel-capture-content.
fn spans_nest_and_carry_no_content(spans: &[Span]) {
    // Every span lies within its parent's time: a span ends when the last handle to it goes (a
    // chat span's with its turn's stream, invoke_agent's with the run), not at its last exit.
    for s in spans {
        if let Some(parent) = spans.iter().find(|p| p.span_id == s.parent) {
            assert!(
                parent.start <= s.start && s.end <= parent.end,
                "{} outside {}: {spans:#?}",
                s.name,
                parent.name
            );
        }
        assert!(s.start <= s.end, "{s:#?}");
    }

    // No content without --otel-capture-content: neither the prompt nor the tool's arguments.
    for s in spans {
        for (k, v) in &s.attrs {
            let text = v.to_string();
            assert!(
                !text.contains("CALL add") && !text.contains("\\\"a\\\":20"),
                "{} has content in {k}: {text}",
                s.name
            );
        }
        assert!(s.attrs.keys().all(|k| !k.starts_with("gen_ai.input")
            && !k.starts_with("gen_ai.output")
            && !k.starts_with("gen_ai.tool.call.")));
    }
}

#[tokio::test]
async fn a_run_is_one_trace_under_the_clients_traceparent_with_agent_turn_and_mcp_spans() {
    let up = upstream().await;
    let mcp = mcp_server(Default::default()).await;
    let collector = Collector::start().await;
    let relay = traced_relay(&up.base_url(), &collector.url(), &[], &[]);
    let id = run_with_a_tool_call(&relay, &mcp.url()).await;
    let spans = collector.trace(TRACE, "POST /v1/responses").await;

    // The HTTP server span: the client's span is its parent.
    let server = one(&spans, "POST /v1/responses");
    assert_eq!(server.parent, CLIENT_SPAN);
    assert_eq!(server.kind, 2, "SERVER");
    assert_eq!(server.attr("http.request.method"), "POST");
    assert_eq!(server.attr("http.route"), "/v1/responses");
    assert_eq!(server.attr("http.response.status_code"), 200);

    // invoke_agent under it, with the run's id and its usage.
    let agent = one(&spans, "invoke_agent");
    assert_eq!(agent.parent, server.span_id);
    assert_eq!(agent.attr("gen_ai.operation.name"), "invoke_agent");
    assert_eq!(agent.attr("gen_ai.request.model"), "fake-model");
    assert_eq!(agent.attr("gen_ai.response.id"), id.as_str());
    assert!(agent.attr("gen_ai.usage.input_tokens").as_i64().unwrap() > 0);
    assert_ne!(agent.status, 2);

    // Two model turns (the call, then the answer), children of invoke_agent.
    let chats = named(&spans, "chat fake-model");
    assert_eq!(chats.len(), 2, "{spans:#?}");
    let mut reasons = Vec::new();
    for chat in &chats {
        assert_eq!(chat.parent, agent.span_id);
        assert_eq!(chat.kind, 3, "CLIENT");
        assert_eq!(chat.attr("gen_ai.operation.name"), "chat");
        assert_eq!(chat.attr("gen_ai.request.model"), "fake-model");
        assert_eq!(chat.attr("gen_ai.provider.name"), "default");
        assert!(chat.attr("gen_ai.usage.input_tokens").as_i64().unwrap() > 0);
        assert!(chat.attr("gen_ai.usage.output_tokens").as_i64().unwrap() > 0);
        reasons.push(chat.attr("gen_ai.response.finish_reasons").clone());
    }
    reasons.sort_by_key(|r| r.to_string());
    assert_eq!(reasons, [json!(["stop"]), json!(["tool_calls"])]);

    // The MCP spans, children of invoke_agent too.
    let list = one(&spans, "tools/list math");
    assert_eq!(list.parent, agent.span_id);
    assert_eq!(list.attr("mcp.method.name"), "tools/list");
    let call = one(&spans, "tools/call add");
    assert_eq!(call.parent, agent.span_id);
    assert_eq!(call.attr("mcp.method.name"), "tools/call");
    assert_eq!(call.attr("gen_ai.operation.name"), "execute_tool");
    assert_eq!(call.attr("gen_ai.tool.name"), "add");
    assert_ne!(call.status, 2);

    // The fake upstream got each turn's traceparent: this trace, its chat span the parent.
    let turns: Vec<_> = up
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with("/chat/completions"))
        .collect();
    assert_eq!(turns.len(), 2);
    let mut parents: Vec<String> = turns
        .iter()
        .map(|r| {
            let (trace, parent) = parts(r.header("traceparent").expect("traceparent upstream"));
            assert_eq!(trace, TRACE);
            parent
        })
        .collect();
    let mut chat_ids: Vec<String> = chats.iter().map(|c| c.span_id.clone()).collect();
    // Each chat span carries the id the fake upstream gave that turn's answer (`chatcmpl-fakeN`
    // for its Nth answer, on every chunk).
    for (n, parent) in parents.iter().enumerate() {
        let chat = chats.iter().find(|c| &c.span_id == parent).unwrap();
        assert_eq!(
            chat.attr("gen_ai.response.id"),
            format!("chatcmpl-fake{}", n + 1).as_str(),
            "{chat:#?}"
        );
    }
    parents.sort();
    chat_ids.sort();
    assert_eq!(parents, chat_ids);

    mcp_requests_carry_their_spans(&mcp, list, call);
    assert_eq!(collector.services.lock().unwrap()[0], "responses-relay");

    spans_nest_and_carry_no_content(&spans);
}

#[tokio::test]
async fn a_responses_upstreams_answer_ids_and_an_mcp_session_id_are_on_their_spans() {
    let up = upstream().await;
    // A server of an earlier revision: the `initialize` handshake, a session over Streamable HTTP.
    let mcp = mcp_server(mcp_test_server::Options {
        handshake_only: true,
        ..Default::default()
    })
    .await;
    let collector = Collector::start().await;
    let relay = traced_relay(
        &up.base_url(),
        &collector.url(),
        &["--upstream-api", "responses"],
        &[],
    );
    run_with_a_tool_call(&relay, &mcp.url()).await;
    let spans = collector.trace(TRACE, "POST /v1/responses").await;

    // Each chat span carries the `response.id` of its turn's Responses stream (`resp_fakeN` for
    // the fake upstream's Nth answer), told apart by the traceparent each turn sent.
    let chats = named(&spans, "chat fake-model");
    assert_eq!(chats.len(), 2, "{spans:#?}");
    let turns: Vec<_> = up
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with("/responses"))
        .collect();
    assert_eq!(turns.len(), 2);
    for (n, turn) in turns.iter().enumerate() {
        let (_, parent) = parts(turn.header("traceparent").expect("traceparent upstream"));
        let chat = chats.iter().find(|c| c.span_id == parent).unwrap();
        assert_eq!(
            chat.attr("gen_ai.response.id"),
            format!("resp_fake{}", n + 1).as_str(),
            "{chat:#?}"
        );
    }

    // tools/list and tools/call carry the session id the server issued: the `mcp-session-id`
    // their requests arrived with, one session for both.
    let mut ids = Vec::new();
    for (method, name) in [
        ("tools/list", "tools/list math"),
        ("tools/call", "tools/call add"),
    ] {
        let seen: Vec<_> = mcp
            .requests_seen()
            .into_iter()
            .filter(|r| r.rpc_method == method)
            .collect();
        assert_eq!(seen.len(), 1, "{method}: {seen:?}");
        let issued = seen[0]
            .header("mcp-session-id")
            .expect("a session id at the MCP server")
            .to_string();
        assert!(!issued.is_empty());
        let span = one(&spans, name);
        assert_eq!(span.attr("mcp.session.id"), issued.as_str(), "{span:#?}");
        ids.push(issued);
    }
    assert_eq!(ids[0], ids[1]);
    assert_eq!(mcp.count("initialize"), 1);
}

#[tokio::test]
async fn with_otel_capture_content_spans_carry_the_prompt_the_answer_and_the_tool_call() {
    let up = upstream().await;
    let mcp = mcp_server(Default::default()).await;
    let collector = Collector::start().await;
    let relay = traced_relay(
        &up.base_url(),
        &collector.url(),
        &["--otel-capture-content"],
        &[("OTEL_SERVICE_NAME", "relay-under-test")],
    );
    run_with_a_tool_call(&relay, &mcp.url()).await;
    let spans = collector.trace(TRACE, "POST /v1/responses").await;
    let chats = named(&spans, "chat fake-model");
    assert_eq!(chats.len(), 2);
    for chat in &chats {
        let input = chat.attr("gen_ai.input.messages").as_str().unwrap();
        assert!(input.contains("CALL add"), "{input}");
        let output: Value =
            serde_json::from_str(chat.attr("gen_ai.output.messages").as_str().unwrap()).unwrap();
        assert_eq!(output[0]["role"], "assistant");
    }
    let call = one(&spans, "tools/call add");
    let args: Value =
        serde_json::from_str(call.attr("gen_ai.tool.call.arguments").as_str().unwrap()).unwrap();
    assert_eq!(args, json!({"a": 20, "b": 22}));
    assert!(
        call.attr("gen_ai.tool.call.result")
            .as_str()
            .unwrap()
            .contains("42"),
        "{:?}",
        call.attrs
    );
    assert_eq!(collector.services.lock().unwrap()[0], "relay-under-test");
}

#[tokio::test]
async fn a_tool_error_marks_the_call_span_and_a_rejected_request_its_server_span() {
    let up = upstream().await;
    let mcp = mcp_server(Default::default()).await;
    let collector = Collector::start().await;
    let relay = traced_relay(&up.base_url(), &collector.url(), &[], &[]);
    let body = json!({"model": "fake-model", "input": "CALL fail {}", "stream": false,
        "tools": [{"type": "mcp", "server_label": "math", "server_url": mcp.url(),
                   "require_approval": "never"}]});
    let r = client()
        .post(relay.url("/v1/responses"))
        .header("traceparent", format!("00-{TRACE}-{CLIENT_SPAN}-01"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let spans = collector.trace(TRACE, "tools/call fail").await;
    let call = one(&spans, "tools/call fail");
    assert_eq!(call.attr("error.type"), "tool_error");
    assert_eq!(call.status, 2, "ERROR");

    // A request the relay turns down is still a server span, with its status.
    let other = "0af7651916cd43dd8448eb211c80319c";
    let r = client()
        .post(relay.url("/v1/responses"))
        .header("traceparent", format!("00-{other}-{CLIENT_SPAN}-01"))
        .json(&json!({"model": "fake-model"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    let spans = collector.trace(other, "POST /v1/responses").await;
    assert_eq!(
        one(&spans, "POST /v1/responses").attr("http.response.status_code"),
        400
    );
}

/// The relay's `/metrics` value of `name` (0 when absent).
async fn metric(relay: &RelayProcess, name: &str) -> f64 {
    let text = fetch_text(&relay.url("/metrics")).await;
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test]
async fn a_collector_that_never_answers_costs_spans_counted_as_dropped_never_a_run() {
    let up = upstream().await;
    // Accepts and never answers; the exporter gives up after 200 ms; the queue holds 4 spans.
    let hole = BlackHole::start().await;
    let base = hole.url().trim_end_matches("/mcp").to_string();
    let relay = traced_relay(
        &up.base_url(),
        &base,
        &[],
        &[
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "200"),
            ("OTEL_BSP_MAX_QUEUE_SIZE", "4"),
        ],
    );
    for i in 0..10 {
        let (status, r) = call(
            &relay.url("/v1/responses"),
            None,
            Some(&json!({"model": "fake-model", "input": format!("hello {i}")})),
        )
        .await;
        assert_eq!((status, &r["status"]), (200, &json!("completed")), "{r}");
    }
    // 10 runs made 30 spans (server, invoke_agent, chat): none reached a collector.
    let mut dropped = 0.0;
    for _ in 0..100 {
        dropped = metric(&relay, "relay_trace_spans_dropped_total").await;
        if dropped >= 30.0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(dropped >= 30.0, "dropped {dropped}");
    assert_eq!(
        metric(&relay, "relay_trace_spans_exported_total").await,
        0.0
    );
    assert!(hole.accepted.load(std::sync::atomic::Ordering::SeqCst) > 0);
}

#[tokio::test]
async fn without_an_endpoint_no_traceparent_goes_upstream() {
    let up = upstream().await;
    let relay = spawn_relay(
        &[
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--upstream-url",
            &up.base_url(),
            "--store",
            "memory",
        ],
        &[],
        std::process::Stdio::null(),
    );
    let r = client()
        .post(relay.url("/v1/responses"))
        .header("traceparent", format!("00-{TRACE}-{CLIENT_SPAN}-01"))
        .json(&json!({"model": "fake-model", "input": "hello"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let turns = up.requests();
    assert_eq!(turns.len(), 1);
    assert_eq!(turns[0].header("traceparent"), None);
    assert_eq!(
        metric(&relay, "relay_trace_spans_exported_total").await,
        0.0
    );
}

#[test]
fn the_otlp_endpoint_and_content_capture_come_from_flags_or_the_config_file() {
    let c = serve_config(&["--otlp-endpoint", "http://127.0.0.1:4318/"], "").unwrap();
    let t = c.traces.expect("traces on");
    assert_eq!(t.endpoint, "http://127.0.0.1:4318/v1/traces");
    assert!(!t.capture_content);
    let c = serve_config(
        &[],
        "otlp_endpoint = \"http://collector:4318\"\notel_capture_content = true\n",
    )
    .unwrap();
    let t = c.traces.expect("traces on");
    assert_eq!(t.endpoint, "http://collector:4318/v1/traces");
    assert!(t.capture_content);
    // A flag turns off what the file turns on.
    let c = serve_config(
        &["--otel-capture-content=false"],
        "otlp_endpoint = \"http://collector:4318\"\notel_capture_content = true\n",
    )
    .unwrap();
    assert!(!c.traces.unwrap().capture_content);
    assert!(serve_config(&[], "").unwrap().traces.is_none());
}

#[tokio::test]
async fn an_unsampled_traceparent_is_followed_nothing_exported_and_passed_on_unsampled() {
    let up = upstream().await;
    let collector = Collector::start().await;
    let relay = traced_relay(&up.base_url(), &collector.url(), &[], &[]);
    let unsampled = "5b8aa5a2d2c872e8321cf37308d69df2";
    for (trace, flags) in [(unsampled, "00"), (TRACE, "01")] {
        let r = client()
            .post(relay.url("/v1/responses"))
            .header("traceparent", format!("00-{trace}-{CLIENT_SPAN}-{flags}"))
            .json(&json!({"model": "fake-model", "input": "hello"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    // The sampled request's spans arrive; by then the unsampled one's would have too.
    collector.trace(TRACE, "POST /v1/responses").await;
    assert!(collector.spans().iter().all(|s| s.trace_id != unsampled));
    let sent: Vec<String> = up
        .requests()
        .iter()
        .map(|r| {
            r.header("traceparent")
                .expect("traceparent upstream")
                .to_string()
        })
        .collect();
    assert_eq!(sent.len(), 2);
    let p: Vec<&str> = sent[0].split('-').collect();
    assert_eq!((p[1], p[3]), (unsampled, "00"), "{}", sent[0]);
    assert_ne!(p[2], CLIENT_SPAN);
}
