//! `GET /v1/tasks`: waiting tasks in due order, page by page.

use punctual_api::view::{TaskPage, TaskView};
use punctual_core::TaskStatus;
use punctual_core::store::Capabilities;
use punctual_core::testkit::T0;
use punctual_core::validate::format_rfc3339;
use serde_json::{Value, json};

use crate::support::{Env, setup, setup_flaky};

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
        ("colour=red", "colour"),
        ("status=BOGUS", "status"),
        ("status=DEAD&status=CANCELLED", "status"),
        ("due_from=yesterday", "due_from"),
        ("due_to=2026-13-01T00:00:00Z", "due_to"),
        (
            "due_from=2026-01-01T01:00:00Z&due_to=2026-01-01T00:00:00Z",
            "due_to",
        ),
        ("target=ftp", "target"),
        ("id_prefix=a%20b", "id_prefix"),
        ("id_prefix=a&id_prefix=b", "id_prefix"),
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

/// Tasks for the filter tests: ids `fa-00..` and `fb-00..`, due every 30 s from 10 s on,
/// targets cycling log, http, handler; `fa-01`, `fa-04`, `fb-02` cancelled.
async fn mixed(env: &Env) -> Vec<TaskView> {
    let mut items = Vec::new();
    for p in ["fa", "fb"] {
        for i in 0..9 {
            let target = match i % 3 {
                0 => json!({"type": "log"}),
                1 => json!({"type": "http", "url": "http://127.0.0.1:9/hook"}),
                _ => json!({"type": "handler", "name": "h"}),
            };
            let delay = format!("{}s", 10 + i * 30 + if p == "fb" { 5 } else { 0 });
            items.push(json!({"id": format!("{p}-{i:02}"), "delay": delay, "target": target}));
        }
    }
    env.post("/v1/tasks/batch", json!({ "tasks": items }))
        .await
        .ok(200);
    for id in ["fa-01", "fa-04", "fb-02"] {
        env.post(&format!("/v1/tasks/{id}/cancel"), json!({}))
            .await
            .ok(200);
    }
    let mut all = Vec::new();
    for p in ["fa", "fb"] {
        for i in 0..9 {
            let r = env.get(&format!("/v1/tasks/{p}-{i:02}")).await;
            all.push(serde_json::from_value(r.ok(200).clone()).unwrap());
        }
    }
    all
}

/// Every page of `query`, followed through `next` with `limit`.
async fn all_pages(env: &Env, query: &str, limit: usize) -> Vec<String> {
    let mut seen = Vec::new();
    let mut q = format!("{query}&limit={limit}");
    for _ in 0..100 {
        let p = page(env, &q).await;
        seen.extend(p.tasks.into_iter().map(|t| t.id));
        match p.next {
            Some(next) => q = format!("{query}&limit={limit}&after={next}"),
            None => return seen,
        }
    }
    panic!("pagination does not end");
}

#[tokio::test]
async fn filters_narrow_the_list_alone_and_together_in_pages() {
    let env = setup();
    let all = mixed(&env).await;
    let due = |t: &TaskView| t.due_ms;
    let mut sorted = all.clone();
    sorted.sort_by_key(|t| (due(t), t.id.clone()));
    let pick = |f: &dyn Fn(&TaskView) -> bool| -> Vec<String> {
        sorted
            .iter()
            .filter(|t| f(t))
            .map(|t| t.id.clone())
            .collect()
    };
    let from = T0 + 60_000;
    let to = T0 + 180_000;
    let window = format!(
        "due_from={}&due_to={}",
        format_rfc3339(from),
        format_rfc3339(to)
    );
    let in_window = |t: &TaskView| t.due_ms >= from && t.due_ms < to;
    let waiting = |t: &TaskView| t.status == TaskStatus::Scheduled;
    let kind = |t: &TaskView, k: &str| t.target.kind() == k;
    let cases: Vec<(String, Vec<String>)> = vec![
        (
            "status=CANCELLED".into(),
            pick(&|t| t.status == TaskStatus::Cancelled),
        ),
        (
            "status=cancelled".into(),
            pick(&|t| t.status == TaskStatus::Cancelled),
        ),
        ("status=SCHEDULED".into(), pick(&waiting)),
        ("status=DEAD".into(), vec![]),
        (
            "target=http".into(),
            pick(&|t| waiting(t) && kind(t, "http")),
        ),
        (
            "id_prefix=fb-".into(),
            pick(&|t| waiting(t) && t.id.starts_with("fb-")),
        ),
        (window.clone(), pick(&|t| waiting(t) && in_window(t))),
        (
            format!("{window}&target=handler&id_prefix=fa"),
            pick(&|t| waiting(t) && in_window(t) && kind(t, "handler") && t.id.starts_with("fa")),
        ),
        (
            format!("status=CANCELLED&{window}"),
            pick(&|t| t.status == TaskStatus::Cancelled && in_window(t)),
        ),
        ("status=&target=&id_prefix=".into(), pick(&waiting)),
        ("id_prefix=zz".into(), vec![]),
    ];
    for (query, want) in cases {
        for limit in [1, 2, 100] {
            assert_eq!(
                all_pages(&env, &query, limit).await,
                want,
                "{query} limit {limit}"
            );
        }
    }
    // The combination is not empty by accident.
    assert_eq!(
        all_pages(&env, &format!("{window}&target=handler&id_prefix=fa"), 5).await,
        vec!["fa-02", "fa-05"]
    );
}

#[tokio::test]
async fn a_status_the_backend_cannot_list_is_400_naming_status() {
    let (env, flaky) = setup_flaky();
    mixed(&env).await;
    *flaky.caps.lock().unwrap() = Some(Capabilities {
        multi_process: true,
        list_statuses: &[
            TaskStatus::Scheduled,
            TaskStatus::RetryWait,
            TaskStatus::Dead,
            TaskStatus::Cancelled,
        ],
        status_counts: false,
    });
    flaky.take_calls();
    for s in ["RUNNING", "DISPATCHED", "SUCCEEDED"] {
        let p = env.get(&format!("/v1/tasks?status={s}")).await.problem(400);
        assert_eq!(p.field.as_deref(), Some("status"));
        assert!(p.detail.contains("cannot list"), "{p:?}");
        assert!(p.detail.contains("DEAD"), "names what it can list: {p:?}");
    }
    assert!(
        !flaky.take_calls().contains(&"task_list"),
        "a refused status never reaches the store"
    );
    assert_eq!(all_pages(&env, "status=CANCELLED", 10).await.len(), 3);
}
