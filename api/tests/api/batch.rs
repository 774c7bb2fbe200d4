//! `POST /v1/tasks/batch` and `service::create_tasks`, the bench's way in.

use punctual_api::service;
use punctual_api::view::{BatchResponse, ItemStatus};
use punctual_core::Target;
use punctual_core::validate::{CreateTask, MAX_BATCH};
use serde_json::{Value, json};

use crate::support::{req, setup};

fn batch(items: Vec<Value>) -> Value {
    json!({ "tasks": items })
}

#[tokio::test]
async fn a_batch_creates_every_task_and_answers_in_order() {
    let env = setup();
    let r = env
        .post(
            "/v1/tasks/batch",
            batch(vec![
                req("a", "1m"),
                json!({"delay": "2m", "target": {"type": "log"}}),
                req("c", "30s"),
            ]),
        )
        .await;
    let answer: BatchResponse = serde_json::from_value(r.ok(200).clone()).unwrap();
    assert_eq!(answer.results.len(), 3);
    assert_eq!(answer.results[0].id, "a");
    assert_eq!(answer.results[2].id, "c");
    assert_eq!(answer.results[1].id.len(), 26, "a generated ULID");
    for item in &answer.results {
        assert_eq!(item.status, ItemStatus::Created);
        let task = item.task.as_ref().unwrap();
        assert_eq!(task.id, item.id);
        assert_eq!(
            env.get(&format!("/v1/tasks/{}", item.id)).await.ok(200)["id"],
            json!(item.id)
        );
    }
    // The raw JSON: `task` present, no `detail` for created items.
    let raw = &r.body["results"][0];
    assert_eq!(raw["status"], "created");
    assert!(raw.get("detail").is_none());
}

#[tokio::test]
async fn a_batch_again_reports_existing_conflict_and_created() {
    let env = setup();
    env.post(
        "/v1/tasks/batch",
        batch(vec![req("a", "1m"), req("b", "1m")]),
    )
    .await
    .ok(200);
    env.clock.advance(3_000);
    let mut b_changed = req("b", "1m");
    b_changed["payload"] = json!("other");
    let r = env
        .post(
            "/v1/tasks/batch",
            batch(vec![req("a", "1m"), b_changed, req("c", "1m")]),
        )
        .await;
    let results = &r.ok(200)["results"];
    assert_eq!(results[0]["status"], "existing");
    assert_eq!(results[0]["task"]["id"], "a");
    assert_eq!(results[1]["status"], "conflict");
    assert_eq!(results[1]["id"], "b");
    assert!(results[1].get("task").is_none());
    assert!(
        results[1]["detail"]
            .as_str()
            .unwrap()
            .contains("different request")
    );
    assert_eq!(results[2]["status"], "created");
    assert_eq!(env.get("/v1/tasks/b").await.ok(200)["payload"], Value::Null);
}

#[tokio::test]
async fn one_bad_item_refuses_the_whole_batch_and_stores_nothing() {
    let env = setup();
    let bad = json!({"id": "b", "delay": "1m", "target": {"type": "http", "url": "mailto:x"}});
    let r = env
        .post(
            "/v1/tasks/batch",
            batch(vec![req("a", "1m"), bad, req("c", "1m")]),
        )
        .await;
    let p = r.problem(422);
    assert_eq!(p.field.as_deref(), Some("tasks[1].target.url"));
    assert!(env.pending_ids().await.is_empty());
    env.get("/v1/tasks/a").await.problem(404);

    // A shape error in an item names it too.
    let mut odd = req("d", "1m");
    odd["colour"] = json!(1);
    let p = env
        .post(
            "/v1/tasks/batch",
            batch(vec![req("a", "1m"), req("b", "1m"), odd]),
        )
        .await
        .problem(422);
    assert_eq!(p.field.as_deref(), Some("tasks[2].colour"));
    assert!(env.pending_ids().await.is_empty());
}

#[tokio::test]
async fn duplicate_ids_in_one_batch_are_refused() {
    let env = setup();
    let r = env
        .post(
            "/v1/tasks/batch",
            batch(vec![req("a", "1m"), req("b", "1m"), req("a", "2m")]),
        )
        .await;
    let p = r.problem(422);
    assert_eq!(p.field.as_deref(), Some("tasks[2].id"));
    assert!(p.detail.contains("tasks[0]"), "{}", p.detail);
    assert!(env.pending_ids().await.is_empty());
}

#[tokio::test]
async fn a_batch_holds_1_to_1000_tasks() {
    let env = setup();
    let p = env
        .post("/v1/tasks/batch", batch(vec![]))
        .await
        .problem(422);
    assert_eq!(p.field.as_deref(), Some("tasks"));

    let items = |n: usize| {
        (0..n)
            .map(|i| req(&format!("t{i:04}"), "1m"))
            .collect::<Vec<_>>()
    };
    let p = env
        .post("/v1/tasks/batch", batch(items(MAX_BATCH + 1)))
        .await
        .problem(422);
    assert_eq!(p.field.as_deref(), Some("tasks"));
    assert!(p.detail.contains("1001"), "{}", p.detail);
    assert!(env.pending_ids().await.is_empty());

    let r = env.post("/v1/tasks/batch", batch(items(MAX_BATCH))).await;
    let results = r.ok(200)["results"].as_array().unwrap();
    assert_eq!(results.len(), MAX_BATCH);
    assert!(results.iter().all(|x| x["status"] == "created"));
    assert_eq!(env.pending_ids().await.len(), MAX_BATCH);
}

#[tokio::test]
async fn the_batch_envelope_is_checked_too() {
    let env = setup();
    let p = env
        .post(
            "/v1/tasks/batch",
            json!({"tasks": [req("a", "1m")], "colour": 1}),
        )
        .await
        .problem(422);
    assert_eq!(p.field.as_deref(), Some("colour"));
    let p = env.post("/v1/tasks/batch", json!({})).await.problem(422);
    assert!(p.detail.contains("missing field `tasks`"), "{}", p.detail);
    let p = env
        .post("/v1/tasks/batch", json!({"tasks": {"a": 1}}))
        .await
        .problem(422);
    assert_eq!(p.field.as_deref(), Some("tasks"));
    assert!(env.pending_ids().await.is_empty());
}

#[tokio::test]
async fn service_create_tasks_is_idempotent_for_retried_batches() {
    let env = setup();
    let reqs = |salt: &str| {
        (0..MAX_BATCH)
            .map(|i| CreateTask {
                id: Some(format!("bench-{i}")),
                delay: Some("10s".into()),
                target: Some(Target::Log),
                payload: json!({"i": i, "salt": salt}),
                ..CreateTask::default()
            })
            .collect::<Vec<_>>()
    };
    let first = service::create_tasks(&env.state, reqs("x")).await.unwrap();
    assert!(
        first
            .iter()
            .all(|r| r.status == ItemStatus::Created && r.task.is_some())
    );
    // The bench retrying a batch a moment later: every item is the same request.
    env.clock.advance(1_500);
    let again = service::create_tasks(&env.state, reqs("x")).await.unwrap();
    assert!(again.iter().all(|r| r.status == ItemStatus::Existing));
    assert_eq!(again[7].task, first[7].task);
    let other = service::create_tasks(&env.state, reqs("y")).await.unwrap();
    assert!(
        other
            .iter()
            .all(|r| r.status == ItemStatus::Conflict && r.task.is_none())
    );
}
