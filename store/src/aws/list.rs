//! `task_list` on DynamoDB: filtered listings through the two sparse indexes, never a Scan.
//!
//! | status asked | index | partitions walked |
//! |---|---|---|
//! | none (waiting), `SCHEDULED`, `RETRY_WAIT` | `by_due` | every shard's bucket, minute by minute |
//! | `DEAD`, `CANCELLED` | `by_status` | `"{STATUS}#{shard:05}"` for every shard, merged |
//! | `DISPATCHED`, `RUNNING`, `SUCCEEDED` | none: refused (`Invalid` naming `status`) | |
//!
//! **Why `by_status` holds only `DEAD` and `CANCELLED`.** Its key, `status_part`, is written
//! by the very `UpdateItem` that makes a task `DEAD` (completion, or a claim that finds the
//! attempts spent) or `CANCELLED`, and removed by the reschedule or replay that brings it
//! back. The successful path (created → dispatched → running → succeeded) never sets it, so
//! that path writes the index not once and a task's cost (DESIGN.md's budget) is unchanged.
//! Indexing the transient statuses would add a GSI write to every step of every task.
//!
//! **Filters.** The due window is the sort-key condition (`due_key` starts with the due
//! time), and on `by_due` it also bounds the minutes walked: a task due before `due_to` waits
//! under its due minute or, if filed late, under the minute it was filed, never after now's.
//! The id prefix is a `FilterExpression` (`begins_with(task_id, :p)`: the table key is in
//! every index). Status (on `by_due`) and target kind are not projected into the indexes
//! (their projections stay small: `by_due` carries what a poll needs, `by_status` only keys),
//! so they are checked on the items the page reads anyway (`BatchGetItem`, strongly
//! consistent), which also drops index entries gone stale (GSIs are eventually consistent).
//! A page may therefore hold fewer than `limit` tasks, even none, with a `next` cursor.
//!
//! **Merging shards on `by_status`.** Each shard's partition is read in `due_key` order up to
//! `limit` matches; a shard that stopped early (limit or its share of the query budget) has
//! a frontier, the last key it examined. The page takes the smallest keys no greater than the
//! lowest frontier, so nothing between two pages is skipped; the cursor is the last key
//! taken, or that frontier when the page is short.

use aws_sdk_dynamodb::types::AttributeValue;
use punctual_core::StoreError;
use punctual_core::error::StoreResult;
use punctual_core::keys;
use punctual_core::store::{DueEntry, Page, TaskFilter, TaskList};
use punctual_core::task::{Task, TaskStatus};

use super::item::{Item, get_s};
use super::names::*;
use super::tasks::{due_entry, parse_cursor};
use super::{AwsStore, Ex, fan_out, map_sdk, s};

/// `by_status`'s partition key of a task in `status` on `shard`: `"{STATUS}#{shard:05}"`.
pub(super) fn status_part(status: TaskStatus, shard: u32) -> String {
    format!("{}#{shard:05}", status.as_str())
}

/// What one partition gave: the items that passed the id-prefix filter, in key order, and
/// the frontier (the last key examined) if the partition was not read to its end.
struct RangeRead {
    items: Vec<Item>,
    frontier: Option<String>,
}

/// The sort-key bounds of a filter and a cursor: `lower` inclusive, `upper` inclusive.
fn key_bounds(filter: &TaskFilter, after: Option<&str>) -> (Option<String>, Option<String>) {
    // The successor of `after`: keys compare as UTF-8 bytes, and "\0" sorts first.
    let after = after.map(|a| format!("{a}\u{0}"));
    let from = filter.due_from_ms.map(|ms| format!("{ms:013}"));
    let lower = match (after, from) {
        (Some(a), Some(f)) => Some(a.max(f)),
        (a, f) => a.or(f),
    };
    let upper = filter
        .due_to_ms
        .map(|ms| keys::due_key_upper(ms.saturating_sub(1)));
    (lower, upper)
}

