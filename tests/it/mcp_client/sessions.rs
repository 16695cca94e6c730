//! Listing and calling tools through the pool: pagination, filters, credentials, timeouts, the
//! error shape of each failure, session reuse and eviction, and the text a result becomes.

use super::*;

use std::collections::HashSet;
use std::time::{Duration, Instant};

use mcp_test_server::Options;
use responses_relay::api::response::McpCallError;
use responses_relay::mcp::{
    PoolConfig, ToolFilter, ToolResult, error_text, result_images, result_text,
};
use serde_json::{Value, json};

// ---------------------------------------------------------------- listing

#[tokio::test]
async fn listing_follows_pagination_and_reports_read_only() {
    let srv = mcp_server(Options {
        catalog: 35,
        ..Default::default()
    })
    .await;
    let tools = pool().list_tools(&spec(&srv.url()), T).await.unwrap();
    assert_eq!(tools.len(), 35 + 9);
    let names: HashSet<_> = tools.iter().map(|t| t.name.as_str()).collect();
    assert!(names.contains("tool_000") && names.contains("tool_034") && names.contains("echo"));
    assert_eq!(srv.count("tools/list"), 5, "44 tools in pages of 10");
    let echo = tools.iter().find(|t| t.name == "echo").unwrap();
    assert!(echo.read_only);
    assert_eq!(echo.description.as_deref(), Some("Echoes the text back"));
    assert_eq!(echo.input_schema["properties"]["text"]["type"], "string");
    assert!(!tools.iter().find(|t| t.name == "add").unwrap().read_only);
}

#[tokio::test]
async fn a_server_repeating_a_tools_list_cursor_fails_the_listing_instead_of_paging_forever() {
    let srv = mcp_server(Options {
        catalog: 35,
        repeat_cursor: true,
        ..Default::default()
    })
    .await;
    let err = pool().list_tools(&spec(&srv.url()), T).await.unwrap_err();
    assert!(
        err.message.contains("repeated a tools/list cursor"),
        "{err:?}"
    );
    assert_eq!(
        srv.count("tools/list"),
        2,
        "page 1 names page 2, which names itself"
    );
}

#[tokio::test]
async fn allowed_tools_filter_the_listed_tools() {
    let srv = mcp_server(Options::default()).await;
    let tools = pool().list_tools(&spec(&srv.url()), T).await.unwrap();
    let keep = |f: &ToolFilter| -> Vec<String> {
        let mut v: Vec<String> = tools
            .iter()
            .filter(|t| f.allows(&t.name, t.read_only))
            .map(|t| t.name.clone())
            .collect();
        v.sort();
        v
    };
    assert_eq!(
        keep(&ToolFilter {
            tool_names: Some(vec!["add".into(), "echo".into(), "nope".into()]),
            read_only: None
        }),
        ["add", "echo"]
    );
    assert_eq!(
        keep(&ToolFilter {
            tool_names: None,
            read_only: Some(true)
        }),
        ["echo"]
    );
    assert_eq!(
        keep(&ToolFilter {
            tool_names: Some(vec!["add".into()]),
            read_only: Some(true)
        }),
        Vec::<String>::new()
    );
    assert_eq!(keep(&ToolFilter::default()).len(), 9);
}

#[tokio::test]
async fn bearer_token_and_custom_headers_reach_the_server() {
    let srv = mcp_server(Options {
        require_bearer: Some("s3cret-token".into()),
        ..Default::default()
    })
    .await;
    let mut s = spec(&srv.url());
    s.authorization = Some("s3cret-token".into());
    s.headers = vec![
        ("X-Team".into(), "blue-team-value".into()),
        ("x-other".into(), "2".into()),
    ];
    let pool = pool();
    let r = call_ok(&pool, &s, "whoami", "{}").await;
    assert_eq!(text_of(&r), "authorized; headers: x-other,x-team");
    let seen = srv.requests_seen();
    assert!(!seen.is_empty());
    for req in seen.iter().filter(|r| r.http_method == "POST") {
        assert!(
            req.headers
                .iter()
                .any(|(k, v)| k == "x-team" && v == "blue-team-value"),
            "{req:?}"
        );
        assert!(
            req.headers
                .iter()
                .any(|(k, v)| k == "authorization" && v == "***"),
            "{req:?}"
        );
    }
}

