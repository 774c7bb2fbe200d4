//! Connections: the pragmas, the writer thread with its group commit, the read pool, and the
//! translation of SQLite errors into [`StoreError`].

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use punctual_core::StoreError;
use punctual_core::error::StoreResult;
use rusqlite::config::DbConfig;
use rusqlite::{Connection, ErrorCode, OpenFlags};
use tokio::sync::{Semaphore, oneshot};

/// How long a connection waits for another *process* to release the write lock before the
/// call fails `Unavailable`. Within one process the writer thread serializes writes, so this
/// only covers other processes on the same file (failover tests run two); their write
/// transactions are group commits of a few milliseconds, a 1,000-task batch tens of them.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Page cache of the writer connection, KiB (`PRAGMA cache_size` takes negative KiB).
/// Ingest is bound by random inserts into the due index: each insert lands on a leaf page
/// chosen by `(due_bucket, due_key)`, so the index's hot leaves must stay cached or every
/// insert becomes a read. 128 MiB holds the interior pages and the hot leaves of the due
/// indexes of 10 M tasks (~1 GiB of index in all; the leaves of the minutes being filled are
/// what is hot). It is an upper bound, grown only as pages are touched.
const WRITER_CACHE_KIB: i64 = 128 * 1024;

/// Page cache of each read connection, KiB. Readers serve point reads and short index
/// ranges, mostly through the memory map, so a small cache each is enough.
const READER_CACHE_KIB: i64 = 8 * 1024;

/// `PRAGMA mmap_size`, bytes, per connection. Reads of the mapped prefix of the file skip a
/// `pread` and a copy into the page cache. Mapped pages count towards RSS but are clean file
/// pages the kernel may drop; with one writer and [`READERS`] readers the worst case is
/// 5 × 128 MiB, which with the caches above stays under the 1 GiB budget at 10 M tasks.
const MMAP_BYTES: i64 = 128 * 1024 * 1024;

/// `PRAGMA wal_autocheckpoint`, pages. A checkpoint writes every page in the WAL back to the
/// file once, however many commits wrote it, and ingest with spread due times dirties a
/// random leaf of each due index per task: the longer the WAL between checkpoints, the more
/// of those writes coalesce. Measured (`punctual bench --ingest-only --window 60s`, 300 k
/// tasks, release, 2 cores): 10,000 pages (40 MiB) 18–20 k tasks/s, 50,000 pages (200 MiB)
/// 24–27 k tasks/s; the checkpoint's share of the writer's time fell from ~22 %. The WAL is
/// truncated back to [`JOURNAL_SIZE_LIMIT`] after each checkpoint; its pages are not mapped,
/// so they do not count towards RSS.
const WAL_AUTOCHECKPOINT_PAGES: i64 = 50_000;

/// `PRAGMA journal_size_limit`, bytes: truncate the WAL back to this after a checkpoint so a
/// burst does not leave a huge file behind.
const JOURNAL_SIZE_LIMIT: i64 = 64 * 1024 * 1024;

/// Prepared statements kept per connection. Every statement this backend runs is a fixed
/// string prepared through `prepare_cached`, about 40 in all; parsing and planning them again
/// on every call would cost more than many of the calls themselves.
const STATEMENT_CACHE: usize = 64;

/// Read connections kept open, and the number of reads run at once.
pub(crate) const READERS: usize = 4;

/// Most jobs in one group commit. Bounds how long one process holds the write lock.
const MAX_GROUP: usize = 256;

/// A failure inside a job: SQL, or a decision of the store's own logic.
#[derive(Debug)]
pub(crate) enum DbError {
    /// SQLite failed.
    Sql(rusqlite::Error),
    /// The job decided (conflict, not found, invalid input, corrupt row).
    Store(StoreError),
}

impl From<rusqlite::Error> for DbError {
    fn from(e: rusqlite::Error) -> Self {
        DbError::Sql(e)
    }
}

impl From<StoreError> for DbError {
    fn from(e: StoreError) -> Self {
        DbError::Store(e)
    }
}

impl From<DbError> for StoreError {
    fn from(e: DbError) -> Self {
        match e {
            DbError::Store(e) => e,
            DbError::Sql(e) => map_sqlite(e),
        }
    }
}

/// Result of a job.
pub(crate) type DbResult<T> = Result<T, DbError>;

/// Translates a SQLite error: busy/locked → `Unavailable` (retry), constraint → `Conflict`,
/// anything else → `Unavailable` with the error as source.
pub(crate) fn map_sqlite(e: rusqlite::Error) -> StoreError {
    match e.sqlite_error_code() {
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => {
            StoreError::unavailable("sqlite is busy: another process holds the write lock", e)
        }
        Some(ErrorCode::ConstraintViolation) => StoreError::conflict(format!("sqlite: {e}")),
        _ => StoreError::unavailable(format!("sqlite: {e}"), e),
    }
}

