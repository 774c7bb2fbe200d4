//! The embedded backend: tasks, due index, ready queue, DLQ and leases in one SQLite file.
//!
//! ```text
//!            API / poller / worker (async)
//!                 │ writes                         │ reads
//!                 ▼                                ▼
//!   ┌──────── writer thread ─────────┐   read pool: ≤ 4 query_only connections,
//!   │ one connection; takes the small│   each read on tokio's blocking pool
//!   │ jobs queued, runs them in one  │             │
//!   │ BEGIN IMMEDIATE … COMMIT with  │             │
//!   │ a SAVEPOINT each; batches alone│             │
//!   └───────────────┬────────────────┘             │
//!                   ▼                              ▼
//!        punctual.db  (WAL: readers never wait for the writer)
//!        ├─ meta    shard_count, created_minute, schema version (fixed at creation)
//!        ├─ tasks   one row per task, and two partial indexes over the waiting rows:
//!        │            tasks_by_due  (due_bucket, due_key, version) WHERE due_bucket IS NOT NULL
//!        │                          = the sparse due index (DynamoDB's GSI by_due)
//!        │            tasks_pending (due_key) WHERE due_bucket IS NOT NULL
//!        │                          = what is waiting, in due order across shards
//!        ├─ queue   ready queue: visible_at_ms, receive_count, receipt
//!        ├─ dlq     dead letters
//!        └─ leases  one row per shard: owner, expires_ms, epoch, watermark_minute
//! ```
//!
//! **The protocol as SQL.** Every state change of DESIGN.md's protocol is one conditional
//! statement in a write transaction: a poll is a range of the partial index
//! (`due_bucket = ? AND due_key < due_key_upper(now)`), so it costs what is due, not what is
//! stored; marking dispatched is `UPDATE … WHERE due_bucket IS NOT NULL AND status IN
//! ('SCHEDULED','RETRY_WAIT') AND version = ?`; a claim is one `UPDATE … WHERE version = ? AND
//! (status IN (…) OR (status = 'RUNNING' AND running_until < ?)) RETURNING …`, and setting
//! `due_bucket = NULL` in it removes the index entry in the same transaction. A statement that
//! changes no row is the failed condition; the store then reads the row, inside the same
//! transaction, to tell `NotFound` from `Conflict` (or, for a claim whose conditions held but
//! whose attempts are spent, to end the task `DEAD` and answer `Exhausted`).
//!
//! **Queue with SQS semantics.** A receive takes the visible rows (`visible_at_ms <= now`),
//! oldest first, raises `receive_count`, hides them until `now + visibility` and hands out the
//! receipt `"{id}:{receive_count}"`. A delete or a visibility change must quote the current
//! delivery's receipt: a stale receipt of an earlier delivery matches nothing and is ignored,
//! so a slow worker cannot ack a message already redelivered to another (SQS documents the
//! same: only the latest receipt handle is sure to work). A dead-letter with a stale receipt
//! still records the letter (the worker's verdict on the task stands) and leaves the
//! redelivered copy, which its claim will drop. A row that would pass `max_receive_count`
//! moves to the DLQ ([`MAX_RECEIVE_REASON`]) instead of being delivered — the redrive
//! backstop. Long polling waits on a [`Notify`] woken by sends in this
//! process, re-checks every 50 ms for sends of other processes, and re-queries with the
//! caller's `now_ms` moved on by the real time waited.
//!
//! **Why a writer thread and not `Mutex<Connection>` + `spawn_blocking`.** SQLite has one
//! writer per file whatever we do; the question is what callers waiting for it cost. Behind a
//! mutex each would run its own transaction — its own lock, its own WAL append, its own
//! commit. Queued to one thread they become one group commit (see `db::Writer`): under a
//! load of many workers claiming and completing, a hot page is written once per group
//! instead of once per call, and a caller costs a channel send instead of a thread hand-off.
//! On a current-thread runtime (tests; the only kind whose clock can be paused) callers wait
//! on the blocking pool, so a paused clock does not jump while a write runs. Reads go to the
//! blocking pool with a small pool of read connections.
//!
//! **Several processes** may open one file (a standby poller, the failover tests). WAL and
//! `busy_timeout` make them share it; `BEGIN IMMEDIATE` makes each write transaction take the
//! lock before it reads, so read-then-write jobs (acquire a lease, cancel a task) never race
//! another process's writer.
//!
//! **Sizing** (the target: 10 M tasks in ≤ 1 GiB RSS, ≥ 100 k tasks/s ingest in batches,
//! ≥ 50 k fires/s). Memory is the page caches (128 MiB writer, 8 MiB per reader) and the
//! memory maps (128 MiB per connection, clean pages the kernel may drop); the rest of the
//! file lives in the OS page cache, outside RSS. Ingest is bound by random inserts into the
//! two partial indexes — each task dirties about one leaf page of each, written once to the
//! WAL and once more by the checkpoint — not by fsync (`synchronous = NORMAL` syncs only at
//! checkpoints), so a batch is one transaction and the writer gets the big cache. A fire is a
//! handful of single-row conditional writes, grouped across callers. Each pragma's reason is
//! at its constant in `db.rs`; the cost of the second index is at its definition in
//! `schema.rs`.

mod db;
mod leases;
mod queue;
mod schema;
mod tasks;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use punctual_core::error::StoreResult;
use punctual_core::keys::MAX_SHARDS;
use punctual_core::{StoreError, keys};
use rusqlite::{Connection, TransactionBehavior};
use tokio::sync::Notify;

use db::{ReadPool, Role, Writer, map_sqlite};
use schema::Meta;

/// How long opening retries while another process sets the same file up.
const OPEN_RETRY_FOR: Duration = Duration::from_secs(10);
pub use queue::MAX_RECEIVE_REASON;

