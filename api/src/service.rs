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
use punctual_core::store::{
    DeadLetter, DlqList, DueBacklog, Lease, Page, PutOutcome, QueueDepth, TaskCancel, TaskFilter,
    TaskList, TaskPut, TaskPutBatch, TaskReschedule, TaskUpdate,
};
use punctual_core::task::{NewTask, TargetKind, Task, TaskStatus};
use punctual_core::validate::{
    CreateTask, MAX_BATCH, MAX_ID_LEN, parse_rfc3339, validate_backoff, validate_id,
    validate_max_attempts, validate_payload,
};

use crate::ApiState;
use crate::error::ApiError;
use crate::metrics::TASKS_CREATED;
use crate::view::{
    BacklogMinute, ItemStatus, ItemView, LetterOutcome, QueueView, RedriveView, RescheduleRequest,
    StatsView, TaskListQuery, UpdateTaskRequest,
};

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
    if matches!(outcome, PutOutcome::Created(_)) {
        metrics::counter!(TASKS_CREATED).increment(1);
    }
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
    let created = outcomes
        .iter()
        .filter(|o| matches!(o, PutOutcome::Created(_)))
        .count();
    metrics::counter!(TASKS_CREATED).increment(created as u64);
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

/// The statuses `GET /v1/tasks?status=` accepts on this backend (the embedded store: all;
/// aws: those its indexes hold, see [`Capabilities`](punctual_core::store::Capabilities)).
pub fn listable_statuses(state: &ApiState) -> &'static [TaskStatus] {
    state.backend.tasks.capabilities().list_statuses
}

/// A query value, `None` when absent or blank.
fn given(v: &Option<String>) -> Option<&str> {
    v.as_deref().map(str::trim).filter(|v| !v.is_empty())
}

