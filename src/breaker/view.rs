//! Tier 1's states: this instance's copy of the breaker index, every
//! breaker that is tripped (OPEN, or HALF-OPEN until it decides) or has an
//! override, as Redis last answered it, per (tenant, merchant, connector).
//!
//! Readers (every GetPin and RecordOutcome) load the current snapshot
//! without a lock; the cycle replaces it whole after each poll, and this
//! instance's own transitions and overrides update it at once, copying it
//! (they are rare), and hold over a poll that read Redis before them
//! ([`super::own_changes`]). A breaker missing from the snapshot is CLOSED.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use arc_swap::{ArcSwap, Guard};

use super::own_changes::{Change, OwnChanges};
use crate::domain::breaker::{BreakerSettings, OverrideUntil, Tripped};
use crate::domain::tenant::Tenant;
use crate::storage::IndexEntry;

/// What the index says of one breaker.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Entry {
    pub tripped: Option<Tripped>,
    pub over: Option<OverrideUntil>,
}

impl Entry {
    fn apply(&mut self, change: Change) {
        match change {
            Change::Tripped(tripped) => self.tripped = tripped,
            Change::Override(over) => self.over = over,
        }
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
    /// When Redis last answered the poll (Unix ms; 0: never, so nothing is
    /// known and every breaker is CLOSED).
    read_at_ms: i64,
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

    /// Whether the states are recent enough to act on: fail-open holds the
    /// last known state for at most OPEN_FOR after the last successful read.
    pub fn fresh(&self, now_ms: i64, settings: &BreakerSettings) -> bool {
        self.read_at_ms > 0 && now_ms.saturating_sub(self.read_at_ms) <= settings.open_for_ms()
    }

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
            .unwrap_or_default();
        entry.apply(change);
        if entry != Entry::default() {
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

    /// Replaces the view with a poll's answer, read at `read_at_ms` by a
    /// poll that began after own change `seen`; the own changes since are
    /// applied over it. At most `max` breakers are kept from the answer:
    /// the bound on what one process tracks holds even for an index that
    /// grew past it (the rest read as CLOSED here, and the drop is counted
    /// by the caller).
    pub fn replace(
        &self,
        entries: Vec<IndexEntry>,
        read_at_ms: i64,
        max: usize,
        seen: u64,
    ) -> usize {
        let mut snapshot = Snapshot {
            read_at_ms,
            ..Snapshot::default()
        };
        let mut dropped = 0;
        for entry in entries {
            if snapshot.len >= max {
                dropped += 1;
                continue;
            }
            snapshot.insert(
                &entry.tenant,
                &entry.merchant,
                &entry.connector,
                Entry {
                    tripped: entry.tripped,
                    over: entry.over,
                },
            );
        }
        let mut own = self.own.lock().unwrap_or_else(PoisonError::into_inner);
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
            vec![
                index("m1", "a", 5),
                index("m1", "b", 6),
                index("m2", "a", 7),
            ],
            1_000,
            2,
            0,
        );
        assert_eq!(dropped, 1);
        let snapshot = view.load();
        assert_eq!(snapshot.len(), 2);
        assert_eq!(until(&snapshot, &Tenant::DEFAULT, "m1", "a"), 5);
        assert!(snapshot.entry(&Tenant::DEFAULT, "m2", "a").is_none());
        view.replace(vec![index("m2", "a", 7)], 2_000, 10, 0);
        assert!(view.load().entry(&Tenant::DEFAULT, "m1", "a").is_none());
    }

    #[test]
    fn an_update_changes_one_entry_and_an_empty_one_goes() {
        let view = View::default();
        view.replace(vec![index("m1", "a", 5), index("m1", "b", 6)], 1_000, 10, 0);
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
            vec![index("m1", "a", 5), index_of(&acme, "m1", "a", 6)],
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
        view.replace(vec![index("m1", "a", 5)], 1_000, 10, seen);
        let entry = *view.load().entry(&Tenant::DEFAULT, "m1", "a").unwrap();
        assert_eq!(entry.over, Some(forced));
        assert_eq!(entry.tripped.unwrap().open_until_ms, 5);
        // A clear made during the next poll holds over it too.
        let seen = view.own_changes_seen();
        view.update(&Tenant::DEFAULT, "m1", "a", Change::Override(None), 10);
        let mut read = index("m1", "a", 5);
        read.over = Some(forced);
        view.replace(vec![read], 2_000, 10, seen);
        assert_eq!(
            view.load().entry(&Tenant::DEFAULT, "m1", "a").unwrap().over,
            None
        );
        // A poll that began after both takes Redis's word alone.
        let seen = view.own_changes_seen();
        view.replace(Vec::new(), 3_000, 10, seen);
        assert!(view.load().is_empty());
    }

    #[test]
    fn the_view_is_stale_before_the_first_read_and_after_open_for() {
        let settings = BreakerSettings::DEFAULT;
        let view = View::default();
        assert!(!view.load().fresh(1_000, &settings));
        view.replace(Vec::new(), 1_000, 10, 0);
        let open_for = settings.open_for_ms();
        assert!(view.load().fresh(1_000 + open_for, &settings));
        assert!(!view.load().fresh(1_001 + open_for, &settings));
    }
}
