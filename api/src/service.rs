//! The API's behaviour without HTTP, shared by the handlers, the console and `punctual bench`.
//!
//! Each function validates everything first and then makes one store call, so bad input never
//! reaches the store and changes nothing. Creation is idempotent by client id: the store
//! stores or returns what is already there (`PutOutcome::Existing`), and only then is the
//! existing task compared with the request, so the common path (nothing there) costs no read.
//!
//! "The same request" is [`Task::same_request`], with one refinement: a request that gives a
//! `delay` rather than a `run_at` means "that long after I asked", so a retry of it a few
//! seconds later matches when its delay equals the existing task's `due_ms - created_ms`
//! rather than when the absolute due times agree (they never would).
//!
//! Page cursors are opaque to clients: the store's key, base64url-encoded so it travels in a
//! query string untouched (a store key may hold `#`).

use std::collections::HashMap;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use punctual_core::StoreError;
use punctual_core::store::{Page, PutOutcome, TaskCancel, TaskListPending, TaskPut, TaskPutBatch};
use punctual_core::task::{NewTask, Task};
use punctual_core::validate::{CreateTask, MAX_BATCH, validate_id};

use crate::ApiState;
use crate::error::ApiError;
use crate::view::{ItemStatus, ItemView};

/// What happened to one requested task of [`create_tasks`].
#[derive(Debug, Clone, PartialEq)]
pub struct ItemResult {
    /// The task id (generated when the request gave none).
    pub id: String,
    /// Created, existing (same request), or conflict (another request holds the id).
    pub status: ItemStatus,
    /// The stored task; `None` for a conflict.
    pub task: Option<Task>,
}

impl ItemResult {
    /// The item as the API shows it.
    pub fn into_view(self) -> ItemView {
        let detail = (self.status == ItemStatus::Conflict).then(|| conflict_detail(&self.id));
        ItemView {
            id: self.id,
            status: self.status,
            task: self.task.map(Into::into),
            detail,
        }
    }
}

/// What a request asked for, kept to compare with a task already stored under its id.
struct Asked {
    new: NewTask,
    by_delay: bool,
}

impl Asked {
    /// True if `existing` was created by this same request (see the module doc for `delay`).
    fn matches(mut self, existing: &Task, now_ms: i64) -> bool {
        if self.by_delay {
            let delay = self.new.due_ms.saturating_sub(now_ms);
            self.new.due_ms = existing.created_ms.saturating_add(delay);
        }
        existing.same_request(&self.new)
    }
}

fn conflict_detail(id: &str) -> String {
    format!(
        "task `{id}` already exists with a different request; nothing was changed. Choose another id, or GET /v1/tasks/{id} to see it"
    )
}

fn not_found(id: &str) -> ApiError {
    if validate_id(id).is_ok() {
        ApiError::NotFound(format!("no task with id `{id}`"))
    } else {
        ApiError::NotFound("no task with that id (it is not a valid task id)".into())
    }
}

/// Creates one task. `Created` when stored now, `Existing` when the same request had already
/// stored it; a different request under the same id is a 409.
pub async fn create_task(state: &ApiState, req: CreateTask) -> Result<PutOutcome, ApiError> {
    let now_ms = state.now_ms();
    let client_id = req.id.is_some();
    let by_delay = req.delay.is_some();
    let new = req.validate(now_ms, &state.config.limits)?;
    let asked = client_id.then(|| Asked {
        new: new.clone(),
        by_delay,
    });
    let outcome = state
        .backend
        .tasks
        .task_put(TaskPut { task: new, now_ms })
        .await?;
    match outcome {
        PutOutcome::Existing(t) if !asked.is_some_and(|a| a.matches(&t, now_ms)) => {
            Err(ApiError::Conflict(conflict_detail(&t.task_id)))
        }
        outcome => Ok(outcome),
    }
}

/// Creates 1 to [`MAX_BATCH`] tasks with one store call, after validating every one: an
/// invalid item (its field named `tasks[i].field`) or a duplicate id refuses the whole batch
/// and stores nothing. One result per request, in order.
pub async fn create_tasks(
    state: &ApiState,
    reqs: Vec<CreateTask>,
) -> Result<Vec<ItemResult>, ApiError> {
    if reqs.is_empty() {
        return Err(ApiError::invalid("tasks", "give at least one task"));
    }
    if reqs.len() > MAX_BATCH {
        return Err(ApiError::invalid(
            "tasks",
            format!(
                "{} tasks, more than the limit of {MAX_BATCH} per batch",
                reqs.len()
            ),
        ));
    }
    let now_ms = state.now_ms();
    let mut tasks = Vec::with_capacity(reqs.len());
    // Only a client's own id can meet an existing task; generated ids are fresh ULIDs.
    let mut asked = Vec::with_capacity(reqs.len());
    for (i, req) in reqs.into_iter().enumerate() {
        let client_id = req.id.is_some();
        let by_delay = req.delay.is_some();
        let new = req
            .validate(now_ms, &state.config.limits)
            .map_err(|e| e.within(&format!("tasks[{i}]")))?;
        asked.push(client_id.then(|| Asked {
            new: new.clone(),
            by_delay,
        }));
        tasks.push(new);
    }
    let mut first_at = HashMap::with_capacity(tasks.len());
    for (i, t) in tasks.iter().enumerate() {
        if let Some(j) = first_at.insert(t.task_id.as_str(), i) {
            return Err(ApiError::invalid(
                format!("tasks[{i}].id"),
                format!(
                    "duplicate id `{}`, also given by tasks[{j}]; ids in one batch must be distinct",
                    t.task_id
                ),
            ));
        }
    }
    drop(first_at);
    let outcomes = state
        .backend
        .tasks
        .task_put_batch(TaskPutBatch { tasks, now_ms })
        .await?;
    if outcomes.len() != asked.len() {
        return Err(ApiError::internal(format!(
            "task_put_batch returned {} outcomes for {} tasks",
            outcomes.len(),
            asked.len()
        )));
    }
    let results = outcomes
        .into_iter()
        .zip(asked)
        .map(|(outcome, asked)| match outcome {
            PutOutcome::Created(t) => ItemResult {
                id: t.task_id.clone(),
                status: ItemStatus::Created,
                task: Some(t),
            },
            PutOutcome::Existing(t) if asked.is_some_and(|a| a.matches(&t, now_ms)) => ItemResult {
                id: t.task_id.clone(),
                status: ItemStatus::Existing,
                task: Some(t),
            },
            PutOutcome::Existing(t) => ItemResult {
                id: t.task_id,
                status: ItemStatus::Conflict,
                task: None,
            },
        })
        .collect();
    Ok(results)
}

