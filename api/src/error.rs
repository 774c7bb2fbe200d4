//! The API's one error type and its RFC 9457 problem+json answer.
//!
//! Every failure a handler can meet ends as an [`ApiError`]: user input refused (400, 413,
//! 415, 422, with the field at fault where there is one), a missing or conflicting task (404,
//! 409), and the store's own troubles (503 when it may be retried, 500 otherwise). A
//! [`StoreError`] maps by kind alone: `NotFound` → 404, `Conflict` → 409, `Invalid` → 422,
//! `Unavailable` → 503.
//!
//! Client errors are the client's business: logged at debug, never as errors. Server errors
//! are logged at error with their cause chain, and the client only learns that something
//! failed on our side: a store's message can name files, hosts or SQL.
//!
//! Problem types are relative URIs under `/problems/`, stable identifiers a client may match
//! on (`/problems/invalid`, `/problems/conflict`, ...).

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use punctual_core::StoreError;
use punctual_core::error::BoxError;
use punctual_core::validate::ValidationError;
use serde::{Deserialize, Serialize};

/// The media type of every error answer.
pub const PROBLEM_JSON: &str = "application/problem+json";

/// An RFC 9457 problem detail, as the API answers it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Problem {
    /// The problem type, a URI reference such as `/problems/invalid`.
    #[serde(rename = "type")]
    pub kind: String,
    /// A short summary of the type, the same for every occurrence.
    pub title: String,
    /// The HTTP status code.
    pub status: u16,
    /// What went wrong this time, for a human.
    pub detail: String,
    /// The request field at fault as a JSON path (`target.url`, `tasks[3].run_at`) or a query
    /// parameter (`limit`), when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false, nullable = false)]
    pub field: Option<String>,
}

/// Every way a request can fail.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ApiError {
    /// 400: the request cannot be read (malformed JSON, a bad query parameter or path).
    #[error("bad request: {detail}")]
    BadRequest {
        /// The field or parameter at fault.
        field: Option<String>,
        /// Why.
        detail: String,
    },
    /// 422: the request is well-formed but a field is refused.
    #[error("invalid: {detail}")]
    Invalid {
        /// The field at fault, as a JSON path.
        field: Option<String>,
        /// Why.
        detail: String,
    },
    /// 401: no API key, or a key the server does not know.
    #[error("unauthorized: {0}")]
    Unauthorized(String),
    /// 403: the key's role may not do this.
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// 404: no such task.
    #[error("not found: {0}")]
    NotFound(String),
    /// 409: the request conflicts with the task's state (another request under the same id,
    /// a task that can no longer be cancelled, a stale expected version).
    #[error("conflict: {0}")]
    Conflict(String),
    /// 413: the body is larger than the configured limit.
    #[error("payload too large: {0}")]
    PayloadTooLarge(String),
    /// 415: the body is not JSON.
    #[error("unsupported media type: {0}")]
    UnsupportedMediaType(String),
    /// 503: the store cannot be reached or is overloaded; the request may be retried.
    #[error("store unavailable")]
    Unavailable(#[source] StoreError),
    /// 500: anything else; the cause is logged, never sent.
    #[error("internal error")]
    Internal(#[source] BoxError),
}

impl ApiError {
    /// A 400 naming a field or parameter.
    pub fn bad_request(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::BadRequest {
            field: Some(field.into()),
            detail: detail.into(),
        }
    }

    /// A 422 naming a field.
    pub fn invalid(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Self::Invalid {
            field: Some(field.into()),
            detail: detail.into(),
        }
    }

    /// A 500 with its cause, which is logged and not shown.
    pub fn internal(cause: impl Into<BoxError>) -> Self {
        Self::Internal(cause.into())
    }

    /// The HTTP status this error answers with.
    pub fn status(&self) -> StatusCode {
        match self {
            Self::BadRequest { .. } => StatusCode::BAD_REQUEST,
            Self::Invalid { .. } => StatusCode::UNPROCESSABLE_ENTITY,
            Self::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            Self::Forbidden(_) => StatusCode::FORBIDDEN,
            Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::Conflict(_) => StatusCode::CONFLICT,
            Self::PayloadTooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            Self::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The field at fault, if any.
    pub fn field(&self) -> Option<&str> {
        match self {
            Self::BadRequest { field, .. } | Self::Invalid { field, .. } => field.as_deref(),
            _ => None,
        }
    }

    /// The problem detail the client receives. Server errors say nothing internal.
    pub fn problem(&self) -> Problem {
        let (slug, title, detail) = match self {
            Self::BadRequest { detail, .. } => ("bad-request", "Bad request", detail.clone()),
            Self::Invalid { detail, .. } => ("invalid", "Invalid request", detail.clone()),
            Self::Unauthorized(d) => ("unauthorized", "Unauthorized", d.clone()),
            Self::Forbidden(d) => ("forbidden", "Forbidden", d.clone()),
            Self::NotFound(d) => ("not-found", "Not found", d.clone()),
            Self::Conflict(d) => ("conflict", "Conflict", d.clone()),
            Self::PayloadTooLarge(d) => ("payload-too-large", "Request body too large", d.clone()),
            Self::UnsupportedMediaType(d) => (
                "unsupported-media-type",
                "Unsupported media type",
                d.clone(),
            ),
            Self::Unavailable(_) => (
                "unavailable",
                "Service unavailable",
                "the task store is unavailable; try again shortly".to_owned(),
            ),
            Self::Internal(_) => (
                "internal",
                "Internal server error",
                "the request failed on the server; the cause has been logged".to_owned(),
            ),
        };
        Problem {
            kind: format!("/problems/{slug}"),
            title: title.to_owned(),
            status: self.status().as_u16(),
            detail,
            field: self.field().map(str::to_owned),
        }
    }
}

impl From<ValidationError> for ApiError {
    fn from(e: ValidationError) -> Self {
        Self::Invalid {
            field: Some(e.field),
            detail: e.message,
        }
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound(what) => Self::NotFound(what),
            StoreError::Conflict { message } => Self::Conflict(message),
            StoreError::Invalid { field, message } => Self::Invalid {
                field: Some(field),
                detail: message,
            },
            e @ StoreError::Unavailable { .. } => Self::Unavailable(e),
            other => Self::Internal(Box::new(other)),
        }
    }
}

/// The error and its causes, `a: b: c`, for the log.
fn chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        out.push_str(": ");
        out.push_str(&cause.to_string());
        next = cause.source();
    }
    out
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        if status.is_server_error() {
            tracing::error!(status = status.as_u16(), error = %chain(&self), "request failed");
        } else {
            tracing::debug!(status = status.as_u16(), error = %self, "request refused");
        }
        let body = serde_json::to_vec(&self.problem()).unwrap_or_default();
        let mut response = (status, body).into_response();
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        if status == StatusCode::UNAUTHORIZED {
            headers.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if status == StatusCode::SERVICE_UNAVAILABLE {
            headers.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        }
        response
    }
}
