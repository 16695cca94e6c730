//! The relay's peers as child processes: SMG (`smg launch --backend openai`) and agentic-api
//! (`agentic-server`), run from the benchmark's Python virtual environment on loopback ports,
//! both in front of the benchmark's stamped Responses upstream. A peer is ready when a small
//! stream through it completes; it is killed with its whole process tree.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::env::Env;
use crate::procs;

/// The peers, pinned as `scripts/bench.sh` installs them.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Peer {
    Smg,
    Agentic,
}

impl Peer {
    pub const ALL: [Peer; 2] = [Peer::Smg, Peer::Agentic];

    /// The table's name (with the pinned version).
    pub fn name(self) -> &'static str {
        match self {
            Peer::Smg => "SMG 1.13.0",
            Peer::Agentic => "agentic-api 0.9.0",
        }
    }

    /// The executable in the venv's `bin/`.
    fn program(self) -> &'static str {
        match self {
            Peer::Smg => "smg",
            Peer::Agentic => "agentic-server",
        }
    }

    /// Where stored runs go: SMG has no SQLite backend (its default is memory); agentic-api
    /// stores in SQLite.
    pub fn store_label(self) -> &'static str {
        match self {
            Peer::Smg => "memory",
            Peer::Agentic => "sqlite",
        }
    }

    /// The venv's executable, or why this peer cannot be measured.
    pub fn find(self, venv: Option<&Path>) -> Result<PathBuf, String> {
        let Some(venv) = venv else {
            return Err("not installed (no --peers-venv)".into());
        };
        let p = venv.join("bin").join(self.program());
        if p.is_file() {
            Ok(p)
        } else {
            Err(format!("not installed ({} missing)", p.display()))
        }
    }
}

/// A free loopback port (picked, then released for the child to bind).
fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free port: {e}"))
}

/// A running peer; killed, with every descendant, when dropped.
pub struct PeerProc {
    pub origin: String,
    child: Child,
}

impl PeerProc {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for PeerProc {
    fn drop(&mut self) {
        for p in procs::descendants(self.child.id()) {
            // SIGKILL by pid: only this peer's own descendants.
            let _ = Command::new("kill").args(["-9", &p.to_string()]).status();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The peer's command line: on loopback only, in front of `upstream` (`http://ADDR`), storing in
/// `db` (agentic-api's SQLite file; SMG keeps its default memory history). SMG logs at `warn`
/// (at its default `info` it writes lines per request, which the relay does not), and its
/// Prometheus listener (default 0.0.0.0:29000) is moved to a free loopback port.
fn args(peer: Peer, upstream: &str, port: u16, db: &Path) -> Result<Vec<String>, String> {
    let port = port.to_string();
    let v: Vec<String> = match peer {
        Peer::Smg => {
            let prom = free_port()?.to_string();
            [
                "launch",
                "--backend",
                "openai",
                "--worker-urls",
                upstream,
                "--host",
                "127.0.0.1",
                "--port",
                &port,
                "--history-backend",
                "memory",
                "--log-level",
                "warn",
                "--prometheus-host",
                "127.0.0.1",
                "--prometheus-port",
                &prom,
            ]
            .iter()
            .map(|s| s.to_string())
            .collect()
        }
        Peer::Agentic => [
            "--llm-api-base",
            &format!("{upstream}/v1"),
            "--skip-llm-ready-check",
            "--gateway-host",
            "127.0.0.1",
            "--gateway-port",
            &port,
            "--db-url",
            &format!("sqlite:{}", db.display()),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect(),
    };
    Ok(v)
}

/// Starts `peer` from `program` and waits (at most 60 s) until a one-delta stream through it
/// completes. `db` is a fresh SQLite file path (used by agentic-api).
pub async fn start(env: &Env, peer: Peer, program: &Path, db: &Path) -> Result<PeerProc, String> {
    let port = free_port()?;
    let log = env.log(peer.program());
    let stderr =
        std::fs::File::create(&log).map_err(|e| format!("cannot create {}: {e}", log.display()))?;
    let stdout = stderr.try_clone().map_err(|e| e.to_string())?;
    let child = Command::new(program)
        .args(args(peer, &env.upstream.origin(), port, db)?)
        // Nothing is fetched from the network: no tokenizer or model downloads.
        .env("HF_HUB_OFFLINE", "1")
        .env("NO_PROXY", "127.0.0.1,localhost")
        .stdin(Stdio::null())
        .stdout(Stdio::from(stdout))
        .stderr(Stdio::from(stderr))
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", program.display()))?;
    let mut p = PeerProc {
        origin: format!("http://127.0.0.1:{port}"),
        child,
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let http = reqwest::Client::new();
    let body = crate::measure::responses_body(&env.model(1, 0), "hi", false, serde_json::json!([]));
    let mut last = String::from("no answer");
    while Instant::now() < deadline {
        if let Ok(Some(status)) = p.child.try_wait() {
            return Err(format!("exited with {status} (see {})", log.display()));
        }
        let sent = http
            .post(format!("{}/v1/responses", p.origin))
            .header("content-type", "application/json")
            .body(body.clone())
            .timeout(Duration::from_secs(5))
            .send()
            .await;
        match sent {
            Ok(r) if r.status().is_success() => match r.text().await {
                Ok(t) if t.contains("response.completed") => {
                    eprintln!("  {} pid {} at {}", peer.name(), p.pid(), p.origin);
                    return Ok(p);
                }
                Ok(t) => last = t.chars().take(200).collect(),
                Err(e) => last = e.to_string(),
            },
            Ok(r) => last = format!("HTTP {}", r.status()),
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Err(format!(
        "not ready within 60 s: {last} (see {})",
        log.display()
    ))
}
