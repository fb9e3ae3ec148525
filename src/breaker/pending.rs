//! Tier 1's counts: what RecordOutcome has counted since the last flush,
//! per (tenant, merchant, connector), bounded, least recently used first
//! out. Two tenants' breakers of the same merchant and connector ids are
//! two breakers, so two tallies.
//!
//! A pair stays tracked after its counts are flushed, so a busy pair costs
//! one lookup per call and no allocation. The bound (`MAX_TRACKED`) is on
//! all the pairs together: below it nothing is evicted; above it the pair
//! called least recently in the shard of the map being added to goes, and
//! its unflushed counts go with the next flush, never lost. (The shards
//! share one count of pairs; a shard keeps its last pair, so the map may
//! exceed the bound by at most one pair per shard.) The map is sharded by
//! the pair's hash so that calls on different pairs rarely wait for one
//! lock.

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicUsize, Ordering};

use foldhash::fast::RandomState;
use std::sync::{Mutex, PoisonError};

use lru::LruCache;

use crate::domain::breaker::{CountInto, Counts};
use crate::domain::ids::{Connector, MerchantId};
use crate::domain::shards::{SHARDS, Shard, shard_of};
use crate::domain::tenant::Tenant;
use crate::storage::{ConnectorTally, MerchantTallies};

/// More shards than cores, so two calls rarely meet on one lock.
const LOCKS: usize = 16;

/// Every (tenant, merchant)'s tallies of one flush, by the Redis shard
/// (`domain::shards`) their keys live in.
pub(super) type Taken = Vec<Vec<MerchantTallies>>;

pub(super) struct Pending {
    shards: Box<[Mutex<Part>]>,
    hasher: RandomState,
    /// Pairs tracked, all shards together.
    tracked: AtomicUsize,
    max_tracked: usize,
}

/// One lock's part of the map.
struct Part {
    /// Keyed by the pair's hash; the pair itself is kept in the value and
    /// compared, so a hash collision replaces, never mixes, two pairs.
    tracked: LruCache<u64, Tally>,
    /// The pairs with counts since the last flush.
    dirty: Vec<u64>,
    /// Pairs evicted with counts not yet flushed: the next flush takes them.
    evicted: Vec<Tally>,
}

struct Tally {
    tenant: Tenant,
    merchant: MerchantId,
    connector: Connector,
    buckets: Vec<(i64, Counts)>,
    probes: Option<(i64, Counts)>,
    dirty: bool,
}

impl Tally {
    fn add(&mut self, into: CountInto, failed: bool) {
        let counts = match into {
            CountInto::Nowhere => return,
            CountInto::Bucket(bucket) => {
                match self.buckets.iter_mut().find(|(b, _)| *b == bucket) {
                    Some((_, counts)) => counts,
                    None => {
                        self.buckets.push((bucket, Counts::default()));
                        match self.buckets.last_mut() {
                            Some((_, counts)) => counts,
                            None => return,
                        }
                    }
                }
            }
            CountInto::Probe { open_until_ms } => {
                match &mut self.probes {
                    // Probes of an older half-open never carry over.
                    Some((until, counts)) if *until == open_until_ms => {}
                    probes => *probes = Some((open_until_ms, Counts::default())),
                }
                match &mut self.probes {
                    Some((_, counts)) => counts,
                    None => return,
                }
            }
        };
        counts.calls += 1;
        counts.failures += u64::from(failed);
    }

    /// Adds back counts a flush did not deliver: bucket by bucket, and
    /// probes of the same HALF-OPEN (an older one's never carry over).
    fn merge(&mut self, back: ConnectorTally) {
        for (bucket, counts) in back.buckets {
            match self.buckets.iter_mut().find(|(b, _)| *b == bucket) {
                Some((_, into)) => add_counts(into, counts),
                None => self.buckets.push((bucket, counts)),
            }
        }
        if let Some((until, counts)) = back.probes {
            match &mut self.probes {
                Some((own, into)) if *own == until => add_counts(into, counts),
                Some((own, _)) if *own > until => {}
                probes => *probes = Some((until, counts)),
            }
        }
    }

    /// The counts since the last flush, taken.
    fn take(&mut self) -> ConnectorTally {
        self.dirty = false;
        ConnectorTally {
            connector: self.connector.as_str().to_owned(),
            buckets: std::mem::take(&mut self.buckets),
            probes: self.probes.take(),
        }
    }
}

