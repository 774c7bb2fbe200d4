//! What every page shares: the logged-in request ([`PageCtx`]), the one-shot message
//! ([`Flash`]), the layout around each page, and the error pages.
//!
//! A page is rendered in two steps: its handler reads everything it shows through
//! `api::service`, then builds the Leptos view from plain values inside a fresh reactive
//! owner and renders it to a string. Nothing is read while rendering, so nothing streams and
//! no hydration data is written; the answer is plain HTML.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use leptos::prelude::*;
use leptos::server_fn::ServerFn;
use punctual_api::Role;

use crate::Console;
use crate::session::{FLASH_COOKIE, SESSION_COOKIE, Session, cookie, cookie_value};

/// A message shown once, on the page a form post redirects to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Flash {
    /// True for success, false for a refusal or an error.
    pub ok: bool,
    /// What happened, in a sentence.
    pub text: String,
}

/// Longest message kept in the flash cookie (cookies hold about 4 KB).
const FLASH_MAX: usize = 1_500;

impl Flash {
    /// A success message.
    pub fn ok(text: impl Into<String>) -> Self {
        Self {
            ok: true,
            text: text.into(),
        }
    }

    /// An error message.
    pub fn err(text: impl Into<String>) -> Self {
        Self {
            ok: false,
            text: text.into(),
        }
    }

    /// The cookie's value.
    pub fn encode(&self) -> String {
        let mut text = self.text.clone();
        if text.len() > FLASH_MAX {
            let mut cut = FLASH_MAX;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
            text.push('…');
        }
        let raw = format!("{}|{text}", if self.ok { "ok" } else { "err" });
        URL_SAFE_NO_PAD.encode(raw)
    }

    /// The message in a cookie value.
    pub fn decode(value: &str) -> Option<Self> {
        let raw = String::from_utf8(URL_SAFE_NO_PAD.decode(value).ok()?).ok()?;
        let (kind, text) = raw.split_once('|')?;
        Some(Self {
            ok: kind == "ok",
            text: text.to_owned(),
        })
    }

    /// The `Set-Cookie` value carrying this message for the next page.
    pub fn cookie(&self, secure: bool) -> String {
        cookie(FLASH_COOKIE, &self.encode(), 60, secure)
    }
}

/// The request's cookies, as one header string.
pub fn cookies(headers: &HeaderMap) -> String {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .collect::<Vec<_>>()
        .join("; ")
}

/// True if cookies should be `Secure` for this request: as configured, else when it came over
/// HTTPS (directly or through a proxy that says so).
pub fn secure_request(console: &Console, parts: &Parts) -> bool {
    console.config().secure_cookies.unwrap_or_else(|| {
        parts.uri.scheme_str() == Some("https")
            || parts
                .headers
                .get("x-forwarded-proto")
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.split(',').next().unwrap_or("").trim() == "https")
    })
}

/// The session in the request's cookie, if it is valid now.
pub fn session_of(console: &Console, headers: &HeaderMap) -> Option<Session> {
    let all = cookies(headers);
    let value = cookie_value(&all, SESSION_COOKIE)?;
    console
        .secret()
        .open(value, console.now_ms().div_euclid(1_000), console.keys())
}

/// Everything but RFC 3986's unreserved characters is escaped.
const UNRESERVED: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// Percent-encodes `s` for a URL path segment or query value.
pub fn enc(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, UNRESERVED).to_string()
}

/// The console page of one task.
pub fn task_href(id: &str) -> String {
    format!("/console/tasks/{}", enc(id))
}

/// A logged-in page request. Extracting it redirects to the login page when there is no
/// valid session, and picks up (and clears) the one-shot message.
pub struct PageCtx {
    /// The console.
    pub console: Console,
    /// Who is logged in.
    pub session: Session,
    /// The CSRF token every form on the page carries.
    pub csrf: String,
    /// The message left by the last post, if any.
    pub flash: Option<Flash>,
    /// Now, epoch milliseconds.
    pub now_ms: i64,
    /// Cookies are `Secure` for this request.
    pub secure: bool,
}

