//! `punctual init`: creates the tables, the GSIs, TTL, the queues and the meta item,
//! idempotently, on whatever endpoint the SDK configuration points at (an AWS account,
//! LocalStack, moto).
//!
//! Each step tolerates "already exists": a second `init` changes nothing, except that the
//! ready queue's redrive policy is set again to the asked `max_receive_count`. The meta item
//! is written only if missing, so the shard count and creation minute of a deployment never
//! change (the shard of every stored task depends on them).

use std::time::Duration;

use aws_sdk_dynamodb::types::{
    AttributeDefinition, AttributeValue, BillingMode, CreateGlobalSecondaryIndexAction,
    GlobalSecondaryIndex, GlobalSecondaryIndexUpdate, IndexStatus, KeySchemaElement, KeyType,
    Projection, ProjectionType, ScalarAttributeType, TableStatus, TimeToLiveSpecification,
};
use aws_sdk_sqs::types::QueueAttributeName;
use punctual_core::StoreError;
use punctual_core::error::StoreResult;
use punctual_core::keys;
use punctual_core::task::TaskStatus;

use super::item::{get_n, get_s, opt_n};
use super::list::status_part;
use super::names::*;
use super::{AwsOptions, Clients, build_err, check_shards, map_sdk, num, s, sdk_code};

/// What `init` creates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitOptions {
    /// Names, receive count (the redrive policy's `maxReceiveCount`).
    pub aws: AwsOptions,
    /// Shards of a new deployment (kept if the deployment exists).
    pub shard_count: u32,
    /// Now, epoch ms: a new deployment records its minute as `created_minute`.
    pub now_ms: i64,
}

/// The meta item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    /// Shards, fixed at creation.
    pub shard_count: u32,
    /// Minute of creation: the first watermark of every shard.
    pub created_minute: i64,
    /// Latest bucket minute a task was filed under, as far as recorded.
    pub max_due_minute: i64,
    /// Every `DEAD` and `CANCELLED` task is in `by_status` (false on a deployment made
    /// before that index until `init` has backfilled it).
    pub status_index_filled: bool,
}

/// Creates every resource if missing and returns the deployment's meta item.
pub async fn init(clients: &Clients, opts: &InitOptions) -> StoreResult<Meta> {
    opts.aws.validate()?;
    check_shards(opts.shard_count)?;
    let names = ResourceNames::new(&opts.aws.prefix);
    let ddb = &clients.dynamodb;
    create_tasks_table(ddb, &names.tasks_table).await?;
    create_leases_table(ddb, &names.leases_table).await?;
    wait_active(ddb, &names.tasks_table).await?;
    wait_active(ddb, &names.leases_table).await?;
    add_status_index(ddb, &names.tasks_table).await?;
    enable_ttl(ddb, &names.tasks_table).await?;
    create_queues(&clients.sqs, &names, opts.aws.max_receive_count).await?;
    let minute = keys::minute_of(opts.now_ms);
    let put = ddb
        .put_item()
        .table_name(&names.leases_table)
        .item(LEASE_PK, s(META_PARTITION))
        .item(LEASE_SK, s(META_PARTITION))
        .item(SHARD_COUNT, num(opts.shard_count))
        .item(CREATED_MINUTE, num(minute))
        .item(MAX_DUE_MINUTE, num(minute))
        .item(STATUS_INDEX_FILLED, AttributeValue::Bool(true))
        .condition_expression("attribute_not_exists(#pk)")
        .expression_attribute_names("#pk", LEASE_PK)
        .send()
        .await;
    match put {
        Ok(_) => {}
        Err(e) if sdk_code(&e) == Some("ConditionalCheckFailedException") => {}
        Err(e) => return Err(map_sdk("PutItem meta", e)),
    }
    let meta = read_meta(ddb, &names)
        .await?
        .ok_or_else(|| StoreError::Unavailable {
            message: "meta item missing right after init".into(),
            source: None,
        })?;
    if meta.status_index_filled {
        return Ok(meta);
    }
    backfill_status_index(ddb, &names).await?;
    ddb.update_item()
        .table_name(&names.leases_table)
        .key(LEASE_PK, s(META_PARTITION))
        .key(LEASE_SK, s(META_PARTITION))
        .update_expression("SET #f = :t")
        .expression_attribute_names("#f", STATUS_INDEX_FILLED)
        .expression_attribute_values(":t", AttributeValue::Bool(true))
        .send()
        .await
        .map_err(|e| map_sdk("UpdateItem meta", e))?;
    Ok(Meta {
        status_index_filled: true,
        ..meta
    })
}

