//! Tier 1's counts: what RecordOutcome has counted since the last flush,
//! per (tenant, merchant, connector), bounded, least recently used first
//! out. Two tenants' breakers of the same merchant and connector ids are
//! two breakers, so two tallies.
//!
//! A pair stays tracked after its counts are flushed, so a busy pair costs
//! one lookup per call and no allocation; the bound (`MAX_TRACKED`) evicts
//! the pair called least recently, losing its unflushed counts, which can
//! only happen when more pairs than the bound are called within one tick.
//! The map is sharded by the pair's hash so that calls on different pairs
//! rarely wait for one lock.

use std::hash::BuildHasher;

use foldhash::fast::RandomState;
use std::num::NonZeroUsize;
use std::sync::{Mutex, PoisonError};

use lru::LruCache;

use crate::domain::breaker::{CountInto, Counts};
use crate::domain::ids::{Connector, MerchantId};
use crate::domain::tenant::Tenant;
use crate::storage::ConnectorTally;

/// More shards than cores, so two calls rarely meet on one lock.
const SHARDS: usize = 16;

/// One (tenant, merchant)'s tallies, taken for one flush.
pub(super) type Taken = (Tenant, MerchantId, Vec<ConnectorTally>);

pub(super) struct Pending {
    shards: Box<[Mutex<Shard>]>,
    hasher: RandomState,
}

struct Shard {
    /// Keyed by the pair's hash; the pair itself is kept in the value and
    /// compared, so a hash collision replaces, never mixes, two pairs.
    tracked: LruCache<u64, Tally>,
    /// The pairs with counts since the last flush.
    dirty: Vec<u64>,
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
}