impl FromRequestParts<Console> for PageCtx {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, console: &Console) -> Result<Self, Response> {
        let Some(session) = session_of(console, &parts.headers) else {
            let here = parts
                .uri
                .path_and_query()
                .map_or("/console", |p| p.as_str());
            let to = format!("/console/login?next={}", enc(here));
            return Err(see_other(&to, &[]));
        };
        let all = cookies(&parts.headers);
        let flash = cookie_value(&all, FLASH_COOKIE).and_then(Flash::decode);
        Ok(Self {
            csrf: console.secret().csrf_token(&session.sid),
            console: console.clone(),
            session,
            flash,
            now_ms: console.now_ms(),
            secure: secure_request(console, parts),
        })
    }
}

impl PageCtx {
    /// True if the logged-in key may do what `needed` allows.
    pub fn may(&self, needed: Option<Role>) -> bool {
        needed.is_none_or(|r| self.session.may(r))
    }

    /// The page: `body` inside the layout, as a complete response (the flash cookie cleared
    /// once shown).
    pub fn render<V: IntoView + 'static>(
        &self,
        title: &str,
        nav: Nav,
        body: impl FnOnce() -> V,
    ) -> Response {
        self.render_refreshing(title, nav, None, body)
    }

    /// [`render`](Self::render), reloading itself every `refresh_s` seconds when given (a
    /// `<meta http-equiv="refresh">`: live numbers without JavaScript).
    pub fn render_refreshing<V: IntoView + 'static>(
        &self,
        title: &str,
        nav: Nav,
        refresh_s: Option<u32>,
        body: impl FnOnce() -> V,
    ) -> Response {
        let html = render_page(title, Some(self), nav, refresh_s, body);
        let mut resp = html_response(StatusCode::OK, html);
        if self.flash.is_some() {
            set_cookie(&mut resp, &cookie(FLASH_COOKIE, "", 0, self.secure));
        }
        resp
    }
}

/// The current section, for the navigation bar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nav {
    /// The overview.
    Overview,
    /// Tasks and a task's page.
    Tasks,
    /// Dead letters.
    DeadLetters,
    /// None (login, errors).
    None,
}

/// The CSRF token, in the reactive context while a page renders, for [`PostForm`].
#[derive(Debug, Clone)]
pub struct Csrf(pub String);

/// The section being rendered, in the reactive context.
#[derive(Debug, Clone, Copy)]
struct Current(Nav);

/// A form that posts to a server function: what Leptos' `ActionForm` renders (a `<form
/// method="post">` whose action is the function's URL), plus the page's CSRF token. Without
/// wasm there is no client-side enhancement, so this is the whole of it.
#[component]
pub fn PostForm(
    /// The server function's URL (`ServerFn::url()`).
    action: &'static str,
    /// CSS class of the form.
    #[prop(optional, into)]
    class: String,
    /// The form's fields and buttons.
    children: Children,
) -> impl IntoView {
    let csrf = use_context::<Csrf>().map(|c| c.0).unwrap_or_default();
    view! {
        <form method="post" action=action class=class>
            <input type="hidden" name="csrf" value=csrf/>
            {children()}
        </form>
    }
}

fn nav_link(
    href: &'static str,
    label: &'static str,
    this: Nav,
    key: &'static str,
) -> impl IntoView {
    let current = use_context::<Current>().map(|c| c.0) == Some(this);
    view! {
        <a href=href aria-current=current.then_some("page") accesskey=key>{label}</a>
    }
}

/// Renders `body` in the layout, with `nav` marked current.
pub fn render_with<V: IntoView + 'static>(
    title: &str,
    ctx: Option<&PageCtx>,
    nav: Nav,
    body: impl FnOnce() -> V,
) -> String {
    render_page(title, ctx, nav, None, body)
}

