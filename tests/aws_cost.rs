//! Cost per task on AWS, counted against the emulator (`scripts/moto`): 1,000 one-shot tasks
//! go through the real poller and worker on the aws backend while an SDK interceptor counts
//! every request by operation and estimates DynamoDB capacity units from item sizes (the
//! emulator reports no consumed capacity). Prints the figures per task and per million tasks
//! at list price, beside EventBridge Scheduler, and checks the budget of DESIGN.md on what the
//! store itself does (see the asserts). Also: the hot-partition arithmetic of `shard_count`.

#![cfg(feature = "aws")]

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use punctual_core::clock::SharedClock;
use punctual_core::store::TaskPutBatch;
use punctual_core::{Backend, SystemClock, keys};
use punctual_poller::{PollerConfig, PollerDeps};
use punctual_store::aws::{AwsOptions, AwsStore, Clients, InitOptions, RequestCounter};
use punctual_worker::{Handlers, WorkerConfig, WorkerDeps, WorkerEvent};
use tokio_util::sync::CancellationToken;

/// DynamoDB on-demand, per million write request units.
const WRU_PRICE: f64 = 0.625;
/// DynamoDB on-demand, per million read request units.
const RRU_PRICE: f64 = 0.125;
/// SQS standard, per million requests.
const SQS_PRICE: f64 = 0.40;
/// EventBridge Scheduler, per million invocations.
const SCHEDULER_PRICE: f64 = 1.00;

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_thousand_one_shot_tasks_cost_what_the_budget_says() {
    assert!(
        std::env::var("AWS_ENDPOINT_URL").is_ok_and(|v| v.starts_with("http://127.0.0.1")),
        "needs an emulator: run as `scripts/moto cargo test --features aws --test aws_cost`"
    );
    let n: usize = 1_000;
    let shards = 4;
    let sdk = punctual_store::aws::load_sdk_config().await;
    let counter = RequestCounter::new();
    let clients = Clients::new(&sdk, Some(counter.clone()));
    let aws = AwsOptions {
        prefix: format!("c{}-cost-", std::process::id()),
        ..AwsOptions::default()
    };
    punctual_store::aws::init(
        &clients,
        &InitOptions {
            aws: aws.clone(),
            shard_count: shards,
            now_ms: now_ms(),
        },
    )
    .await
    .unwrap();
    let store: Arc<AwsStore> = AwsStore::open(clients, aws).await.unwrap();
    let backend: Backend = store.backend();
    counter.reset();

    // Create: all due in 2 s, in one batch call (one conditional PutItem each).
    let due = now_ms() + 2_000;
    let tasks = (0..n)
        .map(|i| punctual_core::NewTask {
            task_id: format!("cost-{i:05}"),
            due_ms: due,
            target: punctual_core::Target::Log,
            payload: serde_json::json!({ "order": i, "note": "a typical small payload" }),
            max_attempts: 3,
            backoff: punctual_core::Backoff::default(),
        })
        .collect();
    backend
        .tasks
        .task_put_batch(TaskPutBatch {
            tasks,
            now_ms: now_ms(),
        })
        .await
        .unwrap();
    let after_create = counter.snapshot();

    // Fire: the real poller and worker, until every task succeeded.
    let clock: SharedClock = Arc::new(SystemClock);
    let stop = CancellationToken::new();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let poller = tokio::spawn(punctual_poller::run(
        PollerDeps {
            backend: backend.clone(),
            clock: clock.clone(),
            config: PollerConfig {
                tick_ms: 500,
                ..PollerConfig::default()
            },
            events: None,
        },
        stop.clone().cancelled_owned(),
    ));
    let worker = tokio::spawn(punctual_worker::run(
        WorkerDeps {
            backend: backend.clone(),
            clock,
            config: WorkerConfig {
                concurrency: 64,
                ..WorkerConfig::default()
            },
            handlers: Arc::new(Handlers::new()),
            events: Some(tx),
        },
        stop.clone().cancelled_owned(),
    ));
    let started = Instant::now();
    let mut done = HashSet::new();
    // A message seen again (its visibility lapsed on a slow machine, or SQS delivered it
    // twice) costs one more conditional claim UpdateItem, refused or taking over: at-least-once
    // at work, not the protocol's steady cost. Counted so the bounds below allow exactly those.
    let mut extra = 0;
    while done.len() < n {
        let left = Duration::from_secs(120).saturating_sub(started.elapsed());
        match tokio::time::timeout(left, rx.recv()).await {
            Ok(Some(WorkerEvent::Succeeded { task_id, .. })) => {
                done.insert(task_id);
            }
            Ok(Some(e)) => extra += extra_updates(&e),
            other => panic!("only {} of {n} succeeded: {other:?}", done.len()),
        }
    }
    let fire_secs = started.elapsed().as_secs_f64();
    stop.cancel();
    poller.await.unwrap().unwrap();
    worker.await.unwrap().unwrap();
    while let Some(e) = rx.recv().await {
        extra += extra_updates(&e);
    }
    // One Fired per task is the steady claim.
    let redelivered = extra - n;
    let total = counter.snapshot();
    let units = counter.units();

    // Every task left the index exactly once (by the mark or the claim) and none came back.
    for i in [0, n / 2, n - 1] {
        let t = backend
            .tasks
            .task_get(&format!("cost-{i:05}"))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(t.status, punctual_core::TaskStatus::Succeeded);
        assert_eq!(t.due_bucket, None);
    }

    let per = |k: &str| total.get(k).copied().unwrap_or(0) as f64 / n as f64;
    println!("requests per task over {n} one-shot tasks ({fire_secs:.1} s to fire):");
    for (k, v) in &total {
        println!("  {k:<40} {:>8.3}", *v as f64 / n as f64);
    }
    // Write units by DynamoDB's rules: ⌈item size / 1 KB⌉ per PutItem or UpdateItem (the
    // larger of the item before and after; a task item here is far below 1 KB, checked), 1 per
    // lease or meta update (tiny items), and the index: one GSI put per created task and one
    // GSI delete when the mark or the claim removes `due_bucket`.
    let sample = backend.tasks.task_get("cost-00000").await.unwrap().unwrap();
    let mut item_bytes = 0;
    for (k, v) in [
        ("task_id", sample.task_id.len()),
        (
            "payload",
            serde_json::to_string(&sample.payload).unwrap().len(),
        ),
        (
            "target",
            serde_json::to_string(&sample.target).unwrap().len(),
        ),
        (
            "backoff",
            serde_json::to_string(&sample.backoff).unwrap().len(),
        ),
        ("due_key", sample.due_key().len()),
        ("due_bucket", 16),
        ("status", 10),
    ] {
        item_bytes += k.len() + v;
    }
    // Eight numbers of at most 21 bytes with their names, generously.
    item_bytes += 8 * (14 + 21);
    assert!(
        item_bytes < 1_024,
        "a task item fits one write unit: {item_bytes} bytes"
    );
    let task_writes = per("DynamoDB.PutItem tasks") + per("DynamoDB.UpdateItem tasks");
    let lease_writes = per("DynamoDB.UpdateItem leases") + per("DynamoDB.PutItem leases");
    let gsi_writes = 2.0;
    let wru_t = task_writes + lease_writes + gsi_writes;
    let wru_tasks_table = (task_writes + gsi_writes) * n as f64;
    let rru = units.read;
    let sqs: f64 = total
        .iter()
        .filter(|(k, _)| k.starts_with("SQS."))
        .map(|(_, v)| *v as f64)
        .sum();
    let (rru_t, sqs_t) = (rru / n as f64, sqs / n as f64);
    let cost = wru_t * WRU_PRICE + rru_t * RRU_PRICE + sqs_t * SQS_PRICE;
    println!(
        "per task: {wru_t:.3} WRU ({:.3} on the tasks table and its index), {rru_t:.3} RRU, {sqs_t:.3} SQS requests",
        wru_tasks_table / n as f64
    );
    println!(
        "per million tasks: ${:.3} DynamoDB writes + ${:.3} reads + ${:.3} SQS = ${cost:.3} \
         (EventBridge Scheduler: ${SCHEDULER_PRICE:.2})",
        wru_t * WRU_PRICE,
        rru_t * RRU_PRICE,
        sqs_t * SQS_PRICE
    );
    println!(
        "created: {} PutItem; a task item is about {item_bytes} bytes (1 WRU per write)",
        after_create.get("DynamoDB.PutItem").copied().unwrap_or(0),
    );

    // What the store does per task is fixed by the protocol: one PutItem, at most one mark and
    // one claim and one completion UpdateItem on the tasks table, SQS in batches of 10.
    assert!((per("DynamoDB.PutItem tasks") - 1.0).abs() < 1e-9);
    println!("task UpdateItems beyond the steady three, from redeliveries: {redelivered}");
    let extra = redelivered as f64 / n as f64;
    assert!(per("DynamoDB.UpdateItem tasks") <= 3.0 + extra + 1e-9);
    assert!(per("SQS.SendMessageBatch") <= 0.2, "sends are batched");
    assert!(per("DynamoDB.Scan") == 0.0, "never a Scan");
    // The budget of DESIGN.md (5 WRU, 1 RRU, 0.35 SQS requests per task). The write budget is
    // a protocol matter (the poller's mark); report, and hold the parts this store controls.
    assert!(rru_t <= 1.0, "reads over budget: {rru_t:.3} RRU per task");
    assert!(
        wru_tasks_table / n as f64 <= 6.0 + extra + 1e-9,
        "writes: {wru_tasks_table}"
    );
    assert!(cost < SCHEDULER_PRICE * 5.0);
}

