//! The server's MCP behaviour: the known tools (`echo`, `add`, `fail`, `boom`, `slow`, `whoami`,
//! `image`, `structured`, `big`, and with `long_tools` `progress` and `gate`), the numbered catalog
//! (`tool_000`.., listed in pages of [`PAGE_SIZE`] when there is one), and the session hooks
//! (peers told of list changes, `subscriptions/listen` streams). Tools are listed sorted by
//! name, catalog tools after them.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use rmcp::{
    ErrorData, ServerHandler,
    handler::server::{
        common::Extension,
        router::tool::ToolRouter,
        tool::ToolCallContext,
        wrapper::{Json, Parameters},
    },
    model::{
        CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, ErrorCode,
        ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
    },
    schemars,
    service::{RequestContext, RoleServer},
    tool, tool_handler, tool_router,
};
use tokio_util::sync::CancellationToken;

use super::State;

/// A 1x1 PNG, base64 (70 bytes decoded).
pub const TINY_PNG_BASE64: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";

/// Catalog tools are listed in pages of this many tools.
const PAGE_SIZE: usize = 10;

const CATALOG_VERBS: &[&str] = &[
    "get", "create", "delete", "list", "update", "search", "send", "convert",
];
const CATALOG_TOPICS: &[&str] = &[
    "weather forecast",
    "invoice",
    "calendar event",
    "email message",
    "stock price",
    "flight booking",
    "hotel reservation",
    "currency exchange rate",
    "contact card",
    "shared document",
    "support ticket",
    "shipping label",
    "payroll record",
    "sales lead",
    "git repository",
    "database backup",
    "dns record",
    "podcast episode",
    "recipe",
    "fitness workout",
    "parking permit",
    "library loan",
    "tax return",
    "insurance claim",
    "train timetable",
];

