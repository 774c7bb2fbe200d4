//! SIGTERM stops `punctual serve` cleanly: it stops polling, releases its shard leases and
//! withdraws its presence so a successor starts at once, lets in-flight tasks finish, and
//! exits with status 0.

mod support;

use std::time::Duration;

use support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_exits_cleanly_and_releases_leases() {
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
    ];
    let receiver = Receiver::start().await;
    let mut proc = Proc::start("serve", &args);
    let api = proc.api.clone().unwrap();
    let due = now();
    create_batch(
        &api,
        (0..50)
            .map(|i| http_task(&format!("t-{i}"), due, &receiver.url))
            .collect(),
    )
    .await;
    receiver.wait_distinct(50, Duration::from_secs(20)).await;

    let status = proc.terminate();
    assert!(status.success(), "exit status {status:?}");
    let backend = punctual::open_embedded(dir.path(), 16).unwrap();
    let leases = backend.leases.lease_list().await.unwrap();
    assert!(!leases.is_empty());
    let now = now();
    assert!(
        leases.iter().all(|l| l.expires_ms <= now),
        "every lease released on shutdown: {leases:?}"
    );
    let members = backend.leases.member_list().await.unwrap();
    assert_eq!(
        members,
        vec![],
        "its presence withdrawn: peers stop counting it at once"
    );
}
