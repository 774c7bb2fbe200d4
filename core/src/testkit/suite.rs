//! The conformance suite: what every backend must do, as plain `async fn`s over the traits.
//!
//! A backend's test builds a fresh [`Backend`] per case and calls [`run_all`]:
//!
//! ```text
//! #[tokio::test]
//! async fn conformance() {
//!     punctual_core::testkit::suite::run_all(|| async { fresh_backend() }).await;
//! }
//! ```
//!
//! The cases cover the protocol of DESIGN.md: put/get and idempotent create, the due query
//! (only due tasks of one shard-minute, in due order, in pages), the claim conditions and each
//! race the protocol closes, cancel, reschedule and edit against stale messages (an edited
//! task a stale message stood for goes back to the due index), the due backlog's counts, the queue's
//! visibility, redelivery, receive counts and DLQ, and the leases' acquire, renew, expiry,
//! takeover, epoch and watermark. Time is passed explicitly, so no case sleeps (except the
//! one long-poll case, which waits at most a few hundred milliseconds).

use std::future::Future;
use std::pin::Pin;

use crate::error::{StoreError, StoreResult};
use crate::keys::{self, MINUTE_MS};
use crate::store::*;
use crate::task::{ALL_STATUSES, Backoff, NewTask, TargetKind, Task, TaskStatus};
use crate::testkit::{T0, task};

/// A conformance case.
pub type Case = fn(Backend) -> Pin<Box<dyn Future<Output = ()> + Send>>;

macro_rules! cases {
    ($($name:ident),* $(,)?) => {
        /// Every case, by name.
        pub fn cases() -> Vec<(&'static str, Case)> {
            vec![$((stringify!($name), (|b| Box::pin($name(b))) as Case)),*]
        }
    };
}

cases!(
    put_then_get_round_trips,
    create_is_idempotent_by_id,
    batch_put_reports_each_item,
    due_query_returns_only_due_tasks_of_one_shard_minute,
    due_query_pages_in_due_order,
    past_due_task_goes_to_the_current_minute,
    mark_dispatched_is_conditional,
    claim_accepts_scheduled_before_mark,
    claim_accepts_dispatched_and_removes_from_index,
    duplicate_claim_conflicts,
    stale_version_claim_conflicts,
    claim_of_unknown_task_is_not_found,
    claim_takes_over_a_lapsed_run,
    claims_count_attempts_and_end_dead,
    complete_succeeds_once,
    complete_is_fenced_by_attempt,
    claim_many_answers_each_claim_alone,
    complete_many_answers_each_completion_alone,
    retry_through_visibility_keeps_task_out_of_index,
    retry_through_index_puts_task_back,
    cancel_beats_a_stale_message,
    reschedule_beats_a_stale_message,
    cancel_refuses_running_and_terminal_tasks,
    operator_writes_check_expected_version,
    replay_brings_a_dead_task_back,
    update_edits_payload_and_policy,
    update_of_a_dispatched_task_beats_the_stale_message,
    update_of_a_retry_through_visibility_goes_back_to_the_index,
    update_refuses_running_and_checks_version,
    due_backlog_counts_each_minute_across_shards,
    list_pending_in_due_order_in_pages,
    list_by_each_status_or_refuses_it_by_capability,
    list_filters_by_due_window_target_and_id_prefix,
    list_pages_finished_tasks_across_shards,
    list_of_nothing_is_an_empty_last_page,
    replay_takes_a_task_off_its_finished_list,
    counts_follow_every_status_change,
    dlq_get_finds_a_letter_by_id,
    queue_send_receive_delete,
    queue_visibility_hides_then_redelivers,
    queue_change_visibility_delays,
    queue_receive_count_moves_to_dlq,
    queue_dead_letter_list_delete,
    queue_long_poll_returns_when_sent,
    lease_acquire_conflicts_while_held,
    lease_renew_and_expiry,
    lease_takeover_increases_epoch_and_keeps_watermark,
    lease_release_frees_at_once,
    members_beat_list_and_remove,
);

