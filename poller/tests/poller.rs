//! The poller against the embedded store, driven tick by tick with a manual clock.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use punctual_core::keys::{due_bucket, minute_of};
use punctual_core::store::{LeaseAcquire, TaskCancel};
use punctual_core::testkit::{T0, task};
use punctual_core::{Backend, Clock, ManualClock, TaskStatus};
use punctual_poller::{
    LeaseManager, Poller, PollerConfig, PollerDeps, PollerError, PollerEvent, ShardPoller,
    StopReason,
};
use support::{Env, SlowIndex, config, setup};
use tokio::sync::mpsc;

const M0: i64 = T0 / 60_000;

/// Ticks `poller` every second of the manual clock until it reads `until_ms`.
async fn tick_until(env: &Env, poller: &mut Poller, until_ms: i64) -> usize {
    let mut sent = 0;
    while env.now() < until_ms {
        env.clock.advance(1_000);
        let t = poller.tick().await;
        assert!(t.errors.is_empty(), "{:?}", t.errors);
        assert!(t.lost.is_empty(), "lost {:?}", t.lost);
        sent += t.sent();
    }
    sent
}

fn counts(ids: &[String]) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for id in ids {
        *m.entry(id.clone()).or_default() += 1;
    }
    m
}

#[tokio::test]
async fn only_due_tasks_are_sent_in_due_order_once_and_marked_dispatched() {
    let env = setup(4);
    // 30 tasks, one every 7 s from T0 - 5 s, created before any is due.
    let mut ids = Vec::new();
    for i in 0..30 {
        let t = env
            .put_at(task().due_in(-5_000 + i * 7_000).build(), T0 - 10_000)
            .await;
        ids.push((t.task_id, t.due_ms));
    }
    env.clock.set(T0 + 60_000);
    let mut p = env.poller(config("a"));
    // A lone poller takes half its share on its first round, the rest on the next.
    assert_eq!(p.tick().await.shards.len(), 2);
    p.tick().await;
    assert_eq!(p.leases().held(), vec![0, 1, 2, 3]);

    let due: BTreeSet<String> = ids
        .iter()
        .filter(|(_, d)| *d <= env.now())
        .map(|(id, _)| id.clone())
        .collect();
    assert_eq!(due.len(), 10);
    let sent = env.queue.sent();
    let sent_ids: BTreeSet<String> = sent.iter().map(|m| m.task_id.clone()).collect();
    assert_eq!(sent.len(), due.len(), "each due task sent once");
    assert_eq!(sent_ids, due);
    // In due order within each shard.
    for shard in 0..4 {
        let dues: Vec<i64> = sent
            .iter()
            .filter(|m| m.shard == shard)
            .map(|m| m.due_ms)
            .collect();
        assert!(
            dues.windows(2).all(|w| w[0] <= w[1]),
            "shard {shard}: {dues:?}"
        );
    }
    for (id, due_ms) in &ids {
        let t = env.get(id).await;
        if *due_ms <= env.now() {
            assert_eq!(t.status, TaskStatus::Dispatched, "{id}");
            assert_eq!(t.due_bucket, None);
        } else {
            assert_eq!(t.status, TaskStatus::Scheduled, "{id}");
        }
    }

    // Nothing more until more is due; then the rest, each once.
    assert_eq!(p.tick().await.sent(), 0);
    let later = tick_until(&env, &mut p, T0 + 240_000).await;
    assert_eq!(later, 20);
    let all = counts(&env.queue.sent_ids());
    assert_eq!(all.len(), 30);
    assert!(all.values().all(|&n| n == 1), "{all:?}");
    for (id, _) in &ids {
        assert_eq!(env.status(id).await, TaskStatus::Dispatched);
    }
}

