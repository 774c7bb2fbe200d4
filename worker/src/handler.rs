//! What a run says happens next, and the registry of Rust handlers.
//!
//! A target's run ends in an [`Outcome`] that names the next step rather than an error code:
//! the worker turns `Success` into `SUCCEEDED`, `Retry` into `RETRY_WAIT` (or `DEAD` once the
//! attempts are spent) and `GiveUp` into `DEAD` at once. Handlers never touch the store or the
//! queue: the worker owns the protocol, a handler owns only the work.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use punctual_core::Task;

/// How a run ended, and so what happens next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Done: the task becomes `SUCCEEDED`.
    Success,
    /// A transient failure: try again if attempts remain, else the task is `DEAD`.
    Retry {
        /// What went wrong, kept as the task's `last_error`.
        error: String,
        /// Wait this long before the next attempt; the task's backoff when `None`.
        after: Option<Duration>,
    },
    /// A permanent failure: the task is `DEAD` at once, whatever attempts remain.
    GiveUp {
        /// Why, kept as the task's `last_error` and the dead letter's reason.
        reason: String,
    },
}

impl Outcome {
    /// A retry after the task's own backoff.
    pub fn retry(error: impl Into<String>) -> Self {
        Outcome::Retry {
            error: error.into(),
            after: None,
        }
    }

    /// A retry after `after`.
    pub fn retry_after(error: impl Into<String>, after: Duration) -> Self {
        Outcome::Retry {
            error: error.into(),
            after: Some(after),
        }
    }

    /// A permanent failure.
    pub fn give_up(reason: impl Into<String>) -> Self {
        Outcome::GiveUp {
            reason: reason.into(),
        }
    }
}

/// A Rust handler for tasks whose target is `{"type": "handler", "name": ...}`.
///
/// Delivery is at-least-once: a handler may see the same task (same `task_id`, a higher
/// `attempt`) more than once, and must be idempotent. A run is cut after the worker's
/// handler timeout and counted as a retry; a panic is counted as a retry too.
#[async_trait]
pub trait Handler: Send + Sync + 'static {
    /// Runs the task; `task.attempt` is this run's attempt number, from 1.
    async fn run(&self, task: &Task) -> Outcome;
}

/// Handlers by name.
#[derive(Clone, Default)]
pub struct Handlers {
    by_name: HashMap<String, Arc<dyn Handler>>,
}

impl std::fmt::Debug for Handlers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut names: Vec<_> = self.by_name.keys().collect();
        names.sort();
        f.debug_struct("Handlers").field("names", &names).finish()
    }
}

impl Handlers {
    /// No handlers.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers `handler` under `name`, replacing any handler registered there before.
    pub fn register(mut self, name: impl Into<String>, handler: impl Handler) -> Self {
        self.by_name.insert(name.into(), Arc::new(handler));
        self
    }

    /// The handler registered under `name`.
    pub fn get(&self, name: &str) -> Option<Arc<dyn Handler>> {
        self.by_name.get(name).cloned()
    }

    /// The registered names, sorted.
    pub fn names(&self) -> Vec<&str> {
        let mut names: Vec<_> = self.by_name.keys().map(String::as_str).collect();
        names.sort_unstable();
        names
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Fixed(Outcome);

    #[async_trait]
    impl Handler for Fixed {
        async fn run(&self, _task: &Task) -> Outcome {
            self.0.clone()
        }
    }

    #[tokio::test]
    async fn registry_finds_by_name_and_later_registrations_win() {
        let h = Handlers::new()
            .register("b", Fixed(Outcome::Success))
            .register("a", Fixed(Outcome::give_up("first")))
            .register("a", Fixed(Outcome::give_up("second")));
        assert_eq!(h.names(), vec!["a", "b"]);
        assert!(h.get("c").is_none());
        let task = punctual_core::Task::from_new(
            punctual_core::testkit::task().build(),
            16,
            punctual_core::testkit::T0,
        );
        let got = h.get("a").unwrap().run(&task).await;
        assert_eq!(got, Outcome::give_up("second"));
    }
}
