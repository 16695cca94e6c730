//! Handlers for `/v1/responses` and friends.

use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use serde_json::json;

use super::sse::{self, CancelOnDrop};
use super::{ApiError, Body, ErrorKind, json_response};
use crate::api::request::parse_create;
use crate::app::App;
use crate::run;
use crate::store::Tenant;

/// `POST /v1/responses`.
pub async fn create(
    app: &App,
    req: Request<Incoming>,
    access: super::Access,
) -> Result<Response<Body>, ApiError> {
    let client_bearer = client_bearer(app, &req);
    let body = read_body(req.into_body(), app.config().max_body_bytes).await?;
    let request = parse_create(&body)?;
    // A request refused for itself (its body, its model) costs its key nothing.
    access.check_model(&request.model)?;
    let relay_permit = app.run_permit().ok_or_else(ApiError::busy)?;
    let key = access.admit_run(app).await?;
    let permit = run::Permit {
        relay: relay_permit,
        key,
    };
    let (request, relay, tenant) = access.admit(request)?;
    let stream = request.stream;
    let background = request.background;
    let store = request.store;
    let prepared = run::prepare(app, request, relay, client_bearer, tenant).await?;
    if stream && !background && !store {
        // Its only client drives the run (see `sse::Driven`). Not a stored run: its events
        // become visible when the store has kept them, a second wake-up of the client's
        // connection per event (measured: 4% more CPU per stored event than its own task).
        let (handle, task) = run::start_driven(app, prepared, permit);
        let guard = CancelOnDrop::new(handle.cancel.clone(), handle.log.clone());
        return Ok(sse::stream(
            handle.log,
            0,
            Some(guard),
            Some(sse::Driven::new(task)),
            app.config().limits.client_stall,
            app.metrics().sse_stream(),
        ));
    }
    let handle = run::start(app, prepared, permit);
    if stream {
        let guard =
            (!background).then(|| CancelOnDrop::new(handle.cancel.clone(), handle.log.clone()));
        return Ok(sse::stream(
            handle.log,
            0,
            guard,
            None,
            app.config().limits.client_stall,
            app.metrics().sse_stream(),
        ));
    }
    if background {
        // Answered at once with the run as created (`queued`); the run goes on without a client.
        return Ok(json_response(
            StatusCode::OK,
            serde_json::to_vec(&handle.created).expect("serializes"),
        ));
    }
    // Not streamed: the client waits; if it goes away, the run is cancelled.
    let _guard = CancelOnDrop::new(handle.cancel.clone(), handle.log.clone());
    while !handle.log.is_finished() {
        let n = handle.log.len();
        handle.log.wait_past(n).await;
    }
    let response = handle
        .log
        .snapshot()
        .expect("a finished run has a response");
    Ok(json_response(
        StatusCode::OK,
        serde_json::to_vec(&response).expect("serializes"),
    ))
}

/// The client's bearer, to go upstream: only when the relay has no keys of its own (with relay
/// keys, the bearer is a relay key and must stay here; an upstream key, if set, wins upstream).
pub(super) fn client_bearer<B>(app: &App, req: &Request<B>) -> Option<String> {
    if app.config().keys.is_empty() {
        super::bearer(req)
    } else {
        None
    }
}

/// An admitted create-shaped request: the request, what the relay sets for it, the client's
/// bearer (to go upstream) and its tenant.
type Admitted = (
    crate::api::request::CreateRequest,
    run::RelaySet,
    Option<String>,
    Tenant,
);

/// A create-shaped body for the endpoints that take one beside `POST /v1/responses`: parsed as a
/// create, the fields they add (`personality`) and `stream` set aside, `input` defaulting to none
/// with a conversation; admitted for the key (`Access::admit`).
async fn create_like(
    app: &App,
    req: Request<Incoming>,
    access: &super::Access,
) -> Result<Admitted, ApiError> {
    let client_bearer = client_bearer(app, &req);
    let body = read_body(req.into_body(), app.config().max_body_bytes).await?;
    let mut value: serde_json::Value = serde_json::from_slice(&body).map_err(|e| {
        ApiError::from(crate::api::FieldError::new(
            "",
            format!("We could not parse the JSON body of your request. Parser error: {e}"),
        ))
    })?;
    if let Some(o) = value.as_object_mut() {
        o.remove("personality");
        o.remove("stream");
        if !o.contains_key("input") && o.contains_key("conversation") {
            o.insert("input".into(), json!([]));
        }
    }
    let request = parse_create(&serde_json::to_vec(&value).expect("serializes"))?;
    let (request, relay, tenant) = access.clone().admit(request)?;
    Ok((request, relay, client_bearer, tenant))
}

/// `POST /v1/responses/input_tokens`: a create body's input tokens, as the model server counts
/// them (`run::count_input_tokens`). `personality` is accepted and changes nothing here.
pub async fn input_tokens(
    app: &App,
    req: Request<Incoming>,
    access: super::Access,
) -> Result<Response<Body>, ApiError> {
    let (request, relay, client_bearer, tenant) = create_like(app, req, &access).await?;
    access.admit_request(app).await?;
    let input_tokens = run::count_input_tokens(app, request, relay, client_bearer, tenant).await?;
    Ok(json_response(
        StatusCode::OK,
        json!({"object": "response.input_tokens", "input_tokens": input_tokens}).to_string(),
    ))
}

