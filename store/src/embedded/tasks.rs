//! [`TaskStore`] over the `tasks` table and its partial due index.

use async_trait::async_trait;
use punctual_core::error::StoreResult;
use punctual_core::keys;
use punctual_core::store::{
    Capabilities, ClaimOutcome, Completion, DueBacklog, DueEntry, DueQuery, LIST_INDEXED_STATUSES,
    Page, PutOutcome, StatusCounts, TaskCancel, TaskClaim, TaskComplete, TaskList,
    TaskMarkDispatched, TaskPut, TaskPutBatch, TaskReschedule, TaskUpdate,
};
use punctual_core::task::{NewTask, Task, TaskStatus, Transition};
use punctual_core::{StoreError, TaskStore};
use rusqlite::types::Type;
use rusqlite::{Connection, OptionalExtension, Row, params};

use super::EmbeddedStore;
use super::db::{DbError, DbResult};

/// Claims or completions per batch call worth making: each is a single-row write of
/// microseconds, so a few hundred keep one write job (and the write lock) short while paying
/// the per-job cost (a channel trip, a savepoint) once for all of them.
const WRITE_BATCH_MAX: usize = 256;

/// The columns [`task_from_row`] reads, in its order (a macro so SQL strings are
/// `concat!`ed at compile time, not formatted on every call).
macro_rules! task_columns {
    () => {
        "task_id, shard, due_ms, status, version, attempt, max_attempts, backoff, target, \
         payload, due_bucket, running_until, last_error, created_ms, updated_ms"
    };
}

/// The poll: one shard-minute of the due index, what is due, after the cursor, in order.
pub(super) const DUE_QUERY_SQL: &str = "SELECT due_key, version FROM tasks
     WHERE due_bucket = ?1 AND due_key < ?2 AND due_key > ?3
     ORDER BY due_key LIMIT ?4";

/// The claim's conditional write (DESIGN.md's condition, plus `attempt < max_attempts`).
pub(super) const CLAIM_SQL: &str = concat!(
    "UPDATE tasks SET status = 'RUNNING', running_until = ?3 + ?4, attempt = attempt + 1,
             due_bucket = NULL, updated_ms = ?3
         WHERE task_id = ?1 AND version = ?2
           AND (status IN ('SCHEDULED', 'DISPATCHED', 'RETRY_WAIT')
                OR (status = 'RUNNING' AND running_until < ?3))
           AND attempt < max_attempts
         RETURNING ",
    task_columns!()
);

fn conversion_error(
    col: usize,
    e: impl Into<Box<dyn std::error::Error + Send + Sync>>,
) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(col, Type::Text, e.into())
}

fn json_column<T: serde::de::DeserializeOwned>(row: &Row<'_>, col: usize) -> rusqlite::Result<T> {
    let text = row.get_ref(col)?.as_str()?;
    serde_json::from_str(text).map_err(|e| conversion_error(col, e))
}

fn task_from_row(row: &Row<'_>) -> rusqlite::Result<Task> {
    let status = row.get_ref(3)?.as_str()?;
    let status = TaskStatus::parse(status)
        .ok_or_else(|| conversion_error(3, format!("unknown status {status:?}")))?;
    Ok(Task {
        task_id: row.get(0)?,
        shard: row.get(1)?,
        due_ms: row.get(2)?,
        status,
        version: row.get::<_, i64>(4)? as u64,
        attempt: row.get(5)?,
        max_attempts: row.get(6)?,
        backoff: json_column(row, 7)?,
        target: json_column(row, 8)?,
        payload: json_column(row, 9)?,
        due_bucket: row.get(10)?,
        running_until: row.get(11)?,
        last_error: row.get(12)?,
        created_ms: row.get(13)?,
        updated_ms: row.get(14)?,
    })
}

fn to_json(v: &impl serde::Serialize, field: &str) -> DbResult<String> {
    serde_json::to_string(v).map_err(|e| StoreError::invalid(field, e.to_string()).into())
}

