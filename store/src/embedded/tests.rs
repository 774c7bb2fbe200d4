//! The SQL details the conformance suite cannot see: pragmas, query plans, group commit,
//! error translation.

use std::future::Future;
use std::sync::Arc;
use std::task::Poll;

use punctual_core::store::{TaskFilter, TaskList, TaskMarkDispatched, TaskPutBatch};
use punctual_core::testkit::{T0, task};
use punctual_core::{StoreError, TaskStore};
use rusqlite::{Connection, ToSql};

use super::db::{DbError, map_sqlite};
use super::{EmbeddedOptions, EmbeddedStore, queue, tasks};

fn open(dir: &tempfile::TempDir) -> Arc<EmbeddedStore> {
    EmbeddedStore::open(
        &dir.path().join("t.db"),
        EmbeddedOptions {
            now_ms: T0,
            ..EmbeddedOptions::default()
        },
    )
    .unwrap()
}

/// The pragmas a connection runs with, as `(name, value)`.
fn pragmas(conn: &Connection) -> Vec<(&'static str, String)> {
    [
        "journal_mode",
        "synchronous",
        "busy_timeout",
        "cache_size",
        "mmap_size",
        "temp_store",
        "query_only",
    ]
    .into_iter()
    .map(|name| {
        let v: rusqlite::types::Value = conn
            .query_row(&format!("PRAGMA {name}"), [], |r| r.get(0))
            .unwrap();
        let v = match v {
            rusqlite::types::Value::Integer(i) => i.to_string(),
            rusqlite::types::Value::Text(t) => t,
            other => format!("{other:?}"),
        };
        (name, v)
    })
    .chain(std::iter::once((
        "qpsg",
        conn.db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG)
            .unwrap()
            .to_string(),
    )))
    .collect()
}

#[tokio::test]
async fn pragmas_are_applied_to_writer_and_readers() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let writer = store
        .writer
        .run(|conn| {
            let mut p = pragmas(conn);
            let ckpt: i64 = conn.query_row("PRAGMA wal_autocheckpoint", [], |r| r.get(0))?;
            p.push(("wal_autocheckpoint", ckpt.to_string()));
            Ok(p)
        })
        .await
        .unwrap();
    let reader = store.readers.run(|conn| Ok(pragmas(conn))).await.unwrap();
    let mmap = (128 * 1024 * 1024).to_string();
    let expect = |cache_kib: i64, query_only: &str| {
        vec![
            ("journal_mode", "wal".to_string()),
            ("synchronous", "1".into()), // NORMAL
            ("busy_timeout", "5000".into()),
            ("cache_size", (-cache_kib).to_string()),
            ("mmap_size", mmap.clone()),
            ("temp_store", "2".into()), // MEMORY
            ("query_only", query_only.into()),
            ("qpsg", "true".into()),
        ]
    };
    let mut want_writer = expect(128 * 1024, "0");
    want_writer.push(("wal_autocheckpoint", "50000".into()));
    assert_eq!(writer, want_writer);
    assert_eq!(reader, expect(8 * 1024, "1"));
}

#[tokio::test]
async fn readers_cannot_write() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let err = store
        .readers
        .run(|conn| Ok(conn.execute("DELETE FROM tasks", [])?))
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::Unavailable { .. }),
        "query_only refuses: {err:?}"
    );
}

/// `EXPLAIN QUERY PLAN` of `sql` with `params`, one detail line per step.
fn plan(conn: &Connection, sql: &str, params: &[&dyn ToSql]) -> String {
    let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
    let rows = stmt
        .query_map(params, |r| r.get::<_, String>(3))
        .unwrap()
        .collect::<rusqlite::Result<Vec<_>>>()
        .unwrap();
    rows.join("\n")
}

