//! Traces: one span per RPC, continuing the caller's W3C trace, and a child
//! span per Redis call, exported over OTLP/gRPC.
//!
//! Spans are `tracing` spans under one target, [`SPAN_TARGET`], which only
//! the OpenTelemetry layer listens to. Without an OTLP endpoint that layer
//! does not exist and no sampler is set: [`rpc_span`] returns a disabled
//! span after one check, the `traceparent` header is never parsed, and
//! nothing connects anywhere. That is the "no cost when unset" the contract
//! asks for.
//!
//! With an endpoint, the sample is decided before any span is built
//! ([`rpc_span`]): the tracer provider's own sampler is asked first, with the
//! caller's context and the trace id the span will get, and a call it does
//! not keep gets a disabled span, so neither `tracing` nor the
//! OpenTelemetry layer builds anything for it. (tracing-opentelemetry
//! 0.34 builds an OpenTelemetry span builder, attributes and all, for every
//! span and leaves the sampling to the end; that cost 40 % more CPU per call
//! with nothing sampled.) For a trace the service starts, the trace id it
//! sampled on is the one the span gets ([`DecidedTraceIds`]), so a
//! `traceidratio` decision is the SDK's own, consistent with other services
//! that sample the same trace id. Redis spans are built only under a kept
//! RPC span.
//!
//! Attributes follow OpenTelemetry's RPC and database conventions
//! (`rpc.system`, `rpc.method`, `rpc.grpc.status_code`, `db.system.name`,
//! `db.operation.name`), plus the service's own: the merchant id, the call's
//! result and its gRPC code by name. The customer id is never one of them:
//! it is personal data, and a trace backend is not where it may go.

use std::cell::Cell;
use std::sync::OnceLock;

use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::{SpanId, SpanKind, TraceContextExt, TraceId, TracerProvider as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{ExporterBuildError, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, IdGenerator, RandomIdGenerator, Sampler,
    SamplingDecision, SdkTracerProvider, ShouldSample,
};
use tonic::metadata::MetadataMap;
use tracing::Span;

use crate::domain::tenant::Tenant;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use super::settings::{ParentlessChoice, SamplerChoice, TraceSettings};

/// The `tracing` target of every span meant for the trace backend, and of
/// nothing else. Log lines never show these spans.
pub const SPAN_TARGET: &str = "sticky_routing::trace";

/// `filter` with [`SPAN_TARGET`] turned off, so that the log lines never
/// show the spans meant for the trace backend.
pub fn keep_out_of_logs(filter: tracing_subscriber::EnvFilter) -> tracing_subscriber::EnvFilter {
    match format!("{SPAN_TARGET}=off").parse() {
        Ok(directive) => filter.add_directive(directive),
        // The text is a constant that parses (a unit test says so).
        Err(_) => filter,
    }
}

/// The exporter layer's filter: the spans of [`SPAN_TARGET`] and nothing
/// else. At INFO, their level, and not higher: the subscriber's highest
/// level becomes the `log` crate's max level (through tracing-log's
/// LogTracer), and at TRACE every `log::trace!` in fred went through the
/// subscriber only to be dropped there: 25 % more instructions per call
/// with nothing sampled.
pub fn spans_only() -> tracing_subscriber::filter::Targets {
    tracing_subscriber::filter::Targets::new().with_target(SPAN_TARGET, tracing::Level::INFO)
}

/// The gRPC service every RPC span names.
const SERVICE: &str = "sticky_routing.v1.StickyRouting";

/// The tracer provider for `settings`: an OTLP/gRPC exporter behind a batch
/// processor, so that no call ever waits for the collector. Must be called
/// inside the runtime: the exporter's channel lives on it.
pub fn tracer_provider(settings: &TraceSettings) -> Result<SdkTracerProvider, ExporterBuildError> {
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(settings.endpoint.clone())
        .build()?;
    let mut batch = BatchConfigBuilder::default();
    if let Some(size) = settings.batch.max_queue_size {
        batch = batch.with_max_queue_size(size);
    }
    if let Some(size) = settings.batch.max_export_batch_size {
        batch = batch.with_max_export_batch_size(size);
    }
    if let Some(delay) = settings.batch.schedule_delay {
        batch = batch.with_scheduled_delay(delay);
    }
    let processor = BatchSpanProcessor::builder(exporter)
        .with_batch_config(batch.build())
        .build();
    let resource = Resource::builder()
        .with_service_name(settings.service_name.clone())
        .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
        .build();
    Ok(SdkTracerProvider::builder()
        .with_span_processor(processor)
        .with_sampler(sampler(settings.sampler))
        .with_id_generator(DecidedTraceIds)
        .with_resource(resource)
        .build())
}

/// The sampler [`rpc_span`] asks before it builds a span: the same one the
/// tracer provider has ([`tracer_provider`]). Set once, by
/// [`sample_before_building`], when the trace exporter is installed.
static HEAD_SAMPLER: OnceLock<Sampler> = OnceLock::new();

/// Makes [`rpc_span`] decide each call's sample with `choice` before it
/// builds anything. Called by `telemetry::init` once the exporter's layer
/// is installed; a second call keeps the first choice, as `init` keeps the
/// first subscriber.
pub(super) fn sample_before_building(choice: SamplerChoice) {
    let _ = HEAD_SAMPLER.set(sampler(choice));
}

thread_local! {
    /// The trace id [`rpc_span`] sampled a new trace on, for the span it is
    /// about to start on this thread.
    static DECIDED_TRACE_ID: Cell<Option<TraceId>> = const { Cell::new(None) };
}

/// The tracer provider's ids: random, except that a trace the service
/// starts gets the trace id [`rpc_span`] made its sampling decision on.
#[derive(Debug)]
struct DecidedTraceIds;

impl IdGenerator for DecidedTraceIds {
    fn new_trace_id(&self) -> TraceId {
        DECIDED_TRACE_ID
            .with(Cell::take)
            .unwrap_or_else(|| RandomIdGenerator::default().new_trace_id())
    }

    fn new_span_id(&self) -> SpanId {
        RandomIdGenerator::default().new_span_id()
    }
}

/// Whether the call is kept, asked of `sampler` as the SDK would ask it
/// when the span starts: with the caller's context (`parent`, empty for a
/// trace the service starts) and the trace id the span will have.
fn keeps(sampler: &Sampler, parent: &Context, trace_id: TraceId, name: &str) -> bool {
    let result = sampler.should_sample(Some(parent), trace_id, name, &SpanKind::Server, &[], &[]);
    result.decision == SamplingDecision::RecordAndSample
}

/// The `tracing-opentelemetry` layer for `provider`.
pub fn layer<S>(provider: &SdkTracerProvider) -> impl tracing_subscriber::Layer<S>
where
    S: tracing::Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
{
    tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("sticky-routing"))
        // Span timing is what the backend shows; the layer's own count of
        // busy and idle time would only add attributes.
        .with_tracked_inactivity(false)
        .with_threads(false)
}

