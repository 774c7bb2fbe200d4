//! The overview's chart, drawn on the server as SVG: tasks per minute over the past hour
//! (what fired) and the next (what is due).
//!
//! One bar per minute, 120 in all, with "now" between them. The past comes from the
//! process's own record of firing ([`punctual_api::metrics::Activity::minutes`]); the future
//! from the due index's backlog ([`punctual_api::service::stats`]), so the right half is what
//! the pollers will find, whichever process fires it. Each bar has a `<title>`, so hovering
//! (or a screen reader) gives its minute and count. No script, no library: a few hundred
//! bytes of markup the browser draws.

use std::fmt::Write as _;

/// One bar: a minute (epoch minutes) and its count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bar {
    /// Epoch minutes.
    pub minute: i64,
    /// Tasks in it.
    pub count: u64,
}

const W: f64 = 960.0;
const H: f64 = 200.0;
const LEFT: f64 = 44.0;
const RIGHT: f64 = 8.0;
const TOP: f64 = 12.0;
const BOTTOM: f64 = 26.0;

/// The smallest "round" number (1, 2, 5 × 10^k) at least `v`, for the y axis.
fn nice_ceiling(v: u64) -> u64 {
    let mut step = 1u64;
    loop {
        for m in [1, 2, 5] {
            if step.saturating_mul(m) >= v {
                return step.saturating_mul(m);
            }
        }
        step = step.saturating_mul(10);
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn hhmm(minute: i64) -> String {
    chrono::DateTime::from_timestamp(minute.saturating_mul(60), 0)
        .map(|t| t.format("%H:%M").to_string())
        .unwrap_or_default()
}

/// The chart as an `<svg>` element: `past` (fired, oldest first, ending with the current
/// minute) and `future` (due, from the current minute on). `now_minute` places the "now" line.
pub fn due_per_minute(past: &[Bar], future: &[Bar], now_minute: i64) -> String {
    let first = now_minute - 59;
    let slots = 120.0;
    let plot_w = W - LEFT - RIGHT;
    let plot_h = H - TOP - BOTTOM;
    let bw = plot_w / slots;
    let in_window = |b: &&Bar| (first..first + 120).contains(&b.minute);
    let max = past
        .iter()
        .chain(future)
        .filter(in_window)
        .map(|b| b.count)
        .max()
        .unwrap_or(0);
    let ymax = nice_ceiling(max.max(6));
    let total_past: u64 = past.iter().filter(in_window).map(|b| b.count).sum();
    let total_future: u64 = future.iter().filter(in_window).map(|b| b.count).sum();
    let mut s = String::with_capacity(16 * 1024);
    let _ = write!(
        s,
        r#"<svg class="chart" viewBox="0 0 {W} {H}" role="img" aria-labelledby="chart-title chart-desc" xmlns="http://www.w3.org/2000/svg">"#
    );
    let _ = write!(
        s,
        r#"<title id="chart-title">Tasks per minute, past hour and next hour</title><desc id="chart-desc">{total_past} fired in the past hour; {total_future} due in the next hour; the busiest minute has {max}.</desc>"#
    );
    // Grid lines and y labels at 0, half and the top.
    for frac in [0.0, 0.5, 1.0] {
        let y = TOP + plot_h * (1.0 - frac);
        let label = (ymax as f64 * frac).round() as u64;
        let _ = write!(
            s,
            r#"<line class="grid" x1="{LEFT}" x2="{x2}" y1="{y:.1}" y2="{y:.1}"/><text class="ylab" x="{lx}" y="{ty:.1}" text-anchor="end">{label}</text>"#,
            x2 = W - RIGHT,
            lx = LEFT - 6.0,
            ty = y + 4.0,
        );
    }
    let mut bar = |b: &Bar, class: &str, verb: &str| {
        let i = (b.minute - first) as f64;
        if !(0.0..slots).contains(&i) || b.count == 0 {
            return;
        }
        let h = (b.count as f64 / ymax as f64 * plot_h).max(1.5);
        let x = LEFT + i * bw + 0.75;
        let y = TOP + plot_h - h;
        let _ = write!(
            s,
            r#"<rect class="{class}" x="{x:.1}" y="{y:.1}" width="{w:.1}" height="{h:.1}"><title>{t} UTC: {c} {verb}</title></rect>"#,
            w = bw - 1.5,
            t = hhmm(b.minute),
            c = b.count,
        );
    };
    for b in past {
        bar(b, "past", "fired");
    }
    for b in future {
        bar(b, "future", "due");
    }
    // X labels every 15 minutes, and the "now" line between the two hours.
    for k in (0..=120).step_by(15) {
        let x = LEFT + k as f64 * bw;
        let minute = first + k;
        let label = if k == 60 {
            "now".to_owned()
        } else {
            hhmm(minute)
        };
        let anchor = match k {
            0 => "start",
            120 => "end",
            _ => "middle",
        };
        let _ = write!(
            s,
            r#"<text class="xlab" x="{x:.1}" y="{y}" text-anchor="{anchor}">{label}</text>"#,
            y = H - 8.0,
            label = escape(&label),
        );
    }
    let nx = LEFT + 60.0 * bw;
    let _ = write!(
        s,
        r#"<line class="now" x1="{nx:.1}" x2="{nx:.1}" y1="{TOP}" y2="{y2}"/>"#,
        y2 = TOP + plot_h
    );
    s.push_str("</svg>");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_fall_on_their_minute_and_scale_to_the_busiest() {
        let now = 29_453_760; // 2026-01-01T00:00Z in minutes
        let past = [Bar {
            minute: now - 1,
            count: 30,
        }];
        let future = [
            Bar {
                minute: now + 10,
                count: 45,
            },
            Bar {
                minute: now + 500,
                count: 9_999,
            },
        ];
        let svg = due_per_minute(&past, &future, now);
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>"));
        assert_eq!(
            svg.matches("<rect").count(),
            2,
            "the bar outside the window is left out"
        );
        assert!(svg.contains("23:59 UTC: 30 fired"));
        assert!(svg.contains("00:10 UTC: 45 due"));
        assert!(svg.contains(">50</text>"), "y axis rounds 45 up to 50");
        assert!(svg.contains(">now</text>"));
        assert_eq!(nice_ceiling(0), 1);
        assert_eq!(nice_ceiling(101), 200);
    }
}
