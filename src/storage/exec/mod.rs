//! Running calls: [`Exec`] sends each call to the node that holds its key,
//! on the lane it belongs to (a caller's, or background work's: each has
//! its own connections and in-flight limit, `topology/lanes.rs`), bounded
//! by the caller's deadline and that lane's limit, and reports it on
//! `/metrics` (its time once it is handed to the client, by
//! what it is for, and its failure by kind, wherever it failed: a call
//! refused before it is sent, by a full in-flight bound, a Sentinel fence
//! or a missing permission, is a failure that took no Redis time, so it is
//! counted but not timed).
//!
//! Files: this one runs one call; `batch.rs` many at once (bulk import),
//! cut into script calls by `chunks.rs`; `ping.rs` the readiness check;
//! `timing.rs` the timing. They all lean on [`Exec`], and it on none of
//! them.

mod batch;
mod chunks;
mod ping;
mod timing;

use std::sync::Arc;
use std::time::{Duration, Instant};

use fred::clients::{Client, WithOptions};
use fred::interfaces::ClientLike;
use fred::prelude::{Error, ErrorKind, Options};
use fred::util::redis_keyslot;
use tokio::sync::OwnedSemaphorePermit;
use tracing::Instrument as _;

use super::error::{CallKind, NotApplied, StorageError};
use super::ops::{Op, Reply};
use super::scripts::Scripts;
use super::topology::{Backend, Cluster, Lane, Lanes, NodeGuard, SentinelWatch};
use crate::telemetry::{Metrics, RedisCommand};
use timing::{Timed, timed};

/// What runs calls: shared by every clone of the store.
#[derive(Clone)]
pub(super) struct Exec {
    pub backend: Backend,
    pub scripts: Arc<Scripts>,
    pub metrics: Arc<Metrics>,
    pub command_timeout: Duration,
    /// Behind Sentinel: follows failovers and fences writes during them.
    pub sentinel_watch: Option<Arc<SentinelWatch>>,
}

/// A client with this call's options, what the call is, and its place
/// among its lane's commands in flight (released when the call ends; the
/// readiness check takes none).
struct Call {
    client: WithOptions<Client>,
    kind: CallKind,
    _in_flight: Option<OwnedSemaphorePermit>,
}

impl Call {
    fn error(&self, error: &Error) -> StorageError {
        StorageError::from_redis(error, self.kind)
    }

    /// Runs `op` with this call's client, holding its in-flight place
    /// until the answer.
    async fn run<T, F, Fut>(self, op: F) -> Result<T, StorageError>
    where
        F: FnOnce(WithOptions<Client>) -> Fut,
        Fut: Future<Output = Result<T, Error>>,
    {
        let Self {
            client,
            kind,
            _in_flight,
        } = self;
        op(client)
            .await
            .map_err(|e| StorageError::from_redis(&e, kind))
    }
}

impl Exec {
    /// Runs one [`Op`]: its script, on its key's node, decoded. Every op
    /// writes, so it is refused while a Sentinel failover is under way
    /// (the primary it would reach is about to discard it).
    pub async fn run(&self, op: Op<'_>, deadline: Instant) -> Result<Reply, StorageError> {
        self.check_fence()?;
        let (name, args, decode) = op.encode_args();
        let script = self.scripts.of(name);
        let (key, args, metrics) = (op.key(), &args[..], &*self.metrics);
        let reply: Vec<i64> = self
            .on_key(script.command, key, deadline, true, |client| async move {
                script.run(&client, key, args, metrics).await
            })
            .await?;
        decode
            .reply(&reply)
            .inspect_err(|error| self.note_refusal(key, error))
    }

    /// Runs `op`, a call of `command` for a caller, with a client of the
    /// request path for `key` (see [`Self::call_on`]), and reports it on
    /// `/metrics`: its time once it is handed to the client, and its
    /// failure. On Cluster, a MOVED reply (the command did not run) sends it
    /// once more, to the primary named, when the slot table knows it; any
    /// failure there asks for a fresh slot table. The two are timed as one
    /// call, the time the caller waited. On a single node this is one call
    /// and nothing more.
    pub async fn on_key<T, F, Fut>(
        &self,
        command: RedisCommand,
        key: &str,
        deadline: Instant,
        write: bool,
        op: F,
    ) -> Result<T, StorageError>
    where
        F: Fn(WithOptions<Client>) -> Fut,
        Fut: Future<Output = Result<T, Error>>,
    {
        self.on_lane(Lane::Request, command, key, deadline, write, op)
            .await
    }