fn sampler(choice: SamplerChoice) -> Sampler {
    let parentless = |choice: ParentlessChoice| match choice {
        ParentlessChoice::AlwaysOn => Sampler::AlwaysOn,
        ParentlessChoice::AlwaysOff => Sampler::AlwaysOff,
        ParentlessChoice::Ratio(ratio) => Sampler::TraceIdRatioBased(ratio),
    };
    match choice {
        SamplerChoice::AlwaysOn => Sampler::AlwaysOn,
        SamplerChoice::AlwaysOff => Sampler::AlwaysOff,
        SamplerChoice::Ratio(ratio) => Sampler::TraceIdRatioBased(ratio),
        SamplerChoice::ParentBased(root) => Sampler::ParentBased(Box::new(parentless(root))),
    }
}

/// The span of one StickyRouting call, named `sticky_routing.v1.StickyRouting/<rpc>`,
/// a child of the caller's span when its metadata carries a `traceparent`.
/// Disabled, at the cost of one check, when traces are off; disabled too,
/// before anything is built, when the sampler does not keep the call.
pub fn rpc_span(rpc: &'static str, metadata: &MetadataMap) -> Span {
    match HEAD_SAMPLER.get() {
        Some(sampler) => sampled_rpc_span(sampler, rpc, metadata),
        None => Span::none(),
    }
}