#[tokio::test]
async fn a_task_created_due_in_the_past_lands_in_the_current_bucket_and_is_sent() {
    let env = setup(1);
    let mut p = env.poller(config("a"));
    p.tick().await;
    tick_until(&env, &mut p, T0 + 600_000).await;
    let watermark = p.leases().shard(0).unwrap().watermark_minute();
    assert_eq!(watermark, M0 + 10, "empty buckets passed up to now - skew");

    let old = env.put(task().due_in(-3_600_000).build()).await;
    assert!(minute_of(old.due_ms) < watermark);
    assert_eq!(
        old.due_bucket.as_deref(),
        Some(due_bucket(0, minute_of(env.now())).as_str())
    );
    assert_eq!(p.tick().await.sent(), 1);
    assert_eq!(env.queue.sent_ids(), vec![old.task_id.clone()]);
    assert_eq!(env.status(&old.task_id).await, TaskStatus::Dispatched);
}

#[tokio::test]
async fn a_late_task_in_a_bucket_within_the_skew_allowance_is_still_sent() {
    let env = setup(1);
    let mut p = env.poller(config("a"));
    p.tick().await;
    // 2 s into minute M0+2: minute M0+1 is within the 5 s allowance and must not be passed.
    let now = (M0 + 2) * 60_000 + 2_000;
    tick_until(&env, &mut p, now).await;
    assert_eq!(env.now(), now);
    assert_eq!(p.leases().shard(0).unwrap().watermark_minute(), M0 + 1);

    // A creator whose clock is 3 s behind puts a task due "now" by its clock: bucket M0+1.
    let late = env
        .put_at(task().due(now - 4_000).build(), now - 3_000)
        .await;
    assert_eq!(
        late.due_bucket.as_deref(),
        Some(due_bucket(0, M0 + 1).as_str())
    );
    assert_eq!(p.tick().await.sent(), 1);
    assert_eq!(env.status(&late.task_id).await, TaskStatus::Dispatched);

    // Once the allowance is over, the bucket is passed.
    tick_until(&env, &mut p, now + 10_000).await;
    assert_eq!(p.leases().shard(0).unwrap().watermark_minute(), M0 + 2);
}

#[tokio::test]
async fn the_watermark_advances_over_empty_buckets_and_persists_for_the_next_owner() {
    let env = setup(1);
    let mut a = env.poller(config("a"));
    a.tick().await;
    assert_eq!(a.leases().shard(0).unwrap().watermark_minute(), M0);
    tick_until(&env, &mut a, T0 + 600_000).await;
    let epoch = a.leases().shard(0).unwrap().lease().epoch;
    assert_eq!(a.leases().shard(0).unwrap().watermark_minute(), M0 + 10);
    // Persisted with a renewal, not only held in memory.
    assert_eq!(env.lease_of(0).await.watermark_minute, M0 + 10);

    // A stops without releasing; once its lease expires, B resumes at the watermark.
    env.clock.advance(10_001);
    let mut b = env.poller(config("b"));
    let t = b.tick().await;
    assert_eq!(t.acquired, vec![0]);
    let lease = b.leases().shard(0).unwrap().lease().clone();
    assert_eq!(lease.epoch, epoch + 1);
    assert_eq!(lease.watermark_minute, M0 + 10);
    assert!(
        t.shards[0].queries <= 3,
        "B scanned from its watermark: {t:?}"
    );

    // A release hands the final watermark over at once, no TTL to wait.
    tick_until(&env, &mut b, env.now() + 120_000).await;
    let final_watermark = b.leases().shard(0).unwrap().watermark_minute();
    assert_eq!(final_watermark, minute_of(env.now() - 5_000));
    assert_eq!(b.shutdown().await, 1);
    let mut c = env.poller(config("c"));
    assert_eq!(c.tick().await.acquired, vec![0]);
    let lease = c.leases().shard(0).unwrap().lease();
    assert_eq!(lease.epoch, epoch + 2);
    assert_eq!(lease.watermark_minute, final_watermark);
}

/// Pollers "a" and "b" started together on 16 shards, after three rounds: 8 each, disjoint.
async fn two_pollers_split_16(env: &Env) -> (Poller, Poller) {
    let mut a = env.poller(config("a"));
    let mut b = env.poller(config("b"));
    for _ in 0..3 {
        a.tick().await;
        b.tick().await;
        env.clock.advance(1_000);
    }
    let (ha, hb) = (a.leases().held(), b.leases().held());
    assert_eq!((ha.len(), hb.len()), (8, 8), "{ha:?} {hb:?}");
    assert!(ha.iter().all(|s| !hb.contains(s)));
    (a, b)
}

