//! The worker function: an SQS event source batch in, a partial batch response out.
//!
//! Each record becomes the [`ReceivedMessage`] the aws backend's `queue_receive` would have
//! built from the same SQS message (body = the JSON [`DispatchMessage`], receipt handle,
//! `ApproximateReceiveCount`), and goes through [`Worker::handle`], the same per-message
//! protocol as `punctual worker`. Records run concurrently; the response lists the records
//! whose message must stay in the queue (see the [module doc](super) for the rule and for why
//! the worker's own acks become no-ops here).
//!
//! The event source mapping must be created with `function_response_types =
//! ["ReportBatchItemFailures"]`: without it the service ignores the list and deletes, or
//! retries, the whole batch.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};
use punctual_core::error::StoreResult;
use punctual_core::store::{
    DeadLetter, DispatchMessage, DlqList, Page, QueueDeadLetter, QueueDepth, QueueReceive,
    QueueSend, QueueVisibility, ReceivedMessage,
};
use punctual_core::{Backend, ReadyQueue, SystemClock};
use punctual_worker::{Disposition, Handlers, Worker, WorkerConfig, WorkerDeps, WorkerEvent};
use tokio::sync::mpsc;

use super::{ENV_HTTP_TIMEOUT_MS, ENV_RUN_TIMEOUT_MS, ENV_WEBHOOK_SECRET, LambdaEnv};

/// SQS's most records per event source batch (standard queue, no batching window).
pub const MAX_RECORDS: usize = 10;
/// CloudWatch namespace of the metrics the worker function logs in Embedded Metric Format.
pub const METRIC_NAMESPACE: &str = "punctual";
/// Metric: claim time minus due time of every fired task, milliseconds (dimension
/// `Prefix`). `infra/terraform` alarms on its p99.
pub const METRIC_FIRE_LAG: &str = "FireLagMs";

/// The ready queue as the worker sees it under the SQS event source: acks
/// (`queue_delete`) are left to the Lambda service, which deletes every record the
/// invocation does not report as failed; every other call goes to the real queue.
pub struct EventSourceQueue {
    inner: Arc<dyn ReadyQueue>,
}

impl std::fmt::Debug for EventSourceQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventSourceQueue").finish_non_exhaustive()
    }
}

impl EventSourceQueue {
    /// Wraps the backend's queue.
    pub fn new(inner: Arc<dyn ReadyQueue>) -> Self {
        Self { inner }
    }
}

#[async_trait]
impl ReadyQueue for EventSourceQueue {
    fn max_receive_count(&self) -> u32 {
        self.inner.max_receive_count()
    }
    fn receive_batch_max(&self) -> usize {
        self.inner.receive_batch_max()
    }
    async fn queue_send(&self, p: QueueSend) -> StoreResult<()> {
        self.inner.queue_send(p).await
    }
    async fn queue_receive(&self, p: QueueReceive) -> StoreResult<Vec<ReceivedMessage>> {
        self.inner.queue_receive(p).await
    }
    /// A no-op: the record is not reported as failed, so the Lambda service deletes it.
    async fn queue_delete(&self, _receipts: &[String]) -> StoreResult<()> {
        Ok(())
    }
    async fn queue_change_visibility(&self, p: QueueVisibility) -> StoreResult<()> {
        self.inner.queue_change_visibility(p).await
    }
    async fn queue_dead_letter(&self, p: QueueDeadLetter) -> StoreResult<()> {
        self.inner.queue_dead_letter(p).await
    }
    async fn dlq_list(&self, p: DlqList) -> StoreResult<Page<DeadLetter>> {
        self.inner.dlq_list(p).await
    }
    async fn dlq_delete(&self, ids: &[String]) -> StoreResult<()> {
        self.inner.dlq_delete(ids).await
    }
    async fn queue_depth(&self, now_ms: i64) -> StoreResult<QueueDepth> {
        self.inner.queue_depth(now_ms).await
    }
}

/// Why a record cannot be handled by the worker protocol at all.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// The record has no message id, so it cannot even be reported.
    #[error("record without a messageId")]
    NoMessageId,
    /// The record has no receipt handle.
    #[error("record {0} without a receiptHandle")]
    NoReceipt(String),
    /// The body is not a punctual dispatch message.
    #[error("record {id}: body is not a dispatch message: {error}")]
    Body {
        /// The record's message id.
        id: String,
        /// The parse error.
        error: String,
    },
}

