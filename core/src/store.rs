//! The store traits: what a backend must do, in the words of the protocol.
//!
//! Three traits, one per role, so a backend can put each where it fits (SQLite tables in one
//! file; a DynamoDB table, an SQS queue and a lease table):
//!
//! - [`TaskStore`]: the tasks and their sparse due index. Every state change is a
//!   conditional write; a failed condition is [`StoreError::Conflict`](crate::StoreError).
//! - [`ReadyQueue`]: a queue with SQS semantics — visibility timeout, receive count, a
//!   dead-letter queue fed by the worker and, as a backstop, by a redrive policy
//!   (`receive_count > max_receive_count`).
//! - [`LeaseStore`]: one lease per shard with an owner, an expiry, an epoch that grows with
//!   every acquisition, and the poller's watermark.
//!
//! Methods take parameter structs and the current time (`now_ms`) from the caller; a store
//! never reads a clock. Names start with the thing they act on.

use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::error::{StoreError, StoreResult};
use crate::task::{ALL_STATUSES, Backoff, NewTask, TargetKind, Task, TaskStatus};

/// What a backend can or cannot do; the conformance suite skips, with a printed reason, the
/// cases a backend declares it cannot serve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// Whether several processes may open the same store at once.
    pub multi_process: bool,
    /// The statuses [`TaskStore::task_list`] can filter on through an index. A status not in
    /// it is refused with `Invalid` naming `status` (the aws backend indexes only the waiting
    /// tasks and the finished ones an operator acts on: see its `by_status` index).
    pub list_statuses: &'static [TaskStatus],
    /// Whether [`TaskStore::task_counts`] is cheap (a few reads, whatever the store holds).
    pub status_counts: bool,
}

impl Capabilities {
    /// Whether [`TaskStore::task_list`] can filter on `status`.
    pub fn can_list(&self, status: TaskStatus) -> bool {
        self.list_statuses.contains(&status)
    }
}

/// The statuses both backends list through an index: the waiting ones (`SCHEDULED`,
/// `RETRY_WAIT`, through the due index) and the finished ones an operator acts on (`DEAD`,
/// `CANCELLED`, through a sparse status index). `DISPATCHED`, `RUNNING` and `SUCCEEDED` are
/// left out on purpose: indexing them would add index writes to every task's successful path
/// (measured on the embedded store: about a fifth of its firing throughput), and the first two
/// last seconds while the last is the bulk of the table, reached by id.
pub const LIST_INDEXED_STATUSES: &[TaskStatus] = &[
    TaskStatus::Scheduled,
    TaskStatus::RetryWait,
    TaskStatus::Dead,
    TaskStatus::Cancelled,
];

/// Outcome of creating a task.
#[derive(Debug, Clone, PartialEq)]
pub enum PutOutcome {
    /// The task was stored.
    Created(Task),
    /// A task with this id already existed; it is returned unchanged.
    Existing(Task),
}

impl PutOutcome {
    /// The stored task, new or existing.
    pub fn task(&self) -> &Task {
        match self {
            PutOutcome::Created(t) | PutOutcome::Existing(t) => t,
        }
    }
}

/// Store one task.
#[derive(Debug, Clone)]
pub struct TaskPut {
    /// The validated task.
    pub task: NewTask,
    /// Now, epoch milliseconds: decides the bucket of a task already due.
    pub now_ms: i64,
}

/// Store many tasks in one go (one transaction where the backend has them).
#[derive(Debug, Clone)]
pub struct TaskPutBatch {
    /// The validated tasks; ids are distinct.
    pub tasks: Vec<NewTask>,
    /// Now, epoch milliseconds.
    pub now_ms: i64,
}

/// Query one shard-minute of the due index for what is due.
#[derive(Debug, Clone)]
pub struct DueQuery {
    /// The shard.
    pub shard: u32,
    /// The bucket's minute (epoch minutes).
    pub minute: i64,
    /// Return entries with `due_ms <= now_ms` only.
    pub now_ms: i64,
    /// Page cursor: return entries whose `due_key` sorts after this one.
    pub after_key: Option<String>,
    /// Page size.
    pub limit: usize,
}

