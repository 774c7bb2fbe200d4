//! Invariant 1, with a real process killed: `punctual serve` gets SIGKILL while 10,000 tasks
//! are firing, restarts on the same data directory, and every task still reaches the
//! receiver at least once. Duplicates are allowed (at-least-once) and printed.

mod support;

use std::time::Duration;

use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_firing_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let data = data_arg(dir.path());
    let args = [
        "serve",
        "--addr",
        "127.0.0.1:0",
        "--data",
        &data,
        "--tick",
        "100ms",
        "--lease-ttl",
        "2s",
        "--skew",
        "500ms",
        "--run-timeout",
        "3s",
        "--http-timeout",
        "2s",
    ];
    let receiver = Receiver::start().await;
    let mut first = Proc::start("serve-1", &args);
    let api = first.api.clone().unwrap();

    // 10,000 tasks due over 4 s, starting 2 s from now.
    let start = now() + 2_000;
    let tasks: Vec<_> = (0..10_000)
        .map(|i| {
            http_task(
                &format!("crash-{i:05}"),
                start + (i as i64 * 4_000 / 10_000),
                &receiver.url,
            )
        })
        .collect();
    create_batch(&api, tasks).await;

    // Kill it while tasks are firing: after a fifth has arrived, long before the end.
    receiver.wait_distinct(2_000, Duration::from_secs(60)).await;
    first.kill();
    let before = receiver.counts().len();
    println!("killed serve-1 with SIGKILL after {before} distinct tasks were received");
    assert!(before < 10_000, "the kill came too late to test anything");

    let _second = Proc::start("serve-2", &args);
    receiver
        .wait_distinct(10_000, Duration::from_secs(60))
        .await;
    let counts = receiver.counts();
    let dups: usize = counts.values().map(|n| n - 1).sum();
    println!(
        "after restart: all {} tasks received; {dups} duplicate deliveries ({} tasks more than once)",
        counts.len(),
        counts.values().filter(|&&n| n > 1).count()
    );
    assert_eq!(counts.len(), 10_000);
}