#[tokio::test]
async fn two_pollers_split_shards_fairly_and_a_standby_takes_everything() {
    let env = setup(16);
    let (a, mut b) = two_pollers_split_16(&env).await;
    let ha = a.leases().held();

    // A stops; when its leases expire B takes all of them in one tick.
    let mut took_over = None;
    for _ in 0..15 {
        env.clock.advance(1_000);
        let t = b.tick().await;
        if !t.acquired.is_empty() {
            took_over = Some(t);
            break;
        }
    }
    let t = took_over.expect("B took A's shards");
    assert_eq!(t.acquired.len(), 8);
    assert_eq!(b.leases().held(), (0..16).collect::<Vec<_>>());
    for shard in ha {
        assert_eq!(b.leases().shard(shard).unwrap().lease().epoch, 2);
    }
}

#[tokio::test]
async fn a_standby_takes_over_expired_leases_and_sends_the_remaining_tasks() {
    let env = setup(4);
    let mut first = Vec::new();
    let mut second = Vec::new();
    for i in 0..8 {
        first.push(env.put(task().due_in(5_000 + i).build()).await.task_id);
        second.push(env.put(task().due_in(60_000 + i).build()).await.task_id);
    }
    let mut a = env.poller(config("a"));
    let mut b = env.poller(config("b"));
    a.tick().await;
    a.tick().await;
    b.tick().await;
    assert_eq!(a.leases().held().len(), 4);
    assert!(b.leases().held().is_empty(), "the standby holds nothing");
    // B's presence makes A shed half its shards, which B takes (a shed lease: epoch 2).
    while env.now() < T0 + 10_000 {
        env.clock.advance(1_000);
        a.tick().await;
        b.tick().await;
    }
    assert_eq!((a.leases().held().len(), b.leases().held().len()), (2, 2));
    assert_eq!(counts(&env.queue.sent_ids()).len(), 8);
    let a_held = a.leases().held();

    // A stops ticking. B, ticking on, takes its shards once they expire, at a new epoch.
    let mut acquired = Vec::new();
    while env.now() < T0 + 90_000 {
        env.clock.advance(1_000);
        let t = b.tick().await;
        assert!(t.errors.is_empty(), "{:?}", t.errors);
        acquired.extend(t.acquired);
    }
    acquired.sort_unstable();
    assert_eq!(acquired, a_held);
    for s in 0..4 {
        assert_eq!(b.leases().shard(s).unwrap().lease().epoch, 2);
    }
    let sent = counts(&env.queue.sent_ids());
    assert_eq!(sent.len(), 16);
    assert!(sent.values().all(|&n| n == 1), "{sent:?}");
    for id in first.iter().chain(&second) {
        assert_eq!(env.status(id).await, TaskStatus::Dispatched);
    }
}