/// Runs every case on a fresh backend from `make`, printing each name; panics on the first
/// failure with the case's name.
pub async fn run_all<F, Fut>(make: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Backend>,
{
    let all = cases();
    let n = all.len();
    for (name, case) in all {
        println!("conformance: {name}");
        let backend = make().await;
        // Run inside a task so a panic names its case.
        let result = tokio::spawn(case(backend)).await;
        if let Err(e) = result {
            panic!("conformance case {name} failed: {e}");
        }
    }
    println!("conformance: {n} cases passed");
}

// ---- helpers ----------------------------------------------------------------------------

async fn put(b: &Backend, t: NewTask, now_ms: i64) -> Task {
    match b.tasks.task_put(TaskPut { task: t, now_ms }).await.unwrap() {
        PutOutcome::Created(t) => t,
        PutOutcome::Existing(t) => panic!("expected a new task, found {t:?}"),
    }
}

async fn get(b: &Backend, id: &str) -> Task {
    b.tasks.task_get(id).await.unwrap().expect("task exists")
}

async fn due(b: &Backend, shard: u32, minute: i64, now_ms: i64) -> Vec<DueEntry> {
    b.tasks
        .due_query(DueQuery {
            shard,
            minute,
            now_ms,
            after_key: None,
            limit: 10_000,
        })
        .await
        .unwrap()
}

async fn claim(b: &Backend, id: &str, version: u64, now_ms: i64) -> StoreResult<ClaimOutcome> {
    b.tasks
        .task_claim(TaskClaim {
            task_id: id.into(),
            version,
            now_ms,
            run_timeout_ms: 30_000,
        })
        .await
}

async fn claimed(b: &Backend, id: &str, version: u64, now_ms: i64) -> Task {
    match claim(b, id, version, now_ms).await.unwrap() {
        ClaimOutcome::Claimed(t) => t,
        other => panic!("expected a claim, got {other:?}"),
    }
}

async fn complete(b: &Backend, t: &Task, outcome: Completion, now_ms: i64) -> StoreResult<Task> {
    b.tasks
        .task_complete(TaskComplete {
            task_id: t.task_id.clone(),
            version: t.version,
            attempt: t.attempt,
            outcome,
            now_ms,
        })
        .await
}

fn conflict<T: std::fmt::Debug>(r: StoreResult<T>) {
    match r {
        Err(StoreError::Conflict { .. }) => {}
        other => panic!("expected Conflict, got {other:?}"),
    }
}

async fn send(b: &Backend, msgs: Vec<DispatchMessage>, now_ms: i64) {
    b.queue
        .queue_send(QueueSend {
            messages: msgs,
            now_ms,
        })
        .await
        .unwrap();
}

async fn receive(b: &Backend, max: usize, visibility_ms: i64, now_ms: i64) -> Vec<ReceivedMessage> {
    b.queue
        .queue_receive(QueueReceive {
            max,
            visibility_ms,
            wait_ms: 0,
            now_ms,
        })
        .await
        .unwrap()
}

fn msg(id: &str, version: u64) -> DispatchMessage {
    DispatchMessage {
        task_id: id.into(),
        version,
        shard: 0,
        due_ms: T0,
    }
}

fn lease_acq(shard: u32, owner: &str, now_ms: i64) -> LeaseAcquire {
    LeaseAcquire {
        shard,
        owner: owner.into(),
        ttl_ms: 10_000,
        now_ms,
    }
}

fn lease_renew(l: &Lease, watermark: Option<i64>, now_ms: i64) -> LeaseRenew {
    LeaseRenew {
        shard: l.shard,
        owner: l.owner.clone(),
        epoch: l.epoch,
        ttl_ms: 10_000,
        watermark_minute: watermark,
        now_ms,
    }
}

// ---- tasks ----------------------------------------------------------------------------

async fn put_then_get_round_trips(b: Backend) {
    let new = task()
        .id("roundtrip-1")
        .due_in(90_000)
        .http("http://127.0.0.1:9/hook")
        .payload(serde_json::json!({"n": 1, "s": "é"}))
        .max_attempts(7)
        .backoff(50, 5_000)
        .build();
    let stored = put(&b, new.clone(), T0).await;
    let got = get(&b, "roundtrip-1").await;
    assert_eq!(got, stored);
    assert_eq!(got.status, TaskStatus::Scheduled);
    assert_eq!(got.version, 1);
    assert_eq!(got.attempt, 0);
    assert_eq!(got.max_attempts, 7);
    assert_eq!(got.backoff, new.backoff);
    assert_eq!(got.target, new.target);
    assert_eq!(got.payload, new.payload);
    assert_eq!(got.due_ms, T0 + 90_000);
    assert_eq!(
        got.shard,
        keys::shard_of("roundtrip-1", b.tasks.shard_count())
    );
    assert_eq!(
        got.due_bucket.as_deref(),
        Some(keys::due_bucket(got.shard, keys::minute_of(T0 + 90_000)).as_str())
    );
    assert_eq!(got.created_ms, T0);
    assert!(b.tasks.task_get("absent").await.unwrap().is_none());
}

async fn create_is_idempotent_by_id(b: Backend) {
    let first = put(&b, task().id("idem").due_in(1_000).build(), T0).await;
    let again = b
        .tasks
        .task_put(TaskPut {
            task: task().id("idem").due_in(99_000).build(),
            now_ms: T0 + 5,
        })
        .await
        .unwrap();
    // The existing task is returned unchanged; the caller compares the requests.
    assert_eq!(again, PutOutcome::Existing(first.clone()));
    assert_eq!(get(&b, "idem").await, first);
}

async fn batch_put_reports_each_item(b: Backend) {
    put(&b, task().id("b-1").build(), T0).await;
    let out = b
        .tasks
        .task_put_batch(TaskPutBatch {
            tasks: vec![
                task().id("b-0").build(),
                task().id("b-1").due_in(5).build(),
                task().id("b-2").build(),
            ],
            now_ms: T0,
        })
        .await
        .unwrap();
    assert_eq!(out.len(), 3);
    assert!(matches!(&out[0], PutOutcome::Created(t) if t.task_id == "b-0"));
    assert!(matches!(&out[1], PutOutcome::Existing(t) if t.task_id == "b-1" && t.due_ms == T0));
    assert!(matches!(&out[2], PutOutcome::Created(t) if t.task_id == "b-2"));
    let many: Vec<_> = (0..1_000)
        .map(|i| task().id(format!("m-{i}")).build())
        .collect();
    let out = b
        .tasks
        .task_put_batch(TaskPutBatch {
            tasks: many,
            now_ms: T0,
        })
        .await
        .unwrap();
    assert_eq!(
        out.iter()
            .filter(|o| matches!(o, PutOutcome::Created(_)))
            .count(),
        1_000
    );
    assert!(b.tasks.task_get("m-999").await.unwrap().is_some());
}

/// Finds ids that land in `shard`.
fn ids_in_shard(shard: u32, shard_count: u32, n: usize, prefix: &str) -> Vec<String> {
    (0..)
        .map(|i| format!("{prefix}-{i}"))
        .filter(|id| keys::shard_of(id, shard_count) == shard)
        .take(n)
        .collect()
}

async fn due_query_returns_only_due_tasks_of_one_shard_minute(b: Backend) {
    let sc = b.tasks.shard_count();
    let minute = keys::minute_of(T0);
    let mine = ids_in_shard(0, sc, 4, "mine");
    let other = ids_in_shard(1 % sc, sc, 1, "other");
    // Due now, due later this minute, due next minute, and one in another shard.
    put(&b, task().id(&mine[0]).due(T0 - 1_000).build(), T0 - 20_000).await;
    put(&b, task().id(&mine[1]).due(T0).build(), T0 - 20_000).await;
    put(&b, task().id(&mine[2]).due(T0 + 1_000).build(), T0 - 20_000).await;
    put(
        &b,
        task().id(&mine[3]).due(T0 + MINUTE_MS).build(),
        T0 - 20_000,
    )
    .await;
    if sc > 1 {
        put(
            &b,
            task().id(&other[0]).due(T0 - 1_000).build(),
            T0 - 20_000,
        )
        .await;
    }
    let got = due(&b, 0, minute, T0).await;
    let ids: Vec<_> = got.iter().map(|e| e.task_id.as_str()).collect();
    assert_eq!(
        ids,
        vec![mine[0].as_str(), mine[1].as_str()],
        "only what is due, in due order"
    );
    assert_eq!(got[0].version, 1);
    assert_eq!(got[0].shard, 0);
    assert_eq!(got[0].due_ms, T0 - 1_000);
    assert_eq!(got[0].due_key, keys::due_key(T0 - 1_000, &mine[0]));
    // Later, the rest of the minute is due; the next minute's task is still in its own bucket.
    assert_eq!(due(&b, 0, minute, T0 + MINUTE_MS * 5).await.len(), 3);
    assert_eq!(due(&b, 0, minute + 1, T0 + MINUTE_MS * 5).await.len(), 1);
    // Terminal or dispatched tasks leave the index.
    b.tasks
        .task_cancel(TaskCancel {
            task_id: mine[0].clone(),
            expected_version: None,
            now_ms: T0,
        })
        .await
        .unwrap();
    assert_eq!(due(&b, 0, minute, T0).await.len(), 1);
}

async fn due_query_pages_in_due_order(b: Backend) {
    let sc = b.tasks.shard_count();
    let ids = ids_in_shard(0, sc, 25, "page");
    // Insert in reverse due order, some sharing a due time.
    let tasks: Vec<_> = ids
        .iter()
        .enumerate()
        .rev()
        .map(|(i, id)| task().id(id).due(T0 - 1_000 + (i as i64 / 2) * 10).build())
        .collect();
    b.tasks
        .task_put_batch(TaskPutBatch {
            tasks,
            now_ms: T0 - 5_000,
        })
        .await
        .unwrap();
    let mut seen = Vec::new();
    let mut after = None;
    loop {
        let page = b
            .tasks
            .due_query(DueQuery {
                shard: 0,
                minute: keys::minute_of(T0),
                now_ms: T0,
                after_key: after.clone(),
                limit: 4,
            })
            .await
            .unwrap();
        assert!(page.len() <= 4);
        if page.is_empty() {
            break;
        }
        after = Some(page.last().unwrap().due_key.clone());
        seen.extend(page);
    }
    assert_eq!(seen.len(), 25);
    let keys_seen: Vec<_> = seen.iter().map(|e| e.due_key.clone()).collect();
    let mut sorted = keys_seen.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(
        keys_seen, sorted,
        "pages are in due_key order without repeats"
    );
}

async fn past_due_task_goes_to_the_current_minute(b: Backend) {
    let now = T0 + 10 * MINUTE_MS;
    let t = put(&b, task().id("late").due(T0 - MINUTE_MS).build(), now).await;
    let current = keys::minute_of(now);
    assert_eq!(t.due_bucket, Some(keys::due_bucket(t.shard, current)));
    assert_eq!(t.due_ms, T0 - MINUTE_MS, "the due time itself is kept");
    let got = due(&b, t.shard, current, now).await;
    assert_eq!(got.len(), 1);
    assert!(
        due(&b, t.shard, keys::minute_of(T0 - MINUTE_MS), now)
            .await
            .is_empty()
    );
}

async fn mark_dispatched_is_conditional(b: Backend) {
    let a = put(&b, task().id("mark-a").build(), T0).await;
    let c = put(&b, task().id("mark-c").build(), T0).await;
    // c is cancelled (version 2) after the poller read it at version 1.
    b.tasks
        .task_cancel(TaskCancel {
            task_id: c.task_id.clone(),
            expected_version: None,
            now_ms: T0,
        })
        .await
        .unwrap();
    let n = b
        .tasks
        .task_mark_dispatched(TaskMarkDispatched {
            tasks: vec![
                (a.task_id.clone(), 1),
                (c.task_id.clone(), 1),
                ("mark-absent".into(), 1),
            ],
            now_ms: T0 + 1,
        })
        .await
        .unwrap();
    assert_eq!(n, 1);
    let a = get(&b, "mark-a").await;
    assert_eq!(a.status, TaskStatus::Dispatched);
    assert_eq!(a.due_bucket, None, "a dispatched task leaves the due index");
    assert_eq!(a.version, 1, "dispatch is not an operator change");
    assert_eq!(get(&b, "mark-c").await.status, TaskStatus::Cancelled);
    assert!(
        due(&b, a.shard, keys::minute_of(T0), T0 + 1)
            .await
            .iter()
            .all(|e| e.task_id != "mark-a")
    );
    // Marking twice changes nothing the second time.
    let n = b
        .tasks
        .task_mark_dispatched(TaskMarkDispatched {
            tasks: vec![(a.task_id.clone(), 1)],
            now_ms: T0 + 2,
        })
        .await
        .unwrap();
    assert_eq!(n, 0);
}

/// Race: a worker receives the message before the poller marked the task dispatched.
async fn claim_accepts_scheduled_before_mark(b: Backend) {
    put(&b, task().id("early").build(), T0).await;
    let t = claimed(&b, "early", 1, T0 + 5).await;
    assert_eq!(t.status, TaskStatus::Running);
    assert_eq!(t.attempt, 1);
    assert_eq!(t.due_bucket, None);
    assert_eq!(t.running_until, Some(T0 + 5 + 30_000));
    // The poller's late mark then finds the task no longer SCHEDULED and changes nothing.
    let n = b
        .tasks
        .task_mark_dispatched(TaskMarkDispatched {
            tasks: vec![("early".into(), 1)],
            now_ms: T0 + 6,
        })
        .await
        .unwrap();
    assert_eq!(n, 0);
    assert_eq!(get(&b, "early").await.status, TaskStatus::Running);
}

async fn claim_accepts_dispatched_and_removes_from_index(b: Backend) {
    let t = put(&b, task().id("disp").build(), T0).await;
    b.tasks
        .task_mark_dispatched(TaskMarkDispatched {
            tasks: vec![("disp".into(), 1)],
            now_ms: T0,
        })
        .await
        .unwrap();
    let c = claimed(&b, "disp", 1, T0 + 1).await;
    assert_eq!(c.status, TaskStatus::Running);
    assert!(
        due(&b, t.shard, keys::minute_of(T0), T0 + 1)
            .await
            .is_empty()
    );
}

async fn duplicate_claim_conflicts(b: Backend) {
    put(&b, task().id("dup").build(), T0).await;
    claimed(&b, "dup", 1, T0).await;
    // A duplicate delivery of the same message, while the first worker still runs it.
    conflict(claim(&b, "dup", 1, T0 + 1_000).await);
    assert_eq!(get(&b, "dup").await.attempt, 1);
}

async fn stale_version_claim_conflicts(b: Backend) {
    put(&b, task().id("stale").build(), T0).await;
    conflict(claim(&b, "stale", 2, T0).await);
    conflict(claim(&b, "stale", 0, T0).await);
    assert_eq!(get(&b, "stale").await.status, TaskStatus::Scheduled);
}

async fn claim_of_unknown_task_is_not_found(b: Backend) {
    match claim(&b, "nobody", 1, T0).await {
        Err(StoreError::NotFound(_)) => {}
        other => panic!("expected NotFound, got {other:?}"),
    }
}

/// Race: a worker dies mid-run; after `running_until` another worker takes over.
async fn claim_takes_over_a_lapsed_run(b: Backend) {
    put(&b, task().id("lapse").build(), T0).await;
    let first = claimed(&b, "lapse", 1, T0).await;
    let until = first.running_until.unwrap();
    conflict(claim(&b, "lapse", 1, until - 1).await);
    let second = claimed(&b, "lapse", 1, until + 1).await;
    assert_eq!(second.attempt, 2);
    assert_eq!(second.running_until, Some(until + 1 + 30_000));
}

/// Race: a worker dies on the task every time; the claims count attempts and it ends DEAD.
async fn claims_count_attempts_and_end_dead(b: Backend) {
    put(&b, task().id("crashy").max_attempts(2).build(), T0).await;
    let mut now = T0;
    for attempt in 1..=2 {
        let t = claimed(&b, "crashy", 1, now).await;
        assert_eq!(t.attempt, attempt);
        now = t.running_until.unwrap() + 1;
    }
    match claim(&b, "crashy", 1, now).await.unwrap() {
        ClaimOutcome::Exhausted(t) => {
            assert_eq!(t.status, TaskStatus::Dead);
            assert!(t.last_error.is_some(), "a dead task says why");
        }
        other => panic!("expected Exhausted, got {other:?}"),
    }
    assert_eq!(get(&b, "crashy").await.status, TaskStatus::Dead);
    conflict(claim(&b, "crashy", 1, now + 1).await);
    // A task the claim ended is on the dead list like one a completion ended.
    if b.tasks.capabilities().can_list(TaskStatus::Dead) {
        let dead = list_all(&b, by_status(TaskStatus::Dead), 10, now).await;
        assert_eq!(ids(&dead), vec!["crashy"]);
    }
}

async fn complete_succeeds_once(b: Backend) {
    put(&b, task().id("ok").build(), T0).await;
    let t = claimed(&b, "ok", 1, T0).await;
    let done = complete(&b, &t, Completion::Succeeded, T0 + 10)
        .await
        .unwrap();
    assert_eq!(done.status, TaskStatus::Succeeded);
    assert_eq!(done.running_until, None);
    assert_eq!(done.updated_ms, T0 + 10);
    conflict(complete(&b, &t, Completion::Succeeded, T0 + 11).await);
    conflict(claim(&b, "ok", 1, T0 + 100_000).await);
}

/// A worker whose claim lapsed cannot overwrite the outcome of the worker that took over.
async fn complete_is_fenced_by_attempt(b: Backend) {
    put(&b, task().id("fence").build(), T0).await;
    let slow = claimed(&b, "fence", 1, T0).await;
    let fast = claimed(&b, "fence", 1, slow.running_until.unwrap() + 1).await;
    conflict(
        complete(
            &b,
            &slow,
            Completion::Dead {
                error: "late".into(),
            },
            T0 + 40_000,
        )
        .await,
    );
    let done = complete(&b, &fast, Completion::Succeeded, T0 + 40_001)
        .await
        .unwrap();
    assert_eq!(done.status, TaskStatus::Succeeded);
}

fn claim_of(id: &str, version: u64, now_ms: i64) -> TaskClaim {
    TaskClaim {
        task_id: id.into(),
        version,
        now_ms,
        run_timeout_ms: 30_000,
    }
}

/// A batch of claims behaves as the same claims made one by one: a refused one (stale,
/// unknown, duplicate within the batch) fails alone and the others hold.
async fn claim_many_answers_each_claim_alone(b: Backend) {
    put(&b, task().id("m-a").build(), T0).await;
    put(&b, task().id("m-b").build(), T0).await;
    put(&b, task().id("m-spent").max_attempts(1).build(), T0).await;
    let spent = claimed(&b, "m-spent", 1, T0).await;
    let after = spent.running_until.unwrap() + 1;
    let got = b
        .tasks
        .task_claim_many(vec![
            claim_of("m-a", 1, after),
            claim_of("m-b", 2, after),
            claim_of("nobody", 1, after),
            claim_of("m-a", 1, after),
            claim_of("m-spent", 1, after),
        ])
        .await
        .unwrap();
    assert_eq!(got.len(), 5);
    let mut got = got.into_iter();
    match got.next().unwrap() {
        Ok(ClaimOutcome::Claimed(t)) => {
            assert_eq!((t.task_id.as_str(), t.attempt), ("m-a", 1));
            assert_eq!(t.status, TaskStatus::Running);
        }
        other => panic!("expected a claim, got {other:?}"),
    }
    conflict(got.next().unwrap());
    match got.next().unwrap() {
        Err(StoreError::NotFound(_)) => {}
        other => panic!("expected NotFound, got {other:?}"),
    }
    conflict(got.next().unwrap());
    match got.next().unwrap() {
        Ok(ClaimOutcome::Exhausted(t)) => assert_eq!(t.status, TaskStatus::Dead),
        other => panic!("expected Exhausted, got {other:?}"),
    }
    assert_eq!(get(&b, "m-a").await.attempt, 1);
    assert_eq!(get(&b, "m-b").await.status, TaskStatus::Scheduled);
    assert!(
        b.tasks
            .task_claim_many(Vec::new())
            .await
            .unwrap()
            .is_empty()
    );
}

/// A batch of completions behaves as the same completions written one by one: a lost claim
/// fails alone with `Conflict`, an unknown task with `NotFound`, and the others are written.
async fn complete_many_answers_each_completion_alone(b: Backend) {
    put(&b, task().id("c-ok").build(), T0).await;
    put(&b, task().id("c-retry").build(), T0).await;
    put(&b, task().id("c-lost").build(), T0).await;
    let ok = claimed(&b, "c-ok", 1, T0).await;
    let retry = claimed(&b, "c-retry", 1, T0).await;
    let lost = claimed(&b, "c-lost", 1, T0).await;
    let taken = claimed(&b, "c-lost", 1, lost.running_until.unwrap() + 1).await;
    let done = |t: &Task, outcome: Completion| TaskComplete {
        task_id: t.task_id.clone(),
        version: t.version,
        attempt: t.attempt,
        outcome,
        now_ms: T0 + 40_000,
    };
    let mut unknown = done(&ok, Completion::Succeeded);
    unknown.task_id = "nobody".into();
    let got = b
        .tasks
        .task_complete_many(vec![
            done(&ok, Completion::Succeeded),
            done(
                &retry,
                Completion::Retry {
                    next_due_ms: T0 + 50_000,
                    error: "boom".into(),
                    reindex: false,
                },
            ),
            done(&lost, Completion::Succeeded),
            unknown,
        ])
        .await
        .unwrap();
    assert_eq!(got.len(), 4);
    assert!(got[0].is_ok(), "{:?}", got[0]);
    assert!(got[1].is_ok(), "{:?}", got[1]);
    assert!(
        matches!(got[2], Err(StoreError::Conflict { .. })),
        "{:?}",
        got[2]
    );
    assert!(
        matches!(got[3], Err(StoreError::NotFound(_))),
        "{:?}",
        got[3]
    );
    assert_eq!(get(&b, "c-ok").await.status, TaskStatus::Succeeded);
    let r = get(&b, "c-retry").await;
    assert_eq!(r.status, TaskStatus::RetryWait);
    assert_eq!(
        (r.due_ms, r.last_error.as_deref()),
        (T0 + 50_000, Some("boom"))
    );
    let l = get(&b, "c-lost").await;
    assert_eq!((l.status, l.attempt), (TaskStatus::Running, taken.attempt));
    assert!(
        b.tasks
            .task_complete_many(Vec::new())
            .await
            .unwrap()
            .is_empty()
    );
}

async fn retry_through_visibility_keeps_task_out_of_index(b: Backend) {
    let t0 = put(&b, task().id("retry-v").build(), T0).await;
    let t = claimed(&b, "retry-v", 1, T0).await;
    let r = complete(
        &b,
        &t,
        Completion::Retry {
            next_due_ms: T0 + 500,
            error: "503".into(),
            reindex: false,
        },
        T0 + 10,
    )
    .await
    .unwrap();
    assert_eq!(r.status, TaskStatus::RetryWait);
    assert_eq!(r.due_ms, T0 + 500);
    assert_eq!(r.last_error.as_deref(), Some("503"));
    assert_eq!(r.due_bucket, None);
    assert!(
        due(&b, t0.shard, keys::minute_of(T0), T0 + 1_000)
            .await
            .is_empty()
    );
    // The redelivered message claims it again at the same version.
    let again = claimed(&b, "retry-v", 1, T0 + 600).await;
    assert_eq!(again.attempt, 2);
}

async fn retry_through_index_puts_task_back(b: Backend) {
    put(&b, task().id("retry-i").build(), T0).await;
    let t = claimed(&b, "retry-i", 1, T0).await;
    let next = T0 + 3 * MINUTE_MS;
    let r = complete(
        &b,
        &t,
        Completion::Retry {
            next_due_ms: next,
            error: "later".into(),
            reindex: true,
        },
        T0 + 10,
    )
    .await
    .unwrap();
    assert_eq!(r.status, TaskStatus::RetryWait);
    assert_eq!(
        r.due_bucket,
        Some(keys::due_bucket(r.shard, keys::minute_of(next)))
    );
    let got = due(&b, r.shard, keys::minute_of(next), next).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].version, 1);
    // The poller can dispatch a RETRY_WAIT task from the index.
    let n = b
        .tasks
        .task_mark_dispatched(TaskMarkDispatched {
            tasks: vec![("retry-i".into(), 1)],
            now_ms: next,
        })
        .await
        .unwrap();
    assert_eq!(n, 1);
    assert_eq!(claimed(&b, "retry-i", 1, next + 1).await.attempt, 2);
}

