//! The API's JSON shapes: requests it reads beyond `CreateTask`, and what it answers.
//!
//! The domain counts time in epoch milliseconds; the edge shows RFC 3339 in UTC with
//! milliseconds (`2026-01-31T12:00:00.000Z`). A task shows both `run_at` and `due_ms` because
//! the second is what the due index sorts on and what a script compares most easily.
//! Optional fields are always present, as `null`, so a client can rely on the keys.

use punctual_core::task::{Backoff, Target, Task, TaskStatus};
use punctual_core::validate::{CreateTask, format_rfc3339};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// A task as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct TaskView {
    /// The task's id.
    pub id: String,
    /// Where it is in its life: `SCHEDULED`, `RUNNING`, ...
    #[schema(value_type = crate::schema::TaskStatusDoc)]
    pub status: TaskStatus,
    /// Bumped by every operator mutation; give it back to `cancel` to act only on what you saw.
    pub version: u64,
    /// Claims so far.
    pub attempt: u32,
    /// Attempts allowed.
    pub max_attempts: u32,
    /// Backoff between attempts.
    #[schema(value_type = crate::schema::BackoffDoc)]
    pub backoff: Backoff,
    /// What firing means.
    #[schema(value_type = crate::schema::TargetDoc)]
    pub target: Target,
    /// The body handed to the target: any JSON value, `null` when none was given.
    pub payload: serde_json::Value,
    /// The task's shard.
    pub shard: u32,
    /// Due time (or next attempt time), RFC 3339.
    pub run_at: String,
    /// The same, epoch milliseconds.
    pub due_ms: i64,
    /// Creation time, RFC 3339.
    pub created_at: String,
    /// Last change, RFC 3339.
    pub updated_at: String,
    /// The last failure's message.
    pub last_error: Option<String>,
    /// While `RUNNING`: when the claim lapses, RFC 3339.
    pub running_until: Option<String>,
}

impl From<Task> for TaskView {
    fn from(t: Task) -> Self {
        Self {
            run_at: format_rfc3339(t.due_ms),
            created_at: format_rfc3339(t.created_ms),
            updated_at: format_rfc3339(t.updated_ms),
            running_until: t.running_until.map(format_rfc3339),
            id: t.task_id,
            status: t.status,
            version: t.version,
            attempt: t.attempt,
            max_attempts: t.max_attempts,
            backoff: t.backoff,
            target: t.target,
            payload: t.payload,
            shard: t.shard,
            due_ms: t.due_ms,
            last_error: t.last_error,
        }
    }
}

/// `POST /v1/tasks/batch` request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchRequest {
    /// 1 to [`MAX_BATCH`](punctual_core::validate::MAX_BATCH) tasks.
    #[schema(value_type = Vec<crate::schema::CreateTaskDoc>)]
    pub tasks: Vec<CreateTask>,
}

/// What happened to one item of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ItemStatus {
    /// Stored now.
    Created,
    /// Already stored under this id, by the same request: nothing changed.
    Existing,
    /// Already stored under this id by a different request: nothing changed.
    Conflict,
}

/// One item of a batch answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ItemView {
    /// The item's task id (generated when the request gave none).
    pub id: String,
    /// What happened.
    pub status: ItemStatus,
    /// The stored task, unless `conflict`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false, nullable = false)]
    pub task: Option<TaskView>,
    /// Why, for a `conflict`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false, nullable = false)]
    pub detail: Option<String>,
}

/// `POST /v1/tasks/batch` answer: one result per requested task, in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct BatchResponse {
    /// The results.
    pub results: Vec<ItemView>,
}

/// `POST /v1/tasks/{id}/cancel` request; the body is optional.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CancelRequest {
    /// Cancel only if the task is still at this version.
    #[serde(default)]
    #[schema(required = false)]
    pub version: Option<u64>,
}

/// `GET /v1/tasks` answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct TaskPage {
    /// The tasks, in due order. On some backends a page may hold fewer than `limit` (even
    /// none) while `next` is set: keep following `next`.
    pub tasks: Vec<TaskView>,
    /// Pass as `after` for the next page; `null` on the last.
    pub next: Option<String>,
}

/// `GET /v1/tasks` query, as a client gives it: every value a string, checked by
/// [`service::list_tasks`](crate::service::list_tasks), which names the parameter at fault.
/// An empty filter counts as absent, so an HTML form's blank fields can be passed unchanged
/// (`after` must be a cursor when given).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskListQuery {
    /// `SCHEDULED`, `DISPATCHED`, `RUNNING`, `RETRY_WAIT`, `SUCCEEDED`, `DEAD` or
    /// `CANCELLED`. Absent: the tasks waiting in the due index (what will fire), in due order.
    #[serde(default)]
    pub status: Option<String>,
    /// Only tasks due at or after this time, RFC 3339.
    #[serde(default)]
    pub due_from: Option<String>,
    /// Only tasks due before this time (exclusive), RFC 3339.
    #[serde(default)]
    pub due_to: Option<String>,
    /// Only tasks whose target is of this kind: `http`, `log` or `handler`.
    #[serde(default)]
    pub target: Option<String>,
    /// Only tasks whose id starts with this.
    #[serde(default)]
    pub id_prefix: Option<String>,
    /// The `next` cursor of the previous page.
    #[serde(default)]
    pub after: Option<String>,
    /// Page size, 1 to the server's maximum.
    #[serde(default)]
    pub limit: Option<usize>,
}

