//! The experiment counts log's calls (contract v1.2 §4, "Experiment
//! counts"): an instance's tick pushed onto a shard's log
//! (experiment_append.lua), a batch's frames read back (LRANGE), and one
//! chunk of the batch added into the day hashes (experiment_compact.lua).
//! All background work, on the background lane and behind the Sentinel
//! write fence, as the breaker's; the engine that drives them is
//! `src/experiment/compact.rs`.

use std::time::{Duration, Instant};

use fred::interfaces::ListInterface;
use fred::prelude::Value;

use super::super::RedisStore;
use super::log::ExperimentLog;
use super::{ExperimentEntry, foreign, state_of};
use crate::domain::keys::{self, EXPERIMENT_FIELDS, ExperimentKey};
use crate::domain::shards::{Shard, shard_of};
use crate::storage::error::{NotApplied, StorageError};
use crate::storage::scripts::LuaScript;
use crate::telemetry::RedisCommand;

/// What one compaction call did.
#[derive(Debug)]
pub struct Compacted {
    /// Whether it was this chunk's turn: `false`, nothing was written
    /// (another instance added it, or the batch is another one).
    pub added: bool,
    /// Where the log stands after the call.
    pub state: ExperimentLog,
    /// Per entry, when added: `Ok`, or why nothing of it was written.
    pub answers: Vec<Result<(), StorageError>>,
}

fn millis(retention: Duration) -> String {
    u64::try_from(retention.as_millis())
        .unwrap_or(u64::MAX)
        .max(1)
        .to_string()
}

fn permission() -> StorageError {
    StorageError::Unavailable {
        why: NotApplied::Permission,
        detail: "the Redis user may not run one of the experiment log's writes on \
                 ~sticky_exp_* (it needs +rpush +pexpire +hsetnx +hset +hdel +ltrim +hmget \
                 +hincrby, deploy/redis-acl.txt), so the script wrote nothing"
            .into(),
    }
}

impl RedisStore {
    /// Pushes `frame` (one tick's counts of `shard`, `log::log_frame`)
    /// onto the shard's log, with both log keys' TTL set to `retention`;
    /// with no frame, only asks. Where the log stands either way.
    pub async fn append_experiment(
        &self,
        shard: Shard,
        frame: Option<Vec<u8>>,
        retention: Duration,
        now_ms: i64,
        deadline: Instant,
    ) -> Result<ExperimentLog, StorageError> {
        let (log, meta) = (
            keys::experiment_log_key(shard),
            keys::experiment_log_meta_key(shard),
        );
        let key_list = [log.as_str(), meta.as_str()];
        let args = [
            Value::Bytes(frame.unwrap_or_default().into()),
            Value::from(millis(retention)),
            Value::from(now_ms.to_string()),
        ];
        let script = &self.exec.scripts.experiment_append;
        let reply = self.log_script(script, &key_list, &args, deadline).await?;
        if reply == [-2] {
            let error = permission();
            self.exec.note_refusal(&log, &error);
            return Err(error);
        }
        state_of(&reply)
    }

    /// Runs one of the log's write scripts on the background lane of its
    /// shard (`keys[0]`, the log, routes it): its numbers.
    async fn log_script(
        &self,
        script: &LuaScript,
        keys: &[&str],
        args: &[Value],
        deadline: Instant,
    ) -> Result<Vec<i64>, StorageError> {
        let metrics = &*self.exec.metrics;
        let route = keys.first().copied().unwrap_or_default();
        self.exec
            .on_key_background(script.command, route, deadline, |client| async move {
                script.run_keys(&client, keys, args, metrics).await
            })
            .await
    }

    /// The first `frames` frames of `shard`'s log: a batch to add.
    pub async fn read_experiment_batch(
        &self,
        shard: Shard,
        frames: u64,
        deadline: Instant,
    ) -> Result<Vec<Vec<u8>>, StorageError> {
        let log = keys::experiment_log_key(shard);
        let last = i64::try_from(frames).unwrap_or(i64::MAX) - 1;
        let key = log.as_str();
        let read: Vec<Value> = self
            .exec
            .on_key_background(
                RedisCommand::ExperimentCompact,
                key,
                deadline,
                |client| async move { client.lrange(key, 0, last).await },
            )
            .await?;
        Ok(read
            .into_iter()
            .filter_map(|frame| frame.into_bytes().map(|b| b.to_vec()))
            .collect())
    }