/// The one-off migration of a deployment made before `by_status`: gives every `DEAD` and
/// `CANCELLED` task its `status_part`, so listing by status finds the tasks that ended before
/// the index existed. An admin operation run once by `init` (the only `Scan` in the backend:
/// it reads the whole table, filtered server side, a page at a time); each write is
/// conditional on the task still being in the status read, so a task replayed meanwhile is
/// left alone. Interrupted, it runs again at the next `init` (the meta flag is set last).
async fn backfill_status_index(
    ddb: &aws_sdk_dynamodb::Client,
    names: &ResourceNames,
) -> StoreResult<()> {
    let table = &names.tasks_table;
    let mut start = None;
    let (mut examined, mut filled) = (0u64, 0u64);
    tracing::info!(%table, "backfilling the by_status index (one Scan of the tasks table)");
    loop {
        let page = ddb
            .scan()
            .table_name(table)
            .filter_expression("#st IN (:dead, :cancelled) AND attribute_not_exists(#sp)")
            .projection_expression("#id, #sh, #st")
            .expression_attribute_names("#st", STATUS)
            .expression_attribute_names("#sp", STATUS_PART)
            .expression_attribute_names("#id", TASK_ID)
            .expression_attribute_names("#sh", SHARD)
            .expression_attribute_values(":dead", s(TaskStatus::Dead.as_str()))
            .expression_attribute_values(":cancelled", s(TaskStatus::Cancelled.as_str()))
            .set_exclusive_start_key(start)
            .send()
            .await
            .map_err(|e| map_sdk("Scan tasks (by_status backfill)", e))?;
        examined += u64::try_from(page.scanned_count()).unwrap_or(0);
        for item in page.items() {
            let status_text = get_s(item, STATUS)?;
            let status = TaskStatus::parse(status_text).ok_or_else(|| StoreError::Unavailable {
                message: format!("malformed item attribute {STATUS}: {status_text}"),
                source: None,
            })?;
            let shard: u32 = get_n(item, SHARD)?;
            let write = ddb
                .update_item()
                .table_name(table)
                .key(TASK_ID, s(get_s(item, TASK_ID)?))
                .update_expression("SET #sp = :sp")
                .condition_expression("#st = :st AND attribute_not_exists(#sp)")
                .expression_attribute_names("#sp", STATUS_PART)
                .expression_attribute_names("#st", STATUS)
                .expression_attribute_values(":sp", s(status_part(status, shard)))
                .expression_attribute_values(":st", s(status_text))
                .send()
                .await;
            match write {
                Ok(_) => filled += 1,
                // Replayed, purged or already filled since the page was read.
                Err(e) if sdk_code(&e) == Some("ConditionalCheckFailedException") => {}
                Err(e) => return Err(map_sdk("UpdateItem status_part (backfill)", e)),
            }
        }
        tracing::info!(examined, filled, "by_status backfill");
        start = page.last_evaluated_key.filter(|k| !k.is_empty());
        if start.is_none() {
            return Ok(());
        }
    }
}