/// One entry of the due index: the small projection a poller needs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DueEntry {
    /// The task.
    pub task_id: String,
    /// Its version when read.
    pub version: u64,
    /// Its shard.
    pub shard: u32,
    /// Its due time.
    pub due_ms: i64,
    /// Its index sort key, the page cursor.
    pub due_key: String,
}

impl DueEntry {
    /// The message a poller sends for this entry.
    pub fn message(&self) -> DispatchMessage {
        DispatchMessage {
            task_id: self.task_id.clone(),
            version: self.version,
            shard: self.shard,
            due_ms: self.due_ms,
        }
    }
}

/// Mark sent tasks `DISPATCHED` and take them out of the due index, each conditional on
/// `due_bucket present AND status IN (SCHEDULED, RETRY_WAIT) AND version = :v`.
#[derive(Debug, Clone)]
pub struct TaskMarkDispatched {
    /// `(task_id, version)` of each sent task.
    pub tasks: Vec<(String, u64)>,
    /// Now, epoch milliseconds.
    pub now_ms: i64,
}

/// Claim a task for a run: one conditional write,
/// `version = :v AND (status IN (SCHEDULED, DISPATCHED, RETRY_WAIT) OR (status = RUNNING AND
/// running_until < :now))`, setting `RUNNING`, `running_until`, `attempt + 1` and removing
/// `due_bucket`.
#[derive(Debug, Clone)]
pub struct TaskClaim {
    /// The task.
    pub task_id: String,
    /// The version the message carries.
    pub version: u64,
    /// Now, epoch milliseconds.
    pub now_ms: i64,
    /// How long the claim holds before another worker may take over.
    pub run_timeout_ms: i64,
}

