//! [`LeaseStore`] over the leases table: one item per shard (`pk = "lease"`, `sk =
//! "{shard:05}"`), every change one conditional `UpdateItem` returning `ALL_NEW`.
//!
//! ```text
//! acquire:  attribute_not_exists(pk) OR expires_ms <= :now OR owner = :me
//!             → owner := me, expires_ms := now + ttl, epoch := if_not_exists(epoch, 0) + 1,
//!               watermark_minute := if_not_exists(watermark_minute, created_minute)
//! renew:    owner = :me AND epoch = :e AND expires_ms > :now → expires_ms := now + ttl
//! release:  owner = :me AND epoch = :e                       → expires_ms := 0
//! list:     Query pk = "lease" (one partition, no Scan)
//!
//! members:  pk = "member", sk = owner, expires_ms: PutItem to beat, DeleteItem (conditional
//!           on expires_ms when a peer removes a long-expired one), Query pk = "member" to list
//! ```
//!
//! Same rules as the embedded store's lease table; see DESIGN.md for why the epoch fences a
//! poller that lost its lease.

use async_trait::async_trait;
use aws_sdk_dynamodb::types::ReturnValue;
use punctual_core::error::StoreResult;
use punctual_core::store::{
    Lease, LeaseAcquire, LeaseRelease, LeaseRenew, Member, MemberBeat, MemberRemove,
};
use punctual_core::{LeaseStore, StoreError};

use super::item::{Item, get_n, get_s};
use super::names::*;
use super::{AwsStore, Ex, map_sdk, num, s};

fn lease_sk(shard: u32) -> String {
    format!("{shard:05}")
}

fn lease_from_item(item: &Item) -> StoreResult<Lease> {
    Ok(Lease {
        shard: get_n(item, SHARD)?,
        owner: get_s(item, OWNER)?.to_owned(),
        expires_ms: get_n(item, EXPIRES_MS)?,
        epoch: get_n(item, EPOCH)?,
        watermark_minute: get_n(item, WATERMARK_MINUTE)?,
    })
}

fn lost(shard: u32, owner: &str, epoch: u64) -> StoreError {
    StoreError::conflict(format!(
        "lease of shard {shard} is no longer held by {owner} at epoch {epoch}"
    ))
}

impl AwsStore {
    async fn lease_update(
        &self,
        op: &str,
        shard: u32,
        update: String,
        condition: String,
        ex: Ex,
    ) -> StoreResult<Option<Lease>> {
        let r = self
            .clients
            .dynamodb
            .update_item()
            .table_name(&self.names.leases_table)
            .key(LEASE_PK, s(LEASE_PARTITION))
            .key(LEASE_SK, s(lease_sk(shard)))
            .update_expression(update)
            .condition_expression(condition)
            .set_expression_attribute_names(ex.names())
            .set_expression_attribute_values(ex.values())
            .return_values(ReturnValue::AllNew)
            .send()
            .await;
        match r {
            Ok(out) => Ok(Some(lease_from_item(&out.attributes.unwrap_or_default())?)),
            Err(e) => {
                let e = map_sdk(op, e);
                if e.is_conflict() { Ok(None) } else { Err(e) }
            }
        }
    }

    /// Every item of one partition of the leases table, consistently read, page after page.
    async fn leases_partition(&self, op: &str, partition: &str) -> StoreResult<Vec<Item>> {
        let mut items = Vec::new();
        let mut start = None;
        loop {
            let out = self
                .clients
                .dynamodb
                .query()
                .table_name(&self.names.leases_table)
                .key_condition_expression("#pk = :pk")
                .expression_attribute_names("#pk", LEASE_PK)
                .expression_attribute_values(":pk", s(partition))
                .consistent_read(true)
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| map_sdk(op, e))?;
            items.extend(out.items.unwrap_or_default());
            start = out.last_evaluated_key.filter(|k| !k.is_empty());
            if start.is_none() {
                return Ok(items);
            }
        }
    }
}

