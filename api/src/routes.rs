//! The handlers: HTTP in, [`service`](crate::service) call, [`view`](crate::view) out.
//!
//! Nothing here decides anything the console or the bench would need; it only reads the
//! request (every rejection an [`ApiError`]) and shapes the answer. Each handler carries its
//! OpenAPI description (`#[utoipa::path]`), and the router is built from those same handlers
//! (`utoipa_axum::routes!`), so the served document cannot miss a route.

use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use punctual_core::store::PutOutcome;
use punctual_core::validate::{CreateTask, format_rfc3339};

use crate::ApiState;
use crate::error::{ApiError, Problem};
use crate::extract::{ApiJson, OptionalJson, query_pairs};
use crate::service;
use crate::view::{
    BatchRequest, BatchResponse, CancelRequest, DeadLetterView, DlqPage, Health, LetterReplayView,
    PollerView, Ready, RedriveRequest, RedriveView, RescheduleRequest, ShardView, ShardsView,
    StatsView, TaskListQuery, TaskPage, TaskView, UpdateTaskRequest,
};

type ApiResult<T> = Result<T, ApiError>;

/// OpenAPI tag of the task routes.
pub(crate) const TASKS: &str = "tasks";
/// OpenAPI tag of the dead-letter routes.
pub(crate) const DLQ: &str = "dead letters";
/// OpenAPI tag of the operations routes.
pub(crate) const OPS: &str = "operations";

fn path_id(path: Result<Path<String>, PathRejection>) -> ApiResult<String> {
    path.map(|Path(id)| id).map_err(|r| ApiError::BadRequest {
        field: Some("id".into()),
        detail: r.body_text(),
    })
}

/// A page size from the query string.
fn parse_limit(value: &str, max_page: usize) -> ApiResult<usize> {
    value.parse::<usize>().map_err(|_| {
        ApiError::bad_request(
            "limit",
            format!("{value:?} is not a number; give 1 to {max_page}"),
        )
    })
}

/// Fills a query parameter's slot, refusing one given twice.
fn set_once<T>(slot: &mut Option<T>, value: T, name: &str) -> ApiResult<()> {
    if slot.replace(value).is_some() {
        return Err(ApiError::bad_request(
            name.to_owned(),
            format!("`{name}` given more than once"),
        ));
    }
    Ok(())
}

/// A query parameter the route does not take; `takes` lists those it does.
fn unknown_parameter(name: &str, takes: &str) -> ApiError {
    ApiError::bad_request(
        name.to_owned(),
        format!("unknown query parameter `{name}`; this route takes {takes}"),
    )
}

/// Reads `after` and `limit` from a query string, refusing anything else.
fn page_query(query: Option<&str>, max_page: usize) -> ApiResult<(Option<String>, Option<usize>)> {
    let mut after = None;
    let mut limit = None;
    for (name, value) in query_pairs(query)? {
        match name.as_str() {
            "after" => set_once(&mut after, value, &name)?,
            "limit" => set_once(&mut limit, parse_limit(&value, max_page)?, &name)?,
            _ => return Err(unknown_parameter(&name, "`after` and `limit`")),
        }
    }
    Ok((after, limit))
}

/// Reads `GET /v1/tasks`'s query: the filters, `after` and `limit`, each at most once,
/// refusing anything else (400 naming the parameter).
fn task_list_query(query: Option<&str>, max_page: usize) -> ApiResult<TaskListQuery> {
    let mut q = TaskListQuery::default();
    for (name, value) in query_pairs(query)? {
        let slot = match name.as_str() {
            "status" => &mut q.status,
            "due_from" => &mut q.due_from,
            "due_to" => &mut q.due_to,
            "target" => &mut q.target,
            "id_prefix" => &mut q.id_prefix,
            "after" => &mut q.after,
            "limit" => {
                set_once(&mut q.limit, parse_limit(&value, max_page)?, &name)?;
                continue;
            }
            _ => {
                return Err(unknown_parameter(
                    &name,
                    "status, due_from, due_to, target, id_prefix, after and limit",
                ));
            }
        };
        set_once(slot, value, &name)?;
    }
    Ok(q)
}