fn get_task(conn: &Connection, task_id: &str) -> DbResult<Option<Task>> {
    let sql = concat!("SELECT ", task_columns!(), " FROM tasks WHERE task_id = ?1");
    Ok(conn
        .prepare_cached(sql)?
        .query_row([task_id], task_from_row)
        .optional()?)
}

/// Inserts one task unless its id exists; the existing task otherwise.
fn put_one(conn: &Connection, new: NewTask, shard_count: u32, now_ms: i64) -> DbResult<PutOutcome> {
    let task = Task::from_new(new, shard_count, now_ms);
    let inserted = conn
        .prepare_cached(
            "INSERT INTO tasks (task_id, shard, due_ms, due_key, due_bucket, status, version,
                 attempt, max_attempts, running_until, created_ms, updated_ms, backoff, target,
                 last_error, payload)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)
             ON CONFLICT (task_id) DO NOTHING",
        )?
        .execute(params![
            task.task_id,
            task.shard,
            task.due_ms,
            task.due_key(),
            task.due_bucket,
            task.status.as_str(),
            task.version as i64,
            task.attempt,
            task.max_attempts,
            task.running_until,
            task.created_ms,
            task.updated_ms,
            to_json(&task.backoff, "backoff")?,
            to_json(&task.target, "target")?,
            task.last_error,
            to_json(&task.payload, "payload")?,
        ])?;
    if inserted == 1 {
        return Ok(PutOutcome::Created(task));
    }
    match get_task(conn, &task.task_id)? {
        Some(existing) => Ok(PutOutcome::Existing(existing)),
        None => Err(super::db::unavailable("insert ignored but no row found").into()),
    }
}

/// The row that made a conditional write fail: `NotFound` if there is none.
fn require(conn: &Connection, task_id: &str) -> DbResult<Task> {
    get_task(conn, task_id)?.ok_or_else(|| StoreError::NotFound(format!("task {task_id}")).into())
}

fn claim(conn: &Connection, p: &TaskClaim) -> DbResult<ClaimOutcome> {
    let claimed = conn
        .prepare_cached(CLAIM_SQL)?
        .query_row(
            params![p.task_id, p.version as i64, p.now_ms, p.run_timeout_ms],
            task_from_row,
        )
        .optional()?;
    if let Some(task) = claimed {
        return Ok(ClaimOutcome::Claimed(task));
    }
    // No row changed: tell a missing task, a stale or duplicate message, and a task whose
    // workers kept dying apart. Still inside the write transaction, so this read is what the
    // update saw.
    let task = require(conn, &p.task_id)?;
    let claimable = task.status.is_claimable()
        || (task.status == TaskStatus::Running && task.running_until.is_some_and(|t| t < p.now_ms));
    if task.version != p.version || !claimable {
        return Err(StoreError::conflict(format!(
            "task {} is {} at version {}, the message carries version {}",
            task.task_id, task.status, task.version, p.version
        ))
        .into());
    }
    // The claim's conditions hold but every attempt was claimed without a result written:
    // the workers died mid-run. End it here rather than loop.
    let error = format!(
        "attempts spent: {} of {} claimed without a result (worker lost)",
        task.attempt, task.max_attempts
    );
    let sql = concat!(
        "UPDATE tasks SET status = 'DEAD', last_error = ?3, running_until = NULL,
             due_bucket = NULL, updated_ms = ?4
         WHERE task_id = ?1 AND version = ?2
         RETURNING ",
        task_columns!()
    );
    let dead = conn.prepare_cached(sql)?.query_row(
        params![p.task_id, p.version as i64, error, p.now_ms],
        task_from_row,
    )?;
    Ok(ClaimOutcome::Exhausted(dead))
}

/// The columns a completion writes: status, next due time, its due key, bucket, error.
type CompletionColumns<'a> = (
    TaskStatus,
    Option<i64>,
    Option<String>,
    Option<String>,
    Option<&'a str>,
);

