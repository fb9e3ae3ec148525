//! The experiment counts' tier 2 (contract v1.2 §4): one hash per (tenant,
//! merchant) and UTC day (`domain::keys::experiment_key`, the tenant's
//! namespace in the key, so two tenants' merchants of one id never share
//! a count), its fields
//! [`EXPERIMENT_FIELDS`] counting outcomes; the [`RedisStore`] calls the
//! experiment engine (`src/experiment/`) makes to add to them
//! (`scripts/experiment_flush.lua`, one call per shard of
//! `domain::shards`, however many merchants have counts) and GetUplift
//! makes to read them, and [`ExperimentCounts`], one day's counts, which
//! the report decodes too.
//!
//! The flush is a background write and goes through the Sentinel write
//! fence as the breaker's do: refused, unsent, while a failover is under
//! way.

use std::time::{Duration, Instant};

use fred::interfaces::HashesInterface;
use fred::prelude::Value;
use tokio::task::JoinSet;

use super::RedisStore;
use super::breaker::tick_chunk;
use crate::domain::ids::MerchantId;
use crate::domain::keys::{self, EXPERIMENT_FIELDS, ExperimentKey};
use crate::domain::shards::{Shard, shard_of};
use crate::domain::tenant::Tenant;
use crate::storage::error::{NotApplied, StorageError};
use crate::telemetry::RedisCommand;

/// One merchant's counts of one day: `counts[i]` is the count of field
/// [`EXPERIMENT_FIELDS`]`[i]`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExperimentCounts {
    pub counts: [u64; EXPERIMENT_FIELDS.len()],
}

impl ExperimentCounts {
    /// Whether every count is 0.
    pub fn is_empty(&self) -> bool {
        self.counts.iter().all(|&n| n == 0)
    }

    /// The count of `field` (`None` for a field the hash never holds).
    pub fn get(&self, field: &str) -> Option<u64> {
        let at = EXPERIMENT_FIELDS.iter().position(|f| *f == field)?;
        Some(self.counts[at])
    }

    /// Adds `other`'s counts (saturating: a sum of many days' counts can
    /// never wrap).
    pub fn add(&mut self, other: &Self) {
        for (mine, theirs) in self.counts.iter_mut().zip(other.counts) {
            *mine = mine.saturating_add(theirs);
        }
    }

    /// A day's counts from its hash's fields and values, as bytes (HGETALL,
    /// or the report's scan). A field this service does not write is
    /// skipped (a later version's, say); a value of one of its fields that
    /// is not a whole number is an error.
    pub fn from_fields<'a>(
        fields: impl IntoIterator<Item = (&'a [u8], &'a [u8])>,
    ) -> Result<Self, StorageError> {
        let mut counts = Self::default();
        for (field, value) in fields {
            let Some(at) = EXPERIMENT_FIELDS.iter().position(|f| f.as_bytes() == field) else {
                continue;
            };
            let count = std::str::from_utf8(value)
                .ok()
                .filter(|text| !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|text| text.parse::<u64>().ok())
                .ok_or_else(foreign)?;
            counts.counts[at] = count;
        }
        Ok(counts)
    }
}

impl RedisStore {
    /// Adds one shard's pending counts (each a (tenant, merchant)'s of one
    /// UTC day, `YYYYMMDD`) into their hashes (experiment_flush.lua, one
    /// call), each hash's TTL set to `retention`: per entry, in order,
    /// `Ok` or why nothing of it was written. `entries` must all be of
    /// `shard`; an entry without counts is sent as none.
    ///
    /// As a breaker tick, the entries go in at most
    /// [`super::breaker::TICK_CALLS_PER_SHARD`] calls, one after the other, so no call
    /// holds Redis long; when a call after the first fails, its entries
    /// carry its error and the later ones, never sent, are `Unavailable`
    /// (`EarlierStepFailed`).
    pub async fn flush_experiment(
        &self,
        shard: Shard,
        entries: &[ExperimentEntry],
        retention: Duration,
        deadline: Instant,
    ) -> Result<Vec<Result<(), StorageError>>, StorageError> {
        let mut chunks = entries.chunks(tick_chunk(entries.len()).max(1));
        let Some(first) = chunks.next() else {
            return Ok(Vec::new());
        };
        let mut answers = self
            .flush_experiment_call(shard, first, retention, deadline)
            .await?;
        for chunk in chunks {
            match self
                .flush_experiment_call(shard, chunk, retention, deadline)
                .await
            {
                Ok(more) => answers.extend(more),
                Err(error) => {
                    StorageError::fill_after_failure(
                        &mut answers,
                        &error,
                        chunk.len(),
                        entries.len(),
                    );
                    break;
                }
            }
        }
        Ok(answers)
    }

