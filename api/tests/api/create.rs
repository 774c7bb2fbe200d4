//! `POST /v1/tasks`, `GET /v1/tasks/{id}`, and how bodies are read.

use axum::http::{Method, header};
use punctual_api::ApiConfig;
use punctual_api::view::TaskView;
use punctual_core::keys::shard_of;
use punctual_core::testkit::T0;
use punctual_core::validate::Limits;
use serde_json::{Value, json};

use crate::support::{req, setup, setup_with};

#[tokio::test]
async fn create_answers_201_with_the_task_and_get_reads_it_back() {
    let env = setup();
    let r = env
        .post(
            "/v1/tasks",
            json!({
                "id": "t-1",
                "delay": "90s",
                "target": {"type": "http", "url": "https://example.com/hook"},
                "payload": {"n": 1},
            }),
        )
        .await;
    let body = r.ok(201).clone();
    assert_eq!(r.headers[header::LOCATION], "/v1/tasks/t-1");
    let expected = json!({
        "id": "t-1",
        "status": "SCHEDULED",
        "version": 1,
        "attempt": 0,
        "max_attempts": 5,
        "backoff": {"base_ms": 1000, "max_ms": 3_600_000},
        "target": {"type": "http", "url": "https://example.com/hook"},
        "payload": {"n": 1},
        "shard": shard_of("t-1", 16),
        "run_at": "2026-01-01T00:02:00.000Z",
        "due_ms": T0 + 90_000,
        "created_at": "2026-01-01T00:00:30.000Z",
        "updated_at": "2026-01-01T00:00:30.000Z",
        "last_error": null,
        "running_until": null,
    });
    assert_eq!(body, expected);
    serde_json::from_value::<TaskView>(body.clone()).unwrap();

    let got = env.get("/v1/tasks/t-1").await;
    assert_eq!(got.ok(200), &expected);
}

#[tokio::test]
async fn run_at_is_read_as_rfc3339_with_any_offset_and_an_id_is_generated() {
    let env = setup();
    let r = env
        .post(
            "/v1/tasks",
            json!({"run_at": "2026-01-01T01:05:00+01:00", "target": {"type": "log"}, "max_attempts": 2}),
        )
        .await;
    let body = r.ok(201);
    assert_eq!(body["run_at"], "2026-01-01T00:05:00.000Z");
    assert_eq!(body["max_attempts"], 2);
    assert_eq!(body["payload"], Value::Null);
    let id = body["id"].as_str().unwrap();
    assert_eq!(id.len(), 26, "a ULID: {id}");
    assert_eq!(env.get(&format!("/v1/tasks/{id}")).await.ok(200)["id"], id);
}

#[tokio::test]
async fn each_invalid_field_is_named_and_nothing_is_stored() {
    let env = setup();
    let big = "x".repeat(300 * 1024);
    let cases: Vec<(Value, &str)> = vec![
        (json!({"target": {"type": "log"}}), "run_at"),
        (
            json!({"run_at": "tomorrow", "target": {"type": "log"}}),
            "run_at",
        ),
        (
            json!({"run_at": "2026-01-01T00:00:00Z", "delay": "1s", "target": {"type": "log"}}),
            "run_at",
        ),
        (
            json!({"run_at": "2099-01-01T00:00:00Z", "target": {"type": "log"}}),
            "run_at",
        ),
        (json!({"delay": "soon", "target": {"type": "log"}}), "delay"),
        (
            json!({"delay": "400days", "target": {"type": "log"}}),
            "delay",
        ),
        (json!({"delay": "1s"}), "target"),
        (
            json!({"delay": "1s", "target": {"type": "http", "url": "ftp://x/y"}}),
            "target.url",
        ),
        (
            json!({"delay": "1s", "target": {"type": "http", "url": "http://"}}),
            "target.url",
        ),
        (
            json!({"delay": "1s", "target": {"type": "http", "url": "http://x", "timeout_ms": 0}}),
            "target.timeout_ms",
        ),
        (
            json!({"delay": "1s", "target": {"type": "handler", "name": ""}}),
            "target.name",
        ),
        (
            json!({"delay": "1s", "target": {"type": "pigeon"}}),
            "target.type",
        ),
        (
            json!({"delay": "1s", "target": {"type": "log"}, "max_attempts": 0}),
            "max_attempts",
        ),
        (
            json!({"delay": "1s", "target": {"type": "log"}, "max_attempts": 101}),
            "max_attempts",
        ),
        (
            json!({"delay": "1s", "target": {"type": "log"}, "max_attempts": "3"}),
            "max_attempts",
        ),
        (
            json!({"delay": "1s", "target": {"type": "log"}, "backoff": {"base_ms": 10, "max_ms": 1}}),
            "backoff",
        ),
        (
            json!({"delay": "1s", "target": {"type": "log"}, "backoff": {"base_ms": 10, "max_ms": 20, "jitter": 1}}),
            "backoff.jitter",
        ),
        (
            json!({"id": "a b", "delay": "1s", "target": {"type": "log"}}),
            "id",
        ),
        (
            json!({"id": "", "delay": "1s", "target": {"type": "log"}}),
            "id",
        ),
        (
            json!({"id": "x".repeat(129), "delay": "1s", "target": {"type": "log"}}),
            "id",
        ),
        (
            json!({"id": 7, "delay": "1s", "target": {"type": "log"}}),
            "id",
        ),
        (
            json!({"delay": "1s", "target": {"type": "log"}, "payload": big}),
            "payload",
        ),
        (
            json!({"delay": "1s", "target": {"type": "log"}, "colour": "blue"}),
            "colour",
        ),
    ];
    for (body, field) in cases {
        let r = env.post("/v1/tasks", body.clone()).await;
        let p = r.problem(422);
        assert_eq!(p.kind, "/problems/invalid");
        assert_eq!(p.field.as_deref(), Some(field), "{body:.200}: {p:?}");
    }
    assert!(env.pending_ids().await.is_empty());
}

