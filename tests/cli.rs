//! The CLI client against a running server: tables, `--json`, problems and exit codes.

mod support;

use std::net::SocketAddr;
use std::process::Command;

use punctual::ServeConfig;
use punctual::client::{
    ClientArgs, ClientCommand, ClientError, DlqCommand, ListFilter, TaskCommand, When, run,
};
use punctual_worker::Handlers;
use support::*;
use tokio_util::sync::CancellationToken;

/// An API-only server (no poller, no worker: tasks stay where the test puts them).
async fn start(dir: &std::path::Path, stop: &CancellationToken) -> String {
    let mut keys = punctual_api::KeyRing::single(punctual_api::Role::Admin, API_KEY);
    keys.add_plain("viewer", punctual_api::Role::Viewer, "viewer-key");
    let config = ServeConfig {
        addr: Some("127.0.0.1:0".parse().unwrap()),
        data_dir: dir.to_path_buf(),
        poller: None,
        worker: None,
        api: punctual_api::ApiConfig {
            keys,
            ..punctual_api::ApiConfig::default()
        },
        ..ServeConfig::default()
    };
    let (tx, rx) = tokio::sync::oneshot::channel::<SocketAddr>();
    let stopped = stop.clone().cancelled_owned();
    tokio::spawn(async move {
        punctual::serve(
            config,
            Handlers::new(),
            move |a| {
                let _ = tx.send(a);
            },
            stopped,
        )
        .await
        .unwrap();
    });
    format!("http://{}", rx.await.unwrap())
}

fn args(url: &str, key: &str, json: bool) -> ClientArgs {
    ClientArgs {
        url: url.to_owned(),
        key: Some(key.to_owned()),
        json,
    }
}

async fn out(a: &ClientArgs, cmd: ClientCommand) -> String {
    let mut buf = Vec::new();
    run(a, cmd, &mut buf).await.unwrap();
    String::from_utf8(buf).unwrap()
}

fn when(delay: &str) -> When {
    When {
        run_at: None,
        delay: Some(delay.into()),
    }
}

#[tokio::test]
async fn task_commands_print_tables_and_json() {
    let dir = tempfile::tempdir().unwrap();
    let stop = CancellationToken::new();
    let url = start(dir.path(), &stop).await;
    let table = args(&url, API_KEY, false);
    let json = args(&url, API_KEY, true);

    let create = |id: &str| {
        ClientCommand::Task(TaskCommand::Create {
            id: Some(id.into()),
            when: when("1h"),
            webhook: None,
            log: true,
            handler: None,
            payload: Some(r#"{"n":1}"#.into()),
            max_attempts: Some(3),
        })
    };
    let printed = out(&table, create("cli-1")).await;
    let mut lines = printed.lines();
    let header = lines.next().unwrap();
    assert!(
        header.starts_with("ID") && header.contains("STATUS"),
        "{printed}"
    );
    let row = lines.next().unwrap();
    assert!(
        row.starts_with("cli-1") && row.contains("SCHEDULED") && row.contains("0/3"),
        "{printed}"
    );
    let v: serde_json::Value = serde_json::from_str(&out(&json, create("cli-1")).await).unwrap();
    assert_eq!(v["id"], "cli-1");
    assert_eq!(v["payload"]["n"], 1);
    out(&table, create("cli-2")).await;

    let listed = out(
        &table,
        ClientCommand::Task(TaskCommand::List {
            limit: 1,
            after: None,
            filter: ListFilter::default(),
        }),
    )
    .await;
    assert!(
        listed.contains("cli-1") && !listed.contains("cli-2"),
        "{listed}"
    );
    let cursor = listed
        .lines()
        .last()
        .unwrap()
        .strip_prefix("more: --after ")
        .unwrap()
        .to_owned();
    let listed = out(
        &table,
        ClientCommand::Task(TaskCommand::List {
            limit: 1,
            after: Some(cursor),
            filter: ListFilter::default(),
        }),
    )
    .await;
    assert!(listed.contains("cli-2"), "{listed}");

    let moved = out(
        &json,
        ClientCommand::Task(TaskCommand::Reschedule {
            id: "cli-1".into(),
            when: when("2h"),
            version: Some(1),
        }),
    )
    .await;
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&moved).unwrap()["version"],
        2
    );
    let cancelled = out(
        &table,
        ClientCommand::Task(TaskCommand::Cancel {
            id: "cli-1".into(),
            version: None,
        }),
    )
    .await;
    assert!(cancelled.contains("CANCELLED"), "{cancelled}");
    let replayed = out(
        &table,
        ClientCommand::Task(TaskCommand::Replay {
            id: "cli-1".into(),
            when: When {
                run_at: None,
                delay: None,
            },
            version: None,
        }),
    )
    .await;
    assert!(replayed.contains("SCHEDULED"), "{replayed}");
    let got = out(
        &table,
        ClientCommand::Task(TaskCommand::Get { id: "cli-1".into() }),
    )
    .await;
    assert!(got.contains("cli-1"), "{got}");

    // Problems come back as errors naming title and detail.
    let mut sink = Vec::new();
    let e = run(
        &table,
        ClientCommand::Task(TaskCommand::Get { id: "ghost".into() }),
        &mut sink,
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with("Not found (404): no task with id `ghost`"),
        "{e}"
    );
    let viewer = args(&url, "viewer-key", false);
    let e = run(
        &viewer,
        ClientCommand::Task(TaskCommand::Cancel {
            id: "cli-2".into(),
            version: None,
        }),
        &mut sink,
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(e.starts_with("Forbidden (403)"), "{e}");

    // The DLQ is empty: list prints a header only, redrive counts nothing.
    let dlq = out(
        &table,
        ClientCommand::Dlq(DlqCommand::List {
            limit: 10,
            after: None,
        }),
    )
    .await;
    assert_eq!(dlq.trim(), "ID  TASK  DEAD AT  REASON");
    let redrive = out(
        &json,
        ClientCommand::Dlq(DlqCommand::Redrive {
            page: 10,
            after: None,
        }),
    )
    .await;
    let v: serde_json::Value = serde_json::from_str(&redrive).unwrap();
    assert_eq!(
        (v["examined"].as_u64(), v["pages"].as_u64()),
        (Some(0), Some(1))
    );
    stop.cancel();
}

