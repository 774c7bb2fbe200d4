//! Time comes in through a [`Clock`], never read inside a store or a loop directly.
//!
//! Stores take `now_ms` as a parameter; the poller and worker ask their `Clock`. Tests use
//! [`ManualClock`] to move time by hand, so no test sleeps to wait for a due time.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

/// A source of wall-clock time in epoch milliseconds (UTC).
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// The current time, epoch milliseconds.
    fn now_ms(&self) -> i64;
}

/// The system's wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        chrono::Utc::now().timestamp_millis()
    }
}

/// A clock that only moves when told to; cloning shares the same time.
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<AtomicI64>);

impl ManualClock {
    /// A clock standing at `now_ms`.
    pub fn new(now_ms: i64) -> Self {
        Self(Arc::new(AtomicI64::new(now_ms)))
    }

    /// Moves the clock forward by `ms` milliseconds.
    pub fn advance(&self, ms: i64) {
        self.0.fetch_add(ms, Ordering::SeqCst);
    }

    /// Sets the clock to `now_ms`.
    pub fn set(&self, now_ms: i64) {
        self.0.store(now_ms, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// A shared clock, as the poller, worker and API hold it.
pub type SharedClock = Arc<dyn Clock>;