/// The message the aws backend's `queue_receive` would build from the same SQS message.
pub fn received_message(record: &SqsMessage) -> Result<ReceivedMessage, RecordError> {
    let id = record.message_id.clone().ok_or(RecordError::NoMessageId)?;
    let receipt = record
        .receipt_handle
        .clone()
        .ok_or_else(|| RecordError::NoReceipt(id.clone()))?;
    let body = record.body.as_deref().unwrap_or_default();
    let message: DispatchMessage = serde_json::from_str(body).map_err(|e| RecordError::Body {
        id: id.clone(),
        error: e.to_string(),
    })?;
    let receive_count = record
        .attributes
        .get("ApproximateReceiveCount")
        .and_then(|c| c.parse().ok())
        .unwrap_or(1);
    Ok(ReceivedMessage {
        message,
        receipt,
        receive_count,
    })
}

/// What became of each record of one batch, in the batch's order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordOutcome {
    /// The worker protocol ran.
    Handled(Disposition),
    /// Not a punctual message: reported, so SQS redrives it to the DLQ in the end.
    Poison(String),
    /// The run panicked outside the worker's own guards: reported, redelivered.
    Failed(String),
}

impl RecordOutcome {
    /// True if the message must stay in the queue (reported in `batchItemFailures`).
    pub fn redeliver(&self) -> bool {
        match self {
            RecordOutcome::Handled(d) => !d.message_gone(),
            RecordOutcome::Poison(_) | RecordOutcome::Failed(_) => true,
        }
    }
}

/// The worker function: one [`Worker`] shared by every invocation of a Lambda instance.
#[derive(Clone)]
pub struct WorkerFunction {
    worker: Arc<Worker>,
    events: Arc<Mutex<mpsc::UnboundedReceiver<WorkerEvent>>>,
    prefix: String,
}

impl std::fmt::Debug for WorkerFunction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerFunction")
            .field("worker", &self.worker)
            .finish_non_exhaustive()
    }
}

impl WorkerFunction {
    /// A worker over `backend`, whose queue is wrapped in an [`EventSourceQueue`]. The config's
    /// `concurrency` should be at least the event source's batch size ([`MAX_RECORDS`]).
    pub fn new(backend: Backend, config: WorkerConfig, handlers: Handlers) -> anyhow::Result<Self> {
        let backend = Backend {
            queue: Arc::new(EventSourceQueue::new(backend.queue)),
            ..backend
        };
        let (tx, rx) = mpsc::unbounded_channel();
        let worker = Worker::new(WorkerDeps {
            backend,
            clock: Arc::new(SystemClock),
            config,
            handlers: Arc::new(handlers),
            events: Some(tx),
        })?;
        Ok(Self {
            worker: Arc::new(worker),
            events: Arc::new(Mutex::new(rx)),
            prefix: punctual_store::aws::names::DEFAULT_PREFIX.to_owned(),
        })
    }

    /// Sets the `Prefix` dimension of the logged metrics (default the default prefix).
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// The fire lags (ms) of the tasks fired since the last call.
    pub fn take_fire_lags(&self) -> Vec<i64> {
        let mut rx = self.events.lock().unwrap_or_else(|p| p.into_inner());
        let mut lags = Vec::new();
        while let Ok(e) = rx.try_recv() {
            if let WorkerEvent::Fired { lag_ms, .. } = e {
                lags.push(lag_ms);
            }
        }
        lags
    }

    /// Handles every record of `event` concurrently; outcomes in the batch's order. A record
    /// without a message id fails the whole invocation before anything runs (it could not be
    /// reported alone); a run that panics is reported for redelivery.
    pub async fn outcomes(&self, event: &SqsEvent) -> anyhow::Result<Vec<(String, RecordOutcome)>> {
        let ids = event
            .records
            .iter()
            .map(|r| r.message_id.clone().ok_or(RecordError::NoMessageId))
            .collect::<Result<Vec<_>, _>>()?;
        let mut out: Vec<Option<RecordOutcome>> = vec![None; ids.len()];
        let mut set = tokio::task::JoinSet::new();
        let mut index = std::collections::HashMap::new();
        for (i, record) in event.records.iter().enumerate() {
            match received_message(record) {
                Ok(msg) => {
                    let worker = self.worker.clone();
                    let handle = set.spawn(async move { worker.handle(msg).await });
                    index.insert(handle.id(), i);
                }
                Err(e) => {
                    tracing::warn!(message_id = ids[i], error = %e, "poison record reported for redelivery");
                    out[i] = Some(RecordOutcome::Poison(e.to_string()));
                }
            }
        }
        while let Some(done) = set.join_next_with_id().await {
            let (task, outcome) = match done {
                Ok((task, d)) => (task, RecordOutcome::Handled(d)),
                Err(e) => (e.id(), RecordOutcome::Failed(e.to_string())),
            };
            if let Some(&i) = index.get(&task) {
                out[i] = Some(outcome);
            }
        }
        Ok(ids
            .into_iter()
            .zip(out)
            .map(|(id, o)| {
                let o = o.unwrap_or_else(|| RecordOutcome::Failed("not run".into()));
                (id, o)
            })
            .collect())
    }

