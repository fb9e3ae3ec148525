//! Tier 1's states: this instance's copy of the breaker indexes, every
//! breaker that is tripped (OPEN, or HALF-OPEN until it decides) or has an
//! override, as Redis last answered it, per (tenant, merchant, connector).
//!
//! Readers (every GetPin and RecordOutcome) load the current snapshot
//! without a lock; the cycle replaces it after each tick's polls (the
//! shards whose poll failed keep what they had), and this instance's own
//! transitions and overrides update it at once, copying it (they are
//! rare), and hold over a poll that read Redis before them
//! ([`super::own_changes`]). A breaker missing from the snapshot is CLOSED.
//!
//! Fail-open is per shard: each entry names the Redis shard its index
//! lives in, and is acted on only while that shard was read within
//! OPEN_FOR. A shard Redis cannot answer for (its node frozen, say) has its
//! breakers read as CLOSED after OPEN_FOR, whatever the other shards do.
//!
//! The bound on what one process keeps (`MAX_TRACKED`) never makes a
//! breaker that is OPEN or overridden read as CLOSED: those are always
//! kept. Past the bound, HALF-OPEN breakers are left out (they then read
//! as CLOSED here, the side the breaker fails to), and the cycle says so.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use arc_swap::{ArcSwap, Guard};

use super::own_changes::{Change, OwnChanges};
use crate::domain::breaker::{BreakerSettings, OverrideUntil, Tripped};
use crate::domain::ids::MerchantId;
use crate::domain::shards::{SHARDS, Shard, shard_of};
use crate::domain::tenant::Tenant;
use crate::storage::IndexEntry;

/// What the index says of one breaker, and the shard it is kept in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Entry {
    pub tripped: Option<Tripped>,
    pub over: Option<OverrideUntil>,
    shard: Shard,
}

impl Entry {
    fn apply(&mut self, change: Change) {
        match change {
            Change::Tripped(tripped) => self.tripped = tripped,
            Change::Override(over) => self.over = over,
        }
    }

    fn is_empty(&self) -> bool {
        self.tripped.is_none() && self.over.is_none()
    }

    /// OPEN or overridden at `now_ms`: what the bound never drops.
    fn must_keep(&self, now_ms: i64) -> bool {
        self.over.is_some_and(|over| over.active_at(now_ms))
            || self.tripped.is_some_and(|t| now_ms < t.open_until_ms)
    }
}

/// One tenant's breakers, by merchant then connector, so a lookup by two
/// borrowed strings allocates nothing.
type ByMerchant = HashMap<Box<str>, HashMap<Box<str>, Entry>>;

/// What [`Snapshot::entries`] names the default tenant's breakers with.
static DEFAULT_TENANT: Tenant = Tenant::DEFAULT;

/// One poll's answer. The default tenant's breakers are kept apart from
/// the named tenants' so that its lookup (nearly every call, for a service
/// without tenants) costs what it did before tenants: no tenant is hashed.
#[derive(Debug, Default, Clone)]
pub(super) struct Snapshot {
    default: ByMerchant,
    /// Named tenants only; looked up by a borrowed `&Tenant`.
    tenants: HashMap<Tenant, ByMerchant>,
    /// When Redis last answered each shard's poll (Unix ms; 0: never, so
    /// nothing is known and its breakers are CLOSED).
    read_at_ms: [i64; SHARDS],
    len: usize,
}

impl Snapshot {
    pub fn entry(&self, tenant: &Tenant, merchant: &str, connector: &str) -> Option<&Entry> {
        if self.is_empty() {
            return None;
        }
        let by_merchant = match tenant.id() {
            None => &self.default,
            Some(_) => self.tenants.get(tenant)?,
        };
        by_merchant.get(merchant)?.get(connector)
    }

    /// Whether `entry`'s state is recent enough to act on: fail-open holds
    /// the last known state for at most OPEN_FOR after the last successful
    /// read of its shard.
    pub fn fresh(&self, entry: &Entry, now_ms: i64, settings: &BreakerSettings) -> bool {
        let read_at = self
            .read_at_ms
            .get(entry.shard.index())
            .copied()
            .unwrap_or(0);
        read_at > 0 && now_ms.saturating_sub(read_at) <= settings.open_for_ms()
    }

    /// How many shards have not been read within OPEN_FOR.
    pub fn stale_shards(&self, now_ms: i64, settings: &BreakerSettings) -> usize {
        self.read_at_ms
            .iter()
            .filter(|&&at| at == 0 || now_ms.saturating_sub(at) > settings.open_for_ms())
            .count()
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.len
    }

    /// No breaker is tripped or overridden: the common case, which the hot
    /// path answers without hashing a thing.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Every breaker in the snapshot.
    pub fn entries(&self) -> impl Iterator<Item = (&Tenant, &str, &str, &Entry)> {
        std::iter::once((&DEFAULT_TENANT, &self.default))
            .chain(&self.tenants)
            .flat_map(|(tenant, by_merchant)| {
                by_merchant.iter().flat_map(move |(merchant, connectors)| {
                    connectors
                        .iter()
                        .map(move |(connector, entry)| (tenant, &**merchant, &**connector, entry))
                })
            })
    }

