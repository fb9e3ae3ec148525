//! Health as the contract gives it: service `""` is SERVING while the process
//! runs (liveness); `sticky_routing.v1.StickyRouting` is SERVING only while
//! Redis answers (readiness). On shutdown both turn NOT_SERVING.

use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;

use crate::storage::RedisStore;

/// The service name whose status follows Redis.
pub const API_SERVICE: &str = "sticky_routing.v1.StickyRouting";
/// The whole-process status.
pub const PROCESS_SERVICE: &str = "";

/// Pings Redis every `every` and reports the API's status, until `drain`
/// is cancelled; then turns every status NOT_SERVING and returns, so the
/// caller knows no later ping can turn one back.
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
                    "redis does not answer: {API_SERVICE} is NOT_SERVING"
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
