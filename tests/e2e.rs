//! End to end over HTTP, in one process: tasks created through the API reach a webhook
//! receiver at their due time, exactly once when nothing crashes; failures retry with
//! backoff and end in the DLQ.

mod support;

use std::sync::Arc;
use std::time::Duration;

use punctual_core::store::DlqList;
use support::*;
use tokio_util::sync::CancellationToken;

/// Starts `punctual::serve` in this process on 127.0.0.1:0; returns its base URL.
async fn start(dir: &std::path::Path, stop: &CancellationToken) -> String {
    serve_in_process(test_serve_config(dir, 100, 128), stop)
        .await
        .0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_tasks_fire_once_each_and_never_early() {
    let dir = tempfile::tempdir().unwrap();
    let stop = CancellationToken::new();
    let api = start(dir.path(), &stop).await;
    let receiver = Receiver::start().await;

    // 1,000 tasks due over the next 5 s, created one request each, 8 at a time.
    let start_ms = now() + 1_000;
    let client = api_client();
    let mut due = std::collections::HashMap::new();
    let bodies: Vec<_> = (0..1_000)
        .map(|i| {
            let id = format!("e2e-{i:04}");
            let d = start_ms + (i * 4_500 / 1_000) as i64;
            due.insert(id.clone(), d);
            http_task(&id, d, &receiver.url)
        })
        .collect();
    let permits = Arc::new(tokio::sync::Semaphore::new(16));
    let mut sends = tokio::task::JoinSet::new();
    for body in bodies {
        let (client, url, permits) = (client.clone(), format!("{api}/v1/tasks"), permits.clone());
        sends.spawn(async move {
            let _permit = permits.acquire().await.unwrap();
            let r = client.post(url).json(&body).send().await.unwrap();
            (r.status(), r.text().await.unwrap())
        });
    }
    while let Some(r) = sends.join_next().await {
        let (status, text) = r.unwrap();
        assert_eq!(status, 201, "{text}");
    }
    println!("created 1,000 tasks in {} ms", now() - start_ms + 1_000);

    receiver.wait_distinct(1_000, Duration::from_secs(30)).await;
    // A little longer, to catch a duplicate arriving late.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let calls = receiver.calls();
    let counts = receiver.counts();
    assert_eq!(calls.len(), 1_000, "each task exactly once");
    assert!(counts.values().all(|&n| n == 1));
    let mut lags = Vec::new();
    for c in &calls {
        let d = due[&c.task_id];
        assert!(
            c.at_ms >= d,
            "{} arrived {} ms early",
            c.task_id,
            d - c.at_ms
        );
        assert_eq!(c.body["id"], c.task_id.as_str(), "the payload is delivered");
        let signature = c.signature.as_deref().expect("every call is signed");
        punctual_worker::sign::verify(
            WEBHOOK_SECRET.as_bytes(),
            signature,
            &c.raw,
            c.at_ms / 1_000,
            300,
        )
        .unwrap_or_else(|e| panic!("{}: {e}", c.task_id));
        lags.push(c.at_ms - d);
    }
    println!(
        "e2e lag over 1,000 tasks: p50 {} ms, p99 {} ms, max {} ms",
        percentile(&mut lags, 50),
        percentile(&mut lags, 99),
        percentile(&mut lags, 100)
    );
    let got: serde_json::Value = client
        .get(format!("{api}/v1/tasks/e2e-0000"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(got["status"], "SUCCEEDED");

    // The worker's events reach the metrics and the stats.
    let metrics = client
        .get(format!("{api}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let fired = metrics
        .lines()
        .find_map(|l| l.strip_prefix("punctual_tasks_fired_total "))
        .unwrap_or_else(|| panic!("no fired counter in:\n{metrics}"));
    assert!(fired.trim().parse::<f64>().unwrap() >= 1_000.0, "{fired}");
    assert!(
        metrics.contains("punctual_fire_lag_seconds_bucket"),
        "{metrics}"
    );
    assert!(metrics.contains("punctual_run_duration_seconds_bucket"));
    let stats: serde_json::Value = client
        .get(format!("{api}/v1/stats"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(
        stats["activity"]["fired_last_minute"].as_u64().unwrap() >= 1_000,
        "{stats}"
    );
    // Without a key, nothing but /healthz.
    let anonymous = reqwest::Client::new();
    let r = anonymous
        .get(format!("{api}/v1/tasks/e2e-0000"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let r = anonymous
        .get(format!("{api}/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_retry_then_succeed_or_die() {
    let dir = tempfile::tempdir().unwrap();
    let stop = CancellationToken::new();
    let api = start(dir.path(), &stop).await;
    let receiver = Receiver::scripted(Arc::new(|id: &str, n: usize| match id {
        "flaky" if n <= 2 => 503,
        "broken" => 500,
        "refused" => 400,
        _ => 200,
    }))
    .await;
    let due = now();
    let mut tasks = Vec::new();
    for id in ["flaky", "broken", "refused"] {
        let mut t = http_task(id, due, &receiver.url);
        t["max_attempts"] = serde_json::json!(3);
        tasks.push(t);
    }
    create_batch(&api, tasks).await;

    let client = api_client();
    let status_of = |id: &'static str| {
        let client = client.clone();
        let api = api.clone();
        async move {
            let v: serde_json::Value = client
                .get(format!("{api}/v1/tasks/{id}"))
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            v
        }
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let s: Vec<_> = [
            status_of("flaky").await,
            status_of("broken").await,
            status_of("refused").await,
        ]
        .iter()
        .map(|v| v["status"].as_str().unwrap().to_string())
        .collect();
        if s == ["SUCCEEDED", "DEAD", "DEAD"] {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "statuses stuck at {s:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let counts = receiver.counts();
    assert_eq!(counts["flaky"], 3, "succeeds on the third call");
    assert_eq!(counts["broken"], 3, "dead after max_attempts");
    assert_eq!(counts["refused"], 1, "a 400 is permanent");
    let attempts: Vec<_> = receiver
        .calls()
        .iter()
        .filter(|c| c.task_id == "flaky")
        .map(|c| c.attempt)
        .collect();
    assert_eq!(attempts, vec![Some(1), Some(2), Some(3)]);
    let broken = status_of("broken").await;
    assert!(
        broken["last_error"].as_str().unwrap().contains("500"),
        "{broken}"
    );

    // Both dead tasks are in the DLQ.
    let backend = punctual::open_embedded(dir.path(), 16).unwrap();
    let dlq = backend
        .queue
        .dlq_list(DlqList {
            after: None,
            limit: 10,
        })
        .await
        .unwrap();
    let mut dead: Vec<_> = dlq
        .items
        .iter()
        .map(|d| d.message.task_id.as_str())
        .collect();
    dead.sort();
    assert_eq!(dead, vec!["broken", "refused"]);
    stop.cancel();
}
