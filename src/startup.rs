//! Wiring: binds the listeners, connects the store, and assembles the gRPC
//! server (API, health, reflection) and `/metrics`, ready to run.
//!
//! [`Application::build`] does every step that can fail, and binds before it
//! returns, so tests build on port 0 and read the real ports back; running
//! and stopping are [`lifecycle`]'s job. Nothing that can fail comes after
//! the store connects, so a failed build never leaves a store open.

mod lifecycle;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tonic::service::Routes;
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;

use crate::breaker::Breakers;
use crate::config::Settings;
use crate::experiment::Experiments;
use crate::pki::{AdminClients, TlsFileProblem};
use crate::record;
use crate::storage::{ConnectError, RedisStore};
use crate::telemetry::{FailureLog, Metrics};
use crate::transport::health::{API_SERVICE, DrainingHealth};
use crate::transport::server::{GrpcServer, Lifetime};
use crate::transport::tls::ServerTls;
use crate::transport::{self, StickyRoutingService, pb};

/// How long start-up waits for Redis before serving without it.
const REDIS_CONNECT_WAIT: Duration = Duration::from_secs(2);

/// Why the service could not start or stopped badly.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot set up redis: {0}")]
    Redis(#[from] ConnectError),
    #[error("cannot set up metrics: {0}")]
    Metrics(#[from] opentelemetry_sdk::error::OTelSdkError),
    #[error("cannot set up reflection: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    #[error("cannot set up gRPC TLS: {0}")]
    Tls(#[from] TlsFileProblem),
    #[error("in-flight calls did not finish within the {0:?} shutdown grace period")]
    GraceExpired(Duration),
}

/// A built, bound, not yet serving service.
pub struct Application {
    grpc_listener: TcpListener,
    grpc_addr: SocketAddr,
    /// gRPC over TLS when set.
    tls: Option<Arc<ServerTls>>,
    /// The plaintext health-only listener and its server, unless off.
    health_listener: Option<(TcpListener, SocketAddr, GrpcServer)>,
    metrics_listener: TcpListener,
    metrics_addr: SocketAddr,
    /// The gRPC server with every service added.
    server: GrpcServer,
    health: HealthReporter,
    /// Ends the health Watch streams once every status is NOT_SERVING.
    watches_end: CancellationToken,
    store: RedisStore,
    /// The circuit breaker's engine, unless `STICKY_ROUTING_BREAKER=off`.
    breakers: Option<Arc<Breakers>>,
    /// The experiment counts' engine: always on (it counts only what a
    /// RecordOutcome with `pin_connector` in a mode other than `off` gives
    /// it, and its cycle sends nothing while there is nothing to flush).
    experiments: Arc<Experiments>,
    metrics: Arc<Metrics>,
    /// Failed calls by kind, summarised once a second.
    failures: Arc<FailureLog>,
    /// Every background task of the running service, the store's included.
    tasks: TaskTracker,
    shutdown_grace: Duration,
    redis_url: String,
}

impl Application {
    pub async fn build(settings: Settings) -> Result<Self, StartupError> {
        let (grpc_listener, grpc_addr) = bind(settings.listen_addr).await?;
        let (metrics_listener, metrics_addr) = bind(settings.metrics_addr).await?;
        let tls = match &settings.tls {
            Some(files) => Some(ServerTls::load(files.clone())?),
            None => None,
        };
        log_who_may_call(tls.as_deref(), &settings.admin_clients);
        let metrics = Arc::new(Metrics::new()?);
        // Both reflection versions: grpcurl asks for v1, older ghz for v1alpha.
        let reflection = || {
            tonic_reflection::server::Builder::configure()
                .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
                .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        };
        let reflection_v1 = reflection().build_v1()?;
        let reflection_v1alpha = reflection().build_v1alpha()?;
        let health = HealthReporter::new();
        let watches_end = CancellationToken::new();
        let health_service = DrainingHealth::new(health.clone(), watches_end.clone());
        health
            .set_service_status(API_SERVICE, ServingStatus::NotServing)
            .await;
        let lifetime = Lifetime {
            max_age: settings.max_connection_age,
            grace: settings.max_connection_age_grace,
        };
        let health_listener = match settings.health_listen_addr {
            Some(addr) => {
                let (listener, addr) = bind(addr).await?;
                let server = GrpcServer::new(Routes::new(health_service.clone()), 0, lifetime);
                Some((listener, addr, server))
            }
            None => None,
        };

        let tasks = TaskTracker::new();
        let store = RedisStore::connect(&settings.redis, &tasks, metrics.clone())?;
        // Always started: besides the guard, it is every node's reachability
        // probe on /metrics.
        store.guard_admission_memory(settings.rules.admission_memory_limit, &tasks);
        metrics.watch_redis_nodes(store.node_readings());
        let redis_url = settings.redis.url.to_string();
        wait_for_redis(&store, &redis_url).await;

        let failures = Arc::new(FailureLog::new());
        let breakers = settings
            .breaker
            .map(|breaker| Arc::new(Breakers::new(store.clone(), breaker, metrics.clone())));
        let experiments = Arc::new(Experiments::new(
            store.clone(),
            settings.experiment_retention,
            settings.experiment_batch_age,
            metrics.clone(),
        ));
        let api = StickyRoutingService::new(
            store.clone(),
            metrics.clone(),
            failures.clone(),
            Arc::new(settings.rules),
            record::call_ceiling(settings.redis.command_timeout),
            settings.admin_clients.clone(),
            settings.tenants.clone(),
            breakers.clone(),
            experiments.clone(),
        );
        let api = transport::server::api(
            api,
            settings.max_in_flight,
            settings.shares,
            metrics.clone(),
        );
        let routes = Routes::new(health_service)
            .add_service(reflection_v1)
            .add_service(reflection_v1alpha)
            .add_service(api);
        let server = GrpcServer::new(routes, settings.max_in_flight, lifetime);
        Ok(Self {
            grpc_listener,
            grpc_addr,
            tls,
            health_listener,
            metrics_listener,
            metrics_addr,
            server,
            health,
            watches_end,
            store,
            breakers,
            experiments,
            metrics,
            failures,
            tasks,
            shutdown_grace: settings.shutdown_grace,
            redis_url,
        })
    }

    /// The bound gRPC address (the real port when built on port 0).
    pub fn grpc_addr(&self) -> SocketAddr {
        self.grpc_addr
    }

    /// The bound address of the plaintext health listener, unless it is off.
    pub fn health_addr(&self) -> Option<SocketAddr> {
        self.health_listener.as_ref().map(|(_, addr, _)| *addr)
    }

    /// The bound metrics address.
    pub fn metrics_addr(&self) -> SocketAddr {
        self.metrics_addr
    }
}

/// Says at start who can call what, so that an operator sees an open admin
/// API in the log.
fn log_who_may_call(tls: Option<&ServerTls>, admin: &AdminClients) {
    let transport = match tls {
        None => "plaintext gRPC: any client that reaches the port",
        Some(tls) if tls.mutual() => {
            "gRPC over mTLS: clients with a certificate from the client CA"
        }
        Some(_) => "gRPC over TLS without client certificates: any client that reaches the port",
    };
    match admin {
        AdminClients::Anyone => tracing::info!(
            "{transport}; GetHabits and ForgetCustomer are allowed for every such client \
             (STICKY_ROUTING_ADMIN_CLIENTS is unset)"
        ),
        AdminClients::Only(names) => tracing::info!(
            admin_clients = names.len(),
            "{transport}; GetHabits and ForgetCustomer only for the identities in STICKY_ROUTING_ADMIN_CLIENTS"
        ),
    }
}

/// Gives Redis a moment to answer and the scripts a chance to preload. The
/// service serves either way: readiness says whether Redis answers.
/// `redacted_url` names Redis in the log, without its password.
async fn wait_for_redis(store: &RedisStore, redacted_url: &str) {
    if store.wait_connected(REDIS_CONNECT_WAIT).await {
        if let Err(error) = store.preload_scripts().await {
            tracing::warn!(%error, "could not preload the Lua scripts; the first calls will load them");
        }
    } else {
        tracing::warn!(
            redis = %redacted_url,
            why = store.connection_problem().as_deref().unwrap_or("no answer yet"),
            "redis is not reachable yet; serving anyway, with {API_SERVICE} NOT_SERVING until it is"
        );
    }
}

/// Binds `addr`, returning the listener and the address it really got.
async fn bind(addr: SocketAddr) -> Result<(TcpListener, SocketAddr), StartupError> {
    let error = |source| StartupError::Bind { addr, source };
    let listener = TcpListener::bind(addr).await.map_err(error)?;
    let bound = listener.local_addr().map_err(error)?;
    Ok((listener, bound))
}
