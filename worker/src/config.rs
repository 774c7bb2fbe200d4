//! The worker's one config struct, its defaults and the rules that tie its timeouts together.
//!
//! Three durations must nest, or a healthy run looks dead to another worker:
//!
//! ```text
//! target run  <=  run budget = run_timeout_ms - run_timeout_ms / 6  <  run_timeout_ms  <=  visibility_ms
//! (http_timeout_ms or the target's own timeout_ms, capped at the budget)
//! ```
//!
//! - A claim holds the task for `run_timeout_ms`; a run is cut at the run budget so the worker
//!   still has a sixth of the claim to write the outcome before another worker may take over.
//! - A received message stays hidden for `visibility_ms`; it must not reappear while its claim
//!   can still be live, or a second worker would find the task `RUNNING` for nothing.

pub use punctual_core::ConfigError;
use std::time::Duration;

/// Default number of runs in flight at once: 64.
pub const DEFAULT_CONCURRENCY: usize = 64;
/// Default number of messages asked for per receive: 10 (SQS's maximum).
pub const DEFAULT_BATCH: usize = 10;
/// Largest batch a receive may ask for (SQS's limit).
pub const MAX_BATCH: usize = 10;
/// Default visibility timeout of a received message: 30 s.
pub const DEFAULT_VISIBILITY_MS: i64 = 30_000;
/// Default time a claim holds a task before another worker may take over: 30 s.
pub const DEFAULT_RUN_TIMEOUT_MS: i64 = 30_000;
/// Default timeout of one http call: 10 s.
pub const DEFAULT_HTTP_TIMEOUT_MS: u64 = 10_000;
/// Default longest retry delay kept on the message's visibility timeout: 15 min. Longer
/// delays go back through the due index.
pub const DEFAULT_LONG_BACKOFF_MS: i64 = 15 * 60_000;
/// Default long-poll wait of a receive: 1 s.
pub const DEFAULT_WAIT_MS: i64 = 1_000;
/// Default pause after a receive that returned nothing: 50 ms.
pub const DEFAULT_IDLE_SLEEP_MS: u64 = 50;
/// Longest visibility timeout SQS accepts: 12 h.
pub const MAX_VISIBILITY_MS: i64 = 12 * 3_600_000;
/// Longest long-poll wait SQS accepts: 20 s.
pub const MAX_WAIT_MS: i64 = 20_000;

/// How a worker runs. Only the binary reads the environment or flags; this is plain data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerConfig {
    /// Runs in flight at once; the worker never receives more messages than it has free
    /// slots. Default [`DEFAULT_CONCURRENCY`].
    pub concurrency: usize,
    /// Messages asked for per receive, 1 to [`MAX_BATCH`], in SQS's units: on a backend
    /// whose receive serves more than 10 at once
    /// ([`ReadyQueue::receive_batch_max`](punctual_core::ReadyQueue::receive_batch_max), the
    /// embedded queue's 1,000) the worker asks for proportionally more, so the default asks
    /// for as many as the backend serves. Never more than the free slots. Default
    /// [`DEFAULT_BATCH`].
    pub batch: usize,
    /// How long a received message stays hidden from other workers; at least
    /// `run_timeout_ms`. Default [`DEFAULT_VISIBILITY_MS`].
    pub visibility_ms: i64,
    /// How long a claim holds a task before another worker may take it over; must exceed
    /// `http_timeout_ms`. Runs are cut at [`run_budget_ms`](Self::run_budget_ms).
    /// Default [`DEFAULT_RUN_TIMEOUT_MS`].
    pub run_timeout_ms: i64,
    /// Timeout of an http call whose target sets none; also bounds handler runs.
    /// Default [`DEFAULT_HTTP_TIMEOUT_MS`].
    pub http_timeout_ms: u64,
    /// Retry delays up to this long are kept on the message (its visibility timeout); longer
    /// ones put the task back in the due index and delete the message.
    /// Default [`DEFAULT_LONG_BACKOFF_MS`].
    pub long_backoff_ms: i64,
    /// Long-poll wait of a receive, 0 to [`MAX_WAIT_MS`]. Default [`DEFAULT_WAIT_MS`].
    pub wait_ms: i64,
    /// Pause after a receive that returned nothing, for backends whose receive returns at
    /// once. Default [`DEFAULT_IDLE_SLEEP_MS`].
    pub idle_sleep_ms: u64,
    /// At shutdown, abandon in-flight runs instead of waiting for them: each message is made
    /// visible again when its claim lapses, so another worker takes the task over. Default
    /// `false` (drain: let in-flight runs finish).
    pub release_on_shutdown: bool,
    /// The deployment's secret signing every webhook call (`X-Punctual-Signature`); calls go
    /// unsigned without one. Default: none (the binary always provides one).
    pub webhook_secret: Option<crate::sign::WebhookSecret>,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        Self {
            concurrency: DEFAULT_CONCURRENCY,
            batch: DEFAULT_BATCH,
            visibility_ms: DEFAULT_VISIBILITY_MS,
            run_timeout_ms: DEFAULT_RUN_TIMEOUT_MS,
            http_timeout_ms: DEFAULT_HTTP_TIMEOUT_MS,
            long_backoff_ms: DEFAULT_LONG_BACKOFF_MS,
            wait_ms: DEFAULT_WAIT_MS,
            idle_sleep_ms: DEFAULT_IDLE_SLEEP_MS,
            release_on_shutdown: false,
            webhook_secret: None,
        }
    }
}

