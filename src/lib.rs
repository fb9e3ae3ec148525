//! Sticky routing: remembers through which connector (gateway) a customer's
//! payments succeed, so the orchestrator can pin the next payment to it.
//!
//! The modules, from the bottom up:
//! - [`domain`]: the rules as pure functions and one [`domain::Rules`]
//!   value (no I/O, no fred, no tonic);
//! - [`declare`], [`pki`], [`process`], [`striped`]: shared vocabulary
//!   that imports no other module: how a setting is declared and read;
//!   certificates, keys and client identities; the process's shutdown
//!   signal, stdout and wall clock; maps split over locks by hash;
//! - [`telemetry`]: logs, metrics and traces, and the outcome labels;
//! - [`storage`]: the Redis adapter, [`storage::RedisStore`], which runs
//!   the rules atomically against Redis and owns its connection settings;
//! - [`record`]: the RecordOutcome flow (write, admission, create): one
//!   plan, driven one call at a time here and in batches by the import;
//! - [`breaker`]: the connector circuit breaker's engine: counts and states
//!   in memory (tier 1), moved to and from Redis (tier 2) in the background;
//! - [`experiment`]: the rollout's experiment counts, tallied in memory and
//!   flushed to Redis in the background, and the uplift read back;
//! - [`transport`]: thin tonic handlers that turn protobuf into domain types
//!   and errors into `tonic::Status`, and the server's connections;
//! - [`config`]: reads every setting once, gathering the declarations of
//!   each owner;
//! - [`startup`]: wires everything into an [`startup::Application`] and
//!   runs it;
//! - [`bulk`]: the `import`, `export` and `report` subcommands, which reach Redis
//!   through the same settings, store and rules as the server.
//!
//! Every import points to a module earlier in this list, never to a later
//! one:
//! - `telemetry` → `domain`, `declare`, `process`;
//! - `storage` → `domain`, `telemetry`, `declare`, `pki`;
//! - `record` → `domain`, `storage`, `process`;
//! - `breaker` → `domain`, `storage`, `telemetry`, `process`;
//! - `experiment` → `domain`, `storage`, `telemetry`, `process`;
//! - `transport` → `domain`, `record`, `breaker`, `experiment`, `storage`,
//!   `telemetry`, `pki`;
//! - `config` → `domain`, `storage`, `telemetry`, `declare`, `pki`;
//! - `startup` → `config`, `transport`, `record`, `breaker`, `experiment`,
//!   `storage`, `telemetry`, `pki`;
//! - `bulk` → `config`, `record`, `experiment`, `storage`, `domain`,
//!   `telemetry`, `process`;
//! - the binary (`main.rs`) → `config`, `startup`, `bulk`, `telemetry`,
//!   `process`.

pub mod breaker;
pub mod bulk;
pub mod config;
pub mod declare;
pub mod domain;
pub mod experiment;
pub mod pki;
pub mod process;
pub mod record;
pub mod startup;
pub mod storage;
pub mod striped;
pub mod telemetry;
pub mod transport;
