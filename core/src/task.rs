//! The task item and its status machine.
//!
//! ```text
//! SCHEDULED --dispatch--> DISPATCHED --claim--> RUNNING --succeed--> SUCCEEDED
//!     ^                                          |  |--retry--> RETRY_WAIT --claim / dispatch--> ...
//!     |                                          |  '--die--> DEAD
//!     '-- reschedule / replay (version+1), from any state but RUNNING
//! SCHEDULED | DISPATCHED | RETRY_WAIT --cancel (version+1)--> CANCELLED
//! ```
//!
//! A claim may also take over a `RUNNING` task whose `running_until` has passed (its worker
//! died), and a claim that finds the attempts already spent ends the task `DEAD`. Stores apply
//! these rules as conditional writes; [`TaskStatus::apply`] is the single statement of them.

use serde::{Deserialize, Serialize};

/// A task identifier: a ULID, or the client's own id.
pub type TaskId = str;

/// Where a task is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum TaskStatus {
    /// Waiting in the due index for its due time.
    Scheduled,
    /// Sent to the ready queue by a poller.
    Dispatched,
    /// Claimed by a worker, which runs it until `running_until`.
    Running,
    /// Failed, waiting for its next attempt.
    RetryWait,
    /// Ran successfully. Terminal.
    Succeeded,
    /// Attempts spent or a permanent error. Terminal; can be replayed.
    Dead,
    /// Cancelled by an operator. Terminal; can be replayed.
    Cancelled,
}

/// Every status, in declaration order.
pub const ALL_STATUSES: [TaskStatus; 7] = [
    TaskStatus::Scheduled,
    TaskStatus::Dispatched,
    TaskStatus::Running,
    TaskStatus::RetryWait,
    TaskStatus::Succeeded,
    TaskStatus::Dead,
    TaskStatus::Cancelled,
];

/// What happens to a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transition {
    /// A poller sent it to the ready queue.
    Dispatch,
    /// A worker claimed it.
    Claim,
    /// Its target succeeded.
    Succeed,
    /// Its target failed and it will be tried again.
    Retry,
    /// Its attempts are spent or the failure is permanent.
    Die,
    /// An operator cancelled it.
    Cancel,
    /// An operator rescheduled or replayed it.
    Reschedule,
}

/// Every transition.
pub const ALL_TRANSITIONS: [Transition; 7] = [
    Transition::Dispatch,
    Transition::Claim,
    Transition::Succeed,
    Transition::Retry,
    Transition::Die,
    Transition::Cancel,
    Transition::Reschedule,
];

/// A transition that the status machine forbids.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a {from} task cannot {transition:?}")]
pub struct InvalidTransition {
    /// The status the task was in.
    pub from: TaskStatus,
    /// The transition refused.
    pub transition: Transition,
}

impl TaskStatus {
    /// The status after `t`, or an error if `t` is not allowed from here.
    pub fn apply(self, t: Transition) -> Result<TaskStatus, InvalidTransition> {
        use TaskStatus::*;
        use Transition::*;
        let next = match (self, t) {
            (Scheduled | RetryWait, Dispatch) => Dispatched,
            // RUNNING → RUNNING is the takeover of a task whose worker's time ran out.
            (Scheduled | Dispatched | RetryWait | Running, Claim) => Running,
            (Running, Succeed) => Succeeded,
            (Running, Retry) => RetryWait,
            // A claim that finds the attempts spent ends the task without running it.
            (Scheduled | Dispatched | RetryWait | Running, Die) => Dead,
            (Scheduled | Dispatched | RetryWait, Cancel) => Cancelled,
            (s, Reschedule) if s != Running => Scheduled,
            (from, transition) => return Err(InvalidTransition { from, transition }),
        };
        Ok(next)
    }

    /// True once nothing more happens to the task without an operator.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            TaskStatus::Succeeded | TaskStatus::Dead | TaskStatus::Cancelled
        )
    }

    /// True while a worker may claim a message for this task.
    pub fn is_claimable(self) -> bool {
        matches!(
            self,
            TaskStatus::Scheduled | TaskStatus::Dispatched | TaskStatus::RetryWait
        )
    }

    /// The status as stored and shown: `SCHEDULED`, `RETRY_WAIT`, ...
    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Scheduled => "SCHEDULED",
            TaskStatus::Dispatched => "DISPATCHED",
            TaskStatus::Running => "RUNNING",
            TaskStatus::RetryWait => "RETRY_WAIT",
            TaskStatus::Succeeded => "SUCCEEDED",
            TaskStatus::Dead => "DEAD",
            TaskStatus::Cancelled => "CANCELLED",
        }
    }

    /// Parses [`as_str`](Self::as_str)'s output.
    pub fn parse(s: &str) -> Option<TaskStatus> {
        ALL_STATUSES.into_iter().find(|st| st.as_str() == s)
    }
}