/// Invariant 5: a cancelled task never runs at its old version.
async fn cancel_beats_a_stale_message(b: Backend) {
    put(&b, task().id("cx").build(), T0).await;
    b.tasks
        .task_mark_dispatched(TaskMarkDispatched {
            tasks: vec![("cx".into(), 1)],
            now_ms: T0,
        })
        .await
        .unwrap();
    let c = b
        .tasks
        .task_cancel(TaskCancel {
            task_id: "cx".into(),
            expected_version: None,
            now_ms: T0 + 1,
        })
        .await
        .unwrap();
    assert_eq!(c.status, TaskStatus::Cancelled);
    assert_eq!(c.version, 2);
    assert_eq!(c.due_bucket, None);
    conflict(claim(&b, "cx", 1, T0 + 2).await);
    conflict(claim(&b, "cx", 2, T0 + 2).await);
    assert_eq!(get(&b, "cx").await.status, TaskStatus::Cancelled);
}

/// Invariant 5: a rescheduled task never runs at its old version or time.
async fn reschedule_beats_a_stale_message(b: Backend) {
    put(&b, task().id("rx").build(), T0).await;
    b.tasks
        .task_mark_dispatched(TaskMarkDispatched {
            tasks: vec![("rx".into(), 1)],
            now_ms: T0,
        })
        .await
        .unwrap();
    let later = T0 + 5 * MINUTE_MS;
    let r = b
        .tasks
        .task_reschedule(TaskReschedule {
            task_id: "rx".into(),
            due_ms: later,
            expected_version: Some(1),
            reset_attempts: false,
            now_ms: T0 + 1,
        })
        .await
        .unwrap();
    assert_eq!(
        (r.status, r.version, r.due_ms),
        (TaskStatus::Scheduled, 2, later)
    );
    assert_eq!(
        r.due_bucket,
        Some(keys::due_bucket(r.shard, keys::minute_of(later)))
    );
    conflict(claim(&b, "rx", 1, T0 + 2).await);
    assert_eq!(get(&b, "rx").await.status, TaskStatus::Scheduled);
    assert!(
        due(&b, r.shard, keys::minute_of(T0), T0 + 2)
            .await
            .is_empty()
    );
    assert_eq!(
        due(&b, r.shard, keys::minute_of(later), later).await[0].version,
        2
    );
}

