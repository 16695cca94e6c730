//! The fake upstream (the project's scripted model) on a loopback port, serving the fixtures.

use std::path::PathBuf;

pub use crate::fake_upstream;

pub fn manifest_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub async fn upstream() -> fake_upstream::FakeUpstream {
    fake_upstream::start(
        "127.0.0.1:0".parse().unwrap(),
        manifest_dir().join("fixtures/upstream"),
    )
    .await
    .expect("fake upstream starts")
}

/// The upstream sees a stream open, then closed long before it would have finished: the run of a
/// client that stopped reading was cancelled.
pub async fn stalled_run_is_cancelled(up: &fake_upstream::FakeUpstream) {
    super::eventually("the upstream stream is open", || up.open_streams() == 1).await;
    super::eventually(
        "the stalled client's run was cancelled long before the upstream finished",
        || up.open_streams() == 0,
    )
    .await;
}

/// The body of the last request the model got.
pub fn last_request(up: &fake_upstream::FakeUpstream) -> serde_json::Value {
    up.requests().last().unwrap().body.clone()
}

/// The last request the model got contains each of `seen` (`what` names the case).
pub fn assert_sent(up: &fake_upstream::FakeUpstream, seen: &[&str], what: &str) {
    let sent = last_request(up).to_string();
    for seen in seen {
        assert!(sent.contains(seen), "{what}: {seen} in {sent}");
    }
}
