//! The worker against the embedded store and a real webhook receiver on 127.0.0.1:0.
//!
//! Tasks go into the store with `task_put` and their message straight into the ready queue
//! with `queue_send` (no poller: a claim accepts `SCHEDULED` at the same version). The
//! worker reports each step on its events channel; tests wait on those events, then check
//! the store, the queue, the DLQ and what the receiver saw. Real time, small backoffs.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use punctual_core::clock::{Clock, SystemClock};
use punctual_core::store::{
    DispatchMessage, DlqList, QueueDepth, QueueReceive, QueueSend, TaskCancel, TaskClaim, TaskPut,
    TaskReschedule,
};
use punctual_core::testkit;
use punctual_core::{Backend, NewTask, Task, TaskStatus};
use punctual_store::embedded::{EmbeddedOptions, EmbeddedStore};
use punctual_worker::{
    Handler, Handlers, Outcome, WorkerConfig, WorkerDeps, WorkerError, WorkerEvent,
};
use serde_json::{Value, json};
use tokio::sync::{Notify, mpsc, oneshot};
use tokio::task::JoinHandle;

/// Longest any test waits for an event.
const PATIENCE: Duration = Duration::from_secs(8);

fn now_ms() -> i64 {
    SystemClock.now_ms()
}

// ---------------------------------------------------------------- the webhook receiver

/// What the receiver answers to the `n`-th call (1-based) for one idempotency key.
#[derive(Debug, Clone)]
struct Reply {
    status: u16,
    body: &'static str,
    retry_after: Option<&'static str>,
    delay: Duration,
}

fn reply(status: u16) -> Reply {
    Reply {
        status,
        body: "",
        retry_after: None,
        delay: Duration::ZERO,
    }
}

/// One request as the receiver saw it.
#[derive(Debug, Clone)]
struct Call {
    key: String,
    attempt: String,
    content_type: String,
    body: Value,
}

type Script = Box<dyn Fn(u32) -> Reply + Send + Sync>;

struct ReceiverState {
    script: Script,
    calls: Mutex<Vec<Call>>,
    per_key: Mutex<HashMap<String, u32>>,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
    arrived: Notify,
}

struct InFlight<'a>(&'a AtomicUsize);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn hook(State(s): State<Arc<ReceiverState>>, headers: HeaderMap, body: Bytes) -> Response {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string()
    };
    let key = header("idempotency-key");
    let n = {
        let mut per_key = s.per_key.lock().unwrap();
        let n = per_key.entry(key.clone()).or_default();
        *n += 1;
        *n
    };
    s.calls.lock().unwrap().push(Call {
        key,
        attempt: header("x-punctual-attempt"),
        content_type: header("content-type"),
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    });
    let now = s.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    let _guard = InFlight(&s.in_flight);
    s.max_in_flight.fetch_max(now, Ordering::SeqCst);
    s.arrived.notify_waiters();

    let r = (s.script)(n);
    tokio::time::sleep(r.delay).await;
    let mut resp = (StatusCode::from_u16(r.status).unwrap(), r.body).into_response();
    if let Some(after) = r.retry_after {
        resp.headers_mut()
            .insert("retry-after", after.parse().unwrap());
    }
    resp
}

#[derive(Clone)]
struct Receiver {
    state: Arc<ReceiverState>,
    url: String,
}

impl Receiver {
    async fn start(script: impl Fn(u32) -> Reply + Send + Sync + 'static) -> Receiver {
        let state = Arc::new(ReceiverState {
            script: Box::new(script),
            calls: Mutex::default(),
            per_key: Mutex::default(),
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
            arrived: Notify::new(),
        });
        let app = Router::new()
            .route("/hook", post(hook))
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Receiver { state, url }
    }

    fn calls(&self) -> Vec<Call> {
        self.state.calls.lock().unwrap().clone()
    }

    fn calls_for(&self, task_id: &str) -> Vec<Call> {
        self.calls()
            .into_iter()
            .filter(|c| c.key == task_id)
            .collect()
    }

