//! Several model servers (SPEC §13): `[[upstreams]]` and `--upstream NAME=URL`; a model
//! `NAME/REST` goes to upstream NAME as REST with that upstream's key, timeouts and retries; any
//! other model to the default unchanged; `GET /v1/models` merges them all.

use serde_json::{Value, json};

use crate::mcp_test_server;
use crate::support::*;

/// A loopback address nothing listens on: connecting is refused at once.
fn refused_url() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    drop(l);
    format!("http://{addr}/v1")
}

/// The model names and bearers of the turns an upstream got, in order.
fn turns(up: &fake_upstream::FakeUpstream) -> Vec<(String, String, Option<String>)> {
    up.requests()
        .iter()
        .filter(|r| r.method == "POST")
        .map(|r| {
            (
                r.path.clone(),
                r.body["model"].as_str().unwrap_or_default().to_string(),
                r.header("authorization").map(str::to_string),
            )
        })
        .collect()
}

/// A POST of `body` with no key: the status and the JSON answer (`null` if it is not JSON).
async fn ask(url: &str, body: &Value) -> (u16, Value) {
    call(url, None, Some(body)).await
}

/// A relay configured by `toml` (its `[[upstreams]]`), its default upstream refusing connections.
async fn relay_in_front_of_upstreams(toml: &str) -> Relay {
    let c = serve_config(
        &["--store", "memory", "--upstream-url", &refused_url()],
        toml,
    );
    relay(c.unwrap()).await
}

#[tokio::test]
async fn a_model_with_an_upstream_prefix_goes_there_as_the_rest_with_that_upstreams_key() {
    let (a, b) = (upstream().await, upstream().await);
    let server = mcp_server(mcp_test_server::Options::default()).await;
    let toml = format!(
        "[[upstreams]]\nname = \"local\"\nurl = \"{}\"\ndefault = true\napi_key = \"KEY-OF-LOCAL\"\n\n\
         [[upstreams]]\nname = \"cloud\"\nurl = \"{}\"\napi = \"responses\"\napi_key_env = \"CARGO_MANIFEST_DIR\"\n",
        a.base_url(),
        b.base_url()
    );
    let flag = format!("bare={}", b.base_url());
    let mut c = serve_config(&["--store", "memory", "--upstream", &flag], &toml).unwrap();
    c.mcp.ssrf = responses_relay::ssrf::Policy::allow_private_networks();
    assert!(
        !format!("{c:?}").contains("KEY-OF-LOCAL"),
        "an upstream's key is not in the config's Debug"
    );
    let relay = relay(c).await;
    let url = relay.url("/v1/responses");

    // The default upstream, named: by its prefix, and any model with no known prefix as is.
    for (model, sent) in [
        ("local/llama3.1", "llama3.1"),
        ("meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.1-8B"),
        ("fake-model", "fake-model"),
    ] {
        let (status, r) = ask(&url, &json!({"model": model, "input": "hi"})).await;
        assert_eq!(status, 200, "{model}: {r}");
        assert_eq!(r["model"], model, "the Response echoes the client's model");
        let last = turns(&a).pop().unwrap();
        assert_eq!(
            last,
            (
                "/v1/chat/completions".to_string(),
                sent.to_string(),
                Some("Bearer KEY-OF-LOCAL".to_string())
            )
        );
    }
    assert!(
        turns(&b).is_empty(),
        "nothing of the default's went to the other upstream"
    );

    // A Responses upstream with its key from the environment; every turn of an MCP run goes there.
    let mcp = json!({"type": "mcp", "server_label": "t", "server_url": server.url(), "require_approval": "never"});
    let (status, r) = ask(&url, &json!({"model": "cloud/fake-model", "input": "CALL add {\"a\":2,\"b\":3}", "tools": [mcp]}))
    .await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["model"], "cloud/fake-model");
    assert_eq!(r["status"], "completed", "{r}");
    assert!(
        r["output"]
            .as_array()
            .unwrap()
            .iter()
            .any(|o| o["type"] == "mcp_call"),
        "{r}"
    );
    let key = format!("Bearer {}", env!("CARGO_MANIFEST_DIR"));
    let cloud = turns(&b);
    assert_eq!(cloud.len(), 2, "both turns of the run: {cloud:?}");
    for t in &cloud {
        assert_eq!(
            t,
            &(
                "/v1/responses".to_string(),
                "fake-model".to_string(),
                Some(key.clone())
            )
        );
    }
    let before = turns(&a).len();

    // An upstream from the command line with no key: the client's own bearer goes there (the
    // relay has no keys of its own), as Chat Completions.
    let (status, r) = call(
        &url,
        Some("CLIENT-TOKEN"),
        Some(&json!({"model": "bare/x/y", "input": "hi"})),
    )
    .await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(
        turns(&b).pop().unwrap(),
        (
            "/v1/chat/completions".to_string(),
            "x/y".to_string(),
            Some("Bearer CLIENT-TOKEN".to_string())
        )
    );
    assert_eq!(turns(&a).len(), before);
}

