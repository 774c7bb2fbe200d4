//! Metric names, and the short memory of recent firing that `GET /v1/stats` reads.
//!
//! Counters and histograms go through the `metrics` facade: whoever installs a recorder (the
//! binary installs a Prometheus one and hands its handle to [`ApiState`](crate::ApiState))
//! gets them, and without one they cost nothing. The names are constants here so the binary's
//! event wiring, the API and the tests agree on them.
//!
//! Prometheus answers "how many since start"; an operator's first question is "what is
//! happening now". [`Activity`] keeps 60 one-second slots of fired/succeeded/retried/dead
//! counts and lag, a fixed 60 × 48 bytes, so `GET /v1/stats` can say "fired in the last
//! minute, at what lag" without a time-series database.

use std::sync::Mutex;

use crate::view::ActivityView;

/// Counter: tasks created through the API.
pub const TASKS_CREATED: &str = "punctual_tasks_created_total";
/// Counter: claims that started a run.
pub const TASKS_FIRED: &str = "punctual_tasks_fired_total";
/// Counter: runs that succeeded.
pub const TASKS_SUCCEEDED: &str = "punctual_tasks_succeeded_total";
/// Counter: runs that failed and will be retried.
pub const TASKS_RETRIED: &str = "punctual_tasks_retried_total";
/// Counter: tasks that ended `DEAD`.
pub const TASKS_DEAD: &str = "punctual_tasks_dead_total";
/// Counter: messages the poller sent to the ready queue.
pub const TASKS_DISPATCHED: &str = "punctual_tasks_dispatched_total";
/// Histogram: claim time minus due time, seconds.
pub const FIRE_LAG: &str = "punctual_fire_lag_seconds";
/// Histogram: how long a run took, seconds.
pub const RUN_DURATION: &str = "punctual_run_duration_seconds";
/// Gauge: shards this process's pollers hold.
pub const SHARDS_OWNED: &str = "punctual_shards_owned";
/// Gauge: messages in the ready queue, by `state` (`ready`, `in_flight`, `dead`).
pub const QUEUE_DEPTH: &str = "punctual_queue_depth";

/// Bucket bounds (seconds) for the lag and run-duration histograms: 1 ms to 10 min.
pub const SECONDS_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 600.0,
];

/// Registers help texts for every metric with the installed recorder.
pub fn describe() {
    metrics::describe_counter!(TASKS_CREATED, "Tasks created through the API.");
    metrics::describe_counter!(TASKS_FIRED, "Claims that started a run.");
    metrics::describe_counter!(TASKS_SUCCEEDED, "Runs that succeeded.");
    metrics::describe_counter!(TASKS_RETRIED, "Runs that failed and will be retried.");
    metrics::describe_counter!(TASKS_DEAD, "Tasks that ended DEAD.");
    metrics::describe_counter!(TASKS_DISPATCHED, "Messages sent to the ready queue.");
    metrics::describe_histogram!(
        FIRE_LAG,
        metrics::Unit::Seconds,
        "Claim time minus due time."
    );
    metrics::describe_histogram!(RUN_DURATION, metrics::Unit::Seconds, "Run duration.");
    metrics::describe_gauge!(SHARDS_OWNED, "Shards held by this process's pollers.");
    metrics::describe_gauge!(QUEUE_DEPTH, "Messages in the ready queue and DLQ.");
}

const SLOTS: usize = 60;

#[derive(Debug, Clone, Copy, Default)]
struct Slot {
    second: i64,
    fired: u64,
    lag_sum_ms: i64,
    lag_max_ms: i64,
    succeeded: u64,
    retried: u64,
    dead: u64,
}

/// What happened, for [`Activity::record`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Happened {
    /// A run started `lag_ms` after its due time.
    Fired {
        /// Claim time minus due time.
        lag_ms: i64,
    },
    /// A run succeeded.
    Succeeded,
    /// A run failed and will be retried.
    Retried,
    /// A task ended `DEAD`.
    Dead,
}

