//! punctual's operator console, mounted in the API's axum server under `/console`.
//!
//! For now a single server-rendered page that says where things are; the Leptos console
//! (server-rendered, forms without JavaScript) replaces it. `/` redirects here so that the
//! URL `punctual serve` prints is the one an operator opens.

use axum::Router;
use axum::response::{Html, Redirect};
use axum::routing::get;

const PAGE: &str = r#"<!doctype html>
<html lang="en">
<head><meta charset="utf-8"><title>punctual console</title>
<style>body{font:15px/1.5 system-ui,sans-serif;margin:2rem auto;max-width:48rem;padding:0 1rem;color:#1b1f24}
code{background:#f1f3f5;padding:0 .25rem;border-radius:3px}</style></head>
<body>
<h1>punctual</h1>
<p>The scheduler is running. The operator console is being built; meanwhile the REST API
answers under <a href="/v1/tasks"><code>/v1</code></a>:</p>
<ul>
<li><code>POST /v1/tasks</code>, <code>POST /v1/tasks/batch</code>: schedule tasks</li>
<li><code>GET /v1/tasks</code>: pending tasks by due time</li>
<li><code>GET /v1/tasks/{id}</code>, <code>POST /v1/tasks/{id}/cancel</code></li>
<li><a href="/healthz"><code>GET /healthz</code></a></li>
</ul>
</body></html>
"#;

/// The console's routes: `/console`, and `/` redirecting to it.
pub fn router() -> Router {
    Router::new()
        .route("/", get(|| async { Redirect::to("/console") }))
        .route("/console", get(|| async { Html(PAGE) }))
}