/// What a claim got.
#[derive(Debug, Clone, PartialEq)]
pub enum ClaimOutcome {
    /// The task is `RUNNING` for this worker, at this attempt: run it.
    Claimed(Task),
    /// The claim's conditions held but the task had already used `max_attempts` (its workers
    /// died mid-run): the claim ended it `DEAD` instead. Send the message to the DLQ.
    Exhausted(Task),
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Completion {
    /// The target succeeded: `SUCCEEDED`.
    Succeeded,
    /// A retryable failure: `RETRY_WAIT` until `next_due_ms`.
    Retry {
        /// When the next attempt is due.
        next_due_ms: i64,
        /// The failure.
        error: String,
        /// Put the task back in the due index (a long backoff); otherwise the worker keeps the
        /// message and delays it through its visibility timeout.
        reindex: bool,
    },
    /// Attempts spent or a permanent failure: `DEAD`.
    Dead {
        /// The failure.
        error: String,
    },
}

/// Write a run's outcome, conditional on `status = RUNNING AND attempt = :attempt AND
/// version = :version`, so a worker whose claim lapsed cannot overwrite its successor.
#[derive(Debug, Clone)]
pub struct TaskComplete {
    /// The task.
    pub task_id: String,
    /// The version claimed.
    pub version: u64,
    /// The attempt claimed (the task's `attempt` after the claim).
    pub attempt: u32,
    /// The outcome.
    pub outcome: Completion,
    /// Now, epoch milliseconds.
    pub now_ms: i64,
}

/// Cancel a task: `SCHEDULED | DISPATCHED | RETRY_WAIT → CANCELLED`, `version + 1`.
#[derive(Debug, Clone)]
pub struct TaskCancel {
    /// The task.
    pub task_id: String,
    /// Refuse with `Conflict` unless the task is at this version.
    pub expected_version: Option<u64>,
    /// Now, epoch milliseconds.
    pub now_ms: i64,
}

/// Reschedule or replay a task: any status but `RUNNING` → `SCHEDULED` at `due_ms`,
/// `version + 1`, back in the due index.
#[derive(Debug, Clone)]
pub struct TaskReschedule {
    /// The task.
    pub task_id: String,
    /// The new due time.
    pub due_ms: i64,
    /// Refuse with `Conflict` unless the task is at this version.
    pub expected_version: Option<u64>,
    /// Reset `attempt` to 0 and clear `last_error` (a replay).
    pub reset_attempts: bool,
    /// Now, epoch milliseconds.
    pub now_ms: i64,
}

/// Edit a task's payload or retry policy: any status but `RUNNING`, `version + 1`, the status
/// and due time otherwise unchanged, with one exception that keeps invariant 1: a task whose
/// only live copy is a message now stale at the old version — `DISPATCHED`, or `RETRY_WAIT`
/// waiting out a visibility timeout — goes back into the due index at its due time
/// (`DISPATCHED` becomes `SCHEDULED`), so the poller sends it again at the new version and
/// the old message's claim fails (invariant 5). Fields left `None` are kept.
#[derive(Debug, Clone)]
pub struct TaskUpdate {
    /// The task.
    pub task_id: String,
    /// Refuse with `Conflict` unless the task is at this version.
    pub expected_version: Option<u64>,
    /// The new payload (validated by the caller).
    pub payload: Option<serde_json::Value>,
    /// The new attempt limit (validated by the caller).
    pub max_attempts: Option<u32>,
    /// The new backoff (validated by the caller).
    pub backoff: Option<Backoff>,
    /// Now, epoch milliseconds: decides the bucket of a task put back in the index.
    pub now_ms: i64,
}

/// Count the due index minute by minute (every shard's bucket of each minute), for the
/// backlog an operator watches: what will fire in the coming minutes.
#[derive(Debug, Clone)]
pub struct DueBacklog {
    /// The first minute counted (epoch minutes); a past-due task waits in the minute it was
    /// filed under, the current one at its creation or after.
    pub from_minute: i64,
    /// How many minutes, from `from_minute` on.
    pub minutes: u32,
}

/// List the tasks waiting in the due index, in due order, across shards.
#[derive(Debug, Clone, Default)]
pub struct TaskListPending {
    /// Page cursor: the `due_key` of the last task of the previous page.
    pub after_key: Option<String>,
    /// Page size.
    pub limit: usize,
}

/// Which tasks a [`TaskStore::task_list`] returns; each field given narrows the list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TaskFilter {
    /// Only tasks in this status. `None`: the tasks waiting in the due index (what
    /// [`TaskStore::task_list_pending`] lists: `SCHEDULED`, and `RETRY_WAIT` waiting there).
    pub status: Option<TaskStatus>,
    /// Only tasks due at or after this time, epoch ms.
    pub due_from_ms: Option<i64>,
    /// Only tasks due before this time (exclusive), epoch ms.
    pub due_to_ms: Option<i64>,
    /// Only tasks whose target is of this kind.
    pub target_kind: Option<TargetKind>,
    /// Only tasks whose id starts with this (non-empty when given).
    pub id_prefix: Option<String>,
}

impl TaskFilter {
    /// True if `task` passes every field but `status` (the caller's index decides that).
    pub fn matches_besides_status(&self, task: &Task) -> bool {
        self.due_from_ms.is_none_or(|f| task.due_ms >= f)
            && self.due_to_ms.is_none_or(|t| task.due_ms < t)
            && self
                .target_kind
                .is_none_or(|k| task.target.target_kind() == k)
            && self
                .id_prefix
                .as_deref()
                .is_none_or(|p| task.task_id.starts_with(p))
    }

    /// True if `task` passes the whole filter (`status: None` meaning "in the due index").
    pub fn matches(&self, task: &Task) -> bool {
        let status_ok = match self.status {
            None => task.due_bucket.is_some(),
            Some(s) => task.status == s,
        };
        status_ok && self.matches_besides_status(task)
    }
}

/// List tasks by a filter, in due order (`due_key`: due time, then id), in pages.
#[derive(Debug, Clone, Default)]
pub struct TaskList {
    /// Which tasks.
    pub filter: TaskFilter,
    /// Page cursor: the `next` of the previous page, unchanged (its form is the backend's).
    pub after_key: Option<String>,
    /// Page size. A backend whose index walk is bounded per page (aws) may return fewer,
    /// even none, with a `next` cursor to go on.
    pub limit: usize,
    /// Now, epoch milliseconds: bounds where a task due in a window can be filed (a task
    /// filed late waits under the minute it was filed in, never later than now's).
    pub now_ms: i64,
}