/// Tasks per status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub struct StatusCountsView {
    /// Waiting for their due time.
    pub scheduled: u64,
    /// Sent to the ready queue, not yet claimed.
    pub dispatched: u64,
    /// Claimed by a worker.
    pub running: u64,
    /// Waiting for their next attempt.
    pub retry_wait: u64,
    /// Done.
    pub succeeded: u64,
    /// Attempts spent or failed for good.
    pub dead: u64,
    /// Cancelled by an operator.
    pub cancelled: u64,
}

impl From<punctual_core::store::StatusCounts> for StatusCountsView {
    fn from(c: punctual_core::store::StatusCounts) -> Self {
        Self {
            scheduled: c.scheduled,
            dispatched: c.dispatched,
            running: c.running,
            retry_wait: c.retry_wait,
            succeeded: c.succeeded,
            dead: c.dead,
            cancelled: c.cancelled,
        }
    }
}

/// `GET /healthz` answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Health {
    /// `"ok"`.
    pub status: String,
}

/// `POST /v1/tasks/{id}/reschedule` request: a new due time, exactly one of `run_at` and
/// `delay`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"delay": "5m", "version": 1}))]
pub struct RescheduleRequest {
    /// The new due time, RFC 3339.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false, nullable = false, format = DateTime)]
    pub run_at: Option<String>,
    /// Or due this long from now: `"90s"`, `"5m"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false, nullable = false)]
    pub delay: Option<String>,
    /// Act only if the task is still at this version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false, nullable = false)]
    pub version: Option<u64>,
}

/// `PATCH /v1/tasks/{id}` request: a new payload or retry policy for a task that is not
/// running; fields left out are kept. At least one of `payload`, `max_attempts` and `backoff`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"payload": {"invoice": 43}, "max_attempts": 8, "version": 2}))]
pub struct UpdateTaskRequest {
    /// Act only if the task is still at this version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false, nullable = false)]
    pub version: Option<u64>,
    /// The new body handed to the target (any JSON, `null` included, at most the configured
    /// size).
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    #[schema(required = false)]
    pub payload: Option<serde_json::Value>,
    /// Attempts before the task is dead (1 to 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false, nullable = false, minimum = 1, maximum = 100)]
    pub max_attempts: Option<u32>,
    /// Backoff between attempts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false, nullable = false, value_type = crate::schema::BackoffDoc)]
    pub backoff: Option<Backoff>,
}

/// A field that is present, `null` included, is `Some`; only an absent one is `None`.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<serde_json::Value>, D::Error> {
    serde_json::Value::deserialize(d).map(Some)
}

/// `POST /v1/tasks/{id}/replay` request; the body is optional. Without a time the task is due
/// at once.
pub type ReplayRequest = RescheduleRequest;

/// A letter in the dead-letter queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct DeadLetterView {
    /// The letter's id in the DLQ (not the task's).
    pub id: String,
    /// The task it was for.
    pub task_id: String,
    /// The task version the message carried.
    pub version: u64,
    /// The task's shard.
    pub shard: u32,
    /// The due time the message carried, RFC 3339.
    pub due_at: String,
    /// Why it is dead.
    pub reason: String,
    /// When it arrived in the DLQ, RFC 3339.
    pub dead_at: String,
}

impl From<punctual_core::store::DeadLetter> for DeadLetterView {
    fn from(l: punctual_core::store::DeadLetter) -> Self {
        Self {
            id: l.id,
            task_id: l.message.task_id,
            version: l.message.version,
            shard: l.message.shard,
            due_at: format_rfc3339(l.message.due_ms),
            reason: l.reason,
            dead_at: format_rfc3339(l.dead_ms),
        }
    }
}

/// `GET /v1/dlq` answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct DlqPage {
    /// Letters, oldest first.
    pub letters: Vec<DeadLetterView>,
    /// Pass as `after` for the next page; `null` on the last.
    pub next: Option<String>,
}

/// What replaying one dead letter did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum LetterOutcome {
    /// The task is `SCHEDULED` again, due now, attempts reset; the letter is gone.
    Replayed,
    /// The task was already live again (replayed or rescheduled since); the letter is gone.
    AlreadyLive,
    /// The task no longer exists; the letter is gone.
    TaskMissing,
    /// The task is running now; the letter stays.
    Skipped,
}