/// The last minute of firing in one-second slots, and the last hour in one-minute slots
/// with a lag histogram. One lock over both: a fired task takes it once, on the worker's
/// completion path.
#[derive(Debug)]
pub struct Activity {
    slots: Mutex<Slots>,
}

#[derive(Debug)]
struct Slots {
    seconds: [Slot; SLOTS],
    minutes: Vec<MinuteSlot>,
}

impl Activity {
    fn lock(&self) -> std::sync::MutexGuard<'_, Slots> {
        // A panic elsewhere while holding the lock leaves counters, never a broken invariant.
        self.slots.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Default for Activity {
    fn default() -> Self {
        Self::new()
    }
}

impl Activity {
    /// An empty record.
    pub fn new() -> Self {
        Self {
            slots: Mutex::new(Slots {
                seconds: [Slot {
                    second: i64::MIN,
                    ..Slot::default()
                }; SLOTS],
                minutes: vec![MinuteSlot::EMPTY; MINUTES],
            }),
        }
    }

    /// Records one event at `now_ms`.
    pub fn record(&self, now_ms: i64, what: Happened) {
        let second = now_ms.div_euclid(1_000);
        let mut slots = self.lock();
        let slot = &mut slots.seconds[second.rem_euclid(SLOTS as i64) as usize];
        if slot.second != second {
            *slot = Slot {
                second,
                ..Slot::default()
            };
        }
        match what {
            Happened::Fired { lag_ms } => {
                slot.fired += 1;
                slot.lag_sum_ms = slot.lag_sum_ms.saturating_add(lag_ms);
                slot.lag_max_ms = slot.lag_max_ms.max(lag_ms);
            }
            Happened::Succeeded => slot.succeeded += 1,
            Happened::Retried => slot.retried += 1,
            Happened::Dead => slot.dead += 1,
        }
        if let Happened::Fired { lag_ms } = what {
            let minute = now_ms.div_euclid(60_000);
            let m = &mut slots.minutes[minute.rem_euclid(MINUTES as i64) as usize];
            if m.minute != minute {
                *m = MinuteSlot {
                    minute,
                    ..MinuteSlot::EMPTY
                };
            }
            m.fired += 1;
            m.lag[lag_bucket(lag_ms)] += 1;
        }
    }

    /// Tasks fired in each of the [`MINUTES`] minutes up to and including `now_ms`'s, oldest
    /// first.
    pub fn minutes(&self, now_ms: i64) -> Vec<MinuteActivity> {
        let now_minute = now_ms.div_euclid(60_000);
        let slots = self.lock();
        (now_minute - MINUTES as i64 + 1..=now_minute)
            .map(|minute| {
                let m = &slots.minutes[minute.rem_euclid(MINUTES as i64) as usize];
                MinuteActivity {
                    minute,
                    fired: if m.minute == minute { m.fired } else { 0 },
                }
            })
            .collect()
    }

    /// Firing over the last `minutes` minutes (at most [`MINUTES`]) up to `now_ms`: count,
    /// rate, and lag percentiles (to within a quarter of their value: the histogram has four
    /// buckets per power of two).
    pub fn recent(&self, now_ms: i64, minutes: u32) -> RecentFiring {
        let n = (minutes.clamp(1, MINUTES as u32)) as i64;
        let now_minute = now_ms.div_euclid(60_000);
        let slots = self.lock();
        let mut lag = [0u64; LAG_BUCKETS];
        let mut fired = 0u64;
        for s in slots
            .minutes
            .iter()
            .filter(|s| s.minute <= now_minute && s.minute > now_minute - n)
        {
            fired += s.fired;
            for (total, c) in lag.iter_mut().zip(s.lag.iter()) {
                *total += u64::from(*c);
            }
        }
        // The current minute is partly elapsed: the window is n - 1 whole minutes plus it.
        let window_s =
            (n - 1) as f64 * 60.0 + (now_ms.rem_euclid(60_000) as f64 / 1_000.0).max(1.0);
        RecentFiring {
            minutes: n as u32,
            fired,
            rate_per_s: fired as f64 / window_s,
            lag_p50_ms: lag_percentile(&lag, fired, 50.0),
            lag_p99_ms: lag_percentile(&lag, fired, 99.0),
        }
    }

