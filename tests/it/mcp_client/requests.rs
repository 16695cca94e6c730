//! The MCP tools of a request: validation naming the field as OpenAI does, the spec each
//! becomes, approval and tool filters, and the names the model sees.

use super::*;

use std::collections::HashSet;

use responses_relay::api::request::{FunctionTool, ToolParam};
use responses_relay::mcp::{Approval, ApprovalPolicy, ToolFilter, model_names, specs};
use serde_json::{Value, json};

// ---------------------------------------------------------------- validation

/// Invalid MCP tools written as what they add to a valid one (their name, the JSON they add, the
/// field the error names).
const INVALID_ADDITIONS: &[(&str, &str, &str)] = &[
    (
        "empty label",
        r#"{"server_label": ""}"#,
        "tools[0].server_label",
    ),
    (
        "label starts with a digit",
        r#"{"server_label": "1abc"}"#,
        "tools[0].server_label",
    ),
    (
        "label with a dot",
        r#"{"server_label": "a.b"}"#,
        "tools[0].server_label",
    ),
    (
        "ftp url",
        r#"{"server_url": "ftp://e.com/mcp"}"#,
        "tools[0].server_url",
    ),
    (
        "not a url",
        r#"{"server_url": "example.com/mcp"}"#,
        "tools[0].server_url",
    ),
    (
        "connector",
        r#"{"connector_id": "connector_gmail"}"#,
        "tools[0].connector_id",
    ),
    (
        "tunnel",
        r#"{"tunnel_id": "tunnel_0123"}"#,
        "tools[0].tunnel_id",
    ),
    (
        "header value not a string",
        r#"{"headers": {"X-Key": 5}}"#,
        "tools[0].headers.X-Key",
    ),
    (
        "bad header name",
        r#"{"headers": {"Bad Header": "v"}}"#,
        "tools[0].headers.Bad Header",
    ),
    (
        "reserved header",
        r#"{"headers": {"Accept": "x"}}"#,
        "tools[0].headers.Accept",
    ),
    (
        "header with a newline",
        r#"{"headers": {"X-A": "a\nb"}}"#,
        "tools[0].headers.X-A",
    ),
    (
        "authorization twice",
        r#"{"authorization": "t", "headers": {"Authorization": "Bearer t"}}"#,
        "tools[0].headers.Authorization",
    ),
    (
        "allowed_tools a number",
        r#"{"allowed_tools": 3}"#,
        "tools[0].allowed_tools",
    ),
    (
        "allowed_tools list item",
        r#"{"allowed_tools": ["a", 1]}"#,
        "tools[0].allowed_tools[1]",
    ),
    (
        "allowed_tools extra key",
        r#"{"allowed_tools": {"extra": 1}}"#,
        "tools[0].allowed_tools.extra",
    ),
    (
        "allowed_tools read_only not bool",
        r#"{"allowed_tools": {"read_only": "yes"}}"#,
        "tools[0].allowed_tools.read_only",
    ),
    (
        "require_approval word",
        r#"{"require_approval": "sometimes"}"#,
        "tools[0].require_approval",
    ),
    (
        "require_approval extra key",
        r#"{"require_approval": {"maybe": {}}}"#,
        "tools[0].require_approval.maybe",
    ),
    (
        "require_approval side not an object",
        r#"{"require_approval": {"always": "x"}}"#,
        "tools[0].require_approval.always",
    ),
    (
        "require_approval filter extra key",
        r#"{"require_approval": {"never": {"names": []}}}"#,
        "tools[0].require_approval.never.names",
    ),
];

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
    let mut cases: Vec<(&str, Vec<Value>, &str)> = vec![
        (
            "missing label",
            vec![json!({"server_url": "https://e.com/mcp"})],
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
            "too many servers",
            vec![
                ok(),
                with(json!({"server_label": "b"})),
                with(json!({"server_label": "c"})),
            ],
            "tools",
        ),
    ];
    for &(name, extra, param) in INVALID_ADDITIONS {
        cases.push((
            name,
            vec![with(serde_json::from_str(extra).unwrap())],
            param,
        ));
    }
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
