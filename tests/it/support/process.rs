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