#[tokio::test]
async fn a_poller_whose_renewal_fails_stops_dispatching_that_shard_at_once() {
    let env = setup(1);
    let (tx, mut events) = mpsc::unbounded_channel();
    let clock_a = env.clock.clone();
    let mut a = env.poller_with(
        config("a"),
        env.backend.clone(),
        Arc::new(clock_a.clone()),
        Some(tx),
    );
    assert_eq!(a.tick().await.acquired, vec![0]);

    // B's clock runs 10 s ahead: to B, A's lease has expired, and B takes it.
    let clock_b = ManualClock::new(T0 + 10_001);
    let mut b = env.poller_with(
        config("b"),
        env.backend.clone(),
        Arc::new(clock_b.clone()),
        None,
    );
    assert_eq!(b.tick().await.acquired, vec![0]);
    assert_eq!(env.lease_of(0).await.epoch, 2);

    // A task falls due; A's lagging clock says its lease is still good, but its renewal fails.
    let t = env.put_at(task().due_in(4_000).build(), T0 + 3_500).await;
    clock_a.set(T0 + 4_000);
    let tick = a.tick().await;
    assert_eq!(tick.lost.len(), 1);
    assert_eq!(tick.lost[0].shard, 0);
    assert!(tick.shards.is_empty(), "shard not scanned: {tick:?}");
    assert_eq!(tick.sent(), 0);
    assert!(a.leases().held().is_empty());
    assert!(env.queue.sent().is_empty());
    assert_eq!(env.status(&t.task_id).await, TaskStatus::Scheduled);
    let mut lost = false;
    while let Ok(e) = events.try_recv() {
        lost |= matches!(
            e,
            PollerEvent::LeaseLost {
                shard: 0,
                epoch: 1,
                ..
            }
        );
    }
    assert!(lost, "LeaseLost reported");

    // A does not take it back while B holds it; B sends the task.
    assert!(a.tick().await.acquired.is_empty());
    clock_b.advance(1_000);
    assert_eq!(b.tick().await.sent(), 1);
    assert_eq!(env.queue.sent_ids(), vec![t.task_id.clone()]);
}

#[tokio::test]
async fn a_lease_past_its_skew_margin_is_not_dispatched() {
    let env = setup(1);
    let lease = env
        .backend
        .leases
        .lease_acquire(LeaseAcquire {
            shard: 0,
            owner: "a".into(),
            ttl_ms: 10_000,
            now_ms: T0,
        })
        .await
        .unwrap();
    let t = env.put(task().due_in(1_000).build()).await;
    let mut shard = ShardPoller::new(
        env.backend.clone(),
        Arc::new(env.clock.clone()),
        Arc::new(config("a")),
        lease,
    );
    // expires = T0 + 10 s, skew 5 s: from T0 + 5 s on the lease may not be used.
    env.clock.set(T0 + 5_000);
    assert!(!shard.may_dispatch(env.now()));
    let r = shard.tick(env.now()).await.unwrap();
    assert_eq!(r.stopped, Some(StopReason::LeaseDeadline));
    assert_eq!((r.queries, r.sent), (0, 0));
    assert_eq!(env.status(&t.task_id).await, TaskStatus::Scheduled);
    // One millisecond earlier it may.
    env.clock.set(T0 + 4_999);
    assert_eq!(shard.tick(env.now()).await.unwrap().sent, 1);
}

#[tokio::test]
async fn a_cancelled_task_is_not_sent() {
    let env = setup(2);
    let a = env.put(task().due_in(1_000).build()).await;
    let b = env.put(task().due_in(1_000).build()).await;
    env.backend
        .tasks
        .task_cancel(TaskCancel {
            task_id: a.task_id.clone(),
            expected_version: None,
            now_ms: env.now(),
        })
        .await
        .unwrap();
    env.clock.set(T0 + 5_000);
    let mut p = env.poller(config("p"));
    p.tick().await;
    p.tick().await;
    assert_eq!(env.queue.sent_ids(), vec![b.task_id.clone()]);
    assert_eq!(env.status(&a.task_id).await, TaskStatus::Cancelled);
    assert_eq!(env.status(&b.task_id).await, TaskStatus::Dispatched);
}