    /// The partial batch response for `event`: exactly the records to redeliver. Logs the
    /// batch's fire lags as one Embedded Metric Format line ([`emf_line`]).
    pub async fn handle(&self, event: SqsEvent) -> anyhow::Result<SqsBatchResponse> {
        let outcomes = self.outcomes(&event).await;
        if let Some(line) = emf_line(&self.prefix, &self.take_fire_lags(), now_ms()) {
            // Raw on stdout: CloudWatch Logs extracts the metric from the line itself.
            println!("{line}");
        }
        let outcomes = outcomes?;
        let mut response = SqsBatchResponse::default();
        for (id, outcome) in outcomes {
            if outcome.redeliver() {
                let mut failure = BatchItemFailure::default();
                failure.item_identifier = id;
                response.batch_item_failures.push(failure);
            }
        }
        Ok(response)
    }
}

fn now_ms() -> i64 {
    use punctual_core::clock::Clock as _;
    SystemClock.now_ms()
}

/// One CloudWatch Embedded Metric Format log line carrying `lags_ms` as [`METRIC_FIRE_LAG`]
/// values (at most 100, EMF's limit per line: the largest are kept), dimension `Prefix`.
/// `None` when nothing fired. CloudWatch turns the line into metric data without an API
/// call (no `PutMetricData` permission, no extra request per task).
pub fn emf_line(prefix: &str, lags_ms: &[i64], now_ms: i64) -> Option<String> {
    if lags_ms.is_empty() {
        return None;
    }
    let mut values: Vec<i64> = lags_ms.iter().map(|l| (*l).max(0)).collect();
    values.sort_unstable_by(|a, b| b.cmp(a));
    values.truncate(100);
    Some(
        serde_json::json!({
            "_aws": {
                "Timestamp": now_ms,
                "CloudWatchMetrics": [{
                    "Namespace": METRIC_NAMESPACE,
                    "Dimensions": [["Prefix"]],
                    "Metrics": [{ "Name": METRIC_FIRE_LAG, "Unit": "Milliseconds" }],
                }],
            },
            "Prefix": prefix,
            METRIC_FIRE_LAG: values,
        })
        .to_string(),
    )
}

/// The worker's config from the environment: run timeout and http timeout in milliseconds
/// (defaults as `punctual worker`), the webhook secret (required: an unsigned webhook would
/// be a silent downgrade), `concurrency` = one slot per record of a batch.
pub fn config_from_env(env: &LambdaEnv) -> anyhow::Result<WorkerConfig> {
    let defaults = WorkerConfig::default();
    let run_timeout_ms = env.ms(ENV_RUN_TIMEOUT_MS, defaults.run_timeout_ms)?;
    let http_timeout_ms = env.ms(ENV_HTTP_TIMEOUT_MS, defaults.http_timeout_ms as i64)?;
    let secret = env.get(ENV_WEBHOOK_SECRET).ok_or_else(|| {
        anyhow::anyhow!("{ENV_WEBHOOK_SECRET} is not set: the worker signs every webhook call")
    })?;
    let config = WorkerConfig {
        concurrency: MAX_RECORDS,
        batch: MAX_RECORDS,
        run_timeout_ms,
        visibility_ms: run_timeout_ms,
        http_timeout_ms: u64::try_from(http_timeout_ms).unwrap_or(0),
        webhook_secret: Some(punctual_worker::sign::WebhookSecret::new(secret.as_bytes())),
        ..defaults
    };
    config.validate()?;
    Ok(config)
}

/// The `punctual-lambda-worker` entrypoint, with `handlers` for `handler` targets (a binary
/// of your own passes its handlers; the shipped one passes none).
pub async fn main_with(handlers: Handlers) -> Result<(), lambda_runtime::Error> {
    super::init_tracing();
    let env = LambdaEnv::from_process();
    let config = config_from_env(&env)?;
    let backend = crate::open_aws(&env.prefix()).await?;
    let function = WorkerFunction::new(backend, config, handlers)?.with_prefix(env.prefix());
    lambda_runtime::run(lambda_runtime::service_fn(
        move |event: lambda_runtime::LambdaEvent<SqsEvent>| {
            let function = function.clone();
            async move {
                function
                    .handle(event.payload)
                    .await
                    .map_err(lambda_runtime::Error::from)
            }
        },
    ))
    .await
}

/// The `punctual-lambda-worker` entrypoint (no custom handlers).
pub async fn main() -> Result<(), lambda_runtime::Error> {
    main_with(Handlers::new()).await
}