#[tokio::test]
async fn hot_paths_use_their_indexes_and_never_scan_or_sort() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    // Some rows in the index and some out of it, so the planner sees a real table.
    let batch: Vec<_> = (0..200)
        .map(|i| task().id(format!("p-{i}")).due_in(i * 1_000).build())
        .collect();
    store
        .task_put_batch(TaskPutBatch {
            tasks: batch,
            now_ms: T0,
        })
        .await
        .unwrap();
    store
        .task_mark_dispatched(TaskMarkDispatched {
            tasks: (0..100).map(|i| (format!("p-{i}"), 1)).collect(),
            now_ms: T0,
        })
        .await
        .unwrap();
    // No ANALYZE: the store never runs it, so these are the plans it gets in production.
    let plans = store
        .readers
        .run(|conn| {
            let index_sql: String = conn.query_row(
                "SELECT sql FROM sqlite_master WHERE name = 'tasks_by_due'",
                [],
                |r| r.get(0),
            )?;
            Ok((
                index_sql,
                plan(
                    conn,
                    tasks::DUE_QUERY_SQL,
                    &[&"00001#0029453760", &"1767225630000$", &"", &100],
                ),
                {
                    let (sql, args) = tasks::list_sql(&TaskList {
                        filter: TaskFilter::default(),
                        after_key: None,
                        limit: 100,
                        now_ms: T0,
                    });
                    let params: Vec<&dyn ToSql> = args.iter().map(|a| a as &dyn ToSql).collect();
                    plan(conn, &sql, &params)
                },
                plan(conn, tasks::CLAIM_SQL, &[&"p-1", &1, &T0, &30_000]),
                plan(conn, queue::RECEIVE_SQL, &[&T0, &10]),
                plan(conn, queue::ANY_VISIBLE_SQL, &[&T0]),
            ))
        })
        .await
        .unwrap();
    let (index_sql, due, pending, claim, receive, probe) = plans;
    assert!(
        index_sql.ends_with("WHERE due_bucket IS NOT NULL"),
        "the due index is partial: {index_sql}"
    );
    assert!(
        due.contains(
            "USING COVERING INDEX tasks_by_due (due_bucket=? AND due_key>? AND due_key<?)"
        ),
        "the poll reads only the partial index: {due}"
    );
    assert!(
        pending.contains("USING INDEX tasks_pending (due_key>? AND due_key<?)"),
        "list pending walks its index: {pending}"
    );
    assert!(
        claim.contains("USING INDEX sqlite_autoindex_tasks_1 (task_id=?)"),
        "a claim is a point write: {claim}"
    );
    assert!(
        receive.contains("USING INDEX queue_by_visible (visible_at_ms<?)"),
        "a receive reads the front of the queue: {receive}"
    );
    assert!(
        probe.contains("USING COVERING INDEX queue_by_visible (visible_at_ms<?)"),
        "the long poll's probe reads only the queue's index: {probe}"
    );
    for p in [&due, &pending, &claim, &receive, &probe] {
        assert!(!p.contains("TEMP B-TREE"), "no sort: {p}");
        assert!(!p.starts_with("SCAN"), "no scan: {p}");
    }
}

#[tokio::test]
async fn the_backlog_counts_on_the_due_index_and_an_edit_is_a_point_write() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let batch: Vec<_> = (0..200)
        .map(|i| task().id(format!("b-{i}")).due_in(i * 1_000).build())
        .collect();
    store
        .task_put_batch(TaskPutBatch {
            tasks: batch,
            now_ms: T0,
        })
        .await
        .unwrap();
    let (backlog, update) = store
        .readers
        .run(|conn| {
            Ok((
                plan(
                    conn,
                    tasks::BACKLOG_SQL,
                    &[&"00001#0029453760", &"00001#0029453819"],
                ),
                plan(
                    conn,
                    tasks::UPDATE_SQL,
                    &[
                        &"b-1",
                        &Option::<i64>::None,
                        &Option::<String>::None,
                        &Option::<u32>::None,
                        &Option::<String>::None,
                        &T0,
                        &29_453_760,
                    ],
                ),
            ))
        })
        .await
        .unwrap();
    assert!(
        backlog.contains("USING COVERING INDEX tasks_by_due (due_bucket>? AND due_bucket<?)"),
        "the backlog counts on the partial index: {backlog}"
    );
    assert!(
        update.contains("USING INDEX sqlite_autoindex_tasks_1 (task_id=?)"),
        "an edit is a point write: {update}"
    );
    for p in [&backlog, &update] {
        assert!(!p.starts_with("SCAN"), "no scan: {p}");
    }
}