async fn cancel_refuses_running_and_terminal_tasks(b: Backend) {
    put(&b, task().id("run").build(), T0).await;
    let t = claimed(&b, "run", 1, T0).await;
    let cancel = |id: &str| TaskCancel {
        task_id: id.into(),
        expected_version: None,
        now_ms: T0 + 1,
    };
    conflict(b.tasks.task_cancel(cancel("run")).await);
    conflict(
        b.tasks
            .task_reschedule(TaskReschedule {
                task_id: "run".into(),
                due_ms: T0,
                expected_version: None,
                reset_attempts: false,
                now_ms: T0 + 1,
            })
            .await,
    );
    complete(&b, &t, Completion::Succeeded, T0 + 2)
        .await
        .unwrap();
    conflict(b.tasks.task_cancel(cancel("run")).await);
    match b.tasks.task_cancel(cancel("ghost")).await {
        Err(StoreError::NotFound(_)) => {}
        other => panic!("expected NotFound, got {other:?}"),
    }
    assert_eq!(get(&b, "run").await.status, TaskStatus::Succeeded);
}

async fn operator_writes_check_expected_version(b: Backend) {
    put(&b, task().id("ver").build(), T0).await;
    conflict(
        b.tasks
            .task_cancel(TaskCancel {
                task_id: "ver".into(),
                expected_version: Some(7),
                now_ms: T0,
            })
            .await,
    );
    let r = b
        .tasks
        .task_reschedule(TaskReschedule {
            task_id: "ver".into(),
            due_ms: T0 + 1_000,
            expected_version: Some(1),
            reset_attempts: false,
            now_ms: T0,
        })
        .await
        .unwrap();
    assert_eq!(r.version, 2);
    conflict(
        b.tasks
            .task_reschedule(TaskReschedule {
                task_id: "ver".into(),
                due_ms: T0 + 2_000,
                expected_version: Some(1),
                reset_attempts: false,
                now_ms: T0,
            })
            .await,
    );
    assert_eq!(get(&b, "ver").await.due_ms, T0 + 1_000);
}

fn edit(id: &str, expected_version: Option<u64>, now_ms: i64) -> TaskUpdate {
    TaskUpdate {
        task_id: id.into(),
        expected_version,
        payload: None,
        max_attempts: None,
        backoff: None,
        now_ms,
    }
}

