//! The circuit breaker's scripts on real Redis, through the store's calls:
//! the counts log (`log.rs` beside this), what HALF-OPEN counts, the transitions'
//! compare and set, the index, GetConnectorHealth's rows, and a TTL on
//! every key they write. Times are explicit `now_ms` values (the scripts
//! never read a clock), so nothing sleeps; only the TTLs are real time.

use std::time::Duration;

use super::*;
use crate::domain::breaker::{
    BreakerSettings, BreakerState, Counts, Override, OverrideUntil, Tripped,
};
use crate::domain::shards::shard_of;
use crate::domain::tenant::Tenant;
use crate::storage::{
    BreakerTransition, ConnectorHealthRow, ConnectorSnapshot, ConnectorTally, IndexEntry,
};

/// A 1 s window: 100 ms buckets, a ring of 12; OPEN for 3 s, HALF-OPEN
/// for 2 s.
fn settings() -> BreakerSettings {
    BreakerSettings {
        window: Duration::from_secs(1),
        open_for: Duration::from_secs(3),
        ..BreakerSettings::DEFAULT
    }
}

const W: i64 = 1_000;
const B: i64 = 100;
const OPEN_FOR: i64 = 3_000;
const HALF: i64 = 2_000;
/// A plausible Unix time in ms, on a bucket's start.
const T0: i64 = 1_764_000_000_000;

fn merchant(m: &str) -> MerchantId {
    MerchantId::parse(m).unwrap()
}

fn counts(calls: u64, failures: u64) -> Counts {
    Counts { calls, failures }
}

fn buckets(c: &str, buckets: &[(i64, u64, u64)]) -> ConnectorTally {
    ConnectorTally {
        connector: c.into(),
        buckets: buckets
            .iter()
            .map(|&(b, calls, failures)| (b, counts(calls, failures)))
            .collect(),
        probes: None,
    }
}

/// A trip as the engine sends it, with the window it folded.
fn trip() -> BreakerTransition {
    BreakerTransition::Trip {
        window: counts(20, 10),
    }
}

fn probes(c: &str, until: i64, calls: u64, failures: u64) -> ConnectorTally {
    ConnectorTally {
        connector: c.into(),
        buckets: vec![],
        probes: Some((until, counts(calls, failures))),
    }
}

impl Harness {
    fn flush(&self, m: &str, tallies: &[ConnectorTally], now: i64) -> Vec<ConnectorSnapshot> {
        self.runtime
            .block_on(self.store.flush_breakers(
                &Tenant::DEFAULT,
                &merchant(m),
                tallies,
                now,
                &settings(),
                deadline(),
            ))
            .unwrap()
    }

    /// One connector's shared state at `now`, adding nothing.
    fn snapshot(&self, m: &str, c: &str, now: i64) -> ConnectorSnapshot {
        self.flush(m, &[probes(c, 0, 0, 0)], now).remove(0)
    }

    fn transition(
        &self,
        m: &str,
        c: &str,
        transition: BreakerTransition,
        now: i64,
    ) -> Option<Tripped> {
        self.runtime
            .block_on(self.store.transition_breaker(
                &Tenant::DEFAULT,
                &merchant(m),
                c,
                transition,
                now,
                &settings(),
                deadline(),
            ))
            .unwrap()
    }

    fn poll(&self, now: i64) -> Vec<IndexEntry> {
        self.runtime
            .block_on(self.store.poll_breaker_index(now, &settings(), deadline()))
            .unwrap()
    }

    fn health(&self, m: &str, windows: &[(&str, Counts)], now: i64) -> Vec<ConnectorHealthRow> {
        let windows: Vec<(String, Counts)> =
            windows.iter().map(|(c, w)| ((*c).to_owned(), *w)).collect();
        self.runtime
            .block_on(self.store.breaker_health(
                &Tenant::DEFAULT,
                &merchant(m),
                &windows,
                now,
                &settings(),
                deadline(),
            ))
            .unwrap()
    }