/// Whether `e` is SQLite's busy or locked answer (another connection holds the lock).
pub(crate) fn is_busy(e: &StoreError) -> bool {
    let StoreError::Unavailable {
        source: Some(source),
        ..
    } = e
    else {
        return false;
    };
    source
        .downcast_ref::<rusqlite::Error>()
        .and_then(rusqlite::Error::sqlite_error_code)
        .is_some_and(|c| matches!(c, ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked))
}

/// An `Unavailable` error without a source.
pub(crate) fn unavailable(message: impl Into<String>) -> StoreError {
    StoreError::Unavailable {
        message: message.into(),
        source: None,
    }
}

/// Which role a connection plays; decides its cache and whether it may write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    Writer,
    Reader,
}

/// Opens a connection to `path` with this backend's settings.
pub(crate) fn open_connection(path: &Path, role: Role) -> rusqlite::Result<Connection> {
    let conn = Connection::open_with_flags(
        path,
        // NO_MUTEX: each connection is owned by one thread at a time (the writer thread, or
        // a reader checked out of the pool), so SQLite's own per-connection mutex is waste.
        OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    // First, so every following statement (journal_mode included) waits for other processes
    // instead of failing at once.
    conn.busy_timeout(BUSY_TIMEOUT)?;
    if role == Role::Writer {
        // WAL: readers never block the writer nor the writer readers, so polls and API reads
        // proceed during an ingest; commits append to the log instead of rewriting pages.
        // Persistent in the file, so only the writer sets it.
        let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0))?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(rusqlite::Error::SqliteFailure(
                rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CANTOPEN),
                Some(format!("journal_mode is {mode}, WAL is required")),
            ));
        }
        conn.pragma_update(None, "wal_autocheckpoint", WAL_AUTOCHECKPOINT_PAGES)?;
        conn.pragma_update(None, "journal_size_limit", JOURNAL_SIZE_LIMIT)?;
    }
    // NORMAL in WAL mode: a commit writes the log without fsync; the log is fsynced at each
    // checkpoint. A process crash loses nothing (the log is in the OS's page cache); a power
    // loss may lose the last commits, never corrupts. FULL would put an fsync in every group
    // commit and cap writes at the disk's flush rate.
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    let cache = match role {
        Role::Writer => WRITER_CACHE_KIB,
        Role::Reader => READER_CACHE_KIB,
    };
    conn.pragma_update(None, "cache_size", -cache)?;
    conn.pragma_update(None, "mmap_size", MMAP_BYTES)?;
    // Sorts and the savepoint journals of group commits stay in memory, never in temp files.
    conn.pragma_update(None, "temp_store", "MEMORY")?;
    if role == Role::Reader {
        // A reader that tried to write would take the write lock behind the writer's back.
        conn.pragma_update(None, "query_only", true)?;
    }
    // The query planner stability guarantee: a statement's plan is fixed when it is prepared
    // and never depends on the values bound to it. Without it SQLite re-prepares a cached
    // statement whenever a bound value that its planner looked at changes; the reader's
    // statements (the poll, the visibility probe) were re-parsed and re-planned on most
    // calls, ~8 % of the CPU of the non-writer threads during a fire. Every plan here is the
    // one `tests.rs` checks, which does not depend on values anyway.
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    Ok(conn)
}

/// One unit of work for the writer thread.
trait Job: Send {
    /// Runs inside the group's transaction.
    fn run(&mut self, conn: &Connection);
    /// True if `run` returned an error (its changes are rolled back).
    fn failed(&self) -> bool;
    /// True for a batch that takes a transaction of its own.
    fn solo(&self) -> bool;
    /// Hands the result back, or the group's error if the group did not commit.
    fn finish(self: Box<Self>, group: Result<(), &str>);
}

struct FnJob<T, F> {
    f: Option<F>,
    solo: bool,
    out: Option<StoreResult<T>>,
    reply: oneshot::Sender<StoreResult<T>>,
}

