//! The pages. Each handler reads what it shows through `api::service`, then renders.

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use leptos::prelude::*;
use leptos::server_fn::ServerFn;
use punctual_api::service;
use punctual_api::view::{StatusCountsView, TaskListQuery};
use punctual_core::task::{Target, TargetKind, Task, TaskStatus, Transition};
use serde::Deserialize;

use crate::Console;
use crate::actions::{
    Action, CancelTask, EditPayload, Login, PurgeLetter, ReplayLetters, ReplayTask, RescheduleTask,
};
use crate::chart::{self, Bar};
use crate::fmt;
use crate::page::{
    Flash, Nav, PageCtx, PostForm, cookies, enc, error_page, html_response, render_with, see_other,
    session_of, set_cookie, task_href,
};
use crate::session::{FLASH_COOKIE, LOGIN_COOKIE, cookie, cookie_value};

/// Page size of the task and letter lists.
const PAGE: usize = 50;

fn status_badge(status: TaskStatus) -> impl IntoView {
    let name = status.to_string();
    let class = format!("st st-{}", name.to_ascii_lowercase().replace('_', "-"));
    view! { <span class=class>{name}</span> }
}

fn time_cell(ms: i64, now_ms: i64) -> impl IntoView {
    let exact = fmt::rfc3339(ms);
    view! {
        <time datetime=exact.clone() title=exact>{fmt::utc(ms)}</time>
        " "
        <span class="rel">{fmt::relative(ms, now_ms)}</span>
    }
}

/// The target's kind and what it points at (URL, handler name; nothing for `log`).
fn target_summary(t: &Target) -> (String, String) {
    let detail = match t {
        Target::Http { url, .. } => url.clone(),
        Target::Log => String::new(),
        Target::Handler { name } => name.clone(),
    };
    (t.kind().to_owned(), detail)
}

fn problem_text(e: &punctual_api::ApiError) -> String {
    let p = e.problem();
    match p.field {
        Some(f) => format!("{} ({f}): {}", p.title, p.detail),
        None => format!("{}: {}", p.title, p.detail),
    }
}

fn service_error(e: &punctual_api::ApiError) -> Response {
    let status = e.status();
    let (title, back) = if status == StatusCode::NOT_FOUND {
        ("Not found", ("/console/tasks", "Back to tasks"))
    } else {
        (
            "The console could not read this",
            ("/console", "Go to the overview"),
        )
    };
    error_page(status, title, &problem_text(e), back)
}

// ---------------------------------------------------------------------------------------
// Overview

/// A rate readable at any size: per second when at least one a second, else per minute.
fn rate(per_s: f64) -> String {
    if per_s >= 1.0 {
        format!("{per_s:.1}/s")
    } else {
        format!("{:.1}/min", per_s * 60.0)
    }
}

fn by_status(c: &StatusCountsView) -> Vec<(TaskStatus, u64)> {
    vec![
        (TaskStatus::Scheduled, c.scheduled),
        (TaskStatus::Dispatched, c.dispatched),
        (TaskStatus::Running, c.running),
        (TaskStatus::RetryWait, c.retry_wait),
        (TaskStatus::Succeeded, c.succeeded),
        (TaskStatus::Dead, c.dead),
        (TaskStatus::Cancelled, c.cancelled),
    ]
}

/// The overview's query string.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct OverviewParams {
    /// Reload every this many seconds (5 to 3,600).
    refresh: Option<u32>,
}

