//! Health as the contract gives it: service `""` is SERVING while the process
//! runs (liveness, and Kubernetes readiness); `sticky_routing.v1.StickyRouting`
//! is SERVING only while Redis answers: on Cluster, every primary that owns
//! slots, each within the Redis timeout, so one shard that is down or hung
//! turns it NOT_SERVING (for alerting: a shard's failover must not take
//! every pod out of rotation, which is why readiness stays on `""`). On
//! shutdown both turn NOT_SERVING.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio_stream::Stream;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};
use tonic::{Request, Response, Status};
use tonic_health::ServingStatus;
use tonic_health::pb::health_server::{Health, HealthServer};
use tonic_health::pb::{self, HealthCheckRequest, HealthCheckResponse};
use tonic_health::server::{HealthReporter, HealthService, WatchStream};

use crate::storage::RedisStore;

/// The service name whose status follows Redis.
pub const API_SERVICE: &str = "sticky_routing.v1.StickyRouting";
/// The whole-process status.
pub const PROCESS_SERVICE: &str = "";

/// Checks Redis every `every` (see [`RedisStore::ping`]) and reports the
/// API's status, until `drain` is cancelled; then turns every status
/// NOT_SERVING and returns, so the caller knows no later ping can turn one
/// back.
pub async fn follow_redis(
    reporter: HealthReporter,
    store: RedisStore,
    every: Duration,
    drain: CancellationToken,
) {
    let mut last = None;
    loop {
        let deadline = Instant::now() + every.min(Duration::from_secs(1));
        let Some(ping) = drain.run_until_cancelled(store.ping(deadline)).await else {
            break;
        };
        let ok = ping.is_ok();
        if last != Some(ok) {
            match ping {
                Ok(()) => tracing::info!("redis answers: {API_SERVICE} is SERVING"),
                Err(error) => tracing::warn!(
                    %error,
                    connection = store.connection_problem().as_deref().unwrap_or("none seen"),
                    "redis is not ready (unreachable, or the user lacks a permission): {API_SERVICE} is NOT_SERVING"
                ),
            }
            let status = if ok {
                ServingStatus::Serving
            } else {
                ServingStatus::NotServing
            };
            reporter.set_service_status(API_SERVICE, status).await;
            last = Some(ok);
        }
        if drain
            .run_until_cancelled(tokio::time::sleep(every))
            .await
            .is_none()
        {
            break;
        }
    }
    set_all_not_serving(&reporter).await;
}

/// Turns every status NOT_SERVING, for shutdown.
async fn set_all_not_serving(reporter: &HealthReporter) {
    for service in [PROCESS_SERVICE, API_SERVICE] {
        reporter
            .set_service_status(service, ServingStatus::NotServing)
            .await;
    }
}

/// The health service, whose Watch streams end once shutdown has turned
/// every status NOT_SERVING. A Watch never finishes by itself, and the server
/// waits for every call in flight before it exits: without this, one open
/// Watch (a load balancer's, say) would hold the drain until the grace
/// period ran out, and the process would exit with an error.
pub struct DrainingHealth {
    inner: HealthService,
    ended: CancellationToken,
}

impl DrainingHealth {
    /// Serves `reporter`'s statuses; Watch streams end when `ended` is
    /// cancelled, after a last NOT_SERVING.
    pub fn new(reporter: HealthReporter, ended: CancellationToken) -> HealthServer<Self> {
        HealthServer::new(Self {
            inner: HealthService::from_health_reporter(reporter),
            ended,
        })
    }
}

#[tonic::async_trait]
impl Health for DrainingHealth {
    async fn check(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<HealthCheckResponse>, Status> {
        self.inner.check(request).await
    }

    type WatchStream = UntilDrained;

    async fn watch(
        &self,
        request: Request<HealthCheckRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let statuses = self.inner.watch(request).await?.into_inner();
        Ok(Response::new(UntilDrained {
            statuses,
            ended: Box::pin(self.ended.clone().cancelled_owned()),
            done: false,
        }))
    }
}

/// A Watch stream that ends, with a last NOT_SERVING, once the drain is over.
pub struct UntilDrained {
    statuses: WatchStream,
    ended: Pin<Box<WaitForCancellationFutureOwned>>,
    done: bool,
}

impl Stream for UntilDrained {
    type Item = Result<HealthCheckResponse, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.done {
            return Poll::Ready(None);
        }
        if let Poll::Ready(update) = Pin::new(&mut self.statuses).poll_next(cx) {
            return Poll::Ready(update);
        }
        if self.ended.as_mut().poll(cx).is_ready() {
            self.done = true;
            let last = HealthCheckResponse {
                status: pb::health_check_response::ServingStatus::NotServing as i32,
            };
            return Poll::Ready(Some(Ok(last)));
        }
        Poll::Pending
    }
}
