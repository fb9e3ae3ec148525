//! The readiness check: a PING, and the permission probe when it is due,
//! to every node that holds data, at once, so a primary that is down, hung or refusing the
//! service's user fails the check however many others answer.

use std::sync::Arc;
use std::time::Instant;

use fred::interfaces::ClientLike;

use super::super::error::{NotApplied, StorageError};
use super::super::permissions::{PROBE_ARGS, Verdict};
use super::super::scripts::Scripts;
use super::super::topology::{Backend, Cluster, Node, NodeGuard};
use super::{Call, Exec, timed};
use crate::telemetry::{Metrics, RedisCommand};

impl Exec {
    /// One PING and one probe per node (on Cluster, every primary that owns
    /// slots), each within the Redis timeout.
    pub async fn ping(&self, deadline: Instant) -> Result<(), StorageError> {
        match &self.backend {
            Backend::Single {
                pool,
                in_flight,
                guard,
            } => {
                let ping = self.call_on(pool, in_flight, deadline, false);
                let probe = guard
                    .permissions
                    .probe_due(Instant::now())
                    .then(|| self.call_on(pool, in_flight, deadline, false));
                let (scripts, metrics) = (self.scripts.clone(), self.metrics.clone());
                node_ready(ping, probe, guard.clone(), scripts, metrics, deadline).await
            }
            Backend::Cluster(cluster) => self.ping_every_primary(cluster, deadline).await,
        }
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
            let probe = node
                .guard
                .permissions
                .probe_due(Instant::now())
                .then(|| self.call_on(&node.pool, &node.in_flight, deadline, false));
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
}

/// One node's readiness: a PING and, when it is due, the permission probe
/// (`permissions.rs`), sent at once on calls made for them. Each failed call is counted on `metrics`; the
/// probe's verdict is kept on `guard`, and readiness passes only when the
/// PING was answered and the last verdict lets every write through.
async fn node_ready(
    ping: Result<Call, StorageError>,
    probe: Option<Result<Call, StorageError>>,
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
        let Some(probe) = probe else {
            return Ok(None);
        };
        let call = probe?;
        let reply: Vec<i64> = timed(&metrics, RedisCommand::PermissionProbe, deadline, async {
            scripts
                .probe
                .run_keyless(&call.client, &PROBE_ARGS[..], &metrics)
                .await
                .map_err(|e| call.error(&e))
        })
        .await?;
        Verdict::of_reply(&reply).map(Some)
    };
    let (pinged, probed) = tokio::join!(pinged, probed);
    match probed {
        Ok(None) => {}
        Ok(Some(verdict)) => guard.permissions.record(verdict, &guard.name()),
        Err(error) => {
            if let Some(verdict) = Verdict::of_failed_probe(&error) {
                guard.permissions.record(verdict, &guard.name());
            }
            metrics.redis_error(error.kind());
        }
    }
    pinged.inspect_err(|error| {
        metrics.redis_error(error.kind());
        // A node that did not answer may come back another process (a
        // restart, a failover) with another ACL: the first check that
        // reaches it again probes.
        guard.permissions.suspect();
    })?;
    guard.permissions.readiness()
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
