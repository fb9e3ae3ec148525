//! [`RedisStore`]: the storage layer's facade, domain-typed operations over
//! the connections of `topology/`, run by `exec/`.
//!
//! The public surface is what a caller may do with customer state: read it,
//! forget it, check that Redis answers; the connector circuit breaker's
//! shared state (`store/breaker.rs`); and the experiment counts
//! (`store/experiment.rs`). The writes are crate-private typed
//! [`Op`]s, run one at a time ([`RedisStore::run`]) or many at once
//! ([`RedisStore::run_batch`]); the record plan (`record/plan.rs`) decides
//! which ops an outcome makes, for RecordOutcome and the bulk import alike,
//! so no caller can skip admission.

mod breaker;
mod bytes;
mod experiment;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fred::interfaces::{HashesInterface, KeysInterface};
use fred::prelude::{Error, Value};
use fred::types::scripts::Script;
use fred::util::redis_keyslot;
use tokio_util::sync::{CancellationToken, DropGuard};
use tokio_util::task::TaskTracker;

use super::error::{CallKind, ConnectError, StorageError};
use super::exec::Exec;
use super::ops::{BatchOutcome, Op, Reply};
use super::scripts::{LuaScript, Scripts};
use super::settings::RedisSettings;
use super::topology::{Backend, spawn_until_stopped, watch_memory};
use crate::domain::attempts;
use crate::domain::ids::{CustomerId, MerchantId};
use crate::domain::keys::{self, CustomerKey};
use crate::domain::memory_guard::{GuardReading, MemoryLimit};
use crate::domain::tenant::Tenant;
use crate::telemetry::{Metrics, RedisCommand};

#[cfg(test)]
pub(crate) use breaker::tick_chunk as breaker_tick_chunk;
pub use breaker::{
    BreakerTransition, ConnectorHealthRow, ConnectorSnapshot, ConnectorTally, IndexEntry, LogRead,
    LogRecord, MerchantTallies, PlannedTransition, ShardLog, ShardTick, TimeTransition,
    TimedTransition, log_frames, probing, read_log,
};
pub use experiment::calls::Compacted;
pub(crate) use experiment::fields_of as hash_fields;
pub(crate) use experiment::log::log_state_of_meta;
pub use experiment::log::{
    Adding as ExperimentAdding, ExperimentBatch, ExperimentLog, log_frame as experiment_frame,
    unadded as experiment_unadded,
};
pub use experiment::{ExperimentCounts, ExperimentEntry};

/// The Redis-backed store. Cheap to clone: clones share the pool.
#[derive(Clone)]
pub struct RedisStore {
    exec: Exec,
    /// Stops the store's background tasks: cancelled by [`Self::quit`], or
    /// when the last clone is dropped.
    stop: CancellationToken,
    _stop_on_drop: Arc<DropGuard>,
    /// The latest connection error (refused, wrong password, untrusted
    /// certificate), so readiness can say why Redis does not answer.
    connection_problem: Arc<Mutex<Option<String>>>,
}

impl RedisStore {
    /// Builds the pool and starts connecting in the background. It does not
    /// wait for Redis: the service starts (and reports liveness) while Redis
    /// is down, and readiness follows Redis. The store's own background
    /// tasks run on `tasks` and end when the store quits. Its calls are
    /// counted on `metrics`.
    pub fn connect(
        redis: &RedisSettings,
        tasks: &TaskTracker,
        metrics: Arc<Metrics>,
    ) -> Result<Self, ConnectError> {
        let stop = CancellationToken::new();
        // Made first, so that a failure below stops what was already spawned.
        let stop_on_drop = Arc::new(stop.clone().drop_guard());
        let connection_problem = Arc::new(Mutex::new(None));
        let (backend, sentinel_watch) = Backend::start(redis, &connection_problem, tasks, &stop)?;
        Ok(Self {
            exec: Exec {
                backend,
                scripts: Arc::new(Scripts::new()),
                metrics,
                command_timeout: redis.command_timeout,
                sentinel_watch: sentinel_watch.map(Arc::new),
            },
            _stop_on_drop: stop_on_drop,
            stop,
            connection_problem,
        })
    }