fn completion_columns(p: &TaskComplete, shard_count: u32) -> CompletionColumns<'_> {
    // Retry moves the due time (the next attempt) and, for a long backoff, puts the task
    // back in the due index. The shard is a function of the id and the store's fixed shard
    // count, so the keys are computed here and the write stays one statement.
    let (status, next_due, bucket, error) = match &p.outcome {
        Completion::Succeeded => (TaskStatus::Succeeded, None, None, None),
        Completion::Retry {
            next_due_ms,
            error,
            reindex,
        } => {
            let shard = keys::shard_of(&p.task_id, shard_count);
            let bucket = reindex.then(|| EmbeddedStore::bucket(shard, *next_due_ms, p.now_ms));
            (
                TaskStatus::RetryWait,
                Some(*next_due_ms),
                bucket,
                Some(error.as_str()),
            )
        }
        Completion::Dead { error } => (TaskStatus::Dead, None, None, Some(error.as_str())),
    };
    let due_key = next_due.map(|due| keys::due_key(due, &p.task_id));
    (status, next_due, due_key, bucket, error)
}

/// The completion's conditional write (see [`TaskComplete`]).
macro_rules! complete_sql {
    () => {
        "UPDATE tasks SET status = ?4,
             due_ms = coalesce(?5, due_ms),
             due_key = coalesce(?6, due_key),
             due_bucket = ?7,
             last_error = coalesce(?8, last_error),
             running_until = NULL,
             updated_ms = ?9
         WHERE task_id = ?1 AND status = 'RUNNING' AND attempt = ?2 AND version = ?3"
    };
}

/// Why a completion's condition failed: `NotFound`, or `Conflict` naming what the run held.
fn complete_refused(conn: &Connection, p: &TaskComplete) -> DbError {
    match require(conn, &p.task_id) {
        Ok(task) => StoreError::conflict(format!(
            "task {} is {} at version {} attempt {}; the run held version {} attempt {}",
            task.task_id, task.status, task.version, task.attempt, p.version, p.attempt
        ))
        .into(),
        Err(e) => e,
    }
}

/// [`complete`] without reading the row back: the batch form, whose callers only need to
/// know that the write held. Skipping `RETURNING` skips decoding the payload and target.
fn complete_quiet(conn: &Connection, p: &TaskComplete, shard_count: u32) -> DbResult<()> {
    let (status, next_due, due_key, bucket, error) = completion_columns(p, shard_count);
    let changed = conn.prepare_cached(complete_sql!())?.execute(params![
        p.task_id,
        p.attempt,
        p.version as i64,
        status.as_str(),
        next_due,
        due_key,
        bucket,
        error,
        p.now_ms
    ])?;
    if changed == 1 {
        return Ok(());
    }
    Err(complete_refused(conn, p))
}

/// Runs `one` on each item inside the caller's job: a refusal (a store error) answers its
/// item alone; an SQL error fails the whole job, so its transaction (or savepoint) rolls
/// back and nothing of the batch is written.
fn each<P, T>(
    items: &[P],
    mut one: impl FnMut(&P) -> DbResult<T>,
) -> DbResult<Vec<StoreResult<T>>> {
    items
        .iter()
        .map(|p| match one(p) {
            Ok(t) => Ok(Ok(t)),
            Err(DbError::Store(e)) => Ok(Err(e)),
            Err(e @ DbError::Sql(_)) => Err(e),
        })
        .collect()
}

fn complete(conn: &Connection, p: &TaskComplete, shard_count: u32) -> DbResult<Task> {
    let (status, next_due, due_key, bucket, error) = completion_columns(p, shard_count);
    let sql = concat!(complete_sql!(), " RETURNING ", task_columns!());
    let done = conn
        .prepare_cached(sql)?
        .query_row(
            params![
                p.task_id,
                p.attempt,
                p.version as i64,
                status.as_str(),
                next_due,
                due_key,
                bucket,
                error,
                p.now_ms
            ],
            task_from_row,
        )
        .optional()?;
    match done {
        Some(task) => Ok(task),
        None => Err(complete_refused(conn, p)),
    }
}

