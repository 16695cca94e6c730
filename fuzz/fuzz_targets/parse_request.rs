//! Fuzz target: `POST /v1/responses` body parsing (`api::request::parse_create`) never panics and
//! answers Ok or a FieldError that names a field and says why; a parsed request also builds the
//! upstream conversations (chat `messages`, Responses `input`) without panicking.
#![no_main]

use libfuzzer_sys::fuzz_target;
use responses_relay::api::request::parse_create;
use responses_relay::upstream::{chat, responses};

fuzz_target!(|data: &[u8]| {
    match parse_create(data) {
        Ok(req) => {
            assert!(!req.model.trim().is_empty(), "accepted an empty model");
            assert!(!req.input.is_empty() || req.previous_response_id.is_some(), "accepted a request without input");
            let messages = chat::messages(req.instructions.as_deref(), &req.input);
            // Every custom tool of the request, as a Responses upstream gets it.
            let custom: std::collections::HashSet<&str> = req
                .tools
                .iter()
                .filter_map(|t| match t {
                    responses_relay::api::request::ToolParam::Custom(c) => Some(c.name.as_str()),
                    _ => None,
                })
                .collect();
            let input = responses::input(&req.input, &custom);
            // Both must serialize: they are sent as JSON bodies.
            serde_json::to_vec(&messages).expect("chat messages serialize");
            serde_json::to_vec(&input).expect("responses input serializes");
        }
        Err(e) => {
            assert!(!e.message.is_empty(), "a FieldError without a message (param '{}')", e.param);
        }
    }
});