impl std::fmt::Display for TaskStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What firing a task means.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Target {
    /// POST the payload as JSON to `url`, with `Idempotency-Key: <task_id>`.
    Http {
        /// The webhook URL, `http` or `https`.
        url: String,
        /// Per-request timeout in milliseconds; the worker's default when absent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timeout_ms: Option<u64>,
    },
    /// Log the task and succeed: a no-op target for tests and benchmarks.
    Log,
    /// Run a Rust handler registered under `name`.
    Handler {
        /// The handler's registered name.
        name: String,
    },
}

impl Target {
    /// The kind as a short string: `http`, `log`, `handler`.
    pub fn kind(&self) -> &'static str {
        self.target_kind().as_str()
    }

    /// The kind, as a listing filters on it.
    pub fn target_kind(&self) -> TargetKind {
        match self {
            Target::Http { .. } => TargetKind::Http,
            Target::Log => TargetKind::Log,
            Target::Handler { .. } => TargetKind::Handler,
        }
    }
}

/// The kind of a [`Target`], without its settings: what a task listing filters on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TargetKind {
    /// [`Target::Http`].
    Http,
    /// [`Target::Log`].
    Log,
    /// [`Target::Handler`].
    Handler,
}

impl TargetKind {
    /// Every kind.
    pub const ALL: [TargetKind; 3] = [TargetKind::Http, TargetKind::Log, TargetKind::Handler];

    /// The kind as written in a target's `type` field: `http`, `log`, `handler`.
    pub fn as_str(self) -> &'static str {
        match self {
            TargetKind::Http => "http",
            TargetKind::Log => "log",
            TargetKind::Handler => "handler",
        }
    }

    /// Parses [`as_str`](Self::as_str)'s output.
    pub fn parse(s: &str) -> Option<TargetKind> {
        Self::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// Exponential backoff with full jitter: attempt `n` waits a random time in
/// `[0, min(max_ms, base_ms * 2^(n-1))]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Backoff {
    /// The first retry's ceiling, milliseconds.
    pub base_ms: u64,
    /// The largest ceiling, milliseconds.
    pub max_ms: u64,
}

/// Default first backoff ceiling: 1 s.
pub const DEFAULT_BACKOFF_BASE_MS: u64 = 1_000;
/// Default largest backoff ceiling: 1 h.
pub const DEFAULT_BACKOFF_MAX_MS: u64 = 3_600_000;
/// Default number of attempts.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 5;

impl Default for Backoff {
    fn default() -> Self {
        Self {
            base_ms: DEFAULT_BACKOFF_BASE_MS,
            max_ms: DEFAULT_BACKOFF_MAX_MS,
        }
    }
}

impl Backoff {
    /// The ceiling of the wait after the `attempt`-th failure (1-based).
    pub fn ceiling_ms(&self, attempt: u32) -> u64 {
        let exp = attempt.saturating_sub(1).min(62);
        self.base_ms.saturating_mul(1u64 << exp).min(self.max_ms)
    }

    /// The wait after the `attempt`-th failure, with full jitter; `unit` is a uniform draw in
    /// `[0, 1)` supplied by the caller so this stays pure.
    pub fn delay_ms(&self, attempt: u32, unit: f64) -> u64 {
        (self.ceiling_ms(attempt) as f64 * unit.clamp(0.0, 1.0)) as u64
    }
}

/// A task as the user asks for it, validated, before it is stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewTask {
    /// Its id: the client's own or a fresh ULID.
    pub task_id: String,
    /// Due time, epoch milliseconds.
    pub due_ms: i64,
    /// What firing means.
    pub target: Target,
    /// The body handed to the target.
    pub payload: serde_json::Value,
    /// How many attempts before it is dead.
    pub max_attempts: u32,
    /// Backoff between attempts.
    pub backoff: Backoff,
}

/// A stored task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Task {
    /// Primary key.
    pub task_id: String,
    /// `stable_hash(task_id) % shard_count`.
    pub shard: u32,
    /// Due time (or next attempt time), epoch milliseconds.
    pub due_ms: i64,
    /// Where it is in its life.
    pub status: TaskStatus,
    /// Bumped by every operator mutation; dispatch messages carry it.
    pub version: u64,
    /// Claims so far.
    pub attempt: u32,
    /// Attempts allowed.
    pub max_attempts: u32,
    /// Backoff between attempts.
    pub backoff: Backoff,
    /// What firing means.
    pub target: Target,
    /// The body handed to the target.
    pub payload: serde_json::Value,
    /// The due index partition key, present only while the task waits to be dispatched.
    pub due_bucket: Option<String>,
    /// While `RUNNING`: when the claim lapses and another worker may take over.
    pub running_until: Option<i64>,
    /// The last failure's message.
    pub last_error: Option<String>,
    /// Creation time, epoch milliseconds.
    pub created_ms: i64,
    /// Last change, epoch milliseconds.
    pub updated_ms: i64,
}

