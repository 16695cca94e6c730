//! Tool lists across requests: one in the context is reused, a server's list is cached for its
//! TTL per server and credentials, and listed again when it expires, when the server announces
//! new tools, or after a failed call.

use super::*;
use serde_json::{Value, json};

use crate::support::*;

use crate::mcp_test_server;

#[tokio::test]
async fn tool_lists_in_the_context_are_reused_not_fetched_again() {
    let up = upstream().await;
    let server = mcp_server(Default::default()).await;
    // Without the pool's time-bound reuse, so only the context can spare the second listing.
    let relay = relay(listing_every_request(&up.base_url())).await;
    let tools = json!([mcp_tool("s", &server.url())]);
    let (_, first) = relay
        .create(&json!({"model": "fake-model", "input": "hi", "tools": tools}))
        .await;
    assert_eq!(server.count("tools/list"), 1);
    let (status, second) = relay.create(&json!({"model": "fake-model", "input": "CALL echo {\"text\":\"again\"}", "tools": tools, "previous_response_id": first["id"]}))
    .await;
    assert_eq!(status, 200, "{second}");
    golden_response_kinds(&second, &["mcp_call", "message"]);
    assert_eq!(server.count("tools/list"), 1, "the server was listed again");
}

fn listing_every_request(upstream_base: &str) -> responses_relay::config::Config {
    let mut c = config(upstream_base);
    c.mcp.tools_ttl = std::time::Duration::ZERO;
    c
}

/// The names in a response's `mcp_list_tools` item.
fn listed_names(response: &Value) -> Vec<String> {
    let list = items_of(response, "mcp_list_tools");
    list[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect()
}

async fn listing(relay: &Relay, tool: &Value) -> Vec<String> {
    let (status, r) = relay
        .create(&json!({"model": "fake-model", "input": "hi", "tools": [tool]}))
        .await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(
        items_of(&r, "mcp_list_tools")[0]["error"],
        Value::Null,
        "{r}"
    );
    listed_names(&r)
}

#[tokio::test]
async fn a_servers_tool_list_is_reused_by_later_requests_within_its_ttl() {
    let (up, server, relay) = server_and_relay().await;
    let tool = mcp_tool("s", &server.url());
    let first = listing(&relay, &tool).await;
    assert!(first.contains(&"echo".to_string()), "{first:?}");
    // The second request is told the same tools without asking the server.
    assert_eq!(listing(&relay, &tool).await, first);
    assert_eq!(
        server.count("tools/list"),
        1,
        "the server was listed again within the ttl"
    );
    // A change the server does not announce is seen only once the ttl ends.
    server.set_catalog(2, false).await;
    assert_eq!(listing(&relay, &tool).await, first);
    assert_eq!(server.count("tools/list"), 1);
    // The reused list still drives a real call, and the model still sees every tool.
    let (status, r) = relay.create(&json!({"model": "fake-model", "input": "CALL echo {\"text\":\"cached\"}", "tools": [tool]}))
    .await;
    assert_eq!(status, 200, "{r}");
    golden_response_kinds(&r, &["mcp_list_tools", "mcp_call", "message"]);
    assert_eq!(items_of(&r, "mcp_call")[0]["output"], "cached");
    let reqs = up.requests();
    let turn = &reqs[reqs.len() - 2].body;
    assert_eq!(turn["tools"].as_array().unwrap().len(), first.len());
}

#[tokio::test]
async fn a_tool_list_older_than_its_ttl_is_listed_again() {
    let up = upstream().await;
    let server = mcp_server(Default::default()).await;
    let mut c = config(&up.base_url());
    c.mcp.tools_ttl = std::time::Duration::from_millis(200);
    let relay = relay(c).await;
    let tool = mcp_tool("s", &server.url());
    let first = listing(&relay, &tool).await;
    server.set_catalog(2, false).await;
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    let second = listing(&relay, &tool).await;
    // One page before; two pages (of 10) for the 11 tools after.
    assert_eq!(server.count("tools/list"), 3);
    assert_eq!(second.len(), first.len() + 2, "{second:?}");
    assert!(second.contains(&"tool_001".to_string()));
}

#[tokio::test]
async fn with_a_zero_ttl_every_request_lists_the_server() {
    let up = upstream().await;
    let server = mcp_server(Default::default()).await;
    let relay = relay(listing_every_request(&up.base_url())).await;
    let tool = mcp_tool("s", &server.url());
    let first = listing(&relay, &tool).await;
    server.set_catalog(1, false).await;
    let second = listing(&relay, &tool).await;
    assert_eq!(server.count("tools/list"), 2);
    assert_eq!(second.len(), first.len() + 1, "{second:?}");
}

#[tokio::test]
async fn a_server_announcing_new_tools_is_listed_again_at_once() {
    // The notice arrives on a handshake session's event stream, or (2026-07-28) on the
    // subscriptions/listen stream the relay opens for the session.
    for handshake_only in [true, false] {
        let up = upstream().await;
        let server = mcp_server(mcp_test_server::Options {
            handshake_only,
            ..Default::default()
        })
        .await;
        let relay = relay(config(&up.base_url())).await;
        let tool = mcp_tool("s", &server.url());
        let first = listing(&relay, &tool).await;
        if !handshake_only {
            eventually("the relay to listen for changes", || {
                server.listening() == 1
            })
            .await;
        }
        assert_eq!(
            server.set_catalog(3, true).await,
            1,
            "the relay's session was told"
        );
        // The notice travels on an event stream: poll (a liveness bound) until a request shows
        // the new tools; requests before it may still get the old list.
        let mut now = first.clone();
        for _ in 0..500 {
            now = listing(&relay, &tool).await;
            if now != first {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert_eq!(now.len(), first.len() + 3, "{now:?}");
        assert!(now.contains(&"tool_002".to_string()));
        // One page before the notice; two pages (of 10) for the 12 tools after it, once.
        assert_eq!(
            server.count("tools/list"),
            3,
            "listed once before and once after the notice"
        );
    }
}

#[tokio::test]
async fn requests_with_other_credentials_do_not_share_a_tool_list() {
    let (_up, server, relay) = server_and_relay().await;
    let mut a = mcp_tool("s", &server.url());
    a["headers"] = json!({"X-Tenant": "a"});
    let mut b = a.clone();
    b["headers"] = json!({"X-Tenant": "b"});
    let mut bearer = a.clone();
    bearer["authorization"] = json!("token-a");
    listing(&relay, &a).await;
    listing(&relay, &b).await;
    listing(&relay, &bearer).await;
    assert_eq!(
        server.count("tools/list"),
        3,
        "a list was shared across headers or authorization"
    );
    listing(&relay, &b).await;
    assert_eq!(server.count("tools/list"), 3);
}

#[tokio::test]
async fn a_failed_call_makes_the_next_request_list_the_server_again() {
    let (_up, server, relay) = server_and_relay().await;
    let tool = mcp_tool("s", &server.url());
    let boom = json!({"model": "fake-model", "input": "CALL boom {}", "tools": [tool]});
    let (status, r) = relay.create(&boom).await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(items_of(&r, "mcp_call")[0]["status"], "failed");
    assert_eq!(server.count("tools/list"), 1);
    listing(&relay, &tool).await;
    assert_eq!(
        server.count("tools/list"),
        2,
        "a server that rejected a call was not listed again"
    );
    listing(&relay, &tool).await;
    assert_eq!(server.count("tools/list"), 2);
}
