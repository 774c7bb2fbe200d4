//! The console's router without a browser (`oneshot`): login, the guard in front of every
//! post (session, CSRF token, role), stale forms, sessions shared by instances and their
//! expiry. The browser tests (tests/browser.rs at the workspace root) drive the same flows
//! through Chromium.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use http_body_util::BodyExt;
use punctual_api::{ApiConfig, ApiState, KeyRing, Role};
use punctual_console::{Console, ConsoleConfig, SessionSecret, router};
use punctual_core::testkit::T0;
use punctual_core::validate::CreateTask;
use punctual_core::{Backend, ManualClock};
use punctual_store::embedded::{EmbeddedOptions, EmbeddedStore};
use tower::ServiceExt;

const OPERATOR_KEY: &str = "console-operator-key";
const VIEWER_KEY: &str = "console-viewer-key";

struct Env {
    app: Router,
    api: ApiState,
    clock: ManualClock,
    secret: SessionSecret,
    _dir: tempfile::TempDir,
}

fn setup() -> Env {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(
        &dir.path().join("punctual.db"),
        EmbeddedOptions {
            shard_count: 4,
            max_receive_count: 5,
            now_ms: T0,
        },
    )
    .unwrap();
    let mut keys = KeyRing::new();
    keys.add_plain("ops", Role::Operator, OPERATOR_KEY);
    keys.add_plain("auditor", Role::Viewer, VIEWER_KEY);
    let clock = ManualClock::new(T0);
    let api = ApiState::try_new(
        Backend::from_one(store),
        Arc::new(clock.clone()),
        ApiConfig {
            keys,
            ..ApiConfig::default()
        },
    )
    .unwrap();
    let secret = SessionSecret::new(*b"a shared test secret, 32 bytes!!").unwrap();
    let app = app_over(&api, &secret);
    Env {
        app,
        api,
        clock,
        secret,
        _dir: dir,
    }
}

fn app_over(api: &ApiState, secret: &SessionSecret) -> Router {
    let console = Console::new(
        api.clone(),
        ConsoleConfig {
            session_secret: Some(secret.clone()),
            session_ttl_s: 3_600,
            secure_cookies: None,
        },
    )
    .unwrap();
    router(console)
}

struct Reply {
    status: StatusCode,
    location: Option<String>,
    cookies: Vec<String>,
    body: String,
}

