//! The `responses-relay` binary: help, bad flags (exit 64 naming the flag), the listening line,
//! and a clean exit on SIGTERM.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use crate::support::{run_relay, scratch, signal};

const BIN: &str = env!("CARGO_BIN_EXE_responses-relay");

/// The address a started `serve` prints on its first stdout line.
fn listening_address(child: &mut std::process::Child) -> String {
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    line.trim()
        .strip_prefix("listening on http://")
        .expect("listening line")
        .to_string()
}

#[test]
fn help_lists_the_serve_flags() {
    let out = run_relay(&["serve", "--help"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for flag in [
        "--listen",
        "--upstream-url",
        "--upstream-api-key",
        "--upstream-api",
        "--store",
        "--config",
        "--api-key",
    ] {
        assert!(text.contains(flag), "help lacks {flag}");
    }
}

#[test]
fn bad_values_exit_64_naming_the_flag() {
    for (args, flag) in [
        (vec!["serve", "--listen", "nowhere"], "--listen"),
        (vec!["serve", "--upstream-api", "grpc"], "--upstream-api"),
        (
            vec!["serve", "--upstream-url", "ftp://x/v1"],
            "--upstream-url",
        ),
        (vec!["serve", "--store", "postgres://x"], "--store"),
        (
            vec!["serve", "--upstream-idle-timeout", "0"],
            "--upstream-idle-timeout",
        ),
        (vec!["serve", "--mcp-tools-ttl=-1"], "--mcp-tools-ttl"),
        (vec!["serve", "--lanes", "0"], "--lanes"),
        (vec!["serve", "--no-such-flag"], "--no-such-flag"),
    ] {
        let out = Command::new(BIN)
            .args(&args)
            .env_remove("RELAY_LISTEN")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(64), "{args:?}");
        let err = String::from_utf8(out.stderr).unwrap();
        assert!(
            err.contains(flag),
            "{args:?}: stderr does not name {flag}: {err}"
        );
    }
}

/// `responses-relay serve` on a free loopback port, its upstream a port nothing answers on.
fn serve_on_a_free_port() -> Command {
    let mut command = Command::new(BIN);
    command.args(["serve", "--listen", "127.0.0.1:0"]);
    command.args(["--upstream-url", "http://127.0.0.1:9/v1"]);
    command
}

#[test]
fn config_file_and_environment_are_read_with_flags_winning() {
    let dir = scratch("cfg");
    let file = dir.join("relay.toml");
    std::fs::write(&file, "listen = \"not an address\"\n").unwrap();
    let out = run_relay(&["serve", "--config", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--listen"));
    std::fs::write(&file, "unknown_key = 1\n").unwrap();
    let out = run_relay(&["serve", "--config", file.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(64));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--config"));
    let out = Command::new(BIN)
        .args(["serve"])
        .env("RELAY_UPSTREAM_API", "bogus")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(64));
}

#[test]
fn serve_prints_its_address_and_exits_cleanly_on_sigterm() {
    // The embedded default store (SQLite under ./relay-data), in a scratch working directory.
    let dir = scratch("serve");
    let mut child = serve_on_a_free_port()
        .current_dir(&dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let addr = listening_address(&mut child);
    let health = std::net::TcpStream::connect(&addr);
    assert!(health.is_ok());
    signal(child.id(), "-TERM");
    let status = child.wait().unwrap();
    assert!(status.success(), "exit status {status:?}");
    assert!(
        dir.join("relay-data/relay.sqlite3").exists(),
        "the default store was not created"
    );
}

/// Starts `serve` with `args` and `env` (other `RELAY_*` switches removed), sends one request
/// naming an MCP server on loopback, and answers the status line and body. The upstream and the
/// MCP server are closed loopback ports: only the SSRF decision differs between the cases.
fn loopback_mcp_request(args: &[&str], env: &[(&str, &str)]) -> (u16, String) {
    use std::io::{Read, Write};
    let mut cmd = Command::new(BIN);
    cmd.args([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--store",
        "memory",
        "--upstream-url",
        "http://127.0.0.1:9/v1",
    ])
    .args(args)
    .env_remove("RELAY_MCP_ALLOW_PRIVATE_NETWORKS")
    .env_remove("RELAY_CONFIG")
    .stdout(Stdio::piped())
    .stderr(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let addr = listening_address(&mut child);
    let body = r#"{"model":"m","input":"hi","tools":[{"type":"mcp","server_label":"local","server_url":"http://127.0.0.1:9/mcp","require_approval":"never"}]}"#;
    let mut conn = std::net::TcpStream::connect(&addr).unwrap();
    write!(
        conn,
        "POST /v1/responses HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    conn.read_to_string(&mut answer).unwrap();
    let _ = child.kill();
    let _ = child.wait();
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status line");
    (status, answer)
}

#[test]
fn the_environment_and_flags_turn_off_a_switch_the_config_file_turns_on() {
    let dir = scratch("switch");
    let file = dir.join("relay.toml");
    std::fs::write(&file, "mcp_allow_private_networks = true\n").unwrap();
    let file = file.to_str().unwrap();
    let refused = |(status, answer): (u16, String)| {
        status == 400 && answer.contains("--mcp-allow-private-networks")
    };
    // The file alone allows loopback MCP servers: the request gets past the SSRF guard.
    let allowed = loopback_mcp_request(&["--config", file], &[]);
    assert!(
        !refused(allowed.clone()),
        "the file's switch was not applied: {}",
        allowed.1
    );
    // The environment turns it off again; so does the flag, which also beats the environment.
    for (args, env) in [
        (
            vec!["--config", file],
            vec![("RELAY_MCP_ALLOW_PRIVATE_NETWORKS", "false")],
        ),
        (
            vec!["--config", file, "--mcp-allow-private-networks=false"],
            vec![],
        ),
        (
            vec!["--mcp-allow-private-networks=false"],
            vec![("RELAY_MCP_ALLOW_PRIVATE_NETWORKS", "true")],
        ),
    ] {
        let answer = loopback_mcp_request(&args, &env);
        assert!(
            refused(answer.clone()),
            "{args:?} {env:?}: not refused: {}",
            answer.1
        );
    }
    // `--mcp-allow-host` is `RELAY_MCP_ALLOW_HOST` (comma separated), as every flag is `RELAY_<FLAG>`.
    let host = loopback_mcp_request(&[], &[("RELAY_MCP_ALLOW_HOST", "example.org,127.0.0.1")]);
    assert!(
        !refused(host.clone()),
        "RELAY_MCP_ALLOW_HOST was not applied: {}",
        host.1
    );
    assert!(
        refused(loopback_mcp_request(&[], &[])),
        "loopback is allowed by default"
    );
    // A bare flag still turns it on, whatever the environment says.
    let on = loopback_mcp_request(
        &["--mcp-allow-private-networks"],
        &[("RELAY_MCP_ALLOW_PRIVATE_NETWORKS", "false")],
    );
    assert!(
        !refused(on.clone()),
        "the bare flag was not applied: {}",
        on.1
    );
}

#[test]
fn bad_key_entries_exit_64_naming_them() {
    let dir = scratch("keys");
    let file = dir.join("relay.toml");
    for (toml, named) in [
        ("[[keys]]\ntenant = \"a\"\n", "keys[0]"),
        (
            "[[keys]]\nkey = \"a-shared-key-1\"\ntenant = \"a\"\n[[keys]]\nkey = \"a-shared-key-1\"\ntenant = \"b\"\n",
            "keys[1]",
        ),
        (
            "[[keys]]\nkey_env = \"RELAY_TEST_UNSET_KEY\"\ntenant = \"a\"\n",
            "keys[0].key_env",
        ),
        (
            "[[keys]]\nkey = \"k\"\ntenant = \"a b\"\n",
            "keys[0].tenant",
        ),
        ("[[keys]]\nkey = \"k\"\n", "keys[0].tenant"),
        (
            "[[keys]]\nkey_sha256 = \"abc\"\ntenant = \"a\"\n",
            "keys[0].key_sha256",
        ),
        (
            "[[keys]]\nkey = \"k\"\ntenant = \"a\"\nmcp_servers = [\"docs\"]\n",
            "keys[0].mcp_servers",
        ),
    ] {
        std::fs::write(&file, toml).unwrap();
        let out = Command::new(BIN)
            .args(["serve", "--config", file.to_str().unwrap()])
            .env_remove("RELAY_TEST_UNSET_KEY")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(64), "{toml}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(named),
            "{toml}: stderr does not name {named}: {err}"
        );
        assert!(!err.contains("a-shared-key-1"), "a key was printed: {err}");
    }
}

#[test]
fn keys_from_the_config_file_admit_their_holders_only() {
    use std::io::{Read, Write};
    let dir = scratch("keyed");
    let file = dir.join("relay.toml");
    // The second key is in the file only as its SHA-256 (computed here by `sha256sum`).
    let real_hash = {
        use std::process::Command as C;
        let out = C::new("sha256sum")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .and_then(|mut c| {
                c.stdin.take().unwrap().write_all(b"hashed-key-3")?;
                c.wait_with_output()
            })
            .unwrap();
        String::from_utf8(out.stdout).unwrap()[..64].to_string()
    };
    std::fs::write(
        &file,
        format!(
            "store = \"memory\"\n[[keys]]\nkey_env = \"RELAY_TEST_TEAM_KEY\"\ntenant = \"team\"\n[[keys]]\nkey_sha256 = \"{real_hash}\"\ntenant = \"team\"\n"
        ),
    )
    .unwrap();
    let mut child = serve_on_a_free_port()
        .args(["--config", file.to_str().unwrap()])
        .env("RELAY_TEST_TEAM_KEY", "env-key-2")
        .env_remove("RELAY_API_KEYS")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let addr = listening_address(&mut child);
    let status_for = |key: &str| -> u16 {
        let mut conn = std::net::TcpStream::connect(&addr).unwrap();
        write!(
            conn,
            "GET /v1/responses/resp_none HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {key}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut answer = String::new();
        conn.read_to_string(&mut answer).unwrap();
        answer.split(' ').nth(1).unwrap().parse().unwrap()
    };
    // A key of the tenant reaches the API (the id is unknown: 404); any other key is a 401.
    assert_eq!(status_for("env-key-2"), 404);
    assert_eq!(status_for("hashed-key-3"), 404);
    assert_eq!(status_for("not-a-key"), 401);
    let _ = child.kill();
    let _ = child.wait();
}
