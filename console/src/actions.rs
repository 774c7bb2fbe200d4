//! Every change the console makes: Leptos server functions behind one guard.
//!
//! A form on a page posts (`application/x-www-form-urlencoded`, no JavaScript) to
//! `/console/act/<name>`. Before any server function runs, [`guard`] reads the body and
//! checks, in order:
//!
//! 1. the action exists (404 otherwise);
//! 2. a live session (401 with a link to log in), except for `login`, which instead needs the
//!    token of the login form it was served with;
//! 3. the CSRF token bound to that session (403, nothing changed);
//! 4. the role: each action names the REST route it mirrors, and needs what
//!    [`punctual_api::auth::required_role`] says that route needs (403 for a viewer).
//!
//! Only then does [`handle`] hand the request to Leptos, which runs the server function. The
//! function calls the same `api::service` function as the REST route, then answers
//! `303 See Other` to the page the form was on with a one-shot message: what was done, or
//! why nothing was (a stale version, a task that is running, JSON that does not parse).
//! Refusals the guard makes are full pages, not messages, because the page the form came
//! from cannot be trusted to be ours.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use leptos::prelude::*;
use leptos::server_fn::ServerFn;
use leptos_axum::ResponseOptions;
use punctual_api::Role;
use punctual_api::view::{RescheduleRequest, UpdateTaskRequest};

use crate::Console;
use crate::page::{Flash, cookies, enc, error_page, secure_request, task_href};
use crate::session::{LOGIN_COOKIE, SESSION_COOKIE, Session, cookie, cookie_value};

/// Where the server functions are mounted.
pub const PREFIX: &str = "/console/act";

/// Largest form body accepted: the API's own request limit (the largest payload plus room)
/// times three, since a form percent-encodes a JSON payload (`{` becomes `%7B`).
fn max_form_bytes(console: &Console) -> usize {
    console.api.config.max_body_bytes().saturating_mul(3)
}

/// The console's actions, each the twin of a REST route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Log in with an API key.
    Login,
    /// End the session.
    Logout,
    /// Move a task to a new due time.
    Reschedule,
    /// Cancel a task.
    Cancel,
    /// Replay a finished task.
    Replay,
    /// Replace a task's payload.
    EditPayload,
    /// Replay one dead letter, or the selected ones.
    ReplayLetters,
    /// Remove one dead letter.
    PurgeLetter,
}

impl Action {
    /// Every action.
    pub const ALL: [Action; 8] = [
        Action::Login,
        Action::Logout,
        Action::Reschedule,
        Action::Cancel,
        Action::Replay,
        Action::EditPayload,
        Action::ReplayLetters,
        Action::PurgeLetter,
    ];

    /// The last segment of the action's URL.
    pub fn name(self) -> &'static str {
        match self {
            Action::Login => "login",
            Action::Logout => "logout",
            Action::Reschedule => "reschedule",
            Action::Cancel => "cancel",
            Action::Replay => "replay",
            Action::EditPayload => "edit-payload",
            Action::ReplayLetters => "replay-letters",
            Action::PurgeLetter => "purge-letter",
        }
    }

    /// The server function's URL.
    pub fn url(self) -> &'static str {
        match self {
            Action::Login => Login::url(),
            Action::Logout => Logout::url(),
            Action::Reschedule => RescheduleTask::url(),
            Action::Cancel => CancelTask::url(),
            Action::Replay => ReplayTask::url(),
            Action::EditPayload => EditPayload::url(),
            Action::ReplayLetters => ReplayLetters::url(),
            Action::PurgeLetter => PurgeLetter::url(),
        }
    }

    /// The REST route this action does the work of; `None` for the session's own actions.
    pub fn mirrors(self) -> Option<(Method, &'static str)> {
        match self {
            Action::Login | Action::Logout => None,
            Action::Reschedule => Some((Method::POST, "/v1/tasks/{id}/reschedule")),
            Action::Cancel => Some((Method::POST, "/v1/tasks/{id}/cancel")),
            Action::Replay => Some((Method::POST, "/v1/tasks/{id}/replay")),
            Action::EditPayload => Some((Method::PATCH, "/v1/tasks/{id}")),
            Action::ReplayLetters => Some((Method::POST, "/v1/dlq/{id}/replay")),
            Action::PurgeLetter => Some((Method::DELETE, "/v1/dlq/{id}")),
        }
    }

    /// The role needed: the one the mirrored REST route needs.
    pub fn needs(self) -> Option<Role> {
        self.mirrors()
            .and_then(|(m, path)| punctual_api::auth::required_role(&m, path))
    }

    /// The action at `path` (`/console/act/<name>`).
    pub fn from_path(path: &str) -> Option<Action> {
        let name = path.strip_prefix(PREFIX)?.strip_prefix('/')?;
        Action::ALL.into_iter().find(|a| a.name() == name)
    }
}

