//! The contract's tunables as one value, [`Rules`], handed whole to the code
//! that applies them.
//!
//! Configuration builds it once at start-up (and checks every range there);
//! the record flow, the pin query and the storage scripts only read it. One
//! value means a new rule is added in one place and reaches every user of
//! the rules without a new constructor argument anywhere.

use std::time::Duration;

use super::admission::Budgets;
use super::memory_guard::MemoryLimit;
use super::pin::ScoreRatio;
use super::rollout::Rollout;

/// Every rule of the contract that an operator can tune.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rules {
    /// Sliding TTL of every customer hash, re-armed on each write.
    pub key_ttl: Duration,
    /// The most combos one customer's hash keeps; the cap prunes the rest.
    pub max_combos_per_customer: u32,
    /// The admission window: a merchant admits at most its budget of new
    /// customers per window.
    pub admission_window: Duration,
    /// The admission budgets: a default and per-merchant overrides.
    pub budgets: Budgets,
    /// No new customer is admitted on a Redis node whose `used_memory` is at
    /// or above this: the bound on every merchant together.
    pub admission_memory_limit: MemoryLimit,
    /// Counts below this never pin (at least 1).
    pub min_pin_count: i64,
    /// The health veto's default bar, as a share of the top live score;
    /// a GetPin may override it.
    pub min_score_ratio: ScoreRatio,
    /// GetPin's mode and holdout per merchant, and the holdout's salt
    /// (contract v1.2 §4).
    pub rollout: Rollout,
}

impl Rules {
    /// The key TTL in whole seconds, as Redis takes it.
    pub fn key_ttl_secs(&self) -> u64 {
        self.key_ttl.as_secs()
    }

    /// The admission window in milliseconds, as the admission maths takes it.
    pub fn admission_window_ms(&self) -> i64 {
        i64::try_from(self.admission_window.as_millis()).unwrap_or(i64::MAX)
    }
}
