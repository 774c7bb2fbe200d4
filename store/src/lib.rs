//! punctual's backends: where tasks, the ready queue, the DLQ and the shard leases live.
//!
//! Every backend implements the three traits of [`punctual_core::store`] —
//! [`TaskStore`](punctual_core::TaskStore), [`ReadyQueue`](punctual_core::ReadyQueue) and
//! [`LeaseStore`](punctual_core::LeaseStore) — and passes the same conformance suite
//! (`punctual_core::testkit::suite`). The poller, worker, API and console see only the
//! traits, through a [`Backend`](punctual_core::Backend); choosing a backend is the binary's
//! business. Each backend sits behind a cargo feature so a build carries only what it uses:
//!
//! | feature | module | tasks + due index | ready queue + DLQ | leases |
//! |---|---|---|---|---|
//! | `embedded` (default) | [`embedded`] | one SQLite table, a partial index as the sparse due index | two tables in the same file, SQS semantics | a table in the same file |
//! | `aws` | [`aws`] | DynamoDB table + sparse GSI `by_due` | SQS standard queue with a redrive policy | a DynamoDB table, conditional writes |
//!
//! Backends translate their failures at the boundary into [`StoreError`](punctual_core::StoreError):
//! a failed condition is `Conflict` (SQLite constraint errors, DynamoDB's
//! `ConditionalCheckFailedException`), a busy or unreachable store is `Unavailable` (retry), and
//! the backend's own error stays in `source`. No backend reads a clock: every call carries
//! `now_ms`.

#[cfg(feature = "aws")]
pub mod aws;
#[cfg(feature = "embedded")]
pub mod embedded;