    /// Runs `op`, a write of background work (a flush), as [`Self::on_key`]
    /// runs a caller's, but on the background lane of `key`'s node: its own
    /// connection and in-flight slots, never the request path's, so no
    /// burst of it can refuse or delay a caller's call or the readiness
    /// check. It is fenced during a Sentinel failover and refused unsent
    /// where the permission probe found the user lacking, as every write
    /// is. When the lane's slots are all taken it is shed at once, nothing
    /// sent (`queue_full`), and counted in
    /// `sticky_routing_background_shed_total` by `command`, not as a Redis
    /// error: it is the background's own bound doing its work.
    pub async fn on_key_background<T, F, Fut>(
        &self,
        command: RedisCommand,
        key: &str,
        deadline: Instant,
        op: F,
    ) -> Result<T, StorageError>
    where
        F: Fn(WithOptions<Client>) -> Fut,
        Fut: Future<Output = Result<T, Error>>,
    {
        self.check_fence()?;
        self.on_lane(Lane::Background, command, key, deadline, true, op)
            .await
    }

    /// [`Self::on_key`] on `lane`.
    async fn on_lane<T, F, Fut>(
        &self,
        lane: Lane,
        command: RedisCommand,
        key: &str,
        deadline: Instant,
        write: bool,
        op: F,
    ) -> Result<T, StorageError>
    where
        F: Fn(WithOptions<Client>) -> Fut,
        Fut: Future<Output = Result<T, Error>>,
    {
        let result = match &self.backend {
            Backend::Single { lanes, guard } => match permitted(guard, write)
                .and_then(|()| self.call_on(lanes, lane, deadline, write))
            {
                Ok(call) => {
                    let timed = Timed::start(&self.metrics, command, deadline);
                    let result = match timed.span() {
                        None => call.run(op).await,
                        Some(span) => call.run(op).instrument(span.clone()).await,
                    };
                    timed.finish(&result);
                    result
                }
                Err(refused) => Err(refused),
            },
            // Boxed: its futures (up to two calls, and the redirect between
            // them) would otherwise sit inline in every caller's future,
            // single node included, and be copied with it on every call.
            Backend::Cluster(cluster) => {
                Box::pin(self.on_cluster_key(cluster, lane, command, key, deadline, write, op))
                    .await
            }
        };
        result.map_err(|error| {
            self.note_refusal(key, &error);
            let shed = matches!(
                error,
                StorageError::Unavailable {
                    why: NotApplied::QueueFull,
                    ..
                }
            );
            if shed && lane == Lane::Background {
                self.metrics.background_shed(command);
                return error;
            }
            self.failed(error)
        })
    }

    /// A call refused for want of a permission has its node probed at the
    /// next readiness check (`permissions.rs`).
    pub fn note_refusal(&self, key: &str, error: &StorageError) {
        if !error.is_permission_refusal() {
            return;
        }
        match &self.backend {
            Backend::Single { guard, .. } => guard.permissions.suspect(),
            Backend::Cluster(cluster) => {
                if let Ok(node) = cluster.route(redis_keyslot(key.as_bytes())) {
                    node.guard.permissions.suspect();
                }
            }
        }
    }

    /// Counts a failed call on `/metrics` by its kind, and hands it back.
    pub fn failed(&self, error: StorageError) -> StorageError {
        self.metrics.redis_error(error.kind());
        error
    }

    /// [`Self::on_lane`] on Cluster.
    #[allow(clippy::too_many_arguments)]
    async fn on_cluster_key<T, F, Fut>(
        &self,
        cluster: &Cluster,
        lane: Lane,
        command: RedisCommand,
        key: &str,
        deadline: Instant,
        write: bool,
        op: F,
    ) -> Result<T, StorageError>
    where
        F: Fn(WithOptions<Client>) -> Fut,
        Fut: Future<Output = Result<T, Error>>,
    {
        let node = cluster.route(redis_keyslot(key.as_bytes())).map_err(|_| {
            cluster.refresh_soon();
            StorageError::Unavailable {
                why: NotApplied::NoConnection,
                detail: "no primary is known for this key's slot yet".into(),
            }
        })?;
        permitted(&node.guard, write)?;
        let call = self.call_on(&node.lanes, lane, deadline, write)?;
        timed(&self.metrics, command, deadline, async {
            let (kind, permit) = (call.kind, call._in_flight);
            let error = match op(call.client).await {
                Ok(value) => return Ok(value),
                Err(error) => error,
            };
            cluster.refresh_soon();
            let moved_to = moved_to(&error).and_then(|address| cluster.node_at(address));
            match moved_to {
                Some(heir) if heir.server != node.server => {
                    drop(permit);
                    let again = self.call_on(&heir.lanes, lane, deadline, write)?;
                    again.run(op).await
                }
                _ => Err(StorageError::from_redis(&error, kind)),
            }
        })
        .await
    }

