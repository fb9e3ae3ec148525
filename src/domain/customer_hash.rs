//! One customer's hash as the write scripts leave it, kept in memory: the
//! rules of `counts`, `prune` and `attempts` put together in the order
//! `record_success.lua` and `record_failure.lua` apply them.
//!
//! The service keeps the hash in Redis and lets the scripts write it;
//! `sticky-routing replay` keeps it here, so that a history replayed
//! offline meets the same rules, and the script tests hold the scripts
//! equal to this (`src/storage/scripts/tests/attempts.rs`). A field is any
//! handle `F` the caller names fields by (the field's text, or an interned
//! number); the cap's tie-break asks the caller for the field's text.
//!
//! Key expiry is Redis's own: [`outlived`] says when a hash written at some
//! time is gone at another.

use std::time::Duration;

use smallvec::SmallVec;

use super::attempts::{AttemptDigest, Remembered};
use super::counts::{FailureEffect, Recorded, after_failure};
use super::prune::prune_among;

/// One customer's combos and remembered attempts; never empty of combos
/// (a hash whose last combo goes is gone, its attempts with it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CustomerHash<F: Copy> {
    /// Two combos inline: most customers pay with one or two.
    fields: SmallVec<[Slot<F>; 2]>,
    /// Boxed, and only once an attempt id comes: most histories have none,
    /// and a replay keeps one of these per customer (bench/README.md,
    /// "Replay").
    remembered: Option<Box<Remembered>>,
}

/// One combo and its count. Packed to 4-byte alignment, so that a `u32`
/// handle and its count take 12 bytes, not 16: a replay keeps one
/// `CustomerHash` per customer (bench/README.md, "Replay"). Its fields are
/// only ever copied, never borrowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C, packed(4))]
struct Slot<F: Copy> {
    field: F,
    count: i64,
}

impl<F: Copy> Slot<F> {
    fn new(field: F, count: i64) -> Self {
        Self { field, count }
    }

    fn field(&self) -> F {
        self.field
    }

    fn count(&self) -> i64 {
        self.count
    }
}

/// What a failure left of the hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Left {
    /// The hash still holds a combo.
    Kept,
    /// The last combo went, and the hash with it.
    Gone,
}

impl<F: Copy + Eq> CustomerHash<F> {
    /// The hash a first success creates: `field` at 1, and the attempt.
    pub fn created(field: F, attempt: Option<AttemptDigest>) -> Self {
        let mut fields = SmallVec::new();
        fields.push(Slot::new(field, 1));
        let mut hash = Self {
            fields,
            remembered: None,
        };
        hash.remember(attempt);
        hash
    }

    /// The combos and their counts, in no particular order.
    pub fn fields(&self) -> impl ExactSizeIterator<Item = (F, i64)> + '_ {
        self.fields.iter().map(|slot| (slot.field(), slot.count()))
    }

    /// The attempts the hash remembers, if any.
    pub fn remembered(&self) -> Option<&Remembered> {
        self.remembered.as_deref()
    }

    /// The count of `field`, 0 when absent.
    pub fn count(&self, field: F) -> i64 {
        self.position(field).map_or(0, |at| self.fields[at].count())
    }

    /// Whether the hash remembers `attempt`: a call naming it is a repeat.
    pub fn remembers(&self, attempt: Option<AttemptDigest>) -> bool {
        attempt.is_some_and(|attempt| {
            self.remembered()
                .is_some_and(|remembered| remembered.contains(attempt))
        })
    }

    /// A success on this (existing) hash: a repeat writes nothing; else the
    /// count goes up by one (a new combo at 1), the cap prunes the lowest
    /// other combos past `cap` (ties: bytewise-smallest `name` first), and
    /// the attempt is remembered.
    pub fn success<'n>(
        &mut self,
        field: F,
        cap: usize,
        attempt: Option<AttemptDigest>,
        name: impl Fn(F) -> &'n str,
    ) -> Recorded {
        if self.remembers(attempt) {
            return self.duplicate(field);
        }
        let (net_count, pruned) = match self.position(field) {
            Some(at) => {
                let count = self.fields[at].count() + 1;
                self.fields[at].count = count;
                (count, 0)
            }
            None => {
                self.fields.push(Slot::new(field, 1));
                (1, self.prune(cap, field, name))
            }
        };
        self.remember(attempt);
        Recorded::Applied { net_count, pruned }
    }

    /// A gateway failure on this (existing) hash: a repeat writes nothing; a
    /// combo with no count is left alone; else the count goes down, and a
    /// count that reaches 0 goes. When the last combo goes the hash is gone
    /// ([`Left::Gone`]), its attempts with it; else the attempt is
    /// remembered.
    pub fn failure(&mut self, field: F, attempt: Option<AttemptDigest>) -> (Recorded, Left) {
        if self.remembers(attempt) {
            return (self.duplicate(field), Left::Kept);
        }
        let Some(at) = self.position(field) else {
            return (Recorded::IgnoredNoHabit, Left::Kept);
        };
        let effect = after_failure(self.fields[at].count());
        match effect {
            FailureEffect::Decremented(next) => self.fields[at].count = next,
            FailureEffect::Deleted => {
                self.fields.swap_remove(at);
            }
        }
        let recorded = Recorded::Applied {
            net_count: effect.net_count(),
            pruned: 0,
        };
        if self.fields.is_empty() {
            return (recorded, Left::Gone);
        }
        self.remember(attempt);
        (recorded, Left::Kept)
    }

    fn position(&self, field: F) -> Option<usize> {
        self.fields.iter().position(|slot| slot.field() == field)
    }

    fn duplicate(&self, field: F) -> Recorded {
        Recorded::Duplicate {
            net_count: self.count(field),
        }
    }

    fn remember(&mut self, attempt: Option<AttemptDigest>) {
        match (&mut self.remembered, attempt) {
            (Some(remembered), Some(attempt)) => remembered.remember(attempt),
            (None, Some(attempt)) => self.remembered = Some(Box::new(Remembered::first(attempt))),
            (_, None) => {}
        }
    }

    /// Applies the cap after `just_written` was created; how many went.
    fn prune<'n>(&mut self, cap: usize, just_written: F, name: impl Fn(F) -> &'n str) -> u32 {
        if self.fields.len() <= cap {
            return 0;
        }
        let listing: Vec<(&str, i64)> = self
            .fields
            .iter()
            .map(|slot| (name(slot.field()), slot.count()))
            .collect();
        let victims = prune_among(listing.iter().copied(), cap, name(just_written));
        let before = self.fields.len();
        self.fields
            .retain(|slot| slot.field() == just_written || !victims.contains(&name(slot.field())));
        u32::try_from(before - self.fields.len()).unwrap_or(u32::MAX)
    }
}

/// Whether a hash last written at `written_ms` is gone at `now_ms`: Redis
/// expires a key once the time is past its write plus `ttl`.
pub fn outlived(written_ms: i64, now_ms: i64, ttl: Duration) -> bool {
    let ttl_ms = i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX);
    now_ms.saturating_sub(written_ms) > ttl_ms
}

#[cfg(test)]
mod tests;
