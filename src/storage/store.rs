//! [`RedisStore`]: domain-typed operations over a fred connection pool.
//!
//! The public surface is what a caller may do with customer state: read it,
//! forget it, check that Redis answers. The scripts that change counts are
//! crate-private and take typed keys, so the only way to write is the
//! record flow (`crate::record`), which never skips admission.
//!
//! Every call goes through [`RedisStore::on_key`] (or, for PING,
//! [`RedisStore::ping`]), which reports it on `/metrics`: its time, by what
//! it is for, once it is handed to the Redis client, and its failure by
//! kind, wherever it failed (calls this process refuses before sending, a
//! full in-flight bound or a Sentinel fence, are failures that took no
//! Redis time, so they are counted but not timed).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fred::clients::{Client, Pool, WithOptions};
use fred::interfaces::{ClientLike, EventInterface, HashesInterface, KeysInterface};
use fred::prelude::{Builder, Config, Error, ErrorKind, Options, ReconnectPolicy, Value};
use fred::types::scripts::Script;
use fred::util::redis_keyslot;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::{CancellationToken, DropGuard};
use tokio_util::task::TaskTracker;
use tracing::Instrument as _;

use super::batch::{
    admit_args, admit_reply, failure_args, failure_reply, success_args, success_reply,
};
use super::cluster::{Cluster, Node};
use super::error::{CallKind, ConnectError, NotApplied, StorageError};
use super::memory_watch::{NodeGuard, Watched};
use super::permissions::{PROBE_ARGS, Verdict};
use super::scripts::{LuaScript, Scripts};
use super::sentinel_watch::SentinelWatch;
use super::settings::RedisSettings;
use super::timing::{Timed, timed};
use crate::domain::admission::Decision;
use crate::domain::attempts::{self, AttemptDigest};
use crate::domain::combo::Combo;
use crate::domain::counts::Recorded;
use crate::domain::ids::{CustomerId, MerchantId};
use crate::domain::keys::{self, AdmissionKey, CustomerKey};
use crate::domain::memory_guard::{GuardReading, MemoryLimit};
use crate::telemetry::{Metrics, RedisCommand};

/// How long a pool may take to open a connection.
pub(super) const CONNECTION_TIMEOUT: Duration = Duration::from_secs(2);

/// The Redis-backed store. Cheap to clone: clones share the pool.
#[derive(Clone)]
pub struct RedisStore {
    pub(super) backend: Backend,
    pub(super) scripts: Arc<Scripts>,
    pub(super) command_timeout: Duration,
    /// Stops the store's background tasks: cancelled by [`Self::quit`], or
    /// when the last clone is dropped.
    stop: CancellationToken,
    _stop_on_drop: Arc<DropGuard>,
    /// The latest connection error (refused, wrong password, untrusted
    /// certificate), so readiness can say why Redis does not answer.
    connection_problem: Arc<Mutex<Option<String>>>,
    /// Behind Sentinel: follows failovers and fences writes during them.
    sentinel_watch: Option<Arc<SentinelWatch>>,
    /// Where each call's time and failure are counted.
    metrics: Arc<Metrics>,
}

/// Where calls go.
#[derive(Clone)]
pub(super) enum Backend {
    /// One node, or the primary behind Sentinel: one fred pool, and nothing
    /// between a call and it.
    Single {
        pool: Pool,
        /// One permit per command that may be in flight (queued, or sent and
        /// awaiting its reply): `queue_limit` per connection. Past it a call
        /// is refused at once, with nothing sent, instead of piling up behind
        /// a slow or stalled Redis until its deadline.
        in_flight: Arc<Semaphore>,
        /// Whether this node refuses new customers (the memory guard).
        guard: Arc<NodeGuard>,
    },
    /// Redis Cluster: a pool per primary, chosen by the key's slot, so that
    /// one shard's failure stalls no other shard (see `cluster.rs`).
    Cluster(Arc<Cluster>),
}

