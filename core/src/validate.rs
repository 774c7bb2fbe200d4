//! Validation of user input: the edge where bad input is refused with the field at fault.
//!
//! A [`CreateTask`] is what a user sends (through the API, the CLI or the library); the only
//! way to a [`NewTask`] is [`CreateTask::validate`], so nothing unchecked reaches a store.

use serde::{Deserialize, Serialize};

use crate::task::{Backoff, DEFAULT_MAX_ATTEMPTS, NewTask, Target, new_task_id};

/// Largest accepted payload, serialized, by default: 256 KiB.
pub const DEFAULT_MAX_PAYLOAD_BYTES: usize = 256 * 1024;
/// How far ahead a task may be scheduled by default: 366 days.
pub const DEFAULT_MAX_AHEAD_MS: i64 = 366 * 86_400_000;
/// Most attempts a task may ask for.
pub const MAX_ATTEMPTS_LIMIT: u32 = 100;
/// Longest client id.
pub const MAX_ID_LEN: usize = 128;
/// Most tasks in one batch.
pub const MAX_BATCH: usize = 1_000;

/// Limits applied to user input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest serialized payload, bytes. Default [`DEFAULT_MAX_PAYLOAD_BYTES`].
    pub max_payload_bytes: usize,
    /// How far ahead `run_at` may be, ms. Default [`DEFAULT_MAX_AHEAD_MS`].
    pub max_ahead_ms: i64,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_payload_bytes: DEFAULT_MAX_PAYLOAD_BYTES,
            max_ahead_ms: DEFAULT_MAX_AHEAD_MS,
        }
    }
}

/// Input refused, naming the field at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize)]
#[error("{field}: {message}")]
pub struct ValidationError {
    /// The field, as a JSON path (`target.url`, `tasks[3].run_at`).
    pub field: String,
    /// Why it is refused.
    pub message: String,
}

impl ValidationError {
    /// An error for `field`.
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }

    /// The same error under a parent path, e.g. `tasks[3]`.
    pub fn within(self, parent: &str) -> Self {
        Self {
            field: format!("{parent}.{}", self.field),
            message: self.message,
        }
    }
}

/// A request to create a task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct CreateTask {
    /// The client's own id, for idempotent creation; a ULID is generated when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Due time, RFC 3339. Exactly one of `run_at` and `delay`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_at: Option<String>,
    /// Due in this long from now, e.g. `"90s"`, `"5m"`, `"1h 30m"`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay: Option<String>,
    /// What firing means.
    pub target: Option<Target>,
    /// The body handed to the target; `null` when absent.
    #[serde(default)]
    pub payload: serde_json::Value,
    /// Attempts before the task is dead (1..=100, default 5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    /// Backoff between attempts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff: Option<Backoff>,
}