#[tokio::test]
async fn the_binary_prints_the_problem_and_exits_non_zero() {
    let dir = tempfile::tempdir().unwrap();
    let stop = CancellationToken::new();
    let url = start(dir.path(), &stop).await;
    let bin = env!("CARGO_BIN_EXE_punctual");
    let run_bin = move |args: &[&str], key: &str| {
        Command::new(bin)
            .args(args)
            .env("PUNCTUAL_URL", &url)
            .env("PUNCTUAL_API_KEY", key)
            .output()
            .unwrap()
    };
    let (ok, missing, unauthorized) = tokio::task::spawn_blocking(move || {
        (
            run_bin(
                &["task", "create", "--id", "bin-1", "--delay", "1m", "--log"],
                API_KEY,
            ),
            run_bin(&["task", "get", "nope"], API_KEY),
            run_bin(&["dlq", "list"], "wrong"),
        )
    })
    .await
    .unwrap();
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert!(String::from_utf8_lossy(&ok.stdout).contains("bin-1"));
    assert!(!missing.status.success());
    let err = String::from_utf8_lossy(&missing.stderr);
    assert!(
        err.contains("Not found") && err.contains("no task with id `nope`"),
        "{err}"
    );
    assert!(!unauthorized.status.success());
    assert!(String::from_utf8_lossy(&unauthorized.stderr).contains("Unauthorized"));
    stop.cancel();
}

#[test]
fn a_first_start_generates_one_admin_key_and_stores_only_its_digest() {
    let dir = tempfile::tempdir().unwrap();
    let (ring, key) = punctual::stored_keys(dir.path()).unwrap();
    let key = key.expect("a key on the first start");
    assert_eq!(
        ring.verify(&key).map(|k| k.role),
        Some(punctual_api::Role::Admin)
    );
    let stored = std::fs::read_to_string(dir.path().join(punctual::KEYS_FILE)).unwrap();
    assert!(!stored.contains(&key), "the key itself is not stored");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join(punctual::KEYS_FILE))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o077, 0, "readable by its owner only");
    }
    let (again, none) = punctual::stored_keys(dir.path()).unwrap();
    assert!(none.is_none(), "printed once only");
    assert!(again.verify(&key).is_some());
    let secret = punctual::stored_secret(dir.path()).unwrap();
    assert_eq!(punctual::stored_secret(dir.path()).unwrap(), secret);
}

