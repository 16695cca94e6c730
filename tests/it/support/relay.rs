//! The relay in-process on loopback: a deterministic test config, the relay served on a port
//! of its own (stopped when dropped), and the store backends storage tests run against.

use std::net::SocketAddr;
use std::path::PathBuf;

use responses_relay::{App, Config};
use serde_json::{Value, json};
use tokio::sync::oneshot;

use super::redis_db;

/// A relay served in-process on a loopback port.
pub struct Relay {
    pub addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    done: Option<tokio::task::JoinHandle<()>>,
}

/// The HTTP API of a relay, in-process ([`Relay`]) or a process ([`super::RelayProcess`]).
#[allow(async_fn_in_trait)] // reason: used only by this test binary, never across threads
pub trait RelayApi {
    /// `http://ADDR` + `path`.
    fn url(&self, path: &str) -> String;

    /// `POST /v1/responses` of `body`: the status and the JSON answer.
    async fn create(&self, body: &Value) -> (u16, Value) {
        super::post(&self.url("/v1/responses"), body).await
    }

    /// `POST /v1/responses` of a streaming `body`, read to its end (see [`super::stream`]).
    async fn stream(&self, body: &Value) -> super::SseBody {
        super::stream(&self.url("/v1/responses"), body).await
    }

    /// `POST /v1/responses` of `body`; returns the new Response's id.
    async fn start(&self, body: &Value) -> String {
        let (_, created) = self.create(body).await;
        created["id"].as_str().unwrap().to_string()
    }

    /// Starts a background run whose model stalls after its first deltas; returns its id.
    async fn start_stalled(&self) -> String {
        self.start(&json!({"model": "fake-model?fault=stall", "input": "x", "background": true}))
            .await
    }

    /// `POST /v1/responses` of `body`, the answer unread (for a test that reads it as it comes).
    async fn send(&self, body: &Value) -> reqwest::Response {
        let url = self.url("/v1/responses");
        super::client().post(url).json(body).send().await.unwrap()
    }

    /// `DELETE PATH`, the answer unread.
    async fn delete(&self, path: &str) -> reqwest::Response {
        super::client().delete(self.url(path)).send().await.unwrap()
    }

    /// `POST /v1/responses/ID/cancel`: the status and the JSON answer.
    async fn cancel(&self, id: &str) -> (u16, Value) {
        self.post(&format!("/v1/responses/{id}/cancel"), &json!({}))
            .await
    }

    /// Streams `input` to `model` (`{"model", "input", "stream": true}`), read to its end.
    async fn stream_input(&self, model: &str, input: &str) -> super::SseBody {
        let body = json!({"model": model, "input": input, "stream": true});
        self.stream(&body).await
    }

    /// `GET /v1/responses/ID?stream=true`: the status and the replayed SSE text.
    async fn replay(&self, id: &str) -> (u16, String) {
        super::get_text(&self.url(&format!("/v1/responses/{id}?stream=true"))).await
    }

    /// The replayed SSE text of run `id` (whatever the status).
    async fn replay_text(&self, id: &str) -> String {
        self.replay(id).await.1
    }

