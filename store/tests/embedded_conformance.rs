//! The embedded backend runs the whole conformance suite, each case on a fresh file.

#![cfg(feature = "embedded")]

use std::sync::atomic::{AtomicUsize, Ordering};

use punctual_core::Backend;
use punctual_core::testkit::T0;
use punctual_store::embedded::{EmbeddedOptions, EmbeddedStore};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance() {
    let dir = tempfile::tempdir().unwrap();
    let n = AtomicUsize::new(0);
    punctual_core::testkit::suite::run_all(|| {
        let path = dir
            .path()
            .join(format!("case-{}.db", n.fetch_add(1, Ordering::Relaxed)));
        async move {
            let store = EmbeddedStore::open(
                &path,
                EmbeddedOptions {
                    // Created a minute before the suite's clock, like a store that has run a while.
                    now_ms: T0 - 60_000,
                    ..EmbeddedOptions::default()
                },
            )
            .unwrap();
            Backend::from_one(store)
        }
    })
    .await;
}
