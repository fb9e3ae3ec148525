//! Whether the service stayed SERVING through a run: `grpc.health.v1.Health/Check`
//! for the API's service name, polled on a connection of its own at a fixed
//! interval while the load runs, as a readiness probe or a monitor would.

use std::net::SocketAddr;
use std::time::Duration;

use serde::Serialize;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tonic::transport::Endpoint;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

use crate::BoxError;

/// What the polls saw.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct HealthTally {
    pub serving: u64,
    /// Answered with any status but SERVING (NOT_SERVING, UNKNOWN…).
    pub not_serving: u64,
    /// No answer within the poll's deadline, or an error status.
    pub failed: u64,
}

/// One poll's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Poll {
    Serving,
    NotServing,
    Failed,
}

impl HealthTally {
    pub fn add(&mut self, poll: Poll) {
        match poll {
            Poll::Serving => self.serving += 1,
            Poll::NotServing => self.not_serving += 1,
            Poll::Failed => self.failed += 1,
        }
    }

    pub fn polls(&self) -> u64 {
        self.serving + self.not_serving + self.failed
    }

    /// SERVING at every poll, and polled at all.
    pub fn serving_throughout(&self) -> bool {
        self.serving > 0 && self.serving == self.polls()
    }

    /// `412 SERVING`, or `398 of 412 SERVING (9 NOT_SERVING, 5 failed)`.
    pub fn summary(&self) -> String {
        if self.serving_throughout() {
            format!("{} SERVING", self.serving)
        } else {
            format!(
                "{} of {} SERVING ({} NOT_SERVING, {} failed)",
                self.serving,
                self.polls(),
                self.not_serving,
                self.failed
            )
        }
    }
}

/// A poller running until [`HealthWatch::stop`].
pub struct HealthWatch {
    stop: CancellationToken,
    task: JoinHandle<HealthTally>,
}

impl HealthWatch {
    /// Polls `service`'s health on `addr` every `every`, each poll given
    /// `deadline` to answer.
    pub async fn start(
        addr: SocketAddr,
        service: &str,
        every: Duration,
        deadline: Duration,
    ) -> Result<Self, BoxError> {
        let channel = Endpoint::from_shared(format!("http://{addr}"))?
            .tcp_nodelay(true)
            .connect()
            .await?;
        let client = HealthClient::new(channel);
        let stop = CancellationToken::new();
        let service = service.to_owned();
        let task = tokio::spawn(poll_until(client, service, every, deadline, stop.clone()));
        Ok(Self { stop, task })
    }

    /// Stops polling and returns what the polls saw.
    pub async fn stop(self) -> Result<HealthTally, BoxError> {
        self.stop.cancel();
        Ok(self.task.await?)
    }
}

async fn poll_until(
    mut client: HealthClient<tonic::transport::Channel>,
    service: String,
    every: Duration,
    deadline: Duration,
    stop: CancellationToken,
) -> HealthTally {
    let mut tally = HealthTally::default();
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = stop.cancelled() => return tally,
            _ = ticks.tick() => {}
        }
        let mut request = tonic::Request::new(HealthCheckRequest {
            service: service.clone(),
        });
        request.set_timeout(deadline);
        let reply = tokio::time::timeout(deadline, client.check(request)).await;
        tally.add(match reply {
            Ok(Ok(reply)) => classify(reply.get_ref().status),
            Ok(Err(_)) | Err(_) => Poll::Failed,
        });
    }
}

/// A Check reply's status as a poll's outcome.
fn classify(status: i32) -> Poll {
    if status == ServingStatus::Serving as i32 {
        Poll::Serving
    } else {
        Poll::NotServing
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serving_throughout_means_every_poll_and_at_least_one() {
        let mut tally = HealthTally::default();
        assert!(!tally.serving_throughout(), "never polled");
        for _ in 0..3 {
            tally.add(classify(ServingStatus::Serving as i32));
        }
        assert!(tally.serving_throughout());
        assert_eq!(tally.summary(), "3 SERVING");
        tally.add(classify(ServingStatus::NotServing as i32));
        tally.add(classify(ServingStatus::Unknown as i32));
        tally.add(Poll::Failed);
        assert!(!tally.serving_throughout());
        assert_eq!(tally.polls(), 6);
        assert_eq!(tally.summary(), "3 of 6 SERVING (2 NOT_SERVING, 1 failed)");
    }
}