    fn strings(&self, key: &str) -> HashMap<String, String> {
        self.raw(key)
            .into_iter()
            .map(|(f, v)| (f, String::from_utf8(v).unwrap()))
            .collect()
    }

    /// Every breaker key in this Redis.
    fn breaker_keys(&self) -> Vec<String> {
        self.keys_matching("sticky_brk_*")
    }
}

/// The index of merchant `m`'s shard.
fn index_key(m: &str) -> String {
    keys::breaker_index_key(shard_of(&Tenant::DEFAULT, &merchant(m)))
        .as_str()
        .to_owned()
}

/// A merchant other than `m`, in `m`'s shard (so one index holds both).
fn beside(m: &str) -> String {
    let shard = shard_of(&Tenant::DEFAULT, &merchant(m));
    (0..)
        .map(|i| format!("n{i}"))
        .find(|n| shard_of(&Tenant::DEFAULT, &merchant(n)) == shard)
        .unwrap()
}

fn counts_key(m: &str) -> String {
    keys::breaker_counts_key(&Tenant::DEFAULT, &merchant(m))
        .as_str()
        .to_owned()
}

/// The counts log of merchant `m`'s shard, of the bucket of `now`.
fn log_key(m: &str, now: i64) -> String {
    let shard = shard_of(&Tenant::DEFAULT, &merchant(m));
    keys::breaker_log_key(shard, settings().bucket_of(now))
}

fn open_key(m: &str, c: &str) -> String {
    keys::breaker_open_key(&Tenant::DEFAULT, &merchant(m), c)
        .as_str()
        .to_owned()
}

#[test]
fn the_ring_has_the_domains_shape() {
    let s = settings();
    assert_eq!((s.window_ms(), s.bucket_ms(), s.ring_len()), (W, B, 12));
    assert_eq!((s.open_for_ms(), s.half_open_for_ms()), (OPEN_FOR, HALF));
    assert_eq!(T0 % B, 0);
}

#[test]
fn a_trip_takes_the_windows_counts_and_open_drops_every_count() {
    let h = Harness::new();
    let s = settings();
    let b0 = s.bucket_of(T0);
    h.flush("m", &[buckets("a", &[(b0, 20, 10)])], T0);
    let now = T0 + 50;
    let tripped = h.transition("m", "a", trip(), now);
    let t = now + OPEN_FOR;
    assert_eq!(
        tripped,
        Some(Tripped {
            open_until_ms: t,
            calls: 20,
            failures: 10
        })
    );
    let stored = h.strings(&counts_key("m"));
    assert_eq!(
        stored,
        HashMap::from([("t:a".to_owned(), format!("{t} 20 10"))]),
        "only the trip: no window of the layout before the log"
    );
    assert_eq!(
        h.strings(&open_key("m", "a")),
        HashMap::from([("v".to_owned(), format!("{t} 20 10"))])
    );

    // While OPEN, calls count nowhere: buckets and probes alike.
    let got = h.flush(
        "m",
        &[ConnectorTally {
            connector: "a".into(),
            buckets: vec![(s.bucket_of(t - 1), counts(5, 5))],
            probes: Some((t, counts(3, 3))),
        }],
        t - 1,
    );
    assert_eq!(got[0].probes, counts(0, 0));
    assert_eq!(got[0].tripped.map(|t| t.counts()), Some(counts(20, 10)));
    assert_eq!(h.strings(&counts_key("m")).len(), 1);
}

