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
    /// Create the aws backend's tables, index, TTL and queues (idempotent; feature `aws`).
    Init(InitArgs),
    /// Measure ingest, fire rate, lag and memory on a fresh embedded store.
    Bench(punctual::bench::BenchArgs),
    /// Create, show, list, cancel, reschedule or replay tasks through the REST API.
    Task {
        #[command(flatten)]
        client: punctual::client::ClientArgs,
        #[command(subcommand)]
        command: punctual::client::TaskCommand,
    },
    /// List, replay or redrive dead letters through the REST API.
    Dlq {
        #[command(flatten)]
        client: punctual::client::ClientArgs,
        #[command(subcommand)]
        command: punctual::client::DlqCommand,
    },
    /// Show the cluster at a glance through the REST API: tasks by status, queue and DLQ
    /// depth, shards held, and every poller (polling, standby or gone).
    Status {
        #[command(flatten)]
        client: punctual::client::ClientArgs,
    },
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
    /// API keys file (TOML, or JSON if it ends in .json): `[[keys]]` with `role` and `key` or
    /// `sha256`. With neither this nor PUNCTUAL_API_KEYS, the keys stored in the data
    /// directory are used, and a first start generates an admin key and prints it once.
    #[arg(long, env = "PUNCTUAL_KEYS_FILE")]
    keys_file: Option<PathBuf>,
    /// API keys as `role:key` pairs separated by commas (`admin:k1,viewer:k2`).
    #[arg(long = "api-keys", env = "PUNCTUAL_API_KEYS", hide_env_values = true)]
    api_keys: Option<String>,
    /// The secret that signs webhook calls; generated in the data directory when absent.
    #[arg(long, env = "PUNCTUAL_WEBHOOK_SECRET", hide_env_values = true)]
    webhook_secret: Option<String>,
    /// Where tasks, the ready queue and leases live.
    #[arg(long, env = "PUNCTUAL_BACKEND", value_enum, default_value = "embedded")]
    backend: BackendArg,
    /// With `--backend aws`: prefix of the table and queue names.
    #[arg(long, env = "PUNCTUAL_AWS_PREFIX", default_value = "punctual-")]
    aws_prefix: String,
}

/// Which store `serve`, `poller` and `worker` use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum BackendArg {
    /// The SQLite file in the data directory.
    Embedded,
    /// DynamoDB + SQS through the standard AWS configuration (run `punctual init` first).
    Aws,
}

#[derive(Debug, Args, Clone)]
struct InitArgs {
    /// Prefix of every table and queue name.
    #[arg(long, env = "PUNCTUAL_AWS_PREFIX", default_value = "punctual-")]
    aws_prefix: String,
    /// Shards of a new deployment (an existing one keeps its own count).
    #[arg(long, env = "PUNCTUAL_SHARDS", default_value_t = DEFAULT_SHARDS)]
    shards: u32,
    /// Receives before SQS moves a message to the DLQ (the redrive policy).
    #[arg(long, env = "PUNCTUAL_MAX_RECEIVE_COUNT", default_value_t = 10)]
    max_receive_count: u32,
}

fn ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl ServeArgs {
    /// The keys from `--keys-file` and `--api-keys`, both if both are given.
    fn keys(&self) -> anyhow::Result<punctual_api::KeyRing> {
        let mut ring = punctual_api::KeyRing::new();
        if let Some(path) = &self.keys_file {
            let text = std::fs::read_to_string(path)
                .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
            let parsed = if path.extension().is_some_and(|e| e == "json") {
                punctual_api::KeyRing::from_json(&text)
            } else {
                punctual_api::KeyRing::from_toml(&text)
            };
            ring.extend(parsed.map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?);
            if ring.is_empty() {
                anyhow::bail!("{} holds no key", path.display());
            }
        }
        if let Some(value) = &self.api_keys {
            ring.extend(
                punctual_api::KeyRing::from_env_value(value)
                    .map_err(|e| anyhow::anyhow!("PUNCTUAL_API_KEYS: {e}"))?,
            );
        }
        Ok(ring)
    }

    fn config(self, api: bool, poller: bool, worker: bool) -> anyhow::Result<ServeConfig> {
        let keys = self.keys()?;
        Ok(ServeConfig {
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
            api: punctual_api::ApiConfig {
                keys,
                ..punctual_api::ApiConfig::default()
            },
            webhook_secret: self.webhook_secret,
            backend: match self.backend {
                BackendArg::Embedded => punctual::StoreChoice::Embedded,
                BackendArg::Aws => punctual::StoreChoice::Aws {
                    prefix: self.aws_prefix,
                },
            },
        })
    }
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    // The bench prints its own report; per-task logs would only slow it down.
    let default_filter = match cli.command {
        Some(Command::Bench(_) | Command::Task { .. } | Command::Dlq { .. }) => "warn",
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
            None => serve(default().config(true, true, true)?).await,
            Some(Command::Serve(a)) => serve(a.config(true, true, true)?).await,
            Some(Command::Poller(a)) => serve(a.config(false, true, false)?).await,
            Some(Command::Worker(a)) => serve(a.config(false, false, true)?).await,
            Some(Command::Init(a)) => {
                let done = punctual::init_aws(&a.aws_prefix, a.shards, a.max_receive_count).await?;
                println!("{done}");
                Ok(())
            }
            Some(Command::Bench(a)) => punctual::bench::run(a).await,
            Some(Command::Task { client, command }) => {
                client_command(client, punctual::client::ClientCommand::Task(command)).await
            }
            Some(Command::Dlq { client, command }) => {
                client_command(client, punctual::client::ClientCommand::Dlq(command)).await
            }
            Some(Command::Status { client }) => {
                client_command(client, punctual::client::ClientCommand::Status).await
            }
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

async fn client_command(
    args: punctual::client::ClientArgs,
    command: punctual::client::ClientCommand,
) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    Ok(punctual::client::run(&args, command, &mut out).await?)
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
