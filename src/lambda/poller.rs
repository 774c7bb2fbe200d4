//! The poller function: one invocation per minute (EventBridge schedule) runs the
//! long-running poller's own loop, [`punctual_poller::run`], until a stop time, then releases
//! every lease it holds.
//!
//! # Timing of one invocation
//!
//! ```text
//! start                         stop_at = min(start + run_for, deadline − release_margin)
//!   │ acquire, tick every tick_ms ... │ finish the tick in progress, release every lease │ return
//!   ├─────────────────────────────────┼──────────────────────────────────────────────────┤
//!                                     └──────────────── ≤ release_margin ───────────────▶ deadline
//! ```
//!
//! `deadline` is the Lambda context's (the function timeout). With the defaults (`run_for`
//! 65 s, `release_margin` 10 s, a 90 s function timeout, one invocation a minute) consecutive
//! invocations overlap by about 5 s: the next one starts while the previous still holds the
//! shards, finds none free, and takes each one on its first tick after the previous releases
//! it. Dispatch pauses for about one tick per minute instead of a lease TTL, and two
//! invocations never dispatch one shard at once because leases are the same conditional
//! writes as for `punctual poller` (the rule in [`punctual_poller`]'s doc holds unchanged).
//! The release margin must exceed the longest tick (page and time budgets bound it) plus the
//! release calls; if an invocation is killed anyway, its leases simply lapse after their TTL,
//! as for a crashed long-running poller.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use punctual_core::SystemClock;
use punctual_poller::{PollerConfig, PollerDeps, PollerError, PollerEvent};
use tokio::time::Instant;

use super::{ENV_POLLER_RELEASE_MARGIN_MS, ENV_POLLER_RUN_FOR_MS, LambdaEnv};

/// Default time one invocation polls: 65 s, a little more than the schedule's minute, so
/// invocations overlap and hand shards over by release instead of by lease expiry.
pub const DEFAULT_RUN_FOR_MS: i64 = 65_000;
/// Default time kept between stopping and the Lambda deadline: 10 s, for the tick in
/// progress and the releases.
pub const DEFAULT_RELEASE_MARGIN_MS: i64 = 10_000;

/// How long one invocation runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InvocationConfig {
    /// Longest time one invocation polls, ms. Default [`DEFAULT_RUN_FOR_MS`].
    pub run_for_ms: i64,
    /// Stop at least this long before the Lambda deadline, ms. Default
    /// [`DEFAULT_RELEASE_MARGIN_MS`].
    pub release_margin_ms: i64,
}

impl Default for InvocationConfig {
    fn default() -> Self {
        Self {
            run_for_ms: DEFAULT_RUN_FOR_MS,
            release_margin_ms: DEFAULT_RELEASE_MARGIN_MS,
        }
    }
}

impl InvocationConfig {
    /// Reads `PUNCTUAL_POLLER_RUN_FOR_MS` and `PUNCTUAL_POLLER_RELEASE_MARGIN_MS`.
    pub fn from_env(env: &LambdaEnv) -> anyhow::Result<Self> {
        let c = Self {
            run_for_ms: env.ms(ENV_POLLER_RUN_FOR_MS, DEFAULT_RUN_FOR_MS)?,
            release_margin_ms: env.ms(ENV_POLLER_RELEASE_MARGIN_MS, DEFAULT_RELEASE_MARGIN_MS)?,
        };
        c.validate()?;
        Ok(c)
    }

    /// Both durations positive.
    pub fn validate(&self) -> anyhow::Result<()> {
        anyhow::ensure!(self.run_for_ms > 0, "run_for_ms must be positive");
        anyhow::ensure!(
            self.release_margin_ms > 0,
            "release_margin_ms must be positive"
        );
        Ok(())
    }

    /// When an invocation started at `start`, with `remaining` until its deadline, stops
    /// polling: `min(start + run_for, start + remaining − release_margin)`, never before
    /// `start` (a deadline inside the margin stops at once, after one tick).
    pub fn stop_at(&self, start: Instant, remaining: Duration) -> Instant {
        let run_for = Duration::from_millis(self.run_for_ms.max(0) as u64);
        let margin = Duration::from_millis(self.release_margin_ms.max(0) as u64);
        start + run_for.min(remaining.saturating_sub(margin))
    }
}

/// What one invocation did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InvocationReport {
    /// Ticks run.
    pub ticks: usize,
    /// Messages sent to the ready queue.
    pub dispatched: usize,
    /// Leases acquired.
    pub acquired: usize,
    /// Leases released: shed to another poller on the way, or at the end.
    pub released: usize,
    /// Leases lost on the way (a renewal failed).
    pub lost: usize,
}

/// Runs the poller loop of `punctual poller` until `stop_at`, then releases every lease.
/// `deps.events`, if set, still receives every event as it happens.
pub async fn run_until(
    deps: PollerDeps,
    stop_at: Instant,
) -> Result<InvocationReport, PollerError> {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let forward = deps.events.clone();
    let deps = PollerDeps {
        events: Some(tx),
        ..deps
    };
    // Ends when the poller, and with it the sender, is dropped.
    let counter = tokio::spawn(async move {
        let mut report = InvocationReport::default();
        while let Some(event) = rx.recv().await {
            match &event {
                PollerEvent::Ticked { dispatched, .. } => {
                    report.ticks += 1;
                    report.dispatched += dispatched;
                }
                PollerEvent::LeaseAcquired { .. } => report.acquired += 1,
                PollerEvent::LeaseReleased { .. } => report.released += 1,
                PollerEvent::LeaseLost { .. } => report.lost += 1,
                _ => {}
            }
            if let Some(f) = &forward {
                let _ = f.send(event);
            }
        }
        report
    });
    punctual_poller::run(deps, tokio::time::sleep_until(stop_at)).await?;
    Ok(counter.await.unwrap_or_default())
}

/// Time left until a Lambda context's deadline (epoch ms), by the system clock.
pub fn remaining(deadline_epoch_ms: u64) -> Duration {
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    Duration::from_millis(deadline_epoch_ms.saturating_sub(now))
}

/// The `punctual-lambda-poller` entrypoint. The event (an EventBridge scheduled event) only
/// starts the invocation; its content is not used.
pub async fn main() -> Result<(), lambda_runtime::Error> {
    super::init_tracing();
    let env = LambdaEnv::from_process();
    let invocation = InvocationConfig::from_env(&env)?;
    let backend = crate::open_aws(&env.prefix()).await?;
    lambda_runtime::run(lambda_runtime::service_fn(
        move |event: lambda_runtime::LambdaEvent<serde_json::Value>| {
            let backend = backend.clone();
            async move {
                let start = Instant::now();
                let stop_at = invocation.stop_at(start, remaining(event.context.deadline));
                let deps = PollerDeps {
                    backend,
                    clock: Arc::new(SystemClock),
                    // A new owner per invocation: its leases are its own, whatever the
                    // instance ran before.
                    config: PollerConfig::default(),
                    events: None,
                };
                let report = run_until(deps, stop_at)
                    .await
                    .map_err(lambda_runtime::Error::from)?;
                tracing::info!(?report, "poller invocation done");
                Ok::<_, lambda_runtime::Error>(serde_json::json!({
                    "ticks": report.ticks,
                    "dispatched": report.dispatched,
                    "released": report.released,
                }))
            }
        },
    ))
    .await
}
