//! The `punctual` binary's library: wiring only.
//!
//! [`serve`] opens the store and runs the API (with the console), the pollers and the workers
//! in one process, or any subset of them (`punctual poller`, `punctual worker`), until a
//! shutdown future resolves. [`bench`] drives the same code paths with a synthetic load.
//! Behaviour lives in the crates; here it is only put together, so tests can call these
//! functions without spawning the binary and the binary stays a thin CLI.

pub mod bench;
pub mod client;
#[cfg(feature = "lambda")]
pub mod lambda;
pub mod telemetry;

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use punctual_core::clock::SharedClock;
use punctual_core::{Backend, SystemClock};
use punctual_poller::{PollerConfig, PollerDeps};
use punctual_store::embedded::{EmbeddedOptions, EmbeddedStore};
use punctual_worker::{Handlers, WorkerConfig, WorkerDeps};
use tokio_util::sync::CancellationToken;

/// Default listen address.
pub const DEFAULT_ADDR: &str = "127.0.0.1:8080";
/// Default data directory.
pub const DEFAULT_DATA_DIR: &str = "./data";
/// Default shard count of a new store.
pub const DEFAULT_SHARDS: u32 = 16;
/// The database file inside the data directory.
pub const DB_FILE: &str = "punctual.db";
/// The digests of the generated admin key, inside the data directory (used when no key is
/// configured).
pub const KEYS_FILE: &str = "api-keys.toml";
/// The generated webhook signing secret, inside the data directory (used when none is
/// configured).
pub const SECRET_FILE: &str = "webhook-secret";

/// What one `punctual` process runs.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// Where to listen for the API and console; `None` runs no HTTP server.
    pub addr: Option<SocketAddr>,
    /// The data directory (default [`DEFAULT_DATA_DIR`]); the store is `DB_FILE` inside it.
    pub data_dir: PathBuf,
    /// Shards of a new store (default [`DEFAULT_SHARDS`]); an existing store keeps its own.
    pub shards: u32,
    /// The poller's configuration; `None` runs no poller.
    pub poller: Option<PollerConfig>,
    /// The worker's configuration; `None` runs no worker.
    pub worker: Option<WorkerConfig>,
    /// The API's configuration. With no keys in `api.keys`, the keys stored in
    /// [`KEYS_FILE`] are used, and on a first start an admin key is generated, printed once,
    /// and only its digest stored there.
    pub api: punctual_api::ApiConfig,
    /// The secret that signs webhook calls (`X-Punctual-Signature`). Default `None`: the one
    /// in [`SECRET_FILE`], generated on a first start.
    pub webhook_secret: Option<String>,
    /// Where tasks, the queue and leases live. Default [`StoreChoice::Embedded`] (in
    /// `data_dir`).
    pub backend: StoreChoice,
}

/// Which backend a process uses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum StoreChoice {
    /// The SQLite file in the data directory.
    #[default]
    Embedded,
    /// DynamoDB + SQS (cargo feature `aws`), configured by the standard AWS chain
    /// (`AWS_ENDPOINT_URL`, `AWS_REGION`, profiles); resources created by `punctual init`.
    Aws {
        /// Prefix of the table and queue names.
        prefix: String,
    },
}

/// Opens the backend `config` asks for.
pub async fn open_backend(config: &ServeConfig) -> anyhow::Result<Backend> {
    match &config.backend {
        StoreChoice::Embedded => open_embedded(&config.data_dir, config.shards),
        StoreChoice::Aws { prefix } => open_aws(prefix).await,
    }
}

/// Opens the aws deployment under `prefix` (created by [`init_aws`]).
#[cfg(feature = "aws")]
pub async fn open_aws(prefix: &str) -> anyhow::Result<Backend> {
    let store = punctual_store::aws::connect(punctual_store::aws::AwsOptions {
        prefix: prefix.to_owned(),
        ..punctual_store::aws::AwsOptions::default()
    })
    .await
    .with_context(|| format!("cannot open the aws backend with prefix {prefix:?}"))?;
    Ok(store.backend())
}