/// Reads the meta item (strongly consistent).
pub async fn read_meta(
    ddb: &aws_sdk_dynamodb::Client,
    names: &ResourceNames,
) -> StoreResult<Option<Meta>> {
    let out = ddb
        .get_item()
        .table_name(&names.leases_table)
        .key(LEASE_PK, s(META_PARTITION))
        .key(LEASE_SK, s(META_PARTITION))
        .consistent_read(true)
        .send()
        .await
        .map_err(|e| map_sdk("GetItem meta", e))?;
    let Some(item) = out.item else {
        return Ok(None);
    };
    let created_minute = get_n(&item, CREATED_MINUTE)?;
    Ok(Some(Meta {
        shard_count: get_n(&item, SHARD_COUNT)?,
        created_minute,
        max_due_minute: opt_n(&item, MAX_DUE_MINUTE)?.unwrap_or(created_minute),
        status_index_filled: matches!(
            item.get(STATUS_INDEX_FILLED),
            Some(AttributeValue::Bool(true))
        ),
    }))
}

/// The URL of a queue by name.
pub async fn queue_url(sqs: &aws_sdk_sqs::Client, name: &str) -> StoreResult<String> {
    let out = sqs
        .get_queue_url()
        .queue_name(name)
        .send()
        .await
        .map_err(|e| map_sdk(&format!("GetQueueUrl {name} (run `punctual init`?)"), e))?;
    out.queue_url.ok_or_else(|| StoreError::Unavailable {
        message: format!("no URL for queue {name}"),
        source: None,
    })
}

/// The `maxReceiveCount` of a queue's redrive policy, if it has one.
pub async fn max_receive_count(sqs: &aws_sdk_sqs::Client, url: &str) -> StoreResult<Option<u32>> {
    let out = sqs
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::RedrivePolicy)
        .send()
        .await
        .map_err(|e| map_sdk("GetQueueAttributes RedrivePolicy", e))?;
    let Some(policy) = out
        .attributes
        .and_then(|a| a.get(&QueueAttributeName::RedrivePolicy).cloned())
    else {
        return Ok(None);
    };
    let v: serde_json::Value =
        serde_json::from_str(&policy).map_err(|e| StoreError::Unavailable {
            message: format!("malformed RedrivePolicy {policy:?}: {e}"),
            source: None,
        })?;
    let n = match &v["maxReceiveCount"] {
        serde_json::Value::Number(n) => n.as_u64(),
        serde_json::Value::String(s) => s.parse().ok(),
        _ => None,
    };
    Ok(n.map(|n| n as u32))
}

fn attr(name: &str) -> StoreResult<AttributeDefinition> {
    AttributeDefinition::builder()
        .attribute_name(name)
        .attribute_type(ScalarAttributeType::S)
        .build()
        .map_err(build_err)
}

fn key(name: &str, kind: KeyType) -> StoreResult<KeySchemaElement> {
    KeySchemaElement::builder()
        .attribute_name(name)
        .key_type(kind)
        .build()
        .map_err(build_err)
}

async fn create_tasks_table(ddb: &aws_sdk_dynamodb::Client, table: &str) -> StoreResult<()> {
    let mut projection = Projection::builder().projection_type(ProjectionType::Include);
    for a in GSI_PROJECTED {
        projection = projection.non_key_attributes(a);
    }
    let gsi = GlobalSecondaryIndex::builder()
        .index_name(GSI_BY_DUE)
        .key_schema(key(DUE_BUCKET, KeyType::Hash)?)
        .key_schema(key(DUE_KEY, KeyType::Range)?)
        .projection(projection.build())
        .build()
        .map_err(build_err)?;
    let r = ddb
        .create_table()
        .table_name(table)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(attr(TASK_ID)?)
        .attribute_definitions(attr(DUE_BUCKET)?)
        .attribute_definitions(attr(DUE_KEY)?)
        .attribute_definitions(attr(STATUS_PART)?)
        .key_schema(key(TASK_ID, KeyType::Hash)?)
        .global_secondary_indexes(gsi)
        .global_secondary_indexes(status_index()?)
        .send()
        .await;
    tolerate_exists(r.map(|_| ()), "CreateTable tasks")
}

/// The sparse `by_status` index: `status_part` + `due_key`, keys only.
fn status_index() -> StoreResult<GlobalSecondaryIndex> {
    GlobalSecondaryIndex::builder()
        .index_name(GSI_BY_STATUS)
        .key_schema(key(STATUS_PART, KeyType::Hash)?)
        .key_schema(key(DUE_KEY, KeyType::Range)?)
        .projection(
            Projection::builder()
                .projection_type(ProjectionType::KeysOnly)
                .build(),
        )
        .build()
        .map_err(build_err)
}

