//! Model events → Responses events, for one model turn. A state machine with no IO: it keeps
//! the open text item (message or reasoning) and the turn's tool calls, and emits each item's
//! events between its `output_item.added` and `output_item.done`.
//!
//! Rules: a text item closes when a different kind of output starts (reasoning → message,
//! text → tool call); tool-call items stay open until the turn ends (calls may interleave), then
//! close in output order. Function calls are closed here; MCP calls are opened, their arguments
//! streamed and ended through [`super::mcp_call`] (the one place `mcp_call` events are made) and
//! handed back still open, for the agent loop to run and finish. Call ids are minted by the relay, so they are unique
//! within the Response whatever the upstream sends. The text items (messages, reasoning content
//! or summary, signed reasoning blocks) are `text.rs`'s.

use std::collections::HashMap;

use std::sync::Arc;

use serde_json::{Map, Value, json};

mod text;

use super::mcp_call::{self, McpCallStarted};
use crate::api::response::{
    ClientCallItem, CustomToolCallItem, FunctionCallItem, McpApprovalRequestItem, McpCallItem,
    ToolSearchCallItem,
};
use crate::api::{Event, ItemStatus, OutputItem, Usage};
use crate::eventlog::emitter::Emitter;
use crate::upstream::{FinishReason, ModelEvent};
use text::{OpenText, TextKind};

/// Where a model-facing tool name leads.
#[derive(Debug, Clone, PartialEq)]
pub enum CallTarget {
    /// A tool the client runs: handed back as the call item of its kind (a name the relay does
    /// not know is a `function_call` under that name).
    Client(ClientTarget),
    /// A tool of an MCP server: its label and the tool's original name.
    Mcp { server_label: String, tool: String },
    /// An MCP tool whose calls need the client's approval: not run, reported as a request.
    Approval { server_label: String, tool: String },
    /// The server-side tool search: run by the agent loop after the turn.
    Search,
    /// OpenAI's `web_search`, run through a registered MCP server's tool after the turn.
    WebSearch,
}

/// An MCP tool as the model sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct McpTarget {
    pub server_label: String,
    pub tool: String,
    pub needs_approval: bool,
    /// The tool-search function rather than an MCP tool.
    pub search: bool,
    /// The `web_search` function, run through this registered server's tool
    /// (`[hosted_tools] web_search`) and reported as `web_search_call` items.
    pub web_search: bool,
}

/// Model-facing names of MCP tools; any other name is a function call for the client.
pub type ToolMap = HashMap<String, McpTarget>;

/// The kinds of tool a client runs, each handed back as its own call item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientKind {
    /// `function_call` (a `namespace` tool's function carries its namespace).
    Function,
    /// `custom_tool_call`, its `input` the model's one string argument.
    Custom,
    /// `tool_search_call` with `execution: "client"`.
    ToolSearch,
    /// `local_shell_call`, `shell_call`, `apply_patch_call`, `computer_call`.
    LocalShell,
    Shell,
    ApplyPatch,
    Computer,
}

/// A client tool as the model sees it: its kind, its own name and namespace.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientTarget {
    pub kind: ClientKind,
    pub name: String,
    pub namespace: Option<String>,
}

/// Model-facing names of client tools that are not plain functions under their own name
/// (namespaced functions, custom and built-in tools, client tool search).
pub type ClientMap = HashMap<String, ClientTarget>;

#[derive(Debug)]
struct OpenCall {
    upstream_index: u32,
    output_index: usize,
    item_id: String,
    call_id: String,
    name: String,
    target: CallTarget,
    arguments: String,
}

/// A call whose name has not arrived yet.
#[derive(Debug, Default)]
struct Pending {
    arguments: String,
}

/// An open call's item as the turn ends: where it is and what the model sent.
struct Closing {
    output_index: usize,
    item_id: String,
    call_id: String,
    arguments: String,
}

