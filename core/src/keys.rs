//! Shard and bucket math: how a task finds its place in the sparse due index.
//!
//! ```text
//! shard      = xxh3_64(task_id) % shard_count          stable across processes and versions
//! due_bucket = "{shard:05}#{minute:010}"                minute = max(due_ms, now_ms) / 60_000
//! due_key    = "{due_ms:013}#{task_id}"                 sorts as due time, then id
//! ```
//!
//! Both keys are zero-padded so byte order equals numeric order: a range query on `due_key`
//! is a range of due times, and a bucket's minute sorts with the calendar across day and year
//! boundaries. A task whose due time is already past goes into the *current* minute's bucket,
//! never into one the poller has already passed and left behind its watermark.

use crate::task::TaskId;

/// Milliseconds in one bucket.
pub const MINUTE_MS: i64 = 60_000;

/// Width of the shard number in a bucket key; allows up to 99,999 shards.
pub const MAX_SHARDS: u32 = 99_999;

/// The shard of a task: a stable hash of its id, never std's randomized hasher.
pub fn shard_of(task_id: &str, shard_count: u32) -> u32 {
    debug_assert!(shard_count > 0);
    (xxhash_rust::xxh3::xxh3_64(task_id.as_bytes()) % u64::from(shard_count.max(1))) as u32
}

/// The minute (since the epoch) containing `ms`.
pub fn minute_of(ms: i64) -> i64 {
    ms.div_euclid(MINUTE_MS)
}

/// The minute bucket a task waits in: its due minute, or the current one if that is later.
pub fn bucket_minute(due_ms: i64, now_ms: i64) -> i64 {
    minute_of(due_ms).max(minute_of(now_ms))
}

/// The partition key of the due index: `"{shard:05}#{minute:010}"`.
pub fn due_bucket(shard: u32, minute: i64) -> String {
    format!("{shard:05}#{minute:010}")
}

/// The sort key of the due index: `"{due_ms:013}#{task_id}"`.
pub fn due_key(due_ms: i64, task_id: &TaskId) -> String {
    format!("{due_ms:013}#{task_id}")
}

/// The smallest `due_key` greater than every key due at or before `now_ms`.
///
/// A poll asks for `due_key < due_key_upper(now_ms)`, i.e. every task with `due_ms <= now_ms`.
pub fn due_key_upper(now_ms: i64) -> String {
    format!("{:013}$", now_ms)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const Y2026: i64 = 1_767_225_600_000; // 2026-01-01T00:00:00Z

    #[test]
    fn shard_is_stable_and_spread() {
        // Fixed values: changing the hash would move every stored task to another shard.
        assert_eq!(shard_of("task-1", 16), shard_of("task-1", 16));
        let mut counts = [0u32; 16];
        for i in 0..16_000 {
            counts[shard_of(&format!("t{i}"), 16) as usize] += 1;
        }
        for c in counts {
            assert!((800..1200).contains(&c), "uneven shard spread: {counts:?}");
        }
    }

    #[test]
    fn past_due_tasks_go_to_the_current_minute() {
        let now = Y2026 + 10 * MINUTE_MS + 5;
        assert_eq!(bucket_minute(Y2026, now), minute_of(now));
        assert_eq!(bucket_minute(now + MINUTE_MS, now), minute_of(now) + 1);
    }

    #[test]
    fn upper_bound_includes_now_and_excludes_later() {
        let id = "z".repeat(40);
        assert!(due_key(Y2026, &id) < due_key_upper(Y2026));
        assert!(due_key(Y2026 + 1, "") > due_key_upper(Y2026));
    }

    proptest! {
        #[test]
        fn key_order_is_time_order(
            a in 0i64..4_102_444_800_000, // up to 2100
            b in 0i64..4_102_444_800_000,
            ida in "[A-Za-z0-9_-]{1,20}",
            idb in "[A-Za-z0-9_-]{1,20}",
        ) {
            if a < b {
                prop_assert!(due_key(a, &ida) < due_key(b, &idb));
                prop_assert!(due_bucket(3, minute_of(a)) <= due_bucket(3, minute_of(b)));
            }
        }

        #[test]
        fn key_order_across_minute_day_and_year_boundaries(
            boundary in prop::sample::select(vec![
                Y2026,                      // new year
                Y2026 + 86_400_000,         // next day
                Y2026 + 59_999,             // inside a minute
                Y2026 + 60_000,             // next minute
                253_402_300_799_000,        // 9999-12-31T23:59:59Z
            ]),
            before in 1i64..120_000,
            after in 0i64..120_000,
        ) {
            let (a, b) = (boundary - before, boundary + after);
            prop_assert!(due_key(a, "x") < due_key(b, "x"));
            prop_assert!(due_bucket(7, minute_of(a)) <= due_bucket(7, minute_of(b)));
            prop_assert_eq!(due_bucket(7, minute_of(a)).len(), due_bucket(7, minute_of(b)).len());
        }
    }
}