/// How many tasks are in each status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct StatusCounts {
    /// `SCHEDULED`.
    pub scheduled: u64,
    /// `DISPATCHED`.
    pub dispatched: u64,
    /// `RUNNING`.
    pub running: u64,
    /// `RETRY_WAIT`.
    pub retry_wait: u64,
    /// `SUCCEEDED`.
    pub succeeded: u64,
    /// `DEAD`.
    pub dead: u64,
    /// `CANCELLED`.
    pub cancelled: u64,
}

impl StatusCounts {
    /// The count of one status.
    pub fn get(&self, status: TaskStatus) -> u64 {
        let mut copy = *self;
        *copy.slot(status)
    }

    /// The count of one status, to set.
    pub fn slot(&mut self, status: TaskStatus) -> &mut u64 {
        match status {
            TaskStatus::Scheduled => &mut self.scheduled,
            TaskStatus::Dispatched => &mut self.dispatched,
            TaskStatus::Running => &mut self.running,
            TaskStatus::RetryWait => &mut self.retry_wait,
            TaskStatus::Succeeded => &mut self.succeeded,
            TaskStatus::Dead => &mut self.dead,
            TaskStatus::Cancelled => &mut self.cancelled,
        }
    }

    /// Every task counted.
    pub fn total(&self) -> u64 {
        ALL_STATUSES.iter().map(|s| self.get(*s)).sum()
    }
}

/// A page of results and the cursor of the next one, if any.
#[derive(Debug, Clone, PartialEq)]
pub struct Page<T> {
    /// The items.
    pub items: Vec<T>,
    /// Pass as `after_key` to get the next page; `None` on the last page.
    pub next: Option<String>,
}