/// Create a task. The same request under the same client id again is a 200 with the stored
/// task; a different request under that id is a 409.
#[utoipa::path(post, path = "/v1/tasks", tag = TASKS,
    request_body(content = crate::schema::CreateTaskDoc, content_type = "application/json"),
    responses(
        (status = 201, description = "Created", body = TaskView,
            headers(("Location" = String, description = "The task's URL"))),
        (status = 200, description = "The same request had already created it", body = TaskView),
        (status = 409, description = "The id holds a different task", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "A field is refused", body = Problem, content_type = "application/problem+json"),
    ))]
pub(crate) async fn create_task(
    State(state): State<ApiState>,
    ApiJson(req): ApiJson<CreateTask>,
) -> ApiResult<Response> {
    Ok(match service::create_task(&state, req).await? {
        PutOutcome::Created(t) => {
            // Task ids are restricted to URL-safe characters, so this is a valid header value.
            let location = format!("/v1/tasks/{}", t.task_id);
            (
                StatusCode::CREATED,
                [(header::LOCATION, location)],
                Json(TaskView::from(t)),
            )
                .into_response()
        }
        PutOutcome::Existing(t) => (StatusCode::OK, Json(TaskView::from(t))).into_response(),
    })
}

/// Create 1 to 1,000 tasks; one result per task, in order. Any invalid item refuses the
/// whole batch (422 naming `tasks[i].field`) and stores nothing.
#[utoipa::path(post, path = "/v1/tasks/batch", tag = TASKS,
    request_body(content = BatchRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "One result per task", body = BatchResponse),
        (status = 422, description = "An item is refused", body = Problem, content_type = "application/problem+json"),
    ))]
pub(crate) async fn create_batch(
    State(state): State<ApiState>,
    ApiJson(req): ApiJson<BatchRequest>,
) -> ApiResult<Json<BatchResponse>> {
    let results = service::create_tasks(&state, req.tasks).await?;
    Ok(Json(BatchResponse {
        results: results.into_iter().map(|r| r.into_view()).collect(),
    }))
}

/// Read a task.
#[utoipa::path(get, path = "/v1/tasks/{id}", tag = TASKS,
    params(("id" = String, Path, description = "The task id")),
    responses(
        (status = 200, description = "The task", body = TaskView),
        (status = 404, description = "No such task", body = Problem, content_type = "application/problem+json"),
    ))]
pub(crate) async fn get_task(
    State(state): State<ApiState>,
    path: Result<Path<String>, PathRejection>,
) -> ApiResult<Json<TaskView>> {
    let id = path_id(path)?;
    Ok(Json(service::get_task(&state, &id).await?.into()))
}

/// Change a task's payload or retry policy (`max_attempts`, `backoff`) from any status but
/// `RUNNING`: version + 1, fields left out kept. A `DISPATCHED` task goes back to `SCHEDULED`
/// at its due time, so the edited task is what runs; a finished one stays finished until a
/// replay. Give `version` to act only on the version you saw.
#[utoipa::path(patch, path = "/v1/tasks/{id}", tag = TASKS,
    params(("id" = String, Path, description = "The task id")),
    request_body(content = UpdateTaskRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The updated task", body = TaskView),
        (status = 404, description = "No such task", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Running, or at another version", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "A field is refused", body = Problem, content_type = "application/problem+json"),
    ))]
pub(crate) async fn update_task(
    State(state): State<ApiState>,
    path: Result<Path<String>, PathRejection>,
    ApiJson(req): ApiJson<UpdateTaskRequest>,
) -> ApiResult<Json<TaskView>> {
    let id = path_id(path)?;
    Ok(Json(service::update_task(&state, &id, req).await?.into()))
}

/// Read the task whose id is `batch` (the batch route's path shadows `/v1/tasks/{id}`).
#[utoipa::path(get, path = "/v1/tasks/batch", tag = TASKS,
    responses(
        (status = 200, description = "The task", body = TaskView),
        (status = 404, description = "No such task", body = Problem, content_type = "application/problem+json"),
    ))]
pub(crate) async fn get_task_named_batch(
    State(state): State<ApiState>,
) -> ApiResult<Json<TaskView>> {
    Ok(Json(service::get_task(&state, "batch").await?.into()))
}