impl<T, F> Job for FnJob<T, F>
where
    T: Send,
    F: FnOnce(&Connection) -> DbResult<T> + Send,
{
    fn run(&mut self, conn: &Connection) {
        let Some(f) = self.f.take() else { return };
        let out = match catch_unwind(AssertUnwindSafe(|| f(conn))) {
            Ok(r) => r.map_err(StoreError::from),
            Err(_) => Err(unavailable("a store job panicked")),
        };
        self.out = Some(out);
    }

    fn failed(&self) -> bool {
        !matches!(self.out, Some(Ok(_)))
    }

    fn solo(&self) -> bool {
        self.solo
    }

    fn finish(self: Box<Self>, group: Result<(), &str>) {
        let result = match group {
            Ok(()) => self
                .out
                .unwrap_or_else(|| Err(unavailable("the write job did not run"))),
            Err(e) => Err(unavailable(format!("write transaction failed: {e}"))),
        };
        // The caller may have gone away (a cancelled future): the write stands regardless,
        // like a request that reached the server.
        let _ = self.reply.send(result);
    }
}

/// The one writer of this process: a thread owning the write connection.
///
/// This stands where a `Mutex<Connection>` and `spawn_blocking` would: one connection writes,
/// callers wait their turn. The difference is what waiting callers become. Callers send jobs;
/// the thread takes every small job waiting (up to [`MAX_GROUP`]) and runs them in one
/// `BEGIN IMMEDIATE` transaction, each inside its own savepoint so a failed job rolls back
/// alone, then commits once and replies to each caller. Under load (many workers claiming and
/// completing at once) this turns dozens of small transactions, each taking the file lock and
/// appending its pages to the WAL, into one — a hot page written once. With no load a group
/// is one job, run without a savepoint, and costs what a plain transaction costs. Batches
/// (`task_put_batch`, `task_mark_dispatched`, `queue_send`) always run alone: they amortize
/// their commit already, and inside a group their savepoint would copy every page they touch.
/// Results are sent only after the commit, so no caller sees a write that could still roll
/// back.
///
/// A dedicated thread rather than the blocking pool: under load it never sleeps, and a
/// caller costs a channel send and a wake-up, no thread hand-off. Two alternatives were
/// measured on the fire path (receive, claim, complete, delete; 32 workers) and were 30–40 %
/// slower: each caller waiting on the blocking pool for this thread, and a LevelDB-style
/// queue where callers on the blocking pool take turns leading a group. Callers on a
/// current-thread runtime still wait on the blocking pool, see [`Writer::run`].
///
/// `BEGIN IMMEDIATE` takes the write lock before the first read, so a job that reads and
/// then writes can never fail with `SQLITE_BUSY_SNAPSHOT` when another process wrote in
/// between (the deadlock of a deferred transaction upgrading its lock).
pub(crate) struct Writer {
    tx: Option<mpsc::Sender<Box<dyn Job>>>,
    thread: Option<JoinHandle<()>>,
}

impl Writer {
    /// Starts the writer thread on `conn`.
    pub(crate) fn start(conn: Connection) -> std::io::Result<Writer> {
        let (tx, rx) = mpsc::channel::<Box<dyn Job>>();
        let thread = std::thread::Builder::new()
            .name("punctual-sqlite-writer".into())
            .spawn(move || writer_loop(conn, rx))?;
        Ok(Writer {
            tx: Some(tx),
            thread: Some(thread),
        })
    }

