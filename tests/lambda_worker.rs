//! The worker Lambda's handler against SQS event JSON: AWS's documented example event, and
//! records in the same shape built from real dispatch messages of the embedded store.
//!
//! The embedded queue stands in for SQS here (its receipts are its own); the aws test
//! (`tests/lambda_aws.rs`, under scripts/moto) does the same with SQS receipt handles.
//! What is checked: the partial batch response lists exactly the records to redeliver, the
//! task ends in the state the worker protocol says, and the worker leaves deletion to the
//! Lambda service (the message is still in flight after a success).

use async_trait::async_trait;
use aws_lambda_events::event::sqs::{SqsBatchResponse, SqsEvent, SqsMessage};
use punctual::lambda::worker::{RecordOutcome, WorkerFunction, received_message};
use punctual_core::clock::{Clock, SystemClock};
use punctual_core::store::{DispatchMessage, QueueReceive, QueueSend, ReceivedMessage, TaskPut};
use punctual_core::testkit;
use punctual_core::{Backend, NewTask, Task, TaskStatus};
use punctual_store::embedded::{EmbeddedOptions, EmbeddedStore};
use punctual_worker::{Disposition, Handler, Handlers, Outcome, WorkerConfig};
use serde_json::{Value, json};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");

fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!("{FIXTURES}/{name}"))
        .unwrap_or_else(|e| panic!("fixture {name}: {e}"))
}

fn now_ms() -> i64 {
    SystemClock.now_ms()
}

/// A handler answering one fixed outcome.
struct Fixed(Outcome);

#[async_trait]
impl Handler for Fixed {
    async fn run(&self, _task: &Task) -> Outcome {
        self.0.clone()
    }
}

struct Setup {
    _dir: tempfile::TempDir,
    backend: Backend,
    function: WorkerFunction,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let store =
        EmbeddedStore::open(&dir.path().join("punctual.db"), EmbeddedOptions::default()).unwrap();
    let backend = Backend::from_one(store);
    let handlers = Handlers::new()
        .register("ok", Fixed(Outcome::Success))
        .register("flaky", Fixed(Outcome::retry("503 from upstream")))
        .register("doomed", Fixed(Outcome::give_up("bad request")));
    let config = WorkerConfig {
        concurrency: 10,
        ..WorkerConfig::default()
    };
    let function = WorkerFunction::new(backend.clone(), config, handlers).unwrap();
    Setup {
        _dir: dir,
        backend,
        function,
    }
}

impl Setup {
    /// Stores `new` due now, sends its dispatch message and receives it back: the body and
    /// receipt an SQS record would carry.
    async fn dispatched(&self, new: NewTask) -> (Task, ReceivedMessage) {
        let task = self
            .backend
            .tasks
            .task_put(TaskPut {
                task: new,
                now_ms: now_ms(),
            })
            .await
            .unwrap()
            .task()
            .clone();
        self.backend
            .queue
            .queue_send(QueueSend {
                messages: vec![DispatchMessage {
                    task_id: task.task_id.clone(),
                    version: task.version,
                    shard: task.shard,
                    due_ms: task.due_ms,
                }],
                now_ms: now_ms(),
            })
            .await
            .unwrap();
        let mut got = self
            .backend
            .queue
            .queue_receive(QueueReceive {
                max: 1,
                visibility_ms: 30_000,
                wait_ms: 0,
                now_ms: now_ms(),
            })
            .await
            .unwrap();
        assert_eq!(got.len(), 1, "the message just sent");
        (task, got.remove(0))
    }

    async fn status(&self, id: &str) -> TaskStatus {
        self.backend
            .tasks
            .task_get(id)
            .await
            .unwrap()
            .unwrap()
            .status
    }

    async fn in_flight(&self) -> u64 {
        self.backend
            .queue
            .queue_depth(now_ms())
            .await
            .unwrap()
            .in_flight
    }
}

