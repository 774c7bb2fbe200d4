//! The API + console Lambda: Function URL and HTTP API (payload 2.0) event JSON through the
//! same adapter `lambda_http::run` uses, into the router of `punctual serve`, over the
//! embedded store. Each case checks the response event the runtime would send back.

use base64::Engine as _;
use punctual::lambda::LambdaEnv;
use punctual::lambda::api::{invoke_json, keys_from_env, router};
use punctual_core::Backend;
use punctual_store::embedded::{EmbeddedOptions, EmbeddedStore};
use serde_json::Value;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");
/// The key the Function URL fixture sends (`authorization: Bearer fixture-admin-key`).
const FIXTURE_KEY: &str = "fixture-admin-key";

fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!("{FIXTURES}/{name}"))
        .unwrap_or_else(|e| panic!("fixture {name}: {e}"))
}

struct Setup {
    _dir: tempfile::TempDir,
    app: axum::Router,
    backend: Backend,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let store =
        EmbeddedStore::open(&dir.path().join("punctual.db"), EmbeddedOptions::default()).unwrap();
    let backend = Backend::from_one(store);
    let keys = format!("admin:{FIXTURE_KEY}");
    let env = LambdaEnv::from_pairs([("PUNCTUAL_API_KEYS", keys.as_str())]);
    let keys = keys_from_env(&env).unwrap();
    let app = router(
        backend.clone(),
        punctual_api::ApiConfig {
            keys,
            ..punctual_api::ApiConfig::default()
        },
    );
    Setup {
        _dir: dir,
        app,
        backend,
    }
}

async fn invoke(s: &Setup, event: &str) -> (u64, Value, String) {
    let out = invoke_json(s.app.clone(), event, lambda_http::Context::default())
        .await
        .unwrap();
    let status = out["statusCode"].as_u64().expect("statusCode");
    let body = out["body"].as_str().unwrap_or_default();
    let body = if out["isBase64Encoded"] == Value::Bool(true) {
        String::from_utf8(
            base64::engine::general_purpose::STANDARD
                .decode(body)
                .unwrap(),
        )
        .unwrap()
    } else {
        body.to_owned()
    };
    (status, out, body)
}

#[tokio::test]
async fn healthz_through_an_http_api_event() {
    let s = setup();
    let (status, out, body) = invoke(&s, &fixture("http-api-v2-get-healthz.json")).await;
    assert_eq!(status, 200, "{out}");
    assert!(body.contains("ok"), "{body}");
}

#[tokio::test]
async fn a_missing_key_is_refused_with_problem_json() {
    let s = setup();
    let (status, out, body) = invoke(&s, &fixture("http-api-v2-list-tasks-no-key.json")).await;
    assert_eq!(status, 401, "{out}");
    assert_eq!(
        out["headers"]["content-type"], "application/problem+json",
        "{out}"
    );
    let problem: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(problem["status"], 401);
}

#[tokio::test]
async fn a_function_url_event_creates_a_task_in_the_store() {
    let s = setup();
    let (status, out, body) = invoke(&s, &fixture("function-url-create-task.json")).await;
    assert_eq!(status, 201, "{out} {body}");
    let created: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(created["id"], "lambda-fixture-1", "{created}");
    let stored = s
        .backend
        .tasks
        .task_get("lambda-fixture-1")
        .await
        .unwrap()
        .expect("stored");
    assert_eq!(stored.payload, serde_json::json!({ "hello": "lambda" }));
    // The same event again: idempotent create by id answers 200 with the same task.
    let (status, _, _) = invoke(&s, &fixture("function-url-create-task.json")).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn the_console_is_served_by_the_same_router() {
    let s = setup();
    let mut event: Value = serde_json::from_str(&fixture("http-api-v2-get-healthz.json")).unwrap();
    event["rawPath"] = "/".into();
    event["requestContext"]["http"]["path"] = "/".into();
    let (status, out, _) = invoke(&s, &event.to_string()).await;
    assert!((300..400).contains(&status), "{out}");
    assert_eq!(out["headers"]["location"], "/console", "{out}");
}

#[test]
fn the_function_refuses_to_start_without_keys() {
    let err = keys_from_env(&LambdaEnv::from_pairs([])).unwrap_err();
    assert!(err.to_string().contains("PUNCTUAL_API_KEYS"), "{err}");
    let digests = format!(
        r#"{{"keys":[{{"name":"ops","role":"viewer","sha256":"{}"}}]}}"#,
        punctual_api::auth::digest_hex(&punctual_api::auth::digest("k"))
    );
    let ring = keys_from_env(&LambdaEnv::from_pairs([(
        "PUNCTUAL_API_KEYS_JSON",
        digests.as_str(),
    )]))
    .unwrap();
    assert!(ring.verify("k").is_some());
}