    fn insert(&mut self, tenant: &Tenant, merchant: &str, connector: &str, entry: Entry) {
        let by_merchant = match tenant.id() {
            None => &mut self.default,
            Some(_) => self.tenants.entry(tenant.clone()).or_default(),
        };
        let connectors = by_merchant.entry(merchant.into()).or_default();
        if connectors.insert(connector.into(), entry).is_none() {
            self.len += 1;
        }
    }

    /// Applies `change` to one breaker's entry; an entry left empty is
    /// removed.
    fn apply(&mut self, tenant: &Tenant, merchant: &str, connector: &str, change: Change) {
        let mut entry = self
            .entry(tenant, merchant, connector)
            .copied()
            .unwrap_or_else(|| Entry {
                shard: MerchantId::parse(merchant)
                    .map_or_else(|_| Shard::default(), |m| shard_of(tenant, &m)),
                ..Entry::default()
            });
        entry.apply(change);
        if !entry.is_empty() {
            self.insert(tenant, merchant, connector, entry);
            return;
        }
        let by_merchant = match tenant.id() {
            None => Some(&mut self.default),
            Some(_) => self.tenants.get_mut(tenant),
        };
        let Some(by_merchant) = by_merchant else {
            return;
        };
        let Some(connectors) = by_merchant.get_mut(merchant) else {
            return;
        };
        if connectors.remove(connector).is_some() {
            self.len -= 1;
        }
        if connectors.is_empty() {
            by_merchant.remove(merchant);
        }
    }
}

/// The current snapshot, swapped whole.
#[derive(Default)]
pub(super) struct View {
    current: ArcSwap<Snapshot>,
    /// This instance's changes a poll in flight may lack. Its lock also
    /// orders every write of `current` (a poll's replace, an own change),
    /// so neither undoes the other.
    own: Mutex<OwnChanges>,
}

impl View {
    pub fn load(&self) -> Guard<Arc<Snapshot>> {
        self.current.load()
    }

    /// What a poll that starts now passes to [`View::replace`]: every own
    /// change up to it is in Redis before the poll reads.
    pub fn own_changes_seen(&self) -> u64 {
        self.own
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .last()
    }

    /// Replaces the view with a tick's polls, read at `read_at_ms` by
    /// polls that began after own change `seen`: each polled shard's
    /// entries are its answer, the other shards keep theirs; the own
    /// changes since are applied over it. Every OPEN or overridden breaker
    /// is kept; HALF-OPEN ones while the view holds fewer than `max`
    /// breakers (the rest read as CLOSED here). How many were left out.
    pub fn replace(
        &self,
        polls: Vec<(Shard, Vec<IndexEntry>)>,
        read_at_ms: i64,
        max: usize,
        seen: u64,
    ) -> usize {
        let mut own = self.own.lock().unwrap_or_else(PoisonError::into_inner);
        let current = self.current.load();
        let mut polled = [false; SHARDS];
        for (shard, _) in &polls {
            polled[shard.index()] = true;
        }
        let mut snapshot = Snapshot {
            read_at_ms: current.read_at_ms,
            ..Snapshot::default()
        };
        for (tenant, merchant, connector, entry) in current.entries() {
            if !polled[entry.shard.index()] {
                snapshot.insert(tenant, merchant, connector, *entry);
            }
        }
        let mut later = Vec::new();
        for (shard, entries) in polls {
            snapshot.read_at_ms[shard.index()] = read_at_ms;
            for entry in entries {
                let kept = Entry {
                    tripped: entry.tripped,
                    over: entry.over,
                    shard,
                };
                if kept.must_keep(read_at_ms) {
                    snapshot.insert(&entry.tenant, &entry.merchant, &entry.connector, kept);
                } else {
                    later.push((entry, kept));
                }
            }
        }
        let mut dropped = 0;
        for (entry, kept) in later {
            if snapshot.len < max {
                snapshot.insert(&entry.tenant, &entry.merchant, &entry.connector, kept);
            } else {
                dropped += 1;
            }
        }
        for own in own.after(seen) {
            snapshot.apply(&own.tenant, &own.merchant, &own.connector, own.change);
        }
        self.current.store(Arc::new(snapshot));
        dropped
    }

    /// Changes one breaker's entry now (this instance's own transition or
    /// override, already written to Redis), keeping the rest; an entry
    /// left empty is removed. The change holds over the polls in flight;
    /// at most `max` such changes are remembered for them.
    pub fn update(
        &self,
        tenant: &Tenant,
        merchant: &str,
        connector: &str,
        change: Change,
        max: usize,
    ) {
        let mut own = self.own.lock().unwrap_or_else(PoisonError::into_inner);
        own.record(tenant, merchant, connector, change, max);
        let mut next = Snapshot::clone(&self.current.load());
        next.apply(tenant, merchant, connector, change);
        self.current.store(Arc::new(next));
    }
}

#[cfg(test)]
mod tests;
