//! Which calls are shed first when the server is full: each StickyRouting
//! call's class, and how many calls in flight each class may start under.
//!
//! GetPin is on the payment's authorization path, so it is never refused
//! to make room for lower work: RecordOutcome (feedback) may start only
//! while the calls in flight are below its share of the limit, and the
//! admin calls and anything marked `x-request-priority: low` (backfills)
//! below a smaller share. A stalled Redis then fills the feedback share
//! and leaves the rest of the limit to GetPin.

use super::percent::Percent;

/// A call's class, from its method and its `x-request-priority` header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Class {
    /// GetPin: the authorization path, up to the whole limit.
    Pin = 0,
    /// RecordOutcome: up to the feedback share.
    Feedback = 1,
    /// GetHabits, ForgetCustomer, GetConnectorHealth, SetConnectorOverride,
    /// GetUplift and every other method: up to the low share.
    Admin = 2,
    /// Any call marked `x-request-priority: low`: up to the low share.
    Low = 3,
}

/// The header that marks a call as [`Class::Low`].
pub const PRIORITY_HEADER: &str = "x-request-priority";

impl Class {
    pub const ALL: [Class; 4] = [Class::Pin, Class::Feedback, Class::Admin, Class::Low];

    /// The class of a call to `method` (the last part of the gRPC path,
    /// `GetPin`) whose [`PRIORITY_HEADER`] is `priority`. Only `low`, in any
    /// case, changes the class; any other value is ignored, so a caller
    /// cannot raise its own class.
    pub fn of(method: &str, priority: Option<&[u8]>) -> Self {
        if priority.is_some_and(|value| value.eq_ignore_ascii_case(b"low")) {
            return Self::Low;
        }
        match method {
            "GetPin" => Self::Pin,
            "RecordOutcome" => Self::Feedback,
            _ => Self::Admin,
        }
    }

    /// The `class` label in `/metrics`, and the name the docs use.
    pub fn name(self) -> &'static str {
        match self {
            Self::Pin => "pin",
            Self::Feedback => "feedback",
            Self::Admin => "admin",
            Self::Low => "low",
        }
    }
}

/// The shares of the limit below 100 %: `STICKY_ROUTING_FEEDBACK_SHARE` and
/// `STICKY_ROUTING_LOW_SHARE`. The low share never exceeds the feedback
/// share; configuration refuses settings where it would.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shares {
    pub feedback: Percent,
    pub low: Percent,
}

impl Default for Shares {
    /// The contract's defaults: 80 % and 10 %.
    fn default() -> Self {
        Self {
            feedback: Percent::whole(80),
            low: Percent::whole(10),
        }
    }
}

/// Each class's ceiling: it may start a call only while the calls in flight,
/// of all classes together, are below it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ceilings([usize; 4]);

impl Ceilings {
    /// Shares of `limit` rounded down, each at least one call.
    pub fn new(limit: usize, shares: Shares) -> Self {
        let limit = limit.max(1);
        let share = |percent: Percent| percent.of_rounded_down(limit).clamp(1, limit);
        let low = share(shares.low);
        Self([limit, share(shares.feedback), low, low])
    }

    pub fn of(&self, class: Class) -> usize {
        self.0[class as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn shares(feedback: f64, low: f64) -> Shares {
        Shares {
            feedback: Percent::new(feedback).unwrap(),
            low: Percent::new(low).unwrap(),
        }
    }

    #[test]
    fn the_method_gives_the_class_and_only_low_changes_it() {
        assert_eq!(Class::of("GetPin", None), Class::Pin);
        assert_eq!(Class::of("RecordOutcome", None), Class::Feedback);
        assert_eq!(Class::of("GetHabits", None), Class::Admin);
        assert_eq!(Class::of("ForgetCustomer", None), Class::Admin);
        assert_eq!(Class::of("GetConnectorHealth", None), Class::Admin);
        assert_eq!(Class::of("SetConnectorOverride", None), Class::Admin);
        assert_eq!(Class::of("GetUplift", None), Class::Admin);
        assert_eq!(Class::of("NoSuchMethod", None), Class::Admin);
        for low in ["low", "LOW", "Low", "lOw"] {
            assert_eq!(Class::of("GetPin", Some(low.as_bytes())), Class::Low);
            assert_eq!(Class::of("RecordOutcome", Some(low.as_bytes())), Class::Low);
        }
        for other in ["high", "critical", "", " low", "low ", "lowest", "0"] {
            assert_eq!(Class::of("GetPin", Some(other.as_bytes())), Class::Pin);
            assert_eq!(Class::of("GetHabits", Some(other.as_bytes())), Class::Admin);
        }
    }

    #[test]
    fn the_contract_example_a_hundred_calls() {
        let ceilings = Ceilings::new(100, Shares::default());
        assert_eq!(ceilings.of(Class::Pin), 100);
        assert_eq!(ceilings.of(Class::Feedback), 80);
        assert_eq!(ceilings.of(Class::Admin), 10);
        assert_eq!(ceilings.of(Class::Low), 10);
    }

    #[test]
    fn ceilings_round_down_and_are_at_least_one_call() {
        let ceilings = Ceilings::new(9, Shares::default());
        assert_eq!(ceilings.of(Class::Feedback), 7);
        assert_eq!(ceilings.of(Class::Low), 1);
        let one = Ceilings::new(1, shares(1.0, 1.0));
        assert!(Class::ALL.iter().all(|&class| one.of(class) == 1));
        let full = Ceilings::new(10, shares(100.0, 100.0));
        assert!(Class::ALL.iter().all(|&class| full.of(class) == 10));
    }

    #[test]
    fn names_are_the_contracts() {
        let names: Vec<_> = Class::ALL.iter().map(|c| c.name()).collect();
        assert_eq!(names, ["pin", "feedback", "admin", "low"]);
    }

    proptest! {
        /// Whatever the limit and shares: pin gets the whole limit, the
        /// order of the ceilings follows the shares, none is 0 or above the
        /// limit, and a share is the exact floor when that is at least 1.
        #[test]
        fn ceilings_are_ordered_and_bounded(
            limit in 1usize..=1_000_000,
            low in 1u32..=100,
            extra in 0u32..=99,
        ) {
            let feedback = (low + extra).min(100);
            let ceilings = Ceilings::new(limit, shares(feedback as f64, low as f64));
            prop_assert_eq!(ceilings.of(Class::Pin), limit);
            prop_assert!(ceilings.of(Class::Feedback) <= limit);
            prop_assert!(ceilings.of(Class::Low) <= ceilings.of(Class::Feedback));
            prop_assert_eq!(ceilings.of(Class::Admin), ceilings.of(Class::Low));
            prop_assert!(ceilings.of(Class::Low) >= 1);
            let exact = limit * feedback as usize / 100;
            prop_assert_eq!(ceilings.of(Class::Feedback), exact.max(1));
        }
    }
}