#[test]
fn half_open_counts_only_probes_tagged_with_its_trip() {
    let h = Harness::new();
    let s = settings();
    let t = h.transition("m", "a", trip(), T0).unwrap().open_until_ms;
    let now = t + 10;
    let got = h.flush(
        "m",
        &[
            // Its probes, and buckets an instance counted as CLOSED.
            ConnectorTally {
                connector: "a".into(),
                buckets: vec![(s.bucket_of(now), counts(7, 7))],
                probes: Some((t, counts(2, 1))),
            },
        ],
        now,
    );
    assert_eq!(got[0].probes, counts(2, 1));
    // Probes of another half-open (an older trip's) are dropped.
    let got = h.flush("m", &[probes("a", t - 1, 5, 5)], now + 1);
    assert_eq!(got[0].probes, counts(2, 1));
    let got = h.flush("m", &[probes("a", t, 1, 0)], t + HALF - 1);
    assert_eq!(got[0].probes, counts(3, 1));
    assert_eq!(got[0].tripped.unwrap().open_until_ms, t);
}

#[test]
fn a_half_open_that_timed_out_is_cleared_and_counts_afresh() {
    let h = Harness::new();
    let s = settings();
    let t = h.transition("m", "a", trip(), T0).unwrap().open_until_ms;
    h.flush("m", &[probes("a", t, 1, 1)], t);
    let now = t + HALF;
    let got = h.flush(
        "m",
        &[ConnectorTally {
            connector: "a".into(),
            buckets: vec![(s.bucket_of(now), counts(4, 1))],
            // Its late probes: dropped, the half-open is over.
            probes: Some((t, counts(9, 9))),
        }],
        now,
    );
    assert_eq!(got[0].tripped, None);
    assert_eq!(got[0].probes, counts(0, 0));
    let stored = h.strings(&counts_key("m"));
    assert_eq!(stored["x:a"], t.to_string());
    for gone in ["t:a", "hc:a", "hf:a"] {
        assert!(!stored.contains_key(gone), "{stored:?}");
    }
    // A trip then is a fresh one (the timed-out one refuses nothing).
    assert!(h.transition("m", "a", trip(), now + 1).is_some());
}

#[test]
fn probes_of_a_trip_the_hash_lost_make_it_again() {
    let h = Harness::new();
    // The hash expired during a long OPEN: an instance that saw the trip
    // (in the index) counts probes tagged with it.
    let u = T0;
    let got = h.flush("m", &[probes("a", u, 2, 0)], u + 10);
    assert_eq!(
        got[0].tripped,
        Some(Tripped {
            open_until_ms: u,
            calls: 0,
            failures: 0
        })
    );
    assert_eq!(got[0].probes, counts(2, 0));
    // Not once it is over, nor for a trip the hash says was closed.
    let got = h.flush("n", &[probes("a", u, 2, 0)], u + HALF);
    assert_eq!(got[0].tripped, None);
    let t = h
        .transition("p", "a", trip(), u - OPEN_FOR)
        .unwrap()
        .open_until_ms;
    assert!(
        h.transition(
            "p",
            "a",
            BreakerTransition::Close { open_until_ms: t },
            t + 1
        )
        .is_some()
    );
    let got = h.flush("p", &[probes("a", t, 2, 0)], t + 2);
    assert_eq!(got[0].tripped, None);
    assert_eq!(got[0].probes, counts(0, 0));
}

