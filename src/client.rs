//! `punctual task …` and `punctual dlq …`: a command-line client of the REST API.
//!
//! The CLI is only a client: every command is one or a few HTTP calls to a running server
//! (`--url`/`PUNCTUAL_URL`, `--key`/`PUNCTUAL_API_KEY`), so it works against any deployment and
//! cannot do anything the API refuses. Answers print as aligned tables, or as the API's own
//! JSON with `--json`. An error answer prints its problem's title and detail (and the field
//! at fault) and the command exits non-zero.
//!
//! [`run`] takes the parsed command and a writer, so tests drive it against an in-process
//! server and read what it printed.

use std::io::Write;

use clap::{Args, Subcommand};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};
use serde_json::{Value, json};

/// Where the server is, and how to talk to it.
#[derive(Debug, Clone, Args)]
pub struct ClientArgs {
    /// The server's base URL.
    #[arg(
        long,
        env = "PUNCTUAL_URL",
        default_value = "http://127.0.0.1:8080",
        global = true
    )]
    pub url: String,
    /// The API key (sent as `Authorization: Bearer <key>`).
    #[arg(long, env = "PUNCTUAL_API_KEY", hide_env_values = true, global = true)]
    pub key: Option<String>,
    /// Print the API's JSON instead of a table.
    #[arg(long, global = true)]
    pub json: bool,
}

/// A due time: exactly one of `--run-at` and `--delay`, or neither where allowed.
#[derive(Debug, Clone, Args)]
pub struct When {
    /// Due time, RFC 3339 (`2026-01-31T12:00:00Z`).
    #[arg(long, conflicts_with = "delay")]
    pub run_at: Option<String>,
    /// Due in this long: `90s`, `5m`, `1h 30m`.
    #[arg(long)]
    pub delay: Option<String>,
}

impl When {
    fn into_json(self, body: &mut serde_json::Map<String, Value>) {
        if let Some(r) = self.run_at {
            body.insert("run_at".into(), Value::String(r));
        }
        if let Some(d) = self.delay {
            body.insert("delay".into(), Value::String(d));
        }
    }
}

/// `punctual task …`
#[derive(Debug, Clone, Subcommand)]
pub enum TaskCommand {
    /// Create a task.
    Create {
        /// The client's own id (idempotent creation); a ULID when absent.
        #[arg(long)]
        id: Option<String>,
        /// When it is due.
        #[command(flatten)]
        when: When,
        /// POST the payload to this webhook URL.
        #[arg(long, conflicts_with_all = ["log", "handler"])]
        webhook: Option<String>,
        /// Only log the task (a no-op target).
        #[arg(long)]
        log: bool,
        /// Run the Rust handler registered under this name.
        #[arg(long)]
        handler: Option<String>,
        /// The payload, JSON.
        #[arg(long)]
        payload: Option<String>,
        /// Attempts before the task is dead.
        #[arg(long)]
        max_attempts: Option<u32>,
    },
    /// Show a task.
    Get {
        /// The task id.
        id: String,
    },
    /// List tasks in due order: those waiting to fire, or those matching the filters.
    List {
        /// Page size.
        #[arg(long, default_value_t = 100)]
        limit: usize,
        /// Continue after this cursor (printed under the previous page).
        #[arg(long)]
        after: Option<String>,
        /// Which tasks.
        #[command(flatten)]
        filter: ListFilter,
    },
    /// Cancel a waiting task.
    Cancel {
        /// The task id.
        id: String,
        /// Only if it is still at this version.
        #[arg(long)]
        version: Option<u64>,
    },
    /// Move a task to a new due time.
    Reschedule {
        /// The task id.
        id: String,
        /// The new due time.
        #[command(flatten)]
        when: When,
        /// Only if it is still at this version.
        #[arg(long)]
        version: Option<u64>,
    },
    /// Run a finished task (dead, succeeded, cancelled) again; due now unless a time is given.
    Replay {
        /// The task id.
        id: String,
        /// When it is due again.
        #[command(flatten)]
        when: When,
        /// Only if it is still at this version.
        #[arg(long)]
        version: Option<u64>,
    },
}

