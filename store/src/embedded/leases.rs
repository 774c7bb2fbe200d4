//! [`LeaseStore`] over the `leases` table: one row per shard, every change conditional.
//!
//! ```text
//! acquire:  no row                      → insert, epoch 1, watermark = created_minute
//!           expires_ms <= now           → owner := me, epoch + 1   (a dead owner's shard)
//!           owner = me                  → epoch + 1                (a restart of the same poller)
//!           otherwise                   → Conflict
//! renew:    owner = me AND epoch = e AND expires_ms > now → expires_ms := now + ttl
//! release:  owner = me AND epoch = e    → expires_ms := 0 (free at once; epoch, watermark kept)
//!
//! members:  one row per live poller (owner, expires_ms), upserted by its beat, deleted on
//!           shutdown or by a peer once long expired; listed whole
//! ```
//!
//! The epoch grows with every acquisition, so a poller holding an older epoch fails its next
//! renewal even if it kept the same owner name; the watermark lives in the row so the next
//! holder resumes where the last one stopped.

use async_trait::async_trait;
use punctual_core::error::StoreResult;
use punctual_core::store::{
    Lease, LeaseAcquire, LeaseRelease, LeaseRenew, Member, MemberBeat, MemberRemove,
};
use punctual_core::{LeaseStore, StoreError};
use rusqlite::{Connection, OptionalExtension, Row, params};

use super::EmbeddedStore;
use super::db::{DbError, DbResult};

macro_rules! lease_columns {
    () => {
        "shard, owner, expires_ms, epoch, watermark_minute"
    };
}

fn lease_from_row(r: &Row<'_>) -> rusqlite::Result<Lease> {
    Ok(Lease {
        shard: r.get(0)?,
        owner: r.get(1)?,
        expires_ms: r.get(2)?,
        epoch: r.get::<_, i64>(3)? as u64,
        watermark_minute: r.get(4)?,
    })
}

fn acquire(conn: &Connection, p: &LeaseAcquire, created_minute: i64) -> DbResult<Lease> {
    let sql = concat!("SELECT ", lease_columns!(), " FROM leases WHERE shard = ?1");
    let current = conn
        .prepare_cached(sql)?
        .query_row([p.shard], lease_from_row)
        .optional()?;
    let expires = p.now_ms + p.ttl_ms;
    match current {
        None => {
            let sql = concat!(
                "INSERT INTO leases (shard, owner, expires_ms, epoch, watermark_minute)
                 VALUES (?1, ?2, ?3, 1, ?4) RETURNING ",
                lease_columns!()
            );
            Ok(conn.prepare_cached(sql)?.query_row(
                params![p.shard, p.owner, expires, created_minute],
                lease_from_row,
            )?)
        }
        Some(l) if l.owner == p.owner || l.expires_ms <= p.now_ms => {
            let sql = concat!(
                "UPDATE leases SET owner = ?2, expires_ms = ?3, epoch = epoch + 1
                 WHERE shard = ?1 RETURNING ",
                lease_columns!()
            );
            Ok(conn
                .prepare_cached(sql)?
                .query_row(params![p.shard, p.owner, expires], lease_from_row)?)
        }
        Some(l) => Err(StoreError::conflict(format!(
            "shard {} is held by {} until {} (epoch {})",
            l.shard, l.owner, l.expires_ms, l.epoch
        ))
        .into()),
    }
}

fn lost(shard: u32, owner: &str, epoch: u64) -> DbError {
    StoreError::conflict(format!(
        "the lease of shard {shard} at epoch {epoch} is no longer held by {owner}"
    ))
    .into()
}

#[async_trait]
impl LeaseStore for EmbeddedStore {
    async fn lease_acquire(&self, p: LeaseAcquire) -> StoreResult<Lease> {
        let created = self.created_minute;
        self.writer
            .run(move |conn| acquire(conn, &p, created))
            .await
    }

    async fn lease_renew(&self, p: LeaseRenew) -> StoreResult<Lease> {
        self.writer
            .run(move |conn| {
                let sql = concat!(
                    "UPDATE leases SET expires_ms = ?4 + ?5,
                         watermark_minute = coalesce(?6, watermark_minute)
                     WHERE shard = ?1 AND owner = ?2 AND epoch = ?3 AND expires_ms > ?4
                     RETURNING ",
                    lease_columns!()
                );
                conn.prepare_cached(sql)?
                    .query_row(
                        params![
                            p.shard,
                            p.owner,
                            p.epoch as i64,
                            p.now_ms,
                            p.ttl_ms,
                            p.watermark_minute
                        ],
                        lease_from_row,
                    )
                    .optional()?
                    .ok_or_else(|| lost(p.shard, &p.owner, p.epoch))
            })
            .await
    }

    async fn lease_release(&self, p: LeaseRelease) -> StoreResult<()> {
        self.writer
            .run(move |conn| {
                // No `now` to compare with: a holder may release a lease that lapsed as long
                // as nobody took it since (the epoch would have moved).
                let changed = conn
                    .prepare_cached(
                        "UPDATE leases SET expires_ms = 0, watermark_minute = ?4
                         WHERE shard = ?1 AND owner = ?2 AND epoch = ?3",
                    )?
                    .execute(params![
                        p.shard,
                        p.owner,
                        p.epoch as i64,
                        p.watermark_minute
                    ])?;
                if changed == 0 {
                    return Err(lost(p.shard, &p.owner, p.epoch));
                }
                Ok(())
            })
            .await
    }

    async fn lease_list(&self) -> StoreResult<Vec<Lease>> {
        self.readers
            .run(|conn| {
                let sql = concat!("SELECT ", lease_columns!(), " FROM leases ORDER BY shard");
                let mut stmt = conn.prepare_cached(sql)?;
                let rows = stmt.query_map([], lease_from_row)?;
                Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
            })
            .await
    }

    async fn member_beat(&self, p: MemberBeat) -> StoreResult<()> {
        self.writer
            .run(move |conn| {
                conn.prepare_cached(
                    "INSERT INTO members (owner, expires_ms) VALUES (?1, ?2)
                     ON CONFLICT (owner) DO UPDATE SET expires_ms = excluded.expires_ms",
                )?
                .execute(params![p.owner, p.now_ms + p.ttl_ms])?;
                Ok(())
            })
            .await
    }

    async fn member_remove(&self, p: MemberRemove) -> StoreResult<()> {
        self.writer
            .run(move |conn| {
                let Some(expires) = p.if_expires_ms else {
                    conn.prepare_cached("DELETE FROM members WHERE owner = ?1")?
                        .execute([&p.owner])?;
                    return Ok(());
                };
                let changed = conn
                    .prepare_cached("DELETE FROM members WHERE owner = ?1 AND expires_ms = ?2")?
                    .execute(params![p.owner, expires])?;
                if changed == 0 {
                    return Err(StoreError::conflict(format!(
                        "poller {} beat again since it was listed (or is gone)",
                        p.owner
                    ))
                    .into());
                }
                Ok(())
            })
            .await
    }

    async fn member_list(&self) -> StoreResult<Vec<Member>> {
        self.readers
            .run(|conn| {
                let mut stmt =
                    conn.prepare_cached("SELECT owner, expires_ms FROM members ORDER BY owner")?;
                let rows = stmt.query_map([], |r| {
                    Ok(Member {
                        owner: r.get(0)?,
                        expires_ms: r.get(1)?,
                    })
                })?;
                Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
            })
            .await
    }
}
