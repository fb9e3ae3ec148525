//! How one connection's share of a batch is cut into script calls, so that
//! a refusal someone else can undo never splits one key's calls.
//!
//! NOSCRIPT refuses a whole script call, and any client (another of the
//! import's connections, or the service's EVAL fallback) may load the
//! script again at any moment. If one key's calls went in two script calls,
//! the first could be refused and the second run once the script is back:
//! the key's calls would then apply out of order when the first is sent
//! again. So a key's calls share one script call; a key with more calls
//! than one script call takes gets script calls of its own, sent with the
//! script's body (EVAL), which is never refused for a missing script.
//! Calls on different keys are independent, and may be reordered.

use std::collections::HashMap;

use fred::util::redis_keyslot;

use super::super::ops::ScriptCall;

/// The calls of one script call, in order, each with its index in the
/// batch.
#[derive(Debug)]
pub(super) struct Chunk {
    pub calls: Vec<(usize, ScriptCall)>,
    /// Part of one key's calls that span several script calls: sent as
    /// EVAL, so that no part can be refused while a later part runs.
    pub with_body: bool,
}

/// `calls` (one connection's, in batch order) cut into chunks of at most
/// `most` calls, each key's calls in order and, when they fit, in one
/// chunk. On Cluster (`by_slot`) a chunk holds one slot's keys, as a script
/// call must.
pub(super) fn chunks(calls: Vec<(usize, ScriptCall)>, by_slot: bool, most: usize) -> Vec<Chunk> {
    let most = most.max(1);
    let mut chunks = Vec::new();
    for lane in lanes(calls, by_slot) {
        let mut open: Vec<(usize, ScriptCall)> = Vec::new();
        for group in by_key(lane) {
            if group.len() > most {
                chunks.extend(close(&mut open));
                let mut group = group.into_iter().peekable();
                while group.peek().is_some() {
                    let calls = group.by_ref().take(most).collect();
                    chunks.push(Chunk {
                        calls,
                        with_body: true,
                    });
                }
                continue;
            }
            if open.len() + group.len() > most {
                chunks.extend(close(&mut open));
            }
            open.extend(group);
        }
        chunks.extend(close(&mut open));
    }
    chunks
}

fn close(open: &mut Vec<(usize, ScriptCall)>) -> Option<Chunk> {
    (!open.is_empty()).then(|| Chunk {
        calls: std::mem::take(open),
        with_body: false,
    })
}

/// On Cluster, the calls of each slot, in first-seen order; otherwise all.
fn lanes(calls: Vec<(usize, ScriptCall)>, by_slot: bool) -> Vec<Vec<(usize, ScriptCall)>> {
    if !by_slot {
        return vec![calls];
    }
    group_by(calls, |call| redis_keyslot(call.key.as_bytes()))
}

/// Each key's calls together, in order; keys in first-seen order.
fn by_key(calls: Vec<(usize, ScriptCall)>) -> Vec<Vec<(usize, ScriptCall)>> {
    group_by(calls, |call| call.key.clone())
}

fn group_by<K: std::hash::Hash + Eq>(
    calls: Vec<(usize, ScriptCall)>,
    key: impl Fn(&ScriptCall) -> K,
) -> Vec<Vec<(usize, ScriptCall)>> {
    let mut groups: Vec<Vec<(usize, ScriptCall)>> = Vec::new();
    let mut group_of: HashMap<K, usize> = HashMap::new();
    for entry in calls {
        let group = *group_of.entry(key(&entry.1)).or_insert_with(|| {
            groups.push(Vec::new());
            groups.len() - 1
        });
        groups[group].push(entry);
    }
    groups
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::storage::ops::{Decode, ScriptName};

    fn call(key: u8) -> ScriptCall {
        ScriptCall {
            script: ScriptName::RecordFailure,
            key: format!("k{key}"),
            args: Vec::new(),
            decode: Decode::Failure,
        }
    }

    proptest! {
        #[test]
        fn every_call_once_each_key_in_order_and_split_only_with_the_body(
            keys in proptest::collection::vec(0u8..12, 0..300),
            most in 1usize..70,
            by_slot: bool,
        ) {
            let calls: Vec<_> = keys.iter().map(|&k| call(k)).enumerate().collect();
            let chunks = chunks(calls, by_slot, most);
            let mut seen = Vec::new();
            let mut chunks_of: HashMap<String, Vec<usize>> = HashMap::new();
            for (at, chunk) in chunks.iter().enumerate() {
                prop_assert!(!chunk.calls.is_empty() && chunk.calls.len() <= most);
                if by_slot {
                    let slot = redis_keyslot(chunk.calls[0].1.key.as_bytes());
                    prop_assert!(chunk.calls.iter().all(|(_, c)| redis_keyslot(c.key.as_bytes()) == slot));
                }
                for (index, call) in &chunk.calls {
                    seen.push(*index);
                    prop_assert_eq!(&call.key, &format!("k{}", keys[*index]));
                    let list = chunks_of.entry(call.key.clone()).or_default();
                    if list.last() != Some(&at) {
                        list.push(at);
                    }
                }
            }
            // Every call exactly once.
            let mut sorted = seen.clone();
            sorted.sort_unstable();
            prop_assert_eq!(sorted, (0..keys.len()).collect::<Vec<_>>());
            // A key's calls in batch order, across chunks too.
            for (key, list) in &chunks_of {
                let order: Vec<usize> = list
                    .iter()
                    .flat_map(|&at| chunks[at].calls.iter().filter(|(_, c)| &c.key == key).map(|(i, _)| *i))
                    .collect();
                prop_assert!(order.windows(2).all(|w| w[0] < w[1]), "{key}: {order:?}");
                // Split over chunks only when it does not fit in one, and
                // then every part goes with the body.
                let count = order.len();
                if list.len() > 1 {
                    prop_assert!(count > most, "{key}: {count} calls split");
                    prop_assert!(list.iter().all(|&at| chunks[at].with_body));
                }
            }
        }
    }

    #[test]
    fn small_keys_share_a_chunk_and_a_big_one_goes_alone_with_the_body() {
        let keys = [1, 2, 1, 3, 3, 3, 3, 2];
        let calls: Vec<_> = keys.iter().map(|&k| call(k)).enumerate().collect();
        let cut: Vec<(Vec<usize>, bool)> = chunks(calls, false, 3)
            .into_iter()
            .map(|c| (c.calls.iter().map(|(i, _)| *i).collect(), c.with_body))
            .collect();
        assert_eq!(
            cut,
            vec![
                (vec![0, 2], false),
                (vec![1, 7], false),
                (vec![3, 4, 5], true),
                (vec![6], true),
            ]
        );
    }
}
