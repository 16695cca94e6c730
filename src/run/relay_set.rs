//! What the relay sets for a request, never the client: from its key (`Access::admit`) or from
//! the door it came in by (a WebSocket connection). Passed to [`prepare`](super::prepare) beside
//! the request and carried on [`Prepared`](super::Prepared).

use crate::api::request::InputItem;

/// The parts of a request the relay sets, not the client: from its key, or from the door it
/// came in by (a WebSocket connection).
#[derive(Debug, Clone)]
pub struct RelaySet {
    /// The registered MCP servers the request's key may use (`None`: every one).
    pub mcp_servers_allowed: Option<Vec<String>>,
    /// `false` (WebSocket mode's `generate: false`): the response records its input and ends
    /// `completed` with no output, the model not asked.
    pub generate: bool,
    /// The history `previous_response_id` stands for, when the caller already holds it (a
    /// WebSocket connection remembers its responses, `store: false` ones too).
    pub prior_history: Option<std::sync::Arc<Vec<InputItem>>>,
    /// What the request's key is held to (token budgets charged per turn, MCP calls counted),
    /// if it is limited.
    pub account: Option<std::sync::Arc<crate::limits::Account>>,
    /// The response's steering queue, when the door can steer it (a WebSocket connection's
    /// `response.steer`; `None`: never steered).
    pub steering: Option<std::sync::Arc<super::steer::Steering>>,
}

impl Default for RelaySet {
    fn default() -> Self {
        RelaySet {
            mcp_servers_allowed: None,
            generate: true,
            prior_history: None,
            account: None,
            steering: None,
        }
    }
}
