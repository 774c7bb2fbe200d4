//! The set of shards one poller holds: acquisition up to a fair share, renewal, release.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use punctual_core::Backend;
use punctual_core::clock::SharedClock;
use punctual_core::keys::shard_of;
use punctual_core::store::{Lease, LeaseAcquire, Member, MemberBeat, MemberRemove};
use tokio::sync::mpsc;

use crate::config::PollerConfig;
use crate::shard::ShardPoller;
use crate::{PollerError, PollerEvent};

/// A lease this poller stopped using, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LostLease {
    /// The shard.
    pub shard: u32,
    /// The epoch that was lost.
    pub epoch: u64,
    /// Why: the renewal's error, or the lease reaching its skew margin.
    pub reason: String,
}

/// What one acquisition round did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AcquireReport {
    /// Leases newly acquired.
    pub acquired: Vec<Lease>,
    /// Shards released because this poller held more than its share.
    pub shed: Vec<u32>,
    /// Of the acquired, how many were orphans adopted beyond the share.
    pub adopted: usize,
    /// How many shards this poller aimed to hold.
    pub target: usize,
    /// Other pollers seen holding an unexpired lease.
    pub live_others: usize,
}

/// How many shards one poller should hold: `ceil(shard_count / pollers)`, at least one
/// poller (this one) counted.
pub fn fair_share(shard_count: usize, pollers: usize) -> usize {
    shard_count.div_ceil(pollers.max(1))
}

/// The shards one poller holds, each with its [`ShardPoller`].
#[derive(Debug)]
pub struct LeaseManager {
    backend: Backend,
    clock: SharedClock,
    config: Arc<PollerConfig>,
    events: Option<mpsc::UnboundedSender<PollerEvent>>,
    held: BTreeMap<u32, ShardPoller>,
    /// Until the first round is done, a poller that sees no one else takes only half its share
    /// (see [`acquire_free_shards`](Self::acquire_free_shards)).
    first_round: bool,
    /// The shards free at the previous round: still free now means nobody wants them.
    last_free: BTreeSet<u32>,
    /// The live owners for which shedding proved futile (we had to adopt orphans).
    shed_futile_for: Option<BTreeSet<String>>,
    /// When this poller last announced itself (`member_beat`), if it has.
    beat_ms: Option<i64>,
}

/// How long past its expiry a poller's presence row stays before a peer deletes it: long
/// enough that a paused process coming back simply beats again.
const MEMBER_FORGET_AFTER_MS: i64 = 10 * 60_000;

impl LeaseManager {
    /// A manager holding nothing yet.
    pub fn new(
        backend: Backend,
        clock: SharedClock,
        config: Arc<PollerConfig>,
        events: Option<mpsc::UnboundedSender<PollerEvent>>,
    ) -> Self {
        Self {
            backend,
            clock,
            config,
            events,
            held: BTreeMap::new(),
            first_round: true,
            last_free: BTreeSet::new(),
            shed_futile_for: None,
            beat_ms: None,
        }
    }

    /// This poller's name in the lease table.
    pub fn owner(&self) -> &str {
        &self.config.owner
    }

    /// The shards held, in order.
    pub fn held(&self) -> Vec<u32> {
        self.held.keys().copied().collect()
    }

    /// The poller of a held shard.
    pub fn shard(&self, shard: u32) -> Option<&ShardPoller> {
        self.held.get(&shard)
    }

    /// The poller of a held shard, to tick it.
    pub fn shard_mut(&mut self, shard: u32) -> Option<&mut ShardPoller> {
        self.held.get_mut(&shard)
    }

    /// Renews every held lease whose renewal is due, persisting watermarks. A lease whose
    /// renewal fails (conflict or any error), or that is still inside its skew margin
    /// afterwards, is dropped at once: it is no longer dispatched from this call on.
    pub async fn renew(&mut self, now_ms: i64) -> Vec<LostLease> {
        let mut lost = Vec::new();
        let due: Vec<u32> = self
            .held
            .iter()
            .filter(|(_, p)| p.renewal_due(now_ms))
            .map(|(s, _)| *s)
            .collect();
        for shard in due {
            let Some(poller) = self.held.get_mut(&shard) else {
                continue;
            };
            let reason = match poller.renew(now_ms).await {
                Ok(()) if poller.may_dispatch(now_ms) => continue,
                Ok(()) => "lease inside its skew margin after renewal".to_owned(),
                Err(e) => e.to_string(),
            };
            lost.push(self.drop_shard(shard, reason));
        }
        lost
    }

