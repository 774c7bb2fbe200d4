//! The tables and indexes, and the `meta` row that fixes the shard count for the store's life.

use punctual_core::StoreError;
use punctual_core::keys;
use rusqlite::{Connection, OptionalExtension, params};

use super::db::DbResult;

/// Version of the layout below, kept in `meta`. A file with another version is refused rather
/// than misread.
pub(crate) const SCHEMA_VERSION: i64 = 1;

/// The layout. Every statement is idempotent: several processes may open a new file at once,
/// and each runs this inside `BEGIN IMMEDIATE`, so the first creates and the rest find.
///
/// `tasks` is a rowid table: rows carry the payload (up to 256 KiB), and SQLite's own advice
/// is to cluster by a text key (`WITHOUT ROWID`) only for rows far smaller than a page.
/// Inserts append to the rowid b-tree; ULID ids almost append to the primary-key index too;
/// the hot, small columns come first so reading a status never walks the payload's overflow
/// pages.
pub(crate) const DDL: &str = r#"
CREATE TABLE IF NOT EXISTS meta (
    id             INTEGER PRIMARY KEY CHECK (id = 1),
    schema_version INTEGER NOT NULL,
    shard_count    INTEGER NOT NULL,
    created_ms     INTEGER NOT NULL,
    created_minute INTEGER NOT NULL
);

CREATE TABLE IF NOT EXISTS tasks (
    task_id       TEXT    NOT NULL PRIMARY KEY,
    shard         INTEGER NOT NULL,
    due_ms        INTEGER NOT NULL,
    due_key       TEXT    NOT NULL,          -- "{due_ms:013}#{task_id}"
    due_bucket    TEXT,                      -- "{shard:05}#{minute:010}" while waiting, else NULL
    status        TEXT    NOT NULL,
    version       INTEGER NOT NULL,
    attempt       INTEGER NOT NULL,
    max_attempts  INTEGER NOT NULL,
    running_until INTEGER,
    created_ms    INTEGER NOT NULL,
    updated_ms    INTEGER NOT NULL,
    backoff       TEXT    NOT NULL,          -- JSON
    target        TEXT    NOT NULL,          -- JSON
    last_error    TEXT,
    payload       TEXT    NOT NULL           -- JSON, last: may spill to overflow pages
);

-- The sparse due index (DynamoDB's GSI `by_due`): only rows with a bucket are in it, so it
-- holds what waits to be dispatched, not what is stored, and a poll
-- `due_bucket = ? AND due_key < ?` reads only what is due in one shard-minute. `version`
-- rides along so the poll never touches the table (a covering index, the GSI's small
-- projection); it costs no extra index write, since version only changes together with
-- due_bucket or while the row is out of the index.
CREATE INDEX IF NOT EXISTS tasks_by_due ON tasks (due_bucket, due_key, version)
    WHERE due_bucket IS NOT NULL;

-- The same rows in due order across shards, for `task_list_pending` (the console's list of
-- what is waiting). The cheapest correct way to page them in `due_key` order: merging the
-- shards' buckets would be out of order for past-due tasks (they wait in the *current*
-- minute's bucket, behind later-due ones) and sorting means scanning. Its cost is ingest:
-- every create, dispatch, claim and reschedule writes one more entry (~50 bytes) at a random
-- place in a second b-tree, so a batch dirties (and writes to the WAL) about one more page
-- per task. Measured with 1,000-task batches of random due times over a day, 300 k rows,
-- debug build: 30 k tasks/s without this index, 18 k with it (-40 %). It indexes `due_key`
-- alone and only the waiting rows to keep that as small as it can be.
CREATE INDEX IF NOT EXISTS tasks_pending ON tasks (due_key)
    WHERE due_bucket IS NOT NULL;

-- The tasks waiting for a retry and the finished ones an operator acts on (DEAD,
-- CANCELLED), by status in due order, for `task_list`'s status filter; `SCHEDULED` rows are
-- listed through `tasks_pending`. The same statuses as the aws backend's sparse `by_status`
-- index, for the same reason: a task created, fired and succeeded never writes an entry here
-- (neither creation, the mark, the claim nor the success), so the common path pays nothing.
-- Indexing every status but `SCHEDULED` was measured first (docs/BENCHMARKS.md): the mark,
-- claim and completion each moved an entry, about a fifth of the store's firing throughput.
-- A query uses it only if its WHERE repeats the index's WHERE word for word (SQLite proves
-- a partial index usable by matching terms): `settled_statuses!` in tasks.rs.
CREATE INDEX IF NOT EXISTS tasks_by_status ON tasks (status, due_key)
    WHERE status IN ('RETRY_WAIT', 'DEAD', 'CANCELLED');

-- Tasks per status, kept by the triggers below in the same transaction as the change, so
-- `task_counts` reads seven rows instead of counting ten million. A file made before this
-- table existed is backfilled once when opened (`init`). Cost: one more single-row update
-- per insert and two per status change, each a trigger program run: measured, up to a third
-- of ingest when every task is due at once and a quarter of firing (docs/BENCHMARKS.md).
CREATE TABLE IF NOT EXISTS task_counts (
    status TEXT    NOT NULL PRIMARY KEY,
    n      INTEGER NOT NULL
) WITHOUT ROWID;