/// Runs task `id` to `DEAD` with its message in the DLQ, through the store the server uses.
async fn kill_task(data: &std::path::Path, id: &str) {
    use punctual_core::store::{
        Completion, DispatchMessage, QueueDeadLetter, QueueReceive, QueueSend, TaskClaim,
        TaskComplete,
    };
    let b = punctual::open_embedded(data, punctual::DEFAULT_SHARDS).unwrap();
    let now_ms = now();
    let t = b.tasks.task_get(id).await.unwrap().unwrap();
    let msg = DispatchMessage {
        task_id: id.into(),
        version: t.version,
        shard: t.shard,
        due_ms: t.due_ms,
    };
    b.queue
        .queue_send(QueueSend {
            messages: vec![msg.clone()],
            now_ms,
        })
        .await
        .unwrap();
    let received = b
        .queue
        .queue_receive(QueueReceive {
            max: 1,
            visibility_ms: 30_000,
            wait_ms: 0,
            now_ms,
        })
        .await
        .unwrap()
        .pop()
        .unwrap();
    b.tasks
        .task_claim(TaskClaim {
            task_id: id.into(),
            version: t.version,
            now_ms,
            run_timeout_ms: 30_000,
        })
        .await
        .unwrap();
    b.tasks
        .task_complete(TaskComplete {
            task_id: id.into(),
            version: t.version,
            attempt: 1,
            outcome: Completion::Dead {
                error: "http 410 Gone".into(),
            },
            now_ms,
        })
        .await
        .unwrap();
    b.queue
        .queue_dead_letter(QueueDeadLetter {
            receipt: received.receipt,
            message: msg,
            reason: "http 410 Gone".into(),
            now_ms,
        })
        .await
        .unwrap();
}

#[tokio::test]
async fn dlq_commands_list_replay_and_redrive() {
    let dir = tempfile::tempdir().unwrap();
    let stop = CancellationToken::new();
    let url = start(dir.path(), &stop).await;
    let table = args(&url, API_KEY, false);
    let json = args(&url, API_KEY, true);
    for id in ["dead-1", "dead-2", "dead-3"] {
        out(
            &table,
            ClientCommand::Task(TaskCommand::Create {
                id: Some(id.into()),
                when: when("0s"),
                webhook: Some("http://127.0.0.1:9/gone".into()),
                log: false,
                handler: None,
                payload: None,
                max_attempts: None,
            }),
        )
        .await;
        kill_task(dir.path(), id).await;
    }
    let listed = out(
        &table,
        ClientCommand::Dlq(DlqCommand::List {
            limit: 10,
            after: None,
        }),
    )
    .await;
    let rows: Vec<&str> = listed.lines().skip(1).collect();
    assert_eq!(rows.len(), 3, "{listed}");
    assert!(
        rows[0].contains("dead-1") && rows[0].contains("http 410 Gone"),
        "{listed}"
    );
    let letter = rows[0].split_whitespace().next().unwrap().to_owned();

    let replayed = out(
        &table,
        ClientCommand::Dlq(DlqCommand::Replay { id: letter }),
    )
    .await;
    assert!(replayed.contains("task dead-1 replayed"), "{replayed}");
    let task = out(
        &json,
        ClientCommand::Task(TaskCommand::Get {
            id: "dead-1".into(),
        }),
    )
    .await;
    let task: serde_json::Value = serde_json::from_str(&task).unwrap();
    assert_eq!(
        (task["status"].as_str(), task["attempt"].as_u64()),
        (Some("SCHEDULED"), Some(0))
    );

    let redriven = out(
        &json,
        ClientCommand::Dlq(DlqCommand::Redrive {
            page: 1,
            after: None,
        }),
    )
    .await;
    let v: serde_json::Value = serde_json::from_str(&redriven).unwrap();
    assert_eq!(v["replayed"], 2, "{v}");
    assert!(
        v["pages"].as_u64().unwrap() >= 2,
        "one letter per call: {v}"
    );
    let listed = out(
        &table,
        ClientCommand::Dlq(DlqCommand::List {
            limit: 10,
            after: None,
        }),
    )
    .await;
    assert_eq!(listed.lines().count(), 1, "only the header: {listed}");
    stop.cancel();
}

