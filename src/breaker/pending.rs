//! Tier 1's counts: what RecordOutcome has counted since the last flush,
//! per (tenant, merchant, connector). Two tenants' breakers of the same
//! merchant and connector ids are two breakers, so two tallies.
//!
//! Each flush takes (drains) every tally: a pair is held from its first
//! call in a tick to the tick's flush, no longer. At a platform's 100,000
//! merchants almost every call is the only one of its pair in a tick, so
//! keeping pairs between ticks (the LRU this replaced) saved nothing and
//! cost an eviction per call (bench/README.md, "Platform scale"); a busy
//! pair costs one lookup per call and one allocation per tick.
//!
//! The bound (`MAX_TRACKED`) is on the pairs of one tick, all locks
//! together: below it every call of a pair adds into one tally. Past it, a
//! call of a pair not yet held is kept as a tally of its own, flushed with
//! the rest: counts are never lost, only no longer added up until the next
//! flush, so what past the bound costs is memory per call, at most a
//! tick's calls. The map is split over locks by the pair's hash
//! (`striped`) so that calls on different pairs rarely wait for one lock.

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicUsize, Ordering};

use foldhash::fast::RandomState;
use hashbrown::HashTable;

use crate::domain::breaker::{CountInto, Counts};
use crate::domain::ids::{Connector, MerchantId};
use crate::domain::shards::{SHARDS, Shard, shard_of};
use crate::domain::tenant::Tenant;
use crate::storage::{ConnectorTally, MerchantTallies};
use crate::striped::{PARTS, Striped};

/// Every (tenant, merchant)'s tallies of one flush, by the Redis shard
/// (`domain::shards`) their keys live in.
pub(super) type Taken = Vec<Vec<MerchantTallies>>;

pub(super) struct Pending {
    parts: Striped<Part>,
    hasher: RandomState,
    /// Pairs held in the tables, all parts together.
    tracked: AtomicUsize,
    max_tracked: usize,
}

/// One lock's part of the map.
#[derive(Default)]
struct Part {
    /// The tick's tallies, found by the pair's hash and compared by the
    /// pair, so a hash collision never mixes two pairs.
    tallies: HashTable<Tally>,
    /// Tallies past the bound: each flushed as it is.
    overflow: Vec<Tally>,
}

struct Tally {
    hash: u64,
    tenant: Tenant,
    merchant: MerchantId,
    connector: Connector,
    buckets: Vec<(i64, Counts)>,
    probes: Option<(i64, Counts)>,
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

    /// The pair and its counts, as a flush sends them.
    fn into_taken(self) -> (Tenant, MerchantId, ConnectorTally) {
        let tally = ConnectorTally {
            connector: self.connector.into_string(),
            buckets: self.buckets,
            probes: self.probes,
        };
        (self.tenant, self.merchant, tally)
    }
}

impl Pending {
    /// At most `max_tracked` pairs added up in a tick, all locks together.
    pub fn new(max_tracked: usize) -> Self {
        Self {
            parts: Striped::new(PARTS),
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

    /// Runs `change` on the pair's tally, made if new.
    fn with_tally(
        &self,
        tenant: &Tenant,
        merchant: &MerchantId,
        connector: &Connector,
        change: impl FnOnce(&mut Tally),
    ) {
        // The tenant's id goes in borrowed: no allocation, and the default
        // tenant adds one discriminant to the hash.
        let hash = self
            .hasher
            .hash_one((tenant.id(), merchant.as_str(), connector.as_str()));
        let mut part = self.parts.lock(hash);
        let held = part.tallies.find_mut(hash, |tally| {
            tally.merchant == *merchant && tally.connector == *connector && tally.tenant == *tenant
        });
        if let Some(tally) = held {
            return change(tally);
        }
        let mut new = Tally {
            hash,
            tenant: tenant.clone(),
            merchant: merchant.clone(),
            connector: connector.clone(),
            buckets: Vec::new(),
            probes: None,
        };
        change(&mut new);
        if self.tracked.fetch_add(1, Ordering::Relaxed) < self.max_tracked {
            part.tallies.insert_unique(hash, new, |tally| tally.hash);
        } else {
            self.tracked.fetch_sub(1, Ordering::Relaxed);
            part.overflow.push(new);
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
    /// The tables keep their room for the next tick.
    pub fn take(&self) -> Taken {
        let mut tallies: Vec<(Tenant, MerchantId, ConnectorTally)> = Vec::new();
        for mut part in self.parts.each() {
            let Part {
                tallies: held,
                overflow,
            } = &mut *part;
            self.tracked.fetch_sub(held.len(), Ordering::Relaxed);
            tallies.extend(held.drain().map(Tally::into_taken));
            tallies.extend(overflow.drain(..).map(Tally::into_taken));
        }
        group(tallies)
    }

    /// How many pairs are held now (overflow included).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.parts
            .each()
            .map(|part| part.tallies.len() + part.overflow.len())
            .sum()
    }
}

fn add_counts(into: &mut Counts, counts: Counts) {
    into.calls = into.calls.saturating_add(counts.calls);
    into.failures = into.failures.saturating_add(counts.failures);
}

/// Tallies grouped by (tenant, merchant), in their Redis shards. A
/// merchant's connectors meet by sorting on a hash of the (tenant,
/// merchant), the ids breaking ties: a hash per tally, where sorting on the
/// ids compared strings at every step (a tenth of a tick's CPU at 100,000
/// merchants).
fn group(tallies: Vec<(Tenant, MerchantId, ConnectorTally)>) -> Taken {
    let hasher = foldhash::fast::FixedState::default();
    let mut keyed: Vec<_> = tallies
        .into_iter()
        .map(|tally| (hasher.hash_one((tally.0.id(), tally.1.as_str())), tally))
        .collect();
    keyed.sort_unstable_by(|(x, a), (y, b)| {
        x.cmp(y)
            .then_with(|| (&a.0, a.1.as_str()).cmp(&(&b.0, b.1.as_str())))
    });
    let mut taken: Taken = (0..SHARDS).map(|_| Vec::new()).collect();
    let mut last: Option<Shard> = None;
    for (_, (tenant, merchant, tally)) in keyed {
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
        assert_eq!(pending.len(), 0, "a flush takes every pair");
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

    /// Above the bound a new pair's calls are kept one by one, and flushed
    /// with the rest; the bound holds again after the flush.
    #[test]
    fn above_the_bound_counts_are_flushed_not_dropped() {
        let pending = Pending::new(3);
        let d = &Tenant::DEFAULT;
        let ids: Vec<_> = (0..40).map(|i| pair(&format!("m{i}"), "a")).collect();
        for (m, c) in &ids {
            pending.add(d, m, c, CountInto::Bucket(1), false);
        }
        let held: usize = pending.parts.each().map(|part| part.tallies.len()).sum();
        assert_eq!(held, 3, "the bound");
        assert_eq!(pending.len(), 40);
        let taken = take(&pending);
        let calls: u64 = taken
            .iter()
            .flat_map(|m| &m.tallies)
            .flat_map(|t| &t.buckets)
            .map(|(_, c)| c.calls)
            .sum();
        assert_eq!(calls, 40, "every count is flushed");
        assert_eq!(taken.len(), 40);
        assert_eq!(pending.tracked.load(Ordering::Relaxed), 0);
        for (m, c) in &ids[..3] {
            pending.add(d, m, c, CountInto::Bucket(1), false);
            pending.add(d, m, c, CountInto::Bucket(1), false);
        }
        assert_eq!(pending.len(), 3, "below the bound again, calls add up");
    }
}
