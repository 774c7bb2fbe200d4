//! Test data builders and the conformance suite every backend runs (feature `testkit`).
//!
//! A backend's test file builds a fresh [`Backend`](crate::Backend) per case and hands the
//! factory to [`suite::run_all`]; each case is a plain `async fn` over the traits.

pub mod suite;

use crate::task::{Backoff, NewTask, Target};

/// A fixed start time for tests: 2026-01-01T00:00:00Z plus 30 s, so a test's first minute
/// is not its first millisecond.
pub const T0: i64 = 1_767_225_630_000;

/// Starts building a task: due at [`T0`], target `log`, 3 attempts.
pub fn task() -> TaskBuilder {
    TaskBuilder {
        task: NewTask {
            task_id: crate::task::new_task_id(),
            due_ms: T0,
            target: Target::Log,
            payload: serde_json::json!({"test": true}),
            max_attempts: 3,
            backoff: Backoff {
                base_ms: 10,
                max_ms: 100,
            },
        },
    }
}

/// A builder of [`NewTask`]s with named steps.
#[derive(Debug, Clone)]
pub struct TaskBuilder {
    task: NewTask,
}

impl TaskBuilder {
    /// Sets the id.
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.task.task_id = id.into();
        self
    }
    /// Due at `ms`.
    pub fn due(mut self, ms: i64) -> Self {
        self.task.due_ms = ms;
        self
    }
    /// Due `ms` after [`T0`].
    pub fn due_in(self, ms: i64) -> Self {
        self.due(T0 + ms)
    }
    /// Target: POST to `url`.
    pub fn http(mut self, url: impl Into<String>) -> Self {
        self.task.target = Target::Http {
            url: url.into(),
            timeout_ms: None,
        };
        self
    }
    /// Target: a registered handler.
    pub fn handler(mut self, name: impl Into<String>) -> Self {
        self.task.target = Target::Handler { name: name.into() };
        self
    }
    /// Sets the payload.
    pub fn payload(mut self, p: serde_json::Value) -> Self {
        self.task.payload = p;
        self
    }
    /// Sets the attempts.
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.task.max_attempts = n;
        self
    }
    /// Sets the backoff.
    pub fn backoff(mut self, base_ms: u64, max_ms: u64) -> Self {
        self.task.backoff = Backoff { base_ms, max_ms };
        self
    }
    /// The task.
    pub fn build(self) -> NewTask {
        self.task
    }
}
