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
pub(super) fn settings() -> BreakerSettings {
    BreakerSettings {
        window: Duration::from_secs(1),
        open_for: Duration::from_secs(3),
        ..BreakerSettings::DEFAULT
    }
}

const W: i64 = 1_000;
const B: i64 = 100;
pub(super) const OPEN_FOR: i64 = 3_000;
pub(super) const HALF: i64 = 2_000;
/// A plausible Unix time in ms, on a bucket's start.
pub(super) const T0: i64 = 1_764_000_000_000;

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

mod health_and_ttls;
mod index;
