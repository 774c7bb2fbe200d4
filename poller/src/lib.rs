//! The poller: shard leases, bucket scanning, dispatch to the ready queue.
//!
//! Tasks wait in a sparse due index partitioned by `(shard, minute)`. Each shard is polled by
//! exactly one poller at a time, elected by a lease; the poller walks the shard's buckets from
//! a low watermark to the current minute, sends what is due to the ready queue, then marks it
//! `DISPATCHED`. It knows only the store traits of [`punctual_core::Backend`].
//!
//! # Leases
//!
//! One lease item per shard, `{shard, owner, expires_ms, epoch, watermark_minute}`, written
//! only with conditional writes. From one poller's point of view a shard moves through:
//!
//! ```text
//!                 lease_acquire: free, expired, or our own   (epoch e-1 → e)
//!   ┌──────────┐ ─────────────────────────────────────────────▶ ┌─────────────────────────┐
//!   │ NOT HELD │                                                │ HELD at epoch e         │
//!   │          │ ◀──── lease_release: shutdown, or shed ─────── │ dispatch iff            │
//!   │          │       beyond the fair share                    │ now < expires_ms − skew │
//!   │          │ ◀──── dropped at once, no store call: ──────── │                         │
//!   └──────────┘       lease_renew failed (Conflict or any      └─────────────────────────┘
//!                      error), or still inside the margin            │  ▲ lease_renew ok, every
//!                      after renewing; the item lapses at            └──┘ ttl/3: expires_ms =
//!                      expires_ms and anyone may acquire it               now + ttl, watermark
//!                                                                         persisted
//! ```
//!
//! # The rule that keeps one dispatcher per shard
//!
//! ```text
//! poller p dispatches shard s at time now (p's clock)  ⇔
//!     p holds the lease of s at epoch e  ∧  now < expires_ms(s, e) − skew_ms
//!     ∧  every renewal of (s, e) so far succeeded        (p stops at once when one fails)
//! ```
//!
//! Another poller q acquires `s` only when, by q's clock, `now_q ≥ expires_ms`. With clocks
//! at most `skew_ms` apart, `now_p ≥ now_q − skew_ms ≥ expires_ms − skew_ms`, so p has already
//! stopped: the two dispatch windows never overlap. The store checks every renewal against
//! `(owner, epoch)`, so a poller that slept through its lease finds out on its next renewal
//! and drops the shard before scanning. Work per tick is bounded (page budget, time budget,
//! stop when a renewal falls due, clock re-read before every page and every send) so
//! renewals stay on time under load; a send already in flight when the deadline passes still
//! completes, at worst one duplicate batch. If clocks drift further apart than `skew_ms`, two
//! pollers may both send a task: the worker's conditional claim keeps that to a duplicate
//! delivery, never two runs at once.
//!
//! # Watermark
//!
//! ```text
//! watermark ← m + 1   iff   watermark = m  ∧  due_query(s, m, now) = ∅  ∧  m < minute_of(now − skew_ms)
//! ```
//!
//! A task created already due goes into its creator's current minute, which is at least
//! `minute_of(now − skew_ms)` of any poller whose clock is at most `skew_ms` ahead: the
//! watermark never passes a bucket that can still receive tasks. The watermark is written to
//! the lease item with the next renewal (or the release), so a new owner resumes there;
//! losing an unpersisted advance only costs a few empty queries.
//!
//! # At-least-once
//!
//! Send, then mark: `queue_send` in chunks of `send_batch`, then `task_mark_dispatched` for
//! exactly what was sent. A crash or an error in between leaves the task `SCHEDULED` in the
//! index, so it is sent again — a duplicate the worker's claim absorbs — and never lost.
//!
//! # Pieces
//!
//! [`run`] is the loop: tick, sleep `tick_ms`, until the shutdown future completes, then
//! release every lease. Each tick of [`Poller::tick`] renews due leases
//! ([`LeaseManager::renew`]), acquires free shards up to a fair share
//! ([`LeaseManager::acquire_free_shards`] explains the sharing rules), then ticks each held
//! shard's [`ShardPoller`], renewing again between shards. Tests drive these pieces directly
//! with a [`ManualClock`](punctual_core::ManualClock).

mod config;
mod lease;
mod shard;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use punctual_core::clock::SharedClock;
use punctual_core::{Backend, StoreError};
use tokio::sync::mpsc;

pub use config::{
    ConfigError, DEFAULT_LEASE_TTL_MS, DEFAULT_MAX_PAGES_PER_TICK, DEFAULT_PAGE,
    DEFAULT_SEND_BATCH, DEFAULT_SKEW_MS, DEFAULT_TICK_MS, PollerConfig, default_owner,
};
pub use lease::{AcquireReport, LeaseManager, LostLease, fair_share};
pub use shard::{ShardPoller, StopReason, TickReport};

/// A poller failure.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PollerError {
    /// The configuration was refused.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A store call failed.
    #[error("{op}{} failed: {source}", shard.map(|s| format!(" (shard {s})")).unwrap_or_default())]
    Store {
        /// The store operation, e.g. `queue_send`.
        op: &'static str,
        /// The shard concerned, if any.
        shard: Option<u32>,
        /// The store's error.
        #[source]
        source: StoreError,
    },
}