/// The tasks and their due index.
#[async_trait]
pub trait TaskStore: Send + Sync + 'static {
    /// What this backend can do.
    fn capabilities(&self) -> Capabilities;

    /// The number of shards, fixed when the store was created.
    fn shard_count(&self) -> u32;

    /// The minute (epoch minutes) the store was created: no bucket is older, so a shard never
    /// leased before starts its watermark here.
    fn created_minute(&self) -> i64;

    /// Stores a task; if one with the same id exists, returns it unchanged.
    async fn task_put(&self, p: TaskPut) -> StoreResult<PutOutcome>;

    /// Stores many tasks; one outcome per task, in order.
    async fn task_put_batch(&self, p: TaskPutBatch) -> StoreResult<Vec<PutOutcome>>;

    /// Reads a task.
    async fn task_get(&self, task_id: &str) -> StoreResult<Option<Task>>;

    /// What is due in one shard-minute, in `due_key` order, at most `limit`.
    async fn due_query(&self, q: DueQuery) -> StoreResult<Vec<DueEntry>>;

    /// Marks sent tasks dispatched; returns how many conditions held.
    async fn task_mark_dispatched(&self, p: TaskMarkDispatched) -> StoreResult<usize>;

    /// Claims a task. `Conflict` for a stale or duplicate message, `NotFound` for an unknown id.
    async fn task_claim(&self, p: TaskClaim) -> StoreResult<ClaimOutcome>;

    /// Records how a run ended. `Conflict` if the claim was lost meanwhile.
    async fn task_complete(&self, p: TaskComplete) -> StoreResult<Task>;

    /// Cancels a task. `Conflict` if it is running, terminal, or not at the expected version.
    async fn task_cancel(&self, p: TaskCancel) -> StoreResult<Task>;

    /// Reschedules or replays a task. `Conflict` if it is running or not at the expected version.
    async fn task_reschedule(&self, p: TaskReschedule) -> StoreResult<Task>;

    /// Edits a task's payload or retry policy (see [`TaskUpdate`]). `Conflict` if it is
    /// running or not at the expected version, `NotFound` if absent.
    ///
    /// Both backends implement it and the conformance suite checks it; the default, which
    /// refuses with `Invalid`, exists only so wrappers written before this method (test
    /// doubles) keep compiling — a wrapper should forward it.
    async fn task_update(&self, p: TaskUpdate) -> StoreResult<Task> {
        Err(StoreError::invalid(
            "task",
            format!("this store cannot edit task {}", p.task_id),
        ))
    }

    /// How many tasks wait in the due index under each minute of `p`, all shards together:
    /// one count per minute, in order. Costs one count per shard-minute of the index (never a
    /// scan of the table), proportional to what is due in the window. The default, which
    /// refuses with `Invalid`, exists only for wrappers written before this method.
    async fn due_backlog(&self, p: DueBacklog) -> StoreResult<Vec<u64>> {
        let _ = p;
        Err(StoreError::invalid(
            "store",
            "this store cannot count its due index",
        ))
    }

    /// Lists tasks waiting in the due index, in due order: [`TaskStore::task_list`] without a
    /// filter.
    async fn task_list_pending(&self, p: TaskListPending) -> StoreResult<Page<Task>> {
        self.task_list(TaskList {
            filter: TaskFilter::default(),
            after_key: p.after_key,
            limit: p.limit,
            now_ms: 0,
        })
        .await
    }

    /// Lists tasks by a filter, in due order, in pages (see [`TaskList`]); never a scan of the
    /// table where an index can answer. A status outside
    /// [`Capabilities::list_statuses`] is `Invalid` naming `status`. Required: the default
    /// [`task_list_pending`](Self::task_list_pending) is this without a filter.
    async fn task_list(&self, p: TaskList) -> StoreResult<Page<Task>>;

    /// How many tasks are in each status, where [`Capabilities::status_counts`] says it is
    /// cheap. The default refuses with `Invalid`.
    async fn task_counts(&self) -> StoreResult<StatusCounts> {
        Err(StoreError::invalid(
            "store",
            "this store cannot count its tasks by status cheaply",
        ))
    }

    /// How many claims or completions one [`task_claim_many`](Self::task_claim_many) or
    /// [`task_complete_many`](Self::task_complete_many) call should carry to gain anything
    /// over single calls. 1 (the default) means the batch forms are plain loops: a worker then
    /// makes single calls, concurrently. A backend whose batch is one round trip (the embedded
    /// store: one write job, one transaction) says how many it takes.
    fn task_write_batch_max(&self) -> usize {
        1
    }

    /// Claims many tasks, each exactly as [`task_claim`](Self::task_claim) would: one result
    /// per claim, in order, a refused claim failing alone. The outer error means none was
    /// tried or the whole batch failed (nothing written). The default loops over single calls.
    async fn task_claim_many(
        &self,
        ps: Vec<TaskClaim>,
    ) -> StoreResult<Vec<StoreResult<ClaimOutcome>>> {
        let mut out = Vec::with_capacity(ps.len());
        for p in ps {
            out.push(self.task_claim(p).await);
        }
        Ok(out)
    }

    /// Records many outcomes, each exactly as [`task_complete`](Self::task_complete) would,
    /// without returning the tasks: one result per completion, in order, a lost claim
    /// (`Conflict`) or a vanished task (`NotFound`) failing alone. The outer error means the
    /// whole batch failed (nothing written). The default loops over single calls.
    async fn task_complete_many(&self, ps: Vec<TaskComplete>) -> StoreResult<Vec<StoreResult<()>>> {
        let mut out = Vec::with_capacity(ps.len());
        for p in ps {
            out.push(self.task_complete(p).await.map(|_| ()));
        }
        Ok(out)
    }
}

/// The message a poller sends to the ready queue: small, the task itself stays in the store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DispatchMessage {
    /// The task.
    pub task_id: String,
    /// The version dispatched; a claim at another version fails.
    pub version: u64,
    /// The task's shard.
    pub shard: u32,
    /// The due time dispatched, for lag measurement.
    pub due_ms: i64,
}

/// Send messages to the ready queue.
#[derive(Debug, Clone)]
pub struct QueueSend {
    /// The messages.
    pub messages: Vec<DispatchMessage>,
    /// Now, epoch milliseconds.
    pub now_ms: i64,
}

