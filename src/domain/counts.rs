//! Net counts: a success adds 1; a gateway failure takes 1 away, floored at
//! 0, and a count that reaches 0 is deleted (absent means 0). A failure never
//! creates a count.
//!
//! The failure rule runs inside Redis as `storage/scripts/record_failure.lua`;
//! `src/storage/scripts/tests.rs` holds that script equal to [`after_failure`].

use super::admission::AdmissionRefusal;
use super::text;

/// The outcome of one payment attempt, as the orchestrator reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Success,
    GatewayFailure,
}

impl Outcome {
    /// The outcome a bulk import row names: `success` or `gateway_failure`
    /// (case and surrounding ASCII blanks ignored, as for every field).
    pub fn from_word(word: &str) -> Option<Self> {
        let word = text::trim_blanks(word).ok()?;
        if word.eq_ignore_ascii_case("success") {
            Some(Self::Success)
        } else if word.eq_ignore_ascii_case("gateway_failure") {
            Some(Self::GatewayFailure)
        } else {
            None
        }
    }
}

/// What RecordOutcome did, as reported to the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Recorded {
    /// The count changed; `net_count` is the count after the call (0 once
    /// deleted) and `pruned` the fields the cap removed.
    Applied { net_count: i64, pruned: u32 },
    /// A failure for a combo with no count: nothing was written.
    IgnoredNoHabit,
    /// A success for a new customer who was refused admission, for the
    /// reason given: nothing was written.
    NotAdmitted(AdmissionRefusal),
    /// A repeat of an attempt already recorded for this customer: nothing was
    /// written; `net_count` is the named combo's current count (0 when absent).
    Duplicate { net_count: i64 },
}

/// What a gateway failure does to a stored count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureEffect {
    /// The count stays, one lower.
    Decremented(i64),
    /// The count reached 0 and the field goes away.
    Deleted,
}

impl FailureEffect {
    /// The count reported to the caller: 0 once deleted.
    pub fn net_count(self) -> i64 {
        match self {
            Self::Decremented(count) => count,
            Self::Deleted => 0,
        }
    }
}

/// A gateway failure against a present count.
pub fn after_failure(current: i64) -> FailureEffect {
    if current <= 1 {
        FailureEffect::Deleted
    } else {
        FailureEffect::Decremented(current - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn failure_decrements_then_deletes_at_zero() {
        assert_eq!(after_failure(3), FailureEffect::Decremented(2));
        assert_eq!(after_failure(1), FailureEffect::Deleted);
        assert_eq!(after_failure(1).net_count(), 0);
    }

    proptest! {
        #[test]
        fn failure_never_leaves_a_zero_or_negative_count(current in i64::MIN..i64::MAX) {
            match after_failure(current) {
                FailureEffect::Decremented(next) => {
                    prop_assert!(next >= 1);
                    prop_assert_eq!(next, current - 1);
                }
                FailureEffect::Deleted => prop_assert!(current <= 1),
            }
        }

        #[test]
        fn a_failure_undoes_a_success(current in 1i64..1_000_000) {
            prop_assert_eq!(after_failure(current + 1).net_count(), current);
        }
    }
}