#[tokio::test]
async fn task_list_filters_and_dlq_purge() {
    let dir = tempfile::tempdir().unwrap();
    let stop = CancellationToken::new();
    let url = start(dir.path(), &stop).await;
    let table = args(&url, API_KEY, false);
    let json = args(&url, API_KEY, true);
    let create = |id: &str, delay: &str, webhook: bool| {
        ClientCommand::Task(TaskCommand::Create {
            id: Some(id.into()),
            when: when(delay),
            webhook: webhook.then(|| "http://127.0.0.1:9/hook".into()),
            log: !webhook,
            handler: None,
            payload: None,
            max_attempts: None,
        })
    };
    let now_ms = now();
    out(&table, create("f-1", "1h", false)).await;
    out(&table, create("f-2", "90m", true)).await;
    out(&table, create("f-3", "2h", true)).await;
    out(&table, create("g-1", "3h", false)).await;
    out(
        &table,
        ClientCommand::Task(TaskCommand::Cancel {
            id: "f-2".into(),
            version: None,
        }),
    )
    .await;
    let list = |filter: ListFilter| {
        let json = json.clone();
        async move {
            let printed = out(
                &json,
                ClientCommand::Task(TaskCommand::List {
                    limit: 100,
                    after: None,
                    filter,
                }),
            )
            .await;
            let v: serde_json::Value = serde_json::from_str(&printed).unwrap();
            v["tasks"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t["id"].as_str().unwrap().to_owned())
                .collect::<Vec<_>>()
        }
    };
    let at = |minutes: i64| punctual_core::validate::format_rfc3339(now_ms + minutes * 60_000);
    let cases = [
        (ListFilter::default(), vec!["f-1", "f-3", "g-1"]),
        (
            ListFilter {
                status: Some("CANCELLED".into()),
                ..ListFilter::default()
            },
            vec!["f-2"],
        ),
        (
            ListFilter {
                target: Some("log".into()),
                ..ListFilter::default()
            },
            vec!["f-1", "g-1"],
        ),
        (
            ListFilter {
                id_prefix: Some("f-".into()),
                ..ListFilter::default()
            },
            vec!["f-1", "f-3"],
        ),
        (
            ListFilter {
                due_from: Some(at(100)),
                due_to: Some(at(150)),
                ..ListFilter::default()
            },
            vec!["f-3"],
        ),
        (
            ListFilter {
                status: Some("SCHEDULED".into()),
                due_from: Some(at(30)),
                target: Some("http".into()),
                id_prefix: Some("f".into()),
                due_to: None,
            },
            vec!["f-3"],
        ),
    ];
    for (filter, want) in cases {
        assert_eq!(list(filter.clone()).await, want, "{filter:?}");
    }
    // The table form, and the flags as the binary reads them.
    let printed = out(
        &table,
        ClientCommand::Task(TaskCommand::List {
            limit: 100,
            after: None,
            filter: ListFilter {
                status: Some("CANCELLED".into()),
                ..ListFilter::default()
            },
        }),
    )
    .await;
    assert!(
        printed.lines().nth(1).unwrap().starts_with("f-2"),
        "{printed}"
    );
    let bin = env!("CARGO_BIN_EXE_punctual");
    let run_bin = {
        let url = url.clone();
        move |args: &[&str]| {
            Command::new(bin)
                .args(args)
                .env("PUNCTUAL_URL", &url)
                .env("PUNCTUAL_API_KEY", API_KEY)
                .output()
                .unwrap()
        }
    };
    let (ok, bad) = tokio::task::spawn_blocking(move || {
        (
            run_bin(&[
                "task",
                "list",
                "--json",
                "--status",
                "SCHEDULED",
                "--target",
                "log",
                "--id-prefix",
                "g",
            ]),
            run_bin(&["task", "list", "--status", "WAITING"]),
        )
    })
    .await
    .unwrap();
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&ok.stdout).unwrap();
    assert_eq!(v["tasks"][0]["id"], "g-1");
    assert_eq!(v["tasks"].as_array().unwrap().len(), 1);
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(
        err.contains("Bad request") && err.contains("WAITING"),
        "{err}"
    );

    // Purge one letter: gone from the DLQ, its task left DEAD.
    out(&table, create("p-1", "0s", true)).await;
    kill_task(dir.path(), "p-1").await;
    let listed = out(
        &table,
        ClientCommand::Dlq(DlqCommand::List {
            limit: 10,
            after: None,
        }),
    )
    .await;
    let letter = listed
        .lines()
        .nth(1)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned();
    let purged = out(
        &table,
        ClientCommand::Dlq(DlqCommand::Purge { id: letter.clone() }),
    )
    .await;
    assert!(purged.contains("task p-1 purged"), "{purged}");
    let listed = out(
        &table,
        ClientCommand::Dlq(DlqCommand::List {
            limit: 10,
            after: None,
        }),
    )
    .await;
    assert_eq!(listed.lines().count(), 1, "only the header: {listed}");
    let dead = list(ListFilter {
        status: Some("DEAD".into()),
        ..ListFilter::default()
    })
    .await;
    assert_eq!(dead, vec!["p-1"]);
    let mut buf = Vec::new();
    let again = run(
        &table,
        ClientCommand::Dlq(DlqCommand::Purge { id: letter }),
        &mut buf,
    )
    .await;
    assert!(
        matches!(again, Err(ClientError::Problem { status: 404, .. })),
        "a second purge finds nothing: {again:?}"
    );
    stop.cancel();
}