    /// Tries to acquire shards that are free or expired, up to this poller's share; adopts
    /// shards nobody wanted for a whole round; releases shards held beyond the share when that
    /// can help another poller.
    ///
    /// - **Presence**: every poller announces itself with `member_beat` (once per renewal
    ///   interval, lasting a lease TTL), so a poller holding no shard is still counted. Without
    ///   it a poller that lost every lease, or started after another took them all, would wait
    ///   unseen forever while the other held everything.
    /// - **Share**: [`fair_share`]`(shard_count, P)` with `P` = the distinct other owners of
    ///   unexpired leases in `lease_list` or unexpired presence rows in `member_list`, plus this
    ///   poller; never more than [`config.max_shards`](PollerConfig::max_shards). Two pollers
    ///   split 16 shards 8/8, and a standby takes everything in one round once the other's
    ///   leases expire.
    /// - **Cold start**: a poller cannot see another that holds nothing yet, so pollers started
    ///   together would all race for every shard. A poller's very first round, if it sees no
    ///   other live owner, takes only half its share; the next round takes the rest if nobody
    ///   else showed up.
    /// - **Orphans**: a shard that was free at this poller's previous round and still is has
    ///   been left by everyone (the others are capped by `max_shards`): it is adopted beyond
    ///   the share, up to `max_shards`. Coverage comes before balance: an unowned shard is
    ///   never dispatched.
    /// - **Shedding**: an uncapped poller holding more than its share (a new poller got a
    ///   foothold) releases the excess, highest shards first, so the newcomer can take them at
    ///   once. After adopting orphans it stops shedding until the set of live owners changes,
    ///   or it would release and re-adopt the same shards forever.
    pub async fn acquire_free_shards(&mut self, now_ms: i64) -> Result<AcquireReport, PollerError> {
        let members = self.beat_and_list_members(now_ms).await?;
        let leases = self
            .backend
            .leases
            .lease_list()
            .await
            .map_err(|e| PollerError::store("lease_list", None, e))?;
        let owner = self.config.owner.clone();
        let shard_count = self.backend.tasks.shard_count();
        let count = usize::try_from(shard_count).unwrap_or(usize::MAX);
        let live_others: BTreeSet<String> = leases
            .iter()
            .map(|l| (&l.owner, l.expires_ms))
            .chain(members.iter().map(|m| (&m.owner, m.expires_ms)))
            .filter(|(o, expires_ms)| **o != owner && *expires_ms > now_ms)
            .map(|(o, _)| o.clone())
            .collect();
        let capped = self.config.max_shards.is_some();
        let cap = self.config.max_shards.map_or(count, |m| m.min(count));
        let share = fair_share(count, live_others.len() + 1).min(cap);
        let mut report = AcquireReport {
            target: share,
            live_others: live_others.len(),
            ..Default::default()
        };
        if self.shed_futile_for.as_ref() != Some(&live_others) {
            self.shed_futile_for = None;
        }

        // Free for us: never leased, expired, or ours but not held here (we dropped it, or an
        // earlier process of the same owner held it). Listed from an owner-dependent offset so
        // concurrent pollers do not all race for shard 0 first.
        let by_shard: BTreeMap<u32, &Lease> = leases.iter().map(|l| (l.shard, l)).collect();
        let offset = shard_of(&owner, shard_count.max(1));
        let free: Vec<u32> = (0..shard_count)
            .map(|i| (offset + i) % shard_count.max(1))
            .filter(|s| !self.held.contains_key(s))
            .filter(|s| {
                by_shard
                    .get(s)
                    .is_none_or(|l| l.owner == owner || l.expires_ms <= now_ms)
            })
            .collect();
        let orphans: Vec<u32> = free
            .iter()
            .copied()
            .filter(|s| self.last_free.contains(s))
            .collect();
        self.last_free = free.iter().copied().collect();

        if !capped && self.shed_futile_for.is_none() {
            while self.held.len() > share {
                let Some((shard, poller)) = self.held.pop_last() else {
                    break;
                };
                let epoch = poller.lease().epoch;
                if let Err(e) = poller.release().await {
                    tracing::warn!(shard, error = %e, "releasing a shed lease failed");
                }
                tracing::info!(shard, epoch, share, "lease shed to another poller");
                self.emit(PollerEvent::LeaseReleased { shard, epoch });
                report.shed.push(shard);
            }
        }

        let target = if self.first_round && live_others.is_empty() && !capped {
            share.div_ceil(2)
        } else {
            share
        };
        let mut adopted = 0;
        for (shard, orphan) in free
            .iter()
            .map(|s| (*s, false))
            .chain(orphans.iter().map(|s| (*s, true)))
        {
            let limit = if orphan { cap } else { target };
            if self.held.len() >= limit || self.held.contains_key(&shard) {
                continue;
            }
            match self.acquire(shard, now_ms).await {
                Ok(Some(lease)) => {
                    adopted += usize::from(orphan);
                    report.acquired.push(lease);
                }
                Ok(None) => {}
                Err(e) => return Err(e),
            }
        }
        if adopted > 0 && !capped {
            self.shed_futile_for = Some(live_others);
        }
        report.adopted = adopted;
        if capped && self.held.len() >= cap && !orphans.is_empty() {
            tracing::warn!(
                unowned = orphans.len(),
                max_shards = cap,
                "shards left unowned: raise max_shards or run more pollers"
            );
        }
        self.first_round = false;
        Ok(report)
    }