/// What a turn produced.
#[derive(Debug, Default)]
pub struct TurnOutcome {
    pub finish: Option<FinishReason>,
    pub usage: Option<Usage>,
    pub function_calls: Vec<FunctionCallItem>,
    /// Calls of every client tool (functions included): each hands the turn back to the client.
    pub client_calls: usize,
    pub mcp_calls: Vec<McpCallStarted>,
    /// Calls that need approval, reported as `mcp_approval_request` items (not run).
    pub approvals: Vec<McpApprovalRequestItem>,
    /// Tool searches the model asked for (their JSON arguments), in order.
    pub searches: Vec<String>,
    /// Web searches the model asked for (their JSON arguments), in order.
    pub web_searches: Vec<String>,
    /// Assistant items of this turn in output order (for the next turn's conversation).
    pub items: Vec<OutputItem>,
}

#[derive(Debug, Default)]
pub struct Transcoder {
    text: Option<OpenText>,
    calls: Vec<OpenCall>,
    pending: HashMap<u32, Pending>,
    outcome: TurnOutcome,
    clients: Arc<ClientMap>,
    /// Seals each reasoning item's content into its `encrypted_content`
    /// (`include: ["reasoning.encrypted_content"]`).
    seal: Option<Arc<crate::seal::Sealer>>,
    /// Seals a reasoning item's signed blocks (with its content) into its `encrypted_content`
    /// whether the client asked for it or not: a later turn must send them back verbatim.
    signer: Option<Arc<crate::seal::Sealer>>,
    /// The `phase` the upstream gave the assistant message it opened last.
    phase: Option<crate::api::response::Phase>,
}

impl Transcoder {
    pub fn new() -> Self {
        Self::default()
    }

    /// A transcoder that hands calls of these client tools back as their own items.
    pub fn with_clients(clients: Arc<ClientMap>) -> Self {
        Transcoder {
            clients,
            ..Self::default()
        }
    }

    /// Reasoning items get an `encrypted_content` sealed with `sealer`.
    pub fn sealing(mut self, sealer: Option<Arc<crate::seal::Sealer>>) -> Self {
        self.seal = sealer;
        self
    }

    /// Reasoning items holding signed blocks get an `encrypted_content` sealed with `sealer`
    /// (always: the model server needs those blocks back).
    pub fn signing(mut self, sealer: Arc<crate::seal::Sealer>) -> Self {
        self.signer = Some(sealer);
        self
    }

    /// Feeds one model event.
    pub fn on(&mut self, event: ModelEvent, em: &mut Emitter, tools: &ToolMap) {
        match event {
            ModelEvent::Reasoning(delta) => self.text_delta(TextKind::Reasoning, false, delta, em),
            ModelEvent::ReasoningSummary(delta) => {
                self.text_delta(TextKind::Summary, false, delta, em)
            }
            ModelEvent::Text(delta) => self.text_delta(TextKind::Message, false, delta, em),
            ModelEvent::Refusal(delta) => self.text_delta(TextKind::Message, true, delta, em),
            ModelEvent::ToolCall {
                index,
                id: _,
                name,
                arguments,
            } => self.tool_call(index, name, arguments, em, tools),
            // Some servers repeat cumulative usage; keep the last report of the turn.
            ModelEvent::Usage(u) => self.outcome.usage = Some(u),
            ModelEvent::Finish(reason) => {
                self.outcome.finish.get_or_insert(reason);
            }
            // The model server's id is its trace span's (`upstream::Upstreams::open`), not the
            // Response's.
            ModelEvent::ResponseId(_) => {}
            ModelEvent::MessagePhase(phase) => self.phase = phase,
            ModelEvent::SignedReasoning(block) => self.signed_reasoning(block, em),
        }
    }

