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
mod tests {
    use super::*;

    fn acme() -> Tenant {
        Tenant::parse("acme").unwrap()
    }

    fn index_of(tenant: &Tenant, merchant: &str, connector: &str, until: i64) -> IndexEntry {
        IndexEntry {
            tenant: tenant.clone(),
            merchant: merchant.into(),
            connector: connector.into(),
            tripped: Some(Tripped {
                open_until_ms: until,
                calls: 20,
                failures: 10,
            }),
            over: None,
        }
    }

    /// A whole tick's polls: every shard answered, with its entries.
    fn polls(entries: Vec<IndexEntry>) -> Vec<(Shard, Vec<IndexEntry>)> {
        let mut polls: Vec<(Shard, Vec<IndexEntry>)> =
            Shard::all().map(|shard| (shard, Vec::new())).collect();
        for entry in entries {
            let m = MerchantId::parse(&entry.merchant).unwrap();
            polls[shard_of(&entry.tenant, &m).index()].1.push(entry);
        }
        polls
    }

    fn index(merchant: &str, connector: &str, until: i64) -> IndexEntry {
        index_of(&Tenant::DEFAULT, merchant, connector, until)
    }

    fn until(snapshot: &Snapshot, tenant: &Tenant, merchant: &str, connector: &str) -> i64 {
        snapshot
            .entry(tenant, merchant, connector)
            .unwrap()
            .tripped
            .unwrap()
            .open_until_ms
    }

    #[test]
    fn a_poll_replaces_the_view_within_the_bound() {
        let view = View::default();
        let dropped = view.replace(
            polls(vec![
                index("m1", "a", 5),
                index("m1", "b", 6),
                index("m2", "a", 7),
            ]),
            1_000,
            2,
            0,
        );
        assert_eq!(dropped, 1);
        let snapshot = view.load();
        assert_eq!(snapshot.len(), 2);
        assert_eq!(until(&snapshot, &Tenant::DEFAULT, "m1", "a"), 5);
        assert!(snapshot.entry(&Tenant::DEFAULT, "m2", "a").is_none());
        view.replace(polls(vec![index("m2", "a", 7)]), 2_000, 10, 0);
        assert!(view.load().entry(&Tenant::DEFAULT, "m1", "a").is_none());
    }

    #[test]
    fn an_update_changes_one_entry_and_an_empty_one_goes() {
        let view = View::default();
        view.replace(
            polls(vec![index("m1", "a", 5), index("m1", "b", 6)]),
            1_000,
            10,
            0,
        );
        view.update(&Tenant::DEFAULT, "m1", "a", Change::Tripped(None), 10);
        let snapshot = view.load();
        assert!(snapshot.entry(&Tenant::DEFAULT, "m1", "a").is_none());
        assert!(snapshot.entry(&Tenant::DEFAULT, "m1", "b").is_some());
        assert_eq!(snapshot.len(), 1);
    }

    #[test]
    fn two_tenants_with_the_same_merchant_and_connector_are_two_breakers() {
        let (acme, globex) = (acme(), Tenant::parse("globex").unwrap());
        let view = View::default();
        view.replace(
            polls(vec![index("m1", "a", 5), index_of(&acme, "m1", "a", 6)]),
            1_000,
            10,
            0,
        );
        let snapshot = view.load();
        assert_eq!(snapshot.len(), 2);
        assert_eq!(until(&snapshot, &Tenant::DEFAULT, "m1", "a"), 5);
        assert_eq!(until(&snapshot, &acme, "m1", "a"), 6);
        assert!(snapshot.entry(&globex, "m1", "a").is_none());
        let mut seen: Vec<_> = snapshot
            .entries()
            .map(|(t, m, c, _)| (t.clone(), m.to_owned(), c.to_owned()))
            .collect();
        seen.sort();
        assert_eq!(
            seen,
            [
                (Tenant::DEFAULT, "m1".to_owned(), "a".to_owned()),
                (acme.clone(), "m1".to_owned(), "a".to_owned()),
            ]
        );

        // One tenant's update leaves the other's breaker alone.
        view.update(&acme, "m1", "a", Change::Tripped(None), 10);
        let tripped = Tripped {
            open_until_ms: 9,
            calls: 1,
            failures: 1,
        };
        view.update(&globex, "m1", "a", Change::Tripped(Some(tripped)), 10);
        let snapshot = view.load();
        assert!(snapshot.entry(&acme, "m1", "a").is_none());
        assert_eq!(until(&snapshot, &Tenant::DEFAULT, "m1", "a"), 5);
        assert_eq!(until(&snapshot, &globex, "m1", "a"), 9);
        assert_eq!(snapshot.len(), 2);
    }