#[test]
fn transitions_apply_only_where_the_engine_saw_the_breaker() {
    let h = Harness::new();
    let t = h.transition("m", "a", trip(), T0).unwrap().open_until_ms;
    assert_eq!(t, T0 + OPEN_FOR);
    // A second trip is refused, OPEN or HALF-OPEN.
    assert_eq!(h.transition("m", "a", trip(), T0 + 1), None);
    assert_eq!(h.transition("m", "a", trip(), t + HALF - 1), None);
    // A close or reopen of another trip is refused, and so is one of a
    // breaker never tripped.
    for wrong in [
        BreakerTransition::Close {
            open_until_ms: t - 1,
        },
        BreakerTransition::Reopen {
            open_until_ms: t + 1,
        },
    ] {
        assert_eq!(h.transition("m", "a", wrong, t + 5), None);
        assert_eq!(h.transition("m", "b", wrong, t + 5), None);
    }

    // Reopen: OPEN again for OPEN_FOR, with the probes as its counts.
    h.flush("m", &[probes("a", t, 5, 4)], t + 5);
    let now = t + 10;
    let reopened = h
        .transition(
            "m",
            "a",
            BreakerTransition::Reopen { open_until_ms: t },
            now,
        )
        .unwrap();
    let t2 = now + OPEN_FOR;
    assert_eq!(
        reopened,
        Tripped {
            open_until_ms: t2,
            calls: 5,
            failures: 4
        }
    );
    assert_eq!(
        h.strings(&counts_key("m")),
        HashMap::from([("t:a".to_owned(), format!("{t2} 5 4"))])
    );
    assert_eq!(h.strings(&open_key("m", "a"))["v"], format!("{t2} 5 4"));
    // The old trip's close is refused now.
    assert_eq!(
        h.transition("m", "a", BreakerTransition::Close { open_until_ms: t }, t2),
        None
    );

    // Close: the trip, its probes and the open key go; x remembers it.
    h.flush("m", &[probes("a", t2, 5, 0)], t2 + 1);
    let closed = h.transition(
        "m",
        "a",
        BreakerTransition::Close { open_until_ms: t2 },
        t2 + 2,
    );
    assert_eq!(closed.map(|c| c.open_until_ms), Some(t2));
    assert_eq!(
        h.strings(&counts_key("m")),
        HashMap::from([("x:a".to_owned(), t2.to_string())])
    );
    assert!(h.strings(&open_key("m", "a")).is_empty());
    assert_eq!(
        h.transition(
            "m",
            "a",
            BreakerTransition::Close { open_until_ms: t2 },
            t2 + 3
        ),
        None,
        "closed once"
    );
}

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

#[test]
fn health_lists_trips_counts_and_overrides_in_bytewise_order() {
    let h = Harness::new();
    let s = settings();
    let m = merchant("m");
    let now = T0;
    // "Z" < "a" < "é" bytewise.
    let tripped = h.transition("m", "a", trip(), now).unwrap();
    let over = OverrideUntil {
        kind: Override::ForceClosed,
        until_ms: now + 60_000,
    };
    h.runtime.block_on(async {
        h.store
            .index_trip(&Tenant::DEFAULT, &m, "a", tripped, &s, deadline())
            .await
            .unwrap();
        h.store
            .set_override(&Tenant::DEFAULT, &m, "Z", Some(over), now, deadline())
            .await
            .unwrap();
    });
    // The CLOSED windows are the engine's; "a"'s, OPEN, is not shown.
    let windows = [("é", counts(3, 1)), ("a", counts(25, 12))];
    let rows = h.health("m", &windows, now + 1);
    assert_eq!(
        rows,
        vec![
            ConnectorHealthRow {
                connector: "Z".into(),
                state: BreakerState::Closed,
                counts: counts(0, 0),
                open_until_ms: 0,
                over: Some(over),
            },
            ConnectorHealthRow {
                connector: "a".into(),
                state: BreakerState::Open {
                    until_ms: tripped.open_until_ms
                },
                counts: counts(20, 10),
                open_until_ms: tripped.open_until_ms,
                over: None,
            },
            ConnectorHealthRow {
                connector: "é".into(),
                state: BreakerState::Closed,
                counts: counts(3, 1),
                open_until_ms: 0,
                over: None,
            },
        ]
    );
    // HALF-OPEN: the probes so far.
    let t = tripped.open_until_ms;
    h.flush("m", &[probes("a", t, 2, 1)], t);
    let rows = h.health("m", &windows, t + 1);
    let a = rows.iter().find(|r| r.connector == "a").unwrap();
    assert_eq!(a.state, BreakerState::HalfOpen { since_ms: t });
    assert_eq!((a.counts, a.open_until_ms), (counts(2, 1), 0));
    // An unknown merchant has no rows.
    assert!(h.health("nobody", &[], now).is_empty());
}