async fn update_edits_payload_and_policy(b: Backend) {
    let t0 = put(&b, task().id("ed").build(), T0).await;
    let backoff = Backoff {
        base_ms: 7,
        max_ms: 70,
    };
    let u = b
        .tasks
        .task_update(TaskUpdate {
            payload: Some(serde_json::json!({"edited": true})),
            max_attempts: Some(9),
            backoff: Some(backoff),
            ..edit("ed", Some(1), T0 + 1)
        })
        .await
        .unwrap();
    assert_eq!(
        (u.status, u.version, u.due_ms, u.attempt),
        (TaskStatus::Scheduled, 2, t0.due_ms, 0)
    );
    assert_eq!(u.payload, serde_json::json!({"edited": true}));
    assert_eq!((u.max_attempts, u.backoff), (9, backoff));
    assert_eq!(u.due_bucket, t0.due_bucket);
    assert_eq!(get(&b, "ed").await, u);
    // The index carries the new version, so the poll sends what was edited.
    let got = due(&b, u.shard, keys::minute_of(T0), T0 + 2).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].version, 2);
    // Fields left out are kept.
    let u2 = b
        .tasks
        .task_update(TaskUpdate {
            max_attempts: Some(3),
            ..edit("ed", None, T0 + 3)
        })
        .await
        .unwrap();
    assert_eq!((u2.version, u2.max_attempts), (3, 3));
    assert_eq!(u2.payload, serde_json::json!({"edited": true}));
    assert_eq!(u2.backoff, backoff);
    // A terminal task may be edited before a replay; it stays terminal and out of the index.
    let t = claimed(&b, "ed", 3, T0 + 4).await;
    complete(&b, &t, Completion::Succeeded, T0 + 5)
        .await
        .unwrap();
    let u3 = b
        .tasks
        .task_update(edit("ed", Some(3), T0 + 6))
        .await
        .unwrap();
    assert_eq!(
        (u3.status, u3.version, u3.due_bucket),
        (TaskStatus::Succeeded, 4, None)
    );
    match b.tasks.task_update(edit("ghost", None, T0)).await {
        Err(StoreError::NotFound(_)) => {}
        other => panic!("expected NotFound, got {other:?}"),
    }
}

/// Invariants 1 and 5: editing a dispatched task makes its message stale, so the task goes
/// back into the due index at its due time and is sent again at the new version.
async fn update_of_a_dispatched_task_beats_the_stale_message(b: Backend) {
    let t0 = put(&b, task().id("edx").build(), T0).await;
    b.tasks
        .task_mark_dispatched(TaskMarkDispatched {
            tasks: vec![("edx".into(), 1)],
            now_ms: T0,
        })
        .await
        .unwrap();
    assert!(due(&b, t0.shard, keys::minute_of(T0), T0).await.is_empty());
    let now = T0 + 2 * MINUTE_MS;
    let u = b
        .tasks
        .task_update(TaskUpdate {
            payload: Some(serde_json::json!("v2")),
            ..edit("edx", None, now)
        })
        .await
        .unwrap();
    assert_eq!(
        (u.status, u.version, u.due_ms),
        (TaskStatus::Scheduled, 2, T0)
    );
    // Past due: filed under the current minute, never one the poller has passed.
    assert_eq!(
        u.due_bucket,
        Some(keys::due_bucket(u.shard, keys::minute_of(now)))
    );
    conflict(claim(&b, "edx", 1, now + 1).await);
    let got = due(&b, u.shard, keys::minute_of(now), now + 1).await;
    assert_eq!(got.len(), 1);
    assert_eq!((got[0].task_id.as_str(), got[0].version), ("edx", 2));
    let run = claimed(&b, "edx", 2, now + 2).await;
    assert_eq!(run.payload, serde_json::json!("v2"));
}

/// A retry waiting out a visibility timeout lives only in its message; an edit makes that
/// message stale, so the task must go back to the due index at its next attempt's time.
async fn update_of_a_retry_through_visibility_goes_back_to_the_index(b: Backend) {
    put(&b, task().id("edr").build(), T0).await;
    let t = claimed(&b, "edr", 1, T0).await;
    let next = T0 + 30_000;
    complete(
        &b,
        &t,
        Completion::Retry {
            next_due_ms: next,
            error: "503".into(),
            reindex: false,
        },
        T0 + 10,
    )
    .await
    .unwrap();
    let u = b
        .tasks
        .task_update(edit("edr", Some(1), T0 + 20))
        .await
        .unwrap();
    assert_eq!(
        (u.status, u.version, u.due_ms),
        (TaskStatus::RetryWait, 2, next)
    );
    assert_eq!(
        u.due_bucket,
        Some(keys::due_bucket(u.shard, keys::minute_of(next)))
    );
    conflict(claim(&b, "edr", 1, next).await);
    let got = due(&b, u.shard, keys::minute_of(next), next).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].version, 2);
    assert_eq!(claimed(&b, "edr", 2, next + 1).await.attempt, 2);
}

async fn update_refuses_running_and_checks_version(b: Backend) {
    put(&b, task().id("edv").build(), T0).await;
    conflict(b.tasks.task_update(edit("edv", Some(7), T0)).await);
    assert_eq!(get(&b, "edv").await.version, 1);
    let t = claimed(&b, "edv", 1, T0).await;
    conflict(
        b.tasks
            .task_update(TaskUpdate {
                payload: Some(serde_json::json!("no")),
                ..edit("edv", None, T0 + 1)
            })
            .await,
    );
    let still = get(&b, "edv").await;
    assert_eq!((still.status, still.version), (TaskStatus::Running, 1));
    assert_eq!(still.payload, t.payload);
}

async fn due_backlog_counts_each_minute_across_shards(b: Backend) {
    let m0 = keys::minute_of(T0);
    let n = b.tasks.shard_count();
    // Minute m0 + k holds k + 1 tasks spread over the shards; one more is dispatched (out of
    // the index) and one is due after the window.
    for k in 0..3i64 {
        for i in 0..=k {
            let id = format!("bl-{k}-{i}");
            put(&b, task().id(&id).due(T0 + k * MINUTE_MS + i).build(), T0).await;
        }
    }
    put(&b, task().id("bl-late").due(T0 + 5 * MINUTE_MS).build(), T0).await;
    put(&b, task().id("bl-gone").due(T0).build(), T0).await;
    b.tasks
        .task_mark_dispatched(TaskMarkDispatched {
            tasks: vec![("bl-gone".into(), 1)],
            now_ms: T0,
        })
        .await
        .unwrap();
    let counts = b
        .tasks
        .due_backlog(DueBacklog {
            from_minute: m0,
            minutes: 4,
        })
        .await
        .unwrap();
    assert_eq!(counts, vec![1, 2, 3, 0], "{n} shards");
    let later = b
        .tasks
        .due_backlog(DueBacklog {
            from_minute: m0 + 1,
            minutes: 5,
        })
        .await
        .unwrap();
    assert_eq!(later, vec![2, 3, 0, 0, 1]);
}

async fn replay_brings_a_dead_task_back(b: Backend) {
    put(&b, task().id("phoenix").max_attempts(1).build(), T0).await;
    let t = claimed(&b, "phoenix", 1, T0).await;
    complete(
        &b,
        &t,
        Completion::Dead {
            error: "400".into(),
        },
        T0 + 1,
    )
    .await
    .unwrap();
    let r = b
        .tasks
        .task_reschedule(TaskReschedule {
            task_id: "phoenix".into(),
            due_ms: T0 + 2,
            expected_version: None,
            reset_attempts: true,
            now_ms: T0 + 2,
        })
        .await
        .unwrap();
    assert_eq!(
        (r.status, r.version, r.attempt),
        (TaskStatus::Scheduled, 2, 0)
    );
    assert_eq!(r.last_error, None);
    assert_eq!(due(&b, r.shard, keys::minute_of(T0), T0 + 2).await.len(), 1);
    assert_eq!(claimed(&b, "phoenix", 2, T0 + 3).await.attempt, 1);
}

async fn list_pending_in_due_order_in_pages(b: Backend) {
    let tasks: Vec<_> = (0..30)
        .map(|i| {
            task()
                .id(format!("lp-{i:02}"))
                .due_in(((i * 7) % 30) * 30_000)
                .build()
        })
        .collect();
    b.tasks
        .task_put_batch(TaskPutBatch { tasks, now_ms: T0 })
        .await
        .unwrap();
    // Two leave the index: one dispatched, one cancelled.
    b.tasks
        .task_mark_dispatched(TaskMarkDispatched {
            tasks: vec![("lp-00".into(), 1)],
            now_ms: T0,
        })
        .await
        .unwrap();
    b.tasks
        .task_cancel(TaskCancel {
            task_id: "lp-01".into(),
            expected_version: None,
            now_ms: T0,
        })
        .await
        .unwrap();
    let mut all = Vec::new();
    let mut after = None;
    loop {
        let page = b
            .tasks
            .task_list_pending(TaskListPending {
                after_key: after,
                limit: 7,
            })
            .await
            .unwrap();
        assert!(page.items.len() <= 7);
        all.extend(page.items);
        match page.next {
            Some(n) => after = Some(n),
            None => break,
        }
    }
    assert_eq!(all.len(), 28);
    let dues: Vec<_> = all.iter().map(|t| t.due_key()).collect();
    let mut sorted = dues.clone();
    sorted.sort();
    assert_eq!(dues, sorted);
    assert!(all.iter().all(|t| t.status == TaskStatus::Scheduled));
}

