//! `POST /v1/tasks/{id}/cancel`.

use axum::http::Method;
use punctual_core::store::TaskClaim;
use punctual_core::testkit::T0;
use serde_json::json;

use crate::support::{req, setup};

#[tokio::test]
async fn cancel_a_scheduled_task() {
    let env = setup();
    env.post("/v1/tasks", req("t-1", "1m")).await.ok(201);
    let r = env
        .send(Method::POST, "/v1/tasks/t-1/cancel", None, "")
        .await;
    let body = r.ok(200);
    assert_eq!(body["status"], "CANCELLED");
    assert_eq!(body["version"], 2);
    assert_eq!(
        env.get("/v1/tasks/t-1").await.ok(200)["status"],
        "CANCELLED"
    );
    assert!(env.pending_ids().await.is_empty(), "out of the due index");

    let p = env
        .post("/v1/tasks/t-1/cancel", json!({}))
        .await
        .problem(409);
    assert!(p.detail.contains("already CANCELLED"), "{}", p.detail);
}

#[tokio::test]
async fn cancel_an_unknown_task_is_404() {
    let env = setup();
    let p = env
        .post("/v1/tasks/ghost/cancel", json!({}))
        .await
        .problem(404);
    assert!(p.detail.contains("ghost"), "{}", p.detail);
    env.post("/v1/tasks/a%20b/cancel", json!({}))
        .await
        .problem(404);
}

#[tokio::test]
async fn cancel_at_an_expected_version() {
    let env = setup();
    env.post("/v1/tasks", req("t-1", "1m")).await.ok(201);
    let p = env
        .post("/v1/tasks/t-1/cancel", json!({"version": 7}))
        .await
        .problem(409);
    assert!(
        p.detail.contains("version 1, not the expected 7"),
        "{}",
        p.detail
    );
    assert_eq!(
        env.get("/v1/tasks/t-1").await.ok(200)["status"],
        "SCHEDULED"
    );

    let r = env
        .post("/v1/tasks/t-1/cancel", json!({"version": 1}))
        .await;
    assert_eq!(r.ok(200)["status"], "CANCELLED");
}

#[tokio::test]
async fn a_running_task_cannot_be_cancelled() {
    let env = setup();
    env.post("/v1/tasks", req("t-1", "1s")).await.ok(201);
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
    let p = env
        .post("/v1/tasks/t-1/cancel", json!({}))
        .await
        .problem(409);
    assert!(p.detail.contains("RUNNING"), "{}", p.detail);
    let task = env.get("/v1/tasks/t-1").await;
    let body = task.ok(200);
    assert_eq!(body["status"], "RUNNING");
    assert_eq!(body["running_until"], "2026-01-01T00:01:31.000Z");
}

#[tokio::test]
async fn the_cancel_body_is_checked() {
    let env = setup();
    env.post("/v1/tasks", req("t-1", "1m")).await.ok(201);
    let p = env
        .post("/v1/tasks/t-1/cancel", json!({"version": 1, "force": true}))
        .await
        .problem(422);
    assert_eq!(p.field.as_deref(), Some("force"));
    let p = env
        .post("/v1/tasks/t-1/cancel", json!({"version": "one"}))
        .await
        .problem(422);
    assert_eq!(p.field.as_deref(), Some("version"));
    env.send(
        Method::POST,
        "/v1/tasks/t-1/cancel",
        Some("text/plain"),
        "version=1",
    )
    .await
    .problem(415);
    env.send(
        Method::POST,
        "/v1/tasks/t-1/cancel",
        Some("application/json"),
        "{",
    )
    .await
    .problem(400);
    assert_eq!(
        env.get("/v1/tasks/t-1").await.ok(200)["status"],
        "SCHEDULED"
    );
    // An empty body, whatever its content type, is no body.
    let r = env
        .send(
            Method::POST,
            "/v1/tasks/t-1/cancel",
            Some("application/json"),
            "",
        )
        .await;
    assert_eq!(r.ok(200)["status"], "CANCELLED");
}
