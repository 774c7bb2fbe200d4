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

/// `by_status`'s key schema and projection type on `table`, if it has the index.
async fn status_index_of(
    ddb: &aws_sdk_dynamodb::Client,
    table: &str,
) -> Option<(Vec<(String, String)>, String)> {
    use punctual_store::aws::names::GSI_BY_STATUS;
    let out = ddb.describe_table().table_name(table).send().await.unwrap();
    let gsi = out
        .table?
        .global_secondary_indexes?
        .into_iter()
        .find(|g| g.index_name() == Some(GSI_BY_STATUS))?;
    let keys = gsi
        .key_schema()
        .iter()
        .map(|k| {
            (
                k.attribute_name().to_owned(),
                k.key_type().as_str().to_owned(),
            )
        })
        .collect();
    let projection = gsi.projection()?.projection_type()?.as_str().to_owned();
    Some((keys, projection))
}

/// `punctual init` creates `by_status` on a new table, and adds it to a tasks table made
/// before the index existed (only `by_due`), leaving the rest as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn init_creates_the_status_index_and_adds_it_to_an_older_table() {
    use aws_sdk_dynamodb::types::{
        AttributeDefinition, BillingMode, GlobalSecondaryIndex, KeySchemaElement, KeyType,
        Projection, ProjectionType, ScalarAttributeType,
    };
    use punctual_store::aws::names::{DUE_BUCKET, DUE_KEY, GSI_BY_DUE, STATUS_PART, TASK_ID};
    use punctual_store::aws::{AwsOptions, Clients, InitOptions, ResourceNames};
    let sdk = aws_support::sdk_config().await;
    let clients = Clients::new(&sdk, None);
    let ddb = &clients.dynamodb;
    let expected = Some((
        vec![
            (STATUS_PART.to_owned(), "HASH".to_owned()),
            (DUE_KEY.to_owned(), "RANGE".to_owned()),
        ],
        "KEYS_ONLY".to_owned(),
    ));
    let init = |prefix: String| {
        let clients = clients.clone();
        async move {
            punctual_store::aws::init(
                &clients,
                &InitOptions {
                    aws: AwsOptions {
                        prefix,
                        ..AwsOptions::default()
                    },
                    shard_count: 4,
                    now_ms: T0,
                },
            )
            .await
            .unwrap()
        }
    };
    let fresh = aws_support::unique_prefix("sidx");
    init(fresh.clone()).await;
    let table = ResourceNames::new(&fresh).tasks_table;
    assert_eq!(status_index_of(ddb, &table).await, expected);

    let old = aws_support::unique_prefix("sold");
    let table = ResourceNames::new(&old).tasks_table;
    let attr = |n: &str| {
        AttributeDefinition::builder()
            .attribute_name(n)
            .attribute_type(ScalarAttributeType::S)
            .build()
            .unwrap()
    };
    let key = |n: &str, t: KeyType| {
        KeySchemaElement::builder()
            .attribute_name(n)
            .key_type(t)
            .build()
            .unwrap()
    };
    ddb.create_table()
        .table_name(&table)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(attr(TASK_ID))
        .attribute_definitions(attr(DUE_BUCKET))
        .attribute_definitions(attr(DUE_KEY))
        .key_schema(key(TASK_ID, KeyType::Hash))
        .global_secondary_indexes(
            GlobalSecondaryIndex::builder()
                .index_name(GSI_BY_DUE)
                .key_schema(key(DUE_BUCKET, KeyType::Hash))
                .key_schema(key(DUE_KEY, KeyType::Range))
                .projection(
                    Projection::builder()
                        .projection_type(ProjectionType::KeysOnly)
                        .build(),
                )
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(status_index_of(ddb, &table).await, None);
    init(old.clone()).await;
    assert_eq!(status_index_of(ddb, &table).await, expected);
    init(old.clone()).await; // and again: nothing to do
    assert_eq!(status_index_of(ddb, &table).await, expected);

    // A task cancelled before the index existed has no `status_part`, and the meta item of
    // such a deployment no `status_index_filled`: made so by hand here. `init` backfills it
    // once, and listing by status finds it.
    use punctual_core::TaskStore;
    use punctual_core::store::{TaskCancel, TaskFilter, TaskList, TaskPut};
    use punctual_core::testkit::task;
    use punctual_store::aws::AwsStore;
    use punctual_store::aws::names::{LEASE_PK, LEASE_SK, META_PARTITION, STATUS_INDEX_FILLED};
    let store = AwsStore::open(
        clients.clone(),
        AwsOptions {
            prefix: old.clone(),
            ..AwsOptions::default()
        },
    )
    .await
    .unwrap();
    for id in ["old-cancelled", "old-waiting"] {
        let new = task().id(id).due_in(60_000).build();
        store
            .task_put(TaskPut {
                task: new,
                now_ms: T0,
            })
            .await
            .unwrap();
    }
    store
        .task_cancel(TaskCancel {
            task_id: "old-cancelled".into(),
            expected_version: None,
            now_ms: T0,
        })
        .await
        .unwrap();
    let av = |v: &str| aws_sdk_dynamodb::types::AttributeValue::S(v.to_owned());
    ddb.update_item()
        .table_name(&table)
        .key(TASK_ID, av("old-cancelled"))
        .update_expression(format!("REMOVE {STATUS_PART}"))
        .send()
        .await
        .unwrap();
    ddb.update_item()
        .table_name(ResourceNames::new(&old).leases_table)
        .key(LEASE_PK, av(META_PARTITION))
        .key(LEASE_SK, av(META_PARTITION))
        .update_expression(format!("REMOVE {STATUS_INDEX_FILLED}"))
        .send()
        .await
        .unwrap();
    let cancelled = || async {
        let list = TaskList {
            filter: TaskFilter {
                status: Some(punctual_core::TaskStatus::Cancelled),
                ..TaskFilter::default()
            },
            after_key: None,
            limit: 10,
            now_ms: T0,
        };
        let page = store.task_list(list).await.unwrap();
        page.items
            .into_iter()
            .map(|t| t.task_id)
            .collect::<Vec<_>>()
    };
    assert_eq!(cancelled().await, Vec::<String>::new(), "not listed before");
    let meta = init(old.clone()).await;
    assert!(meta.status_index_filled);
    assert_eq!(cancelled().await, vec!["old-cancelled".to_owned()]);
    let meta = init(old).await; // flag set: no second backfill
    assert!(meta.status_index_filled);
}