#[test]
fn every_key_the_breaker_writes_has_a_ttl_within_the_bounds() {
    let h = Harness::new();
    let s = settings();
    let m = merchant("m");
    let b = s.bucket_of(T0);
    h.flush(
        "m",
        &[buckets("a", &[(b, 20, 10)]), buckets("b", &[(b, 1, 0)])],
        T0,
    );
    // The counts went to the shard's log, which lives W and 3 buckets.
    assert!(h.strings(&counts_key("m")).is_empty());
    assert!(
        (W + 3 * B - 1_000..=W + 3 * B).contains(&h.pttl(&log_key("m", T0))),
        "a log key lives W + 3 B"
    );
    let t = h.transition("m", "a", trip(), T0).unwrap().open_until_ms;
    h.flush("n", &[probes("a", T0, 1, 0)], T0 + 1);
    h.transition(
        "n",
        "a",
        BreakerTransition::Reopen { open_until_ms: T0 },
        T0 + 2,
    )
    .unwrap();
    h.transition("n", "a", trip(), T0 + 2 + OPEN_FOR + HALF)
        .unwrap();
    h.flush("p", &[probes("a", T0, 1, 0)], T0 + 1);
    h.transition(
        "p",
        "a",
        BreakerTransition::Close { open_until_ms: T0 },
        T0 + 2,
    )
    .unwrap();
    h.runtime.block_on(async {
        let tripped = Tripped {
            open_until_ms: t,
            calls: 20,
            failures: 10,
        };
        h.store
            .index_trip(&Tenant::DEFAULT, &m, "a", tripped, &s, deadline())
            .await
            .unwrap();
    });
    let keys = h.breaker_keys();
    assert!(keys.len() >= 6, "{keys:?}");
    let bound = HALF.max(OPEN_FOR);
    for key in keys {
        let ttl = h.pttl(&key);
        let bound = if key.starts_with("sticky_brk_o") {
            OPEN_FOR
        } else {
            bound
        };
        assert!(
            ttl > 0 && ttl <= bound,
            "{key}: PTTL {ttl} not in (0, {bound}]"
        );
    }
    // A trip keeps the counts hash for OPEN_FOR at least; the open key
    // lives exactly OPEN_FOR.
    assert!(h.pttl(&counts_key("m")) > HALF);
    assert!(h.pttl(&open_key("m", "a")) > OPEN_FOR - 1_000);

    // An override's TTL is the override's.
    let over = OverrideUntil {
        kind: Override::ForceOpen,
        until_ms: T0 + 3_600_000,
    };
    h.runtime
        .block_on(
            h.store
                .set_override(&Tenant::DEFAULT, &m, "a", Some(over), T0, deadline()),
        )
        .unwrap();
    let ttl = h.pttl(&index_key("m"));
    assert!((3_599_000..=3_600_000).contains(&ttl), "{ttl}");
}