/// A refusal of this component's `field`.
fn invalid(field: &'static str, message: impl Into<String>) -> ConfigError {
    ConfigError::new("worker", field, message)
}

impl WorkerConfig {
    /// Checks each field and the nesting of the timeouts.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.concurrency == 0 {
            return Err(invalid("concurrency", "must be at least 1"));
        }
        if !(1..=MAX_BATCH).contains(&self.batch) {
            return Err(invalid(
                "batch",
                format!("must be between 1 and {MAX_BATCH}"),
            ));
        }
        if self.http_timeout_ms == 0 {
            return Err(invalid("http_timeout_ms", "must be positive"));
        }
        if self.run_timeout_ms <= 0 || self.run_timeout_ms as u64 <= self.http_timeout_ms {
            return Err(invalid(
                "run_timeout_ms",
                format!(
                    "must exceed http_timeout_ms ({}), so a run can record its outcome before \
                     its claim lapses",
                    self.http_timeout_ms
                ),
            ));
        }
        if self.visibility_ms < self.run_timeout_ms || self.visibility_ms > MAX_VISIBILITY_MS {
            return Err(invalid(
                "visibility_ms",
                format!(
                    "must be between run_timeout_ms ({}) and {MAX_VISIBILITY_MS}, so a message \
                     does not reappear while its claim may still be live",
                    self.run_timeout_ms
                ),
            ));
        }
        if !(0..=MAX_VISIBILITY_MS).contains(&self.long_backoff_ms) {
            return Err(invalid(
                "long_backoff_ms",
                format!(
                    "must be between 0 and {MAX_VISIBILITY_MS} (the longest visibility timeout)"
                ),
            ));
        }
        if !(0..=MAX_WAIT_MS).contains(&self.wait_ms) {
            return Err(invalid(
                "wait_ms",
                format!("must be between 0 and {MAX_WAIT_MS}"),
            ));
        }
        Ok(())
    }

    /// The longest a target may run: `run_timeout_ms` less a sixth, kept to write the
    /// outcome while the claim still holds.
    pub fn run_budget_ms(&self) -> i64 {
        self.run_timeout_ms - self.run_timeout_ms / 6
    }

    /// The timeout of one http call: the target's own, else `http_timeout_ms`, never past the
    /// [run budget](Self::run_budget_ms).
    pub fn http_timeout_for(&self, target_timeout_ms: Option<u64>) -> Duration {
        let ms = target_timeout_ms
            .unwrap_or(self.http_timeout_ms)
            .min(self.run_budget_ms().max(1) as u64);
        Duration::from_millis(ms)
    }

    /// The timeout of one handler run: `http_timeout_ms`, never past the run budget.
    pub fn handler_timeout(&self) -> Duration {
        self.http_timeout_for(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_named() {
        let c = WorkerConfig::default();
        c.validate().unwrap();
        assert_eq!(c.concurrency, 64);
        assert_eq!(c.batch, 10);
        assert_eq!(c.visibility_ms, 30_000);
        assert_eq!(c.run_timeout_ms, 30_000);
        assert_eq!(c.http_timeout_ms, 10_000);
        assert_eq!(c.long_backoff_ms, 900_000);
        assert_eq!(c.wait_ms, 1_000);
        assert!(!c.release_on_shutdown);
    }

    #[test]
    fn each_bad_field_is_named() {
        let bad = |f: fn(&mut WorkerConfig)| {
            let mut c = WorkerConfig::default();
            f(&mut c);
            c.validate().unwrap_err().field
        };
        assert_eq!(bad(|c| c.concurrency = 0), "concurrency");
        assert_eq!(bad(|c| c.batch = 0), "batch");
        assert_eq!(bad(|c| c.batch = 11), "batch");
        assert_eq!(bad(|c| c.http_timeout_ms = 0), "http_timeout_ms");
        assert_eq!(bad(|c| c.run_timeout_ms = 10_000), "run_timeout_ms");
        assert_eq!(bad(|c| c.run_timeout_ms = -1), "run_timeout_ms");
        assert_eq!(bad(|c| c.visibility_ms = 29_999), "visibility_ms");
        assert_eq!(
            bad(|c| c.visibility_ms = MAX_VISIBILITY_MS + 1),
            "visibility_ms"
        );
        assert_eq!(bad(|c| c.long_backoff_ms = -1), "long_backoff_ms");
        assert_eq!(bad(|c| c.wait_ms = 20_001), "wait_ms");
        let msg = WorkerConfig {
            run_timeout_ms: 5_000,
            ..WorkerConfig::default()
        }
        .validate()
        .unwrap_err()
        .to_string();
        assert!(
            msg.contains("run_timeout_ms") && msg.contains("10000"),
            "{msg}"
        );
    }

    #[test]
    fn runs_are_cut_before_the_claim_lapses() {
        let c = WorkerConfig::default();
        assert_eq!(c.run_budget_ms(), 25_000);
        assert_eq!(c.http_timeout_for(None), Duration::from_millis(10_000));
        assert_eq!(
            c.http_timeout_for(Some(2_000)),
            Duration::from_millis(2_000)
        );
        assert_eq!(
            c.http_timeout_for(Some(900_000)),
            Duration::from_millis(25_000)
        );
        assert_eq!(c.handler_timeout(), Duration::from_millis(10_000));
    }
}
