//! Failed calls, logged so that an outage reads as a few lines, not one per
//! call.
//!
//! During a Redis outage every call fails the same way; a line per call
//! would bury the log (thousands per second), cost the service CPU exactly
//! when it is short of it, and tell the on-call engineer nothing the first
//! line did not. So the first failure of a kind is logged in full, with its
//! request's ids to start the search from, and after it at most one line per
//! second per kind says how many more there were. A kind that stays quiet
//! for a whole second is forgotten, so its next failure is logged in full
//! again.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

/// A background task's repeated failure (a breaker or experiment write),
/// whose every occurrence a counter on `/metrics` already counts, logged at
/// most once per period: the first one, then one a period while it lasts.
#[derive(Debug)]
pub struct LogThrottle {
    every_ms: i64,
    /// When a line was last let through (Unix ms; 0: never).
    last_ms: AtomicI64,
}

impl LogThrottle {
    pub const fn new(every: Duration) -> Self {
        Self {
            every_ms: every.as_millis() as i64,
            last_ms: AtomicI64::new(0),
        }
    }

    /// Whether this failure gets its line; of racing callers, one does.
    pub fn due(&self) -> bool {
        let now = crate::process::unix_millis();
        let last = self.last_ms.load(Ordering::Relaxed);
        now.saturating_sub(last) >= self.every_ms
            && self
                .last_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }
}

/// How often the counts of repeated failures are written.
pub const SUMMARY_INTERVAL: Duration = Duration::from_secs(1);

/// What to do with one failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The first of its kind lately: log it, with its ids.
    LogInFull,
    /// Counted; the next summary line reports it.
    Counted,
}

/// Failures by kind since the last summary. A kind is present from its
/// first failure until a summary interval passes without one.
#[derive(Debug, Default)]
pub struct FailureLog {
    kinds: Mutex<HashMap<&'static str, Kind>>,
}

/// One kind's failures not yet reported, and when it last failed.
#[derive(Debug, Clone, Copy)]
struct Kind {
    unreported: u64,
    last_failed: Instant,
}

impl FailureLog {
    pub fn new() -> Self {
        Self::default()
    }

    /// Notes one failure of `kind` and says whether to log it in full.
    /// Called only for failed calls, never on the path of a good one.
    pub fn failed(&self, kind: &'static str) -> Verdict {
        self.failed_at(kind, Instant::now())
    }

    fn failed_at(&self, kind: &'static str, now: Instant) -> Verdict {
        let mut kinds = self.lock();
        match kinds.get_mut(kind) {
            Some(seen) => {
                seen.unreported += 1;
                seen.last_failed = now;
                Verdict::Counted
            }
            None => {
                let first = Kind {
                    unreported: 0,
                    last_failed: now,
                };
                kinds.insert(kind, first);
                Verdict::LogInFull
            }
        }
    }

    /// The kinds with failures not yet reported, and how many; resets them.
    /// A kind without a failure for a whole interval is forgotten, so that
    /// its next failure is logged in full.
    pub fn take_summary(&self) -> Vec<(&'static str, u64)> {
        self.take_summary_at(Instant::now())
    }

    fn take_summary_at(&self, now: Instant) -> Vec<(&'static str, u64)> {
        let mut kinds = self.lock();
        kinds.retain(|_, seen| seen.unreported > 0 || !quiet_since(seen.last_failed, now));
        let mut summary: Vec<_> = kinds
            .iter_mut()
            .filter(|(_, seen)| seen.unreported > 0)
            .map(|(kind, seen)| (*kind, std::mem::take(&mut seen.unreported)))
            .collect();
        summary.sort_unstable();
        summary
    }