    fn max_in_flight(&self) -> usize {
        self.state.max_in_flight.load(Ordering::SeqCst)
    }

    /// Waits until at least `n` calls arrived.
    async fn wait_calls(&self, n: usize) {
        tokio::time::timeout(PATIENCE, async {
            loop {
                let arrived = self.state.arrived.notified();
                if self.calls().len() >= n {
                    return;
                }
                arrived.await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("expected {n} calls, got {:?}", self.calls()));
    }
}

// ---------------------------------------------------------------- store and worker

struct Setup {
    _dir: tempfile::TempDir,
    backend: Backend,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let store =
        EmbeddedStore::open(&dir.path().join("punctual.db"), EmbeddedOptions::default()).unwrap();
    Setup {
        _dir: dir,
        backend: Backend::from_one(store),
    }
}

impl Setup {
    /// Stores a task due now and sends its message.
    async fn push(&self, new: NewTask) -> Task {
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
        self.send(&task).await;
        task
    }

    /// Sends a message for `task` at its current version.
    async fn send(&self, task: &Task) {
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
    }

    async fn get(&self, task_id: &str) -> Task {
        self.backend.tasks.task_get(task_id).await.unwrap().unwrap()
    }

    async fn depth(&self) -> QueueDepth {
        self.backend.queue.queue_depth(now_ms()).await.unwrap()
    }

    async fn dlq(&self) -> Vec<punctual_core::store::DeadLetter> {
        self.backend
            .queue
            .dlq_list(DlqList {
                after: None,
                limit: 100,
            })
            .await
            .unwrap()
            .items
    }

    fn start(&self, config: WorkerConfig, handlers: Handlers) -> RunningWorker {
        let (tx, events) = mpsc::unbounded_channel();
        let (stop, stopped) = oneshot::channel::<()>();
        let deps = WorkerDeps {
            backend: self.backend.clone(),
            clock: Arc::new(SystemClock),
            config,
            handlers: Arc::new(handlers),
            events: Some(tx),
        };
        let handle = tokio::spawn(punctual_worker::run(deps, async move {
            let _ = stopped.await;
        }));
        RunningWorker {
            handle,
            stop,
            events,
            seen: Vec::new(),
        }
    }
}

/// A test config: quick polls, short timeouts.
fn config() -> WorkerConfig {
    WorkerConfig {
        concurrency: 8,
        batch: 10,
        visibility_ms: 2_000,
        run_timeout_ms: 2_000,
        http_timeout_ms: 1_000,
        wait_ms: 50,
        idle_sleep_ms: 5,
        ..WorkerConfig::default()
    }
}

fn http_task(url: &str) -> testkit::TaskBuilder {
    testkit::task().due(now_ms()).http(url)
}

struct RunningWorker {
    handle: JoinHandle<Result<(), WorkerError>>,
    stop: oneshot::Sender<()>,
    events: mpsc::UnboundedReceiver<WorkerEvent>,
    seen: Vec<WorkerEvent>,
}

impl RunningWorker {
    /// Waits for an event matching `pred`; returns it. Every event seen is kept in `seen`.
    async fn until(&mut self, what: &str, pred: impl Fn(&WorkerEvent) -> bool) -> WorkerEvent {
        let found = tokio::time::timeout(PATIENCE, async {
            loop {
                let e = self.events.recv().await.expect("worker stopped");
                self.seen.push(e.clone());
                if pred(&e) {
                    return e;
                }
            }
        })
        .await;
        found.unwrap_or_else(|_| panic!("no event {what}; saw {:#?}", self.seen))
    }

    /// Waits for `n` events matching `pred`.
    async fn until_n(&mut self, n: usize, what: &str, pred: impl Fn(&WorkerEvent) -> bool) {
        for _ in 0..n {
            self.until(what, &pred).await;
        }
    }

    /// Lets events that are due in the next `d` arrive, then returns all seen so far.
    async fn settle(&mut self, d: Duration) -> &[WorkerEvent] {
        let deadline = tokio::time::Instant::now() + d;
        while let Ok(Some(e)) = tokio::time::timeout_at(deadline, self.events.recv()).await {
            self.seen.push(e);
        }
        &self.seen
    }

    /// Signals shutdown and waits for `run` to return; how long it took.
    async fn stop(self) -> Duration {
        let started = Instant::now();
        let _ = self.stop.send(());
        tokio::time::timeout(PATIENCE, self.handle)
            .await
            .expect("worker did not stop")
            .unwrap()
            .unwrap();
        started.elapsed()
    }
}

fn is_succeeded(id: &str) -> impl Fn(&WorkerEvent) -> bool + '_ {
    move |e| matches!(e, WorkerEvent::Succeeded { task_id, .. } if task_id == id)
}

fn is_dead(id: &str) -> impl Fn(&WorkerEvent) -> bool + '_ {
    move |e| matches!(e, WorkerEvent::Dead { task_id, .. } if task_id == id)
}

