//! The Conversations API: `/v1/conversations` and its items, in OpenAI's shapes; every lookup is
//! the request's tenant's (another tenant's conversation is a 404, as an unknown one).

use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use serde_json::{Map, Value, json};

use super::responses::{Query, list_page, read_body};
use super::{ApiError, Body, ErrorKind, json_response};
use crate::api::FieldError;
use crate::api::request::{InputItem, parse_input, parse_metadata};
use crate::api::response::Conversation;
use crate::app::App;
use crate::store::Tenant;

/// Items a conversation may be created with at once (OpenAI's limit).
const MAX_CREATE_ITEMS: usize = 20;
/// Items one `POST .../items` may add.
const MAX_ADD_ITEMS: usize = 1000;

fn not_found(id: &str) -> ApiError {
    ApiError::new(
        ErrorKind::NotFound,
        format!("Conversation with id '{id}' not found."),
    )
}

fn item_not_found(id: &str) -> ApiError {
    ApiError::new(
        ErrorKind::NotFound,
        format!("Item with id '{id}' not found."),
    )
}

/// The JSON object of a body, with only `allowed` keys (others: `unknown_parameter`).
async fn object(
    req: Request<Incoming>,
    app: &App,
    allowed: &[&str],
) -> Result<Map<String, Value>, ApiError> {
    let body = read_body(req.into_body(), app.config().max_body_bytes).await?;
    if body.is_empty() {
        return Ok(Map::new());
    }
    let v: Value = serde_json::from_slice(&body).map_err(|e| {
        ApiError::from(FieldError::new(
            "",
            format!("We could not parse the JSON body of your request. Parser error: {e}"),
        ))
    })?;
    let Value::Object(o) = v else {
        return Err(FieldError::new("", "The request body must be a JSON object.").into());
    };
    if let Some(k) = o.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(FieldError::unknown(k.clone()).into());
    }
    Ok(o)
}

/// `items` of a body: input items, each with an id.
fn items_of(app: &App, v: Option<Value>, param: &str) -> Result<Vec<InputItem>, ApiError> {
    let items = match v {
        None | Some(Value::Null) => Vec::new(),
        Some(v @ Value::Array(_)) => parse_input(v).map_err(|mut e| {
            e.param = e.param.replacen("input", param, 1);
            e.message = e.message.replacen("'input", &format!("'{param}"), 1);
            e
        })?,
        Some(_) => {
            return Err(FieldError::new(
                param,
                format!("Invalid '{param}': expected an array of items."),
            )
            .into());
        }
    };
    Ok(crate::run::with_ids(app, items))
}

fn metadata_of(v: Option<Value>) -> Result<Map<String, Value>, ApiError> {
    match v {
        None | Some(Value::Null) => Ok(Map::new()),
        Some(Value::Object(m)) => Ok(parse_metadata(m)?),
        Some(_) => {
            Err(FieldError::new("metadata", "Invalid 'metadata': expected an object.").into())
        }
    }
}

fn ok(v: impl serde::Serialize) -> Result<Response<Body>, ApiError> {
    Ok(json_response(
        StatusCode::OK,
        serde_json::to_vec(&v).expect("serializes"),
    ))
}

/// `POST /v1/conversations`.
pub async fn create(
    app: &App,
    tenant: &Tenant,
    req: Request<Incoming>,
) -> Result<Response<Body>, ApiError> {
    let mut o = object(req, app, &["items", "metadata"]).await?;
    let items = items_of(app, o.remove("items"), "items")?;
    if items.len() > MAX_CREATE_ITEMS {
        return Err(FieldError::invalid_value(
            "items",
            format!("Invalid 'items': at most {MAX_CREATE_ITEMS} items when creating a conversation (add more with POST /v1/conversations/{{id}}/items)."),
        )
        .into());
    }
    let conversation = Conversation {
        id: app.ids().mint("conv"),
        object: "conversation".into(),
        created_at: app.clock().now_unix(),
        metadata: metadata_of(o.remove("metadata"))?,
    };
    app.store()
        .create_conversation(tenant, &conversation, &items)
        .await?;
    ok(conversation)
}

