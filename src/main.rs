//! `punctual`: the command line. It parses flags and the environment and calls the library.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use punctual::{DEFAULT_ADDR, DEFAULT_DATA_DIR, DEFAULT_SHARDS, ServeConfig};
use punctual_poller::PollerConfig;
use punctual_worker::{Handlers, WorkerConfig};

/// A scheduler that holds millions of one-shot tasks and fires each one on time.
///
/// With no command, `punctual` runs `serve`: the REST API, the console, the pollers and the
/// workers in one process on an embedded store.
#[derive(Debug, Parser)]
#[command(version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the API, console, pollers and workers in one process (the default).
    Serve(ServeArgs),
    /// Run only pollers: lease shards and dispatch due tasks to the ready queue.
    Poller(ServeArgs),
    /// Run only workers: claim dispatched tasks and fire them.
    Worker(ServeArgs),
    /// Measure ingest, fire rate, lag and memory on a fresh embedded store.
    Bench(punctual::bench::BenchArgs),
}

#[derive(Debug, Args, Clone)]
struct ServeArgs {
    /// Address for the API and console.
    #[arg(long, env = "PUNCTUAL_ADDR", default_value = DEFAULT_ADDR)]
    addr: SocketAddr,
    /// Data directory; the store is `punctual.db` inside it.
    #[arg(long, env = "PUNCTUAL_DATA", default_value = DEFAULT_DATA_DIR)]
    data: PathBuf,
    /// Shards of a new store (an existing store keeps its own count).
    #[arg(long, env = "PUNCTUAL_SHARDS", default_value_t = DEFAULT_SHARDS)]
    shards: u32,
    /// Poll interval.
    #[arg(long, env = "PUNCTUAL_TICK", default_value = "1s", value_parser = humantime::parse_duration)]
    tick: Duration,
    /// Shard lease duration: a standby takes a dead poller's shards after this long.
    #[arg(long, env = "PUNCTUAL_LEASE_TTL", default_value = "10s", value_parser = humantime::parse_duration)]
    lease_ttl: Duration,
    /// Clock-skew allowance between processes: buckets this recent are polled again, and a
    /// poller stops dispatching a shard this long before its lease expires.
    #[arg(long, env = "PUNCTUAL_CLOCK_SKEW", default_value = "5s", value_parser = humantime::parse_duration)]
    skew: Duration,
    /// Tasks a worker runs at once.
    #[arg(long, env = "PUNCTUAL_CONCURRENCY", default_value_t = 64)]
    concurrency: usize,
    /// How long a claim holds before another worker may take the task over.
    #[arg(long, env = "PUNCTUAL_RUN_TIMEOUT", default_value = "30s", value_parser = humantime::parse_duration)]
    run_timeout: Duration,
    /// Timeout of one webhook call (must be shorter than --run-timeout).
    #[arg(long, env = "PUNCTUAL_HTTP_TIMEOUT", default_value = "10s", value_parser = humantime::parse_duration)]
    http_timeout: Duration,
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl ServeArgs {
    fn config(self, api: bool, poller: bool, worker: bool) -> ServeConfig {
        ServeConfig {
            addr: api.then_some(self.addr),
            data_dir: self.data,
            shards: self.shards,
            poller: poller.then(|| PollerConfig {
                tick_ms: self.tick.as_millis() as u64,
                lease_ttl_ms: ms(self.lease_ttl),
                skew_ms: ms(self.skew),
                ..PollerConfig::default()
            }),
            worker: worker.then(|| WorkerConfig {
                concurrency: self.concurrency,
                run_timeout_ms: ms(self.run_timeout),
                http_timeout_ms: self.http_timeout.as_millis() as u64,
                visibility_ms: ms(self.run_timeout),
                ..WorkerConfig::default()
            }),
            api: punctual_api::ApiConfig::default(),
        }
    }
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    // The bench prints its own report; per-task logs would only slow it down.
    let default_filter = match cli.command {
        Some(Command::Bench(_)) => "warn",
        _ => "info,hyper=warn,reqwest=warn",
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| default_filter.into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async move {
        let default = || ServeArgs::parse_from(["serve"]);
        match cli.command {
            None => serve(default().config(true, true, true)).await,
            Some(Command::Serve(a)) => serve(a.config(true, true, true)).await,
            Some(Command::Poller(a)) => serve(a.config(false, true, false)).await,
            Some(Command::Worker(a)) => serve(a.config(false, false, true)).await,
            Some(Command::Bench(a)) => punctual::bench::run(a).await,
        }
    });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn serve(config: ServeConfig) -> anyhow::Result<()> {
    let data = config.data_dir.display().to_string();
    let parts: Vec<&str> = [
        config.addr.map(|_| "api+console"),
        config.poller.as_ref().map(|_| "poller"),
        config.worker.as_ref().map(|_| "worker"),
    ]
    .into_iter()
    .flatten()
    .collect();
    let parts = parts.join(", ");
    if config.addr.is_none() {
        println!(
            "punctual {} running {parts} on {data}",
            env!("CARGO_PKG_VERSION")
        );
    }
    punctual::serve(
        config,
        Handlers::new(),
        move |addr| {
            println!(
                "punctual {} running {parts} on {data}",
                env!("CARGO_PKG_VERSION")
            );
            println!("API:     http://{addr}/v1");
            println!("console: http://{addr}/console");
        },
        punctual::shutdown_signal(),
    )
    .await
}

/// `Args` for a subcommand-less invocation: parse the serve flags from nothing.
impl ServeArgs {
    fn parse_from<I: IntoIterator<Item = &'static str>>(args: I) -> Self {
        #[derive(Parser)]
        struct Only {
            #[command(flatten)]
            a: ServeArgs,
        }
        Only::parse_from(args).a
    }
}