async fn send(app: &Router, req: Request<Body>) -> Reply {
    let resp = app.clone().oneshot(req).await.unwrap();
    let status = resp.status();
    let location = resp
        .headers()
        .get(header::LOCATION)
        .map(|v| v.to_str().unwrap().to_owned());
    let cookies = resp
        .headers()
        .get_all(header::SET_COOKIE)
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .collect();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    Reply {
        status,
        location,
        cookies,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

fn get(uri: &str, cookie: &str) -> Request<Body> {
    Request::get(uri)
        .header(header::COOKIE, cookie)
        .body(Body::empty())
        .unwrap()
}

fn post(uri: &str, cookie: &str, form: &[(&str, &str)]) -> Request<Body> {
    Request::post(uri)
        .header(header::COOKIE, cookie)
        .header(header::ACCEPT, "text/html")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::from(serde_urlencoded::to_string(form).unwrap()))
        .unwrap()
}

/// The `value` of the hidden input `name` in `html`.
fn hidden(html: &str, name: &str) -> String {
    let at = html
        .find(&format!("name=\"{name}\" value=\""))
        .unwrap_or_else(|| panic!("no {name} in {html}"));
    let rest = &html[at + name.len() + 15..];
    rest[..rest.find('"').unwrap()].to_owned()
}

/// `name=value` of a `Set-Cookie` for `name`.
fn cookie_pair(cookies: &[String], name: &str) -> String {
    cookies
        .iter()
        .find(|c| c.starts_with(&format!("{name}=")))
        .unwrap_or_else(|| panic!("no {name} cookie in {cookies:?}"))
        .split(';')
        .next()
        .unwrap()
        .to_owned()
}

/// Logs in with `key`; returns the session cookie and the CSRF token of its pages.
async fn login(app: &Router, key: &str) -> (String, String) {
    let page = send(app, get("/console/login", "")).await;
    assert_eq!(page.status, 200);
    let nonce = cookie_pair(&page.cookies, "punctual_login");
    let token = hidden(&page.body, "token");
    let r = send(
        app,
        post(
            "/console/act/login",
            &nonce,
            &[("key", key), ("token", &token), ("next", "/console/tasks")],
        ),
    )
    .await;
    assert_eq!(r.status, 303, "{}", r.body);
    assert_eq!(r.location.as_deref(), Some("/console/tasks"));
    let session = r
        .cookies
        .iter()
        .find(|c| c.starts_with("punctual_session="))
        .unwrap();
    for attr in [
        "HttpOnly",
        "SameSite=Strict",
        "Path=/console",
        "Max-Age=3600",
    ] {
        assert!(session.contains(attr), "{session} lacks {attr}");
    }
    assert!(!session.contains("Secure"), "plain http: {session}");
    let cookie = cookie_pair(&r.cookies, "punctual_session");
    let page = send(app, get("/console/tasks", &cookie)).await;
    assert_eq!(page.status, 200, "{}", page.body);
    let csrf = hidden(&page.body, "csrf");
    (cookie, csrf)
}

async fn create(api: &ApiState, id: &str) {
    let req: CreateTask = serde_json::from_value(serde_json::json!({
        "id": id, "delay": "10m", "target": { "type": "log" }, "payload": { "n": 1 }
    }))
    .unwrap();
    punctual_api::service::create_task(api, req).await.unwrap();
}

#[tokio::test]
async fn anonymous_visits_go_to_the_login_page() {
    let env = setup();
    let r = send(&env.app, get("/", "")).await;
    assert_eq!(r.location.as_deref(), Some("/console"));
    let r = send(&env.app, get("/console/tasks?status=DEAD", "")).await;
    assert_eq!(r.status, 303);
    assert_eq!(
        r.location.as_deref(),
        Some("/console/login?next=%2Fconsole%2Ftasks%3Fstatus%3DDEAD")
    );
    let r = send(&env.app, get("/console/login", "")).await;
    assert!(r.body.contains("type=\"password\""), "{}", r.body);
    assert!(!r.body.contains("<script"), "no script on any page");
    let css = send(&env.app, get("/console/assets/console.css", "")).await;
    assert_eq!(css.status, 200);
}

#[tokio::test]
async fn login_needs_the_forms_token_and_a_known_key() {
    let env = setup();
    let page = send(&env.app, get("/console/login", "")).await;
    let nonce = cookie_pair(&page.cookies, "punctual_login");
    let token = hidden(&page.body, "token");
    // A login post without the token of a form this console served: refused.
    let r = send(
        &env.app,
        post(
            "/console/act/login",
            "",
            &[("key", OPERATOR_KEY), ("token", &token)],
        ),
    )
    .await;
    assert_eq!(r.status, 403);
    assert!(r.body.contains("Login form expired"), "{}", r.body);
    // An unknown key: back to the login page with a message, no session.
    let r = send(
        &env.app,
        post(
            "/console/act/login",
            &nonce,
            &[("key", "guess"), ("token", &token)],
        ),
    )
    .await;
    assert_eq!(r.status, 303);
    assert!(r.location.unwrap().starts_with("/console/login"));
    assert!(!r.cookies.iter().any(|c| c.starts_with("punctual_session=")));
    let flash = cookie_pair(&r.cookies, "punctual_flash");
    let page = send(&env.app, get("/console/login", &flash)).await;
    assert!(page.body.contains("not known"), "{}", page.body);
    // The right key logs in (checked inside).
    login(&env.app, OPERATOR_KEY).await;
}

#[tokio::test]
async fn every_post_needs_a_session_its_csrf_token_and_the_routes_role() {
    let env = setup();
    create(&env.api, "t-1").await;
    let form = |csrf: &'static str| [("csrf", csrf), ("id", "t-1"), ("version", "1")];

    let r = send(&env.app, post("/console/act/cancel", "", &form(""))).await;
    assert_eq!(r.status, 401);
    assert!(r.body.contains("Not logged in"));

    let (viewer, viewer_csrf) = login(&env.app, VIEWER_KEY).await;
    let page = send(&env.app, get("/console/tasks/t-1", &viewer)).await;
    assert!(
        !page.body.contains("/console/act/cancel"),
        "no action for a viewer"
    );
    let viewer_csrf: &'static str = Box::leak(viewer_csrf.into_boxed_str());
    let r = send(
        &env.app,
        post("/console/act/cancel", &viewer, &form(viewer_csrf)),
    )
    .await;
    assert_eq!(r.status, 403);
    assert!(r.body.contains("role too weak"), "{}", r.body);

    let (ops, csrf) = login(&env.app, OPERATOR_KEY).await;
    let page = send(&env.app, get("/console/tasks/t-1", &ops)).await;
    assert!(page.body.contains("/console/act/cancel"));
    for bad in ["", "not-the-token", viewer_csrf] {
        let r = send(&env.app, post("/console/act/cancel", &ops, &form(bad))).await;
        assert_eq!(r.status, 403, "token {bad:?}");
        assert!(r.body.contains("no valid CSRF token"));
    }
    let t = punctual_api::service::get_task(&env.api, "t-1")
        .await
        .unwrap();
    assert_eq!(
        t.status,
        punctual_core::TaskStatus::Scheduled,
        "nothing changed"
    );

    let csrf: &'static str = Box::leak(csrf.into_boxed_str());
    let r = send(&env.app, post("/console/act/cancel", &ops, &form(csrf))).await;
    assert_eq!(r.status, 303, "{}", r.body);
    assert_eq!(r.location.as_deref(), Some("/console/tasks/t-1"));
    let flash = cookie_pair(&r.cookies, "punctual_flash");
    let t = punctual_api::service::get_task(&env.api, "t-1")
        .await
        .unwrap();
    assert_eq!(t.status, punctual_core::TaskStatus::Cancelled);
    let page = send(
        &env.app,
        get("/console/tasks/t-1", &format!("{ops}; {flash}")),
    )
    .await;
    assert!(
        page.body.contains("Cancelled; now version 2."),
        "{}",
        page.body
    );
    assert!(
        page.cookies
            .iter()
            .any(|c| c.starts_with("punctual_flash=;")),
        "the message is shown once"
    );
}

#[tokio::test]
async fn a_stale_form_is_refused_and_changes_nothing() {
    let env = setup();
    create(&env.api, "t-2").await;
    let (ops, csrf) = login(&env.app, OPERATOR_KEY).await;
    // The page was read at version 1; the task moves on meanwhile.
    punctual_api::service::cancel_task(&env.api, "t-2", Some(1))
        .await
        .unwrap();
    let r = send(
        &env.app,
        post(
            "/console/act/reschedule",
            &ops,
            &[
                ("csrf", &csrf),
                ("id", "t-2"),
                ("version", "1"),
                ("in_minutes", "5"),
            ],
        ),
    )
    .await;
    assert_eq!(r.status, 303);
    let flash = cookie_pair(&r.cookies, "punctual_flash");
    let page = send(
        &env.app,
        get("/console/tasks/t-2", &format!("{ops}; {flash}")),
    )
    .await;
    assert!(
        page.body
            .contains("changed since you read it; nothing was changed"),
        "{}",
        page.body
    );
    let t = punctual_api::service::get_task(&env.api, "t-2")
        .await
        .unwrap();
    assert_eq!(
        (t.status, t.version),
        (punctual_core::TaskStatus::Cancelled, 2)
    );
    // Invalid JSON is refused before the store is asked.
    let r = send(
        &env.app,
        post(
            "/console/act/edit-payload",
            &ops,
            &[
                ("csrf", &csrf),
                ("id", "t-2"),
                ("version", "2"),
                ("payload", "{nope"),
            ],
        ),
    )
    .await;
    let flash = cookie_pair(&r.cookies, "punctual_flash");
    let page = send(
        &env.app,
        get("/console/tasks/t-2", &format!("{ops}; {flash}")),
    )
    .await;
    assert!(
        page.body.contains("not valid JSON (line 1, column 2"),
        "{}",
        page.body
    );
}

#[tokio::test]
async fn sessions_are_shared_by_instances_with_one_secret_and_expire() {
    let env = setup();
    let (ops, _) = login(&env.app, OPERATOR_KEY).await;
    // Another instance (a second server, a fresh Lambda) with the same secret.
    let other = app_over(&env.api, &env.secret);
    assert_eq!(send(&other, get("/console", &ops)).await.status, 200);
    // One with another secret does not know the session.
    let stranger = app_over(&env.api, &SessionSecret::random().unwrap());
    assert_eq!(send(&stranger, get("/console", &ops)).await.status, 303);
    // An hour later (the configured TTL) it is over everywhere.
    env.clock.advance(3_600_000);
    let r = send(&other, get("/console", &ops)).await;
    assert_eq!(r.status, 303);
    assert!(r.location.unwrap().starts_with("/console/login"));
}

#[tokio::test]
async fn cookies_are_secure_behind_an_https_proxy() {
    let env = setup();
    let req = Request::get("/console/login")
        .header("x-forwarded-proto", "https")
        .body(Body::empty())
        .unwrap();
    let r = send(&env.app, req).await;
    let login = r
        .cookies
        .iter()
        .find(|c| c.starts_with("punctual_login="))
        .unwrap();
    assert!(login.ends_with("; Secure"), "{login}");
}

#[tokio::test]
async fn the_overview_reloads_itself_when_asked() {
    let env = setup();
    let (ops, _) = login(&env.app, OPERATOR_KEY).await;
    let page = send(&env.app, get("/console", &ops)).await;
    assert!(!page.body.contains("http-equiv=\"refresh\""));
    assert!(page.body.contains("<svg class=\"chart\""), "{}", page.body);
    let page = send(&env.app, get("/console?refresh=1", &ops)).await;
    assert!(
        page.body
            .contains("<meta http-equiv=\"refresh\" content=\"5\">"),
        "at most every 5 s: {}",
        page.body
    );
}