/// `POST /v1/dlq/{id}/replay` answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct LetterReplayView {
    /// The letter.
    pub letter_id: String,
    /// Its task.
    pub task_id: String,
    /// What happened.
    pub outcome: LetterOutcome,
    /// The task as it is now, if it exists.
    pub task: Option<TaskView>,
}

/// `POST /v1/dlq/redrive` request; the body is optional.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RedriveRequest {
    /// Resume after this cursor (the `next` of the previous answer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false, nullable = false)]
    pub after: Option<String>,
    /// Letters to handle in this call (1 to the page limit; default the page size).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false, nullable = false, minimum = 1)]
    pub limit: Option<usize>,
}

/// `POST /v1/dlq/redrive` answer: what this page moved. Call again with `after = next` until
/// `next` is `null`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct RedriveView {
    /// Letters looked at.
    pub examined: u64,
    /// Tasks put back to `SCHEDULED`.
    pub replayed: u64,
    /// Letters removed without a replay (task already live, or gone).
    pub dropped: u64,
    /// Letters left (their task is running, or the store refused).
    pub skipped: u64,
    /// Resume here; `null` when the DLQ has been walked to its end.
    pub next: Option<String>,
}

/// One shard's lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ShardView {
    /// The shard.
    pub shard: u32,
    /// Who holds (or last held) it.
    pub owner: String,
    /// Grows by one with every acquisition.
    pub epoch: u64,
    /// When the lease lapses, RFC 3339.
    pub expires_at: String,
    /// True if the lease is unexpired now.
    pub held: bool,
    /// The oldest minute that may still hold due tasks, RFC 3339.
    pub watermark: String,
}

/// One poller: its presence and how many shards it holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct PollerView {
    /// Its name in the leases.
    pub owner: String,
    /// Announced now, or holding a live lease. A live poller holding nothing is a standby.
    pub live: bool,
    /// Shards it holds now.
    pub shards_held: usize,
    /// When its presence lapses unless it beats again, RFC 3339; `null` if it holds leases
    /// without having announced itself.
    pub presence_expires_at: Option<String>,
}

/// `GET /v1/shards` answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ShardsView {
    /// Shards in the store.
    pub shard_count: u32,
    /// Leases that exist (a shard never leased has none).
    pub leases: Vec<ShardView>,
    /// Pollers that announced themselves (a lapsed one until a peer forgets it, ten minutes
    /// on) or hold a live lease: live ones first.
    pub pollers: Vec<PollerView>,
}

/// Messages waiting in the ready queue and the DLQ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct QueueView {
    /// Visible now.
    pub ready: u64,
    /// Received and not yet deleted, or delayed.
    pub in_flight: u64,
    /// In the DLQ.
    pub dead: u64,
}

impl From<punctual_core::store::QueueDepth> for QueueView {
    fn from(d: punctual_core::store::QueueDepth) -> Self {
        Self {
            ready: d.ready,
            in_flight: d.in_flight,
            dead: d.dead,
        }
    }
}

/// `GET /readyz` answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Ready {
    /// `"ready"`.
    pub status: String,
    /// The queue, as read by the probe.
    pub queue: QueueView,
}

/// Recent firing activity in this process (its workers), over the last minute.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ActivityView {
    /// Tasks fired in the last 60 s.
    pub fired_last_minute: u64,
    /// The same per second.
    pub fire_rate_per_s: f64,
    /// Mean lag (claim time minus due time) of those, milliseconds; `null` if none fired.
    pub lag_ms_mean: Option<f64>,
    /// Largest lag of those, milliseconds; `null` if none fired.
    pub lag_ms_max: Option<i64>,
    /// Runs that succeeded, retried, and died in the last 60 s.
    pub succeeded_last_minute: u64,
    /// Runs that will be retried.
    pub retried_last_minute: u64,
    /// Runs that ended the task `DEAD`.
    pub dead_last_minute: u64,
}

/// `GET /v1/stats` answer: what is cheap to know now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct StatsView {
    /// Shards in the store.
    pub shard_count: u32,
    /// Shards whose lease is held now (by any poller).
    pub shards_held: u32,
    /// The ready queue and DLQ.
    pub queue: QueueView,
    /// Firing in this process over the last minute.
    pub activity: ActivityView,
    /// Tasks waiting in the due index per minute, from the current minute for the next hour
    /// (60 entries, all shards together; the current minute also holds tasks filed late).
    pub backlog: Vec<BacklogMinute>,
    /// Tasks per status, where the backend counts them cheaply (the embedded store keeps
    /// counters); `null` where it cannot without reading every task (aws).
    pub counts: Option<StatusCountsView>,
}

/// The due index's count for one minute.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct BacklogMinute {
    /// The minute's start, RFC 3339.
    pub minute: String,
    /// Tasks waiting under it.
    pub due: u64,
}
