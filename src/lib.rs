//! Sticky routing: remembers through which connector (gateway) a customer's
//! payments succeed, so the orchestrator can pin the next payment to it.
//!
//! The crate has three layers with one-way dependencies:
//! - [`domain`]: the rules as pure functions (no I/O, no fred, no tonic);
//! - [`storage`]: the Redis adapter, [`storage::RedisStore`], which runs those
//!   rules atomically against Redis;
//! - [`transport`]: thin tonic handlers that turn protobuf into domain types
//!   and errors into `tonic::Status`.
//!
//! [`startup`] wires them into an [`startup::Application`]; [`config`] parses
//! the settings once; [`telemetry`] owns logs and metrics.

pub mod config;
pub mod domain;
pub mod startup;
pub mod storage;
pub mod telemetry;
pub mod transport;