impl AwsStore {
    /// Queries one partition of `index` for `lower <= due_key <= upper` (either optional), in
    /// pages of at most 1,000 evaluated items, until `limit` items pass the id prefix, the
    /// partition ends, or `max_pages` pages were read.
    #[allow(clippy::too_many_arguments)]
    async fn query_range(
        &self,
        index: &str,
        part_attr: &str,
        part: String,
        lower: Option<&str>,
        upper: Option<&str>,
        id_prefix: Option<&str>,
        limit: usize,
        max_pages: usize,
    ) -> StoreResult<RangeRead> {
        let mut ex = Ex::default();
        let p = ex.n(part_attr);
        let pv = ex.v("p", s(part));
        let mut cond = format!("{p} = {pv}");
        match (lower, upper) {
            (Some(lo), Some(up)) => {
                let k = ex.n(DUE_KEY);
                cond += &format!(
                    " AND {k} BETWEEN {} AND {}",
                    ex.v("lo", s(lo)),
                    ex.v("up", s(up))
                );
            }
            (Some(lo), None) => {
                let k = ex.n(DUE_KEY);
                cond += &format!(" AND {k} >= {}", ex.v("lo", s(lo)));
            }
            (None, Some(up)) => {
                let k = ex.n(DUE_KEY);
                cond += &format!(" AND {k} <= {}", ex.v("up", s(up)));
            }
            (None, None) => {}
        }
        // BETWEEN with lo > up is a ValidationException: an empty range reads nothing.
        if let (Some(lo), Some(up)) = (lower, upper)
            && lo > up
        {
            return Ok(RangeRead {
                items: Vec::new(),
                frontier: None,
            });
        }
        let filter = id_prefix.map(|prefix| {
            format!(
                "begins_with({}, {})",
                ex.n(TASK_ID),
                ex.v("prefix", s(prefix))
            )
        });
        let mut items: Vec<Item> = Vec::new();
        let mut start: Option<Item> = None;
        for _ in 0..max_pages.max(1) {
            let out = self
                .ddb()
                .query()
                .table_name(&self.names.tasks_table)
                .index_name(index)
                .key_condition_expression(&cond)
                .set_filter_expression(filter.clone())
                .set_expression_attribute_names(ex.names())
                .set_expression_attribute_values(ex.values())
                .set_exclusive_start_key(start.take())
                .limit(limit.clamp(1, 1_000) as i32)
                .send()
                .await
                .map_err(|e| map_sdk(&format!("Query {index}"), e))?;
            items.extend(out.items.unwrap_or_default());
            if items.len() >= limit {
                items.truncate(limit);
                let frontier = items.last().map(|i| get_s(i, DUE_KEY).map(str::to_owned));
                return Ok(RangeRead {
                    items,
                    frontier: frontier.transpose()?,
                });
            }
            match out.last_evaluated_key.filter(|k| !k.is_empty()) {
                Some(k) => start = Some(k),
                None => {
                    return Ok(RangeRead {
                        items,
                        frontier: None,
                    });
                }
            }
        }
        // Out of pages: everything up to the last evaluated key has been examined.
        let frontier = match start.as_ref().and_then(|k| k.get(DUE_KEY)) {
            Some(AttributeValue::S(k)) => Some(k.clone()),
            _ => items
                .last()
                .map(|i| get_s(i, DUE_KEY).map(str::to_owned))
                .transpose()?,
        };
        Ok(RangeRead { items, frontier })
    }

    /// The first minute a waiting task can be filed under: the oldest shard watermark (a
    /// shard never leased starts at the store's creation).
    async fn oldest_waiting_minute(&self) -> StoreResult<i64> {
        use punctual_core::LeaseStore;
        let leases = self.lease_list().await?;
        Ok(if leases.len() < self.shard_count as usize {
            self.created_minute
        } else {
            leases
                .iter()
                .map(|l| l.watermark_minute)
                .min()
                .unwrap_or(self.created_minute)
        })
    }

