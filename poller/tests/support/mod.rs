//! One `setup()` for the poller tests: an embedded store in a tempdir, a manual clock, and
//! wrappers that record or break what the poller does.

#![allow(dead_code)]

use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use punctual_core::clock::SharedClock;
use punctual_core::store::*;
use punctual_core::testkit::T0;
use punctual_core::{
    Backend, ManualClock, NewTask, StoreError, StoreResult, Task, TaskStatus, TaskStore,
};
use punctual_poller::{Poller, PollerConfig, PollerDeps, PollerEvent};
use punctual_store::embedded::{EmbeddedOptions, EmbeddedStore};
use tokio::sync::mpsc;

/// A store, its backend with a recording queue, and a clock standing at `T0`.
pub struct Env {
    _dir: tempfile::TempDir,
    pub store: Arc<EmbeddedStore>,
    /// The store as the poller sees it: its queue goes through `queue`.
    pub backend: Backend,
    pub queue: Arc<RecordingQueue>,
    pub clock: ManualClock,
}

pub fn setup(shard_count: u32) -> Env {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(
        &dir.path().join("punctual.db"),
        EmbeddedOptions {
            shard_count,
            now_ms: T0,
            ..Default::default()
        },
    )
    .unwrap();
    let plain = Backend::from_one(store.clone());
    let queue = Arc::new(RecordingQueue::new(plain.queue.clone()));
    let backend = Backend {
        queue: queue.clone(),
        ..plain
    };
    Env {
        _dir: dir,
        store,
        backend,
        queue,
        clock: ManualClock::new(T0),
    }
}

/// Test timings: a 10 s lease, 5 s skew allowance, 1 s tick.
pub fn config(owner: &str) -> PollerConfig {
    PollerConfig {
        owner: owner.to_owned(),
        ..Default::default()
    }
}

impl Env {
    pub fn now(&self) -> i64 {
        use punctual_core::Clock;
        self.clock.now_ms()
    }

    /// A poller on this env's backend and clock.
    pub fn poller(&self, config: PollerConfig) -> Poller {
        self.poller_with(
            config,
            self.backend.clone(),
            Arc::new(self.clock.clone()),
            None,
        )
    }

    pub fn poller_with(
        &self,
        config: PollerConfig,
        backend: Backend,
        clock: SharedClock,
        events: Option<mpsc::UnboundedSender<PollerEvent>>,
    ) -> Poller {
        Poller::new(PollerDeps {
            backend,
            clock,
            config,
            events,
        })
        .unwrap()
    }

    /// Stores a task as created at `now_ms`.
    pub async fn put_at(&self, task: NewTask, now_ms: i64) -> Task {
        self.backend
            .tasks
            .task_put(TaskPut { task, now_ms })
            .await
            .unwrap()
            .task()
            .clone()
    }

    /// Stores a task as created now.
    pub async fn put(&self, task: NewTask) -> Task {
        self.put_at(task, self.now()).await
    }

    pub async fn get(&self, id: &str) -> Task {
        self.backend.tasks.task_get(id).await.unwrap().unwrap()
    }

    pub async fn status(&self, id: &str) -> TaskStatus {
        self.get(id).await.status
    }

    pub async fn lease_of(&self, shard: u32) -> Lease {
        self.backend
            .leases
            .lease_list()
            .await
            .unwrap()
            .into_iter()
            .find(|l| l.shard == shard)
            .unwrap()
    }
}

/// A ready queue that records every message sent, in order, and fails sends on demand.
pub struct RecordingQueue {
    inner: Arc<dyn ReadyQueue>,
    sent: Mutex<Vec<DispatchMessage>>,
    /// Sends that may still succeed before the queue starts failing; negative: never fail.
    sends_left: AtomicI64,
    pub send_calls: AtomicUsize,
}

impl RecordingQueue {
    pub fn new(inner: Arc<dyn ReadyQueue>) -> Self {
        Self {
            inner,
            sent: Mutex::new(Vec::new()),
            sends_left: AtomicI64::new(-1),
            send_calls: AtomicUsize::new(0),
        }
    }

    /// Every message sent so far, in send order.
    pub fn sent(&self) -> Vec<DispatchMessage> {
        self.sent.lock().unwrap().clone()
    }

    pub fn sent_ids(&self) -> Vec<String> {
        self.sent().into_iter().map(|m| m.task_id).collect()
    }

    /// Let `n` more sends succeed, then fail every send (`Unavailable`).
    pub fn fail_after(&self, n: i64) {
        self.sends_left.store(n, Ordering::SeqCst);
    }

    /// Never fail again.
    pub fn heal(&self) {
        self.sends_left.store(-1, Ordering::SeqCst);
    }
}

#[async_trait]
impl ReadyQueue for RecordingQueue {
    fn max_receive_count(&self) -> u32 {
        self.inner.max_receive_count()
    }
    async fn queue_send(&self, p: QueueSend) -> StoreResult<()> {
        self.send_calls.fetch_add(1, Ordering::SeqCst);
        let left = self.sends_left.load(Ordering::SeqCst);
        if left == 0 {
            return Err(StoreError::Unavailable {
                message: "queue down (test)".into(),
                source: None,
            });
        }
        if left > 0 {
            self.sends_left.fetch_sub(1, Ordering::SeqCst);
        }
        let messages = p.messages.clone();
        self.inner.queue_send(p).await?;
        self.sent.lock().unwrap().extend(messages);
        Ok(())
    }
    async fn queue_receive(&self, p: QueueReceive) -> StoreResult<Vec<ReceivedMessage>> {
        self.inner.queue_receive(p).await
    }
    async fn queue_delete(&self, receipts: &[String]) -> StoreResult<()> {
        self.inner.queue_delete(receipts).await
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

/// A task store whose every `due_query` takes `step_ms` of the manual clock: a slow index.
pub struct SlowIndex {
    pub inner: Arc<dyn TaskStore>,
    pub clock: ManualClock,
    pub step_ms: i64,
}

#[async_trait]
impl TaskStore for SlowIndex {
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    fn shard_count(&self) -> u32 {
        self.inner.shard_count()
    }
    fn created_minute(&self) -> i64 {
        self.inner.created_minute()
    }
    async fn task_put(&self, p: TaskPut) -> StoreResult<PutOutcome> {
        self.inner.task_put(p).await
    }
    async fn task_put_batch(&self, p: TaskPutBatch) -> StoreResult<Vec<PutOutcome>> {
        self.inner.task_put_batch(p).await
    }
    async fn task_get(&self, task_id: &str) -> StoreResult<Option<Task>> {
        self.inner.task_get(task_id).await
    }
    async fn due_query(&self, q: DueQuery) -> StoreResult<Vec<DueEntry>> {
        self.clock.advance(self.step_ms);
        self.inner.due_query(q).await
    }
    async fn task_mark_dispatched(&self, p: TaskMarkDispatched) -> StoreResult<usize> {
        self.inner.task_mark_dispatched(p).await
    }
    async fn task_claim(&self, p: TaskClaim) -> StoreResult<ClaimOutcome> {
        self.inner.task_claim(p).await
    }
    async fn task_complete(&self, p: TaskComplete) -> StoreResult<Task> {
        self.inner.task_complete(p).await
    }
    async fn task_cancel(&self, p: TaskCancel) -> StoreResult<Task> {
        self.inner.task_cancel(p).await
    }
    async fn task_reschedule(&self, p: TaskReschedule) -> StoreResult<Task> {
        self.inner.task_reschedule(p).await
    }
    async fn task_list(&self, p: TaskList) -> StoreResult<Page<Task>> {
        self.inner.task_list(p).await
    }
}