/// Receive messages from the ready queue.
#[derive(Debug, Clone)]
pub struct QueueReceive {
    /// At most this many.
    pub max: usize,
    /// Hide them from other receivers this long.
    pub visibility_ms: i64,
    /// Wait up to this long for a first message (long polling); 0 returns at once.
    pub wait_ms: i64,
    /// Now, epoch milliseconds.
    pub now_ms: i64,
}

/// A received message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedMessage {
    /// The message.
    pub message: DispatchMessage,
    /// Handle to delete or delay this delivery.
    pub receipt: String,
    /// How many times it has been received, this time included.
    pub receive_count: u32,
}

/// Change a received message's visibility timeout (delay its redelivery).
#[derive(Debug, Clone)]
pub struct QueueVisibility {
    /// The delivery.
    pub receipt: String,
    /// Visible again this long from now.
    pub visibility_ms: i64,
    /// Now, epoch milliseconds.
    pub now_ms: i64,
}

/// Move a received message to the DLQ.
#[derive(Debug, Clone)]
pub struct QueueDeadLetter {
    /// The delivery.
    pub receipt: String,
    /// The message, as received.
    pub message: DispatchMessage,
    /// Why it is dead.
    pub reason: String,
    /// Now, epoch milliseconds.
    pub now_ms: i64,
}

/// A message in the DLQ.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadLetter {
    /// Its id in the DLQ, the page cursor.
    pub id: String,
    /// The message.
    pub message: DispatchMessage,
    /// Why it is dead (the redrive policy's or the worker's).
    pub reason: String,
    /// When it arrived, epoch milliseconds.
    pub dead_ms: i64,
}

/// Most letters the default [`ReadyQueue::dlq_get`] walks past.
pub const DLQ_GET_WALK_MAX: usize = 100_000;

/// List the DLQ, oldest first.
#[derive(Debug, Clone, Default)]
pub struct DlqList {
    /// Page cursor: the `id` of the last letter of the previous page.
    pub after: Option<String>,
    /// Page size.
    pub limit: usize,
}

/// How many messages wait where.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct QueueDepth {
    /// Visible now.
    pub ready: u64,
    /// Received and not yet deleted, or delayed.
    pub in_flight: u64,
    /// In the DLQ.
    pub dead: u64,
}

/// The ready queue and its DLQ, with SQS semantics.
#[async_trait]
pub trait ReadyQueue: Send + Sync + 'static {
    /// Receives beyond this count send a message to the DLQ instead (the redrive backstop).
    fn max_receive_count(&self) -> u32;

    /// Most messages one [`queue_receive`](Self::queue_receive) returns, and that one
    /// [`queue_delete`](Self::queue_delete) call should carry. Default 10, SQS's limit; a
    /// backend that serves more at once (the embedded queue) says so, and workers ask for more.
    fn receive_batch_max(&self) -> usize {
        10
    }

    /// Sends messages, visible at once.
    async fn queue_send(&self, p: QueueSend) -> StoreResult<()>;

    /// Receives up to `max` visible messages, hiding them for `visibility_ms`. A message whose
    /// receive count would pass `max_receive_count` moves to the DLQ instead.
    async fn queue_receive(&self, p: QueueReceive) -> StoreResult<Vec<ReceivedMessage>>;

    /// Deletes deliveries (acks). Unknown receipts are ignored.
    async fn queue_delete(&self, receipts: &[String]) -> StoreResult<()>;

    /// Delays a delivery's redelivery.
    async fn queue_change_visibility(&self, p: QueueVisibility) -> StoreResult<()>;

    /// Moves a delivery to the DLQ.
    async fn queue_dead_letter(&self, p: QueueDeadLetter) -> StoreResult<()>;

    /// Lists the DLQ.
    async fn dlq_list(&self, p: DlqList) -> StoreResult<Page<DeadLetter>>;

    /// Removes letters from the DLQ (after a replay or a purge).
    async fn dlq_delete(&self, ids: &[String]) -> StoreResult<()>;

    /// One letter by id, `None` if the DLQ holds none. The default walks
    /// [`dlq_list`](Self::dlq_list) pages (at most [`DLQ_GET_WALK_MAX`] letters), for
    /// wrappers written before this method; both backends answer it more directly.
    async fn dlq_get(&self, id: &str) -> StoreResult<Option<DeadLetter>> {
        let mut after = None;
        let mut seen = 0;
        loop {
            let page = self
                .dlq_list(DlqList {
                    after,
                    limit: 1_000,
                })
                .await?;
            seen += page.items.len();
            if let Some(l) = page.items.into_iter().find(|l| l.id == id) {
                return Ok(Some(l));
            }
            match page.next {
                Some(n) if seen < DLQ_GET_WALK_MAX => after = Some(n),
                _ => return Ok(None),
            }
        }
    }

    /// Counts messages.
    async fn queue_depth(&self, now_ms: i64) -> StoreResult<QueueDepth>;
}

