//! responses-relay: the OpenAI Responses API, with hosted MCP tools, in front of any
//! OpenAI-compatible model. Layers, in reading order:
//!
//! - [`api`]: the Responses wire types (requests, Response, items, events, errors). No IO.
//! - [`upstream`]: the model server (Chat Completions or stateless Responses) as model events.
//! - [`run`]: one Response: prepare, the agent loop, the transcoder, the emitter and the log.
//! - [`store`]: where runs live.
//! - [`http`] and [`server`]: routes, SSE, status codes; the accept loop and graceful shutdown.
//! - [`logs`]: export, timeline and replay of recorded runs.
//! - [`config`]: the command line and configuration file; [`telemetry`]: redacted logging.
//! - [`demo`]: `responses-relay demo`, with the scripted model and MCP test server it starts.

pub mod api;
pub mod app;
pub mod config;
pub mod demo;
pub mod eventlog;
pub mod http;
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

pub use app::App;
pub use config::Config;

/// Installs the process-wide TLS provider (ring). Idempotent.
pub fn install_tls() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
