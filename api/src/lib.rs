//! punctual's REST API: an axum [`Router`] over the store traits.
//!
//! ```text
//!   HTTP request ──> extract (ApiJson, query, path) ──> routes ──> service ──> Backend (traits)
//!        ^                   |  refuses bad input                 |  validates, one store call
//!        '── problem+json <──'──────────── ApiError <─────────────'
//! ```
//!
//! Three layers, each with one job:
//!
//! - [`service`] is the API's behaviour without HTTP: validate user input, make one store call,
//!   decide what an outcome means (created, existing, conflict). The handlers, the console and
//!   the `punctual bench` command all call it, so they cannot disagree.
//! - The routes (private) translate HTTP to service calls and [`view`]s back: times become RFC
//!   3339 strings here and nowhere deeper (epoch milliseconds in the domain).
//! - [`ApiError`] is the one error type: every failure, from a malformed body to a store that
//!   cannot be reached, becomes an RFC 9457 `application/problem+json` answer naming the field
//!   at fault. Client errors (4xx) are logged at debug; server errors are logged with their
//!   cause at error and say nothing internal to the client.
//!
//! Bad input is refused at the edge and changes nothing: a request is validated completely
//! (a batch, every item of it) before the store is called.
//!
//! [`router`] returns a `Router` with its state already applied, so the binary can merge it
//! with the console's router and serve both, or hand it to `lambda_http`.

use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use punctual_core::Backend;
use punctual_core::clock::SharedClock;
use punctual_core::validate::{Limits, ValidationError};

mod error;
mod extract;
mod routes;
pub mod service;
pub mod view;

pub use error::{ApiError, Problem};

/// Largest page of `GET /v1/tasks` by default.
pub const DEFAULT_MAX_PAGE: usize = 1_000;
/// Page size of `GET /v1/tasks` when the request gives no `limit`, by default.
pub const DEFAULT_PAGE: usize = 100;
/// Bytes a request body may hold beyond the largest payload, by default: 4 MiB, room for a
/// batch of [`MAX_BATCH`](punctual_core::validate::MAX_BATCH) tasks with small payloads.
pub const DEFAULT_BODY_HEADROOM_BYTES: usize = 4 * 1024 * 1024;

/// The API's configuration. Only the binary reads flags and the environment to fill it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiConfig {
    /// Limits on user input (payload size, how far ahead). Default [`Limits::default`].
    pub limits: Limits,
    /// Largest `limit` accepted by `GET /v1/tasks`. Default [`DEFAULT_MAX_PAGE`].
    pub max_page: usize,
    /// Page size when `GET /v1/tasks` gives no `limit`. Default [`DEFAULT_PAGE`].
    pub default_page: usize,
    /// Bytes a request body may hold beyond `limits.max_payload_bytes`; larger bodies are
    /// refused with 413. Default [`DEFAULT_BODY_HEADROOM_BYTES`].
    pub body_headroom_bytes: usize,
}

impl Default for ApiConfig {
    fn default() -> Self {
        Self {
            limits: Limits::default(),
            max_page: DEFAULT_MAX_PAGE,
            default_page: DEFAULT_PAGE,
            body_headroom_bytes: DEFAULT_BODY_HEADROOM_BYTES,
        }
    }
}

impl ApiConfig {
    /// Checks the configuration, naming the field at fault.
    pub fn validate(&self) -> Result<(), ValidationError> {
        if self.limits.max_payload_bytes == 0 {
            return Err(ValidationError::new(
                "limits.max_payload_bytes",
                "must be positive",
            ));
        }
        if self.limits.max_ahead_ms <= 0 {
            return Err(ValidationError::new(
                "limits.max_ahead_ms",
                "must be positive",
            ));
        }
        if self.max_page == 0 {
            return Err(ValidationError::new("max_page", "must be positive"));
        }
        if !(1..=self.max_page).contains(&self.default_page) {
            return Err(ValidationError::new(
                "default_page",
                format!("must be between 1 and max_page ({})", self.max_page),
            ));
        }
        Ok(())
    }