    /// The 60 s before `now_ms`.
    pub fn snapshot(&self, now_ms: i64) -> ActivityView {
        let now_s = now_ms.div_euclid(1_000);
        let slots = self.lock();
        let mut v = ActivityView {
            fired_last_minute: 0,
            fire_rate_per_s: 0.0,
            lag_ms_mean: None,
            lag_ms_max: None,
            succeeded_last_minute: 0,
            retried_last_minute: 0,
            dead_last_minute: 0,
        };
        let mut lag_sum = 0i64;
        for s in slots
            .seconds
            .iter()
            .filter(|s| now_s.saturating_sub(s.second) < SLOTS as i64 && s.second <= now_s)
        {
            v.fired_last_minute += s.fired;
            v.succeeded_last_minute += s.succeeded;
            v.retried_last_minute += s.retried;
            v.dead_last_minute += s.dead;
            if s.fired > 0 {
                lag_sum = lag_sum.saturating_add(s.lag_sum_ms);
                v.lag_ms_max = Some(v.lag_ms_max.map_or(s.lag_max_ms, |m| m.max(s.lag_max_ms)));
            }
        }
        v.fire_rate_per_s = v.fired_last_minute as f64 / SLOTS as f64;
        if v.fired_last_minute > 0 {
            v.lag_ms_mean = Some(lag_sum as f64 / v.fired_last_minute as f64);
        }
        v
    }
}

/// One-minute slots kept by [`Activity`]: one hour.
pub const MINUTES: usize = 60;

/// Buckets of the per-minute lag histogram: four per power of two of milliseconds, up to
/// 2^31 ms (about 25 days); anything longer lands in the last.
const LAG_BUCKETS: usize = 128;

#[derive(Debug, Clone, Copy)]
struct MinuteSlot {
    minute: i64,
    fired: u64,
    lag: [u32; LAG_BUCKETS],
}

impl MinuteSlot {
    const EMPTY: MinuteSlot = MinuteSlot {
        minute: i64::MIN,
        fired: 0,
        lag: [0; LAG_BUCKETS],
    };
}

/// The bucket of a lag: 0 to 3 ms exactly, then four buckets per power of two.
fn lag_bucket(lag_ms: i64) -> usize {
    let v = lag_ms.max(0) as u64;
    if v < 4 {
        return v as usize;
    }
    let e = 63 - v.leading_zeros() as usize; // floor(log2 v) >= 2
    let sub = ((v >> (e - 2)) - 4) as usize; // 0..4
    (4 * e + sub).min(LAG_BUCKETS - 1)
}

/// The largest lag a bucket holds (its upper bound, exclusive, minus one).
fn lag_bucket_max(i: usize) -> i64 {
    if i < 4 {
        return i as i64;
    }
    let (e, sub) = (i / 4, (i % 4) as i64);
    ((5 + sub) << (e - 2)) - 1
}

/// The `p`-th percentile of a histogram of `total` lags, as its bucket's upper bound.
fn lag_percentile(lag: &[u64; LAG_BUCKETS], total: u64, p: f64) -> Option<i64> {
    if total == 0 {
        return None;
    }
    let rank = ((p / 100.0) * total as f64).ceil().max(1.0) as u64;
    let mut seen = 0;
    for (i, c) in lag.iter().enumerate() {
        seen += c;
        if seen >= rank {
            return Some(lag_bucket_max(i));
        }
    }
    Some(lag_bucket_max(LAG_BUCKETS - 1))
}

/// Tasks fired in one minute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MinuteActivity {
    /// The minute, epoch minutes (epoch milliseconds / 60,000).
    pub minute: i64,
    /// Runs started in it.
    pub fired: u64,
}

