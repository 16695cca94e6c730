//! The transcoder's text items: an assistant message or a reasoning item (its content, or its
//! summary) opened at its first delta, its parts streamed, closed when another kind of output
//! starts or the turn ends; a reasoning item's signed blocks sealed into its `encrypted_content`.

use serde_json::{Value, json};

use super::Transcoder;
use crate::api::response::{ContentPart, MessageItem, ReasoningItem, SummaryText};
use crate::api::{Event, ItemStatus, OutputItem};
use crate::eventlog::emitter::Emitter;

#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum TextKind {
    Reasoning,
    /// A reasoning item whose text is its `summary` (summarized reasoning).
    Summary,
    Message,
}

#[derive(Debug)]
pub(super) struct OpenText {
    kind: TextKind,
    output_index: usize,
    item_id: String,
    /// The open content part: its index, whether it is a refusal, and its text so far.
    part: Option<(usize, bool, String)>,
    parts: Vec<ContentPart>,
    /// A summary reasoning item's summary parts.
    summary: Vec<SummaryText>,
    /// A reasoning item's signed blocks ([`ModelEvent::SignedReasoning`]), in order.
    signed: Vec<Value>,
}

impl Transcoder {
    /// A signed reasoning block: kept with the open reasoning item (one is opened for a block
    /// that had no text, such as `redacted_thinking`).
    pub(super) fn signed_reasoning(&mut self, block: Value, em: &mut Emitter) {
        if self
            .text
            .as_ref()
            .is_none_or(|t| t.kind == TextKind::Message)
        {
            self.close_text(em, ItemStatus::Completed);
            self.open_text(TextKind::Summary, em);
        }
        if let Some(open) = &mut self.text {
            // The next block's text is a part of its own.
            if open.part.is_some() {
                close_part(open, em);
            }
            open.signed.push(block);
        }
    }

    pub(super) fn text_delta(
        &mut self,
        kind: TextKind,
        refusal: bool,
        delta: String,
        em: &mut Emitter,
    ) {
        if delta.is_empty() {
            return;
        }
        if self.text.as_ref().is_some_and(|t| t.kind != kind) {
            self.close_text(em, ItemStatus::Completed);
        }
        if self.text.is_none() {
            self.open_text(kind, em);
        }
        let open = self.text.as_mut().expect("a text item is open");
        if open.part.as_ref().is_some_and(|(_, r, _)| *r != refusal) {
            close_part(open, em);
        }
        if open.part.is_none() {
            let (item_id, output_index) = (open.item_id.clone(), open.output_index);
            let index = if kind == TextKind::Summary {
                let summary_index = open.summary.len();
                em.emit(Event::ReasoningSummaryPartAdded {
                    item_id,
                    output_index,
                    summary_index,
                    part: summary_text(String::new()),
                });
                summary_index
            } else {
                let content_index = open.parts.len();
                em.emit(Event::ContentPartAdded {
                    item_id,
                    output_index,
                    content_index,
                    part: empty_part(kind, refusal),
                });
                content_index
            };
            open.part = Some((index, refusal, String::new()));
        }
        let (content_index, _, text) = open.part.as_mut().expect("part is open");
        text.push_str(&delta);
        let (item_id, output_index, content_index) =
            (open.item_id.clone(), open.output_index, *content_index);
        em.emit(match (kind, refusal) {
            (TextKind::Summary, _) => Event::ReasoningSummaryTextDelta {
                item_id,
                output_index,
                summary_index: content_index,
                delta,
            },
            (TextKind::Reasoning, _) => Event::ReasoningTextDelta {
                item_id,
                output_index,
                content_index,
                delta,
            },
            (TextKind::Message, false) => Event::OutputTextDelta {
                item_id,
                output_index,
                content_index,
                delta,
                logprobs: Vec::new(),
            },
            (TextKind::Message, true) => Event::RefusalDelta {
                item_id,
                output_index,
                content_index,
                delta,
            },
        });
    }

