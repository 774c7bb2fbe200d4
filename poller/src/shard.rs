//! One held shard: its lease, its watermark, and the scan that dispatches what is due.
//!
//! A tick walks the buckets `watermark ..= minute_of(now)` in order, pages through each with
//! `due_query`, sends every page to the ready queue in chunks of `send_batch`, and only then
//! marks what was sent `DISPATCHED`. Before every page and every chunk it looks at the clock
//! again: it stops when the lease's dispatch deadline is reached, when the lease's renewal
//! falls due, when it has spent a tick's worth of time, or after `max_pages_per_tick`
//! non-empty pages. The rest waits for the next tick; nothing is skipped, because the
//! watermark only moves over buckets found empty.

use std::sync::Arc;

use punctual_core::clock::SharedClock;
use punctual_core::keys::minute_of;
use punctual_core::store::{
    DueEntry, DueQuery, Lease, LeaseRelease, LeaseRenew, QueueSend, TaskMarkDispatched,
};
use punctual_core::{Backend, StoreError};

use crate::PollerError;
use crate::config::PollerConfig;

/// Why a shard's tick stopped before reaching the current minute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// `now >= expires_ms - skew_ms`: the lease may no longer be used.
    LeaseDeadline,
    /// The lease's renewal fell due during the scan; the loop renews, the next tick resumes.
    RenewalDue,
    /// `max_pages_per_tick` non-empty pages were dispatched.
    PageBudget,
    /// The scan has taken `tick_ms` already.
    TimeBudget,
}

/// What one shard's tick did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TickReport {
    /// The shard.
    pub shard: u32,
    /// The lease epoch it was dispatched under.
    pub epoch: u64,
    /// `due_query` calls made (empty ones included).
    pub queries: usize,
    /// Messages sent to the ready queue.
    pub sent: usize,
    /// Sent tasks whose mark held; the rest were changed by an operator meanwhile and their
    /// stale messages will be dropped by the worker's claim.
    pub marked: usize,
    /// The watermark after the tick.
    pub watermark_minute: i64,
    /// Why the scan stopped early, if it did.
    pub stopped: Option<StopReason>,
}

/// One shard this poller holds a lease on.
///
/// Built by the [`LeaseManager`](crate::LeaseManager) when it acquires a lease; tests may build
/// one from a lease they acquired themselves and drive [`tick`](Self::tick) directly.
#[derive(Debug)]
pub struct ShardPoller {
    backend: Backend,
    clock: SharedClock,
    config: Arc<PollerConfig>,
    lease: Lease,
    /// When the lease was last acquired or renewed (this poller's clock).
    renewed_ms: i64,
    /// The oldest bucket that may still hold due tasks.
    watermark: i64,
    /// The watermark as last written to the lease item.
    persisted_watermark: i64,
}

impl ShardPoller {
    /// A poller for the shard of `lease`, which this poller (`config.owner`) holds.
    pub fn new(
        backend: Backend,
        clock: SharedClock,
        config: Arc<PollerConfig>,
        lease: Lease,
    ) -> Self {
        Self {
            backend,
            clock,
            renewed_ms: lease.expires_ms - config.lease_ttl_ms,
            watermark: lease.watermark_minute,
            persisted_watermark: lease.watermark_minute,
            config,
            lease,
        }
    }

    /// The shard.
    pub fn shard(&self) -> u32 {
        self.lease.shard
    }

    /// The lease as last acquired or renewed.
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// The oldest bucket that may still hold due tasks (possibly not yet persisted).
    pub fn watermark_minute(&self) -> i64 {
        self.watermark
    }

    /// The one-dispatcher rule: `now < expires_ms - skew_ms`.
    pub fn may_dispatch(&self, now_ms: i64) -> bool {
        now_ms < self.lease.expires_ms - self.config.skew_ms
    }

    /// Whether the lease should be renewed: a third of its TTL has passed, or it is already
    /// inside its skew margin (a late tick; renewing may still save it).
    pub fn renewal_due(&self, now_ms: i64) -> bool {
        now_ms >= self.renewed_ms + self.config.renew_every_ms() || !self.may_dispatch(now_ms)
    }

    /// Renews the lease, persisting the watermark if it moved. On an error the lease must be
    /// treated as lost: the caller stops dispatching this shard at once.
    pub async fn renew(&mut self, now_ms: i64) -> Result<(), PollerError> {
        let watermark = self.watermark;
        let lease = self
            .backend
            .leases
            .lease_renew(LeaseRenew {
                shard: self.lease.shard,
                owner: self.config.owner.clone(),
                epoch: self.lease.epoch,
                ttl_ms: self.config.lease_ttl_ms,
                watermark_minute: (watermark != self.persisted_watermark).then_some(watermark),
                now_ms,
            })
            .await
            .map_err(|e| PollerError::store("lease_renew", Some(self.lease.shard), e))?;
        self.lease = lease;
        self.renewed_ms = now_ms;
        self.persisted_watermark = watermark;
        Ok(())
    }

