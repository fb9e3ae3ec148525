//! The Redis adapter: [`RedisStore`] keeps the customer state in Redis and
//! runs the domain rules there atomically.
//!
//! Every command and script the service sends touches exactly one key, or
//! keys of one slot, so the same code runs on a single node and on Redis
//! Cluster (the bulk import's batched script calls touch keys of one slot
//! each; a breaker transition, a merchant's counts hash and one breaker's
//! open key, which share the merchant's hash tag). On Cluster
//! each call goes, by its key's slot, to a pool of the primary that owns it
//! (`topology/cluster.rs`), so one shard's failover stalls no other shard.
//! Writes are never retried behind the caller's back (a lost reply after
//! HINCRBY would otherwise count twice), and every call has a timeout no
//! longer than the caller's deadline.
//!
//! Rooms, each leaning only on those after it: `store.rs` (the facade) →
//! `exec/` (running calls: one, a batch, the readiness check) →
//! `topology/` (connections, nodes, the slot table, the Sentinel and
//! memory watches) and `ops.rs` (the typed ops and their codec) and
//! `scripts/` (the Lua) → `permissions.rs`, `error.rs`, `settings.rs`,
//! `tls.rs`. `scan.rs` (the export's reader) uses `topology/` to connect.
//! No fred type leaves this module.

mod error;
mod exec;
mod ops;
mod permissions;
mod scan;
mod scripts;
mod settings;
mod store;
mod tls;
mod topology;

pub use error::{ConnectError, NoAnswer, NotApplied, StorageError};
pub(crate) use ops::{
    AdmissionRequest, BatchOutcome, FailureWrite, Op, Reply, SuccessWrite, Times,
};
pub use scan::{HashContents, HashScanner, ScanError, ScannedHash};
pub use settings::{REDIS_SETTINGS, RedisSetting, RedisSettings, RedisUrl, Secret, redact_url};
pub use store::{
    BreakerTransition, Compacted, ConnectorHealthRow, ConnectorSnapshot, ConnectorTally,
    ExperimentAdding, ExperimentBatch, ExperimentCounts, ExperimentEntry, ExperimentLog,
    IndexEntry, LogRead, LogRecord, MerchantTallies, PlannedTransition, RedisStore, ShardLog,
    ShardTick, TimeTransition, TimedTransition, experiment_frame, experiment_unadded, log_frames,
    probing, read_log,
};
pub use tls::{ClientCertFiles, TlsError, TlsFile, TlsFiles};
