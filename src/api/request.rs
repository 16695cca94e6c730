//! `POST /v1/responses` request body: parsed strictly (unknown fields rejected) and validated,
//! every rejection naming the offending `param` (e.g. `input[2].content[0].image_url`).
//!
//! The wire types: `create` (the body as sent and as validated), `input` (the items of
//! `input`), `tools` (`tools` and `tool_choice`). Their validation: `parse` (bytes to a
//! request, serde's errors to `param` paths), `validate` (the top-level fields),
//! `validate_input`, `validate_tools`, `tool_choice`.
//!
//! Invariant: only what the client sends is here; what the relay sets for a request (from its key,
//! or the WebSocket door) is `run::RelaySet`, passed beside the request.

mod create;
mod input;
mod parse;
mod tool_choice;
mod tools;
mod validate;
mod validate_input;
mod validate_tools;

pub use create::*;
pub use input::*;
pub use parse::{from_value_at, parse_create, parse_create_value, valid_name};
pub use tools::*;
pub use validate::parse_metadata;
pub use validate_input::parse_input;
pub use validate_tools::parse_tools;
