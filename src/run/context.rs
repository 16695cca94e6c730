//! A run's context, resolved before the first byte: the stored chain that
//! `previous_response_id` names (each ancestor's input and output, walked back) and the stored
//! items that `item_reference`s name. Input items get their ids here.

use super::StartError;
use crate::api::FieldError;
use crate::api::request::{CreateRequest, InputItem};
use crate::app::App;

/// The request's input as stored (ids assigned, references resolved), and the history the model
/// sees before its own output: the chain's items, then that input.
pub(super) async fn resolve(
    app: &App,
    request: &CreateRequest,
) -> Result<(Vec<InputItem>, Vec<InputItem>), StartError> {
    let mut history = Vec::new();
    if let Some(prev) = &request.previous_response_id {
        match app
            .store()
            .history(prev)
            .await
            .map_err(|e| StartError::Store(e.to_string()))?
        {
            Some(h) => history = h,
            None => return Err(StartError::PreviousNotFound(prev.clone())),
        }
    }
    let mut input = Vec::with_capacity(request.input.len());
    for (i, item) in request.input.iter().enumerate() {
        match item {
            InputItem::ItemReference(r) => match app
                .store()
                .find_item(&r.id)
                .await
                .map_err(|e| StartError::Store(e.to_string()))?
            {
                Some(found) => input.push(found),
                None => {
                    return Err(StartError::Invalid(FieldError::invalid_value(
                        format!("input[{i}].id"),
                        format!("Item with id '{}' not found.", r.id),
                    )));
                }
            },
            other => input.push(with_id(app, other.clone())),
        }
    }
    history.extend(input.iter().cloned());
    Ok((history, input))
}

fn with_id(app: &App, item: InputItem) -> InputItem {
    match item {
        InputItem::Message(mut m) => {
            m.id.get_or_insert_with(|| app.ids().mint("msg"));
            InputItem::Message(m)
        }
        InputItem::FunctionCall(mut f) => {
            f.id.get_or_insert_with(|| app.ids().mint("fc"));
            InputItem::FunctionCall(f)
        }
        InputItem::FunctionCallOutput(mut f) => {
            f.id.get_or_insert_with(|| app.ids().mint("fco"));
            InputItem::FunctionCallOutput(f)
        }
        InputItem::McpApprovalResponse(mut a) => {
            a.id.get_or_insert_with(|| app.ids().mint("mcpa"));
            InputItem::McpApprovalResponse(a)
        }
        other => other,
    }
}