    fn tool_call(
        &mut self,
        index: u32,
        name: Option<String>,
        arguments: String,
        em: &mut Emitter,
        tools: &ToolMap,
    ) {
        if let Some(call) = self.calls.iter_mut().find(|c| c.upstream_index == index) {
            if !arguments.is_empty() {
                call.arguments.push_str(&arguments);
                if let Some(delta) = args_delta(call, arguments) {
                    em.emit(delta);
                }
            }
            return;
        }
        let pending = self.pending.entry(index).or_default();
        pending.arguments.push_str(&arguments);
        let Some(name) = name else { return };
        let arguments = self
            .pending
            .remove(&index)
            .map(|p| p.arguments)
            .unwrap_or_default();
        self.close_text(em, ItemStatus::Completed);
        let output_index = em.next_output_index();
        let target = self.target_of(&name, tools);
        if buffered(&target) {
            // Nothing is shown until the turn ends: the request (or search) item carries the whole call.
            self.calls.push(OpenCall {
                upstream_index: index,
                output_index: usize::MAX,
                item_id: String::new(),
                call_id: String::new(),
                name,
                target,
                arguments,
            });
            return;
        }
        let (item_id, call_id) = open_item(&target, output_index, em);
        let mut call = OpenCall {
            upstream_index: index,
            output_index,
            item_id,
            call_id,
            name,
            target,
            arguments: String::new(),
        };
        if !arguments.is_empty() {
            call.arguments.push_str(&arguments);
            if let Some(delta) = args_delta(&call, arguments) {
                em.emit(delta);
            }
        }
        self.calls.push(call);
    }

    /// Where the model-facing tool `name` leads.
    fn target_of(&self, name: &str, tools: &ToolMap) -> CallTarget {
        match tools.get(name) {
            Some(t) if t.search => CallTarget::Search,
            Some(t) if t.web_search => CallTarget::WebSearch,
            Some(t) if t.needs_approval => CallTarget::Approval {
                server_label: t.server_label.clone(),
                tool: t.tool.clone(),
            },
            Some(t) => CallTarget::Mcp {
                server_label: t.server_label.clone(),
                tool: t.tool.clone(),
            },
            None => CallTarget::Client(self.clients.get(name).cloned().unwrap_or(ClientTarget {
                kind: ClientKind::Function,
                name: name.to_string(),
                namespace: None,
            })),
        }
    }

    /// Ends the turn: closes the text item and function calls (marked `incomplete` when the
    /// model was cut off), finishes MCP calls' arguments, and returns what the turn produced.
    pub fn finish(mut self, em: &mut Emitter) -> TurnOutcome {
        let cut = matches!(
            self.outcome.finish,
            Some(FinishReason::Length | FinishReason::ContentFilter)
        );
        let status = if cut {
            ItemStatus::Incomplete
        } else {
            ItemStatus::Completed
        };
        self.close_text(em, status);
        for call in std::mem::take(&mut self.calls) {
            let OpenCall {
                output_index,
                item_id,
                call_id,
                name,
                target,
                arguments,
                ..
            } = call;
            let closing = Closing {
                output_index,
                item_id,
                call_id,
                arguments,
            };
            match target {
                CallTarget::Client(c) => self.finish_client_call(c, closing, status, em),
                CallTarget::Mcp { server_label, tool } => {
                    let item = McpCallItem {
                        id: closing.item_id,
                        server_label,
                        name: tool,
                        arguments: closing.arguments,
                        output: None,
                        error: None,
                        status: ItemStatus::InProgress,
                        approval_request_id: None,
                    };
                    let started = mcp_call::arguments_done(em, output_index, item, name);
                    self.outcome.mcp_calls.push(started);
                }
                CallTarget::Search => {
                    if !cut {
                        self.outcome.searches.push(closing.arguments);
                    }
                }
                CallTarget::WebSearch => {
                    if !cut {
                        self.outcome.web_searches.push(closing.arguments);
                    }
                }
                CallTarget::Approval { server_label, tool } => {
                    if !cut {
                        self.request_approval(server_label, tool, closing.arguments, em);
                    }
                }
            }
        }
        self.outcome
    }

