//! Every name the aws backend gives AWS resources and item attributes, in one place.
//!
//! Terraform (`infra/`) must create exactly these: a test compares its files against the
//! constants here. Resource names are `{prefix}{suffix}` with one configurable prefix
//! (default [`DEFAULT_PREFIX`]).
//!
//! ```text
//! {prefix}tasks    DynamoDB, on demand, TTL on `expires_at`
//!                  key: task_id (S)
//!                  GSI by_due: due_bucket (S, hash) + due_key (S, range),
//!                              projection INCLUDE version, shard, due_ms
//!                              (sparse: only items that have `due_bucket` are in it)
//!                  GSI by_status: status_part (S, hash) + due_key (S, range), projection KEYS_ONLY
//!                              (sparse: only DEAD and CANCELLED tasks carry `status_part`,
//!                              so the common path, created → fired → succeeded, never writes it)
//! {prefix}leases   DynamoDB, on demand
//!                  key: pk (S, hash) + sk (S, range)
//!                  pk = "lease", sk = "{shard:05}"  one item per shard (a Query lists them)
//!                  pk = "member", sk = owner         one item per live poller: expires_ms
//!                  pk = "meta",  sk = "meta"        shard_count, created_minute, max_due_minute
//! {prefix}ready    SQS standard queue, RedrivePolicy → {prefix}dlq (maxReceiveCount)
//! {prefix}dlq      SQS standard queue, 14 days retention
//! ```

/// Default prefix of every table and queue name.
pub const DEFAULT_PREFIX: &str = "punctual-";

/// Suffix of the tasks table.
pub const TASKS_TABLE_SUFFIX: &str = "tasks";
/// Suffix of the leases (and meta) table.
pub const LEASES_TABLE_SUFFIX: &str = "leases";
/// Suffix of the ready queue.
pub const READY_QUEUE_SUFFIX: &str = "ready";
/// Suffix of the dead-letter queue.
pub const DLQ_SUFFIX: &str = "dlq";

/// The sparse due index of the tasks table.
pub const GSI_BY_DUE: &str = "by_due";

/// The sparse status index of the tasks table: the finished tasks an operator acts on
/// (DEAD and CANCELLED), listed by status without a Scan.
pub const GSI_BY_STATUS: &str = "by_status";
/// Tasks table: `by_status`'s partition key, `"{STATUS}#{shard:05}"`; present only while the
/// task is DEAD or CANCELLED (sparse). Spread over shards like `due_bucket`, so no partition
/// takes every write of one status.
pub const STATUS_PART: &str = "status_part";

/// Tasks table: partition key.
pub const TASK_ID: &str = "task_id";
/// Tasks table: the GSI's partition key, present only while the task waits (sparse).
pub const DUE_BUCKET: &str = "due_bucket";
/// Tasks table: the GSI's sort key, `"{due_ms:013}#{task_id}"`.
pub const DUE_KEY: &str = "due_key";
/// Tasks table: shard number (projected into the GSI).
pub const SHARD: &str = "shard";
/// Tasks table: due time, epoch ms (projected into the GSI).
pub const DUE_MS: &str = "due_ms";
/// Tasks table: version (projected into the GSI).
pub const VERSION: &str = "version";
/// Tasks table: status string (`SCHEDULED`, ...).
pub const STATUS: &str = "status";
/// Tasks table: claims so far.
pub const ATTEMPT: &str = "attempt";
/// Tasks table: attempts allowed.
pub const MAX_ATTEMPTS: &str = "max_attempts";
/// Tasks table: backoff policy, JSON.
pub const BACKOFF: &str = "backoff";
/// Tasks table: target, JSON.
pub const TARGET: &str = "target";
/// Tasks table: payload, JSON.
pub const PAYLOAD: &str = "payload";
/// Tasks table: while RUNNING, when the claim lapses (epoch ms).
pub const RUNNING_UNTIL: &str = "running_until";
/// Tasks table: last failure.
pub const LAST_ERROR: &str = "last_error";
/// Tasks table: creation time, epoch ms.
pub const CREATED_MS: &str = "created_ms";
/// Tasks table: last change, epoch ms.
pub const UPDATED_MS: &str = "updated_ms";
/// Tasks table: the TTL attribute, epoch **seconds**; set when a task becomes terminal.
pub const EXPIRES_AT: &str = "expires_at";

/// Attributes projected into `by_due` besides the keys.
pub const GSI_PROJECTED: [&str; 3] = [VERSION, SHARD, DUE_MS];

/// Leases table: partition key.
pub const LEASE_PK: &str = "pk";
/// Leases table: sort key.
pub const LEASE_SK: &str = "sk";
/// Leases table: partition of the lease items.
pub const LEASE_PARTITION: &str = "lease";
/// Leases table: partition of the pollers' presence items (sort key: the owner).
pub const MEMBER_PARTITION: &str = "member";
/// Leases table: partition (and sort key) of the meta item.
pub const META_PARTITION: &str = "meta";
/// Lease item: holder.
pub const OWNER: &str = "owner";
/// Lease item: expiry, epoch ms.
pub const EXPIRES_MS: &str = "expires_ms";
/// Lease item: grows with every acquisition.
pub const EPOCH: &str = "epoch";
/// Lease item: the poller's watermark minute.
pub const WATERMARK_MINUTE: &str = "watermark_minute";
/// Meta item: the store's shard count.
pub const SHARD_COUNT: &str = "shard_count";
/// Meta item: the minute the store was created.
pub const CREATED_MINUTE: &str = "created_minute";
/// Meta item: the latest bucket minute any task was filed under (bounds `task_list_pending`).
pub const MAX_DUE_MINUTE: &str = "max_due_minute";
/// Meta item: true once every `DEAD` and `CANCELLED` task carries `status_part` (set at
/// creation; on a deployment made before `by_status`, by `init`'s one-off backfill).
pub const STATUS_INDEX_FILLED: &str = "status_index_filled";

/// DLQ message attribute: why the worker dead-lettered it.
pub const MSG_REASON: &str = "reason";
/// DLQ message attribute: when, epoch ms.
pub const MSG_DEAD_MS: &str = "dead_ms";

/// The names of one deployment: `{prefix}{suffix}` for each resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceNames {
    /// The tasks table.
    pub tasks_table: String,
    /// The leases table.
    pub leases_table: String,
    /// The ready queue.
    pub ready_queue: String,
    /// The dead-letter queue.
    pub dlq: String,
}

impl ResourceNames {
    /// The names under `prefix`.
    pub fn new(prefix: &str) -> Self {
        Self {
            tasks_table: format!("{prefix}{TASKS_TABLE_SUFFIX}"),
            leases_table: format!("{prefix}{LEASES_TABLE_SUFFIX}"),
            ready_queue: format!("{prefix}{READY_QUEUE_SUFFIX}"),
            dlq: format!("{prefix}{DLQ_SUFFIX}"),
        }
    }
}