/// Without the `aws` feature: an error saying how to get it.
#[cfg(not(feature = "aws"))]
pub async fn open_aws(_prefix: &str) -> anyhow::Result<Backend> {
    anyhow::bail!("this punctual was built without the aws backend: build with `--features aws`")
}

/// `punctual init`: creates the aws backend's tables, GSI, TTL, queues and meta item under
/// `prefix`, idempotently, on the endpoint of the standard AWS configuration chain.
#[cfg(feature = "aws")]
pub async fn init_aws(prefix: &str, shards: u32, max_receive_count: u32) -> anyhow::Result<String> {
    use punctual_store::aws::{AwsOptions, Clients, InitOptions, ResourceNames};
    let sdk = punctual_store::aws::load_sdk_config().await;
    let clients = Clients::new(&sdk, None);
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    let meta = punctual_store::aws::init(
        &clients,
        &InitOptions {
            aws: AwsOptions {
                prefix: prefix.to_owned(),
                max_receive_count,
                ..AwsOptions::default()
            },
            shard_count: shards,
            now_ms,
        },
    )
    .await
    .context("punctual init failed")?;
    let n = ResourceNames::new(prefix);
    Ok(format!(
        "ready: tables {} and {} (GSI by_due, TTL), queues {} and {} (maxReceiveCount {max_receive_count}); {} shards",
        n.tasks_table, n.leases_table, n.ready_queue, n.dlq, meta.shard_count
    ))
}

/// Without the `aws` feature: an error saying how to get it.
#[cfg(not(feature = "aws"))]
pub async fn init_aws(
    _prefix: &str,
    _shards: u32,
    _max_receive_count: u32,
) -> anyhow::Result<String> {
    anyhow::bail!("this punctual was built without the aws backend: build with `--features aws`")
}

impl Default for ServeConfig {
    fn default() -> Self {
        Self {
            addr: Some(DEFAULT_ADDR.parse().expect("valid default address")),
            data_dir: PathBuf::from(DEFAULT_DATA_DIR),
            shards: DEFAULT_SHARDS,
            poller: Some(PollerConfig::default()),
            worker: Some(WorkerConfig::default()),
            api: punctual_api::ApiConfig::default(),
            webhook_secret: None,
            backend: StoreChoice::Embedded,
        }
    }
}

/// Writes `contents` to `path` readable by its owner only (on Unix).
fn write_private(path: &Path, contents: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut f = options
        .open(path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    f.write_all(contents.as_bytes())
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

/// The keys to serve with when none is configured: those in `data_dir/`[`KEYS_FILE`], or on a
/// first start a generated admin key, whose digest is stored there. Returns the ring and the
/// generated key, which the caller shows once: it is stored nowhere in clear.
pub fn stored_keys(data_dir: &Path) -> anyhow::Result<(punctual_api::KeyRing, Option<String>)> {
    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("cannot create data directory {}", data_dir.display()))?;
    let path = data_dir.join(KEYS_FILE);
    if path.exists() {
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let ring = punctual_api::KeyRing::from_toml(&text)
            .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
        if !ring.is_empty() {
            return Ok((ring, None));
        }
    }
    let key = punctual_api::auth::generate_key()
        .map_err(|e| anyhow::anyhow!("cannot generate an API key: {e}"))?;
    let mut ring = punctual_api::KeyRing::new();
    ring.add_plain("generated-admin", punctual_api::Role::Admin, &key);
    let _ = std::fs::remove_file(&path);
    write_private(&path, &ring.to_toml_digests())?;
    Ok((ring, Some(key)))
}

/// The webhook secret in `data_dir/`[`SECRET_FILE`], generated there on a first start.
pub fn stored_secret(data_dir: &Path) -> anyhow::Result<String> {
    let path = data_dir.join(SECRET_FILE);
    if let Ok(text) = std::fs::read_to_string(&path)
        && !text.trim().is_empty()
    {
        return Ok(text.trim().to_owned());
    }
    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("cannot create data directory {}", data_dir.display()))?;
    let secret = punctual_api::auth::generate_key()
        .map_err(|e| anyhow::anyhow!("cannot generate a secret: {e}"))?
        .replacen("pk_", "whsec_", 1);
    write_private(&path, &secret)?;
    Ok(secret)
}