// ---------------------------------------------------------------- handlers

/// Records the tasks it runs and answers from a script by attempt.
struct Scripted {
    runs: Arc<Mutex<Vec<Task>>>,
    script: fn(u32) -> Outcome,
}

#[async_trait]
impl Handler for Scripted {
    async fn run(&self, task: &Task) -> Outcome {
        self.runs.lock().unwrap().push(task.clone());
        (self.script)(task.attempt)
    }
}

fn scripted(script: fn(u32) -> Outcome) -> (Scripted, Arc<Mutex<Vec<Task>>>) {
    let runs = Arc::new(Mutex::new(Vec::new()));
    (
        Scripted {
            runs: runs.clone(),
            script,
        },
        runs,
    )
}

// ---------------------------------------------------------------- tests

#[tokio::test]
async fn success_posts_the_payload_once_with_the_idempotency_key() {
    let s = setup();
    let rx = Receiver::start(|_| reply(200)).await;
    let mut w = s.start(config(), Handlers::new());
    let task = s
        .push(
            http_task(&rx.url)
                .payload(json!({"hello": "world", "n": 1}))
                .build(),
        )
        .await;

    let fired = w
        .until("fired", |e| matches!(e, WorkerEvent::Fired { .. }))
        .await;
    let WorkerEvent::Fired {
        attempt, lag_ms, ..
    } = fired
    else {
        unreachable!()
    };
    assert_eq!(attempt, 1);
    assert!((0..2_000).contains(&lag_ms), "lag {lag_ms}");
    w.until("succeeded", is_succeeded(&task.task_id)).await;
    w.settle(Duration::from_millis(300)).await;

    let calls = rx.calls();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0].key, task.task_id);
    assert_eq!(calls[0].attempt, "1");
    assert_eq!(calls[0].content_type, "application/json");
    assert_eq!(calls[0].body, json!({"hello": "world", "n": 1}));
    let stored = s.get(&task.task_id).await;
    assert_eq!(stored.status, TaskStatus::Succeeded);
    assert_eq!(stored.attempt, 1);
    assert_eq!(s.depth().await, QueueDepth::default());
    w.stop().await;
}

