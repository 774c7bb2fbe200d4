//! Shared pieces of the whole-system tests: a webhook receiver, `punctual` child processes
//! that die with the test, and small HTTP helpers.
#![allow(dead_code, missing_docs)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;

/// The admin key every test server accepts.
pub const API_KEY: &str = "test-admin-key";
/// The webhook signing secret of the in-process test servers.
pub const WEBHOOK_SECRET: &str = "test-webhook-secret";

/// An HTTP client that sends [`API_KEY`] with every request.
pub fn api_client() -> reqwest::Client {
    let mut headers = reqwest::header::HeaderMap::new();
    headers.insert(
        reqwest::header::AUTHORIZATION,
        format!("Bearer {API_KEY}").parse().unwrap(),
    );
    reqwest::Client::builder()
        .default_headers(headers)
        .build()
        .unwrap()
}

/// One call the receiver got.
#[derive(Debug, Clone)]
pub struct Call {
    pub task_id: String,
    pub at_ms: i64,
    pub attempt: Option<u32>,
    pub body: serde_json::Value,
    /// The `X-Punctual-Signature` header, if any.
    pub signature: Option<String>,
    /// The body as received.
    pub raw: Vec<u8>,
}

/// How the receiver answers a task's `n`-th call (1-based): a status code.
pub type Script = Arc<dyn Fn(&str, usize) -> u16 + Send + Sync>;

#[derive(Clone)]
struct ReceiverState {
    calls: Arc<Mutex<Vec<Call>>>,
    script: Script,
}

/// A webhook receiver on 127.0.0.1:0 recording every call.
pub struct Receiver {
    pub url: String,
    calls: Arc<Mutex<Vec<Call>>>,
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

impl Receiver {
    /// A receiver answering 200 to everything.
    pub async fn start() -> Receiver {
        Self::scripted(Arc::new(|_, _| 200)).await
    }

    /// A receiver answering what `script` says.
    pub async fn scripted(script: Script) -> Receiver {
        let calls = Arc::new(Mutex::new(Vec::new()));
        let state = ReceiverState {
            calls: calls.clone(),
            script,
        };
        let app = axum::Router::new()
            .route("/hook", post(hook))
            .with_state(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Receiver {
            url: format!("http://{addr}/hook"),
            calls,
        }
    }

    pub fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }

    /// Calls per task id.
    pub fn counts(&self) -> HashMap<String, usize> {
        let mut m = HashMap::new();
        for c in self.calls.lock().unwrap().iter() {
            *m.entry(c.task_id.clone()).or_insert(0) += 1;
        }
        m
    }

    /// Waits until `n` distinct tasks were received, or panics after `timeout`.
    pub async fn wait_distinct(&self, n: usize, timeout: Duration) {
        let start = Instant::now();
        loop {
            let got = self.counts().len();
            if got >= n {
                return;
            }
            assert!(
                start.elapsed() < timeout,
                "only {got} of {n} tasks received after {timeout:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

async fn hook(
    State(s): State<ReceiverState>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> StatusCode {
    let task_id = headers
        .get("idempotency-key")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let attempt = headers
        .get("x-punctual-attempt")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok());
    let signature = headers
        .get("x-punctual-signature")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let raw = body.to_vec();
    let body = serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null);
    let n = {
        let mut calls = s.calls.lock().unwrap();
        calls.push(Call {
            task_id: task_id.clone(),
            at_ms: now_ms(),
            attempt,
            body,
            signature,
            raw,
        });
        calls.iter().filter(|c| c.task_id == task_id).count()
    };
    StatusCode::from_u16((s.script)(&task_id, n)).unwrap()
}

/// A `punctual` child process, killed when dropped.
pub struct Proc {
    pub child: Child,
    pub api: Option<String>,
    pub name: String,
}

impl Proc {
    /// Starts `punctual <args>` and waits for its start-up line (and the API URL, if it serves
    /// one).
    pub fn start(name: &str, args: &[&str]) -> Proc {
        let mut child = Command::new(env!("CARGO_BIN_EXE_punctual"))
            .args(args)
            .env("RUST_LOG", "warn")
            .env("PUNCTUAL_API_KEYS", format!("admin:{API_KEY}"))
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn punctual");
        let stdout = child.stdout.take().unwrap();
        let serves_api = args.first().is_none_or(|a| *a == "serve");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            let mut api = None;
            let mut started = false;
            for line in lines.by_ref() {
                let Ok(line) = line else { break };
                if line.starts_with("punctual ") {
                    started = true;
                }
                if let Some(url) = line.strip_prefix("API:") {
                    api = Some(url.trim().trim_end_matches("/v1").to_string());
                }
                if started && (!serves_api || api.is_some()) {
                    let _ = tx.send(api.clone());
                    break;
                }
            }
            // Keep draining so the child never blocks on a full pipe.
            for _ in lines {}
        });
        let api = rx
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("{name} did not start"));
        Proc {
            child,
            api,
            name: name.to_string(),
        }
    }

