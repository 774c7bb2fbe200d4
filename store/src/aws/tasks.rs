//! [`TaskStore`] over the tasks table and its sparse GSI `by_due`.
//!
//! | call | requests |
//! |---|---|
//! | `task_put` | `PutItem` if `attribute_not_exists(task_id)`; on conflict a consistent `GetItem` |
//! | `due_query` | `Query` on `by_due`: `due_bucket = :b AND due_key BETWEEN :after AND :upper` |
//! | `task_mark_dispatched` | one conditional `UpdateItem` per task, in parallel |
//! | `task_claim` | one conditional `UpdateItem` returning `ALL_NEW`; on conflict a `GetItem` |
//! | `task_complete` | one conditional `UpdateItem` returning `ALL_NEW` |
//! | `task_cancel`, `task_reschedule`, `task_update` | `GetItem`, then `UpdateItem` conditional on the read version and status |
//! | `due_backlog` | one `Query` with `Select = COUNT` on `by_due` per shard-minute, in parallel |
//! | `task_list_pending` | `Query`s on `by_due`, minute by minute across shards, then `BatchGetItem` |
//! | `task_list` | as `task_list_pending` for waiting tasks; for `DEAD`/`CANCELLED` one `Query` per shard on `by_status`, then `BatchGetItem` (see `list.rs`) |
//! | `task_cancel`, a `DEAD` completion or exhausted claim | also set `status_part` (into `by_status`); `task_reschedule` removes it |
//!
//! **Listing without Scan.** `task_list_pending` walks the bucket minutes from the oldest
//! watermark of any shard (or the store's creation minute) to the meta item's
//! `max_due_minute`, querying every shard's bucket of a minute and merging them in `due_key`
//! order. Its cost is one `Query` per shard-minute walked, so a page stops after
//! `list_max_queries` queries and may come back short (even empty) with a cursor to go on.
//! Limits: listing tasks due far in the future walks every minute in between (use `GET
//! /v1/tasks/{id}` for one task); a task filed late (due time in the past) is listed with the
//! minute it was filed under, so the order is by bucket minute, then due time. The cursor is
//! `"{minute}|{due_key}"`.

use std::sync::atomic::Ordering;

use async_trait::async_trait;
use aws_sdk_dynamodb::types::{AttributeValue, KeysAndAttributes, ReturnValue};
use punctual_core::error::StoreResult;
use punctual_core::keys;
use punctual_core::store::{
    Capabilities, ClaimOutcome, Completion, DueBacklog, DueEntry, DueQuery, Page, PutOutcome,
    TaskCancel, TaskClaim, TaskComplete, TaskList, TaskMarkDispatched, TaskPut, TaskPutBatch,
    TaskReschedule, TaskUpdate,
};
use punctual_core::task::{NewTask, Task, TaskStatus, Transition};
use punctual_core::{StoreError, TaskStore};

use super::item::{Item, get_n, get_s, task_from_item, task_to_item, to_json};
use super::list::status_part;
use super::names::*;
use super::{AwsStore, Ex, build_err, fan_out, map_sdk, num, s};

/// The statuses `task_list` serves through an index: the waiting ones through `by_due`,
/// the finished ones an operator acts on through `by_status`. `DISPATCHED`, `RUNNING` and
/// `SUCCEEDED` are in neither (indexing them would add index writes to every task's
/// successful path), so listing them would need a Scan.
pub const LISTABLE_STATUSES: &[TaskStatus] = punctual_core::store::LIST_INDEXED_STATUSES;

const SCH: &str = "SCHEDULED";
const DIS: &str = "DISPATCHED";
const RUN: &str = "RUNNING";
const RW: &str = "RETRY_WAIT";

impl AwsStore {
    pub(super) fn ddb(&self) -> &aws_sdk_dynamodb::Client {
        &self.clients.dynamodb
    }

    fn expires_at(&self, now_ms: i64) -> AttributeValue {
        num(now_ms / 1_000 + self.opts.retention_secs)
    }