/// `GET /console`: counts, the chart, firing, the DLQ, the pollers and the shards; `?refresh=N` reloads it
/// every N seconds.
pub async fn overview(ctx: PageCtx, Query(params): Query<OverviewParams>) -> Response {
    let refresh = params.refresh.map(|s| s.clamp(5, 3_600));
    let api = &ctx.console.api;
    let now = ctx.now_ms;
    let shards = match service::list_shards(api).await {
        Ok(s) => s,
        Err(e) => return service_error(&e),
    };
    let stats = match service::stats(api, &shards, now).await {
        Ok(s) => s,
        Err(e) => return service_error(&e),
    };
    let pollers = match service::list_pollers(api, &shards, now).await {
        Ok(p) => p,
        Err(e) => return service_error(&e),
    };
    // The backlog starts at this minute: `stats` was judged at the same `now`.
    let now_minute = punctual_core::keys::minute_of(now);
    let past: Vec<Bar> = api
        .activity
        .minutes(now)
        .into_iter()
        .map(|m| Bar {
            minute: m.minute,
            count: m.fired,
        })
        .collect();
    let future: Vec<Bar> = stats
        .backlog
        .iter()
        .zip(now_minute..)
        .map(|(b, minute)| Bar {
            minute,
            count: b.due,
        })
        .collect();
    let due_next_hour: u64 = future.iter().map(|b| b.count).sum();
    let svg = chart::due_per_minute(&past, &future, now_minute);
    let recent = api.activity.recent(now, 15);
    let counts = stats.counts.as_ref().map(by_status);
    let queue = stats.queue;
    let (held, shard_count) = (stats.shards_held, stats.shard_count);

    ctx.render_refreshing("Overview", Nav::Overview, refresh, move || {
        let count_tiles = match counts {
            Some(counts) => counts
                .into_iter()
                .map(|(status, n)| {
                    let href = format!("/console/tasks?status={status}");
                    view! {
                        <a class="tile" href=href>
                            <span class="label">{status_badge(status)}</span>
                            <span class="value">{fmt::count(n)}</span>
                        </a>
                    }
                })
                .collect_view()
                .into_any(),
            None => view! {
                <p class="muted">"Counts by status are not cheap on this backend and are not shown."</p>
            }
            .into_any(),
        };
        let lag = |v: Option<i64>| v.map_or("—".to_owned(), |ms| format!("≈ {}", fmt::millis(ms as f64)));
        let shard_rows = shards
            .into_iter()
            .map(|l| {
                let live = l.expires_ms > now;
                let state = if live { "held" } else { "expired" };
                view! {
                    <tr class={if live { "" } else { "dim" }}>
                        <td class="num">{l.shard.to_string()}</td>
                        <td class="mono">{l.owner}</td>
                        <td>{state}</td>
                        <td class="num">{l.epoch.to_string()}</td>
                        <td>{time_cell(l.watermark_minute.saturating_mul(60_000), now)}</td>
                        <td>{time_cell(l.expires_ms, now)}</td>
                    </tr>
                }
            })
            .collect_view();
        let poller_rows = pollers
            .into_iter()
            .map(|p| {
                let state = match (p.live, p.shards_held) {
                    (false, _) => "gone",
                    (true, 0) => "standby",
                    (true, _) => "polling",
                };
                view! {
                    <tr class={if p.live { "" } else { "dim" }}>
                        <td class="mono">{p.owner}</td>
                        <td>{state}</td>
                        <td class="num">{p.shards_held.to_string()}</td>
                        <td>{p.presence_expires_ms.map_or_else(|| "—".into_any(), |ms| time_cell(ms, now).into_any())}</td>
                    </tr>
                }
            })
            .collect_view();
        view! {
            <div class="page-head">
                <h1>"Overview"</h1>
                <p class="muted">"As of " {fmt::utc(now)} " UTC · " <a href="/console">"Refresh"</a>
                    " · Auto-refresh: "
                    {[(None, "off"), (Some(10), "10 s"), (Some(60), "1 min")]
                        .into_iter()
                        .enumerate()
                        .map(|(i, (every, label))| {
                            let href = every.map_or("/console".to_owned(), |s| format!("/console?refresh={s}"));
                            let current = every == refresh;
                            let sep = if i == 0 { " " } else { " / " };
                            view! { {sep} <a href=href aria-current=current.then_some("true") class="refresh">{label}</a> }
                        })
                        .collect_view()}
                </p>
            </div>
            <section aria-labelledby="counts-h">
                <h2 id="counts-h">"Tasks by status"</h2>
                <div class="tiles">{count_tiles}</div>
            </section>
            <section aria-labelledby="chart-h">
                <h2 id="chart-h">"Tasks per minute"</h2>
                <p class="legend">
                    <span class="key past"></span> "fired, past hour"
                    <span class="key future"></span> {format!("due, next hour ({} in all)", fmt::count(due_next_hour))}
                </p>
                <div class="chart-box" inner_html=svg></div>
            </section>
            <section aria-labelledby="firing-h">
                <h2 id="firing-h">"Firing, last 15 minutes"</h2>
                <div class="tiles">
                    <div class="tile"><span class="label">"Fire rate"</span>
                        <span class="value">{rate(recent.rate_per_s)}</span>
                        <span class="sub">{format!("{} fired", fmt::count(recent.fired))}</span></div>
                    <div class="tile"><span class="label">"Lag p50"</span>
                        <span class="value">{lag(recent.lag_p50_ms)}</span>
                        <span class="sub">"claim time − due time"</span></div>
                    <div class="tile"><span class="label">"Lag p99"</span>
                        <span class="value">{lag(recent.lag_p99_ms)}</span>
                        <span class="sub">"by this process's workers"</span></div>
                    <a class="tile" href="/console/dlq"><span class="label">"DLQ depth"</span>
                        <span class={if queue.dead > 0 { "value bad" } else { "value" }}>{fmt::count(queue.dead)}</span>
                        <span class="sub">"dead letters"</span></a>
                    <div class="tile"><span class="label">"Ready queue"</span>
                        <span class="value">{fmt::count(queue.ready)}</span>
                        <span class="sub">{format!("{} in flight", fmt::count(queue.in_flight))}</span></div>
                    <div class="tile"><span class="label">"Shards held"</span>
                        <span class={if held < shard_count { "value bad" } else { "value" }}>{format!("{held} / {shard_count}")}</span>
                        <span class="sub">"leases live now"</span></div>
                </div>
            </section>
            <section aria-labelledby="pollers-h">
                <h2 id="pollers-h">"Pollers"</h2>
                <table class="grid">
                    <thead><tr>
                        <th>"Poller"</th><th>"State"</th><th class="num">"Shards held"</th>
                        <th>"Presence expires (UTC)"</th>
                    </tr></thead>
                    <tbody>{poller_rows}</tbody>
                </table>
            </section>
            <section aria-labelledby="shards-h">
                <h2 id="shards-h">"Shards"</h2>
                <table class="grid">
                    <thead><tr>
                        <th class="num">"Shard"</th><th>"Lease owner"</th><th>"Lease"</th>
                        <th class="num">"Epoch"</th><th>"Watermark (UTC)"</th><th>"Lease expires (UTC)"</th>
                    </tr></thead>
                    <tbody>{shard_rows}</tbody>
                </table>
            </section>
        }
    })
}