    /// Announces this poller when its beat is due, lists every poller's presence, and forgets
    /// peers gone for [`MEMBER_FORGET_AFTER_MS`] (a crashed process cannot remove its own row).
    async fn beat_and_list_members(&mut self, now_ms: i64) -> Result<Vec<Member>, PollerError> {
        let leases = &self.backend.leases;
        if self
            .beat_ms
            .is_none_or(|at| now_ms >= at + self.config.renew_every_ms())
        {
            leases
                .member_beat(MemberBeat {
                    owner: self.config.owner.clone(),
                    ttl_ms: self.config.lease_ttl_ms,
                    now_ms,
                })
                .await
                .map_err(|e| PollerError::store("member_beat", None, e))?;
            self.beat_ms = Some(now_ms);
        }
        let members = leases
            .member_list()
            .await
            .map_err(|e| PollerError::store("member_list", None, e))?;
        for gone in members
            .iter()
            .filter(|m| m.expires_ms + MEMBER_FORGET_AFTER_MS < now_ms)
        {
            let removed = leases
                .member_remove(MemberRemove {
                    owner: gone.owner.clone(),
                    if_expires_ms: Some(gone.expires_ms),
                })
                .await;
            match removed {
                // It came back, or another poller removed it first.
                Err(e) if !e.is_conflict() => {
                    tracing::warn!(owner = %gone.owner, error = %e, "forgetting a gone poller failed");
                }
                _ => {}
            }
        }
        Ok(members)
    }

    /// Acquires one shard's lease: `None` if someone else holds it.
    async fn acquire(&mut self, shard: u32, now_ms: i64) -> Result<Option<Lease>, PollerError> {
        let acquired = self
            .backend
            .leases
            .lease_acquire(LeaseAcquire {
                shard,
                owner: self.config.owner.clone(),
                ttl_ms: self.config.lease_ttl_ms,
                now_ms,
            })
            .await;
        match acquired {
            Ok(lease) => {
                tracing::info!(shard, epoch = lease.epoch, "lease acquired");
                self.emit(PollerEvent::LeaseAcquired {
                    shard,
                    epoch: lease.epoch,
                    watermark_minute: lease.watermark_minute,
                });
                self.held.insert(
                    shard,
                    ShardPoller::new(
                        self.backend.clone(),
                        self.clock.clone(),
                        self.config.clone(),
                        lease.clone(),
                    ),
                );
                Ok(Some(lease))
            }
            // Someone else got it first.
            Err(e) if e.is_conflict() => Ok(None),
            Err(e) => Err(PollerError::store("lease_acquire", Some(shard), e)),
        }
    }

    /// Releases every held lease with its watermark (on shutdown), so a standby takes over at
    /// once instead of after a TTL, and withdraws this poller's presence so the others stop
    /// counting it. Returns how many releases succeeded.
    pub async fn release_all(&mut self) -> usize {
        let mut released = 0;
        while let Some((shard, poller)) = self.held.pop_first() {
            let epoch = poller.lease().epoch;
            match poller.release().await {
                Ok(()) => {
                    released += 1;
                    self.emit(PollerEvent::LeaseReleased { shard, epoch });
                }
                Err(e) => tracing::warn!(shard, error = %e, "lease release failed"),
            }
        }
        if self.beat_ms.take().is_some() {
            let gone = MemberRemove {
                owner: self.config.owner.clone(),
                if_expires_ms: None,
            };
            if let Err(e) = self.backend.leases.member_remove(gone).await {
                tracing::warn!(error = %e, "withdrawing this poller's presence failed");
            }
        }
        released
    }

    /// Stops using a shard, without a store call: its lease lapses on its own.
    pub fn drop_shard(&mut self, shard: u32, reason: String) -> LostLease {
        let epoch = self.held.remove(&shard).map_or(0, |p| p.lease().epoch);
        tracing::warn!(shard, epoch, %reason, "lease lost; shard no longer dispatched");
        self.emit(PollerEvent::LeaseLost {
            shard,
            epoch,
            reason: reason.clone(),
        });
        LostLease {
            shard,
            epoch,
            reason,
        }
    }

    pub(crate) fn emit(&self, event: PollerEvent) {
        if let Some(tx) = &self.events {
            // A dropped receiver only means nobody listens any more.
            let _ = tx.send(event);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fair_share;

    #[test]
    fn fair_share_rounds_up() {
        assert_eq!(fair_share(16, 1), 16);
        assert_eq!(fair_share(16, 2), 8);
        assert_eq!(fair_share(16, 3), 6);
        assert_eq!(fair_share(1, 4), 1);
        assert_eq!(fair_share(16, 0), 16);
    }
}
