//! Sticky routing: remembers through which connector (gateway) a customer's
//! payments succeed, so the orchestrator can pin the next payment to it.
//!
//! The crate has three layers with one-way dependencies:
//! - [`domain`]: the rules as pure functions and one [`domain::Rules`]
//!   value (no I/O, no fred, no tonic);
//! - [`storage`]: the Redis adapter, [`storage::RedisStore`], which runs those
//!   rules atomically against Redis and owns its connection settings;
//! - [`transport`]: thin tonic handlers that turn protobuf into domain types
//!   and errors into `tonic::Status`.
//!
//! [`bulk`] holds the `import` and `export` subcommands, which reach Redis
//! through the same store and rules.
//!
//! [`record`] is the RecordOutcome flow (write, admission, create) between
//! transport and storage. [`startup`] wires everything into an
//! [`startup::Application`] and runs it; [`config`] reads every setting once,
//! from one declaration each; [`telemetry`] owns logs and metrics.
//!
//! [`bulk`] holds the commands run beside the server (`export`), which use
//! `config` and `storage` as the server does.
//!
//! Dependencies point one way: `startup` → `config`, `transport` → `record`
//! → `storage` → `domain`; `config` → `storage`, `domain`. No module below
//! imports one above it.

pub mod bulk;
pub mod config;
pub mod declare;
pub mod domain;
pub mod pki;
pub mod process;
pub mod record;
pub mod startup;
pub mod storage;
pub mod telemetry;
pub mod transport;
