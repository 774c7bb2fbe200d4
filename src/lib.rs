//! The `punctual` binary's library: wiring only.
//!
//! [`serve`] opens the store and runs the API (with the console), the pollers and the workers
//! in one process, or any subset of them (`punctual poller`, `punctual worker`), until a
//! shutdown future resolves. [`bench`] drives the same code paths with a synthetic load.
//! Behaviour lives in the crates; here it is only put together, so tests can call these
//! functions without spawning the binary and the binary stays a thin CLI.

pub mod bench;

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
    /// The API's configuration.
    pub api: punctual_api::ApiConfig,
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
        }
    }
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
pub fn app(state: punctual_api::ApiState) -> axum::Router {
    punctual_api::router(state).merge(punctual_console::router())
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
    let backend = open_embedded(&config.data_dir, config.shards)?;
    let clock: SharedClock = Arc::new(SystemClock);
    let stop = CancellationToken::new();
    let mut parts = tokio::task::JoinSet::new();

    if let Some(poller) = config.poller {
        poller.validate().context("invalid poller configuration")?;
        let deps = PollerDeps {
            backend: backend.clone(),
            clock: clock.clone(),
            config: poller,
            events: None,
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
            events: None,
        };
        let stopped = stop.clone().cancelled_owned();
        parts.spawn(async move {
            punctual_worker::run(deps, stopped)
                .await
                .context("worker failed")
        });
    }
    if let Some(addr) = config.addr {
        let state = punctual_api::ApiState::new(backend.clone(), clock.clone(), config.api);
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
