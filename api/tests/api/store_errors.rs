//! How store failures reach the client, and what the service asks of the store.

use axum::http::header;
use punctual_api::service;
use punctual_core::Target;
use punctual_core::validate::{CreateTask, MAX_BATCH};
use serde_json::json;

use crate::support::{Mode, req, setup_flaky};

#[tokio::test]
async fn an_unavailable_store_is_503_with_retry_after_and_no_internals() {
    let (env, flaky) = setup_flaky();
    flaky.set(Mode::Unavailable);
    for r in [
        env.post("/v1/tasks", req("t-1", "1m")).await,
        env.get("/v1/tasks/t-1").await,
        env.get("/v1/tasks").await,
        env.post("/v1/tasks/t-1/cancel", json!({})).await,
    ] {
        let p = r.problem(503);
        assert_eq!(p.kind, "/problems/unavailable");
        assert_eq!(r.headers[header::RETRY_AFTER], "1");
        let text = r.body.to_string();
        assert!(
            !text.contains("secret") && !text.contains("SQLITE") && !text.contains("fire"),
            "{text}"
        );
    }
}

#[tokio::test]
async fn a_broken_store_is_500_saying_nothing_internal() {
    let (env, flaky) = setup_flaky();
    flaky.set(Mode::ShortBatch);
    let r = env
        .post(
            "/v1/tasks/batch",
            json!({"tasks": [req("a", "1m"), req("b", "1m")]}),
        )
        .await;
    let p = r.problem(500);
    assert_eq!(p.kind, "/problems/internal");
    assert!(
        !p.detail.contains("task_put_batch") && !p.detail.contains("outcomes"),
        "{}",
        p.detail
    );
}

#[tokio::test]
async fn invalid_input_never_reaches_the_store() {
    let (env, flaky) = setup_flaky();
    env.post("/v1/tasks", json!({"delay": "1s"}))
        .await
        .problem(422);
    env.post(
        "/v1/tasks/batch",
        json!({"tasks": [req("a", "1m"), {"delay": "x"}]}),
    )
    .await
    .problem(422);
    env.post(
        "/v1/tasks/batch",
        json!({"tasks": [req("a", "1m"), req("a", "1m")]}),
    )
    .await
    .problem(422);
    env.get("/v1/tasks?limit=0").await.problem(400);
    env.get("/v1/tasks/a%20b").await.problem(404);
    assert_eq!(flaky.take_calls(), Vec::<&str>::new());
}

#[tokio::test]
async fn a_batch_of_new_tasks_is_one_store_call() {
    let (env, flaky) = setup_flaky();
    let reqs: Vec<CreateTask> = (0..MAX_BATCH)
        .map(|i| CreateTask {
            id: (i % 2 == 0).then(|| format!("c-{i}")),
            delay: Some(format!("{}s", i % 120)),
            target: Some(Target::Log),
            ..CreateTask::default()
        })
        .collect();
    let results = service::create_tasks(&env.state, reqs.clone())
        .await
        .unwrap();
    assert_eq!(results.len(), MAX_BATCH);
    assert_eq!(flaky.take_calls(), ["task_put_batch"]);
    // Existing ids cost no extra read either: the batch put returns them.
    let ids_only: Vec<CreateTask> = reqs.into_iter().filter(|r| r.id.is_some()).collect();
    service::create_tasks(&env.state, ids_only).await.unwrap();
    assert_eq!(flaky.take_calls(), ["task_put_batch"]);
}