/// Checks a [`TaskListQuery`] and builds the store's filter; 400 naming the parameter at
/// fault.
pub fn task_filter(state: &ApiState, q: &TaskListQuery) -> Result<TaskFilter, ApiError> {
    let status = match given(&q.status) {
        None => None,
        Some(s) => {
            let listable = listable_statuses(state);
            let names = || {
                listable
                    .iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let status = TaskStatus::parse(&s.to_ascii_uppercase()).ok_or_else(|| {
                ApiError::bad_request(
                    "status",
                    format!("{s:?} is not a status; give one of {}", names()),
                )
            })?;
            if !listable.contains(&status) {
                return Err(ApiError::bad_request(
                    "status",
                    format!(
                        "this backend cannot list {status} tasks: it has no index of them and never scans the table; it lists {}",
                        names()
                    ),
                ));
            }
            Some(status)
        }
    };
    let time = |v: &Option<String>, field: &str| {
        given(v)
            .map(|t| parse_rfc3339(t).map_err(|m| ApiError::bad_request(field, m)))
            .transpose()
    };
    let due_from_ms = time(&q.due_from, "due_from")?;
    let due_to_ms = time(&q.due_to, "due_to")?;
    if let (Some(from), Some(to)) = (due_from_ms, due_to_ms)
        && to <= from
    {
        return Err(ApiError::bad_request(
            "due_to",
            "must be later than due_from (the window is due_from <= due < due_to)",
        ));
    }
    let target_kind = given(&q.target)
        .map(|k| {
            TargetKind::parse(&k.to_ascii_lowercase()).ok_or_else(|| {
                ApiError::bad_request(
                    "target",
                    format!("{k:?} is not a target kind; give http, log or handler"),
                )
            })
        })
        .transpose()?;
    let id_prefix = given(&q.id_prefix)
        .map(|p| {
            validate_id(p).map(|()| p.to_owned()).map_err(|_| {
                ApiError::bad_request(
                    "id_prefix",
                    format!(
                        "1 to {MAX_ID_LEN} characters of letters, digits, '-', '_', '.', ':' (what a task id may hold)"
                    ),
                )
            })
        })
        .transpose()?;
    Ok(TaskFilter {
        status,
        due_from_ms,
        due_to_ms,
        target_kind,
        id_prefix,
    })
}

/// Lists tasks by status, due window, target kind and id prefix, in due order, in pages
/// (see [`TaskListQuery`]; no status lists the tasks waiting to fire). Cursors as in
/// [`list_pending`]. 400 naming the parameter at fault, including a status this backend
/// cannot list ([`listable_statuses`]).
pub async fn list_tasks(state: &ApiState, q: &TaskListQuery) -> Result<Page<Task>, ApiError> {
    let filter = task_filter(state, q)?;
    let limit = page_limit(state, q.limit, "limit")?;
    // Unlike the filters, a blank cursor is refused: it is never typed, only handed back.
    let after_key = q.after.as_deref().map(decode_cursor).transpose()?;
    let page = state
        .backend
        .tasks
        .task_list(TaskList {
            filter,
            after_key,
            limit,
            now_ms: state.now_ms(),
        })
        .await?;
    Ok(with_client_cursor(page))
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

/// A due time from `run_at` or `delay` (at most one; `None` when neither), within the
/// configured horizon.
fn due_from(state: &ApiState, req: &RescheduleRequest) -> Result<Option<i64>, ApiError> {
    let now_ms = state.now_ms();
    let (due, field) = match (&req.run_at, &req.delay) {
        (Some(_), Some(_)) => {
            return Err(ApiError::invalid(
                "run_at",
                "give run_at or delay, not both",
            ));
        }
        (None, None) => return Ok(None),
        (Some(run_at), None) => (
            parse_rfc3339(run_at).map_err(|m| ApiError::invalid("run_at", m))?,
            "run_at",
        ),
        (None, Some(delay)) => {
            let d = humantime::parse_duration(delay).map_err(|e| {
                ApiError::invalid(
                    "delay",
                    format!("not a duration ({e}); try \"90s\" or \"5m\""),
                )
            })?;
            let d = i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
            (now_ms.saturating_add(d), "delay")
        }
    };
    let horizon = state.config.limits.max_ahead_ms;
    if due > now_ms.saturating_add(horizon) {
        return Err(ApiError::invalid(
            field,
            format!("more than {} days ahead", horizon / 86_400_000),
        ));
    }
    Ok(Some(due))
}

/// Why a reschedule or replay was refused, from the task as it is now.
async fn change_conflict(
    state: &ApiState,
    id: &str,
    verb: &str,
    expected_version: Option<u64>,
    store_message: String,
) -> ApiError {
    match state.backend.tasks.task_get(id).await {
        Ok(None) => not_found(id),
        Ok(Some(t)) => match expected_version {
            Some(v) if v != t.version => ApiError::Conflict(format!(
                "task `{id}` is at version {}, not the expected {v}: it changed since you read it; nothing was changed",
                t.version
            )),
            _ if t.status == TaskStatus::Running => ApiError::Conflict(format!(
                "task `{id}` is RUNNING and cannot be {verb}d until its run ends"
            )),
            _ => ApiError::Conflict(format!("task `{id}` cannot be {verb}d: {store_message}")),
        },
        Err(_) => ApiError::Conflict(format!("task `{id}` cannot be {verb}d: {store_message}")),
    }
}

async fn reschedule_call(
    state: &ApiState,
    id: &str,
    verb: &str,
    due_ms: i64,
    expected_version: Option<u64>,
    reset_attempts: bool,
) -> Result<Task, ApiError> {
    let result = state
        .backend
        .tasks
        .task_reschedule(TaskReschedule {
            task_id: id.to_owned(),
            due_ms,
            expected_version,
            reset_attempts,
            now_ms: state.now_ms(),
        })
        .await;
    match result {
        Ok(t) => Ok(t),
        Err(StoreError::NotFound(_)) => Err(not_found(id)),
        Err(StoreError::Conflict { message }) => {
            Err(change_conflict(state, id, verb, expected_version, message).await)
        }
        Err(e) => Err(e.into()),
    }
}

/// Moves a task to a new due time (`SCHEDULED`, version + 1) from any status but `RUNNING`;
/// `run_at` or `delay` is required.
pub async fn reschedule_task(
    state: &ApiState,
    id: &str,
    req: RescheduleRequest,
) -> Result<Task, ApiError> {
    if validate_id(id).is_err() {
        return Err(not_found(id));
    }
    let due_ms = due_from(state, &req)?
        .ok_or_else(|| ApiError::invalid("run_at", "required: give run_at or delay"))?;
    reschedule_call(state, id, "reschedule", due_ms, req.version, false).await
}

/// Replays a finished task (`DEAD`, `SUCCEEDED` or `CANCELLED`): `SCHEDULED` again, attempts
/// reset, due at `run_at`/`delay` or now. The check and the write are one conditional write:
/// the task's version as read is the write's condition, so a change in between is a 409.
pub async fn replay_task(
    state: &ApiState,
    id: &str,
    req: RescheduleRequest,
) -> Result<Task, ApiError> {
    let due_ms = due_from(state, &req)?.unwrap_or_else(|| state.now_ms());
    let task = get_task(state, id).await?;
    if let Some(v) = req.version.filter(|v| *v != task.version) {
        return Err(ApiError::Conflict(format!(
            "task `{id}` is at version {}, not the expected {v}: it changed since you read it; nothing was changed",
            task.version
        )));
    }
    if !task.status.is_terminal() {
        return Err(ApiError::Conflict(format!(
            "task `{id}` is {}; only DEAD, SUCCEEDED or CANCELLED tasks can be replayed (reschedule a live one)",
            task.status
        )));
    }
    reschedule_call(state, id, "replay", due_ms, Some(task.version), true).await
}

/// Edits a task's payload or retry policy (version + 1) from any status but `RUNNING`, with
/// the limits of creation: payload size, `max_attempts` range, backoff shape. A `DISPATCHED`
/// task goes back to `SCHEDULED` at its due time, so the edit is what runs (see
/// [`TaskUpdate`]).
pub async fn update_task(
    state: &ApiState,
    id: &str,
    req: UpdateTaskRequest,
) -> Result<Task, ApiError> {
    if req.payload.is_none() && req.max_attempts.is_none() && req.backoff.is_none() {
        return Err(ApiError::invalid(
            "payload",
            "nothing to change: give payload, max_attempts or backoff",
        ));
    }
    if let Some(payload) = &req.payload {
        validate_payload(payload, &state.config.limits)?;
    }
    if let Some(m) = req.max_attempts {
        validate_max_attempts(m)?;
    }
    if let Some(b) = &req.backoff {
        validate_backoff(b)?;
    }
    if validate_id(id).is_err() {
        return Err(not_found(id));
    }
    let result = state
        .backend
        .tasks
        .task_update(TaskUpdate {
            task_id: id.to_owned(),
            expected_version: req.version,
            payload: req.payload,
            max_attempts: req.max_attempts,
            backoff: req.backoff,
            now_ms: state.now_ms(),
        })
        .await;
    match result {
        Ok(t) => Ok(t),
        Err(StoreError::NotFound(_)) => Err(not_found(id)),
        Err(StoreError::Conflict { message }) => {
            Err(change_conflict(state, id, "update", req.version, message).await)
        }
        Err(e) => Err(e.into()),
    }
}

fn page_limit(state: &ApiState, limit: Option<usize>, field: &str) -> Result<usize, ApiError> {
    let max_page = state.config.max_page;
    let limit = limit.unwrap_or(state.config.default_page);
    if !(1..=max_page).contains(&limit) {
        return Err(ApiError::bad_request(
            field,
            format!("must be between 1 and {max_page}"),
        ));
    }
    Ok(limit)
}

/// A store page with its `next` key turned into the cursor a client sees.
fn with_client_cursor<T>(page: Page<T>) -> Page<T> {
    Page {
        next: page.next.as_deref().map(encode_cursor),
        items: page.items,
    }
}

/// Lists the DLQ, oldest first, in pages; cursors as in [`list_tasks`].
pub async fn list_dead_letters(
    state: &ApiState,
    after: Option<&str>,
    limit: Option<usize>,
) -> Result<Page<DeadLetter>, ApiError> {
    let limit = page_limit(state, limit, "limit")?;
    let after = after.map(decode_cursor).transpose()?;
    let page = state
        .backend
        .queue
        .dlq_list(DlqList { after, limit })
        .await?;
    Ok(with_client_cursor(page))
}

/// One dead letter by id; 404 if the DLQ holds none.
pub async fn get_letter(state: &ApiState, letter_id: &str) -> Result<DeadLetter, ApiError> {
    state
        .backend
        .queue
        .dlq_get(letter_id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("no dead letter with id `{letter_id}`")))
}

/// Removes one dead letter without replaying its task, and returns it; 404 if the DLQ holds
/// none. The task stays as it is (`DEAD`, usually); replay it later with
/// [`replay_task`] if need be.
pub async fn purge_letter(state: &ApiState, letter_id: &str) -> Result<DeadLetter, ApiError> {
    let letter = get_letter(state, letter_id).await?;
    state
        .backend
        .queue
        .dlq_delete(std::slice::from_ref(&letter.id))
        .await?;
    Ok(letter)
}

/// Replays one letter's task and removes the letter (see [`LetterOutcome`]).
async fn replay_one(
    state: &ApiState,
    letter: &DeadLetter,
) -> Result<(LetterOutcome, Option<Task>), ApiError> {
    let id = &letter.message.task_id;
    let task = match state.backend.tasks.task_get(id).await? {
        None => {
            state
                .backend
                .queue
                .dlq_delete(std::slice::from_ref(&letter.id))
                .await?;
            return Ok((LetterOutcome::TaskMissing, None));
        }
        Some(t) => t,
    };
    let outcome = match task.status {
        TaskStatus::Running => return Ok((LetterOutcome::Skipped, Some(task))),
        s if s.is_terminal() => {
            let t = reschedule_call(
                state,
                id,
                "replay",
                state.now_ms(),
                Some(task.version),
                true,
            )
            .await?;
            (LetterOutcome::Replayed, Some(t))
        }
        _ => (LetterOutcome::AlreadyLive, Some(task)),
    };
    state
        .backend
        .queue
        .dlq_delete(std::slice::from_ref(&letter.id))
        .await?;
    Ok(outcome)
}

/// Replays the task of one dead letter: back to `SCHEDULED`, due now, attempts reset; then
/// the letter is removed. A task already live again only loses its letter.
pub async fn replay_letter(
    state: &ApiState,
    letter_id: &str,
) -> Result<(DeadLetter, LetterOutcome, Option<Task>), ApiError> {
    let letter = get_letter(state, letter_id).await?;
    let (outcome, task) = replay_one(state, &letter).await?;
    Ok((letter, outcome, task))
}

/// Replays one page of the DLQ from `after`. Replayed letters leave the DLQ, so the walk
/// resumes from the last letter handled; `next` is `None` once the end is reached.
pub async fn redrive(
    state: &ApiState,
    after: Option<&str>,
    limit: Option<usize>,
) -> Result<RedriveView, ApiError> {
    let limit = page_limit(state, limit, "limit")?;
    let after = after.map(decode_cursor).transpose()?;
    let page = state
        .backend
        .queue
        .dlq_list(DlqList { after, limit })
        .await?;
    let mut view = RedriveView {
        examined: 0,
        replayed: 0,
        dropped: 0,
        skipped: 0,
        next: None,
    };
    let last = page.items.last().map(|l| l.id.clone());
    for letter in &page.items {
        view.examined += 1;
        match replay_one(state, letter).await {
            Ok((LetterOutcome::Replayed, _)) => view.replayed += 1,
            Ok((LetterOutcome::AlreadyLive | LetterOutcome::TaskMissing, _)) => view.dropped += 1,
            Ok((LetterOutcome::Skipped, _)) | Err(ApiError::Conflict(_)) => view.skipped += 1,
            Err(e) => return Err(e),
        }
    }
    view.next = page.next.and(last).as_deref().map(encode_cursor);
    Ok(view)
}

/// Every lease that exists, by shard.
pub async fn list_shards(state: &ApiState) -> Result<Vec<Lease>, ApiError> {
    let mut leases = state.backend.leases.lease_list().await?;
    leases.sort_by_key(|l| l.shard);
    Ok(leases)
}

/// One poller as the operators see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PollerInfo {
    /// Its name in the leases.
    pub owner: String,
    /// Announced now (its presence has not lapsed), or holding a live lease.
    pub live: bool,
    /// When its presence lapses unless it beats again; `None` if it holds leases without
    /// having announced itself.
    pub presence_expires_ms: Option<i64>,
    /// Shards it holds now (unexpired leases).
    pub shards_held: usize,
}

