//! The OpenAI Responses wire types: requests, the Response object, items, stream events, errors.
//!
//! Invariant: no IO and no tokio here. Everything the relay puts on the wire is one of these types;
//! `serde_json::Value` appears only where the payload is truly open (tool arguments, JSON Schemas).

pub mod error;
pub mod event;
pub mod fold;
pub mod history;
pub mod id;
pub mod request;
pub mod response;
pub mod steer;

pub use error::{ErrorBody, FieldError};
pub use event::{Event, Sequenced};
pub use fold::{Fold, FoldError};
pub use history::output_as_input;
pub use response::{
    ContentPart, FunctionCallItem, ItemStatus, MessageItem, OutputItem, ReasoningItem, Response,
    ResponseStatus, Usage,
};
