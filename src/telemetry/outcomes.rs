//! How each GetPin and RecordOutcome call ended, as the outcome label of
//! `sticky_routing_pins_total` and `sticky_routing_writes_total` and the
//! call span's result. An answered GetPin's outcome is its answer's reason
//! (contract v1.2 §4: GetPins by reason), `vetoed` being ALL_VETOED. Enums with an `ALL` list, so the handlers, the
//! metrics and the dashboard's checks share one closed set of labels.

/// Why a call got no answer; both RPCs count it the same way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallFailure {
    /// The request broke a rule: `INVALID_ARGUMENT`.
    Invalid,
    /// Redis failed or the deadline passed.
    Error,
    /// An admin RPC from a client not on the admin list.
    Denied,
}

impl CallFailure {
    fn label(self) -> &'static str {
        match self {
            Self::Invalid => "invalid",
            Self::Error => "error",
            Self::Denied => "denied",
        }
    }
}

/// How a GetPin call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PinOutcome {
    /// A connector was pinned.
    Pinned,
    /// No connector qualifies: the customer has no habit for the combo.
    NoHabit,
    /// There were candidates, and the vetoes left none to pin.
    Vetoed,
    /// The rules picked a pin, but the customer is in the merchant's
    /// holdout (contract v1.2 §4): not pinned.
    Holdout,
    /// The rules picked a pin, but the merchant is in shadow mode: not pinned.
    Shadow,
    /// The merchant's mode is off: nothing read, nothing pinned.
    Disabled,
    Failed(CallFailure),
}

impl PinOutcome {
    /// Every outcome, so that a check can know the closed set.
    pub const ALL: [Self; 9] = [
        Self::Pinned,
        Self::NoHabit,
        Self::Vetoed,
        Self::Holdout,
        Self::Shadow,
        Self::Disabled,
        Self::Failed(CallFailure::Invalid),
        Self::Failed(CallFailure::Error),
        Self::Failed(CallFailure::Denied),
    ];

    /// The metric label and span result.
    pub fn label(self) -> &'static str {
        match self {
            Self::Pinned => "pinned",
            Self::NoHabit => "no_habit",
            Self::Vetoed => "vetoed",
            Self::Holdout => "holdout",
            Self::Shadow => "shadow",
            Self::Disabled => "disabled",
            Self::Failed(failure) => failure.label(),
        }
    }
}

/// How a RecordOutcome call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteOutcome {
    /// The outcome was counted.
    Applied,
    /// A failure for a customer with no habit: nothing to count against.
    NoHabit,
    /// A new customer that admission refused.
    NotAdmitted,
    /// An attempt id already recorded: answered as before, counted once.
    Duplicate,
    Failed(CallFailure),
}

impl WriteOutcome {
    /// Every outcome, so that a check can know the closed set.
    pub const ALL: [Self; 7] = [
        Self::Applied,
        Self::NoHabit,
        Self::NotAdmitted,
        Self::Duplicate,
        Self::Failed(CallFailure::Invalid),
        Self::Failed(CallFailure::Error),
        Self::Failed(CallFailure::Denied),
    ];

    /// The metric label and span result.
    pub fn label(self) -> &'static str {
        match self {
            Self::Applied => "applied",
            Self::NoHabit => "no_habit",
            Self::NotAdmitted => "not_admitted",
            Self::Duplicate => "duplicate",
            Self::Failed(failure) => failure.label(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_distinct_within_each_metric() {
        let pins: std::collections::HashSet<_> = PinOutcome::ALL.map(PinOutcome::label).into();
        assert_eq!(pins.len(), PinOutcome::ALL.len());
        let writes: std::collections::HashSet<_> =
            WriteOutcome::ALL.map(WriteOutcome::label).into();
        assert_eq!(writes.len(), WriteOutcome::ALL.len());
    }
}