    /// Polls run `id` (at most `tries` times, 10 ms apart) until it has an output item.
    async fn until_output(&self, id: &str, tries: usize) {
        for _ in 0..tries {
            let (_, r) = self.get(&format!("/v1/responses/{id}")).await;
            if r["output"].as_array().is_some_and(|o| !o.is_empty()) {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }

    /// Reads run `id`'s log live until an event of type `kind` is in it. The log shows only
    /// events the store kept, so after this the event survives the process being killed (the
    /// Response of `GET /v1/responses/{id}` may show events not yet kept).
    async fn until_kept(&self, id: &str, kind: &str) {
        let mut live = super::client()
            .get(self.url(&format!("/v1/responses/{id}?stream=true")))
            .send()
            .await
            .unwrap();
        let wanted = format!("event: {kind}\n");
        let mut seen = String::new();
        let read = async {
            while !seen.contains(&wanted) {
                let chunk = live.chunk().await.unwrap().expect("the run went on");
                seen.push_str(std::str::from_utf8(&chunk).unwrap());
            }
        };
        tokio::time::timeout(std::time::Duration::from_secs(20), read)
            .await
            .unwrap_or_else(|_| panic!("no {kind} kept within 20 s"));
    }

    /// `POST PATH` of `body`: the status and the JSON answer.
    async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        super::post(&self.url(path), body).await
    }

    /// `GET PATH`: the status and the JSON answer.
    async fn get(&self, path: &str) -> (u16, Value) {
        super::get(&self.url(path)).await
    }
}

impl RelayApi for Relay {
    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

impl Relay {
    /// Begins a graceful shutdown and waits for it to finish.
    pub async fn shutdown(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(d) = self.done.take() {
            d.await.unwrap();
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

/// A deterministic config (sequential ids, fixed clock) pointing at `upstream_base`, with MCP
/// servers on loopback allowed (`--mcp-allow-private-networks`).
pub fn config(upstream_base: &str) -> Config {
    let mut c = Config {
        upstream_url: upstream_base.to_string(),
        deterministic: true,
        ..Config::default()
    };
    c.mcp.ssrf = responses_relay::ssrf::Policy::allow_private_networks();
    c
}

pub async fn relay(config: Config) -> Relay {
    relay_app(App::new(config)).await
}

/// Serves an already built app (for tests that also use the app's handles).
pub async fn relay_app(app: App) -> Relay {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    relay_on(app, listener).await
}

/// A relay whose connections have a small kernel send buffer (accepted sockets inherit it from
/// the listener): a client that stops reading blocks the relay's writes within kilobytes.
pub async fn relay_with_small_send_buffers(config: Config) -> Relay {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_send_buffer_size(4096).unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    relay_on(App::new(config), socket.listen(64).unwrap()).await
}

async fn relay_on(app: App, listener: tokio::net::TcpListener) -> Relay {
    responses_relay::install_tls();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = oneshot::channel();
    let done = tokio::spawn(responses_relay::server::serve_on(listener, app, async {
        let _ = rx.await;
    }));
    Relay {
        addr,
        stop: Some(tx),
        done: Some(done),
    }
}

/// The config `serve ARGS --config FILE` makes, FILE holding `toml`; deterministic.
pub fn serve_config(
    args: &[&str],
    toml: &str,
) -> Result<Config, responses_relay::config::ConfigError> {
    use clap::Parser;
    let file = scratch("config").join("relay.toml");
    std::fs::write(&file, toml).unwrap();
    let mut argv = vec!["responses-relay", "serve"];
    argv.extend_from_slice(args);
    argv.extend(["--config", file.to_str().unwrap()]);
    let cli = responses_relay::config::Cli::try_parse_from(argv).unwrap();
    let responses_relay::config::Command::Serve(serve) = cli.command else {
        unreachable!("parsed as serve")
    };
    let mut c = Config::from_args(serve, |_| None)?;
    c.deterministic = true;
    Ok(c)
}

/// A fresh scratch directory under the system temp dir.
pub fn scratch(name: &str) -> PathBuf {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "relay-{name}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A relay with the test config in front of `up`, as `change` leaves it.
pub async fn relay_for(
    up: &super::fake_upstream::FakeUpstream,
    change: impl FnOnce(&mut Config),
) -> Relay {
    let mut c = config(&up.base_url());
    change(&mut c);
    relay(c).await
}

/// A relay with the test config over `store`, in front of `up`.
pub async fn relay_over_store(
    up: &super::fake_upstream::FakeUpstream,
    store: &responses_relay::config::StoreKind,
) -> Relay {
    relay_for(up, |c| c.store = store.clone()).await
}

/// A relay with the test config reading its upstream as `api` (Chat Completions or Responses).
pub async fn relay_over_api(
    up: &super::fake_upstream::FakeUpstream,
    api: responses_relay::upstream::UpstreamApi,
) -> Relay {
    relay_for(up, |c| c.upstream_api = api).await
}

/// A relay over `store` with real ids and clock (not the test config's sequential ones), so that
/// several relays can share the store without their ids colliding.
pub async fn shared_store_relay(
    up: &super::fake_upstream::FakeUpstream,
    store: &responses_relay::config::StoreKind,
) -> Relay {
    relay_for(up, |c| {
        c.store = store.clone();
        c.deterministic = false;
    })
    .await
}

/// The paths a stored run `id` is read at: its Response, its replay, its input items.
pub fn run_paths(id: &str) -> [String; 3] {
    [
        format!("/v1/responses/{id}"),
        format!("/v1/responses/{id}?stream=true"),
        format!("/v1/responses/{id}/input_items"),
    ]
}

/// The fake upstream and a relay with the test config in front of it.
pub async fn plain_relay() -> (super::fake_upstream::FakeUpstream, Relay) {
    let up = super::upstream().await;
    let relay = relay(config(&up.base_url())).await;
    (up, relay)
}

/// The fake upstream and a relay with the test config as `change` leaves it.
pub async fn configured_relay(
    change: impl FnOnce(&mut Config),
) -> (super::fake_upstream::FakeUpstream, Relay) {
    let up = super::upstream().await;
    let relay = relay_for(&up, change).await;
    (up, relay)
}

/// The test config in front of `up` with each of [`stores`], named by its store.
pub fn store_configs(up: &super::fake_upstream::FakeUpstream) -> Vec<(&'static str, Config)> {
    let with = |store| Config {
        store,
        ..config(&up.base_url())
    };
    stores()
        .into_iter()
        .map(|(name, s)| (name, with(s)))
        .collect()
}

/// A relay (the test config) over each of [`stores`] in front of `up`, named by its store.
pub async fn relays_over_stores(
    up: &super::fake_upstream::FakeUpstream,
) -> Vec<(&'static str, Relay)> {
    let mut relays = Vec::new();
    for (name, store) in stores() {
        let mut c = config(&up.base_url());
        c.store = store;
        relays.push((name, relay(c).await));
    }
    relays
}

/// The store backends every storage test runs against (Redis: a fresh database of the test
/// binary's shared `redis-server`).
pub fn stores() -> Vec<(&'static str, responses_relay::config::StoreKind)> {
    vec![
        ("memory", responses_relay::config::StoreKind::Memory),
        (
            "sqlite",
            responses_relay::config::StoreKind::Sqlite(scratch("store").join("relay.sqlite3")),
        ),
        (
            "redis",
            responses_relay::config::StoreKind::Redis(redis_db()),
        ),
    ]
}