/// A shard's lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// The shard.
    pub shard: u32,
    /// Who holds (or last held) it.
    pub owner: String,
    /// When it lapses, epoch milliseconds.
    pub expires_ms: i64,
    /// Grows by one with every acquisition.
    pub epoch: u64,
    /// The oldest minute bucket that may still hold due tasks.
    pub watermark_minute: i64,
}

/// Acquire a shard's lease: succeeds if nobody holds it or the holder's lease has expired.
#[derive(Debug, Clone)]
pub struct LeaseAcquire {
    /// The shard.
    pub shard: u32,
    /// The acquiring poller.
    pub owner: String,
    /// Lease duration.
    pub ttl_ms: i64,
    /// Now, epoch milliseconds.
    pub now_ms: i64,
}

/// Renew a held lease, and persist the watermark: conditional on `owner = :o AND epoch = :e
/// AND expires_ms > :now`.
#[derive(Debug, Clone)]
pub struct LeaseRenew {
    /// The shard.
    pub shard: u32,
    /// The holder.
    pub owner: String,
    /// The epoch it acquired.
    pub epoch: u64,
    /// Lease duration from now.
    pub ttl_ms: i64,
    /// The new watermark, if it moved.
    pub watermark_minute: Option<i64>,
    /// Now, epoch milliseconds.
    pub now_ms: i64,
}

/// Give a lease up so a standby may take it at once; conditional like a renewal.
#[derive(Debug, Clone)]
pub struct LeaseRelease {
    /// The shard.
    pub shard: u32,
    /// The holder.
    pub owner: String,
    /// The epoch it acquired.
    pub epoch: u64,
    /// The final watermark.
    pub watermark_minute: i64,
}

/// A poller announcing that it is alive, whether or not it holds a shard: the pollers count
/// each other through these rows to split the shards fairly (a poller holding nothing has no
/// lease to be seen by).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    /// The poller, named as in its leases.
    pub owner: String,
    /// When it counts as gone unless it beats again, epoch milliseconds.
    pub expires_ms: i64,
}

/// Announce (or keep announcing) a poller: upserts its row with `expires_ms = now + ttl`.
#[derive(Debug, Clone)]
pub struct MemberBeat {
    /// The poller.
    pub owner: String,
    /// How long the announcement lasts.
    pub ttl_ms: i64,
    /// Now, epoch milliseconds.
    pub now_ms: i64,
}

/// Remove a poller's row: its own on shutdown (unconditional), or a long-gone peer's, only
/// if the row is unchanged since it was listed (the peer did not come back meanwhile).
#[derive(Debug, Clone)]
pub struct MemberRemove {
    /// The poller whose row goes.
    pub owner: String,
    /// Remove only if the row still expires at this instant; `Conflict` otherwise.
    pub if_expires_ms: Option<i64>,
}