/// Firing over the last few minutes, from [`Activity::recent`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RecentFiring {
    /// The window, minutes (the current one included).
    pub minutes: u32,
    /// Runs started in it.
    pub fired: u64,
    /// Runs started per second over it.
    pub rate_per_s: f64,
    /// Median claim lag (claim time minus due time), milliseconds; `None` when nothing fired.
    pub lag_p50_ms: Option<i64>,
    /// 99th percentile claim lag, milliseconds.
    pub lag_p99_ms: Option<i64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn activity_forgets_after_a_minute() {
        let a = Activity::new();
        let t0 = 1_767_225_600_000;
        a.record(t0, Happened::Fired { lag_ms: 10 });
        a.record(t0 + 500, Happened::Fired { lag_ms: 30 });
        a.record(t0 + 30_000, Happened::Succeeded);
        a.record(t0 + 30_000, Happened::Dead);
        let s = a.snapshot(t0 + 30_000);
        assert_eq!(s.fired_last_minute, 2);
        assert_eq!(s.lag_ms_mean, Some(20.0));
        assert_eq!(s.lag_ms_max, Some(30));
        assert_eq!((s.succeeded_last_minute, s.dead_last_minute), (1, 1));
        let later = a.snapshot(t0 + 61_000);
        assert_eq!(later.fired_last_minute, 0);
        assert_eq!(later.lag_ms_max, None);
        assert_eq!(later.succeeded_last_minute, 1);
        // A slot reused a minute later starts over.
        a.record(t0 + 60_000, Happened::Fired { lag_ms: 5 });
        assert_eq!(a.snapshot(t0 + 60_000).lag_ms_max, Some(5));
    }

    #[test]
    fn the_last_hour_is_kept_by_minute_with_lag_percentiles() {
        let a = Activity::new();
        let t0 = 1_767_225_600_000; // a minute boundary
        for i in 0..100 {
            // 99 fast runs and one slow one, ten minutes ago.
            let lag = if i == 99 { 5_000 } else { 40 + i % 10 };
            a.record(t0 - 600_000 + i, Happened::Fired { lag_ms: lag });
        }
        a.record(t0 + 1_000, Happened::Fired { lag_ms: 7 });
        let m = a.minutes(t0 + 30_000);
        assert_eq!(m.len(), MINUTES);
        assert_eq!(m.last().unwrap().minute, t0 / 60_000);
        assert_eq!(m.last().unwrap().fired, 1);
        assert_eq!(m[MINUTES - 11].fired, 100);
        let r = a.recent(t0 + 30_000, 15);
        assert_eq!(r.fired, 101);
        let p50 = r.lag_p50_ms.unwrap();
        assert!((40..=60).contains(&p50), "p50 {p50}");
        let p99 = r.lag_p99_ms.unwrap();
        assert!(
            (40..=60).contains(&p99),
            "p99 {p99}: the one slow run is the 100th"
        );
        assert!(a.recent(t0 + 30_000, 5).lag_p50_ms.unwrap() <= 7);
        // An hour later it is all forgotten.
        assert_eq!(a.recent(t0 + 3_600_000, 60).fired, 0);
        assert!(a.minutes(t0 + 3_600_000).iter().all(|m| m.fired == 0));
        // Buckets hold their value within a quarter.
        for v in [0, 3, 4, 7, 8, 100, 1_000, 65_537, 10_000_000] {
            let max = lag_bucket_max(lag_bucket(v));
            assert!(
                max >= v && max as f64 <= v as f64 * 1.25 + 1.0,
                "{v} -> {max}"
            );
        }
    }
}
