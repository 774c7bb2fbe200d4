//! The aws backend: tasks and leases in DynamoDB, the ready queue and its DLQ in SQS.
//!
//! ```text
//!   API / poller / worker ──► AwsStore ──► DynamoDB {prefix}tasks   (+ sparse GSI by_due)
//!                               │      ├─► DynamoDB {prefix}leases  (leases + meta item)
//!                               │      └─► SQS {prefix}ready ──redrive──► {prefix}dlq
//!                               └ configured only through the standard AWS chain:
//!                                 AWS_ENDPOINT_URL(_DYNAMODB|_SQS), AWS_REGION, profiles
//! ```
//!
//! Names, key schema and attribute names live in [`names`]; `punctual init` ([`init`])
//! creates the resources idempotently and writes the meta item (shard count, creation minute).
//!
//! **The protocol as condition expressions.** Every state change of DESIGN.md is one
//! conditional `UpdateItem`/`PutItem`; `ConditionalCheckFailedException` becomes
//! [`StoreError::Conflict`], throttling and 5xx are retried by the SDK's standard retry
//! policy and then surface as `Unavailable`. A failed condition is followed by one strongly
//! consistent `GetItem` only where the caller must tell `NotFound` from `Conflict` (claim,
//! create of an existing id); operator writes (cancel, reschedule) read first and then write
//! conditional on the version and status they read (optimistic concurrency).
//!
//! **Cost per one-shot task** (see `docs/BENCHMARKS.md`, counted by the workspace's
//! `tests/aws_cost.rs`):
//! `PutItem` (1 WRU + 1 GSI put), 1/10 `SendMessageBatch`, mark `UpdateItem` (1 WRU + 1 GSI
//! delete), 1/10 `ReceiveMessage`, claim `UpdateItem` (1 WRU), completion `UpdateItem`
//! (1 WRU), 1/10 `DeleteMessageBatch`: 6 WRU. Polls are `Query`s of one shard-minute
//! (0.5 RRU per 4 KB returned, at least 0.5 per call).
//!
//! The sparse `by_status` GSI (see [`names`] and `list.rs`) adds nothing to that path: only a
//! task's unhappy end (`DEAD`, `CANCELLED`) writes it, so an operator can list those without a
//! Scan; `DISPATCHED`, `RUNNING` and `SUCCEEDED` are not listable here (a capability says so).
//!
//! **No Scan.** Nothing here calls `Scan`; `store/tests/aws_no_scan.rs` fails if a `.scan()`
//! call appears under `store/src/aws/` outside a function it names. Listing waiting tasks queries the GSI
//! bucket by bucket (see [`AwsStore`]'s `task_list_pending`), listing leases is one `Query`
//! of the lease partition, listing the DLQ receives from it (see [`queue`]).
//!
//! **Eventual consistency.** GSI reads are eventually consistent: a poll may see a task that
//! was just marked or cancelled. The mark is conditional and the claim drops stale messages,
//! so the worst case is one duplicate message, which the protocol already tolerates.

pub mod init;
pub mod metrics;
pub mod names;
pub mod queue;

mod item;
mod leases;
mod list;
mod tasks;

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::AtomicI64;

use aws_sdk_dynamodb::types::AttributeValue;
use punctual_core::error::StoreResult;
use punctual_core::keys::MAX_SHARDS;
use punctual_core::{Backend, StoreError};

pub use init::{InitOptions, init};
pub use item::item_size;
pub use metrics::RequestCounter;
pub use names::ResourceNames;

/// Default receives before SQS moves a message to the DLQ (the queue's `maxReceiveCount`).
pub const DEFAULT_MAX_RECEIVE_COUNT: u32 = 10;
/// Default retention of terminal tasks before DynamoDB's TTL deletes them: 30 days.
pub const DEFAULT_RETENTION_SECS: i64 = 30 * 86_400;
/// Default bound on the `Query` calls one `task_list_pending` page may make.
pub const DEFAULT_LIST_MAX_QUERIES: usize = 2_000;
/// Default number of concurrent requests when one call fans out into many (batch puts, marks).
pub const DEFAULT_CONCURRENCY: usize = 32;