// ---- filtered listing ------------------------------------------------------------------

/// Every page of a listing, followed to its end; checks each page's size and that the whole
/// is in due order without repeats.
async fn list_all(b: &Backend, filter: TaskFilter, limit: usize, now_ms: i64) -> Vec<Task> {
    let mut all: Vec<Task> = Vec::new();
    let mut after = None;
    for _ in 0..10_000 {
        let page = b
            .tasks
            .task_list(TaskList {
                filter: filter.clone(),
                after_key: after,
                limit,
                now_ms,
            })
            .await
            .unwrap_or_else(|e| panic!("listing {filter:?}: {e}"));
        assert!(page.items.len() <= limit, "page larger than {limit}");
        all.extend(page.items);
        match page.next {
            Some(n) => after = Some(n),
            None => {
                let keys: Vec<String> = all.iter().map(Task::due_key).collect();
                let mut sorted = keys.clone();
                sorted.sort();
                sorted.dedup();
                assert_eq!(keys, sorted, "{filter:?}: in due order, each once");
                return all;
            }
        }
    }
    panic!("listing {filter:?} does not end");
}

fn ids(tasks: &[Task]) -> Vec<String> {
    tasks.iter().map(|t| t.task_id.clone()).collect()
}

/// What a listing should return: the tasks as they are now that pass `filter`, in due order.
async fn expected(b: &Backend, all_ids: &[String], filter: &TaskFilter) -> Vec<String> {
    let mut tasks = Vec::new();
    for id in all_ids {
        let t = get(b, id).await;
        if filter.matches(&t) {
            tasks.push(t);
        }
    }
    tasks.sort_by_key(Task::due_key);
    ids(&tasks)
}

/// Puts `n` tasks named `{prefix}{i:02}`, due every 20 s from `T0`, with targets cycling
/// through log, http and handler; returns their ids.
async fn put_mix(b: &Backend, prefix: &str, n: i64) -> Vec<String> {
    let tasks: Vec<NewTask> = (0..n)
        .map(|i| {
            let t = task().id(format!("{prefix}{i:02}")).due_in(i * 20_000);
            match i % 3 {
                0 => t,
                1 => t.http("http://127.0.0.1:9/hook"),
                _ => t.handler("h"),
            }
            .build()
        })
        .collect();
    let all = tasks.iter().map(|t| t.task_id.clone()).collect();
    b.tasks
        .task_put_batch(TaskPutBatch { tasks, now_ms: T0 })
        .await
        .unwrap();
    all
}

/// Ends a claimed task `DEAD`.
async fn kill(b: &Backend, id: &str, now_ms: i64) -> Task {
    let t = claimed(b, id, 1, now_ms).await;
    complete(
        b,
        &t,
        Completion::Dead {
            error: "boom".into(),
        },
        now_ms,
    )
    .await
    .unwrap()
}

async fn cancel_task(b: &Backend, id: &str, now_ms: i64) -> Task {
    b.tasks
        .task_cancel(TaskCancel {
            task_id: id.into(),
            expected_version: None,
            now_ms,
        })
        .await
        .unwrap()
}

fn by_status(status: TaskStatus) -> TaskFilter {
    TaskFilter {
        status: Some(status),
        ..TaskFilter::default()
    }
}

async fn list_by_each_status_or_refuses_it_by_capability(b: Backend) {
    let all = put_mix(&b, "st-", 14).await;
    // 0, 1 stay SCHEDULED; 2 DISPATCHED; 3 RUNNING; 4 SUCCEEDED; 5, 6 DEAD; 7, 8 CANCELLED;
    // 9 RETRY_WAIT back in the due index; the rest SCHEDULED.
    let now = T0 + 1_000;
    b.tasks
        .task_mark_dispatched(TaskMarkDispatched {
            tasks: vec![("st-02".into(), 1)],
            now_ms: now,
        })
        .await
        .unwrap();
    claimed(&b, "st-03", 1, now).await;
    let t = claimed(&b, "st-04", 1, now).await;
    complete(&b, &t, Completion::Succeeded, now).await.unwrap();
    kill(&b, "st-05", now).await;
    kill(&b, "st-06", now).await;
    cancel_task(&b, "st-07", now).await;
    cancel_task(&b, "st-08", now).await;
    let t = claimed(&b, "st-09", 1, now).await;
    let retry = Completion::Retry {
        next_due_ms: T0 + 300_000,
        error: "again".into(),
        reindex: true,
    };
    complete(&b, &t, retry, now).await.unwrap();
    let caps = b.tasks.capabilities();
    for status in ALL_STATUSES {
        let filter = by_status(status);
        if !caps.can_list(status) {
            match b
                .tasks
                .task_list(TaskList {
                    filter,
                    after_key: None,
                    limit: 10,
                    now_ms: now,
                })
                .await
            {
                Err(StoreError::Invalid { field, .. }) => assert_eq!(field, "status"),
                other => panic!("listing {status} should be refused: {other:?}"),
            }
            println!("conformance: skipped listing {status}: the backend cannot list it");
            continue;
        }
        let want = expected(&b, &all, &filter).await;
        assert!(!want.is_empty(), "the fixture has {status} tasks");
        assert_eq!(ids(&list_all(&b, filter, 4, now).await), want, "{status}");
    }
    // No status: what waits in the due index, the retry included.
    let waiting = list_all(&b, TaskFilter::default(), 4, now).await;
    assert_eq!(
        ids(&waiting),
        expected(&b, &all, &TaskFilter::default()).await
    );
    assert!(ids(&waiting).contains(&"st-09".to_owned()));
}

async fn list_filters_by_due_window_target_and_id_prefix(b: Backend) {
    let mut all = put_mix(&b, "fa-", 12).await;
    all.extend(put_mix(&b, "fb-", 12).await);
    let now = T0 + 1_000;
    let dead = b.tasks.capabilities().can_list(TaskStatus::Dead);
    for id in [
        "fa-01", "fa-04", "fa-05", "fa-09", "fb-01", "fb-03", "fb-07",
    ] {
        kill(&b, id, now).await;
    }
    let window = (Some(T0 + 60_000), Some(T0 + 160_000));
    let statuses = if dead {
        vec![None, Some(TaskStatus::Dead)]
    } else {
        vec![None]
    };
    for status in statuses {
        let mut filters = Vec::new();
        for (due_from_ms, due_to_ms) in [(None, None), (window.0, None), (None, window.1), window] {
            for target_kind in [None, Some(TargetKind::Http), Some(TargetKind::Log)] {
                for id_prefix in [None, Some("fb-".to_owned()), Some("fa-0".to_owned())] {
                    filters.push(TaskFilter {
                        status,
                        due_from_ms,
                        due_to_ms,
                        target_kind,
                        id_prefix,
                    });
                }
            }
        }
        for filter in filters {
            let want = expected(&b, &all, &filter).await;
            let got = list_all(&b, filter.clone(), 5, now).await;
            assert_eq!(ids(&got), want, "{filter:?}");
        }
    }
    // Every field at once, exactly: the window's bounds are inclusive, then exclusive.
    let exact = TaskFilter {
        status: None,
        due_from_ms: Some(T0 + 40_000),
        due_to_ms: Some(T0 + 140_000),
        target_kind: Some(TargetKind::Handler),
        id_prefix: Some("fa-".into()),
    };
    assert_eq!(ids(&list_all(&b, exact, 10, now).await), vec!["fa-02"]);
}

async fn list_pages_finished_tasks_across_shards(b: Backend) {
    let all = put_mix(&b, "pg-", 25).await;
    let now = T0 + 2_000;
    let caps = b.tasks.capabilities();
    for (i, id) in all.iter().enumerate() {
        if i % 5 == 0 {
            continue; // stays waiting
        }
        if i % 2 == 0 {
            kill(&b, id, now).await;
        } else {
            cancel_task(&b, id, now).await;
        }
    }
    for status in [TaskStatus::Dead, TaskStatus::Cancelled] {
        if !caps.can_list(status) {
            println!("conformance: skipped paging {status}: the backend cannot list it");
            continue;
        }
        let want = expected(&b, &all, &by_status(status)).await;
        assert_eq!(want.len(), 10, "{status}");
        let shards: std::collections::HashSet<u32> = {
            let mut s = std::collections::HashSet::new();
            for id in &want {
                s.insert(get(&b, id).await.shard);
            }
            s
        };
        assert!(shards.len() > 1, "the fixture spreads {status} over shards");
        for limit in [1, 3, 10, 50] {
            let got = list_all(&b, by_status(status), limit, now).await;
            assert_eq!(ids(&got), want, "{status} in pages of {limit}");
        }
    }
}