// ---------------------------------------------------------------------------------------
// Tasks

/// The task list's query string, as the filter form sends it.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct TasksParams {
    status: Option<String>,
    target: Option<String>,
    id_prefix: Option<String>,
    /// `datetime-local`, UTC.
    due_from: Option<String>,
    /// `datetime-local`, UTC.
    due_to: Option<String>,
    after: Option<String>,
}

fn non_empty(v: &Option<String>) -> Option<String> {
    v.as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

impl TasksParams {
    /// The service's query: `datetime-local` values become RFC 3339 (UTC); a value that is not
    /// a date is passed on as typed, for the service to refuse naming the field.
    fn query(&self) -> TaskListQuery {
        let time = |v: &Option<String>| {
            non_empty(v).map(|s| fmt::parse_datetime_local(&s).map(fmt::rfc3339).unwrap_or(s))
        };
        TaskListQuery {
            status: non_empty(&self.status),
            due_from: time(&self.due_from),
            due_to: time(&self.due_to),
            target: non_empty(&self.target),
            id_prefix: non_empty(&self.id_prefix),
            after: non_empty(&self.after),
            limit: Some(PAGE),
        }
    }

    /// This query with another cursor, as a URL.
    fn href(&self, after: Option<&str>) -> String {
        let mut q = Vec::new();
        for (k, v) in [
            ("status", &self.status),
            ("target", &self.target),
            ("id_prefix", &self.id_prefix),
            ("due_from", &self.due_from),
            ("due_to", &self.due_to),
        ] {
            if let Some(v) = non_empty(v) {
                q.push(format!("{k}={}", enc(&v)));
            }
        }
        if let Some(a) = after {
            q.push(format!("after={}", enc(a)));
        }
        if q.is_empty() {
            "/console/tasks".into()
        } else {
            format!("/console/tasks?{}", q.join("&"))
        }
    }
}

/// `GET /console/tasks`: tasks in due order, filtered, a page at a time.
pub async fn tasks(ctx: PageCtx, Query(params): Query<TasksParams>) -> Response {
    let api = &ctx.console.api;
    let query = params.query();
    let (page, problem) = match service::list_tasks(api, &query).await {
        Ok(p) => (p, None),
        Err(e) => (
            punctual_core::store::Page {
                items: Vec::new(),
                next: None,
            },
            Some(problem_text(&e)),
        ),
    };
    let now = ctx.now_ms;
    let statuses = service::listable_statuses(api);
    let first_href = params.href(None);
    let next_href = page.next.as_deref().map(|n| params.href(Some(n)));
    let paged = query.after.is_some();
    let current_status = non_empty(&params.status).unwrap_or_default();
    let current_target = non_empty(&params.target).unwrap_or_default();
    let p = params.clone();
    let count = page.items.len();
    let rows = page.items;

    ctx.render("Tasks", Nav::Tasks, move || {
        let status_options = statuses
            .iter()
            .map(|s| {
                let name = s.to_string();
                let selected = name == current_status;
                view! { <option value=name.clone() selected=selected>{name.clone()}</option> }
            })
            .collect_view();
        let target_options = TargetKind::ALL
            .map(TargetKind::as_str)
            .into_iter()
            .map(|t| view! { <option value=t selected={t == current_target}>{t}</option> })
            .collect_view();
        let quick = [
            ("", "Waiting"),
            ("DEAD", "Dead"),
            ("RETRY_WAIT", "Retrying"),
            ("CANCELLED", "Cancelled"),
        ]
        .into_iter()
        .map(|(s, label)| {
            let href = if s.is_empty() {
                "/console/tasks".to_owned()
            } else {
                format!("/console/tasks?status={s}")
            };
            let current = s == current_status;
            view! { <a href=href aria-current=current.then_some("page")>{label}</a> }
        })
        .collect_view();
        let body_rows = rows
            .into_iter()
            .map(|t| task_row(t, now))
            .collect_view();
        let empty = (count == 0 && problem.is_none())
            .then(|| view! { <tr><td colspan="7" class="empty">"No task matches."</td></tr> });
        let problem = problem.map(|p| view! { <p class="flash err" role="alert">{p}</p> });
        view! {
            <div class="page-head">
                <h1>"Tasks"</h1>
                <nav class="tabs" aria-label="Quick filters">{quick}</nav>
            </div>
            <form method="get" action="/console/tasks" class="filters" role="search">
                <label>"Status"
                    <select name="status">
                        <option value="">"waiting (due index)"</option>
                        {status_options}
                    </select>
                </label>
                <label>"Target"
                    <select name="target">
                        <option value="">"any"</option>
                        {target_options}
                    </select>
                </label>
                <label>"Id prefix"
                    <input type="search" name="id_prefix" value=non_empty(&p.id_prefix).unwrap_or_default()
                        placeholder="e.g. invoice-" autocomplete="off" spellcheck="false"/>
                </label>
                <label>"Due from (UTC)"
                    <input type="datetime-local" name="due_from" value=non_empty(&p.due_from).unwrap_or_default()/>
                </label>
                <label>"Due before (UTC)"
                    <input type="datetime-local" name="due_to" value=non_empty(&p.due_to).unwrap_or_default()/>
                </label>
                <div class="buttons">
                    <button type="submit" class="primary">"Filter"</button>
                    <a href="/console/tasks">"Clear"</a>
                </div>
            </form>
            {problem}
            <table class="grid tasks">
                <thead><tr>
                    <th>"Task id"</th><th>"Status"</th><th>"Due (UTC)"</th><th>"Target"</th>
                    <th class="num">"Attempts"</th><th class="num">"Version"</th><th>"Last error"</th>
                </tr></thead>
                <tbody>{body_rows}{empty}</tbody>
            </table>
            <nav class="pager" aria-label="Pages">
                <span class="muted">{format!("{count} on this page")}</span>
                {paged.then(|| view! { <a href=first_href.clone()>"⇤ First page"</a> })}
                {next_href.map(|h| view! { <a href=h rel="next">"Next page →"</a> })}
            </nav>
        }
    })
}

fn task_row(t: Task, now: i64) -> impl IntoView {
    let (kind, detail) = target_summary(&t.target);
    let href = task_href(&t.task_id);
    let err = t.last_error.clone().unwrap_or_default();
    view! {
        <tr>
            <td class="mono"><a href=href>{t.task_id.clone()}</a></td>
            <td>{status_badge(t.status)}</td>
            <td class="nowrap">{time_cell(t.due_ms, now)}</td>
            <td class="target"><span class="kind">{kind}</span> " " <span class="mono dim" title=detail.clone()>{detail.clone()}</span></td>
            <td class="num">{format!("{}/{}", t.attempt, t.max_attempts)}</td>
            <td class="num">{t.version.to_string()}</td>
            <td class="error" title=err.clone()>{err.clone()}</td>
        </tr>
    }
}

// ---------------------------------------------------------------------------------------
// Task detail

/// `GET /console/tasks/{id}`: every attribute, and the actions the task's status allows.
pub async fn task(ctx: PageCtx, Path(id): Path<String>) -> Response {
    let t = match service::get_task(&ctx.console.api, &id).await {
        Ok(t) => t,
        Err(e) => return service_error(&e),
    };
    let now = ctx.now_ms;
    let may_act = ctx.may(Action::Cancel.needs());
    let title = format!("Task {}", t.task_id);
    ctx.render(&title, Nav::Tasks, move || task_detail(t, now, may_act))
}

/// A form acting on one task: a [`PostForm`] that also carries the task's id and the version
/// the page showed, so the action applies only to what the operator saw.
#[component]
fn TaskForm(
    /// The server function's URL.
    action: &'static str,
    /// CSS class of the form.
    class: &'static str,
    /// The task.
    id: String,
    /// The version the page was rendered with.
    version: u64,
    /// The form's own fields and buttons.
    children: Children,
) -> impl IntoView {
    view! {
        <PostForm action=action class=class>
            <input type="hidden" name="id" value=id/>
            <input type="hidden" name="version" value=version.to_string()/>
            {children()}
        </PostForm>
    }
}

fn task_detail(t: Task, now: i64, may_act: bool) -> impl IntoView {
    let (kind, detail) = target_summary(&t.target);
    let timeout = match &t.target {
        Target::Http {
            timeout_ms: Some(ms),
            ..
        } => format!(" (timeout {})", fmt::millis(*ms as f64)),
        _ => String::new(),
    };
    let payload = serde_json::to_string_pretty(&t.payload).unwrap_or_default();
    let rows_payload = payload.lines().count().clamp(4, 24);
    let id = t.task_id.clone();
    let status = t.status;
    let running = status == TaskStatus::Running;
    let cancellable = status.apply(Transition::Cancel).is_ok();
    let replayable = status.is_terminal();
    let backoff = format!(
        "full jitter, base {} · max {}",
        fmt::millis(t.backoff.base_ms as f64),
        fmt::millis(t.backoff.max_ms as f64)
    );
    let payload_shown = payload.clone();
    let actions = may_act.then(|| {
        let v = t.version;
        if running {
            return view! {
                <section class="actions" aria-labelledby="act-h">
                    <h2 id="act-h">"Actions"</h2>
                    <p class="muted">"This task is RUNNING: it can be changed once its run ends (succeeded, retried or dead)."</p>
                </section>
            }
            .into_any();
        }
        let due_local = fmt::datetime_local(t.due_ms.max(now));
        view! {
            <section class="actions" aria-labelledby="act-h">
                <h2 id="act-h">"Actions"</h2>
                <div class="action-grid">
                    <TaskForm action=RescheduleTask::url() class="act reschedule-at" id=id.clone() version=v>
                        <label for="run_at">"Reschedule to (UTC)"</label>
                        <div class="row">
                            <input type="datetime-local" id="run_at" name="run_at" value=due_local required=true/>
                            <button type="submit">"Reschedule"</button>
                        </div>
                    </TaskForm>
                    <TaskForm action=RescheduleTask::url() class="act reschedule-in" id=id.clone() version=v>
                        <label for="in_minutes">"Or run in … minutes from now"</label>
                        <div class="row">
                            <input type="number" id="in_minutes" name="in_minutes" min="0" max="525600" value="5" required=true class="short"/>
                            <button type="submit">"Move"</button>
                        </div>
                    </TaskForm>
                    {cancellable.then(|| view! {
                        <TaskForm action=CancelTask::url() class="act cancel" id=id.clone() version=v>
                            <label>"Stop it from firing"</label>
                            <div class="row"><button type="submit" class="danger">"Cancel task"</button></div>
                        </TaskForm>
                    })}
                    {replayable.then(|| view! {
                        <TaskForm action=ReplayTask::url() class="act replay" id=id.clone() version=v>
                            <label>"Run it again now, attempts reset"</label>
                            <div class="row"><button type="submit" class="primary">"Replay now"</button></div>
                        </TaskForm>
                    })}
                </div>
                <TaskForm action=EditPayload::url() class="act payload-edit" id=id.clone() version=v>
                    <label for="payload">"Payload (JSON, checked before saving)"</label>
                    <textarea id="payload" name="payload" rows=rows_payload.to_string() spellcheck="false">{payload.clone()}</textarea>
                    <div class="row"><button type="submit">"Save payload"</button>
                        <span class="muted">{format!("Saved only if the task is still at version {}.", t.version)}</span></div>
                </TaskForm>
            </section>
        }
        .into_any()
    });
    let read_only = (!may_act).then(|| {
        view! {
            <p class="muted read-only">"Your key is a viewer key: this console is read-only for it."</p>
        }
    });
    let last_error = t.last_error.clone();
    view! {
        <div class="page-head">
            <h1><span class="muted">"Task "</span><span class="mono">{t.task_id.clone()}</span></h1>
            <p>{status_badge(status)} " " <span class="muted">{format!("version {}", t.version)}</span>
               " · " <a href="/console/tasks">"All tasks"</a></p>
        </div>
        <div class="detail">
            <table class="kv">
                <tbody>
                    <tr><th>"Status"</th><td>{status_badge(status)}</td></tr>
                    <tr><th>"Version"</th><td class="num-l">{t.version.to_string()}</td></tr>
                    <tr><th>{if status.is_terminal() { "Was due (UTC)" } else { "Due (UTC)" }}</th><td>{time_cell(t.due_ms, now)}</td></tr>
                    <tr><th>"Attempts"</th><td>{format!("{} of {}", t.attempt, t.max_attempts)}</td></tr>
                    <tr><th>"Backoff"</th><td>{backoff}</td></tr>
                    <tr><th>"Target"</th><td><span class="kind">{kind}</span> " " <span class="mono">{detail}</span>{timeout}</td></tr>
                    <tr><th>"Shard"</th><td>{t.shard.to_string()}</td></tr>
                    <tr><th>"Due bucket"</th><td class="mono">{t.due_bucket.clone().unwrap_or_else(|| "— (not waiting in the due index)".into())}</td></tr>
                    <tr><th>"Running until"</th><td>{t.running_until.map(|ms| time_cell(ms, now).into_any()).unwrap_or_else(|| "—".into_any())}</td></tr>
                    <tr><th>"Created (UTC)"</th><td>{time_cell(t.created_ms, now)}</td></tr>
                    <tr><th>"Updated (UTC)"</th><td>{time_cell(t.updated_ms, now)}</td></tr>
                    <tr><th>"Last error"</th><td>{match last_error {
                        Some(e) => view! { <pre class="error-text">{e}</pre> }.into_any(),
                        None => "—".into_any(),
                    }}</td></tr>
                </tbody>
            </table>
            <div>
                <h2>"Payload"</h2>
                <pre class="payload">{payload_shown}</pre>
            </div>
        </div>
        {actions}
        {read_only}
    }
}

// ---------------------------------------------------------------------------------------
// Dead letters

/// The letter list's query string.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct LettersParams {
    after: Option<String>,
}

