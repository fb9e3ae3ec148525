//! The experiment counts' tier 2 (contract v1.2 §4): one hash per (tenant,
//! merchant) and UTC day (`domain::keys::experiment_key`, the tenant's
//! namespace in the key, so two tenants' merchants of one id never share
//! a count), its fields [`EXPERIMENT_FIELDS`] counting outcomes, and in
//! front of them each shard's counts log ([`log`]), where the instances
//! push their ticks and from which batches are added into the hashes
//! ([`calls`]). Here: [`ExperimentCounts`], one day's counts, which the
//! report decodes too, and GetUplift's read, which adds a day's hash and
//! what of the log is not yet in it.
//!
//! Why a log: adding each tick into the hashes costs Redis a few
//! microseconds per merchant-day (an HINCRBY per field and a PEXPIRE),
//! and at 100,000 merchants nearly every outcome is its own merchant-day
//! in a 500 ms tick (issue 41). Pushed as bytes, a tick costs Redis a
//! copy; added a minute at a time, a merchant-day's outcomes of that
//! minute cost one merchant-day's commands.

use std::time::Instant;

use fred::interfaces::HashesInterface;
use fred::prelude::Value;
use tokio::task::JoinSet;

use super::RedisStore;
use crate::domain::ids::MerchantId;
use crate::domain::keys::{self, EXPERIMENT_FIELDS, ExperimentKey};
use crate::domain::shards::shard_of;
use crate::domain::tenant::Tenant;
use crate::storage::error::StorageError;
use crate::telemetry::RedisCommand;
use log::{Adding, ExperimentLog};

pub mod calls;
pub mod log;

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
    /// One (tenant, merchant)'s counts of each of `days` (`YYYYMMDD`), in
    /// `days`' order; a day without counts (none counted, or past the
    /// retention) has none. Per day, three parts are summed:
    /// - its hash, and what of its shard's log is not yet added into it,
    ///   read at one instant by one script (experiment_read.lua), so a
    ///   batch being added is neither missed nor counted twice;
    /// - its hash of the layout before the shards
    ///   (`keys::legacy_experiment_key`, read until those expire), one
    ///   HGETALL each, sent at once with the script (on Cluster they may
    ///   sit on other primaries).
    pub async fn read_experiment(
        &self,
        tenant: &Tenant,
        merchant: &MerchantId,
        days: &[u32],
        deadline: Instant,
    ) -> Result<Vec<(u32, ExperimentCounts)>, StorageError> {
        let mut legacy = JoinSet::new();
        for (at, &day) in days.iter().enumerate() {
            let key = keys::legacy_experiment_key(tenant, merchant, day);
            let store = self.clone();
            legacy.spawn(async move {
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
        let mut read = self
            .read_experiment_sharded(tenant, merchant, days, deadline)
            .await?;
        while let Some(joined) = legacy.join_next().await {
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

    /// The sharded hashes of `days` plus the log's unadded counts of them
    /// (experiment_read.lua).
    async fn read_experiment_sharded(
        &self,
        tenant: &Tenant,
        merchant: &MerchantId,
        days: &[u32],
        deadline: Instant,
    ) -> Result<Vec<ExperimentCounts>, StorageError> {
        let shard = shard_of(tenant, merchant);
        let (log, meta) = (
            keys::experiment_log_key(shard),
            keys::experiment_log_meta_key(shard),
        );
        let hashes: Vec<ExperimentKey> = days
            .iter()
            .map(|&day| keys::experiment_key(tenant, merchant, day))
            .collect();
        let mut key_list = vec![log.as_str(), meta.as_str()];
        key_list.extend(hashes.iter().map(ExperimentKey::as_str));
        let script = &self.exec.scripts.experiment_read;
        let (keys_ref, metrics) = (&key_list[..], &*self.exec.metrics);
        let reply: Vec<Value> = self
            .exec
            .on_key(script.command, &log, deadline, false, |client| async move {
                script.run_keys(&client, keys_ref, &[], metrics).await
            })
            .await?;
        let odd = || StorageError::Unexpected("experiment_read replied an odd shape".into());
        let mut reply = reply.into_iter();
        let state: Vec<i64> = match reply.next() {
            Some(Value::Array(numbers)) => numbers.iter().filter_map(Value::as_i64).collect(),
            _ => return Err(odd()),
        };
        let state = state_of(&state)?;
        let frames: Vec<Vec<u8>> = match reply.next() {
            Some(Value::Array(frames)) => frames
                .into_iter()
                .filter_map(|f| f.into_bytes().map(|b| b.to_vec()))
                .collect(),
            _ => return Err(odd()),
        };
        let mut read = Vec::with_capacity(days.len());
        for hash in reply {
            let pairs = fields_of(hash);
            read.push(ExperimentCounts::from_fields(
                pairs.iter().map(|(f, v)| (&f[..], &v[..])),
            )?);
        }
        if read.len() != days.len() {
            return Err(odd());
        }
        // A frame this service did not write is passed over here; the
        // compaction counts it. The log is about a minute of every
        // instance's pushes: read on the blocking pool, not on a worker
        // that other calls wait behind.
        let (tenant, merchant, wanted) = (tenant.clone(), merchant.clone(), days.to_vec());
        let (tail, _) = tokio::task::spawn_blocking(move || {
            log::unadded(&frames, state.adding, |entry| {
                entry.tenant == tenant && entry.merchant == merchant && wanted.contains(&entry.day)
            })
        })
        .await
        .map_err(|error| {
            StorageError::Unexpected(format!(
                "reading the experiment log did not finish: {error}"
            ))
        })?;
        for entry in tail {
            if let Some(at) = days.iter().position(|&d| d == entry.day) {
                read[at].add(&entry.counts);
            }
        }
        Ok(read)
    }
}

/// Where a log stands, from log_state()'s six numbers.
fn state_of(numbers: &[i64]) -> Result<ExperimentLog, StorageError> {
    let &[frames, batch, adding, chunks, next, since] = numbers else {
        return Err(StorageError::Unexpected(format!(
            "an experiment log script replied {numbers:?} for where the log stands"
        )));
    };
    let count = |n: i64| u64::try_from(n).unwrap_or(0);
    Ok(ExperimentLog {
        frames: count(frames),
        batch: count(batch),
        adding: (adding > 0).then(|| Adding {
            frames: count(adding),
            chunks: count(chunks),
            next: count(next),
        }),
        since: (since > 0).then_some(since),
    })
}

/// One (tenant, merchant)'s counts of one UTC day: a log frame's entry, a
/// chunk's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExperimentEntry {
    pub tenant: Tenant,
    pub merchant: MerchantId,
    pub day: u32,
    pub counts: ExperimentCounts,
}

/// HGETALL's reply (a map, or a flat list) as (field, value) bytes; empty
/// for a missing key.
pub(crate) fn fields_of(reply: Value) -> Vec<(Vec<u8>, Vec<u8>)> {
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
