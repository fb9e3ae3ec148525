//! Tier 1's states: this instance's copy of the breaker index, every
//! breaker that is tripped (OPEN, or HALF-OPEN until it decides) or has an
//! override, as Redis last answered it, per (tenant, merchant, connector).
//!
//! Readers (every GetPin and RecordOutcome) load the current snapshot
//! without a lock; the cycle replaces it whole after each poll, and this
//! instance's own transitions and overrides update it at once, copying it
//! (they are rare). A breaker missing from the snapshot is CLOSED.

use std::collections::HashMap;
use std::sync::Arc;

use arc_swap::{ArcSwap, Guard};

use crate::domain::breaker::{BreakerSettings, OverrideUntil, Tripped};
use crate::domain::tenant::Tenant;
use crate::storage::IndexEntry;

/// What the index says of one breaker.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Entry {
    pub tripped: Option<Tripped>,
    pub over: Option<OverrideUntil>,
}

/// One tenant's breakers, by merchant then connector, so a lookup by two
/// borrowed strings allocates nothing.
type ByMerchant = HashMap<Box<str>, HashMap<Box<str>, Entry>>;

/// What [`Snapshot::entries`] names the default tenant's breakers with.
static DEFAULT_TENANT: Tenant = Tenant::DEFAULT;

/// One poll's answer. The default tenant's breakers are kept apart from
/// the named tenants' so that its lookup (nearly every call, for a service
/// without tenants) costs what it did before tenants: no tenant is hashed.
#[derive(Debug, Default)]
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
}

/// The current snapshot, swapped whole.
#[derive(Default)]
pub(super) struct View {
    current: ArcSwap<Snapshot>,
}

impl View {
    pub fn load(&self) -> Guard<Arc<Snapshot>> {
        self.current.load()
    }

    /// Replaces the view with a poll's answer, read at `read_at_ms`. At
    /// most `max` breakers are kept: the bound on what one process tracks
    /// holds even for an index that grew past it (the rest read as CLOSED
    /// here, and the drop is counted by the caller).
    pub fn replace(&self, entries: Vec<IndexEntry>, read_at_ms: i64, max: usize) -> usize {
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
        self.current.store(Arc::new(snapshot));
        dropped
    }

    /// Changes one breaker's entry now (this instance's own transition or
    /// override), keeping the rest; an entry left empty is removed.
    pub fn update(
        &self,
        tenant: &Tenant,
        merchant: &str,
        connector: &str,
        change: impl Fn(&mut Entry),
    ) {
        self.current.rcu(|current| {
            let mut next = Snapshot {
                read_at_ms: current.read_at_ms,
                ..Snapshot::default()
            };
            for (t, m, c, entry) in current.entries() {
                if (t, m, c) != (tenant, merchant, connector) {
                    next.insert(t, m, c, *entry);
                }
            }
            let mut entry = current
                .entry(tenant, merchant, connector)
                .copied()
                .unwrap_or_default();
            change(&mut entry);
            if entry != Entry::default() {
                next.insert(tenant, merchant, connector, entry);
            }
            next
        });
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
        );
        assert_eq!(dropped, 1);
        let snapshot = view.load();
        assert_eq!(snapshot.len(), 2);
        assert_eq!(until(&snapshot, &Tenant::DEFAULT, "m1", "a"), 5);
        assert!(snapshot.entry(&Tenant::DEFAULT, "m2", "a").is_none());
        view.replace(vec![index("m2", "a", 7)], 2_000, 10);
        assert!(view.load().entry(&Tenant::DEFAULT, "m1", "a").is_none());
    }

    #[test]
    fn an_update_changes_one_entry_and_an_empty_one_goes() {
        let view = View::default();
        view.replace(vec![index("m1", "a", 5), index("m1", "b", 6)], 1_000, 10);
        view.update(&Tenant::DEFAULT, "m1", "a", |entry| entry.tripped = None);
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
        view.update(&acme, "m1", "a", |entry| entry.tripped = None);
        view.update(&globex, "m1", "a", |entry| {
            entry.tripped = Some(Tripped {
                open_until_ms: 9,
                calls: 1,
                failures: 1,
            })
        });
        let snapshot = view.load();
        assert!(snapshot.entry(&acme, "m1", "a").is_none());
        assert_eq!(until(&snapshot, &Tenant::DEFAULT, "m1", "a"), 5);
        assert_eq!(until(&snapshot, &globex, "m1", "a"), 9);
        assert_eq!(snapshot.len(), 2);
    }

    #[test]
    fn the_view_is_stale_before_the_first_read_and_after_open_for() {
        let settings = BreakerSettings::DEFAULT;
        let view = View::default();
        assert!(!view.load().fresh(1_000, &settings));
        view.replace(Vec::new(), 1_000, 10);
        let open_for = settings.open_for_ms();
        assert!(view.load().fresh(1_000 + open_for, &settings));
        assert!(!view.load().fresh(1_001 + open_for, &settings));
    }
}