/// Reads the row, checks the expected version and the status machine, and returns the task
/// and its next status; the caller then writes at the read version inside the same
/// transaction.
fn operator_check(
    conn: &Connection,
    task_id: &str,
    expected_version: Option<u64>,
    transition: Transition,
) -> DbResult<(Task, TaskStatus)> {
    let task = require(conn, task_id)?;
    if let Some(v) = expected_version
        && v != task.version
    {
        return Err(StoreError::conflict(format!(
            "task {task_id} is at version {}, not {v}",
            task.version
        ))
        .into());
    }
    let next = task
        .status
        .apply(transition)
        .map_err(|e| StoreError::conflict(format!("task {task_id}: {e}")))?;
    Ok((task, next))
}

fn cancel(conn: &Connection, p: &TaskCancel) -> DbResult<Task> {
    let (task, next) = operator_check(conn, &p.task_id, p.expected_version, Transition::Cancel)?;
    let sql = concat!(
        "UPDATE tasks SET status = ?3, version = version + 1, due_bucket = NULL,
             running_until = NULL, updated_ms = ?4
         WHERE task_id = ?1 AND version = ?2
         RETURNING ",
        task_columns!()
    );
    Ok(conn.prepare_cached(sql)?.query_row(
        params![p.task_id, task.version as i64, next.as_str(), p.now_ms],
        task_from_row,
    )?)
}

fn reschedule(conn: &Connection, p: &TaskReschedule) -> DbResult<Task> {
    let (task, next) =
        operator_check(conn, &p.task_id, p.expected_version, Transition::Reschedule)?;
    let bucket = EmbeddedStore::bucket(task.shard, p.due_ms, p.now_ms);
    let sql = concat!(
        "UPDATE tasks SET status = ?3, version = version + 1, due_ms = ?4, due_key = ?5,
             due_bucket = ?6, running_until = NULL, updated_ms = ?7,
             attempt = CASE WHEN ?8 THEN 0 ELSE attempt END,
             last_error = CASE WHEN ?8 THEN NULL ELSE last_error END
         WHERE task_id = ?1 AND version = ?2
         RETURNING ",
        task_columns!()
    );
    Ok(conn.prepare_cached(sql)?.query_row(
        params![
            p.task_id,
            task.version as i64,
            next.as_str(),
            p.due_ms,
            keys::due_key(p.due_ms, &p.task_id),
            bucket,
            p.now_ms,
            p.reset_attempts
        ],
        task_from_row,
    )?)
}

/// The edit's one conditional write (see [`TaskUpdate`]). Every `SET` expression reads the
/// row as it was, so `status` in the `CASE`s is the old status. A task out of the index whose
/// only live copy is a now-stale message (`DISPATCHED`, or `RETRY_WAIT` riding a visibility
/// timeout) is filed again under `keys::due_bucket(shard, keys::bucket_minute(due_ms, now))`,
/// spelled in SQL (`?7` is now's minute); terminal tasks and tasks already in the index keep
/// their bucket.
pub(super) const UPDATE_SQL: &str = concat!(
    "UPDATE tasks SET version = version + 1,
         payload = coalesce(?3, payload),
         max_attempts = coalesce(?4, max_attempts),
         backoff = coalesce(?5, backoff),
         status = CASE WHEN status = 'DISPATCHED' THEN 'SCHEDULED' ELSE status END,
         due_bucket = CASE
             WHEN due_bucket IS NULL AND status IN ('SCHEDULED', 'DISPATCHED', 'RETRY_WAIT')
             THEN printf('%05d#%010d', shard, max(due_ms / 60000, ?7))
             ELSE due_bucket END,
         updated_ms = ?6
     WHERE task_id = ?1 AND status <> 'RUNNING' AND (?2 IS NULL OR version = ?2)
     RETURNING ",
    task_columns!()
);

