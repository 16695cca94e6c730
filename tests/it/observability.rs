//! What an operator sees (SPEC §16, request ids and logs): `x-request-id` on every answer, every
//! rejection logged once with its route, status, code, `param` and request id, the request id on
//! the log lines of what the request started, `--log-format json` one object per line. The relay
//! runs as a process, its stderr read back.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use futures::StreamExt;
use serde_json::{Value, json};

use crate::support::*;

const BIN: &str = env!("CARGO_BIN_EXE_responses-relay");

struct Proc {
    child: Child,
    base: String,
    log: std::path::PathBuf,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn(upstream: &str, format: &str) -> Proc {
    let log = scratch("observability").join("relay.err");
    let mut child = Command::new(BIN)
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--upstream-url",
            upstream,
            "--store",
            "memory",
            "--log-format",
            format,
        ])
        .env("RELAY_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
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
    Proc { child, base, log }
}

impl Proc {
    fn lines(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// The JSON log lines (every line must be one object).
    fn json_lines(&self) -> Vec<Value> {
        self.lines()
            .iter()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
            .collect()
    }
}

fn request_id(r: &reqwest::Response) -> String {
    r.headers()
        .get("x-request-id")
        .expect("every answer has x-request-id")
        .to_str()
        .unwrap()
        .to_string()
}

#[tokio::test]
async fn every_answer_has_a_request_id_and_every_rejection_is_logged_once_with_it() {
    let up = upstream().await;
    let relay = spawn(&up.base_url(), "json");
    let c = client();
    let ok = c
        .get(format!("{}/healthz", relay.base))
        .send()
        .await
        .unwrap();
    assert!(request_id(&ok).starts_with("req_"));
    // A sane id of the client's is kept; anything else is replaced.
    let given = c
        .get(format!("{}/healthz", relay.base))
        .header("x-request-id", "trace-42.a")
        .send()
        .await
        .unwrap();
    assert_eq!(request_id(&given), "trace-42.a");
    let bogus = c
        .get(format!("{}/healthz", relay.base))
        .header("x-request-id", "no spaces allowed")
        .send()
        .await
        .unwrap();
    assert!(request_id(&bogus).starts_with("req_"));

    let bad = c
        .post(format!("{}/v1/responses", relay.base))
        .json(&json!({"model": "fake-model", "input": "x", "temperatur": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    let bad_id = request_id(&bad);
    let missing = c
        .get(format!("{}/v1/responses/resp_nope", relay.base))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    let missing_id = request_id(&missing);
    let good = c
        .post(format!("{}/v1/responses", relay.base))
        .json(&json!({"model": "fake-model", "input": "fine"}))
        .send()
        .await
        .unwrap();
    assert_eq!(good.status(), 200);
    let good_id = request_id(&good);

    // The upgrade's answer too, and the socket's own log lines carry its id.
    let url = format!("{}/v1/responses", relay.base.replace("http://", "ws://"));
    let tcp = tokio::net::TcpStream::connect(relay.base.trim_start_matches("http://"))
        .await
        .unwrap();
    let (mut ws, resp) = tokio_tungstenite::client_async(url, tcp).await.unwrap();
    let ws_id = resp.headers()["x-request-id"].to_str().unwrap().to_string();
    assert!(ws_id.starts_with("req_"));
    use futures::SinkExt;
    ws.send(tokio_tungstenite::tungstenite::Message::Text(
        json!({"type": "response.create", "model": "fake-model", "input": "x", "bogus": 1})
            .to_string()
            .into(),
    ))
    .await
    .unwrap();
    let _ = ws.next().await;
    drop(ws);

    let mut lines = Vec::new();
    for _ in 0..200 {
        lines = relay.json_lines();
        if lines
            .iter()
            .any(|l| l["message"] == "websocket connection closed")
        {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let of = |id: &str| -> Vec<&Value> {
        lines
            .iter()
            .filter(|l| l["span"]["request_id"] == id)
            .collect()
    };
    let rejected: Vec<&Value> = of(&bad_id)
        .into_iter()
        .filter(|l| l["message"] == "request rejected")
        .collect();
    assert_eq!(rejected.len(), 1, "logged once: {lines:?}");
    let r = rejected[0];
    assert_eq!(r["level"], "INFO");
    assert_eq!(r["route"], "POST /v1/responses");
    assert_eq!(r["status"], 400);
    assert_eq!(r["code"], "unknown_parameter");
    assert_eq!(r["param"], "temperatur");
    assert!(r["timestamp"].is_string());
    let nf = of(&missing_id);
    assert_eq!(nf.len(), 1, "{lines:?}");
    assert_eq!(nf[0]["route"], "GET /v1/responses/{id}");
    assert_eq!(nf[0]["status"], 404);
    assert!(
        of(&good_id)
            .iter()
            .all(|l| l["message"] != "request rejected"),
        "a good request is not logged as rejected"
    );
    let socket: Vec<&str> = of(&ws_id)
        .iter()
        .map(|l| l["message"].as_str().unwrap())
        .collect();
    assert_eq!(
        socket,
        [
            "websocket connection opened",
            "websocket error frame",
            "websocket connection closed"
        ],
        "{lines:?}"
    );
}

#[tokio::test]
async fn text_logs_name_the_request_id_too() {
    let up = upstream().await;
    let relay = spawn(&up.base_url(), "text");
    let bad = client()
        .post(format!("{}/v1/responses", relay.base))
        .json(&json!({"model": "fake-model"}))
        .send()
        .await
        .unwrap();
    let id = request_id(&bad);
    let mut found = None;
    for _ in 0..200 {
        found = relay
            .lines()
            .into_iter()
            .find(|l| l.contains("request rejected"));
        if found.is_some() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let line = found.expect("the rejection is logged");
    assert!(line.contains(&format!("request_id={id}")), "{line}");
    assert!(line.contains("status=400"), "{line}");
    assert!(!line.contains('\u{1b}'), "no colours in a log file: {line}");
}
