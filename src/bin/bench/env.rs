//! The benchmark's environment: the model server and MCP test server shared by every scenario,
//! the relays, floor and trace sink each phase starts, and the store each relay runs with (a
//! fresh SQLite file, the benchmark's own emptied `redis-server`, or `--store`). Every child
//! process is killed and every SQLite file removed when its handle is dropped or released.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use crate::options::{Opts, Scenario, UpstreamKind};
use crate::procs::{self, Proc, Redis, RedisCluster};

/// The running shared processes and where the binaries are.
pub struct Env {
    pub bin_dir: PathBuf,
    pub logs: PathBuf,
    pub ticks: f64,
    pub upstream: Proc,
    pub upstream_v1: String,
    pub model: String,
    pub stamps: bool,
    pub mcp: Proc,
    pub serial: std::sync::atomic::AtomicU64,
    /// `--store` as given; `None`: SQLite and Redis side by side.
    pub explicit_store: Option<String>,
    /// `--relay-env` pairs.
    pub relay_env: Vec<(String, String)>,
    /// A fresh temp dir for the SQLite files, removed when the benchmark ends.
    pub store_dir: TempDir,
    pub redis: RedisState,
    /// The benchmark's own Redis Cluster (for `store-scale`; `None`: not wanted), or why it did
    /// not start.
    pub cluster: Option<Result<RedisCluster, String>>,
}

/// The benchmark's own `redis-server`.
pub enum RedisState {
    /// Not needed (`--store` given, or no scenario with a store phase).
    NotWanted,
    /// `redis-server` is not on `PATH`: the Redis rows say N/A.
    Missing,
    /// Installed but it did not start: the Redis phases fail with this.
    Failed(String),
    Up(Redis),
}