#[test]
fn a_tenants_breaker_is_its_own_and_every_key_it_writes_has_a_ttl() {
    let h = Harness::new();
    let s = settings();
    let acme = Tenant::parse("acme").unwrap();
    let m = merchant("m");
    let b = s.bucket_of(T0);
    // The default tenant's m/a sees a few calls; acme's m/a enough to trip.
    h.flush("m", &[buckets("a", &[(b, 3, 0)])], T0);
    let tripped = h.runtime.block_on(async {
        let store = &h.store;
        let flushed = store
            .flush_breakers(
                &acme,
                &m,
                &[buckets("a", &[(b, 20, 10)])],
                T0,
                &s,
                deadline(),
            )
            .await
            .unwrap();
        assert!(flushed.is_empty(), "no probes: nothing of the hash");
        let tripped = store
            .transition_breaker(&acme, &m, "a", trip(), T0, &s, deadline())
            .await
            .unwrap()
            .unwrap();
        store
            .index_trip(&acme, &m, "a", tripped, &s, deadline())
            .await
            .unwrap();
        let over = OverrideUntil {
            kind: Override::ForceClosed,
            until_ms: T0 + 60_000,
        };
        store
            .set_override(&acme, &m, "b", Some(over), T0, deadline())
            .await
            .unwrap();
        tripped
    });
    assert_eq!(tripped.counts(), counts(20, 10));
    // The default tenant's breaker of the same ids neither counted acme's
    // calls nor tripped.
    assert_eq!(h.snapshot("m", "a", T0 + 1).tripped, None);

    let acme_counts = keys::breaker_counts_key(&acme, &m);
    let acme_open = keys::breaker_open_key(&acme, &m, "a");
    let acme_index = keys::breaker_index_key(shard_of(&acme, &m));
    let tag = shard_of(&acme, &m).tag();
    assert_eq!(
        acme_counts,
        format!("sticky_brk_c{{{tag}}}%Tacme_m").as_str()
    );
    assert_eq!(
        acme_open,
        format!("sticky_brk_o{{{tag}}}%Tacme_m_a").as_str()
    );
    let mut keys = h.breaker_keys();
    keys.sort();
    // Each tenant's counts went to its merchant's shard's log.
    let mut expected = vec![
        acme_index.as_str().to_owned(),
        log_key("m", T0),
        keys::breaker_log_key(shard_of(&acme, &m), b),
        acme_counts.as_str().to_owned(),
        acme_open.as_str().to_owned(),
    ];
    expected.sort();
    expected.dedup();
    assert_eq!(keys, expected);
    for key in &keys {
        let ttl = h.pttl(key);
        let bound = if key.starts_with("sticky_brk_i{") {
            60_000
        } else if key.starts_with("sticky_brk_o") {
            OPEN_FOR
        } else {
            HALF.max(OPEN_FOR)
        };
        assert!(
            ttl > 0 && ttl <= bound,
            "{key}: PTTL {ttl} not in (0, {bound}]"
        );
    }
    assert!(h.pttl(acme_open.as_str()) > OPEN_FOR - 1_000);

    // The shared index names acme's breakers with acme, and the default
    // tenant's health has none of them.
    let entries = h.poll(T0 + 1);
    assert_eq!(entries.len(), 2, "{entries:?}");
    assert!(
        entries
            .iter()
            .all(|e| e.tenant == acme && e.merchant == "m")
    );
    let default_rows = h.health("m", &[("a", counts(3, 0))], T0 + 1);
    assert_eq!(default_rows.len(), 1);
    assert_eq!(
        (default_rows[0].state, default_rows[0].over),
        (BreakerState::Closed, None)
    );
    let acme_rows = h
        .runtime
        .block_on(
            h.store
                .breaker_health(&acme, &m, &[], T0 + 1, &s, deadline()),
        )
        .unwrap();
    let states: Vec<_> = acme_rows
        .iter()
        .map(|r| (r.connector.as_str(), r.state))
        .collect();
    assert_eq!(
        states,
        [
            (
                "a",
                BreakerState::Open {
                    until_ms: tripped.open_until_ms
                }
            ),
            ("b", BreakerState::Closed),
        ]
    );
    // Past their lifetimes, the poll prunes a tenant's entries as it does
    // the default tenant's.
    assert!(h.poll(T0 + 60_000).is_empty());
    assert!(h.strings(acme_index.as_str()).is_empty());
}

#[test]
fn a_stored_value_the_breaker_never_writes_stops_the_flush_unwritten() {
    let h = Harness::new();
    let key = counts_key("m");
    h.runtime.block_on(async {
        let _: () = h.inspect.hset(&key, ("t:a", "soon")).await.unwrap();
        let _: () = h.inspect.expire(&key, 100, None).await.unwrap();
    });
    let result = h.runtime.block_on(h.store.flush_breakers(
        &Tenant::DEFAULT,
        &merchant("m"),
        &[probes("a", T0, 1, 1)],
        T0,
        &settings(),
        deadline(),
    ));
    assert!(
        matches!(result, Err(StorageError::ForeignValue { .. })),
        "{result:?}"
    );
    assert_eq!(
        h.strings(&key),
        HashMap::from([("t:a".to_owned(), "soon".to_owned())])
    );
}

