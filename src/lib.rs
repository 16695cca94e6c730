//! responses-relay: the OpenAI Responses API, with hosted MCP tools, in front of any
//! OpenAI-compatible model. The modules, in the layers of ARCHITECTURE.md ("Layers"), top down;
//! each imports only modules listed after it:
//!
//! - [`demo`]: `responses-relay demo`, the scripted peers of `relay-scripted` and a relay.
//! - [`server`]: the accept loop (HTTP/1.1 and h2c) and the graceful shutdown.
//! - [`logs`]: export, timeline and replay of recorded runs; [`usage`]: the usage report.
//! - [`http`]: routes, handlers, SSE bodies, WebSocket mode, the run viewer, status codes.
//! - [`run`]: one Response: prepare, the agent loop, the transcoder, the tool calls.
//! - [`app`]: [`App`], the shared handles every request uses.
//! - [`telemetry`]: the log subscriber, writing through a redacting writer.
//! - [`config`]: [`Config`], from the command line, environment and TOML file, validated.
//! - [`limits`]: per-key and per-tenant rate limits, token budgets and concurrent runs.
//! - [`store`]: where runs live: the live map and a memory, SQLite or Redis backend.
//! - [`mcp`]: the MCP client: validated `mcp` tools, model-facing names, the session pool.
//! - [`upstream`]: the model servers (Chat Completions or stateless Responses) as model events.
//! - [`eventlog`]: a run's log, the emitter numbering its events, the `LogSink` stores implement.
//! - [`metrics`]: the Prometheus registry and what is counted.
//! - [`redact`]: what may be shown of secrets.
//! - [`seal`]: sealing what a client carries for the relay (reasoning, compaction).
//! - [`ssrf`]: where the relay may connect on a user's behalf.
//! - [`api`]: the Responses wire types (requests, Response, items, events, errors, the fold).
//! - [`otel`]: trace spans, `traceparent`, and their export.

pub mod api;
pub mod app;
pub mod config;
pub mod demo;
pub mod eventlog;
pub mod http;
pub mod limits;
pub mod logs;
pub mod mcp;
pub mod metrics;
pub mod otel;
pub mod redact;
pub mod run;
pub mod seal;
pub mod server;
pub mod ssrf;
pub mod store;
pub mod telemetry;
pub mod upstream;
pub mod usage;

pub use app::App;
pub use config::Config;

/// Installs the process-wide TLS provider (ring). Idempotent.
pub fn install_tls() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
