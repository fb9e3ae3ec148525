//! The breaker's shard scripts on real Redis (issue 41): one call carries
//! many probing merchants, a merchant's bad value leaves the others written, a
//! transition writes its index entry in the same step, and the
//! transitions time makes are reported once, by the one poll that sees
//! them first.

use super::*;
use crate::domain::breaker::{BreakerSettings, Counts, Tripped};
use crate::domain::shards::{Shard, shard_of};
use crate::storage::{
    BreakerTransition, ConnectorTally, MerchantTallies, PlannedTransition, ShardLog,
    TimeTransition, log_frames,
};

// The breaker scripts' tests' settings (a 1 s window, OPEN for 3 s).
use super::breaker::{HALF, OPEN_FOR, T0, settings};

fn trip(calls: u64, failures: u64) -> BreakerTransition {
    BreakerTransition::Trip {
        window: Counts { calls, failures },
    }
}

/// `n` merchants of `shard`, by id.
fn merchants_of(shard: Shard, n: usize) -> Vec<MerchantId> {
    (0..)
        .map(|i| MerchantId::parse(&format!("m{i}")).unwrap())
        .filter(|m| shard_of(&Tenant::DEFAULT, m) == shard)
        .take(n)
        .collect()
}

/// Probes of the HALF-OPEN since T0 (a trip the hash does not hold: the
/// flush makes it again), the counts that go into a merchant's hash.
fn tally(merchant: &MerchantId, calls: u64, failures: u64) -> MerchantTallies {
    MerchantTallies {
        tenant: Tenant::DEFAULT,
        merchant: merchant.clone(),
        tallies: vec![ConnectorTally {
            connector: "a".into(),
            buckets: vec![],
            probes: Some((T0, Counts { calls, failures })),
        }],
    }
}

fn no_log() -> ShardLog {
    ShardLog::default()
}