impl PollerError {
    pub(crate) fn store(op: &'static str, shard: Option<u32>, source: StoreError) -> Self {
        Self::Store { op, shard, source }
    }
}

/// Something a poller did, for tests and metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PollerEvent {
    /// A lease was acquired.
    LeaseAcquired {
        /// The shard.
        shard: u32,
        /// The new epoch.
        epoch: u64,
        /// Where scanning resumes.
        watermark_minute: i64,
    },
    /// A lease was lost (renewal failed or it reached its skew margin); the shard is no longer
    /// dispatched.
    LeaseLost {
        /// The shard.
        shard: u32,
        /// The epoch lost.
        epoch: u64,
        /// Why.
        reason: String,
    },
    /// A lease was given up (shutdown, or more than the share was held).
    LeaseReleased {
        /// The shard.
        shard: u32,
        /// The epoch released.
        epoch: u64,
    },
    /// A tick ended.
    Ticked {
        /// The time the tick started, epoch ms.
        now_ms: i64,
        /// Messages sent this tick.
        dispatched: usize,
        /// Shards held at the end of the tick.
        shards_held: usize,
    },
}

/// What a poller needs.
#[derive(Debug, Clone)]
pub struct PollerDeps {
    /// The store.
    pub backend: Backend,
    /// Where time comes from.
    pub clock: SharedClock,
    /// How to behave.
    pub config: PollerConfig,
    /// Where to report [`PollerEvent`]s, if anywhere.
    pub events: Option<mpsc::UnboundedSender<PollerEvent>>,
}

/// What one [`Poller::tick`] did.
#[derive(Debug, Default)]
pub struct PollerTick {
    /// Leases acquired.
    pub acquired: Vec<u32>,
    /// Leases dropped because a renewal failed or they reached their margin.
    pub lost: Vec<LostLease>,
    /// Leases released because more than the share was held.
    pub shed: Vec<u32>,
    /// One report per shard ticked.
    pub shards: Vec<TickReport>,
    /// Store failures met (the loop goes on; they are retried next tick).
    pub errors: Vec<PollerError>,
}

impl PollerTick {
    /// Messages sent this tick, over all shards.
    pub fn sent(&self) -> usize {
        self.shards.iter().map(|r| r.sent).sum()
    }
}

/// One poller: the shards it holds and the tick that serves them.
#[derive(Debug)]
pub struct Poller {
    clock: SharedClock,
    leases: LeaseManager,
}

impl Poller {
    /// A poller holding nothing yet; refuses an invalid config.
    pub fn new(deps: PollerDeps) -> Result<Self, PollerError> {
        deps.config.validate()?;
        Ok(Self {
            leases: LeaseManager::new(
                deps.backend,
                deps.clock.clone(),
                Arc::new(deps.config),
                deps.events,
            ),
            clock: deps.clock,
        })
    }

    /// The held leases.
    pub fn leases(&self) -> &LeaseManager {
        &self.leases
    }

    /// The held leases, to drive them piecewise.
    pub fn leases_mut(&mut self) -> &mut LeaseManager {
        &mut self.leases
    }

    /// One tick: renew due leases (dropping the ones that fail), acquire free shards up to the
    /// share, then dispatch each held shard, renewing due leases again before each one so a
    /// slow shard cannot make another's lease lapse. Store failures are collected, not fatal.
    pub async fn tick(&mut self) -> PollerTick {
        let now = self.clock.now_ms();
        let mut out = PollerTick {
            lost: self.leases.renew(now).await,
            ..Default::default()
        };
        match self.leases.acquire_free_shards(now).await {
            Ok(a) => {
                out.acquired = a.acquired.iter().map(|l| l.shard).collect();
                out.shed = a.shed;
            }
            Err(e) => out.errors.push(e),
        }
        for shard in self.leases.held() {
            let now = self.clock.now_ms();
            out.lost.extend(self.leases.renew(now).await);
            let Some(poller) = self.leases.shard_mut(shard) else {
                continue;
            };
            match poller.tick(now).await {
                Ok(report) => out.shards.push(report),
                Err(e) => out.errors.push(e),
            }
        }
        for e in &out.errors {
            tracing::warn!(error = %e, "poller tick");
        }
        self.leases.emit(PollerEvent::Ticked {
            now_ms: now,
            dispatched: out.sent(),
            shards_held: self.leases.held().len(),
        });
        out
    }

    /// Releases every lease so a standby takes over at once. Returns how many were released.
    pub async fn shutdown(&mut self) -> usize {
        self.leases.release_all().await
    }
}

/// Runs a poller until `shutdown` completes, then releases its leases.
///
/// Ticks every `tick_ms` (a `tokio::time::sleep` between ticks, so tests may pause time).
/// Store failures are logged and retried next tick; only an invalid config is an error.
pub async fn run(
    deps: PollerDeps,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), PollerError> {
    let tick = Duration::from_millis(deps.config.tick_ms);
    let mut poller = Poller::new(deps)?;
    tracing::info!(owner = %poller.leases.owner(), "poller started");
    tokio::pin!(shutdown);
    loop {
        poller.tick().await;
        tokio::select! {
            biased;
            () = &mut shutdown => break,
            () = tokio::time::sleep(tick) => {}
        }
    }
    let released = poller.shutdown().await;
    tracing::info!(released, "poller stopped");
    Ok(())
}