#[async_trait]
impl LeaseStore for AwsStore {
    async fn lease_acquire(&self, p: LeaseAcquire) -> StoreResult<Lease> {
        let mut ex = Ex::default();
        let update = format!(
            "SET {sh} = {shv}, {o} = {me}, {x} = {exp}, {e} = if_not_exists({e}, {zero}) + {one}, \
             {w} = if_not_exists({w}, {created})",
            sh = ex.n(SHARD),
            shv = ex.v("shard", num(p.shard)),
            o = ex.n(OWNER),
            me = ex.v("me", s(&p.owner)),
            x = ex.n(EXPIRES_MS),
            exp = ex.v("exp", num(p.now_ms + p.ttl_ms)),
            e = ex.n(EPOCH),
            zero = ex.v("zero", num(0)),
            one = ex.v("one", num(1)),
            w = ex.n(WATERMARK_MINUTE),
            created = ex.v("created", num(self.created_minute)),
        );
        let condition = format!(
            "attribute_not_exists({pk}) OR {x} <= {now} OR {o} = {me}",
            pk = ex.n(LEASE_PK),
            x = ex.n(EXPIRES_MS),
            now = ex.v("now", num(p.now_ms)),
            o = ex.n(OWNER),
            me = ex.v("me", s(&p.owner)),
        );
        self.lease_update("UpdateItem lease acquire", p.shard, update, condition, ex)
            .await?
            .ok_or_else(|| {
                StoreError::conflict(format!("shard {} is leased by another poller", p.shard))
            })
    }

    async fn lease_renew(&self, p: LeaseRenew) -> StoreResult<Lease> {
        let mut ex = Ex::default();
        let mut update = format!(
            "SET {x} = {exp}",
            x = ex.n(EXPIRES_MS),
            exp = ex.v("exp", num(p.now_ms + p.ttl_ms))
        );
        if let Some(w) = p.watermark_minute {
            update += &format!(", {} = {}", ex.n(WATERMARK_MINUTE), ex.v("w", num(w)));
        }
        let condition = format!(
            "{o} = {me} AND {e} = {ev} AND {x} > {now}",
            o = ex.n(OWNER),
            me = ex.v("me", s(&p.owner)),
            e = ex.n(EPOCH),
            ev = ex.v("e", num(p.epoch)),
            x = ex.n(EXPIRES_MS),
            now = ex.v("now", num(p.now_ms)),
        );
        self.lease_update("UpdateItem lease renew", p.shard, update, condition, ex)
            .await?
            .ok_or_else(|| lost(p.shard, &p.owner, p.epoch))
    }

    async fn lease_release(&self, p: LeaseRelease) -> StoreResult<()> {
        let mut ex = Ex::default();
        let update = format!(
            "SET {x} = {zero}, {w} = {wv}",
            x = ex.n(EXPIRES_MS),
            zero = ex.v("zero", num(0)),
            w = ex.n(WATERMARK_MINUTE),
            wv = ex.v("w", num(p.watermark_minute)),
        );
        let condition = format!(
            "{o} = {me} AND {e} = {ev}",
            o = ex.n(OWNER),
            me = ex.v("me", s(&p.owner)),
            e = ex.n(EPOCH),
            ev = ex.v("e", num(p.epoch)),
        );
        self.lease_update("UpdateItem lease release", p.shard, update, condition, ex)
            .await?
            .map(|_| ())
            .ok_or_else(|| lost(p.shard, &p.owner, p.epoch))
    }

    async fn lease_list(&self) -> StoreResult<Vec<Lease>> {
        self.leases_partition("Query leases", LEASE_PARTITION)
            .await?
            .iter()
            .map(lease_from_item)
            .collect()
    }

    async fn member_beat(&self, p: MemberBeat) -> StoreResult<()> {
        self.clients
            .dynamodb
            .put_item()
            .table_name(&self.names.leases_table)
            .item(LEASE_PK, s(MEMBER_PARTITION))
            .item(LEASE_SK, s(&p.owner))
            .item(OWNER, s(&p.owner))
            .item(EXPIRES_MS, num(p.now_ms + p.ttl_ms))
            .send()
            .await
            .map_err(|e| map_sdk("PutItem member", e))?;
        Ok(())
    }

    async fn member_remove(&self, p: MemberRemove) -> StoreResult<()> {
        let mut req = self
            .clients
            .dynamodb
            .delete_item()
            .table_name(&self.names.leases_table)
            .key(LEASE_PK, s(MEMBER_PARTITION))
            .key(LEASE_SK, s(&p.owner));
        if let Some(expires) = p.if_expires_ms {
            let mut ex = Ex::default();
            let condition = format!("{} = {}", ex.n(EXPIRES_MS), ex.v("x", num(expires)));
            req = req
                .condition_expression(condition)
                .set_expression_attribute_names(ex.names())
                .set_expression_attribute_values(ex.values());
        }
        req.send()
            .await
            .map_err(|e| map_sdk("DeleteItem member", e))?;
        Ok(())
    }

    async fn member_list(&self) -> StoreResult<Vec<Member>> {
        self.leases_partition("Query members", MEMBER_PARTITION)
            .await?
            .iter()
            .map(|item| {
                Ok(Member {
                    owner: get_s(item, OWNER)?.to_owned(),
                    expires_ms: get_n(item, EXPIRES_MS)?,
                })
            })
            .collect()
    }
}
