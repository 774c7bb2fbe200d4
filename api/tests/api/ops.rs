//! Reschedule, replay, the DLQ routes, shards, stats, readiness and metrics.

use axum::http::Method;
use punctual_core::store::{
    Completion, LeaseAcquire, MemberBeat, QueueDeadLetter, QueueReceive, QueueSend, TaskClaim,
    TaskComplete,
};
use punctual_core::testkit::T0;
use punctual_core::validate::format_rfc3339;
use serde_json::json;

use crate::support::*;

/// Creates a `log` task due now and runs it to `DEAD`, with its message in the DLQ.
async fn dead_task(env: &Env, id: &str) {
    env.post("/v1/tasks", req(id, "0s")).await.ok(201);
    let b = &env.backend;
    let t = b.tasks.task_get(id).await.unwrap().unwrap();
    let msg = punctual_core::store::DispatchMessage {
        task_id: id.into(),
        version: t.version,
        shard: t.shard,
        due_ms: t.due_ms,
    };
    b.queue
        .queue_send(QueueSend {
            messages: vec![msg.clone()],
            now_ms: T0,
        })
        .await
        .unwrap();
    let got = b
        .queue
        .queue_receive(QueueReceive {
            max: 10,
            visibility_ms: 30_000,
            wait_ms: 0,
            now_ms: T0,
        })
        .await
        .unwrap();
    let received = got.into_iter().find(|m| m.message.task_id == id).unwrap();
    b.tasks
        .task_claim(TaskClaim {
            task_id: id.into(),
            version: t.version,
            now_ms: T0,
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
                error: "boom".into(),
            },
            now_ms: T0,
        })
        .await
        .unwrap();
    b.queue
        .queue_dead_letter(QueueDeadLetter {
            receipt: received.receipt,
            message: msg,
            reason: "boom".into(),
            now_ms: T0,
        })
        .await
        .unwrap();
}

#[tokio::test]
async fn reschedule_moves_the_due_time_and_bumps_the_version() {
    let env = setup();
    env.post("/v1/tasks", req("t-1", "1m")).await.ok(201);
    let later = format_rfc3339(T0 + 3_600_000);
    let body = env
        .post("/v1/tasks/t-1/reschedule", json!({"run_at": later}))
        .await
        .ok(200)
        .clone();
    assert_eq!(body["run_at"], later);
    assert_eq!(body["version"], 2);
    assert_eq!(body["status"], "SCHEDULED");
    let body = env
        .post(
            "/v1/tasks/t-1/reschedule",
            json!({"delay": "5m", "version": 2}),
        )
        .await
        .ok(200)
        .clone();
    assert_eq!(body["due_ms"], T0 + 300_000);
    let p = env
        .post(
            "/v1/tasks/t-1/reschedule",
            json!({"delay": "5m", "version": 2}),
        )
        .await
        .problem(409);
    assert!(p.detail.contains("not the expected 2"), "{}", p.detail);
}

#[tokio::test]
async fn reschedule_refuses_bad_input() {
    let env = setup();
    env.post("/v1/tasks", req("t-1", "1m")).await.ok(201);
    let field = |r: Reply| r.problem(422).field;
    let at = "/v1/tasks/t-1/reschedule";
    assert_eq!(
        field(env.post(at, json!({})).await).as_deref(),
        Some("run_at")
    );
    assert_eq!(
        field(env.post(at, json!({"run_at": "tomorrow"})).await).as_deref(),
        Some("run_at")
    );
    assert_eq!(
        field(env.post(at, json!({"delay": "soon"})).await).as_deref(),
        Some("delay")
    );
    assert_eq!(
        field(env.post(at, json!({"delay": "1000d"})).await).as_deref(),
        Some("delay")
    );
    assert_eq!(
        field(env.post(at, json!({"delay": "1m", "run_at": "x"})).await).as_deref(),
        Some("run_at")
    );
    assert_eq!(
        field(env.post(at, json!({"delay": "1m", "colour": 1})).await).as_deref(),
        Some("colour")
    );
    env.post("/v1/tasks/ghost/reschedule", json!({"delay": "1m"}))
        .await
        .problem(404);
    // Nothing changed.
    assert_eq!(env.get("/v1/tasks/t-1").await.ok(200)["version"], 1);
}