/// The filters of `punctual task list`, as `GET /v1/tasks` takes them.
#[derive(Debug, Clone, Default, PartialEq, Eq, clap::Args)]
pub struct ListFilter {
    /// Only tasks in this status (SCHEDULED, RETRY_WAIT, DEAD or CANCELLED: the statuses the
    /// stores index); without it, the tasks waiting to fire.
    #[arg(long)]
    pub status: Option<String>,
    /// Only tasks due at or after this time (RFC 3339).
    #[arg(long)]
    pub due_from: Option<String>,
    /// Only tasks due before this time (RFC 3339).
    #[arg(long)]
    pub due_to: Option<String>,
    /// Only tasks whose target is of this kind: http, log or handler.
    #[arg(long)]
    pub target: Option<String>,
    /// Only tasks whose id starts with this.
    #[arg(long)]
    pub id_prefix: Option<String>,
}

impl ListFilter {
    /// The filters as query parameters (`&name=value`, escaped), in a fixed order.
    fn query(&self) -> String {
        [
            ("status", &self.status),
            ("due_from", &self.due_from),
            ("due_to", &self.due_to),
            ("target", &self.target),
            ("id_prefix", &self.id_prefix),
        ]
        .into_iter()
        .filter_map(|(name, v)| v.as_deref().map(|v| format!("&{name}={}", seg(v))))
        .collect()
    }
}

/// `punctual dlq …`
#[derive(Debug, Clone, Subcommand)]
pub enum DlqCommand {
    /// List the dead-letter queue, oldest first.
    List {
        /// Page size.
        #[arg(long, default_value_t = 100)]
        limit: usize,
        /// Continue after this cursor.
        #[arg(long)]
        after: Option<String>,
    },
    /// Replay one dead letter's task and remove the letter.
    Replay {
        /// The letter's id (the ID column of `dlq list`).
        id: String,
    },
    /// Remove one dead letter without replaying its task.
    Purge {
        /// The letter's id (the ID column of `dlq list`).
        id: String,
    },
    /// Replay every dead letter, a page per call, until the DLQ has been walked.
    Redrive {
        /// Letters per call.
        #[arg(long, default_value_t = 100)]
        page: usize,
        /// Resume after this cursor (printed if a previous redrive stopped).
        #[arg(long)]
        after: Option<String>,
    },
}

/// A client command.
#[derive(Debug, Clone)]
pub enum ClientCommand {
    /// `punctual task …`
    Task(TaskCommand),
    /// `punctual dlq …`
    Dlq(DlqCommand),
    /// `punctual status`: the cluster at a glance.
    Status,
}

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server answered with a problem.
    #[error("{title} ({status}): {detail}{}", field.as_ref().map(|f| format!(" [field: {f}]")).unwrap_or_default())]
    Problem {
        /// HTTP status.
        status: u16,
        /// The problem's title.
        title: String,
        /// The problem's detail.
        detail: String,
        /// The field at fault.
        field: Option<String>,
    },
    /// The server could not be reached or answered something unreadable.
    #[error("{0}")]
    Transport(String),
    /// The command itself is wrong (bad `--payload` JSON, no target).
    #[error("{0}")]
    Usage(String),
    /// Printing failed.
    #[error("cannot print: {0}")]
    Io(#[from] std::io::Error),
}

struct Api {
    http: reqwest::Client,
    base: String,
    key: Option<String>,
}

impl Api {
    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value, ClientError> {
        let mut req = self.http.request(method, format!("{}{path}", self.base));
        if let Some(k) = &self.key {
            req = req.bearer_auth(k);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req
            .send()
            .await
            .map_err(|e| ClientError::Transport(format!("cannot reach {}: {e}", self.base)))?;
        let status = resp.status();
        let bytes = resp
            .bytes()
            .await
            .map_err(|e| ClientError::Transport(format!("reading the answer: {e}")))?;
        let value: Value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).map_err(|_| {
                ClientError::Transport(format!(
                    "{status}: not JSON: {}",
                    String::from_utf8_lossy(&bytes[..bytes.len().min(200)])
                ))
            })?
        };
        if status.is_success() {
            return Ok(value);
        }
        let text = |k: &str| value.get(k).and_then(Value::as_str).map(str::to_owned);
        Err(ClientError::Problem {
            status: status.as_u16(),
            title: text("title").unwrap_or_else(|| status.to_string()),
            detail: text("detail").unwrap_or_default(),
            field: text("field"),
        })
    }
}