/// [`rpc_span`] once traces are on: `sampler` decides, then the span is
/// built, or not.
fn sampled_rpc_span(sampler: &Sampler, rpc: &'static str, metadata: &MetadataMap) -> Span {
    let parent = if metadata.contains_key("traceparent") {
        TraceContextPropagator::new().extract(&Metadata(metadata))
    } else {
        Context::new()
    };
    let remote = parent.span().span_context().clone();
    let trace_id = if remote.is_valid() {
        remote.trace_id()
    } else {
        RandomIdGenerator::default().new_trace_id()
    };
    let name = full_name(rpc);
    if !keeps(sampler, &parent, trace_id, name) {
        return Span::none();
    }
    let span = tracing::info_span!(
        target: SPAN_TARGET,
        "rpc",
        otel.name = name,
        otel.kind = "server",
        otel.status_code = tracing::field::Empty,
        rpc.system = "grpc",
        rpc.service = SERVICE,
        rpc.method = rpc,
        rpc.grpc.status_code = tracing::field::Empty,
        sticky_routing.code = tracing::field::Empty,
        sticky_routing.result = tracing::field::Empty,
        sticky_routing.admission_refusal = tracing::field::Empty,
        sticky_routing.merchant_id = tracing::field::Empty,
        sticky_routing.tenant_id = tracing::field::Empty,
    );
    if remote.is_valid() {
        // Only fails when the span is already closed, which it cannot be.
        let _ = span.set_parent(parent);
    } else {
        // Start the span now, on this thread, so that it takes the trace id
        // just sampled on; then drop the id if nothing took it (no layer).
        DECIDED_TRACE_ID.with(|id| id.set(Some(trace_id)));
        let _ = span.context();
        DECIDED_TRACE_ID.with(Cell::take);
    }
    span
}

/// Records how the call ended on its span: the code, by number as the
/// conventions ask and by name for people, and an error status for the
/// codes that mean the service failed (not the caller).
pub fn record_code(span: &Span, code: tonic::Code) {
    if span.is_disabled() {
        return;
    }
    span.record("rpc.grpc.status_code", code as i64);
    span.record("sticky_routing.code", super::canonical_name(code));
    if super::is_server_failure(code) {
        span.record("otel.status_code", "error");
    }
}

/// Names the call's tenant on its span, when it is not the default one.
pub fn record_tenant(span: &Span, tenant: &Tenant) {
    if let Some(id) = tenant.id()
        && !span.is_disabled()
    {
        span.record("sticky_routing.tenant_id", id);
    }
}

/// Names the merchant on the call's span, once its id is known valid.
pub fn record_merchant(span: &Span, merchant: &str) {
    span.record("sticky_routing.merchant_id", merchant);
}

/// Records the call's result, the label its metric counts it under (a
/// [`super::PinOutcome`] or [`super::WriteOutcome`] label).
pub fn record_result(span: &Span, result: &'static str) {
    span.record("sticky_routing.result", result);
}

/// Says why a new customer was not admitted: `budget` or `memory_guard`.
pub fn record_admission_refusal(span: &Span, reason: &'static str) {
    span.record("sticky_routing.admission_refusal", reason);
}

/// The span of one Redis call, a child of the current (RPC) span; disabled
/// when there is none (traces off, a call not sampled, or work that belongs
/// to no call: the readiness check, the breakers' and experiments' flushes).
/// `operation` names what was sent (`admit`, `read_combos`); never a key,
/// since keys hold customer ids.
pub fn redis_span(operation: &'static str) -> Span {
    if HEAD_SAMPLER.get().is_none() || Span::current().is_disabled() {
        return Span::none();
    }
    tracing::info_span!(
        target: SPAN_TARGET,
        "redis",
        otel.name = operation,
        otel.kind = "client",
        otel.status_code = tracing::field::Empty,
        db.system.name = "redis",
        db.operation.name = operation,
        error.type = tracing::field::Empty,
    )
}

/// Marks a Redis call's span failed, with the error's kind
/// (`no_connection`, `timeout`, ...) as its `error.type`.
pub fn record_redis_error(span: &Span, kind: &'static str) {
    if span.is_disabled() {
        return;
    }
    span.record("otel.status_code", "error");
    span.record("error.type", kind);
}

/// The trace this call belongs to: its span's when traces are on, else the
/// caller's `traceparent`, so that log lines carry the caller's trace id
/// even where this service exports no spans.
pub fn trace_id(span: &Span, metadata: &MetadataMap) -> Option<TraceId> {
    if !span.is_disabled() {
        let context = span.context();
        let span_context = context.span().span_context().clone();
        if span_context.is_valid() {
            return Some(span_context.trace_id());
        }
    }
    let traceparent = metadata.get("traceparent")?.to_str().ok()?;
    parse_trace_id(traceparent)
}

