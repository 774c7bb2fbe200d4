//! The per-message protocol and the receive loop around it.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use punctual_core::clock::SharedClock;
use punctual_core::error::StoreResult;
use punctual_core::store::{
    ClaimOutcome, Completion, QueueDeadLetter, QueueReceive, QueueVisibility, ReceivedMessage,
    TaskClaim, TaskComplete,
};
use punctual_core::{Backend, StoreError, Target, Task, TaskStatus};
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::task::{JoinHandle, JoinSet};
use tracing::{debug, info, warn};

use crate::batch::{Batcher, FlushFn, spread, unavailable};
use crate::config::{ConfigError, MAX_BATCH, WorkerConfig};
use crate::handler::{Handlers, Outcome};
use crate::http::HttpTarget;

/// A message deferred behind a live claim comes back this long after the claim lapses, so
/// the takeover claim finds `running_until < now` even across a little clock skew. (If it
/// comes back too early it is simply deferred again.)
const CLAIM_LAPSE_GRACE_MS: i64 = 250;
/// Pause after a failed receive.
const RECEIVE_ERROR_SLEEP_MS: u64 = 1_000;
/// Beyond its long-poll wait, how long a receive interrupted by shutdown may take to return
/// what it got, so it can be released rather than left hidden.
const RECEIVE_SHUTDOWN_GRACE_MS: u64 = 2_000;

/// What a worker needs: the backend's traits, a clock, its config, its handlers.
#[derive(Clone)]
pub struct WorkerDeps {
    /// The task store and the ready queue (leases are not used).
    pub backend: Backend,
    /// Where `now` comes from.
    pub clock: SharedClock,
    /// How it runs.
    pub config: WorkerConfig,
    /// Rust handlers for `handler` targets.
    pub handlers: Arc<Handlers>,
    /// If set, every step of every message is reported here (tests, metrics).
    pub events: Option<mpsc::UnboundedSender<WorkerEvent>>,
}

impl std::fmt::Debug for WorkerDeps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerDeps")
            .field("backend", &self.backend)
            .field("config", &self.config)
            .field("handlers", &self.handlers)
            .finish_non_exhaustive()
    }
}

/// What happened to a message, for tests and metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkerEvent {
    /// The claim succeeded; the target runs now.
    Fired {
        /// The task.
        task_id: String,
        /// This run's attempt, from 1.
        attempt: u32,
        /// Claim time minus the task's due time, milliseconds.
        lag_ms: i64,
    },
    /// The target succeeded; the task is `SUCCEEDED` and the message deleted.
    Succeeded {
        /// The task.
        task_id: String,
        /// The attempt that succeeded.
        attempt: u32,
    },
    /// The target failed and will be tried again; the task is `RETRY_WAIT`.
    Retried {
        /// The task.
        task_id: String,
        /// The attempt that failed.
        attempt: u32,
        /// Why.
        error: String,
        /// When the next attempt is due.
        next_due_ms: i64,
        /// True if the task went back to the due index (message deleted); false if the
        /// message was kept and delayed.
        reindexed: bool,
    },
    /// The task is `DEAD` and its message in the DLQ.
    Dead {
        /// The task.
        task_id: String,
        /// The last attempt.
        attempt: u32,
        /// Why.
        reason: String,
    },
    /// A stale or duplicate message: the claim was refused and the message deleted without
    /// running anything.
    Dropped {
        /// The task.
        task_id: String,
        /// The version the message carried.
        version: u64,
        /// Why the claim was refused.
        reason: String,
    },
    /// The task is `RUNNING` under another, still valid claim: the message is kept hidden
    /// until that claim lapses, so it can take over if that worker died.
    Deferred {
        /// The task.
        task_id: String,
        /// When the message becomes visible again.
        until_ms: i64,
    },
    /// The outcome could not be written because this worker's claim had lapsed and another
    /// took over; the message is left alone.
    ClaimLost {
        /// The task.
        task_id: String,
        /// The attempt this worker ran.
        attempt: u32,
    },
    /// A run was abandoned at shutdown (`release_on_shutdown`); the message comes back when
    /// the claim lapses.
    Released {
        /// The task.
        task_id: String,
    },
    /// A store call failed; the message is left to reappear after its visibility timeout.
    StoreFailed {
        /// The task.
        task_id: String,
        /// The failure.
        error: String,
    },
}