    /// SIGKILL: the process gets no chance to clean up.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, then waits for a clean exit.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        self.child.wait().unwrap()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn data_arg(dir: &Path) -> String {
    dir.display().to_string()
}

/// Creates tasks through `POST /v1/tasks/batch`, 1,000 per request.
pub async fn create_batch(api: &str, tasks: Vec<serde_json::Value>) {
    let client = api_client();
    for chunk in tasks.chunks(1_000) {
        let resp = client
            .post(format!("{api}/v1/tasks/batch"))
            .json(&serde_json::json!({ "tasks": chunk }))
            .send()
            .await
            .unwrap();
        let status = resp.status();
        let body = resp.text().await.unwrap();
        assert!(status.is_success(), "batch create: {status} {body}");
    }
}

/// A task body for the API: an http target at `url`, due at `due_ms`, with id `id`.
pub fn http_task(id: &str, due_ms: i64, url: &str) -> serde_json::Value {
    serde_json::json!({
        "id": id,
        "run_at": punctual_core::validate::format_rfc3339(due_ms),
        "target": { "type": "http", "url": url },
        "payload": { "id": id, "due_ms": due_ms },
        "backoff": { "base_ms": 20, "max_ms": 200 },
    })
}

pub fn now() -> i64 {
    now_ms()
}

/// The p-th percentile (0..=100) of `v`, which it sorts.
pub fn percentile(v: &mut [i64], p: usize) -> i64 {
    v.sort_unstable();
    if v.is_empty() {
        return 0;
    }
    v[((v.len() - 1) * p) / 100]
}

pub fn addr_of(url: &str) -> SocketAddr {
    url.trim_start_matches("http://").parse().unwrap()
}

/// The configuration the in-process tests serve with: 127.0.0.1:0, a `tick_ms` poll, the test
/// API key and webhook secret, the embedded store in `dir`.
pub fn test_serve_config(dir: &Path, tick_ms: u64, concurrency: usize) -> punctual::ServeConfig {
    punctual::ServeConfig {
        addr: Some("127.0.0.1:0".parse().unwrap()),
        data_dir: dir.to_path_buf(),
        poller: Some(punctual_poller::PollerConfig {
            tick_ms,
            ..punctual_poller::PollerConfig::default()
        }),
        worker: Some(punctual_worker::WorkerConfig {
            concurrency,
            ..punctual_worker::WorkerConfig::default()
        }),
        api: punctual_api::ApiConfig {
            keys: punctual_api::KeyRing::single(punctual_api::Role::Admin, API_KEY),
            ..punctual_api::ApiConfig::default()
        },
        webhook_secret: Some(WEBHOOK_SECRET.into()),
        ..punctual::ServeConfig::default()
    }
}

/// Runs `punctual::serve(config)` in this process until `stop` is cancelled; returns its base
/// URL once it listens, and the task to await for its result.
pub async fn serve_in_process(
    config: punctual::ServeConfig,
    stop: &tokio_util::sync::CancellationToken,
) -> (String, tokio::task::JoinHandle<anyhow::Result<()>>) {
    let (tx, rx) = tokio::sync::oneshot::channel::<SocketAddr>();
    let stopped = stop.clone().cancelled_owned();
    let server = tokio::spawn(async move {
        punctual::serve(
            config,
            punctual_worker::Handlers::new(),
            move |a| {
                let _ = tx.send(a);
            },
            stopped,
        )
        .await
    });
    let addr = rx.await.expect("the server listens");
    (format!("http://{addr}"), server)
}