/// How to reach and use one deployment. Only the binary reads the environment; the SDK
/// configuration comes from the standard chain ([`load_sdk_config`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AwsOptions {
    /// Prefix of every table and queue name (default [`names::DEFAULT_PREFIX`]).
    pub prefix: String,
    /// Receives before a message goes to the DLQ (default [`DEFAULT_MAX_RECEIVE_COUNT`]):
    /// `init` writes it into the ready queue's redrive policy; `open` reads it back from there.
    pub max_receive_count: u32,
    /// How long terminal tasks are kept, seconds (default [`DEFAULT_RETENTION_SECS`]).
    pub retention_secs: i64,
    /// Most `Query` calls per `task_list_pending` page (default [`DEFAULT_LIST_MAX_QUERIES`]).
    pub list_max_queries: usize,
    /// Concurrent requests of one fanned-out call (default [`DEFAULT_CONCURRENCY`]).
    pub concurrency: usize,
}

impl Default for AwsOptions {
    fn default() -> Self {
        Self {
            prefix: names::DEFAULT_PREFIX.to_owned(),
            max_receive_count: DEFAULT_MAX_RECEIVE_COUNT,
            retention_secs: DEFAULT_RETENTION_SECS,
            list_max_queries: DEFAULT_LIST_MAX_QUERIES,
            concurrency: DEFAULT_CONCURRENCY,
        }
    }
}

impl AwsOptions {
    /// Checks the options, naming the field at fault.
    pub fn validate(&self) -> StoreResult<()> {
        let ok_prefix = self.prefix.len() <= 40
            && self
                .prefix
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !ok_prefix {
            return Err(StoreError::invalid(
                "prefix",
                "at most 40 characters of A-Z a-z 0-9 - _",
            ));
        }
        if !(1..=1_000).contains(&self.max_receive_count) {
            return Err(StoreError::invalid(
                "max_receive_count",
                "must be between 1 and 1000 (SQS's limit)",
            ));
        }
        if self.retention_secs < 0 {
            return Err(StoreError::invalid(
                "retention_secs",
                "must not be negative",
            ));
        }
        if self.list_max_queries == 0 || self.concurrency == 0 {
            return Err(StoreError::invalid(
                "list_max_queries",
                "list_max_queries and concurrency must be at least 1",
            ));
        }
        Ok(())
    }
}

/// Loads the SDK configuration from the standard chain (environment, profiles, IMDS, ...),
/// with an HTTPS client on rustls + ring (the crypto provider the workspace already builds).
pub async fn load_sdk_config() -> aws_config::SdkConfig {
    use aws_smithy_http_client::tls::{self, rustls_provider::CryptoMode};
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(CryptoMode::Ring))
        .build_https();
    aws_config::defaults(aws_config::BehaviorVersion::latest())
        .http_client(http)
        .load()
        .await
}

/// The two service clients, built from one SDK configuration plus optional interceptors.
#[derive(Debug, Clone)]
pub struct Clients {
    /// DynamoDB.
    pub dynamodb: aws_sdk_dynamodb::Client,
    /// SQS.
    pub sqs: aws_sdk_sqs::Client,
}

impl Clients {
    /// Clients for `sdk`; `counter`, if given, counts every request by operation.
    pub fn new(sdk: &aws_config::SdkConfig, counter: Option<RequestCounter>) -> Self {
        let mut ddb = aws_sdk_dynamodb::config::Builder::from(sdk);
        let mut sqs = aws_sdk_sqs::config::Builder::from(sdk);
        if let Some(c) = counter {
            ddb = ddb.interceptor(c.clone());
            sqs = sqs.interceptor(c);
        }
        Self {
            dynamodb: aws_sdk_dynamodb::Client::from_conf(ddb.build()),
            sqs: aws_sdk_sqs::Client::from_conf(sqs.build()),
        }
    }
}

/// The aws backend: one object playing [`TaskStore`](punctual_core::TaskStore),
/// [`ReadyQueue`](punctual_core::ReadyQueue) and [`LeaseStore`](punctual_core::LeaseStore).
///
/// Open it with [`AwsStore::open`] after `punctual init` created the resources. Clones share
/// the clients.
#[derive(Clone)]
pub struct AwsStore {
    clients: Clients,
    names: ResourceNames,
    opts: AwsOptions,
    ready_url: String,
    dlq_url: String,
    shard_count: u32,
    created_minute: i64,
    /// The latest bucket minute this process knows to be recorded in the meta item; a put into
    /// a later minute raises it (at most one extra write per minute per process).
    max_due_minute: Arc<AtomicI64>,
}

