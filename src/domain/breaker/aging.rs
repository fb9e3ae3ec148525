//! When a CLOSED breaker's window will trip as its old calls age out.
//!
//! The window slides: a breaker whose window does not trip now may trip
//! later with no new call, once successes older than its failures stop
//! counting (WINDOW 2 s, MIN_CALLS 4: five successes, then four failures a
//! second later, trip when the successes leave the window). Nothing calls
//! that breaker again to make the engine look, so the engine asks this
//! when it flushes it, and looks again then.

use super::{BreakerSettings, Counts, trips};

/// The first instant after `now_ms` at which the window made of `ring`'s
/// buckets (bucket, counts), as it ages with no new call, trips; `None`
/// if it never does (or trips already: the caller decides that now).
pub fn trips_at(ring: &[(i64, Counts)], now_ms: i64, s: &BreakerSettings) -> Option<i64> {
    let mut ring: Vec<(i64, Counts)> = ring
        .iter()
        .copied()
        .filter(|(bucket, _)| s.counts_in_window(*bucket, now_ms))
        .collect();
    ring.sort_by_key(|(bucket, _)| *bucket);
    let mut left = Counts::default();
    for (_, counts) in &ring {
        left += *counts;
    }
    // Only failures trip a breaker: the window cannot trip once it holds
    // none, and while the oldest bucket still counts, the window is what it
    // is now.
    for (bucket, counts) in ring {
        left.calls -= counts.calls.min(left.calls);
        left.failures -= counts.failures.min(left.failures);
        if left.failures == 0 {
            return None;
        }
        if trips(left, s) {
            // The first instant the bucket no longer counts.
            let ends = bucket.saturating_add(1).saturating_mul(s.bucket_ms());
            return Some(ends.saturating_add(s.window_ms()));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn settings() -> BreakerSettings {
        BreakerSettings {
            window: Duration::from_secs(2),
            min_calls: 4,
            ..BreakerSettings::DEFAULT
        }
    }

    fn counts(calls: u64, failures: u64) -> Counts {
        Counts { calls, failures }
    }

    /// Issue 41's case: five successes, four failures a second later.
    #[test]
    fn a_window_trips_when_the_successes_before_its_failures_age_out() {
        let s = settings();
        let t0 = 1_000_000;
        let ring = [
            (s.bucket_of(t0), counts(5, 0)),
            (s.bucket_of(t0 + 1_000), counts(4, 4)),
        ];
        let now = t0 + 1_000;
        let mut window = Counts::default();
        for (_, c) in ring {
            window += c;
        }
        assert!(!trips(window, &s), "not yet: 4 of 9");
        let at = trips_at(&ring, now, &s).unwrap();
        // The successes' bucket stops counting then, and not before.
        assert!(s.counts_in_window(ring[0].0, at - 1));
        assert!(!s.counts_in_window(ring[0].0, at));
        assert!(at - t0 <= s.window_ms() + s.bucket_ms());
    }

    #[test]
    fn a_window_that_ages_into_too_few_calls_or_no_failures_never_trips() {
        let s = settings();
        let t0 = 1_000_000;
        // Failures first, then successes: aging only lowers the ratio.
        let ring = [
            (s.bucket_of(t0), counts(3, 3)),
            (s.bucket_of(t0 + 1_000), counts(6, 0)),
        ];
        assert_eq!(trips_at(&ring, t0 + 1_000, &s), None);
        // Too few calls once the old ones go.
        let ring = [
            (s.bucket_of(t0), counts(10, 0)),
            (s.bucket_of(t0 + 1_000), counts(3, 3)),
        ];
        assert_eq!(trips_at(&ring, t0 + 1_000, &s), None);
        assert_eq!(trips_at(&[], t0, &s), None);
    }
}