fn update(conn: &Connection, p: &TaskUpdate) -> DbResult<Task> {
    let payload = p
        .payload
        .as_ref()
        .map(|v| to_json(v, "payload"))
        .transpose()?;
    let backoff = p
        .backoff
        .as_ref()
        .map(|v| to_json(v, "backoff"))
        .transpose()?;
    let done = conn
        .prepare_cached(UPDATE_SQL)?
        .query_row(
            params![
                p.task_id,
                p.expected_version.map(|v| v as i64),
                payload,
                p.max_attempts,
                backoff,
                p.now_ms,
                keys::minute_of(p.now_ms)
            ],
            task_from_row,
        )
        .optional()?;
    if let Some(task) = done {
        return Ok(task);
    }
    // Refused: say why (inside the write job, so this is the row the update saw).
    let task = require(conn, &p.task_id)?;
    Err(StoreError::conflict(format!(
        "task {} is {} at version {}{}",
        task.task_id,
        task.status,
        task.version,
        match p.expected_version {
            Some(v) if v != task.version => format!(", not {v}"),
            _ => ": a running task cannot be edited".to_owned(),
        }
    ))
    .into())
}

/// The backlog of one shard: its buckets in a minute range, counted on the partial index
/// (`due_bucket >= ?` implies `due_bucket IS NOT NULL`, so the planner may use it; the count
/// walks only the entries of those buckets, never the table).
pub(super) const BACKLOG_SQL: &str = "SELECT due_bucket, count(*) FROM tasks
     WHERE due_bucket >= ?1 AND due_bucket <= ?2
     GROUP BY due_bucket";

fn due_backlog(conn: &Connection, p: &DueBacklog, shard_count: u32) -> DbResult<Vec<u64>> {
    let mut counts = vec![0u64; p.minutes as usize];
    if p.minutes == 0 {
        return Ok(counts);
    }
    let last = p.from_minute + i64::from(p.minutes) - 1;
    let mut stmt = conn.prepare_cached(BACKLOG_SQL)?;
    for shard in 0..shard_count {
        let rows = stmt.query_map(
            params![
                keys::due_bucket(shard, p.from_minute),
                keys::due_bucket(shard, last)
            ],
            |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)),
        )?;
        for row in rows {
            let (bucket, n) = row?;
            let minute = bucket
                .split_once('#')
                .and_then(|(_, m)| m.parse::<i64>().ok())
                .ok_or_else(|| conversion_error(0, format!("malformed due_bucket {bucket:?}")))?;
            if let Some(slot) = counts.get_mut((minute - p.from_minute) as usize) {
                *slot += n as u64;
            }
        }
    }
    Ok(counts)
}

/// The WHERE of the partial index `tasks_by_status` (schema.rs), which queries must repeat.
macro_rules! settled_statuses {
    () => {
        "status IN ('RETRY_WAIT', 'DEAD', 'CANCELLED')"
    };
}

/// A `due_key` above every real one (they start with 13 digits).
const DUE_KEY_MAX: &str = "~";

/// The filtered listing's SQL and its parameters. The index decides the order and what is
/// read: `tasks_pending` for the waiting tasks (no status, or `SCHEDULED`, which is always
/// waiting), `tasks_by_status` for any other status. The due window becomes the index range
/// (`due_key` starts with the due time). The id prefix is checked on `due_key` (it ends with
/// the id), so it filters index entries without reading their rows; only the target kind
/// reads the row (its JSON). A selective prefix or kind therefore walks the status's range
/// in due order until a page is found: bounded by the due window when one is given.
pub(super) fn list_sql(p: &TaskList) -> (String, Vec<rusqlite::types::Value>) {
    use rusqlite::types::Value;
    let f = &p.filter;
    let mut sql = String::from(concat!("SELECT ", task_columns!(), " FROM tasks WHERE "));
    let mut args: Vec<Value> = Vec::new();
    match f.status {
        None => sql += "due_bucket IS NOT NULL",
        Some(TaskStatus::Scheduled) => sql += "due_bucket IS NOT NULL AND status = 'SCHEDULED'",
        Some(s) => {
            // Repeats the partial index's WHERE word for word: SQLite uses a partial index
            // only when the query's terms contain the index's.
            sql += concat!(settled_statuses!(), " AND status = ?");
            args.push(Value::Text(s.as_str().to_owned()));
        }
    }
    sql += " AND due_key > ? AND due_key >= ? AND due_key < ?";
    args.push(Value::Text(p.after_key.clone().unwrap_or_default()));
    args.push(Value::Text(
        f.due_from_ms
            .map(|ms| format!("{ms:013}"))
            .unwrap_or_default(),
    ));
    args.push(Value::Text(
        f.due_to_ms
            .map(|ms| format!("{ms:013}"))
            .unwrap_or_else(|| DUE_KEY_MAX.to_owned()),
    ));
    if let Some(prefix) = &f.id_prefix {
        sql += " AND substr(due_key, 15, ?) = ?";
        args.push(Value::Integer(prefix.chars().count() as i64));
        args.push(Value::Text(prefix.clone()));
    }
    if let Some(kind) = f.target_kind {
        sql += " AND json_extract(target, '$.type') = ?";
        args.push(Value::Text(kind.as_str().to_owned()));
    }
    sql += " ORDER BY due_key LIMIT ?";
    args.push(Value::Integer(p.limit as i64 + 1));
    (sql, args)
}