/// The trace id of a W3C `traceparent`: `00-<32 hex>-<16 hex>-<2 hex>`;
/// `None` when malformed or all zeros, which the format forbids.
fn parse_trace_id(traceparent: &str) -> Option<TraceId> {
    let mut parts = traceparent.trim().split('-');
    let (version, trace, span) = (parts.next()?, parts.next()?, parts.next()?);
    let flags = parts.next()?;
    let hex = |s: &str, len: usize| s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit());
    if !(hex(version, 2) && hex(trace, 32) && hex(span, 16) && hex(flags, 2)) || version == "ff" {
        return None;
    }
    let id = TraceId::from_hex(trace).ok()?;
    (id != TraceId::INVALID).then_some(id)
}

/// `sticky_routing.v1.StickyRouting/<rpc>`, without formatting per call.
fn full_name(rpc: &'static str) -> &'static str {
    match rpc {
        "RecordOutcome" => "sticky_routing.v1.StickyRouting/RecordOutcome",
        "GetPin" => "sticky_routing.v1.StickyRouting/GetPin",
        "GetHabits" => "sticky_routing.v1.StickyRouting/GetHabits",
        "ForgetCustomer" => "sticky_routing.v1.StickyRouting/ForgetCustomer",
        "GetConnectorHealth" => "sticky_routing.v1.StickyRouting/GetConnectorHealth",
        "SetConnectorOverride" => "sticky_routing.v1.StickyRouting/SetConnectorOverride",
        "GetUplift" => "sticky_routing.v1.StickyRouting/GetUplift",
        other => other,
    }
}

/// gRPC metadata as OpenTelemetry's propagators read it.
struct Metadata<'a>(&'a MetadataMap);