/// An SQS record in AWS's documented shape (the first record of `sqs-event.json`) carrying
/// `msg`'s body, receipt and receive count, with message id `id`.
fn record(id: &str, msg: &ReceivedMessage) -> SqsMessage {
    let event: Value = serde_json::from_str(&fixture("sqs-event.json")).unwrap();
    let mut r = event["Records"][0].clone();
    r["messageId"] = json!(id);
    r["receiptHandle"] = json!(msg.receipt);
    r["body"] = json!(serde_json::to_string(&msg.message).unwrap());
    r["attributes"]["ApproximateReceiveCount"] = json!(msg.receive_count.to_string());
    serde_json::from_value(r).unwrap()
}

fn event(records: Vec<SqsMessage>) -> SqsEvent {
    let mut e = SqsEvent::default();
    e.records = records;
    e
}

fn failures(r: &SqsBatchResponse) -> Vec<&str> {
    r.batch_item_failures
        .iter()
        .map(|f| f.item_identifier.as_str())
        .collect()
}

#[test]
fn the_documented_sqs_event_round_trips() {
    let text = fixture("sqs-event.json");
    let parsed: SqsEvent = serde_json::from_str(&text).unwrap();
    assert_eq!(parsed.records.len(), 2);
    let again: SqsEvent = serde_json::from_value(serde_json::to_value(&parsed).unwrap()).unwrap();
    assert_eq!(parsed, again);
    assert_eq!(
        parsed.records[0].message_id.as_deref(),
        Some("059f36b4-87a3-44ab-83d2-661975830a7d")
    );
}

#[test]
fn a_record_maps_to_the_message_the_aws_queue_would_receive() {
    let msg = ReceivedMessage {
        message: DispatchMessage {
            task_id: "t-1".into(),
            version: 3,
            shard: 7,
            due_ms: 1_767_225_630_000,
        },
        receipt: "AQEB-receipt".into(),
        receive_count: 4,
    };
    assert_eq!(received_message(&record("m-1", &msg)).unwrap(), msg);
    // The documented example's body is not a dispatch message.
    let parsed: SqsEvent = serde_json::from_str(&fixture("sqs-event.json")).unwrap();
    let err = received_message(&parsed.records[0]).unwrap_err();
    assert!(err.to_string().contains("not a dispatch message"), "{err}");
}

#[tokio::test]
async fn documented_event_is_poison_and_answers_the_documented_response_shape() {
    let s = setup();
    let parsed: SqsEvent = serde_json::from_str(&fixture("sqs-event.json")).unwrap();
    let response = s.function.handle(parsed).await.unwrap();
    let expected: Value = serde_json::from_str(&fixture("sqs-batch-response.json")).unwrap();
    assert_eq!(serde_json::to_value(&response).unwrap(), expected);
}

#[tokio::test]
async fn a_batch_of_successes_reports_nothing_and_leaves_deletion_to_lambda() {
    let s = setup();
    let mut records = Vec::new();
    let mut ids = Vec::new();
    for i in 0..3 {
        let (task, msg) = s
            .dispatched(testkit::task().id(format!("ok-{i}")).handler("ok").build())
            .await;
        records.push(record(&format!("msg-ok-{i}"), &msg));
        ids.push(task.task_id);
    }
    let response = s.function.handle(event(records)).await.unwrap();
    assert!(failures(&response).is_empty(), "{response:?}");
    for id in &ids {
        assert_eq!(s.status(id).await, TaskStatus::Succeeded, "{id}");
    }
    // The worker's own ack was a no-op: the service deletes the reported-ok records.
    assert_eq!(s.in_flight().await, 3);
}

