//! Breakers to look at again at a set time: a CLOSED breaker whose window
//! will trip as its old calls age out (`domain::breaker::trips_at`), with
//! no new call to make the engine look. At that time the cycle judges its
//! window again (`window::Windows::judge`), and trips it if it then
//! should: trips are decided on the window as it stands at each tick, not
//! only when a call arrives.
//!
//! Bounded like the tallies (`MAX_TRACKED`): past it, a breaker is not
//! scheduled, and trips at its next call as before.

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};

use crate::domain::ids::{Connector, MerchantId};
use crate::domain::tenant::Tenant;

/// One breaker.
pub(super) type Key = (Tenant, MerchantId, Connector);

pub(super) struct Rechecks {
    due: Mutex<(BTreeMap<i64, Vec<Key>>, usize)>,
    max: usize,
}

impl Rechecks {
    pub fn new(max: usize) -> Self {
        Self {
            due: Mutex::new((BTreeMap::new(), 0)),
            max: max.max(1),
        }
    }

    /// Looks at `key` again at `at_ms`.
    pub fn schedule(&self, at_ms: i64, key: Key) {
        let mut due = self.due.lock().unwrap_or_else(PoisonError::into_inner);
        let (by_time, len) = &mut *due;
        if *len < self.max {
            by_time.entry(at_ms).or_default().push(key);
            *len += 1;
        }
    }

    /// Every breaker due at `now_ms`, taken.
    pub fn take_due(&self, now_ms: i64) -> Vec<Key> {
        let mut due = self.due.lock().unwrap_or_else(PoisonError::into_inner);
        let (by_time, len) = &mut *due;
        let later = by_time.split_off(&now_ms.saturating_add(1));
        let now: Vec<Key> = std::mem::replace(by_time, later)
            .into_values()
            .flatten()
            .collect();
        *len -= now.len().min(*len);
        now
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn due_breakers_come_out_once_in_time_and_the_bound_holds() {
        let key = |m: &str| {
            (
                Tenant::DEFAULT,
                MerchantId::parse(m).unwrap(),
                Connector::parse("a").unwrap(),
            )
        };
        let rechecks = Rechecks::new(2);
        rechecks.schedule(10, key("m1"));
        rechecks.schedule(20, key("m2"));
        rechecks.schedule(5, key("m3"));
        assert!(rechecks.take_due(9).is_empty());
        assert_eq!(rechecks.take_due(10), vec![key("m1")]);
        assert!(rechecks.take_due(10).is_empty());
        rechecks.schedule(15, key("m4"));
        assert_eq!(rechecks.take_due(100), vec![key("m4"), key("m2")]);
    }
}
