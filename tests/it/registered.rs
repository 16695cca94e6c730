//! Registered MCP servers (SPEC §13): `[mcp_servers.LABEL]` in the config file; a request names
//! one by `server_label` (no `server_url`) or `connector_id`; its URL and token stay on the relay;
//! a request can only narrow it; a key's `mcp_servers` bounds which it may use.

use serde_json::json;

use crate::support::*;
use responses_relay::config::Config;

/// A config from a TOML file as `serve --config` reads it, pointing at `upstream`, on a memory
/// store; MCP servers on loopback are allowed only as the file registers them.
fn from_file(upstream: &str, toml: &str) -> Config {
    serve_config(&["--store", "memory", "--upstream-url", upstream], toml).unwrap()
}

#[tokio::test]
async fn a_registered_server_is_used_by_label_or_connector_id_and_its_secrets_stay_on_the_relay() {
    let up = upstream().await;
    let server = mcp_server(requiring_bearer("REGISTERED-TOKEN-9")).await;
    let toml = format!(
        "[mcp_servers.team]\nurl = \"{}\"\nauthorization = \"REGISTERED-TOKEN-9\"\ndescription = \"The team's tools\"\nrequire_approval = \"never\"\nallowed_tools = [\"whoami\", \"add\"]\n",
        server.url()
    );
    let c = from_file(&up.base_url(), &toml);
    assert!(
        !format!("{c:?}").contains("REGISTERED-TOKEN-9"),
        "not in the config's Debug"
    );
    let relay = relay(c).await;
    let url = relay.url("/v1/responses");
    for tool in [
        json!({"type": "mcp", "server_label": "team"}),
        json!({"type": "mcp", "server_label": "mine", "connector_id": "team"}),
    ] {
        let (status, r) = call(
            &url,
            None,
            Some(&json!({"model": "fake-model", "input": "CALL whoami {}", "tools": [tool]})),
        )
        .await;
        assert_eq!(status, 200, "{r}");
        let text = r.to_string();
        let mcp_call = find_item(&r["output"], "mcp_call").unwrap();
        assert!(
            str_at(mcp_call, "output").starts_with("authorized"),
            "{mcp_call}"
        );
        assert!(
            !text.contains("REGISTERED-TOKEN-9") && !text.contains(&server.url()),
            "no secret or URL echoed: {text}"
        );
        let listed = &r["output"][0];
        let names: Vec<&str> = strs(&listed["tools"], "name");
        assert_eq!(names, ["add", "whoami"], "the operator's allowed_tools");
        let (_, items) = call(
            &relay.url(&format!(
                "/v1/responses/{}/input_items",
                r["id"].as_str().unwrap()
            )),
            None,
            None,
        )
        .await;
        assert!(!items.to_string().contains("REGISTERED-TOKEN-9"));
    }
    // A request can narrow what the operator set, not widen it.
    let (_, r) = call(&url, None, Some(&json!({"model": "fake-model", "input": "CALL whoami {}", "tools": [
        {"type": "mcp", "server_label": "team", "allowed_tools": ["whoami", "explode"], "require_approval": "always"}
    ]}))).await;
    let names: Vec<&str> = strs(&r["output"][0]["tools"], "name");
    assert_eq!(names, ["whoami"], "{r}");
    assert_eq!(
        r["output"][1]["type"], "mcp_approval_request",
        "approval asked for: {r}"
    );
    // An unknown connector is named; an unknown label still needs its server_url.
    let (status, err) = call(&url, None, Some(&json!({"model": "fake-model", "input": "x", "tools": [{"type": "mcp", "server_label": "a", "connector_id": "nope"}]}))).await;
    assert_eq!(
        param_error(status, &err),
        (400, Some("tools[0].connector_id")),
        "{err}"
    );
    let (status, err) = call(&url, None, Some(&json!({"model": "fake-model", "input": "x", "tools": [{"type": "mcp", "server_label": "other"}]}))).await;
    assert_eq!(
        param_error(status, &err),
        (400, Some("tools[0].server_url")),
        "{err}"
    );
    let (status, listed) = call(&relay.url("/v1/mcp/servers"), None, None).await;
    assert_eq!(status, 200);
    assert_eq!(
        listed,
        json!({"object": "list", "data": [{"label": "team", "description": "The team's tools", "transport": "auto"}]})
    );
    let sent = server.requests_seen();
    assert!(
        sent.iter().any(|r| r.rpc_method == "tools/call"),
        "the server was called"
    );
}