/// What the guard found, handed to the server function in the request's extensions.
#[derive(Debug, Clone)]
pub struct Posted {
    /// The session (`None` only for `login`).
    pub session: Option<Session>,
    /// Cookies set in the answer are `Secure`.
    pub secure: bool,
}

/// Middleware in front of every action: session, CSRF token and role, then the body is put
/// back for the server function. See the module doc.
pub async fn guard(State(console): State<Console>, req: Request, next: Next) -> Response {
    let Some(action) = Action::from_path(req.uri().path()) else {
        return error_page(
            StatusCode::NOT_FOUND,
            "No such action",
            "The console has no action at this address.",
            ("/console", "Go to the overview"),
        );
    };
    let (mut parts, body) = req.into_parts();
    let secure = secure_request(&console, &parts);
    let Ok(bytes) = axum::body::to_bytes(body, max_form_bytes(&console)).await else {
        return error_page(
            StatusCode::PAYLOAD_TOO_LARGE,
            "Form too large",
            "The form sent more than the console accepts. Nothing was changed.",
            ("/console", "Go to the overview"),
        );
    };
    let fields: Vec<(String, String)> = serde_urlencoded::from_bytes(&bytes).unwrap_or_default();
    let field = |name: &str| {
        fields
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    let jar = cookies(&parts.headers);
    let session = if action == Action::Login {
        let nonce = cookie_value(&jar, LOGIN_COOKIE).unwrap_or("");
        if !console
            .secret()
            .login_token_ok(nonce, field("token").unwrap_or(""))
        {
            return error_page(
                StatusCode::FORBIDDEN,
                "Login form expired",
                "This login form was not served by this console, or it has expired. Open the login page again and retry.",
                ("/console/login", "Open the login page"),
            );
        }
        None
    } else {
        let Some(session) = crate::page::session_of(&console, &parts.headers) else {
            return error_page(
                StatusCode::UNAUTHORIZED,
                "Not logged in",
                "Your session has ended, or you never logged in. Nothing was changed. Log in and try again.",
                ("/console/login", "Log in"),
            );
        };
        let token = field("csrf").unwrap_or("");
        if !console.secret().csrf_ok(&session.sid, token) {
            tracing::warn!(
                action = action.name(),
                key = %session.key_name,
                "console post refused: missing or wrong CSRF token"
            );
            return error_page(
                StatusCode::FORBIDDEN,
                "Refused: no valid CSRF token",
                "This form did not carry the anti-forgery token of your session, so it may not come from a console page you opened. Nothing was changed. Reload the page and try again.",
                ("/console", "Go to the overview"),
            );
        }
        if let Some(needed) = action.needs()
            && !session.may(needed)
        {
            tracing::warn!(
                action = action.name(),
                key = %session.key_name,
                role = %session.role,
                "console post refused: role too weak"
            );
            return error_page(
                StatusCode::FORBIDDEN,
                "Refused: role too weak",
                &format!(
                    "Your key `{}` has role {}; this action needs {needed} or above. Nothing was changed.",
                    session.key_name, session.role
                ),
                ("/console", "Go to the overview"),
            );
        }
        Some(session)
    };
    parts.extensions.insert(Posted { session, secure });
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

/// Runs the server function the guard let through, with the console in its context.
pub async fn handle(State(console): State<Console>, req: Request) -> Response {
    leptos_axum::handle_server_fns_with_context(
        move || {
            provide_context(console.clone());
        },
        req,
    )
    .await
    .into_response()
}

/// The console and what the guard found, inside a server function.
async fn posted() -> Result<(Console, Posted), ServerFnError> {
    let console = use_context::<Console>()
        .ok_or_else(|| ServerFnError::new("the console is not in the context"))?;
    let axum::Extension(posted) = leptos_axum::extract::<axum::Extension<Posted>>()
        .await
        .map_err(|_| ServerFnError::new("the request did not pass the console's guard"))?;
    Ok((console, posted))
}

/// The session of an action that needs `action`'s role; the guard checked it, this checks
/// again so that no server function can be reached around it.
async fn acting(action: Action) -> Result<(Console, Posted, Session), ServerFnError> {
    let (console, posted) = posted().await?;
    let session = posted
        .session
        .clone()
        .filter(|s| action.needs().is_none_or(|r| s.may(r)))
        .ok_or_else(|| ServerFnError::new("not allowed"))?;
    Ok((console, posted, session))
}

/// Answers `303 See Other` to `to`, with `flash` to show there and `cookies` to set.
fn redirect(to: &str, flash: Option<Flash>, secure: bool, cookies: &[String]) {
    let Some(res) = use_context::<ResponseOptions>() else {
        return;
    };
    res.set_status(StatusCode::SEE_OTHER);
    if let Ok(v) = HeaderValue::from_str(to) {
        res.insert_header(header::LOCATION, v);
    }
    let flash = flash.map(|f| f.cookie(secure));
    for c in cookies.iter().chain(flash.as_ref()) {
        if let Ok(v) = HeaderValue::from_str(c) {
            res.append_header(header::SET_COOKIE, v);
        }
    }
}

/// `next` if it is a console page (never another site), else the overview.
fn local_target(next: Option<&str>) -> String {
    match next {
        Some(n)
            if n.starts_with("/console")
                && !n.starts_with("/console/act")
                && !n.contains("//")
                && !n.contains('\\') =>
        {
            n.to_owned()
        }
        _ => "/console".to_owned(),
    }
}

/// The task version a form carried; without one, refuses the post (redirect back to `back`
/// with a message) and answers `None`: a change without the version it was decided on could
/// overwrite a newer one.
fn form_version(v: &str, back: &str, secure: bool) -> Option<u64> {
    let version: Option<u64> = v.trim().parse().ok();
    if version.is_none() {
        redirect(
            back,
            Some(Flash::err(
                "Refused: the form carried no task version. Reload the page.",
            )),
            secure,
            &[],
        );
    }
    version
}

/// What the service said, as a sentence for the operator.
fn refusal(e: &punctual_api::ApiError) -> String {
    let p = e.problem();
    let mut text = match p.field {
        Some(f) => format!("Refused ({f}): {}", p.detail),
        None => format!("Refused: {}", p.detail),
    };
    if !text.contains("nothing was changed") {
        text.push_str(". Nothing was changed.");
    } else {
        text.push('.');
    }
    text
}

/// Logs in with an API key; the guard checked the login form's token.
#[server(prefix = "/console/act", endpoint = "login")]
pub async fn login(
    #[doc = "The API key typed in."] key: String,
    #[doc = "The login form's token (checked by the guard)."] token: String,
    #[doc = "The console page to go to after logging in."] next: Option<String>,
) -> Result<(), ServerFnError> {
    let _ = token;
    let (console, posted) = posted().await?;
    let clear_login = cookie(LOGIN_COOKIE, "", 0, posted.secure);
    let Some(api_key) = console.keys().verify(key.trim()) else {
        tracing::info!("console login refused: unknown key");
        let back = format!(
            "/console/login?next={}",
            enc(&local_target(next.as_deref()))
        );
        redirect(
            &back,
            Some(Flash::err(
                "That key is not known to this server. Check it and try again.",
            )),
            posted.secure,
            &[],
        );
        return Ok(());
    };
    let now_s = console.now_ms().div_euclid(1_000);
    let ttl = console.config().session_ttl_s;
    let session = Session::new(api_key, now_s, ttl).map_err(ServerFnError::new)?;
    tracing::info!(key = %session.key_name, role = %session.role, "console login");
    let sealed = console.secret().seal(&session);
    redirect(
        &local_target(next.as_deref()),
        None,
        posted.secure,
        &[
            cookie(SESSION_COOKIE, &sealed, ttl, posted.secure),
            clear_login,
        ],
    );
    Ok(())
}

/// Ends the session: the cookie is deleted. (A stateless session cannot be revoked on the
/// server; it also ends at its expiry, or when its key leaves the ring.)
#[server(prefix = "/console/act", endpoint = "logout")]
pub async fn logout(
    #[doc = "The session's CSRF token (checked by the guard)."] csrf: String,
) -> Result<(), ServerFnError> {
    let _ = csrf;
    let (_, posted, session) = acting(Action::Logout).await?;
    tracing::info!(key = %session.key_name, "console logout");
    redirect(
        "/console/login",
        Some(Flash::ok("Logged out.")),
        posted.secure,
        &[cookie(SESSION_COOKIE, "", 0, posted.secure)],
    );
    Ok(())
}

/// Moves a task to a new due time: `run_at` (a `datetime-local` value, UTC) or `in_minutes`
/// from now; only if it is still at `version`.
#[server(prefix = "/console/act", endpoint = "reschedule")]
pub async fn reschedule_task(
    #[doc = "The session's CSRF token (checked by the guard)."] csrf: String,
    #[doc = "The task or letter id."] id: String,
    #[doc = "The task version the form was rendered with."] version: String,
    #[doc = "New due time, a `datetime-local` value read as UTC."] run_at: Option<String>,
    #[doc = "Or due this many minutes from now."] in_minutes: Option<String>,
) -> Result<(), ServerFnError> {
    let _ = csrf;
    let (console, posted, _) = acting(Action::Reschedule).await?;
    let back = task_href(&id);
    let fail = |text: String| redirect(&back, Some(Flash::err(text)), posted.secure, &[]);
    let Some(version) = form_version(&version, &back, posted.secure) else {
        return Ok(());
    };
    let run_at = run_at.filter(|s| !s.trim().is_empty());
    let in_minutes = in_minutes.filter(|s| !s.trim().is_empty());
    let req = match (run_at, in_minutes) {
        (Some(at), _) => match crate::fmt::parse_datetime_local(&at) {
            Some(ms) => RescheduleRequest {
                run_at: Some(crate::fmt::rfc3339(ms)),
                delay: None,
                version: Some(version),
            },
            None => {
                fail(format!(
                    "Not rescheduled: {at:?} is not a date and time (UTC), e.g. 2026-01-31T12:00."
                ));
                return Ok(());
            }
        },
        (None, Some(m)) => match m.trim().parse::<u32>() {
            Ok(m) => RescheduleRequest {
                run_at: None,
                delay: Some(format!("{m}m")),
                version: Some(version),
            },
            Err(_) => {
                fail(format!(
                    "Not rescheduled: {m:?} is not a whole number of minutes."
                ));
                return Ok(());
            }
        },
        (None, None) => {
            fail("Not rescheduled: give a date and time, or a number of minutes.".into());
            return Ok(());
        }
    };
    match punctual_api::service::reschedule_task(&console.api, &id, req).await {
        Ok(t) => redirect(
            &back,
            Some(Flash::ok(format!(
                "Rescheduled to {} UTC ({}); now version {}.",
                crate::fmt::utc(t.due_ms),
                crate::fmt::relative(t.due_ms, console.now_ms()),
                t.version
            ))),
            posted.secure,
            &[],
        ),
        Err(e) => fail(refusal(&e)),
    }
    Ok(())
}

/// Cancels a task, only if it is still at `version`.
#[server(prefix = "/console/act", endpoint = "cancel")]
pub async fn cancel_task(
    #[doc = "The session's CSRF token (checked by the guard)."] csrf: String,
    #[doc = "The task or letter id."] id: String,
    #[doc = "The task version the form was rendered with."] version: String,
) -> Result<(), ServerFnError> {
    let _ = csrf;
    let (console, posted, _) = acting(Action::Cancel).await?;
    let back = task_href(&id);
    let Some(version) = form_version(&version, &back, posted.secure) else {
        return Ok(());
    };
    let flash = match punctual_api::service::cancel_task(&console.api, &id, Some(version)).await {
        Ok(t) => Flash::ok(format!("Cancelled; now version {}.", t.version)),
        Err(e) => Flash::err(refusal(&e)),
    };
    redirect(&back, Some(flash), posted.secure, &[]);
    Ok(())
}

/// Replays a finished task (`DEAD`, `SUCCEEDED`, `CANCELLED`) now, only if it is still at
/// `version`.
#[server(prefix = "/console/act", endpoint = "replay")]
pub async fn replay_task(
    #[doc = "The session's CSRF token (checked by the guard)."] csrf: String,
    #[doc = "The task or letter id."] id: String,
    #[doc = "The task version the form was rendered with."] version: String,
) -> Result<(), ServerFnError> {
    let _ = csrf;
    let (console, posted, _) = acting(Action::Replay).await?;
    let back = task_href(&id);
    let Some(version) = form_version(&version, &back, posted.secure) else {
        return Ok(());
    };
    let req = RescheduleRequest {
        run_at: None,
        delay: None,
        version: Some(version),
    };
    let flash = match punctual_api::service::replay_task(&console.api, &id, req).await {
        Ok(t) => Flash::ok(format!(
            "Replayed: SCHEDULED, due now, attempts reset; now version {}.",
            t.version
        )),
        Err(e) => Flash::err(refusal(&e)),
    };
    redirect(&back, Some(flash), posted.secure, &[]);
    Ok(())
}

/// Replaces a task's payload with `payload`, which must be JSON; only if the task is still
/// at `version`.
#[server(prefix = "/console/act", endpoint = "edit-payload")]
pub async fn edit_payload(
    #[doc = "The session's CSRF token (checked by the guard)."] csrf: String,
    #[doc = "The task or letter id."] id: String,
    #[doc = "The task version the form was rendered with."] version: String,
    #[doc = "The new payload, JSON."] payload: String,
) -> Result<(), ServerFnError> {
    let _ = csrf;
    let (console, posted, _) = acting(Action::EditPayload).await?;
    let back = task_href(&id);
    let Some(version) = form_version(&version, &back, posted.secure) else {
        return Ok(());
    };
    let value: serde_json::Value = match serde_json::from_str(&payload) {
        Ok(v) => v,
        Err(e) => {
            redirect(
                &back,
                Some(Flash::err(format!(
                    "Not saved: the payload is not valid JSON (line {}, column {}: {e}). Nothing was changed.",
                    e.line(),
                    e.column()
                ))),
                posted.secure,
                &[],
            );
            return Ok(());
        }
    };
    let req = UpdateTaskRequest {
        version: Some(version),
        payload: Some(value),
        max_attempts: None,
        backoff: None,
    };
    let flash = match punctual_api::service::update_task(&console.api, &id, req).await {
        Ok(t) => Flash::ok(format!("Payload saved; now version {}.", t.version)),
        Err(e) => Flash::err(refusal(&e)),
    };
    redirect(&back, Some(flash), posted.secure, &[]);
    Ok(())
}

/// Replays dead letters: `only` (a row's own button), or every letter in `ids` (the
/// checkboxes). Each is the REST API's replay of one letter.
#[server(prefix = "/console/act", endpoint = "replay-letters")]
pub async fn replay_letters(
    #[doc = "The session's CSRF token (checked by the guard)."] csrf: String,
    #[doc = "One letter, from its row's button."] only: Option<String>,
    #[doc = "The selected letters."] ids: Option<Vec<String>>,
    #[doc = "The page to go back to."] back: Option<String>,
) -> Result<(), ServerFnError> {
    let _ = csrf;
    let (console, posted, _) = acting(Action::ReplayLetters).await?;
    let back = local_target(back.as_deref());
    let ids: Vec<String> = match only {
        Some(one) => vec![one],
        None => ids.unwrap_or_default(),
    };
    if ids.is_empty() {
        redirect(
            &back,
            Some(Flash::err("Nothing replayed: no letter was selected.")),
            posted.secure,
            &[],
        );
        return Ok(());
    }
    let (mut replayed, mut dropped, mut skipped) = (0, 0, 0);
    let mut errors = Vec::new();
    for id in &ids {
        use punctual_api::view::LetterOutcome as O;
        match punctual_api::service::replay_letter(&console.api, id).await {
            Ok((_, O::Replayed, _)) => replayed += 1,
            Ok((_, O::AlreadyLive | O::TaskMissing, _)) => dropped += 1,
            Ok((_, O::Skipped, _)) => skipped += 1,
            Err(e) => errors.push(format!("{id}: {}", e.problem().detail)),
        }
    }
    let mut text = format!("Replayed {replayed} of {} selected.", ids.len());
    if dropped > 0 {
        text.push_str(&format!(
            " {dropped} removed without replay (task already live again, or gone)."
        ));
    }
    if skipped > 0 {
        text.push_str(&format!(" {skipped} left: the task is running now."));
    }
    if !errors.is_empty() {
        text.push_str(&format!(" Refused: {}.", errors.join("; ")));
    }
    let flash = if errors.is_empty() && skipped == 0 {
        Flash::ok(text)
    } else {
        Flash::err(text)
    };
    redirect(&back, Some(flash), posted.secure, &[]);
    Ok(())
}

/// Removes one dead letter for good (its task is left as it is). Posted from the
/// confirmation page.
#[server(prefix = "/console/act", endpoint = "purge-letter")]
pub async fn purge_letter(
    #[doc = "The session's CSRF token (checked by the guard)."] csrf: String,
    #[doc = "The task or letter id."] id: String,
) -> Result<(), ServerFnError> {
    let _ = csrf;
    let (console, posted, _) = acting(Action::PurgeLetter).await?;
    let flash = match punctual_api::service::purge_letter(&console.api, &id).await {
        Ok(l) => Flash::ok(format!(
            "Purged letter {} (task {}). The task itself was not changed.",
            l.id, l.message.task_id
        )),
        Err(e) => Flash::err(refusal(&e)),
    };
    redirect("/console/dlq", Some(flash), posted.secure, &[]);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_action_is_served_where_its_name_says_and_needs_its_routes_role() {
        for a in Action::ALL {
            assert_eq!(a.url(), format!("{PREFIX}/{}", a.name()), "{a:?}");
            assert_eq!(Action::from_path(a.url()), Some(a));
        }
        assert_eq!(Action::Login.needs(), None);
        assert_eq!(Action::Cancel.needs(), Some(Role::Operator));
        assert_eq!(Action::from_path("/console/act/drop-tables"), None);
    }

    #[test]
    fn redirects_stay_in_the_console() {
        assert_eq!(
            local_target(Some("/console/tasks?status=DEAD")),
            "/console/tasks?status=DEAD"
        );
        for bad in [
            "https://evil.example",
            "//evil.example",
            "/console//evil",
            "/v1/tasks",
            "/console/act/logout",
        ] {
            assert_eq!(local_target(Some(bad)), "/console", "{bad}");
        }
        assert_eq!(local_target(None), "/console");
    }
}
