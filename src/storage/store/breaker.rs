//! The connector circuit breaker's tier 2 (contract v1.2 §3): the
//! [`RedisStore`] calls the breaker engine (`src/breaker/`) and its admin
//! RPCs make, typed in and out; their codec is `codec.rs`, and
//! GetConnectorHealth's rows `health.rs`.
//!
//! The breakers' keys are spread over a fixed number of shards
//! (`domain::shards`), each a Cluster hash tag: a merchant's counts hash
//! and OPEN keys, and the shard's index, share the shard's slot. So one
//! engine tick costs one script per shard ([`RedisStore::breaker_tick`]:
//! every merchant's counts of the shard, and the shard's index read
//! back), and at most one more per shard that has transitions
//! ([`RedisStore::breaker_transitions`]), however many merchants have
//! counts; and a transition writes its counts, OPEN key and index entry in
//! one atomic step.
//!
//! Every breaker is a (tenant, merchant, connector)'s: each call takes the
//! tenant, whose namespace the keys and the index fields carry
//! (`domain::keys`), so two tenants with the same merchant and connector
//! ids never share a count, a trip or an override.
//!
//! Every write here is a background or admin call, and goes through the
//! Sentinel write fence as `forget` does: refused, unsent, while a
//! failover is under way.

mod codec;
mod health;
mod log;
#[cfg(test)]
mod one;

pub use log::{LogRead, LogRecord, log_frames, probing, read_log};

use std::time::Instant;

use fred::interfaces::HashesInterface;
use fred::prelude::Value;

use super::RedisStore;
use crate::domain::breaker::{BreakerSettings, BreakerState, Counts, OverrideUntil, Tripped};
use crate::domain::ids::MerchantId;
use crate::domain::keys::{self, index_override_field, index_trip_field};
use crate::domain::shards::{Shard, shard_of};
use crate::domain::tenant::Tenant;
use crate::storage::error::StorageError;
use crate::telemetry::RedisCommand;
use codec::{decimal, index_cap_ms, no_pexpire, pairs_of, unexpected};

/// One connector's counts an instance has not yet flushed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectorTally {
    pub connector: String,
    /// Calls counted while CLOSED, by bucket ([`BreakerSettings::bucket_of`]).
    pub buckets: Vec<(i64, Counts)>,
    /// Calls counted as probes of the HALF-OPEN that follows the trip open
    /// until the first value.
    pub probes: Option<(i64, Counts)>,
}

/// One (tenant, merchant)'s tallies, for one shard's flush.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MerchantTallies {
    pub tenant: Tenant,
    pub merchant: MerchantId,
    pub tallies: Vec<ConnectorTally>,
}

/// One probing connector's shared state after a flush.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectorSnapshot {
    pub connector: String,
    /// The trip, from the trip until the close.
    pub tripped: Option<Tripped>,
    /// The probes of the HALF-OPEN that `tripped` names.
    pub probes: Counts,
}

/// A transition the engine decided, applied only if the breaker is still
/// where the engine saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerTransition {
    /// CLOSED → OPEN, with the window's counts as the engine folded
    /// them; refused while a trip is OPEN or HALF-OPEN.
    Trip { window: Counts },
    /// HALF-OPEN → CLOSED, if the trip is still the one open until
    /// `open_until_ms`.
    Close { open_until_ms: i64 },
    /// HALF-OPEN → OPEN again, likewise.
    Reopen { open_until_ms: i64 },
}

/// One breaker's transition, for one shard's batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedTransition {
    pub tenant: Tenant,
    pub merchant: MerchantId,
    pub connector: String,
    pub transition: BreakerTransition,
}

/// One (tenant, merchant, connector) of a shard's index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexEntry {
    pub tenant: Tenant,
    pub merchant: String,
    pub connector: String,
    pub tripped: Option<Tripped>,
    pub over: Option<OverrideUntil>,
}

/// A transition time made, which no instance writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeTransition {
    /// OPEN → HALF-OPEN: the trip's OPEN ended.
    HalfOpen,
    /// HALF-OPEN → CLOSED: it did not decide within 2 × WINDOW.
    Closed,
}

