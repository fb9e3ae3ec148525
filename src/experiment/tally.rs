//! Tier 1's experiment counts: what RecordOutcome has counted since the
//! last flush, per (merchant, UTC day, field), bounded.
//!
//! The map is sharded by the merchant's hash, so calls of different
//! merchants rarely wait for one lock, and looked up by the merchant's
//! text, so a merchant already counted this tick costs no allocation. Each
//! flush takes (drains) everything: what is kept between two ticks is only
//! what was counted in one, and at most [`MAX_MERCHANTS`] merchants; a
//! merchant beyond that within one tick is not counted, and said so
//! (`dropped`), which only a flood of distinct merchant ids can cause.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use foldhash::fast::RandomState;

use crate::domain::ids::MerchantId;
use crate::storage::ExperimentCounts;

/// More shards than cores, so two calls rarely meet on one lock.
const SHARDS: usize = 16;
/// The most merchants counted within one tick, all shards together.
pub(super) const MAX_MERCHANTS: usize = 65_536;

/// One merchant's counts by day (usually one day; two around midnight).
type Days = Vec<(u32, ExperimentCounts)>;

pub(super) struct Tally {
    shards: Box<[Mutex<HashMap<MerchantId, Days, RandomState>>]>,
    hasher: RandomState,
    per_shard: usize,
    /// Outcomes not counted because the map was full.
    dropped: AtomicU64,
}

impl Tally {
    pub fn new(max_merchants: usize) -> Self {
        let shards = SHARDS.min(max_merchants).max(1);
        Self {
            shards: (0..shards)
                .map(|_| Mutex::new(HashMap::with_hasher(RandomState::default())))
                .collect(),
            hasher: RandomState::default(),
            per_shard: (max_merchants / shards).max(1),
            dropped: AtomicU64::new(0),
        }
    }

    /// Counts one outcome of `merchant` on `day` in field `field` (an index
    /// of `EXPERIMENT_FIELDS`).
    pub fn add(&self, merchant: &MerchantId, day: u32, field: usize) {
        let mut one = ExperimentCounts::default();
        if let Some(count) = one.counts.get_mut(field) {
            *count = 1;
            self.put_back(merchant, day, &one);
        }
    }

    /// Adds counts: one call's, or a flush's that certainly wrote nothing
    /// (put back for the next). A merchant new to a full shard is dropped,
    /// its counts counted as lost.
    pub fn put_back(&self, merchant: &MerchantId, day: u32, back: &ExperimentCounts) {
        let hash = self.hasher.hash_one(merchant.as_str());
        let shard = &self.shards[usize::try_from(hash % self.shards.len() as u64).unwrap_or(0)];
        let mut shard = shard.lock().unwrap_or_else(PoisonError::into_inner);
        if !shard.contains_key(merchant.as_str()) {
            if shard.len() >= self.per_shard {
                drop(shard);
                let lost: u64 = back.counts.iter().sum();
                self.dropped.fetch_add(lost, Ordering::Relaxed);
                return;
            }
            shard.insert(merchant.clone(), Days::new());
        }
        let Some(days) = shard.get_mut(merchant.as_str()) else {
            return;
        };
        match days.iter_mut().find(|(d, _)| *d == day) {
            Some((_, counts)) => counts.add(back),
            None => days.push((day, *back)),
        }
    }

    /// Takes every count since the last call: one entry per (merchant, day).
    pub fn take(&self) -> Vec<(MerchantId, u32, ExperimentCounts)> {
        let mut taken = Vec::new();
        for shard in &*self.shards {
            let drained: Vec<_> = shard
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .drain()
                .collect();
            for (merchant, days) in drained {
                for (day, counts) in days {
                    taken.push((merchant.clone(), day, counts));
                }
            }
        }
        taken
    }

    /// How many outcomes went uncounted since the last call, the map being
    /// full.
    pub fn take_dropped(&self) -> u64 {
        self.dropped.swap(0, Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(id: &str) -> MerchantId {
        MerchantId::parse(id).unwrap()
    }

    #[test]
    fn counts_are_taken_once_per_merchant_and_day() {
        let tally = Tally::new(100);
        tally.add(&m("a"), 20261202, 0);
        tally.add(&m("a"), 20261202, 0);
        tally.add(&m("a"), 20261202, 5);
        tally.add(&m("a"), 20261203, 9);
        tally.add(&m("b"), 20261202, 4);
        let mut taken = tally.take();
        taken.sort_by(|x, y| (x.0.as_str(), x.1).cmp(&(y.0.as_str(), y.1)));
        let counts = |pairs: &[(usize, u64)]| {
            let mut c = ExperimentCounts::default();
            for &(at, n) in pairs {
                c.counts[at] = n;
            }
            c
        };
        assert_eq!(
            taken,
            vec![
                (m("a"), 20261202, counts(&[(0, 2), (5, 1)])),
                (m("a"), 20261203, counts(&[(9, 1)])),
                (m("b"), 20261202, counts(&[(4, 1)])),
            ]
        );
        assert!(tally.take().is_empty(), "nothing is flushed twice");
        tally.put_back(&m("a"), 20261202, &counts(&[(1, 3)]));
        tally.add(&m("a"), 20261202, 1);
        assert_eq!(tally.take(), vec![(m("a"), 20261202, counts(&[(1, 4)]))]);
        assert_eq!(tally.take_dropped(), 0);
    }

    #[test]
    fn at_most_max_merchants_within_a_tick_and_the_rest_is_said() {
        let tally = Tally::new(32);
        for i in 0..200 {
            tally.add(&m(&format!("m{i}")), 1, 0);
        }
        let taken = tally.take();
        assert!(taken.len() <= 32, "{}", taken.len());
        assert_eq!(taken.len() as u64 + tally.take_dropped(), 200);
        // A merchant already counted is counted whatever the bound.
        let tally = Tally::new(1);
        tally.add(&m("a"), 1, 0);
        tally.add(&m("b"), 1, 0);
        tally.add(&m("a"), 1, 0);
        assert_eq!(tally.take()[0].2.counts[0], 2);
        assert_eq!(tally.take_dropped(), 1);
    }

    /// Counts from many threads at once add up exactly.
    #[test]
    fn concurrent_counts_are_exact() {
        let tally = std::sync::Arc::new(Tally::new(MAX_MERCHANTS));
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let tally = tally.clone();
                std::thread::spawn(move || {
                    for i in 0..10_000 {
                        tally.add(&m(&format!("m{}", i % 7)), 20261202, (t + i) % 10);
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        let total: u64 = tally
            .take()
            .iter()
            .map(|(_, _, c)| c.counts.iter().sum::<u64>())
            .sum();
        assert_eq!(total, 40_000);
    }
}
