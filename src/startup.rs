//! Wiring: binds the listeners, connects the store, and serves gRPC (API,
//! health, reflection) and `/metrics` until a shutdown signal.
//!
//! [`Application::build`] binds before it returns, so tests build on port 0
//! and read the real ports back. Shutdown follows linkerd's drain: both
//! health statuses turn NOT_SERVING, the server stops accepting and lets
//! in-flight calls finish within the grace period, then `run_until_stopped`
//! returns.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::transport::Server;
use tonic_health::ServingStatus;

use crate::config::{Settings, redact_url};
use crate::storage::{RedisStore, StorageError};
use crate::telemetry::Metrics;
use crate::transport::health::{self, API_SERVICE};
use crate::transport::pb::sticky_routing_server::StickyRoutingServer;
use crate::transport::{StickyRoutingService, pb};

/// The largest request accepted; real ones are well under 8 KiB.
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024;
/// How long start-up waits for Redis before serving without it.
const REDIS_CONNECT_WAIT: Duration = Duration::from_secs(2);
/// How often readiness pings Redis.
const REDIS_HEALTH_INTERVAL: Duration = Duration::from_millis(500);

/// Why the service could not start or stopped badly.
#[derive(Debug, thiserror::Error)]
pub enum StartupError {
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("cannot set up redis: {0}")]
    Redis(#[from] StorageError),
    #[error("cannot set up metrics: {0}")]
    Metrics(String),
    #[error("cannot set up reflection: {0}")]
    Reflection(String),
    #[error("gRPC server failed: {0}")]
    Serve(#[from] tonic::transport::Error),
    #[error("in-flight calls did not finish within the {0:?} shutdown grace period")]
    GraceExpired(Duration),
}

/// A built, bound, not yet serving service.
pub struct Application {
    settings: Settings,
    grpc_listener: TcpListener,
    grpc_addr: SocketAddr,
    metrics_listener: TcpListener,
    metrics_addr: SocketAddr,
    store: RedisStore,
    metrics: Arc<Metrics>,
}

impl Application {
    pub async fn build(settings: Settings) -> Result<Self, StartupError> {
        let (grpc_listener, grpc_addr) = bind(settings.listen_addr).await?;
        let (metrics_listener, metrics_addr) = bind(settings.metrics_addr).await?;
        let store = RedisStore::connect(&settings.redis, &settings.rules)?;
        if store.wait_connected(REDIS_CONNECT_WAIT).await {
            if let Err(error) = store.preload_scripts().await {
                tracing::warn!(%error, "could not preload the Lua scripts; the first calls will load them");
            }
        } else {
            tracing::warn!(
                redis = %redact_url(&settings.redis.url),
                why = store.connection_problem().as_deref().unwrap_or("no answer yet"),
                "redis is not reachable yet; serving anyway, with {API_SERVICE} NOT_SERVING until it is"
            );
        }
        let metrics = Arc::new(Metrics::new().map_err(|e| StartupError::Metrics(e.to_string()))?);
        Ok(Self {
            settings,
            grpc_listener,
            grpc_addr,
            metrics_listener,
            metrics_addr,
            store,
            metrics,
        })
    }

    /// The bound gRPC address (the real port when built on port 0).
    pub fn grpc_addr(&self) -> SocketAddr {
        self.grpc_addr
    }

    /// The bound metrics address.
    pub fn metrics_addr(&self) -> SocketAddr {
        self.metrics_addr
    }

    /// Serves until `shutdown` resolves, then drains.
    pub async fn run_until_stopped(
        self,
        shutdown: impl Future<Output = ()>,
    ) -> Result<(), StartupError> {
        let (settings, store, metrics) = (self.settings, self.store, self.metrics);
        tracing::info!(
            grpc = %self.grpc_addr,
            metrics = %self.metrics_addr,
            redis = %redact_url(&settings.redis.url),
            "sticky-routing serving"
        );

        let (reporter, health_service) = tonic_health::server::health_reporter();
        reporter
            .set_service_status(API_SERVICE, ServingStatus::NotServing)
            .await;
        let (stop_tx, stop_rx) = watch::channel(false);
        let readiness = tokio::spawn(health::follow_redis(
            reporter.clone(),
            store.clone(),
            REDIS_HEALTH_INTERVAL,
            stop_rx,
        ));

        // Both reflection versions: grpcurl asks for v1, older ghz for v1alpha.
        let reflection = || {
            tonic_reflection::server::Builder::configure()
                .register_encoded_file_descriptor_set(pb::FILE_DESCRIPTOR_SET)
                .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        };
        let reflection_error =
            |e: tonic_reflection::server::Error| StartupError::Reflection(e.to_string());
        let reflection_v1 = reflection().build_v1().map_err(reflection_error)?;
        let reflection_v1alpha = reflection().build_v1alpha().map_err(reflection_error)?;

        // A call may make three Redis calls (a new customer's success).
        let call_ceiling = settings.redis.command_timeout * 4;
        let api = StickyRoutingService::new(
            store.clone(),
            metrics.clone(),
            settings.rules.min_pin_count,
            call_ceiling,
        );
        let api = StickyRoutingServer::new(api).max_decoding_message_size(MAX_MESSAGE_BYTES);

        // Metrics stay up until the drain is over, so the last scrape sees it.
        let (metrics_stop_tx, metrics_stop_rx) = tokio::sync::oneshot::channel::<()>();
        let metrics_server = tokio::spawn(crate::telemetry::serve_metrics(
            self.metrics_listener,
            metrics,
            async {
                let _ = metrics_stop_rx.await;
            },
        ));

        let (drain_tx, drain_rx) = tokio::sync::oneshot::channel::<()>();
        let server = grpc_server(settings.max_in_flight_per_connection)
            .add_service(health_service)
            .add_service(reflection_v1)
            .add_service(reflection_v1alpha)
            .add_service(api)
            .serve_with_incoming_shutdown(TcpListenerStream::new(self.grpc_listener), async {
                let _ = drain_rx.await;
            });
        tokio::pin!(server);

        tokio::select! {
            result = &mut server => {
                let _ = stop_tx.send(true);
                let _ = metrics_stop_tx.send(());
                return result.map_err(StartupError::from);
            }
            () = shutdown => {}
        }

        tracing::info!(grace = ?settings.shutdown_grace, "shutting down: draining in-flight calls");
        let _ = stop_tx.send(true);
        let _ = readiness.await;
        health::set_all_not_serving(&reporter).await;
        let _ = drain_tx.send(());
        let drained = tokio::time::timeout(settings.shutdown_grace, &mut server).await;
        let _ = metrics_stop_tx.send(());
        let _ = metrics_server.await;
        store.quit().await;
        match drained {
            Ok(result) => {
                tracing::info!("drained; bye");
                result.map_err(StartupError::from)
            }
            Err(_) => Err(StartupError::GraceExpired(settings.shutdown_grace)),
        }
    }
}

/// The gRPC server's transport settings. Public so that the benchmark's
/// no-op floor runs with exactly the same ones.
///
/// The in-flight limit is per connection: kubelet's probes come on their
/// own connections, so shedding a busy client never fails a probe.
pub fn grpc_server(max_in_flight_per_connection: usize) -> Server {
    let in_flight = u32::try_from(max_in_flight_per_connection).unwrap_or(u32::MAX);
    Server::builder()
        .tcp_nodelay(true)
        .http2_keepalive_interval(Some(Duration::from_secs(30)))
        .max_concurrent_streams(Some(in_flight))
        .concurrency_limit_per_connection(max_in_flight_per_connection)
        .load_shed(true)
}

/// Binds `addr`, returning the listener and the address it really got.
async fn bind(addr: SocketAddr) -> Result<(TcpListener, SocketAddr), StartupError> {
    let error = |source| StartupError::Bind { addr, source };
    let listener = TcpListener::bind(addr).await.map_err(error)?;
    let bound = listener.local_addr().map_err(error)?;
    Ok((listener, bound))
}

/// Resolves on SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = terminate => {}
    }
}