    /// Writes one line per kind with failures not yet reported.
    pub fn write_summary(&self) {
        for (kind, count) in self.take_summary() {
            tracing::warn!(
                kind,
                count,
                "{count} more calls failed with {kind} in the last {}s; the first was logged above",
                SUMMARY_INTERVAL.as_secs()
            );
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<&'static str, Kind>> {
        // A panic while holding this lock cannot leave the counts wrong in
        // a way that matters; keep logging.
        self.kinds
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Whether a kind that last failed at `last_failed` has been quiet for a
/// whole interval at `now`.
fn quiet_since(last_failed: Instant, now: Instant) -> bool {
    now.saturating_duration_since(last_failed) >= SUMMARY_INTERVAL
}

/// Writes the summary every [`SUMMARY_INTERVAL`] until `stop` resolves, and
/// once more then, so that the last second of an outage is not lost.
pub async fn summarise(
    log: std::sync::Arc<FailureLog>,
    stop: impl std::future::Future<Output = ()>,
) {
    // The first summary a whole interval after the start, not at once.
    let mut tick = tokio::time::interval_at(
        tokio::time::Instant::now() + SUMMARY_INTERVAL,
        SUMMARY_INTERVAL,
    );
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = tick.tick() => log.write_summary(),
            () = &mut stop => break,
        }
    }
    log.write_summary();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_throttle_lets_the_first_line_through_then_one_a_period() {
        let throttle = LogThrottle::new(Duration::from_secs(30));
        assert!(throttle.due());
        assert!(
            !throttle.due(),
            "the second failure within the period is only counted"
        );
        let every_time = LogThrottle::new(Duration::ZERO);
        assert!(every_time.due() && every_time.due());
    }

    #[test]
    fn an_outage_is_one_full_line_then_counts() {
        let log = FailureLog::new();
        let t0 = Instant::now();
        assert_eq!(log.failed_at("no_connection", t0), Verdict::LogInFull);
        for _ in 0..999 {
            assert_eq!(log.failed_at("no_connection", t0), Verdict::Counted);
        }
        assert_eq!(log.failed_at("timeout", t0), Verdict::LogInFull);
        assert_eq!(log.failed_at("timeout", t0), Verdict::Counted);
        let t1 = t0 + SUMMARY_INTERVAL;
        assert_eq!(
            log.take_summary_at(t1),
            vec![("no_connection", 999), ("timeout", 1)]
        );
        // The outage goes on: still counted, not logged in full.
        assert_eq!(log.failed_at("no_connection", t1), Verdict::Counted);
        assert_eq!(
            log.take_summary_at(t1 + SUMMARY_INTERVAL),
            vec![("no_connection", 1)]
        );
    }

    #[test]
    fn a_summary_just_after_the_first_failure_does_not_forget_it() {
        let log = FailureLog::new();
        let t0 = Instant::now();
        assert_eq!(log.failed_at("no_connection", t0), Verdict::LogInFull);
        // A tick a moment later: nothing to report, and the kind is kept.
        assert_eq!(log.take_summary_at(t0 + Duration::from_millis(1)), vec![]);
        assert_eq!(
            log.failed_at("no_connection", t0 + Duration::from_millis(2)),
            Verdict::Counted
        );
    }

    #[test]
    fn a_kind_quiet_for_an_interval_is_logged_in_full_again() {
        let log = FailureLog::new();
        let t0 = Instant::now();
        assert_eq!(log.failed_at("refused", t0), Verdict::LogInFull);
        // Nothing more for a whole interval: no line, and the kind is forgotten.
        let t1 = t0 + SUMMARY_INTERVAL;
        assert_eq!(log.take_summary_at(t1), vec![]);
        assert_eq!(log.failed_at("refused", t1), Verdict::LogInFull);
        assert_eq!(log.failed_at("refused", t1), Verdict::Counted);
        let t2 = t1 + SUMMARY_INTERVAL;
        assert_eq!(log.take_summary_at(t2), vec![("refused", 1)]);
        assert_eq!(log.take_summary_at(t2 + SUMMARY_INTERVAL), vec![]);
        assert_eq!(
            log.failed_at("refused", t2 + SUMMARY_INTERVAL),
            Verdict::LogInFull
        );
    }
}
