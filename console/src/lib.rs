//! punctual's operator console: Leptos, server-rendered, mounted in the API's axum server.
//!
//! ```text
//!   GET  /console/...      ──> page handler ──> api::service (reads) ──> Leptos view ──> HTML
//!   POST /console/act/...  ──> guard (session, CSRF, role) ──> Leptos server function
//!                                 ──> api::service (the change) ──> 303 back, with a message
//! ```
//!
//! # No JavaScript, no hydration
//!
//! There is no wasm toolchain here, and an operator's tool should work in any browser with
//! scripts off. So the console is Leptos with the `ssr` feature only: every page is rendered
//! to a string on the server, after its data is read (the reads happen before rendering,
//! so nothing streams and no hydration script is emitted). Every action is a plain HTML
//! `<form method="post">` whose `action` is a Leptos server function's URL (what Leptos'
//! `ActionForm` renders, without the client-side enhancement that needs wasm); the server
//! function calls the same [`punctual_api::service`] function as the REST API — no rule is
//! written twice — and answers `303 See Other` back to the page, with a one-shot message
//! cookie saying what happened. Pages that list things are plain `GET` forms and links, so
//! every view has a URL that can be bookmarked and shared.
//!
//! # Sessions, CSRF, roles
//!
//! Operators log in with an API key, checked against the API's own [`KeyRing`]. The session
//! is a signed, expiring cookie ([`session`]): stateless, so any number of instances (or a
//! Lambda) serve it as long as they share the secret. Every post passes one guard
//! ([`actions`]) before any server function runs: a live session, the CSRF token bound to it,
//! and the role the equivalent API route needs ([`punctual_api::auth::required_role`], so the
//! console and the API cannot disagree on who may do what). A viewer sees no action buttons,
//! and the guard refuses a viewer's forged post anyway.
//!
//! # Pages
//!
//! | page | what |
//! |---|---|
//! | `/console` | counts by status, due-per-minute chart (past and next hour), firing, DLQ depth, shards |
//! | `/console/tasks` | tasks by due time with filters (status, target, id prefix, due window), pages |
//! | `/console/tasks/{id}` | every attribute; reschedule, cancel, replay, edit payload |
//! | `/console/dlq` | dead letters; replay one, replay the selected, purge one after confirming |
//! | `/console/login` | log in with an API key; logout is a form in the header |

use std::sync::Arc;

use axum::Router;
use axum::response::{IntoResponse, Redirect};
use axum::routing::{get, post};
use punctual_api::{ApiState, KeyRing};

pub mod actions;
pub mod chart;
pub mod fmt;
mod page;
pub mod session;
mod views;

pub use session::{Session, SessionSecret};

/// How long a login lasts by default: 12 hours, a working day.
pub const DEFAULT_SESSION_TTL_S: i64 = 12 * 3_600;

/// The console's configuration. Only the binary reads flags and the environment to fill it.
#[derive(Debug, Clone)]
pub struct ConsoleConfig {
    /// Signs session cookies and CSRF tokens; every instance serving one console needs the
    /// same. Default `None`: a random secret, so sessions end when the process restarts (the
    /// binary logs that).
    pub session_secret: Option<SessionSecret>,
    /// How long a login lasts, seconds. Default [`DEFAULT_SESSION_TTL_S`].
    pub session_ttl_s: i64,
    /// Mark cookies `Secure`: `Some(true)` always, `Some(false)` never, `None` (the default)
    /// when the request came over HTTPS (its URI, or `X-Forwarded-Proto: https` from a proxy
    /// or a Lambda Function URL).
    pub secure_cookies: Option<bool>,
}

impl Default for ConsoleConfig {
    fn default() -> Self {
        Self {
            session_secret: None,
            session_ttl_s: DEFAULT_SESSION_TTL_S,
            secure_cookies: None,
        }
    }
}

/// What every console handler needs: the API's state (its services, clock and keys), the
/// session secret and the configuration. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Console {
    /// The API's state: the console calls the same services with it.
    pub api: ApiState,
    secret: SessionSecret,
    config: Arc<ConsoleConfig>,
}

impl Console {
    /// A console over `api`. Without a configured secret a random one is made (sessions then
    /// end with the process).
    pub fn new(api: ApiState, mut config: ConsoleConfig) -> Result<Self, String> {
        let secret = match config.session_secret.take() {
            Some(s) => s,
            None => SessionSecret::random().map_err(|e| format!("no randomness: {e}"))?,
        };
        if config.session_ttl_s <= 0 {
            return Err("session_ttl_s: must be positive".into());
        }
        Ok(Self {
            api,
            secret,
            config: Arc::new(config),
        })
    }

    /// The session secret.
    pub fn secret(&self) -> &SessionSecret {
        &self.secret
    }

    /// The configuration.
    pub fn config(&self) -> &ConsoleConfig {
        &self.config
    }

    /// The keys that may log in: the API's.
    pub fn keys(&self) -> &KeyRing {
        &self.api.config.keys
    }

    /// Now, epoch milliseconds, from the API's clock.
    pub fn now_ms(&self) -> i64 {
        self.api.now_ms()
    }
}

/// The console's routes, with its state applied: the pages under `/console`, the actions
/// under `/console/act/`, the stylesheet, and `/` redirecting to `/console`.
pub fn router(console: Console) -> Router {
    let actions = Router::new()
        .route("/console/act/{*name}", post(actions::handle))
        .layer(axum::middleware::from_fn_with_state(
            console.clone(),
            actions::guard,
        ));
    Router::new()
        .route("/", get(|| async { Redirect::to("/console") }))
        .route("/console", get(views::overview))
        .route("/console/", get(|| async { Redirect::to("/console") }))
        .route("/console/login", get(views::login))
        .route("/console/tasks", get(views::tasks))
        .route("/console/tasks/{id}", get(views::task))
        .route("/console/dlq", get(views::dead_letters))
        .route("/console/dlq/{id}/purge", get(views::purge_confirm))
        .route("/console/assets/console.css", get(stylesheet))
        .route("/console/{*rest}", get(views::not_found))
        .merge(actions)
        .with_state(console)
}

/// The stylesheet: one file, no web fonts, cached for an hour.
async fn stylesheet() -> impl IntoResponse {
    (
        [
            (axum::http::header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (axum::http::header::CACHE_CONTROL, "public, max-age=3600"),
        ],
        include_str!("console.css"),
    )
}
