//! One breaker at a time, for the scripts' tests: the shard calls made
//! for a single merchant or transition, the poll of every shard, and the
//! index's writes the engine makes only inside a transition.

use std::time::Instant;

use fred::prelude::Value;

use super::codec::{decimal, index_cap_ms, unexpected};
use super::{
    BreakerTransition, ConnectorSnapshot, ConnectorTally, IndexEntry, MerchantTallies,
    PlannedTransition, Script, ShardLog, log_frames, probing,
};
use crate::domain::breaker::{BreakerSettings, Tripped};
use crate::domain::ids::MerchantId;
use crate::domain::keys::{self, index_trip_field};
use crate::domain::shards::{Shard, shard_of};
use crate::domain::tenant::Tenant;
use crate::storage::RedisStore;
use crate::storage::error::StorageError;

impl RedisStore {
    /// One (tenant, merchant)'s flush: its shard's tick with it alone, as
    /// the engine makes it: its bucket counts appended to the shard's log
    /// (of `now_ms`'s period), its tallies with probes into its hash,
    /// whose snapshots it answers.
    pub async fn flush_breakers(
        &self,
        tenant: &Tenant,
        merchant: &MerchantId,
        tallies: &[ConnectorTally],
        now_ms: i64,
        settings: &BreakerSettings,
        deadline: Instant,
    ) -> Result<Vec<ConnectorSnapshot>, StorageError> {
        let all = [MerchantTallies {
            tenant: tenant.clone(),
            merchant: merchant.clone(),
            tallies: tallies.to_vec(),
        }];
        let merchants = probing(&all);
        let period = settings.bucket_of(now_ms);
        let log = ShardLog {
            frames: log_frames(&all),
            append_period: period,
            // Read from the end it will have: this flush reads nothing.
            reads: vec![(period, 1 << 40)],
        };
        let shard = shard_of(tenant, merchant);
        let mut tick = self
            .breaker_tick(shard, &log, &merchants, now_ms, settings, deadline)
            .await?;
        Ok(tick.merchants.pop().transpose()?.unwrap_or_default())
    }

    /// One transition: its shard's batch with it alone.
    // The breaker's three ids and the transition's four inputs, as the
    // engine's call had them.
    #[allow(clippy::too_many_arguments)]
    pub async fn transition_breaker(
        &self,
        tenant: &Tenant,
        merchant: &MerchantId,
        connector: &str,
        transition: BreakerTransition,
        now_ms: i64,
        settings: &BreakerSettings,
        deadline: Instant,
    ) -> Result<Option<Tripped>, StorageError> {
        let plan = [PlannedTransition {
            tenant: tenant.clone(),
            merchant: merchant.clone(),
            connector: connector.to_owned(),
            transition,
        }];
        let shard = shard_of(tenant, merchant);
        let mut made = self
            .breaker_transitions(shard, &plan, now_ms, settings, deadline)
            .await?;
        made.remove(0)
    }

    /// Every shard's index, polled at `now_ms` (each shard's tick with no
    /// counts), in (tenant, merchant, connector) order.
    pub async fn poll_breaker_index(
        &self,
        now_ms: i64,
        settings: &BreakerSettings,
        deadline: Instant,
    ) -> Result<Vec<IndexEntry>, StorageError> {
        let mut entries = Vec::new();
        for shard in Shard::all() {
            let tick = self
                .breaker_tick(shard, &ShardLog::default(), &[], now_ms, settings, deadline)
                .await?;
            entries.extend(tick.index);
        }
        entries.sort_by(|a, b| {
            (&a.tenant, &a.merchant, &a.connector).cmp(&(&b.tenant, &b.merchant, &b.connector))
        });
        Ok(entries)
    }

    /// Names `tripped` in its shard's index, as a transition does.
    pub async fn index_trip(
        &self,
        tenant: &Tenant,
        merchant: &MerchantId,
        connector: &str,
        tripped: Tripped,
        settings: &BreakerSettings,
        deadline: Instant,
    ) -> Result<(), StorageError> {
        let index = keys::breaker_index_key(shard_of(tenant, merchant));
        let args = [
            Value::from("set"),
            Value::from(index_trip_field(tenant, merchant, connector)),
            Value::from(super::codec::trip_value(&tripped)),
            decimal(index_cap_ms(settings)),
        ];
        let reply: Vec<i64> = self
            .breaker_script(Script::Index, &[index.as_str()], &args, deadline)
            .await?;
        match *reply {
            [1] => Ok(()),
            [-2] => Err(super::codec::no_pexpire()),
            _ => Err(unexpected("breaker_index set", &reply)),
        }
    }

    /// Takes the trip open until `open_until_ms` out of its shard's index,
    /// as a close does; a later trip of the same breaker stays. Whether it
    /// was there.
    pub async fn index_clear_trip(
        &self,
        tenant: &Tenant,
        merchant: &MerchantId,
        connector: &str,
        open_until_ms: i64,
        deadline: Instant,
    ) -> Result<bool, StorageError> {
        let index = keys::breaker_index_key(shard_of(tenant, merchant));
        let args = [
            Value::from("del"),
            Value::from(index_trip_field(tenant, merchant, connector)),
            // The space ends the number: T = 12 never clears T = 123.
            Value::from(format!("{open_until_ms} ")),
        ];
        let reply: Vec<i64> = self
            .breaker_script(Script::Index, &[index.as_str()], &args, deadline)
            .await?;
        match *reply {
            [deleted @ (0 | 1)] => Ok(deleted == 1),
            _ => Err(unexpected("breaker_index del", &reply)),
        }
    }
}
