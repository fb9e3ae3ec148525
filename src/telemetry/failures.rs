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
use std::time::Duration;

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
    unreported: Mutex<HashMap<&'static str, u64>>,
}

impl FailureLog {
    pub fn new() -> Self {
        Self::default()
    }

    /// Notes one failure of `kind` and says whether to log it in full.
    /// Called only for failed calls, never on the path of a good one.
    pub fn failed(&self, kind: &'static str) -> Verdict {
        let mut unreported = self.lock();
        match unreported.get_mut(kind) {
            Some(count) => {
                *count += 1;
                Verdict::Counted
            }
            None => {
                unreported.insert(kind, 0);
                Verdict::LogInFull
            }
        }
    }

    /// The kinds with failures not yet reported, and how many; resets them.
    /// A kind with none since the last call is forgotten.
    pub fn take_summary(&self) -> Vec<(&'static str, u64)> {
        let mut unreported = self.lock();
        unreported.retain(|_, count| *count > 0);
        let mut summary: Vec<_> = unreported
            .iter_mut()
            .map(|(kind, count)| (*kind, std::mem::take(count)))
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

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<&'static str, u64>> {
        // A panic while holding this lock cannot leave the counts wrong in
        // a way that matters; keep logging.
        self.unreported
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Writes the summary every [`SUMMARY_INTERVAL`] until `stop` resolves, and
/// once more then, so that the last second of an outage is not lost.
pub async fn summarise(
    log: std::sync::Arc<FailureLog>,
    stop: impl std::future::Future<Output = ()>,
) {
    let mut tick = tokio::time::interval(SUMMARY_INTERVAL);
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
    fn an_outage_is_one_full_line_then_counts() {
        let log = FailureLog::new();
        assert_eq!(log.failed("no_connection"), Verdict::LogInFull);
        for _ in 0..999 {
            assert_eq!(log.failed("no_connection"), Verdict::Counted);
        }
        assert_eq!(log.failed("timeout"), Verdict::LogInFull);
        assert_eq!(log.failed("timeout"), Verdict::Counted);
        assert_eq!(
            log.take_summary(),
            vec![("no_connection", 999), ("timeout", 1)]
        );
        // The outage goes on: still counted, not logged in full.
        assert_eq!(log.failed("no_connection"), Verdict::Counted);
        assert_eq!(log.take_summary(), vec![("no_connection", 1)]);
    }

    #[test]
    fn a_kind_quiet_for_an_interval_is_logged_in_full_again() {
        let log = FailureLog::new();
        assert_eq!(log.failed("refused"), Verdict::LogInFull);
        // Nothing more: no summary line, and the kind is forgotten.
        assert_eq!(log.take_summary(), vec![]);
        assert_eq!(log.failed("refused"), Verdict::LogInFull);
        assert_eq!(log.failed("refused"), Verdict::Counted);
        assert_eq!(log.take_summary(), vec![("refused", 1)]);
        assert_eq!(log.take_summary(), vec![]);
        assert_eq!(log.failed("refused"), Verdict::LogInFull);
    }
}