    /// One call of a shard's flush (experiment_flush.lua).
    async fn flush_experiment_call(
        &self,
        shard: Shard,
        entries: &[ExperimentEntry],
        retention: Duration,
        deadline: Instant,
    ) -> Result<Vec<Result<(), StorageError>>, StorageError> {
        let keys: Vec<ExperimentKey> = entries
            .iter()
            .map(|e| keys::experiment_key(&e.tenant, &e.merchant, e.day))
            .collect();
        debug_assert!(
            entries
                .iter()
                .all(|e| shard_of(&e.tenant, &e.merchant) == shard)
        );
        let key_list: Vec<&str> = keys.iter().map(ExperimentKey::as_str).collect();
        let retention_ms = u64::try_from(retention.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        let mut args = vec![Value::from(retention_ms.to_string())];
        for entry in entries {
            let fields = entry.counts.counts.iter().filter(|&&n| n > 0).count();
            args.push(Value::from(fields.to_string()));
            for (field, &count) in EXPERIMENT_FIELDS.iter().zip(&entry.counts.counts) {
                if count > 0 {
                    args.push(Value::from(*field));
                    args.push(Value::from(count.to_string()));
                }
            }
        }
        self.exec.check_fence()?;
        let script = &self.exec.scripts.experiment_flush;
        let (keys_ref, args, metrics) = (&key_list[..], &args[..], &*self.exec.metrics);
        let route = key_list.first().copied().unwrap_or_default();
        let reply: Vec<i64> = self
            .exec
            .on_key_background(script.command, route, deadline, |client| async move {
                script.run_keys(&client, keys_ref, args, metrics).await
            })
            .await?;
        if reply.len() != entries.len() {
            return Err(StorageError::Unexpected(format!(
                "experiment_flush replied {} answers for {} hashes",
                reply.len(),
                entries.len()
            )));
        }
        Ok(reply
            .iter()
            .zip(&key_list)
            .map(|(&answer, key)| {
                let error = match answer {
                    1 => return Ok(()),
                    -1 => foreign(),
                    -2 => StorageError::Unavailable {
                        why: NotApplied::Permission,
                        detail: "the Redis user may not run PEXPIRE on this key (needs \
                                 +pexpire on ~sticky_exp_*), so the script wrote nothing"
                            .into(),
                    },
                    _ => StorageError::Unexpected(format!("experiment_flush replied {answer}")),
                };
                self.exec.note_refusal(key, &error);
                Err(error)
            })
            .collect())
    }

    /// One (tenant, merchant)'s counts of each of `days` (`YYYYMMDD`), in
    /// `days`' order; a day without a hash (none counted, or past the
    /// retention) has no counts. Each day's sharded hash and its hash of
    /// the layout before the shards (`keys::legacy_experiment_key`, read
    /// until those expire) are summed: one HGETALL per key, all sent at
    /// once (on Cluster the days' legacy hashes may sit on different
    /// primaries).
    pub async fn read_experiment(
        &self,
        tenant: &Tenant,
        merchant: &MerchantId,
        days: &[u32],
        deadline: Instant,
    ) -> Result<Vec<(u32, ExperimentCounts)>, StorageError> {
        let mut reads = JoinSet::new();
        for (at, &day) in days.iter().enumerate() {
            for key in [
                keys::experiment_key(tenant, merchant, day),
                keys::legacy_experiment_key(tenant, merchant, day),
            ] {
                let store = self.clone();
                reads.spawn(async move {
                    let key = key.as_str();
                    let read = store
                        .exec
                        .on_key(
                            RedisCommand::ExperimentRead,
                            key,
                            deadline,
                            false,
                            |client| async move { client.hgetall::<Value, _>(key).await },
                        )
                        .await;
                    (at, read)
                });
            }
        }
        let mut read = vec![ExperimentCounts::default(); days.len()];
        while let Some(joined) = reads.join_next().await {
            let (at, reply) = joined.map_err(|error| {
                StorageError::Unexpected(format!("an experiment read did not finish: {error}"))
            })?;
            let pairs = fields_of(reply?);
            let counts =
                ExperimentCounts::from_fields(pairs.iter().map(|(f, v)| (&f[..], &v[..])))?;
            if let Some(slot) = read.get_mut(at) {
                slot.add(&counts);
            }
        }
        Ok(days.iter().copied().zip(read).collect())
    }
}

#[cfg(test)]
impl RedisStore {
    /// One (tenant, merchant)'s day alone: its shard's flush with it.
    pub async fn flush_experiment_day(
        &self,
        tenant: &Tenant,
        merchant: &MerchantId,
        day: u32,
        counts: &ExperimentCounts,
        retention: Duration,
        deadline: Instant,
    ) -> Result<(), StorageError> {
        let entry = ExperimentEntry {
            tenant: tenant.clone(),
            merchant: merchant.clone(),
            day,
            counts: *counts,
        };
        let shard = shard_of(tenant, merchant);
        let mut answers = self
            .flush_experiment(shard, &[entry], retention, deadline)
            .await?;
        answers.remove(0)
    }
}

/// One (tenant, merchant)'s counts of one UTC day, for a shard's flush.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExperimentEntry {
    pub tenant: Tenant,
    pub merchant: MerchantId,
    pub day: u32,
    pub counts: ExperimentCounts,
}

