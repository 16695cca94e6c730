//! The relay binary as a child process: started, read until it says where it listens, killed
//! when dropped.

/// The relay binary.
pub const RELAY_BIN: &str = env!("CARGO_BIN_EXE_responses-relay");

/// The relay as a process; killed when dropped.
pub struct RelayProcess {
    pub child: std::process::Child,
    /// `http://ADDR`, from its `listening on` line.
    pub base: String,
}

impl super::RelayApi for RelayProcess {
    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }
}

impl Drop for RelayProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `responses-relay ARGS` started with `env` set and its stderr going to `stderr`; returns once
/// it printed `listening on`.
pub fn spawn_relay(
    args: &[&str],
    env: &[(&str, &str)],
    stderr: std::process::Stdio,
) -> RelayProcess {
    use std::io::{BufRead, BufReader};
    let mut child = std::process::Command::new(RELAY_BIN)
        .args(args)
        .envs(env.iter().copied())
        .stdout(std::process::Stdio::piped())
        .stderr(stderr)
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let base = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("no listening line: {line:?}"))
        .to_string();
    RelayProcess { child, base }
}

/// The arguments of `serve` on a free loopback port, in front of `upstream`, storing in `store`
/// (a `--store` value), followed by `extra` flags.
pub fn serve_args<'a>(upstream: &'a str, store: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--upstream-url",
        upstream,
        "--store",
        store,
    ];
    args.extend_from_slice(extra);
    args
}

/// Sends `signal` (`-9`, `-TERM`, ...) to process `pid` with `kill`, which must succeed.
pub fn signal(pid: u32, signal: &str) {
    let status = std::process::Command::new("kill")
        .args([signal, &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill {signal} {pid}: {status:?}");
}

/// `responses-relay ARGS`, run to its end.
pub fn run_relay(args: &[&str]) -> std::process::Output {
    std::process::Command::new(RELAY_BIN)
        .args(args)
        .output()
        .unwrap()
}