#[tokio::test]
async fn tasks_are_sent_before_they_are_marked_so_a_failed_send_leaves_them_scheduled() {
    let env = setup(1);
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(env.put(task().due_in(1_000 + i).build()).await.task_id);
    }
    env.clock.set(T0 + 5_000);
    let mut p = env.poller(PollerConfig {
        send_batch: 2,
        ..config("p")
    });
    let is_send_error = |e: &PollerError| {
        matches!(
            e,
            PollerError::Store {
                op: "queue_send",
                shard: Some(0),
                ..
            }
        )
    };

    // The queue is down: nothing is marked.
    env.queue.fail_after(0);
    let t = p.tick().await;
    assert!(t.errors.iter().any(is_send_error), "{:?}", t.errors);
    for id in &ids {
        assert_eq!(env.status(id).await, TaskStatus::Scheduled);
    }

    // It fails after one batch: exactly that batch is marked.
    env.queue.fail_after(1);
    let t = p.tick().await;
    assert!(t.errors.iter().any(is_send_error), "{:?}", t.errors);
    assert_eq!(env.queue.sent_ids(), ids[..2].to_vec());
    for (i, id) in ids.iter().enumerate() {
        let want = if i < 2 {
            TaskStatus::Dispatched
        } else {
            TaskStatus::Scheduled
        };
        assert_eq!(env.status(id).await, want, "task {i}");
    }

    // Healed: the rest go, each task sent once in all.
    env.queue.heal();
    let t = p.tick().await;
    assert!(t.errors.is_empty(), "{:?}", t.errors);
    assert_eq!(t.sent(), 3);
    assert_eq!(env.queue.sent_ids(), ids);
    for id in &ids {
        assert_eq!(env.status(id).await, TaskStatus::Dispatched);
    }
}

#[tokio::test]
async fn work_per_tick_is_bounded_and_resumes_on_the_next_tick() {
    let env = setup(1);
    let mut ids = Vec::new();
    for i in 0..10 {
        ids.push(env.put(task().due_in(1_000 + i).build()).await.task_id);
    }
    env.clock.set(T0 + 5_000);
    let cfg = PollerConfig {
        page: 2,
        max_pages_per_tick: 3,
        ..config("a")
    };
    let lease = env
        .backend
        .leases
        .lease_acquire(LeaseAcquire {
            shard: 0,
            owner: "a".into(),
            ttl_ms: cfg.lease_ttl_ms,
            now_ms: env.now(),
        })
        .await
        .unwrap();
    let mut shard = ShardPoller::new(
        env.backend.clone(),
        Arc::new(env.clock.clone()),
        Arc::new(cfg),
        lease,
    );
    let r = shard.tick(env.now()).await.unwrap();
    assert_eq!((r.sent, r.marked), (6, 6));
    assert_eq!(r.stopped, Some(StopReason::PageBudget));
    assert_eq!(r.watermark_minute, M0);
    let r = shard.tick(env.now()).await.unwrap();
    assert_eq!((r.sent, r.stopped), (4, None));
    assert_eq!(env.queue.sent_ids(), ids, "in due order, each once");
}

#[tokio::test]
async fn renewals_stay_on_time_when_the_index_is_slow() {
    let env = setup(1);
    for i in 0..30 {
        env.put(task().due_in(1_000 + i).build()).await;
    }
    env.clock.set(T0 + 2_000);
    // Every due_query takes a second.
    let slow = Backend {
        tasks: Arc::new(SlowIndex {
            inner: env.backend.tasks.clone(),
            clock: env.clock.clone(),
            step_ms: 1_000,
        }),
        ..env.backend.clone()
    };
    let cfg = PollerConfig {
        page: 1,
        tick_ms: 4_000,
        skew_ms: 2_000,
        ..config("a")
    };
    let mut p = env.poller_with(cfg, slow, Arc::new(env.clock.clone()), None);
    let mut stops = BTreeSet::new();
    let mut sent = 0;
    for _ in 0..40 {
        let t = p.tick().await;
        assert!(
            t.lost.is_empty(),
            "lease lost under load at {}: {t:?}",
            env.now()
        );
        assert!(t.errors.is_empty(), "{:?}", t.errors);
        for r in &t.shards {
            if let Some(s) = r.stopped {
                stops.insert(format!("{s:?}"));
            }
            sent += r.sent;
        }
    }
    assert_eq!(sent, 30);
    assert!(stops.contains("RenewalDue"), "{stops:?}");
    assert_eq!(p.leases().shard(0).unwrap().lease().epoch, 1);
    assert!(env.lease_of(0).await.expires_ms > env.now());
}

