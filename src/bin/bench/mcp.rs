//! The `mcp` scenario: the relay's agent loop (tools listed from the pool, one MCP call, the
//! answer streamed), after the floor carrying the same text deltas alone.

use std::sync::Arc;

use bytes::Bytes;

use serde_json::json;

use crate::env::{Env, Store, StoreErr};
use crate::load::{Expect, Kind, Req};
use crate::measure::{Phase, Row, measure_loop, responses_body};
use crate::options::Plan;
use crate::stream::measure_floor;

/// The body of an MCP run: the benchmark's MCP server as an `mcp` tool, one `echo` call, then
/// `plan.mcp_deltas` text deltas.
pub fn mcp_body(env: &Env, plan: &Plan, store: bool) -> Bytes {
    let tools = json!([{"type": "mcp", "server_label": "bench", "server_url": env.mcp.url, "require_approval": "never"}]);
    responses_body(
        &env.model(plan.mcp_deltas, plan.delay_ms),
        "CALL echo {\"text\":\"hi\"}",
        store,
        tools,
    )
}

/// The relay's agent loop, after the floor carrying the same text deltas alone: what moving
/// those bytes costs before any MCP or Responses work.
pub async fn scenario(env: &Env, plan: &Plan, rows: &mut Vec<Row>) -> Result<(), String> {
    eprintln!(
        "mcp: {} clients, list + 1 call + {} deltas, {} ms apart",
        plan.clients, plan.mcp_deltas, plan.delay_ms
    );
    rows.push(measure_floor(env, plan, "mcp", plan.mcp_deltas).await?);
    let su = env.store(Store::Default).map_err(StoreErr::into_msg)?;
    let relay = env.relay(&su.url)?;
    let req = Req {
        url: format!("{}/v1/responses", relay.origin()),
        body: Some(mcp_body(env, plan, false)),
    };
    let make: Arc<dyn Fn() -> Req + Send + Sync> = Arc::new(move || req.clone());
    let mut row = measure_loop(
        env,
        plan,
        Phase {
            scenario: "mcp",
            side: "relay store:false",
            pid: relay.pid(),
            kind: Kind::Relay,
            expect: Expect { mcp_call: true },
            clients: plan.clients,
            spread: plan.run_length(plan.mcp_deltas),
            make,
            also: None,
        },
    )
    .await;
    row.store = su.label.clone();
    drop(relay);
    env.release(&su);
    rows.push(row);
    Ok(())
}
