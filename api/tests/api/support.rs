//! One `setup()` for every test: a fresh store, a manual clock, the router over them.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, StatusCode, header};
use punctual_api::{ApiConfig, ApiState, KeyRing, Problem, Role, router};
use punctual_core::store::{
    Capabilities, ClaimOutcome, DueBacklog, DueEntry, DueQuery, Page, PutOutcome, StatusCounts,
    TaskCancel, TaskClaim, TaskComplete, TaskList, TaskListPending, TaskMarkDispatched, TaskPut,
    TaskPutBatch, TaskReschedule, TaskUpdate,
};
use punctual_core::testkit::T0;
use punctual_core::{Backend, ManualClock, StoreError, StoreResult, Task, TaskStore};
use punctual_store::embedded::{EmbeddedOptions, EmbeddedStore};
use serde_json::Value;
use tempfile::TempDir;
use tower::ServiceExt;

/// A router over a fresh store.
pub struct Env {
    pub app: Router,
    pub state: ApiState,
    pub clock: ManualClock,
    pub backend: Backend,
    _dir: TempDir,
}

/// An answer, its body parsed as JSON (`null` when empty).
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Value,
}

impl Reply {
    /// Asserts a problem+json answer with `status` and returns it.
    #[track_caller]
    pub fn problem(&self, status: u16) -> Problem {
        assert_eq!(self.status.as_u16(), status, "answer: {}", self.body);
        assert_eq!(
            self.headers[header::CONTENT_TYPE],
            "application/problem+json"
        );
        let p: Problem = serde_json::from_value(self.body.clone()).expect("a problem body");
        assert_eq!(p.status, status);
        assert!(p.kind.starts_with("/problems/"), "{p:?}");
        assert!(!p.title.is_empty() && !p.detail.is_empty(), "{p:?}");
        p
    }

    /// Asserts a JSON answer with `status` and returns its body.
    #[track_caller]
    pub fn ok(&self, status: u16) -> &Value {
        assert_eq!(self.status.as_u16(), status, "answer: {}", self.body);
        assert_eq!(self.headers[header::CONTENT_TYPE], "application/json");
        &self.body
    }
}

pub fn open_store(dir: &TempDir) -> Arc<EmbeddedStore> {
    EmbeddedStore::open(
        &dir.path().join("punctual.db"),
        EmbeddedOptions {
            shard_count: 16,
            max_receive_count: 10,
            now_ms: T0,
        },
    )
    .unwrap()
}

pub fn setup() -> Env {
    setup_with(ApiConfig::default())
}

pub fn setup_with(config: ApiConfig) -> Env {
    let dir = tempfile::tempdir().unwrap();
    let backend = Backend::from_one(open_store(&dir));
    env_over(backend, config, dir)
}

/// The keys every test router accepts, one per role.
pub const ADMIN_KEY: &str = "test-admin-key";
pub const OPERATOR_KEY: &str = "test-operator-key";
pub const VIEWER_KEY: &str = "test-viewer-key";

/// A ring with [`ADMIN_KEY`], [`OPERATOR_KEY`] and [`VIEWER_KEY`].
pub fn test_keys() -> KeyRing {
    let mut ring = KeyRing::new();
    ring.add_plain("admin", Role::Admin, ADMIN_KEY);
    ring.add_plain("operator", Role::Operator, OPERATOR_KEY);
    ring.add_plain("viewer", Role::Viewer, VIEWER_KEY);
    ring
}

pub fn env_over(backend: Backend, mut config: ApiConfig, dir: TempDir) -> Env {
    if config.keys.is_empty() {
        config.keys = test_keys();
    }
    let clock = ManualClock::new(T0);
    let state = ApiState::try_new(backend.clone(), Arc::new(clock.clone()), config).unwrap();
    Env {
        app: router(state.clone()),
        state,
        clock,
        backend,
        _dir: dir,
    }
}

impl Env {
    /// Sends a request with [`ADMIN_KEY`].
    pub async fn send(
        &self,
        method: Method,
        uri: &str,
        content_type: Option<&str>,
        body: impl Into<Body>,
    ) -> Reply {
        self.send_as(Some(ADMIN_KEY), method, uri, content_type, body)
            .await
    }

    /// Sends a request with `key` as its bearer key, or none.
    pub async fn send_as(
        &self,
        key: Option<&str>,
        method: Method,
        uri: &str,
        content_type: Option<&str>,
        body: impl Into<Body>,
    ) -> Reply {
        let mut req = Request::builder().method(method).uri(uri);
        if let Some(key) = key {
            req = req.header(header::AUTHORIZATION, format!("Bearer {key}"));
        }
        if let Some(ct) = content_type {
            req = req.header(header::CONTENT_TYPE, ct);
        }
        let resp = self
            .app
            .clone()
            .oneshot(req.body(body.into()).unwrap())
            .await
            .unwrap();
        let status = resp.status();
        let headers = resp.headers().clone();
        let bytes = axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .unwrap();
        let is_json = headers
            .get(header::CONTENT_TYPE)
            .is_some_and(|v| v.to_str().unwrap_or("").contains("json"));
        let body = if bytes.is_empty() {
            Value::Null
        } else if !is_json {
            Value::String(String::from_utf8_lossy(&bytes).into_owned())
        } else {
            serde_json::from_slice(&bytes)
                .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&bytes)))
        };
        Reply {
            status,
            headers,
            body,
        }
    }

    pub async fn post(&self, uri: &str, body: Value) -> Reply {
        self.send(
            Method::POST,
            uri,
            Some("application/json"),
            serde_json::to_vec(&body).unwrap(),
        )
        .await
    }

    pub async fn get(&self, uri: &str) -> Reply {
        self.send(Method::GET, uri, None, Body::empty()).await
    }

    /// Every waiting task's id, through the API, in the order listed.
    pub async fn pending_ids(&self) -> Vec<String> {
        let r = self.get("/v1/tasks?limit=1000").await;
        let body = r.ok(200);
        assert!(body["next"].is_null());
        body["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["id"].as_str().unwrap().to_owned())
            .collect()
    }
}

