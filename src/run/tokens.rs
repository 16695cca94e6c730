//! Counting a request's input tokens (`POST /v1/responses/input_tokens`): the request is
//! prepared as its run would be (context, function and MCP tools, listed), then one model turn is
//! asked for a single output token, and the prompt tokens the model server reports for it are the
//! count: exactly what that server counts for this request, tool definitions included, for chat
//! and Responses upstreams alike. Anthropic and Gemini upstreams are asked their count endpoints
//! instead (`/messages/count_tokens`, `models/{model}:countTokens`: exact too, nothing
//! generated).

use futures::StreamExt;

use super::{Purpose, RelaySet, StartError, prepare_for, turn};
use crate::api::request::CreateRequest;
use crate::app::App;
use crate::store::Tenant;
use crate::upstream::{ModelEvent, ModelStream, TurnRequest, UpstreamError};

/// The prompt tokens of `request`'s first model turn.
pub async fn count_input_tokens(
    app: &App,
    mut request: CreateRequest,
    relay: RelaySet,
    client_bearer: Option<String>,
    tenant: Tenant,
) -> Result<u64, StartError> {
    request.store = false;
    request.background = false;
    request.stream = false;
    request.max_output_tokens = Some(1);
    let mut p = prepare_for(app, request, relay, client_bearer, tenant, Purpose::Inspect).await?;
    let turn = turn::turn_request(&p, &p.history);
    // The model server's own count, where its API has one (nothing generated).
    if p.first_turn.is_none()
        && let Some(counted) = app.upstream().count_tokens(&turn).await?
    {
        return Ok(counted);
    }
    let stream = match p.first_turn.take() {
        Some(s) => s,
        None => app.upstream().open(&turn).await?,
    };
    Ok(read_prompt_tokens(stream).await?)
}

/// The prompt tokens of `turn` as the model server counts them, asked for one output token.
pub(super) async fn prompt_tokens(app: &App, mut turn: TurnRequest) -> Result<u64, UpstreamError> {
    turn.max_output_tokens = Some(1);
    read_prompt_tokens(app.upstream().open(&turn).await?).await
}

async fn read_prompt_tokens(mut stream: ModelStream) -> Result<u64, UpstreamError> {
    while let Some(event) = stream.next().await {
        if let ModelEvent::Usage(u) = event? {
            return Ok(u.input_tokens);
        }
    }
    Err(UpstreamError::Protocol(
        "the model server reported no usage, so the input tokens cannot be counted".into(),
    ))
}