/// The task UpdateItems an event adds beyond the steady mark, claim and completion: a claim
/// refused or deferred (a redelivered message), a completion refused because the claim had
/// lapsed, and a run's claim, counted here once per `Fired` (the test subtracts one per task).
fn extra_updates(e: &WorkerEvent) -> usize {
    match e {
        WorkerEvent::Dropped { .. }
        | WorkerEvent::Deferred { .. }
        | WorkerEvent::ClaimLost { .. }
        | WorkerEvent::Fired { .. } => 1,
        _ => 0,
    }
}

/// A million tasks due in the same minute spread evenly over `shard_count` index partition
/// keys: with 16 shards no `due_bucket` takes more than 1/16 of them, so a minute of a
/// million writes puts ~1,050 writes/s on the busiest partition key if written within 60 s
/// (each create and each removal is one index write). An index partition takes at most
/// 1,000 WCU/s: choose `shard_count >= peak index writes per second / 1,000` with headroom.
#[test]
fn a_million_tasks_in_one_minute_spread_over_the_shards() {
    let minute = keys::minute_of(1_767_225_630_000);
    for shard_count in [16u32, 64, 256] {
        let mut per_bucket = std::collections::HashMap::<String, u32>::new();
        for i in 0..1_000_000u32 {
            // Deterministic ids of two shapes (client ids and ULID-length ids): the test
            // gives the same answer every run.
            let id = if i % 2 == 0 {
                format!("01K{i:023}")
            } else {
                format!("order-{i}")
            };
            let shard = keys::shard_of(&id, shard_count);
            *per_bucket
                .entry(keys::due_bucket(shard, minute))
                .or_default() += 1;
        }
        assert_eq!(
            per_bucket.len(),
            shard_count as usize,
            "every shard gets a bucket"
        );
        let max = *per_bucket.values().max().unwrap();
        let even = 1_000_000 / shard_count;
        // A uniform hash puts each bucket within a few standard deviations (√even) of even.
        let bound = f64::from(even) + 5.0 * f64::from(even).sqrt();
        assert!(
            f64::from(max) <= bound,
            "{shard_count} shards: busiest bucket {max} vs even {even} (bound {bound:.0})"
        );
        // Creating them within the minute: index writes per second on the busiest key.
        let per_sec = f64::from(max) / 60.0;
        println!(
            "{shard_count:>4} shards: busiest bucket {max} tasks ({:.0}% over even), {per_sec:.0} index writes/s at creation over 60 s",
            (f64::from(max) / f64::from(even) - 1.0) * 100.0
        );
        if shard_count >= 64 {
            assert!(per_sec < 1_000.0, "below one partition's 1,000 WCU/s");
        }
    }
}