/// A transition time made, as the one poll that saw it first reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimedTransition {
    pub tenant: Tenant,
    pub merchant: MerchantId,
    pub connector: String,
    pub tripped: Tripped,
    pub kind: TimeTransition,
}

/// The most script calls one shard's tick (and one shard's experiment
/// flush) makes: with 16 shards, at most 64 of each per tick per instance,
/// whatever the number of merchants.
pub const TICK_CALLS_PER_SHARD: usize = 4;

/// Merchants per call below which a shard's tick is one call.
const MIN_TICK_CHUNK: usize = 64;

/// How many merchants go in each call of a tick of `merchants`: one call
/// up to [`MIN_TICK_CHUNK`], then an even split over at most
/// [`TICK_CALLS_PER_SHARD`] calls.
pub(crate) fn tick_chunk(merchants: usize) -> usize {
    MIN_TICK_CHUNK.max(merchants.div_ceil(TICK_CALLS_PER_SHARD))
}

/// What one shard's tick answered.
#[derive(Debug)]
pub struct ShardTick {
    /// Per merchant sent, in order: each connector's shared state, or why
    /// nothing of that merchant was written.
    pub merchants: Vec<Result<Vec<ConnectorSnapshot>, StorageError>>,
    /// The shard's index: every breaker of it that is tripped or
    /// overridden.
    pub index: Vec<IndexEntry>,
    /// The transitions time made that this tick's poll saw first (each is
    /// reported to exactly one poll, of one instance).
    pub timed: Vec<TimedTransition>,
    /// Per log key read, in the order asked: what was read.
    pub log: Vec<LogRead>,
}

/// A shard's counts log in one tick: the frames this instance appends
/// (to the key of the period `append_period`), and the keys it reads, by
/// period, each from the offset it has read to.
#[derive(Debug, Clone, Default)]
pub struct ShardLog {
    pub frames: Vec<u8>,
    pub append_period: i64,
    pub reads: Vec<(i64, u64)>,
}

/// One connector of GetConnectorHealth.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectorHealthRow {
    pub connector: String,
    pub state: BreakerState,
    /// CLOSED: the current window's; HALF-OPEN: the probes so far; OPEN:
    /// the counts that tripped it.
    pub counts: Counts,
    /// When the OPEN ends; 0 unless OPEN.
    pub open_until_ms: i64,
    /// The override, while it holds.
    pub over: Option<OverrideUntil>,
}

impl RedisStore {
    /// One tick of one shard (breaker_flush.lua): appends this instance's
    /// frames to the shard's counts log and reads the log keys `log` names
    /// from their offsets, adds every probing merchant's probe counts into
    /// Redis and answers its connectors' shared state, and polls the
    /// shard's index. `merchants` must all be of `shard` and carry only
    /// probe counts; with none, it only appends, reads and polls. The
    /// merchants go in at most [`TICK_CALLS_PER_SHARD`] calls, one after
    /// the other, each of which also polls (the log goes with the first):
    /// a call blocks Redis for its whole run, so a shard of thousands of
    /// merchants in one call would hold every caller's command behind it
    /// for milliseconds. When a call after the first fails, the tick
    /// answers what the earlier ones wrote; that call's merchants carry its
    /// error, and the later ones, never sent, are `Unavailable`
    /// (`EarlierStepFailed`).
    pub async fn breaker_tick(
        &self,
        shard: Shard,
        log: &ShardLog,
        merchants: &[MerchantTallies],
        now_ms: i64,
        settings: &BreakerSettings,
        deadline: Instant,
    ) -> Result<ShardTick, StorageError> {
        let size = tick_chunk(merchants.len());
        let mut chunks = merchants.chunks(size.max(1));
        let first = chunks.next().unwrap_or_default();
        let mut tick = self
            .breaker_tick_call(shard, Some(log), first, now_ms, settings, deadline)
            .await?;
        for chunk in chunks {
            match self
                .breaker_tick_call(shard, None, chunk, now_ms, settings, deadline)
                .await
            {
                Ok(more) => {
                    tick.merchants.extend(more.merchants);
                    tick.index = more.index;
                    tick.timed.extend(more.timed);
                }
                Err(error) => {
                    StorageError::fill_after_failure(
                        &mut tick.merchants,
                        &error,
                        chunk.len(),
                        merchants.len(),
                    );
                    break;
                }
            }
        }
        Ok(tick)
    }

