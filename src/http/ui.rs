//! The run viewer and the playground (SPEC §17): static pages and a small script of our own,
//! compiled into the binary (`ui/`), and the JSON they read beyond the public API, all under
//! `/ui/api/` and scoped by the request's tenant like every other read.
//!
//! - `GET /ui/`: the tenant's stored runs; `GET /ui/runs/{id}`: one run; `GET /ui/playground`.
//! - `GET /ui/assets/{file}`: the pages' CSS and scripts.
//! - `GET /ui/api/runs?status=&model=&after=&limit=`: run summaries, newest first.
//! - `GET /ui/api/runs/{id}`: one run's summary, with `turns` (each model turn's usage, kept by
//!   the store when the run ended; null before, or for a recording) and `input_items` (where its
//!   input is listed; null for a recording); `GET /ui/api/runs/{id}/log`: its event log as
//!   `logs export` writes it (JSON Lines, `{"offset_ms":N,"event":{...}}`), what is kept so far
//!   for a run still going (the page then tails `GET /v1/responses/{id}?stream=true`).
//! - `GET /ui/api/runs/{id}/input_items` and `GET /ui/api/runs/{id}/stream?starting_after=`: the
//!   public API's input list and re-stream of the run, for the tenant the viewer reads (what an
//!   operator's page reads for another tenant's run).
//! - Every read takes `tenant=NAME` from an operator's key (`operator = true`): it then reads that
//!   tenant's data instead of the key's own. Any other key naming a tenant is refused (400).
//!
//! Invariants: pages and assets hold no data and need no key (with relay keys the page asks for
//! one and sends it as a bearer); every `/ui/api/` answer is the key's tenant's only, or for an
//! operator's key the tenant it names. Every page is served with a Content-Security-Policy
//! allowing this origin alone, so nothing on a page can load from or talk to any other host.

use hyper::{Method, Response, StatusCode, header};
use serde_json::{Value, json};

use super::responses::Query;
use super::{ApiError, Body, full, json_response};
use crate::api::{FieldError, Response as ApiResponse};
use crate::app::App;
use crate::store::{RunQuery, Tenant};

/// The prefix of the viewer's own JSON.
pub const API_PREFIX: &str = "/ui/api/";

/// The most runs one page of the listing holds.
pub const MAX_PAGE: usize = 100;

/// Only this origin, for everything a page loads or connects to.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
     connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// A compiled-in file served under `/ui/assets/`.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static str,
}

const CSS: &str = "text/css; charset=utf-8";
const JS: &str = "text/javascript; charset=utf-8";

const ASSETS: &[Asset] = &[
    Asset {
        name: "ui.css",
        content_type: CSS,
        body: include_str!("ui/ui.css"),
    },
    Asset {
        name: "common.js",
        content_type: JS,
        body: include_str!("ui/common.js"),
    },
    Asset {
        name: "list.js",
        content_type: JS,
        body: include_str!("ui/list.js"),
    },
    Asset {
        name: "run.js",
        content_type: JS,
        body: include_str!("ui/run.js"),
    },
    Asset {
        name: "playground.js",
        content_type: JS,
        body: include_str!("ui/playground.js"),
    },
];

const HTML: &str = "text/html; charset=utf-8";
const LIST_PAGE: &str = include_str!("ui/list.html");
const RUN_PAGE: &str = include_str!("ui/run.html");
const PLAYGROUND_PAGE: &str = include_str!("ui/playground.html");

/// Whether `path` is one of the viewer's JSON routes (these need the key; pages do not).
pub fn is_api(path: &str) -> bool {
    path.starts_with(API_PREFIX)
}

/// A page or asset for `GET path`, if it names one (`None`: not a viewer page).
pub fn page(method: &Method, path: &str) -> Option<Response<Body>> {
    if method != Method::GET || is_api(path) {
        return None;
    }
    if path == "/ui" {
        return Some(
            Response::builder()
                .status(StatusCode::MOVED_PERMANENTLY)
                .header(header::LOCATION, "/ui/")
                .body(full(""))
                .expect("valid response"),
        );
    }
    let rest = path.strip_prefix("/ui/")?;
    let (content_type, body) = match rest.split('/').collect::<Vec<_>>().as_slice() {
        [""] => (HTML, LIST_PAGE),
        ["playground"] => (HTML, PLAYGROUND_PAGE),
        ["runs", id] if !id.is_empty() => (HTML, RUN_PAGE),
        ["assets", name] => {
            let a = ASSETS.iter().find(|a| a.name == *name)?;
            (a.content_type, a.body)
        }
        _ => return None,
    };
    Some(served(content_type, body))
}

