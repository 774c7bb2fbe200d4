//! `punctual bench`: the embedded backend under a synthetic load, measured.
//!
//! Two phases on a fresh store:
//!
//! 1. **Ingest.** N tasks go in through [`punctual_api::service::create_tasks`], the very call
//!    the batch endpoint makes, 1,000 per batch, due at random times inside a window that
//!    starts one day ahead (so nothing fires while ingesting). Then a poll-latency probe: the
//!    due query of one shard-minute, timed, as the poller runs it.
//! 2. **Fire.** The pollers and workers start on a clock shifted so that "now" is the start of
//!    the window; a no-op handler records each task's lag (claim time − due time). With a
//!    zero window every task is due at once and the phase measures the fire rate; with a
//!    window, tasks come due at N / window per second and the phase measures lag under a
//!    steady load.
//!
//! Reported: ingest rate, poll latency, fire rate, lag p50/p99/max and the process's peak RSS.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use async_trait::async_trait;
use clap::Args;
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use punctual_core::clock::{Clock, SharedClock, SystemClock};
use punctual_core::keys;
use punctual_core::store::DueQuery;
use punctual_core::task::{Target, Task};
use punctual_core::validate::CreateTask;
use punctual_poller::{PollerConfig, PollerDeps};
use punctual_worker::{Handler, Handlers, Outcome, WorkerConfig, WorkerDeps};
use tokio_util::sync::CancellationToken;

/// `punctual bench` flags.
#[derive(Debug, Args, Clone)]
pub struct BenchArgs {
    /// Tasks to schedule.
    #[arg(long, default_value_t = 1_000_000)]
    pub tasks: u64,
    /// Due times spread uniformly over this window; 0 makes every task due at once.
    #[arg(long, default_value = "0s", value_parser = humantime::parse_duration)]
    pub window: Duration,
    /// Shards of the store.
    #[arg(long, default_value_t = 16)]
    pub shards: u32,
    /// Tasks a worker runs at once.
    #[arg(long, default_value_t = 256)]
    pub concurrency: usize,
    /// Poll interval.
    #[arg(long, default_value = "100ms", value_parser = humantime::parse_duration)]
    pub tick: Duration,
    /// Data directory (a fresh temporary one by default; it must not hold a store).
    #[arg(long)]
    pub data: Option<std::path::PathBuf>,
    /// Only ingest and probe polls; do not fire.
    #[arg(long)]
    pub ingest_only: bool,
    /// Give up firing after this long.
    #[arg(long, default_value = "30m", value_parser = humantime::parse_duration)]
    pub timeout: Duration,
}

/// A clock running `offset` milliseconds ahead of the system's.
#[derive(Debug, Default)]
struct ShiftedClock {
    offset: AtomicI64,
}

impl Clock for ShiftedClock {
    fn now_ms(&self) -> i64 {
        SystemClock.now_ms() + self.offset.load(Ordering::Relaxed)
    }
}

/// Records each run's lag and succeeds; clones share the records.
#[derive(Clone)]
struct LagRecorder {
    clock: SharedClock,
    lags: Arc<std::sync::Mutex<Histogram<u64>>>,
    fired: Arc<AtomicU64>,
}

#[async_trait]
impl Handler for LagRecorder {
    async fn run(&self, task: &Task) -> Outcome {
        let lag = (self.clock.now_ms() - task.due_ms).max(0) as u64;
        if let Ok(mut h) = self.lags.lock() {
            let _ = h.record(lag);
        }
        self.fired.fetch_add(1, Ordering::Relaxed);
        Outcome::Success
    }
}

fn bar(len: u64, what: &str) -> ProgressBar {
    let pb = ProgressBar::new(len);
    pb.set_style(
        ProgressStyle::with_template(&format!(
            "{what:>8} [{{elapsed_precise}}] {{wide_bar}} {{pos}}/{{len}} {{per_sec}} eta {{eta}}"
        ))
        .expect("valid template"),
    );
    pb
}