impl Pending {
    /// At most `max_tracked` pairs in all (one more per shard at worst).
    pub fn new(max_tracked: usize) -> Self {
        Self {
            shards: (0..LOCKS)
                .map(|_| {
                    Mutex::new(Part {
                        tracked: LruCache::unbounded(),
                        dirty: Vec::new(),
                        evicted: Vec::new(),
                    })
                })
                .collect(),
            hasher: RandomState::default(),
            tracked: AtomicUsize::new(0),
            max_tracked: max_tracked.max(1),
        }
    }

    /// Counts one call of the (tenant, merchant, connector) breaker into
    /// `into`.
    pub fn add(
        &self,
        tenant: &Tenant,
        merchant: &MerchantId,
        connector: &Connector,
        into: CountInto,
        failed: bool,
    ) {
        if into != CountInto::Nowhere {
            self.with_tally(tenant, merchant, connector, |tally| tally.add(into, failed));
        }
    }

    /// Runs `change` on the pair's tally (made if new) and marks it dirty.
    fn with_tally(
        &self,
        tenant: &Tenant,
        merchant: &MerchantId,
        connector: &Connector,
        change: impl FnOnce(&mut Tally),
    ) {
        // The tenant's id goes in borrowed: no allocation, and the default
        // tenant adds one discriminant to the hash.
        let key = self
            .hasher
            .hash_one((tenant.id(), merchant.as_str(), connector.as_str()));
        let shard = &self.shards[usize::try_from(key % self.shards.len() as u64).unwrap_or(0)];
        let mut shard = shard.lock().unwrap_or_else(PoisonError::into_inner);
        let known = shard.tracked.get_mut(&key).is_some_and(|tally| {
            tally.merchant == *merchant && tally.connector == *connector && tally.tenant == *tenant
        });
        if !known {
            let new = Tally {
                tenant: tenant.clone(),
                merchant: merchant.clone(),
                connector: connector.clone(),
                buckets: Vec::new(),
                probes: None,
                dirty: false,
            };
            match shard.tracked.push(key, new) {
                // A pair of the same hash, replaced: its counts still go.
                Some((_, old)) if old.dirty => shard.evicted.push(old),
                Some(_) => {}
                None => {
                    if self.tracked.fetch_add(1, Ordering::Relaxed) >= self.max_tracked
                        && shard.tracked.len() > 1
                        && let Some((_, old)) = shard.tracked.pop_lru()
                    {
                        self.tracked.fetch_sub(1, Ordering::Relaxed);
                        if old.dirty {
                            shard.evicted.push(old);
                        }
                    }
                }
            }
        }
        let Some(tally) = shard.tracked.get_mut(&key) else {
            return;
        };
        change(tally);
        if !tally.dirty {
            tally.dirty = true;
            shard.dirty.push(key);
        }
    }

    /// Puts back the tallies of a flush that applied nothing (shed on the
    /// background lane, or refused unsent): the next flush carries them,
    /// merged with the counts since, so a connector is never sent twice in
    /// one flush. Each pair goes through the bound as a new call would.
    pub fn put_back(&self, merchants: Vec<MerchantTallies>) {
        for MerchantTallies {
            tenant,
            merchant,
            tallies,
        } in merchants
        {
            for tally in tallies {
                // Connector ids in a tally were parsed on the way in.
                let Ok(connector) = Connector::parse(&tally.connector) else {
                    continue;
                };
                self.with_tally(&tenant, &merchant, &connector, |own| own.merge(tally));
            }
        }
    }

    /// Takes every count since the last call, grouped by (tenant,
    /// merchant), each merchant in its Redis shard: one flush per shard.
    pub fn take(&self) -> Taken {
        let mut tallies: Vec<(Tenant, MerchantId, ConnectorTally)> = Vec::new();
        for shard in &*self.shards {
            let mut shard = shard.lock().unwrap_or_else(PoisonError::into_inner);
            let Part {
                tracked,
                dirty,
                evicted,
            } = &mut *shard;
            for key in dirty.drain(..) {
                match tracked.peek_mut(&key) {
                    Some(tally) if tally.dirty => {
                        tallies.push((tally.tenant.clone(), tally.merchant.clone(), tally.take()));
                    }
                    _ => {}
                }
            }
            for mut tally in evicted.drain(..) {
                let taken = tally.take();
                tallies.push((tally.tenant, tally.merchant, taken));
            }
        }
        group(tallies)
    }

