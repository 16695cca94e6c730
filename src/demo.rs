//! `responses-relay demo`: the relay doing its job on a machine with no network and no model
//! server. It starts the project's scripted model ([`fake_upstream`]) and MCP test server
//! ([`mcp_test_server`]) on loopback, a relay in front of them, runs one agent run through the
//! relay's public API (the MCP server's tools listed, one called, the answer streamed), prints its
//! events and the viewer's address, and serves until stopped.
//!
//! The two test servers come from the workspace crate `relay-scripted` (`crates/scripted`), as
//! for the `fake-upstream` and `mcp-test-server` binaries and the integration tests.

use std::io::Write;
use std::net::SocketAddr;

use relay_scripted::{fake_upstream, mcp_test_server};
use serde_json::{Value, json};

use crate::api::request::McpToolParam;
use crate::{App, Config};

/// The label of the MCP test server, registered on the demo relay (`[mcp_servers.demo]`).
pub const SERVER_LABEL: &str = "demo";

/// The demo's one agent run: the scripted model calls `add` (it follows `CALL tool {args}` lines
/// in the input), then answers with the result, a delta every 40 ms.
pub fn demo_request() -> Value {
    json!({
        "model": "scripted-model?delay_ms=40",
        "input": "CALL add {\"a\": 2, \"b\": 3}",
        "tools": [{"type": "mcp", "server_label": SERVER_LABEL}],
        "stream": true,
    })
}

/// Why the demo could not run.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// The relay's address (`--listen`) cannot be bound.
    #[error("invalid value for '--listen': cannot bind {0}: {1}")]
    Listen(SocketAddr, std::io::Error),
    /// A test server did not start, or the demo run failed.
    #[error("{0}")]
    Failed(String),
}

impl DemoError {
    /// The process's exit status for it: 64 for a bad flag, as every command's.
    pub fn exit_code(&self) -> u8 {
        match self {
            DemoError::Listen(..) => 64,
            DemoError::Failed(_) => 1,
        }
    }
}

/// Starts the demo on `listen`, writes what it does to `out`, and serves until `shutdown`
/// resolves. Fails if an address cannot be bound or the run cannot be made.
pub async fn run(
    listen: SocketAddr,
    out: &mut (dyn Write + Send),
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), DemoError> {
    let failed = DemoError::Failed;
    let loopback: SocketAddr = "127.0.0.1:0".parse().expect("valid");
    // The scripted model needs no recordings: the directory is only read for `replay:` models.
    let model = fake_upstream::start_with(
        loopback,
        std::path::PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/upstream")),
        false,
    )
    .await
    .map_err(|e| failed(format!("cannot start the scripted model: {e}")))?;
    let tools = mcp_test_server::start(loopback, mcp_test_server::Options::default())
        .await
        .map_err(|e| failed(format!("cannot start the MCP test server: {e}")))?;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| DemoError::Listen(listen, e))?;
    let addr = listener.local_addr().map_err(|e| failed(e.to_string()))?;
    let app = App::new(config(&model.base_url(), &tools.url()).map_err(failed)?);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(crate::server::serve_on(listener, app, async {
        let _ = stopped.await;
    }));
    let say = |out: &mut (dyn Write + Send), line: String| {
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    };
    say(out, format!("listening on http://{addr}"));
    say(
        out,
        format!(
            "scripted model at {}, MCP test server at {}",
            model.base_url(),
            tools.url()
        ),
    );
    say(out, format!("POST /v1/responses {}", demo_request()));
    let id = stream_run(addr, out).await.map_err(failed)?;
    say(out, String::new());
    say(
        out,
        format!("this run in the viewer: http://{addr}/ui/runs/{id}"),
    );
    say(out, format!("every run:              http://{addr}/ui/"));
    say(
        out,
        format!("the playground:         http://{addr}/ui/playground"),
    );
    say(
        out,
        "serving until stopped (Ctrl-C); any OpenAI client can use this relay at its /v1".into(),
    );
    shutdown.await;
    let _ = stop.send(());
    let _ = server.await;
    tools.shutdown().await;
    model.shutdown();
    Ok(())
}