/// Peak resident set size of this process, bytes (Linux `VmHWM`).
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Runs the benchmark and prints its report.
pub async fn run(args: BenchArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.tasks > 0, "--tasks must be positive");
    let _tmp;
    let dir = match &args.data {
        Some(d) => {
            anyhow::ensure!(
                !d.join(crate::DB_FILE).exists(),
                "{} already holds a store; bench needs a fresh one",
                d.display()
            );
            d.clone()
        }
        None => {
            let t = tempfile::tempdir().context("cannot create a temporary directory")?;
            let p = t.path().to_path_buf();
            _tmp = t;
            p
        }
    };
    let backend = crate::open_embedded(&dir, args.shards)?;
    let shifted = Arc::new(ShiftedClock::default());
    let clock: SharedClock = shifted.clone();
    let state = punctual_api::ApiState::new(backend.clone(), clock.clone(), Default::default());

    // Phase 1: ingest.
    let window_ms = args.window.as_millis() as i64;
    let base_ms = clock.now_ms() + 86_400_000;
    let mut rng = fastrand::Rng::with_seed(42);
    let pb = bar(args.tasks, "ingest");
    let started = Instant::now();
    let mut done = 0u64;
    while done < args.tasks {
        let n = (args.tasks - done).min(1_000);
        let batch: Vec<CreateTask> = (0..n)
            .map(|i| {
                let due = base_ms
                    + if window_ms > 0 {
                        rng.i64(0..window_ms)
                    } else {
                        0
                    };
                CreateTask {
                    run_at: Some(punctual_core::validate::format_rfc3339(due)),
                    target: Some(Target::Handler {
                        name: "bench".into(),
                    }),
                    payload: serde_json::json!({ "i": done + i }),
                    ..Default::default()
                }
            })
            .collect();
        punctual_api::service::create_tasks(&state, batch)
            .await
            .map_err(|e| anyhow::anyhow!("ingest failed: {e:?}"))?;
        done += n;
        pb.set_position(done);
    }
    pb.finish();
    let ingest_s = started.elapsed().as_secs_f64();
    let ingest_rate = args.tasks as f64 / ingest_s;

    // Poll latency: the due query of one shard-minute, as a poller runs it.
    let mut polls = Vec::new();
    for i in 0..200u32 {
        let shard = i % args.shards;
        let t = Instant::now();
        let got = backend
            .tasks
            .due_query(DueQuery {
                shard,
                minute: keys::minute_of(base_ms),
                now_ms: base_ms + window_ms,
                after_key: None,
                limit: 100,
            })
            .await?;
        polls.push(t.elapsed().as_micros() as u64);
        anyhow::ensure!(
            !got.is_empty() || args.tasks < 100_000,
            "a due query found nothing"
        );
    }
    polls.sort_unstable();
    let poll_p50_us = polls[polls.len() / 2];

    println!();
    println!("tasks            {}", args.tasks);
    println!(
        "window           {}",
        humantime::format_duration(args.window)
    );
    println!("shards           {}", args.shards);
    println!(
        "ingest           {:.0} tasks/s ({ingest_s:.1} s)",
        ingest_rate
    );
    println!(
        "poll p50         {poll_p50_us} µs (one shard-minute, 100 due of {})",
        args.tasks
    );
    if args.ingest_only {
        print_rss();
        return Ok(());
    }

    // Phase 2: fire, on a clock shifted to the start of the window.
    shifted
        .offset
        .store(base_ms - SystemClock.now_ms() - 500, Ordering::Relaxed);
    let recorder = LagRecorder {
        clock: clock.clone(),
        lags: Arc::new(std::sync::Mutex::new(
            Histogram::new(3).expect("valid histogram"),
        )),
        fired: Arc::new(AtomicU64::new(0)),
    };
    let handlers = Handlers::new().register("bench", recorder.clone());
    let stop = CancellationToken::new();
    let poller = tokio::spawn(punctual_poller::run(
        PollerDeps {
            backend: backend.clone(),
            clock: clock.clone(),
            config: PollerConfig {
                tick_ms: args.tick.as_millis() as u64,
                page: 5_000,
                send_batch: 1_000,
                ..PollerConfig::default()
            },
            events: None,
        },
        stop.clone().cancelled_owned(),
    ));
    let worker = tokio::spawn(punctual_worker::run(
        WorkerDeps {
            backend: backend.clone(),
            clock: clock.clone(),
            config: WorkerConfig {
                concurrency: args.concurrency,
                batch: 10,
                ..WorkerConfig::default()
            },
            handlers: Arc::new(handlers),
            events: None,
        },
        stop.clone().cancelled_owned(),
    ));
    let pb = bar(args.tasks, "fire");
    let fire_start = Instant::now();
    let deadline = fire_start + args.timeout;
    let mut first_fire = None;
    loop {
        let fired = recorder.fired.load(Ordering::Relaxed);
        if fired > 0 && first_fire.is_none() {
            first_fire = Some(Instant::now());
        }
        pb.set_position(fired);
        if fired >= args.tasks || Instant::now() > deadline {
            break;
        }
        if poller.is_finished() || worker.is_finished() {
            stop.cancel();
            poller
                .await?
                .map_err(|e| anyhow::anyhow!("poller stopped: {e}"))?;
            worker
                .await?
                .map_err(|e| anyhow::anyhow!("worker stopped: {e}"))?;
            anyhow::bail!("the poller or the worker stopped before every task fired");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let fire_end = Instant::now();
    pb.finish();
    stop.cancel();
    let _ = poller.await;
    let _ = worker.await;
    let fired = recorder.fired.load(Ordering::Relaxed);
    let fire_s = (fire_end - first_fire.unwrap_or(fire_start)).as_secs_f64();
    let lags = recorder
        .lags
        .lock()
        .map_err(|_| anyhow::anyhow!("lag histogram poisoned"))?;
    println!("fired            {fired} of {}", args.tasks);
    println!(
        "fire             {:.0} tasks/s ({fire_s:.1} s)",
        fired as f64 / fire_s.max(1e-9)
    );
    println!(
        "lag              p50 {} ms, p99 {} ms, max {} ms",
        lags.value_at_quantile(0.5),
        lags.value_at_quantile(0.99),
        lags.max()
    );
    print_rss();
    anyhow::ensure!(
        fired >= args.tasks,
        "only {fired} of {} tasks fired before the timeout",
        args.tasks
    );
    Ok(())
}

fn print_rss() {
    match peak_rss_bytes() {
        Some(b) => println!("peak RSS         {:.0} MiB", b as f64 / 1_048_576.0),
        None => println!("peak RSS         unknown (no /proc)"),
    }
}