    /// Adds chunk `chunk` of batch `batch` (`frames` frames of `shard`'s
    /// log in `chunks` chunks) into the day hashes: `entries`, its
    /// merchant-days, each hash's TTL set to `retention`. Nothing is
    /// written unless it is that chunk's turn.
    #[allow(clippy::too_many_arguments)]
    pub async fn compact_experiment(
        &self,
        shard: Shard,
        batch: u64,
        frames: u64,
        chunks: u64,
        chunk: u64,
        entries: &[ExperimentEntry],
        retention: Duration,
        now_ms: i64,
        deadline: Instant,
    ) -> Result<Compacted, StorageError> {
        debug_assert!(
            entries
                .iter()
                .all(|e| shard_of(&e.tenant, &e.merchant) == shard)
        );
        let (log, meta) = (
            keys::experiment_log_key(shard),
            keys::experiment_log_meta_key(shard),
        );
        let hashes: Vec<ExperimentKey> = entries
            .iter()
            .map(|e| keys::experiment_key(&e.tenant, &e.merchant, e.day))
            .collect();
        let mut key_list = vec![log.as_str(), meta.as_str()];
        key_list.extend(hashes.iter().map(ExperimentKey::as_str));
        let mut args: Vec<Value> = [batch, frames, chunks, chunk]
            .iter()
            .map(|n| Value::from(n.to_string()))
            .collect();
        args.push(Value::from(millis(retention)));
        args.push(Value::from(now_ms.to_string()));
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
        let script = &self.exec.scripts.experiment_compact;
        let reply = self.log_script(script, &key_list, &args, deadline).await?;
        let (answer, state) = match reply.split_first() {
            Some((&answer, rest)) if rest.len() >= 6 => (answer, state_of(&rest[..6])?),
            _ => return Err(unexpected(&reply)),
        };
        match answer {
            1 if reply.len() == 7 + entries.len() => {}
            0 if reply.len() == 7 => {
                return Ok(Compacted {
                    added: false,
                    state,
                    answers: Vec::new(),
                });
            }
            -2 => {
                let error = permission();
                self.exec.note_refusal(&meta, &error);
                return Err(error);
            }
            _ => return Err(unexpected(&reply)),
        }
        let answers = reply[7..]
            .iter()
            .map(|&answer| match answer {
                1 => Ok(()),
                -1 => Err(foreign()),
                _ => Err(StorageError::Unexpected(format!(
                    "experiment_compact replied {answer} for a hash"
                ))),
            })
            .collect();
        Ok(Compacted {
            added: true,
            state,
            answers,
        })
    }
}

fn unexpected(reply: &[i64]) -> StorageError {
    StorageError::Unexpected(format!("experiment_compact replied {reply:?}"))
}

#[cfg(test)]
impl RedisStore {
    /// One (tenant, merchant)'s day alone, pushed as a tick would push it
    /// and then added at once, as whole batches: the first refusal of a
    /// hash, if any.
    pub async fn flush_experiment_day(
        &self,
        tenant: &crate::domain::tenant::Tenant,
        merchant: &crate::domain::ids::MerchantId,
        day: u32,
        counts: &super::ExperimentCounts,
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
        let frame = super::log::log_frame(&[entry]);
        let now = crate::process::unix_millis();
        self.append_experiment(shard, frame, retention, now, deadline)
            .await?;
        let answers = self
            .compact_experiment_log(shard, retention, deadline)
            .await?;
        answers.into_iter().collect()
    }

    /// Adds the whole of `shard`'s log into the day hashes, batch after
    /// batch, chunk after chunk: every hash's answer.
    pub async fn compact_experiment_log(
        &self,
        shard: Shard,
        retention: Duration,
        deadline: Instant,
    ) -> Result<Vec<Result<(), StorageError>>, StorageError> {
        let mut answers = Vec::new();
        while let Some(done) = self
            .compact_experiment_step(shard, retention, deadline)
            .await?
        {
            answers.extend(done.answers);
        }
        Ok(answers)
    }

    /// One step of `shard`'s compaction, as an instance takes it: the next
    /// chunk of the batch under way, or chunk 0 of a batch of the whole
    /// log; `None` when the log has nothing left to add.
    pub async fn compact_experiment_step(
        &self,
        shard: Shard,
        retention: Duration,
        deadline: Instant,
    ) -> Result<Option<Compacted>, StorageError> {
        let now = crate::process::unix_millis();
        let state = self
            .append_experiment(shard, None, retention, now, deadline)
            .await?;
        let (number, frames, chunk) = match state.adding {
            Some(adding) => (state.batch, adding.frames, adding.next),
            None if state.frames > 0 => (state.batch + 1, state.frames, 0),
            None => return Ok(None),
        };
        let read = self.read_experiment_batch(shard, frames, deadline).await?;
        let batch = super::log::ExperimentBatch::of(&read);
        let chunks = batch.chunks.len() as u64;
        let entries = &batch.chunks[chunk as usize];
        let done = self
            .compact_experiment(
                shard, number, frames, chunks, chunk, entries, retention, now, deadline,
            )
            .await?;
        assert!(done.added, "{done:?}");
        Ok(Some(done))
    }
}