#[tokio::test]
async fn replay_runs_a_finished_task_again() {
    let env = setup();
    env.post("/v1/tasks", req("t-1", "1m")).await.ok(201);
    let p = env
        .send(Method::POST, "/v1/tasks/t-1/replay", None, "")
        .await
        .problem(409);
    assert!(
        p.detail.contains("only DEAD, SUCCEEDED or CANCELLED"),
        "{}",
        p.detail
    );
    env.post("/v1/tasks/t-1/cancel", json!({})).await.ok(200);
    let body = env
        .send(Method::POST, "/v1/tasks/t-1/replay", None, "")
        .await
        .ok(200)
        .clone();
    assert_eq!(body["status"], "SCHEDULED");
    assert_eq!(body["version"], 3);
    assert_eq!(body["due_ms"], T0);
    assert_eq!(body["attempt"], 0);
    assert_eq!(env.pending_ids().await, ["t-1"]);

    dead_task(&env, "t-2").await;
    assert_eq!(env.get("/v1/tasks/t-2").await.ok(200)["status"], "DEAD");
    let p = env
        .post("/v1/tasks/t-2/replay", json!({"version": 7}))
        .await
        .problem(409);
    assert!(p.detail.contains("not the expected 7"), "{}", p.detail);
    let body = env
        .post("/v1/tasks/t-2/replay", json!({"delay": "10s"}))
        .await
        .ok(200)
        .clone();
    assert_eq!(body["due_ms"], T0 + 10_000);
    assert_eq!(body["last_error"], serde_json::Value::Null);
    env.post("/v1/tasks/ghost/replay", json!({}))
        .await
        .problem(404);
}

