//! The aws backend end to end, against the emulator (`scripts/moto`): the HTTP flow of
//! `e2e.rs` with `--backend aws` in one process, and the distributed shape — 2 poller and 2
//! worker processes over 16 shards, the lease holder killed with SIGKILL, no task lost.
//! Counts are small: the emulator slows down as tables and queues grow.

#![cfg(feature = "aws")]

mod support;

use std::time::Duration;

use punctual::{ServeConfig, StoreChoice};
use support::*;
use tokio_util::sync::CancellationToken;

/// Fails (never skips) without an emulator.
fn require_emulator() {
    assert!(
        std::env::var("AWS_ENDPOINT_URL").is_ok_and(|v| v.starts_with("http://127.0.0.1")),
        "the aws tests need an emulator: run them as `scripts/moto cargo test --features aws \
         --test aws_e2e`"
    );
}

fn prefix(tag: &str) -> String {
    format!("e{}-{tag}-", std::process::id())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn http_flow_with_the_aws_backend() {
    require_emulator();
    let p = prefix("http");
    println!("{}", punctual::init_aws(&p, 4, 5).await.unwrap());
    let dir = tempfile::tempdir().unwrap();
    let stop = CancellationToken::new();
    let config = ServeConfig {
        backend: StoreChoice::Aws { prefix: p.clone() },
        ..test_serve_config(dir.path(), 200, 64)
    };
    let (api, server) = serve_in_process(config, &stop).await;
    let receiver = Receiver::start().await;

    // 300 tasks due over the next 3 s, through the batch endpoint.
    let n = 300;
    let start_ms = now() + 1_000;
    let mut due = std::collections::HashMap::new();
    let bodies: Vec<_> = (0..n)
        .map(|i| {
            let id = format!("aws-e2e-{i:04}");
            let d = start_ms + (i * 3_000 / n) as i64;
            due.insert(id.clone(), d);
            http_task(&id, d, &receiver.url)
        })
        .collect();
    create_batch(&api, bodies).await;

    receiver.wait_distinct(n, Duration::from_secs(60)).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let calls = receiver.calls();
    let counts = receiver.counts();
    assert_eq!(counts.len(), n, "every task fired");
    assert!(
        counts.values().all(|&c| c == 1),
        "each exactly once when nothing crashes"
    );
    let mut lags = Vec::new();
    for c in &calls {
        let d = due[&c.task_id];
        assert!(
            c.at_ms >= d,
            "{} arrived {} ms early",
            c.task_id,
            d - c.at_ms
        );
        lags.push(c.at_ms - d);
    }
    println!(
        "aws e2e lag over {n} tasks: p50 {} ms, p99 {} ms, max {} ms",
        percentile(&mut lags, 50),
        percentile(&mut lags, 99),
        percentile(&mut lags, 100)
    );
    let got: serde_json::Value = api_client()
        .get(format!("{api}/v1/tasks/aws-e2e-0000"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(got["status"], "SUCCEEDED");

    // Filtered listing over HTTP: through the indexes, or refused naming `status`.
    let client = api_client();
    let get = |path: String| {
        let client = client.clone();
        let api = api.clone();
        async move {
            let r = client.get(format!("{api}{path}")).send().await.unwrap();
            let status = r.status().as_u16();
            (status, r.json::<serde_json::Value>().await.unwrap())
        }
    };
    let (code, problem) = get("/v1/tasks?status=SUCCEEDED".into()).await;
    assert_eq!(
        (code, problem["field"].as_str()),
        (400, Some("status")),
        "{problem}"
    );
    let later = now() + 3_600_000;
    create_batch(
        &api,
        vec![
            http_task("aws-list-a", later, &receiver.url),
            http_task("aws-list-b", later + 60_000, &receiver.url),
            http_task("aws-other-c", later + 120_000, &receiver.url),
        ],
    )
    .await;
    let cancelled = client
        .post(format!("{api}/v1/tasks/aws-list-b/cancel"))
        .send()
        .await
        .unwrap();
    assert_eq!(cancelled.status().as_u16(), 200);
    let ids = |v: &serde_json::Value| -> Vec<String> {
        v["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["id"].as_str().unwrap().to_owned())
            .collect()
    };
    let (code, v) = get("/v1/tasks?status=CANCELLED".into()).await;
    assert_eq!((code, ids(&v)), (200, vec!["aws-list-b".to_owned()]), "{v}");
    let (code, v) = get("/v1/tasks?id_prefix=aws-list-&target=http".into()).await;
    assert_eq!((code, ids(&v)), (200, vec!["aws-list-a".to_owned()]), "{v}");
    let (_, stats) = get("/v1/stats".into()).await;
    assert!(stats["counts"].is_null(), "no cheap counts on aws: {stats}");
    stop.cancel();
    server.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_pollers_two_workers_survive_a_sigkill_of_the_lease_holder() {
    require_emulator();
    let p = prefix("mp");
    punctual::init_aws(&p, 16, 5).await.unwrap();
    let backend = punctual::open_aws(&p).await.unwrap();
    let receiver = Receiver::start().await;
    let dirs: Vec<_> = (0..4).map(|_| tempfile::tempdir().unwrap()).collect();
    let args = |role: &'static str, dir: &tempfile::TempDir| -> Vec<String> {
        [
            role,
            "--backend",
            "aws",
            "--aws-prefix",
            &p,
            "--data",
            &data_arg(dir.path()),
            // Every tick queries each held shard's buckets: on a loaded two-core machine a
            // faster tick slows the one moto process enough to make renewals run late.
            "--tick",
            "500ms",
            "--lease-ttl",
            "5s",
            "--skew",
            "1s",
            "--run-timeout",
            "10s",
            "--http-timeout",
            "5s",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    };
    let start = |name: &str, a: Vec<String>| {
        let refs: Vec<&str> = a.iter().map(String::as_str).collect();
        Proc::start(name, &refs)
    };
    let mut poller_a = start("poller-a", args("poller", &dirs[0]));
    let mut poller_b = start("poller-b", args("poller", &dirs[1]));
    let _worker_a = start("worker-a", args("worker", &dirs[2]));
    let _worker_b = start("worker-b", args("worker", &dirs[3]));

    // 200 tasks due from 2 s to 8 s from now, straight into the store.
    let n = 200;
    let start_ms = now() + 2_000;
    let tasks: Vec<_> = (0..n)
        .map(|i| punctual_core::NewTask {
            task_id: format!("mp-{i:04}"),
            due_ms: start_ms + (i * 6_000 / n) as i64,
            target: punctual_core::Target::Http {
                url: receiver.url.clone(),
                timeout_ms: None,
            },
            payload: serde_json::json!({ "id": format!("mp-{i:04}") }),
            max_attempts: 5,
            backoff: punctual_core::Backoff {
                base_ms: 20,
                max_ms: 200,
            },
        })
        .collect();
    backend
        .tasks
        .task_put_batch(punctual_core::store::TaskPutBatch {
            tasks,
            now_ms: now(),
        })
        .await
        .unwrap();

    // Wait until both pollers hold shards, then SIGKILL the one holding more.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let (victim, holder_pid) = loop {
        // moto creates an item that an UpdateItem adds as a bare key first, then fills it in,
        // without a lock: a Query at that instant sees a lease without attributes (real
        // DynamoDB applies the update atomically). Only a shard's first acquisition does that.
        let leases = match backend.leases.lease_list().await {
            Ok(leases) => leases,
            Err(e) => {
                assert!(std::time::Instant::now() < deadline, "lease_list: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let t = now();
        let held_by = |pid: u32| {
            leases
                .iter()
                .filter(|l| l.expires_ms > t && l.owner.contains(&format!("-{pid}-")))
                .count()
        };
        let (a, b) = (held_by(poller_a.child.id()), held_by(poller_b.child.id()));
        if a + b == 16 && a > 0 && b > 0 {
            break if a >= b {
                ("a", poller_a.child.id())
            } else {
                ("b", poller_b.child.id())
            };
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the pollers did not share the 16 shards: a {a}, b {b}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    println!(
        "SIGKILL poller {victim} (pid {holder_pid}) with {} calls so far",
        receiver.calls().len()
    );
    let survivor_pid = if victim == "a" {
        poller_a.kill();
        poller_b.child.id()
    } else {
        poller_b.kill();
        poller_a.child.id()
    };

    receiver.wait_distinct(n, Duration::from_secs(90)).await;
    let counts = receiver.counts();
    assert_eq!(counts.len(), n, "no task lost");
    let leases = backend.leases.lease_list().await.unwrap();
    let t = now();
    let survivor_holds = leases
        .iter()
        .filter(|l| l.expires_ms > t && l.owner.contains(&format!("-{survivor_pid}-")))
        .count();
    assert_eq!(survivor_holds, 16, "the standby took every shard over");
    let dups: usize = counts.values().map(|c| c - 1).sum();
    println!("multi-process: {n} tasks delivered, {dups} duplicates after the SIGKILL");
}
