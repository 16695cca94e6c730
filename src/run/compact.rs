//! Compaction: the conversation so far summarized by the model and sealed by the relay (the
//! secret that seals reasoning), for `POST /v1/responses/compact` and for a run whose last input
//! item is a `compaction_trigger`. A later request carrying the `compaction` item gives the model
//! the summary in its place (`context::resolve`). In a run, the compaction is an output item
//! (added, `response.compaction.compacting`, done with the sealed summary): the run's whole
//! answer for a `compaction_trigger`, or made mid-run under `context_management` when the next
//! turn's context passes the threshold (the model goes on from the user messages and the
//! summary).
//!
//! Invariant: the summary's tokens count in the run's usage but not against its
//! `max_output_tokens` (the loop keeps them apart).

use futures::StreamExt;
use serde_json::{Value, json};

use super::stop::{Stop, StopSignal, ending_for, stopped};
use super::{Prepared, Purpose, StartError, prepare_for, turn};
use crate::api::request::{CreateRequest, InputItem, InputMessage, MessageContent, Role};
use crate::api::response::CompactionItem;
use crate::api::response::ResponseError;
use crate::api::{Event, OutputItem, Usage};
use crate::app::App;
use crate::eventlog::emitter::{Emitter, Ending};
use crate::store::Tenant;
use crate::upstream::{ModelEvent, TurnRequest, TurnToolChoice, UpstreamError};

/// What the model is asked when it compacts.
const INSTRUCTIONS: &str = "You are compacting a conversation so that it can go on in a smaller context. Write a summary of the conversation so far that keeps everything needed to continue it: the user's goals and constraints, decisions made, facts and results learned (tool results included), files and identifiers involved, and what remains to be done. Write only the summary.";

/// The model turn that summarizes the conversation of `p` (its history).
pub(super) fn summary_turn(p: &Prepared) -> TurnRequest {
    summary_turn_of(p, &p.history)
}

/// The model turn that summarizes `items`, with `p`'s model and options.
pub(super) fn summary_turn_of(p: &Prepared, items: &[InputItem]) -> TurnRequest {
    let history: Vec<InputItem> = items
        .iter()
        .filter(|i| !matches!(i, InputItem::CompactionTrigger(_)))
        .cloned()
        .collect();
    let mut t = turn::turn_request(p, &history);
    t.tools.clear();
    t.tool_choice = TurnToolChoice::None;
    t.text_format = None;
    t.instructions = Some(match &p.request.instructions {
        Some(i) => format!("{INSTRUCTIONS}\n\nThe conversation's own instructions were:\n{i}"),
        None => INSTRUCTIONS.to_string(),
    });
    t.items.push(InputItem::Message(InputMessage::user(
        MessageContent::Text("Write the summary of the conversation above now.".into()),
    )));
    t
}

/// The conversation summarized by the model (`summary_turn`): the compaction item (sealed), the
/// summary, and the turn's usage.
pub(super) async fn summarize(
    app: &App,
    t: TurnRequest,
    id: String,
) -> Result<(CompactionItem, String, Usage), StartError> {
    let mut stream = app.upstream().open(&t).await?;
    let (mut summary, mut usage) = (String::new(), Usage::default());
    while let Some(event) = stream.next().await {
        match event? {
            ModelEvent::Text(t) => summary.push_str(&t),
            ModelEvent::Usage(u) => usage = u,
            _ => {}
        }
    }
    if summary.trim().is_empty() {
        return Err(StartError::Upstream(UpstreamError::Protocol(
            "the model wrote no summary".into(),
        )));
    }
    let sealed = app
        .sealer()
        .seal(&serde_json::to_vec(&json!({ "summary": summary })).expect("serializes"));
    Ok((
        CompactionItem {
            id,
            encrypted_content: sealed,
            created_by: None,
        },
        summary,
        usage,
    ))
}

