//! AWS Lambda entrypoints (cargo feature `lambda`): the same worker, API and poller code as
//! `punctual serve`, driven by Lambda events instead of a long-running loop.
//!
//! | function | event | what one invocation does |
//! |---|---|---|
//! | [`worker`] | SQS event source on `{prefix}ready`, batches of up to 10 | [`Worker::handle`](punctual_worker::Worker::handle) per record, concurrently; answers a partial batch response listing exactly the records to redeliver |
//! | [`api`] | Function URL or API Gateway HTTP API (payload v2), or REST API (v1) | the [`app`](crate::app) router of `punctual serve` under `lambda_http` |
//! | [`poller`] | EventBridge schedule, every minute | [`punctual_poller::run`] until a deadline taken from the Lambda context, then releases every lease |
//!
//! # Who deletes a message
//!
//! Under the SQS event source the Lambda service owns a message's fate: it deletes the
//! records an invocation did not list in `batchItemFailures`, and leaves the listed ones to
//! reappear when their visibility timeout ends. The worker's protocol already says what
//! becomes of each message ([`Disposition`](punctual_worker::Disposition)), so the mapping is
//! one rule:
//!
//! ```text
//! record reported as a failure (redelivered)  ⇔  ¬ disposition.message_gone()
//!                                              ∨  the record is not a punctual message
//! ```
//!
//! Deleted-by-the-worker dispositions (succeeded, stale, re-indexed retry, dead) are left to
//! the Lambda service to delete, so the worker's own `DeleteMessageBatch` would be a second
//! delete of the same message: [`worker::EventSourceQueue`] turns the worker's acks into
//! no-ops (saving ~0.1 SQS request per task) and passes every other queue call through. A
//! kept retry or a deferred message has had its visibility changed by the worker and is
//! listed as a failure, so the service leaves it alone and it comes back at the planned
//! time. A dead task's message is sent to the DLQ by the worker itself (with its reason) and
//! then deleted by the service. A record whose body is not a dispatch message is listed, so
//! SQS's redrive policy moves it to the DLQ after `maxReceiveCount` receives.
//!
//! # Configuration
//!
//! Only the entrypoints ([`worker::main`], [`api::main`], [`poller::main`]) read the
//! environment, through [`LambdaEnv`]; everything else takes plain config structs, so tests
//! drive the handlers directly with event fixtures.

pub mod api;
pub mod poller;
pub mod worker;

use std::collections::HashMap;

use anyhow::Context as _;

/// Environment variable: prefix of the table and queue names (default
/// [`DEFAULT_PREFIX`](punctual_store::aws::names::DEFAULT_PREFIX)).
pub const ENV_PREFIX: &str = "PUNCTUAL_AWS_PREFIX";
/// Environment variable: API keys as `role:key` pairs separated by commas.
pub const ENV_API_KEYS: &str = "PUNCTUAL_API_KEYS";
/// Environment variable: API keys as a JSON key file (`{"keys": [{"role", "sha256"}]}`), so
/// the function's configuration holds digests only.
pub const ENV_API_KEYS_JSON: &str = "PUNCTUAL_API_KEYS_JSON";
/// Environment variable: the webhook signing secret (required by the worker).
pub const ENV_WEBHOOK_SECRET: &str = "PUNCTUAL_WEBHOOK_SECRET";
/// Environment variable: how long a claim holds a task, milliseconds (worker).
pub const ENV_RUN_TIMEOUT_MS: &str = "PUNCTUAL_RUN_TIMEOUT_MS";
/// Environment variable: timeout of one webhook call, milliseconds (worker).
pub const ENV_HTTP_TIMEOUT_MS: &str = "PUNCTUAL_HTTP_TIMEOUT_MS";
/// Environment variable: how long one poller invocation polls, milliseconds.
pub const ENV_POLLER_RUN_FOR_MS: &str = "PUNCTUAL_POLLER_RUN_FOR_MS";
/// Environment variable: how long before the Lambda deadline the poller stops, milliseconds.
pub const ENV_POLLER_RELEASE_MARGIN_MS: &str = "PUNCTUAL_POLLER_RELEASE_MARGIN_MS";

/// The environment of one function, read once at cold start.
#[derive(Debug, Clone, Default)]
pub struct LambdaEnv {
    vars: HashMap<String, String>,
}

impl LambdaEnv {
    /// The process environment.
    pub fn from_process() -> Self {
        Self {
            vars: std::env::vars().collect(),
        }
    }

    /// Given variables (tests).
    pub fn from_pairs<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        Self {
            vars: pairs
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
        }
    }

    /// A variable, if set and not blank.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.vars
            .get(name)
            .map(String::as_str)
            .filter(|v| !v.trim().is_empty())
    }

    /// The table and queue prefix.
    pub fn prefix(&self) -> String {
        self.get(ENV_PREFIX)
            .unwrap_or(punctual_store::aws::names::DEFAULT_PREFIX)
            .to_owned()
    }

    /// A number of milliseconds, or `default`; an unparsable value is an error naming it.
    pub fn ms(&self, name: &str, default: i64) -> anyhow::Result<i64> {
        match self.get(name) {
            None => Ok(default),
            Some(v) => v
                .trim()
                .parse()
                .with_context(|| format!("{name}={v:?} is not a number of milliseconds")),
        }
    }
}

/// Logs to stdout (CloudWatch Logs) without ANSI colours, filtered by `RUST_LOG`.
pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,hyper=warn,reqwest=warn,aws_smithy_runtime=warn".into()),
        )
        .with_ansi(false)
        .without_time()
        .try_init();
}
