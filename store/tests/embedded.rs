//! The embedded store's own behaviour beyond the conformance suite: the file outlives the
//! process, several stores share one file, and the queue's receipt and long-poll rules.

#![cfg(feature = "embedded")]

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use punctual_core::store::{
    ClaimOutcome, DispatchMessage, DlqList, LeaseAcquire, PutOutcome, QueueDeadLetter,
    QueueReceive, QueueSend, QueueVisibility, TaskClaim, TaskPut, TaskPutBatch,
};
use punctual_core::testkit::{T0, task};
use punctual_core::{LeaseStore, ReadyQueue, StoreError, TaskStatus, TaskStore};
use punctual_store::embedded::{EmbeddedOptions, EmbeddedStore, MAX_RECEIVE_REASON};

fn opts(shard_count: u32) -> EmbeddedOptions {
    EmbeddedOptions {
        shard_count,
        max_receive_count: 3,
        now_ms: T0,
    }
}

fn open(path: &Path, shard_count: u32) -> Arc<EmbeddedStore> {
    EmbeddedStore::open(path, opts(shard_count)).unwrap()
}

fn msg(id: &str) -> DispatchMessage {
    DispatchMessage {
        task_id: id.into(),
        version: 1,
        shard: 0,
        due_ms: T0,
    }
}

fn acquire(shard: u32, owner: &str, now_ms: i64) -> LeaseAcquire {
    LeaseAcquire {
        shard,
        owner: owner.into(),
        ttl_ms: 10_000,
        now_ms,
    }
}

fn receive(max: usize, visibility_ms: i64, wait_ms: i64, now_ms: i64) -> QueueReceive {
    QueueReceive {
        max,
        visibility_ms,
        wait_ms,
        now_ms,
    }
}

#[tokio::test]
async fn reopen_keeps_shard_count_creation_time_and_data() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.db");
    let store = open(&path, 8);
    let put = store
        .task_put(TaskPut {
            task: task().id("kept").due_in(60_000).build(),
            now_ms: T0,
        })
        .await
        .unwrap();
    let lease = store.lease_acquire(acquire(3, "a", T0)).await.unwrap();
    store
        .queue_send(QueueSend {
            messages: vec![msg("kept")],
            now_ms: T0,
        })
        .await
        .unwrap();
    drop(store);

    // Other options on reopen: the recorded shard count and creation minute win.
    let again = EmbeddedStore::open(
        &path,
        EmbeddedOptions {
            shard_count: 32,
            max_receive_count: 3,
            now_ms: T0 + 3_600_000,
        },
    )
    .unwrap();
    assert_eq!(again.shard_count(), 8);
    assert_eq!(again.created_minute(), punctual_core::keys::minute_of(T0));
    assert_eq!(
        again.task_get("kept").await.unwrap(),
        Some(put.task().clone())
    );
    assert_eq!(again.lease_list().await.unwrap(), vec![lease]);
    let got = again
        .queue_receive(receive(10, 1_000, 0, T0))
        .await
        .unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].message, msg("kept"));
}

#[tokio::test]
async fn options_are_validated_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("v.db");
    for (bad, field) in [
        (
            EmbeddedOptions {
                shard_count: 0,
                ..opts(1)
            },
            "shard_count",
        ),
        (
            EmbeddedOptions {
                shard_count: 100_000,
                ..opts(1)
            },
            "shard_count",
        ),
        (
            EmbeddedOptions {
                max_receive_count: 0,
                ..opts(1)
            },
            "max_receive_count",
        ),
    ] {
        match EmbeddedStore::open(&path, bad) {
            Err(StoreError::Invalid { field: f, .. }) => assert_eq!(f, field),
            other => panic!("expected Invalid {field}, got {other:?}"),
        }
    }
    assert!(!path.exists(), "refused options create nothing");
}