    /// Closes a call of a client tool: a function's arguments done, a custom tool's input sent
    /// whole, a built-in tool's whole item added now; then the item done.
    fn finish_client_call(
        &mut self,
        c: ClientTarget,
        call: Closing,
        status: ItemStatus,
        em: &mut Emitter,
    ) {
        let Closing {
            output_index,
            item_id,
            call_id,
            arguments,
        } = call;
        self.outcome.client_calls += 1;
        let item = match c.kind {
            ClientKind::Function => {
                em.emit(Event::FunctionCallArgumentsDone {
                    item_id: item_id.clone(),
                    name: c.name.clone(),
                    output_index,
                    arguments: arguments.clone(),
                });
                let item = FunctionCallItem {
                    id: item_id,
                    call_id,
                    name: c.name,
                    arguments,
                    status,
                    namespace: c.namespace,
                };
                self.outcome.function_calls.push(item.clone());
                OutputItem::FunctionCall(item)
            }
            ClientKind::Custom => {
                let input = custom_input(&arguments);
                if !input.is_empty() {
                    em.emit(Event::CustomToolCallInputDelta {
                        item_id: item_id.clone(),
                        output_index,
                        delta: input.clone(),
                    });
                }
                em.emit(Event::CustomToolCallInputDone {
                    item_id: item_id.clone(),
                    output_index,
                    input: input.clone(),
                });
                OutputItem::CustomToolCall(CustomToolCallItem {
                    id: item_id,
                    call_id,
                    name: c.name,
                    input,
                    namespace: c.namespace,
                    status,
                })
            }
            kind => {
                // Buffered: the whole item is added and done now.
                let output_index = em.next_output_index();
                let item = client_item(kind, em, &arguments, status);
                em.emit(Event::OutputItemAdded {
                    output_index,
                    item: item.clone(),
                });
                self.outcome.items.push(item.clone());
                em.emit(Event::OutputItemDone { output_index, item });
                return;
            }
        };
        self.outcome.items.push(item.clone());
        em.emit(Event::OutputItemDone { output_index, item });
    }

    /// Reports a call that needs the client's approval as an `mcp_approval_request` item (added
    /// and done at once); the call does not run.
    fn request_approval(
        &mut self,
        server_label: String,
        tool: String,
        arguments: String,
        em: &mut Emitter,
    ) {
        let item = McpApprovalRequestItem {
            id: em.mint("mcpr"),
            server_label,
            name: tool,
            arguments,
        };
        let output_index = em.next_output_index();
        em.emit(Event::OutputItemAdded {
            output_index,
            item: OutputItem::McpApprovalRequest(item.clone()),
        });
        em.emit(Event::OutputItemDone {
            output_index,
            item: OutputItem::McpApprovalRequest(item.clone()),
        });
        self.outcome
            .items
            .push(OutputItem::McpApprovalRequest(item.clone()));
        self.outcome.approvals.push(item);
    }
}

/// Mints a streamed call's ids and opens its item at `output_index` (a function or custom tool
/// call, or an MCP call through [`mcp_call::open`]). Returns the item id and the call id.
fn open_item(target: &CallTarget, output_index: usize, em: &mut Emitter) -> (String, String) {
    let (item_id, call_id) = match target {
        CallTarget::Client(c) if c.kind == ClientKind::Custom => (em.mint("ctc"), em.mint("call")),
        CallTarget::Client(_) => (em.mint("fc"), em.mint("call")),
        _ => {
            let id = em.mint("mcp");
            (id.clone(), id)
        }
    };
    let item = match target {
        CallTarget::Client(c) if c.kind == ClientKind::Custom => {
            OutputItem::CustomToolCall(CustomToolCallItem {
                id: item_id.clone(),
                call_id: call_id.clone(),
                name: c.name.clone(),
                input: String::new(),
                namespace: c.namespace.clone(),
                status: ItemStatus::InProgress,
            })
        }
        CallTarget::Client(c) => OutputItem::FunctionCall(FunctionCallItem {
            id: item_id.clone(),
            call_id: call_id.clone(),
            name: c.name.clone(),
            arguments: String::new(),
            status: ItemStatus::InProgress,
            namespace: c.namespace.clone(),
        }),
        CallTarget::Mcp { server_label, tool } => {
            let item = McpCallItem {
                id: item_id.clone(),
                server_label: server_label.clone(),
                name: tool.clone(),
                arguments: String::new(),
                output: None,
                error: None,
                status: ItemStatus::InProgress,
                approval_request_id: None,
            };
            mcp_call::open(em, output_index, item);
            return (item_id, call_id);
        }
        CallTarget::Approval { .. } | CallTarget::Search | CallTarget::WebSearch => {
            unreachable!("approval requests and searches are buffered")
        }
    };
    em.emit(Event::OutputItemAdded { output_index, item });
    (item_id, call_id)
}