/// Every poller that announced itself (a lapsed one until a peer forgets it) or holds a live
/// lease in `leases`, live ones first, then by name, judged at `now`. A live poller holding
/// nothing is a standby or is waiting for its share.
pub async fn list_pollers(
    state: &ApiState,
    leases: &[Lease],
    now: i64,
) -> Result<Vec<PollerInfo>, ApiError> {
    let mut pollers: HashMap<String, PollerInfo> = HashMap::new();
    for m in state.backend.leases.member_list().await? {
        pollers.insert(
            m.owner.clone(),
            PollerInfo {
                owner: m.owner,
                live: m.expires_ms > now,
                presence_expires_ms: Some(m.expires_ms),
                shards_held: 0,
            },
        );
    }
    for lease in leases.iter().filter(|l| l.expires_ms > now) {
        let p = pollers
            .entry(lease.owner.clone())
            .or_insert_with(|| PollerInfo {
                owner: lease.owner.clone(),
                live: true,
                presence_expires_ms: None,
                shards_held: 0,
            });
        p.live = true;
        p.shards_held += 1;
    }
    let mut pollers: Vec<PollerInfo> = pollers.into_values().collect();
    pollers.sort_by(|a, b| b.live.cmp(&a.live).then_with(|| a.owner.cmp(&b.owner)));
    Ok(pollers)
}

