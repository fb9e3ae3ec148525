//! What the report reads (contract v1.2 §4): every day hash of the
//! tenant's merchants (SCAN of the experiment prefix on every primary,
//! both layouts, HGETALL of each key), plus what of each shard's counts
//! log is not yet added into them. It reads as `export` does, with the
//! read-only user of `deploy/redis-acl-export.txt`.
//!
//! The log is added into the hashes a chunk at a time while the report
//! scans, so a shard's hashes and its log are summed only when no chunk of
//! it was added between the start of the shard's scan and the read of its
//! log; else that shard is scanned again (at most [`RESCANS`] times), so
//! no outcome is missed or counted twice.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::domain::ids::MerchantId;
use crate::domain::keys::{
    EXPERIMENT_KEY_PREFIX, experiment_key_patterns, experiment_shard_pattern, parse_experiment_key,
    parse_experiment_log_key,
};
use crate::domain::shards::{SHARDS, Shard, shard_of};
use crate::domain::tenant::Tenant;
use crate::storage::{ExperimentCounts, HashContents, HashScanner, ScanError, experiment_unadded};

/// How often one shard is scanned again before the report gives up.
const RESCANS: usize = 5;

/// What the report asks for.
pub(super) struct Wanted<'a> {
    pub tenant: &'a Tenant,
    pub merchant: Option<&'a MerchantId>,
    pub days: HashSet<u32>,
}

impl Wanted<'_> {
    fn wants(&self, tenant: &Tenant, merchant: &MerchantId, day: u32) -> bool {
        tenant == self.tenant
            && self.merchant.is_none_or(|m| m == merchant)
            && self.days.contains(&day)
    }
}

/// What the scan found.
#[derive(Debug, Default)]
pub(super) struct Read {
    /// Each merchant's counts summed over the days asked for, by id.
    pub by_merchant: BTreeMap<String, ExperimentCounts>,
    /// Keys under the prefix that the service cannot have written, or
    /// whose counts are not whole numbers.
    pub unreadable: u64,
    /// Shards scanned again, as chunks of their logs were added meanwhile.
    pub rescans: u64,
}

/// Counts by merchant id.
type ByMerchant = HashMap<String, ExperimentCounts>;

/// Scans, reads the logs, sums.
pub(super) async fn read_counts(
    scanner: &HashScanner,
    wanted: &Wanted<'_>,
) -> Result<Read, String> {
    let problem = |error: ScanError| error.to_string();
    let mut before = Vec::with_capacity(SHARDS);
    for shard in Shard::all() {
        before.push(scanner.experiment_log_state(shard).await.map_err(problem)?);
    }
    let mut read = Read::default();
    let mut sharded: Vec<ByMerchant> = vec![ByMerchant::new(); SHARDS];
    let mut legacy = ByMerchant::new();
    for pattern in experiment_key_patterns(wanted.tenant, wanted.merchant) {
        scan(
            scanner,
            &pattern,
            wanted,
            &mut read.unreadable,
            &mut |shard, id, counts| {
                let into = match shard {
                    Some(shard) => &mut sharded[shard.index()],
                    None => &mut legacy,
                };
                into.entry(id).or_default().add(&counts);
            },
        )
        .await?;
    }
    for shard in Shard::all() {
        let mut rescans = 0;
        loop {
            let (state, frames) = scanner.experiment_log(shard).await.map_err(problem)?;
            if state.same_batch(&before[shard.index()]) {
                let (tail, unreadable) = experiment_unadded(&frames, state.adding, |e| {
                    wanted.wants(&e.tenant, &e.merchant, e.day)
                });
                read.unreadable += unreadable;
                for entry in tail {
                    let into = &mut sharded[shard.index()];
                    into.entry(entry.merchant.as_str().to_owned())
                        .or_default()
                        .add(&entry.counts);
                }
                break;
            }
            rescans += 1;
            read.rescans += 1;
            if rescans > RESCANS {
                return Err(format!(
                    "the experiment counts of shard {} were being added into their hashes \
                     through {RESCANS} scans of it; run the report again",
                    shard.index()
                ));
            }
            before[shard.index()] = state;
            sharded[shard.index()] = rescan(scanner, shard, wanted).await?;
        }
    }
    if let Some(merchant) = wanted.merchant {
        read.by_merchant
            .insert(merchant.as_str().to_owned(), ExperimentCounts::default());
    }
    for (id, counts) in sharded.into_iter().flatten().chain(legacy) {
        read.by_merchant.entry(id).or_default().add(&counts);
    }
    Ok(read)
}

/// `shard`'s sharded hashes alone, scanned again.
async fn rescan(
    scanner: &HashScanner,
    shard: Shard,
    wanted: &Wanted<'_>,
) -> Result<ByMerchant, String> {
    let mut found = ByMerchant::new();
    // Unreadable keys were counted by the first scan.
    let mut unreadable = 0;
    let pattern = experiment_shard_pattern(shard, wanted.tenant, wanted.merchant);
    scan(
        scanner,
        &pattern,
        wanted,
        &mut unreadable,
        &mut |of, id, counts| {
            if of == Some(shard) {
                found.entry(id).or_default().add(&counts);
            }
        },
    )
    .await?;
    Ok(found)
}

/// Every hash `pattern` matches that `wanted` wants, handed to `found`
/// with its shard (`None`: the layout before the shards) and merchant id;
/// the log keys are passed over, and keys the service does not write are
/// counted in `unreadable`.
async fn scan(
    scanner: &HashScanner,
    pattern: &str,
    wanted: &Wanted<'_>,
    unreadable: &mut u64,
    found: &mut impl FnMut(Option<Shard>, String, ExperimentCounts),
) -> Result<(), String> {
    // SCAN may name a key twice (its own guarantee): each is summed once.
    let mut seen: HashSet<Vec<u8>> = HashSet::new();
    let mut pages = scanner.scan(pattern);
    while let Some(page) = pages.recv().await {
        for hash in page.map_err(|error| error.to_string())? {
            let key = std::str::from_utf8(&hash.key).ok();
            if key.and_then(parse_experiment_log_key).is_some() {
                continue;
            }
            let parsed = key.and_then(parse_experiment_key);
            let counts = match (&parsed, &hash.contents) {
                // Deleted or expired between SCAN and HGETALL: no sighting.
                (_, HashContents::Fields(fields)) if fields.is_empty() => continue,
                (Some(_), HashContents::Fields(fields)) => ExperimentCounts::from_fields(
                    fields.iter().map(|(f, v)| (f.as_slice(), v.as_slice())),
                )
                .ok(),
                _ => None,
            };
            if !seen.insert(hash.key.clone()) {
                continue;
            }
            let (Some((tenant, merchant, day)), Some(counts)) = (parsed, counts) else {
                *unreadable += 1;
                continue;
            };
            // The pattern keeps to the merchant asked for, but a glob can
            // only narrow so far, and the default tenant's matches every
            // tenant's keys: the parsed ids decide.
            if !wanted.wants(&tenant, &merchant, day) {
                continue;
            }
            let is_sharded = key
                .and_then(|k| k.strip_prefix(EXPERIMENT_KEY_PREFIX))
                .is_some_and(|rest| rest.starts_with('{'));
            let shard = is_sharded.then(|| shard_of(&tenant, &merchant));
            found(shard, merchant.as_str().to_owned(), counts);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