    /// Reads a task, strongly consistent.
    async fn get_item(&self, task_id: &str) -> StoreResult<Option<Task>> {
        let out = self
            .ddb()
            .get_item()
            .table_name(&self.names.tasks_table)
            .key(TASK_ID, s(task_id))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| map_sdk("GetItem", e))?;
        out.item.as_ref().map(task_from_item).transpose()
    }

    async fn require(&self, task_id: &str) -> StoreResult<Task> {
        self.get_item(task_id)
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("task {task_id}")))
    }

    /// One conditional `UpdateItem` returning the new item.
    async fn update(
        &self,
        op: &str,
        task_id: &str,
        update: String,
        condition: String,
        ex: Ex,
    ) -> StoreResult<Task> {
        let out = self
            .ddb()
            .update_item()
            .table_name(&self.names.tasks_table)
            .key(TASK_ID, s(task_id))
            .update_expression(update)
            .condition_expression(condition)
            .set_expression_attribute_names(ex.names())
            .set_expression_attribute_values(ex.values())
            .return_values(ReturnValue::AllNew)
            .send()
            .await
            .map_err(|e| map_sdk(op, e))?;
        let item = out.attributes.ok_or_else(|| StoreError::Unavailable {
            message: format!("{op} returned no item"),
            source: None,
        })?;
        task_from_item(&item)
    }

    /// Records that some task was filed under `minute`, so listings walk that far.
    async fn raise_max_due_minute(&self, minute: i64) {
        if minute <= self.max_due_minute.load(Ordering::Relaxed) {
            return;
        }
        let r = self
            .ddb()
            .update_item()
            .table_name(&self.names.leases_table)
            .key(LEASE_PK, s(META_PARTITION))
            .key(LEASE_SK, s(META_PARTITION))
            .update_expression("SET #m = :m")
            .condition_expression("attribute_exists(#pk) AND (attribute_not_exists(#m) OR #m < :m)")
            .expression_attribute_names("#m", MAX_DUE_MINUTE)
            .expression_attribute_names("#pk", LEASE_PK)
            .expression_attribute_values(":m", num(minute))
            .send()
            .await;
        match r {
            Ok(_) => {}
            Err(e) => {
                let e = map_sdk("UpdateItem max_due_minute", e);
                if !e.is_conflict() {
                    // Best effort: a listing may then stop early; the task itself is stored.
                    tracing::warn!("cannot record max_due_minute: {e}");
                    return;
                }
            }
        }
        self.max_due_minute.fetch_max(minute, Ordering::Relaxed);
    }

    async fn put_one(self: &AwsStore, new: NewTask, now_ms: i64) -> StoreResult<PutOutcome> {
        let task = Task::from_new(new, self.shard_count, now_ms);
        let item = task_to_item(&task)?;
        let r = self
            .ddb()
            .put_item()
            .table_name(&self.names.tasks_table)
            .set_item(Some(item))
            .condition_expression("attribute_not_exists(#id)")
            .expression_attribute_names("#id", TASK_ID)
            .send()
            .await;
        match r {
            Ok(_) => {
                self.raise_max_due_minute(keys::bucket_minute(task.due_ms, now_ms))
                    .await;
                Ok(PutOutcome::Created(task))
            }
            Err(e) => {
                let e = map_sdk("PutItem", e);
                if !e.is_conflict() {
                    return Err(e);
                }
                match self.get_item(&task.task_id).await? {
                    Some(existing) => Ok(PutOutcome::Existing(existing)),
                    None => Err(StoreError::conflict(format!(
                        "task {} existed and vanished meanwhile",
                        task.task_id
                    ))),
                }
            }
        }
    }

    /// The claim's second step when its conditions held but the attempts are spent: `DEAD`.
    async fn claim_exhausted(&self, p: &TaskClaim) -> StoreResult<ClaimOutcome> {
        let task = self.require(&p.task_id).await?;
        let claimable = task.status.is_claimable()
            || (task.status == TaskStatus::Running
                && task.running_until.is_some_and(|t| t < p.now_ms));
        if task.version != p.version || !claimable {
            return Err(StoreError::conflict(format!(
                "task {} is {} at version {}, the message carries version {}",
                task.task_id, task.status, task.version, p.version
            )));
        }
        let mut ex = Ex::default();
        let update = format!(
            "SET {st} = {dead}, {le} = {err}, {up} = {now}, {exp} = {expv}, {sp} = {spv} \
             REMOVE {ru}, {db}",
            st = ex.n(STATUS),
            dead = ex.v("dead", s("DEAD")),
            sp = ex.n(STATUS_PART),
            spv = ex.v("sp", s(status_part(TaskStatus::Dead, task.shard))),
            le = ex.n(LAST_ERROR),
            err = ex.v(
                "err",
                s(format!(
                    "attempts spent: {} of {} claimed without a result (worker lost)",
                    task.attempt, task.max_attempts
                ))
            ),
            up = ex.n(UPDATED_MS),
            now = ex.v("now", num(p.now_ms)),
            exp = ex.n(EXPIRES_AT),
            expv = ex.v("exp", self.expires_at(p.now_ms)),
            ru = ex.n(RUNNING_UNTIL),
            db = ex.n(DUE_BUCKET),
        );
        let condition = format!(
            "{v} = {vv} AND {st} = {stv} AND {at} = {atv}",
            v = ex.n(VERSION),
            vv = ex.v("v", num(task.version)),
            st = ex.n(STATUS),
            stv = ex.v("was", s(task.status.as_str())),
            at = ex.n(ATTEMPT),
            atv = ex.v("at", num(task.attempt)),
        );
        let dead = self
            .update("UpdateItem exhausted", &p.task_id, update, condition, ex)
            .await?;
        Ok(ClaimOutcome::Exhausted(dead))
    }

    /// Reads a task and checks an operator transition; returns it and the next status.
    async fn operator_check(
        &self,
        task_id: &str,
        expected_version: Option<u64>,
        transition: Transition,
    ) -> StoreResult<(Task, TaskStatus)> {
        let task = self.require(task_id).await?;
        if let Some(v) = expected_version
            && v != task.version
        {
            return Err(StoreError::conflict(format!(
                "task {task_id} is at version {}, not {v}",
                task.version
            )));
        }
        let next = task
            .status
            .apply(transition)
            .map_err(|e| StoreError::conflict(format!("task {task_id}: {e}")))?;
        Ok((task, next))
    }

    /// The condition that the task is still as read: `version = :rv AND status = :rs`.
    fn as_read(ex: &mut Ex, task: &Task) -> String {
        format!(
            "{v} = {rv} AND {st} = {rs}",
            v = ex.n(VERSION),
            rv = ex.v("rv", num(task.version)),
            st = ex.n(STATUS),
            rs = ex.v("rs", s(task.status.as_str())),
        )
    }

    /// Counts one bucket of `by_due` (`Select = COUNT`, paged: DynamoDB counts up to 1 MB
    /// of index per page).
    async fn count_bucket(&self, bucket: String) -> StoreResult<u64> {
        let mut ex = Ex::default();
        let cond = format!("{} = {}", ex.n(DUE_BUCKET), ex.v("b", s(bucket)));
        let mut n = 0u64;
        let mut start = None;
        loop {
            let out = self
                .ddb()
                .query()
                .table_name(&self.names.tasks_table)
                .index_name(GSI_BY_DUE)
                .key_condition_expression(&cond)
                .set_expression_attribute_names(ex.names())
                .set_expression_attribute_values(ex.values())
                .select(aws_sdk_dynamodb::types::Select::Count)
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(|e| map_sdk("Query by_due count", e))?;
            n += out.count.max(0) as u64;
            start = out.last_evaluated_key.filter(|k| !k.is_empty());
            if start.is_none() {
                return Ok(n);
            }
        }
    }

    /// Queries one bucket of `by_due` for `after < due_key <= upper` (both optional).
    async fn query_bucket(
        &self,
        bucket: &str,
        after: Option<&str>,
        upper: Option<&str>,
        limit: usize,
    ) -> StoreResult<Vec<Item>> {
        let mut ex = Ex::default();
        let b = ex.n(DUE_BUCKET);
        let bv = ex.v("b", s(bucket));
        // The successor of `after`: keys are compared as UTF-8 bytes, and "\0" sorts first.
        let lo = after.map(|a| format!("{a}\u{0}"));
        let mut k = || ex.n(DUE_KEY);
        let k = if lo.is_some() || upper.is_some() {
            k()
        } else {
            String::new()
        };
        let cond = match (lo, upper) {
            (Some(lo), Some(up)) => format!(
                "{b} = {bv} AND {k} BETWEEN {lo} AND {up}",
                lo = ex.v("lo", s(lo)),
                up = ex.v("up", s(up))
            ),
            (Some(lo), None) => format!("{b} = {bv} AND {k} >= {lo}", lo = ex.v("lo", s(lo))),
            (None, Some(up)) => format!("{b} = {bv} AND {k} <= {up}", up = ex.v("up", s(up))),
            (None, None) => format!("{b} = {bv}"),
        };
        let mut items = Vec::new();
        let mut start = None;
        loop {
            let out = self
                .ddb()
                .query()
                .table_name(&self.names.tasks_table)
                .index_name(GSI_BY_DUE)
                .key_condition_expression(&cond)
                .set_expression_attribute_names(ex.names())
                .set_expression_attribute_values(ex.values())
                .set_exclusive_start_key(start)
                .limit((limit - items.len()).min(1_000) as i32)
                .send()
                .await
                .map_err(|e| map_sdk("Query by_due", e))?;
            items.extend(out.items.unwrap_or_default());
            start = out.last_evaluated_key.filter(|k| !k.is_empty());
            if items.len() >= limit || start.is_none() {
                break;
            }
        }
        Ok(items)
    }

    /// Reads tasks by id (strongly consistent), in no particular order.
    pub(super) async fn batch_get(&self, ids: Vec<String>) -> StoreResult<Vec<Task>> {
        let mut tasks = Vec::new();
        for chunk in ids.chunks(100) {
            let keys: Vec<Item> = chunk
                .iter()
                .map(|id| Item::from([(TASK_ID.to_owned(), s(id))]))
                .collect();
            let mut pending = Some(
                KeysAndAttributes::builder()
                    .set_keys(Some(keys))
                    .consistent_read(true)
                    .build()
                    .map_err(build_err)?,
            );
            while let Some(req) = pending.take() {
                let out = self
                    .ddb()
                    .batch_get_item()
                    .request_items(&self.names.tasks_table, req)
                    .send()
                    .await
                    .map_err(|e| map_sdk("BatchGetItem", e))?;
                if let Some(mut got) = out.responses {
                    for item in got.remove(&self.names.tasks_table).unwrap_or_default() {
                        tasks.push(task_from_item(&item)?);
                    }
                }
                pending = out
                    .unprocessed_keys
                    .and_then(|mut u| u.remove(&self.names.tasks_table))
                    .filter(|k| !k.keys.is_empty());
            }
        }
        Ok(tasks)
    }
}

