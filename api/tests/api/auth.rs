//! Every route of the router refuses a missing key (401) and a role too weak (403), and the
//! OpenAPI document is the router's.

use axum::body::Body;
use axum::http::{Method, header};
use punctual_api::auth::required_role;
use punctual_api::{Role, openapi};

use crate::support::*;

/// Every (method, concrete path) the OpenAPI document lists, with `{id}` filled in.
fn operations() -> Vec<(Method, String, String)> {
    let doc = serde_json::to_value(openapi()).unwrap();
    let mut out = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, _) in item.as_object().unwrap() {
            let m: Method = method.to_uppercase().parse().unwrap();
            out.push((m, path.clone(), path.replace("{id}", "some-id")));
        }
    }
    out
}

#[tokio::test]
async fn the_document_lists_every_route_with_its_security() {
    let doc = serde_json::to_value(openapi()).unwrap();
    assert_eq!(doc["openapi"], "3.1.0");
    let ops = operations();
    let listed: Vec<String> = ops.iter().map(|(m, p, _)| format!("{m} {p}")).collect();
    for expected in [
        "POST /v1/tasks",
        "GET /v1/tasks",
        "POST /v1/tasks/batch",
        "GET /v1/tasks/{id}",
        "PATCH /v1/tasks/{id}",
        "POST /v1/tasks/{id}/cancel",
        "POST /v1/tasks/{id}/reschedule",
        "POST /v1/tasks/{id}/replay",
        "GET /v1/dlq",
        "GET /v1/dlq/{id}",
        "DELETE /v1/dlq/{id}",
        "POST /v1/dlq/{id}/replay",
        "POST /v1/dlq/redrive",
        "GET /v1/shards",
        "GET /v1/stats",
        "GET /healthz",
        "GET /readyz",
        "GET /metrics",
        "GET /v1/openapi.json",
        "GET /v1/docs",
    ] {
        assert!(listed.contains(&expected.to_owned()), "{expected} missing");
    }
    for (m, path, _) in &ops {
        let op = &doc["paths"][path][m.as_str().to_lowercase()];
        match required_role(m, path) {
            None => assert_eq!(op["security"], serde_json::json!([]), "{m} {path}"),
            Some(_) => {
                assert_eq!(
                    op["security"][0]["api_key"],
                    serde_json::json!([]),
                    "{m} {path}"
                );
                assert!(op["responses"]["401"].is_object(), "{m} {path}");
            }
        }
    }
    // The served document is the same one, to a viewer.
    let env = setup();
    let r = env
        .send_as(
            Some(VIEWER_KEY),
            Method::GET,
            "/v1/openapi.json",
            None,
            Body::empty(),
        )
        .await;
    assert_eq!(r.ok(200), &doc);
}

#[tokio::test]
async fn every_route_refuses_a_missing_key_and_a_weak_role() {
    let env = setup();
    let ops = operations();
    assert!(ops.len() >= 20);
    for (method, pattern, uri) in ops {
        let needed = required_role(&method, &pattern);
        let send = |key: Option<&'static str>| {
            env.send_as(
                key,
                method.clone(),
                &uri,
                Some("application/json"),
                Body::from("{}"),
            )
        };
        let Some(needed) = needed else {
            assert_eq!(pattern, "/healthz");
            assert_eq!(send(None).await.status, 200);
            continue;
        };
        let p = send(None).await.problem(401);
        assert_eq!(p.kind, "/problems/unauthorized", "{method} {pattern}");
        let r = send(Some("not-a-key")).await;
        r.problem(401);
        assert_eq!(r.headers[header::WWW_AUTHENTICATE], "Bearer");
        for (role, key) in [
            (Role::Viewer, VIEWER_KEY),
            (Role::Operator, OPERATOR_KEY),
            (Role::Admin, ADMIN_KEY),
        ] {
            let r = send(Some(key)).await;
            if role < needed {
                let p = r.problem(403);
                assert!(p.detail.contains(needed.as_str()), "{p:?}");
            } else {
                assert!(
                    r.status != 401 && r.status != 403,
                    "{method} {pattern} as {role}: {}",
                    r.status
                );
            }
        }
    }
}

#[tokio::test]
async fn unknown_routes_need_a_key_too() {
    let env = setup();
    let r = env
        .send_as(None, Method::GET, "/v1/nothing", None, Body::empty())
        .await;
    r.problem(401);
    let r = env.get("/v1/nothing").await;
    r.problem(404);
}

#[tokio::test]
async fn the_docs_page_is_self_contained() {
    let env = setup();
    let r = env.get("/v1/docs").await;
    assert_eq!(r.status, 200);
    let html = r.body.as_str().unwrap();
    assert!(html.contains("openapi.json"));
    for remote in ["http://", "https://", "//cdn", "<link"] {
        assert!(!html.contains(remote), "the page loads {remote}");
    }
}
