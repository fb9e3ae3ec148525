//! The breaker's counts log on real Redis (issue 41): every instance's
//! appends are read back by each instance once, from its own offsets, in
//! the order they were made; the log key lives a window and three
//! buckets from its last append.

use super::*;
use crate::domain::breaker::Counts;
use crate::domain::shards::Shard;
use crate::storage::{ConnectorTally, LogRecord, MerchantTallies, ShardLog, log_frames};

// The breaker scripts' tests' settings (a 1 s window).
use super::breaker::{T0, settings};

fn tallies(m: &str, bucket: i64, calls: u64, failures: u64) -> MerchantTallies {
    MerchantTallies {
        tenant: Tenant::DEFAULT,
        merchant: MerchantId::parse(m).unwrap(),
        tallies: vec![ConnectorTally {
            connector: "a".into(),
            buckets: vec![(bucket, Counts { calls, failures })],
            probes: None,
        }],
    }
}

fn record(m: &str, bucket: i64, calls: u64, failures: u64) -> LogRecord {
    LogRecord {
        tenant: Tenant::DEFAULT,
        merchant: m.into(),
        connector: "a".into(),
        bucket,
        counts: Counts { calls, failures },
    }
}

#[test]
fn every_instances_appends_are_read_by_each_once_in_order() {
    let h = Harness::new();
    let s = settings();
    let shard = Shard::all().nth(6).unwrap();
    let period = s.bucket_of(T0);
    // One tick of an instance: its frames appended, the log read from
    // its offset (its own frames included), the offset moved on.
    let tick = |frames: Vec<u8>, from: u64| {
        let log = ShardLog {
            frames,
            append_period: period,
            reads: vec![(period - 1, 0), (period, from), (period + 1, 0)],
        };
        let mut tick = h
            .runtime
            .block_on(h.store.breaker_tick(shard, &log, &[], T0, &s, deadline()))
            .unwrap();
        assert!(tick.log[0].records.is_empty() && tick.log[2].records.is_empty());
        tick.log.remove(1)
    };
    let one = tick(log_frames(&[tallies("m1", period, 3, 1)]), 0);
    assert_eq!(one.records, [record("m1", period, 3, 1)]);
    let two = tick(log_frames(&[tallies("m2", period, 1, 0)]), 0);
    assert_eq!(
        two.records,
        [record("m1", period, 3, 1), record("m2", period, 1, 0)],
        "a second instance reads the first's append and its own"
    );
    // The first instance, from its offset: only what is new.
    let again = tick(Vec::new(), one.consumed);
    assert_eq!(again.records, [record("m2", period, 1, 0)]);
    assert_eq!(one.consumed + again.consumed, two.consumed);
    assert!(
        tick(Vec::new(), two.consumed).records.is_empty(),
        "read once"
    );

    let key = keys::breaker_log_key(shard, period);
    let ttl = h.pttl(&key);
    let life = s.window_ms() + 3 * s.bucket_ms();
    assert!(life - 1_000 < ttl && ttl <= life, "{ttl}");
    // Only the appended period's key was made.
    assert_eq!(h.keys_matching("sticky_brk_l*"), [key]);
}
