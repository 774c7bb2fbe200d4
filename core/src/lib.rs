//! punctual's domain, with no I/O.
//!
//! Everything the other crates agree on lives here: the [`Task`](task::Task) and its
//! [status machine](task::TaskStatus), the [shard and bucket math](keys) that makes the due
//! index sparse and sortable, [validation](validate) of user input, the injectable
//! [`Clock`](clock::Clock), the store traits ([`TaskStore`](store::TaskStore),
//! [`ReadyQueue`](store::ReadyQueue), [`LeaseStore`](store::LeaseStore)) and, behind the
//! `testkit` feature, the conformance suite that every backend runs.
//!
//! Dependencies point inward: `store` implements these traits; `poller`, `worker`, `api` and
//! `console` use them; nothing here knows SQLite, DynamoDB or HTTP.

pub mod clock;
pub mod error;
pub mod keys;
pub mod store;
pub mod task;
pub mod validate;

#[cfg(feature = "testkit")]
pub mod testkit;

pub use clock::{Clock, ManualClock, SystemClock};
pub use error::{ConfigError, StoreError, StoreResult};
pub use store::{Backend, LeaseStore, ReadyQueue, TaskStore};
pub use task::{Backoff, NewTask, Target, TargetKind, Task, TaskStatus, Transition};