impl CreateTask {
    /// Checks every field and builds the task to store, due relative to `now_ms`.
    pub fn validate(self, now_ms: i64, limits: &Limits) -> Result<NewTask, ValidationError> {
        let task_id = match self.id {
            Some(id) => {
                validate_id(&id)?;
                id
            }
            None => new_task_id(),
        };
        let due_ms = match (&self.run_at, &self.delay) {
            (Some(_), Some(_)) => {
                return Err(ValidationError::new(
                    "run_at",
                    "give run_at or delay, not both",
                ));
            }
            (None, None) => {
                return Err(ValidationError::new(
                    "run_at",
                    "required: give run_at or delay",
                ));
            }
            (Some(run_at), None) => {
                parse_rfc3339(run_at).map_err(|m| ValidationError::new("run_at", m))?
            }
            (None, Some(delay)) => {
                let d = humantime::parse_duration(delay).map_err(|e| {
                    ValidationError::new(
                        "delay",
                        format!("not a duration ({e}); try \"90s\" or \"5m\""),
                    )
                })?;
                now_ms.saturating_add(i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            }
        };
        if due_ms > now_ms.saturating_add(limits.max_ahead_ms) {
            let field = if self.run_at.is_some() {
                "run_at"
            } else {
                "delay"
            };
            return Err(ValidationError::new(
                field,
                format!("more than {} days ahead", limits.max_ahead_ms / 86_400_000),
            ));
        }
        let target = self
            .target
            .ok_or_else(|| ValidationError::new("target", "required"))?;
        validate_target(&target)?;
        validate_payload(&self.payload, limits)?;
        let max_attempts = self.max_attempts.unwrap_or(DEFAULT_MAX_ATTEMPTS);
        validate_max_attempts(max_attempts)?;
        let backoff = self.backoff.unwrap_or_default();
        validate_backoff(&backoff)?;
        Ok(NewTask {
            task_id,
            due_ms,
            target,
            payload: self.payload,
            max_attempts,
            backoff,
        })
    }
}

/// Checks a payload's serialized size against [`Limits::max_payload_bytes`] (field `payload`).
/// Creation and edits both call it, so the two cannot disagree.
pub fn validate_payload(
    payload: &serde_json::Value,
    limits: &Limits,
) -> Result<(), ValidationError> {
    let size = serde_json::to_vec(payload)
        .map(|v| v.len())
        .unwrap_or(usize::MAX);
    if size > limits.max_payload_bytes {
        return Err(ValidationError::new(
            "payload",
            format!(
                "{size} bytes, more than the limit of {}",
                limits.max_payload_bytes
            ),
        ));
    }
    Ok(())
}

/// Checks an attempt limit: 1 to [`MAX_ATTEMPTS_LIMIT`] (field `max_attempts`).
pub fn validate_max_attempts(max_attempts: u32) -> Result<(), ValidationError> {
    if !(1..=MAX_ATTEMPTS_LIMIT).contains(&max_attempts) {
        return Err(ValidationError::new(
            "max_attempts",
            format!("must be between 1 and {MAX_ATTEMPTS_LIMIT}"),
        ));
    }
    Ok(())
}

/// Checks a backoff's shape: `base_ms` positive, `max_ms` at least `base_ms` (field `backoff`).
pub fn validate_backoff(backoff: &Backoff) -> Result<(), ValidationError> {
    if backoff.base_ms == 0 || backoff.max_ms < backoff.base_ms {
        return Err(ValidationError::new(
            "backoff",
            "base_ms must be positive and max_ms at least base_ms",
        ));
    }
    Ok(())
}

/// Checks a client-supplied task id: 1 to 128 characters of `A-Z a-z 0-9 - _ . :`.
pub fn validate_id(id: &str) -> Result<(), ValidationError> {
    if id.is_empty() || id.len() > MAX_ID_LEN {
        return Err(ValidationError::new(
            "id",
            format!("must be 1 to {MAX_ID_LEN} characters"),
        ));
    }
    if let Some(c) = id
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "-_.:".contains(*c)))
    {
        return Err(ValidationError::new(
            "id",
            format!("character {c:?} not allowed; use letters, digits, '-', '_', '.', ':'"),
        ));
    }
    Ok(())
}

/// Checks a target: an http URL must be absolute `http` or `https`; a handler needs a name.
pub fn validate_target(target: &Target) -> Result<(), ValidationError> {
    match target {
        Target::Http { url, timeout_ms } => {
            let rest = url
                .strip_prefix("http://")
                .or_else(|| url.strip_prefix("https://"))
                .ok_or_else(|| {
                    ValidationError::new("target.url", "must start with http:// or https://")
                })?;
            let host = rest.split(['/', '?', '#']).next().unwrap_or("");
            if host.is_empty() || host.contains(char::is_whitespace) {
                return Err(ValidationError::new("target.url", "has no host"));
            }
            if let Some(t) = timeout_ms
                && !(1..=900_000).contains(t)
            {
                return Err(ValidationError::new(
                    "target.timeout_ms",
                    "must be between 1 and 900000",
                ));
            }
        }
        Target::Handler { name } if name.is_empty() => {
            return Err(ValidationError::new("target.name", "required"));
        }
        Target::Handler { .. } | Target::Log => {}
    }
    Ok(())
}

/// Parses an RFC 3339 date-time into epoch milliseconds.
pub fn parse_rfc3339(s: &str) -> Result<i64, String> {
    chrono::DateTime::parse_from_rfc3339(s)
        .map(|t| t.timestamp_millis())
        .map_err(|e| format!("not an RFC 3339 date-time ({e}), e.g. 2026-01-31T12:00:00Z"))
}

