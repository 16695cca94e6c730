//! Steering through the pinned OpenAI Python SDK's own beta connection
//! (`client.beta.responses.connect()`, `connection.response.steer(...)`), every event read as the
//! SDK's typed models: a text run and an MCP run steered mid-stream, a function call's pending
//! input committed by the continuation, and the refusals.

use std::time::Duration;

use serde_json::{Value, json};

use super::*;

const SCRIPT: &str = r#"
import json, sys, httpx
from openai import OpenAI
from openai.types.beta import (BetaResponseSteerAcceptedEvent, BetaResponseSteerFailedEvent,
    BetaResponseSteerPendingEvent, BetaResponseIncompleteEvent, BetaResponseCompletedEvent)

base, upstream, mcp_url = sys.argv[1], sys.argv[2], sys.argv[3]
client = OpenAI(base_url=base, api_key="unused", max_retries=0)
TERMINAL = ("response.completed", "response.incomplete", "response.failed")
out = {}

def text_of(response):
    return "".join(c.text for o in response.output if o.type == "message"
        for c in o.content if c.type == "output_text")

def until(conn, kind, seen):
    for ev in conn:
        seen.append(ev)
        if ev.type == "error":
            raise AssertionError(f"error event: {ev}")
        if ev.type == kind:
            return ev
    raise AssertionError(f"closed before {kind}")

def terminals(conn, n, seen):
    got = []
    for ev in conn:
        seen.append(ev)
        if ev.type in TERMINAL:
            got.append(ev)
            if len(got) == n:
                return got
    raise AssertionError("closed early")

def steered_run(conn, gate, create, after):
    seen = []
    conn.response.create(**create)
    rid = until(conn, "response.created", seen).response.id
    until(conn, after, seen)
    conn.response.steer(input="also check the tests", previous_response_id=rid)
    accepted = until(conn, "response.steer.accepted", seen)
    assert isinstance(accepted, BetaResponseSteerAcceptedEvent), type(accepted)
    httpx.post(f"{upstream}/gates/{gate}")
    first, second = terminals(conn, 2, seen)
    assert isinstance(first, BetaResponseIncompleteEvent), type(first)
    return {
        "id": rid,
        "steer_id": accepted.steer.id,
        "steer_target": accepted.steer.previous_response_id,
        "first_status": first.response.status,
        "reason": first.response.incomplete_details.reason,
        "first_output": [o.type for o in first.response.output],
        "successor_previous": second.response.previous_response_id,
        "successor_status": second.response.status,
        "successor_text": text_of(second.response),
        "types": [e.type for e in seen],
    }

with client.beta.responses.connect() as conn:
    out["text"] = steered_run(conn, "p1",
        dict(model="fake-model?hold=p1", input="write the report"), "response.output_text.delta")
    tool = {"type": "mcp", "server_label": "t", "server_url": mcp_url, "require_approval": "never"}
    out["mcp"] = steered_run(conn, "p2",
        dict(model="fake-model?hold=p2", input='CALL echo {"text":"one"}', tools=[tool]),
        "response.mcp_list_tools.completed")

    # A function call: the steering input waits for the continuation.
    seen = []
    fn = {"type": "function", "name": "lookup", "parameters": {"type": "object",
        "properties": {"q": {"type": "string"}}, "required": ["q"]}}
    conn.response.create(model="fake-model?hold=p3", input='CALL lookup {"q":"x"}', tools=[fn])
    rid = until(conn, "response.created", seen).response.id
    conn.response.steer(input=[{"type": "message", "role": "user",
        "content": [{"type": "input_text", "text": "prefer recent results"}]}], previous_response_id=rid)
    until(conn, "response.steer.accepted", seen)
    httpx.post(f"{upstream}/gates/p3")
    done = until(conn, "response.completed", seen)
    assert isinstance(done, BetaResponseCompletedEvent)
    pending = until(conn, "response.steer.pending", seen)
    assert isinstance(pending, BetaResponseSteerPendingEvent), type(pending)
    stub = pending.required_input[0]
    conn.response.create(model="fake-model", previous_response_id=rid, tools=[fn],
        input=[{"type": "function_call_output", "call_id": stub.call_id, "output": "r1"}])
    cont = until(conn, "response.completed", seen)
    out["pending"] = {"reason": pending.reason, "stub": stub.to_dict(),
        "call_id": done.response.output[0].call_id, "cont_id": cont.response.id,
        "cont_text": text_of(cont.response)}

    # Refusals, each the SDK's typed failure with the input handed back.
    refusals = {}
    for name, target, payload in [
        ("unknown", "resp_nowhere", "x"),
        ("assistant", out["pending"]["cont_id"], [{"type": "message", "role": "assistant", "content": "x"}]),
        ("completed", out["pending"]["cont_id"], "late"),
    ]:
        conn.response.steer(input=payload, previous_response_id=target)
        failed = until(conn, "response.steer.failed", [])
        assert isinstance(failed, BetaResponseSteerFailedEvent), type(failed)
        refusals[name] = {"code": failed.error.code, "type": failed.error.type,
            "input": failed.steer.to_dict()["input"], "id": failed.steer.id}
    out["refusals"] = refusals
