//! The readiness check: a PING, and the permission probe when it is due,
//! to every node that holds data, at once, so a primary that is down, hung or refusing the
//! service's user fails the check however many others answer.
//!
//! It asks whether Redis answers the request path: each call goes on the
//! request path's connection, but takes none of its in-flight slots
//! ([`Lane::Readiness`]), so a full queue alone (a burst of callers) never
//! fails it, and the background lane, with its own connection and slots,
//! never reaches it.

use std::time::Instant;

use fred::interfaces::ClientLike;

use super::super::error::{NotApplied, StorageError};
use super::super::permissions::{PROBE_ARGS, Verdict};
use super::super::scripts::Scripts;
use super::super::topology::{Backend, Cluster, Lane, Node, NodeGuard};
use super::{Call, Exec, timed};
use crate::telemetry::{Metrics, RedisCommand};

impl Exec {
    /// One PING per node (on Cluster, every primary that owns slots), and
    /// the permission probe where it is due, each within the Redis timeout.
    pub async fn ping(&self, deadline: Instant) -> Result<(), StorageError> {
        match &self.backend {
            Backend::Single { lanes, guard } => {
                let call = || self.call_on(lanes, Lane::Readiness, deadline, false);
                node_ready(call, guard, &self.scripts, &self.metrics, deadline).await
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
            let exec = self.clone();
            pings.spawn(async move {
                let call = || exec.call_on(&node.lanes, Lane::Readiness, deadline, false);
                node_ready(call, &node.guard, &exec.scripts, &exec.metrics, deadline)
                    .await
                    .map_err(|error| on_primary(&node, error))
            });
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
/// (`permissions.rs`), sent at once on calls made by `call`. After a check
/// whose PING failed, the probe waits for the first PING that is answered
/// (a restart or a failover may have brought another ACL): a node that does
/// not answer gets no probes piling up behind its PINGs. Each failed call
/// is counted on `metrics`; the probe's verdict is kept on `guard`, and
/// readiness passes only when the PING was answered and the last verdict
/// lets every write through.
async fn node_ready(
    call: impl Fn() -> Result<Call, StorageError>,
    guard: &NodeGuard,
    scripts: &Scripts,
    metrics: &Metrics,
    deadline: Instant,
) -> Result<(), StorageError> {
    let permissions = &guard.permissions;
    let pinged = async {
        let call = call()?;
        timed(metrics, RedisCommand::Ping, deadline, async {
            call.client
                .ping::<()>(None)
                .await
                .map_err(|e| call.error(&e))
        })
        .await
    };
    let (pinged, probed) = if permissions.probe_due(Instant::now()) {
        let (pinged, probed) = tokio::join!(pinged, probe(call(), scripts, metrics, deadline));
        (pinged, Some(probed))
    } else {
        (pinged.await, None)
    };
    if let Err(error) = pinged {
        metrics.redis_error(error.kind());
        permissions.unreached();
        keep(probed, guard, metrics);
        return Err(error);
    }
    let probed = match probed {
        Some(probed) => {
            permissions.reached();
            Some(probed)
        }
        None if permissions.reached() => Some(probe(call(), scripts, metrics, deadline).await),
        None => None,
    };
    keep(probed, guard, metrics);
    permissions.readiness()
}

/// One run of the permission probe on `call`.
async fn probe(
    call: Result<Call, StorageError>,
    scripts: &Scripts,
    metrics: &Metrics,
    deadline: Instant,
) -> Result<Verdict, StorageError> {
    let call = call?;
    let reply: Vec<i64> = timed(metrics, RedisCommand::PermissionProbe, deadline, async {
        scripts
            .probe
            .run_keyless(&call.client, &PROBE_ARGS[..], metrics)
            .await
            .map_err(|e| call.error(&e))
    })
    .await?;
    Verdict::of_reply(&reply)
}

/// Keeps a probe's verdict on the node's guard; a probe that failed is
/// counted, and is a verdict only when Redis refused the probe itself.
fn keep(probed: Option<Result<Verdict, StorageError>>, guard: &NodeGuard, metrics: &Metrics) {
    match probed {
        None => {}
        Some(Ok(verdict)) => guard.permissions.record(verdict, &guard.name()),
        Some(Err(error)) => {
            if let Some(verdict) = Verdict::of_failed_probe(&error) {
                guard.permissions.record(verdict, &guard.name());
            }
            metrics.redis_error(error.kind());
        }
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
