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
//!
//! Every route is declared once, on its handler (`#[utoipa::path]`), and registered through
//! `utoipa_axum`, so the OpenAPI 3.1 document served at `/v1/openapi.json` ([`openapi`]) is
//! generated from the very routes served. Every route but `GET /healthz` sits behind the
//! [`auth`] middleware: a Bearer API key whose role is high enough for the route.

use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use metrics_exporter_prometheus::PrometheusHandle;
use punctual_core::Backend;
use punctual_core::clock::SharedClock;
use punctual_core::validate::{Limits, ValidationError};
use utoipa::openapi::OpenApi;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub mod auth;
mod docs;
mod error;
mod extract;
pub mod metrics;
mod routes;
mod schema;
pub mod service;
pub mod view;

pub use auth::{KeyRing, Role};
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
    /// The API keys accepted. Default: none, which refuses every route but `/healthz` (the
    /// binary generates an admin key on a first start rather than leave this empty).
    pub keys: KeyRing,
}

impl Default for ApiConfig {
    fn default() -> Self {
        Self {
            limits: Limits::default(),
            max_page: DEFAULT_MAX_PAGE,
            default_page: DEFAULT_PAGE,
            body_headroom_bytes: DEFAULT_BODY_HEADROOM_BYTES,
            keys: KeyRing::new(),
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
#[derive(Clone)]
pub struct ApiState {
    /// The store's three roles.
    pub backend: Backend,
    /// Where "now" comes from: validation of `delay`, the bucket of a task already due.
    pub clock: SharedClock,
    /// The configuration.
    pub config: Arc<ApiConfig>,
    /// The Prometheus recorder's handle that `GET /metrics` renders; `None` answers an empty
    /// page (no recorder installed).
    pub metrics: Option<PrometheusHandle>,
    /// Recent firing, for `GET /v1/stats`; the binary feeds it from worker events.
    pub activity: Arc<metrics::Activity>,
    /// The OpenAPI document, rendered once.
    openapi: Arc<String>,
}

impl std::fmt::Debug for ApiState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiState")
            .field("backend", &self.backend)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl ApiState {
    /// A state over `backend`. The configuration is taken as given: check it first with
    /// [`ApiConfig::validate`] (the binary does), or use [`ApiState::try_new`].
    pub fn new(backend: Backend, clock: SharedClock, config: ApiConfig) -> Self {
        Self {
            backend,
            clock,
            config: Arc::new(config),
            metrics: None,
            activity: Arc::new(metrics::Activity::new()),
            openapi: Arc::new(openapi().to_pretty_json().unwrap_or_default()),
        }
    }

    /// The same state, rendering `handle` at `GET /metrics`.
    pub fn with_metrics(mut self, handle: PrometheusHandle) -> Self {
        self.metrics = Some(handle);
        self
    }

    /// The same state, reporting `activity` at `GET /v1/stats`.
    pub fn with_activity(mut self, activity: Arc<metrics::Activity>) -> Self {
        self.activity = activity;
        self
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

/// Every route, declared on its handler; the router and the OpenAPI paths both come from here.
fn routes() -> OpenApiRouter<ApiState> {
    OpenApiRouter::new()
        .routes(routes!(routes::create_task, routes::list_pending))
        // A static segment wins over `{id}` in the router, so the task whose id is "batch" is
        // served here too.
        .routes(routes!(routes::create_batch, routes::get_task_named_batch))
        .routes(routes!(routes::get_task, routes::update_task))
        .routes(routes!(routes::cancel_task))
        .routes(routes!(routes::reschedule_task))
        .routes(routes!(routes::replay_task))
        .routes(routes!(routes::list_dlq))
        .routes(routes!(routes::get_letter, routes::purge_letter))
        .routes(routes!(routes::replay_letter))
        .routes(routes!(routes::redrive))
        .routes(routes!(routes::shards))
        .routes(routes!(routes::stats))
        .routes(routes!(routes::healthz))
        .routes(routes!(routes::readyz))
        .routes(routes!(routes::metrics))
        .routes(routes!(routes::openapi_json))
        .routes(routes!(routes::docs))
}

/// Name of the bearer security scheme in the OpenAPI document.
pub const SECURITY_SCHEME: &str = "api_key";

/// The OpenAPI 3.1 document of [`router`], generated from the handlers.
///
/// Beyond what the handlers declare, every operation gets the bearer security requirement
/// (but `GET /healthz`), its 401 and 403 answers, and a `default` problem+json answer, so
/// every status the API may send is described.
pub fn openapi() -> OpenApi {
    use utoipa::openapi::{
        ContentBuilder, Ref, RefOr, ResponseBuilder, security::SecurityRequirement,
    };
    let (_, mut doc) = routes().split_for_parts();
    doc.info.title = "punctual".into();
    doc.info.version = env!("CARGO_PKG_VERSION").into();
    doc.info.description = Some(
        "A scheduler that holds millions of one-shot tasks and fires each one on time.".into(),
    );
    doc.info.license = None;
    doc.info.contact = None;
    let components = doc.components.get_or_insert_with(Default::default);
    components.security_schemes.insert(
        SECURITY_SCHEME.into(),
        SecurityScheme::Http(
            HttpBuilder::new()
                .scheme(HttpAuthScheme::Bearer)
                .description(Some(
                    "An API key with role viewer (reads), operator (changes tasks) or admin (bulk operations).",
                ))
                .build(),
        ),
    );
    let problem = |description: &str| {
        RefOr::T(
            ResponseBuilder::new()
                .description(description)
                .content(
                    error::PROBLEM_JSON,
                    ContentBuilder::new()
                        .schema(Some(Ref::from_schema_name("Problem")))
                        .build(),
                )
                .build(),
        )
    };
    for (path, item) in doc.paths.paths.iter_mut() {
        let ops = [
            (axum::http::Method::GET, &mut item.get),
            (axum::http::Method::POST, &mut item.post),
            (axum::http::Method::PUT, &mut item.put),
            (axum::http::Method::DELETE, &mut item.delete),
            (axum::http::Method::PATCH, &mut item.patch),
        ];
        for (method, op) in ops {
            let Some(op) = op.as_mut() else { continue };
            let responses = &mut op.responses.responses;
            match auth::required_role(&method, path) {
                None => op.security = Some(Vec::new()),
                Some(role) => {
                    op.security = Some(vec![SecurityRequirement::new::<_, _, &str>(
                        SECURITY_SCHEME,
                        [],
                    )]);
                    let note = format!("Needs role `{role}` or above.");
                    op.description = Some(match op.description.take() {
                        Some(d) => format!("{d}\n\n{note}"),
                        None => note,
                    });
                    responses
                        .entry("401".into())
                        .or_insert_with(|| problem("No API key, or an unknown one"));
                    responses
                        .entry("403".into())
                        .or_insert_with(|| problem("The key's role is too weak"));
                }
            }
            responses
                .entry("default".into())
                .or_insert_with(|| problem("A problem: bad input, or the server's trouble"));
        }
    }
    doc
}

/// The API's routes, with `state` applied:
///
/// | route | answer |
/// |---|---|
/// | `POST /v1/tasks` | 201 created, 200 same request again, 409 same id different request |
/// | `POST /v1/tasks/batch` | 200 `{results: [{id, status, task?}]}`; 422 if any item is invalid |
/// | `GET /v1/tasks/{id}` | 200 the task, 404 |
/// | `POST /v1/tasks/{id}/cancel` | 200 the cancelled task, 404, 409 if it cannot be cancelled |
/// | `POST /v1/tasks/{id}/reschedule` | 200 the task at its new time, 404, 409 |
/// | `POST /v1/tasks/{id}/replay` | 200 a finished task scheduled again, 404, 409 |
/// | `GET /v1/tasks?after=&limit=` | 200 `{tasks, next}`: waiting tasks in due order |
/// | `GET /v1/dlq?after=&limit=` | 200 `{letters, next}` |
/// | `POST /v1/dlq/{id}/replay` | 200 what happened to the letter's task |
/// | `POST /v1/dlq/redrive` | 200 `{examined, replayed, dropped, skipped, next}` for one page |
/// | `GET /v1/shards`, `GET /v1/stats` | leases; queue depth and recent firing |
/// | `GET /v1/openapi.json`, `GET /v1/docs` | the OpenAPI document and a page rendering it |
/// | `GET /healthz`, `GET /readyz`, `GET /metrics` | up; store reachable; Prometheus text |
///
/// Request bodies are limited to [`ApiConfig::max_body_bytes`]. Every route but `/healthz`
/// needs a key ([`auth`]).
pub fn router(state: ApiState) -> Router {
    let body_limit = state.config.max_body_bytes();
    let (router, _) = routes().split_for_parts();
    router
        .fallback(fallback)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::require_key,
        ))
        .layer(DefaultBodyLimit::max(body_limit))
        .with_state(state)
}

/// Unknown routes answer a problem too (after the key check: no key, no map of the API).
async fn fallback() -> ApiError {
    ApiError::NotFound("no such route; see /v1/openapi.json".into())
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