#[tokio::test]
async fn a_bearer_token_sent_as_an_authorization_header_reaches_the_server() {
    // Clients written for other gateways put the token in `headers` (LM Studio, LiteLLM users).
    let srv = mcp_server(Options {
        require_bearer: Some("header-token".into()),
        ..Default::default()
    })
    .await;
    let mut s = spec(&srv.url());
    s.headers = vec![("Authorization".into(), "Bearer header-token".into())];
    let pool = pool();
    let listed = pool.list_tools(&s, T).await.unwrap();
    assert!(listed.iter().any(|t| t.name == "whoami"));
    let r = call_ok(&pool, &s, "whoami", "{}").await;
    assert_eq!(text_of(&r), "authorized; headers: ");
}

#[tokio::test]
async fn a_server_refusing_the_post_is_tried_as_a_legacy_sse_server_and_its_status_reported() {
    for status in [404, 405] {
        let srv = mcp_server(Options {
            fail_http: Some(status),
            ..Default::default()
        })
        .await;
        let err = pool().list_tools(&spec(&srv.url()), T).await.unwrap_err();
        assert_eq!(err.status, Some(status));
        assert!(
            err.message.contains(&format!("Http status code: {status}")),
            "{err:?}"
        );
        let methods: Vec<String> = srv
            .requests_seen()
            .into_iter()
            .map(|r| r.http_method)
            .collect();
        assert_eq!(
            methods.last().map(String::as_str),
            Some("GET"),
            "the SSE stream was asked for last: {methods:?}"
        );
    }
}

#[tokio::test]
async fn listing_without_the_token_fails_with_401() {
    let srv = mcp_server(Options {
        require_bearer: Some("s3cret".into()),
        ..Default::default()
    })
    .await;
    let err = pool().list_tools(&spec(&srv.url()), T).await.unwrap_err();
    assert_eq!(err.status, Some(401));
    assert_eq!(
        err.message,
        "Error retrieving tool list from MCP server: 'test'. Http status code: 401 (Unauthorized)"
    );

    let mut wrong = spec(&srv.url());
    wrong.authorization = Some("not-the-token".into());
    let err = pool().list_tools(&wrong, T).await.unwrap_err();
    assert_eq!(err.status, Some(401));
    assert!(!err.message.contains("not-the-token"));
}

#[tokio::test]
async fn listing_an_unreachable_server_names_it_without_secrets() {
    let addr = dead_port().await;
    let mut s = spec(&format!("http://{addr}/mcp?api_key=hunter22"));
    s.label = "down".into();
    s.authorization = Some("tok-secret-1".into());
    let err = pool().list_tools(&s, T).await.unwrap_err();
    assert_eq!(err.status, None);
    assert!(
        err.message
            .starts_with("Error retrieving tool list from MCP server: 'down'. "),
        "{}",
        err.message
    );
    for secret in ["hunter22", "api_key", "tok-secret-1"] {
        assert!(!err.message.contains(secret), "{}", err.message);
    }
}

#[tokio::test]
async fn listing_a_server_that_never_answers_times_out() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let hole = tokio::spawn(async move {
        let mut keep = Vec::new();
        while let Ok((s, _)) = listener.accept().await {
            keep.push(s);
        }
    });
    let started = Instant::now();
    let err = pool()
        .list_tools(
            &spec(&format!("http://{addr}/mcp")),
            Duration::from_millis(300),
        )
        .await
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(3));
    assert!(err.timed_out);
    assert_eq!(
        err.message,
        "Error retrieving tool list from MCP server: 'test'. Timed out after 300ms."
    );
    hole.abort();
}

// ---------------------------------------------------------------- calls

