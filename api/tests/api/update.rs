//! `PATCH /v1/tasks/{id}`: edit the payload or retry policy of a task that is not running.

use axum::http::Method;
use punctual_api::ApiConfig;
use punctual_core::store::{TaskClaim, TaskMarkDispatched};
use punctual_core::testkit::T0;
use punctual_core::validate::Limits;
use serde_json::{Value, json};

use crate::support::*;

async fn patch_as(env: &Env, key: &'static str, uri: &str, body: Value) -> Reply {
    env.send_as(
        Some(key),
        Method::PATCH,
        uri,
        Some("application/json"),
        serde_json::to_vec(&body).unwrap(),
    )
    .await
}

async fn patch(env: &Env, uri: &str, body: Value) -> Reply {
    patch_as(env, OPERATOR_KEY, uri, body).await
}

#[tokio::test]
async fn update_changes_payload_and_policy_and_bumps_the_version() {
    let env = setup();
    env.post("/v1/tasks", req("t-1", "1m")).await.ok(201);
    let body = patch(
        &env,
        "/v1/tasks/t-1",
        json!({"payload": {"n": 2}, "max_attempts": 8, "version": 1}),
    )
    .await
    .ok(200)
    .clone();
    assert_eq!(body["version"], 2);
    assert_eq!(body["status"], "SCHEDULED");
    assert_eq!(body["payload"], json!({"n": 2}));
    assert_eq!(body["max_attempts"], 8);
    assert_eq!(body["due_ms"], T0 + 60_000);
    let body = patch(
        &env,
        "/v1/tasks/t-1",
        json!({"backoff": {"base_ms": 10, "max_ms": 20}, "payload": null}),
    )
    .await
    .ok(200)
    .clone();
    assert_eq!(body["version"], 3);
    assert_eq!(body["backoff"], json!({"base_ms": 10, "max_ms": 20}));
    assert_eq!(body["payload"], Value::Null);
    assert_eq!(body["max_attempts"], 8);
    assert_eq!(env.get("/v1/tasks/t-1").await.ok(200), &body);
}

#[tokio::test]
async fn update_of_a_dispatched_task_schedules_it_again() {
    let env = setup();
    env.post("/v1/tasks", req("t-1", "0s")).await.ok(201);
    let n = env
        .backend
        .tasks
        .task_mark_dispatched(TaskMarkDispatched {
            tasks: vec![("t-1".into(), 1)],
            now_ms: T0,
        })
        .await
        .unwrap();
    assert_eq!(n, 1);
    assert!(env.pending_ids().await.is_empty());
    let body = patch(&env, "/v1/tasks/t-1", json!({"payload": "v2"}))
        .await
        .ok(200)
        .clone();
    assert_eq!(
        (body["status"].clone(), body["version"].clone()),
        (json!("SCHEDULED"), json!(2))
    );
    assert_eq!(env.pending_ids().await, vec!["t-1".to_owned()]);
}

#[tokio::test]
async fn update_of_an_unknown_task_is_404() {
    let env = setup();
    patch(&env, "/v1/tasks/ghost", json!({"max_attempts": 3}))
        .await
        .problem(404);
    patch(&env, "/v1/tasks/not%20an%20id", json!({"max_attempts": 3}))
        .await
        .problem(404);
}

#[tokio::test]
async fn update_conflicts_with_a_run_or_another_version() {
    let env = setup();
    env.post("/v1/tasks", req("t-1", "1s")).await.ok(201);
    let p = patch(
        &env,
        "/v1/tasks/t-1",
        json!({"max_attempts": 3, "version": 4}),
    )
    .await
    .problem(409);
    assert!(p.detail.contains("not the expected 4"), "{}", p.detail);
    env.backend
        .tasks
        .task_claim(TaskClaim {
            task_id: "t-1".into(),
            version: 1,
            now_ms: T0 + 1_000,
            run_timeout_ms: 60_000,
        })
        .await
        .unwrap();
    let p = patch(&env, "/v1/tasks/t-1", json!({"max_attempts": 3}))
        .await
        .problem(409);
    assert!(p.detail.contains("RUNNING"), "{}", p.detail);
    let body = env.get("/v1/tasks/t-1").await.ok(200).clone();
    assert_eq!(
        (body["version"].clone(), body["max_attempts"].clone()),
        (json!(1), json!(5))
    );
}

#[tokio::test]
async fn update_refuses_bad_input_naming_the_field_and_changes_nothing() {
    let env = setup_with(ApiConfig {
        limits: Limits {
            max_payload_bytes: 16,
            ..Limits::default()
        },
        ..ApiConfig::default()
    });
    env.post("/v1/tasks", req("t-1", "1m")).await.ok(201);
    let field = |r: Reply| r.problem(422).field;
    for (body, expected) in [
        (json!({}), "payload"),
        (json!({"version": 1}), "payload"),
        (json!({"payload": "x".repeat(64)}), "payload"),
        (json!({"max_attempts": 0}), "max_attempts"),
        (json!({"max_attempts": 101}), "max_attempts"),
        (json!({"backoff": {"base_ms": 0, "max_ms": 5}}), "backoff"),
        (json!({"backoff": {"base_ms": 10, "max_ms": 5}}), "backoff"),
        (json!({"max_attempts": 3, "colour": 1}), "colour"),
        (json!({"run_at": "2026-01-01T00:00:00Z"}), "run_at"),
    ] {
        let got = field(patch(&env, "/v1/tasks/t-1", body.clone()).await);
        assert_eq!(got.as_deref(), Some(expected), "{body}");
    }
    assert_eq!(env.get("/v1/tasks/t-1").await.ok(200)["version"], 1);
}

#[tokio::test]
async fn a_viewer_cannot_update() {
    let env = setup();
    env.post("/v1/tasks", req("t-1", "1m")).await.ok(201);
    patch_as(
        &env,
        VIEWER_KEY,
        "/v1/tasks/t-1",
        json!({"max_attempts": 3}),
    )
    .await
    .problem(403);
    assert_eq!(env.get("/v1/tasks/t-1").await.ok(200)["version"], 1);
}