/// Formats epoch milliseconds as RFC 3339 in UTC, with milliseconds.
pub fn format_rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
        .unwrap_or_else(|| ms.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_767_225_600_000;

    fn ok() -> CreateTask {
        CreateTask {
            delay: Some("5s".into()),
            target: Some(Target::Log),
            ..Default::default()
        }
    }

    fn field_of(c: CreateTask) -> String {
        c.validate(NOW, &Limits::default()).unwrap_err().field
    }

    #[test]
    fn a_good_request_validates() {
        let t = ok().validate(NOW, &Limits::default()).unwrap();
        assert_eq!(t.due_ms, NOW + 5_000);
        assert_eq!(t.max_attempts, DEFAULT_MAX_ATTEMPTS);
        assert_eq!(t.task_id.len(), 26);
        let t = CreateTask {
            run_at: Some("2026-01-01T00:01:00Z".into()),
            delay: None,
            ..ok()
        }
        .validate(NOW, &Limits::default())
        .unwrap();
        assert_eq!(t.due_ms, NOW + 60_000);
    }

    #[test]
    fn each_bad_field_is_named() {
        assert_eq!(
            field_of(CreateTask {
                delay: None,
                ..ok()
            }),
            "run_at"
        );
        assert_eq!(
            field_of(CreateTask {
                run_at: Some("x".into()),
                ..ok()
            }),
            "run_at"
        );
        assert_eq!(
            field_of(CreateTask {
                run_at: Some("yesterday".into()),
                delay: None,
                ..ok()
            }),
            "run_at"
        );
        assert_eq!(
            field_of(CreateTask {
                delay: Some("soon".into()),
                ..ok()
            }),
            "delay"
        );
        assert_eq!(
            field_of(CreateTask {
                delay: Some("400days".into()),
                ..ok()
            }),
            "delay"
        );
        assert_eq!(
            field_of(CreateTask {
                target: None,
                ..ok()
            }),
            "target"
        );
        let http = |url: &str| {
            Some(Target::Http {
                url: url.into(),
                timeout_ms: None,
            })
        };
        assert_eq!(
            field_of(CreateTask {
                target: http("ftp://x"),
                ..ok()
            }),
            "target.url"
        );
        assert_eq!(
            field_of(CreateTask {
                target: http("http://"),
                ..ok()
            }),
            "target.url"
        );
        assert_eq!(
            field_of(CreateTask {
                max_attempts: Some(0),
                ..ok()
            }),
            "max_attempts"
        );
        assert_eq!(
            field_of(CreateTask {
                max_attempts: Some(101),
                ..ok()
            }),
            "max_attempts"
        );
        assert_eq!(
            field_of(CreateTask {
                id: Some("".into()),
                ..ok()
            }),
            "id"
        );
        assert_eq!(
            field_of(CreateTask {
                id: Some("a b".into()),
                ..ok()
            }),
            "id"
        );
        assert_eq!(
            field_of(CreateTask {
                id: Some("x".repeat(129)),
                ..ok()
            }),
            "id"
        );
        let big = serde_json::Value::String("x".repeat(DEFAULT_MAX_PAYLOAD_BYTES));
        assert_eq!(
            field_of(CreateTask {
                payload: big,
                ..ok()
            }),
            "payload"
        );
        let b = Backoff {
            base_ms: 10,
            max_ms: 1,
        };
        assert_eq!(
            field_of(CreateTask {
                backoff: Some(b),
                ..ok()
            }),
            "backoff"
        );
    }

    #[test]
    fn unknown_fields_are_refused() {
        let e = serde_json::from_str::<CreateTask>(
            r#"{"delay":"1s","target":{"type":"log"},"colour":1}"#,
        );
        assert!(e.unwrap_err().to_string().contains("colour"));
    }

    #[test]
    fn rfc3339_round_trip() {
        assert_eq!(format_rfc3339(NOW), "2026-01-01T00:00:00.000Z");
        assert_eq!(parse_rfc3339("2026-01-01T01:00:00+01:00").unwrap(), NOW);
    }
}