#[tokio::test]
async fn calls_return_text_and_structured_results() {
    let srv = mcp_server(Options::default()).await;
    let s = spec(&srv.url());
    let pool = pool();
    let r = call_ok(&pool, &s, "echo", r#"{"text":"hello"}"#).await;
    assert_eq!(text_of(&r), "hello");
    let r = call_ok(&pool, &s, "add", r#"{"a":2,"b":40}"#).await;
    assert_eq!(r.structured_content, Some(json!({"sum": 42.0})));
    assert_eq!(
        serde_json::from_str::<Value>(&text_of(&r)).unwrap(),
        json!({"sum": 42.0})
    );
}

#[tokio::test]
async fn each_call_failure_maps_to_its_openai_error_shape() {
    let srv = mcp_server(Options::default()).await;
    let s = spec(&srv.url());
    let pool = pool();

    let e = pool.call_tool(&s, "fail", "{}", T).await.unwrap_err();
    assert_eq!(
        e,
        McpCallError::McpToolExecutionError {
            content: json!([{"type": "text", "text": "tool failed on purpose"}])
        }
    );
    assert_eq!(error_text(&e), "Error: tool failed on purpose");

    let e = pool.call_tool(&s, "boom", "{}", T).await.unwrap_err();
    assert_eq!(
        e,
        McpCallError::McpProtocolError {
            code: -32042,
            message: "boom".into()
        }
    );
    assert_eq!(error_text(&e), "Error: MCP error -32042: boom");

    let e = pool
        .call_tool(&s, "no_such_tool", "{}", T)
        .await
        .unwrap_err();
    assert!(
        matches!(e, McpCallError::McpProtocolError { code: -32602, .. }),
        "{e:?}"
    );

    // Arguments that are not a JSON object never reach the server.
    let calls_before = srv.count("tools/call");
    for bad in ["[1,2]", "\"text\"", "{not json"] {
        let e = pool.call_tool(&s, "echo", bad, T).await.unwrap_err();
        assert!(
            matches!(e, McpCallError::McpProtocolError { code: -32602, .. }),
            "{bad}: {e:?}"
        );
    }
    assert_eq!(srv.count("tools/call"), calls_before);
    // Empty arguments mean `{}`.
    assert!(pool.call_tool(&s, "image", "", T).await.is_ok());
}

#[tokio::test]
async fn http_failures_map_to_http_error_with_the_status() {
    for status in [500u16, 503, 403] {
        let srv = mcp_server(Options {
            fail_http: Some(status),
            ..Default::default()
        })
        .await;
        let e = pool()
            .call_tool(&spec(&srv.url()), "echo", r#"{"text":"x"}"#, T)
            .await
            .unwrap_err();
        match e {
            McpCallError::HttpError { code, .. } => assert_eq!(code, status),
            other => panic!("{status}: {other:?}"),
        }
        let err = pool().list_tools(&spec(&srv.url()), T).await.unwrap_err();
        assert_eq!(err.status, Some(status));
    }
}

#[tokio::test]
async fn a_refused_connection_is_http_error_code_0() {
    let addr = dead_port().await;
    let mut s = spec(&format!("http://{addr}/mcp?token=qwerty123"));
    s.headers = vec![("X-Key".into(), "header-secret".into())];
    let e = pool().call_tool(&s, "echo", "{}", T).await.unwrap_err();
    let McpCallError::HttpError { code, message } = &e else {
        panic!("{e:?}")
    };
    assert_eq!(*code, 0u16);
    assert!(message.to_lowercase().contains("connect"), "{message}");
    assert!(
        !message.contains("qwerty123") && !message.contains("header-secret"),
        "{message}"
    );
    assert!(error_text(&e).starts_with("Error: could not reach the MCP server"));
}

#[tokio::test]
async fn a_slow_call_times_out_and_the_server_sees_the_cancellation() {
    // The handshake era cancels with notifications/cancelled; 2026-07-28 by closing the stream.
    for handshake_only in [true, false] {
        let srv = mcp_server(Options {
            handshake_only,
            ..Default::default()
        })
        .await;
        let s = spec(&srv.url());
        let pool = pool();
        let started = Instant::now();
        let e = pool
            .call_tool(&s, "slow", r#"{"ms":10000}"#, Duration::from_millis(400))
            .await
            .unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(3));
        assert_eq!(
            e,
            McpCallError::McpProtocolError {
                code: -32001,
                message: "Request timed out after 400ms".into()
            }
        );
        eventually_within(
            Duration::from_secs(5),
            "the server's slow call to be cancelled",
            || srv.cancelled_calls() == 1,
        )
        .await;
        assert_eq!(srv.count("notifications/cancelled") >= 1, handshake_only);
        // The session is still good for the next call.
        assert_eq!(
            text_of(&call_ok(&pool, &s, "echo", r#"{"text":"after"}"#).await),
            "after"
        );
        assert_eq!(srv.sessions_begun(), 1);
    }
}

// ---------------------------------------------------------------- pooling

#[tokio::test]
async fn the_pool_reuses_one_session_per_server_and_credentials() {
    let srv = mcp_server(Options::default()).await;
    let pool = pool();
    let s = spec(&srv.url());
    call_ok(&pool, &s, "echo", r#"{"text":"1"}"#).await;
    pool.clone()
        .call_tool(&s, "echo", r#"{"text":"2"}"#, T)
        .await
        .unwrap();
    pool.list_tools(&s, T).await.unwrap();
    assert_eq!(srv.sessions_begun(), 1);
    assert_eq!(pool.len(), 1);

    // Concurrent calls share the session too.
    let calls = (0..4).map(|i| {
        let (pool, s) = (pool.clone(), s.clone());
        async move {
            pool.call_tool(&s, "echo", &format!(r#"{{"text":"{i}"}}"#), T)
                .await
        }
    });
    for r in futures::future::join_all(calls).await {
        r.unwrap();
    }
    assert_eq!(srv.sessions_begun(), 1);

    // Other headers: another session.
    let mut other = s.clone();
    other.headers = vec![("X-Tenant".into(), "b".into())];
    call_ok(&pool, &other, "echo", r#"{"text":"3"}"#).await;
    assert_eq!(srv.sessions_begun(), 2);
    assert_eq!(pool.len(), 2);
}

#[tokio::test]
async fn a_dead_session_is_remade_after_the_server_restarts() {
    let srv = mcp_server(Options::default()).await;
    let addr = srv.addr;
    let s = spec(&srv.url());
    let pool = pool();
    call_ok(&pool, &s, "echo", r#"{"text":"before"}"#).await;
    srv.shutdown().await;

    let e = pool
        .call_tool(&s, "echo", r#"{"text":"down"}"#, T)
        .await
        .unwrap_err();
    assert!(
        matches!(e, McpCallError::HttpError { code: 0, .. }),
        "{e:?}"
    );

    let srv = mcp_test_server::start(addr, Options::default())
        .await
        .expect("restart on the same port");
    let r = call_ok(&pool, &s, "echo", r#"{"text":"after"}"#).await;
    assert_eq!(text_of(&r), "after");
    assert_eq!(
        srv.sessions_begun(),
        1,
        "a new session was made on the new server"
    );
}

#[tokio::test]
async fn a_session_survives_a_server_restart_while_idle() {
    // A handshake session's id is forgotten by the restarted server; a 2026-07-28 client has no
    // session to lose.
    for handshake_only in [true, false] {
        let options = || Options {
            handshake_only,
            ..Default::default()
        };
        let srv = mcp_server(options()).await;
        let addr = srv.addr;
        let s = spec(&srv.url());
        let pool = pool();
        call_ok(&pool, &s, "echo", r#"{"text":"before"}"#).await;
        srv.shutdown().await;
        let srv = mcp_test_server::start(addr, options())
            .await
            .expect("restart on the same port");
        // The old session id is unknown to the new server: the call still succeeds, at most one retry.
        let mut ok = false;
        for _ in 0..2 {
            if pool
                .call_tool(&s, "echo", r#"{"text":"x"}"#, T)
                .await
                .is_ok()
            {
                ok = true;
                break;
            }
        }
        assert!(ok);
        assert_eq!(srv.sessions_begun() >= 1, handshake_only);
    }
}

#[tokio::test]
async fn idle_sessions_are_evicted_and_the_pool_is_bounded() {
    let srv = mcp_server(Options::default()).await;
    let s = spec(&srv.url());
    let pool = pool_with(PoolConfig {
        idle_ttl: Duration::from_millis(200),
        ..PoolConfig::default()
    });
    call_ok(&pool, &s, "echo", r#"{"text":"1"}"#).await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    call_ok(&pool, &s, "echo", r#"{"text":"2"}"#).await;
    assert_eq!(
        srv.sessions_begun(),
        2,
        "the idle session was closed and re-made"
    );

    let srv2 = mcp_server(Options::default()).await;
    let pool = pool_with(PoolConfig {
        max_sessions: 1,
        ..PoolConfig::default()
    });
    let s2 = spec(&srv2.url());
    for s in [&s, &s2, &s, &s2] {
        call_ok(&pool, s, "echo", r#"{"text":"x"}"#).await;
        assert_eq!(pool.len(), 1);
    }
    assert_eq!(srv.sessions_begun(), 4);
    assert_eq!(srv2.sessions_begun(), 2);
}

// ---------------------------------------------------------------- result text

#[tokio::test]
async fn results_become_text_for_the_model() {
    let srv = mcp_server(Options::default()).await;
    let s = spec(&srv.url());
    let pool = pool();

    let r = call_ok(&pool, &s, "image", "{}").await;
    assert_eq!(text_of(&r), "[image: image/png, 70 bytes]\na tiny image");
    assert_eq!(
        result_images(&r),
        vec![(
            "image/png".to_string(),
            mcp_test_server::TINY_PNG_BASE64.to_string()
        )]
    );

    let r = call_ok(&pool, &s, "structured", "{}").await;
    assert_eq!(text_of(&r), r#"{"temperature":21.5,"unit":"C"}"#);

    let r = call_ok(&pool, &s, "big", r#"{"bytes":10000}"#).await;
    let text = result_text(&r, 100);
    assert_eq!(
        text,
        format!("{}… [truncated: 9900 bytes omitted]", "x".repeat(100))
    );
    assert_eq!(result_text(&r, 10_000).len(), 10_000);
}

#[test]
fn result_text_handles_every_content_kind() {
    let r = ToolResult {
        content: vec![
            json!({"type": "text", "text": "héllo"}),
            json!({"type": "audio", "data": "aGVsbG8=", "mimeType": "audio/wav"}),
            json!({"type": "resource", "resource": {"uri": "file:///a.txt", "text": "file text"}}),
            json!({"type": "resource", "resource": {"uri": "file:///b.bin", "mimeType": "application/pdf", "blob": "aGk="}}),
            json!({"type": "resource_link", "uri": "https://e.com/doc", "name": "doc"}),
        ],
        structured_content: Some(json!({"ignored": true})),
    };
    assert_eq!(
        result_text(&r, 1000),
        "héllo\n[audio: audio/wav, 5 bytes]\nfile text\n[resource: file:///b.bin, application/pdf, 2 bytes]\n[resource: https://e.com/doc]"
    );
    // Cut inside the two-byte 'é': the cut moves back to a char boundary.
    assert!(result_text(&r, 2).starts_with("h… [truncated: "));
    assert_eq!(result_text(&ToolResult::default(), 10), "");
    let e = McpCallError::HttpError {
        code: 502,
        message: "HTTP 502 Bad Gateway".into(),
    };
    assert_eq!(
        error_text(&e),
        "Error: the MCP server answered HTTP 502: HTTP 502 Bad Gateway"
    );
}