/// Adds `by_status` to a tasks table made before it existed, and waits until DynamoDB has
/// filled it. Tasks that were already `DEAD` or `CANCELLED` carry no `status_part` yet:
/// [`backfill_status_index`] gives it to them. Nothing to do on a table that has the index.
async fn add_status_index(ddb: &aws_sdk_dynamodb::Client, table: &str) -> StoreResult<()> {
    let has = |out: &aws_sdk_dynamodb::operation::describe_table::DescribeTableOutput| {
        out.table
            .as_ref()
            .and_then(|t| t.global_secondary_indexes.as_ref())
            .and_then(|gs| gs.iter().find(|g| g.index_name() == Some(GSI_BY_STATUS)))
            .map(|g| g.index_status().cloned())
    };
    let out = ddb
        .describe_table()
        .table_name(table)
        .send()
        .await
        .map_err(|e| map_sdk("DescribeTable", e))?;
    if has(&out).is_none() {
        let index = status_index()?;
        let create = CreateGlobalSecondaryIndexAction::builder()
            .index_name(GSI_BY_STATUS)
            .set_key_schema(Some(index.key_schema().to_vec()))
            .set_projection(index.projection().cloned())
            .build()
            .map_err(build_err)?;
        let r = ddb
            .update_table()
            .table_name(table)
            .attribute_definitions(attr(STATUS_PART)?)
            .attribute_definitions(attr(DUE_KEY)?)
            .global_secondary_index_updates(
                GlobalSecondaryIndexUpdate::builder().create(create).build(),
            )
            .send()
            .await;
        tolerate_exists(r.map(|_| ()), "UpdateTable add by_status")?;
    }
    for _ in 0..1_200 {
        let out = ddb
            .describe_table()
            .table_name(table)
            .send()
            .await
            .map_err(|e| map_sdk("DescribeTable", e))?;
        match has(&out) {
            // moto reports no index status; AWS reports CREATING, then ACTIVE.
            Some(None | Some(IndexStatus::Active)) => return Ok(()),
            _ => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    }
    Err(StoreError::Unavailable {
        message: format!(
            "index {GSI_BY_STATUS} of {table} did not become ACTIVE within 10 minutes"
        ),
        source: None,
    })
}

async fn create_leases_table(ddb: &aws_sdk_dynamodb::Client, table: &str) -> StoreResult<()> {
    let r = ddb
        .create_table()
        .table_name(table)
        .billing_mode(BillingMode::PayPerRequest)
        .attribute_definitions(attr(LEASE_PK)?)
        .attribute_definitions(attr(LEASE_SK)?)
        .key_schema(key(LEASE_PK, KeyType::Hash)?)
        .key_schema(key(LEASE_SK, KeyType::Range)?)
        .send()
        .await;
    tolerate_exists(r.map(|_| ()), "CreateTable leases")
}

fn tolerate_exists<E, R>(
    r: Result<(), aws_sdk_dynamodb::error::SdkError<E, R>>,
    op: &str,
) -> StoreResult<()>
where
    E: aws_sdk_dynamodb::error::ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    match r {
        Ok(()) => Ok(()),
        Err(e) if sdk_code(&e) == Some("ResourceInUseException") => Ok(()),
        Err(e) => Err(map_sdk(op, e)),
    }
}

