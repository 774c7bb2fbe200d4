//! The API's JSON shapes: requests it reads beyond `CreateTask`, and what it answers.
//!
//! The domain counts time in epoch milliseconds; the edge shows RFC 3339 in UTC with
//! milliseconds (`2026-01-31T12:00:00.000Z`). A task shows both `run_at` and `due_ms` because
//! the second is what the due index sorts on and what a script compares most easily.
//! Optional fields are always present, as `null`, so a client can rely on the keys.

use punctual_core::task::{Backoff, Target, Task, TaskStatus};
use punctual_core::validate::{CreateTask, format_rfc3339};
use serde::{Deserialize, Serialize};

/// A task as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskView {
    /// The task's id.
    pub id: String,
    /// Where it is in its life: `SCHEDULED`, `RUNNING`, ...
    pub status: TaskStatus,
    /// Bumped by every operator mutation; give it back to `cancel` to act only on what you saw.
    pub version: u64,
    /// Claims so far.
    pub attempt: u32,
    /// Attempts allowed.
    pub max_attempts: u32,
    /// Backoff between attempts.
    pub backoff: Backoff,
    /// What firing means.
    pub target: Target,
    /// The body handed to the target.
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BatchRequest {
    /// 1 to [`MAX_BATCH`](punctual_core::validate::MAX_BATCH) tasks.
    pub tasks: Vec<CreateTask>,
}

/// What happened to one item of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ItemView {
    /// The item's task id (generated when the request gave none).
    pub id: String,
    /// What happened.
    pub status: ItemStatus,
    /// The stored task, unless `conflict`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<TaskView>,
    /// Why, for a `conflict`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

/// `POST /v1/tasks/batch` answer: one result per requested task, in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BatchResponse {
    /// The results.
    pub results: Vec<ItemView>,
}

/// `POST /v1/tasks/{id}/cancel` request; the body is optional.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CancelRequest {
    /// Cancel only if the task is still at this version.
    #[serde(default)]
    pub version: Option<u64>,
}

/// `GET /v1/tasks` answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskPage {
    /// Waiting tasks, in due order.
    pub tasks: Vec<TaskView>,
    /// Pass as `after` for the next page; `null` on the last.
    pub next: Option<String>,
}

/// `GET /healthz` answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Health {
    /// `"ok"`.
    pub status: String,
}