    /// One call of a shard's tick (breaker_flush.lua).
    async fn breaker_tick_call(
        &self,
        shard: Shard,
        log: Option<&ShardLog>,
        merchants: &[MerchantTallies],
        now_ms: i64,
        settings: &BreakerSettings,
        deadline: Instant,
    ) -> Result<ShardTick, StorageError> {
        let index = keys::breaker_index_key(shard);
        let reads: &[(i64, u64)] = log.map_or(&[], |log| &log.reads);
        let log_keys: Vec<String> = reads
            .iter()
            .map(|&(period, _)| keys::breaker_log_key(shard, period))
            .collect();
        let counts: Vec<_> = merchants
            .iter()
            .map(|m| keys::breaker_counts_key(&m.tenant, &m.merchant))
            .collect();
        let mut key_list = vec![index.as_str()];
        key_list.extend(log_keys.iter().map(String::as_str));
        key_list.extend(counts.iter().map(|key| key.as_str()));
        let args = codec::flush_args(merchants, log, now_ms, settings);
        let reply: Value = self
            .breaker_script(Script::Flush, &key_list, &args, deadline)
            .await?;
        let (merchants_replies, index_entries, timed, log) =
            codec::flush_reply(reply, merchants, reads.len())
                .map_err(|error| self.refused(index.as_str(), error))?;
        for (reply, key) in merchants_replies.iter().zip(&counts) {
            if let Err(error) = reply {
                self.exec.note_refusal(key.as_str(), error);
            }
        }
        Ok(ShardTick {
            merchants: merchants_replies,
            index: index_entries,
            timed,
            log,
        })
    }

    /// Applies one shard's transitions (breaker_transition.lua, one call),
    /// each with its index entry: per transition, the trip it made (Trip,
    /// Reopen) or the trip it closed, with no counts (Close); `None` when
    /// the breaker was not where the engine saw it, and nothing of it was
    /// written. `planned` must all be of `shard`.
    pub async fn breaker_transitions(
        &self,
        shard: Shard,
        planned: &[PlannedTransition],
        now_ms: i64,
        settings: &BreakerSettings,
        deadline: Instant,
    ) -> Result<Vec<Result<Option<Tripped>, StorageError>>, StorageError> {
        if planned.is_empty() {
            return Ok(Vec::new());
        }
        let index = keys::breaker_index_key(shard);
        let mut owned = Vec::with_capacity(planned.len() * 2);
        let mut args = vec![
            decimal(now_ms),
            decimal(settings.open_for_ms()),
            decimal(settings.half_open_for_ms()),
            decimal(settings.window_ms()),
            decimal(settings.bucket_ms()),
            decimal(settings.ring_len()),
            decimal(index_cap_ms(settings)),
        ];
        for plan in planned {
            owned.push(
                keys::breaker_counts_key(&plan.tenant, &plan.merchant)
                    .as_str()
                    .to_owned(),
            );
            owned.push(
                keys::breaker_open_key(&plan.tenant, &plan.merchant, &plan.connector)
                    .as_str()
                    .to_owned(),
            );
            let field = index_trip_field(&plan.tenant, &plan.merchant, &plan.connector);
            args.extend(codec::transition_args(
                plan.transition,
                &plan.connector,
                field,
            ));
        }
        let mut key_list = vec![index.as_str()];
        key_list.extend(owned.iter().map(String::as_str));
        let reply: Value = self
            .breaker_script(Script::Transition, &key_list, &args, deadline)
            .await?;
        let replies = codec::transition_replies(reply, planned.len())?;
        Ok(replies
            .iter()
            .zip(planned)
            .map(|(reply, plan)| {
                codec::transition_reply(reply, plan.transition)
                    .inspect_err(|error| self.exec.note_refusal(index.as_str(), error))
            })
            .collect())
    }