fn render_page<V: IntoView + 'static>(
    title: &str,
    ctx: Option<&PageCtx>,
    nav: Nav,
    refresh_s: Option<u32>,
    body: impl FnOnce() -> V,
) -> String {
    let owner = Owner::new();
    let html = owner.with(|| {
        provide_context(Csrf(ctx.map(|c| c.csrf.clone()).unwrap_or_default()));
        provide_context(Current(nav));
        let header = ctx.map(|c| {
            let who = c.session.key_name.clone();
            let role = c.session.role.as_str();
            view! {
                <header class="top">
                    <a class="brand" href="/console">"punctual"</a>
                    <nav aria-label="Sections">
                        {nav_link("/console", "Overview", Nav::Overview, "o")}
                        {nav_link("/console/tasks", "Tasks", Nav::Tasks, "t")}
                        {nav_link("/console/dlq", "Dead letters", Nav::DeadLetters, "d")}
                    </nav>
                    <div class="who">
                        <span class="key" title="The API key this session logged in with">{who}</span>
                        <span class=format!("role role-{role}")>{role}</span>
                        <PostForm action=crate::actions::Logout::url() class="inline">
                            <button type="submit" class="link">"Log out"</button>
                        </PostForm>
                    </div>
                </header>
            }
        });
        let flash = ctx.and_then(|c| c.flash.clone()).map(|f| {
            let class = if f.ok { "flash ok" } else { "flash err" };
            view! { <p class=class role="status">{f.text}</p> }
        });
        let body = body();
        let doc = view! {
            <html lang="en">
                <head>
                    <meta charset="utf-8"/>
                    <meta name="viewport" content="width=device-width, initial-scale=1"/>
                    <meta name="color-scheme" content="light"/>
                    {refresh_s.map(|s| view! { <meta http-equiv="refresh" content=s.to_string()/> })}
                    <title>{format!("{title} · punctual")}</title>
                    <link rel="stylesheet" href="/console/assets/console.css"/>
                </head>
                <body>
                    {header}
                    <main>
                        {flash}
                        {body}
                    </main>
                </body>
            </html>
        };
        doc.to_html()
    });
    format!("<!DOCTYPE html>\n{html}")
}

/// An HTML answer.
pub fn html_response(status: StatusCode, html: String) -> Response {
    let mut resp = (status, html).into_response();
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    // Pages show live state and carry CSRF tokens: never cache them.
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'none'; form-action 'self'; frame-ancestors 'none'",
        ),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    resp
}

/// Adds a `Set-Cookie` header.
pub fn set_cookie(resp: &mut Response, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        resp.headers_mut().append(header::SET_COOKIE, v);
    }
}

/// `303 See Other` to `to`, with `cookies` set.
pub fn see_other(to: &str, cookies: &[String]) -> Response {
    let mut resp = StatusCode::SEE_OTHER.into_response();
    if let Ok(v) = HeaderValue::from_str(to) {
        resp.headers_mut().insert(header::LOCATION, v);
    }
    for c in cookies {
        set_cookie(&mut resp, c);
    }
    resp
}

/// A page explaining a refusal or an error, with a way on.
pub fn error_page(status: StatusCode, title: &str, message: &str, link: (&str, &str)) -> Response {
    let (href, label) = (link.0.to_owned(), link.1.to_owned());
    let (title_s, message) = (title.to_owned(), message.to_owned());
    let code = status.as_u16();
    let html = render_with(title, None, Nav::None, move || {
        view! {
            <section class="problem">
                <p class="code">{format!("{code}")}</p>
                <h1>{title_s}</h1>
                <p>{message}</p>
                <p><a href=href>{label}</a></p>
            </section>
        }
    });
    html_response(status, html)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flash_round_trips_and_is_bounded() {
        let f = Flash::err("task `a` changed; nothing was applied");
        assert_eq!(Flash::decode(&f.encode()), Some(f));
        let long = Flash::ok("é".repeat(2_000));
        let back = Flash::decode(&long.encode()).unwrap();
        assert!(back.text.len() <= FLASH_MAX + 3 && back.text.ends_with('…'));
        assert_eq!(Flash::decode("%%"), None);
    }

    #[test]
    fn urls_are_encoded() {
        assert_eq!(enc("/console/tasks?x=1"), "%2Fconsole%2Ftasks%3Fx%3D1");
        assert_eq!(enc("task-1.a_b~"), "task-1.a_b~");
    }
}
