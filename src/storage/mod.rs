//! The Redis adapter: [`RedisStore`] keeps the customer state in Redis and
//! runs the domain rules there atomically.
//!
//! Every command and script the service sends touches exactly one key, so
//! the same code runs on a single node and on Redis Cluster (the bulk
//! import's batched script calls touch keys of one slot each). On Cluster each call goes, by its
//! key's slot, to a pool of the primary that owns it (`cluster.rs`), so one
//! shard's failover stalls no other shard. Writes are never retried behind
//! the caller's back (a lost reply after HINCRBY would otherwise count
//! twice), and every call has a timeout no longer than the caller's deadline.

mod batch;
mod chunks;
mod cluster;
mod error;
mod memory_watch;
mod permissions;
mod scan;
mod scripts;
mod sentinel_watch;
mod settings;
mod store;
mod timing;
mod tls;

#[cfg(test)]
pub(crate) use batch::admit_reply;
pub(crate) use batch::{CallOutcome, ScriptCall, admitted_of, failure_reply, success_reply};
pub use error::{ConnectError, NoAnswer, NotApplied, StorageError};
pub use scan::{HashContents, HashScanner, ScanError, ScannedHash};
pub use settings::{REDIS_SETTINGS, RedisSetting, RedisSettings, Secret, redact_url};
pub use store::RedisStore;
pub(crate) use store::{AdmissionRequest, SuccessWrite};
pub use tls::{ClientCertFiles, TlsError, TlsFile, TlsFiles};

/// Runs `task` on `tasks` until `stop` is cancelled: how every background
/// task of the store starts, so `quit` ends them all.
fn spawn_until_stopped(
    tasks: &tokio_util::task::TaskTracker,
    stop: &tokio_util::sync::CancellationToken,
    task: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let stop = stop.clone();
    tasks.spawn(async move {
        stop.run_until_cancelled(task).await;
    });
}