/// The store and the queue answer: one task read and one queue count.
pub async fn ready(state: &ApiState) -> Result<QueueDepth, ApiError> {
    state.backend.tasks.task_get("readyz-probe").await?;
    let depth = state.backend.queue.queue_depth(state.now_ms()).await?;
    Ok(depth)
}

/// Minutes of due backlog [`stats`] reports: the next hour.
pub const BACKLOG_MINUTES: u32 = 60;

/// What is cheap to know: shards and their leases, queue depth, recent firing, the due
/// backlog of the next hour (one count per shard-minute of the due index, never a scan), and
/// the tasks per status where the backend keeps counters (`counts`, else `None`). `leases`
/// are [`list_shards`]'s, which a caller showing them has read already; `now_ms` the instant
/// they are judged at.
pub async fn stats(state: &ApiState, leases: &[Lease], now_ms: i64) -> Result<StatsView, ApiError> {
    let depth = state.backend.queue.queue_depth(now_ms).await?;
    let from_minute = punctual_core::keys::minute_of(now_ms);
    let counts = state
        .backend
        .tasks
        .due_backlog(DueBacklog {
            from_minute,
            minutes: BACKLOG_MINUTES,
        })
        .await?;
    let backlog = counts
        .into_iter()
        .zip(from_minute..)
        .map(|(due, minute)| BacklogMinute {
            minute: punctual_core::validate::format_rfc3339(minute.saturating_mul(60_000)),
            due,
        })
        .collect();
    let counts = if state.backend.tasks.capabilities().status_counts {
        Some(state.backend.tasks.task_counts().await?.into())
    } else {
        None
    };
    Ok(StatsView {
        backlog,
        counts,
        shard_count: state.backend.tasks.shard_count(),
        shards_held: leases.iter().filter(|l| l.expires_ms > now_ms).count() as u32,
        queue: QueueView::from(depth),
        activity: state.activity.snapshot(now_ms),
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
