//! This instance's own changes to the view (its overrides and transitions)
//! that a poll in flight may not have seen.
//!
//! A poll reads Redis, then replaces the view whole. An override set while
//! that read was on its way was written to Redis after the read, so the
//! poll's answer lacks it: replacing the view with it would undo, on this
//! very instance, the override it just confirmed, until the next poll (a
//! tick later; seen in the integration suite as a FORCE_CLOSED that did
//! not hold "at once").
//! So every own change is numbered and kept here until a poll that began
//! after it replaces the view; a poll re-applies, over its answer, the
//! changes numbered after the one it began at.

use crate::domain::breaker::{OverrideUntil, Tripped};
use crate::domain::tenant::Tenant;

/// What one own change sets in a breaker's entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Change {
    /// A transition this instance wrote (`None`: CLOSED).
    Tripped(Option<Tripped>),
    /// An override this instance set (`None`: cleared).
    Override(Option<OverrideUntil>),
}

/// One own change, numbered.
#[derive(Debug)]
pub(super) struct OwnChange {
    pub number: u64,
    pub tenant: Tenant,
    pub merchant: Box<str>,
    pub connector: Box<str>,
    pub change: Change,
}

/// The own changes no poll has been known to see yet, oldest first, at
/// most `bound` of them (overrides are rare admin calls and transitions a
/// few a tick; while Redis is down no poll trims the list, and the oldest
/// beyond the bound are forgotten: their breakers read as Redis last said).
#[derive(Debug, Default)]
pub(super) struct OwnChanges {
    /// The number of the last change recorded (0: none yet).
    last: u64,
    changes: Vec<OwnChange>,
}

impl OwnChanges {
    /// The number of the last change recorded: a poll that starts now sees
    /// every change up to it in Redis.
    pub fn last(&self) -> u64 {
        self.last
    }

    /// Records a change, keeping at most `bound`.
    pub fn record(
        &mut self,
        tenant: &Tenant,
        merchant: &str,
        connector: &str,
        change: Change,
        bound: usize,
    ) {
        self.last += 1;
        if self.changes.len() >= bound.max(1) {
            self.changes.remove(0);
        }
        self.changes.push(OwnChange {
            number: self.last,
            tenant: tenant.clone(),
            merchant: merchant.into(),
            connector: connector.into(),
            change,
        });
    }

    /// Forgets the changes a poll that began after change `seen` read from
    /// Redis, and returns the rest, oldest first, to apply over its answer.
    pub fn after(&mut self, seen: u64) -> &[OwnChange] {
        self.changes.retain(|change| change.number > seen);
        &self.changes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn over(until_ms: i64) -> Change {
        Change::Override(Some(OverrideUntil {
            kind: crate::domain::breaker::Override::ForceClosed,
            until_ms,
        }))
    }

    #[test]
    fn a_poll_keeps_only_the_changes_made_after_it_began() {
        let mut own = OwnChanges::default();
        own.record(&Tenant::DEFAULT, "m", "a", over(1), 10);
        let began = own.last();
        own.record(&Tenant::DEFAULT, "m", "b", over(2), 10);
        own.record(&Tenant::DEFAULT, "m", "a", Change::Override(None), 10);
        let after: Vec<_> = own
            .after(began)
            .iter()
            .map(|c| (&*c.connector, c.change))
            .collect();
        assert_eq!(after, [("b", over(2)), ("a", Change::Override(None))]);
        // A later poll that began after all of them re-applies none.
        let began = own.last();
        assert!(own.after(began).is_empty());
    }

    #[test]
    fn at_most_bound_changes_are_kept_the_oldest_forgotten() {
        let mut own = OwnChanges::default();
        for until in 1..=5 {
            own.record(&Tenant::DEFAULT, "m", "a", over(until), 3);
        }
        let kept: Vec<_> = own.after(0).iter().map(|c| c.change).collect();
        assert_eq!(kept, [over(3), over(4), over(5)]);
        assert_eq!(own.last(), 5);
    }
}