#[tokio::test]
async fn dead_letters_list_and_replay_one() {
    let env = setup();
    dead_task(&env, "d-1").await;
    dead_task(&env, "d-2").await;
    let body = env.get("/v1/dlq?limit=1").await.ok(200).clone();
    assert_eq!(body["letters"].as_array().unwrap().len(), 1);
    let first = body["letters"][0].clone();
    assert_eq!(first["task_id"], "d-1");
    assert_eq!(first["reason"], "boom");
    let next = body["next"].as_str().unwrap().to_owned();
    let body = env
        .get(&format!("/v1/dlq?after={next}"))
        .await
        .ok(200)
        .clone();
    assert_eq!(body["letters"][0]["task_id"], "d-2");
    assert!(body["next"].is_null());
    env.get("/v1/dlq?limit=0").await.problem(400);
    env.get("/v1/dlq?colour=1").await.problem(400);

    let id = first["id"].as_str().unwrap();
    let r = env
        .send(Method::POST, &format!("/v1/dlq/{id}/replay"), None, "")
        .await;
    let body = r.ok(200).clone();
    assert_eq!(body["outcome"], "replayed");
    assert_eq!(body["task"]["status"], "SCHEDULED");
    assert_eq!(body["task"]["attempt"], 0);
    env.send(Method::POST, &format!("/v1/dlq/{id}/replay"), None, "")
        .await
        .problem(404);
    let left = env.get("/v1/dlq").await.ok(200).clone();
    assert_eq!(left["letters"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn redrive_walks_the_dlq_in_pages() {
    let env = setup();
    for i in 0..5 {
        dead_task(&env, &format!("d-{i}")).await;
    }
    // One task was replayed by hand meanwhile: its letter is dropped, not replayed twice.
    env.post("/v1/tasks/d-4/replay", json!({})).await.ok(200);
    let mut after = None::<String>;
    let (mut replayed, mut dropped, mut calls) = (0, 0, 0);
    loop {
        let body = match &after {
            None => json!({"limit": 2}),
            Some(a) => json!({"limit": 2, "after": a}),
        };
        let r = env.post("/v1/dlq/redrive", body).await.ok(200).clone();
        replayed += r["replayed"].as_u64().unwrap();
        dropped += r["dropped"].as_u64().unwrap();
        calls += 1;
        match r["next"].as_str() {
            Some(n) => after = Some(n.to_owned()),
            None => break,
        }
        assert!(calls < 10);
    }
    assert_eq!((replayed, dropped), (4, 1));
    assert!(
        env.get("/v1/dlq").await.ok(200)["letters"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    assert_eq!(env.pending_ids().await.len(), 5);
    // An empty body redrives from the start; an operator key is not enough.
    let r = env.send(Method::POST, "/v1/dlq/redrive", None, "").await;
    assert_eq!(r.ok(200)["examined"], 0);
    env.send_as(
        Some(OPERATOR_KEY),
        Method::POST,
        "/v1/dlq/redrive",
        None,
        "",
    )
    .await
    .problem(403);
    env.post("/v1/dlq/redrive", json!({"after": "!!"}))
        .await
        .problem(400);
}

#[tokio::test]
async fn shards_stats_ready_and_metrics() {
    let env = setup();
    env.backend
        .leases
        .lease_acquire(LeaseAcquire {
            shard: 3,
            owner: "poller-a".into(),
            ttl_ms: 10_000,
            now_ms: T0,
        })
        .await
        .unwrap();
    let body = env.get("/v1/shards").await.ok(200).clone();
    assert_eq!(body["shard_count"], 16);
    assert_eq!(body["leases"][0]["shard"], 3);
    assert_eq!(body["leases"][0]["owner"], "poller-a");
    assert_eq!(body["leases"][0]["held"], true);
    assert_eq!(body["leases"][0]["epoch"], 1);
    // poller-a holds a lease without having announced itself; b announced itself and holds
    // nothing (a standby); c's presence lapsed.
    assert_eq!(
        body["pollers"],
        json!([{
            "owner": "poller-a", "live": true, "shards_held": 1, "presence_expires_at": null
        }])
    );
    for (owner, now_ms) in [("poller-b", T0), ("poller-c", T0 - 60_000)] {
        env.backend
            .leases
            .member_beat(MemberBeat {
                owner: owner.into(),
                ttl_ms: 10_000,
                now_ms,
            })
            .await
            .unwrap();
    }
    let body = env.get("/v1/shards").await.ok(200).clone();
    assert_eq!(
        body["pollers"],
        json!([
            {"owner": "poller-a", "live": true, "shards_held": 1, "presence_expires_at": null},
            {"owner": "poller-b", "live": true, "shards_held": 0,
             "presence_expires_at": format_rfc3339(T0 + 10_000)},
            {"owner": "poller-c", "live": false, "shards_held": 0,
             "presence_expires_at": format_rfc3339(T0 - 50_000)},
        ])
    );

    dead_task(&env, "d-1").await;
    env.state
        .activity
        .record(T0, punctual_api::metrics::Happened::Fired { lag_ms: 40 });
    let body = env.get("/v1/stats").await.ok(200).clone();
    assert_eq!(body["shards_held"], 1);
    assert_eq!(body["queue"]["dead"], 1);
    assert_eq!(body["activity"]["fired_last_minute"], 1);
    let backlog = body["backlog"].as_array().unwrap();
    assert_eq!(backlog.len(), 60);
    assert_eq!(backlog[0]["minute"], "2026-01-01T00:00:00.000Z");
    assert!(backlog.iter().all(|m| m["due"] == 0), "{backlog:?}");
    env.post("/v1/tasks", req("b-1", "90s")).await.ok(201);
    env.post("/v1/tasks", req("b-2", "100s")).await.ok(201);
    env.post("/v1/tasks", req("b-3", "2h")).await.ok(201);
    let body = env.get("/v1/stats").await.ok(200).clone();
    let due: Vec<u64> = body["backlog"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["due"].as_u64().unwrap())
        .collect();
    assert_eq!(&due[..3], &[0, 0, 2]);
    assert_eq!(due.iter().sum::<u64>(), 2);
    assert_eq!(body["activity"]["lag_ms_max"], 40);
    assert_eq!(
        body["counts"],
        json!({"SCHEDULED": 3, "DISPATCHED": 0, "RUNNING": 0, "RETRY_WAIT": 0,
               "SUCCEEDED": 0, "DEAD": 1, "CANCELLED": 0})
    );

    let body = env.get("/readyz").await.ok(200).clone();
    assert_eq!(body["status"], "ready");
    let r = env.get("/metrics").await;
    assert_eq!(r.status, 200);
    assert!(
        r.headers["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain")
    );
}

#[tokio::test]
async fn readyz_is_503_when_the_store_is_down() {
    let (env, flaky) = setup_flaky();
    flaky.set(Mode::Unavailable);
    let p = env.get("/readyz").await.problem(503);
    assert!(!p.detail.contains("secret"), "{p:?}");
}

#[tokio::test]
async fn stats_say_null_counts_where_the_backend_cannot_count_cheaply() {
    let (env, flaky) = setup_flaky();
    env.post("/v1/tasks", req("n-1", "90s")).await.ok(201);
    let body = env.get("/v1/stats").await.ok(200).clone();
    assert_eq!(body["counts"]["SCHEDULED"], 1);
    let mut caps = env.backend.tasks.capabilities();
    caps.status_counts = false;
    *flaky.caps.lock().unwrap() = Some(caps);
    flaky.take_calls();
    let body = env.get("/v1/stats").await.ok(200).clone();
    assert!(body["counts"].is_null(), "{body}");
    assert!(!flaky.take_calls().contains(&"task_counts"));
}

#[tokio::test]
async fn a_dead_letter_is_read_and_purged_by_id() {
    let env = setup();
    dead_task(&env, "d-1").await;
    dead_task(&env, "d-2").await;
    let listed = env.get("/v1/dlq").await.ok(200).clone();
    let id = listed["letters"][1]["id"].as_str().unwrap().to_owned();
    let one = env.get(&format!("/v1/dlq/{id}")).await.ok(200).clone();
    assert_eq!(one, listed["letters"][1]);
    assert_eq!(one["task_id"], "d-2");
    // A viewer reads but cannot purge.
    let uri = format!("/v1/dlq/{id}");
    env.send_as(Some(VIEWER_KEY), Method::GET, &uri, None, "")
        .await
        .ok(200);
    env.send_as(Some(VIEWER_KEY), Method::DELETE, &uri, None, "")
        .await
        .problem(403);
    let gone = env
        .send_as(Some(OPERATOR_KEY), Method::DELETE, &uri, None, "")
        .await
        .ok(200)
        .clone();
    assert_eq!(gone, one);
    env.get(&uri).await.problem(404);
    env.send(Method::DELETE, &uri, None, "").await.problem(404);
    // Only that letter went; its task is left as it was.
    let left = env.get("/v1/dlq").await.ok(200).clone();
    assert_eq!(left["letters"].as_array().unwrap().len(), 1);
    assert_eq!(left["letters"][0]["task_id"], "d-1");
    assert_eq!(env.get("/v1/tasks/d-2").await.ok(200)["status"], "DEAD");
    for bad in ["999999", "not-a-letter"] {
        let p = env.get(&format!("/v1/dlq/{bad}")).await.problem(404);
        assert!(p.detail.contains(bad), "{p:?}");
        env.send(Method::DELETE, &format!("/v1/dlq/{bad}"), None, "")
            .await
            .problem(404);
    }
}
