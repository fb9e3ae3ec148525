//! Tier 1's windows: every CLOSED breaker's calls over the window, as this
//! instance folds them from the shards' counts logs, where every instance
//! appends its counts each tick (`storage`'s breaker_flush.lua). Every
//! instance reads every append once, so each holds the same windows, a
//! tick apart, and any of them may decide a trip (the transition script
//! lets one apply it).
//!
//! Why in memory (issue 41): a window kept in Redis cost a script's
//! redis.call per merchant per tick, more Redis than the call itself at
//! 100,000 merchants; the log costs Redis bytes, not calls.
//!
//! Bounded by `MAX_TRACKED` pairs: past it, the pairs folded into least
//! recently go. Each shard's read offsets live here too, by bucket
//! period: a starting instance reads each shard's log from the start of
//! the window, so its windows are whole from its first tick.

use std::collections::BTreeMap;
use std::hash::BuildHasher;
use std::sync::{Mutex, PoisonError};

use foldhash::fast::RandomState;
use hashbrown::HashTable;

use crate::domain::breaker::{BreakerSettings, Counts, may_trip, trips_at};
use crate::domain::shards::{SHARDS, Shard};
use crate::domain::tenant::Tenant;
use crate::storage::LogRecord;

/// One breaker's window, as folded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Window {
    /// Per bucket with calls, (bucket, counts), in no order.
    pub ring: Vec<(i64, Counts)>,
    /// The tick it was last folded into, for the bound.
    folded_at: i64,
    /// The tick a fold last returned it to be judged.
    judged_at: i64,
}

impl Window {
    /// The calls of the buckets that count at `now_ms`.
    pub fn counts(&self, now_ms: i64, s: &BreakerSettings) -> Counts {
        s.window_counts(
            self.ring.iter().map(|(bucket, counts)| (bucket, counts)),
            now_ms,
        )
    }

    /// Drops the buckets that will never count again.
    fn age(&mut self, now_ms: i64, s: &BreakerSettings) {
        self.ring
            .retain(|(bucket, _)| s.keeps_bucket(*bucket, now_ms));
    }
}

/// A merchant's window of `connector`.
fn find<'a>(connectors: &'a [(String, Window)], connector: &str) -> Option<&'a Window> {
    connectors
        .iter()
        .find(|(c, _)| c == connector)
        .map(|(_, window)| window)
}

/// A breaker whose window a fold changed: (tenant, merchant, connector).
pub(super) type Folded = (Tenant, String, String);

/// A (tenant, merchant)'s windows, by connector. (A merchant's few
/// connectors in a Vec: a map's node per merchant would cost more than the
/// windows.)
struct Merchant {
    hash: u64,
    tenant: Tenant,
    merchant: Box<str>,
    connectors: Vec<(String, Window)>,
}

#[derive(Default)]
struct Inner {
    /// Every merchant's windows, found by one hash of the (tenant,
    /// merchant) and compared by the ids (two nested maps cost a lookup
    /// each, per record folded).
    windows: HashTable<Merchant>,
    hasher: RandomState,
    pairs: usize,
    /// Per shard: the read offset of each log period, and the last period
    /// a read reached.
    cursors: Vec<(BTreeMap<i64, u64>, Option<i64>)>,
    /// The bucket of the last prune.
    pruned: Option<i64>,
}

impl Merchant {
    fn is(&self, tenant: &Tenant, merchant: &str) -> bool {
        &*self.merchant == merchant && self.tenant == *tenant
    }
}

impl Inner {
    fn hash(&self, tenant: &Tenant, merchant: &str) -> u64 {
        self.hasher.hash_one((tenant.id(), merchant))
    }

    /// The merchant's windows, if any are held.
    fn merchant(&self, tenant: &Tenant, merchant: &str) -> Option<&[(String, Window)]> {
        let hash = self.hash(tenant, merchant);
        self.windows
            .find(hash, |held| held.is(tenant, merchant))
            .map(|held| held.connectors.as_slice())
    }