#[tokio::test]
async fn a_receiver_failing_twice_gets_the_task_on_the_third_call() {
    let s = setup();
    let rx = Receiver::start(|n| reply(if n <= 2 { 503 } else { 200 })).await;
    let mut w = s.start(config(), Handlers::new());
    let task = s
        .push(http_task(&rx.url).max_attempts(5).backoff(5, 20).build())
        .await;

    w.until("succeeded", is_succeeded(&task.task_id)).await;
    let attempts: Vec<_> = rx.calls().into_iter().map(|c| c.attempt).collect();
    assert_eq!(attempts, ["1", "2", "3"]);
    let retries: Vec<_> = w
        .seen
        .iter()
        .filter_map(|e| match e {
            WorkerEvent::Retried {
                attempt,
                reindexed,
                error,
                ..
            } => Some((*attempt, *reindexed, error.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(retries.len(), 2, "{retries:?}");
    for (i, (attempt, reindexed, error)) in retries.into_iter().enumerate() {
        assert_eq!(attempt as usize, i + 1);
        assert!(!reindexed, "a short backoff stays on the message");
        assert!(error.contains("503"), "{error}");
    }
    let stored = s.get(&task.task_id).await;
    assert_eq!((stored.status, stored.attempt), (TaskStatus::Succeeded, 3));
    assert_eq!(s.depth().await, QueueDepth::default());
    w.stop().await;
}

#[tokio::test]
async fn a_receiver_that_always_fails_ends_dead_in_the_dlq() {
    let s = setup();
    let rx = Receiver::start(|_| Reply {
        body: "upstream down",
        ..reply(500)
    })
    .await;
    let mut w = s.start(config(), Handlers::new());
    let task = s
        .push(http_task(&rx.url).max_attempts(3).backoff(5, 20).build())
        .await;

    w.until("dead", is_dead(&task.task_id)).await;
    w.settle(Duration::from_millis(200)).await;
    assert_eq!(rx.calls_for(&task.task_id).len(), 3);
    let stored = s.get(&task.task_id).await;
    assert_eq!((stored.status, stored.attempt), (TaskStatus::Dead, 3));
    let last_error = stored.last_error.unwrap();
    assert!(
        last_error.contains("500") && last_error.contains("upstream down"),
        "{last_error}"
    );
    let dlq = s.dlq().await;
    assert_eq!(dlq.len(), 1);
    assert_eq!(dlq[0].message.task_id, task.task_id);
    assert!(
        dlq[0].reason.contains("attempts spent (3)"),
        "{}",
        dlq[0].reason
    );
    assert_eq!(
        s.depth().await,
        QueueDepth {
            ready: 0,
            in_flight: 0,
            dead: 1
        }
    );
    w.stop().await;
}

#[tokio::test]
async fn a_bad_request_ends_dead_after_one_call() {
    let s = setup();
    let rx = Receiver::start(|_| Reply {
        body: r#"{"error": "missing field order_id"}"#,
        ..reply(400)
    })
    .await;
    let mut w = s.start(config(), Handlers::new());
    let task = s.push(http_task(&rx.url).max_attempts(5).build()).await;

    let dead = w.until("dead", is_dead(&task.task_id)).await;
    let WorkerEvent::Dead {
        attempt, reason, ..
    } = dead
    else {
        unreachable!()
    };
    assert_eq!(attempt, 1);
    assert!(
        reason.contains("400") && reason.contains("missing field order_id"),
        "{reason}"
    );
    w.settle(Duration::from_millis(200)).await;
    assert_eq!(rx.calls().len(), 1);
    assert_eq!(s.get(&task.task_id).await.status, TaskStatus::Dead);
    assert_eq!(s.dlq().await[0].reason, reason);
    w.stop().await;
}

#[tokio::test]
async fn too_many_requests_and_request_timeout_are_retried() {
    let s = setup();
    let rx = Receiver::start(|n| match n {
        1 => Reply {
            retry_after: Some("0"),
            ..reply(429)
        },
        2 => reply(408),
        _ => reply(204),
    })
    .await;
    let mut w = s.start(config(), Handlers::new());
    let task = s
        .push(http_task(&rx.url).max_attempts(3).backoff(5, 20).build())
        .await;

    w.until("succeeded", is_succeeded(&task.task_id)).await;
    assert_eq!(rx.calls().len(), 3);
    let first_retry = w
        .seen
        .iter()
        .find_map(|e| match e {
            WorkerEvent::Retried { error, .. } => Some(error.clone()),
            _ => None,
        })
        .unwrap();
    assert!(first_retry.contains("429"), "{first_retry}");
    w.stop().await;
}

#[tokio::test]
async fn an_unreachable_receiver_is_retried_then_dead() {
    let s = setup();
    // A port that was just free: nothing listens there.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut w = s.start(config(), Handlers::new());
    let task = s
        .push(
            http_task(&format!("http://127.0.0.1:{port}/hook"))
                .max_attempts(2)
                .backoff(5, 20)
                .build(),
        )
        .await;
    let WorkerEvent::Dead {
        reason, attempt, ..
    } = w.until("dead", is_dead(&task.task_id)).await
    else {
        unreachable!()
    };
    assert_eq!(attempt, 2);
    assert!(reason.contains("connection failed"), "{reason}");
    w.stop().await;
}

#[tokio::test]
async fn stale_messages_are_dropped_without_calling_the_receiver() {
    let s = setup();
    let rx = Receiver::start(|_| reply(200)).await;
    let later = now_ms() + 3_600_000;
    // Rescheduled after its message was sent: the message carries version 1, the task is at 2.
    let moved = s.push(http_task(&rx.url).build()).await;
    s.backend
        .tasks
        .task_reschedule(TaskReschedule {
            task_id: moved.task_id.clone(),
            due_ms: later,
            expected_version: None,
            reset_attempts: false,
            now_ms: now_ms(),
        })
        .await
        .unwrap();
    // Cancelled after its message was sent.
    let cancelled = s.push(http_task(&rx.url).build()).await;
    s.backend
        .tasks
        .task_cancel(TaskCancel {
            task_id: cancelled.task_id.clone(),
            expected_version: None,
            now_ms: now_ms(),
        })
        .await
        .unwrap();
    // A message for a task that does not exist.
    s.send(&Task::from_new(
        testkit::task().id("ghost").build(),
        16,
        now_ms(),
    ))
    .await;

    let mut w = s.start(config(), Handlers::new());
    w.until_n(3, "dropped", |e| matches!(e, WorkerEvent::Dropped { .. }))
        .await;
    w.settle(Duration::from_millis(200)).await;
    assert!(rx.calls().is_empty(), "{:?}", rx.calls());
    assert!(
        !w.seen
            .iter()
            .any(|e| matches!(e, WorkerEvent::Fired { .. })),
        "{:?}",
        w.seen
    );
    let m = s.get(&moved.task_id).await;
    assert_eq!(
        (m.status, m.version, m.due_ms),
        (TaskStatus::Scheduled, 2, later)
    );
    assert!(m.due_bucket.is_some(), "still waits in the due index");
    let c = s.get(&cancelled.task_id).await;
    assert_eq!((c.status, c.attempt), (TaskStatus::Cancelled, 0));
    assert_eq!(s.depth().await, QueueDepth::default());
    w.stop().await;
}

#[tokio::test]
async fn a_registered_handler_runs() {
    let s = setup();
    let (handler, runs) = scripted(|_| Outcome::Success);
    let mut w = s.start(config(), Handlers::new().register("send-invoice", handler));
    let task = s
        .push(
            testkit::task()
                .due(now_ms())
                .handler("send-invoice")
                .payload(json!({"invoice": 42}))
                .build(),
        )
        .await;

    w.until("succeeded", is_succeeded(&task.task_id)).await;
    w.settle(Duration::from_millis(200)).await;
    let runs = runs.lock().unwrap().clone();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].task_id, task.task_id);
    assert_eq!(runs[0].attempt, 1);
    assert_eq!(runs[0].status, TaskStatus::Running);
    assert_eq!(runs[0].payload, json!({"invoice": 42}));
    assert_eq!(s.get(&task.task_id).await.status, TaskStatus::Succeeded);
    w.stop().await;
}

#[tokio::test]
async fn an_unknown_handler_ends_dead() {
    let s = setup();
    let (handler, runs) = scripted(|_| Outcome::Success);
    let mut w = s.start(config(), Handlers::new().register("known", handler));
    let task = s
        .push(
            testkit::task()
                .due(now_ms())
                .handler("unknown")
                .max_attempts(5)
                .build(),
        )
        .await;

    let WorkerEvent::Dead {
        reason, attempt, ..
    } = w.until("dead", is_dead(&task.task_id)).await
    else {
        unreachable!()
    };
    assert_eq!(attempt, 1);
    assert!(reason.contains("\"unknown\""), "{reason}");
    assert!(runs.lock().unwrap().is_empty());
    assert_eq!(s.dlq().await.len(), 1);
    w.stop().await;
}

#[tokio::test]
async fn a_handler_that_panics_is_retried() {
    let s = setup();
    let (handler, runs) = scripted(|attempt| {
        if attempt == 1 {
            panic!("boom on the first try");
        }
        Outcome::Success
    });
    let mut w = s.start(config(), Handlers::new().register("flaky", handler));
    let task = s
        .push(
            testkit::task()
                .due(now_ms())
                .handler("flaky")
                .max_attempts(3)
                .build(),
        )
        .await;

    w.until("succeeded", is_succeeded(&task.task_id)).await;
    assert_eq!(runs.lock().unwrap().len(), 2);
    let error = w
        .seen
        .iter()
        .find_map(|e| match e {
            WorkerEvent::Retried { error, .. } => Some(error.clone()),
            _ => None,
        })
        .unwrap();
    assert!(
        error.contains("panicked") && error.contains("boom"),
        "{error}"
    );
    w.stop().await;
}

#[tokio::test]
async fn a_handler_give_up_and_spent_retries_end_dead() {
    let s = setup();
    let (giver, _) = scripted(|_| Outcome::give_up("invoice already paid"));
    let (retrier, retries) = scripted(|_| Outcome::retry_after("busy", Duration::from_millis(5)));
    let mut w = s.start(
        config(),
        Handlers::new()
            .register("give-up", giver)
            .register("retry", retrier),
    );
    let a = s
        .push(
            testkit::task()
                .due(now_ms())
                .handler("give-up")
                .max_attempts(5)
                .build(),
        )
        .await;
    let b = s
        .push(
            testkit::task()
                .due(now_ms())
                .handler("retry")
                .max_attempts(2)
                .build(),
        )
        .await;

    let WorkerEvent::Dead { reason, .. } = w.until("dead a", is_dead(&a.task_id)).await else {
        unreachable!()
    };
    assert_eq!(reason, "invoice already paid");
    let WorkerEvent::Dead { reason, .. } = w.until("dead b", is_dead(&b.task_id)).await else {
        unreachable!()
    };
    assert_eq!(reason, "attempts spent (2): busy");
    assert_eq!(retries.lock().unwrap().len(), 2);
    assert_eq!(s.dlq().await.len(), 2);
    w.stop().await;
}

#[tokio::test]
async fn a_long_backoff_goes_back_through_the_due_index() {
    let s = setup();
    let (handler, _) =
        scripted(|_| Outcome::retry_after("come back later", Duration::from_secs(3_600)));
    let mut w = s.start(
        WorkerConfig {
            long_backoff_ms: 60_000,
            ..config()
        },
        Handlers::new().register("later", handler),
    );
    let before = now_ms();
    let task = s
        .push(
            testkit::task()
                .due(before)
                .handler("later")
                .max_attempts(3)
                .build(),
        )
        .await;

    let WorkerEvent::Retried {
        reindexed,
        next_due_ms,
        ..
    } = w
        .until("retried", |e| matches!(e, WorkerEvent::Retried { .. }))
        .await
    else {
        unreachable!()
    };
    assert!(reindexed);
    assert!(next_due_ms >= before + 3_600_000);
    let stored = s.get(&task.task_id).await;
    assert_eq!(stored.status, TaskStatus::RetryWait);
    assert_eq!(stored.due_ms, next_due_ms);
    assert!(stored.due_bucket.is_some(), "back in the due index");
    assert_eq!(stored.last_error.as_deref(), Some("come back later"));
    assert_eq!(
        s.depth().await,
        QueueDepth::default(),
        "the message is gone"
    );
    w.stop().await;
}

#[tokio::test]
async fn concurrency_bound_holds() {
    let s = setup();
    let rx = Receiver::start(|_| Reply {
        delay: Duration::from_millis(150),
        ..reply(200)
    })
    .await;
    let mut w = s.start(
        WorkerConfig {
            concurrency: 3,
            ..config()
        },
        Handlers::new(),
    );
    let mut ids = Vec::new();
    for _ in 0..12 {
        ids.push(s.push(http_task(&rx.url).build()).await.task_id);
    }
    w.until_n(12, "succeeded", |e| {
        matches!(e, WorkerEvent::Succeeded { .. })
    })
    .await;
    assert_eq!(rx.calls().len(), 12);
    assert_eq!(rx.max_in_flight(), 3, "runs in parallel, never more than 3");
    for id in ids {
        assert_eq!(s.get(&id).await.status, TaskStatus::Succeeded);
    }
    w.stop().await;
}

#[tokio::test]
async fn shutdown_lets_an_in_flight_run_finish_and_stops_receiving() {
    let s = setup();
    let rx = Receiver::start(|_| Reply {
        delay: Duration::from_millis(600),
        ..reply(200)
    })
    .await;
    let mut w = s.start(
        WorkerConfig {
            concurrency: 1,
            ..config()
        },
        Handlers::new(),
    );
    let slow = s.push(http_task(&rx.url).build()).await;
    rx.wait_calls(1).await;
    let shutdown_at = Instant::now();
    let _ = w.stop.send(());
    // Sent after shutdown: must stay in the queue.
    let after = s.push(http_task(&rx.url).build()).await;
    tokio::time::timeout(PATIENCE, w.handle)
        .await
        .expect("worker did not stop")
        .unwrap()
        .unwrap();
    let took = shutdown_at.elapsed();
    assert!(
        took >= Duration::from_millis(400),
        "returned before the run ended: {took:?}"
    );
    assert!(took < Duration::from_millis(2_000), "{took:?}");

    let mut seen = Vec::new();
    while let Ok(e) = w.events.try_recv() {
        seen.push(e);
    }
    assert!(seen.iter().any(is_succeeded(&slow.task_id)), "{seen:?}");
    assert_eq!(s.get(&slow.task_id).await.status, TaskStatus::Succeeded);
    assert_eq!(rx.calls().len(), 1);
    assert_eq!(s.get(&after.task_id).await.status, TaskStatus::Scheduled);
    assert_eq!(
        s.depth().await,
        QueueDepth {
            ready: 1,
            in_flight: 0,
            dead: 0
        }
    );
}

#[tokio::test]
async fn release_on_shutdown_hands_the_run_to_another_worker() {
    let s = setup();
    let rx = Receiver::start(|n| Reply {
        delay: if n == 1 {
            Duration::from_secs(5)
        } else {
            Duration::ZERO
        },
        ..reply(200)
    })
    .await;
    let cfg = WorkerConfig {
        run_timeout_ms: 1_200,
        visibility_ms: 1_200,
        http_timeout_ms: 900,
        release_on_shutdown: true,
        ..config()
    };
    let first = s.start(cfg.clone(), Handlers::new());
    let task = s.push(http_task(&rx.url).max_attempts(3).build()).await;
    rx.wait_calls(1).await;
    let took = first.stop().await;
    assert!(
        took < Duration::from_millis(500),
        "release does not wait: {took:?}"
    );
    let held = s.get(&task.task_id).await;
    assert_eq!((held.status, held.attempt), (TaskStatus::Running, 1));

    // The message comes back once the abandoned claim lapses, and a new worker takes over.
    let mut second = s.start(cfg, Handlers::new());
    second.until("succeeded", is_succeeded(&task.task_id)).await;
    let attempts: Vec<_> = rx.calls().into_iter().map(|c| c.attempt).collect();
    assert_eq!(attempts, ["1", "2"]);
    assert_eq!(s.get(&task.task_id).await.attempt, 2);
    second.stop().await;
}

/// Simulates a worker that received the message and claimed the task, then died.
async fn die_holding(s: &Setup, task: &Task, run_timeout_ms: i64) {
    let got = s
        .backend
        .queue
        .queue_receive(QueueReceive {
            max: 1,
            visibility_ms: 100,
            wait_ms: 0,
            now_ms: now_ms(),
        })
        .await
        .unwrap();
    assert_eq!(got.len(), 1);
    s.backend
        .tasks
        .task_claim(TaskClaim {
            task_id: task.task_id.clone(),
            version: task.version,
            now_ms: now_ms(),
            run_timeout_ms,
        })
        .await
        .unwrap();
}

#[tokio::test]
async fn a_task_whose_worker_died_is_taken_over_when_its_claim_lapses() {
    let s = setup();
    let rx = Receiver::start(|_| reply(200)).await;
    let task = s.push(http_task(&rx.url).max_attempts(3).build()).await;
    // The dead worker's message reappears after 100 ms, while its claim still holds for 600:
    // it must be kept, not dropped as a duplicate, or nothing would ever run the task.
    die_holding(&s, &task, 600).await;

    let mut w = s.start(config(), Handlers::new());
    w.until("deferred", |e| matches!(e, WorkerEvent::Deferred { .. }))
        .await;
    w.until("succeeded", is_succeeded(&task.task_id)).await;
    let calls = rx.calls();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].attempt, "2", "the dead worker's claim counted");
    assert_eq!(s.depth().await, QueueDepth::default());
    w.stop().await;
}

