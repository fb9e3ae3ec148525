//! Tier 1's experiment counts: what RecordOutcome has counted since the
//! last flush, per (tenant, merchant, UTC day, field), bounded. Two
//! tenants' merchants of one id are two merchants, with two counts.
//!
//! The map is split over locks by the (tenant, merchant)'s hash
//! (`striped`), so calls of different merchants rarely wait for one lock,
//! and looked up by that one hash and the ids, borrowed: a merchant
//! already counted this tick costs no allocation, a new one one (its
//! merchant id). Each flush takes (drains) everything: what is kept
//! between two ticks is only what was counted in one, and at most
//! [`MAX_MERCHANTS`] (tenant, merchant)s; one beyond that within one tick
//! is not counted, and said so (`dropped`), which only a flood of distinct
//! ids can cause.

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};

use foldhash::fast::RandomState;
use hashbrown::HashTable;
use hashbrown::hash_table::Entry;
use smallvec::SmallVec;

use crate::domain::ids::MerchantId;
use crate::domain::tenant::Tenant;
use crate::storage::ExperimentCounts;
use crate::striped::{PARTS, Striped};

/// The most (tenant, merchant)s waiting to be written at once, all parts
/// together: a tick's, and those put back while Redis refuses the flush.
/// An instance counts a merchant per call at most, so a tick reaches it
/// only at over 500,000 calls a second; it is 2.6 times a platform's
/// 100,000 merchants, so a Redis outage of any length drops no merchant's
/// counts there (about 200 bytes each: 50 MiB at the bound).
pub(super) const MAX_MERCHANTS: usize = 262_144;

/// One (tenant, merchant)'s counts of one day, as a flush takes them.
pub(super) type Taken = (Tenant, MerchantId, u32, ExperimentCounts);

/// One (tenant, merchant)'s counts by day: usually one day (two around
/// midnight), held inline.
struct Held {
    hash: u64,
    tenant: Tenant,
    merchant: MerchantId,
    days: SmallVec<[(u32, ExperimentCounts); 1]>,
}

pub(super) struct Tally {
    /// Found by the (tenant, merchant)'s hash and compared by the ids, so
    /// a hash collision never mixes two merchants.
    parts: Striped<HashTable<Held>>,
    hasher: RandomState,
    per_part: usize,
    /// Outcomes not counted because the map was full.
    dropped: AtomicU64,
}

impl Tally {
    pub fn new(max_merchants: usize) -> Self {
        let parts = PARTS.min(max_merchants).max(1);
        Self {
            parts: Striped::new(parts),
            hasher: RandomState::default(),
            per_part: (max_merchants / parts).max(1),
            dropped: AtomicU64::new(0),
        }
    }

    /// Counts one outcome of `tenant`'s `merchant` on `day` in field
    /// `field` (an index of `EXPERIMENT_FIELDS`).
    pub fn add(&self, tenant: &Tenant, merchant: &MerchantId, day: u32, field: usize) {
        let mut one = ExperimentCounts::default();
        if let Some(count) = one.counts.get_mut(field) {
            *count = 1;
            self.put_back(tenant, merchant, day, &one);
        }
    }

    /// Adds counts: one call's, or a flush's that certainly wrote nothing
    /// (put back for the next). A (tenant, merchant) new to a full part is
    /// dropped, its counts counted as lost.
    pub fn put_back(
        &self,
        tenant: &Tenant,
        merchant: &MerchantId,
        day: u32,
        back: &ExperimentCounts,
    ) {
        // The ids go in borrowed: a merchant already counted this tick
        // costs no allocation.
        let hash = self.hasher.hash_one((tenant.id(), merchant.as_str()));
        let mut entries = self.parts.lock(hash);
        let full = entries.len() >= self.per_part;
        let same = |entry: &Held| entry.merchant == *merchant && entry.tenant == *tenant;
        let days = match entries.entry(hash, same, |entry| entry.hash) {
            Entry::Occupied(held) => &mut held.into_mut().days,
            Entry::Vacant(_) if full => {
                drop(entries);
                let lost: u64 = back.counts.iter().sum();
                self.dropped.fetch_add(lost, Ordering::Relaxed);
                return;
            }
            Entry::Vacant(new) => {
                let held = Held {
                    hash,
                    tenant: tenant.clone(),
                    merchant: merchant.clone(),
                    days: SmallVec::new(),
                };
                &mut new.insert(held).into_mut().days
            }
        };
        match days.iter_mut().find(|(d, _)| *d == day) {
            Some((_, counts)) => counts.add(back),
            None => days.push((day, *back)),
        }
    }