/// Splits a `due_key` back into due time and id: the covering index holds no other column.
fn parse_due_key(due_key: &str) -> rusqlite::Result<(i64, &str)> {
    let bad = || conversion_error(0, format!("malformed due_key {due_key:?}"));
    let (ms, id) = due_key.split_once('#').ok_or_else(bad)?;
    Ok((ms.parse().map_err(|_| bad())?, id))
}

#[async_trait]
impl TaskStore for EmbeddedStore {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            multi_process: true,
            list_statuses: LIST_INDEXED_STATUSES,
            status_counts: true,
        }
    }

    fn shard_count(&self) -> u32 {
        self.shard_count
    }

    fn created_minute(&self) -> i64 {
        self.created_minute
    }

    async fn task_put(&self, p: TaskPut) -> StoreResult<PutOutcome> {
        let shards = self.shard_count;
        self.writer
            .run(move |conn| put_one(conn, p.task, shards, p.now_ms))
            .await
    }

    async fn task_put_batch(&self, p: TaskPutBatch) -> StoreResult<Vec<PutOutcome>> {
        if p.tasks.is_empty() {
            return Ok(Vec::new());
        }
        let shards = self.shard_count;
        // One transaction: one commit for the whole batch instead of one per task.
        self.writer
            .run_batch(move |conn| {
                p.tasks
                    .into_iter()
                    .map(|t| put_one(conn, t, shards, p.now_ms))
                    .collect()
            })
            .await
    }

    async fn task_get(&self, task_id: &str) -> StoreResult<Option<Task>> {
        let id = task_id.to_owned();
        self.readers.run(move |conn| get_task(conn, &id)).await
    }

    async fn due_query(&self, q: DueQuery) -> StoreResult<Vec<DueEntry>> {
        if q.limit == 0 {
            return Ok(Vec::new());
        }
        let bucket = keys::due_bucket(q.shard, q.minute);
        self.readers
            .run(move |conn| {
                // Covered by tasks_by_due: due_bucket = ? implies due_bucket IS NOT NULL, so
                // the planner may use the partial index, and it holds every column read here.
                let mut stmt = conn.prepare_cached(DUE_QUERY_SQL)?;
                let rows = stmt.query_map(
                    params![
                        bucket,
                        keys::due_key_upper(q.now_ms),
                        q.after_key.as_deref().unwrap_or(""),
                        q.limit as i64
                    ],
                    |r| {
                        let due_key: String = r.get(0)?;
                        let (due_ms, id) = parse_due_key(&due_key)?;
                        Ok(DueEntry {
                            task_id: id.to_owned(),
                            version: r.get::<_, i64>(1)? as u64,
                            shard: q.shard,
                            due_ms,
                            due_key,
                        })
                    },
                )?;
                Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
            })
            .await
    }

    async fn task_mark_dispatched(&self, p: TaskMarkDispatched) -> StoreResult<usize> {
        if p.tasks.is_empty() {
            return Ok(0);
        }
        self.writer
            .run_batch(move |conn| {
                let mut stmt = conn.prepare_cached(
                    "UPDATE tasks SET status = 'DISPATCHED', due_bucket = NULL, updated_ms = ?1
                     WHERE task_id = ?2 AND version = ?3 AND due_bucket IS NOT NULL
                       AND status IN ('SCHEDULED', 'RETRY_WAIT')",
                )?;
                let mut held = 0;
                for (id, version) in &p.tasks {
                    held += stmt.execute(params![p.now_ms, id, *version as i64])?;
                }
                Ok(held)
            })
            .await
    }

    async fn task_claim(&self, p: TaskClaim) -> StoreResult<ClaimOutcome> {
        self.writer.run(move |conn| claim(conn, &p)).await
    }

    async fn task_complete(&self, p: TaskComplete) -> StoreResult<Task> {
        let shards = self.shard_count;
        self.writer
            .run(move |conn| complete(conn, &p, shards))
            .await
    }

    fn task_write_batch_max(&self) -> usize {
        WRITE_BATCH_MAX
    }

    async fn task_claim_many(
        &self,
        ps: Vec<TaskClaim>,
    ) -> StoreResult<Vec<StoreResult<ClaimOutcome>>> {
        if ps.is_empty() {
            return Ok(Vec::new());
        }
        // One job for the batch: one trip through the writer thread and, inside a group, one
        // savepoint instead of one per claim.
        self.writer
            .run(move |conn| each(&ps, |p| claim(conn, p)))
            .await
    }

    async fn task_complete_many(&self, ps: Vec<TaskComplete>) -> StoreResult<Vec<StoreResult<()>>> {
        if ps.is_empty() {
            return Ok(Vec::new());
        }
        let shards = self.shard_count;
        self.writer
            .run(move |conn| each(&ps, |p| complete_quiet(conn, p, shards)))
            .await
    }

    async fn task_cancel(&self, p: TaskCancel) -> StoreResult<Task> {
        self.writer.run(move |conn| cancel(conn, &p)).await
    }

    async fn task_reschedule(&self, p: TaskReschedule) -> StoreResult<Task> {
        self.writer.run(move |conn| reschedule(conn, &p)).await
    }

    async fn task_update(&self, p: TaskUpdate) -> StoreResult<Task> {
        self.writer.run(move |conn| update(conn, &p)).await
    }

    async fn due_backlog(&self, p: DueBacklog) -> StoreResult<Vec<u64>> {
        let shards = self.shard_count;
        self.readers
            .run(move |conn| due_backlog(conn, &p, shards))
            .await
    }

    async fn task_list(&self, p: TaskList) -> StoreResult<Page<Task>> {
        if let Some(status) = p.filter.status
            && !LIST_INDEXED_STATUSES.contains(&status)
        {
            return Err(StoreError::invalid(
                "status",
                format!(
                    "the embedded store cannot list {status} tasks: no index holds them (listing them would scan the table)"
                ),
            ));
        }
        if p.limit == 0 {
            return Ok(Page {
                items: Vec::new(),
                next: None,
            });
        }
        self.readers
            .run(move |conn| {
                let (sql, args) = list_sql(&p);
                let mut stmt = conn.prepare_cached(&sql)?;
                let mut items = stmt
                    .query_map(rusqlite::params_from_iter(args), task_from_row)?
                    .collect::<rusqlite::Result<Vec<_>>>()?;
                let next = if items.len() > p.limit {
                    items.truncate(p.limit);
                    items.last().map(Task::due_key)
                } else {
                    None
                };
                Ok(Page { items, next })
            })
            .await
    }

    async fn task_counts(&self) -> StoreResult<StatusCounts> {
        self.readers
            .run(|conn| {
                let mut counts = StatusCounts::default();
                let mut stmt = conn.prepare_cached("SELECT status, n FROM task_counts")?;
                let rows =
                    stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))?;
                for row in rows {
                    let (status, n) = row?;
                    if let Some(s) = TaskStatus::parse(&status) {
                        *counts.slot(s) = n.max(0) as u64;
                    }
                }
                Ok(counts)
            })
            .await
    }
}