async fn list_of_nothing_is_an_empty_last_page(b: Backend) {
    let caps = b.tasks.capabilities();
    let mut filters = vec![TaskFilter::default()];
    filters.extend(caps.list_statuses.iter().map(|s| by_status(*s)));
    // Nothing stored yet.
    for f in &filters {
        assert!(list_all(&b, f.clone(), 10, T0).await.is_empty(), "{f:?}");
    }
    put_mix(&b, "em-", 6).await;
    kill(&b, "em-01", T0).await;
    cancel_task(&b, "em-02", T0).await;
    // Stored, but none matches.
    for f in filters {
        let none = TaskFilter {
            id_prefix: Some("zz".into()),
            ..f.clone()
        };
        assert!(list_all(&b, none, 10, T0).await.is_empty(), "{f:?}");
        let before = TaskFilter {
            due_to_ms: Some(T0 - 3_600_000),
            ..f.clone()
        };
        assert!(list_all(&b, before, 10, T0).await.is_empty(), "{f:?}");
        let handler_after = TaskFilter {
            due_from_ms: Some(T0 + 101_000),
            target_kind: Some(TargetKind::Handler),
            ..f
        };
        assert!(list_all(&b, handler_after, 10, T0).await.is_empty());
    }
}

async fn replay_takes_a_task_off_its_finished_list(b: Backend) {
    put_mix(&b, "rp-", 3).await;
    let dead = kill(&b, "rp-00", T0).await;
    let gone = cancel_task(&b, "rp-01", T0).await;
    for (t, status) in [(dead, TaskStatus::Dead), (gone, TaskStatus::Cancelled)] {
        if !b.tasks.capabilities().can_list(status) {
            println!("conformance: skipped replay listing {status}: the backend cannot list it");
            continue;
        }
        assert_eq!(
            ids(&list_all(&b, by_status(status), 10, T0).await),
            vec![t.task_id.clone()]
        );
        b.tasks
            .task_reschedule(TaskReschedule {
                task_id: t.task_id.clone(),
                due_ms: T0 + 5_000,
                expected_version: Some(t.version),
                reset_attempts: true,
                now_ms: T0 + 1,
            })
            .await
            .unwrap();
        assert!(list_all(&b, by_status(status), 10, T0 + 1).await.is_empty());
        let waiting = ids(&list_all(&b, TaskFilter::default(), 10, T0 + 1).await);
        assert!(waiting.contains(&t.task_id), "{waiting:?}");
    }
    // Dead again after the replay: back on the list.
    if b.tasks.capabilities().can_list(TaskStatus::Dead) {
        let t = claimed(&b, "rp-00", 2, T0 + 10_000).await;
        complete(&b, &t, Completion::Dead { error: "x".into() }, T0 + 10_000)
            .await
            .unwrap();
        assert_eq!(
            ids(&list_all(&b, by_status(TaskStatus::Dead), 10, T0 + 10_000).await),
            vec!["rp-00"]
        );
    }
}

async fn counts_follow_every_status_change(b: Backend) {
    if !b.tasks.capabilities().status_counts {
        println!("conformance: skipped counts: the backend cannot count by status cheaply");
        return;
    }
    let all = put_mix(&b, "ct-", 8).await;
    b.tasks
        .task_mark_dispatched(TaskMarkDispatched {
            tasks: vec![("ct-00".into(), 1)],
            now_ms: T0,
        })
        .await
        .unwrap();
    claimed(&b, "ct-01", 1, T0).await;
    kill(&b, "ct-02", T0).await;
    cancel_task(&b, "ct-03", T0).await;
    let t = claimed(&b, "ct-04", 1, T0).await;
    complete(&b, &t, Completion::Succeeded, T0).await.unwrap();
    // An existing id is not counted twice.
    b.tasks
        .task_put(TaskPut {
            task: task().id("ct-05").build(),
            now_ms: T0,
        })
        .await
        .unwrap();
    let mut want = StatusCounts::default();
    for id in &all {
        *want.slot(get(&b, id).await.status) += 1;
    }
    assert_eq!(want.scheduled, 3);
    assert_eq!(b.tasks.task_counts().await.unwrap(), want);
}

async fn dlq_get_finds_a_letter_by_id(b: Backend) {
    send(&b, vec![msg("dg1", 1), msg("dg2", 1)], T0).await;
    for m in receive(&b, 10, 30_000, T0).await {
        b.queue
            .queue_dead_letter(QueueDeadLetter {
                receipt: m.receipt,
                message: m.message,
                reason: "dead".into(),
                now_ms: T0,
            })
            .await
            .unwrap();
    }
    let listed = b
        .queue
        .dlq_list(DlqList {
            after: None,
            limit: 10,
        })
        .await
        .unwrap();
    assert_eq!(listed.items.len(), 2);
    for l in &listed.items {
        let got = b.queue.dlq_get(&l.id).await.unwrap();
        assert_eq!(got.as_ref(), Some(l));
    }
    b.queue
        .dlq_delete(std::slice::from_ref(&listed.items[0].id))
        .await
        .unwrap();
    assert_eq!(b.queue.dlq_get(&listed.items[0].id).await.unwrap(), None);
    assert_eq!(b.queue.dlq_get("no-such-letter").await.unwrap(), None);
    assert_eq!(b.queue.dlq_get("12345").await.unwrap(), None);
}

// ---- queue ----------------------------------------------------------------------------

async fn queue_send_receive_delete(b: Backend) {
    send(&b, vec![msg("q1", 1), msg("q2", 3)], T0).await;
    let got = receive(&b, 10, 30_000, T0).await;
    assert_eq!(got.len(), 2);
    let mut ids: Vec<_> = got
        .iter()
        .map(|m| (m.message.task_id.as_str(), m.message.version))
        .collect();
    ids.sort();
    assert_eq!(ids, vec![("q1", 1), ("q2", 3)]);
    assert!(got.iter().all(|m| m.receive_count == 1));
    let receipts: Vec<_> = got.iter().map(|m| m.receipt.clone()).collect();
    b.queue.queue_delete(&receipts).await.unwrap();
    b.queue.queue_delete(&receipts).await.unwrap(); // unknown receipts are ignored
    assert!(receive(&b, 10, 30_000, T0 + 60_000).await.is_empty());
    let depth = b.queue.queue_depth(T0 + 60_000).await.unwrap();
    assert_eq!(depth, QueueDepth::default());
}

async fn queue_visibility_hides_then_redelivers(b: Backend) {
    send(&b, vec![msg("vis", 1)], T0).await;
    let first = receive(&b, 10, 1_000, T0).await;
    assert_eq!(first.len(), 1);
    assert!(
        receive(&b, 10, 1_000, T0 + 999).await.is_empty(),
        "hidden while in flight"
    );
    let depth = b.queue.queue_depth(T0 + 500).await.unwrap();
    assert_eq!((depth.ready, depth.in_flight), (0, 1));
    let second = receive(&b, 10, 1_000, T0 + 1_000).await;
    assert_eq!(second.len(), 1, "visible again after the timeout");
    assert_eq!(second[0].receive_count, 2);
    assert_eq!(second[0].message, first[0].message);
    b.queue
        .queue_delete(&[second[0].receipt.clone()])
        .await
        .unwrap();
    assert!(receive(&b, 10, 1_000, T0 + 10_000).await.is_empty());
}

async fn queue_change_visibility_delays(b: Backend) {
    send(&b, vec![msg("delay", 1)], T0).await;
    let got = receive(&b, 1, 30_000, T0).await;
    b.queue
        .queue_change_visibility(QueueVisibility {
            receipt: got[0].receipt.clone(),
            visibility_ms: 200,
            now_ms: T0 + 10,
        })
        .await
        .unwrap();
    assert!(receive(&b, 1, 30_000, T0 + 209).await.is_empty());
    let again = receive(&b, 1, 30_000, T0 + 210).await;
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].receive_count, 2);
}

async fn queue_receive_count_moves_to_dlq(b: Backend) {
    let max = b.queue.max_receive_count();
    send(&b, vec![msg("poison", 1)], T0).await;
    let mut now = T0;
    for i in 1..=max {
        let got = receive(&b, 1, 100, now).await;
        assert_eq!(got.len(), 1, "receive {i} of {max}");
        assert_eq!(got[0].receive_count, i);
        now += 100;
    }
    // One more receive would pass maxReceiveCount: the message goes to the DLQ instead.
    assert!(receive(&b, 1, 100, now).await.is_empty());
    let dlq = b
        .queue
        .dlq_list(DlqList {
            after: None,
            limit: 10,
        })
        .await
        .unwrap();
    assert_eq!(dlq.items.len(), 1);
    assert_eq!(dlq.items[0].message, msg("poison", 1));
    assert_eq!(b.queue.queue_depth(now).await.unwrap().dead, 1);
}