    /// Refuses a write while a Sentinel failover is under way; a refusal is
    /// a failed call on `/metrics` (kind `failover`).
    pub fn check_fence(&self) -> Result<(), StorageError> {
        if self
            .sentinel_watch
            .as_ref()
            .is_some_and(|watch| watch.fence.is_up())
        {
            return Err(self.failed(StorageError::Unavailable {
                why: NotApplied::Failover,
                detail: "a Sentinel failover is under way; writes resume once the new primary \
                         is reached"
                    .into(),
            }));
        }
        Ok(())
    }

    /// A client of `lanes`' pool for `lane` whose options bound this call by
    /// the command timeout and the caller's deadline, whichever is sooner,
    /// with no retry and no queueing behind a broken connection. A call
    /// whose deadline has passed is never sent; and one that times out while
    /// still queued is dropped by fred unsent. It takes one of the lane's
    /// in-flight slots, or is refused at once when they are all taken (the
    /// readiness check takes none).
    fn call_on(
        &self,
        lanes: &Lanes,
        lane: Lane,
        deadline: Instant,
        write: bool,
    ) -> Result<Call, StorageError> {
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            return Err(StorageError::DeadlineExceeded);
        }
        let permit = match lanes.slots(lane) {
            None => None,
            Some(slots) => Some(slots.clone().try_acquire_owned().map_err(|_| {
                StorageError::Unavailable {
                    why: NotApplied::QueueFull,
                    detail: match lane {
                        Lane::Background => "every background in-flight slot to Redis is taken",
                        _ => "every in-flight slot to Redis is taken",
                    }
                    .into(),
                }
            })?),
        };
        let pool = lanes.pool(lane);
        let deadline_bound = remaining < self.command_timeout;
        let timeout = remaining.min(self.command_timeout);
        let options = Options {
            // A write whose connection dropped may have run: resending it
            // after the reconnect could apply it twice.
            max_attempts: Some(1),
            timeout: Some(timeout),
            // Not connected: answer at once, nothing sent, rather than queue
            // the command until the connection is back. fred also fails a
            // fail-fast command in flight when its connection drops, instead
            // of replaying it (`Command::should_finish_with_error`), so this
            // and `max_attempts` each stop a resend; tests/api/faults.rs
            // catches a build without both.
            fail_fast: true,
            ..Options::default()
        };
        Ok(Call {
            client: pool.next_connected().with_options(&options),
            kind: CallKind {
                write,
                deadline_bound,
                timeout,
            },
            _in_flight: permit,
        })
    }
}

/// Refuses a write, unsent, to a node where the permission probe last found
/// the service's Redis user lacking (`permissions.rs`).
fn permitted(guard: &NodeGuard, write: bool) -> Result<(), StorageError> {
    match write.then(|| guard.permissions.refusal()).flatten() {
        Some(refusal) => Err(refusal),
        None => Ok(()),
    }
}

/// The primary named by a MOVED reply (`MOVED 3999 127.0.0.1:6381`).
fn moved_to(error: &Error) -> Option<&str> {
    if *error.kind() != ErrorKind::Cluster {
        return None;
    }
    let mut words = error.details().split_whitespace();
    match (words.next(), words.next(), words.next()) {
        (Some("MOVED"), Some(_slot), Some(address)) => Some(address),
        _ => None,
    }
}

#[cfg(test)]
mod isolation_tests;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_moved_reply_names_where_to_go() {
        let error = |kind, details: &'static str| Error::new(kind, details);
        assert_eq!(
            moved_to(&error(ErrorKind::Cluster, "MOVED 3999 127.0.0.1:6381")),
            Some("127.0.0.1:6381")
        );
        for (kind, details) in [
            (ErrorKind::Cluster, "ASK 3999 127.0.0.1:6381"),
            (ErrorKind::Cluster, "CLUSTERDOWN The cluster is down"),
            (ErrorKind::Cluster, "MOVED 3999"),
            (ErrorKind::Unknown, "MOVED 3999 127.0.0.1:6381"),
        ] {
            assert_eq!(moved_to(&error(kind, details)), None, "{details}");
        }
    }
}
