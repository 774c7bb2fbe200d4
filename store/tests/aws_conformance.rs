//! The aws backend runs the whole conformance suite against the emulator (`scripts/moto`),
//! each case on fresh tables and queues under a unique prefix.
//!
//! The suite's queue cases pass their own clock; [`aws_support::SuiteClockQueue`] maps it onto
//! SQS's real one (see there). Tasks and leases take the suite's `now_ms` directly, as every
//! DynamoDB condition compares against the caller's time.

#![cfg(feature = "aws")]

mod aws_support;

use punctual_core::testkit::T0;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn conformance() {
    let sdk = aws_support::sdk_config().await;
    punctual_core::testkit::suite::run_all(|| {
        let sdk = sdk.clone();
        async move {
            // Created a minute before the suite's clock, like a store that has run a while;
            // 8 shards so the lease cases' shards 0..=4 all exist; 3 receives before the DLQ.
            let store = aws_support::fresh_store(&sdk, "conf", 8, T0 - 60_000, 3, None).await;
            aws_support::suite_backend(store)
        }
    })
    .await;
}

/// `punctual init` twice changes nothing but the redrive policy; the meta item (shard count,
/// creation minute) stays as first written, and `open` reads `maxReceiveCount` back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_is_idempotent() {
    use punctual_core::{ReadyQueue, TaskStore};
    use punctual_store::aws::{AwsOptions, AwsStore, Clients, InitOptions};
    let sdk = aws_support::sdk_config().await;
    let clients = Clients::new(&sdk, None);
    let aws = AwsOptions {
        prefix: aws_support::unique_prefix("init"),
        max_receive_count: 4,
        ..AwsOptions::default()
    };
    let first = punctual_store::aws::init(
        &clients,
        &InitOptions {
            aws: aws.clone(),
            shard_count: 8,
            now_ms: T0,
        },
    )
    .await
    .unwrap();
    let again = punctual_store::aws::init(
        &clients,
        &InitOptions {
            aws: AwsOptions {
                max_receive_count: 7,
                ..aws.clone()
            },
            shard_count: 32,
            now_ms: T0 + 3_600_000,
        },
    )
    .await
    .unwrap();
    assert_eq!(again.shard_count, 8, "the shard count is fixed at creation");
    assert_eq!(again.created_minute, first.created_minute);
    let store = AwsStore::open(clients, aws).await.unwrap();
    assert_eq!(store.shard_count(), 8);
    assert_eq!(
        store.max_receive_count(),
        7,
        "read back from the redrive policy"
    );
}
