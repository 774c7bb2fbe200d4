//! The worker Lambda against real SQS semantics (the emulator, `scripts/moto`): records built
//! exactly as the event source mapping builds them — from `ReceiveMessage` on the ready queue,
//! with SQS's receipt handles and receive counts — then the batch response applied the way
//! the Lambda service applies it (delete what was not reported). What is checked is what SQS
//! holds afterwards: only the reported messages come back, a kept retry comes back at its
//! delay, a dead task's message is in the DLQ.

use std::time::Duration;

use async_trait::async_trait;
use aws_lambda_events::event::sqs::{SqsEvent, SqsMessage};
use punctual::lambda::worker::WorkerFunction;
use punctual_core::clock::{Clock, SystemClock};
use punctual_core::store::{DispatchMessage, QueueSend, TaskPut};
use punctual_core::testkit;
use punctual_core::{Backend, NewTask, Task, TaskStatus};
use punctual_store::aws::{Clients, load_sdk_config};
use punctual_worker::{Handler, Handlers, Outcome, WorkerConfig};
use serde_json::json;

/// Fails (never skips) without an emulator.
fn require_emulator() {
    assert!(
        std::env::var("AWS_ENDPOINT_URL").is_ok_and(|v| v.starts_with("http://127.0.0.1")),
        "the lambda aws test needs an emulator: run it as `scripts/moto cargo test --features \
         lambda --test lambda_aws`"
    );
}

struct Fixed(Outcome);

#[async_trait]
impl Handler for Fixed {
    async fn run(&self, _task: &Task) -> Outcome {
        self.0.clone()
    }
}

struct Setup {
    backend: Backend,
    clients: Clients,
    ready_url: String,
    ready_arn: String,
    function: WorkerFunction,
}

async fn setup(tag: &str) -> Setup {
    require_emulator();
    let prefix = format!("l{}-{tag}-", std::process::id());
    punctual::init_aws(&prefix, 2, 5).await.unwrap();
    let backend = punctual::open_aws(&prefix).await.unwrap();
    let clients = Clients::new(&load_sdk_config().await, None);
    let ready_url = clients
        .sqs
        .get_queue_url()
        .queue_name(format!("{prefix}ready"))
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let ready_arn = clients
        .sqs
        .get_queue_attributes()
        .queue_url(&ready_url)
        .attribute_names("QueueArn".into())
        .send()
        .await
        .unwrap()
        .attributes
        .unwrap()
        .into_values()
        .next()
        .unwrap();
    let handlers = Handlers::new()
        .register("ok", Fixed(Outcome::Success))
        .register(
            "busy",
            Fixed(Outcome::retry_after("busy", Duration::from_secs(1))),
        )
        .register("doomed", Fixed(Outcome::give_up("bad request")));
    let function = WorkerFunction::new(
        backend.clone(),
        WorkerConfig {
            concurrency: 10,
            ..WorkerConfig::default()
        },
        handlers,
    )
    .unwrap();
    Setup {
        backend,
        clients,
        ready_url,
        ready_arn,
        function,
    }
}

impl Setup {
    async fn put_and_send(&self, new: NewTask) -> Task {
        let now = SystemClock.now_ms();
        let task = self
            .backend
            .tasks
            .task_put(TaskPut {
                task: new,
                now_ms: now,
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
                now_ms: now,
            })
            .await
            .unwrap();
        task
    }

    /// Receives up to 10 messages as the event source mapping does and builds its event.
    async fn receive_event(&self, visibility_secs: i32) -> SqsEvent {
        let out = self
            .clients
            .sqs
            .receive_message()
            .queue_url(&self.ready_url)
            .max_number_of_messages(10)
            .visibility_timeout(visibility_secs)
            .wait_time_seconds(1)
            .message_system_attribute_names("All".into())
            .send()
            .await
            .unwrap();
        let records: Vec<SqsMessage> = out
            .messages
            .unwrap_or_default()
            .into_iter()
            .map(|m| {
                let attributes: serde_json::Map<String, serde_json::Value> = m
                    .attributes()
                    .map(|a| {
                        a.iter()
                            .map(|(k, v)| (k.as_str().to_owned(), json!(v)))
                            .collect()
                    })
                    .unwrap_or_default();
                serde_json::from_value(json!({
                    "messageId": m.message_id(),
                    "receiptHandle": m.receipt_handle(),
                    "body": m.body(),
                    "attributes": attributes,
                    "messageAttributes": {},
                    "md5OfBody": m.md5_of_body(),
                    "eventSource": "aws:sqs",
                    "eventSourceARN": self.ready_arn,
                    "awsRegion": "us-east-1",
                }))
                .unwrap()
            })
            .collect();
        let mut e = SqsEvent::default();
        e.records = records;
        e
    }