async fn wait_active(ddb: &aws_sdk_dynamodb::Client, table: &str) -> StoreResult<()> {
    for _ in 0..600 {
        let out = ddb
            .describe_table()
            .table_name(table)
            .send()
            .await
            .map_err(|e| map_sdk("DescribeTable", e))?;
        let status = out.table.and_then(|t| t.table_status);
        if status == Some(TableStatus::Active) {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Err(StoreError::Unavailable {
        message: format!("table {table} did not become ACTIVE within 5 minutes"),
        source: None,
    })
}

async fn enable_ttl(ddb: &aws_sdk_dynamodb::Client, table: &str) -> StoreResult<()> {
    let current = ddb
        .describe_time_to_live()
        .table_name(table)
        .send()
        .await
        .map_err(|e| map_sdk("DescribeTimeToLive", e))?;
    let on = current
        .time_to_live_description
        .and_then(|d| d.time_to_live_status)
        .is_some_and(|s| s.as_str() == "ENABLED" || s.as_str() == "ENABLING");
    if on {
        return Ok(());
    }
    let spec = TimeToLiveSpecification::builder()
        .enabled(true)
        .attribute_name(EXPIRES_AT)
        .build()
        .map_err(build_err)?;
    ddb.update_time_to_live()
        .table_name(table)
        .time_to_live_specification(spec)
        .send()
        .await
        .map_err(|e| map_sdk("UpdateTimeToLive", e))?;
    Ok(())
}

async fn create_queues(
    sqs: &aws_sdk_sqs::Client,
    names: &ResourceNames,
    max_receive_count: u32,
) -> StoreResult<()> {
    // 14 days, SQS's maximum: dead letters wait for an operator.
    sqs.create_queue()
        .queue_name(&names.dlq)
        .attributes(QueueAttributeName::MessageRetentionPeriod, "1209600")
        .send()
        .await
        .map_err(|e| map_sdk("CreateQueue dlq", e))?;
    let dlq_url = queue_url(sqs, &names.dlq).await?;
    let attrs = sqs
        .get_queue_attributes()
        .queue_url(&dlq_url)
        .attribute_names(QueueAttributeName::QueueArn)
        .send()
        .await
        .map_err(|e| map_sdk("GetQueueAttributes dlq", e))?;
    let arn = attrs
        .attributes
        .and_then(|a| a.get(&QueueAttributeName::QueueArn).cloned())
        .ok_or_else(|| StoreError::Unavailable {
            message: "the DLQ has no ARN".into(),
            source: None,
        })?;
    let redrive = serde_json::json!({
        "deadLetterTargetArn": arn,
        "maxReceiveCount": max_receive_count.to_string(),
    })
    .to_string();
    let created = sqs
        .create_queue()
        .queue_name(&names.ready_queue)
        .attributes(QueueAttributeName::RedrivePolicy, &redrive)
        .send()
        .await;
    match created {
        Ok(_) => Ok(()),
        // Exists with other attributes (another maxReceiveCount): set the policy in place.
        Err(e)
            if sdk_code(&e).is_some_and(|c| {
                c.contains("QueueNameExists") || c.contains("QueueAlreadyExists")
            }) =>
        {
            let url = queue_url(sqs, &names.ready_queue).await?;
            sqs.set_queue_attributes()
                .queue_url(url)
                .attributes(QueueAttributeName::RedrivePolicy, redrive)
                .send()
                .await
                .map_err(|e| map_sdk("SetQueueAttributes ready", e))?;
            Ok(())
        }
        Err(e) => Err(map_sdk("CreateQueue ready", e)),
    }
}

/// Deletes every resource of `opts.prefix` (tests and `punctual init --destroy`-like tooling);
/// missing resources are ignored.
pub async fn destroy(clients: &Clients, prefix: &str) -> StoreResult<()> {
    let names = ResourceNames::new(prefix);
    for table in [&names.tasks_table, &names.leases_table] {
        let r = clients
            .dynamodb
            .delete_table()
            .table_name(table)
            .send()
            .await;
        if let Err(e) = r
            && sdk_code(&e) != Some("ResourceNotFoundException")
        {
            return Err(map_sdk("DeleteTable", e));
        }
    }
    for q in [&names.ready_queue, &names.dlq] {
        if let Ok(url) = queue_url(&clients.sqs, q).await {
            clients
                .sqs
                .delete_queue()
                .queue_url(url)
                .send()
                .await
                .map_err(|e| map_sdk("DeleteQueue", e))?;
        }
    }
    Ok(())
}