/// Jobs queued behind a blocking job are taken as one group: each commits or rolls back alone.
#[tokio::test]
async fn a_failed_job_rolls_back_alone_within_its_group() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let (release, blocked) = std::sync::mpsc::channel::<()>();
    let blocker = store.writer.run(move |_| {
        let _ = blocked.recv();
        Ok(())
    });
    let insert = |shard: u32, outcome: Result<(), &'static str>| {
        store.writer.run(move |conn| {
            conn.execute(
                "INSERT INTO leases (shard, owner, expires_ms, epoch, watermark_minute)
                 VALUES (?1, 'x', 0, 1, 0)",
                [shard],
            )?;
            match outcome {
                Ok(()) => Ok(()),
                Err("panic") => panic!("a job panics"),
                Err(e) => Err(DbError::Store(StoreError::conflict(e))),
            }
        })
    };
    let mut jobs = [
        Box::pin(insert(100, Err("refused"))),
        Box::pin(insert(101, Ok(()))),
        Box::pin(insert(102, Err("panic"))),
        Box::pin(insert(103, Ok(()))),
    ];
    let mut blocker = Box::pin(blocker);
    // Poll each once: that sends the job to the writer, which is held by the blocker.
    std::future::poll_fn(|cx| {
        let _ = blocker.as_mut().poll(cx);
        for j in jobs.iter_mut() {
            let _ = j.as_mut().poll(cx);
        }
        Poll::Ready(())
    })
    .await;
    release.send(()).unwrap();
    blocker.await.unwrap();
    let [a, b, c, d] = jobs;
    assert!(a.await.unwrap_err().is_conflict());
    b.await.unwrap();
    assert!(matches!(
        c.await.unwrap_err(),
        StoreError::Unavailable { .. }
    ));
    d.await.unwrap();
    let shards = store
        .readers
        .run(|conn| {
            let mut stmt = conn.prepare("SELECT shard FROM leases ORDER BY shard")?;
            let rows = stmt.query_map([], |r| r.get::<_, u32>(0))?;
            Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
        })
        .await
        .unwrap();
    assert_eq!(
        shards,
        vec![101, 103],
        "only the failed jobs' writes are undone"
    );
    // The writer survived the panic.
    store.writer.run(|_| Ok(())).await.unwrap();
}

#[tokio::test]
async fn a_constraint_failure_is_a_conflict() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let err = store
        .writer
        .run(|conn| {
            let sql = "INSERT INTO leases (shard, owner, expires_ms, epoch, watermark_minute)
                       VALUES (7, 'x', 0, 1, 0)";
            conn.execute(sql, [])?;
            conn.execute(sql, [])?;
            Ok(())
        })
        .await
        .unwrap_err();
    assert!(err.is_conflict(), "{err:?}");
}

#[test]
fn sqlite_errors_map_to_store_errors() {
    let failure =
        |code| rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), Some("msg".into()));
    for code in [rusqlite::ffi::SQLITE_BUSY, rusqlite::ffi::SQLITE_LOCKED] {
        match map_sqlite(failure(code)) {
            StoreError::Unavailable {
                source: Some(_), ..
            } => {}
            other => panic!("busy/locked should be Unavailable: {other:?}"),
        }
    }
    assert!(map_sqlite(failure(rusqlite::ffi::SQLITE_CONSTRAINT)).is_conflict());
    match map_sqlite(failure(rusqlite::ffi::SQLITE_IOERR)) {
        StoreError::Unavailable {
            source: Some(s), ..
        } => assert!(s.to_string().contains("msg")),
        other => panic!("other errors are Unavailable with their source: {other:?}"),
    }
}

