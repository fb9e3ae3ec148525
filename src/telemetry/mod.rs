//! Logs, metrics and traces: what an on-call engineer reads.
//!
//! Logs go through `tracing` to stderr, filtered by `RUST_LOG` (default
//! `info`). Customer ids never appear in them: they are personal data, and
//! the handlers log merchant ids only.

mod metrics;

pub use metrics::{
    EXPORTED_METRICS, Metrics, RedisCommand, Refusal, canonical_name, serve_metrics,
};

/// Installs the global log subscriber once; later calls (tests) are no-ops.
pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .try_init();
}