#[tokio::test]
async fn each_upstream_times_out_as_its_own_entry_says() {
    let (a, b) = (upstream().await, upstream().await);
    let toml = format!(
        "[[upstreams]]\nname = \"quick\"\nurl = \"{}\"\nfirst_byte_timeout = 0.2\nretries = 0\n\n\
         [[upstreams]]\nname = \"patient\"\nurl = \"{}\"\nretries = 0\n",
        a.base_url(),
        b.base_url()
    );
    let relay = relay_in_front_of_upstreams(&toml).await;
    let url = relay.url("/v1/responses");
    let slow = "fake-model?fault=slow_headers&delay_ms=1000";
    let (status, r) = ask(
        &url,
        &json!({"model": format!("quick/{slow}"), "input": "hi"}),
    )
    .await;
    assert_eq!(status, 504, "the quick upstream's 0.2 s: {r}");
    let (status, r) = ask(
        &url,
        &json!({"model": format!("patient/{slow}"), "input": "hi"}),
    )
    .await;
    assert_eq!(status, 200, "the default first-byte timeout: {r}");
}

#[tokio::test]
async fn each_upstream_retries_as_its_own_entry_says() {
    let (a, b) = (upstream().await, upstream().await);
    let toml = format!(
        "[[upstreams]]\nname = \"once\"\nurl = \"{}\"\nretries = 0\n\n[[upstreams]]\nname = \"again\"\nurl = \"{}\"\nretries = 2\n",
        a.base_url(),
        b.base_url()
    );
    let relay = relay_in_front_of_upstreams(&toml).await;
    let url = relay.url("/v1/responses");
    let body = |m: &str| json!({"model": m, "input": "hi"});
    let (status, r) = ask(&url, &body("once/fake-model?fault=status429_once")).await;
    assert_eq!(status, 429, "no retry where retries = 0: {r}");
    assert_eq!(turns(&a).len(), 1);
    let (status, r) = ask(&url, &body("again/fake-model?fault=status429_once")).await;
    assert_eq!(status, 200, "retried where retries = 2: {r}");
    assert_eq!(turns(&b).len(), 2);
}