    /// What runs the calls, for the storage layer's own tests.
    #[cfg(test)]
    pub(super) fn exec(&self) -> &Exec {
        &self.exec
    }

    /// Why the connections last failed, if they ever did.
    pub fn connection_problem(&self) -> Option<String> {
        self.connection_problem
            .lock()
            .map_or(None, |problem| problem.clone())
    }

    /// Waits up to `within` for every pooled connection, request and
    /// background lanes alike, to come up (on Cluster: for the slot table,
    /// and every primary's pools).
    pub async fn wait_connected(&self, within: Duration) -> bool {
        match &self.exec.backend {
            Backend::Single { lanes, .. } => tokio::time::timeout(within, lanes.wait_connected())
                .await
                .is_ok_and(|r| r.is_ok()),
            Backend::Cluster(cluster) => tokio::time::timeout(within, cluster.wait_connected())
                .await
                .is_ok(),
        }
    }

    /// Caches the scripts on the server (on Cluster, on every primary known
    /// now) ahead of the first call. Best effort: a Redis that forgets them
    /// later, or a primary promoted later, is handled by the NOSCRIPT
    /// fallback.
    pub async fn preload_scripts(&self) -> Result<(), StorageError> {
        let scripts = self.exec.scripts.all().map(LuaScript::as_script);
        self.load_on_primaries(&scripts).await
    }

    /// Caches the bulk import's batch script (`scripts/batch.lua`) on every
    /// primary, as [`Self::preload_scripts`] does the service's: the
    /// service itself never sends it.
    pub async fn preload_batch_script(&self) -> Result<(), StorageError> {
        self.load_on_primaries(&[&self.exec.scripts.batch]).await
    }

    async fn load_on_primaries(&self, scripts: &[&Script]) -> Result<(), StorageError> {
        let kind = CallKind {
            write: false,
            deadline_bound: false,
            timeout: self.exec.command_timeout,
        };
        for client in &self.exec.backend.primary_clients() {
            for script in scripts {
                script
                    .load(client)
                    .await
                    .map_err(|e| StorageError::from_redis(&e, kind))?;
            }
        }
        Ok(())
    }

    /// Starts the memory guard for admission: every node's `INFO memory`,
    /// polled about once a second on `tasks` until the store quits. Without
    /// it no node ever refuses a new customer, and no node's reachability
    /// (`sticky_routing_redis_up`) is known: the same poll probes both,
    /// whatever `limit` is.
    pub fn guard_admission_memory(&self, limit: MemoryLimit, tasks: &TaskTracker) {
        let watched = self.exec.backend.downgrade();
        spawn_until_stopped(tasks, &self.stop, watch_memory(watched, limit));
    }