/// What became of one message, as [`Worker::handle`] returns it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// Stale or duplicate: deleted without running.
    Dropped,
    /// Kept hidden until another worker's live claim lapses.
    Deferred,
    /// Ran and succeeded: deleted.
    Succeeded,
    /// Ran and failed; the message was kept and delayed until the next attempt.
    RetryKept,
    /// Ran and failed; the task went back to the due index and the message was deleted.
    RetryReindexed,
    /// Dead: moved to the DLQ.
    Dead,
    /// Ran, but the claim had lapsed; left alone.
    ClaimLost,
    /// Abandoned at shutdown; comes back when the claim lapses.
    Released,
    /// A store call failed; left to reappear after its visibility timeout.
    StoreFailed,
}

impl Disposition {
    /// True if the message left the ready queue (deleted or moved to the DLQ).
    pub fn message_gone(self) -> bool {
        matches!(
            self,
            Disposition::Dropped
                | Disposition::Succeeded
                | Disposition::RetryReindexed
                | Disposition::Dead
        )
    }
}

/// Why a worker could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkerError {
    /// The config is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The http client could not be built.
    #[error("building the http client: {0}")]
    Http(#[from] reqwest::Error),
}

/// A worker: the per-message protocol ([`handle`](Self::handle)) and the receive loop
/// ([`run`](Self::run)). Cheap to share behind an `Arc`.
pub struct Worker {
    backend: Backend,
    /// Claims grouped into `task_claim_many` calls, if the backend's batch beats single calls.
    claims: Option<Batcher<TaskClaim, StoreResult<ClaimOutcome>>>,
    /// Completions grouped into `task_complete_many` calls, likewise.
    completes: Option<Batcher<TaskComplete, StoreResult<()>>>,
    /// Acks grouped into `queue_delete` calls (SQS's `DeleteMessageBatch`).
    deletes: Batcher<String, StoreResult<()>>,
    clock: SharedClock,
    config: WorkerConfig,
    handlers: Arc<Handlers>,
    http: HttpTarget,
    events: Option<mpsc::UnboundedSender<WorkerEvent>>,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// Aborts a spawned task when dropped, so a handler does not outlive the run that started it.
struct AbortOnDrop<T>(JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Worker {
    /// Validates the config and builds the http client.
    pub fn new(deps: WorkerDeps) -> Result<Self, WorkerError> {
        deps.config.validate()?;
        let concurrency = deps.config.concurrency;
        // Enough batch calls in flight to carry every slot's call at once, at the backend's
        // batch size; with a batch as big as the slots, one at a time (a group commit).
        let in_flight = |max: usize| concurrency.div_ceil(max.max(1));
        let write_max = deps.backend.tasks.task_write_batch_max();
        let (claims, completes) = if write_max > 1 {
            let tasks = deps.backend.tasks.clone();
            let claim: FlushFn<TaskClaim, StoreResult<ClaimOutcome>> = Arc::new(move |ps| {
                let tasks = tasks.clone();
                Box::pin(async move {
                    let n = ps.len();
                    spread(n, tasks.task_claim_many(ps).await)
                })
            });
            let tasks = deps.backend.tasks.clone();
            let complete: FlushFn<TaskComplete, StoreResult<()>> = Arc::new(move |ps| {
                let tasks = tasks.clone();
                Box::pin(async move {
                    let n = ps.len();
                    spread(n, tasks.task_complete_many(ps).await)
                })
            });
            (
                Some(Batcher::new(write_max, in_flight(write_max), claim)),
                Some(Batcher::new(write_max, in_flight(write_max), complete)),
            )
        } else {
            (None, None)
        };
        let queue = deps.backend.queue.clone();
        let delete: FlushFn<String, StoreResult<()>> = Arc::new(move |receipts: Vec<String>| {
            let queue = queue.clone();
            Box::pin(async move {
                let n = receipts.len();
                let done = queue.queue_delete(&receipts).await;
                spread(n, done.map(|()| (0..n).map(|_| Ok(())).collect()))
            })
        });
        let delete_max = deps.backend.queue.receive_batch_max();
        Ok(Self {
            claims,
            completes,
            deletes: Batcher::new(delete_max, in_flight(delete_max), delete),
            http: HttpTarget::new(deps.config.webhook_secret.clone())?,
            backend: deps.backend,
            clock: deps.clock,
            config: deps.config,
            handlers: deps.handlers,
            events: deps.events,
        })
    }

    /// The config in use.
    pub fn config(&self) -> &WorkerConfig {
        &self.config
    }

    fn emit(&self, event: WorkerEvent) {
        if let Some(tx) = &self.events {
            let _ = tx.send(event);
        }
    }

    fn now(&self) -> i64 {
        self.clock.now_ms()
    }

    /// Runs the whole protocol for one received message: claim, run, record, ack. Never
    /// fails: every store error is logged and leaves the message to reappear.
    pub async fn handle(&self, msg: ReceivedMessage) -> Disposition {
        self.handle_until(msg, std::future::pending()).await
    }

    /// [`handle`](Self::handle), but if `release` completes while the target runs, the run is
    /// abandoned and the message made visible again when the claim lapses.
    pub async fn handle_until(
        &self,
        msg: ReceivedMessage,
        release: impl Future<Output = ()> + Send,
    ) -> Disposition {
        let task_id = msg.message.task_id.clone();
        let claim_now = self.now();
        let claimed = self
            .claim(TaskClaim {
                task_id: task_id.clone(),
                version: msg.message.version,
                now_ms: claim_now,
                run_timeout_ms: self.config.run_timeout_ms,
            })
            .await;
        let task = match claimed {
            Ok(ClaimOutcome::Claimed(task)) => task,
            Ok(ClaimOutcome::Exhausted(task)) => {
                let reason = match &task.last_error {
                    Some(e) => format!("attempts spent ({}): {e}", task.max_attempts),
                    None => format!(
                        "attempts spent ({}): every run died before recording an outcome",
                        task.max_attempts
                    ),
                };
                return self.dead_letter(&msg, &task, reason).await;
            }
            Err(e) if e.is_conflict() || e.is_not_found() => {
                return self.claim_refused(&msg, e).await;
            }
            Err(e) => return self.store_failed(&task_id, "claim", e),
        };
        self.emit(WorkerEvent::Fired {
            task_id: task_id.clone(),
            attempt: task.attempt,
            lag_ms: claim_now - task.due_ms,
        });
        debug!(
            task_id,
            attempt = task.attempt,
            lag_ms = claim_now - task.due_ms,
            "fired"
        );

        let outcome = tokio::select! {
            outcome = self.run_target(&task) => outcome,
            () = release => return self.release_claimed(&msg, &task).await,
        };
        self.record(&msg, &task, outcome).await
    }

    /// Runs the task's target.
    async fn run_target(&self, task: &Task) -> Outcome {
        match &task.target {
            Target::Http { url, timeout_ms } => {
                let timeout = self.config.http_timeout_for(*timeout_ms);
                self.http.call(task, url, timeout).await
            }
            Target::Log => {
                info!(
                    task_id = task.task_id,
                    attempt = task.attempt,
                    payload = %task.payload,
                    "log target fired"
                );
                Outcome::Success
            }
            Target::Handler { name } => {
                let Some(handler) = self.handlers.get(name) else {
                    return Outcome::give_up(format!("no handler registered as {name:?}"));
                };
                let timeout = self.config.handler_timeout();
                let owned = task.clone();
                // Spawned so a panic becomes a retry instead of killing this run's bookkeeping.
                let mut run = AbortOnDrop(tokio::spawn(async move { handler.run(&owned).await }));
                match tokio::time::timeout(timeout, &mut run.0).await {
                    Ok(Ok(outcome)) => outcome,
                    Ok(Err(e)) if e.is_panic() => {
                        let p = e.into_panic();
                        let what = p
                            .downcast_ref::<&str>()
                            .map(|s| s.to_string())
                            .or_else(|| p.downcast_ref::<String>().cloned())
                            .unwrap_or_default();
                        Outcome::retry(format!("handler {name:?} panicked: {what}"))
                    }
                    Ok(Err(_)) => Outcome::retry(format!("handler {name:?} was cancelled")),
                    Err(_) => Outcome::retry(format!(
                        "handler {name:?} timed out after {} ms",
                        timeout.as_millis()
                    )),
                }
            }
        }
    }

    /// Turns a run's outcome into the task's next state and the message's fate.
    async fn record(&self, msg: &ReceivedMessage, task: &Task, outcome: Outcome) -> Disposition {
        let task_id = &task.task_id;
        let (error, after) = match outcome {
            Outcome::Success => {
                if let Some(d) = self.complete(msg, task, Completion::Succeeded).await {
                    return d;
                }
                self.delete(msg).await;
                self.emit(WorkerEvent::Succeeded {
                    task_id: task_id.clone(),
                    attempt: task.attempt,
                });
                debug!(task_id, attempt = task.attempt, "succeeded");
                return Disposition::Succeeded;
            }
            Outcome::GiveUp { reason } => return self.die(msg, task, reason).await,
            Outcome::Retry { error, .. } if task.attempt >= task.max_attempts => {
                let reason = format!("attempts spent ({}): {error}", task.max_attempts);
                return self.die(msg, task, reason).await;
            }
            Outcome::Retry { error, after } => (error, after),
        };

        let delay_ms = match after {
            Some(d) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
            None => task.backoff.delay_ms(task.attempt, fastrand::f64()) as i64,
        };
        // A kept message counts one receive per attempt; near the queue's redrive limit the
        // due index takes over, so `max_attempts` and not the redrive policy ends the task.
        let keep = delay_ms <= self.config.long_backoff_ms
            && msg.receive_count < self.backend.queue.max_receive_count();
        let now = self.now();
        let next_due_ms = now.saturating_add(delay_ms);
        let completion = Completion::Retry {
            next_due_ms,
            error: error.clone(),
            reindex: !keep,
        };
        if let Some(d) = self.complete(msg, task, completion).await {
            return d;
        }
        if keep {
            let visible = self
                .backend
                .queue
                .queue_change_visibility(QueueVisibility {
                    receipt: msg.receipt.clone(),
                    visibility_ms: delay_ms,
                    now_ms: now,
                })
                .await;
            if let Err(e) = visible {
                // The message reappears after its visibility timeout and the claim accepts
                // RETRY_WAIT: the retry only comes at another time than planned.
                warn!(task_id, error = %e, "could not delay the message; it returns on its visibility timeout");
            }
        } else {
            self.delete(msg).await;
        }
        self.emit(WorkerEvent::Retried {
            task_id: task_id.clone(),
            attempt: task.attempt,
            error: error.clone(),
            next_due_ms,
            reindexed: !keep,
        });
        debug!(
            task_id,
            attempt = task.attempt,
            delay_ms,
            reindexed = !keep,
            error,
            "retry"
        );
        if keep {
            Disposition::RetryKept
        } else {
            Disposition::RetryReindexed
        }
    }

    /// Writes the outcome. `None` when written; otherwise what became of the message.
    async fn complete(
        &self,
        msg: &ReceivedMessage,
        task: &Task,
        outcome: Completion,
    ) -> Option<Disposition> {
        let done = self
            .complete_call(TaskComplete {
                task_id: task.task_id.clone(),
                version: task.version,
                attempt: task.attempt,
                outcome,
                now_ms: self.now(),
            })
            .await;
        match done {
            Ok(_) => None,
            Err(e) if e.is_conflict() => {
                // Our run outlived running_until and another worker took over; the outcome is
                // theirs to write, and the message is theirs too.
                warn!(task_id = task.task_id, attempt = task.attempt, error = %e, "claim lost before the outcome was recorded");
                self.emit(WorkerEvent::ClaimLost {
                    task_id: task.task_id.clone(),
                    attempt: task.attempt,
                });
                Some(Disposition::ClaimLost)
            }
            Err(e) if e.is_not_found() => {
                warn!(
                    task_id = task.task_id,
                    "task vanished during its run; dropping the message"
                );
                self.delete(msg).await;
                self.emit(WorkerEvent::Dropped {
                    task_id: task.task_id.clone(),
                    version: msg.message.version,
                    reason: e.to_string(),
                });
                Some(Disposition::Dropped)
            }
            Err(e) => Some(self.store_failed(&task.task_id, "complete", e)),
        }
    }

    /// Records `DEAD` and moves the message to the DLQ.
    async fn die(&self, msg: &ReceivedMessage, task: &Task, reason: String) -> Disposition {
        let completion = Completion::Dead {
            error: reason.clone(),
        };
        if let Some(d) = self.complete(msg, task, completion).await {
            return d;
        }
        self.dead_letter(msg, task, reason).await
    }

    /// Moves the message of a `DEAD` task to the DLQ.
    async fn dead_letter(&self, msg: &ReceivedMessage, task: &Task, reason: String) -> Disposition {
        let moved = self
            .backend
            .queue
            .queue_dead_letter(QueueDeadLetter {
                receipt: msg.receipt.clone(),
                message: msg.message.clone(),
                reason: reason.clone(),
                now_ms: self.now(),
            })
            .await;
        if let Err(e) = moved {
            // The task is DEAD already; the message comes back, its claim is refused and it
            // is dropped. The DLQ misses one letter, the task's state does not.
            warn!(task_id = task.task_id, error = %e, "could not move the message to the DLQ");
        }
        info!(
            task_id = task.task_id,
            attempt = task.attempt,
            reason,
            "dead"
        );
        self.emit(WorkerEvent::Dead {
            task_id: task.task_id.clone(),
            attempt: task.attempt,
            reason,
        });
        Disposition::Dead
    }

    /// A refused claim: a stale or duplicate message, unless another worker holds the task
    /// at this very version under a live claim. That message may be the holder's own,
    /// reappearing before the claim lapses; deleting it would leave nothing to take the task
    /// over if the holder died, so it is kept hidden until the claim lapses.
    async fn claim_refused(&self, msg: &ReceivedMessage, refusal: StoreError) -> Disposition {
        let task_id = &msg.message.task_id;
        if refusal.is_conflict() {
            let current = match self.backend.tasks.task_get(task_id).await {
                Ok(t) => t,
                Err(e) => return self.store_failed(task_id, "get", e),
            };
            if let Some(t) = current
                && t.version == msg.message.version
                && t.status == TaskStatus::Running
            {
                let now = self.now();
                let until = t.running_until.unwrap_or(now);
                let wait_ms = (until - now).max(0) + CLAIM_LAPSE_GRACE_MS;
                let deferred = self
                    .backend
                    .queue
                    .queue_change_visibility(QueueVisibility {
                        receipt: msg.receipt.clone(),
                        visibility_ms: wait_ms,
                        now_ms: now,
                    })
                    .await;
                if let Err(e) = deferred {
                    return self.store_failed(task_id, "change visibility", e);
                }
                debug!(
                    task_id,
                    wait_ms, "running elsewhere; message deferred until the claim lapses"
                );
                self.emit(WorkerEvent::Deferred {
                    task_id: task_id.clone(),
                    until_ms: now + wait_ms,
                });
                return Disposition::Deferred;
            }
        }
        debug!(task_id, version = msg.message.version, reason = %refusal, "stale or duplicate message dropped");
        self.delete(msg).await;
        self.emit(WorkerEvent::Dropped {
            task_id: task_id.clone(),
            version: msg.message.version,
            reason: refusal.to_string(),
        });
        Disposition::Dropped
    }

    /// Abandons a claimed run at shutdown: the message comes back when the claim lapses.
    async fn release_claimed(&self, msg: &ReceivedMessage, task: &Task) -> Disposition {
        let now = self.now();
        let until = task
            .running_until
            .unwrap_or(now + self.config.run_timeout_ms);
        let released = self
            .backend
            .queue
            .queue_change_visibility(QueueVisibility {
                receipt: msg.receipt.clone(),
                visibility_ms: (until - now).max(0) + CLAIM_LAPSE_GRACE_MS,
                now_ms: now,
            })
            .await;
        if let Err(e) = released {
            return self.store_failed(&task.task_id, "change visibility", e);
        }
        info!(
            task_id = task.task_id,
            attempt = task.attempt,
            "run abandoned at shutdown"
        );
        self.emit(WorkerEvent::Released {
            task_id: task.task_id.clone(),
        });
        Disposition::Released
    }

    /// The claim, through the batcher if there is one.
    async fn claim(&self, p: TaskClaim) -> StoreResult<ClaimOutcome> {
        match &self.claims {
            Some(b) => b
                .call(p)
                .await
                .unwrap_or_else(|| Err(unavailable("the claim batcher stopped"))),
            None => self.backend.tasks.task_claim(p).await,
        }
    }

    /// The completion, through the batcher if there is one.
    async fn complete_call(&self, p: TaskComplete) -> StoreResult<()> {
        match &self.completes {
            Some(b) => b
                .call(p)
                .await
                .unwrap_or_else(|| Err(unavailable("the completion batcher stopped"))),
            None => self.backend.tasks.task_complete(p).await.map(|_| ()),
        }
    }

    /// Deletes a delivery; a failure only means the message comes back and is dropped then.
    async fn delete(&self, msg: &ReceivedMessage) {
        let deleted = self
            .deletes
            .call(msg.receipt.clone())
            .await
            .unwrap_or_else(|| Err(unavailable("the delete batcher stopped")));
        if let Err(e) = deleted {
            warn!(task_id = msg.message.task_id, error = %e, "could not delete the message; it will come back and be dropped");
        }
    }

    fn store_failed(&self, task_id: &str, call: &str, e: StoreError) -> Disposition {
        warn!(task_id, call, error = %e, "store call failed; the message will reappear");
        self.emit(WorkerEvent::StoreFailed {
            task_id: task_id.to_string(),
            error: format!("{call}: {e}"),
        });
        Disposition::StoreFailed
    }

    /// Makes received messages visible again at once (never claimed).
    async fn release_unclaimed(&self, msgs: Vec<ReceivedMessage>) {
        for msg in msgs {
            let released = self
                .backend
                .queue
                .queue_change_visibility(QueueVisibility {
                    receipt: msg.receipt,
                    visibility_ms: 0,
                    now_ms: self.now(),
                })
                .await;
            if let Err(e) = released {
                warn!(task_id = msg.message.task_id, error = %e, "could not release a message; it returns on its visibility timeout");
            }
        }
    }

    /// Receives and handles messages until `shutdown` completes, then stops receiving at once
    /// and lets the runs in flight finish (at most `run_timeout_ms`), or with
    /// `release_on_shutdown` abandons them.
    pub async fn run(self: Arc<Self>, shutdown: impl Future<Output = ()> + Send) {
        let cfg = self.config.clone();
        let receive_max = receive_size(cfg.batch, self.backend.queue.receive_batch_max());
        let slots = Arc::new(Semaphore::new(cfg.concurrency));
        let (release_tx, release_rx) = watch::channel(false);
        let mut in_flight: JoinSet<Disposition> = JoinSet::new();
        tokio::pin!(shutdown);

        loop {
            while let Some(done) = in_flight.try_join_next() {
                log_join(done);
            }
            // Receive only as many messages as there are free slots: a received message
            // waiting for a slot would spend its visibility timeout doing nothing.
            let first = tokio::select! {
                biased;
                () = &mut shutdown => break,
                permit = slots.clone().acquire_owned() => permit.expect("the semaphore is never closed"),
            };
            let mut permits = vec![first];
            while permits.len() < receive_max {
                match slots.clone().try_acquire_owned() {
                    Ok(p) => permits.push(p),
                    Err(_) => break,
                }
            }
            let receive = self.backend.queue.queue_receive(QueueReceive {
                max: permits.len(),
                visibility_ms: cfg.visibility_ms,
                wait_ms: cfg.wait_ms,
                now_ms: self.now(),
            });
            tokio::pin!(receive);
            let received = tokio::select! {
                biased;
                () = &mut shutdown => {
                    // The receive may already hold messages: take them and hand them back
                    // rather than leave them hidden for a whole visibility timeout.
                    let grace = Duration::from_millis(cfg.wait_ms as u64 + RECEIVE_SHUTDOWN_GRACE_MS);
                    if let Ok(Ok(msgs)) = tokio::time::timeout(grace, receive).await {
                        self.release_unclaimed(msgs).await;
                    }
                    break;
                }
                r = &mut receive => r,
            };
            let pause = match received {
                Ok(mut msgs) => {
                    if msgs.len() > permits.len() {
                        let extra = msgs.split_off(permits.len());
                        self.release_unclaimed(extra).await;
                    }
                    if msgs.is_empty() {
                        Some(cfg.idle_sleep_ms)
                    } else {
                        for (msg, permit) in msgs.into_iter().zip(permits) {
                            let worker = self.clone();
                            let mut release = release_rx.clone();
                            in_flight.spawn(async move {
                                let _slot = permit;
                                let released = async move {
                                    // A dropped sender means no release will ever come.
                                    if release.wait_for(|r| *r).await.is_err() {
                                        std::future::pending::<()>().await;
                                    }
                                };
                                worker.handle_until(msg, released).await
                            });
                        }
                        None
                    }
                }
                Err(e) => {
                    warn!(error = %e, "receive failed");
                    Some(RECEIVE_ERROR_SLEEP_MS)
                }
            };
            if let Some(ms) = pause.filter(|ms| *ms > 0) {
                tokio::select! {
                    biased;
                    () = &mut shutdown => break,
                    () = tokio::time::sleep(Duration::from_millis(ms)) => {}
                }
            }
        }

        let n = in_flight.len();
        if cfg.release_on_shutdown {
            info!(in_flight = n, "shutting down: releasing runs in flight");
            let _ = release_tx.send(true);
        } else {
            info!(
                in_flight = n,
                "shutting down: letting runs in flight finish"
            );
        }
        let deadline = Duration::from_millis(cfg.run_timeout_ms as u64);
        let drained = tokio::time::timeout(deadline, async {
            while let Some(done) = in_flight.join_next().await {
                log_join(done);
            }
        })
        .await;
        if drained.is_err() {
            warn!(
                left = in_flight.len(),
                "runs still in flight after run_timeout_ms; abandoning them (their messages return on their visibility timeout)"
            );
            in_flight.abort_all();
            while in_flight.join_next().await.is_some() {}
        }
        drop(release_tx);
    }
}

/// Messages asked for per receive: `batch` on a backend with SQS's limit of 10, scaled up in
/// proportion on one that serves more at once (`batch` 10 asks the embedded queue for 1,000).
fn receive_size(batch: usize, backend_max: usize) -> usize {
    if backend_max > MAX_BATCH {
        (batch * backend_max / MAX_BATCH).max(1)
    } else {
        batch.min(backend_max.max(1))
    }
}

fn log_join(done: Result<Disposition, tokio::task::JoinError>) {
    if let Err(e) = done
        && e.is_panic()
    {
        warn!(error = %e, "a message's handling panicked; it returns on its visibility timeout");
    }
}

/// Runs a worker until `shutdown` completes: receives batches, runs at most
/// `config.concurrency` messages at once, and drains (or releases) what is in flight before
/// returning. Fails only if the worker cannot start.
pub async fn run(
    deps: WorkerDeps,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), WorkerError> {
    let worker = Arc::new(Worker::new(deps)?);
    worker.run(shutdown).await;
    Ok(())
}