impl std::fmt::Debug for AwsStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AwsStore")
            .field("names", &self.names)
            .field("shard_count", &self.shard_count)
            .field("created_minute", &self.created_minute)
            .finish_non_exhaustive()
    }
}

impl AwsStore {
    /// Opens a deployment created by [`init`]: reads the meta item and the queue URLs.
    /// `Unavailable` with a hint to run `punctual init` if they are missing.
    pub async fn open(clients: Clients, opts: AwsOptions) -> StoreResult<Arc<AwsStore>> {
        opts.validate()?;
        let names = ResourceNames::new(&opts.prefix);
        let meta = init::read_meta(&clients.dynamodb, &names)
            .await?
            .ok_or_else(|| StoreError::Unavailable {
                message: format!(
                    "no meta item in table {}: run `punctual init` first",
                    names.leases_table
                ),
                source: None,
            })?;
        let ready_url = init::queue_url(&clients.sqs, &names.ready_queue).await?;
        let dlq_url = init::queue_url(&clients.sqs, &names.dlq).await?;
        // The queue's redrive policy is the truth about maxReceiveCount (init set it).
        let mut opts = opts;
        if let Some(n) = init::max_receive_count(&clients.sqs, &ready_url).await? {
            opts.max_receive_count = n;
        }
        Ok(Arc::new(AwsStore {
            clients,
            names,
            opts,
            ready_url,
            dlq_url,
            shard_count: meta.shard_count,
            created_minute: meta.created_minute,
            max_due_minute: Arc::new(AtomicI64::new(meta.max_due_minute)),
        }))
    }

    /// The resource names in use.
    pub fn names(&self) -> &ResourceNames {
        &self.names
    }

    /// This store as a [`Backend`].
    pub fn backend(self: &Arc<Self>) -> Backend {
        Backend::from_one(self.clone())
    }
}

/// Opens the deployment named by `opts` with the standard AWS configuration chain.
pub async fn connect(opts: AwsOptions) -> StoreResult<Arc<AwsStore>> {
    let sdk = load_sdk_config().await;
    AwsStore::open(Clients::new(&sdk, None), opts).await
}

// ---- shared helpers --------------------------------------------------------------------

/// Translates an SDK error: a failed condition is `Conflict`, everything else (throttling and
/// 5xx after the SDK's retries, network failures) is `Unavailable` with the cause kept.
pub(crate) fn map_sdk<E, R>(op: &str, e: aws_sdk_dynamodb::error::SdkError<E, R>) -> StoreError
where
    E: aws_sdk_dynamodb::error::ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + Send + Sync + 'static,
{
    use aws_sdk_dynamodb::error::ProvideErrorMetadata;
    match e.code() {
        Some("ConditionalCheckFailedException") => {
            StoreError::conflict(format!("{op}: condition failed"))
        }
        Some("ValidationException") => StoreError::Unavailable {
            message: format!("{op}: rejected: {}", e.message().unwrap_or("validation")),
            source: Some(Box::new(e)),
        },
        code => {
            let message = format!("{op} failed ({})", code.unwrap_or("no error code"));
            StoreError::unavailable(message, e)
        }
    }
}

/// The error code of an SDK error, if the service sent one.
pub(crate) fn sdk_code<E, R>(e: &aws_sdk_dynamodb::error::SdkError<E, R>) -> Option<&str>
where
    E: aws_sdk_dynamodb::error::ProvideErrorMetadata,
{
    use aws_sdk_dynamodb::error::ProvideErrorMetadata;
    e.code()
}

/// A request that could not be built: a bug here, reported as `Unavailable`.
pub(crate) fn build_err(e: impl std::error::Error + Send + Sync + 'static) -> StoreError {
    StoreError::unavailable("cannot build an AWS request", e)
}

/// Expression attribute names and values, registered as an expression uses them (DynamoDB
/// refuses unused ones).
#[derive(Debug, Default)]
pub(crate) struct Ex {
    pub(crate) names: HashMap<String, String>,
    pub(crate) values: HashMap<String, AttributeValue>,
}