/// Opens (creating if needed) the embedded store in `data_dir`.
pub fn open_embedded(data_dir: &Path, shards: u32) -> anyhow::Result<Backend> {
    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("cannot create data directory {}", data_dir.display()))?;
    let path = data_dir.join(DB_FILE);
    let store = EmbeddedStore::open(
        &path,
        EmbeddedOptions {
            shard_count: shards,
            ..EmbeddedOptions::default()
        },
    )
    .with_context(|| format!("cannot open store {}", path.display()))?;
    Ok(Backend::from_one(store))
}

/// The HTTP application: the API and the console in one router, `/` redirecting to the console.
///
/// The console's configuration comes from [`console_config`]; an invalid one is reported by
/// [`serve`] before it listens, so here it can only be valid.
pub fn app(state: punctual_api::ApiState) -> axum::Router {
    let config = console_config().unwrap_or_else(|e| panic!("{e:#}"));
    let console = punctual_console::Console::new(state.clone(), config)
        .unwrap_or_else(|e| panic!("cannot start the console: {e}"));
    punctual_api::router(state).merge(punctual_console::router(console))
}

/// The console's configuration from the environment, read once per process:
///
/// - `PUNCTUAL_SESSION_SECRET`: signs console sessions (at least 16 bytes; every instance
///   behind one URL needs the same). Unset: a random secret made once per process, so
///   sessions end when it restarts (logged as a warning).
/// - `PUNCTUAL_SESSION_TTL`: how long a login lasts (`12h` by default; `30m`, `8h`, ...).
/// - `PUNCTUAL_COOKIE_SECURE`: `true`, `false`, or `auto` (the default: `Secure` when the
///   request came over HTTPS, directly or per `X-Forwarded-Proto`).
pub fn console_config() -> anyhow::Result<punctual_console::ConsoleConfig> {
    static CONFIG: std::sync::OnceLock<Result<punctual_console::ConsoleConfig, String>> =
        std::sync::OnceLock::new();
    let read = || -> Result<punctual_console::ConsoleConfig, String> {
        let mut config = punctual_console::ConsoleConfig::default();
        match std::env::var("PUNCTUAL_SESSION_SECRET") {
            Ok(s) if !s.is_empty() => {
                config.session_secret = Some(
                    punctual_console::SessionSecret::new(s.into_bytes())
                        .map_err(|e| format!("PUNCTUAL_SESSION_SECRET: {e}"))?,
                );
            }
            _ => {
                config.session_secret = Some(
                    punctual_console::SessionSecret::random()
                        .map_err(|e| format!("cannot make a session secret: {e}"))?,
                );
                tracing::warn!(
                    "PUNCTUAL_SESSION_SECRET is not set: console sessions use a random secret, end when this process restarts and are not shared with other instances"
                );
            }
        }
        if let Ok(ttl) = std::env::var("PUNCTUAL_SESSION_TTL") {
            let d = humantime::parse_duration(&ttl)
                .map_err(|e| format!("PUNCTUAL_SESSION_TTL: not a duration ({e}); try 8h"))?;
            config.session_ttl_s = i64::try_from(d.as_secs()).unwrap_or(i64::MAX).max(1);
        }
        if let Ok(v) = std::env::var("PUNCTUAL_COOKIE_SECURE") {
            config.secure_cookies = match v.trim().to_ascii_lowercase().as_str() {
                "true" | "1" | "yes" => Some(true),
                "false" | "0" | "no" => Some(false),
                "auto" | "" => None,
                other => {
                    return Err(format!(
                        "PUNCTUAL_COOKIE_SECURE: {other:?}; use true, false or auto"
                    ));
                }
            };
        }
        Ok(config)
    };
    CONFIG
        .get_or_init(read)
        .clone()
        .map_err(|e| anyhow::anyhow!(e))
}