/// Everything but RFC 3986's unreserved characters is escaped in a path segment or a query
/// value.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// A path segment or query value, escaped.
fn seg(s: &str) -> String {
    utf8_percent_encode(s, SEGMENT).to_string()
}

fn page_query(limit: usize, after: Option<&str>) -> String {
    match after {
        Some(a) => format!("?limit={limit}&after={}", seg(a)),
        None => format!("?limit={limit}"),
    }
}

/// Left-aligned columns, two spaces apart.
fn table(out: &mut dyn Write, header: &[&str], rows: &[Vec<String>]) -> std::io::Result<()> {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let mut s = String::new();
        for (i, (c, w)) in cells.iter().zip(&widths).enumerate() {
            if i + 1 == cells.len() {
                s.push_str(c);
            } else {
                s.push_str(&format!("{c:<w$}  "));
            }
        }
        s.trim_end().to_owned()
    };
    writeln!(
        out,
        "{}",
        line(header.iter().map(|h| h.to_string()).collect())
    )?;
    for r in rows {
        writeln!(out, "{}", line(r.clone()))?;
    }
    Ok(())
}

fn s(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn target(v: &Value) -> String {
    match v["type"].as_str() {
        Some("http") => format!("http {}", s(&v["url"])),
        Some("handler") => format!("handler {}", s(&v["name"])),
        Some(t) => t.to_owned(),
        None => s(v),
    }
}

const TASK_COLUMNS: [&str; 6] = ["ID", "STATUS", "RUN AT", "ATTEMPT", "VERSION", "TARGET"];

fn task_row(t: &Value) -> Vec<String> {
    vec![
        s(&t["id"]),
        s(&t["status"]),
        s(&t["run_at"]),
        format!("{}/{}", s(&t["attempt"]), s(&t["max_attempts"])),
        s(&t["version"]),
        target(&t["target"]),
    ]
}

fn print_task(out: &mut dyn Write, t: &Value) -> std::io::Result<()> {
    table(out, &TASK_COLUMNS, &[task_row(t)])?;
    if let Some(e) = t["last_error"].as_str() {
        writeln!(out, "last error: {e}")?;
    }
    Ok(())
}

fn print_json(out: &mut dyn Write, v: &Value) -> std::io::Result<()> {
    writeln!(
        out,
        "{}",
        serde_json::to_string_pretty(v).unwrap_or_default()
    )
}

fn with_version(mut body: serde_json::Map<String, Value>, version: Option<u64>) -> Value {
    if let Some(v) = version {
        body.insert("version".into(), json!(v));
    }
    Value::Object(body)
}

/// Runs one client command, printing to `out`.
pub async fn run(
    args: &ClientArgs,
    cmd: ClientCommand,
    out: &mut dyn Write,
) -> Result<(), ClientError> {
    let api = Api {
        http: reqwest::Client::builder()
            .user_agent(concat!("punctual-cli/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| ClientError::Transport(e.to_string()))?,
        base: args.url.trim_end_matches('/').to_owned(),
        key: args.key.clone(),
    };
    use reqwest::Method as M;
    let one_task = |out: &mut dyn Write, v: &Value| -> Result<(), ClientError> {
        if args.json {
            print_json(out, v)?
        } else {
            print_task(out, v)?
        }
        Ok(())
    };
    match cmd {
        ClientCommand::Task(TaskCommand::Create {
            id,
            when,
            webhook,
            log,
            handler,
            payload,
            max_attempts,
        }) => {
            let target = match (webhook, log, handler) {
                (Some(url), false, None) => json!({"type": "http", "url": url}),
                (None, true, None) => json!({"type": "log"}),
                (None, false, Some(name)) => json!({"type": "handler", "name": name}),
                _ => {
                    return Err(ClientError::Usage(
                        "give one target: --webhook URL, --log or --handler NAME".into(),
                    ));
                }
            };
            let mut body = serde_json::Map::new();
            if let Some(id) = id {
                body.insert("id".into(), json!(id));
            }
            when.into_json(&mut body);
            body.insert("target".into(), target);
            if let Some(p) = payload {
                let p: Value = serde_json::from_str(&p)
                    .map_err(|e| ClientError::Usage(format!("--payload is not JSON: {e}")))?;
                body.insert("payload".into(), p);
            }
            if let Some(n) = max_attempts {
                body.insert("max_attempts".into(), json!(n));
            }
            let v = api
                .call(M::POST, "/v1/tasks", Some(Value::Object(body)))
                .await?;
            one_task(out, &v)
        }
        ClientCommand::Task(TaskCommand::Get { id }) => {
            let v = api
                .call(M::GET, &format!("/v1/tasks/{}", seg(&id)), None)
                .await?;
            one_task(out, &v)
        }
        ClientCommand::Task(TaskCommand::List {
            limit,
            after,
            filter,
        }) => {
            let v = api
                .call(
                    M::GET,
                    &format!(
                        "/v1/tasks{}{}",
                        page_query(limit, after.as_deref()),
                        filter.query()
                    ),
                    None,
                )
                .await?;
            if args.json {
                return Ok(print_json(out, &v)?);
            }
            let rows: Vec<_> = v["tasks"]
                .as_array()
                .into_iter()
                .flatten()
                .map(task_row)
                .collect();
            table(out, &TASK_COLUMNS, &rows)?;
            if let Some(n) = v["next"].as_str() {
                writeln!(out, "more: --after {n}")?;
            }
            Ok(())
        }
        ClientCommand::Task(TaskCommand::Cancel { id, version }) => {
            let body = with_version(serde_json::Map::new(), version);
            let v = api
                .call(
                    M::POST,
                    &format!("/v1/tasks/{}/cancel", seg(&id)),
                    Some(body),
                )
                .await?;
            one_task(out, &v)
        }
        ClientCommand::Task(TaskCommand::Reschedule { id, when, version }) => {
            let mut body = serde_json::Map::new();
            when.into_json(&mut body);
            let v = api
                .call(
                    M::POST,
                    &format!("/v1/tasks/{}/reschedule", seg(&id)),
                    Some(with_version(body, version)),
                )
                .await?;
            one_task(out, &v)
        }
        ClientCommand::Task(TaskCommand::Replay { id, when, version }) => {
            let mut body = serde_json::Map::new();
            when.into_json(&mut body);
            let v = api
                .call(
                    M::POST,
                    &format!("/v1/tasks/{}/replay", seg(&id)),
                    Some(with_version(body, version)),
                )
                .await?;
            one_task(out, &v)
        }
        ClientCommand::Dlq(DlqCommand::List { limit, after }) => {
            let v = api
                .call(
                    M::GET,
                    &format!("/v1/dlq{}", page_query(limit, after.as_deref())),
                    None,
                )
                .await?;
            if args.json {
                return Ok(print_json(out, &v)?);
            }
            let rows: Vec<_> = v["letters"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|l| {
                    vec![
                        s(&l["id"]),
                        s(&l["task_id"]),
                        s(&l["dead_at"]),
                        s(&l["reason"]),
                    ]
                })
                .collect();
            table(out, &["ID", "TASK", "DEAD AT", "REASON"], &rows)?;
            if let Some(n) = v["next"].as_str() {
                writeln!(out, "more: --after {n}")?;
            }
            Ok(())
        }
        ClientCommand::Dlq(DlqCommand::Purge { id }) => {
            let v = api
                .call(M::DELETE, &format!("/v1/dlq/{}", seg(&id)), None)
                .await?;
            if args.json {
                return Ok(print_json(out, &v)?);
            }
            writeln!(
                out,
                "letter {}: task {} purged",
                s(&v["id"]),
                s(&v["task_id"])
            )?;
            Ok(())
        }
        ClientCommand::Dlq(DlqCommand::Replay { id }) => {
            let v = api
                .call(M::POST, &format!("/v1/dlq/{}/replay", seg(&id)), None)
                .await?;
            if args.json {
                return Ok(print_json(out, &v)?);
            }
            writeln!(
                out,
                "letter {}: task {} {}",
                s(&v["letter_id"]),
                s(&v["task_id"]),
                s(&v["outcome"])
            )?;
            Ok(())
        }
        ClientCommand::Dlq(DlqCommand::Redrive { page, mut after }) => {
            let mut totals = [0u64; 4];
            let mut pages = Vec::new();
            loop {
                let mut body = json!({"limit": page});
                if let Some(a) = &after {
                    body["after"] = json!(a);
                }
                let v = match api.call(M::POST, "/v1/dlq/redrive", Some(body)).await {
                    Ok(v) => v,
                    Err(e) => {
                        if let Some(a) = &after {
                            writeln!(out, "stopped; resume with --after {a}")?;
                        }
                        return Err(e);
                    }
                };
                for (t, k) in totals
                    .iter_mut()
                    .zip(["examined", "replayed", "dropped", "skipped"])
                {
                    *t += v[k].as_u64().unwrap_or(0);
                }
                after = v["next"].as_str().map(str::to_owned);
                pages.push(v);
                if after.is_none() {
                    break;
                }
            }
            if args.json {
                return Ok(print_json(
                    out,
                    &json!({"examined": totals[0], "replayed": totals[1], "dropped": totals[2], "skipped": totals[3], "pages": pages.len()}),
                )?);
            }
            table(
                out,
                &["EXAMINED", "REPLAYED", "DROPPED", "SKIPPED"],
                &[totals.iter().map(u64::to_string).collect()],
            )?;
            Ok(())
        }
        ClientCommand::Status => {
            let stats = api.call(M::GET, "/v1/stats", None).await?;
            let shards = api.call(M::GET, "/v1/shards", None).await?;
            if args.json {
                return Ok(print_json(out, &json!({"stats": stats, "shards": shards}))?);
            }
            print_status(out, &stats, &shards)?;
            Ok(())
        }
    }
}

/// `punctual status`: counts, queues, shards held, then one row per poller.
fn print_status(out: &mut dyn Write, stats: &Value, shards: &Value) -> std::io::Result<()> {
    if stats["counts"].is_object() {
        let statuses = punctual_core::task::ALL_STATUSES.map(|st| st.as_str());
        let row = statuses.iter().map(|k| s(&stats["counts"][k])).collect();
        table(out, &statuses, &[row])?;
    } else {
        writeln!(out, "counts by status: not kept by this backend")?;
    }
    writeln!(out)?;
    let queue = &stats["queue"];
    let held = |k: &str| s(&stats[k]);
    table(
        out,
        &[
            "READY",
            "IN FLIGHT",
            "DEAD LETTERS",
            "SHARDS HELD",
            "FIRED LAST MIN",
        ],
        &[vec![
            s(&queue["ready"]),
            s(&queue["in_flight"]),
            s(&queue["dead"]),
            format!("{} / {}", held("shards_held"), held("shard_count")),
            s(&stats["activity"]["fired_last_minute"]),
        ]],
    )?;
    writeln!(out)?;
    let pollers = shards["pollers"].as_array().cloned().unwrap_or_default();
    if pollers.is_empty() {
        return writeln!(out, "no poller has announced itself");
    }
    let rows: Vec<Vec<String>> = pollers
        .iter()
        .map(|p| {
            let state = match (p["live"].as_bool(), p["shards_held"].as_u64()) {
                (Some(false), _) => "gone",
                (_, Some(0)) => "standby",
                _ => "polling",
            };
            vec![
                s(&p["owner"]),
                state.to_owned(),
                s(&p["shards_held"]),
                s(&p["presence_expires_at"]),
            ]
        })
        .collect();
    table(
        out,
        &["POLLER", "STATE", "SHARDS", "PRESENCE EXPIRES"],
        &rows,
    )
}

#[cfg(test)]
mod tests {
    use super::seg;

    #[test]
    fn segments_escape_all_but_unreserved_characters() {
        assert_eq!(seg("inv-42_a.b~c"), "inv-42_a.b~c");
        assert_eq!(seg("a b/c?d#e&f=g"), "a%20b%2Fc%3Fd%23e%26f%3Dg");
        assert_eq!(seg("ü"), "%C3%BC");
    }
}