async fn queue_dead_letter_list_delete(b: Backend) {
    send(&b, vec![msg("d1", 1), msg("d2", 1), msg("d3", 1)], T0).await;
    let got = receive(&b, 10, 30_000, T0).await;
    for (i, m) in got.iter().enumerate() {
        b.queue
            .queue_dead_letter(QueueDeadLetter {
                receipt: m.receipt.clone(),
                message: m.message.clone(),
                reason: format!("reason {i}"),
                now_ms: T0 + i as i64,
            })
            .await
            .unwrap();
    }
    assert!(
        receive(&b, 10, 30_000, T0 + 60_000).await.is_empty(),
        "moved, not copied"
    );
    let first = b
        .queue
        .dlq_list(DlqList {
            after: None,
            limit: 2,
        })
        .await
        .unwrap();
    assert_eq!(first.items.len(), 2);
    assert!(first.items[0].reason.starts_with("reason"));
    let rest = b
        .queue
        .dlq_list(DlqList {
            after: first.next.clone(),
            limit: 2,
        })
        .await
        .unwrap();
    assert_eq!(rest.items.len(), 1);
    assert_eq!(rest.next, None);
    let mut all: Vec<_> = first
        .items
        .iter()
        .chain(&rest.items)
        .map(|d| d.message.task_id.clone())
        .collect();
    all.sort();
    assert_eq!(all, vec!["d1", "d2", "d3"]);
    b.queue
        .dlq_delete(&[first.items[0].id.clone()])
        .await
        .unwrap();
    let left = b
        .queue
        .dlq_list(DlqList {
            after: None,
            limit: 10,
        })
        .await
        .unwrap();
    assert_eq!(left.items.len(), 2);
    assert_eq!(b.queue.queue_depth(T0 + 60_000).await.unwrap().dead, 2);
}

async fn queue_long_poll_returns_when_sent(b: Backend) {
    let q = b.queue.clone();
    let receiver = tokio::spawn(async move {
        let start = std::time::Instant::now();
        let got = q
            .queue_receive(QueueReceive {
                max: 1,
                visibility_ms: 30_000,
                wait_ms: 5_000,
                now_ms: T0,
            })
            .await
            .unwrap();
        (got, start.elapsed())
    });
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    send(&b, vec![msg("lp", 1)], T0).await;
    let (got, waited) = receiver.await.unwrap();
    assert_eq!(got.len(), 1, "long poll sees a message sent while it waits");
    assert!(
        waited < std::time::Duration::from_millis(4_000),
        "returned early: {waited:?}"
    );
}

// ---- leases ---------------------------------------------------------------------------

async fn lease_acquire_conflicts_while_held(b: Backend) {
    let l = b.leases.lease_acquire(lease_acq(3, "a", T0)).await.unwrap();
    assert_eq!(
        (l.shard, l.owner.as_str(), l.expires_ms),
        (3, "a", T0 + 10_000)
    );
    assert!(l.epoch >= 1);
    assert_eq!(
        l.watermark_minute,
        b.tasks.created_minute(),
        "a new shard starts at the store's birth"
    );
    conflict(b.leases.lease_acquire(lease_acq(3, "b", T0 + 9_999)).await);
    let other = b.leases.lease_acquire(lease_acq(4, "b", T0)).await.unwrap();
    assert_eq!(other.owner, "b");
    let mut all = b.leases.lease_list().await.unwrap();
    all.sort_by_key(|l| l.shard);
    assert_eq!(
        all.iter()
            .map(|l| (l.shard, l.owner.as_str()))
            .collect::<Vec<_>>(),
        vec![(3, "a"), (4, "b")]
    );
}

async fn lease_renew_and_expiry(b: Backend) {
    let l = b.leases.lease_acquire(lease_acq(0, "a", T0)).await.unwrap();
    let r = b
        .leases
        .lease_renew(lease_renew(&l, None, T0 + 3_000))
        .await
        .unwrap();
    assert_eq!((r.expires_ms, r.epoch), (T0 + 13_000, l.epoch));
    // Renewing past expiry fails: the holder must stop dispatching.
    conflict(
        b.leases
            .lease_renew(lease_renew(&l, None, T0 + 13_000))
            .await,
    );
    // A stale epoch cannot renew either.
    let mut stale = r.clone();
    stale.epoch += 1;
    conflict(
        b.leases
            .lease_renew(lease_renew(&stale, None, T0 + 4_000))
            .await,
    );
    conflict(
        b.leases
            .lease_renew(LeaseRenew {
                owner: "intruder".into(),
                ..lease_renew(&r, None, T0 + 4_000)
            })
            .await,
    );
}

async fn lease_takeover_increases_epoch_and_keeps_watermark(b: Backend) {
    let a = b.leases.lease_acquire(lease_acq(1, "a", T0)).await.unwrap();
    let wm = keys::minute_of(T0) + 2;
    b.leases
        .lease_renew(lease_renew(&a, Some(wm), T0 + 1_000))
        .await
        .unwrap();
    // a stops renewing; once expired, b takes over where a left the watermark.
    conflict(b.leases.lease_acquire(lease_acq(1, "b", T0 + 10_999)).await);
    let t = b
        .leases
        .lease_acquire(lease_acq(1, "b", T0 + 11_001))
        .await
        .unwrap();
    assert_eq!(t.owner, "b");
    assert!(t.epoch > a.epoch);
    assert_eq!(t.watermark_minute, wm);
    // The old holder's renewal now fails.
    conflict(
        b.leases
            .lease_renew(lease_renew(&a, None, T0 + 11_002))
            .await,
    );
}

async fn lease_release_frees_at_once(b: Backend) {
    let a = b.leases.lease_acquire(lease_acq(2, "a", T0)).await.unwrap();
    let wm = keys::minute_of(T0) + 1;
    b.leases
        .lease_release(LeaseRelease {
            shard: 2,
            owner: "a".into(),
            epoch: a.epoch,
            watermark_minute: wm,
        })
        .await
        .unwrap();
    let t = b
        .leases
        .lease_acquire(lease_acq(2, "b", T0 + 1))
        .await
        .unwrap();
    assert_eq!(t.watermark_minute, wm);
    assert!(t.epoch > a.epoch);
    conflict(
        b.leases
            .lease_release(LeaseRelease {
                shard: 2,
                owner: "a".into(),
                epoch: a.epoch,
                watermark_minute: wm,
            })
            .await,
    );
}

async fn members_beat_list_and_remove(b: Backend) {
    assert_eq!(b.leases.member_list().await.unwrap(), vec![]);
    let beat = |owner: &str, now_ms: i64| MemberBeat {
        owner: owner.into(),
        ttl_ms: 10_000,
        now_ms,
    };
    b.leases.member_beat(beat("a", T0)).await.unwrap();
    b.leases.member_beat(beat("b", T0)).await.unwrap();
    // A second beat moves the expiry; it does not add a row.
    b.leases.member_beat(beat("a", T0 + 4_000)).await.unwrap();
    let mut all = b.leases.member_list().await.unwrap();
    all.sort_by(|x, y| x.owner.cmp(&y.owner));
    let member = |owner: &str, expires_ms: i64| Member {
        owner: owner.into(),
        expires_ms,
    };
    assert_eq!(
        all,
        vec![member("a", T0 + 14_000), member("b", T0 + 10_000)]
    );

    // A peer's removal holds only if the row did not change since it was listed.
    let stale = MemberRemove {
        owner: "a".into(),
        if_expires_ms: Some(T0 + 10_000),
    };
    conflict(b.leases.member_remove(stale).await);
    b.leases
        .member_remove(MemberRemove {
            owner: "b".into(),
            if_expires_ms: Some(T0 + 10_000),
        })
        .await
        .unwrap();
    // Its own removal is unconditional, and removing what is gone is not an error.
    for _ in 0..2 {
        b.leases
            .member_remove(MemberRemove {
                owner: "a".into(),
                if_expires_ms: None,
            })
            .await
            .unwrap();
    }
    assert_eq!(b.leases.member_list().await.unwrap(), vec![]);
    // Members are not leases.
    assert_eq!(b.leases.lease_list().await.unwrap(), vec![]);
}