pub(super) fn due_entry(item: &Item) -> StoreResult<DueEntry> {
    Ok(DueEntry {
        task_id: get_s(item, TASK_ID)?.to_owned(),
        version: get_n(item, VERSION)?,
        shard: get_n(item, SHARD)?,
        due_ms: get_n(item, DUE_MS)?,
        due_key: get_s(item, DUE_KEY)?.to_owned(),
    })
}

/// Parses a list cursor `"{minute}|{due_key}"`, or a bare `due_key` (its due minute).
pub(super) fn parse_cursor(c: &str) -> StoreResult<(i64, String)> {
    let bad = || StoreError::invalid("after_key", "not a cursor of this store");
    if let Some((m, k)) = c.split_once('|') {
        return Ok((m.parse().map_err(|_| bad())?, k.to_owned()));
    }
    let (ms, _) = c.split_once('#').ok_or_else(bad)?;
    let ms: i64 = ms.parse().map_err(|_| bad())?;
    Ok((keys::minute_of(ms), c.to_owned()))
}

#[async_trait]
impl TaskStore for AwsStore {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            multi_process: true,
            list_statuses: LISTABLE_STATUSES,
            status_counts: false,
        }
    }

    fn shard_count(&self) -> u32 {
        self.shard_count
    }

    fn created_minute(&self) -> i64 {
        self.created_minute
    }

    async fn task_put(&self, p: TaskPut) -> StoreResult<PutOutcome> {
        self.put_one(p.task, p.now_ms).await
    }

    async fn task_put_batch(&self, p: TaskPutBatch) -> StoreResult<Vec<PutOutcome>> {
        // One conditional PutItem per task: BatchWriteItem cannot be conditional, and the
        // write units are the same (a batch write bills each item).
        let me = self.clone_handle();
        let now = p.now_ms;
        fan_out(p.tasks, self.opts.concurrency, move |t| {
            let me = me.clone();
            async move { me.put_one(t, now).await }
        })
        .await
        .into_iter()
        .collect()
    }

    async fn task_get(&self, task_id: &str) -> StoreResult<Option<Task>> {
        self.get_item(task_id).await
    }

    async fn due_query(&self, q: DueQuery) -> StoreResult<Vec<DueEntry>> {
        if q.limit == 0 {
            return Ok(Vec::new());
        }
        let bucket = keys::due_bucket(q.shard, q.minute);
        let upper = keys::due_key_upper(q.now_ms);
        self.query_bucket(&bucket, q.after_key.as_deref(), Some(&upper), q.limit)
            .await?
            .iter()
            .map(due_entry)
            .collect()
    }

    async fn task_mark_dispatched(&self, p: TaskMarkDispatched) -> StoreResult<usize> {
        let me = self.clone_handle();
        let now = p.now_ms;
        let results = fan_out(p.tasks, self.opts.concurrency, move |(id, version)| {
            let me = me.clone();
            async move {
                let mut ex = Ex::default();
                let update = format!(
                    "SET {st} = {dis}, {up} = {now} REMOVE {db}",
                    st = ex.n(STATUS),
                    dis = ex.v("dis", s(DIS)),
                    up = ex.n(UPDATED_MS),
                    now = ex.v("now", num(now)),
                    db = ex.n(DUE_BUCKET),
                );
                let condition = format!(
                    "attribute_exists({db}) AND {st} IN ({sch}, {rw}) AND {v} = {vv}",
                    db = ex.n(DUE_BUCKET),
                    st = ex.n(STATUS),
                    sch = ex.v("sch", s(SCH)),
                    rw = ex.v("rw", s(RW)),
                    v = ex.n(VERSION),
                    vv = ex.v("v", num(version)),
                );
                let r = me
                    .ddb()
                    .update_item()
                    .table_name(&me.names.tasks_table)
                    .key(TASK_ID, s(id))
                    .update_expression(update)
                    .condition_expression(condition)
                    .set_expression_attribute_names(ex.names())
                    .set_expression_attribute_values(ex.values())
                    .send()
                    .await;
                match r {
                    Ok(_) => Ok(true),
                    Err(e) => {
                        let e = map_sdk("UpdateItem mark", e);
                        if e.is_conflict() { Ok(false) } else { Err(e) }
                    }
                }
            }
        })
        .await;
        let mut held = 0;
        for r in results {
            held += usize::from(r?);
        }
        Ok(held)
    }

    async fn task_claim(&self, p: TaskClaim) -> StoreResult<ClaimOutcome> {
        let mut ex = Ex::default();
        let update = format!(
            "SET {st} = {run}, {ru} = {until}, {at} = {at} + {one}, {up} = {now} REMOVE {db}",
            st = ex.n(STATUS),
            run = ex.v("run", s(RUN)),
            ru = ex.n(RUNNING_UNTIL),
            until = ex.v("until", num(p.now_ms + p.run_timeout_ms)),
            at = ex.n(ATTEMPT),
            one = ex.v("one", num(1)),
            up = ex.n(UPDATED_MS),
            now = ex.v("now", num(p.now_ms)),
            db = ex.n(DUE_BUCKET),
        );
        let condition = format!(
            "{v} = {vv} AND ({st} IN ({sch}, {dis}, {rw}) OR ({st} = {run} AND {ru} < {now})) \
             AND {at} < {max}",
            v = ex.n(VERSION),
            vv = ex.v("v", num(p.version)),
            st = ex.n(STATUS),
            sch = ex.v("sch", s(SCH)),
            dis = ex.v("dis", s(DIS)),
            rw = ex.v("rw", s(RW)),
            run = ex.v("run", s(RUN)),
            ru = ex.n(RUNNING_UNTIL),
            now = ex.v("now", num(p.now_ms)),
            at = ex.n(ATTEMPT),
            max = ex.n(MAX_ATTEMPTS),
        );
        match self
            .update("UpdateItem claim", &p.task_id, update, condition, ex)
            .await
        {
            Ok(t) => Ok(ClaimOutcome::Claimed(t)),
            Err(e) if e.is_conflict() => self.claim_exhausted(&p).await,
            Err(e) => Err(e),
        }
    }

    async fn task_complete(&self, p: TaskComplete) -> StoreResult<Task> {
        let mut ex = Ex::default();
        let mut sets = vec![format!(
            "{} = {}",
            ex.n(UPDATED_MS),
            ex.v("now", num(p.now_ms))
        )];
        let mut removes = vec![ex.n(RUNNING_UNTIL)];
        let status = match &p.outcome {
            Completion::Succeeded => {
                sets.push(format!(
                    "{} = {}",
                    ex.n(EXPIRES_AT),
                    ex.v("exp", self.expires_at(p.now_ms))
                ));
                removes.push(ex.n(DUE_BUCKET));
                TaskStatus::Succeeded
            }
            Completion::Retry {
                next_due_ms,
                error,
                reindex,
            } => {
                sets.push(format!(
                    "{} = {}",
                    ex.n(DUE_MS),
                    ex.v("due", num(next_due_ms))
                ));
                sets.push(format!(
                    "{} = {}",
                    ex.n(DUE_KEY),
                    ex.v("dk", s(keys::due_key(*next_due_ms, &p.task_id)))
                ));
                sets.push(format!("{} = {}", ex.n(LAST_ERROR), ex.v("err", s(error))));
                if *reindex {
                    let shard = keys::shard_of(&p.task_id, self.shard_count);
                    let minute = keys::bucket_minute(*next_due_ms, p.now_ms);
                    sets.push(format!(
                        "{} = {}",
                        ex.n(DUE_BUCKET),
                        ex.v("b", s(keys::due_bucket(shard, minute)))
                    ));
                } else {
                    removes.push(ex.n(DUE_BUCKET));
                }
                TaskStatus::RetryWait
            }
            Completion::Dead { error } => {
                sets.push(format!("{} = {}", ex.n(LAST_ERROR), ex.v("err", s(error))));
                // Into `by_status`: only a task's unhappy end writes that index.
                let shard = keys::shard_of(&p.task_id, self.shard_count);
                sets.push(format!(
                    "{} = {}",
                    ex.n(STATUS_PART),
                    ex.v("sp", s(status_part(TaskStatus::Dead, shard)))
                ));
                sets.push(format!(
                    "{} = {}",
                    ex.n(EXPIRES_AT),
                    ex.v("exp", self.expires_at(p.now_ms))
                ));
                removes.push(ex.n(DUE_BUCKET));
                TaskStatus::Dead
            }
        };
        sets.push(format!(
            "{} = {}",
            ex.n(STATUS),
            ex.v("new", s(status.as_str()))
        ));
        let update = format!("SET {} REMOVE {}", sets.join(", "), removes.join(", "));
        let condition = format!(
            "{st} = {run} AND {at} = {atv} AND {v} = {vv}",
            st = ex.n(STATUS),
            run = ex.v("run", s(RUN)),
            at = ex.n(ATTEMPT),
            atv = ex.v("at", num(p.attempt)),
            v = ex.n(VERSION),
            vv = ex.v("v", num(p.version)),
        );
        let reindexed = matches!(p.outcome, Completion::Retry { reindex: true, .. });
        match self
            .update("UpdateItem complete", &p.task_id, update, condition, ex)
            .await
        {
            Ok(t) => {
                if reindexed {
                    self.raise_max_due_minute(keys::bucket_minute(t.due_ms, p.now_ms))
                        .await;
                }
                Ok(t)
            }
            Err(e) if e.is_conflict() => {
                let task = self.require(&p.task_id).await?;
                Err(StoreError::conflict(format!(
                    "task {} is {} at version {} attempt {}; the run held version {} attempt {}",
                    task.task_id, task.status, task.version, task.attempt, p.version, p.attempt
                )))
            }
            Err(e) => Err(e),
        }
    }

    async fn task_cancel(&self, p: TaskCancel) -> StoreResult<Task> {
        let (task, next) = self
            .operator_check(&p.task_id, p.expected_version, Transition::Cancel)
            .await?;
        let mut ex = Ex::default();
        let condition = Self::as_read(&mut ex, &task);
        let update = format!(
            "SET {st} = {next}, {v} = {nv}, {up} = {now}, {exp} = {expv}, {sp} = {spv} \
             REMOVE {db}, {ru}",
            st = ex.n(STATUS),
            next = ex.v("next", s(next.as_str())),
            sp = ex.n(STATUS_PART),
            spv = ex.v("sp", s(status_part(next, task.shard))),
            v = ex.n(VERSION),
            nv = ex.v("nv", num(task.version + 1)),
            up = ex.n(UPDATED_MS),
            now = ex.v("now", num(p.now_ms)),
            exp = ex.n(EXPIRES_AT),
            expv = ex.v("exp", self.expires_at(p.now_ms)),
            db = ex.n(DUE_BUCKET),
            ru = ex.n(RUNNING_UNTIL),
        );
        self.update("UpdateItem cancel", &p.task_id, update, condition, ex)
            .await
    }

    async fn task_reschedule(&self, p: TaskReschedule) -> StoreResult<Task> {
        let (task, next) = self
            .operator_check(&p.task_id, p.expected_version, Transition::Reschedule)
            .await?;
        let minute = keys::bucket_minute(p.due_ms, p.now_ms);
        let mut ex = Ex::default();
        let condition = Self::as_read(&mut ex, &task);
        let mut update = format!(
            "SET {st} = {next}, {v} = {nv}, {due} = {duev}, {dk} = {dkv}, {db} = {dbv}, {up} = {now}",
            st = ex.n(STATUS),
            next = ex.v("next", s(next.as_str())),
            v = ex.n(VERSION),
            nv = ex.v("nv", num(task.version + 1)),
            due = ex.n(DUE_MS),
            duev = ex.v("due", num(p.due_ms)),
            dk = ex.n(DUE_KEY),
            dkv = ex.v("dk", s(keys::due_key(p.due_ms, &p.task_id))),
            db = ex.n(DUE_BUCKET),
            dbv = ex.v("db", s(keys::due_bucket(task.shard, minute))),
            up = ex.n(UPDATED_MS),
            now = ex.v("now", num(p.now_ms)),
        );
        if p.reset_attempts {
            update += &format!(", {} = {}", ex.n(ATTEMPT), ex.v("zero", num(0)));
        }
        // Out of `by_status` if it was there (a replay of a DEAD or CANCELLED task).
        update += &format!(
            " REMOVE {}, {}, {}",
            ex.n(RUNNING_UNTIL),
            ex.n(EXPIRES_AT),
            ex.n(STATUS_PART)
        );
        if p.reset_attempts {
            update += &format!(", {}", ex.n(LAST_ERROR));
        }
        let t = self
            .update("UpdateItem reschedule", &p.task_id, update, condition, ex)
            .await?;
        self.raise_max_due_minute(minute).await;
        Ok(t)
    }

    async fn task_update(&self, p: TaskUpdate) -> StoreResult<Task> {
        let task = self.require(&p.task_id).await?;
        if let Some(v) = p.expected_version
            && v != task.version
        {
            return Err(StoreError::conflict(format!(
                "task {} is at version {}, not {v}",
                p.task_id, task.version
            )));
        }
        if task.status == TaskStatus::Running {
            return Err(StoreError::conflict(format!(
                "task {} is RUNNING: a running task cannot be edited",
                p.task_id
            )));
        }
        let mut ex = Ex::default();
        // Conditional on the status and version read: the decision below about the index
        // holds only for that state.
        let condition = Self::as_read(&mut ex, &task);
        let mut sets = vec![
            format!("{} = {}", ex.n(VERSION), ex.v("nv", num(task.version + 1))),
            format!("{} = {}", ex.n(UPDATED_MS), ex.v("now", num(p.now_ms))),
        ];
        if let Some(payload) = &p.payload {
            sets.push(format!(
                "{} = {}",
                ex.n(PAYLOAD),
                ex.v("pl", to_json(payload, "payload")?)
            ));
        }
        if let Some(m) = p.max_attempts {
            sets.push(format!("{} = {}", ex.n(MAX_ATTEMPTS), ex.v("ma", num(m))));
        }
        if let Some(b) = &p.backoff {
            sets.push(format!(
                "{} = {}",
                ex.n(BACKOFF),
                ex.v("bo", to_json(b, "backoff")?)
            ));
        }
        // A task out of the index whose only live copy is the message now made stale goes
        // back in at its due time, so it is sent again at the new version (invariant 1).
        let waiting = matches!(
            task.status,
            TaskStatus::Scheduled | TaskStatus::Dispatched | TaskStatus::RetryWait
        );
        let refile = waiting && task.due_bucket.is_none();
        let minute = keys::bucket_minute(task.due_ms, p.now_ms);
        if refile {
            sets.push(format!(
                "{} = {}",
                ex.n(DUE_BUCKET),
                ex.v("db", s(keys::due_bucket(task.shard, minute)))
            ));
        }
        if task.status == TaskStatus::Dispatched {
            sets.push(format!(
                "{} = {}",
                ex.n(STATUS),
                ex.v("next", s(TaskStatus::Scheduled.as_str()))
            ));
        }
        let update = format!("SET {}", sets.join(", "));
        let t = self
            .update("UpdateItem edit", &p.task_id, update, condition, ex)
            .await?;
        if refile {
            self.raise_max_due_minute(minute).await;
        }
        Ok(t)
    }

    async fn due_backlog(&self, p: DueBacklog) -> StoreResult<Vec<u64>> {
        let mut jobs = Vec::with_capacity(p.minutes as usize * self.shard_count as usize);
        for i in 0..p.minutes {
            for shard in 0..self.shard_count {
                jobs.push((i as usize, shard));
            }
        }
        let me = self.clone_handle();
        let from = p.from_minute;
        let counted = fan_out(jobs, self.opts.concurrency, move |(i, shard)| {
            let me = me.clone();
            async move {
                let bucket = keys::due_bucket(shard, from + i as i64);
                me.count_bucket(bucket).await.map(|n| (i, n))
            }
        })
        .await;
        let mut counts = vec![0u64; p.minutes as usize];
        for r in counted {
            let (i, n) = r?;
            counts[i] += n;
        }
        Ok(counts)
    }

    async fn task_list(&self, p: TaskList) -> StoreResult<Page<Task>> {
        match p.filter.status {
            None | Some(TaskStatus::Scheduled | TaskStatus::RetryWait) => {
                self.list_waiting(p).await
            }
            Some(status @ (TaskStatus::Dead | TaskStatus::Cancelled)) => {
                self.list_finished(status, p).await
            }
            Some(status) => Err(StoreError::invalid(
                "status",
                format!(
                    "the aws backend cannot list {status} tasks: no index holds them (listing them would Scan the table)"
                ),
            )),
        }
    }
}

impl AwsStore {
    /// A handle that can move into spawned requests.
    pub(super) fn clone_handle(&self) -> std::sync::Arc<AwsStore> {
        std::sync::Arc::new(self.clone())
    }

    /// Reads the listed tasks and returns those still waiting, in the listing's order.
    pub(super) async fn ordered(
        &self,
        ids: Vec<String>,
        order: &[(i64, DueEntry)],
    ) -> StoreResult<Vec<Task>> {
        let mut by_id: std::collections::HashMap<String, Task> = self
            .batch_get(ids)
            .await?
            .into_iter()
            .map(|t| (t.task_id.clone(), t))
            .collect();
        Ok(order
            .iter()
            .filter_map(|(_, e)| by_id.remove(&e.task_id))
            .filter(|t| t.due_bucket.is_some())
            .collect())
    }
}