impl Extractor for Metadata<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|value| value.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0
            .keys()
            .filter_map(|key| match key {
                tonic::metadata::KeyRef::Ascii(key) => Some(key.as_str()),
                tonic::metadata::KeyRef::Binary(_) => None,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use opentelemetry_sdk::trace::{SpanData, SpanProcessor};
    use tracing_subscriber::layer::SubscriberExt as _;

    #[test]
    fn a_traceparent_gives_its_trace_id_and_a_bad_one_none() {
        let id = parse_trace_id("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
        assert_eq!(
            id.map(|id| id.to_string()).as_deref(),
            Some("4bf92f3577b34da6a3ce929d0e0e4736")
        );
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e47-00f067aa0ba902b7-01",
        ] {
            assert_eq!(parse_trace_id(bad), None, "{bad}");
        }
    }

    #[test]
    fn without_a_subscriber_spans_are_disabled_and_the_header_still_names_the_trace() {
        let mut metadata = MetadataMap::new();
        metadata.insert(
            "traceparent",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
                .parse()
                .unwrap(),
        );
        let span = rpc_span("GetPin", &metadata);
        assert!(span.is_disabled());
        assert_eq!(
            trace_id(&span, &metadata)
                .map(|id| id.to_string())
                .as_deref(),
            Some("4bf92f3577b34da6a3ce929d0e0e4736")
        );
        assert_eq!(trace_id(&span, &MetadataMap::new()), None);
    }

    /// A subscriber that hands spans to an OpenTelemetry provider sampling
    /// with `choice` (as `telemetry::init` sets it up, with its own
    /// [`DecidedTraceIds`]), and counts every span `tracing` builds.
    struct Traced {
        dispatch: tracing::Dispatch,
        provider: SdkTracerProvider,
        built: Arc<AtomicUsize>,
        ended: Arc<Mutex<Vec<SpanData>>>,
    }

    #[derive(Debug)]
    struct Kept(Arc<Mutex<Vec<SpanData>>>);

    impl SpanProcessor for Kept {
        fn on_start(&self, _: &mut opentelemetry_sdk::trace::Span, _: &Context) {}
        fn on_end(&self, span: SpanData) {
            self.0.lock().unwrap().push(span);
        }
        fn force_flush(&self) -> opentelemetry_sdk::error::OTelSdkResult {
            Ok(())
        }
        fn shutdown_with_timeout(&self, _: Duration) -> opentelemetry_sdk::error::OTelSdkResult {
            Ok(())
        }
    }

    struct CountBuilt(Arc<AtomicUsize>);

    impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for CountBuilt {
        fn on_new_span(
            &self,
            _: &tracing::span::Attributes<'_>,
            _: &tracing::span::Id,
            _: tracing_subscriber::layer::Context<'_, S>,
        ) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn traced(choice: SamplerChoice) -> Traced {
        let ended = Arc::new(Mutex::new(Vec::new()));
        let provider = SdkTracerProvider::builder()
            .with_span_processor(Kept(ended.clone()))
            .with_sampler(sampler(choice))
            .with_id_generator(DecidedTraceIds)
            .build();
        let built = Arc::new(AtomicUsize::new(0));
        let dispatch = tracing::Dispatch::new(
            tracing_subscriber::registry()
                .with(CountBuilt(built.clone()))
                .with(layer(&provider)),
        );
        Traced {
            dispatch,
            provider,
            built,
            ended,
        }
    }

    fn with_traceparent(flags: &str, trace: u128) -> MetadataMap {
        let mut metadata = MetadataMap::new();
        let value = format!("00-{trace:032x}-00f067aa0ba902b7-{flags}");
        metadata.insert("traceparent", value.parse().unwrap());
        metadata
    }

    /// GetPin spans for `calls`, made and closed under a subscriber
    /// sampling with `choice`: how many spans `tracing` built, and the
    /// spans the provider kept.
    fn run_with(choice: SamplerChoice, calls: &[MetadataMap]) -> (usize, Vec<SpanData>) {
        let traced = traced(choice);
        tracing::dispatcher::with_default(&traced.dispatch, || {
            let sampler = sampler(choice);
            for metadata in calls {
                drop(sampled_rpc_span(&sampler, "GetPin", metadata));
            }
        });
        let _ = traced.provider.force_flush();
        let ended = std::mem::take(&mut *traced.ended.lock().unwrap());
        (traced.built.load(Ordering::Relaxed), ended)
    }

    #[test]
    fn a_call_the_sampler_drops_builds_no_span_at_all() {
        let roots = vec![MetadataMap::new(); 200];
        for choice in [SamplerChoice::Ratio(0.0), SamplerChoice::AlwaysOff] {
            let (built, kept) = run_with(choice, &roots);
            assert_eq!((built, kept.len()), (0, 0), "{choice:?}");
        }
        // The caller said "not sampled", and a parent-based sampler follows it.
        let unsampled_caller: Vec<_> = (1..=50).map(|t| with_traceparent("00", t)).collect();
        let choice = SamplerChoice::ParentBased(ParentlessChoice::AlwaysOn);
        let (built, kept) = run_with(choice, &unsampled_caller);
        assert_eq!((built, kept.len()), (0, 0));
        // The control: the same calls, sampled by the caller, are built and kept.
        let sampled_caller: Vec<_> = (1..=50).map(|t| with_traceparent("01", t)).collect();
        let (built, kept) = run_with(choice, &sampled_caller);
        assert_eq!((built, kept.len()), (50, 50));
        assert!(
            kept.iter()
                .all(|span| span.parent_span_id != SpanId::INVALID)
        );
    }

    #[test]
    fn a_trace_the_service_starts_keeps_the_id_it_was_sampled_on() {
        let roots = vec![MetadataMap::new(); 400];
        let (built, kept) = run_with(SamplerChoice::Ratio(0.5), &roots);
        // About half, and only those were built: sampled twice (once here,
        // once by the SDK on another id) would keep about a quarter.
        assert!((140..=260).contains(&kept.len()), "{} kept", kept.len());
        assert_eq!(built, kept.len());
        let sdk = Sampler::TraceIdRatioBased(0.5);
        for span in &kept {
            let trace_id = span.span_context.trace_id();
            assert!(
                keeps(&sdk, &Context::new(), trace_id, "x"),
                "{trace_id} was kept but the SDK's ratio sampler drops it"
            );
            assert_eq!(span.parent_span_id, SpanId::INVALID, "a root span");
        }
        // No id left behind for the next span on this thread.
        assert_eq!(DECIDED_TRACE_ID.with(Cell::take), None);
    }

    #[test]
    fn the_span_filter_wants_the_spans_and_raises_no_level_above_info() {
        let filter = spans_only();
        assert!(filter.would_enable(SPAN_TARGET, &tracing::Level::INFO));
        assert!(!filter.would_enable("fred::router", &tracing::Level::INFO));
        let hint =
            tracing_subscriber::layer::Filter::<tracing_subscriber::Registry>::max_level_hint(
                &filter,
            );
        assert_eq!(hint, Some(tracing::level_filters::LevelFilter::INFO));
    }

    #[test]
    fn the_spans_target_is_kept_out_of_the_logs() {
        let filter = keep_out_of_logs(tracing_subscriber::EnvFilter::new("trace"));
        assert!(
            filter.to_string().contains(&format!("{SPAN_TARGET}=off")),
            "{filter}"
        );
    }

    #[test]
    fn every_rpc_has_its_full_name() {
        for rpc in super::super::RPC_NAMES {
            assert_eq!(full_name(rpc), format!("{SERVICE}/{rpc}"));
        }
    }
}