/// `GET /console/dlq`: dead letters, oldest first; replay one or the selected, purge one.
pub async fn dead_letters(ctx: PageCtx, Query(params): Query<LettersParams>) -> Response {
    let after = non_empty(&params.after);
    let page =
        match service::list_dead_letters(&ctx.console.api, after.as_deref(), Some(PAGE)).await {
            Ok(p) => p,
            Err(e) => return service_error(&e),
        };
    let now = ctx.now_ms;
    let may_act = ctx.may(Action::ReplayLetters.needs());
    let may_purge = ctx.may(Action::PurgeLetter.needs());
    let here = match &after {
        Some(a) => format!("/console/dlq?after={}", enc(a)),
        None => "/console/dlq".to_owned(),
    };
    let next_href = page
        .next
        .as_deref()
        .map(|n| format!("/console/dlq?after={}", enc(n)));
    let count = page.items.len();
    let letters = page.items;

    ctx.render("Dead letters", Nav::DeadLetters, move || {
        let rows = letters
            .into_iter()
            .enumerate()
            .map(|(i, l)| {
                let check_name = format!("ids[{i}]");
                let check_id = format!("sel-{i}");
                let purge_href = format!("/console/dlq/{}/purge", enc(&l.id));
                let task_link = task_href(&l.message.task_id);
                view! {
                    <tr>
                        {may_act.then(|| view! {
                            <td class="check"><input type="checkbox" id=check_id.clone() name=check_name.clone() value=l.id.clone()
                                aria-label=format!("Select letter {}", l.id)/></td>
                        })}
                        <td class="mono">{l.id.clone()}</td>
                        <td class="mono"><a href=task_link>{l.message.task_id.clone()}</a></td>
                        <td class="num">{l.message.version.to_string()}</td>
                        <td class="nowrap">{time_cell(l.message.due_ms, now)}</td>
                        <td class="nowrap">{time_cell(l.dead_ms, now)}</td>
                        <td class="error" title=l.reason.clone()>{l.reason.clone()}</td>
                        {may_act.then(|| view! {
                            <td class="nowrap">
                                <button type="submit" name="only" value=l.id.clone()>"Replay"</button>
                                {may_purge.then(|| view! { " " <a class="button danger" href=purge_href.clone()>"Purge…"</a> })}
                            </td>
                        })}
                    </tr>
                }
            })
            .collect_view();
        let cols = if may_act { 8 } else { 6 };
        let empty = (count == 0).then(|| {
            view! { <tr><td colspan=cols.to_string() class="empty">"The dead-letter queue is empty."</td></tr> }
        });
        let table = view! {
            <table class="grid letters">
                <thead><tr>
                    {may_act.then(|| view! { <th class="check"><span class="sr">"Select"</span></th> })}
                    <th>"Letter"</th><th>"Task"</th><th class="num">"Version"</th>
                    <th>"Was due (UTC)"</th><th>"Dead since (UTC)"</th><th>"Reason"</th>
                    {may_act.then(|| view! { <th>"Actions"</th> })}
                </tr></thead>
                <tbody>{rows}{empty}</tbody>
            </table>
        };
        let body = if may_act {
            view! {
                <PostForm action=ReplayLetters::url() class="letters-form">
                    <input type="hidden" name="back" value=here.clone()/>
                    {table}
                    <div class="bulk">
                        <button type="submit" class="primary">"Replay selected"</button>
                        <span class="muted">"Replayed tasks go back to SCHEDULED, due now, attempts reset."</span>
                    </div>
                </PostForm>
            }
            .into_any()
        } else {
            table.into_any()
        };
        view! {
            <div class="page-head">
                <h1>"Dead letters"</h1>
                <p class="muted">"Tasks that spent their attempts or failed for good, oldest first."</p>
            </div>
            {body}
            <nav class="pager" aria-label="Pages">
                <span class="muted">{format!("{count} on this page")}</span>
                {after.is_some().then(|| view! { <a href="/console/dlq">"⇤ First page"</a> })}
                {next_href.map(|h| view! { <a href=h rel="next">"Next page →"</a> })}
            </nav>
        }
    })
}

