//! Poller failover between real processes: two `punctual poller` processes share one data
//! file; the one holding the shard leases is killed with SIGKILL; the standby takes the
//! shards over and fires the remaining tasks within one lease TTL plus one tick.

mod support;

use std::time::Duration;

use punctual_core::store::Lease;
use support::*;

const TTL_MS: i64 = 2_000;
const TICK_MS: i64 = 100;

async fn leases(dir: &std::path::Path) -> Vec<Lease> {
    let backend = punctual::open_embedded(dir, 16).unwrap();
    backend.leases.lease_list().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standby_poller_takes_over_a_killed_leader() {
    let dir = tempfile::tempdir().unwrap();
    let data = data_arg(dir.path());
    let poller_args = [
        "poller",
        "--data",
        &data,
        "--tick",
        "100ms",
        "--lease-ttl",
        "2s",
        "--skew",
        "500ms",
    ];
    let receiver = Receiver::start().await;

    let mut leader = Proc::start("poller-a", &poller_args);
    // Wait until the leader holds all 16 shards, then start the standby.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    let leader_owner = loop {
        let ls = leases(dir.path()).await;
        let now = now();
        let live: Vec<_> = ls.iter().filter(|l| l.expires_ms > now).collect();
        if live.len() == 16 && live.iter().all(|l| l.owner == live[0].owner) {
            break live[0].owner.clone();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "leader never held all shards: {ls:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let _standby = Proc::start("poller-b", &poller_args);
    let _worker = Proc::start(
        "worker",
        &["worker", "--data", &data, "--concurrency", "64"],
    );

    // Tasks due over the next 6 s, created in this process through the same service as the API.
    let backend = punctual::open_embedded(dir.path(), 16).unwrap();
    let state = punctual_api::ApiState::new(
        backend.clone(),
        std::sync::Arc::new(punctual_core::SystemClock),
        Default::default(),
    );
    let start = now() + 1_000;
    let requests: Vec<punctual_core::validate::CreateTask> = (0..1_200)
        .map(|i| {
            serde_json::from_value(http_task(
                &format!("fo-{i:04}"),
                start + i as i64 * 5,
                &receiver.url,
            ))
            .unwrap()
        })
        .collect();
    for chunk in requests.chunks(600) {
        punctual_api::service::create_tasks(&state, chunk.to_vec())
            .await
            .unwrap();
    }

    // Let the leader fire some, then kill it.
    receiver.wait_distinct(100, Duration::from_secs(20)).await;
    leader.kill();
    let killed_at = now();
    println!(
        "killed the leader ({leader_owner}) after {} tasks",
        receiver.counts().len()
    );

    receiver.wait_distinct(1_200, Duration::from_secs(30)).await;
    let ls = leases(dir.path()).await;
    assert!(
        ls.iter().all(|l| l.owner != leader_owner),
        "standby holds every shard: {ls:?}"
    );
    // Tasks due after the kill arrive within one lease TTL plus one tick (plus a worker's
    // receive and an HTTP call, bounded here by 500 ms), counted from the kill.
    let late: Vec<_> = receiver
        .calls()
        .into_iter()
        .map(|c| {
            let due: i64 = c.body["due_ms"].as_i64().unwrap();
            c.at_ms - due.max(killed_at)
        })
        .collect();
    let worst = late.iter().copied().max().unwrap();
    println!(
        "worst delay after the kill: {worst} ms (bound {} ms)",
        TTL_MS + TICK_MS + 500
    );
    assert!(worst <= TTL_MS + TICK_MS + 500, "takeover took {worst} ms");
}