    /// Opens a text item of `kind` (added, with no content part yet).
    fn open_text(&mut self, kind: TextKind, em: &mut Emitter) {
        let output_index = em.next_output_index();
        let (item_id, item) = match kind {
            TextKind::Message => {
                let id = em.mint("msg");
                let item = OutputItem::Message(MessageItem {
                    id: id.clone(),
                    status: ItemStatus::InProgress,
                    role: "assistant".into(),
                    content: Vec::new(),
                    phase: self.phase,
                });
                (id, item)
            }
            TextKind::Reasoning | TextKind::Summary => {
                let id = em.mint("rs");
                let item = OutputItem::Reasoning(ReasoningItem {
                    id: id.clone(),
                    summary: Vec::new(),
                    content: Vec::new(),
                    encrypted_content: None,
                    status: ItemStatus::InProgress,
                });
                (id, item)
            }
        };
        em.emit(Event::OutputItemAdded { output_index, item });
        self.text = Some(OpenText {
            kind,
            output_index,
            item_id,
            part: None,
            parts: Vec::new(),
            summary: Vec::new(),
            signed: Vec::new(),
        });
    }

    pub(super) fn close_text(&mut self, em: &mut Emitter, status: ItemStatus) {
        let Some(mut open) = self.text.take() else {
            return;
        };
        if open.part.is_some() {
            close_part(&mut open, em);
        }
        let item = match open.kind {
            TextKind::Message => OutputItem::Message(MessageItem {
                id: open.item_id.clone(),
                status,
                role: "assistant".into(),
                content: open.parts,
                phase: self.phase,
            }),
            TextKind::Reasoning | TextKind::Summary => {
                let sealer = match (&self.signer, open.signed.is_empty()) {
                    (Some(signer), false) => Some(signer),
                    _ => self.seal.as_ref(),
                };
                let encrypted_content = sealer.map(|s| {
                    let mut sealed = json!({"content": open.parts});
                    if !open.summary.is_empty() {
                        sealed["summary"] = json!(open.summary);
                    }
                    if !open.signed.is_empty() {
                        sealed["signed"] = Value::Array(std::mem::take(&mut open.signed));
                    }
                    s.seal(&serde_json::to_vec(&sealed).expect("serializes"))
                });
                OutputItem::Reasoning(ReasoningItem {
                    id: open.item_id.clone(),
                    summary: open.summary,
                    content: open.parts,
                    encrypted_content,
                    status,
                })
            }
        };
        self.outcome.items.push(item.clone());
        em.emit(Event::OutputItemDone {
            output_index: open.output_index,
            item,
        });
    }
}

fn summary_text(text: String) -> SummaryText {
    SummaryText {
        kind: "summary_text".into(),
        text,
    }
}

fn empty_part(kind: TextKind, refusal: bool) -> ContentPart {
    match (kind, refusal) {
        (TextKind::Reasoning | TextKind::Summary, _) => ContentPart::ReasoningText {
            text: String::new(),
        },
        (TextKind::Message, false) => ContentPart::output_text(""),
        (TextKind::Message, true) => ContentPart::Refusal {
            refusal: String::new(),
        },
    }
}

fn close_part(open: &mut OpenText, em: &mut Emitter) {
    let Some((content_index, refusal, text)) = open.part.take() else {
        return;
    };
    let (item_id, output_index) = (open.item_id.clone(), open.output_index);
    if open.kind == TextKind::Summary {
        em.emit(Event::ReasoningSummaryTextDone {
            item_id: item_id.clone(),
            output_index,
            summary_index: content_index,
            text: text.clone(),
        });
        let part = summary_text(text);
        em.emit(Event::ReasoningSummaryPartDone {
            item_id,
            output_index,
            summary_index: content_index,
            part: part.clone(),
        });
        open.summary.push(part);
        return;
    }
    let part = match (open.kind, refusal) {
        (TextKind::Reasoning | TextKind::Summary, _) => {
            em.emit(Event::ReasoningTextDone {
                item_id: item_id.clone(),
                output_index,
                content_index,
                text: text.clone(),
            });
            ContentPart::ReasoningText { text }
        }
        (TextKind::Message, false) => {
            em.emit(Event::OutputTextDone {
                item_id: item_id.clone(),
                output_index,
                content_index,
                text: text.clone(),
                logprobs: Vec::new(),
            });
            ContentPart::output_text(text)
        }
        (TextKind::Message, true) => {
            em.emit(Event::RefusalDone {
                item_id: item_id.clone(),
                output_index,
                content_index,
                refusal: text.clone(),
            });
            ContentPart::Refusal { refusal: text }
        }
    };
    em.emit(Event::ContentPartDone {
        item_id,
        output_index,
        content_index,
        part: part.clone(),
    });
    open.parts.push(part);
}
