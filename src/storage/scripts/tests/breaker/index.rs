//! The shard's breaker index on real Redis: set, polled, pruned, and its
//! TTL kept as its entries need.

use super::*;

#[test]
fn the_index_sets_polls_prunes_and_keeps_its_ttl() {
    let h = Harness::new();
    let s = settings();
    let n_id = beside("m");
    let (m, n) = (merchant("m"), merchant(&n_id));
    let tripped = Tripped {
        open_until_ms: T0 + OPEN_FOR,
        calls: 20,
        failures: 12,
    };
    let over = OverrideUntil {
        kind: Override::ForceOpen,
        until_ms: T0 + 60_000,
    };
    h.runtime.block_on(async {
        let store = &h.store;
        store
            .index_trip(&Tenant::DEFAULT, &m, "a", tripped, &s, deadline())
            .await
            .unwrap();
        store
            .set_override(&Tenant::DEFAULT, &m, "a", Some(over), T0, deadline())
            .await
            .unwrap();
        let closed = OverrideUntil {
            kind: Override::ForceClosed,
            until_ms: T0 + 1_000,
        };
        store
            .set_override(&Tenant::DEFAULT, &n, "b", Some(closed), T0, deadline())
            .await
            .unwrap();
    });
    // The longest lifetime set: the override's 60 s.
    let ttl = h.pttl(&index_key("m"));
    assert!((59_000..=60_000).contains(&ttl), "{ttl}");

    let entries = h.poll(T0 + 10);
    assert_eq!(
        entries,
        vec![
            IndexEntry {
                tenant: Tenant::DEFAULT,
                merchant: "m".into(),
                connector: "a".into(),
                tripped: Some(tripped),
                over: Some(over),
            },
            IndexEntry {
                tenant: Tenant::DEFAULT,
                merchant: n_id.clone(),
                connector: "b".into(),
                tripped: None,
                over: Some(OverrideUntil {
                    kind: Override::ForceClosed,
                    until_ms: T0 + 1_000,
                }),
            },
        ]
    );
    let ttl = h.pttl(&index_key("m"));
    assert!((59_000..=59_990).contains(&ttl), "{ttl}");

    // Past n/b's override and a's HALF-OPEN: both pruned; a's override
    // left, and the TTL is its remaining life.
    let now = tripped.open_until_ms + HALF;
    let entries = h.poll(now);
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].tripped, None);
    assert_eq!(entries[0].over, Some(over));
    assert_eq!(h.strings(&index_key("m")).len(), 1);
    let left = over.until_ms - now;
    let ttl = h.pttl(&index_key("m"));
    assert!((left - 1_000..=left).contains(&ttl), "{ttl} vs {left}");

    // A trip alone keeps the index for min(T + 2W - now, cap), the cap
    // being max(2W, OPEN_FOR).
    h.runtime.block_on(async {
        h.store
            .set_override(&Tenant::DEFAULT, &m, "a", None, now, deadline())
            .await
            .unwrap();
    });
    assert!(h.strings(&index_key("m")).is_empty());
    let t = now + OPEN_FOR;
    let trip = Tripped {
        open_until_ms: t,
        calls: 1,
        failures: 1,
    };
    h.runtime
        .block_on(
            h.store
                .index_trip(&Tenant::DEFAULT, &m, "c", trip, &s, deadline()),
        )
        .unwrap();
    let ttl = h.pttl(&index_key("m"));
    assert!((OPEN_FOR - 1_000..=OPEN_FOR).contains(&ttl), "{ttl}");
    assert_eq!(h.poll(t + HALF - 1_500).len(), 1);
    let ttl = h.pttl(&index_key("m"));
    // While it holds a trip, the index lives the cap, re-armed by every
    // poll, so it outlives the trip (the poll that sees it end needs it).
    let cap = HALF.max(OPEN_FOR);
    assert!((cap - 1_000..=cap).contains(&ttl), "{ttl}");

    // A close clears only its own trip.
    h.runtime.block_on(async {
        let cleared = h
            .store
            .index_clear_trip(&Tenant::DEFAULT, &m, "c", t / 10, deadline())
            .await
            .unwrap();
        assert!(!cleared, "T = {} is no prefix match for {t}", t / 10);
        let cleared = h
            .store
            .index_clear_trip(&Tenant::DEFAULT, &m, "c", t, deadline())
            .await
            .unwrap();
        assert!(cleared);
    });
    assert!(
        h.breaker_keys().is_empty(),
        "the index went with its last entry"
    );
}
