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
    pub fn spawn(
        name: &str,
        program: &Path,
        args: &[String],
        env: &[(&str, &str)],
        log: &Path,
    ) -> Result<Proc, String> {
        let stderr = std::fs::File::create(log)
            .map_err(|e| format!("{name}: cannot create {}: {e}", log.display()))?;
        let mut cmd = Command::new(program);
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr));
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("{name}: cannot start {}: {e}", program.display()))?;
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
                return Err(format!(
                    "{name}: no `listening on` line within 20 s (see {})",
                    log.display()
                ));
            }
        };
        let Some(url) = line.strip_prefix("listening on ") else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("{name}: unexpected first line {line:?}"));
        };
        Ok(Proc {
            url: url.trim().to_string(),
            child,
        })
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

/// The fields of `/proc/PID/stat` after the command name (the first is the state, field 3).
fn stat_fields(pid: u32) -> Option<Vec<u64>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces: fields are counted after its closing paren.
    let rest = &stat[stat.rfind(')')? + 1..];
    // The state is not a number: 0 in its place keeps the indices.
    Some(
        rest.split_whitespace()
            .map(|f| f.parse().unwrap_or(0))
            .collect(),
    )
}

/// The live descendants of `pid` (children, their children, ...), read from every `/proc/PID/stat`.
pub fn descendants(pid: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let parents: Vec<(u32, u32)> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|p| Some((p, *stat_fields(p)?.get(1)? as u32)))
        .collect();
    let mut out = vec![pid];
    let mut i = 0;
    while i < out.len() {
        let parent = out[i];
        out.extend(
            parents
                .iter()
                .filter(|(_, pp)| *pp == parent)
                .map(|(p, _)| *p),
        );
        i += 1;
    }
    out.remove(0);
    out
}

/// CPU ticks of `pid`'s whole process tree: its own and every live descendant's `utime + stime`,
/// plus `cutime + cstime` (the children it has reaped). A gateway that spawns workers (or a
/// launcher that keeps its server as a child) is measured whole; a single process reads the
/// same as [`cpu_ticks`].
pub fn tree_cpu_ticks(pid: u32) -> Option<u64> {
    let f = stat_fields(pid)?;
    let own = f.get(11)? + f.get(12)? + f.get(13)? + f.get(14)?;
    let kids: u64 = descendants(pid)
        .into_iter()
        .filter_map(|p| {
            let f = stat_fields(p)?;
            Some(f.get(11)? + f.get(12)? + f.get(13)? + f.get(14)?)
        })
        .sum();
    Some(own + kids)
}

/// The whole machine's busy and total CPU ticks so far (`/proc/stat`; idle and iowait are not
/// busy), over all cores.
pub fn machine_ticks() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest time is already in user).
    let total: u64 = v.iter().take(8).sum();
    let idle = v.get(3)? + v.get(4).copied().unwrap_or(0);
    Some((total - idle, total))
}

/// A `kB` line of `/proc/PID/status` (`VmRSS`, `VmHWM`), in KiB.
pub fn status_kib(pid: u32, key: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status
        .lines()
        .find(|l| l.starts_with(key) && l[key.len()..].starts_with(':'))?;
    line[key.len() + 1..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
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

/// A `redis-server` child on a loopback port, no persistence; killed when dropped.
pub struct Redis {
    pub port: u16,
    child: Child,
}

/// Where `redis-server` is on `PATH`, if anywhere.
pub fn find_redis_server() -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("redis-server"))
        .find(|p| p.is_file())
}

impl Redis {
    /// Starts `program` on a free loopback port (a few attempts: the port is picked before the
    /// server binds it) and waits until it answers `PING`.
    pub fn spawn(program: &Path, log: &Path) -> Result<Redis, String> {
        Self::spawn_with(program, log, |_| Vec::new())
    }