    /// Takes every count since the last call: one entry per (tenant,
    /// merchant, day). The tables keep their room for the next tick.
    pub fn take(&self) -> Vec<Taken> {
        let mut taken = Vec::new();
        for mut entries in self.parts.each() {
            for Held {
                tenant,
                merchant,
                mut days,
                ..
            } in entries.drain()
            {
                let Some((day, counts)) = days.pop() else {
                    continue;
                };
                for (other, counts) in days {
                    taken.push((tenant.clone(), merchant.clone(), other, counts));
                }
                taken.push((tenant, merchant, day, counts));
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

    const D: Tenant = Tenant::DEFAULT;

    fn m(id: &str) -> MerchantId {
        MerchantId::parse(id).unwrap()
    }

    #[test]
    fn counts_are_taken_once_per_merchant_and_day() {
        let tally = Tally::new(100);
        tally.add(&D, &m("a"), 20261202, 0);
        tally.add(&D, &m("a"), 20261202, 0);
        tally.add(&D, &m("a"), 20261202, 5);
        tally.add(&D, &m("a"), 20261203, 9);
        tally.add(&D, &m("b"), 20261202, 4);
        let mut taken = tally.take();
        taken.sort_by(|x, y| (x.1.as_str(), x.2).cmp(&(y.1.as_str(), y.2)));
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
                (D, m("a"), 20261202, counts(&[(0, 2), (5, 1)])),
                (D, m("a"), 20261203, counts(&[(9, 1)])),
                (D, m("b"), 20261202, counts(&[(4, 1)])),
            ]
        );
        assert!(tally.take().is_empty(), "nothing is flushed twice");
        tally.put_back(&D, &m("a"), 20261202, &counts(&[(1, 3)]));
        tally.add(&D, &m("a"), 20261202, 1);
        assert_eq!(tally.take(), vec![(D, m("a"), 20261202, counts(&[(1, 4)]))]);
        assert_eq!(tally.take_dropped(), 0);
    }

    #[test]
    fn two_tenants_with_the_same_merchant_keep_their_own_counts() {
        let tally = Tally::new(100);
        let acme = Tenant::parse("acme").unwrap();
        let acme_upper = Tenant::parse("Acme").unwrap();
        tally.add(&D, &m("a"), 20261202, 0);
        tally.add(&acme, &m("a"), 20261202, 0);
        tally.add(&acme, &m("a"), 20261202, 0);
        tally.add(&acme_upper, &m("a"), 20261202, 1);
        let mut taken = tally.take();
        taken.sort_by(|x, y| x.0.cmp(&y.0));
        let one = |at: usize, n: u64| {
            let mut c = ExperimentCounts::default();
            c.counts[at] = n;
            c
        };
        assert_eq!(
            taken,
            vec![
                (D, m("a"), 20261202, one(0, 1)),
                (acme_upper, m("a"), 20261202, one(1, 1)),
                (acme, m("a"), 20261202, one(0, 2)),
            ]
        );
        assert!(tally.take().is_empty());
    }

    #[test]
    fn at_most_max_merchants_within_a_tick_and_the_rest_is_said() {
        let tally = Tally::new(32);
        for i in 0..200 {
            tally.add(&D, &m(&format!("m{i}")), 1, 0);
        }
        let taken = tally.take();
        assert!(taken.len() <= 32, "{}", taken.len());
        assert_eq!(taken.len() as u64 + tally.take_dropped(), 200);
        // A merchant already counted is counted whatever the bound.
        let tally = Tally::new(1);
        tally.add(&D, &m("a"), 1, 0);
        tally.add(&D, &m("b"), 1, 0);
        tally.add(&D, &m("a"), 1, 0);
        assert_eq!(tally.take()[0].3.counts[0], 2);
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
                        tally.add(&D, &m(&format!("m{}", i % 7)), 20261202, (t + i) % 10);
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
            .map(|(_, _, _, c)| c.counts.iter().sum::<u64>())
            .sum();
        assert_eq!(total, 40_000);
    }
}