    /// What the Lambda service does with a batch response: deletes every record not listed.
    async fn apply(&self, event: &SqsEvent, failed: &[String]) {
        for r in &event.records {
            let id = r.message_id.clone().unwrap();
            if !failed.contains(&id) {
                self.clients
                    .sqs
                    .delete_message()
                    .queue_url(&self.ready_url)
                    .receipt_handle(r.receipt_handle.clone().unwrap())
                    .send()
                    .await
                    .unwrap();
            }
        }
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
}

fn id_of(event: &SqsEvent, task_id: &str) -> String {
    event
        .records
        .iter()
        .find(|r| r.body.as_deref().is_some_and(|b| b.contains(task_id)))
        .and_then(|r| r.message_id.clone())
        .unwrap_or_else(|| panic!("no record for {task_id}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn only_the_reported_records_stay_in_sqs() {
    let s = setup("batch").await;
    let ok = s
        .put_and_send(testkit::task().id("ok-1").handler("ok").build())
        .await;
    let dead = s
        .put_and_send(testkit::task().id("doomed-1").handler("doomed").build())
        .await;
    let busy = s
        .put_and_send(
            testkit::task()
                .id("busy-1")
                .handler("busy")
                .max_attempts(5)
                .build(),
        )
        .await;
    s.clients
        .sqs
        .send_message()
        .queue_url(&s.ready_url)
        .message_body("Test message.")
        .send()
        .await
        .unwrap();

    let mut event = s.receive_event(3).await;
    while event.records.len() < 4 {
        let more = s.receive_event(3).await;
        assert!(
            !more.records.is_empty(),
            "only {} of 4 received",
            event.records.len()
        );
        event.records.extend(more.records);
    }
    let response = s.function.handle(event.clone()).await.unwrap();
    let mut failed: Vec<String> = response
        .batch_item_failures
        .iter()
        .map(|f| f.item_identifier.clone())
        .collect();
    failed.sort();
    let poison = event
        .records
        .iter()
        .find(|r| r.body.as_deref() == Some("Test message."))
        .and_then(|r| r.message_id.clone())
        .unwrap();
    let mut want = vec![poison.clone(), id_of(&event, "busy-1")];
    want.sort();
    assert_eq!(failed, want, "exactly the poison and the kept retry");
    s.apply(&event, &failed).await;

    assert_eq!(s.status(&ok.task_id).await, TaskStatus::Succeeded);
    assert_eq!(s.status(&dead.task_id).await, TaskStatus::Dead);
    assert_eq!(s.status(&busy.task_id).await, TaskStatus::RetryWait);
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
    assert_eq!(letters.items[0].message.task_id, "doomed-1");

    // The retry was delayed 1 s by the worker: it returns first, with its receive count.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    let again = s.receive_event(30).await;
    let bodies: Vec<String> = again
        .records
        .iter()
        .map(|r| r.body.clone().unwrap_or_default())
        .collect();
    assert_eq!(again.records.len(), 1, "{bodies:?}");
    assert!(bodies[0].contains("busy-1"), "{bodies:?}");
    assert_eq!(again.records[0].attributes["ApproximateReceiveCount"], "2");
    // The poison comes back when the batch's visibility timeout ends, like any failure.
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    let last = s.receive_event(30).await;
    assert_eq!(last.records.len(), 1);
    assert_eq!(last.records[0].message_id.as_deref(), Some(poison.as_str()));
}
