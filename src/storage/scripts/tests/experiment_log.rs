//! The experiment counts log on real Redis: a push writes only the log, a
//! batch's chunks are each added once whichever instance sends them and
//! however often, a read at any step of a batch counts every outcome once,
//! and the batch's frames are dropped when it is done.

use std::time::Duration;

use super::*;
use crate::domain::shards::{Shard, shard_of};
use crate::domain::tenant::Tenant;
use crate::storage::{ExperimentBatch, ExperimentCounts, ExperimentEntry, experiment_frame};

const DAY: u32 = 20261207;
const RETENTION: Duration = Duration::from_secs(35 * 86_400);

/// `n` merchants of `shard`, each with one treated success.
fn merchants_of(shard: Shard, n: usize) -> Vec<ExperimentEntry> {
    (0..)
        .map(|i| MerchantId::parse(&format!("m{i}")).unwrap())
        .filter(|m| shard_of(&Tenant::DEFAULT, m) == shard)
        .take(n)
        .map(|merchant| ExperimentEntry {
            tenant: Tenant::DEFAULT,
            merchant,
            day: DAY,
            counts: ExperimentCounts {
                counts: [1, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            },
        })
        .collect()
}

impl Harness {
    fn push(&self, shard: Shard, entries: &[ExperimentEntry]) -> crate::storage::ExperimentLog {
        let frame = experiment_frame(entries);
        self.runtime
            .block_on(
                self.store
                    .append_experiment(shard, frame, RETENTION, 1, deadline()),
            )
            .unwrap()
    }

    /// Every entry's treated successes as GetUplift reads them.
    fn read_all(&self, entries: &[ExperimentEntry]) -> Vec<u64> {
        entries
            .iter()
            .map(|e| {
                let read = self
                    .runtime
                    .block_on(self.store.read_experiment(
                        &e.tenant,
                        &e.merchant,
                        &[DAY],
                        deadline(),
                    ))
                    .unwrap();
                read[0].1.counts[0]
            })
            .collect()
    }
}

#[test]
fn a_push_writes_only_the_log_and_an_empty_one_nothing() {
    let h = Harness::new();
    let shard = Shard::all().nth(3).unwrap();
    let state = h.push(shard, &[]);
    assert_eq!(state, Default::default());
    assert!(
        h.keys_matching("sticky_exp_*").is_empty(),
        "an empty push wrote"
    );

    let entries = merchants_of(shard, 5);
    let state = h.push(shard, &entries);
    assert_eq!((state.frames, state.batch, state.adding), (1, 0, None));
    assert_eq!(state.since, Some(1));
    let state = h.push(shard, &entries[..2]);
    assert_eq!(
        (state.frames, state.since),
        (2, Some(1)),
        "since is the oldest's"
    );
    let mut keys = h.keys_matching("sticky_exp_*");
    keys.sort();
    let tag = shard.tag();
    assert_eq!(
        keys,
        vec![
            format!("sticky_exp_l{{{tag}}}"),
            format!("sticky_exp_m{{{tag}}}")
        ]
    );
    for key in &keys {
        let pttl = h.pttl(key);
        assert!(
            pttl > RETENTION.as_millis() as i64 - 60_000,
            "{key}: {pttl}"
        );
    }
    // Read before any batch: the log alone.
    assert_eq!(h.read_all(&entries), vec![2, 2, 1, 1, 1]);
}

#[test]
fn each_chunk_is_added_once_whoever_sends_it_and_reads_count_each_outcome_once() {
    let h = Harness::new();
    let shard = Shard::all().nth(5).unwrap();
    let entries = merchants_of(shard, 600);
    h.push(shard, &entries);
    h.push(shard, &entries[..300]);
    let expected: Vec<u64> = (0..600).map(|i| if i < 300 { 2 } else { 1 }).collect();
    assert_eq!(h.read_all(&entries), expected);

    let frames = h
        .runtime
        .block_on(h.store.read_experiment_batch(shard, 2, deadline()))
        .unwrap();
    let batch = ExperimentBatch::of(&frames);
    let chunks = batch.chunks.len() as u64;
    assert_eq!(chunks, 3);
    let compact = |number: u64, frames: u64, chunk: u64| {
        h.runtime
            .block_on(h.store.compact_experiment(
                shard,
                number,
                frames,
                chunks,
                chunk,
                &batch.chunks[chunk as usize],
                RETENTION,
                7,
                deadline(),
            ))
            .unwrap()
    };
    // A batch the log is too short for, or numbered past the next, or not
    // begun at chunk 0: nothing written.
    for (number, frames, chunk) in [(1, 3, 0), (2, 2, 0), (1, 2, 1)] {
        let done = compact(number, frames, chunk);
        assert!(!done.added, "{number} {frames} {chunk}");
        assert_eq!(done.state.adding, None);
    }
    // A frame pushed after the batch's frames stays out of it.
    h.push(shard, &entries[..1]);
    let mut expected = expected;
    expected[0] += 1;

    for chunk in 0..chunks {
        let done = compact(1, 2, chunk);
        assert!(done.added, "chunk {chunk}");
        assert!(done.answers.iter().all(Result::is_ok));
        // Sent again (another instance, or a reply that was lost): refused.
        let again = compact(1, 2, chunk);
        assert!(!again.added, "chunk {chunk} twice");
        assert_eq!(h.read_all(&entries), expected, "after chunk {chunk}");
    }
    let state = h.push(shard, &[]);
    assert_eq!((state.frames, state.batch, state.adding), (1, 1, None));
    assert_eq!(state.since, Some(7), "the frame pushed during the batch");
    // The hashes hold the batch; the log holds the frame after it.
    let first = keys::experiment_key(&Tenant::DEFAULT, &entries[0].merchant, DAY);
    assert_eq!(h.hash(first.as_str())["t:f:s"], 2);
    assert_eq!(h.read_all(&entries), expected);
    let hash_ttl = h.pttl(first.as_str());
    assert!(
        hash_ttl > RETENTION.as_millis() as i64 - 60_000,
        "{hash_ttl}"
    );

    // The rest, added by the test's whole-log helper, then the next batch
    // is numbered on.
    h.runtime
        .block_on(h.store.compact_experiment_log(shard, RETENTION, deadline()))
        .unwrap();
    let state = h.push(shard, &[]);
    assert_eq!((state.frames, state.batch, state.since), (0, 2, None));
    assert_eq!(h.read_all(&entries), expected);
    assert!(
        h.keys_matching(&format!("sticky_exp_l{{{}}}", shard.tag()))
            .is_empty()
    );
}

#[test]
fn a_foreign_hash_is_passed_over_and_the_chunk_still_moves_on() {
    let h = Harness::new();
    let shard = Shard::all().next().unwrap();
    let entries = merchants_of(shard, 3);
    let bad = keys::experiment_key(&Tenant::DEFAULT, &entries[1].merchant, DAY);
    h.runtime.block_on(async {
        let _: () = h.inspect.hset(bad.as_str(), ("t:f:s", "x")).await.unwrap();
    });
    h.push(shard, &entries);
    let answers = h
        .runtime
        .block_on(h.store.compact_experiment_log(shard, RETENTION, deadline()))
        .unwrap();
    assert_eq!(
        answers.iter().filter(|a| a.is_err()).count(),
        1,
        "{answers:?}"
    );
    assert_eq!(h.raw(bad.as_str())["t:f:s"], b"x".to_vec());
    for e in [&entries[0], &entries[2]] {
        let key = keys::experiment_key(&Tenant::DEFAULT, &e.merchant, DAY);
        assert_eq!(h.hash(key.as_str())["t:f:s"], 1);
    }
    assert_eq!(h.push(shard, &[]).frames, 0);
}

/// A user that may push but not run one of the compaction's writes: the
/// chunk is refused whole, nothing written, so it is never added twice
/// (a refusal of `LTRIM` after the batch moved on would add it again).
#[test]
fn a_chunk_the_user_may_not_write_whole_is_refused_with_nothing_written() {
    let h = Harness::new();
    let shard = Shard::all().nth(7).unwrap();
    let entries = merchants_of(shard, 3);
    h.push(shard, &entries);
    for revoked in ["-ltrim", "-hdel", "-hincrby"] {
        test_support::redis_server::redis_cli(
            h._redis.port,
            &["ACL", "SETUSER", SERVICE_USER, revoked],
        );
        let refused =
            h.runtime
                .block_on(h.store.compact_experiment_log(shard, RETENTION, deadline()));
        assert!(
            matches!(
                refused,
                Err(StorageError::Unavailable {
                    why: crate::storage::NotApplied::Permission,
                    ..
                })
            ),
            "{revoked}: {refused:?}"
        );
        let state = h.push(shard, &[]);
        assert_eq!(
            (state.frames, state.batch, state.adding),
            (1, 0, None),
            "{revoked}"
        );
        let grant = format!("+{}", &revoked[1..]);
        test_support::redis_server::redis_cli(
            h._redis.port,
            &["ACL", "SETUSER", SERVICE_USER, &grant],
        );
    }
    assert!(
        h.keys_matching("sticky_exp_{*").is_empty(),
        "no day hash written"
    );
    // Granted again: added once.
    h.runtime
        .block_on(h.store.compact_experiment_log(shard, RETENTION, deadline()))
        .unwrap();
    assert_eq!(h.read_all(&entries), vec![1, 1, 1]);
    assert_eq!(h.push(shard, &[]).frames, 0);
}