/// `POST /v1/responses/compact`: the user messages of the conversation kept, then one
/// compaction item, as a `response.compaction`.
pub async fn compact(
    app: &App,
    mut request: CreateRequest,
    relay: super::RelaySet,
    client_bearer: Option<String>,
    tenant: Tenant,
) -> Result<Value, StartError> {
    // Prepared without opening a model turn or listing MCP servers (as a background run is).
    request.background = true;
    request.store = false;
    request.stream = false;
    let p = prepare_for(app, request, relay, client_bearer, tenant, Purpose::Inspect).await?;
    let id = app.ids().mint("cmp");
    let (item, _, usage) = summarize(app, summary_turn(&p), id).await?;
    let mut output: Vec<Value> = p
        .history
        .iter()
        .filter(|i| matches!(i, InputItem::Message(m) if m.role == Role::User))
        .map(|i| {
            let mut v = serde_json::to_value(i.listed()).expect("serializes");
            v["status"] = json!("completed");
            v
        })
        .collect();
    let mut compaction = serde_json::to_value(&item).expect("serializes");
    compaction["type"] = json!("compaction");
    output.push(compaction);
    Ok(json!({
        "id": app.ids().mint("resp"),
        "object": "response.compaction",
        "created_at": app.clock().now_unix(),
        "output": output,
        "usage": usage,
    }))
}

/// A run whose last input item is a `compaction_trigger`: its output is the conversation's
/// compaction item (added, `response.compaction.compacting`, then done with the sealed summary).
pub(super) async fn compaction(
    app: &App,
    turn: TurnRequest,
    em: &mut Emitter,
    usage: &mut Usage,
    signal: &StopSignal,
) -> Ending {
    match compact_into(app, turn, em, usage, signal).await {
        Ok(_) => Ending::Completed,
        Err(ending) => ending,
    }
}

/// Emits a compaction item for the conversation `turn` summarizes: added,
/// `response.compaction.compacting`, done with the sealed summary. Answers the summary, or how
/// the run ends when it cannot be made.
async fn compact_into(
    app: &App,
    turn: TurnRequest,
    em: &mut Emitter,
    usage: &mut Usage,
    signal: &StopSignal,
) -> Result<String, Ending> {
    let output_index = em.next_output_index();
    let id = em.mint("cmp");
    em.emit(Event::OutputItemAdded {
        output_index,
        item: OutputItem::Compaction(CompactionItem {
            id: id.clone(),
            encrypted_content: String::new(),
            created_by: None,
        }),
    });
    em.emit(Event::CompactionCompacting {
        item_id: id.clone(),
        output_index,
    });
    let summarized = tokio::select! {
        biased;
        stop = stopped(app, signal) => return Err(ending_for(stop)),
        s = summarize(app, turn, id.clone()) => s,
    };
    match summarized {
        Ok((item, summary, used)) => {
            usage.add(&used);
            em.emit(Event::OutputItemDone {
                output_index,
                item: OutputItem::Compaction(item),
            });
            Ok(summary)
        }
        Err(e) => Err(Ending::Failed(ResponseError {
            code: "server_error".into(),
            message: format!("The conversation could not be compacted: {e}"),
        })),
    }
}

/// `context_management` compaction: when the next turn's context passes the threshold (as the
/// model server counts it), the conversation so far is compacted (a compaction item in the
/// output) and the model goes on from its user messages and the summary.
pub(super) async fn compact_if_over(
    app: &App,
    (probe, summary_turn): (TurnRequest, TurnRequest),
    threshold: u64,
    em: &mut Emitter,
    usage: &mut Usage,
    signal: &StopSignal,
    conversation: &mut Vec<InputItem>,
) -> Result<(), Ending> {
    let counted = tokio::select! {
        biased;
        stop = stopped(app, signal) => return Err(ending_for(stop)),
        c = super::tokens::prompt_tokens(app, probe) => c,
    };
    match counted {
        Ok(n) if n > threshold => {
            let summary = compact_into(app, summary_turn, em, usage, signal).await?;
            let mut kept: Vec<InputItem> = conversation
                .iter()
                .filter(|i| matches!(i, InputItem::Message(m) if m.role == Role::User))
                .cloned()
                .collect();
            kept.push(super::context::summary_message(&summary));
            *conversation = kept;
            Ok(())
        }
        Ok(_) => Ok(()),
        Err(e) => Err(ending_for(Stop::Upstream(e))),
    }
}