    /// Lists through `by_due`: the waiting tasks, or those of them in `SCHEDULED` or
    /// `RETRY_WAIT`. Walks bucket minutes across shards, one `Query` per shard-minute, at
    /// most `list_max_queries` per page. The cursor is `"{minute}|{due_key}"`.
    pub(super) async fn list_waiting(&self, p: TaskList) -> StoreResult<Page<Task>> {
        use std::sync::atomic::Ordering;
        let limit = p.limit.max(1);
        let f = &p.filter;
        let (mut minute, mut after) = match p.after_key.as_deref() {
            Some(c) => {
                let (m, k) = parse_cursor(c)?;
                (m, (!k.is_empty()).then_some(k))
            }
            None => {
                let oldest = self.oldest_waiting_minute().await?;
                let from = f.due_from_ms.map(keys::minute_of).unwrap_or(i64::MIN);
                (oldest.max(from), None)
            }
        };
        let mut last = self.max_due_minute.load(Ordering::Relaxed).max(
            super::init::read_meta(self.ddb(), &self.names)
                .await?
                .map(|m| m.max_due_minute)
                .unwrap_or(minute),
        );
        if let Some(to) = f.due_to_ms {
            // Filed under its due minute, or late under its filing minute (<= now's).
            let latest = keys::minute_of(to.saturating_sub(1)).max(keys::minute_of(p.now_ms));
            last = last.min(latest);
        }
        let mut queries = 0;
        let mut found: Vec<(i64, DueEntry)> = Vec::new();
        let mut next = None;
        while minute <= last && found.len() < limit {
            let (lower, upper) = key_bounds(f, after.as_deref());
            let mut this_minute = Vec::new();
            for shard in 0..self.shard_count {
                let read = self
                    .query_range(
                        GSI_BY_DUE,
                        DUE_BUCKET,
                        keys::due_bucket(shard, minute),
                        lower.as_deref(),
                        upper.as_deref(),
                        f.id_prefix.as_deref(),
                        limit - found.len(),
                        usize::MAX,
                    )
                    .await?;
                queries += 1;
                for item in &read.items {
                    this_minute.push(due_entry(item)?);
                }
            }
            this_minute.sort_by(|a, b| a.due_key.cmp(&b.due_key));
            this_minute.truncate(limit - found.len());
            let full = found.len() + this_minute.len() >= limit;
            found.extend(this_minute.into_iter().map(|e| (minute, e)));
            if full {
                break;
            }
            minute += 1;
            after = None;
            if queries >= self.opts.list_max_queries {
                // Out of budget for this page: hand back what we have and where to go on.
                next = (minute <= last).then(|| format!("{minute}|"));
                break;
            }
        }
        if found.len() >= limit {
            next = found.last().map(|(m, e)| format!("{m}|{}", e.due_key));
        }
        let ids = found.iter().map(|(_, e)| e.task_id.clone()).collect();
        let items = self
            .ordered(ids, &found)
            .await?
            .into_iter()
            .filter(|t| f.matches(t))
            .collect();
        Ok(Page { items, next })
    }

    /// Lists `DEAD` or `CANCELLED` tasks through `by_status`, merging the shards' partitions
    /// in `due_key` order (see the module doc). The cursor is the last `due_key` examined.
    pub(super) async fn list_finished(
        &self,
        status: TaskStatus,
        p: TaskList,
    ) -> StoreResult<Page<Task>> {
        let limit = p.limit.max(1);
        let filter = p.filter.clone();
        if let Some(a) = p.after_key.as_deref()
            && !a.contains('#')
        {
            return Err(StoreError::invalid(
                "after_key",
                "not a cursor of this store",
            ));
        }
        let (lower, upper) = key_bounds(&filter, p.after_key.as_deref());
        let pages_per_shard =
            (self.opts.list_max_queries / self.shard_count.max(1) as usize).max(1);
        let me = self.clone_handle();
        let reads = fan_out(
            (0..self.shard_count).collect(),
            self.opts.concurrency,
            move |shard| {
                let me = me.clone();
                let (lower, upper) = (lower.clone(), upper.clone());
                let prefix = filter.id_prefix.clone();
                async move {
                    me.query_range(
                        GSI_BY_STATUS,
                        STATUS_PART,
                        status_part(status, shard),
                        lower.as_deref(),
                        upper.as_deref(),
                        prefix.as_deref(),
                        limit,
                        pages_per_shard,
                    )
                    .await
                }
            },
        )
        .await;
        let mut bound: Option<String> = None;
        let mut keys_found: Vec<(String, String)> = Vec::new();
        for read in reads {
            let read = read?;
            if let Some(f) = read.frontier {
                bound = Some(match bound {
                    Some(b) if b <= f => b,
                    _ => f,
                });
            }
            for item in &read.items {
                keys_found.push((
                    get_s(item, DUE_KEY)?.to_owned(),
                    get_s(item, TASK_ID)?.to_owned(),
                ));
            }
        }
        keys_found.retain(|(k, _)| bound.as_ref().is_none_or(|b| k <= b));
        keys_found.sort();
        let next = if keys_found.len() >= limit {
            keys_found.truncate(limit);
            keys_found.last().map(|(k, _)| k.clone())
        } else {
            bound
        };
        let mut by_id: std::collections::HashMap<String, Task> = self
            .batch_get(keys_found.iter().map(|(_, id)| id.clone()).collect())
            .await?
            .into_iter()
            .map(|t| (t.task_id.clone(), t))
            .collect();
        let items = keys_found
            .iter()
            .filter_map(|(_, id)| by_id.remove(id))
            .filter(|t| t.status == status && p.filter.matches_besides_status(t))
            .collect();
        Ok(Page { items, next })
    }
}