    /// Sets the breaker's override until its end (kept in its shard's
    /// index for as long), or clears it (`None`, or one already over at
    /// `now_ms`).
    pub async fn set_override(
        &self,
        tenant: &Tenant,
        merchant: &MerchantId,
        connector: &str,
        over: Option<OverrideUntil>,
        now_ms: i64,
        deadline: Instant,
    ) -> Result<(), StorageError> {
        let index = keys::breaker_index_key(shard_of(tenant, merchant));
        let field = index_override_field(tenant, merchant, connector);
        let args = match over.filter(|over| over.active_at(now_ms)) {
            Some(over) => vec![
                Value::from("set"),
                Value::from(field),
                Value::from(codec::override_value(&over)),
                decimal(over.until_ms.saturating_sub(now_ms).max(1)),
            ],
            None => vec![Value::from("del"), Value::from(field), Value::from("")],
        };
        let reply: Vec<i64> = self
            .breaker_script(Script::Index, &[index.as_str()], &args, deadline)
            .await?;
        match *reply {
            [0 | 1] => Ok(()),
            [-2] => Err(self.refused(index.as_str(), no_pexpire())),
            _ => Err(unexpected("breaker_index", &reply)),
        }
    }

    /// GetConnectorHealth: every connector of `tenant`'s merchant with a
    /// trip not yet over, calls in the current window, or an override, in
    /// bytewise connector order. The trips, probes and overrides from Redis
    /// (two reads, sent together: the (tenant, merchant)'s counts hash, its
    /// shard's index, of which only this merchant's fields count); the
    /// CLOSED windows are `windows`, the engine's fold of the shard's
    /// counts log. No state change.
    pub async fn breaker_health(
        &self,
        tenant: &Tenant,
        merchant: &MerchantId,
        windows: &[(String, Counts)],
        now_ms: i64,
        settings: &BreakerSettings,
        deadline: Instant,
    ) -> Result<Vec<ConnectorHealthRow>, StorageError> {
        let counts_key = keys::breaker_counts_key(tenant, merchant);
        let index_key = keys::breaker_index_key(shard_of(tenant, merchant));
        let (counts_key, index_key) = (counts_key.as_str(), index_key.as_str());
        let (counts, index) = tokio::join!(
            self.exec.on_key(
                RedisCommand::BreakerHealth,
                counts_key,
                deadline,
                false,
                |client| async move { client.hgetall::<Value, _>(counts_key).await },
            ),
            self.exec.on_key(
                RedisCommand::BreakerHealth,
                index_key,
                deadline,
                false,
                |client| async move { client.hgetall::<Value, _>(index_key).await },
            ),
        );
        let counts = codec::byte_pairs_of(counts?.into_array());
        let index = pairs_of(index?.into_array());
        health::health_rows(tenant, merchant, &counts, &index, windows, now_ms, settings)
    }

    /// Runs one of the breaker's scripts on `keys` (of one slot; the first
    /// routes it) as a write: fenced during a Sentinel failover, refused
    /// unsent where the permission probe found the user lacking.
    async fn breaker_script<R: fred::prelude::FromValue>(
        &self,
        script: Script,
        keys: &[&str],
        args: &[Value],
        deadline: Instant,
    ) -> Result<R, StorageError> {
        self.exec.check_fence()?;
        let scripts = &*self.exec.scripts;
        let lane = script;
        let script = match script {
            Script::Flush => &scripts.breaker_flush,
            Script::Transition => &scripts.breaker_transition,
            Script::Index => &scripts.breaker_index,
        };
        let metrics = &*self.exec.metrics;
        let route = keys.first().copied().unwrap_or_default();
        let run = |client| async move { script.run_keys(&client, keys, args, metrics).await };
        match lane {
            // A tick's flush and transitions are background work: their own
            // lane, shed there (counted), never a caller's slot.
            Script::Flush | Script::Transition => {
                self.exec
                    .on_key_background(script.command, route, deadline, run)
                    .await
            }
            // An override answers a caller (SetConnectorOverride).
            Script::Index => {
                self.exec
                    .on_key(script.command, route, deadline, true, run)
                    .await
            }
        }
    }

    /// A script's decoded reply that is an error: a refusal for want of a
    /// permission has the node probed again, as `Exec::run` has it.
    fn refused(&self, key: &str, error: StorageError) -> StorageError {
        self.exec.note_refusal(key, &error);
        error
    }
}

/// The breaker's scripts.
#[derive(Debug, Clone, Copy)]
enum Script {
    Flush,
    Transition,
    Index,
}

#[cfg(test)]
mod tests;