/// `GET /console/dlq/{id}/purge`: the confirmation step before a purge (a page, so it works
/// without JavaScript).
pub async fn purge_confirm(ctx: PageCtx, Path(id): Path<String>) -> Response {
    if !ctx.may(Action::PurgeLetter.needs()) {
        return error_page(
            StatusCode::FORBIDDEN,
            "Refused: role too weak",
            &format!(
                "Your key `{}` has role {}; purging a dead letter needs {}.",
                ctx.session.key_name,
                ctx.session.role,
                Action::PurgeLetter.needs().map_or("", |r| r.as_str())
            ),
            ("/console/dlq", "Back to dead letters"),
        );
    }
    let letter = match service::get_letter(&ctx.console.api, &id).await {
        Ok(l) => l,
        Err(e) => return service_error(&e),
    };
    let now = ctx.now_ms;
    ctx.render("Purge dead letter", Nav::DeadLetters, move || {
        view! {
            <section class="confirm">
                <h1>"Purge this dead letter?"</h1>
                <p>"The letter is removed from the dead-letter queue for good. Its task stays as it is ("
                   "you can still replay it from its page)."</p>
                <table class="kv">
                    <tbody>
                        <tr><th>"Letter"</th><td class="mono">{letter.id.clone()}</td></tr>
                        <tr><th>"Task"</th><td class="mono"><a href=task_href(&letter.message.task_id)>{letter.message.task_id.clone()}</a></td></tr>
                        <tr><th>"Dead since (UTC)"</th><td>{time_cell(letter.dead_ms, now)}</td></tr>
                        <tr><th>"Reason"</th><td>{letter.reason.clone()}</td></tr>
                    </tbody>
                </table>
                <PostForm action=PurgeLetter::url() class="row">
                    <input type="hidden" name="id" value=letter.id.clone()/>
                    <button type="submit" class="danger" autofocus=true>"Purge permanently"</button>
                    <a href="/console/dlq">"Keep it"</a>
                </PostForm>
            </section>
        }
    })
}

