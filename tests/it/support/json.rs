//! Reading the relay's JSON answers: a list's string fields, a Response's items by type, a
//! streamed run's id. Each helper panics (failing the test) when the JSON lacks what it reads.

use serde_json::Value;

use super::SseBody;

/// `list[*][field]` as strings (`list` a JSON array of objects whose `field` is a string).
pub fn strs<'a>(list: &'a Value, field: &str) -> Vec<&'a str> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|v| v[field].as_str().unwrap())
        .collect()
}

/// The first item of `items` (a JSON array) whose `type` is `kind`.
pub fn find_item<'a>(items: &'a Value, kind: &str) -> Option<&'a Value> {
    items.as_array().unwrap().iter().find(|i| i["type"] == kind)
}

/// A Response's output items whose `type` is `kind`, in order.
pub fn items_of<'a>(response: &'a Value, kind: &str) -> Vec<&'a Value> {
    response["output"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["type"] == kind)
        .collect()
}

/// The text of a Response's `message` items, joined.
pub fn message_text(response: &Value) -> String {
    items_of(response, "message")
        .iter()
        .flat_map(|m| m["content"].as_array().unwrap())
        .filter_map(|p| p["text"].as_str())
        .collect()
}

/// The id of a streamed run: its first event's `response.id`.
pub fn id_of(body: &SseBody) -> String {
    body.events[0]["response"]["id"]
        .as_str()
        .unwrap()
        .to_string()
}

/// An error answer's `error.message`.
pub fn error_message(body: &Value) -> &str {
    body["error"]["message"].as_str().unwrap()
}

/// A status with the `error.param` of its answer, the pair an invalid request is checked by.
pub fn param_error(status: u16, body: &Value) -> (u16, Option<&str>) {
    (status, body["error"]["param"].as_str())
}

/// A status with the `error.code` of its answer.
pub fn code_error(status: u16, body: &Value) -> (u16, Option<&str>) {
    (status, body["error"]["code"].as_str())
}

/// The text of a Response's first content part of its first output item.
pub fn first_text(response: &Value) -> &Value {
    &response["output"][0]["content"][0]["text"]
}

/// `value[key]` as a string.
pub fn str_at<'a>(value: &'a Value, key: &str) -> &'a str {
    value[key].as_str().unwrap()
}