/// One success write, as the record_success script takes it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SuccessWrite<'a> {
    pub field: &'a str,
    pub ttl_secs: u64,
    pub cap: u32,
    /// Create the hash when absent (the customer passed admission).
    pub create: bool,
    /// The attempt to check and remember, when the caller sent one.
    pub attempt: Option<AttemptDigest>,
}

/// One admission request, as the admit script takes it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AdmissionRequest {
    pub now_ms: i64,
    pub window_ms: i64,
    pub budget: u64,
}

/// A client with this call's options, what the call is, and its place
/// among the commands in flight (released when the call ends).
struct Call {
    client: WithOptions<Client>,
    kind: CallKind,
    _in_flight: OwnedSemaphorePermit,
}

impl Call {
    fn error(&self, error: &Error) -> StorageError {
        StorageError::from_redis(error, self.kind)
    }

    /// Runs `op` with this call's client, holding its in-flight place
    /// until the answer.
    async fn run<T, F, Fut>(self, op: F) -> Result<T, StorageError>
    where
        F: FnOnce(WithOptions<Client>) -> Fut,
        Fut: Future<Output = Result<T, Error>>,
    {
        let Self {
            client,
            kind,
            _in_flight,
        } = self;
        op(client)
            .await
            .map_err(|e| StorageError::from_redis(&e, kind))
    }
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
        let mut config = client_config(redis)?;
        // Keep retrying the first connection too, rather than giving up.
        config.fail_fast = false;
        let stop = CancellationToken::new();
        // Made first, so that a failure below stops what was already spawned.
        let stop_on_drop = Arc::new(stop.clone().drop_guard());
        let connection_problem = Arc::new(Mutex::new(None));
        let (backend, sentinel_watch) = if config.server.is_clustered() {
            let cluster = Cluster::start(&config, redis, connection_problem.clone(), tasks, &stop);
            (Backend::Cluster(cluster), None)
        } else {
            let pool = build_pool(config.clone(), redis).map_err(ConnectError::Client)?;
            let sentinel_watch = super::sentinel_watch::spawn(&config, pool.clone(), tasks, &stop)
                .map_err(ConnectError::Sentinel)?
                .map(Arc::new);
            for client in pool.clients() {
                let errors =
                    report_connection_errors(client.error_rx(), connection_problem.clone());
                super::spawn_until_stopped(tasks, &stop, errors);
            }
            // fred's own connection tasks run until `quit`; their handles are
            // not needed.
            drop(pool.connect_pool());
            let in_flight = in_flight_limit(redis);
            let guard = Arc::new(NodeGuard::new(&first_host(&config)));
            let single = Backend::Single {
                pool,
                in_flight,
                guard,
            };
            (single, sentinel_watch)
        };
        Ok(Self {
            backend,
            scripts: Arc::new(Scripts::new()),
            command_timeout: redis.command_timeout,
            _stop_on_drop: stop_on_drop,
            stop,
            connection_problem,
            sentinel_watch,
            metrics,
        })
    }

    /// Why the connections last failed, if they ever did.
    pub fn connection_problem(&self) -> Option<String> {
        self.connection_problem
            .lock()
            .map_or(None, |problem| problem.clone())
    }

    /// Waits up to `within` for every pooled connection to come up (on
    /// Cluster: for the slot table, and every primary's pool).
    pub async fn wait_connected(&self, within: Duration) -> bool {
        match &self.backend {
            Backend::Single { pool, .. } => tokio::time::timeout(within, pool.wait_for_connect())
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
        let scripts = self.scripts.all().map(LuaScript::as_script);
        self.load_on_primaries(&scripts).await
    }

    /// Caches the bulk import's batch script (`scripts/batch.lua`) on every
    /// primary, as [`Self::preload_scripts`] does the service's: the
    /// service itself never sends it.
    pub async fn preload_batch_script(&self) -> Result<(), StorageError> {
        self.load_on_primaries(&[&self.scripts.batch]).await
    }

    async fn load_on_primaries(&self, scripts: &[&Script]) -> Result<(), StorageError> {
        let clients: Vec<Client> = match &self.backend {
            Backend::Single { pool, .. } => vec![pool.next_connected().clone()],
            Backend::Cluster(cluster) => cluster
                .primaries()
                .0
                .iter()
                .map(|node| node.pool.next_connected().clone())
                .collect(),
        };
        let kind = CallKind {
            write: false,
            deadline_bound: false,
            timeout: self.command_timeout,
        };
        for client in &clients {
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
        super::spawn_until_stopped(
            tasks,
            &self.stop,
            super::memory_watch::watch(self.watched(), limit),
        );
    }

    /// A reader of every node's guard state and reachability, for
    /// `/metrics`. It holds the store's connections only weakly on Cluster,
    /// and never keeps the store from stopping.
    pub fn node_readings(&self) -> impl Fn() -> Vec<GuardReading> + Send + Sync + 'static {
        let watched = self.watched();
        move || watched.readings()
    }

    fn watched(&self) -> Watched {
        match &self.backend {
            Backend::Single { pool, guard, .. } => Watched::Single {
                pool: pool.clone(),
                guard: guard.clone(),
            },
            Backend::Cluster(cluster) => Watched::Cluster(Arc::downgrade(cluster)),
        }
    }

    /// Whether the memory guard refuses a new customer whose hash would be
    /// `key`: the guard of the node that would hold it decides. One atomic
    /// load (on Cluster, a slot-table lookup too); it never waits for Redis.
    pub(crate) fn memory_guard_refuses(&self, key: &CustomerKey) -> bool {
        match &self.backend {
            Backend::Single { guard, .. } => guard.refuses_new_customers(),
            Backend::Cluster(cluster) => cluster
                .route(redis_keyslot(key.as_bytes()))
                .is_ok_and(|node| node.guard.refuses_new_customers()),
        }
    }

    /// Stops the store's background tasks and closes every connection.
    pub async fn quit(&self) {
        self.stop.cancel();
        if let Some(watch) = &self.sentinel_watch {
            watch.close().await;
        }
        match &self.backend {
            Backend::Single { pool, .. } => {
                let _ = pool.quit().await;
            }
            Backend::Cluster(cluster) => cluster.quit().await,
        }
    }

    /// Whether Redis answers, for the API's health status: one PING, each
    /// within the Redis timeout; on Cluster one to every primary that owns
    /// slots, at once, so a primary that is down or hung fails the check
    /// however many others answer. A pass clears the stored connection
    /// problem: it is history once Redis answers.
    pub async fn ping(&self, deadline: Instant) -> Result<(), StorageError> {
        let result = match &self.backend {
            Backend::Single {
                pool,
                in_flight,
                guard,
            } => {
                let ping = self.call_on(pool, in_flight, deadline, false);
                let probe = self.call_on(pool, in_flight, deadline, false);
                let (scripts, metrics) = (self.scripts.clone(), self.metrics.clone());
                node_ready(ping, probe, guard.clone(), scripts, metrics, deadline).await
            }
            Backend::Cluster(cluster) => self.ping_every_primary(cluster, deadline).await,
        };
        if result.is_ok()
            && let Ok(mut problem) = self.connection_problem.lock()
        {
            *problem = None;
        }
        result
    }

    async fn ping_every_primary(
        &self,
        cluster: &Cluster,
        deadline: Instant,
    ) -> Result<(), StorageError> {
        let (nodes, covered) = cluster.primaries();
        if !covered {
            cluster.refresh_soon();
            return Err(self.failed(StorageError::Unavailable {
                why: NotApplied::NoConnection,
                detail: "the cluster's slot table is not known, or some slots have no primary"
                    .into(),
            }));
        }
        let mut pings = tokio::task::JoinSet::new();
        for node in nodes {
            let ping = self.call_on(&node.pool, &node.in_flight, deadline, false);
            let probe = self.call_on(&node.pool, &node.in_flight, deadline, false);
            let (scripts, metrics) = (self.scripts.clone(), self.metrics.clone());
            let ready = node_ready(ping, probe, node.guard.clone(), scripts, metrics, deadline);
            pings.spawn(async move { ready.await.map_err(|error| on_primary(&node, error)) });
        }
        let mut first_error = None;
        while let Some(joined) = pings.join_next().await {
            if let Ok(Err(error)) = joined {
                first_error.get_or_insert(error);
            }
        }
        match first_error {
            None => Ok(()),
            Some(error) => {
                cluster.refresh_soon();
                Err(error)
            }
        }
    }

    /// Every field of the customer's hash with its count (HGETALL): one round
    /// trip, no state change.
    pub async fn read_combos(
        &self,
        merchant: &MerchantId,
        customer: &CustomerId,
        deadline: Instant,
    ) -> Result<Vec<(String, i64)>, StorageError> {
        let key = keys::customer_key(merchant, customer);
        let key = key.as_str();
        self.on_key(
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
        merchant: &MerchantId,
        customer: &CustomerId,
        deadline: Instant,
    ) -> Result<(Vec<(String, i64)>, i64), StorageError> {
        let key = keys::customer_key(merchant, customer);
        let key = key.as_str();
        let (fields, ttl) = self
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
        merchant: &MerchantId,
        customer: &CustomerId,
        deadline: Instant,
    ) -> Result<bool, StorageError> {
        self.check_fence()?;
        let key = keys::customer_key(merchant, customer);
        let key = key.as_str();
        let deleted: i64 = self
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

    /// Runs record_success.lua. `None`: the hash is absent and `create` was
    /// false, so nothing was written and the customer needs admission.
    /// A repeat of a remembered attempt is [`Recorded::Duplicate`].
    pub(crate) async fn write_success(
        &self,
        key: &CustomerKey,
        write: SuccessWrite<'_>,
        deadline: Instant,
    ) -> Result<Option<Recorded>, StorageError> {
        let args = success_args(write, None);
        let reply = self
            .run_script(&self.scripts.record_success, key, args, deadline)
            .await?;
        success_reply(&reply)
    }

    /// Runs record_failure.lua: decrement, floor at 0, delete at 0, never
    /// create; a repeat of a remembered attempt writes nothing.
    pub(crate) async fn write_failure(
        &self,
        key: &CustomerKey,
        combo: &Combo,
        ttl_secs: u64,
        attempt: Option<AttemptDigest>,
        deadline: Instant,
    ) -> Result<Recorded, StorageError> {
        let args = failure_args(combo.field(), ttl_secs, attempt, None);
        let reply = self
            .run_script(&self.scripts.record_failure, key, args, deadline)
            .await?;
        failure_reply(&reply)
    }

    /// Runs admit.lua against a merchant's admission key.
    pub(crate) async fn admit(
        &self,
        key: &AdmissionKey,
        request: AdmissionRequest,
        deadline: Instant,
    ) -> Result<Decision, StorageError> {
        let reply = self
            .run_script(
                &self.scripts.admit,
                key,
                admit_args(request, None),
                deadline,
            )
            .await?;
        admit_reply(&reply)
    }

    /// Runs one of the scripts; they all write, and all reply with a list
    /// of integers. Refused while a Sentinel failover is under way, because
    /// the primary it would reach is about to discard it.
    async fn run_script(
        &self,
        script: &LuaScript,
        key: &str,
        args: Vec<Value>,
        deadline: Instant,
    ) -> Result<Vec<i64>, StorageError> {
        self.check_fence()?;
        let args = &args[..];
        let metrics = &*self.metrics;
        self.on_key(script.command, key, deadline, true, |client| async move {
            script.run(&client, key, args, metrics).await
        })
        .await
    }

    /// Runs `op`, a call of `command`, with a client for `key` (see
    /// [`Self::call_on`]), and reports it on `/metrics`: its time once it is
    /// handed to the client, and its failure. On Cluster, a MOVED reply (the
    /// command did not run) sends it once more, to the primary named, when
    /// the slot table knows it; any failure there asks for a fresh slot
    /// table. The two are timed as one call, the time the caller waited. On
    /// a single node this is one call and nothing more.
    async fn on_key<T, F, Fut>(
        &self,
        command: RedisCommand,
        key: &str,
        deadline: Instant,
        write: bool,
        op: F,
    ) -> Result<T, StorageError>
    where
        F: Fn(WithOptions<Client>) -> Fut,
        Fut: Future<Output = Result<T, Error>>,
    {
        let result = match &self.backend {
            Backend::Single {
                pool,
                in_flight,
                guard,
            } => match permitted(guard, write)
                .and_then(|()| self.call_on(pool, in_flight, deadline, write))
            {
                Ok(call) => {
                    let timed = Timed::start(&self.metrics, command, deadline);
                    let result = match timed.span() {
                        None => call.run(op).await,
                        Some(span) => call.run(op).instrument(span.clone()).await,
                    };
                    timed.finish(&result);
                    result
                }
                Err(refused) => Err(refused),
            },
            // Boxed: its futures (up to two calls, and the redirect between
            // them) would otherwise sit inline in every caller's future,
            // single node included, and be copied with it on every call
            // (callgrind: +8k instructions per RecordOutcome, in memcpy).
            Backend::Cluster(cluster) => {
                Box::pin(self.on_cluster_key(cluster, command, key, deadline, write, op)).await
            }
        };
        result.map_err(|error| self.failed(error))
    }

    /// Counts a failed call on `/metrics` by its kind, and hands it back.
    fn failed(&self, error: StorageError) -> StorageError {
        self.metrics.redis_error(error.kind());
        error
    }

    /// [`Self::on_key`] on Cluster.
    async fn on_cluster_key<T, F, Fut>(
        &self,
        cluster: &Cluster,
        command: RedisCommand,
        key: &str,
        deadline: Instant,
        write: bool,
        op: F,
    ) -> Result<T, StorageError>
    where
        F: Fn(WithOptions<Client>) -> Fut,
        Fut: Future<Output = Result<T, Error>>,
    {
        let node = cluster.route(redis_keyslot(key.as_bytes())).map_err(|_| {
            cluster.refresh_soon();
            StorageError::Unavailable {
                why: NotApplied::NoConnection,
                detail: "no primary is known for this key's slot yet".into(),
            }
        })?;
        permitted(&node.guard, write)?;
        let call = self.call_on(&node.pool, &node.in_flight, deadline, write)?;
        timed(&self.metrics, command, deadline, async {
            let (kind, permit) = (call.kind, call._in_flight);
            let error = match op(call.client).await {
                Ok(value) => return Ok(value),
                Err(error) => error,
            };
            cluster.refresh_soon();
            let moved_to = moved_to(&error).and_then(|address| cluster.node_at(address));
            match moved_to {
                Some(heir) if heir.server != node.server => {
                    drop(permit);
                    let again = self.call_on(&heir.pool, &heir.in_flight, deadline, write)?;
                    again.run(op).await
                }
                _ => Err(StorageError::from_redis(&error, kind)),
            }
        })
        .await
    }

    /// Refuses a write while a Sentinel failover is under way; a refusal is
    /// a failed call on `/metrics` (kind `failover`).
    pub(super) fn check_fence(&self) -> Result<(), StorageError> {
        if self
            .sentinel_watch
            .as_ref()
            .is_some_and(|watch| watch.fence.is_up())
        {
            return Err(self.failed(StorageError::Unavailable {
                why: NotApplied::Failover,
                detail: "a Sentinel failover is under way; writes resume once the new primary \
                         is reached"
                    .into(),
            }));
        }
        Ok(())
    }

    /// A client of `pool` whose options bound this call by the command
    /// timeout and the caller's deadline, whichever is sooner, with no retry
    /// and no queueing behind a broken connection. A call whose deadline has
    /// passed is never sent; and one that times out while still queued is
    /// dropped by fred unsent. `in_flight` is `pool`'s bound on commands in
    /// flight.
    fn call_on(
        &self,
        pool: &Pool,
        in_flight: &Arc<Semaphore>,
        deadline: Instant,
        write: bool,
    ) -> Result<Call, StorageError> {
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return Err(StorageError::DeadlineExceeded);
        }
        let permit =
            in_flight
                .clone()
                .try_acquire_owned()
                .map_err(|_| StorageError::Unavailable {
                    why: NotApplied::QueueFull,
                    detail: "every in-flight slot to Redis is taken".into(),
                })?;
        let deadline_bound = remaining < self.command_timeout;
        let timeout = remaining.min(self.command_timeout);
        let options = Options {
            // A write whose connection dropped may have run: resending it
            // after the reconnect could apply it twice.
            max_attempts: Some(1),
            timeout: Some(timeout),
            // Not connected: answer at once, nothing sent, rather than queue
            // the command until the connection is back. fred also fails a
            // fail-fast command in flight when its connection drops, instead
            // of replaying it (`Command::should_finish_with_error`), so this
            // and `max_attempts` each stop a resend; tests/api/faults.rs
            // catches a build without both.
            fail_fast: true,
            ..Options::default()
        };
        Ok(Call {
            client: pool.next_connected().with_options(&options),
            kind: CallKind {
                write,
                deadline_bound,
                timeout,
            },
            _in_flight: permit,
        })
    }
}

/// Refuses a write, unsent, to a node where the permission probe last found
/// the service's Redis user lacking (`permissions.rs`).
fn permitted(guard: &NodeGuard, write: bool) -> Result<(), StorageError> {
    match write.then(|| guard.permissions.refusal()).flatten() {
        Some(refusal) => Err(refusal),
        None => Ok(()),
    }
}

/// One node's readiness: a PING and the permission probe, sent at once on
/// calls made for them. Each failed call is counted on `metrics`; the
/// probe's verdict is kept on `guard`, and readiness passes only when the
/// PING was answered and the last verdict lets every write through.
async fn node_ready(
    ping: Result<Call, StorageError>,
    probe: Result<Call, StorageError>,
    guard: Arc<NodeGuard>,
    scripts: Arc<Scripts>,
    metrics: Arc<Metrics>,
    deadline: Instant,
) -> Result<(), StorageError> {
    let pinged = async {
        let call = ping?;
        timed(&metrics, RedisCommand::Ping, deadline, async {
            call.client
                .ping::<()>(None)
                .await
                .map_err(|e| call.error(&e))
        })
        .await
    };
    let probed = async {
        let call = probe?;
        let reply: Vec<i64> = timed(&metrics, RedisCommand::PermissionProbe, deadline, async {
            scripts
                .probe
                .run_keyless(&call.client, &PROBE_ARGS[..], &metrics)
                .await
                .map_err(|e| call.error(&e))
        })
        .await?;
        Verdict::of_reply(&reply)
    };
    let (pinged, probed) = tokio::join!(pinged, probed);
    match probed {
        Ok(verdict) => guard.permissions.record(verdict, &guard.name()),
        Err(error) => {
            if let Some(verdict) = Verdict::of_failed_probe(&error) {
                guard.permissions.record(verdict, &guard.name());
            }
            metrics.redis_error(error.kind());
        }
    }
    pinged.inspect_err(|error| metrics.redis_error(error.kind()))?;
    guard.permissions.readiness()
}

/// fred's configuration for `redis`: the URL, with the credentials and TLS
/// files of their own settings.
pub(super) fn client_config(redis: &RedisSettings) -> Result<Config, ConnectError> {
    let mut config = Config::from_url(&redis.url).map_err(ConnectError::Url)?;
    if let Some(username) = &redis.username {
        config.username = Some(username.clone());
    }
    if let Some(password) = &redis.password {
        config.password = Some(password.expose().to_owned());
    }
    if let Some(files) = &redis.tls {
        let tls = super::tls::client_config(files)?;
        config.tls = Some(tls.into());
    }
    Ok(config)
}

/// The first server `config` names, to name a single node before it is
/// polled (behind Sentinel, the poll names the primary).
fn first_host(config: &Config) -> String {
    config
        .server
        .hosts()
        .first()
        .map_or_else(|| "-".to_owned(), ToString::to_string)
}

/// `queue_limit` per connection of one pool.
pub(super) fn in_flight_limit(redis: &RedisSettings) -> Arc<Semaphore> {
    let limit = redis.queue_limit.saturating_mul(redis.pool_size);
    Arc::new(Semaphore::new(limit.min(Semaphore::MAX_PERMITS)))
}

/// A fred pool for `config` with the service's connection settings.
pub(super) fn build_pool(config: Config, redis: &RedisSettings) -> Result<Pool, Error> {
    Builder::from_config(config)
        .with_connection_config(|c| {
            // One attempt: a command whose connection died in flight may
            // have run; resending it could apply a write twice.
            c.max_command_attempts = 1;
            c.connection_timeout = CONNECTION_TIMEOUT;
            c.internal_command_timeout = Duration::from_secs(2);
            c.unresponsive.max_timeout = Some(Duration::from_secs(2));
            c.unresponsive.interval = Duration::from_millis(500);
            c.tcp.nodelay = Some(true);
            // A bounded queue: past it a call is refused at once, with
            // nothing sent, instead of waiting out its deadline.
            c.max_command_buffer_len = redis.queue_limit;
        })
        .with_performance_config(|p| p.default_command_timeout = redis.command_timeout)
        .set_policy(ReconnectPolicy::new_exponential(0, 50, 2_000, 2))
        .build_pool(redis.pool_size)
}

/// The primary named by a MOVED reply (`MOVED 3999 127.0.0.1:6381`).
fn moved_to(error: &Error) -> Option<&str> {
    if *error.kind() != ErrorKind::Cluster {
        return None;
    }
    let mut words = error.details().split_whitespace();
    match (words.next(), words.next(), words.next()) {
        (Some("MOVED"), Some(_slot), Some(address)) => Some(address),
        _ => None,
    }
}

/// A failed check of one primary, naming it for the log.
fn on_primary(node: &Node, error: StorageError) -> StorageError {
    match error {
        StorageError::Unavailable { why, detail } => StorageError::Unavailable {
            why,
            detail: format!("primary {}: {detail}", node.server),
        },
        other => StorageError::Unavailable {
            why: NotApplied::ReadFailed,
            detail: format!("primary {}: {other}", node.server),
        },
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

/// Logs each new connection error once (a reconnect loop repeats the same
/// one every backoff) and keeps the latest for readiness.
pub(super) async fn report_connection_errors(
    mut errors: tokio::sync::broadcast::Receiver<(Error, Option<fred::types::config::Server>)>,
    latest: Arc<Mutex<Option<String>>>,
) {
    use tokio::sync::broadcast::error::RecvError;
    loop {
        let (error, server) = match errors.recv().await {
            Ok(event) => event,
            Err(RecvError::Lagged(_)) => continue,
            Err(RecvError::Closed) => return,
        };
        let text = error.to_string();
        let server = server.map_or_else(|| "-".to_owned(), |s| s.to_string());
        let Ok(mut last) = latest.lock() else { return };
        if last.as_deref() != Some(text.as_str()) {
            tracing::warn!(%server, error = %text, "redis connection failed");
            *last = Some(text);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_moved_reply_names_where_to_go() {
        let error = |kind, details: &'static str| Error::new(kind, details);
        assert_eq!(
            moved_to(&error(ErrorKind::Cluster, "MOVED 3999 127.0.0.1:6381")),
            Some("127.0.0.1:6381")
        );
        for (kind, details) in [
            (ErrorKind::Cluster, "ASK 3999 127.0.0.1:6381"),
            (ErrorKind::Cluster, "CLUSTERDOWN The cluster is down"),
            (ErrorKind::Cluster, "MOVED 3999"),
            (ErrorKind::Unknown, "MOVED 3999 127.0.0.1:6381"),
        ] {
            assert_eq!(moved_to(&error(kind, details)), None, "{details}");
        }
    }
}