#[test]
fn four_calls_carry_every_merchant_of_the_shard_and_a_bad_one_fails_alone() {
    let h = Harness::new();
    let s = settings();
    let shard = Shard::all().nth(3).unwrap();
    let ms = merchants_of(shard, 200);
    // A value this service never writes, in the 8th merchant's hash, and
    // probes that are not a number in the 9th's.
    let bad = keys::breaker_counts_key(&Tenant::DEFAULT, &ms[7]);
    h.runtime
        .block_on(h.inspect.hset::<(), _, _>(bad.as_str(), ("t:a", "junk")))
        .unwrap();
    let bad_ring = keys::breaker_counts_key(&Tenant::DEFAULT, &ms[8]);
    h.runtime
        .block_on(
            h.inspect
                .hset::<(), _, _>(bad_ring.as_str(), ("hc:a", "1 2 3")),
        )
        .unwrap();
    let sent: Vec<MerchantTallies> = ms
        .iter()
        .enumerate()
        .map(|(i, m)| tally(m, i as u64 + 1, 1))
        .collect();
    let before = h.metrics.render();
    let tick = h
        .runtime
        .block_on(
            h.store
                .breaker_tick(shard, &no_log(), &sent, T0, &s, deadline()),
        )
        .unwrap();
    let after = h.metrics.render();
    assert_eq!(tick.merchants.len(), 200);
    for (i, reply) in tick.merchants.iter().enumerate() {
        if i == 7 || i == 8 {
            assert!(
                matches!(reply, Err(StorageError::ForeignValue { .. })),
                "{reply:?}"
            );
            continue;
        }
        let snapshots = reply.as_ref().unwrap();
        assert_eq!(
            snapshots[0].probes,
            Counts {
                calls: i as u64 + 1,
                failures: 1
            }
        );
        assert_eq!(snapshots[0].tripped.map(|t| t.open_until_ms), Some(T0));
        let key = keys::breaker_counts_key(&Tenant::DEFAULT, &ms[i]);
        let ttl = h.pttl(key.as_str());
        assert!(ttl > 0 && ttl <= HALF.max(OPEN_FOR), "{ttl}");
    }
    assert!(h.raw(bad.as_str()).len() == 1, "the bad hash is untouched");
    assert_eq!(
        h.raw(bad_ring.as_str())["hc:a"],
        b"1 2 3",
        "so are the bad probes"
    );
    // Four script calls for the 200 merchants (64, 64, 64, 8), one after
    // the other: never a call per merchant, and none holding Redis long.
    let calls = |text: &str| {
        text.lines()
            .find(|l| {
                l.starts_with("sticky_routing_redis_command_duration_seconds_count")
                    && l.contains("command=\"breaker_flush\"")
            })
            .and_then(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .unwrap_or(0)
    };
    assert_eq!(calls(&after) - calls(&before), 4, "{after}");
}

/// A call of a tick that fails after the first: the earlier calls' merchants
/// are answered, the failing call's carry its error (not `Unavailable`: a
/// script that stopped part-way may have written some of them, so their
/// counts must not be sent again), and the later calls, never sent, are
/// `Unavailable` (`EarlierStepFailed`), with nothing of them written.
#[test]
fn a_failing_call_after_the_first_leaves_the_earlier_written_and_the_later_unsent() {
    let h = Harness::new();
    let s = settings();
    let shard = Shard::all().nth(2).unwrap();
    let ms = merchants_of(shard, 200);
    // A string where the 70th merchant's counts hash goes: the second call
    // (merchants 64..128) stops there with WRONGTYPE.
    let wrong = keys::breaker_counts_key(&Tenant::DEFAULT, &ms[70]);
    h.runtime
        .block_on(
            h.inspect
                .set::<(), _, _>(wrong.as_str(), "x", None, None, false),
        )
        .unwrap();
    let sent: Vec<MerchantTallies> = ms.iter().map(|m| tally(m, 1, 0)).collect();
    let tick = h
        .runtime
        .block_on(
            h.store
                .breaker_tick(shard, &no_log(), &sent, T0, &s, deadline()),
        )
        .unwrap();
    assert_eq!(tick.merchants.len(), 200);
    for (i, reply) in tick.merchants.iter().enumerate() {
        let key = keys::breaker_counts_key(&Tenant::DEFAULT, &ms[i]);
        match i {
            0..64 => {
                assert!(reply.is_ok(), "{i}: {reply:?}");
                assert!(!h.raw(key.as_str()).is_empty(), "{i} written");
            }
            64..128 => assert!(
                matches!(reply, Err(StorageError::Unexpected(_))),
                "{i}: {reply:?}"
            ),
            _ => {
                assert!(
                    matches!(
                        reply,
                        Err(StorageError::Unavailable {
                            why: crate::storage::NotApplied::EarlierStepFailed,
                            ..
                        })
                    ),
                    "{i}: {reply:?}"
                );
                assert!(h.raw(key.as_str()).is_empty(), "{i} not written");
            }
        }
    }
}

#[test]
fn a_tick_is_at_most_four_calls_however_many_merchants() {
    use crate::storage::store::breaker_tick_chunk as chunk;
    for merchants in [0, 1, 64, 65, 200, 1_000, 100_000, 10_000_000] {
        let size = chunk(merchants);
        assert!(size >= 64, "{merchants}: {size}");
        assert!(merchants.div_ceil(size) <= 4, "{merchants}: {size}");
    }
    assert_eq!(chunk(64), 64, "one call up to 64");
    assert_eq!(chunk(100_000), 25_000);
}

#[test]
fn a_transition_writes_its_index_entry_in_the_same_step() {
    let h = Harness::new();
    let s = settings();
    let shard = Shard::all().nth(5).unwrap();
    let ms = merchants_of(shard, 2);
    let plan = |m: &MerchantId, transition| PlannedTransition {
        tenant: Tenant::DEFAULT,
        merchant: m.clone(),
        connector: "a".into(),
        transition,
    };
    let made = h
        .runtime
        .block_on(h.store.breaker_transitions(
            shard,
            &[plan(&ms[0], trip(20, 12)), plan(&ms[1], trip(20, 15))],
            T0,
            &s,
            deadline(),
        ))
        .unwrap();
    let t = T0 + OPEN_FOR;
    assert_eq!(
        made.iter()
            .map(|m| m.as_ref().unwrap().unwrap())
            .collect::<Vec<_>>(),
        [
            Tripped {
                open_until_ms: t,
                calls: 20,
                failures: 12
            },
            Tripped {
                open_until_ms: t,
                calls: 20,
                failures: 15
            },
        ]
    );
    // No separate index write: the next poll reads both trips.
    let index = keys::breaker_index_key(shard);
    assert_eq!(h.raw(index.as_str()).len(), 2);
    let tick = h
        .runtime
        .block_on(
            h.store
                .breaker_tick(shard, &no_log(), &[], T0 + 1, &s, deadline()),
        )
        .unwrap();
    assert_eq!(tick.index.len(), 2);
    let ttl = h.pttl(index.as_str());
    assert!(ttl > OPEN_FOR - 1_000 && ttl <= HALF.max(OPEN_FOR), "{ttl}");
    // A close takes its entry out in the same step; a stale one is refused.
    let closed = h
        .runtime
        .block_on(h.store.breaker_transitions(
            shard,
            &[
                plan(&ms[0], BreakerTransition::Close { open_until_ms: t }),
                plan(
                    &ms[1],
                    BreakerTransition::Close {
                        open_until_ms: t - 1,
                    },
                ),
            ],
            t + 10,
            &s,
            deadline(),
        ))
        .unwrap();
    assert!(matches!(closed[0], Ok(Some(_))));
    assert!(matches!(closed[1], Ok(None)));
    let left: Vec<String> = h.raw(index.as_str()).into_keys().collect();
    assert_eq!(left.len(), 1);
    assert!(left[0].contains(ms[1].as_str()), "{left:?}");
}

#[test]
fn the_transitions_time_makes_are_reported_once() {
    let h = Harness::new();
    let s = settings();
    let shard = Shard::all().nth(9).unwrap();
    let ms = merchants_of(shard, 1);
    let tripped = Tripped {
        open_until_ms: T0 + OPEN_FOR,
        calls: 20,
        failures: 12,
    };
    h.runtime
        .block_on(
            h.store
                .index_trip(&Tenant::DEFAULT, &ms[0], "a", tripped, &s, deadline()),
        )
        .unwrap();
    let poll = |now: i64| {
        h.runtime
            .block_on(
                h.store
                    .breaker_tick(shard, &no_log(), &[], now, &s, deadline()),
            )
            .unwrap()
    };
    // Still OPEN: nothing.
    assert!(poll(T0 + 1).timed.is_empty());
    // OPEN ended: HALF-OPEN, reported to this poll and no later one.
    let t = tripped.open_until_ms;
    let tick = poll(t);
    assert_eq!(tick.timed.len(), 1);
    assert_eq!(tick.timed[0].kind, TimeTransition::HalfOpen);
    assert_eq!(tick.timed[0].tripped, tripped);
    assert_eq!(tick.index[0].tripped, Some(tripped), "the mark reads back");
    assert!(poll(t + 1).timed.is_empty());
    assert!(poll(t + HALF - 1).timed.is_empty());
    // Undecided for 2 x WINDOW: CLOSED, reported once, and taken out.
    let tick = poll(t + HALF);
    assert_eq!(tick.timed.len(), 1);
    assert_eq!(tick.timed[0].kind, TimeTransition::Closed);
    assert!(tick.index.is_empty());
    assert!(poll(t + HALF + 1).timed.is_empty());
}

/// Redis's CPU per merchant of a shard's tick, as production sees it: the
/// default window (12 ring slots), 500 merchants of one shard with one
/// call each, 20 ticks of 500 ms. Not a check: a probe for the script's
/// cost, run by hand (`cargo test --release --lib tick_cost -- --ignored
/// --nocapture`); the figures that count come from `make bench`.
#[test]
#[ignore = "a measurement, run by hand"]
fn tick_cost_per_merchant() {
    let h = Harness::new();
    let s = BreakerSettings::DEFAULT;
    let shard = Shard::all().nth(3).unwrap();
    let ms = merchants_of(shard, 500);
    let usec = || {
        use fred::interfaces::ClientLike as _;
        let info: String = h
            .runtime
            .block_on(h.inspect.custom(fred::cmd!("INFO"), vec!["commandstats"]))
            .unwrap();
        info.lines()
            .find(|l| l.starts_with("cmdstat_evalsha:"))
            .and_then(|l| {
                l.split("usec=")
                    .nth(1)?
                    .split(',')
                    .next()?
                    .parse::<u64>()
                    .ok()
            })
            .unwrap_or(0)
    };
    // The best of 5 rounds of 20 ticks: the machine's noise only adds.
    let ticks = 20;
    let mut best = f64::MAX;
    let mut offsets = std::collections::BTreeMap::<i64, u64>::new();
    for round in 0..5 {
        let before = usec();
        for tick in 0..ticks {
            let now = T0 + (round * ticks + tick) * 500;
            let sent: Vec<MerchantTallies> = ms
                .iter()
                .map(|m| MerchantTallies {
                    tenant: Tenant::DEFAULT,
                    merchant: m.clone(),
                    tallies: vec![ConnectorTally {
                        connector: "GIGADAT".into(),
                        buckets: vec![(
                            s.bucket_of(now),
                            Counts {
                                calls: 1,
                                failures: 0,
                            },
                        )],
                        probes: None,
                    }],
                })
                .collect();
            // As the engine sends them: appended to the shard's log, and
            // read back from this instance's offset.
            let period = s.bucket_of(now);
            let log = ShardLog {
                frames: log_frames(&sent),
                append_period: period,
                reads: vec![(period, offsets.get(&period).copied().unwrap_or(0))],
            };
            let tick = h
                .runtime
                .block_on(h.store.breaker_tick(shard, &log, &[], now, &s, deadline()))
                .unwrap();
            *offsets.entry(period).or_default() += tick.log[0].consumed;
            assert_eq!(tick.log[0].records.len(), ms.len());
        }
        let spent = usec() - before;
        best = best.min(spent as f64 / (ticks as f64 * ms.len() as f64));
    }
    println!("breaker_flush: {best:.2} µs per merchant (best of 5)");
}
