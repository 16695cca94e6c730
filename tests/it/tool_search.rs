//! `defer_loading`: deferred servers' tools stay out of the model's first context; the model
//! searches them (`tool_search_call` / `tool_search_output` items), and what it finds becomes
//! callable as `mcp_call`s. A catalog of 250 tools over three servers.

use serde_json::{Value, json};

use crate::mcp_test_server::{self, Options, catalog_topic};
use crate::support::*;

async fn catalog(n: usize, seed: usize) -> mcp_test_server::McpTestServer {
    mcp_server(Options {
        catalog: n,
        catalog_seed: seed,
        ..Options::default()
    })
    .await
}

fn deferred(label: &str, url: &str) -> Value {
    json!({"type": "mcp", "server_label": label, "server_url": url, "require_approval": "never", "defer_loading": true,
           "server_description": format!("The {label} catalog")})
}

fn function_names(request: &Value) -> Vec<String> {
    request["tools"]
        .as_array()
        .map(|t| {
            t.iter()
                .map(|f| f["function"]["name"].as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// What the model saw over the last four turns: turn 1 only the plain server's tools and the
/// search tool; the found tool (`b__TARGET`) from turn 3 on.
fn model_saw_the_found_tool_only_after_searching(
    up: &crate::fake_upstream::FakeUpstream,
    target: &str,
) {
    let reqs = up.requests();
    let turns: Vec<Vec<String>> = reqs[reqs.len() - 4..]
        .iter()
        .map(|r| function_names(&r.body))
        .collect();
    assert!(turns[0].contains(&"tool_search".to_string()));
    assert!(
        turns[0]
            .iter()
            .all(|n| !n.starts_with("a__") && !n.starts_with("b__")),
        "{:?}",
        turns[0]
    );
    assert_eq!(
        turns[0].len(),
        50 + 9 + 1,
        "plain's catalog + its 9 tools + tool_search"
    );
    assert!(
        !turns[1].iter().any(|n| n.starts_with("b__")),
        "nothing was found yet"
    );
    assert!(turns[2].contains(&format!("b__{target}")));
}

#[tokio::test]
async fn a_large_deferred_catalog_costs_the_model_only_what_it_searches_for() {
    let up = upstream().await;
    let (a, b) = (catalog(100, 0).await, catalog(100, 1).await);
    let plain = catalog(50, 2).await;
    let relay = relay(config(&up.base_url())).await;
    // The tool to find: one whose topic no other server has (b's tool_050).
    let target = "tool_050";
    let topic = catalog_topic(50, 1);
    let script = format!(
        "CALL tool_search {{\"query\":\"zebra unicorn\"}}\nTHEN\nCALL tool_search {{\"query\":\"{topic}\"}}\nTHEN\nCALL b__{target} {{}}"
    );
    let tools = json!([deferred("a", &a.url()), deferred("b", &b.url()),
        {"type": "mcp", "server_label": "plain", "server_url": plain.url(), "require_approval": "never"}]);
    let body = relay
        .stream(&json!({"model": "fake-model", "input": script, "stream": true, "tools": tools}))
        .await;
    let folded = check_events(&body.events);
    assert_eq!(folded["status"], "completed");
    let types: Vec<&str> = strs(&folded["output"], "type");
    assert_eq!(
        types,
        [
            "mcp_list_tools",
            "mcp_list_tools",
            "mcp_list_tools",
            "tool_search_call",
            "tool_search_output",
            "tool_search_call",
            "tool_search_output",
            "mcp_call",
            "message"
        ],
    );
    let listed: usize = folded["output"].as_array().unwrap()[..3]
        .iter()
        .map(|l| l["tools"].as_array().unwrap().len())
        .sum();
    assert!(
        listed >= 250,
        "every server is still listed at the start ({listed})"
    );
    // The first search found nothing, and said so; the second found the right tool first.
    assert_eq!(folded["output"][4]["tools"], json!([]));
    assert_eq!(folded["output"][3]["arguments"]["query"], "zebra unicorn");
    let found = &folded["output"][6]["tools"];
    assert_eq!(found[0]["type"], "namespace");
    assert_eq!(found[0]["name"], "b");
    assert_eq!(found[0]["tools"][0]["name"], target, "{found}");
    assert!(
        found
            .as_array()
            .unwrap()
            .iter()
            .map(|ns| ns["tools"].as_array().unwrap().len())
            .sum::<usize>()
            <= 5
    );
    assert_eq!(
        folded["output"][3]["call_id"],
        folded["output"][4]["call_id"]
    );
    let call = &folded["output"][7];
    assert_eq!(
        (
            call["server_label"].as_str(),
            call["name"].as_str(),
            call["status"].as_str()
        ),
        (Some("b"), Some(target), Some("completed"))
    );
    assert_eq!(call["output"], format!("called {target}"));
    model_saw_the_found_tool_only_after_searching(&up, target);
    assert_eq!(b.count("tools/call"), 1);
    assert_eq!(a.count("tools/call"), 0);
    golden_at(
        "tool_search_catalog_250",
        &body,
        &[
            (&a.url(), "http://mcp-a/mcp"),
            (&b.url(), "http://mcp-b/mcp"),
            (&plain.url(), "http://mcp-plain/mcp"),
        ],
    );
}

#[tokio::test]
async fn an_explicit_tool_search_tool_works_and_found_tools_carry_over_a_continuation() {
    let up = upstream().await;
    let a = catalog(12, 3).await;
    let relay = relay(config(&up.base_url())).await;
    let topic = catalog_topic(5, 3);
    let tools = json!([deferred("cat", &a.url()), {"type": "tool_search"}]);
    let body = relay.stream(&json!({"model": "fake-model", "stream": true, "tools": tools, "input": format!("CALL tool_search {{\"query\":\"{topic}\"}}")}))
    .await;
    let folded = check_events(&body.events);
    assert_eq!(
        folded["output"][2]["tools"][0]["tools"][0]["name"],
        "tool_005"
    );
    assert_eq!(folded["tools"][1]["type"], "tool_search");
    golden_at(
        "tool_search",
        &body,
        &[(&a.url(), "http://mcp-test-server/mcp")],
    );
    // Next response in the chain: the found tool is callable without searching again.
    let (status, next) = relay.create(&json!({"model": "fake-model", "tools": tools, "previous_response_id": folded["id"], "input": "CALL cat__tool_005 {}"}))
    .await;
    assert_eq!(status, 200, "{next}");
    let types: Vec<&str> = strs(&next["output"], "type");
    assert_eq!(types, ["mcp_call", "message"]);
    assert_eq!(next["output"][0]["output"], "called tool_005");
    let (status, err) = relay.create(&json!({"model": "fake-model", "input": "x", "tools": [{"type": "tool_search", "execution": "elsewhere"}]}))
    .await;
    assert_eq!(param_error(status, &err), (400, Some("tools[0].execution")));
}
