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
