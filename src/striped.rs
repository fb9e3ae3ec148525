//! A map split into parts, each behind its own lock, chosen by a key's
//! hash: the background tallies (the breaker's, the experiment's) that
//! every RecordOutcome adds to, so that calls of different keys rarely
//! wait for one lock.
//!
//! The part is chosen by the hash's high bits because the table inside a
//! part (hashbrown's) places a key by its low bits: a part chosen by the
//! low bits would hold keys that all share them, and use one bucket in
//! sixteen.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// More parts than cores, so two calls rarely meet on one lock.
pub const PARTS: usize = 16;

pub struct Striped<T> {
    parts: Box<[Mutex<T>]>,
}

impl<T: Default> Striped<T> {
    /// `parts` parts (at least one), each `T::default()`.
    pub fn new(parts: usize) -> Self {
        Self {
            parts: (0..parts.max(1)).map(|_| Mutex::default()).collect(),
        }
    }
}

impl<T> Striped<T> {
    /// The part of a key of hash `hash`, locked.
    pub fn lock(&self, hash: u64) -> MutexGuard<'_, T> {
        let at = usize::try_from((hash >> 48) % self.parts.len() as u64).unwrap_or(0);
        lock(&self.parts[at])
    }

    /// Every part, one after the other, each locked while it is used.
    pub fn each(&self) -> impl Iterator<Item = MutexGuard<'_, T>> {
        self.parts.iter().map(lock)
    }
}

/// A lock a panic left poisoned still holds counts worth keeping.
fn lock<T>(part: &Mutex<T>) -> MutexGuard<'_, T> {
    part.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys whose hashes differ only in their low bits (the ones
    /// hashbrown's buckets read) go to one part; keys that differ in the
    /// high bits spread over all.
    #[test]
    fn the_part_is_chosen_by_the_high_bits() {
        let striped: Striped<Vec<u64>> = Striped::new(PARTS);
        for low in 0..64u64 {
            striped.lock(low).push(low);
        }
        let used = striped.each().filter(|part| !part.is_empty()).count();
        assert_eq!(used, 1, "the low bits are left to the tables");
        for high in 0..64u64 {
            striped.lock(high << 48).push(high);
        }
        let used = striped.each().filter(|part| !part.is_empty()).count();
        assert_eq!(used, PARTS);
    }
}