impl Ex {
    /// `#name` for attribute `a`.
    pub(crate) fn n(&mut self, a: &str) -> String {
        let k = format!("#{a}");
        self.names.insert(k.clone(), a.to_owned());
        k
    }
    /// `:key` bound to `v`.
    pub(crate) fn v(&mut self, key: &str, v: AttributeValue) -> String {
        let k = format!(":{key}");
        self.values.insert(k.clone(), v);
        k
    }
    pub(crate) fn names(&self) -> Option<HashMap<String, String>> {
        (!self.names.is_empty()).then(|| self.names.clone())
    }
    pub(crate) fn values(&self) -> Option<HashMap<String, AttributeValue>> {
        (!self.values.is_empty()).then(|| self.values.clone())
    }
}

/// A number attribute.
pub(crate) fn num(n: impl ToString) -> AttributeValue {
    AttributeValue::N(n.to_string())
}

/// A string attribute.
pub(crate) fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

/// Runs `f` over `items` with at most `limit` in flight; results in input order.
pub(crate) async fn fan_out<T, R, F, Fut>(items: Vec<T>, limit: usize, f: F) -> Vec<R>
where
    T: Send + 'static,
    R: Send + 'static,
    F: Fn(T) -> Fut,
    Fut: Future<Output = R> + Send + 'static,
{
    let n = items.len();
    let sem = Arc::new(tokio::sync::Semaphore::new(limit.max(1)));
    let mut set = tokio::task::JoinSet::new();
    for (i, item) in items.into_iter().enumerate() {
        let fut = f(item);
        let sem = sem.clone();
        set.spawn(async move {
            let _permit = sem.acquire_owned().await;
            (i, fut.await)
        });
    }
    let mut out: Vec<Option<R>> = (0..n).map(|_| None).collect();
    while let Some(done) = set.join_next().await {
        match done {
            Ok((i, r)) => out[i] = Some(r),
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(_) => {}
        }
    }
    out.into_iter()
        .map(|r| r.expect("every fanned-out call finished"))
        .collect()
}

/// Checks a shard count for `init`.
pub(crate) fn check_shards(shard_count: u32) -> StoreResult<()> {
    if !(1..=MAX_SHARDS).contains(&shard_count) {
        return Err(StoreError::invalid(
            "shard_count",
            format!("must be between 1 and {MAX_SHARDS}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_dynamodb::error::{ErrorMetadata, SdkError};
    use aws_sdk_dynamodb::operation::update_item::UpdateItemError;

    fn service_error(code: &str) -> SdkError<UpdateItemError, ()> {
        let meta = ErrorMetadata::builder().code(code).message("m").build();
        SdkError::service_error(UpdateItemError::generic(meta), ())
    }

    #[test]
    fn errors_translate_at_the_boundary() {
        assert!(map_sdk("op", service_error("ConditionalCheckFailedException")).is_conflict());
        for code in [
            "ProvisionedThroughputExceededException",
            "ThrottlingException",
            "InternalServerError",
            "ServiceUnavailable",
        ] {
            match map_sdk("op", service_error(code)) {
                StoreError::Unavailable { source, .. } => assert!(source.is_some(), "{code}"),
                other => panic!("{code}: {other:?}"),
            }
        }
        let timeout: SdkError<UpdateItemError, ()> = SdkError::timeout_error("slow");
        assert!(matches!(
            map_sdk("op", timeout),
            StoreError::Unavailable { .. }
        ));
    }

    #[test]
    fn options_are_validated_by_field() {
        assert!(AwsOptions::default().validate().is_ok());
        let bad = |o: AwsOptions| match o.validate() {
            Err(StoreError::Invalid { field, .. }) => field,
            other => panic!("{other:?}"),
        };
        let prefix = bad(AwsOptions {
            prefix: "no spaces".into(),
            ..AwsOptions::default()
        });
        assert_eq!(prefix, "prefix");
        let mrc = bad(AwsOptions {
            max_receive_count: 0,
            ..AwsOptions::default()
        });
        assert_eq!(mrc, "max_receive_count");
        assert!(check_shards(0).is_err() && check_shards(16).is_ok());
    }
}