// ---------------------------------------------------------------------------------------
// Login and the rest

/// The login page's query string.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct LoginParams {
    next: Option<String>,
}

/// `GET /console/login`: the API-key form. A fresh nonce goes into a short-lived cookie and
/// its signed token into the form, so the post can be checked without a session.
pub async fn login(
    State(console): State<Console>,
    Query(params): Query<LoginParams>,
    req_parts: axum::http::request::Parts,
) -> Response {
    let headers = &req_parts.headers;
    if session_of(&console, headers).is_some() {
        return see_other("/console", &[]);
    }
    let secure = crate::page::secure_request(&console, &req_parts);
    let Ok((nonce, token)) = console.secret().login_nonce() else {
        return error_page(
            StatusCode::INTERNAL_SERVER_ERROR,
            "No randomness",
            "The server could not make a login token.",
            ("/console/login", "Try again"),
        );
    };
    let jar = cookies(headers);
    let flash = cookie_value(&jar, FLASH_COOKIE).and_then(Flash::decode);
    let next = non_empty(&params.next).unwrap_or_else(|| "/console".into());
    let html = render_with("Log in", None, Nav::None, move || {
        let flash = flash.map(|f| {
            view! { <p class={if f.ok { "flash ok" } else { "flash err" }} role="status">{f.text}</p> }
        });
        view! {
            <section class="login">
                <p class="brand big">"punctual"</p>
                <h1>"Operator console"</h1>
                {flash}
                <form method="post" action=Login::url()>
                    <input type="hidden" name="token" value=token/>
                    <input type="hidden" name="next" value=next/>
                    <label for="key">"API key"</label>
                    <input type="password" id="key" name="key" required=true autofocus=true
                        autocomplete="current-password" spellcheck="false"/>
                    <button type="submit" class="primary">"Log in"</button>
                </form>
                <p class="muted small">"Use an API key of this server. Viewer keys can look; operator and admin keys can also act."</p>
            </section>
        }
    });
    let mut resp = html_response(StatusCode::OK, html);
    set_cookie(&mut resp, &cookie(LOGIN_COOKIE, &nonce, 3_600, secure));
    set_cookie(&mut resp, &cookie(FLASH_COOKIE, "", 0, secure));
    resp
}

/// Any other page under `/console`.
pub async fn not_found() -> Response {
    error_page(
        StatusCode::NOT_FOUND,
        "No such page",
        "The console has no page at this address.",
        ("/console", "Go to the overview"),
    )
}