    /// As [`Redis::spawn`], with more arguments (`extra` of the port picked).
    pub fn spawn_with(
        program: &Path,
        log: &Path,
        extra: impl Fn(u16) -> Vec<String>,
    ) -> Result<Redis, String> {
        let mut last = String::new();
        for _ in 0..3 {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .map_err(|e| format!("redis-server: no free port: {e}"))?
                .port();
            let stdout = std::fs::File::create(log)
                .map_err(|e| format!("redis-server: cannot create {}: {e}", log.display()))?;
            let stderr = stdout.try_clone().map_err(|e| e.to_string())?;
            let p = port.to_string();
            let args = [
                "--port",
                &p,
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--daemonize",
                "no",
                "--protected-mode",
                "yes",
            ];
            let child = Command::new(program)
                .args(args)
                .args(extra(port))
                .stdin(Stdio::null())
                .stdout(Stdio::from(stdout))
                .stderr(Stdio::from(stderr))
                .spawn()
                .map_err(|e| format!("redis-server: cannot start {}: {e}", program.display()))?;
            let mut r = Redis { port, child };
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while std::time::Instant::now() < deadline {
                if let Ok(Some(status)) = r.child.try_wait() {
                    last = format!("redis-server exited with {status} (see {})", log.display());
                    break;
                }
                if r.command("PING").is_ok_and(|a| a.starts_with("+PONG")) {
                    return Ok(r);
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            if last.is_empty() {
                last = format!(
                    "redis-server did not answer PING within 10 s (see {})",
                    log.display()
                );
            }
        }
        Err(last)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `redis://127.0.0.1:PORT/DB`.
    pub fn url(&self, db: u32) -> String {
        format!("redis://127.0.0.1:{}/{db}", self.port)
    }

    /// A numeric field of `INFO section` (`used_memory` of `memory`).
    pub fn info_field(&self, section: &str, field: &str) -> Result<u64, String> {
        use std::io::{Read, Write};
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], self.port));
        let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(500))
            .map_err(|e| e.to_string())?;
        s.set_read_timeout(Some(Duration::from_secs(30)))
            .map_err(|e| e.to_string())?;
        s.write_all(format!("INFO {section}\r\n").as_bytes())
            .map_err(|e| e.to_string())?;
        let mut r = BufReader::new(s);
        let mut head = String::new();
        r.read_line(&mut head).map_err(|e| e.to_string())?;
        let len: usize = head
            .trim()
            .strip_prefix('$')
            .and_then(|n| n.parse().ok())
            .ok_or(format!("INFO {section}: unexpected answer {head:?}"))?;
        let mut body = vec![0; len];
        r.read_exact(&mut body).map_err(|e| e.to_string())?;
        String::from_utf8_lossy(&body)
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{field}:"))?.trim().parse().ok())
            .ok_or(format!("INFO {section} has no {field}"))
    }

    /// One inline command (`PING`, `FLUSHALL`); the first line of the answer.
    pub fn command(&self, cmd: &str) -> Result<String, String> {
        use std::io::Write;
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], self.port));
        let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(500))
            .map_err(|e| e.to_string())?;
        s.set_read_timeout(Some(Duration::from_secs(30)))
            .map_err(|e| e.to_string())?;
        s.write_all(format!("{cmd}\r\n").as_bytes())
            .map_err(|e| e.to_string())?;
        let mut line = String::new();
        BufReader::new(s)
            .read_line(&mut line)
            .map_err(|e| e.to_string())?;
        Ok(line)
    }
}

/// The benchmark's own Redis Cluster: three primaries on loopback, joined by `redis-cli
/// --cluster create`.
pub struct RedisCluster {
    pub nodes: Vec<Redis>,
}

impl RedisCluster {
    /// Starts it (its nodes' files in `dir`, their logs in `logs`) and waits until it is `ok`.
    pub fn start(program: &Path, dir: &Path, logs: &Path) -> Result<RedisCluster, String> {
        let free = || -> Result<u16, String> {
            Ok(std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .map_err(|e| e.to_string())?
                .port())
        };
        let mut nodes = Vec::new();
        for i in 0..3 {
            let bus = free()?;
            let dir = dir.display().to_string();
            nodes.push(Redis::spawn_with(
                program,
                &logs.join(format!("redis-cluster-{i}.log")),
                |port| {
                    [
                        "--cluster-enabled",
                        "yes",
                        "--cluster-config-file",
                        &format!("nodes-{port}.conf"),
                        "--cluster-port",
                        &bus.to_string(),
                        "--dir",
                        &dir,
                    ]
                    .map(String::from)
                    .to_vec()
                },
            )?);
        }
        let out = Command::new("redis-cli")
            .args(["--cluster", "create"])
            .args(nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)))
            .arg("--cluster-yes")
            .output()
            .map_err(|e| format!("redis-cli: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "redis-cli --cluster create: {}",
                String::from_utf8_lossy(&out.stdout)
            ));
        }
        let cluster = RedisCluster { nodes };
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while std::time::Instant::now() < deadline {
            if cluster.nodes.iter().all(Redis::cluster_ok) {
                return Ok(cluster);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Err("the benchmark's Redis Cluster was not ok within 30 s".into())
    }

    /// `redis+cluster://` through its first node.
    pub fn url(&self) -> String {
        format!("redis+cluster://127.0.0.1:{}", self.nodes[0].port)
    }

    /// `used_memory` summed over the nodes.
    pub fn used_memory(&self) -> Result<u64, String> {
        self.nodes
            .iter()
            .map(|n| n.info_field("memory", "used_memory"))
            .sum()
    }

    /// Empties every node.
    pub fn flush(&self) -> Result<(), String> {
        for n in &self.nodes {
            n.command("FLUSHALL")?;
        }
        Ok(())
    }
}

impl Redis {
    /// Whether this cluster node says the cluster is `ok`.
    fn cluster_ok(&self) -> bool {
        use std::io::{Read, Write};
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], self.port));
        let Ok(mut s) = std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(500))
        else {
            return false;
        };
        let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
        if s.write_all(b"CLUSTER INFO\r\n").is_err() {
            return false;
        }
        let mut buf = [0u8; 4096];
        let n = s.read(&mut buf).unwrap_or(0);
        String::from_utf8_lossy(&buf[..n]).contains("cluster_state:ok")
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