#[tokio::test]
async fn status_shows_counts_queues_and_every_poller() {
    let dir = tempfile::tempdir().unwrap();
    let stop = CancellationToken::new();
    let url = start(dir.path(), &stop).await;
    let table = args(&url, API_KEY, false);
    out(
        &table,
        ClientCommand::Task(TaskCommand::Create {
            id: Some("s-1".into()),
            when: when("1h"),
            webhook: None,
            log: true,
            handler: None,
            payload: None,
            max_attempts: None,
        }),
    )
    .await;
    let text = out(&table, ClientCommand::Status).await;
    assert!(text.contains("no poller has announced itself"), "{text}");

    // A poller holding one shard (from another process: the same file) and a standby.
    let backend = punctual::open_embedded(dir.path(), 16).unwrap();
    let t = now();
    backend
        .leases
        .lease_acquire(punctual_core::store::LeaseAcquire {
            shard: 0,
            owner: "poller-a".into(),
            ttl_ms: 60_000,
            now_ms: t,
        })
        .await
        .unwrap();
    for owner in ["poller-a", "poller-b"] {
        backend
            .leases
            .member_beat(punctual_core::store::MemberBeat {
                owner: owner.into(),
                ttl_ms: 60_000,
                now_ms: t,
            })
            .await
            .unwrap();
    }
    let text = out(&table, ClientCommand::Status).await;
    let lines: Vec<&str> = text.lines().collect();
    let words = |i: usize| lines[i].split_whitespace().collect::<Vec<_>>();
    assert_eq!(
        words(0),
        [
            "SCHEDULED",
            "DISPATCHED",
            "RUNNING",
            "RETRY_WAIT",
            "SUCCEEDED",
            "DEAD",
            "CANCELLED"
        ],
        "{text}"
    );
    assert_eq!(words(1), ["1", "0", "0", "0", "0", "0", "0"], "{text}");
    assert_eq!(words(4), ["0", "0", "0", "1", "/", "16", "0"], "{text}");
    assert_eq!(words(7)[..3], ["poller-a", "polling", "1"], "{text}");
    assert_eq!(words(8)[..3], ["poller-b", "standby", "0"], "{text}");

    let json: serde_json::Value =
        serde_json::from_str(&out(&args(&url, API_KEY, true), ClientCommand::Status).await)
            .unwrap();
    assert_eq!(json["stats"]["counts"]["SCHEDULED"], 1);
    assert_eq!(json["shards"]["pollers"][1]["owner"], "poller-b");
    // A viewer may look.
    out(&args(&url, "viewer-key", false), ClientCommand::Status).await;
    stop.cancel();
}