/// A directory removed (with what it holds) when dropped.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new() -> Result<TempDir, String> {
        let d = std::env::temp_dir().join(format!("relay-bench-store-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).map_err(|e| format!("cannot create {}: {e}", d.display()))?;
        Ok(TempDir(d))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Which store a relay runs with.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Store {
    /// The `--store` URL given, else a fresh SQLite file.
    Default,
    /// A fresh SQLite file (ignores `--store`).
    Sqlite,
    /// The benchmark's own `redis-server` (ignores `--store`).
    Redis,
    /// The benchmark's own Redis Cluster (ignores `--store`).
    RedisCluster,
}

/// A store URL ready for a relay, and what to clean after the relay is gone.
pub struct StoreUse {
    pub url: String,
    pub label: String,
    /// The benchmark's `redis-server` when the relay uses it (its CPU is read too).
    pub redis_pid: Option<u32>,
    pub sqlite_file: Option<PathBuf>,
}

pub enum StoreErr {
    /// Cannot be measured on this machine: an N/A row, not an error.
    NotAvailable(String),
    Failed(String),
}

/// `sqlite`, `redis`, `memory`: the scheme of a store URL.
pub fn store_label(url: &str) -> String {
    match url.split(':').next().unwrap_or(url) {
        "rediss" => "redis".into(),
        s => s.to_string(),
    }
}

impl Env {
    pub fn log(&self, name: &str) -> PathBuf {
        let n = self.serial.fetch_add(1, Ordering::Relaxed);
        self.logs.join(format!("{n:02}-{name}.log"))
    }

    /// The stores the `store: true` and `replay` phases run with.
    pub fn phase_stores(&self) -> Vec<Store> {
        if self.explicit_store.is_some() {
            vec![Store::Default]
        } else {
            vec![Store::Sqlite, Store::Redis]
        }
    }

    /// A store for one relay: a fresh SQLite file, the emptied Redis, or the `--store` URL.
    pub fn store(&self, which: Store) -> Result<StoreUse, StoreErr> {
        let sqlite = || {
            let n = self.serial.fetch_add(1, Ordering::Relaxed);
            let f = self.store_dir.0.join(format!("{n:02}.sqlite3"));
            StoreUse {
                url: format!("sqlite:{}", f.display()),
                label: "sqlite".into(),
                redis_pid: None,
                sqlite_file: Some(f),
            }
        };
        match (which, &self.explicit_store) {
            (Store::Default, Some(url)) => Ok(StoreUse {
                url: url.clone(),
                label: store_label(url),
                redis_pid: None,
                sqlite_file: None,
            }),
            (Store::Default, None) | (Store::Sqlite, _) => Ok(sqlite()),
            (Store::RedisCluster, _) => match &self.cluster {
                Some(Ok(c)) => {
                    c.flush()
                        .map_err(|e| StoreErr::Failed(format!("Redis Cluster FLUSHALL: {e}")))?;
                    Ok(StoreUse {
                        url: c.url(),
                        label: "redis-cluster".into(),
                        redis_pid: None,
                        sqlite_file: None,
                    })
                }
                Some(Err(e)) => Err(StoreErr::NotAvailable(e.clone())),
                None => Err(StoreErr::NotAvailable(
                    "no Redis Cluster (redis-server not on PATH, or --store given)".into(),
                )),
            },
            (Store::Redis, _) => match &self.redis {
                RedisState::Up(r) => {
                    // A clean server for every phase: the previous phase's runs are gone.
                    r.command("FLUSHALL")
                        .map_err(|e| StoreErr::Failed(format!("redis-server FLUSHALL: {e}")))?;
                    Ok(StoreUse {
                        url: r.url(0),
                        label: "redis".into(),
                        redis_pid: Some(r.pid()),
                        sqlite_file: None,
                    })
                }
                RedisState::Missing => Err(StoreErr::NotAvailable(
                    "N/A: redis-server not installed".into(),
                )),
                RedisState::Failed(e) => Err(StoreErr::Failed(e.clone())),
                RedisState::NotWanted => {
                    Err(StoreErr::Failed("redis-server was not started".into()))
                }
            },
        }
    }

    /// Removes what a phase stored (after its relay has exited).
    pub fn release(&self, s: &StoreUse) {
        if let Some(f) = &s.sqlite_file {
            for suffix in ["", "-wal", "-shm", "-journal"] {
                let _ = std::fs::remove_file(format!("{}{suffix}", f.display()));
            }
        }
        if s.redis_pid.is_some()
            && let RedisState::Up(r) = &self.redis
        {
            let _ = r.command("FLUSHALL");
        }
        if s.label == "redis-cluster"
            && let Some(Ok(c)) = &self.cluster
        {
            let _ = c.flush();
        }
    }

    pub fn relay(&self, store: &str) -> Result<Proc, String> {
        self.relay_with(store, &[])
    }

    /// A relay with `extra` flags after the usual ones.
    pub fn relay_with(&self, store: &str, extra: &[String]) -> Result<Proc, String> {
        self.relay_from(&self.bin_dir.join("responses-relay"), store, extra)
    }

    /// A relay run from the executable `bin` (this build's, or another revision's for
    /// `--compare-relay`), with `extra` flags after the usual ones.
    pub fn relay_from(&self, bin: &Path, store: &str, extra: &[String]) -> Result<Proc, String> {
        // The MCP test server is on loopback, which the relay refuses unless allowed.
        let args: Vec<String> = [
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--upstream-url",
            &self.upstream_v1,
            "--store",
            store,
            "--mcp-allow-host",
            "127.0.0.1",
        ]
        .iter()
        .map(|s| s.to_string())
        .chain(extra.iter().cloned())
        .collect();
        let envs: Vec<(&str, &str)> = self
            .relay_env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let p = Proc::spawn("relay", bin, &args, &envs, &self.log("relay"))?;
        eprintln!("  relay pid {} at {} (--store {store})", p.pid(), p.url);
        Ok(p)
    }

    pub fn floor(&self) -> Result<Proc, String> {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let args = vec![
            "serve-floor".into(),
            "--listen".into(),
            "127.0.0.1:0".into(),
            "--upstream".into(),
            self.upstream.origin(),
        ];
        let p = Proc::spawn("floor", &exe, &args, &[], &self.log("floor"))?;
        eprintln!("  floor pid {} at {}", p.pid(), p.url);
        Ok(p)
    }

    /// The trace sink a traced relay exports to.
    pub fn sink(&self) -> Result<Proc, String> {
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let args = vec!["serve-sink".into(), "--listen".into(), "127.0.0.1:0".into()];
        let p = Proc::spawn("sink", &exe, &args, &[], &self.log("sink"))?;
        eprintln!("  trace sink pid {} at {}", p.pid(), p.url);
        Ok(p)
    }

    pub fn model(&self, deltas: usize, delay_ms: u64) -> String {
        format!("{}?deltas={deltas}&delay_ms={delay_ms}", self.model)
    }

    /// `sqlite`, `redis` or the `--store` URL's scheme, before the store is set up.
    pub fn which_label(&self, which: Store) -> String {
        match (which, &self.explicit_store) {
            (Store::Default, Some(url)) => store_label(url),
            (Store::Default, None) | (Store::Sqlite, _) => "sqlite".into(),
            (Store::Redis, _) => "redis".into(),
            (Store::RedisCluster, _) => "redis-cluster".into(),
        }
    }
}

impl StoreErr {
    pub fn into_msg(self) -> String {
        match self {
            StoreErr::NotAvailable(m) | StoreErr::Failed(m) => m,
        }
    }
}

pub async fn start_env(o: &Opts, bin_dir: PathBuf, logs: PathBuf) -> Result<Env, String> {
    let serial = std::sync::atomic::AtomicU64::new(0);
    let upstream = match o.upstream {
        UpstreamKind::Stamp => {
            let exe = std::env::current_exe().map_err(|e| e.to_string())?;
            let args = vec![
                "serve-upstream".into(),
                "--listen".into(),
                "127.0.0.1:0".into(),
            ];
            Proc::spawn("upstream", &exe, &args, &[], &logs.join("upstream.log"))?
        }
        UpstreamKind::Fake => {
            let args = vec!["--listen".into(), "127.0.0.1:0".into()];
            Proc::spawn(
                "fake-upstream",
                &bin_dir.join("fake-upstream"),
                &args,
                &[],
                &logs.join("upstream.log"),
            )?
        }
    };
    let mcp_args = vec!["--listen".into(), "127.0.0.1:0".into()];
    let mcp = Proc::spawn(
        "mcp-test-server",
        &bin_dir.join("mcp-test-server"),
        &mcp_args,
        &[],
        &logs.join("mcp.log"),
    )?;
    eprintln!(
        "upstream pid {} at {}; MCP server pid {} at {}; logs in {}",
        upstream.pid(),
        upstream.url,
        mcp.pid(),
        mcp.url,
        logs.display()
    );
    let upstream_v1 = format!("{}/v1", upstream.origin());
    let (model, stamps) = match o.upstream {
        UpstreamKind::Stamp => ("bench".to_string(), true),
        UpstreamKind::Fake => ("fake-model".to_string(), false),
    };
    let wants_stores = matches!(
        o.scenario,
        Scenario::All
            | Scenario::Stream
            | Scenario::Replay
            | Scenario::StoreScale
            | Scenario::Compare
    );
    let redis = if o.store.is_some() || !wants_stores {
        RedisState::NotWanted
    } else {
        match procs::find_redis_server() {
            None => {
                eprintln!("redis-server not on PATH: the Redis rows are N/A");
                RedisState::Missing
            }
            Some(prog) => match Redis::spawn(&prog, &logs.join("redis-server.log")) {
                Ok(r) => {
                    eprintln!("redis-server pid {} at {}", r.pid(), r.url(0));
                    RedisState::Up(r)
                }
                Err(e) => RedisState::Failed(e),
            },
        }
    };
    let store_dir = TempDir::new()?;
    // A Redis Cluster for the store-scale scenario's cluster row.
    let cluster = match (&redis, o.scenario) {
        (RedisState::Up(_), Scenario::All | Scenario::StoreScale) => {
            let prog = procs::find_redis_server().expect("redis-server is on PATH");
            let dir = store_dir.0.join("cluster");
            let started = std::fs::create_dir_all(&dir)
                .map_err(|e| e.to_string())
                .and_then(|_| RedisCluster::start(&prog, &dir, &logs));
            match &started {
                Ok(c) => eprintln!("Redis Cluster at {}", c.url()),
                Err(e) => eprintln!("Redis Cluster not started: {e}"),
            }
            Some(started)
        }
        _ => None,
    };
    Ok(Env {
        bin_dir,
        logs,
        ticks: procs::clock_ticks_per_sec(),
        upstream,
        upstream_v1,
        model,
        stamps,
        mcp,
        serial,
        explicit_store: o.store.clone(),
        relay_env: o
            .relay_env
            .iter()
            .map(|kv| {
                kv.split_once('=')
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .ok_or(format!("--relay-env {kv:?}: expected KEY=VALUE"))
            })
            .collect::<Result<_, _>>()?,
        store_dir,
        redis,
        cluster,
    })
}