#[tokio::test]
async fn a_poller_sheds_shards_beyond_its_share_when_more_pollers_are_live() {
    let env = setup(16);
    let clock = Arc::new(env.clock.clone());
    let manager = |owner: &str, max_shards: Option<usize>| {
        LeaseManager::new(
            env.backend.clone(),
            clock.clone(),
            Arc::new(PollerConfig {
                max_shards,
                ..config(owner)
            }),
            None,
        )
    };
    let (mut a, mut b, mut c) = (
        manager("a", None),
        manager("b", Some(2)),
        manager("c", None),
    );
    let now = env.now();
    assert_eq!(a.acquire_free_shards(now).await.unwrap().acquired.len(), 8);
    assert_eq!(b.acquire_free_shards(now).await.unwrap().acquired.len(), 2);
    // C sees two live pollers: a share of ceil(16 / 3) = 6.
    let r = c.acquire_free_shards(now).await.unwrap();
    assert_eq!((r.live_others, r.target, r.acquired.len()), (2, 6, 6));

    // A now sees three pollers too, and releases two shards, which are free at once.
    let r = a.acquire_free_shards(now).await.unwrap();
    assert_eq!(r.target, 6);
    assert_eq!(r.shed.len(), 2);
    assert_eq!(a.held().len(), 6);
    let mut d = manager("d", Some(2));
    let r = d.acquire_free_shards(now).await.unwrap();
    let mut got: Vec<u32> = r.acquired.iter().map(|l| l.shard).collect();
    got.sort_unstable();
    let mut shed = free_shards(&a, &b, &c);
    shed.sort_unstable();
    assert_eq!(got, shed);

    // Renewal keeps what is held; nothing is lost while on time.
    env.clock.advance(4_000);
    assert!(a.renew(env.now()).await.is_empty());
    assert_eq!(a.held().len(), 6);
}

#[tokio::test]
async fn shards_a_capped_poller_leaves_are_adopted_not_orphaned() {
    let env = setup(16);
    let mut a = env.poller(config("a"));
    let mut b = env.poller(PollerConfig {
        max_shards: Some(2),
        ..config("b")
    });
    a.tick().await; // cold start: half of 16
    b.tick().await; // capped at 2
    assert_eq!((a.leases().held().len(), b.leases().held().len()), (8, 2));
    // A's fair share is 8, but the 6 shards left free a whole round are nobody's: A adopts
    // them, and does not shed them back while the same pollers are live.
    for _ in 0..3 {
        env.clock.advance(1_000);
        a.tick().await;
        b.tick().await;
        assert_eq!((a.leases().held().len(), b.leases().held().len()), (14, 2));
    }
    let owners: BTreeSet<String> = env
        .backend
        .leases
        .lease_list()
        .await
        .unwrap()
        .into_iter()
        .filter(|l| l.expires_ms > env.now())
        .map(|l| format!("{}:{}", l.shard, l.owner))
        .collect();
    assert_eq!(owners.len(), 16, "every shard owned: {owners:?}");
}

#[tokio::test]
async fn a_poller_holding_nothing_is_counted_and_gets_its_share() {
    // A took every shard before B started (or B lost all its leases when its renewals ran
    // late): B holds no lease to be seen by. Its presence row makes A shed half.
    let env = setup(16);
    let mut a = env.poller(config("a"));
    for _ in 0..2 {
        a.tick().await;
        env.clock.advance(1_000);
    }
    assert_eq!(a.leases().held().len(), 16);
    let mut b = env.poller(config("b"));
    let t = b.tick().await;
    assert_eq!((t.acquired.len(), b.leases().held().len()), (0, 0));
    let t = a.tick().await;
    assert_eq!(t.shed.len(), 8, "A sees B although B holds nothing");
    let t = b.tick().await;
    assert_eq!(t.acquired.len(), 8);
    for _ in 0..3 {
        env.clock.advance(1_000);
        a.tick().await;
        b.tick().await;
        assert_eq!((a.leases().held().len(), b.leases().held().len()), (8, 8));
    }

    // B shuts down: its leases are released and its presence withdrawn, so A takes every
    // shard back in one round instead of waiting for a TTL.
    assert_eq!(b.shutdown().await, 8);
    assert_eq!(member_owners(&env).await, vec!["a"]);
    let t = a.tick().await;
    assert_eq!((t.acquired.len(), a.leases().held().len()), (8, 16));
}