    /// The merchant's windows, made (empty) if none is held.
    fn merchant_mut(&mut self, tenant: &Tenant, merchant: &str) -> &mut Vec<(String, Window)> {
        let hash = self.hash(tenant, merchant);
        &mut self
            .windows
            .entry(hash, |held| held.is(tenant, merchant), |held| held.hash)
            .or_insert_with(|| Merchant {
                hash,
                tenant: tenant.clone(),
                merchant: merchant.into(),
                connectors: Vec::new(),
            })
            .into_mut()
            .connectors
    }

    /// Drops the merchants left with no window.
    fn drop_empty(&mut self) {
        self.windows.retain(|held| !held.connectors.is_empty());
    }
}

pub(super) struct Windows {
    inner: Mutex<Inner>,
    max_tracked: usize,
}

impl Windows {
    pub fn new(max_tracked: usize) -> Self {
        let inner = Inner {
            cursors: (0..SHARDS).map(|_| (BTreeMap::new(), None)).collect(),
            ..Inner::default()
        };
        Self {
            inner: Mutex::new(inner),
            max_tracked,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The log periods to read from `shard` at `now_ms`, each with its
    /// offset: every period since the last read reached (the whole window's
    /// before the first), and the next one (a clock ahead of this one).
    pub fn reads(&self, shard: Shard, now_ms: i64, s: &BreakerSettings) -> Vec<(i64, u64)> {
        let inner = self.lock();
        let (offsets, last) = &inner.cursors[shard.index()];
        let this = s.bucket_of(now_ms);
        let oldest = this - s.ring_len() - 1;
        let from = last
            .map_or(oldest, |last| (last - 1).max(oldest))
            .min(this - 1);
        (from..=this + 1)
            .map(|period| (period, offsets.get(&period).copied().unwrap_or(0)))
            .collect()
    }

    /// Moves `shard`'s offsets past what a read of `reads` consumed, and
    /// forgets the periods that can no longer hold a counting call.
    pub fn advance(
        &self,
        shard: Shard,
        reads: &[(i64, u64)],
        consumed: &[u64],
        now_ms: i64,
        s: &BreakerSettings,
    ) {
        let mut inner = self.lock();
        let (offsets, last) = &mut inner.cursors[shard.index()];
        for (&(period, from), &more) in reads.iter().zip(consumed) {
            offsets.insert(period, from + more);
        }
        let this = s.bucket_of(now_ms);
        offsets.retain(|period, _| *period >= this - s.ring_len() - 1);
        *last = Some(this);
    }

    /// Adds `records` into their windows, but for breakers `skip` says are
    /// tripped (their calls count nowhere, and their window is cleared).
    /// Returns every breaker whose window changed and may trip, once.
    pub fn fold(
        &self,
        records: Vec<LogRecord>,
        now_ms: i64,
        s: &BreakerSettings,
        mut skip: impl FnMut(&Tenant, &str, &str) -> bool,
    ) -> Vec<Folded> {
        let mut changed = Vec::new();
        let mut inner = self.lock();
        for record in records {
            if !s.keeps_bucket(record.bucket, now_ms) {
                continue;
            }
            if skip(&record.tenant, &record.merchant, &record.connector) {
                continue;
            }
            let LogRecord {
                tenant,
                merchant,
                connector,
                bucket,
                counts,
            } = record;
            // Looked up before any key is made: a held window costs no
            // allocation.
            let connectors = inner.merchant_mut(&tenant, &merchant);
            let (at, added) = match connectors.iter().position(|(c, _)| *c == connector) {
                Some(at) => (at, false),
                None => {
                    connectors.push((connector.clone(), Window::default()));
                    (connectors.len() - 1, true)
                }
            };
            let window = &mut connectors[at].1;
            match window.ring.iter_mut().find(|(b, _)| *b == bucket) {
                Some((_, held)) => *held += counts,
                None => window.ring.push((bucket, counts)),
            }
            window.folded_at = now_ms;
            // Only a window that may trip is judged (`may_trip`): at a
            // platform's sparse merchants, almost none.
            if window.judged_at != now_ms && may_trip(window.counts(now_ms, s), s) {
                window.judged_at = now_ms;
                changed.push((tenant, merchant, connector));
            }
            if added {
                inner.pairs += 1;
            }
        }
        drop(inner);
        changed
    }

    /// The breaker's window's counts at `now_ms`, and when it would trip
    /// as its old calls age out (`domain::breaker::trips_at`), if a
    /// window is held.
    pub fn judge(
        &self,
        tenant: &Tenant,
        merchant: &str,
        connector: &str,
        now_ms: i64,
        s: &BreakerSettings,
    ) -> Option<(Counts, Option<i64>)> {
        let inner = self.lock();
        let window = find(inner.merchant(tenant, merchant)?, connector)?;
        let counts = window.counts(now_ms, s);
        // Only failures trip, and a window of one bucket that ages is
        // empty: most windows need no look ahead (and its allocation).
        let later = if counts.failures == 0 || window.ring.len() < 2 {
            None
        } else {
            trips_at(&window.ring, now_ms, s)
        };
        Some((counts, later))
    }

    /// The breaker's window as it stands, if one is held.
    #[cfg(test)]
    pub fn window(&self, tenant: &Tenant, merchant: &str, connector: &str) -> Option<Window> {
        let inner = self.lock();
        find(inner.merchant(tenant, merchant)?, connector).cloned()
    }

    /// Every window of (`tenant`, `merchant`) with calls that count at
    /// `now_ms`, by connector.
    pub fn of_merchant(
        &self,
        tenant: &Tenant,
        merchant: &str,
        now_ms: i64,
        s: &BreakerSettings,
    ) -> Vec<(String, Counts)> {
        let inner = self.lock();
        let Some(connectors) = inner.merchant(tenant, merchant) else {
            return Vec::new();
        };
        connectors
            .iter()
            .map(|(connector, window)| (connector.clone(), window.counts(now_ms, s)))
            .filter(|(_, counts)| counts.calls > 0)
            .collect()
    }

    /// Forgets a breaker's window: it tripped, so its calls so far no
    /// longer count.
    pub fn clear(&self, tenant: &Tenant, merchant: &str, connector: &str) {
        let mut inner = self.lock();
        let hash = inner.hash(tenant, merchant);
        let Some(held) = inner
            .windows
            .find_mut(hash, |held| held.is(tenant, merchant))
        else {
            return;
        };
        let before = held.connectors.len();
        held.connectors.retain(|(c, _)| c != connector);
        let removed = before - held.connectors.len();
        inner.pairs -= removed;
    }

    /// Ages every window, drops the empty ones, and past the bound the
    /// ones folded into least recently. It walks every window, so only
    /// once a bucket (a window ages by buckets), or when past the bound.
    pub fn prune(&self, now_ms: i64, s: &BreakerSettings) {
        let mut inner = self.lock();
        let this = s.bucket_of(now_ms);
        if inner.pruned == Some(this) && inner.pairs <= self.max_tracked {
            return;
        }
        inner.pruned = Some(this);
        let mut kept = 0;
        let mut ages = Vec::new();
        for held in &mut inner.windows {
            held.connectors.retain_mut(|(_, window)| {
                window.age(now_ms, s);
                !window.ring.is_empty()
            });
            kept += held.connectors.len();
            ages.extend(held.connectors.iter().map(|(_, w)| w.folded_at));
        }
        inner.drop_empty();
        inner.pairs = kept;
        if kept <= self.max_tracked {
            return;
        }
        // The windows folded into before `cut` go, then as many folded
        // into at `cut` as the bound still needs.
        ages.sort_unstable();
        let cut = ages[kept - self.max_tracked - 1];
        let mut at_cut = kept - self.max_tracked - ages.partition_point(|&age| age < cut);
        let mut left = 0;
        for held in &mut inner.windows {
            held.connectors.retain(|(_, window)| {
                if window.folded_at < cut {
                    return false;
                }
                if window.folded_at == cut && at_cut > 0 {
                    at_cut -= 1;
                    return false;
                }
                true
            });
            left += held.connectors.len();
        }
        inner.drop_empty();
        inner.pairs = left;
    }

    /// How many breakers' windows are held.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.lock().pairs
    }
}

#[cfg(test)]
mod tests;