#[tokio::test]
async fn v1_models_lists_every_upstream_prefixed_and_the_default_bare_leaving_out_one_that_is_down()
{
    let (a, b) = (upstream().await, upstream().await);
    let toml = format!(
        "[[upstreams]]\nname = \"local\"\nurl = \"{}\"\ndefault = true\n\n\
         [[upstreams]]\nname = \"cloud\"\nurl = \"{}\"\n\n\
         [[upstreams]]\nname = \"down\"\nurl = \"{}\"\nretries = 0\n\n\
         [[keys]]\nkey = \"all-key\"\ntenant = \"a\"\n\n\
         [[keys]]\nkey = \"cloud-key\"\ntenant = \"b\"\nmodels = [\"cloud/*\"]\n",
        a.base_url(),
        b.base_url(),
        refused_url()
    );
    let relay = relay(serve_config(&["--store", "memory"], &toml).unwrap()).await;
    let (status, list) = call(&relay.url("/v1/models"), Some("all-key"), None).await;
    assert_eq!(status, 200, "{list}");
    assert_eq!(list["object"], "list");
    let ids: Vec<(&str, &str)> = list["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["id"].as_str().unwrap(), m["owned_by"].as_str().unwrap()))
        .collect();
    assert_eq!(
        ids,
        [
            ("fake-model", "fake"),
            ("local/fake-model", "local"),
            ("cloud/fake-model", "cloud")
        ]
    );
    assert_eq!(
        list["data"][1]["object"], "model",
        "the rest of each object is kept"
    );

    // A key sees only the models it may use, and may not run another.
    let (status, list) = call(&relay.url("/v1/models"), Some("cloud-key"), None).await;
    assert_eq!(status, 200);
    assert_eq!(list["data"].as_array().unwrap().len(), 1, "{list}");
    assert_eq!(list["data"][0]["id"], "cloud/fake-model");
    let (status, e) = call(
        &relay.url("/v1/responses"),
        Some("cloud-key"),
        Some(&json!({"model": "local/fake-model", "input": "hi"})),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(e["error"]["param"], "model", "{e}");

    // With every upstream down, the answer is the upstream error.
    let toml = format!(
        "[[upstreams]]\nname = \"down\"\nurl = \"{}\"\nretries = 0\n",
        refused_url()
    );
    let relay = crate::support::relay(
        serve_config(
            &["--store", "memory", "--upstream-url", &refused_url()],
            &toml,
        )
        .unwrap(),
    )
    .await;
    let (status, e) = call(&relay.url("/v1/models"), None, None).await;
    assert_eq!(status, 502, "{e}");
    assert_eq!(e["error"]["code"], "upstream_error", "{e}");
}

#[tokio::test]
async fn upstream_entries_that_cannot_be_routed_are_refused_at_start_naming_the_field() {
    let u = "http://127.0.0.1:9/v1";
    let cases = [
        (
            vec![],
            format!("[[upstreams]]\nname = \"a/b\"\nurl = \"{u}\"\n"),
            "upstreams[0].name",
        ),
        (
            vec![],
            format!(
                "[[upstreams]]\nname = \"a\"\nurl = \"{u}\"\ndefault = true\n[[upstreams]]\nname = \"b\"\nurl = \"{u}\"\ndefault = true\n"
            ),
            "upstreams[1].default",
        ),
        (
            vec![],
            format!(
                "[[upstreams]]\nname = \"a\"\nurl = \"{u}\"\n[[upstreams]]\nname = \"a\"\nurl = \"{u}\"\n"
            ),
            "upstreams[1].name",
        ),
        (
            vec!["--upstream-url", u],
            format!("[[upstreams]]\nname = \"a\"\nurl = \"{u}\"\ndefault = true\n"),
            "upstreams",
        ),
        (
            vec![],
            "[[upstreams]]\nname = \"a\"\nurl = \"ftp://x/v1\"\n".to_string(),
            "upstreams[0].url",
        ),
        (
            vec![],
            "[[upstreams]]\nname = \"a\"\nurl = \"http://u:p@x/v1\"\n".to_string(),
            "upstreams[0].url",
        ),
        (
            vec![],
            format!(
                "[[upstreams]]\nname = \"a\"\nurl = \"{u}\"\napi_key_env = \"RELAY_TEST_UNSET_VARIABLE\"\n"
            ),
            "upstreams[0].api_key_env",
        ),
        (vec!["--upstream", "nourl"], String::new(), "--upstream"),
    ];
    for (args, toml, field) in cases {
        let mut argv = vec!["--store", "memory"];
        argv.extend(args);
        let e = serve_config(&argv, &toml).expect_err(&toml);
        assert_eq!(e.flag, field, "{toml}: {e}");
    }
}

#[tokio::test]
async fn the_documented_complete_config_file_is_a_config_the_relay_starts_with() {
    let doc = std::fs::read_to_string(manifest_dir().join("docs/configuration.md")).unwrap();
    let at = doc.find("### A complete file").expect("the section");
    let block = doc[at..].split("```toml\n").nth(1).unwrap();
    let toml = block.split("```").next().unwrap();
    // Its `*_env` variables, pointed at one the test process has.
    let toml: String = toml
        .lines()
        .map(|l| match l.split_once("_env = \"") {
            Some((k, _)) => format!("{k}_env = \"CARGO_MANIFEST_DIR\""),
            None => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n");
    let c = serve_config(&[], &toml).unwrap_or_else(|e| panic!("{e}\n{toml}"));
    assert_eq!(c.default_upstream.as_deref(), Some("local"));
    assert_eq!(c.lanes, 4);
    assert_eq!(c.upstream_url, "http://10.0.0.5:8000/v1");
    let names: Vec<&str> = c.upstreams.iter().map(|u| u.name.as_str()).collect();
    assert_eq!(names, ["local", "ollama", "cloud", "claude", "gemini"]);
    assert_eq!(
        c.upstreams[3].api,
        responses_relay::upstream::UpstreamApi::Anthropic
    );
    assert_eq!(
        c.upstreams[4].api,
        responses_relay::upstream::UpstreamApi::Gemini
    );
    assert_eq!(c.keys.len(), 2);
    assert_eq!(c.mcp.registered.0.len(), 2);
    assert_eq!(c.mcp.web_search, Some(("docs".into(), "search".into())));
    assert_eq!(c.keys[0].limits.requests_per_minute, Some(600));
    assert_eq!(c.tenant_limits["team-a"].tokens_per_day, Some(2_000_000));
    assert_eq!(c.mcp.calls_per_minute, [("tickets".to_string(), 30)]);
}

#[tokio::test]
async fn v1_models_leaves_out_an_upstream_that_hangs_and_serves_the_merged_list_briefly_from_memory()
 {
    let a = upstream().await;
    // An upstream that accepts connections and never answers.
    let hanging = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hanging_url = format!("http://{}", hanging.local_addr().unwrap());
    let held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((conn, _)) = hanging.accept().await {
            open.push(conn);
        }
    });
    let toml = format!(
        "[[upstreams]]\nname = \"local\"\nurl = \"{}\"\ndefault = true\n\n\
         [[upstreams]]\nname = \"slow\"\nurl = \"{hanging_url}\"\nretries = 0\n",
        a.base_url(),
    );
    let relay = relay(serve_config(&["--store", "memory"], &toml).unwrap()).await;
    let listed = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        call(&relay.url("/v1/models"), None, None),
    )
    .await
    .expect("the hanging upstream was given up on");
    let (status, list) = listed;
    assert_eq!(status, 200, "{list}");
    let ids: Vec<&str> = strs(&list["data"], "id");
    assert_eq!(ids, ["fake-model", "local/fake-model"]);
    let asked = |up: &fake_upstream::FakeUpstream| {
        up.requests()
            .iter()
            .filter(|r| r.path == "/v1/models")
            .count()
    };
    assert_eq!(asked(&a), 1);
    // Asked again at once: the merged list is served from memory.
    let (status, again) = call(&relay.url("/v1/models"), None, None).await;
    assert_eq!((status, &again), (200, &list));
    assert_eq!(asked(&a), 1, "served from memory");
    held.abort();
}

/// An `http://` upstream is reached through the HTTP proxy the environment names, as reqwest
/// reaches every origin; without one the relay's own client connects to it directly. The proxy
/// here is the fake upstream itself, which answers the proxied (absolute-form) request; the
/// upstream's own host (`model.invalid`) is never resolved or connected to.
#[tokio::test]
async fn an_http_upstream_is_reached_through_the_proxy_the_environment_names() {
    let up = upstream().await;
    let proxy = up.base_url().trim_end_matches("/v1").to_string();
    let args = serve_args("http://model.invalid/v1", "memory", &[]);
    let relay = spawn_relay(
        &args,
        &[("HTTP_PROXY", &proxy)],
        std::process::Stdio::null(),
    );
    let (status, r) = relay
        .create(&json!({"model": "fake-model", "input": "hi", "stream": false}))
        .await;
    assert_eq!(status, 200, "{r}");
    assert_eq!(r["status"], "completed", "{r}");
    let sent = up.requests().pop().unwrap();
    assert_eq!(sent.path, "/v1/chat/completions");
    assert_eq!(sent.header("host"), Some("model.invalid"));

    // No proxy: the same request straight to the upstream, named as it is.
    let direct = spawn_relay(
        &serve_args(&up.base_url(), "memory", &[]),
        &[],
        std::process::Stdio::null(),
    );
    let (status, r) = direct
        .create(&json!({"model": "fake-model", "input": "hi", "stream": false}))
        .await;
    assert_eq!((status, &r["status"]), (200, &json!("completed")), "{r}");
    let sent = up.requests().pop().unwrap();
    assert_eq!(
        sent.header("host"),
        Some(proxy.trim_start_matches("http://"))
    );
}
