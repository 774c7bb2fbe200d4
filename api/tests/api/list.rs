//! `GET /v1/tasks`: waiting tasks in due order, page by page.

use punctual_api::view::TaskPage;
use serde_json::{Value, json};

use crate::support::{Env, setup};

/// Creates tasks due at scattered times, several sharing a due time, in a scrambled order;
/// returns their ids in due order (due time, then id).
async fn scattered(env: &Env, n: usize) -> Vec<String> {
    let mut expected = Vec::new();
    let mut items = Vec::new();
    for i in 0..n {
        // 0..n scrambled by a multiplier coprime with n's usual sizes; buckets of 3 share a time.
        let slot = (i * 7919) % n / 3;
        let id = format!("task-{:03}", (i * 31) % 1000);
        let seconds = 10 + slot * 45; // crosses several minute buckets
        items.push(json!({"id": id, "delay": format!("{seconds}s"), "target": {"type": "log"}}));
        expected.push((seconds, id));
    }
    env.post("/v1/tasks/batch", json!({ "tasks": items }))
        .await
        .ok(200);
    expected.sort();
    expected.into_iter().map(|(_, id)| id).collect()
}

async fn page(env: &Env, query: &str) -> TaskPage {
    let r = env.get(&format!("/v1/tasks?{query}")).await;
    serde_json::from_value(r.ok(200).clone()).unwrap()
}

#[tokio::test]
async fn pages_return_every_waiting_task_once_in_due_order() {
    let env = setup();
    let expected = scattered(&env, 40).await;
    for limit in [7, 8, 40, 1000] {
        let mut seen = Vec::new();
        let mut query = format!("limit={limit}");
        for round in 0.. {
            assert!(round <= 40, "pagination does not end");
            let p = page(&env, &query).await;
            assert!(p.tasks.len() <= limit);
            let dues: Vec<i64> = p.tasks.iter().map(|t| t.due_ms).collect();
            assert!(dues.is_sorted(), "{dues:?}");
            seen.extend(p.tasks.into_iter().map(|t| t.id));
            match p.next {
                Some(next) => query = format!("limit={limit}&after={next}"),
                None => break,
            }
        }
        assert_eq!(seen, expected, "limit {limit}");
    }
}

#[tokio::test]
async fn only_waiting_tasks_are_listed() {
    let env = setup();
    let expected = scattered(&env, 6).await;
    env.post(&format!("/v1/tasks/{}/cancel", expected[2]), json!({}))
        .await
        .ok(200);
    let mut rest = expected.clone();
    rest.remove(2);
    assert_eq!(env.pending_ids().await, rest);
}

#[tokio::test]
async fn the_default_page_is_100() {
    let env = setup();
    scattered(&env, 130).await;
    let first = page(&env, "").await;
    assert_eq!(first.tasks.len(), 100);
    let next = first.next.expect("a second page");
    let second = page(&env, &format!("after={next}")).await;
    assert_eq!(second.tasks.len(), 30);
}

#[tokio::test]
async fn an_empty_store_lists_nothing() {
    let env = setup();
    let r = env.get("/v1/tasks").await;
    assert_eq!(r.ok(200), &json!({"tasks": [], "next": null}));
}

#[tokio::test]
async fn bad_query_parameters_are_400_naming_the_parameter() {
    let env = setup();
    let cases = [
        ("limit=0", "limit"),
        ("limit=1001", "limit"),
        ("limit=ten", "limit"),
        ("limit=-1", "limit"),
        ("limit=", "limit"),
        ("limit=5&limit=6", "limit"),
        ("after=not*a*cursor", "after"),
        ("after=", "after"),
        ("status=SCHEDULED", "status"),
    ];
    for (query, field) in cases {
        let r = env.get(&format!("/v1/tasks?{query}")).await;
        let p = r.problem(400);
        assert_eq!(p.field.as_deref(), Some(field), "{query}: {p:?}");
        assert_eq!(p.kind, "/problems/bad-request");
    }
    let r = env.get("/v1/tasks?limit=1000").await;
    assert_eq!(r.ok(200)["tasks"], Value::Array(vec![]));
}