/// The demo relay's configuration: the scripted model as its upstream, the MCP test server
/// registered (reachable on loopback, and nothing else private), an in-memory store.
fn config(model_url: &str, tools_url: &str) -> Result<Config, String> {
    let mut c = Config {
        upstream_url: model_url.to_string(),
        ..Config::default()
    };
    let server = McpToolParam {
        server_label: Some(SERVER_LABEL.into()),
        server_url: Some(tools_url.into()),
        require_approval: Some(json!("never")),
        server_description: Some("The project's MCP test server: echo, add, fail, slow…".into()),
        ..Default::default()
    };
    c.mcp.registered.0.insert(
        SERVER_LABEL.into(),
        crate::mcp::RegisteredServer {
            tool: server,
            transport: crate::mcp::Transport::Auto,
        },
    );
    c.mcp.ssrf = crate::ssrf::Policy::from_flags(false, &["127.0.0.1".to_string()])?;
    Ok(c)
}

/// Sends the demo request to the relay at `addr` and prints each event as it arrives:
/// sequence number, time since the request, type, and what it carries. Returns the run's id.
async fn stream_run(addr: SocketAddr, out: &mut (dyn Write + Send)) -> Result<String, String> {
    use futures::StreamExt;
    let client = reqwest::Client::builder()
        .no_proxy()
        .build()
        .map_err(|e| e.to_string())?;
    let started = std::time::Instant::now();
    let answer = client
        .post(format!("http://{addr}/v1/responses"))
        .json(&demo_request())
        .send()
        .await
        .map_err(|e| format!("the demo run failed: {e}"))?;
    if !answer.status().is_success() {
        let status = answer.status();
        let body = answer.text().await.unwrap_or_default();
        return Err(format!("the demo run failed: {status} {body}"));
    }
    let mut body = answer.bytes_stream();
    let (mut buf, mut id) = (String::new(), None);
    while let Some(chunk) = body.next().await {
        buf.push_str(&String::from_utf8_lossy(
            &chunk.map_err(|e| format!("the demo run's stream broke: {e}"))?,
        ));
        while let Some(cut) = buf.find("\n\n") {
            let frame: String = buf.drain(..cut + 2).collect();
            let Some(data) = frame.lines().find_map(|l| l.strip_prefix("data: ")) else {
                continue;
            };
            let Ok(event) = serde_json::from_str::<Value>(data) else {
                continue;
            };
            if event["type"] == "response.created" {
                id = event["response"]["id"].as_str().map(str::to_string);
            }
            let _ = writeln!(
                out,
                "{:>4} {:>7.3}s  {}",
                event["sequence_number"].as_u64().unwrap_or_default(),
                started.elapsed().as_secs_f64(),
                describe(&event)
            );
            let _ = out.flush();
        }
    }
    id.ok_or_else(|| "the demo run sent no response.created".to_string())
}

/// One event as a line: its type and the part a reader wants (delta, item, status).
fn describe(e: &Value) -> String {
    let kind = e["type"].as_str().unwrap_or("?");
    let item = &e["item"];
    let detail = match kind {
        _ if kind.ends_with(".delta") => format!("{:?}", e["delta"].as_str().unwrap_or("")),
        "response.output_item.added" | "response.output_item.done" => {
            match item["type"].as_str().unwrap_or("") {
                "mcp_list_tools" => format!(
                    "mcp_list_tools {}: {}",
                    item["server_label"].as_str().unwrap_or(""),
                    item["tools"]
                        .as_array()
                        .map(|t| t
                            .iter()
                            .filter_map(|t| t["name"].as_str())
                            .collect::<Vec<_>>()
                            .join(", "))
                        .unwrap_or_default()
                ),
                "mcp_call" => format!(
                    "mcp_call {}.{} {} -> {}",
                    item["server_label"].as_str().unwrap_or(""),
                    item["name"].as_str().unwrap_or(""),
                    item["arguments"].as_str().unwrap_or(""),
                    item["output"].as_str().unwrap_or("…")
                ),
                other => format!("{other} {}", item["status"].as_str().unwrap_or("")),
            }
        }
        _ => e["response"]["status"]
            .as_str()
            .map(|s| format!("status {s}"))
            .unwrap_or_default(),
    };
    format!("{kind:<40} {detail}")
}