INSERT OR IGNORE INTO task_counts (status, n) VALUES
    ('SCHEDULED', 0), ('DISPATCHED', 0), ('RUNNING', 0), ('RETRY_WAIT', 0),
    ('SUCCEEDED', 0), ('DEAD', 0), ('CANCELLED', 0);

CREATE TRIGGER IF NOT EXISTS task_counts_insert AFTER INSERT ON tasks BEGIN
    UPDATE task_counts SET n = n + 1 WHERE status = NEW.status;
END;

CREATE TRIGGER IF NOT EXISTS task_counts_update AFTER UPDATE OF status ON tasks
    WHEN OLD.status <> NEW.status BEGIN
    UPDATE task_counts SET n = n - 1 WHERE status = OLD.status;
    UPDATE task_counts SET n = n + 1 WHERE status = NEW.status;
END;

CREATE TRIGGER IF NOT EXISTS task_counts_delete AFTER DELETE ON tasks BEGIN
    UPDATE task_counts SET n = n - 1 WHERE status = OLD.status;
END;

-- The ready queue. AUTOINCREMENT: ids are never reused, so a receipt "{id}:{receive_count}"
-- of a deleted message can never match a later one.
CREATE TABLE IF NOT EXISTS queue (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id       TEXT    NOT NULL,
    version       INTEGER NOT NULL,
    shard         INTEGER NOT NULL,
    due_ms        INTEGER NOT NULL,
    sent_ms       INTEGER NOT NULL,
    visible_at_ms INTEGER NOT NULL,
    receive_count INTEGER NOT NULL DEFAULT 0,
    receipt       TEXT                        -- the current delivery's receipt, for operators
);

-- A receive reads the visible rows, oldest first, from the front of this index.
CREATE INDEX IF NOT EXISTS queue_by_visible ON queue (visible_at_ms, id);

CREATE TABLE IF NOT EXISTS dlq (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id       TEXT    NOT NULL,
    version       INTEGER NOT NULL,
    shard         INTEGER NOT NULL,
    due_ms        INTEGER NOT NULL,
    reason        TEXT    NOT NULL,
    dead_ms       INTEGER NOT NULL,
    receive_count INTEGER NOT NULL
);

CREATE TABLE IF NOT EXISTS leases (
    shard            INTEGER PRIMARY KEY,
    owner            TEXT    NOT NULL,
    expires_ms       INTEGER NOT NULL,
    epoch            INTEGER NOT NULL,
    watermark_minute INTEGER NOT NULL
);

CREATE TABLE IF NOT EXISTS members (
    owner      TEXT    PRIMARY KEY,
    expires_ms INTEGER NOT NULL
);
"#;

/// What `meta` holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Meta {
    pub(crate) shard_count: u32,
    pub(crate) created_minute: i64,
}

/// Creates the layout if missing and returns the store's meta, recording `shard_count` and
/// `now_ms` if the file is new. Runs inside the caller's write transaction.
pub(crate) fn init(conn: &Connection, shard_count: u32, now_ms: i64) -> DbResult<Meta> {
    let had_counts: bool = conn.query_row(
        "SELECT count(*) > 0 FROM sqlite_master WHERE type = 'table' AND name = 'task_counts'",
        [],
        |r| r.get(0),
    )?;
    conn.execute_batch(DDL)?;
    if !had_counts {
        backfill_counts(conn)?;
    }
    conn.execute(
        "INSERT INTO meta (id, schema_version, shard_count, created_ms, created_minute)
         VALUES (1, ?1, ?2, ?3, ?4) ON CONFLICT (id) DO NOTHING",
        params![SCHEMA_VERSION, shard_count, now_ms, keys::minute_of(now_ms)],
    )?;
    let row: Option<(i64, u32, i64)> = conn
        .query_row(
            "SELECT schema_version, shard_count, created_minute FROM meta WHERE id = 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .optional()?;
    let Some((version, shard_count, created_minute)) = row else {
        return Err(super::db::unavailable("the meta row is missing").into());
    };
    if version != SCHEMA_VERSION {
        return Err(StoreError::invalid(
            "path",
            format!(
                "the store file has schema version {version}; this build reads {SCHEMA_VERSION}"
            ),
        )
        .into());
    }
    Ok(Meta {
        shard_count,
        created_minute,
    })
}

/// Fills `task_counts` from the tasks already stored: once, when a file made before the
/// counters existed is opened (a new file has no tasks, so this costs nothing there). From
/// then on the triggers keep the counts; this is the only full count of the table.
fn backfill_counts(conn: &Connection) -> DbResult<()> {
    let counted: Vec<(String, i64)> = conn
        .prepare("SELECT status, count(*) FROM tasks GROUP BY status")?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    let mut set = conn.prepare("UPDATE task_counts SET n = ?2 WHERE status = ?1")?;
    for (status, n) in counted {
        set.execute(params![status, n])?;
    }
    Ok(())
}