/// Shard leases.
#[async_trait]
pub trait LeaseStore: Send + Sync + 'static {
    /// Acquires a lease (epoch + 1). `Conflict` if another owner holds it unexpired. A shard
    /// never leased before starts with the store's `created_minute` as watermark.
    async fn lease_acquire(&self, p: LeaseAcquire) -> StoreResult<Lease>;

    /// Renews a lease. `Conflict` if it was lost or has expired.
    async fn lease_renew(&self, p: LeaseRenew) -> StoreResult<Lease>;

    /// Releases a lease. `Conflict` if it was lost already.
    async fn lease_release(&self, p: LeaseRelease) -> StoreResult<()>;

    /// Every shard's lease that exists.
    async fn lease_list(&self) -> StoreResult<Vec<Lease>>;

    /// Announces a live poller (upsert).
    async fn member_beat(&self, p: MemberBeat) -> StoreResult<()>;

    /// Removes a poller's announcement. Removing a row that does not exist succeeds; a
    /// condition that no longer holds is a `Conflict`.
    async fn member_remove(&self, p: MemberRemove) -> StoreResult<()>;

    /// Every announcement, expired ones included (a reader decides what is live).
    async fn member_list(&self) -> StoreResult<Vec<Member>>;
}

/// One backend: the three roles, as the poller, worker, API and console hold them.
#[derive(Clone)]
pub struct Backend {
    /// Tasks and the due index.
    pub tasks: Arc<dyn TaskStore>,
    /// Ready queue and DLQ.
    pub queue: Arc<dyn ReadyQueue>,
    /// Shard leases.
    pub leases: Arc<dyn LeaseStore>,
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backend")
            .field("shards", &self.tasks.shard_count())
            .finish_non_exhaustive()
    }
}

impl Backend {
    /// A backend whose one object plays all three roles.
    pub fn from_one<S: TaskStore + ReadyQueue + LeaseStore>(store: Arc<S>) -> Self {
        Self {
            tasks: store.clone(),
            queue: store.clone(),
            leases: store,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::task::{Backoff, NewTask, Target};

    fn task(id: &str, due_ms: i64, target: Target, status: TaskStatus) -> Task {
        let mut t = Task::from_new(
            NewTask {
                task_id: id.into(),
                due_ms,
                target,
                payload: serde_json::Value::Null,
                max_attempts: 3,
                backoff: Backoff::default(),
            },
            16,
            0,
        );
        t.status = status;
        if status != TaskStatus::Scheduled {
            t.due_bucket = None;
        }
        t
    }

    #[test]
    fn a_filter_window_is_from_inclusive_to_exclusive_and_every_field_narrows() {
        let log = task("inv-1", 1_000, Target::Log, TaskStatus::Scheduled);
        let dead = task("inv-2", 2_000, Target::Log, TaskStatus::Dead);
        let all = TaskFilter::default();
        assert!(all.matches(&log), "no status: what waits in the due index");
        assert!(!all.matches(&dead));
        let window = TaskFilter {
            due_from_ms: Some(1_000),
            due_to_ms: Some(2_000),
            ..TaskFilter::default()
        };
        assert!(window.matches(&log));
        assert!(
            !TaskFilter {
                due_to_ms: Some(1_000),
                ..TaskFilter::default()
            }
            .matches(&log)
        );
        let exact = TaskFilter {
            status: Some(TaskStatus::Dead),
            due_from_ms: Some(2_000),
            due_to_ms: Some(2_001),
            target_kind: Some(TargetKind::Log),
            id_prefix: Some("inv-".into()),
        };
        assert!(exact.matches(&dead));
        for narrower in [
            TaskFilter {
                target_kind: Some(TargetKind::Http),
                ..exact.clone()
            },
            TaskFilter {
                id_prefix: Some("inv-1".into()),
                ..exact.clone()
            },
            TaskFilter {
                status: Some(TaskStatus::Cancelled),
                ..exact.clone()
            },
        ] {
            assert!(!narrower.matches(&dead), "{narrower:?}");
        }
    }

    #[test]
    fn status_counts_add_up() {
        let mut c = StatusCounts::default();
        for (i, s) in ALL_STATUSES.into_iter().enumerate() {
            *c.slot(s) = i as u64 + 1;
        }
        for (i, s) in ALL_STATUSES.into_iter().enumerate() {
            assert_eq!(c.get(s), i as u64 + 1);
        }
        assert_eq!(c.total(), 28);
    }
}
