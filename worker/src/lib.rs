//! punctual's worker: claim a dispatched task, run its target, record the outcome, and ack,
//! delay or dead-letter its message. It knows only the store traits of `punctual-core`.
//!
//! # Per message
//!
//! ```text
//! receive ──claim(task_id, version)──┬─ Claimed ── run target ──┬─ Success ─────────── SUCCEEDED, delete
//!                                    │                          ├─ Retry, attempts left
//!                                    │                          │    delay <= long_backoff ─ RETRY_WAIT, delay the message
//!                                    │                          │    delay >  long_backoff ─ RETRY_WAIT + due index, delete
//!                                    │                          └─ GiveUp / attempts spent ─ DEAD, DLQ
//!                                    ├─ Exhausted (attempts spent by dead workers) ────────── DLQ
//!                                    ├─ Conflict, task RUNNING at this version, claim live ── hide until it lapses
//!                                    └─ Conflict / NotFound otherwise (stale, duplicate) ──── delete
//! ```
//!
//! The claim is the one write that decides who runs a task: it succeeds only at the
//! message's version, and only if the task is waiting or its previous claim has lapsed
//! (`running_until < now`). So a message for a rescheduled or cancelled task never runs, and
//! two workers never hold a task at once. Every later write is conditional on the claim's
//! `(version, attempt)`; a worker whose run outlived its claim finds a `Conflict`, writes
//! nothing and leaves the message to its successor.
//!
//! A refused claim normally marks a stale or duplicate message, which is deleted. The one
//! exception keeps invariant 1 (nothing is lost): if the task is `RUNNING` at the message's
//! version under a live claim, the message may be the holder's own, come back early; it is
//! hidden until the claim lapses, when it either takes the task over (the holder died) or is
//! refused again and deleted (the holder finished).
//!
//! # Timing
//!
//! Retries with a short delay stay on the message: `RETRY_WAIT` in the store, the message
//! hidden for the delay, and the next claim accepts `RETRY_WAIT` at the same version. Long
//! delays go back through the due index, so no message sits in the queue for hours. A run
//! is cut at [`WorkerConfig::run_budget_ms`] so the outcome is written while the claim holds;
//! see [`config`] for how the timeouts nest.
//!
//! # Loop
//!
//! [`run`] receives at most as many messages as it has free slots (`concurrency` permits),
//! runs each in its own task, and on shutdown stops receiving at once, hands back anything a
//! receive in progress returns, and waits for the runs in flight (at most `run_timeout_ms`),
//! or with [`WorkerConfig::release_on_shutdown`] abandons them so another worker takes them
//! over when their claims lapse. A Lambda entrypoint calls [`Worker::handle`] per record.
//!
//! A receive asks for as many messages as there are free slots, up to the backend's
//! [`receive_batch_max`](punctual_core::ReadyQueue::receive_batch_max) (see
//! [`WorkerConfig::batch`]). Runs make their store calls one at a time, but claims,
//! completions and acks that wait at the same moment go out as one batch call each (the
//! `batch` module): per message the protocol is unchanged, per store round trip it is many
//! messages.

mod batch;
pub mod config;
pub mod handler;
pub mod http;
pub mod sign;
mod worker;

pub use config::{ConfigError, WorkerConfig};
pub use handler::{Handler, Handlers, Outcome};
pub use worker::{Disposition, Worker, WorkerDeps, WorkerError, WorkerEvent, run};