#[tokio::test]
async fn a_crashed_pollers_presence_stops_counting_then_is_forgotten() {
    let env = setup(16);
    let (mut a, b) = two_pollers_split_16(&env).await;
    drop(b); // a crash: no release, no withdrawal

    // Once B's leases and presence lapse, A takes everything.
    let mut rounds = 0;
    while a.leases().held().len() < 16 {
        env.clock.advance(1_000);
        a.tick().await;
        rounds += 1;
        assert!(rounds <= 15, "A took over within a lease TTL and a tick");
    }
    assert_eq!(member_owners(&env).await, vec!["a", "b"], "kept a while");
    // Ten minutes after it lapsed, A deletes B's row.
    for _ in 0..11 {
        env.clock.advance(60_000);
        a.tick().await;
    }
    assert_eq!(member_owners(&env).await, vec!["a"]);
    assert_eq!(a.leases().held().len(), 16);
}

/// The pollers with a presence row, live or not.
async fn member_owners(env: &Env) -> Vec<String> {
    let members = env.backend.leases.member_list().await.unwrap();
    members.into_iter().map(|m| m.owner).collect()
}

/// The shards nobody among a, b, c holds.
fn free_shards(a: &LeaseManager, b: &LeaseManager, c: &LeaseManager) -> Vec<u32> {
    let held: BTreeSet<u32> = [a, b, c].iter().flat_map(|m| m.held()).collect();
    (0..16).filter(|s| !held.contains(s)).collect()
}

#[tokio::test(start_paused = true)]
async fn run_dispatches_until_shutdown_then_releases_its_leases() {
    let env = setup(2);
    let mut ids = BTreeSet::new();
    for i in 0..6 {
        ids.insert(env.put(task().due_in(1_000 + i).build()).await.task_id);
    }
    env.clock.set(T0 + 5_000);
    let (tx, mut events) = mpsc::unbounded_channel();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let deps = PollerDeps {
        backend: env.backend.clone(),
        clock: Arc::new(env.clock.clone()),
        config: config("runner"),
        events: Some(tx),
    };
    let handle = tokio::spawn(punctual_poller::run(deps, async {
        let _ = stopped.await;
    }));

    let mut dispatched = 0;
    let mut acquired = 0;
    while dispatched < ids.len() {
        match events.recv().await.expect("poller running") {
            PollerEvent::Ticked { dispatched: n, .. } => dispatched += n,
            PollerEvent::LeaseAcquired { .. } => acquired += 1,
            _ => {}
        }
    }
    assert_eq!(acquired, 2);
    stop.send(()).unwrap();
    handle.await.unwrap().unwrap();
    let mut released = BTreeSet::new();
    while let Some(e) = events.recv().await {
        if let PollerEvent::LeaseReleased { shard, .. } = e {
            released.insert(shard);
        }
    }
    assert_eq!(released, BTreeSet::from([0, 1]));
    assert_eq!(
        env.queue.sent_ids().into_iter().collect::<BTreeSet<_>>(),
        ids
    );

    // Released: a standby takes them at the same instant, no TTL to wait.
    for shard in 0..2 {
        let lease = env
            .backend
            .leases
            .lease_acquire(LeaseAcquire {
                shard,
                owner: "standby".into(),
                ttl_ms: 10_000,
                now_ms: env.clock.now_ms(),
            })
            .await
            .unwrap();
        assert_eq!(lease.epoch, 2);
    }
}

#[tokio::test]
async fn run_refuses_an_invalid_config_naming_the_field() {
    let env = setup(1);
    let deps = PollerDeps {
        backend: env.backend.clone(),
        clock: Arc::new(env.clock.clone()),
        config: PollerConfig {
            page: 0,
            ..config("a")
        },
        events: None,
    };
    match punctual_poller::run(deps, std::future::pending()).await {
        Err(PollerError::Config(e)) => assert_eq!(e.field, "page"),
        other => panic!("expected a config error, got {other:?}"),
    }
}
