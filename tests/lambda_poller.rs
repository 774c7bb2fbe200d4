//! The poller Lambda's invocation: the long-running poller loop until a stop time taken from
//! the deadline, then every lease released — before the deadline — so the next invocation
//! takes the shards over at once instead of after a lease TTL.
//!
//! Embedded store, real time, short durations (tick 100 ms, lease TTL 1.2 s or 3 s): the stop
//! and the deadline are tokio instants, so these tests measure what a Lambda would see.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_lambda_events::event::eventbridge::EventBridgeEvent;
use punctual::lambda::poller::{InvocationConfig, run_until};
use punctual_core::clock::{Clock, SystemClock};
use punctual_core::store::TaskPut;
use punctual_core::testkit;
use punctual_core::{Backend, TaskStatus};
use punctual_poller::{PollerConfig, PollerDeps, PollerEvent};
use punctual_store::embedded::{EmbeddedOptions, EmbeddedStore};
use tokio::time::Instant;

const SHARDS: u32 = 4;

fn setup() -> (tempfile::TempDir, Backend) {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(
        &dir.path().join("punctual.db"),
        EmbeddedOptions {
            shard_count: SHARDS,
            ..EmbeddedOptions::default()
        },
    )
    .unwrap();
    (dir, Backend::from_one(store))
}

fn deps(backend: &Backend, owner: &str) -> PollerDeps {
    deps_ttl(backend, owner, 1_200)
}

fn deps_ttl(backend: &Backend, owner: &str, lease_ttl_ms: i64) -> PollerDeps {
    PollerDeps {
        backend: backend.clone(),
        clock: Arc::new(SystemClock),
        config: PollerConfig {
            owner: owner.into(),
            tick_ms: 100,
            lease_ttl_ms,
            skew_ms: 200,
            ..PollerConfig::default()
        },
        events: None,
    }
}

const SHORT: InvocationConfig = InvocationConfig {
    run_for_ms: 60_000,
    release_margin_ms: 1_500,
};

#[test]
fn the_stop_time_keeps_the_margin_before_the_deadline() {
    let start = Instant::now();
    let c = InvocationConfig::default();
    // A 90 s function: polls 65 s, then 25 s to spare.
    assert_eq!(
        c.stop_at(start, Duration::from_secs(90)),
        start + Duration::from_secs(65)
    );
    // A 30 s function: stops 10 s before its deadline.
    assert_eq!(
        c.stop_at(start, Duration::from_secs(30)),
        start + Duration::from_secs(20)
    );
    // Already inside the margin: stops at once.
    assert_eq!(c.stop_at(start, Duration::from_secs(5)), start);
}

#[test]
fn the_scheduled_event_fixture_is_an_eventbridge_event() {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/eventbridge-scheduled-event.json"
    ))
    .unwrap();
    let event: EventBridgeEvent = serde_json::from_str(&text).unwrap();
    assert_eq!(event.detail_type, "Scheduled Event");
    assert_eq!(event.source, "aws.events");
}

#[tokio::test]
async fn an_invocation_dispatches_then_releases_every_lease_before_its_deadline() {
    let (_dir, backend) = setup();
    let now = SystemClock.now_ms();
    let mut ids = Vec::new();
    for i in 0..20 {
        let t = backend
            .tasks
            .task_put(TaskPut {
                task: testkit::task().id(format!("due-{i}")).due(now).build(),
                now_ms: now,
            })
            .await
            .unwrap();
        ids.push(t.task().task_id.clone());
    }
    let start = Instant::now();
    let deadline = start + Duration::from_millis(3_000);
    let stop_at = SHORT.stop_at(start, deadline - start);
    let report = run_until(deps(&backend, "lambda-a"), stop_at)
        .await
        .unwrap();
    let ended = Instant::now();
    assert!(
        ended < deadline,
        "returned {:?} after the deadline",
        ended - deadline
    );
    assert!(ended >= stop_at, "stopped early");
    assert_eq!(report.acquired, SHARDS as usize, "{report:?}");
    assert_eq!(report.released, SHARDS as usize, "{report:?}");
    assert_eq!(report.dispatched, ids.len(), "{report:?}");
    for id in &ids {
        let t = backend.tasks.task_get(id).await.unwrap().unwrap();
        assert_eq!(t.status, TaskStatus::Dispatched, "{id}");
    }
    let after = SystemClock.now_ms();
    for lease in backend.leases.lease_list().await.unwrap() {
        assert!(
            lease.expires_ms <= after,
            "shard {} still leased until {} (now {after})",
            lease.shard,
            lease.expires_ms
        );
    }
}