/// Default number of shards of a new store.
pub const DEFAULT_SHARD_COUNT: u32 = 16;

/// Default receives before a message goes to the DLQ.
pub const DEFAULT_MAX_RECEIVE_COUNT: u32 = 10;

/// How to open an [`EmbeddedStore`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EmbeddedOptions {
    /// Shards of a new store, 1 to 99,999. Default [`DEFAULT_SHARD_COUNT`]. Recorded at
    /// creation: reopening a store keeps its recorded count whatever this says.
    pub shard_count: u32,
    /// Receives after which a message moves to the DLQ instead (SQS's `maxReceiveCount`),
    /// at least 1. Default [`DEFAULT_MAX_RECEIVE_COUNT`]. Per process, not recorded.
    pub max_receive_count: u32,
    /// Now, epoch milliseconds: a new store records it as its creation time, whose minute is
    /// the first watermark of every shard. Default: the system clock when the options are made.
    pub now_ms: i64,
}

impl Default for EmbeddedOptions {
    fn default() -> Self {
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        Self {
            shard_count: DEFAULT_SHARD_COUNT,
            max_receive_count: DEFAULT_MAX_RECEIVE_COUNT,
            now_ms,
        }
    }
}

impl EmbeddedOptions {
    /// Checks the options, naming the field at fault.
    pub fn validate(&self) -> StoreResult<()> {
        if !(1..=MAX_SHARDS).contains(&self.shard_count) {
            return Err(StoreError::invalid(
                "shard_count",
                format!("must be between 1 and {MAX_SHARDS}"),
            ));
        }
        if self.max_receive_count == 0 {
            return Err(StoreError::invalid(
                "max_receive_count",
                "must be at least 1",
            ));
        }
        if self.now_ms < 0 {
            return Err(StoreError::invalid("now_ms", "must not be before 1970"));
        }
        Ok(())
    }
}

/// The embedded backend: one SQLite file playing [`TaskStore`](punctual_core::TaskStore),
/// [`ReadyQueue`](punctual_core::ReadyQueue) and [`LeaseStore`](punctual_core::LeaseStore).
///
/// Cheap to share (`Arc`); dropping the last handle finishes queued writes and closes the file.
pub struct EmbeddedStore {
    path: PathBuf,
    writer: Writer,
    readers: Arc<ReadPool>,
    shard_count: u32,
    created_minute: i64,
    max_receive_count: u32,
    /// Woken by `queue_send` so long polls in this process return at once.
    queue_notify: Notify,
}

impl std::fmt::Debug for EmbeddedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedStore")
            .field("path", &self.path)
            .field("shard_count", &self.shard_count)
            .field("created_minute", &self.created_minute)
            .field("max_receive_count", &self.max_receive_count)
            .finish_non_exhaustive()
    }
}

impl EmbeddedStore {
    /// Opens the store at `path`, creating the file and its tables if missing.
    ///
    /// A new store records `opts.shard_count` and `opts.now_ms`; an existing one keeps what it
    /// recorded. Blocking (it opens the file and may wait for another process's lock): call it
    /// at startup or from a blocking thread.
    pub fn open(path: &Path, opts: EmbeddedOptions) -> StoreResult<Arc<EmbeddedStore>> {
        opts.validate()?;
        // Two processes opening a new file at once (`punctual serve` and `punctual poller`
        // started together) race on switching it to WAL and creating the layout; SQLite
        // answers some of those steps SQLITE_BUSY at once, without its busy handler. Retry
        // the whole opening on busy for a bounded time: the other process's setup is short.
        let started = std::time::Instant::now();
        let (conn, meta) = loop {
            match Self::open_writer(path, &opts) {
                Err(e) if db::is_busy(&e) && started.elapsed() < OPEN_RETRY_FOR => {
                    tracing::debug!(error = %e, "store busy while opening; retrying");
                    std::thread::sleep(Duration::from_millis(20));
                }
                other => break other?,
            }
        };
        if meta.shard_count != opts.shard_count {
            tracing::info!(
                path = %path.display(),
                recorded = meta.shard_count,
                asked = opts.shard_count,
                "keeping the shard count recorded in the store"
            );
        }
        let writer = Writer::start(conn)
            .map_err(|e| StoreError::unavailable("cannot start the writer thread", e))?;
        tracing::debug!(
            path = %path.display(),
            shard_count = meta.shard_count,
            created_minute = meta.created_minute,
            "embedded store open"
        );
        Ok(Arc::new(EmbeddedStore {
            path: path.to_path_buf(),
            writer,
            readers: Arc::new(ReadPool::new(path.to_path_buf())),
            shard_count: meta.shard_count,
            created_minute: meta.created_minute,
            max_receive_count: opts.max_receive_count,
            queue_notify: Notify::new(),
        }))
    }

    /// Opens the writer connection and creates or reads the layout, in one immediate
    /// transaction.
    fn open_writer(path: &Path, opts: &EmbeddedOptions) -> StoreResult<(Connection, Meta)> {
        let mut conn = db::open_connection(path, Role::Writer).map_err(map_sqlite)?;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(map_sqlite)?;
        let meta = schema::init(&tx, opts.shard_count, opts.now_ms)?;
        tx.commit().map_err(map_sqlite)?;
        Ok((conn, meta))
    }

    /// The file this store lives in.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The bucket a task of `shard` due at `due_ms` waits in, decided at `now_ms`.
    fn bucket(shard: u32, due_ms: i64, now_ms: i64) -> String {
        keys::due_bucket(shard, keys::bucket_minute(due_ms, now_ms))
    }
}

#[cfg(test)]
mod tests;