/// `GET /v1/conversations/{id}`.
pub async fn get(app: &App, tenant: &Tenant, id: &str) -> Result<Response<Body>, ApiError> {
    ok(app
        .store()
        .conversation(tenant, id)
        .await?
        .ok_or_else(|| not_found(id))?)
}

/// `POST /v1/conversations/{id}`: replaces the metadata.
pub async fn update(
    app: &App,
    tenant: &Tenant,
    id: &str,
    req: Request<Incoming>,
) -> Result<Response<Body>, ApiError> {
    let mut o = object(req, app, &["metadata"]).await?;
    let Some(metadata) = o.remove("metadata") else {
        return Err(FieldError::missing("metadata").into());
    };
    let metadata = metadata_of(Some(metadata))?;
    ok(app
        .store()
        .update_conversation(tenant, id, metadata)
        .await?
        .ok_or_else(|| not_found(id))?)
}

/// `DELETE /v1/conversations/{id}`.
pub async fn delete(app: &App, tenant: &Tenant, id: &str) -> Result<Response<Body>, ApiError> {
    if !app.store().delete_conversation(tenant, id).await? {
        return Err(not_found(id));
    }
    ok(json!({"id": id, "object": "conversation.deleted", "deleted": true}))
}

/// `GET /v1/conversations/{id}/items`.
pub async fn items(
    app: &App,
    tenant: &Tenant,
    id: &str,
    query: Option<&str>,
) -> Result<Response<Body>, ApiError> {
    let items = app
        .store()
        .conversation_items(tenant, id)
        .await?
        .ok_or_else(|| not_found(id))?;
    // `include` names what to add to the items; this relay keeps nothing more to add.
    let _ = Query::parse(query).get("include");
    ok(list_page(&items, query, "this conversation")?)
}

/// `POST /v1/conversations/{id}/items`: the items added, as a list.
pub async fn add_items(
    app: &App,
    tenant: &Tenant,
    id: &str,
    req: Request<Incoming>,
) -> Result<Response<Body>, ApiError> {
    let mut o = object(req, app, &["items", "include"]).await?;
    let Some(items) = o.remove("items") else {
        return Err(FieldError::missing("items").into());
    };
    let items = items_of(app, Some(items), "items")?;
    if items.len() > MAX_ADD_ITEMS {
        return Err(FieldError::invalid_value(
            "items",
            format!("Invalid 'items': at most {MAX_ADD_ITEMS} items at once."),
        )
        .into());
    }
    if !app.store().append_conversation(tenant, id, &items).await? {
        return Err(not_found(id));
    }
    let listed: Vec<InputItem> = items.iter().map(InputItem::listed).collect();
    ok(json!({
        "object": "list",
        "data": listed,
        "first_id": listed.first().and_then(|i| i.id()),
        "last_id": listed.last().and_then(|i| i.id()),
        "has_more": false,
    }))
}

/// `GET /v1/conversations/{id}/items/{item_id}`.
pub async fn item(
    app: &App,
    tenant: &Tenant,
    id: &str,
    item_id: &str,
) -> Result<Response<Body>, ApiError> {
    let items = app
        .store()
        .conversation_items(tenant, id)
        .await?
        .ok_or_else(|| not_found(id))?;
    let found = items
        .iter()
        .find(|i| i.id() == Some(item_id))
        .ok_or_else(|| item_not_found(item_id))?;
    ok(found.listed())
}

/// `DELETE /v1/conversations/{id}/items/{item_id}`: the conversation.
pub async fn delete_item(
    app: &App,
    tenant: &Tenant,
    id: &str,
    item_id: &str,
) -> Result<Response<Body>, ApiError> {
    let conversation = app
        .store()
        .conversation(tenant, id)
        .await?
        .ok_or_else(|| not_found(id))?;
    if !app
        .store()
        .delete_conversation_item(tenant, id, item_id)
        .await?
    {
        return Err(item_not_found(item_id));
    }
    ok(conversation)
}
