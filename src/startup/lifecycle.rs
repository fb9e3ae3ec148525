//! Running a built [`Application`] and stopping it, as linkerd drains.
//!
//! One shutdown token stops everything, in two stages: its child, `drain`,
//! is cancelled when the signal comes, so every open connection, on every
//! listener, gets GOAWAY and its calls in flight finish, the API listener
//! closes, and readiness turns every health status NOT_SERVING (the health
//! Watch streams end once they have said so); the drain is over when the
//! API's last connection has closed, or the grace period runs out. Then the
//! token itself is cancelled, which cuts what is left and ends the health
//! listener and `/metrics` (kept up so the last probe and scrape see the
//! drain). One task tracker holds every background task, the store's
//! included, and every exit path, clean or not, ends them all and closes
//! the store.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use tokio_stream::Stream;
use tokio_util::sync::CancellationToken;

use super::{Application, StartupError};
use crate::telemetry;
use crate::transport::health;
use crate::transport::server::AfterDrain;
use crate::transport::tls::{Connection, RELOAD_INTERVAL, plain_incoming, tls_incoming};

/// The gRPC server's connections, plaintext or TLS.
type Incoming = Pin<Box<dyn Stream<Item = std::io::Result<Connection>> + Send>>;

/// The longest the breaker's last flush may hold up the exit.
const BREAKER_LAST_FLUSH: Duration = Duration::from_secs(2);
/// The longest the experiment counts' last flush may hold up the exit (it
/// runs alongside the breaker's).
const EXPERIMENT_LAST_FLUSH: Duration = Duration::from_secs(2);

/// How often readiness pings Redis.
const REDIS_HEALTH_INTERVAL: Duration = Duration::from_millis(500);

impl Application {
    /// Serves until `signal` resolves, then drains and stops.
    pub async fn run_until_stopped(
        self,
        signal: impl Future<Output = ()>,
    ) -> Result<(), StartupError> {
        let (store, tasks, shutdown_grace) = (self.store, self.tasks, self.shutdown_grace);
        tracing::info!(grpc = %self.grpc_addr, metrics = %self.metrics_addr, redis = %self.redis_url, "sticky-routing serving");

        let shutdown = CancellationToken::new();
        let drain = shutdown.child_token();
        // Not on the tracker: it must end (with its last flush) before the
        // store closes, below.
        let breaker_cycle = self.breakers.as_ref().map(|b| b.start(shutdown.clone()));
        let experiment_cycle = self.experiments.start(shutdown.clone());
        let metrics_server = telemetry::serve_metrics(
            self.metrics_listener,
            self.metrics,
            shutdown.clone().cancelled_owned(),
        );
        tasks.spawn(async move {
            if let Err(error) = metrics_server.await {
                tracing::error!(%error, "the /metrics server failed");
            }
        });
        tasks.spawn(telemetry::summarise(
            self.failures,
            shutdown.clone().cancelled_owned(),
        ));
        // It returns once `drain` is cancelled and every status is NOT_SERVING.
        let readiness = tasks.spawn(health::follow_redis(
            self.health,
            store.clone(),
            REDIS_HEALTH_INTERVAL,
            drain.clone(),
        ));
        // Once readiness has said NOT_SERVING, the Watch streams must not
        // hold the drain open.
        let watches_end = self.watches_end;
        tasks.spawn(async move {
            let _ = readiness.await;
            watches_end.cancel();
        });
        let incoming: Incoming = match self.tls {
            Some(tls) => {
                tasks.spawn(tls.clone().watch(RELOAD_INTERVAL, shutdown.clone()));
                Box::pin(tls_incoming(
                    self.grpc_listener,
                    tls,
                    &tasks,
                    shutdown.clone(),
                ))
            }
            None => Box::pin(plain_incoming(self.grpc_listener)),
        };
        if let Some((listener, addr, server)) = self.health_listener {
            tracing::info!(health = %addr, "plaintext health checks");
            tasks.spawn(server.serve(
                plain_incoming(listener),
                drain.clone(),
                shutdown.clone(),
                AfterDrain::KeepAccepting,
            ));
        }
        let server = self.server.serve(
            incoming,
            drain.clone(),
            shutdown.clone(),
            AfterDrain::StopAccepting,
        );
        tokio::pin!(server);

        let result = tokio::select! {
            () = &mut server => Ok(()),
            () = signal => {
                tracing::info!(grace = ?shutdown_grace, "shutting down: draining in-flight calls");
                drain.cancel();
                tokio::time::timeout(shutdown_grace, &mut server)
                    .await
                    .map_err(|_| StartupError::GraceExpired(shutdown_grace))
            }
        };

        // Every exit path: stop every task, let the breaker and the
        // experiment flush the counts of the calls answered (both at once),
        // close the store, wait for all.
        shutdown.cancel();
        let breaker_flushed = async {
            if let Some(cycle) = breaker_cycle {
                let _ = tokio::time::timeout(BREAKER_LAST_FLUSH, cycle).await;
            }
        };
        let experiment_flushed = async {
            let _ = tokio::time::timeout(EXPERIMENT_LAST_FLUSH, experiment_cycle).await;
        };
        tokio::join!(breaker_flushed, experiment_flushed);
        store.quit().await;
        tasks.close();
        tasks.wait().await;
        if result.is_ok() {
            tracing::info!("drained; bye");
        }
        result
    }
}