/// Lease TTL of the handover test: long, so a takeover by expiry could not pass for one by
/// release.
const TTL_MS: i64 = 3_000;

/// Every lease event of one poller, with the instant it happened.
type EventLog = Arc<Mutex<Vec<(PollerEvent, Instant)>>>;

/// `deps` whose events are logged with their instant.
fn logged(deps: PollerDeps) -> (PollerDeps, EventLog) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let log = EventLog::default();
    let sink = log.clone();
    tokio::spawn(async move {
        while let Some(e) = rx.recv().await {
            sink.lock().unwrap().push((e, Instant::now()));
        }
    });
    let deps = PollerDeps {
        events: Some(tx),
        ..deps
    };
    (deps, log)
}

/// The shards `pick` finds in a log's events, with when each happened.
fn lease_moves(log: &EventLog, pick: impl Fn(&PollerEvent) -> Option<u32>) -> Vec<(u32, Instant)> {
    let log = log.lock().unwrap();
    log.iter()
        .filter_map(|(e, at)| pick(e).map(|shard| (shard, *at)))
        .collect()
}

#[tokio::test]
async fn overlapping_invocations_hand_shards_over_by_release_not_by_expiry() {
    let (_dir, backend) = setup();
    let start = Instant::now();
    // A: the previous minute's invocation, stopping at +1.5 s.
    let (a_deps, a_log) = logged(deps_ttl(&backend, "lambda-a", TTL_MS));
    let a_stop = start + Duration::from_millis(1_500);
    let a = tokio::spawn(run_until(a_deps, a_stop));
    tokio::time::sleep(Duration::from_millis(700)).await;
    // B: the next invocation starts while A holds every shard. A sees B's presence and sheds
    // half at once; it releases the rest when it stops.
    let (b_deps, b_log) = logged(deps_ttl(&backend, "lambda-b", TTL_MS));
    let b = tokio::spawn(run_until(b_deps, start + Duration::from_millis(3_500)));
    let a_report = a.await.unwrap().unwrap();
    assert_eq!(a_report.released, SHARDS as usize, "{a_report:?}");
    assert_eq!(a_report.lost, 0, "nobody took a lease A held: {a_report:?}");
    let b_report = b.await.unwrap().unwrap();
    assert_eq!(b_report.acquired, SHARDS as usize, "{b_report:?}");
    assert_eq!(b_report.released, SHARDS as usize, "{b_report:?}");
    let released_by_a = lease_moves(&a_log, |e| match e {
        PollerEvent::LeaseReleased { shard, .. } => Some(*shard),
        _ => None,
    });
    let acquired_by_b = lease_moves(&b_log, |e| match e {
        PollerEvent::LeaseAcquired { shard, .. } => Some(*shard),
        _ => None,
    });
    assert_eq!(acquired_by_b.len(), SHARDS as usize);
    // Releases before A's stop time are sheds to B; A's final releases come after it.
    let shed_early = released_by_a.iter().filter(|(_, at)| *at < a_stop).count();
    assert!(shed_early > 0, "A shed some shards to B before stopping");
    for (shard, at) in acquired_by_b {
        // Only after A released it, and long before A's leases could have expired (at least
        // TTL - TTL/3 = 2 s after A's last renewal): within a few of B's ticks.
        let released = released_by_a.iter().find(|(s, _)| *s == shard);
        let (_, released_at) = released.unwrap_or_else(|| panic!("A never released {shard}"));
        // (Instants are taken where the events are received: allow their logging tasks a
        // little scheduling slack.)
        assert!(
            at + Duration::from_millis(100) >= *released_at,
            "shard {shard} taken while A still held it"
        );
        assert!(
            at < *released_at + Duration::from_millis(1_000),
            "shard {shard} taken {:?} after A released it",
            at - *released_at
        );
    }
}