    /// Gives the lease up with the final watermark, so another poller may take the shard at once.
    pub async fn release(self) -> Result<(), PollerError> {
        self.backend
            .leases
            .lease_release(LeaseRelease {
                shard: self.lease.shard,
                owner: self.config.owner.clone(),
                epoch: self.lease.epoch,
                watermark_minute: self.watermark,
            })
            .await
            .map_err(|e| PollerError::store("lease_release", Some(self.lease.shard), e))
    }

    /// One tick at `now_ms`: dispatches what is due in `watermark ..= minute_of(now_ms)` and
    /// moves the watermark over old empty buckets. `now_ms` bounds what is due; the clock is
    /// read again between pages and chunks to stop at the lease deadline.
    ///
    /// An error leaves every task not yet marked in the index, to be sent again next tick.
    pub async fn tick(&mut self, now_ms: i64) -> Result<TickReport, PollerError> {
        let mut report = TickReport {
            shard: self.lease.shard,
            epoch: self.lease.epoch,
            queries: 0,
            sent: 0,
            marked: 0,
            watermark_minute: self.watermark,
            stopped: None,
        };
        let started = self.clock.now_ms();
        let current = minute_of(now_ms);
        // Buckets at or after this minute may still receive tasks from a creator whose clock
        // is behind ours by up to `skew_ms`: query them again, never pass them.
        let settled = minute_of(now_ms - self.config.skew_ms);
        let mut pages = 0usize;
        let mut contiguous = true;
        let mut minute = self.watermark;
        'minutes: while minute <= current {
            let mut after_key = None;
            loop {
                if let Some(stop) = self.should_stop(pages, started) {
                    report.stopped = Some(stop);
                    break 'minutes;
                }
                let entries = self
                    .backend
                    .tasks
                    .due_query(DueQuery {
                        shard: self.lease.shard,
                        minute,
                        now_ms,
                        after_key: after_key.clone(),
                        limit: self.config.page,
                    })
                    .await
                    .map_err(|e| self.err("due_query", e))?;
                report.queries += 1;
                if entries.is_empty() {
                    if after_key.is_none() && contiguous && minute < settled {
                        self.watermark = minute + 1;
                    }
                    break;
                }
                contiguous = false;
                pages += 1;
                let full = entries.len() >= self.config.page;
                after_key = entries.last().map(|e| e.due_key.clone());
                let complete = self.dispatch(&entries, now_ms, &mut report).await?;
                if !complete {
                    report.stopped = Some(StopReason::LeaseDeadline);
                    break 'minutes;
                }
                if !full {
                    break;
                }
            }
            minute += 1;
        }
        report.watermark_minute = self.watermark;
        Ok(report)
    }

    /// Sends `entries` in chunks, then marks what was sent. Returns false if the lease
    /// deadline stopped it part-way (what was sent is still marked).
    async fn dispatch(
        &self,
        entries: &[DueEntry],
        now_ms: i64,
        report: &mut TickReport,
    ) -> Result<bool, PollerError> {
        let mut sent: Vec<(String, u64)> = Vec::with_capacity(entries.len());
        let mut failure = None;
        let mut complete = true;
        for chunk in entries.chunks(self.config.send_batch) {
            if !self.may_dispatch(self.clock.now_ms()) {
                complete = false;
                break;
            }
            let messages = chunk.iter().map(DueEntry::message).collect();
            match self
                .backend
                .queue
                .queue_send(QueueSend { messages, now_ms })
                .await
            {
                Ok(()) => sent.extend(chunk.iter().map(|e| (e.task_id.clone(), e.version))),
                Err(e) => {
                    failure = Some(self.err("queue_send", e));
                    break;
                }
            }
        }
        // Mark only after sending: a crash in between leaves the task SCHEDULED, to be sent
        // again (at-least-once). Marking first could lose it.
        if !sent.is_empty() {
            report.sent += sent.len();
            let marked = self
                .backend
                .tasks
                .task_mark_dispatched(TaskMarkDispatched {
                    tasks: sent,
                    now_ms,
                })
                .await
                .map_err(|e| self.err("task_mark_dispatched", e))?;
            report.marked += marked;
        }
        match failure {
            Some(e) => Err(e),
            None => Ok(complete),
        }
    }

    fn should_stop(&self, pages: usize, started_ms: i64) -> Option<StopReason> {
        let now = self.clock.now_ms();
        if !self.may_dispatch(now) {
            return Some(StopReason::LeaseDeadline);
        }
        let renew_at = self.renewed_ms + self.config.renew_every_ms();
        if now >= renew_at && started_ms < renew_at {
            return Some(StopReason::RenewalDue);
        }
        if pages >= self.config.max_pages_per_tick {
            return Some(StopReason::PageBudget);
        }
        if now - started_ms >= i64::try_from(self.config.tick_ms).unwrap_or(i64::MAX) {
            return Some(StopReason::TimeBudget);
        }
        None
    }

    fn err(&self, op: &'static str, source: StoreError) -> PollerError {
        PollerError::store(op, Some(self.lease.shard), source)
    }
}
