//! A run's context, resolved before the first byte: the items of its `conversation`, or the
//! stored chain that `previous_response_id` names (each ancestor's input and output, walked back) and the stored
//! items that `item_reference`s name. Input items get their ids here.

use super::{RelaySet, StartError};
use crate::api::FieldError;
use crate::api::request::{CreateRequest, InputItem};
use crate::api::response::{ContentPart, ReasoningItemInput};
use crate::app::App;
use crate::store::Tenant;

/// The request's input as stored (ids assigned, references resolved), and the history the model
/// sees before its own output: the chain's items, then that input.
pub(super) async fn resolve(
    app: &App,
    tenant: &Tenant,
    request: &CreateRequest,
    relay: &RelaySet,
) -> Result<(Vec<InputItem>, Vec<InputItem>), StartError> {
    let mut history = Vec::new();
    if let Some(conversation) = &request.conversation {
        history = app
            .store()
            .conversation_items(tenant, conversation)
            .await
            .map_err(StartError::Store)?
            .ok_or_else(|| StartError::ConversationNotFound(conversation.clone()))?;
    }
    if let Some(prior) = &relay.prior_history {
        history = prior.to_vec();
    } else if let Some(prev) = &request.previous_response_id {
        match app
            .store()
            .history(tenant, prev)
            .await
            .map_err(StartError::Store)?
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
                .find_item(tenant, &r.id)
                .await
                .map_err(StartError::Store)?
            {
                Some(found) => input.push(found),
                None => {
                    return Err(StartError::Invalid(FieldError::invalid_value(
                        format!("input[{i}].id"),
                        format!("Item with id '{}' not found.", r.id),
                    )));
                }
            },
            InputItem::Reasoning(r) if r.encrypted_content.is_some() => {
                input.push(InputItem::Reasoning(opened(app, r, i)?))
            }
            other => input.push(with_id(app, other.clone())),
        }
    }
    let earlier = history.len();
    history.extend(input.iter().cloned());
    // The last compaction item stands for the conversation before it: the model gets the user
    // messages from before it, its summary, and what came after.
    let compacted = history
        .iter()
        .rposition(|i| matches!(i, InputItem::Compaction(_)));
    if let Some(at) = compacted {
        let InputItem::Compaction(c) = &history[at] else {
            unreachable!("found above")
        };
        let param = match at.checked_sub(earlier) {
            Some(j) => format!("input[{j}].encrypted_content"),
            None => "previous_response_id".to_string(),
        };
        let summary = summary_message(&open_summary(app, &c.encrypted_content, &param)?);
        let mut kept: Vec<InputItem> = history[..at]
            .iter()
            .filter(
                |i| matches!(i, InputItem::Message(m) if m.role == crate::api::request::Role::User),
            )
            .cloned()
            .collect();
        kept.push(summary);
        kept.extend(history.drain(at + 1..));
        history = kept;
    }
    Ok((history, input))
}

/// A seal that does not open (OpenAI's code for encrypted content it cannot read).
fn seal_error(param: impl Into<String>, message: impl Into<String>) -> FieldError {
    FieldError {
        code: Some("invalid_encrypted_content"),
        ..FieldError::new(param, message)
    }
}

/// The summary a compaction item's seal holds; a seal that does not open is a 400 naming it.
pub(super) fn open_summary(app: &App, sealed: &str, param: &str) -> Result<String, StartError> {
    let plain = app.sealer().open(sealed).map_err(|e| {
        seal_error(
            param,
            format!("The compaction item's encrypted_content cannot be opened: {e}."),
        )
    })?;
    serde_json::from_slice::<serde_json::Value>(&plain)
        .ok()
        .and_then(|v| v.get("summary")?.as_str().map(str::to_string))
        .ok_or_else(|| seal_error(param, "The sealed compaction is not readable.").into())
}

/// The summary as the model sees it: a user message that says what it is.
pub(super) fn summary_message(summary: &str) -> InputItem {
    use crate::api::request::{InputMessage, MessageContent};
    InputItem::Message(InputMessage::user(MessageContent::Text(format!(
        "[A summary of the conversation so far, which was compacted]\n{summary}"
    ))))
}

/// A reasoning item sent back with the `encrypted_content` the relay sealed: its reasoning
/// restored from the seal. A seal that does not open is a 400 naming it.
fn opened(app: &App, r: &ReasoningItemInput, i: usize) -> Result<ReasoningItemInput, StartError> {
    let param = format!("input[{i}].encrypted_content");
    let sealed = r.encrypted_content.as_deref().unwrap_or_default();
    let plain = app.sealer().open(sealed).map_err(|e| {
        seal_error(
            param.clone(),
            format!("The reasoning item's encrypted_content cannot be opened: {e}."),
        )
    })?;
    let content: Vec<ContentPart> = serde_json::from_slice::<serde_json::Value>(&plain)
        .ok()
        .and_then(|v| serde_json::from_value(v.get("content")?.clone()).ok())
        .ok_or_else(|| seal_error(param, "The sealed reasoning is not readable."))?;
    let mut r = r.clone();
    if r.content.as_ref().is_none_or(|c| c.is_empty()) {
        r.content = Some(content);
    }
    Ok(r)
}

pub(super) fn with_id(app: &App, item: InputItem) -> InputItem {
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
        InputItem::ToolSearchCall(mut t) if t.id.is_empty() => {
            t.id = app.ids().mint("tsc");
            InputItem::ToolSearchCall(t)
        }
        InputItem::ToolSearchOutput(mut t) if t.id.is_empty() => {
            t.id = app.ids().mint("tso");
            InputItem::ToolSearchOutput(t)
        }
        mut other => {
            if let Some(prefix) = tool_item_prefix(&other)
                && let Some(t) = other.tool_item_mut()
            {
                t.id.get_or_insert_with(|| app.ids().mint(prefix));
            }
            other
        }
    }
}

/// The id prefix of a client or hosted tool's item the client sent without an id.
fn tool_item_prefix(item: &InputItem) -> Option<&'static str> {
    Some(match item {
        InputItem::CustomToolCall(_) => "ctc",
        InputItem::CustomToolCallOutput(_) => "ctco",
        InputItem::LocalShellCall(_) => "lsh",
        InputItem::LocalShellCallOutput(_) => "lsho",
        InputItem::ShellCall(_) => "sh",
        InputItem::ShellCallOutput(_) => "sho",
        InputItem::ApplyPatchCall(_) => "apc",
        InputItem::ApplyPatchCallOutput(_) => "apco",
        InputItem::ComputerCall(_) => "cu",
        InputItem::ComputerCallOutput(_) => "cuo",
        InputItem::AdditionalTools(_) => "at",
        InputItem::ConfigurationUpdate(_) => "cfg",
        _ => return None,
    })
}