#[tokio::test]
async fn filtered_listings_walk_an_index_in_due_order_without_a_sort() {
    use punctual_core::{TargetKind, TaskStatus};
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let batch: Vec<_> = (0..200)
        .map(|i| task().id(format!("f-{i}")).due_in(i * 1_000).build())
        .collect();
    store
        .task_put_batch(TaskPutBatch {
            tasks: batch,
            now_ms: T0,
        })
        .await
        .unwrap();
    let full = TaskFilter {
        status: None,
        due_from_ms: Some(T0),
        due_to_ms: Some(T0 + 60_000),
        target_kind: Some(TargetKind::Http),
        id_prefix: Some("f-1".into()),
    };
    let mut filters = vec![TaskFilter::default(), full.clone()];
    for &s in punctual_core::store::LIST_INDEXED_STATUSES {
        filters.push(TaskFilter {
            status: Some(s),
            ..TaskFilter::default()
        });
        filters.push(TaskFilter {
            status: Some(s),
            ..full.clone()
        });
    }
    for filter in filters {
        let list = TaskList {
            filter: filter.clone(),
            after_key: Some("1767225630000#f-1".into()),
            limit: 10,
            now_ms: T0,
        };
        let p = store
            .readers
            .run(move |conn| {
                let (sql, args) = tasks::list_sql(&list);
                let params: Vec<&dyn ToSql> = args.iter().map(|a| a as &dyn ToSql).collect();
                Ok(plan(conn, &sql, &params))
            })
            .await
            .unwrap();
        let index = match filter.status {
            None | Some(TaskStatus::Scheduled) => {
                "USING INDEX tasks_pending (due_key>? AND due_key<?)"
            }
            Some(_) => "USING INDEX tasks_by_status (status=? AND due_key>? AND due_key<?)",
        };
        assert!(p.contains(index), "{filter:?}: {p}");
        assert!(!p.contains("TEMP B-TREE"), "no sort: {p}");
        assert!(!p.starts_with("SCAN"), "no scan: {p}");
    }
}

#[tokio::test]
async fn status_counts_follow_every_change_and_an_old_file_is_backfilled_once() {
    use punctual_core::TaskStatus;
    use punctual_core::store::{StatusCounts, TaskCancel};
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let batch: Vec<_> = (0..10)
        .map(|i| task().id(format!("c-{i}")).build())
        .collect();
    store
        .task_put_batch(TaskPutBatch {
            tasks: batch,
            now_ms: T0,
        })
        .await
        .unwrap();
    store
        .task_mark_dispatched(TaskMarkDispatched {
            tasks: (0..3).map(|i| (format!("c-{i}"), 1)).collect(),
            now_ms: T0,
        })
        .await
        .unwrap();
    store
        .task_cancel(TaskCancel {
            task_id: "c-9".into(),
            expected_version: None,
            now_ms: T0,
        })
        .await
        .unwrap();
    let expected = StatusCounts {
        scheduled: 6,
        dispatched: 3,
        cancelled: 1,
        ..StatusCounts::default()
    };
    assert_eq!(store.task_counts().await.unwrap(), expected);
    // A file from before the counters: no table, no triggers. Opening it again counts once.
    store
        .writer
        .run(|conn| {
            conn.execute_batch(
                "DROP TRIGGER task_counts_insert; DROP TRIGGER task_counts_update;
                 DROP TRIGGER task_counts_delete; DROP TABLE task_counts;
                 DELETE FROM tasks WHERE task_id = 'c-8';",
            )?;
            Ok(())
        })
        .await
        .unwrap();
    drop(store);
    let store = open(&dir);
    let after = store.task_counts().await.unwrap();
    assert_eq!(after.get(TaskStatus::Scheduled), 5, "{after:?}");
    assert_eq!(after.total(), 9);
    // And the triggers are back: a delete is counted.
    store
        .writer
        .run(|conn| {
            conn.execute("DELETE FROM tasks WHERE task_id = 'c-9'", [])?;
            Ok(())
        })
        .await
        .unwrap();
    assert_eq!(store.task_counts().await.unwrap().cancelled, 0);
}