/// `POST /v1/responses/compact`: the conversation (`input`, or the `previous_response_id`
/// chain) compacted into its user messages and one sealed `compaction` item.
pub async fn compact(
    app: &App,
    req: Request<Incoming>,
    access: super::Access,
) -> Result<Response<Body>, ApiError> {
    let (request, relay, client_bearer, tenant) = create_like(app, req, &access).await?;
    access.admit_request(app).await?;
    let account = access.account.clone();
    let compacted = run::compact(app, request, relay, client_bearer, tenant).await?;
    if let Some(account) = account {
        let usage = &compacted["usage"];
        let tokens = ["input_tokens", "output_tokens"]
            .iter()
            .filter_map(|k| usage[k].as_u64())
            .sum();
        app.limiter().charge(&account, tokens);
    }
    Ok(json_response(StatusCode::OK, compacted.to_string()))
}

/// How much of a body over the limit is still read (and dropped) so the client, which may send
/// it all before it reads an answer (Python's urllib and httpx do), gets its 413 and not a broken
/// pipe; and for how long.
const DRAIN_BYTES: usize = 256 * 1024 * 1024;
const DRAIN_TIME: std::time::Duration = std::time::Duration::from_secs(20);

/// The request body, at most `limit` bytes; over it, a 413 answered after the rest of the body
/// was read (bounded by [`DRAIN_BYTES`] and [`DRAIN_TIME`]).
pub(super) async fn read_body(mut body: Incoming, limit: usize) -> Result<bytes::Bytes, ApiError> {
    let mut buf = bytes::BytesMut::new();
    let mut over = false;
    let mut dropped = 0usize;
    let deadline = tokio::time::Instant::now() + DRAIN_TIME;
    loop {
        let frame = if over {
            match tokio::time::timeout_at(deadline, body.frame()).await {
                Ok(f) => f,
                Err(_) => break,
            }
        } else {
            body.frame().await
        };
        let Some(frame) = frame else { break };
        let frame = match frame {
            Ok(f) => f,
            Err(_) if over => break,
            Err(e) => {
                return Err(ApiError::new(
                    ErrorKind::BadRequest,
                    format!("Could not read the request body: {e}"),
                ));
            }
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        if over {
            dropped += data.len();
            if dropped > DRAIN_BYTES {
                break;
            }
        } else if buf.len() + data.len() > limit {
            over = true;
            dropped = buf.len() + data.len();
            buf = bytes::BytesMut::new();
        } else {
            buf.extend_from_slice(&data);
        }
    }
    if over {
        return Err(ApiError::new(
            ErrorKind::TooLarge,
            format!("The request body is larger than the relay's limit of {limit} bytes."),
        ));
    }
    Ok(buf.freeze())
}

/// `GET /v1/responses/{id}`, with `?stream=true&starting_after=N` for the log.
pub async fn get(
    app: &App,
    tenant: &Tenant,
    id: &str,
    query: Option<&str>,
) -> Result<Response<Body>, ApiError> {
    let q = Query::parse(query);
    let stream = match q.get("stream") {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => {
            return Err(bad_query(
                "stream",
                format!("Invalid value for 'stream': '{other}' (expected true or false)."),
            ));
        }
    };
    if stream {
        let from = match q.get("starting_after") {
            None => 0,
            Some(n) => n
                .parse::<u64>()
                .map(|n| n as usize + 1)
                .map_err(|_| bad_query("starting_after", format!("Invalid value for 'starting_after': '{n}' (expected a non-negative integer).")))?,
        };
        let log = app
            .store()
            .log(tenant, id)
            .await?
            .ok_or_else(|| ApiError::response_not_found(id))?;
        return Ok(sse::stream(
            log,
            from,
            None,
            None,
            app.config().limits.client_stall,
            app.metrics().sse_stream(),
        ));
    }
    let response = app
        .store()
        .response(tenant, id)
        .await?
        .ok_or_else(|| ApiError::response_not_found(id))?;
    Ok(json_response(
        StatusCode::OK,
        serde_json::to_vec(&response).expect("serializes"),
    ))
}

/// `DELETE /v1/responses/{id}`.
pub async fn delete(app: &App, tenant: &Tenant, id: &str) -> Result<Response<Body>, ApiError> {
    if !app.store().delete(tenant, id).await? {
        return Err(ApiError::response_not_found(id));
    }
    Ok(json_response(
        StatusCode::OK,
        json!({"id": id, "object": "response", "deleted": true}).to_string(),
    ))
}

/// `POST /v1/responses/{id}/cancel`: cancels a background run and answers with the cancelled
/// Response. Cancelling it again answers the same; a run that already ended otherwise is a 400.
pub async fn cancel(app: &App, tenant: &Tenant, id: &str) -> Result<Response<Body>, ApiError> {
    let synchronous = || {
        ApiError::new(
            ErrorKind::NotCancellable,
            "Cannot cancel a synchronous response. Only responses created with 'background': true can be cancelled.",
        )
    };
    // A run live here is answered from its own log (its end as its readers saw it, even if the
    // store could not keep it); any other from the store.
    let ended = if let Some(live) = app.store().live(tenant, id) {
        if !live.background {
            return Err(synchronous());
        }
        live.cancel.cancel();
        live.log.wait_finished().await;
        Some(live.response())
    } else {
        // Live on another relay sharing the store (Redis): its owner cancels it.
        app.store().cancel_elsewhere(tenant, id).await?;
        None
    };
    let response = match ended {
        Some(r) => r,
        None => app
            .store()
            .response(tenant, id)
            .await?
            .ok_or_else(|| ApiError::response_not_found(id))?,
    };
    if !response.background {
        return Err(synchronous());
    }
    use crate::api::ResponseStatus;
    if !matches!(response.status, ResponseStatus::Cancelled) {
        let status = serde_json::to_value(response.status).unwrap_or_default();
        return Err(ApiError::new(
            ErrorKind::AlreadyFinished,
            format!("Cannot cancel response '{id}': it already finished with status {status}."),
        ));
    }
    Ok(json_response(
        StatusCode::OK,
        serde_json::to_vec(&response).expect("serializes"),
    ))
}

/// `GET /v1/responses/{id}/input_items`, paginated as OpenAI does.
pub async fn input_items(
    app: &App,
    tenant: &Tenant,
    id: &str,
    query: Option<&str>,
) -> Result<Response<Body>, ApiError> {
    let record = app
        .store()
        .record(tenant, id)
        .await?
        .ok_or_else(|| ApiError::response_not_found(id))?;
    let page = list_page(&record.input, query, "this response's input")?;
    Ok(json_response(StatusCode::OK, page.to_string()))
}

/// One page of `items` in OpenAI's list shape, by the query's `limit` (1-100, default 20),
/// `order` (`desc` by default) and `after` (an item id of `what`).
pub(super) fn list_page(
    items: &[crate::api::request::InputItem],
    query: Option<&str>,
    what: &str,
) -> Result<serde_json::Value, ApiError> {
    let q = Query::parse(query);
    let limit = match q.get("limit") {
        None => 20,
        Some(l) => match l.parse::<usize>() {
            Ok(n) if (1..=100).contains(&n) => n,
            _ => {
                return Err(bad_query(
                    "limit",
                    format!("Invalid 'limit': '{l}'. Expected an integer between 1 and 100."),
                ));
            }
        },
    };
    let desc = match q.get("order") {
        None | Some("desc") => true,
        Some("asc") => false,
        Some(o) => {
            return Err(bad_query(
                "order",
                format!("Invalid value: '{o}'. Supported values are: 'asc' and 'desc'."),
            ));
        }
    };
    let mut items: Vec<_> = items.iter().collect();
    if desc {
        items.reverse();
    }
    let start = match q.get("after") {
        None => 0,
        Some(after) => items
            .iter()
            .position(|i| i.id() == Some(after))
            .map(|p| p + 1)
            .ok_or_else(|| {
                bad_query(
                    "after",
                    format!("Item with id '{after}' not found in {what}."),
                )
            })?,
    };
    let page: Vec<_> = items
        .iter()
        .skip(start)
        .take(limit)
        .map(|i| i.listed())
        .collect();
    let has_more = start + page.len() < items.len();
    let body = json!({
        "object": "list",
        "data": page,
        "first_id": page.first().and_then(|i| i.id()),
        "last_id": page.last().and_then(|i| i.id()),
        "has_more": has_more,
    });
    Ok(body)
}

/// `GET /v1/models`: every upstream's models (`NAME/id`, the default's also bare), those the
/// key may use.
pub async fn models(
    app: &App,
    req: &Request<Incoming>,
    access: &super::Access,
) -> Result<Response<Body>, ApiError> {
    let client_bearer = client_bearer(app, req);
    let data: Vec<serde_json::Value> = app
        .upstream()
        .models(client_bearer.as_deref())
        .await
        .map_err(|e| ApiError::upstream(&e))?
        .into_iter()
        .filter(|m| {
            m.get("id")
                .and_then(|id| id.as_str())
                .is_some_and(|id| access.may_use_model(id))
        })
        .collect();
    Ok(json_response(
        StatusCode::OK,
        serde_json::json!({"object": "list", "data": data}).to_string(),
    ))
}

/// A 400 naming the query parameter `param`.
pub(super) fn bad_query(param: &str, message: String) -> ApiError {
    ApiError::invalid(crate::api::FieldError::invalid_value(param, message))
}

/// A parsed query string (percent-decoded).
pub(super) struct Query(Vec<(String, String)>);

impl Query {
    pub(super) fn parse(q: Option<&str>) -> Query {
        Query(
            q.map(|q| {
                reqwest::Url::parse(&format!("http://x/?{q}"))
                    .map(|u| {
                        u.query_pairs()
                            .map(|(k, v)| (k.into_owned(), v.into_owned()))
                            .collect()
                    })
                    .unwrap_or_default()
            })
            .unwrap_or_default(),
        )
    }

    pub(super) fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}