    /// How many pairs are tracked now.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|shard| {
                shard
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .tracked
                    .len()
            })
            .sum()
    }
}

/// Tallies grouped by (tenant, merchant), in their Redis shards.
fn add_counts(into: &mut Counts, counts: Counts) {
    into.calls = into.calls.saturating_add(counts.calls);
    into.failures = into.failures.saturating_add(counts.failures);
}

fn group(mut tallies: Vec<(Tenant, MerchantId, ConnectorTally)>) -> Taken {
    tallies.sort_by(|a, b| (&a.0, a.1.as_str()).cmp(&(&b.0, b.1.as_str())));
    let mut taken: Taken = (0..SHARDS).map(|_| Vec::new()).collect();
    let mut last: Option<Shard> = None;
    for (tenant, merchant, tally) in tallies {
        if let Some(shard) = last
            && let Some(current) = taken[shard.index()].last_mut()
            && current.tenant == tenant
            && current.merchant == merchant
        {
            current.tallies.push(tally);
            continue;
        }
        let shard = shard_of(&tenant, &merchant);
        last = Some(shard);
        taken[shard.index()].push(MerchantTallies {
            tenant,
            merchant,
            tallies: vec![tally],
        });
    }
    taken
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(merchant: &str, connector: &str) -> (MerchantId, Connector) {
        (
            MerchantId::parse(merchant).unwrap(),
            Connector::parse(connector).unwrap(),
        )
    }

    /// Every merchant's tallies taken, each checked to be in its shard.
    fn take(pending: &Pending) -> Vec<MerchantTallies> {
        let taken = pending.take();
        assert_eq!(taken.len(), SHARDS);
        let mut all = Vec::new();
        for (shard, merchants) in taken.into_iter().enumerate() {
            for merchant in merchants {
                assert_eq!(
                    shard_of(&merchant.tenant, &merchant.merchant).index(),
                    shard
                );
                all.push(merchant);
            }
        }
        all.sort_by(|x, y| (&x.tenant, x.merchant.as_str()).cmp(&(&y.tenant, y.merchant.as_str())));
        all
    }

    fn counts(calls: u64, failures: u64) -> Counts {
        Counts { calls, failures }
    }

    #[test]
    fn counts_are_taken_once_grouped_by_merchant() {
        let pending = Pending::new(100);
        let (m1, a) = pair("m1", "a");
        let (m2, b) = pair("m2", "b");
        let d = &Tenant::DEFAULT;
        pending.add(d, &m1, &a, CountInto::Bucket(7), true);
        pending.add(d, &m1, &a, CountInto::Bucket(7), false);
        pending.add(d, &m1, &a, CountInto::Bucket(8), true);
        pending.add(d, &m2, &b, CountInto::Probe { open_until_ms: 5 }, true);
        pending.add(d, &m2, &b, CountInto::Nowhere, true);
        let taken = take(&pending);
        assert_eq!(taken.len(), 2);
        assert_eq!(
            taken[0].tallies[0].buckets,
            vec![(7, counts(2, 1)), (8, counts(1, 1))]
        );
        assert_eq!(taken[1].tallies[0].probes, Some((5, counts(1, 1))));
        assert!(take(&pending).is_empty(), "nothing is flushed twice");
        assert_eq!(pending.len(), 2, "the pairs stay tracked");
    }

    #[test]
    fn counts_put_back_are_merged_into_the_next_flush_once() {
        let pending = Pending::new(100);
        let (m1, a) = pair("m1", "a");
        let d = &Tenant::DEFAULT;
        pending.add(d, &m1, &a, CountInto::Bucket(7), true);
        pending.add(d, &m1, &a, CountInto::Probe { open_until_ms: 5 }, true);
        let shed = take(&pending);
        pending.add(d, &m1, &a, CountInto::Bucket(7), false);
        pending.add(d, &m1, &a, CountInto::Bucket(8), false);
        pending.add(d, &m1, &a, CountInto::Probe { open_until_ms: 5 }, false);
        pending.put_back(shed);
        let taken = take(&pending);
        assert_eq!(taken.len(), 1);
        assert_eq!(taken[0].tallies.len(), 1, "one connector, sent once");
        let tally = &taken[0].tallies[0];
        assert_eq!(tally.buckets, vec![(7, counts(2, 1)), (8, counts(1, 0))]);
        assert_eq!(tally.probes, Some((5, counts(2, 1))));
        assert!(take(&pending).is_empty());
    }

    #[test]
    fn two_tenants_with_the_same_merchant_and_connector_keep_two_tallies() {
        let pending = Pending::new(100);
        let (m, a) = pair("m", "a");
        let acme = Tenant::parse("acme").unwrap();
        let globex = Tenant::parse("globex").unwrap();
        pending.add(&Tenant::DEFAULT, &m, &a, CountInto::Bucket(7), true);
        pending.add(&acme, &m, &a, CountInto::Bucket(7), false);
        pending.add(&acme, &m, &a, CountInto::Bucket(7), false);
        pending.add(&globex, &m, &a, CountInto::Probe { open_until_ms: 5 }, true);
        assert_eq!(pending.len(), 3);
        let taken = take(&pending);
        let tenants: Vec<&Tenant> = taken.iter().map(|t| &t.tenant).collect();
        assert_eq!(tenants, [&Tenant::DEFAULT, &acme, &globex]);
        for merchant in &taken {
            assert_eq!(merchant.merchant, m);
            assert_eq!(merchant.tallies.len(), 1);
            assert_eq!(merchant.tallies[0].connector, "a");
        }
        assert_eq!(taken[0].tallies[0].buckets, vec![(7, counts(1, 1))]);
        assert_eq!(taken[1].tallies[0].buckets, vec![(7, counts(2, 0))]);
        assert!(taken[2].tallies[0].buckets.is_empty());
        assert_eq!(taken[2].tallies[0].probes, Some((5, counts(1, 1))));
    }

    #[test]
    fn probes_of_an_older_half_open_are_dropped() {
        let pending = Pending::new(100);
        let (m, a) = pair("m", "a");
        let d = &Tenant::DEFAULT;
        pending.add(d, &m, &a, CountInto::Probe { open_until_ms: 5 }, true);
        pending.add(d, &m, &a, CountInto::Probe { open_until_ms: 9 }, false);
        let taken = take(&pending);
        assert_eq!(taken[0].tallies[0].probes, Some((9, counts(1, 0))));
    }

    /// Issue 41: with 16 pairs allowed, 8 connectors' counts are never lost
    /// (the bound was split into 16 shards of one pair each, and a pair
    /// was evicted with its counts when its own shard was full).
    #[test]
    fn below_the_bound_no_count_is_lost() {
        let pending = Pending::new(16);
        let d = &Tenant::DEFAULT;
        let ids: Vec<_> = (0..8).map(|i| pair("m", &format!("c{i}"))).collect();
        for _ in 0..25 {
            for (m, c) in &ids {
                pending.add(d, m, c, CountInto::Bucket(1), true);
            }
        }
        assert_eq!(pending.len(), 8);
        let calls: u64 = take(&pending)
            .iter()
            .flat_map(|m| &m.tallies)
            .flat_map(|t| &t.buckets)
            .map(|(_, c)| c.calls)
            .sum();
        assert_eq!(calls, 200);
    }

    /// Above the bound the least recently used pairs go, and their counts
    /// with the next flush.
    #[test]
    fn above_the_bound_evicted_counts_are_flushed_not_dropped() {
        let pending = Pending::new(3);
        let d = &Tenant::DEFAULT;
        let ids: Vec<_> = (0..40).map(|i| pair(&format!("m{i}"), "a")).collect();
        for (m, c) in &ids {
            pending.add(d, m, c, CountInto::Bucket(1), false);
        }
        assert!(pending.len() <= 3 + LOCKS, "{}", pending.len());
        let taken = take(&pending);
        let calls: u64 = taken
            .iter()
            .flat_map(|m| &m.tallies)
            .flat_map(|t| &t.buckets)
            .map(|(_, c)| c.calls)
            .sum();
        assert_eq!(calls, 40, "every count is flushed");
        assert_eq!(taken.len(), 40);
    }
}
