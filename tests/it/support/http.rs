//! Plain HTTP against a relay: a client that never uses a proxy, and JSON or text requests that
//! return the status with the body.

use serde_json::Value;

/// A GET (no body) or a POST of `body`, with `bearer` if given: the status and the JSON answer.
pub async fn call(url: &str, bearer: Option<&str>, body: Option<&Value>) -> (u16, Value) {
    let c = client();
    let req = match body {
        Some(b) => c.post(url).json(b),
        None => c.get(url),
    };
    let req = match bearer {
        Some(k) => req.bearer_auth(k),
        None => req,
    };
    let r = req.send().await.unwrap();
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

pub fn client() -> reqwest::Client {
    responses_relay::install_tls();
    reqwest::Client::builder().no_proxy().build().unwrap()
}

/// POSTs JSON; returns status and body as JSON.
pub async fn post(url: &str, body: &Value) -> (u16, Value) {
    let r = client().post(url).json(body).send().await.unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

pub async fn get(url: &str) -> (u16, Value) {
    let r = client().get(url).send().await.unwrap();
    let status = r.status().as_u16();
    let text = r.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

/// POSTs a request and returns the raw body text (a whole SSE stream for `stream: true`).
pub async fn post_text(url: &str, body: &Value) -> String {
    let r = client().post(url).json(body).send().await.unwrap();
    r.text().await.unwrap()
}

/// A GET's status and body as text.
pub async fn get_text(url: &str) -> (u16, String) {
    let r = client().get(url).send().await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

/// A GET's body as text (whatever the status).
pub async fn fetch_text(url: &str) -> String {
    let r = client().get(url).send().await.unwrap();
    r.text().await.unwrap()
}

/// A GET with `key` as its bearer token, the answer unread.
pub async fn get_as(url: &str, key: &str) -> reqwest::Response {
    client().get(url).bearer_auth(key).send().await.unwrap()
}