#[tokio::test]
async fn a_task_whose_workers_die_every_time_ends_dead_in_the_dlq() {
    let s = setup();
    let rx = Receiver::start(|_| reply(200)).await;
    let task = s.push(http_task(&rx.url).max_attempts(1).build()).await;
    die_holding(&s, &task, 300).await;

    let mut w = s.start(config(), Handlers::new());
    let WorkerEvent::Dead { reason, .. } = w.until("dead", is_dead(&task.task_id)).await else {
        unreachable!()
    };
    assert!(reason.contains("attempts spent (1)"), "{reason}");
    assert!(rx.calls().is_empty());
    assert_eq!(s.get(&task.task_id).await.status, TaskStatus::Dead);
    assert_eq!(s.dlq().await.len(), 1);
    w.stop().await;
}

#[tokio::test]
async fn a_duplicate_message_waits_out_the_live_claim_then_is_dropped() {
    let s = setup();
    let rx = Receiver::start(|_| Reply {
        delay: Duration::from_millis(300),
        ..reply(200)
    })
    .await;
    let cfg = WorkerConfig {
        run_timeout_ms: 1_000,
        visibility_ms: 1_000,
        http_timeout_ms: 500,
        ..config()
    };
    let mut w = s.start(cfg, Handlers::new());
    let task = s.push(http_task(&rx.url).build()).await;
    s.send(&task).await; // a duplicate, as a poller that resent after a crash would make

    w.until("deferred", |e| matches!(e, WorkerEvent::Deferred { .. }))
        .await;
    w.until("succeeded", is_succeeded(&task.task_id)).await;
    w.until("dropped", |e| matches!(e, WorkerEvent::Dropped { .. }))
        .await;
    assert_eq!(rx.calls().len(), 1, "the duplicate never ran");
    assert_eq!(s.depth().await, QueueDepth::default());
    w.stop().await;
}

#[test]
fn an_invalid_config_refuses_to_start() {
    let s = setup();
    let deps = WorkerDeps {
        backend: s.backend.clone(),
        clock: Arc::new(SystemClock),
        config: WorkerConfig {
            concurrency: 0,
            ..WorkerConfig::default()
        },
        handlers: Arc::new(Handlers::new()),
        events: None,
    };
    let err = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(punctual_worker::run(deps, async {}))
        .unwrap_err();
    assert!(
        matches!(err, WorkerError::Config(ref e) if e.field == "concurrency"),
        "{err}"
    );
}
