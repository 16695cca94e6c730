//! Child processes of the benchmark (relay, floor, upstream, MCP server) and what `/proc` says
//! about them: CPU ticks (`utime + stime`, dead threads included) and resident memory.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// A child process that printed `listening on http://ADDR...`; killed when dropped.
pub struct Proc {
    pub url: String,
    child: Child,
}

impl Proc {
    /// Starts `program args`, waits (at most 20 s) for its `listening on URL` line. Its stderr
    /// goes to `log` (a file), so a noisy child does not garble the table.
    pub fn spawn(name: &str, program: &Path, args: &[String], env: &[(&str, &str)], log: &Path) -> Result<Proc, String> {
        let stderr = std::fs::File::create(log).map_err(|e| format!("{name}: cannot create {}: {e}", log.display()))?;
        let mut cmd = Command::new(program);
        cmd.args(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::from(stderr));
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().map_err(|e| format!("{name}: cannot start {}: {e}", program.display()))?;
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        // Reads the first line, then keeps draining so the child never blocks on a full pipe.
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            let first = lines.next();
            let _ = tx.send(first.and_then(Result::ok));
            for _ in lines {}
        });
        let line = match rx.recv_timeout(Duration::from_secs(20)) {
            Ok(Some(l)) => l,
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("{name}: no `listening on` line within 20 s (see {})", log.display()));
            }
        };
        let Some(url) = line.strip_prefix("listening on ") else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("{name}: unexpected first line {line:?}"));
        };
        Ok(Proc { url: url.trim().to_string(), child })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `http://ADDR` without any path the child printed after it.
    pub fn origin(&self) -> String {
        let rest = self.url.strip_prefix("http://").unwrap_or(&self.url);
        let host = rest.split('/').next().unwrap_or(rest);
        format!("http://{host}")
    }

}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `utime + stime` of a process in clock ticks (all its threads, living and dead).
pub fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces: fields are counted after its closing paren.
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After ')' the fields start at number 3 (state); utime is 14 and stime 15.
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// A `kB` line of `/proc/PID/status` (`VmRSS`, `VmHWM`), in KiB.
pub fn status_kib(pid: u32, key: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with(key) && l[key.len()..].starts_with(':'))?;
    line[key.len() + 1..].split_whitespace().next()?.parse().ok()
}

/// Open file descriptors of a process.
pub fn open_fds(pid: u32) -> Option<usize> {
    Some(std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count())
}

/// Clock ticks per second (`getconf CLK_TCK`, 100 on Linux unless told otherwise).
pub fn clock_ticks_per_sec() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|t| *t > 0.0)
        .unwrap_or(100.0)
}
