//! Metrics wiring: the Prometheus recorder, and worker and poller events turned into metrics.
//!
//! The worker and the poller report what they do on channels ([`WorkerEvent`],
//! [`PollerEvent`]) and know nothing of metrics; [`spawn_recorders`] reads both channels and
//! updates the `punctual_*` counters, the lag and run-duration histograms, the owned-shards
//! gauge, and the API's one-minute [`Activity`] that `GET /v1/stats` reports. The run duration
//! is the time from a run's `Fired` to its outcome, matched by `(task id, attempt)`.
//!
//! The recorder is process-wide (the `metrics` facade has one global recorder), installed
//! once by [`prometheus`]; several `serve` calls in one process (tests) share it.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use punctual_api::metrics::{self as m, Activity, Happened};
use punctual_core::clock::SharedClock;
use punctual_poller::PollerEvent;
use punctual_worker::WorkerEvent;
use tokio::sync::mpsc::UnboundedReceiver;

/// Runs in flight tracked for their duration at most; beyond it the oldest are forgotten.
const MAX_TRACKED_RUNS: usize = 100_000;

/// The process's Prometheus recorder, installed on first use.
pub fn prometheus() -> Option<PrometheusHandle> {
    static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let recorder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Full(m::FIRE_LAG.into()), m::SECONDS_BUCKETS)
                .and_then(|b| {
                    b.set_buckets_for_metric(
                        Matcher::Full(m::RUN_DURATION.into()),
                        m::SECONDS_BUCKETS,
                    )
                })
                .map(|b| b.build_recorder());
            let recorder = match recorder {
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!("metrics disabled: {e}");
                    return None;
                }
            };
            let handle = recorder.handle();
            if metrics::set_global_recorder(recorder).is_err() {
                tracing::warn!("metrics disabled: another recorder is installed");
                return None;
            }
            m::describe();
            Some(handle)
        })
        .clone()
}

/// Spawns the loops that turn events into metrics; they end when their senders are dropped.
pub fn spawn_recorders(
    worker: Option<UnboundedReceiver<WorkerEvent>>,
    poller: Option<UnboundedReceiver<PollerEvent>>,
    activity: Arc<Activity>,
    clock: SharedClock,
) {
    if let Some(rx) = worker {
        tokio::spawn(record_worker(rx, activity, clock));
    }
    if let Some(rx) = poller {
        tokio::spawn(record_poller(rx));
    }
}

async fn record_worker(
    mut rx: UnboundedReceiver<WorkerEvent>,
    activity: Arc<Activity>,
    clock: SharedClock,
) {
    let mut started: HashMap<(String, u32), Instant> = HashMap::new();
    let finish = |started: &mut HashMap<(String, u32), Instant>, id: String, attempt| {
        if let Some(t0) = started.remove(&(id, attempt)) {
            metrics::histogram!(m::RUN_DURATION).record(t0.elapsed().as_secs_f64());
        }
    };
    while let Some(event) = rx.recv().await {
        let now_ms = clock.now_ms();
        match event {
            WorkerEvent::Fired {
                task_id,
                attempt,
                lag_ms,
            } => {
                metrics::counter!(m::TASKS_FIRED).increment(1);
                metrics::histogram!(m::FIRE_LAG).record(lag_ms.max(0) as f64 / 1_000.0);
                activity.record(now_ms, Happened::Fired { lag_ms });
                if started.len() >= MAX_TRACKED_RUNS {
                    started.clear();
                }
                started.insert((task_id, attempt), Instant::now());
            }
            WorkerEvent::Succeeded { task_id, attempt } => {
                metrics::counter!(m::TASKS_SUCCEEDED).increment(1);
                activity.record(now_ms, Happened::Succeeded);
                finish(&mut started, task_id, attempt);
            }
            WorkerEvent::Retried {
                task_id, attempt, ..
            } => {
                metrics::counter!(m::TASKS_RETRIED).increment(1);
                activity.record(now_ms, Happened::Retried);
                finish(&mut started, task_id, attempt);
            }
            WorkerEvent::Dead {
                task_id, attempt, ..
            } => {
                metrics::counter!(m::TASKS_DEAD).increment(1);
                activity.record(now_ms, Happened::Dead);
                finish(&mut started, task_id, attempt);
            }
            WorkerEvent::ClaimLost { task_id, attempt } => {
                started.remove(&(task_id, attempt));
            }
            _ => {}
        }
    }
}

async fn record_poller(mut rx: UnboundedReceiver<PollerEvent>) {
    while let Some(event) = rx.recv().await {
        if let PollerEvent::Ticked {
            dispatched,
            shards_held,
            ..
        } = event
        {
            metrics::counter!(m::TASKS_DISPATCHED).increment(dispatched as u64);
            metrics::gauge!(m::SHARDS_OWNED).set(shards_held as f64);
        }
    }
}
