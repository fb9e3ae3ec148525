//! Tier 1's states: this instance's copy of the breaker index, every
//! breaker that is tripped (OPEN, or HALF-OPEN until it decides) or has an
//! override, as Redis last answered it.
//!
//! Readers (every GetPin and RecordOutcome) load the current snapshot
//! without a lock; the cycle replaces it whole after each poll, and this
//! instance's own transitions and overrides update it at once, copying it
//! (they are rare). A breaker missing from the snapshot is CLOSED.

use std::collections::HashMap;
use std::sync::Arc;

use arc_swap::{ArcSwap, Guard};

use crate::domain::breaker::{BreakerSettings, OverrideUntil, Tripped};
use crate::storage::IndexEntry;

/// What the index says of one breaker.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Entry {
    pub tripped: Option<Tripped>,
    pub over: Option<OverrideUntil>,
}

/// One poll's answer, by merchant then connector, so a lookup by two
/// borrowed strings allocates nothing.
#[derive(Debug, Default)]
pub(super) struct Snapshot {
    by_merchant: HashMap<Box<str>, HashMap<Box<str>, Entry>>,
    /// When Redis last answered the poll (Unix ms; 0: never, so nothing is
    /// known and every breaker is CLOSED).
    read_at_ms: i64,
    len: usize,
}

impl Snapshot {
    pub fn entry(&self, merchant: &str, connector: &str) -> Option<&Entry> {
        if self.is_empty() {
            return None;
        }
        self.by_merchant.get(merchant)?.get(connector)
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
    pub fn entries(&self) -> impl Iterator<Item = (&str, &str, &Entry)> {
        self.by_merchant.iter().flat_map(|(merchant, connectors)| {
            connectors
                .iter()
                .map(move |(connector, entry)| (&**merchant, &**connector, entry))
        })
    }

    fn insert(&mut self, merchant: &str, connector: &str, entry: Entry) {
        let connectors = self.by_merchant.entry(merchant.into()).or_default();
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
    pub fn update(&self, merchant: &str, connector: &str, change: impl Fn(&mut Entry)) {
        self.current.rcu(|current| {
            let mut next = Snapshot {
                read_at_ms: current.read_at_ms,
                ..Snapshot::default()
            };
            for (m, c, entry) in current.entries() {
                if (m, c) != (merchant, connector) {
                    next.insert(m, c, *entry);
                }
            }
            let mut entry = current
                .entry(merchant, connector)
                .copied()
                .unwrap_or_default();
            change(&mut entry);
            if entry != Entry::default() {
                next.insert(merchant, connector, entry);
            }
            next
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index(merchant: &str, connector: &str, until: i64) -> IndexEntry {
        IndexEntry {
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
        assert_eq!(
            snapshot
                .entry("m1", "a")
                .unwrap()
                .tripped
                .unwrap()
                .open_until_ms,
            5
        );
        assert!(snapshot.entry("m2", "a").is_none());
        view.replace(vec![index("m2", "a", 7)], 2_000, 10);
        assert!(view.load().entry("m1", "a").is_none());
    }

    #[test]
    fn an_update_changes_one_entry_and_an_empty_one_goes() {
        let view = View::default();
        view.replace(vec![index("m1", "a", 5), index("m1", "b", 6)], 1_000, 10);
        view.update("m1", "a", |entry| entry.tripped = None);
        let snapshot = view.load();
        assert!(snapshot.entry("m1", "a").is_none());
        assert!(snapshot.entry("m1", "b").is_some());
        assert_eq!(snapshot.len(), 1);
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