print(json.dumps(out))
"#;

#[tokio::test]
async fn the_python_sdks_beta_connection_steers_text_and_mcp_runs_and_continues_pending_input() {
    let (up, relay) = plain_relay().await;
    let server = gated_mcp().await;
    let python = std::env::var("RELAY_TEST_PYTHON")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| manifest_dir().join(".venv/bin/python"));
    let mut command = std::process::Command::new(&python);
    command
        .args([
            "-c",
            SCRIPT,
            &relay.url("/v1"),
            &format!("http://{}", up.addr),
            &server.url(),
        ])
        .env("NO_PROXY", "*");
    let run = tokio::task::spawn_blocking(move || command.output());
    let out = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("the SDK script ends")
        .unwrap()
        .unwrap_or_else(|e| {
            panic!(
                "{}: {e} (run `bash scripts/test.sh --install-only`)",
                python.display()
            )
        });
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    for (run, first_output, successor_text) in [
        (
            "text",
            json!(["message"]),
            "Hello! You said: also check the tests",
        ),
        (
            "mcp",
            json!(["mcp_list_tools", "mcp_call"]),
            "Hello! You said: also check the tests",
        ),
    ] {
        let s = &r[run];
        assert_eq!(s["steer_target"], s["id"], "{s}");
        assert_eq!(
            (s["first_status"].as_str(), s["reason"].as_str()),
            (Some("incomplete"), Some("steered")),
            "{s}"
        );
        assert_eq!(s["first_output"], first_output, "{s}");
        assert_eq!(s["successor_previous"], s["id"]);
        assert_eq!(s["successor_status"], "completed");
        assert_eq!(s["successor_text"], successor_text);
        let types: Vec<&str> = (s["types"].as_array().unwrap().iter())
            .map(|t| t.as_str().unwrap())
            .collect();
        let at = |k: &str| types.iter().position(|t| *t == k).unwrap();
        assert!(
            at("response.steer.accepted") < at("response.incomplete"),
            "{s}"
        );
        assert_eq!(
            types.iter().filter(|t| **t == "response.created").count(),
            2
        );
    }
    let p = &r["pending"];
    assert_eq!(p["reason"], "waiting_for_required_input");
    assert_eq!(
        p["stub"],
        json!({"type": "function_call_output", "call_id": p["call_id"], "name": "lookup"})
    );
    // The model saw the call's output, then the steering text last.
    assert_eq!(p["cont_text"], "Hello! You said: prefer recent results");
    let continuation = model_requests(&up).pop().unwrap();
    assert!(
        user_texts(&continuation).contains(&"prefer recent results".to_string()),
        "{continuation}"
    );
    let f = &r["refusals"];
    assert_eq!(f["unknown"]["code"], "response_not_found");
    assert_eq!(f["assistant"]["code"], "invalid_input");
    assert_eq!(f["assistant"]["input"][0]["role"], "assistant");
    assert_eq!(f["completed"]["code"], "response_already_completed");
    assert_eq!(f["completed"]["input"], "late");
    for name in ["unknown", "assistant", "completed"] {
        assert_eq!(f[name]["type"], "invalid_request_error");
        assert_eq!(f[name]["id"], Value::Null);
    }
}