/// The topic of catalog tool `i`: a verb and an object, unique for the first 200 tools of a seed.
pub fn catalog_topic(i: usize, seed: usize) -> String {
    let k = i + seed * 61;
    let verb = CATALOG_VERBS[k % CATALOG_VERBS.len()];
    let topic = CATALOG_TOPICS[(k / CATALOG_VERBS.len()) % CATALOG_TOPICS.len()];
    format!("{verb} {topic}")
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct EchoArgs {
    /// The text to echo.
    text: String,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct AddArgs {
    a: f64,
    b: f64,
}

#[derive(Debug, serde::Serialize, schemars::JsonSchema)]
struct AddOut {
    sum: f64,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct ProgressArgs {
    /// Milliseconds to work.
    ms: u64,
    /// Milliseconds between progress notifications.
    every: u64,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct SlowArgs {
    /// Milliseconds to wait.
    ms: u64,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct GateArgs {
    /// The gate to wait for.
    name: String,
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
struct BigArgs {
    /// How many bytes of text to return.
    bytes: usize,
}

/// The rmcp server handler, one per session; every session shares the server's `State`.
#[derive(Clone)]
pub(super) struct TestServer {
    tool_router: ToolRouter<Self>,
    state: Arc<State>,
}

/// Counts a `slow` call as cancelled unless it finished.
struct CancelCounter(Arc<State>, bool);

impl Drop for CancelCounter {
    fn drop(&mut self) {
        if !self.1 {
            self.0.cancelled.fetch_add(1, Ordering::SeqCst);
        }
    }
}

const STANDARD_HEADERS: &[&str] = &[
    "accept",
    "accept-encoding",
    "authorization",
    "connection",
    "content-length",
    "content-type",
    "host",
    "last-event-id",
    "mcp-method",
    "mcp-name",
    "mcp-protocol-version",
    "mcp-session-id",
    "user-agent",
];

#[tool_router]
impl TestServer {
    pub(super) fn new(state: Arc<State>) -> Self {
        TestServer {
            tool_router: Self::tool_router(),
            state,
        }
    }

    #[tool(
        description = "Echoes the text back",
        annotations(read_only_hint = true)
    )]
    async fn echo(&self, Parameters(EchoArgs { text }): Parameters<EchoArgs>) -> String {
        text
    }

    #[tool(description = "Adds two numbers (structured output)")]
    async fn add(&self, Parameters(AddArgs { a, b }): Parameters<AddArgs>) -> Json<AddOut> {
        Json(AddOut { sum: a + b })
    }

    #[tool(description = "Always fails with isError")]
    async fn fail(&self) -> Result<String, String> {
        match self.state.fail_bytes.load(Ordering::SeqCst) {
            0 => Err("tool failed on purpose".to_string()),
            n => Err("e".repeat(n)),
        }
    }

    #[tool(description = "Answers with a JSON-RPC error")]
    async fn boom(&self) -> Result<CallToolResult, ErrorData> {
        Err(ErrorData::new(ErrorCode(-32042), "boom", None))
    }

    #[tool(
        description = "Works ms milliseconds, notifying progress every `every` ms (to the call's progress token)"
    )]
    async fn progress(
        &self,
        Parameters(ProgressArgs { ms, every }): Parameters<ProgressArgs>,
        context: RequestContext<RoleServer>,
    ) -> Result<String, String> {
        let token = context
            .meta
            .get_progress_token()
            .ok_or("the call asked for no progress")?;
        let started = std::time::Instant::now();
        let mut sent = 0u32;
        while started.elapsed() < Duration::from_millis(ms) {
            tokio::time::sleep(Duration::from_millis(every.max(1))).await;
            sent += 1;
            let note = rmcp::model::ProgressNotificationParam::new(token.clone(), f64::from(sent));
            context
                .peer
                .notify_progress(note)
                .await
                .map_err(|e| e.to_string())?;
        }
        Ok(format!("worked {ms} ms, {sent} progress notifications"))
    }

    #[tool(description = "Waits ms milliseconds; stops when cancelled")]
    async fn slow(
        &self,
        Parameters(SlowArgs { ms }): Parameters<SlowArgs>,
        ct: CancellationToken,
    ) -> Result<String, String> {
        self.state.slow_started.fetch_add(1, Ordering::SeqCst);
        let mut counter = CancelCounter(self.state.clone(), false);
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(ms)) => {
                counter.1 = true;
                Ok(format!("waited {ms} ms"))
            }
            _ = ct.cancelled() => Err("cancelled".to_string()),
        }
    }

    #[tool(description = "Waits until the test opens the gate `name`; stops when cancelled")]
    async fn gate(
        &self,
        Parameters(GateArgs { name }): Parameters<GateArgs>,
        ct: CancellationToken,
    ) -> Result<String, String> {
        let mut counter = CancelCounter(self.state.clone(), false);
        tokio::select! {
            _ = self.state.gate(&name) => {
                counter.1 = true;
                Ok(format!("gate {name} opened"))
            }
            _ = ct.cancelled() => Err("cancelled".to_string()),
        }
    }

    #[tool(description = "Says whether the bearer token matched, and which custom headers arrived")]
    async fn whoami(&self, Extension(parts): Extension<hyper::http::request::Parts>) -> String {
        let auth = parts
            .headers
            .get("authorization")
            .and_then(|v| v.to_str().ok());
        let authorized = match (&self.state.opts.require_bearer, auth) {
            (Some(token), Some(got)) => got == format!("Bearer {token}"),
            (None, Some(got)) => got.starts_with("Bearer "),
            _ => false,
        };
        let mut names: Vec<String> = parts
            .headers
            .keys()
            .map(|k| k.as_str().to_string())
            .filter(|k| !STANDARD_HEADERS.contains(&k.as_str()))
            .collect();
        names.sort();
        names.dedup();
        format!(
            "{}; headers: {}",
            if authorized {
                "authorized"
            } else {
                "anonymous"
            },
            names.join(",")
        )
    }

    #[tool(description = "Returns an image and a text block")]
    async fn image(&self) -> CallToolResult {
        CallToolResult::success(vec![
            ContentBlock::image(TINY_PNG_BASE64, "image/png"),
            ContentBlock::text("a tiny image"),
        ])
    }

    #[tool(description = "Returns only structured content")]
    async fn structured(&self) -> CallToolResult {
        let mut r = CallToolResult::success(vec![]);
        r.structured_content = Some(serde_json::json!({"temperature": 21.5, "unit": "C"}));
        r
    }

    #[tool(description = "Returns a text of that many bytes")]
    async fn big(&self, Parameters(BigArgs { bytes }): Parameters<BigArgs>) -> String {
        "x".repeat(bytes)
    }
}