    /// The largest request body accepted: the payload limit plus the headroom.
    pub fn max_body_bytes(&self) -> usize {
        self.limits
            .max_payload_bytes
            .saturating_add(self.body_headroom_bytes)
    }
}

/// What every handler and service call needs: the store, the clock, the configuration.
///
/// Cheap to clone: the backend and clock are shared pointers, the configuration is behind an
/// `Arc`.
#[derive(Debug, Clone)]
pub struct ApiState {
    /// The store's three roles.
    pub backend: Backend,
    /// Where "now" comes from: validation of `delay`, the bucket of a task already due.
    pub clock: SharedClock,
    /// The configuration.
    pub config: Arc<ApiConfig>,
}

impl ApiState {
    /// A state over `backend`. The configuration is taken as given: check it first with
    /// [`ApiConfig::validate`] (the binary does), or use [`ApiState::try_new`].
    pub fn new(backend: Backend, clock: SharedClock, config: ApiConfig) -> Self {
        Self {
            backend,
            clock,
            config: Arc::new(config),
        }
    }

    /// A state over `backend`, after checking `config`.
    pub fn try_new(
        backend: Backend,
        clock: SharedClock,
        config: ApiConfig,
    ) -> Result<Self, ValidationError> {
        config.validate()?;
        Ok(Self::new(backend, clock, config))
    }

    /// Now, epoch milliseconds, from the state's clock.
    pub fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }
}

/// The API's routes, with `state` applied:
///
/// | route | answer |
/// |---|---|
/// | `POST /v1/tasks` | 201 created, 200 same request again, 409 same id different request |
/// | `POST /v1/tasks/batch` | 200 `{results: [{id, status, task?}]}`; 422 if any item is invalid |
/// | `GET /v1/tasks/{id}` | 200 the task, 404 |
/// | `POST /v1/tasks/{id}/cancel` | 200 the cancelled task, 404, 409 if it cannot be cancelled |
/// | `GET /v1/tasks?after=&limit=` | 200 `{tasks, next}`: waiting tasks in due order |
/// | `GET /healthz` | 200 `{"status":"ok"}` |
///
/// Request bodies are limited to [`ApiConfig::max_body_bytes`].
pub fn router(state: ApiState) -> Router {
    let body_limit = state.config.max_body_bytes();
    Router::new()
        .route(
            "/v1/tasks",
            post(routes::create_task).get(routes::list_pending),
        )
        // A static segment wins over `{id}` in the router, so the task whose id is "batch" is
        // served here too.
        .route(
            "/v1/tasks/batch",
            post(routes::create_batch).get(routes::get_task_named_batch),
        )
        .route("/v1/tasks/{id}", get(routes::get_task))
        .route("/v1/tasks/{id}/cancel", post(routes::cancel_task))
        .route("/healthz", get(routes::healthz))
        .layer(DefaultBodyLimit::max(body_limit))
        .with_state(state)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_validation_names_the_field() {
        assert_eq!(ApiConfig::default().validate(), Ok(()));
        assert_eq!(
            ApiConfig::default().max_body_bytes(),
            Limits::default().max_payload_bytes + DEFAULT_BODY_HEADROOM_BYTES
        );
        let field = |c: ApiConfig| c.validate().unwrap_err().field;
        let d = ApiConfig::default;
        assert_eq!(field(ApiConfig { max_page: 0, ..d() }), "max_page");
        assert_eq!(
            field(ApiConfig {
                default_page: 0,
                ..d()
            }),
            "default_page"
        );
        assert_eq!(
            field(ApiConfig {
                max_page: 50,
                ..d()
            }),
            "default_page"
        );
        let limits = |max_payload_bytes, max_ahead_ms| Limits {
            max_payload_bytes,
            max_ahead_ms,
        };
        assert_eq!(
            field(ApiConfig {
                limits: limits(0, 1),
                ..d()
            }),
            "limits.max_payload_bytes"
        );
        assert_eq!(
            field(ApiConfig {
                limits: limits(1, 0),
                ..d()
            }),
            "limits.max_ahead_ms"
        );
    }
}