impl Task {
    /// The task `new` becomes when stored at `now_ms` in a store of `shard_count` shards.
    pub fn from_new(new: NewTask, shard_count: u32, now_ms: i64) -> Task {
        let shard = crate::keys::shard_of(&new.task_id, shard_count);
        let bucket = crate::keys::due_bucket(shard, crate::keys::bucket_minute(new.due_ms, now_ms));
        Task {
            shard,
            due_ms: new.due_ms,
            status: TaskStatus::Scheduled,
            version: 1,
            attempt: 0,
            max_attempts: new.max_attempts,
            backoff: new.backoff,
            target: new.target,
            payload: new.payload,
            due_bucket: Some(bucket),
            running_until: None,
            last_error: None,
            created_ms: now_ms,
            updated_ms: now_ms,
            task_id: new.task_id,
        }
    }

    /// The due index sort key.
    pub fn due_key(&self) -> String {
        crate::keys::due_key(self.due_ms, &self.task_id)
    }

    /// True if `new` asks for the same task as this one (idempotent create by client id).
    pub fn same_request(&self, new: &NewTask) -> bool {
        self.target == new.target
            && self.payload == new.payload
            && self.max_attempts == new.max_attempts
            && self.backoff == new.backoff
            && self.due_ms == new.due_ms
    }
}

/// Generates a fresh task id (a ULID).
pub fn new_task_id() -> String {
    ulid::Ulid::new().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use TaskStatus::*;
    use Transition::*;

    #[test]
    fn target_kinds_round_trip_and_name_each_target() {
        for k in TargetKind::ALL {
            assert_eq!(TargetKind::parse(k.as_str()), Some(k));
        }
        assert_eq!(TargetKind::parse("sqs"), None);
        let http = Target::Http {
            url: "http://h/".into(),
            timeout_ms: None,
        };
        assert_eq!(http.target_kind(), TargetKind::Http);
        assert_eq!(Target::Log.kind(), "log");
        // The kind is the target's serialized `type`, which the embedded listing filters on.
        let json = serde_json::to_value(Target::Handler { name: "n".into() }).unwrap();
        assert_eq!(json["type"], TargetKind::Handler.as_str());
    }

    /// The whole table: every (status, transition) pair, and what it must give.
    #[test]
    fn every_status_transition_pair() {
        let expect = |s: TaskStatus, t: Transition| -> Option<TaskStatus> {
            match (s, t) {
                (Scheduled, Dispatch) | (RetryWait, Dispatch) => Some(Dispatched),
                (Scheduled, Claim)
                | (Dispatched, Claim)
                | (RetryWait, Claim)
                | (Running, Claim) => Some(Running),
                (Running, Succeed) => Some(Succeeded),
                (Running, Retry) => Some(RetryWait),
                (Scheduled, Die) | (Dispatched, Die) | (RetryWait, Die) | (Running, Die) => {
                    Some(Dead)
                }
                (Scheduled, Cancel) | (Dispatched, Cancel) | (RetryWait, Cancel) => Some(Cancelled),
                (Running, Reschedule) => None,
                (_, Reschedule) => Some(Scheduled),
                _ => None,
            }
        };
        let mut checked = 0;
        for s in ALL_STATUSES {
            for t in ALL_TRANSITIONS {
                match (s.apply(t), expect(s, t)) {
                    (Ok(got), Some(want)) => assert_eq!(got, want, "{s} {t:?}"),
                    (Err(e), None) => {
                        assert_eq!(
                            e,
                            InvalidTransition {
                                from: s,
                                transition: t
                            }
                        );
                    }
                    (got, want) => panic!("{s} {t:?}: got {got:?}, want {want:?}"),
                }
                checked += 1;
            }
        }
        assert_eq!(checked, 49);
    }

    #[test]
    fn terminal_statuses_only_leave_by_reschedule() {
        for s in ALL_STATUSES.into_iter().filter(|s| s.is_terminal()) {
            for t in ALL_TRANSITIONS {
                assert_eq!(s.apply(t).is_ok(), t == Reschedule, "{s} {t:?}");
            }
        }
    }

    #[test]
    fn status_strings_round_trip() {
        for s in ALL_STATUSES {
            assert_eq!(TaskStatus::parse(s.as_str()), Some(s));
            assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
        }
        assert_eq!(TaskStatus::parse("nope"), None);
    }

    #[test]
    fn backoff_grows_and_caps() {
        let b = Backoff {
            base_ms: 100,
            max_ms: 1_000,
        };
        assert_eq!(b.ceiling_ms(1), 100);
        assert_eq!(b.ceiling_ms(2), 200);
        assert_eq!(b.ceiling_ms(4), 800);
        assert_eq!(b.ceiling_ms(5), 1_000);
        assert_eq!(b.ceiling_ms(500), 1_000);
        assert_eq!(b.delay_ms(3, 0.5), 200);
        assert_eq!(b.delay_ms(3, 0.0), 0);
    }

    #[test]
    fn target_json_shape() {
        let t: Target = serde_json::from_str(r#"{"type":"http","url":"http://x/y"}"#).unwrap();
        assert_eq!(
            t,
            Target::Http {
                url: "http://x/y".into(),
                timeout_ms: None
            }
        );
        assert!(serde_json::from_str::<Target>(r#"{"type":"http","url":"u","nope":1}"#).is_err());
        assert_eq!(
            serde_json::to_string(&Target::Log).unwrap(),
            r#"{"type":"log"}"#
        );
    }
}
