//! How the console writes times and numbers: UTC always, with a relative hint.
//!
//! Operators compare times across machines and logs, so every absolute time is UTC and says
//! so; the hint ("in 3 min", "2 h ago") answers the question actually asked at a glance.

use chrono::{DateTime, NaiveDateTime, Utc};

/// `2026-01-31 12:00:05` (UTC, seconds).
pub fn utc(ms: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%d %H:%M:%S").to_string())
        .unwrap_or_else(|| ms.to_string())
}

/// `2026-01-31T12:00:05.123Z`, for `title` attributes and copy-paste into the API.
pub fn rfc3339(ms: i64) -> String {
    punctual_core::validate::format_rfc3339(ms)
}

/// The value of a `datetime-local` input for `ms` (UTC, minute precision).
pub fn datetime_local(ms: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%dT%H:%M").to_string())
        .unwrap_or_default()
}

/// Epoch milliseconds of a `datetime-local` value, read as UTC (`2026-01-31T12:00`, seconds
/// optional).
pub fn parse_datetime_local(s: &str) -> Option<i64> {
    let s = s.trim();
    [
        "%Y-%m-%dT%H:%M",
        "%Y-%m-%dT%H:%M:%S",
        "%Y-%m-%d %H:%M",
        "%Y-%m-%d %H:%M:%S",
    ]
    .iter()
    .find_map(|f| NaiveDateTime::parse_from_str(s, f).ok())
    .map(|t| t.and_utc().timestamp_millis())
}

/// "in 3 min", "12 s ago", "now": `ms` relative to `now_ms`.
pub fn relative(ms: i64, now_ms: i64) -> String {
    let d = ms.saturating_sub(now_ms);
    let a = d.unsigned_abs() / 1_000;
    if a < 1 {
        return "now".into();
    }
    let span = if a < 90 {
        format!("{a} s")
    } else if a < 90 * 60 {
        format!("{} min", (a + 30) / 60)
    } else if a < 36 * 3_600 {
        format!("{} h", (a + 1_800) / 3_600)
    } else {
        format!("{} d", (a + 43_200) / 86_400)
    };
    if d > 0 {
        format!("in {span}")
    } else {
        format!("{span} ago")
    }
}

/// A count with thin grouping: `12 345 678`.
pub fn count(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::with_capacity(s.len() + s.len() / 3);
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push('\u{2009}');
        }
        out.push(c);
    }
    out
}

/// A duration in milliseconds, short: `85 ms`, `1.2 s`, `3 min`.
pub fn millis(ms: f64) -> String {
    if ms < 1_000.0 {
        format!("{ms:.0} ms")
    } else if ms < 60_000.0 {
        format!("{:.1} s", ms / 1_000.0)
    } else {
        format!("{:.0} min", ms / 60_000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_utc_with_a_relative_hint() {
        let t = 1_767_225_600_000; // 2026-01-01T00:00:00Z
        assert_eq!(utc(t), "2026-01-01 00:00:00");
        assert_eq!(datetime_local(t + 90_000), "2026-01-01T00:01");
        assert_eq!(parse_datetime_local("2026-01-01T00:01"), Some(t + 60_000));
        assert_eq!(
            parse_datetime_local("2026-01-01T00:01:30"),
            Some(t + 90_000)
        );
        assert_eq!(parse_datetime_local("tomorrow"), None);
        assert_eq!(relative(t + 180_000, t), "in 3 min");
        assert_eq!(relative(t - 12_000, t), "12 s ago");
        assert_eq!(relative(t + 400, t), "now");
        assert_eq!(relative(t - 3 * 3_600_000, t), "3 h ago");
        assert_eq!(relative(t + 5 * 86_400_000, t), "in 5 d");
        assert_eq!(count(12_345_678), "12\u{2009}345\u{2009}678");
        assert_eq!(count(999), "999");
        assert_eq!(millis(85.0), "85 ms");
        assert_eq!(millis(1_240.0), "1.2 s");
    }
}