    #[test]
    fn an_own_change_holds_over_a_poll_that_read_redis_before_it() {
        use crate::domain::breaker::Override;
        let view = View::default();
        let forced = OverrideUntil {
            kind: Override::ForceClosed,
            until_ms: 9_000,
        };
        // The poll begins, the override is set and shown, then the poll's
        // answer (read before the override was written) arrives.
        let seen = view.own_changes_seen();
        view.update(
            &Tenant::DEFAULT,
            "m1",
            "a",
            Change::Override(Some(forced)),
            10,
        );
        view.replace(polls(vec![index("m1", "a", 5)]), 1_000, 10, seen);
        let entry = *view.load().entry(&Tenant::DEFAULT, "m1", "a").unwrap();
        assert_eq!(entry.over, Some(forced));
        assert_eq!(entry.tripped.unwrap().open_until_ms, 5);
        // A clear made during the next poll holds over it too.
        let seen = view.own_changes_seen();
        view.update(&Tenant::DEFAULT, "m1", "a", Change::Override(None), 10);
        let mut read = index("m1", "a", 5);
        read.over = Some(forced);
        view.replace(polls(vec![read]), 2_000, 10, seen);
        assert_eq!(
            view.load().entry(&Tenant::DEFAULT, "m1", "a").unwrap().over,
            None
        );
        // A poll that began after both takes Redis's word alone.
        let seen = view.own_changes_seen();
        view.replace(polls(Vec::new()), 3_000, 10, seen);
        assert!(view.load().is_empty());
    }

    #[test]
    fn the_view_is_stale_before_the_first_read_and_after_open_for() {
        let settings = BreakerSettings::DEFAULT;
        let view = View::default();
        let entry = Entry::default();
        assert!(!view.load().fresh(&entry, 1_000, &settings));
        view.replace(polls(Vec::new()), 1_000, 10, 0);
        let open_for = settings.open_for_ms();
        assert!(view.load().fresh(&entry, 1_000 + open_for, &settings));
        assert!(!view.load().fresh(&entry, 1_001 + open_for, &settings));
    }

    /// Issue 41: with MAX_TRACKED 2, a third FORCE_OPEN (and an OPEN trip)
    /// is never left out of the view; only HALF-OPEN ones are.
    #[test]
    fn the_bound_never_drops_an_open_or_overridden_breaker() {
        use crate::domain::breaker::Override;
        let view = View::default();
        let forced = |m: &str| IndexEntry {
            tenant: Tenant::DEFAULT,
            merchant: m.into(),
            connector: "a".into(),
            tripped: None,
            over: Some(OverrideUntil {
                kind: Override::ForceOpen,
                until_ms: 9_000,
            }),
        };
        let dropped = view.replace(
            polls(vec![
                forced("m1"),
                forced("m2"),
                forced("m3"),
                index("m4", "a", 5_000),
                index("m5", "a", 500),
            ]),
            1_000,
            2,
            0,
        );
        let snapshot = view.load();
        for m in ["m1", "m2", "m3", "m4"] {
            assert!(snapshot.entry(&Tenant::DEFAULT, m, "a").is_some(), "{m}");
        }
        assert_eq!(dropped, 1, "the HALF-OPEN one past the bound");
        assert!(snapshot.entry(&Tenant::DEFAULT, "m5", "a").is_none());
    }

    /// Issue 41: a shard whose poll fails keeps its entries, and only its
    /// own breakers go stale (fail-open) after OPEN_FOR.
    #[test]
    fn a_shard_that_fails_its_poll_keeps_its_entries_and_goes_stale_alone() {
        let settings = BreakerSettings::DEFAULT;
        let view = View::default();
        let (a, b) = (
            index("m1", "a", 50_000),
            index(&other_shard("m1"), "a", 50_000),
        );
        view.replace(polls(vec![a.clone(), b.clone()]), 1_000, 10, 0);
        // Later, every shard answers but a's.
        let shard_a = shard_of(&Tenant::DEFAULT, &MerchantId::parse("m1").unwrap());
        let later: Vec<_> = polls(vec![b.clone()])
            .into_iter()
            .filter(|(shard, _)| *shard != shard_a)
            .collect();
        let at = 1_000 + settings.open_for_ms();
        view.replace(later, at, 10, 0);
        let snapshot = view.load();
        let entry_a = *snapshot.entry(&Tenant::DEFAULT, "m1", "a").unwrap();
        let entry_b = *snapshot.entry(&Tenant::DEFAULT, &b.merchant, "a").unwrap();
        assert!(snapshot.fresh(&entry_a, at, &settings));
        assert!(
            !snapshot.fresh(&entry_a, at + 1, &settings),
            "a's shard is stale"
        );
        assert!(snapshot.fresh(&entry_b, at + 1, &settings), "b's is not");
        assert_eq!(snapshot.stale_shards(at + 1, &settings), 1);
    }

    /// A merchant in another shard than `m`'s.
    fn other_shard(m: &str) -> String {
        let of = |m: &str| shard_of(&Tenant::DEFAULT, &MerchantId::parse(m).unwrap());
        (0..)
            .map(|i| format!("x{i}"))
            .find(|x| of(x) != of(m))
            .unwrap()
    }
}
