//! The benchmark kit for sticky-routing: a ghz-like load generator built on
//! the service's own generated client, and the two floors the service is
//! measured against.
//!
//! Why floors: this machine is shared and noisy, so an absolute req/s says
//! little. What does say something is how close the service gets, in the
//! same run and under the same load, to the two things it is built on:
//! - the transport floor, [`noop`]: a tonic server with the same messages
//!   and the same server settings that answers without touching Redis;
//! - the storage floor, [`target::Target::Store`]: the same Redis operations
//!   issued straight through the service's `RedisStore` (fred), with no gRPC.
//!
//! [`workload`] makes the requests (Zipf-skewed customers), [`run`] drives
//! them closed- or open-loop and keeps latency histograms, [`report`] turns
//! the result into text, JSON and markdown, and [`redis_info`] reads the
//! `INFO` figures that show round trips per call. [`overload`] is the other
//! study: the service offered up to five times its capacity. [`otlp_sink`]
//! receives the service's spans when tracing's cost is measured.
//! [`platform`] is issue 41's study: RecordOutcome at a platform's count of
//! merchants and tenants against the same load with the breaker off, with
//! the service's Redis calls split by [`service_metrics`] and its health
//! polled by [`health_watch`].

pub mod cli;
pub mod compare;
pub mod cpu;
pub mod health_watch;
pub mod noop;
pub mod otlp_sink;
pub mod overload;
pub mod platform;
pub mod platform_report;
pub mod procs;
pub mod redis_info;
pub mod report;
pub mod run;
pub mod service_metrics;
pub mod target;
pub mod workload;

/// One boxed error type: this is a tool, and its errors end up on stderr.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