/// Cancel a task (`SCHEDULED`, `DISPATCHED` or `RETRY_WAIT`); give `version` to act only on
/// the version you saw. The body is optional.
#[utoipa::path(post, path = "/v1/tasks/{id}/cancel", tag = TASKS,
    params(("id" = String, Path, description = "The task id")),
    request_body(content = CancelRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The cancelled task", body = TaskView),
        (status = 404, description = "No such task", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Running, finished, or at another version", body = Problem, content_type = "application/problem+json"),
    ))]
pub(crate) async fn cancel_task(
    State(state): State<ApiState>,
    path: Result<Path<String>, PathRejection>,
    OptionalJson(body): OptionalJson<CancelRequest>,
) -> ApiResult<Json<TaskView>> {
    let id = path_id(path)?;
    let version = body.and_then(|b| b.version);
    Ok(Json(
        service::cancel_task(&state, &id, version).await?.into(),
    ))
}

/// Move a task to a new due time (`run_at` or `delay`), from any status but `RUNNING`:
/// `SCHEDULED`, version + 1.
#[utoipa::path(post, path = "/v1/tasks/{id}/reschedule", tag = TASKS,
    params(("id" = String, Path, description = "The task id")),
    request_body(content = RescheduleRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The rescheduled task", body = TaskView),
        (status = 404, description = "No such task", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Running, or at another version", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "A field is refused", body = Problem, content_type = "application/problem+json"),
    ))]
pub(crate) async fn reschedule_task(
    State(state): State<ApiState>,
    path: Result<Path<String>, PathRejection>,
    ApiJson(req): ApiJson<RescheduleRequest>,
) -> ApiResult<Json<TaskView>> {
    let id = path_id(path)?;
    Ok(Json(
        service::reschedule_task(&state, &id, req).await?.into(),
    ))
}

/// Run a finished task (`DEAD`, `SUCCEEDED` or `CANCELLED`) again: `SCHEDULED`, attempts
/// reset, due now or at `run_at`/`delay`. The body is optional.
#[utoipa::path(post, path = "/v1/tasks/{id}/replay", tag = TASKS,
    params(("id" = String, Path, description = "The task id")),
    request_body(content = RescheduleRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The replayed task", body = TaskView),
        (status = 404, description = "No such task", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Not finished, or at another version", body = Problem, content_type = "application/problem+json"),
    ))]
pub(crate) async fn replay_task(
    State(state): State<ApiState>,
    path: Result<Path<String>, PathRejection>,
    OptionalJson(body): OptionalJson<RescheduleRequest>,
) -> ApiResult<Json<TaskView>> {
    let id = path_id(path)?;
    Ok(Json(
        service::replay_task(&state, &id, body.unwrap_or_default())
            .await?
            .into(),
    ))
}

/// List tasks in due order, in pages. Without `status`, the tasks waiting in the due index
/// (what will fire); the other filters narrow either. The aws backend lists `SCHEDULED`,
/// `RETRY_WAIT`, `DEAD` and `CANCELLED` only (a 400 names `status` otherwise), and a page
/// there may hold fewer than `limit` tasks, even none, while `next` is set.
#[utoipa::path(get, path = "/v1/tasks", tag = TASKS,
    params(
        ("status" = Option<crate::schema::TaskStatusDoc>, Query,
            description = "Only tasks in this status; absent: the tasks waiting to fire"),
        ("due_from" = Option<String>, Query, format = DateTime,
            description = "Only tasks due at or after this time (RFC 3339)"),
        ("due_to" = Option<String>, Query, format = DateTime,
            description = "Only tasks due before this time (RFC 3339, exclusive)"),
        ("target" = Option<crate::schema::TargetKindDoc>, Query,
            description = "Only tasks whose target is of this kind"),
        ("id_prefix" = Option<String>, Query, pattern = r"^[A-Za-z0-9._:-]{1,128}$",
            description = "Only tasks whose id starts with this"),
        ("after" = Option<String>, Query, description = "The `next` cursor of the previous page"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 1000,
            description = "Page size, 1 to the server's maximum (1,000 by default)"),
    ),
    responses(
        (status = 200, description = "A page of tasks", body = TaskPage),
        (status = 400, description = "A bad parameter", body = Problem, content_type = "application/problem+json"),
    ))]