#[tokio::test]
async fn a_registered_servers_private_host_is_not_opened_to_urls_a_request_names() {
    let up = upstream().await;
    let server = mcp_server(Default::default()).await;
    let toml = format!(
        "[mcp_servers.team]\nurl = \"{}\"\nrequire_approval = \"never\"\n",
        server.url()
    );
    let relay = relay(from_file(&up.base_url(), &toml)).await;
    let url = relay.url("/v1/responses");
    let (status, r) = call(
        &url,
        None,
        Some(&json!({"model": "fake-model", "input": "CALL whoami {}",
        "tools": [{"type": "mcp", "server_label": "team"}]})),
    )
    .await;
    assert_eq!(status, 200, "the registered server is reached: {r}");
    // The same host by URL, on the registered port or any other (Redis, the relay itself...),
    // is refused before any connection: only the operator's server got the private reach.
    let other_port = server.url().replace(
        &format!(":{}/", server.addr.port()),
        &format!(":{}/", relay.addr.port()),
    );
    for declared in [server.url(), other_port] {
        let before = server.requests_seen().len();
        let (status, err) = call(&url, None, Some(&json!({"model": "fake-model", "input": "x",
            "tools": [{"type": "mcp", "server_label": "mine", "server_url": declared, "require_approval": "never"}]}))).await;
        assert_eq!(
            param_error(status, &err),
            (400, Some("tools[0].server_url")),
            "{declared}: {err}"
        );
        assert_eq!(server.requests_seen().len(), before, "nothing was sent");
    }
}

#[tokio::test]
async fn a_registered_legacy_sse_server_runs_tools_through_the_relay() {
    let up = upstream().await;
    let (_child, url) = crate::mcp_client::python_server(&["--transport", "sse"]).await;
    let toml = format!(
        "[mcp_servers.legacy]\nurl = \"{url}\"\ntransport = \"sse\"\nrequire_approval = \"never\"\n"
    );
    let relay = relay(from_file(&up.base_url(), &toml)).await;
    let (status, r) = call(&relay.url("/v1/responses"), None, Some(&json!({"model": "fake-model",
        "input": "CALL shout {\"text\": \"old but gold\"}", "tools": [{"type": "mcp", "server_label": "legacy"}]}))).await;
    assert_eq!(status, 200, "{r}");
    let mcp_call = find_item(&r["output"], "mcp_call").unwrap_or_else(|| panic!("{r}"));
    assert_eq!(mcp_call["output"], "OLD BUT GOLD", "{mcp_call}");
    let (_, listed) = call(&relay.url("/v1/mcp/servers"), None, None).await;
    assert_eq!(listed["data"][0]["transport"], "sse", "{listed}");
}

#[tokio::test]
async fn a_registered_servers_env_token_and_headers_reach_it_and_defer_loading_narrows() {
    let up = upstream().await;
    let server = mcp_server(requiring_bearer("ENV-TOKEN-8")).await;
    // SAFETY: the variable is this test's own (no other test reads or writes it).
    unsafe { std::env::set_var("RELAY_TEST_REGISTERED_TOKEN_8", "ENV-TOKEN-8") };
    let team = "[mcp_servers.team]\nauthorization_env = \"RELAY_TEST_REGISTERED_TOKEN_8\"\n";
    let headers = "headers = { \"X-Team\" = \"blue\" }\nrequire_approval = \"never\"\n";
    let toml = format!("{team}{headers}url = \"{}\"\n", server.url());
    let relay = relay(from_file(&up.base_url(), &toml)).await;
    let url = relay.url("/v1/responses");
    let (status, r) = call(
        &url,
        None,
        Some(&json!({"model": "fake-model", "input": "CALL whoami {}",
        "tools": [{"type": "mcp", "server_label": "team"}]})),
    )
    .await;
    assert_eq!(status, 200, "{r}");
    let text = r.to_string();
    assert!(
        text.contains("authorized; headers: x-team"),
        "the token from the environment and the header arrived: {text}"
    );
    assert!(
        !text.contains("ENV-TOKEN-8") && !text.contains("blue"),
        "{text}"
    );
    // The request may defer the server's tools (a narrowing): they are searched, not listed.
    let (status, r) = call(
        &url,
        None,
        Some(&json!({"model": "fake-model", "input": "hi",
        "tools": [{"type": "mcp", "server_label": "team", "defer_loading": true}]})),
    )
    .await;
    assert_eq!(status, 200, "{r}");
    let sent = up.requests();
    assert!(
        sent[0].body["tools"].to_string().contains("whoami"),
        "not deferred, the tools are offered: {}",
        sent[0].body
    );
    let offered = sent.last().unwrap().body["tools"].to_string();
    assert!(
        !offered.contains("whoami"),
        "a deferred server's tools are not offered up front: {offered}"
    );
}

