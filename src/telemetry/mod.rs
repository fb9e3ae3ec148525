//! Logs, metrics and traces: what an on-call engineer reads.
//!
//! Logs go through `tracing` to stderr, filtered by `RUST_LOG` (default
//! `info`), as text or as one JSON object per line. Customer ids never
//! appear in logs, spans or metric labels: they are personal data. Merchant
//! ids may appear in logs and spans, and never in a metric label, where
//! they would make the number of series unbounded.

mod failures;
mod hot;
mod ids;
mod metrics;
mod outcomes;
mod redis_command;
mod settings;
pub mod traces;

use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

pub use failures::{FailureLog, LogThrottle, SUMMARY_INTERVAL, Verdict, summarise};
pub use ids::CallIds;
pub use metrics::{
    EXPORTED_METRICS, Metrics, Refusal, VETO_REASONS, admission_refusal_label, canonical_name,
    serve_metrics,
};
pub use outcomes::{CallFailure, PinOutcome, WriteOutcome};
pub use redis_command::RedisCommand;
pub use settings::{
    BatchSettings, DEFAULT_SERVICE_NAME, LogFormat, OTEL_VARIABLES, ParentlessChoice,
    SamplerChoice, TELEMETRY_SETTINGS, TelemetrySettings, TraceSettings, traces_from_env,
};

/// The StickyRouting methods, as spans and the RPC metrics name them.
pub const RPC_NAMES: [&str; 7] = [
    "RecordOutcome",
    "GetPin",
    "GetHabits",
    "ForgetCustomer",
    "GetConnectorHealth",
    "SetConnectorOverride",
    "GetUplift",
];

/// Keeps the trace exporter alive; dropping it sends the spans still queued.
#[must_use = "dropping the guard stops the trace exporter"]
pub struct TelemetryGuard {
    provider: Option<SdkTracerProvider>,
}

impl Drop for TelemetryGuard {
    fn drop(&mut self) {
        if let Some(provider) = self.provider.take()
            && let Err(error) = provider.shutdown()
        {
            eprintln!("sticky-routing: could not send the last spans: {error}");
        }
    }
}

/// Why telemetry could not start.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("cannot set up the OTLP trace exporter: {0}")]
    Exporter(#[from] opentelemetry_otlp::ExporterBuildError),
}

/// Installs the process' log subscriber and, when an OTLP endpoint is set,
/// the trace exporter. Call it once, inside the runtime (the exporter's
/// channel lives on it); a second call (tests) leaves the first in place.
pub fn init(settings: &TelemetrySettings) -> Result<TelemetryGuard, TelemetryError> {
    let provider = settings
        .traces
        .as_ref()
        .map(traces::tracer_provider)
        .transpose()?;
    // Spans meant for the trace backend are not log lines. Every filter
    // here is static (EnvFilter directives, a target list), so a callsite
    // none wants, such as the many trace-level ones in h2 and fred, costs
    // one cached check. A `filter_fn`, or an absent (`None`) layer, would
    // make the subscriber ask at every event instead, which more than
    // doubles a call's instructions (bench/README.md).
    let logs_only = traces::keep_out_of_logs(
        tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
    );
    let registry = tracing_subscriber::registry();
    match &provider {
        // The filter applies to the whole subscriber: a callsite it turns
        // off (every span of SPAN_TARGET included) costs one cached check.
        None => {
            let _ = registry
                .with(logs_only)
                .with(log_lines(settings.log_format))
                .try_init();
        }
        // Each layer has its own filter: the spans go to the exporter alone.
        Some(provider) => {
            let spans = traces::spans_only();
            let installed = registry
                .with(log_lines(settings.log_format).with_filter(logs_only))
                .with(traces::layer(provider).with_filter(spans))
                .try_init();
            if let (Ok(()), Some(trace_settings)) = (installed, &settings.traces) {
                traces::sample_before_building(trace_settings.sampler);
            }
        }
    }
    Ok(TelemetryGuard { provider })
}

/// The layer that writes log lines to stderr, as text or JSON.
fn log_lines<S>(format: LogFormat) -> Box<dyn tracing_subscriber::Layer<S> + Send + Sync>
where
    S: tracing::Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
{
    match format {
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_writer(std::io::stderr)
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .with_writer(std::io::stderr)
            .boxed(),
    }
}

/// Whether a call answered with `code` failed on the service's side (as
/// opposed to the caller's: bad input, not found, not permitted).
pub fn is_server_failure(code: tonic::Code) -> bool {
    use tonic::Code;
    matches!(
        code,
        Code::Unknown
            | Code::DeadlineExceeded
            | Code::ResourceExhausted
            | Code::Aborted
            | Code::Unimplemented
            | Code::Internal
            | Code::Unavailable
            | Code::DataLoss
    )
}