pub(crate) async fn list_pending(
    State(state): State<ApiState>,
    RawQuery(query): RawQuery,
) -> ApiResult<Json<TaskPage>> {
    let q = task_list_query(query.as_deref(), state.config.max_page)?;
    let page = service::list_tasks(&state, &q).await?;
    Ok(Json(TaskPage {
        tasks: page.items.into_iter().map(TaskView::from).collect(),
        next: page.next,
    }))
}

/// List the dead-letter queue, oldest first.
#[utoipa::path(get, path = "/v1/dlq", tag = DLQ,
    params(
        ("after" = Option<String>, Query, description = "The `next` cursor of the previous page"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 1000,
            description = "Page size, 1 to the server's maximum (1,000 by default)"),
    ),
    responses(
        (status = 200, description = "A page of dead letters", body = DlqPage),
        (status = 400, description = "A bad parameter", body = Problem, content_type = "application/problem+json"),
    ))]
pub(crate) async fn list_dlq(
    State(state): State<ApiState>,
    RawQuery(query): RawQuery,
) -> ApiResult<Json<DlqPage>> {
    let (after, limit) = page_query(query.as_deref(), state.config.max_page)?;
    let page = service::list_dead_letters(&state, after.as_deref(), limit).await?;
    Ok(Json(DlqPage {
        letters: page.items.into_iter().map(DeadLetterView::from).collect(),
        next: page.next,
    }))
}

/// Read one dead letter.
#[utoipa::path(get, path = "/v1/dlq/{id}", tag = DLQ,
    params(("id" = String, Path, description = "The letter's id (from GET /v1/dlq)")),
    responses(
        (status = 200, description = "The letter", body = DeadLetterView),
        (status = 404, description = "No such letter", body = Problem, content_type = "application/problem+json"),
    ))]
pub(crate) async fn get_letter(
    State(state): State<ApiState>,
    path: Result<Path<String>, PathRejection>,
) -> ApiResult<Json<DeadLetterView>> {
    let id = path_id(path)?;
    Ok(Json(service::get_letter(&state, &id).await?.into()))
}

/// Purge one dead letter: remove it without replaying its task (which stays as it is).
#[utoipa::path(delete, path = "/v1/dlq/{id}", tag = DLQ,
    params(("id" = String, Path, description = "The letter's id (from GET /v1/dlq)")),
    responses(
        (status = 200, description = "The letter removed", body = DeadLetterView),
        (status = 404, description = "No such letter", body = Problem, content_type = "application/problem+json"),
    ))]
pub(crate) async fn purge_letter(
    State(state): State<ApiState>,
    path: Result<Path<String>, PathRejection>,
) -> ApiResult<Json<DeadLetterView>> {
    let id = path_id(path)?;
    Ok(Json(service::purge_letter(&state, &id).await?.into()))
}

/// Replay one dead letter's task (due now, attempts reset) and remove the letter.
#[utoipa::path(post, path = "/v1/dlq/{id}/replay", tag = DLQ,
    params(("id" = String, Path, description = "The letter's id (from GET /v1/dlq)")),
    responses(
        (status = 200, description = "What happened", body = LetterReplayView),
        (status = 404, description = "No such letter", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The task changed meanwhile", body = Problem, content_type = "application/problem+json"),
    ))]
pub(crate) async fn replay_letter(
    State(state): State<ApiState>,
    path: Result<Path<String>, PathRejection>,
) -> ApiResult<Json<LetterReplayView>> {
    let id = path_id(path)?;
    let (letter, outcome, task) = service::replay_letter(&state, &id).await?;
    Ok(Json(LetterReplayView {
        letter_id: letter.id,
        task_id: letter.message.task_id,
        outcome,
        task: task.map(TaskView::from),
    }))
}

/// Replay one page of the DLQ; call again with `after = next` until `next` is `null`.
#[utoipa::path(post, path = "/v1/dlq/redrive", tag = DLQ,
    request_body(content = RedriveRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "What this page moved", body = RedriveView),
        (status = 400, description = "A bad cursor or limit", body = Problem, content_type = "application/problem+json"),
    ))]
pub(crate) async fn redrive(
    State(state): State<ApiState>,
    OptionalJson(body): OptionalJson<RedriveRequest>,
) -> ApiResult<Json<RedriveView>> {
    let body = body.unwrap_or_default();
    Ok(Json(
        service::redrive(&state, body.after.as_deref(), body.limit).await?,
    ))
}