impl TestServer {
    fn catalog_tools(&self) -> Vec<Tool> {
        let schema = serde_json::json!({"type": "object", "properties": {}});
        let schema = Arc::new(schema.as_object().cloned().unwrap_or_default());
        (0..self.state.catalog.load(Ordering::SeqCst))
            .map(|i| {
                let topic = catalog_topic(i, self.state.opts.catalog_seed);
                Tool::new(
                    format!("tool_{i:03}"),
                    format!("Catalog tool number {i}: {topic}"),
                    schema.clone(),
                )
            })
            .collect()
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for TestServer {
    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let mut all = self.tool_router.list_all();
        if !self.state.opts.long_tools {
            all.retain(|t| t.name != "progress" && t.name != "gate");
        }
        all.sort_by(|a, b| a.name.cmp(&b.name));
        all.extend(self.catalog_tools());
        if self.state.opts.long_tools {
            let schema = serde_json::json!({"type": "object", "properties": {"ms": {"type": "integer"}}, "required": ["ms"]});
            let research = Tool::new(
                "research",
                "Researches for ms milliseconds (a task)",
                Arc::new(schema.as_object().cloned().unwrap_or_default()),
            );
            all.push(research);
        }
        if self.state.catalog.load(Ordering::SeqCst) == 0 {
            return Ok(ListToolsResult::with_all_items(all));
        }
        let start = match request.and_then(|r| r.cursor) {
            None => 0,
            Some(c) => c
                .parse::<usize>()
                .ok()
                .filter(|s| *s <= all.len())
                .ok_or_else(|| ErrorData::invalid_params("bad cursor", None))?,
        };
        let end = (start + PAGE_SIZE).min(all.len());
        let mut page = ListToolsResult::with_all_items(all[start..end].to_vec());
        if self.state.opts.repeat_cursor {
            page.next_cursor = Some(PAGE_SIZE.to_string());
        } else if end < all.len() {
            page.next_cursor = Some(end.to_string());
        }
        Ok(page)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if let Some(n) = request.name.strip_prefix("tool_")
            && n.parse::<usize>()
                .is_ok_and(|n| n < self.state.catalog.load(Ordering::SeqCst))
        {
            return Ok(CallToolResult::success(vec![ContentBlock::text(format!(
                "called {}",
                request.name
            ))])
            .into());
        }
        self.tool_router
            .call(ToolCallContext::new(self, request, context))
            .await
    }

    fn accepted_subscription_filter(
        &self,
        _requested: &rmcp::model::SubscriptionFilter,
    ) -> Option<rmcp::model::SubscriptionFilter> {
        Some(
            rmcp::model::SubscriptionFilter::builder()
                .tools_list_changed()
                .build(),
        )
    }

    async fn listen(&self, context: rmcp::service::SubscriptionContext) -> Result<(), ErrorData> {
        self.state
            .listeners
            .lock()
            .unwrap()
            .push(context.sink().clone());
        context.cancelled().await;
        Ok(())
    }

    async fn on_initialized(&self, context: rmcp::service::NotificationContext<RoleServer>) {
        self.state.peers.lock().unwrap().push(context.peer);
    }

    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
        .with_instructions("responses-relay test server")
    }
}