/// A `log` task due in `delay`, with a client id.
pub fn req(id: &str, delay: &str) -> Value {
    serde_json::json!({"id": id, "delay": delay, "target": {"type": "log"}})
}

/// What [`Flaky`] does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Pass every call to the real store.
    Pass,
    /// Fail every call with `Unavailable`, carrying a cause that must not leak.
    Unavailable,
    /// Answer a batch put with one outcome too few (a broken backend).
    ShortBatch,
}

/// A task store that records the calls it gets and fails on demand.
pub struct Flaky {
    inner: Arc<dyn TaskStore>,
    pub mode: Mutex<Mode>,
    /// Capabilities to declare instead of the real store's (to act as another backend).
    pub caps: Mutex<Option<Capabilities>>,
    pub calls: Mutex<Vec<&'static str>>,
}

impl Flaky {
    fn enter(&self, call: &'static str) -> StoreResult<Mode> {
        self.calls.lock().unwrap().push(call);
        let mode = *self.mode.lock().unwrap();
        if mode == Mode::Unavailable {
            return Err(StoreError::unavailable(
                "SQLITE_BUSY on /secret/path/punctual.db",
                std::io::Error::other("disk on fire"),
            ));
        }
        Ok(mode)
    }

    pub fn set(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
    }

    pub fn take_calls(&self) -> Vec<&'static str> {
        std::mem::take(&mut self.calls.lock().unwrap())
    }
}

/// A router whose task store is a [`Flaky`] over an embedded store.
pub fn setup_flaky() -> (Env, Arc<Flaky>) {
    let dir = tempfile::tempdir().unwrap();
    let store = open_store(&dir);
    let flaky = Arc::new(Flaky {
        inner: store.clone(),
        mode: Mutex::new(Mode::Pass),
        caps: Mutex::new(None),
        calls: Mutex::new(Vec::new()),
    });
    let backend = Backend {
        tasks: flaky.clone(),
        queue: store.clone(),
        leases: store,
    };
    (env_over(backend, ApiConfig::default(), dir), flaky)
}

#[async_trait]
impl TaskStore for Flaky {
    fn capabilities(&self) -> Capabilities {
        self.caps
            .lock()
            .unwrap()
            .unwrap_or_else(|| self.inner.capabilities())
    }
    fn shard_count(&self) -> u32 {
        self.inner.shard_count()
    }
    fn created_minute(&self) -> i64 {
        self.inner.created_minute()
    }
    async fn task_put(&self, p: TaskPut) -> StoreResult<PutOutcome> {
        self.enter("task_put")?;
        self.inner.task_put(p).await
    }
    async fn task_put_batch(&self, p: TaskPutBatch) -> StoreResult<Vec<PutOutcome>> {
        let mode = self.enter("task_put_batch")?;
        let mut out = self.inner.task_put_batch(p).await?;
        if mode == Mode::ShortBatch {
            out.pop();
        }
        Ok(out)
    }
    async fn task_get(&self, task_id: &str) -> StoreResult<Option<Task>> {
        self.enter("task_get")?;
        self.inner.task_get(task_id).await
    }
    async fn due_query(&self, q: DueQuery) -> StoreResult<Vec<DueEntry>> {
        self.enter("due_query")?;
        self.inner.due_query(q).await
    }
    async fn task_mark_dispatched(&self, p: TaskMarkDispatched) -> StoreResult<usize> {
        self.enter("task_mark_dispatched")?;
        self.inner.task_mark_dispatched(p).await
    }
    async fn task_claim(&self, p: TaskClaim) -> StoreResult<ClaimOutcome> {
        self.enter("task_claim")?;
        self.inner.task_claim(p).await
    }
    async fn task_complete(&self, p: TaskComplete) -> StoreResult<Task> {
        self.enter("task_complete")?;
        self.inner.task_complete(p).await
    }
    async fn task_cancel(&self, p: TaskCancel) -> StoreResult<Task> {
        self.enter("task_cancel")?;
        self.inner.task_cancel(p).await
    }
    async fn task_reschedule(&self, p: TaskReschedule) -> StoreResult<Task> {
        self.enter("task_reschedule")?;
        self.inner.task_reschedule(p).await
    }
    async fn due_backlog(&self, p: DueBacklog) -> StoreResult<Vec<u64>> {
        self.enter("due_backlog")?;
        self.inner.due_backlog(p).await
    }
    async fn task_update(&self, p: TaskUpdate) -> StoreResult<Task> {
        self.enter("task_update")?;
        self.inner.task_update(p).await
    }
    async fn task_list_pending(&self, p: TaskListPending) -> StoreResult<Page<Task>> {
        self.enter("task_list_pending")?;
        self.inner.task_list_pending(p).await
    }
    async fn task_list(&self, p: TaskList) -> StoreResult<Page<Task>> {
        self.enter("task_list")?;
        self.inner.task_list(p).await
    }
    async fn task_counts(&self) -> StoreResult<StatusCounts> {
        self.enter("task_counts")?;
        self.inner.task_counts().await
    }
}