/// Every shard's lease (owner, epoch, expiry and watermark), and every poller with the shards
/// it holds.
#[utoipa::path(get, path = "/v1/shards", tag = OPS,
    responses((status = 200, description = "The leases and the pollers", body = ShardsView)))]
pub(crate) async fn shards(State(state): State<ApiState>) -> ApiResult<Json<ShardsView>> {
    let now_ms = state.now_ms();
    let leases = service::list_shards(&state).await?;
    let pollers = service::list_pollers(&state, &leases, now_ms).await?;
    Ok(Json(ShardsView {
        shard_count: state.backend.tasks.shard_count(),
        pollers: pollers
            .into_iter()
            .map(|p| PollerView {
                owner: p.owner,
                live: p.live,
                shards_held: p.shards_held,
                presence_expires_at: p.presence_expires_ms.map(format_rfc3339),
            })
            .collect(),
        leases: leases
            .into_iter()
            .map(|l| ShardView {
                shard: l.shard,
                held: l.expires_ms > now_ms,
                owner: l.owner,
                epoch: l.epoch,
                expires_at: format_rfc3339(l.expires_ms),
                watermark: format_rfc3339(l.watermark_minute.saturating_mul(60_000)),
            })
            .collect(),
    }))
}

/// Queue depth, shards held, and this process's firing over the last minute.
#[utoipa::path(get, path = "/v1/stats", tag = OPS,
    responses((status = 200, description = "The numbers", body = StatsView)))]
pub(crate) async fn stats(State(state): State<ApiState>) -> ApiResult<Json<StatsView>> {
    let now_ms = state.now_ms();
    let leases = service::list_shards(&state).await?;
    Ok(Json(service::stats(&state, &leases, now_ms).await?))
}

/// The process is up. Needs no key.
#[utoipa::path(get, path = "/healthz", tag = OPS,
    responses((status = 200, description = "Up", body = Health)))]
pub(crate) async fn healthz() -> Json<Health> {
    Json(Health {
        status: "ok".into(),
    })
}

/// The store and the queue answer.
#[utoipa::path(get, path = "/readyz", tag = OPS,
    responses(
        (status = 200, description = "Ready", body = Ready),
        (status = 503, description = "The store or queue cannot be reached", body = Problem, content_type = "application/problem+json"),
    ))]
pub(crate) async fn readyz(State(state): State<ApiState>) -> ApiResult<Json<Ready>> {
    let depth = service::ready(&state).await?;
    Ok(Json(Ready {
        status: "ready".into(),
        queue: depth.into(),
    }))
}

/// Prometheus metrics (text exposition format).
#[utoipa::path(get, path = "/metrics", tag = OPS,
    responses((status = 200, description = "Metrics", body = String, content_type = "text/plain")))]
pub(crate) async fn metrics(State(state): State<ApiState>) -> Response {
    // The queue depth gauge is read at scrape time: one cheap count, no background loop.
    if let Ok(d) = state.backend.queue.queue_depth(state.now_ms()).await {
        use crate::metrics::QUEUE_DEPTH;
        metrics::gauge!(QUEUE_DEPTH, "state" => "ready").set(d.ready as f64);
        metrics::gauge!(QUEUE_DEPTH, "state" => "in_flight").set(d.in_flight as f64);
        metrics::gauge!(QUEUE_DEPTH, "state" => "dead").set(d.dead as f64);
    }
    let body = state
        .metrics
        .as_ref()
        .map(|h| h.render())
        .unwrap_or_default();
    let mut resp = body.into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    resp
}

/// This API's OpenAPI 3.1 document.
#[utoipa::path(get, path = "/v1/openapi.json", tag = OPS,
    responses((status = 200, description = "The OpenAPI document", body = Object)))]
pub(crate) async fn openapi_json(State(state): State<ApiState>) -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        state.openapi.as_ref().clone(),
    )
        .into_response()
}

/// A page that renders the OpenAPI document; it loads nothing from elsewhere.
#[utoipa::path(get, path = "/v1/docs", tag = OPS,
    responses((status = 200, description = "The API reference", body = String, content_type = "text/html")))]
pub(crate) async fn docs() -> Response {
    (
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        crate::docs::PAGE,
    )
        .into_response()
}