/// Reads a task; 404 if there is none.
pub async fn get_task(state: &ApiState, id: &str) -> Result<Task, ApiError> {
    if validate_id(id).is_err() {
        return Err(not_found(id));
    }
    state
        .backend
        .tasks
        .task_get(id)
        .await?
        .ok_or_else(|| not_found(id))
}

/// Cancels a task, optionally only if it is still at `expected_version`. 404 if there is no
/// such task; 409, saying why, if it is running, already finished, or at another version.
pub async fn cancel_task(
    state: &ApiState,
    id: &str,
    expected_version: Option<u64>,
) -> Result<Task, ApiError> {
    if validate_id(id).is_err() {
        return Err(not_found(id));
    }
    let result = state
        .backend
        .tasks
        .task_cancel(TaskCancel {
            task_id: id.to_owned(),
            expected_version,
            now_ms: state.now_ms(),
        })
        .await;
    match result {
        Ok(task) => Ok(task),
        Err(StoreError::NotFound(_)) => Err(not_found(id)),
        Err(StoreError::Conflict { message }) => {
            Err(cancel_conflict(state, id, expected_version, message).await)
        }
        Err(e) => Err(e.into()),
    }
}

/// Why a cancel was refused, from the task as it is now (a read on the failure path only).
async fn cancel_conflict(
    state: &ApiState,
    id: &str,
    expected_version: Option<u64>,
    store_message: String,
) -> ApiError {
    let task = match state.backend.tasks.task_get(id).await {
        Ok(Some(t)) => t,
        Ok(None) => return not_found(id),
        Err(_) => {
            return ApiError::Conflict(format!("task `{id}` cannot be cancelled: {store_message}"));
        }
    };
    let detail = match expected_version {
        Some(v) if v != task.version => format!(
            "task `{id}` is at version {}, not the expected {v}: it changed since you read it; nothing was changed",
            task.version
        ),
        _ if task.status == punctual_core::TaskStatus::Running => format!(
            "task `{id}` is RUNNING and cannot be cancelled; its run ends by itself (succeeded, retried or dead)"
        ),
        _ if task.status.is_terminal() => format!(
            "task `{id}` is already {}; only SCHEDULED, DISPATCHED or RETRY_WAIT tasks can be cancelled",
            task.status
        ),
        _ => format!("task `{id}` cannot be cancelled: {store_message}"),
    };
    ApiError::Conflict(detail)
}

/// Lists tasks waiting in the due index, in due order. `after` is the `next` cursor of the
/// previous page; `limit` is 1 to `max_page` (the configured default when `None`). The page's
/// `next` is a cursor in the same form, `None` on the last page.
pub async fn list_pending(
    state: &ApiState,
    after: Option<&str>,
    limit: Option<usize>,
) -> Result<Page<Task>, ApiError> {
    let max_page = state.config.max_page;
    let limit = limit.unwrap_or(state.config.default_page);
    if !(1..=max_page).contains(&limit) {
        return Err(ApiError::bad_request(
            "limit",
            format!("must be between 1 and {max_page}"),
        ));
    }
    let after_key = after.map(decode_cursor).transpose()?;
    let page = state
        .backend
        .tasks
        .task_list_pending(TaskListPending { after_key, limit })
        .await?;
    Ok(Page {
        items: page.items,
        next: page.next.as_deref().map(encode_cursor),
    })
}

/// The cursor a client sees for a store's page key: URL-safe, opaque.
pub fn encode_cursor(key: &str) -> String {
    URL_SAFE_NO_PAD.encode(key)
}

/// The store's page key inside a cursor made by [`encode_cursor`]; 400 naming `after` if it
/// is not one.
pub fn decode_cursor(cursor: &str) -> Result<String, ApiError> {
    URL_SAFE_NO_PAD
        .decode(cursor)
        .ok()
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .filter(|key| !key.is_empty())
        .ok_or_else(|| {
            ApiError::bad_request(
                "after",
                "not a cursor; pass the `next` value of the previous page unchanged",
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_survive_a_query_string() {
        let key = "1767225630000#task-1:a.b_c";
        let c = encode_cursor(key);
        assert!(
            c.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        );
        assert_eq!(decode_cursor(&c).unwrap(), key);
        for bad in ["", "!!", "a#b", "/w=="] {
            assert_eq!(
                decode_cursor(bad).unwrap_err().field(),
                Some("after"),
                "{bad}"
            );
        }
    }
}