#[tokio::test]
async fn a_retry_is_reported_for_redelivery() {
    let s = setup();
    let (task, msg) = s
        .dispatched(
            testkit::task()
                .id("flaky-1")
                .handler("flaky")
                .max_attempts(5)
                .backoff(1_000, 2_000)
                .build(),
        )
        .await;
    let outcomes = s
        .function
        .outcomes(&event(vec![record("msg-flaky", &msg)]))
        .await
        .unwrap();
    assert_eq!(
        outcomes,
        vec![(
            "msg-flaky".to_owned(),
            RecordOutcome::Handled(Disposition::RetryKept)
        )]
    );
    let response = s
        .function
        .handle(event(vec![record("msg-flaky", &msg)]))
        .await
        .unwrap();
    // The second delivery of the same message at the same version: the claim accepts
    // RETRY_WAIT, the run fails again, the message is kept again.
    assert_eq!(failures(&response), vec!["msg-flaky"]);
    assert_eq!(s.status(&task.task_id).await, TaskStatus::RetryWait);
}

#[tokio::test]
async fn one_poison_record_in_a_batch_is_the_only_one_reported() {
    let s = setup();
    let (ok, ok_msg) = s
        .dispatched(testkit::task().id("ok-a").handler("ok").build())
        .await;
    let (dead, dead_msg) = s
        .dispatched(testkit::task().id("doomed-a").handler("doomed").build())
        .await;
    let (stale, stale_msg) = s
        .dispatched(testkit::task().id("ok-b").handler("ok").build())
        .await;
    // A message at a version the task no longer has: dropped, not redelivered.
    let mut stale_msg = stale_msg;
    stale_msg.message.version += 1;
    let mut poison = record("msg-poison", &ok_msg);
    poison.body = Some("{\"not\":\"a dispatch message\"}".into());
    let batch = vec![
        record("msg-ok", &ok_msg),
        poison,
        record("msg-dead", &dead_msg),
        record("msg-stale", &stale_msg),
    ];
    let response = s.function.handle(event(batch)).await.unwrap();
    assert_eq!(failures(&response), vec!["msg-poison"]);
    assert_eq!(s.status(&ok.task_id).await, TaskStatus::Succeeded);
    assert_eq!(s.status(&dead.task_id).await, TaskStatus::Dead);
    assert_eq!(s.status(&stale.task_id).await, TaskStatus::Scheduled);
    // The dead task's message went to the DLQ with its reason (the worker's own call).
    let letters = s
        .backend
        .queue
        .dlq_list(punctual_core::store::DlqList {
            after: None,
            limit: 10,
        })
        .await
        .unwrap();
    assert_eq!(letters.items.len(), 1);
    assert_eq!(letters.items[0].message.task_id, "doomed-a");
    assert!(letters.items[0].reason.contains("bad request"));
}

#[tokio::test]
async fn a_record_without_a_message_id_fails_the_invocation() {
    let s = setup();
    let mut e: SqsEvent = serde_json::from_str(&fixture("sqs-event.json")).unwrap();
    e.records[1].message_id = None;
    let err = s.function.handle(e).await.unwrap_err();
    assert!(err.to_string().contains("messageId"), "{err}");
}

#[test]
fn fire_lags_are_logged_in_embedded_metric_format() {
    use punctual::lambda::worker::{METRIC_FIRE_LAG, emf_line};
    assert_eq!(emf_line("p-", &[], 1), None);
    let lags: Vec<i64> = (0..150).collect();
    let line: Value = serde_json::from_str(&emf_line("p-", &lags, 42).unwrap()).unwrap();
    let directive = &line["_aws"]["CloudWatchMetrics"][0];
    assert_eq!(directive["Namespace"], "punctual");
    assert_eq!(directive["Dimensions"], json!([["Prefix"]]));
    assert_eq!(directive["Metrics"][0]["Name"], METRIC_FIRE_LAG);
    assert_eq!(line["_aws"]["Timestamp"], 42);
    assert_eq!(line["Prefix"], "p-");
    let values = line[METRIC_FIRE_LAG].as_array().unwrap();
    assert_eq!(values.len(), 100, "EMF takes at most 100 values per line");
    assert_eq!(values[0], 149, "the largest lags are kept");
}
