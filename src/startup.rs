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
use tonic::transport::Server;
use tonic::transport::server::Router;
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;

pub use lifecycle::shutdown_signal;

use crate::config::Settings;
use crate::record;
use crate::storage::{ConnectError, RedisStore, redact_url};
use crate::telemetry::{FailureLog, Metrics};
use crate::transport::admin::AdminClients;
use crate::transport::gate::ApiGate;
use crate::transport::health::{API_SERVICE, DrainingHealth};
use crate::transport::pb::sticky_routing_server::StickyRoutingServer;
use crate::transport::tls::{ServerTls, TlsFileProblem};
use crate::transport::{StickyRoutingService, pb};

/// The largest request accepted; real ones are well under 8 KiB.
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024;
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
    #[error("gRPC server failed: {0}")]
    Serve(#[from] tonic::transport::Error),
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
    health_listener: Option<(TcpListener, SocketAddr, Router)>,
    metrics_listener: TcpListener,
    metrics_addr: SocketAddr,
    /// The gRPC server with every service added.
    router: Router,
    health: HealthReporter,
    /// Ends the health Watch streams once every status is NOT_SERVING.
    watches_end: CancellationToken,
    store: RedisStore,
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
        let health_listener = match settings.health_listen_addr {
            Some(addr) => {
                let (listener, addr) = bind(addr).await?;
                let router = Server::builder()
                    .timeout(CALL_BOUND)
                    .add_service(health_service.clone());
                Some((listener, addr, router))
            }
            None => None,
        };

        let tasks = TaskTracker::new();
        let store = RedisStore::connect(&settings.redis, &tasks, metrics.clone())?;
        // Always started: besides the guard, it is every node's reachability
        // probe on /metrics.
        store.guard_admission_memory(settings.rules.admission_memory_limit, &tasks);
        metrics.watch_redis_nodes(store.node_readings());
        let redis_url = redact_url(&settings.redis.url);
        wait_for_redis(&store, &redis_url).await;

        let failures = Arc::new(FailureLog::new());
        let api = StickyRoutingService::new(
            store.clone(),
            metrics.clone(),
            failures.clone(),
            Arc::new(settings.rules),
            record::call_ceiling(settings.redis.command_timeout),
            settings.admin_clients.clone(),
        );
        let api = ApiGate::new(
            StickyRoutingServer::new(api).max_decoding_message_size(MAX_MESSAGE_BYTES),
            settings.max_in_flight,
            metrics.clone(),
        );
        let router = grpc_server(settings.max_in_flight)
            .max_connection_age(jittered(settings.max_connection_age))
            .max_connection_age_grace(settings.max_connection_age_grace)
            .add_service(health_service)
            .add_service(reflection_v1)
            .add_service(reflection_v1alpha)
            .add_service(api);
        Ok(Self {
            grpc_listener,
            grpc_addr,
            tls,
            health_listener,
            metrics_listener,
            metrics_addr,
            router,
            health,
            watches_end,
            store,
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

/// The longest any call may take on the server, whatever its deadline says
/// and however slowly its request body arrives: a client that opens streams
/// and never finishes sending them cannot hold memory or concurrency slots
/// for longer. The handlers' own bound (four Redis timeouts, 1 s by default)
/// answers every call that did arrive well before it.
pub const CALL_BOUND: Duration = Duration::from_secs(10);

/// The gRPC server's transport settings. Public so that the benchmark's
/// no-op floor runs with exactly the same ones.
///
/// The limit on calls in progress is [`ApiGate`]'s, server-wide, on the
/// StickyRouting service alone. Each connection may open twice as many
/// streams, plus room for health checks, so that one busy client's excess
/// reaches the gate and is refused at once instead of waiting in the
/// client's HTTP/2 queue for a free stream; refused streams close at once.
pub fn grpc_server(max_in_flight: usize) -> Server {
    let streams = max_in_flight.saturating_mul(2).saturating_add(STREAM_ROOM);
    Server::builder()
        .timeout(CALL_BOUND)
        .tcp_nodelay(true)
        .http2_keepalive_interval(Some(Duration::from_secs(30)))
        .max_concurrent_streams(Some(u32::try_from(streams).unwrap_or(u32::MAX)))
}

/// Streams per connection beyond the in-flight limit's share: health,
/// reflection, and calls on their way to being refused.
const STREAM_ROOM: usize = 100;

/// `age` moved by up to ±10 %, once per process: pods started together do
/// not all send GOAWAY at the same moment. (tonic takes one age for every
/// connection of a server, so the spread is across pods; connections of one
/// pod are spread by when they were opened.)
fn jittered(age: Duration) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    // A random number from the standard library's per-process hash keys.
    let random = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    // 9,000 to 11,000 ten-thousandths: 0.9 to 1.1.
    let per_ten_thousand = 9_000 + u32::try_from(random % 2_001).unwrap_or(1_000);
    age.saturating_mul(per_ten_thousand) / 10_000
}

/// Binds `addr`, returning the listener and the address it really got.
async fn bind(addr: SocketAddr) -> Result<(TcpListener, SocketAddr), StartupError> {
    let error = |source| StartupError::Bind { addr, source };
    let listener = TcpListener::bind(addr).await.map_err(error)?;
    let bound = listener.local_addr().map_err(error)?;
    Ok((listener, bound))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_connection_age_moves_by_at_most_ten_percent() {
        let age = Duration::from_secs(300);
        let ages: Vec<Duration> = (0..200).map(|_| jittered(age)).collect();
        assert!(
            ages.iter()
                .all(|a| *a >= age * 9 / 10 && *a <= age * 11 / 10)
        );
        assert!(ages.iter().any(|a| *a != ages[0]), "no jitter at all");
        assert!(
            jittered(Duration::MAX) > Duration::from_secs(1),
            "saturates, never panics"
        );
    }
}