#[tokio::test]
async fn unknown_fields_are_refused_and_named() {
    let env = setup();
    let mut body = req("t-1", "1s");
    body["colour"] = json!("blue");
    let p = env.post("/v1/tasks", body).await.problem(422);
    assert_eq!(p.field.as_deref(), Some("colour"));
    assert!(p.detail.contains("unknown field `colour`"), "{}", p.detail);
    env.get("/v1/tasks/t-1").await.problem(404);
}

#[tokio::test]
async fn same_id_same_request_is_200_with_the_existing_task() {
    let env = setup();
    let body = json!({"id": "t-1", "run_at": "2026-01-01T00:10:00Z", "target": {"type": "log"}, "payload": [1, 2]});
    let first = env.post("/v1/tasks", body.clone()).await.ok(201).clone();
    env.clock.advance(5_000);
    let again = env.post("/v1/tasks", body).await;
    assert_eq!(again.ok(200), &first, "the existing task, unchanged");
    assert!(again.headers.get(header::LOCATION).is_none());
}

#[tokio::test]
async fn same_id_different_request_is_409_and_changes_nothing() {
    let env = setup();
    let first = env
        .post("/v1/tasks", req("t-1", "1m"))
        .await
        .ok(201)
        .clone();
    let mut other = req("t-1", "1m");
    other["payload"] = json!({"different": true});
    let p = env.post("/v1/tasks", other).await.problem(409);
    assert_eq!(p.kind, "/problems/conflict");
    assert!(p.detail.contains("t-1"), "{}", p.detail);
    let p = env
        .post(
            "/v1/tasks",
            json!({"id": "t-1", "run_at": "2026-01-01T00:05:00Z", "target": {"type": "log"}}),
        )
        .await
        .problem(409);
    assert!(p.detail.contains("different request"), "{}", p.detail);
    assert_eq!(env.get("/v1/tasks/t-1").await.ok(200), &first);
}

#[tokio::test]
async fn a_retried_delay_request_matches_its_delay_not_its_absolute_time() {
    let env = setup();
    let first = env
        .post("/v1/tasks", req("t-1", "5m"))
        .await
        .ok(201)
        .clone();
    env.clock.advance(7_000);
    // "5 minutes after I asked", asked again 7 s later: the same request.
    assert_eq!(
        env.post("/v1/tasks", req("t-1", "5m")).await.ok(200),
        &first
    );
    // Another delay is another request.
    env.post("/v1/tasks", req("t-1", "6m")).await.problem(409);
}

#[tokio::test]
async fn malformed_json_is_400_without_a_field() {
    let env = setup();
    for body in [r#"{"delay": "1s","#, "", "{} {}", "nope"] {
        let r = env
            .send(Method::POST, "/v1/tasks", Some("application/json"), body)
            .await;
        let p = r.problem(400);
        assert_eq!(p.field, None, "{body}");
        assert!(p.detail.contains("not valid JSON"), "{}", p.detail);
    }
}

#[tokio::test]
async fn a_body_that_is_not_json_is_415() {
    let env = setup();
    let body = serde_json::to_vec(&req("t-1", "1s")).unwrap();
    for ct in [
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
        None,
    ] {
        let r = env.send(Method::POST, "/v1/tasks", ct, body.clone()).await;
        let p = r.problem(415);
        assert_eq!(p.kind, "/problems/unsupported-media-type");
    }
    env.get("/v1/tasks/t-1").await.problem(404);
    // A JSON media type with parameters or a +json suffix is fine.
    let r = env
        .send(
            Method::POST,
            "/v1/tasks",
            Some("application/json; charset=utf-8"),
            body,
        )
        .await;
    r.ok(201);
}

#[tokio::test]
async fn a_body_beyond_the_limit_is_413_and_a_payload_beyond_its_limit_is_422() {
    let config = ApiConfig {
        limits: Limits {
            max_payload_bytes: 1_000,
            ..Limits::default()
        },
        body_headroom_bytes: 1_000,
        ..ApiConfig::default()
    };
    let env = setup_with(config);
    let mut body = req("t-1", "1s");
    body["payload"] = json!("y".repeat(1_500));
    let p = env.post("/v1/tasks", body.clone()).await.problem(422);
    assert_eq!(p.field.as_deref(), Some("payload"));
    body["payload"] = json!("y".repeat(2_500));
    let p = env.post("/v1/tasks", body).await.problem(413);
    assert_eq!(p.kind, "/problems/payload-too-large");
    env.get("/v1/tasks/t-1").await.problem(404);
}

#[tokio::test]
async fn get_unknown_or_impossible_ids_is_404() {
    let env = setup();
    let p = env.get("/v1/tasks/nobody").await.problem(404);
    assert!(p.detail.contains("nobody"), "{}", p.detail);
    env.get("/v1/tasks/a%20b").await.problem(404);
    env.get(&format!("/v1/tasks/{}", "x".repeat(300)))
        .await
        .problem(404);
}

#[tokio::test]
async fn a_task_may_be_called_batch() {
    let env = setup();
    env.post("/v1/tasks", req("batch", "1m")).await.ok(201);
    assert_eq!(env.get("/v1/tasks/batch").await.ok(200)["id"], "batch");
    let r = env
        .send(Method::POST, "/v1/tasks/batch/cancel", None, "")
        .await;
    assert_eq!(r.ok(200)["status"], "CANCELLED");
}

#[tokio::test]
async fn healthz_is_ok() {
    let env = setup();
    assert_eq!(env.get("/healthz").await.ok(200), &json!({"status": "ok"}));
}