    /// A reader of every node's guard state and reachability, for
    /// `/metrics`. It holds the store's connections only weakly on Cluster,
    /// and never keeps the store from stopping.
    pub fn node_readings(&self) -> impl Fn() -> Vec<GuardReading> + Send + Sync + 'static {
        let watched = self.exec.backend.downgrade();
        move || watched.readings()
    }

    /// Whether the memory guard refuses a new customer whose hash would be
    /// `key`: the guard of the node that would hold it decides. One atomic
    /// load (on Cluster, a slot-table lookup too); it never waits for Redis.
    pub(crate) fn memory_guard_refuses(&self, key: &CustomerKey) -> bool {
        match &self.exec.backend {
            Backend::Single { guard, .. } => guard.refuses_new_customers(),
            Backend::Cluster(cluster) => cluster
                .route(redis_keyslot(key.as_bytes()))
                .is_ok_and(|node| node.guard.refuses_new_customers()),
        }
    }

    /// Whether Redis answers and lets the service's user do all it needs,
    /// for the API's health status (`exec/ping.rs`). A pass clears the
    /// stored connection problem: it is history once Redis answers.
    pub async fn ping(&self, deadline: Instant) -> Result<(), StorageError> {
        let result = self.exec.ping(deadline).await;
        if result.is_ok()
            && let Ok(mut problem) = self.connection_problem.lock()
        {
            *problem = None;
        }
        result
    }

    /// Every field of the customer's hash with its count (HGETALL): one round
    /// trip, no state change.
    pub async fn read_combos(
        &self,
        tenant: &Tenant,
        merchant: &MerchantId,
        customer: &CustomerId,
        deadline: Instant,
    ) -> Result<Vec<(String, i64)>, StorageError> {
        let key = keys::customer_key(tenant, merchant, customer);
        let key = key.as_str();
        self.exec
            .on_key(
                RedisCommand::ReadCombos,
                key,
                deadline,
                false,
                |client| async move { client.hgetall::<Value, _>(key).await.and_then(fields_of) },
            )
            .await
    }

    /// The customer's fields and the hash's remaining TTL in seconds (0 when
    /// absent). Both commands go out together on one connection.
    pub async fn read_habits(
        &self,
        tenant: &Tenant,
        merchant: &MerchantId,
        customer: &CustomerId,
        deadline: Instant,
    ) -> Result<(Vec<(String, i64)>, i64), StorageError> {
        let key = keys::customer_key(tenant, merchant, customer);
        let key = key.as_str();
        let (fields, ttl) = self
            .exec
            .on_key(
                RedisCommand::ReadHabits,
                key,
                deadline,
                false,
                |client| async move {
                    let (fields, ttl) =
                        tokio::join!(client.hgetall::<Value, _>(key), client.ttl::<i64, _>(key),);
                    Ok((fields.and_then(fields_of)?, ttl?))
                },
            )
            .await?;
        Ok((fields, ttl.max(0)))
    }

    /// Deletes the customer's hash, with its remembered attempts; true when
    /// it existed. Deleting is idempotent, so a lost answer is reported as
    /// a read's would be: retrying is always safe.
    pub async fn forget(
        &self,
        tenant: &Tenant,
        merchant: &MerchantId,
        customer: &CustomerId,
        deadline: Instant,
    ) -> Result<bool, StorageError> {
        self.exec.check_fence()?;
        let key = keys::customer_key(tenant, merchant, customer);
        let key = key.as_str();
        let deleted: i64 = self
            .exec
            .on_key(
                RedisCommand::Forget,
                key,
                deadline,
                false,
                |client| async move { client.del(key).await },
            )
            .await?;
        Ok(deleted > 0)
    }

    /// Runs one write or admission by `deadline`.
    pub(crate) async fn run(&self, op: Op<'_>, deadline: Instant) -> Result<Reply, StorageError> {
        self.exec.run(op, deadline).await
    }

    /// Runs `ops` in one pipeline per connection and waits for every reply.
    /// Ops on the same key go, in the given order, on the same connection,
    /// so Redis runs them in that order. The answer has one outcome per op,
    /// in the same order.
    pub(crate) async fn run_batch(&self, ops: Vec<Op<'_>>) -> Vec<BatchOutcome> {
        self.exec.run_batch(ops).await
    }

    /// Stops the store's background tasks and closes every connection.
    pub async fn quit(&self) {
        self.stop.cancel();
        if let Some(watch) = &self.exec.sentinel_watch {
            watch.close().await;
        }
        self.exec.backend.quit().await;
    }
}

/// HGETALL's reply (fred hands it over as a map) as (field, count) pairs of
/// the combos, without first building a second, typed map. The service's
/// own bookkeeping (remembered attempts) is skipped: reads never see it.
fn fields_of(reply: Value) -> Result<Vec<(String, i64)>, Error> {
    let map = reply.into_map()?;
    map.inner()
        .into_iter()
        .filter(|(field, _)| !field.as_str().is_some_and(attempts::is_bookkeeping))
        .map(|(field, count)| {
            let field = field
                .into_string()
                .ok_or_else(|| Error::new(fred::error::ErrorKind::Parse, "a field is not UTF-8"))?;
            let count = count.as_i64().ok_or_else(|| {
                Error::new(fred::error::ErrorKind::Parse, "a count is not an integer")
            })?;
            Ok((field, count))
        })
        .collect()
}
