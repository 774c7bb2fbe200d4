//! The handlers: HTTP in, [`service`](crate::service) call, [`view`](crate::view) out.
//!
//! Nothing here decides anything the console or the bench would need; it only reads the
//! request (every rejection an [`ApiError`]) and shapes the answer.

use axum::Json;
use axum::extract::rejection::PathRejection;
use axum::extract::{Path, RawQuery, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use punctual_core::store::PutOutcome;
use punctual_core::validate::CreateTask;

use crate::ApiState;
use crate::error::ApiError;
use crate::extract::{ApiJson, OptionalJson, query_pairs};
use crate::service;
use crate::view::{BatchRequest, BatchResponse, CancelRequest, Health, TaskPage, TaskView};

type ApiResult<T> = Result<T, ApiError>;

fn path_id(path: Result<Path<String>, PathRejection>) -> ApiResult<String> {
    path.map(|Path(id)| id).map_err(|r| ApiError::BadRequest {
        field: Some("id".into()),
        detail: r.body_text(),
    })
}

/// `POST /v1/tasks`
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

/// `POST /v1/tasks/batch`
pub(crate) async fn create_batch(
    State(state): State<ApiState>,
    ApiJson(req): ApiJson<BatchRequest>,
) -> ApiResult<Json<BatchResponse>> {
    let results = service::create_tasks(&state, req.tasks).await?;
    Ok(Json(BatchResponse {
        results: results.into_iter().map(|r| r.into_view()).collect(),
    }))
}

/// `GET /v1/tasks/{id}`
pub(crate) async fn get_task(
    State(state): State<ApiState>,
    path: Result<Path<String>, PathRejection>,
) -> ApiResult<Json<TaskView>> {
    let id = path_id(path)?;
    Ok(Json(service::get_task(&state, &id).await?.into()))
}

/// `GET /v1/tasks/batch`: the task whose id is `batch`, which the static route shadows.
pub(crate) async fn get_task_named_batch(
    State(state): State<ApiState>,
) -> ApiResult<Json<TaskView>> {
    Ok(Json(service::get_task(&state, "batch").await?.into()))
}

/// `POST /v1/tasks/{id}/cancel`
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

/// `GET /v1/tasks?after=&limit=`
pub(crate) async fn list_pending(
    State(state): State<ApiState>,
    RawQuery(query): RawQuery,
) -> ApiResult<Json<TaskPage>> {
    let mut after = None;
    let mut limit = None;
    for (name, value) in query_pairs(query.as_deref())? {
        let slot_taken = match name.as_str() {
            "after" => after.replace(value).is_some(),
            "limit" => {
                let n = value.parse::<usize>().map_err(|_| {
                    ApiError::bad_request(
                        "limit",
                        format!(
                            "{value:?} is not a number; give 1 to {}",
                            state.config.max_page
                        ),
                    )
                })?;
                limit.replace(n).is_some()
            }
            _ => {
                return Err(ApiError::bad_request(
                    name.clone(),
                    format!(
                        "unknown query parameter `{name}`; this route takes `after` and `limit`"
                    ),
                ));
            }
        };
        if slot_taken {
            return Err(ApiError::bad_request(
                name.clone(),
                format!("`{name}` given more than once"),
            ));
        }
    }
    let page = service::list_pending(&state, after.as_deref(), limit).await?;
    Ok(Json(TaskPage {
        tasks: page.items.into_iter().map(TaskView::from).collect(),
        next: page.next,
    }))
}

/// `GET /healthz`
pub(crate) async fn healthz() -> Json<Health> {
    Json(Health {
        status: "ok".into(),
    })
}
