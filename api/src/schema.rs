//! OpenAPI shapes of the domain types the API shows, which live in `punctual-core`.
//!
//! `core` has no OpenAPI dependency (it is the bottom layer, free of edge concerns), so the
//! schemas of `CreateTask`, `Target`, `Backoff` and `TaskStatus` are declared here as mirror
//! types used only by the OpenAPI derive (`#[schema(value_type = ...)]`). The tests below keep
//! each mirror honest: every core value serializes to JSON that the mirror reads back (with
//! unknown fields refused) and writes out unchanged, so a field added to core and not here
//! fails the build's tests, not a client.

#![allow(dead_code)]

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Where a task is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[schema(as = TaskStatus)]
pub(crate) enum TaskStatusDoc {
    /// Waiting in the due index for its due time.
    Scheduled,
    /// Sent to the ready queue by a poller.
    Dispatched,
    /// Claimed by a worker.
    Running,
    /// Failed, waiting for its next attempt.
    RetryWait,
    /// Ran successfully. Terminal.
    Succeeded,
    /// Attempts spent or a permanent error. Terminal; can be replayed.
    Dead,
    /// Cancelled by an operator. Terminal; can be replayed.
    Cancelled,
}

/// The kind of a task's target, as `GET /v1/tasks?target=` filters on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
#[schema(as = TargetKind)]
pub(crate) enum TargetKindDoc {
    /// A webhook.
    Http,
    /// The no-op target.
    Log,
    /// A registered Rust handler.
    Handler,
}

/// What firing a task means.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
#[schema(as = Target)]
pub(crate) enum TargetDoc {
    /// POST the payload as JSON to `url` (`http` or `https`), signed, with
    /// `Idempotency-Key: <task id>`.
    Http {
        /// The webhook URL.
        url: String,
        /// Per-request timeout in milliseconds; the worker's default when absent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(required = false, nullable = false)]
        timeout_ms: Option<u64>,
    },
    /// Log the task and succeed (a no-op target).
    Log,
    /// Run a Rust handler registered under `name`.
    Handler {
        /// The handler's registered name.
        name: String,
    },
}

/// Exponential backoff with full jitter: attempt `n` waits a random time in
/// `[0, min(max_ms, base_ms * 2^(n-1))]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = Backoff)]
pub(crate) struct BackoffDoc {
    /// The first retry's ceiling, milliseconds (positive).
    base_ms: u64,
    /// The largest ceiling, milliseconds (at least `base_ms`).
    max_ms: u64,
}

/// A request to create a task. Exactly one of `run_at` and `delay`; `target` is required.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(as = CreateTask, example = json!({
    "id": "invoice-42-reminder",
    "delay": "10m",
    "target": {"type": "http", "url": "https://example.test/hooks/reminder"},
    "payload": {"invoice": 42},
    "max_attempts": 5,
    "backoff": {"base_ms": 1000, "max_ms": 60000}
}))]
pub(crate) struct CreateTaskDoc {
    /// The client's own id (1 to 128 of `A-Z a-z 0-9 - _ . :`), for idempotent creation; a
    /// ULID is generated when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false, nullable = false)]
    id: Option<String>,
    /// Due time, RFC 3339 (`2026-01-31T12:00:00Z`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false, nullable = false, format = DateTime)]
    run_at: Option<String>,
    /// Due in this long from now: `"90s"`, `"5m"`, `"1h 30m"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false, nullable = false)]
    delay: Option<String>,
    /// What firing means. Required (it is optional in the Rust type only so that its absence
    /// is reported as a 422 naming `target`).
    #[schema(required = true, nullable = false)]
    target: Option<TargetDoc>,
    /// The body handed to the target (any JSON, at most the configured size).
    #[serde(default)]
    #[schema(required = false)]
    payload: serde_json::Value,
    /// Attempts before the task is dead (1 to 100, default 5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false, nullable = false, minimum = 1, maximum = 100)]
    max_attempts: Option<u32>,
    /// Backoff between attempts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(required = false, nullable = false)]
    backoff: Option<BackoffDoc>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use punctual_core::task::{Backoff, Target, TaskStatus};
    use punctual_core::validate::CreateTask;
    use serde::de::DeserializeOwned;

    /// `value` as JSON reads into `M` and writes back the same JSON.
    fn mirrors<T: Serialize, M: DeserializeOwned + Serialize>(value: &T) {
        let json = serde_json::to_value(value).unwrap();
        let mirror: M = serde_json::from_value(json.clone())
            .unwrap_or_else(|e| panic!("the mirror cannot read {json}: {e}"));
        assert_eq!(serde_json::to_value(&mirror).unwrap(), json);
    }

    #[test]
    fn mirrors_match_core() {
        for s in punctual_core::task::ALL_STATUSES {
            mirrors::<TaskStatus, TaskStatusDoc>(&s);
        }
        for k in punctual_core::TargetKind::ALL {
            mirrors::<punctual_core::TargetKind, TargetKindDoc>(&k);
        }
        let targets = [
            Target::Http {
                url: "https://example.test/hook".into(),
                timeout_ms: Some(5),
            },
            Target::Http {
                url: "http://h/".into(),
                timeout_ms: None,
            },
            Target::Log,
            Target::Handler { name: "n".into() },
        ];
        for t in &targets {
            mirrors::<Target, TargetDoc>(t);
        }
        mirrors::<Backoff, BackoffDoc>(&Backoff::default());
        let full = CreateTask {
            id: Some("a".into()),
            run_at: Some("2026-01-01T00:00:00Z".into()),
            delay: Some("5s".into()),
            target: Some(Target::Log),
            payload: serde_json::json!({"k": [1, 2]}),
            max_attempts: Some(3),
            backoff: Some(Backoff::default()),
        };
        mirrors::<CreateTask, CreateTaskDoc>(&full);
        mirrors::<CreateTask, CreateTaskDoc>(&CreateTask::default());
    }
}
