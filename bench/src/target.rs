//! Where the generator's calls go: a gRPC server (the service or the no-op
//! floor) over N HTTP/2 connections, or straight to Redis through the
//! service's own `RedisStore` (the storage floor).

use std::sync::Arc;
use std::time::{Duration, Instant};

use fred::clients::Pool;
use fred::interfaces::{ClientLike, HashesInterface, KeysInterface, TransactionInterface};
use fred::prelude::{Builder, Config};
use sticky_routing::config::Settings;
use sticky_routing::domain::Rules;
use sticky_routing::domain::attempts::AttemptId;
use sticky_routing::domain::combo::Combo;
use sticky_routing::domain::counts::Outcome as RecordedOutcome;
use sticky_routing::domain::ids::{
    Connector, CustomerId, MerchantId, PaymentMethod, PaymentMethodType,
};
use sticky_routing::domain::keys;
use sticky_routing::domain::tenant::{TENANT_HEADER, Tenant};
use sticky_routing::record::{RecordCommand, record_outcome};
use sticky_routing::storage::{RedisSettings, RedisStore};
use sticky_routing::telemetry::Metrics;
use sticky_routing::transport::pb::sticky_routing_client::StickyRoutingClient;
use sticky_routing::transport::pb::{GetPinRequest, Outcome, RecordOutcomeRequest};
use tokio_util::task::TaskTracker;
use tonic::Code;
use tonic::transport::{Channel, Endpoint};

use crate::BoxError;
use crate::workload::Call;

/// How the storage floor writes a success.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum StoreWrite {
    /// The service's record_success script, by EVALSHA.
    Script,
    /// MULTI { HINCRBY, EXPIRE } EXEC, the seed design's write.
    Multi,
}

/// The storage floor's connections; every worker shares the same pools.
#[derive(Clone)]
pub struct StoreFloor {
    store: RedisStore,
    rules: Arc<Rules>,
    raw: Pool,
    write: StoreWrite,
    ttl_secs: i64,
    timeout: Duration,
}

/// A place to send calls. Cheap to clone: one clone per worker.
#[derive(Clone)]
pub enum Target {
    Grpc {
        clients: Vec<StickyRoutingClient<Channel>>,
        timeout: Duration,
    },
    Store(StoreFloor),
}

impl Target {
    /// `connections` HTTP/2 connections to `addr` (`host:port`).
    pub async fn grpc(addr: &str, connections: usize, timeout: Duration) -> Result<Self, BoxError> {
        let mut clients = Vec::with_capacity(connections.max(1));
        for _ in 0..connections.max(1) {
            // One Endpoint::connect is one HTTP/2 connection.
            let channel = Endpoint::from_shared(format!("http://{addr}"))?
                .tcp_nodelay(true)
                .connect()
                .await
                .map_err(|e| format!("cannot connect to {addr}: {e}"))?;
            clients.push(StickyRoutingClient::new(channel));
        }
        Ok(Target::Grpc { clients, timeout })
    }

    /// The storage floor on `redis_url`, with the service's default rules and
    /// a pool of `pool_size` connections.
    pub async fn store(
        redis_url: &str,
        pool_size: usize,
        write: StoreWrite,
        timeout: Duration,
    ) -> Result<Self, BoxError> {
        let defaults = Settings::defaults();
        let redis = RedisSettings {
            url: redis_url.into(),
            pool_size,
            command_timeout: timeout,
            ..defaults.redis
        };
        let ttl_secs = i64::try_from(defaults.rules.key_ttl_secs()).unwrap_or(i64::MAX);
        let rules = Arc::new(defaults.rules);
        // The store counts its calls as it does in the service, so the
        // floor pays what the service pays for them.
        let metrics = Arc::new(Metrics::new()?);
        let store = RedisStore::connect(&redis, &TaskTracker::new(), metrics)?;
        if !store.wait_connected(Duration::from_secs(5)).await {
            return Err(format!("redis at {redis_url} did not answer").into());
        }
        store.preload_scripts().await?;
        let raw = Builder::from_config(Config::from_url(redis_url)?).build_pool(pool_size)?;
        raw.init().await?;
        Ok(Target::Store(StoreFloor {
            store,
            rules,
            raw,
            write,
            ttl_secs,
            timeout,
        }))
    }

    /// The worker's handle: gRPC workers spread over the connections.
    pub fn for_worker(&self, worker: usize) -> Worker {
        match self {
            Target::Grpc { clients, timeout } => Worker::Grpc {
                client: clients[worker % clients.len()].clone(),
                timeout: *timeout,
            },
            Target::Store(floor) => Worker::Store(floor.clone()),
        }
    }

    /// Closes connections (the store's pool; channels close on drop).
    pub async fn close(self) {
        if let Target::Store(floor) = self {
            floor.store.quit().await;
            let _ = floor.raw.quit().await;
        }
    }
}

/// One worker's connection to the target.
#[derive(Clone)]
pub enum Worker {
    Grpc {
        client: StickyRoutingClient<Channel>,
        timeout: Duration,
    },
    Store(StoreFloor),
}