#[test]
fn the_two_key_transition_runs_in_one_slot_on_cluster() {
    let cluster = test_support::redis_cluster::RedisCluster::start();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let settings_of_store = settings_for_url(cluster.url());
    runtime.block_on(async {
        let metrics = Arc::new(Metrics::new().unwrap());
        let store = RedisStore::connect(&settings_of_store, &TaskTracker::new(), metrics).unwrap();
        assert!(store.wait_connected(Duration::from_secs(10)).await);
        let s = settings();
        // Merchants whose hash tags land on different shards, and a
        // connector with the escaped bytes.
        for m in ["m", "shop-1", "{odd}"] {
            let m = merchant(m);
            let b = s.bucket_of(T0);
            let tally = buckets("con{x}%", &[(b, 4, 4)]);
            let trip = BreakerTransition::Trip {
                window: counts(4, 4),
            };
            store
                .flush_breakers(&Tenant::DEFAULT, &m, &[tally], T0, &s, deadline())
                .await
                .unwrap();
            let tripped = store
                .transition_breaker(&Tenant::DEFAULT, &m, "con{x}%", trip, T0, &s, deadline())
                .await
                .unwrap();
            assert_eq!(tripped.map(|t| t.counts()), Some(counts(4, 4)));
            let closed = store
                .transition_breaker(
                    &Tenant::DEFAULT,
                    &m,
                    "con{x}%",
                    BreakerTransition::Close {
                        open_until_ms: T0 + OPEN_FOR,
                    },
                    T0 + OPEN_FOR,
                    &s,
                    deadline(),
                )
                .await
                .unwrap();
            assert!(closed.is_some());
            let rows = store
                .breaker_health(&Tenant::DEFAULT, &m, &[], T0 + OPEN_FOR, &s, deadline())
                .await
                .unwrap();
            assert!(rows.is_empty(), "{rows:?}");
        }
        store
            .index_trip(
                &Tenant::DEFAULT,
                &merchant("m"),
                "c",
                Tripped {
                    open_until_ms: T0,
                    calls: 1,
                    failures: 1,
                },
                &s,
                deadline(),
            )
            .await
            .unwrap();
        let entries = store.poll_breaker_index(T0, &s, deadline()).await.unwrap();
        assert_eq!(entries.len(), 1);
        store.quit().await;
    });
}

#[test]
fn a_key_that_could_not_be_given_its_ttl_is_never_made() {
    let h = Harness::new();
    let port = h._redis.port;
    let revoke = ["ACL", "SETUSER", SERVICE_USER, "-pexpire"];
    test_support::redis_server::redis_cli(port, &revoke);
    let s = settings();
    let m = merchant("m");
    let b = s.bucket_of(T0);
    let is_permission = |result: &Result<_, StorageError>| {
        matches!(
            result,
            Err(StorageError::Unavailable {
                why: crate::storage::NotApplied::Permission,
                ..
            })
        )
    };
    h.runtime.block_on(async {
        let store = &h.store;
        let flushed = store
            .flush_breakers(
                &Tenant::DEFAULT,
                &m,
                &[buckets("a", &[(b, 1, 1)])],
                T0,
                &s,
                deadline(),
            )
            .await
            .map(|_| ());
        assert!(is_permission(&flushed), "{flushed:?}");
        let tripped = store
            .transition_breaker(&Tenant::DEFAULT, &m, "a", trip(), T0, &s, deadline())
            .await
            .map(|_| ());
        assert!(is_permission(&tripped), "{tripped:?}");
        let tripped = Tripped {
            open_until_ms: T0,
            calls: 1,
            failures: 1,
        };
        let indexed = store
            .index_trip(&Tenant::DEFAULT, &m, "a", tripped, &s, deadline())
            .await;
        assert!(is_permission(&indexed), "{indexed:?}");
    });
    assert!(h.breaker_keys().is_empty(), "{:?}", h.breaker_keys());
}