impl Pending {
    /// At most `max_tracked` pairs in all: the shards share the bound.
    pub fn new(max_tracked: usize) -> Self {
        let shards = SHARDS.min(max_tracked).max(1);
        let per_shard = NonZeroUsize::new(max_tracked / shards).unwrap_or(NonZeroUsize::MIN);
        Self {
            shards: (0..shards)
                .map(|_| {
                    Mutex::new(Shard {
                        tracked: LruCache::new(per_shard),
                        dirty: Vec::new(),
                    })
                })
                .collect(),
            hasher: RandomState::default(),
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
        // The tenant's id goes in borrowed: no allocation, and the default
        // tenant adds one discriminant to the hash.
        let key = self
            .hasher
            .hash_one((tenant.id(), merchant.as_str(), connector.as_str()));
        let shard = &self.shards[usize::try_from(key % self.shards.len() as u64).unwrap_or(0)];
        let mut shard = shard.lock().unwrap_or_else(PoisonError::into_inner);
        let tally = match shard.tracked.get_mut(&key) {
            Some(tally)
                if tally.merchant == *merchant
                    && tally.connector == *connector
                    && tally.tenant == *tenant =>
            {
                tally
            }
            _ => {
                shard.tracked.put(
                    key,
                    Tally {
                        tenant: tenant.clone(),
                        merchant: merchant.clone(),
                        connector: connector.clone(),
                        buckets: Vec::new(),
                        probes: None,
                        dirty: false,
                    },
                );
                match shard.tracked.get_mut(&key) {
                    Some(tally) => tally,
                    None => return,
                }
            }
        };
        tally.add(into, failed);
        if !tally.dirty {
            tally.dirty = true;
            shard.dirty.push(key);
        }
    }

    /// Takes every count since the last call, grouped by (tenant,
    /// merchant): one breaker flush each.
    pub fn take(&self) -> Vec<Taken> {
        let mut by_merchant: Vec<Taken> = Vec::new();
        for shard in &*self.shards {
            let mut shard = shard.lock().unwrap_or_else(PoisonError::into_inner);
            let Shard { tracked, dirty } = &mut *shard;
            for key in dirty.drain(..) {
                // Evicted since it was counted: its counts went with it.
                let Some(tally) = tracked.peek_mut(&key) else {
                    continue;
                };
                tally.dirty = false;
                let flushed = ConnectorTally {
                    connector: tally.connector.as_str().to_owned(),
                    buckets: std::mem::take(&mut tally.buckets),
                    probes: tally.probes.take(),
                };
                match by_merchant
                    .iter_mut()
                    .find(|(t, m, _)| *m == tally.merchant && *t == tally.tenant)
                {
                    Some((_, _, tallies)) => tallies.push(flushed),
                    None => by_merchant.push((
                        tally.tenant.clone(),
                        tally.merchant.clone(),
                        vec![flushed],
                    )),
                }
            }
        }
        by_merchant
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

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(merchant: &str, connector: &str) -> (MerchantId, Connector) {
        (
            MerchantId::parse(merchant).unwrap(),
            Connector::parse(connector).unwrap(),
        )
    }

    #[test]
    fn counts_are_taken_once_grouped_by_merchant() {
        let pending = Pending::new(100);
        let (m1, a) = pair("m1", "a");
        let (m2, b) = pair("m2", "b");
        pending.add(&Tenant::DEFAULT, &m1, &a, CountInto::Bucket(7), true);
        pending.add(&Tenant::DEFAULT, &m1, &a, CountInto::Bucket(7), false);
        pending.add(&Tenant::DEFAULT, &m1, &a, CountInto::Bucket(8), true);
        pending.add(
            &Tenant::DEFAULT,
            &m2,
            &b,
            CountInto::Probe { open_until_ms: 5 },
            true,
        );
        pending.add(&Tenant::DEFAULT, &m2, &b, CountInto::Nowhere, true);
        let mut taken = pending.take();
        taken.sort_by(|x, y| x.1.as_str().cmp(y.1.as_str()));
        assert_eq!(taken.len(), 2);
        assert_eq!(
            taken[0].2[0].buckets,
            vec![
                (
                    7,
                    Counts {
                        calls: 2,
                        failures: 1
                    }
                ),
                (
                    8,
                    Counts {
                        calls: 1,
                        failures: 1
                    }
                )
            ]
        );
        assert_eq!(
            taken[1].2[0].probes,
            Some((
                5,
                Counts {
                    calls: 1,
                    failures: 1
                }
            ))
        );
        assert!(pending.take().is_empty(), "nothing is flushed twice");
        assert_eq!(pending.len(), 2, "the pairs stay tracked");
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
        let mut taken = pending.take();
        taken.sort_by(|x, y| x.0.cmp(&y.0));
        let tenants: Vec<&Tenant> = taken.iter().map(|(t, _, _)| t).collect();
        assert_eq!(tenants, [&Tenant::DEFAULT, &acme, &globex]);
        for (_, merchant, tallies) in &taken {
            assert_eq!(*merchant, m);
            assert_eq!(tallies.len(), 1);
            assert_eq!(tallies[0].connector, "a");
        }
        let counts = |calls, failures| Counts { calls, failures };
        assert_eq!(taken[0].2[0].buckets, vec![(7, counts(1, 1))]);
        assert_eq!(taken[1].2[0].buckets, vec![(7, counts(2, 0))]);
        assert!(taken[2].2[0].buckets.is_empty());
        assert_eq!(taken[2].2[0].probes, Some((5, counts(1, 1))));
    }

    #[test]
    fn probes_of_an_older_half_open_are_dropped() {
        let pending = Pending::new(100);
        let (m, a) = pair("m", "a");
        pending.add(
            &Tenant::DEFAULT,
            &m,
            &a,
            CountInto::Probe { open_until_ms: 5 },
            true,
        );
        pending.add(
            &Tenant::DEFAULT,
            &m,
            &a,
            CountInto::Probe { open_until_ms: 9 },
            false,
        );
        let taken = pending.take();
        assert_eq!(
            taken[0].2[0].probes,
            Some((
                9,
                Counts {
                    calls: 1,
                    failures: 0
                }
            ))
        );
    }

    #[test]
    fn at_most_max_tracked_pairs_least_recently_used_out() {
        let pending = Pending::new(3);
        let ids: Vec<_> = (0..5).map(|i| pair("m", &format!("c{i}"))).collect();
        for (m, c) in &ids {
            pending.add(&Tenant::DEFAULT, m, c, CountInto::Bucket(1), false);
        }
        assert!(pending.len() <= 3);
        let taken = pending.take();
        let flushed: usize = taken.iter().map(|(_, _, t)| t.len()).sum();
        assert_eq!(flushed, pending.len());
    }
}