#[tokio::test]
async fn a_keys_mcp_servers_list_bounds_the_registered_servers_it_may_use() {
    let up = upstream().await;
    let server = mcp_server(Default::default()).await;
    let toml = format!(
        "[mcp_servers.open]\nurl = \"{url}\"\nrequire_approval = \"never\"\n[mcp_servers.closed]\nurl = \"{url}\"\nrequire_approval = \"never\"\n[[keys]]\nkey = \"limited-key-1\"\ntenant = \"t\"\nmcp_servers = [\"open\"]\n",
        url = server.url()
    );
    let relay = relay(from_file(&up.base_url(), &toml)).await;
    let url = relay.url("/v1/responses");
    let body = |label: &str| json!({"model": "fake-model", "input": "CALL add {\"a\":1,\"b\":2}", "tools": [{"type": "mcp", "server_label": label}]});
    let (status, r) = call(&url, Some("limited-key-1"), Some(&body("open"))).await;
    assert_eq!(status, 200, "{r}");
    // A server the key may not use is answered as an unknown one.
    let (closed, unknown) = (
        call(&url, Some("limited-key-1"), Some(&body("closed"))).await,
        call(&url, Some("limited-key-1"), Some(&body("nonesuch"))).await,
    );
    assert_eq!(closed.0, 400);
    assert_eq!(
        closed.1.to_string().replace("closed", "X"),
        unknown.1.to_string().replace("nonesuch", "X")
    );
    // By connector_id too: a barred connector is answered as an unknown one.
    let by_connector = |id: &str| json!({"model": "fake-model", "input": "x", "tools": [{"type": "mcp", "server_label": "mine", "connector_id": id}]});
    let (closed, unknown) = (
        call(&url, Some("limited-key-1"), Some(&by_connector("closed"))).await,
        call(&url, Some("limited-key-1"), Some(&by_connector("nonesuch"))).await,
    );
    assert_eq!(closed.0, 400);
    assert_eq!(
        closed.1.to_string().replace("closed", "X"),
        unknown.1.to_string().replace("nonesuch", "X")
    );
    let (_, listed) = call(&relay.url("/v1/mcp/servers"), Some("limited-key-1"), None).await;
    let labels: Vec<&str> = strs(&listed["data"], "label");
    assert_eq!(labels, ["open"]);
}

#[tokio::test]
async fn web_search_runs_through_a_registered_servers_tool_as_web_search_call_items() {
    let up = upstream().await;
    let server = mcp_server(requiring_bearer("SEARCH-TOKEN-3")).await;
    let toml = format!(
        "[mcp_servers.search]\nurl = \"{}\"\nauthorization = \"SEARCH-TOKEN-3\"\n[hosted_tools]\nweb_search = \"search:whoami\"\n",
        server.url()
    );
    let relay = relay(from_file(&up.base_url(), &toml)).await;
    let web = json!({"type": "web_search", "external_web_access": false});
    let body = relay.stream(&json!({"model": "fake-model", "stream": true, "input": "CALL web_search {\"query\":\"rust relays\"}", "tools": [web]}))
    .await;
    let folded = check_events(&body.events);
    let kinds = kinds(&body.events);
    for k in [
        "response.web_search_call.in_progress",
        "response.web_search_call.searching",
        "response.web_search_call.completed",
    ] {
        assert!(kinds.contains(&k.to_string()), "{k} in {kinds:?}");
    }
    let call = &folded["output"][0];
    assert_eq!(call["type"], "web_search_call", "{folded}");
    assert_eq!(call["status"], "completed");
    assert_eq!(
        call["action"],
        json!({"type": "search", "query": "rust relays"})
    );
    // The tool's text reached the model, and the model answered.
    assert_eq!(folded["output"][1]["type"], "message");
    let sent = last_request(&up).to_string();
    assert!(sent.contains("authorized"), "{sent}");
    assert_eq!(folded["tools"][0], web, "echoed as sent");
    assert!(!body.raw.join("\n").contains("SEARCH-TOKEN-3"));
    // Without the binding, web_search is left out, as the hosted-tools policy says.
    let plain = crate::support::relay(config(&up.base_url())).await;
    let (status, r) = plain
        .create(&json!({"model": "fake-model", "input": "hi", "tools": [web]}))
        .await;
    assert_eq!(status, 200, "{r}");
    let offered = last_request(&up);
    assert!(
        offered
            .get("tools")
            .is_none_or(|t| t.as_array().is_some_and(|a| a.is_empty())),
        "{offered}"
    );
}