/// HGETALL's reply (a map, or a flat list) as (field, value) bytes; empty
/// for a missing key.
fn fields_of(reply: Value) -> Vec<(Vec<u8>, Vec<u8>)> {
    let bytes = |value: Value| match value {
        Value::Bytes(bytes) => Some(bytes.to_vec()),
        Value::String(text) => Some(text.as_bytes().to_vec()),
        Value::Integer(n) => Some(n.to_string().into_bytes()),
        _ => None,
    };
    match reply {
        Value::Map(map) => map
            .inner()
            .into_iter()
            .filter_map(|(field, value)| Some((field.as_bytes().to_vec(), bytes(value)?)))
            .collect(),
        Value::Array(flat) => {
            let mut pairs = Vec::with_capacity(flat.len() / 2);
            let mut flat = flat.into_iter();
            while let (Some(field), Some(value)) = (flat.next(), flat.next()) {
                if let (Some(field), Some(value)) = (bytes(field), bytes(value)) {
                    pairs.push((field, value));
                }
            }
            pairs
        }
        _ => Vec::new(),
    }
}

fn foreign() -> StorageError {
    StorageError::ForeignValue {
        key_kind: "the merchant's experiment counts",
        detail: "a stored count is not a whole number".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_decode_from_the_hash_and_skip_fields_of_no_group() {
        let counts = ExperimentCounts::from_fields([
            (&b"t:f:s"[..], &b"7"[..]),
            (b"h:-:f", b"2"),
            (b"later:field", b"x"),
        ])
        .unwrap();
        assert_eq!(counts.get("t:f:s"), Some(7));
        assert_eq!(counts.get("h:-:f"), Some(2));
        assert_eq!(counts.get("s:o:s"), Some(0));
        assert_eq!(counts.get("later:field"), None);
        for bad in [&b"-1"[..], b"", b"1.5", b"99999999999999999999999", b"\xff"] {
            assert!(
                matches!(
                    ExperimentCounts::from_fields([(&b"t:o:f"[..], bad)]),
                    Err(StorageError::ForeignValue { .. })
                ),
                "{bad:?}"
            );
        }
        let mut sum = counts;
        sum.add(&counts);
        assert_eq!(sum.get("t:f:s"), Some(14));
        assert!(!sum.is_empty() && ExperimentCounts::default().is_empty());
    }
}