    /// Runs `f` in a write transaction, grouped with other small jobs, and returns its
    /// result once committed. Wherever the caller runs, the job runs on the writer thread;
    /// only the waiting differs by runtime (see `submit`).
    pub(crate) async fn run<T, F>(&self, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> DbResult<T> + Send + 'static,
    {
        self.submit(f, false).await
    }

    /// Runs `f` in a write transaction of its own: for batches, which touch hundreds of pages
    /// and would pay a savepoint copy of each inside a group.
    pub(crate) async fn run_batch<T, F>(&self, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> DbResult<T> + Send + 'static,
    {
        self.submit(f, true).await
    }

    async fn submit<T, F>(&self, f: F, solo: bool) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> DbResult<T> + Send + 'static,
    {
        let (reply, rx) = oneshot::channel();
        let job = Box::new(FnJob {
            f: Some(f),
            solo,
            out: None,
            reply,
        });
        let stopped = || unavailable("the store's writer thread has stopped");
        let tx = self.tx.as_ref().ok_or_else(stopped)?;
        tx.send(job).map_err(|_| stopped())?;
        // On a current-thread runtime — the only kind whose clock a test can pause — wait on
        // the blocking pool: tokio then knows work is in flight and does not auto-advance a
        // paused clock while the write runs (a `timeout` around a store call would otherwise
        // expire at once). On the multi-thread runtime of a real process, wait on the channel
        // directly: a hand-off to a blocking thread per write would cost more than many
        // writes.
        let current_thread = matches!(
            tokio::runtime::Handle::try_current().map(|h| h.runtime_flavor()),
            Ok(tokio::runtime::RuntimeFlavor::CurrentThread)
        );
        if !current_thread {
            return rx.await.unwrap_or_else(|_| Err(stopped()));
        }
        tokio::task::spawn_blocking(move || rx.blocking_recv().unwrap_or_else(|_| Err(stopped())))
            .await
            .map_err(|e| StoreError::unavailable("write task failed", e))?
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        // Closing the channel ends the loop once queued jobs are done; joining closes the
        // connection (and checkpoints the WAL if it is the file's last) before drop returns.
        drop(self.tx.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn writer_loop(conn: Connection, rx: mpsc::Receiver<Box<dyn Job>>) {
    // A batch taken off the channel while filling a group waits here for the next round.
    let mut carried: Option<Box<dyn Job>> = None;
    loop {
        let first = match carried.take() {
            Some(job) => job,
            None => match rx.recv() {
                Ok(job) => job,
                Err(_) => return,
            },
        };
        let mut jobs = vec![first];
        if !jobs[0].solo() {
            while jobs.len() < MAX_GROUP {
                match rx.try_recv() {
                    Ok(job) if job.solo() => {
                        carried = Some(job);
                        break;
                    }
                    Ok(job) => jobs.push(job),
                    Err(_) => break,
                }
            }
        }
        let group = run_group(&conn, &mut jobs);
        if let Err(e) = &group {
            tracing::warn!(error = %e, jobs = jobs.len(), "sqlite write transaction failed");
        }
        let group = group.as_ref().map(|_| ()).map_err(|e| e.as_str());
        for job in jobs {
            job.finish(group);
        }
    }
}

/// Runs `jobs` in one transaction. `Ok` means committed (a job's own error is then its result,
/// its changes undone); `Err` means nothing was written and every job gets the error.
fn run_group(conn: &Connection, jobs: &mut [Box<dyn Job>]) -> Result<(), String> {
    let exec = |sql: &str| -> rusqlite::Result<()> {
        conn.prepare_cached(sql)?.execute([])?;
        Ok(())
    };
    let aborted = || {
        rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_ABORT),
            Some("the transaction was rolled back by sqlite".into()),
        )
    };
    exec("BEGIN IMMEDIATE").map_err(|e| e.to_string())?;
    let body = (|| -> rusqlite::Result<()> {
        if let [job] = jobs {
            // Alone, the transaction is the job's: a failure rolls it all back, and no
            // savepoint is needed. (A savepoint copies every page it then writes into its
            // journal: a 1,000-task batch would copy ~2,000 index pages.)
            job.run(conn);
            if conn.is_autocommit() {
                return Err(aborted());
            }
            return exec(if job.failed() { "ROLLBACK" } else { "COMMIT" });
        }
        for job in jobs.iter_mut() {
            exec("SAVEPOINT job")?;
            job.run(conn);
            if conn.is_autocommit() {
                // SQLite rolled the whole transaction back (I/O error, disk full).
                return Err(aborted());
            }
            if job.failed() {
                exec("ROLLBACK TO job")?;
            }
            exec("RELEASE job")?;
        }
        exec("COMMIT")
    })();
    body.map_err(|e| {
        if !conn.is_autocommit() {
            let _ = conn.execute_batch("ROLLBACK");
        }
        e.to_string()
    })
}

/// Read connections, checked out one per read and run on tokio's blocking pool.
pub(crate) struct ReadPool {
    path: PathBuf,
    idle: Mutex<Vec<Connection>>,
    permits: Semaphore,
}

impl ReadPool {
    /// A pool over `path`, opening connections as reads need them.
    pub(crate) fn new(path: PathBuf) -> ReadPool {
        ReadPool {
            path,
            idle: Mutex::new(Vec::with_capacity(READERS)),
            permits: Semaphore::new(READERS),
        }
    }

    /// Runs `f` on a read connection. Each read is one statement (its own snapshot) or, where
    /// it reads twice, wrapped in a deferred transaction by `f`.
    pub(crate) async fn run<T, F>(self: &Arc<Self>, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> DbResult<T> + Send + 'static,
    {
        // At most READERS reads at once: more would only queue threads on two cores and
        // open connections that each map the file.
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| unavailable("read pool closed"))?;
        let pool = Arc::clone(self);
        tokio::task::spawn_blocking(move || -> StoreResult<T> {
            let conn = match pool.idle.lock().unwrap_or_else(|e| e.into_inner()).pop() {
                Some(c) => c,
                None => open_connection(&pool.path, Role::Reader).map_err(map_sqlite)?,
            };
            let out = f(&conn).map_err(StoreError::from);
            if conn.is_autocommit() {
                pool.idle
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(conn);
            }
            out
        })
        .await
        .map_err(|e| StoreError::unavailable("read task failed", e))?
    }
}