/// A compiled-in file with the viewer's security headers.
pub fn served(content_type: &str, body: &'static str) -> Response<Body> {
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, content_type)
        .header(header::CONTENT_SECURITY_POLICY, CSP)
        .header(header::X_CONTENT_TYPE_OPTIONS, "nosniff")
        .header(header::REFERRER_POLICY, "no-referrer")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(full(body))
        .expect("valid response")
}

/// A `/ui/api/` route as logs and metrics name it (bounded whatever the path holds).
pub fn template(path: &str) -> &'static str {
    let rest = path.strip_prefix(API_PREFIX).unwrap_or("");
    match rest.split('/').collect::<Vec<_>>().as_slice() {
        ["runs"] => "/ui/api/runs",
        ["runs", _] => "/ui/api/runs/{id}",
        ["runs", _, "log"] => "/ui/api/runs/{id}/log",
        ["runs", _, "input_items"] => "/ui/api/runs/{id}/input_items",
        ["runs", _, "stream"] => "/ui/api/runs/{id}/stream",
        _ => "/ui/api/(no route)",
    }
}

/// Answers a `/ui/api/` request of a key of `own` tenant (`operator`: an operator's key, which
/// may name another tenant with `tenant=`).
pub async fn api(
    app: &App,
    own: &Tenant,
    operator: bool,
    method: &Method,
    path: &str,
    query: Option<&str>,
) -> Result<Response<Body>, ApiError> {
    let chosen = chosen_tenant(operator, query)?;
    let tenant = chosen.as_ref().unwrap_or(own);
    let rest = path.strip_prefix(API_PREFIX).unwrap_or("");
    match (method, rest.split('/').collect::<Vec<_>>().as_slice()) {
        (&Method::GET, ["runs"]) => list(app, tenant, query).await,
        (&Method::GET, ["runs", id]) if !id.is_empty() => {
            let response = app
                .store()
                .response(tenant, id)
                .await?
                .ok_or_else(|| ApiError::response_not_found(id))?;
            let entries = visible_log(app, tenant, id).await?;
            let mut summary = summary(&response, &offsets(&entries));
            // Another tenant's input is not the public API's to list for this key.
            summary["input_items"] = json!(match &chosen {
                None => format!("/v1/responses/{id}/input_items"),
                Some(t) => format!("{API_PREFIX}runs/{id}/input_items?tenant={}", t.as_str()),
            });
            summary["turns"] = json!(app.store().turns(tenant, id).await?);
            Ok(json_response(StatusCode::OK, summary.to_string()))
        }
        (&Method::GET, ["runs", id, "log"]) if !id.is_empty() => {
            let entries = visible_log(app, tenant, id).await?;
            let mut body = Vec::new();
            for e in &entries {
                crate::eventlog::log::write_export_line(&mut body, e.offset_ms, &e.json())
                    .expect("writing to memory");
            }
            Ok(jsonl(id, body))
        }
        (&Method::GET, ["runs", id, "input_items"]) if !id.is_empty() => {
            super::responses::input_items(app, tenant, id, query).await
        }
        (&Method::GET, ["runs", id, "stream"]) if !id.is_empty() => {
            // `GET /v1/responses/{id}?stream=true`: the first `stream` of a query is the one read.
            let query = format!("stream=true&{}", query.unwrap_or(""));
            super::responses::get(app, tenant, id, Some(&query)).await
        }
        _ => Err(ApiError::not_found_route(method, path)),
    }
}

/// The tenant a query's `tenant=NAME` chooses (`None`: the key's own; an empty value is none).
/// Only an operator's key may choose one, and only a name a tenant may have.
fn chosen_tenant(operator: bool, query: Option<&str>) -> Result<Option<Tenant>, ApiError> {
    let q = Query::parse(query);
    let Some(name) = q.get("tenant").filter(|t| !t.is_empty()) else {
        return Ok(None);
    };
    if !operator {
        return Err(ApiError::invalid(FieldError::new(
            "tenant",
            "Only an operator's key may choose the tenant ('tenant'): this key reads its own \
             tenant's runs.",
        )));
    }
    if !crate::config::valid_tenant(name) {
        return Err(super::responses::bad_query(
            "tenant",
            format!(
                "Invalid value for 'tenant': '{name}' (expected 1 to 64 of a-z, A-Z, 0-9, '-', '_', '.')."
            ),
        ));
    }
    Ok(Some(Tenant::new(name)))
}

/// An event log as JSON Lines, named for download as `{id}.jsonl`.
pub fn jsonl(id: &str, body: Vec<u8>) -> Response<Body> {
    let name: String = id
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'))
        .collect();
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/jsonl")
        .header(
            header::CONTENT_DISPOSITION,
            format!("inline; filename=\"{name}.jsonl\""),
        )
        .body(full(body))
        .expect("valid response")
}