/// Runs what `config` asks for until `shutdown` resolves, then stops cleanly: pollers stop
/// and release their leases, workers finish their in-flight runs, the server drains.
///
/// `on_listen` is called with the bound address once the server listens (the binary prints
/// it; tests read it).
pub async fn serve(
    config: ServeConfig,
    handlers: Handlers,
    on_listen: impl FnOnce(SocketAddr),
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let mut config = config;
    let backend = open_backend(&config).await?;
    let clock: SharedClock = Arc::new(SystemClock);
    if config.addr.is_some() && config.api.keys.is_empty() {
        let (ring, generated) = stored_keys(&config.data_dir)?;
        if let Some(key) = generated {
            // Shown once: only its digest is stored.
            println!(
                "No API key was configured: generated an admin key. It is shown only now; keep it:"
            );
            println!("  PUNCTUAL_API_KEY={key}");
            tracing::warn!(
                "generated an admin API key (printed once on stdout); its digest is in {}",
                config.data_dir.join(KEYS_FILE).display()
            );
        }
        config.api.keys = ring;
    }
    if let Some(worker) = config.worker.as_mut() {
        let secret = match config.webhook_secret.take() {
            Some(s) => s,
            None => stored_secret(&config.data_dir)?,
        };
        worker.webhook_secret = Some(punctual_worker::sign::WebhookSecret::new(secret.as_bytes()));
    }
    let activity = Arc::new(punctual_api::metrics::Activity::new());
    let (worker_events, worker_rx) = tokio::sync::mpsc::unbounded_channel();
    let (poller_events, poller_rx) = tokio::sync::mpsc::unbounded_channel();
    telemetry::spawn_recorders(
        config.worker.is_some().then_some(worker_rx),
        config.poller.is_some().then_some(poller_rx),
        activity.clone(),
        clock.clone(),
    );
    let stop = CancellationToken::new();
    let mut parts = tokio::task::JoinSet::new();

    if let Some(poller) = config.poller {
        poller.validate().context("invalid poller configuration")?;
        let deps = PollerDeps {
            backend: backend.clone(),
            clock: clock.clone(),
            config: poller,
            events: Some(poller_events),
        };
        let stopped = stop.clone().cancelled_owned();
        parts.spawn(async move {
            punctual_poller::run(deps, stopped)
                .await
                .context("poller failed")
        });
    }
    if let Some(worker) = config.worker {
        worker.validate().context("invalid worker configuration")?;
        let deps = WorkerDeps {
            backend: backend.clone(),
            clock: clock.clone(),
            config: worker,
            handlers: Arc::new(handlers),
            events: Some(worker_events),
        };
        let stopped = stop.clone().cancelled_owned();
        parts.spawn(async move {
            punctual_worker::run(deps, stopped)
                .await
                .context("worker failed")
        });
    }
    if let Some(addr) = config.addr {
        console_config().context("invalid console configuration")?;
        let mut state = punctual_api::ApiState::new(backend.clone(), clock.clone(), config.api)
            .with_activity(activity.clone());
        if let Some(handle) = telemetry::prometheus() {
            state = state.with_metrics(handle);
        }
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("cannot listen on {addr}"))?;
        on_listen(listener.local_addr()?);
        let stopped = stop.clone().cancelled_owned();
        parts.spawn(async move {
            axum::serve(listener, app(state))
                .with_graceful_shutdown(stopped)
                .await
                .context("HTTP server failed")
        });
    }

    let stopper = stop.clone();
    tokio::spawn(async move {
        shutdown.await;
        tracing::info!("shutting down: stopping pollers, letting in-flight tasks finish");
        stopper.cancel();
    });

    let mut first_error = None;
    while let Some(done) = parts.join_next().await {
        let result = done.context("a part panicked").and_then(|r| r);
        if let Err(e) = result {
            tracing::error!("{e:#}");
            // One part failing stops the others: a process that cannot poll should not pretend.
            stop.cancel();
            first_error.get_or_insert(e);
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Resolves on SIGINT (Ctrl-C) or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
}