#[tokio::test]
async fn a_file_of_another_schema_version_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.db");
    drop(open(&path, 4));
    let raw = rusqlite::Connection::open(&path).unwrap();
    raw.execute("UPDATE meta SET schema_version = 99", [])
        .unwrap();
    drop(raw);
    match EmbeddedStore::open(&path, opts(4)) {
        Err(StoreError::Invalid { field, message }) => {
            assert_eq!(field, "path");
            assert!(message.contains("99"), "{message}");
        }
        other => panic!("expected Invalid, got {other:?}"),
    }
}

/// Two stores on one file stand for two processes: each has its own connections, and SQLite's
/// file locks, not this crate's mutexes, keep them consistent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_stores_on_one_file_see_each_others_writes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.db");
    let a = open(&path, 4);
    let b = open(&path, 4);

    a.task_put(TaskPut {
        task: task().id("from-a").build(),
        now_ms: T0,
    })
    .await
    .unwrap();
    assert_eq!(
        b.task_get("from-a").await.unwrap().map(|t| t.status),
        Some(TaskStatus::Scheduled)
    );

    // A claim in one is seen by the other: the duplicate delivery conflicts.
    let claim = |now_ms| TaskClaim {
        task_id: "from-a".into(),
        version: 1,
        now_ms,
        run_timeout_ms: 30_000,
    };
    assert!(matches!(
        b.task_claim(claim(T0)).await.unwrap(),
        ClaimOutcome::Claimed(_)
    ));
    assert!(a.task_claim(claim(T0 + 1)).await.unwrap_err().is_conflict());

    // Leases: one holder across both.
    let held = a.lease_acquire(acquire(0, "poller-a", T0)).await.unwrap();
    assert!(
        b.lease_acquire(acquire(0, "poller-b", T0 + 1))
            .await
            .unwrap_err()
            .is_conflict()
    );
    let taken = b
        .lease_acquire(acquire(0, "poller-b", held.expires_ms))
        .await
        .unwrap();
    assert_eq!(taken.epoch, held.epoch + 1);

    // Both write at once: the file lock and busy_timeout serialize them, nothing is lost.
    let batch = |prefix: &'static str| TaskPutBatch {
        tasks: (0..1_000)
            .map(|i| task().id(format!("{prefix}-{i}")).build())
            .collect(),
        now_ms: T0,
    };
    let (ra, rb) = tokio::join!(
        tokio::spawn({
            let a = a.clone();
            async move {
                for round in 0..3 {
                    let mut p = batch("a");
                    for t in &mut p.tasks {
                        t.task_id = format!("{}-{round}", t.task_id);
                    }
                    a.task_put_batch(p).await.unwrap();
                }
            }
        }),
        tokio::spawn({
            let b = b.clone();
            async move {
                for round in 0..3 {
                    let mut p = batch("b");
                    for t in &mut p.tasks {
                        t.task_id = format!("{}-{round}", t.task_id);
                    }
                    b.task_put_batch(p).await.unwrap();
                }
            }
        })
    );
    ra.unwrap();
    rb.unwrap();
    for id in ["a-0-0", "a-999-2", "b-0-0", "b-999-2"] {
        assert!(a.task_get(id).await.unwrap().is_some(), "{id}");
        assert!(b.task_get(id).await.unwrap().is_some(), "{id}");
    }

    // A long poll in b sees a send of a (no in-process wakeup: the periodic re-check).
    let waiter = tokio::spawn({
        let b = b.clone();
        async move { b.queue_receive(receive(1, 30_000, 5_000, T0)).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let sent_at = std::time::Instant::now();
    a.queue_send(QueueSend {
        messages: vec![msg("cross")],
        now_ms: T0,
    })
    .await
    .unwrap();
    let got = waiter.await.unwrap().unwrap();
    assert_eq!(got.len(), 1);
    assert!(
        sent_at.elapsed() < Duration::from_millis(2_000),
        "seen within a re-check period, not at the end of the wait"
    );
}

/// A receipt names one delivery: after a redelivery, the old receipt neither acks nor delays.
#[tokio::test]
async fn a_stale_receipt_does_not_touch_a_redelivered_message() {
    let dir = tempfile::tempdir().unwrap();
    let q = open(&dir.path().join("q.db"), 1);
    q.queue_send(QueueSend {
        messages: vec![msg("slow")],
        now_ms: T0,
    })
    .await
    .unwrap();
    let first = q.queue_receive(receive(1, 100, 0, T0)).await.unwrap();
    let second = q.queue_receive(receive(1, 100, 0, T0 + 100)).await.unwrap();
    assert_eq!(second.len(), 1);
    assert_ne!(first[0].receipt, second[0].receipt);

    // The first worker, late, acks and delays with its old receipt: nothing happens.
    q.queue_delete(std::slice::from_ref(&first[0].receipt))
        .await
        .unwrap();
    q.queue_change_visibility(QueueVisibility {
        receipt: first[0].receipt.clone(),
        visibility_ms: 60_000,
        now_ms: T0 + 150,
    })
    .await
    .unwrap();
    let depth = q.queue_depth(T0 + 150).await.unwrap();
    assert_eq!((depth.ready, depth.in_flight), (0, 1), "still in flight");
    let third = q.queue_receive(receive(1, 100, 0, T0 + 200)).await.unwrap();
    assert_eq!(
        third.len(),
        1,
        "visible after the second delivery's timeout"
    );
    assert_eq!(third[0].receive_count, 3);

    // The current receipt acks. Malformed receipts are ignored like unknown ones.
    q.queue_delete(&[third[0].receipt.clone(), "garbage".into()])
        .await
        .unwrap();
    assert_eq!(q.queue_depth(T0 + 10_000).await.unwrap().in_flight, 0);
    assert!(
        q.queue_receive(receive(1, 100, 0, T0 + 10_000))
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn the_redrive_backstop_records_its_reason() {
    let dir = tempfile::tempdir().unwrap();
    let q = open(&dir.path().join("r.db"), 1);
    q.queue_send(QueueSend {
        messages: vec![msg("poison")],
        now_ms: T0,
    })
    .await
    .unwrap();
    // max_receive_count is 3: three deliveries, then the DLQ.
    for i in 0..3 {
        let got = q
            .queue_receive(receive(1, 10, 0, T0 + i * 10))
            .await
            .unwrap();
        assert_eq!(got[0].message.task_id, "poison");
    }
    q.queue_send(QueueSend {
        messages: vec![msg("fine")],
        now_ms: T0 + 30,
    })
    .await
    .unwrap();
    // The fourth receive skips to the next message, dead-lettering the poison on its way.
    let got = q.queue_receive(receive(1, 10, 0, T0 + 30)).await.unwrap();
    assert_eq!(got[0].message.task_id, "fine");
    let dlq = q
        .dlq_list(DlqList {
            after: None,
            limit: 10,
        })
        .await
        .unwrap();
    assert_eq!(dlq.items.len(), 1);
    assert_eq!(dlq.items[0].reason, MAX_RECEIVE_REASON);
    assert_eq!(dlq.items[0].dead_ms, T0 + 30);
    match q
        .dlq_list(DlqList {
            after: Some("not-an-id".into()),
            limit: 10,
        })
        .await
    {
        Err(StoreError::Invalid { field, .. }) => assert_eq!(field, "after"),
        other => panic!("expected Invalid after, got {other:?}"),
    }
}

/// The worker's dead-letter of a stale delivery still records the dead task, once, and leaves
/// the redelivered copy to be dropped by its claim.
#[tokio::test]
async fn dead_letter_with_a_stale_receipt_records_the_letter_only() {
    let dir = tempfile::tempdir().unwrap();
    let q = open(&dir.path().join("d.db"), 1);
    q.queue_send(QueueSend {
        messages: vec![msg("gone")],
        now_ms: T0,
    })
    .await
    .unwrap();
    let first = q.queue_receive(receive(1, 100, 0, T0)).await.unwrap();
    let _second = q.queue_receive(receive(1, 100, 0, T0 + 100)).await.unwrap();
    q.queue_dead_letter(QueueDeadLetter {
        receipt: first[0].receipt.clone(),
        message: first[0].message.clone(),
        reason: "400 Bad Request".into(),
        now_ms: T0 + 150,
    })
    .await
    .unwrap();
    let depth = q.queue_depth(T0 + 150).await.unwrap();
    assert_eq!((depth.in_flight, depth.dead), (1, 1));
}

/// A long poll's `now` moves with the real time it waited, so a message that becomes visible
/// during the wait is delivered.
#[tokio::test]
async fn long_poll_advances_now_by_the_time_waited() {
    let dir = tempfile::tempdir().unwrap();
    let q = open(&dir.path().join("l.db"), 1);
    q.queue_send(QueueSend {
        messages: vec![msg("soon")],
        now_ms: T0,
    })
    .await
    .unwrap();
    let got = q.queue_receive(receive(1, 150, 0, T0)).await.unwrap();
    assert_eq!(got.len(), 1);
    // Hidden until T0 + 150. Asked at T0 with a 3 s wait, it arrives once ~150 ms have passed.
    let start = std::time::Instant::now();
    let again = q.queue_receive(receive(1, 150, 3_000, T0)).await.unwrap();
    let waited = start.elapsed();
    assert_eq!(again.len(), 1);
    assert!(
        waited >= Duration::from_millis(150) && waited < Duration::from_millis(2_500),
        "{waited:?}"
    );
    // With nothing to come, the poll returns empty after its wait.
    let start = std::time::Instant::now();
    let none = q.queue_receive(receive(1, 150, 200, T0)).await.unwrap();
    assert!(none.is_empty());
    assert!(start.elapsed() >= Duration::from_millis(200));
}

#[tokio::test]
async fn an_exhausted_claim_says_why_and_leaves_the_index() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(&dir.path().join("x.db"), 2);
    let put = s
        .task_put(TaskPut {
            task: task().id("x").max_attempts(1).build(),
            now_ms: T0,
        })
        .await
        .unwrap();
    assert!(matches!(put, PutOutcome::Created(_)));
    let claim = |now_ms| TaskClaim {
        task_id: "x".into(),
        version: 1,
        now_ms,
        run_timeout_ms: 1_000,
    };
    s.task_claim(claim(T0)).await.unwrap();
    match s.task_claim(claim(T0 + 1_001)).await.unwrap() {
        ClaimOutcome::Exhausted(t) => {
            assert_eq!(t.status, TaskStatus::Dead);
            assert_eq!(t.attempt, 1, "an exhausted claim does not count an attempt");
            assert_eq!((t.due_bucket, t.running_until), (None, None));
            let e = t.last_error.unwrap();
            assert!(
                e.contains("attempts spent") && e.contains("worker lost"),
                "{e}"
            );
        }
        other => panic!("expected Exhausted, got {other:?}"),
    }
}

/// Tests pause tokio's clock (on a current-thread runtime): while a store call runs, the clock
/// must not jump ahead, or every `timeout` around a store call would expire at once.
#[tokio::test(start_paused = true)]
async fn a_paused_clock_stands_still_while_the_store_works() {
    let dir = tempfile::tempdir().unwrap();
    let s = open(&dir.path().join("paused.db"), 4);
    let before = tokio::time::Instant::now();
    for round in 0..5 {
        let tasks = (0..1_000)
            .map(|i| task().id(format!("{round}-{i}")).build())
            .collect();
        tokio::time::timeout(
            Duration::from_secs(1),
            s.task_put_batch(TaskPutBatch { tasks, now_ms: T0 }),
        )
        .await
        .expect("no virtual time passes during a write")
        .unwrap();
    }
    let got = tokio::time::timeout(Duration::from_secs(1), s.task_get("4-999"))
        .await
        .expect("no virtual time passes during a read")
        .unwrap();
    assert!(got.is_some());
    assert_eq!(tokio::time::Instant::now(), before);
}