/// The entries of `tenant`'s run `id` a client may see now (kept ones, for a run still going).
async fn visible_log(
    app: &App,
    tenant: &Tenant,
    id: &str,
) -> Result<Vec<crate::eventlog::log::LogEntry>, ApiError> {
    let log = app
        .store()
        .log(tenant, id)
        .await?
        .ok_or_else(|| ApiError::response_not_found(id))?;
    Ok(log.read(0, usize::MAX).entries)
}

fn offsets(entries: &[crate::eventlog::log::LogEntry]) -> Vec<(u64, String)> {
    entries
        .iter()
        .map(|e| (e.offset_ms, e.kind().to_string()))
        .collect()
}

/// `GET /ui/api/runs`: a page of summaries, newest first, with `has_more` and the `last_id` to
/// pass as `after` for the next page.
async fn list(app: &App, tenant: &Tenant, query: Option<&str>) -> Result<Response<Body>, ApiError> {
    let q = Query::parse(query);
    let bad = super::responses::bad_query;
    let limit = match q.get("limit") {
        None => 20,
        Some(n) => n
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=MAX_PAGE).contains(n))
            .ok_or_else(|| {
                bad(
                    "limit",
                    format!("Invalid value for 'limit': '{n}' (expected 1 to {MAX_PAGE})."),
                )
            })?,
    };
    const STATUSES: &[&str] = &[
        "queued",
        "in_progress",
        "completed",
        "incomplete",
        "failed",
        "cancelled",
    ];
    let status = match q.get("status").filter(|s| !s.is_empty()) {
        Some(s) if !STATUSES.contains(&s) => {
            return Err(bad(
                "status",
                format!(
                    "Invalid value for 'status': '{s}' (expected one of {}).",
                    STATUSES.join(", ")
                ),
            ));
        }
        s => s.map(str::to_string),
    };
    let query = RunQuery {
        status,
        model: q.get("model").filter(|m| !m.is_empty()).map(str::to_string),
        after: q.get("after").filter(|a| !a.is_empty()).map(str::to_string),
        limit,
    };
    let mut runs = app.store().runs(tenant, &query).await?;
    let has_more = runs.len() > limit;
    runs.truncate(limit);
    // The page's logs asked for together (Redis pipelines them on its multiplexed connection;
    // SQLite's one reader takes them in turn).
    let logs =
        futures::future::try_join_all(runs.iter().map(|r| app.store().log(tenant, &r.id))).await?;
    let data: Vec<Value> = runs
        .iter()
        .zip(logs)
        .map(|(r, log)| {
            let entries = log.map(|l| offsets(&l.read(0, usize::MAX).entries));
            summary(r, &entries.unwrap_or_default())
        })
        .collect();
    Ok(json_response(
        StatusCode::OK,
        json!({
            "object": "list",
            "data": data,
            "has_more": has_more,
            "last_id": runs.last().map(|r| r.id.clone()),
        })
        .to_string(),
    ))
}

/// A run's summary row: from its Response and its log's (time offset, event type) pairs.
/// `duration_ms` is the terminal event's offset (null while the run goes on); `ttft_ms` that of
/// the first delta of any kind (the model's first token); `tool_calls` counts `*_call` items;
/// `steers` the steering submissions the run accepted.
pub fn summary(r: &ApiResponse, log: &[(u64, String)]) -> Value {
    const TERMINAL: &[&str] = &[
        "response.completed",
        "response.incomplete",
        "response.failed",
    ];
    let duration = log
        .iter()
        .find(|(_, k)| TERMINAL.contains(&k.as_str()))
        .map(|(o, _)| *o);
    let ttft = log
        .iter()
        .find(|(_, k)| k.ends_with(".delta"))
        .map(|(o, _)| *o);
    let tool_calls = r
        .output
        .iter()
        .filter(|o| o.kind().ends_with("_call"))
        .count();
    let error = match (&r.error, &r.incomplete_details) {
        (Some(e), _) => Some(format!("{}: {}", e.code, e.message)),
        (None, Some(d)) => Some(format!("incomplete: {}", d.reason)),
        _ => None,
    };
    json!({
        "id": r.id,
        "status": r.status,
        "model": r.model,
        "created_at": r.created_at,
        "duration_ms": duration,
        "ttft_ms": ttft,
        "usage": r.usage,
        "tool_calls": tool_calls,
        "items": r.output.len(),
        "events": log.len(),
        "error": error,
        // The chain (a steered run's successor names it): the viewer links both ways.
        "previous_response_id": r.previous_response_id,
        "steers": log.iter().filter(|(_, k)| k == "response.steer.accepted").count(),
    })
}