impl Worker {
    /// Sends one call and returns its status code (`Ok` on success).
    pub async fn send(&mut self, call: Call) -> Code {
        match self {
            Worker::Grpc { client, timeout } => {
                let result = match call {
                    Call::Record(req, tenant) => match request(req, *timeout, tenant) {
                        Ok(req) => client.record_outcome(req).await.map(drop),
                        Err(code) => return code,
                    },
                    Call::Pin(req, tenant) => match request(req, *timeout, tenant) {
                        Ok(req) => client.get_pin(req).await.map(drop),
                        Err(code) => return code,
                    },
                };
                result.err().map_or(Code::Ok, |status| status.code())
            }
            Worker::Store(floor) => {
                let deadline = Instant::now() + floor.timeout;
                let ok = match call {
                    Call::Record(req, tenant) if floor.write == StoreWrite::Multi => {
                        multi_success(&floor.raw, &req, tenant.as_deref(), floor.ttl_secs).await
                    }
                    Call::Record(req, tenant) => {
                        store_record(
                            &floor.store,
                            &floor.rules,
                            &req,
                            tenant.as_deref(),
                            deadline,
                        )
                        .await
                    }
                    Call::Pin(req, tenant) => {
                        store_pin(&floor.store, &req, tenant.as_deref(), deadline).await
                    }
                };
                if ok { Code::Ok } else { Code::Unavailable }
            }
        }
    }
}

/// `message` with its deadline and, when it has one, its tenant's
/// `x-tenant-id`; a tenant no header can carry is the client's own error,
/// counted as INVALID_ARGUMENT without a call.
fn request<T>(
    message: T,
    timeout: Duration,
    tenant: Option<String>,
) -> Result<tonic::Request<T>, Code> {
    let mut request = tonic::Request::new(message);
    request.set_timeout(timeout);
    if let Some(tenant) = tenant {
        let value = tenant.parse().map_err(|_| Code::InvalidArgument)?;
        request.metadata_mut().insert(TENANT_HEADER, value);
    }
    Ok(request)
}

/// The storage floor's tenant: the default one without a name.
fn floor_tenant(tenant: Option<&str>) -> Option<Tenant> {
    tenant.map_or(Some(Tenant::DEFAULT), |t| Tenant::parse(t).ok())
}

async fn store_record(
    store: &RedisStore,
    rules: &Rules,
    req: &RecordOutcomeRequest,
    tenant: Option<&str>,
    deadline: Instant,
) -> bool {
    let (Some((merchant, customer, combo, connector)), Some(tenant)) =
        (record_parts(req), floor_tenant(tenant))
    else {
        return false;
    };
    let outcome = if req.outcome == Outcome::GatewayFailure as i32 {
        RecordedOutcome::GatewayFailure
    } else {
        RecordedOutcome::Success
    };
    let Ok(attempt) = AttemptId::parse(&req.attempt_id) else {
        return false;
    };
    let command = RecordCommand {
        tenant,
        merchant,
        customer,
        combo,
        connector,
        outcome,
        attempt,
        // The storage floor prices the write; the experiment counts nothing.
        pin_connector: None,
    };
    record_outcome(store, rules, &command, deadline)
        .await
        .is_ok()
}

async fn store_pin(
    store: &RedisStore,
    req: &GetPinRequest,
    tenant: Option<&str>,
    deadline: Instant,
) -> bool {
    let (Ok(merchant), Ok(customer), Some(tenant)) = (
        MerchantId::parse(&req.merchant_id),
        CustomerId::parse(&req.customer_id),
        floor_tenant(tenant),
    ) else {
        return false;
    };
    store
        .read_combos(&tenant, &merchant, &customer, deadline)
        .await
        .is_ok()
}

/// The seed's success write: HINCRBY and EXPIRE in one MULTI. (No admission
/// and no cap: it is here to price the transaction, not to replace the rule.)
async fn multi_success(
    raw: &Pool,
    req: &RecordOutcomeRequest,
    tenant: Option<&str>,
    ttl_secs: i64,
) -> bool {
    let (Some((merchant, customer, combo, _)), Some(tenant)) =
        (record_parts(req), floor_tenant(tenant))
    else {
        return false;
    };
    let key = keys::customer_key(&tenant, &merchant, &customer);
    let tx = raw.next().multi();
    let queued = async {
        tx.hincrby::<(), _, _>(key.as_str(), combo.field(), 1)
            .await?;
        tx.expire::<(), _>(key.as_str(), ttl_secs, None).await
    }
    .await;
    queued.is_ok() && tx.exec::<(i64, i64)>(true).await.is_ok()
}

fn record_parts(req: &RecordOutcomeRequest) -> Option<(MerchantId, CustomerId, Combo, Connector)> {
    let connector = Connector::parse(&req.connector).ok()?;
    let combo = Combo::new(
        &PaymentMethod::parse(&req.payment_method).ok()?,
        &PaymentMethodType::parse(&req.payment_method_type).ok()?,
        &connector,
    )
    .ok()?;
    Some((
        MerchantId::parse(&req.merchant_id).ok()?,
        CustomerId::parse(&req.customer_id).ok()?,
        combo,
        connector,
    ))
}