/// Whether a call is shown only when the turn ends, whole: approval requests, searches, and
/// built-in client tools (their items have no argument events).
fn buffered(target: &CallTarget) -> bool {
    match target {
        CallTarget::Approval { .. } | CallTarget::Search | CallTarget::WebSearch => true,
        CallTarget::Client(c) => !matches!(c.kind, ClientKind::Function | ClientKind::Custom),
        CallTarget::Mcp { .. } => false,
    }
}

/// The event that streams an argument delta of an open call, for the calls that have one.
fn args_delta(call: &OpenCall, delta: String) -> Option<Event> {
    match &call.target {
        CallTarget::Client(c) if c.kind == ClientKind::Function => {
            Some(Event::FunctionCallArgumentsDelta {
                item_id: call.item_id.clone(),
                output_index: call.output_index,
                delta,
            })
        }
        CallTarget::Mcp { .. } => Some(mcp_call::arguments_delta(
            call.item_id.clone(),
            call.output_index,
            delta,
        )),
        // A custom tool's input is the string inside the JSON arguments: sent when whole.
        CallTarget::Client(_)
        | CallTarget::Approval { .. }
        | CallTarget::Search
        | CallTarget::WebSearch => None,
    }
}

/// A custom tool's input: the `input` string of the model's arguments (the arguments as they
/// are when the model did not write that object).
fn custom_input(arguments: &str) -> String {
    match serde_json::from_str::<Value>(arguments) {
        Ok(Value::Object(mut o)) => match o.remove("input") {
            Some(Value::String(s)) => s,
            _ => arguments.to_string(),
        },
        _ => arguments.to_string(),
    }
}

/// The call item of a built-in client tool (or a client tool search) from the model's
/// arguments, in the shape OpenAI sends it.
fn client_item(kind: ClientKind, em: &Emitter, arguments: &str, status: ItemStatus) -> OutputItem {
    let args = match serde_json::from_str::<Value>(arguments) {
        Ok(Value::Object(o)) => o,
        _ => Map::new(),
    };
    let call_id = em.mint("call");
    let call = |prefix: &str, fields: Map<String, Value>| ClientCallItem {
        id: em.mint(prefix),
        call_id: call_id.clone(),
        status,
        fields,
    };
    let one = |key: &str, value: Value| {
        let mut m = Map::new();
        m.insert(key.into(), value);
        m
    };
    match kind {
        ClientKind::ToolSearch => OutputItem::ToolSearchCall(ToolSearchCallItem {
            id: em.mint("tsc"),
            call_id: Some(call_id.clone()),
            execution: "client".into(),
            status,
            arguments: Value::Object(args),
        }),
        ClientKind::LocalShell => {
            let mut action = args;
            action.insert("type".into(), json!("exec"));
            action.entry("env").or_insert_with(|| json!({}));
            OutputItem::LocalShellCall(call("lsh", one("action", Value::Object(action))))
        }
        ClientKind::Shell => OutputItem::ShellCall(call("sh", one("action", Value::Object(args)))),
        ClientKind::ApplyPatch => {
            OutputItem::ApplyPatchCall(call("apc", one("operation", Value::Object(args))))
        }
        ClientKind::Computer => {
            let mut fields = one("action", Value::Object(args));
            fields.insert("pending_safety_checks".into(), json!([]));
            OutputItem::ComputerCall(call("cu", fields))
        }
        ClientKind::Function | ClientKind::Custom => unreachable!("streamed, not buffered"),
    }
}
