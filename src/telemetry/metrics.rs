//! The service's metrics.
//!
//! They are OpenTelemetry instruments exported in Prometheus text format
//! on `/metrics`, except the four that every call records, which are the
//! prometheus crate's atomic instruments in the same registry
//! ([`super::hot`]). Each [`Metrics`] owns its own registry, so tests that
//! run several services in one process see only their own numbers.
//!
//! Every label value comes from a fixed set named in this file or in the
//! storage and domain enums it is given (`&'static str`, or an enum): no
//! merchant, customer or attempt id, and no Redis error text, can ever
//! become one, so the number of series stays bounded whatever callers send.
//! On the request path, recording allocates nothing: label values are
//! static, and the hottest instruments' labels are built once, here.

use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Gauge, MeterProvider};
use opentelemetry_sdk::metrics::SdkMeterProvider;
use prometheus::{Encoder, TextEncoder};
use tokio::net::TcpListener;

use super::hot::{HotInstruments, HotSpec};
use super::outcomes::{PinOutcome, WriteOutcome};
use super::redis_command::RedisCommand;
use crate::domain::admission::AdmissionRefusal;
use crate::domain::breaker::VetoReason;
use crate::domain::memory_guard::GuardReading;
use crate::domain::priority::Class;
use crate::domain::rollout::Group;

/// Every metric family `/metrics` can show, as Prometheus names it
/// (counters end in `_total`; a histogram's family is its base name, shown
/// as `_bucket`, `_sum` and `_count`). The dashboard and the alert rules in
/// `deploy/monitoring/` are checked against this list, and this list against
/// what the instruments render, so none of the three can drift.
pub const EXPORTED_METRICS: &[&str] = &[
    "sticky_routing_build_info",
    "sticky_routing_rpc_duration_seconds",
    "sticky_routing_pins_total",
    "sticky_routing_writes_total",
    "sticky_routing_pruned_fields_total",
    "sticky_routing_refused_calls_total",
    "sticky_routing_admission_refusals_total",
    "sticky_routing_admission_memory_guard_engaged",
    "sticky_routing_admission_memory_used_bytes",
    "sticky_routing_admission_memory_limit_bytes",
    "sticky_routing_redis_command_duration_seconds",
    "sticky_routing_redis_errors_total",
    "sticky_routing_redis_up",
    "sticky_routing_background_shed_total",
    "sticky_routing_noscript_fallbacks_total",
    "sticky_routing_breaker_vetoes_total",
    "sticky_routing_breaker_transitions_total",
    "sticky_routing_breakers_open",
    "sticky_routing_breaker_io_failures_total",
    "sticky_routing_experiment_outcomes_total",
    "sticky_routing_experiment_io_failures_total",
    "process_cpu_seconds_total",
    "process_resident_memory_bytes",
    "process_virtual_memory_bytes",
    "process_virtual_memory_max_bytes",
    "process_open_fds",
    "process_max_fds",
    "process_start_time_seconds",
    "process_threads",
];

/// Latency buckets in seconds: the service answers in well under a
/// millisecond when healthy, and in the command timeout when Redis is not.
const LATENCY_BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];

/// Redis latency buckets in seconds: a healthy Redis answers in about
/// 100 µs, so they start at 50 µs; they end past the longest Redis timeout
/// anyone should set, where a stalled call shows.
const REDIS_LATENCY_BUCKETS: &[f64] = &[
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5,
];

/// The hot instruments' help and buckets, as `/metrics` has always shown them.
const HOT_SPEC: HotSpec<'static> = HotSpec {
    rpc_help: "Time to answer each RPC, by method and gRPC code",
    rpc_buckets: LATENCY_BUCKETS,
    redis_help: "Time of each Redis call made for an RPC or the readiness check, from \
                 handing it to the Redis client to its answer, whatever the answer, by \
                 command: read_combos, read_habits, forget, record_success, \
                 record_failure, admit, ping, permission_probe, breaker_flush, \
                 breaker_transition, breaker_index, breaker_health, experiment_flush, \
                 experiment_read, experiment_compact",
    redis_buckets: REDIS_LATENCY_BUCKETS,
    pins_help: "GetPin answers by outcome: pinned, no_habit, invalid, error",
    writes_help: "RecordOutcome answers by outcome: applied, no_habit, not_admitted, invalid, error",
};

/// The `reason` label of `sticky_routing_admission_refusals_total`.
pub fn admission_refusal_label(why: AdmissionRefusal) -> &'static str {
    match why {
        AdmissionRefusal::Budget => "budget",
        AdmissionRefusal::MemoryGuard => "memory_guard",
    }
}

/// Every [`VetoReason`], each at the index [`veto_index`] gives it.
pub const VETO_REASONS: [VetoReason; 4] = [
    VetoReason::Score,
    VetoReason::CircuitOpen,
    VetoReason::CircuitHalfOpen,
    VetoReason::ForcedOpen,
];

fn veto_index(reason: VetoReason) -> usize {
    match reason {
        VetoReason::Score => 0,
        VetoReason::CircuitOpen => 1,
        VetoReason::CircuitHalfOpen => 2,
        VetoReason::ForcedOpen => 3,
    }
}

/// The `group` label of `sticky_routing_experiment_outcomes_total`.
pub fn group_label(group: Group) -> &'static str {
    match group {
        Group::Treated => "treated",
        Group::Holdout => "holdout",
        Group::Shadow => "shadow",
    }
}

/// Every experiment [`Group`], each at the index [`group_index`] gives it.
const GROUPS: [Group; 3] = [Group::Treated, Group::Holdout, Group::Shadow];

fn group_index(group: Group) -> usize {
    match group {
        Group::Treated => 0,
        Group::Holdout => 1,
        Group::Shadow => 2,
    }
}

/// Why a StickyRouting call was answered before any handler ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The calls in flight at the call's class's ceiling (of
    /// `STICKY_ROUTING_MAX_IN_FLIGHT`): `RESOURCE_EXHAUSTED`.
    Shed,
    /// Not protobuf, not valid UTF-8 in a string, or not one well-formed
    /// gRPC frame: `INVALID_ARGUMENT`.
    Undecodable,
    /// Over the message size limit: `OUT_OF_RANGE`.
    OverSize,
}

impl Refusal {
    fn label(self) -> &'static str {
        match self {
            Self::Shed => "shed",
            Self::Undecodable => "undecodable",
            Self::OverSize => "over_size",
        }
    }
}

/// The service's instruments.
pub struct Metrics {
    registry: prometheus::Registry,
    provider: SdkMeterProvider,
    /// The RPC and Redis latencies and the pin and write outcomes.
    hot: HotInstruments,
    pruned_fields: Counter<u64>,
    refused: Counter<u64>,
    redis_errors: Counter<u64>,
    noscript_fallbacks: Counter<u64>,
    background_shed: Counter<u64>,
    admission_refusals: Counter<u64>,
    breaker_vetoes: Counter<u64>,
    /// `reason` labels, one per [`VetoReason`] at [`veto_index`]: built
    /// once, since a GetPin may record several.
    veto_labels: [KeyValue; VETO_REASONS.len()],
    breaker_transitions: Counter<u64>,
    breakers_open: Gauge<u64>,
    breaker_io_failures: Counter<u64>,
    experiment_outcomes: Counter<u64>,
    /// `group` and `outcome` labels, per group at [`group_index`], success
    /// then failure: built once, since RecordOutcome records one.
    experiment_labels: [[[KeyValue; 2]; 2]; GROUPS.len()],
    experiment_io_failures: Counter<u64>,
}

impl Metrics {
    pub fn new() -> Result<Self, opentelemetry_sdk::error::OTelSdkError> {
        let registry = prometheus::Registry::new();
        let exporter = opentelemetry_prometheus::exporter()
            .with_registry(registry.clone())
            .without_target_info()
            .scope_info_enabled(false)
            .build()?;
        // The process' CPU seconds, memory and open files (`process_*`), read
        // from /proc at each scrape.
        #[cfg(target_os = "linux")]
        if let Err(error) = registry.register(Box::new(
            prometheus::process_collector::ProcessCollector::for_self(),
        )) {
            tracing::warn!(%error, "cannot export the process_* metrics");
        }
        let provider = SdkMeterProvider::builder().with_reader(exporter).build();
        let meter = provider.meter("sticky-routing");
        // Which build answers: a dashboard joins on it to show a rollout.
        meter
            .u64_gauge("sticky_routing_build_info")
            .with_description("Always 1; the version label says which build is running")
            .build()
            .record(1, &[KeyValue::new("version", env!("CARGO_PKG_VERSION"))]);
        Ok(Self {
            hot: HotInstruments::register(&registry, &HOT_SPEC).map_err(|error| {
                opentelemetry_sdk::error::OTelSdkError::InternalFailure(error.to_string())
            })?,
            pruned_fields: meter
                .u64_counter("sticky_routing_pruned_fields")
                .with_description("Combo fields removed by the per-customer cap")
                .build(),
            refused: meter
                .u64_counter("sticky_routing_refused_calls")
                .with_description(
                    "StickyRouting calls answered before any handler ran, by reason (shed, undecodable, \
                     over_size) and by the call's class (pin, feedback, admin, low)",
                )
                .build(),
            redis_errors: meter
                .u64_counter("sticky_routing_redis_errors")
                .with_description(
                    "Failed Redis calls by kind: no_connection, queue_full, failover, refused, \
                     read_failed, timeout, connection_lost, deadline_exceeded, foreign_value, \
                     unexpected",
                )
                .build(),
            noscript_fallbacks: meter
                .u64_counter("sticky_routing_noscript_fallbacks")
                .with_description(
                    "Script calls that Redis answered NOSCRIPT (it forgot the script: a \
                     restart, a failover, SCRIPT FLUSH) and that were sent again as EVAL, by \
                     script: record_success, record_failure, admit, permission_probe, \
                     breaker_flush, breaker_transition, breaker_index, experiment_flush, \
                     experiment_compact, experiment_read",
                )
                .build(),
            background_shed: meter
                .u64_counter("sticky_routing_background_shed")
                .with_description(
                    "Background Redis calls (the breakers' and experiments' flushes) refused \
                     unsent because every in-flight slot of their node's background lane was \
                     taken, by command; they never take a caller's slot or connection, and \
                     are not in redis_errors_total",
                )
                .build(),
            admission_refusals: meter
                .u64_counter("sticky_routing_admission_refusals")
                .with_description(
                    "New customers not admitted, by reason: budget (the merchant's admission \
                     budget is spent), memory_guard (the memory guard is engaged on the Redis \
                     node that would hold the customer)",
                )
                .build(),
            breaker_vetoes: meter
                .u64_counter("sticky_routing_breaker_vetoes")
                .with_description(
                    "GetPin candidates vetoed, by reason: score (the caller's live score), \
                     circuit_open, circuit_half_open (not this GetPin's probe), forced_open \
                     (an operator's override)",
                )
                .build(),
            veto_labels: VETO_REASONS
                .map(|reason| KeyValue::new("reason", reason.label())),
            breaker_transitions: meter
                .u64_counter("sticky_routing_breaker_transitions")
                .with_description(
                    "Circuit breaker transitions this instance saw, by from and to state: \
                     closed, open, half_open (several instances may each count one)",
                )
                .build(),
            breakers_open: meter
                .u64_gauge("sticky_routing_breakers_open")
                .with_description(
                    "(merchant, connector) circuit breakers OPEN now, as this \
                     instance last read them",
                )
                .build(),
            breaker_io_failures: meter
                .u64_counter("sticky_routing_breaker_io_failures")
                .with_description(
                    "Circuit breaker reads or writes of Redis that failed, by operation; the \
                     breaker fails open, and no call fails because of it",
                )
                .build(),
            experiment_outcomes: meter
                .u64_counter("sticky_routing_experiment_outcomes")
                .with_description(
                    "RecordOutcome answers counted in the experiment (a pin_connector, mode \
                     not off, not a duplicate), by group (treated, holdout, shadow) and \
                     outcome (success, failure), as this instance counted them",
                )
                .build(),
            experiment_labels: GROUPS.map(|group| {
                ["success", "failure"].map(|outcome| {
                    [
                        KeyValue::new("group", group_label(group)),
                        KeyValue::new("outcome", outcome),
                    ]
                })
            }),
            experiment_io_failures: meter
                .u64_counter("sticky_routing_experiment_io_failures")
                .with_description(
                    "Experiment count reads or writes of Redis that failed, by operation: \
                     flush (the background write; its counts are kept for the next one \
                     when nothing was written), read (GetUplift), overflow (outcomes not \
                     counted: too many merchants within one flush); no RecordOutcome fails \
                     because of them",
                )
                .build(),
            registry,
            provider,
        })
    }

    pub fn pin(&self, outcome: PinOutcome) {
        self.hot.pin(outcome);
    }

    pub fn write(&self, outcome: WriteOutcome) {
        self.hot.write(outcome);
    }

    pub fn pruned(&self, fields: u32) {
        if fields > 0 {
            self.pruned_fields.add(u64::from(fields), &[]);
        }
    }

    /// A call of `class` answered before its handler ran.
    pub fn refused(&self, why: Refusal, class: Class) {
        self.refused.add(
            1,
            &[
                KeyValue::new("reason", why.label()),
                KeyValue::new("class", class.name()),
            ],
        );
    }

    pub fn rpc(&self, method: &'static str, code: tonic::Code, took: Duration) {
        self.hot.rpc(
            method,
            code as usize,
            canonical_name(code),
            took.as_secs_f64(),
        );
    }

    /// One Redis call of `command`, answered (or abandoned) after `took`.
    pub fn redis_command(&self, command: RedisCommand, took: Duration) {
        self.hot.redis(command, took.as_secs_f64());
    }

    /// One failed Redis call; `kind` is `StorageError::kind`, a word from a
    /// fixed set.
    pub fn redis_error(&self, kind: &'static str) {
        self.redis_errors.add(1, &[KeyValue::new("kind", kind)]);
    }

    /// A script call met NOSCRIPT and is sent again as EVAL.
    pub fn noscript_fallback(&self, script: RedisCommand) {
        self.noscript_fallbacks
            .add(1, &[KeyValue::new("script", script.label())]);
    }

    /// A background call of `command` shed: its lane's slots were all
    /// taken, and nothing was sent.
    pub fn background_shed(&self, command: RedisCommand) {
        self.background_shed
            .add(1, &[KeyValue::new("command", command.label())]);
    }

    /// A new customer not admitted, and why.
    pub fn admission_refused(&self, why: AdmissionRefusal) {
        self.admission_refusals
            .add(1, &[KeyValue::new("reason", admission_refusal_label(why))]);
    }

    /// One GetPin candidate vetoed, and why. No allocation: the label is
    /// built once, in [`Self::new`].
    pub fn breaker_veto(&self, reason: VetoReason) {
        let label = &self.veto_labels[veto_index(reason)];
        self.breaker_vetoes.add(1, std::slice::from_ref(label));
    }

    /// A circuit breaker moved from one state to another (`closed`,
    /// `open`, `half_open`).
    pub fn breaker_transition(&self, from: &'static str, to: &'static str) {
        self.breaker_transitions
            .add(1, &[KeyValue::new("from", from), KeyValue::new("to", to)]);
    }

    /// The breakers OPEN now, as the engine last read them.
    pub fn set_breakers_open(&self, open: u64) {
        self.breakers_open.record(open, &[]);
    }

    /// A circuit breaker read or write of Redis that failed; `op` names
    /// it from the engine's fixed set.
    pub fn breaker_io_failure(&self, op: &'static str) {
        self.breaker_io_failures.add(1, &[KeyValue::new("op", op)]);
    }

    /// One outcome counted in the experiment. No allocation: the labels
    /// are built once, in [`Self::new`].
    pub fn experiment_outcome(&self, group: Group, success: bool) {
        let labels = &self.experiment_labels[group_index(group)][usize::from(!success)];
        self.experiment_outcomes.add(1, labels);
    }

    /// `n` experiment reads, writes or outcomes that failed; `op` names
    /// them from the engine's fixed set.
    pub fn experiment_io_failures(&self, op: &'static str, n: u64) {
        self.experiment_io_failures
            .add(n, &[KeyValue::new("op", op)]);
    }

    /// Shows each Redis node (each primary, on Cluster) on `/metrics`:
    /// whether it answered the memory guard's last poll
    /// (`sticky_routing_redis_up`), and the guard's state there: whether it
    /// is engaged, and the `used_memory` and limit it last compared.
    /// `readings` runs at each scrape; it reads what the guard's own poll
    /// left and never asks Redis.
    pub fn watch_redis_nodes(
        &self,
        readings: impl Fn() -> Vec<GuardReading> + Send + Sync + 'static,
    ) {
        let readings = std::sync::Arc::new(readings);
        let meter = self.provider.meter("sticky-routing");
        let node = |reading: &GuardReading| [KeyValue::new("node", reading.node.clone())];
        let read = readings.clone();
        meter
            .u64_observable_gauge("sticky_routing_redis_up")
            .with_description(
                "1 while this Redis node answers the memory guard's once-a-second INFO poll, \
                 0 while it does not (or its connection is down); absent before the first \
                 poll says either",
            )
            .with_callback(move |observer| {
                for reading in read() {
                    if let Some(reachable) = reading.reachable {
                        observer.observe(u64::from(reachable), &node(&reading));
                    }
                }
            })
            .build();
        let read = readings.clone();
        meter
            .u64_observable_gauge("sticky_routing_admission_memory_guard_engaged")
            .with_description(
                "1 while new customers are not admitted on this Redis node because its \
                 used_memory is at or above the admission memory limit, else 0",
            )
            .with_callback(move |observer| {
                for reading in read() {
                    observer.observe(u64::from(reading.engaged), &node(&reading));
                }
            })
            .build();
        let read = readings.clone();
        meter
            .u64_observable_gauge("sticky_routing_admission_memory_used")
            .with_unit("By")
            .with_description("The Redis node's used_memory at the memory guard's last poll")
            .with_callback(move |observer| {
                for reading in read() {
                    if let Some(used) = reading.used_memory {
                        observer.observe(used, &node(&reading));
                    }
                }
            })
            .build();
        meter
            .u64_observable_gauge("sticky_routing_admission_memory_limit")
            .with_unit("By")
            .with_description(
                "The admission memory limit on the Redis node; absent where a percentage \
                 meets a node without maxmemory (no limit)",
            )
            .with_callback(move |observer| {
                for reading in readings() {
                    if let Some(limit) = reading.limit {
                        observer.observe(limit, &node(&reading));
                    }
                }
            })
            .build();
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = Vec::new();
        if let Err(e) = TextEncoder::new().encode(&self.registry.gather(), &mut out) {
            tracing::warn!(error = %e, "could not encode metrics");
        }
        String::from_utf8(out).unwrap_or_default()
    }
}

impl Drop for Metrics {
    fn drop(&mut self) {
        let _ = self.provider.shutdown();
    }
}

/// Serves `GET /metrics` on `listener` until `shutdown` resolves.
pub async fn serve_metrics(
    listener: TcpListener,
    metrics: std::sync::Arc<Metrics>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let metrics = metrics.clone();
            async move {
                (
                    [(
                        axum::http::header::CONTENT_TYPE,
                        "text/plain; version=0.0.4",
                    )],
                    metrics.render(),
                )
            }
        }),
    );
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}

/// A gRPC code's canonical name (`OK`, `UNAVAILABLE`), as gRPC's own docs
/// and other services' dashboards spell it. Static: no allocation per call.
pub fn canonical_name(code: tonic::Code) -> &'static str {
    use tonic::Code;
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instruments_render_under_their_prometheus_names() {
        let metrics = Metrics::new().unwrap();
        metrics.pin(PinOutcome::Pinned);
        metrics.write(WriteOutcome::NotAdmitted);
        metrics.pruned(2);
        metrics.refused(Refusal::OverSize, Class::Pin);
        metrics.rpc("GetPin", tonic::Code::Ok, Duration::from_micros(300));
        let text = metrics.render();
        assert!(
            text.contains("sticky_routing_pins_total{outcome=\"pinned\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("sticky_routing_writes_total{outcome=\"not_admitted\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("sticky_routing_pruned_fields_total 2"),
            "{text}"
        );
        assert!(
            text.contains(
                "sticky_routing_refused_calls_total{class=\"pin\",reason=\"over_size\"} 1"
            ),
            "{text}"
        );
        assert!(text.contains("sticky_routing_rpc_duration_seconds_bucket{code=\"OK\",rpc=\"GetPin\",le=\"0.0005\"} 1"), "{text}");
        #[cfg(target_os = "linux")]
        for process_metric in ["process_cpu_seconds_total", "process_resident_memory_bytes"] {
            assert!(text.contains(process_metric), "no {process_metric}: {text}");
        }
        let version = env!("CARGO_PKG_VERSION");
        assert!(
            text.contains(&format!(
                "sticky_routing_build_info{{version=\"{version}\"}} 1"
            )),
            "{text}"
        );
    }

    #[test]
    fn codes_have_their_canonical_names() {
        for code in 0..=16 {
            let code = tonic::Code::from_i32(code);
            let name = canonical_name(code);
            assert_eq!(
                name.replace('_', "").to_lowercase(),
                format!("{code:?}").to_lowercase(),
                "{code:?} is not named {name}"
            );
            assert_eq!(name, name.to_uppercase());
        }
        assert_eq!(canonical_name(tonic::Code::Ok), "OK");
    }

    #[test]
    fn redis_nodes_show_per_node_and_omit_what_is_not_known() {
        let metrics = Metrics::new().unwrap();
        metrics.watch_redis_nodes(|| {
            vec![
                GuardReading {
                    node: "10.0.0.1:6379".into(),
                    engaged: true,
                    used_memory: Some(900),
                    limit: Some(800),
                    reachable: Some(true),
                },
                GuardReading {
                    node: "10.0.0.2:6379".into(),
                    engaged: false,
                    used_memory: None,
                    limit: None,
                    reachable: Some(false),
                },
                GuardReading {
                    node: "10.0.0.3:6379".into(),
                    engaged: false,
                    used_memory: None,
                    limit: None,
                    reachable: None,
                },
            ]
        });
        let text = metrics.render();
        for line in [
            "sticky_routing_admission_memory_guard_engaged{node=\"10.0.0.1:6379\"} 1",
            "sticky_routing_admission_memory_guard_engaged{node=\"10.0.0.2:6379\"} 0",
            "sticky_routing_admission_memory_used_bytes{node=\"10.0.0.1:6379\"} 900",
            "sticky_routing_admission_memory_limit_bytes{node=\"10.0.0.1:6379\"} 800",
            "sticky_routing_redis_up{node=\"10.0.0.1:6379\"} 1",
            "sticky_routing_redis_up{node=\"10.0.0.2:6379\"} 0",
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
        assert!(
            !text.contains("memory_used_bytes{node=\"10.0.0.2"),
            "{text}"
        );
        assert!(!text.contains("redis_up{node=\"10.0.0.3"), "{text}");
    }

    /// The families `text` declares (`# TYPE name kind`).
    fn families(text: &str) -> std::collections::BTreeSet<&str> {
        text.lines()
            .filter_map(|line| line.strip_prefix("# TYPE ")?.split_whitespace().next())
            .collect()
    }

    /// [`EXPORTED_METRICS`] is exactly what the instruments render once each
    /// has been used: a family added without a name in the list, or a name
    /// left in the list for a family that is gone, fails here. The
    /// `process_*` families are left aside: the prometheus crate renders
    /// them on Linux only, and `process_virtual_memory_max_bytes` only under
    /// an address-space limit.
    #[test]
    fn the_exported_list_is_exactly_what_renders() {
        let metrics = Metrics::new().unwrap();
        metrics.pin(PinOutcome::Pinned);
        metrics.write(WriteOutcome::Applied);
        metrics.pruned(1);
        metrics.refused(Refusal::Shed, Class::Low);
        metrics.rpc("GetPin", tonic::Code::Ok, Duration::from_micros(300));
        metrics.redis_command(RedisCommand::Ping, Duration::from_micros(80));
        metrics.redis_error("no_connection");
        metrics.noscript_fallback(RedisCommand::Admit);
        metrics.background_shed(RedisCommand::BreakerFlush);
        metrics.admission_refused(AdmissionRefusal::Budget);
        metrics.breaker_veto(VetoReason::CircuitOpen);
        metrics.breaker_transition("closed", "open");
        metrics.set_breakers_open(0);
        metrics.breaker_io_failure("flush");
        metrics.experiment_outcome(Group::Treated, true);
        metrics.experiment_io_failures("flush", 1);
        metrics.watch_redis_nodes(|| {
            vec![GuardReading {
                node: "10.0.0.1:6379".into(),
                engaged: false,
                used_memory: Some(1),
                limit: Some(2),
                reachable: Some(true),
            }]
        });
        let text = metrics.render();
        let rendered = families(&text);
        let is_process = |name: &str| name.starts_with("process_");
        let listed: std::collections::BTreeSet<&str> = EXPORTED_METRICS.iter().copied().collect();
        assert_eq!(
            listed.len(),
            EXPORTED_METRICS.len(),
            "a name is listed twice"
        );
        assert_eq!(
            listed.iter().filter(|n| !is_process(n)).collect::<Vec<_>>(),
            rendered
                .iter()
                .filter(|n| !is_process(n))
                .collect::<Vec<_>>(),
            "EXPORTED_METRICS differs from what renders:\n{text}"
        );
    }

    #[test]
    fn redis_instruments_render_with_their_labels() {
        let metrics = Metrics::new().unwrap();
        for command in RedisCommand::ALL {
            metrics.redis_command(command, Duration::from_micros(70));
        }
        metrics.redis_command(RedisCommand::Admit, Duration::from_millis(300));
        metrics.redis_error("timeout");
        metrics.redis_error("timeout");
        metrics.noscript_fallback(RedisCommand::RecordSuccess);
        metrics.background_shed(RedisCommand::ExperimentFlush);
        metrics.admission_refused(AdmissionRefusal::MemoryGuard);
        metrics.admission_refused(AdmissionRefusal::Budget);
        let text = metrics.render();
        for command in RedisCommand::ALL {
            let label = command.label();
            let count = if command == RedisCommand::Admit { 2 } else { 1 };
            for line in [
                format!(
                    "sticky_routing_redis_command_duration_seconds_bucket{{command=\"{label}\",le=\"0.0001\"}} 1"
                ),
                format!(
                    "sticky_routing_redis_command_duration_seconds_count{{command=\"{label}\"}} {count}"
                ),
            ] {
                assert!(text.contains(&line), "{line} missing from:\n{text}");
            }
        }
        for line in [
            "sticky_routing_redis_command_duration_seconds_bucket{command=\"admit\",le=\"0.00005\"} 0",
            "sticky_routing_redis_command_duration_seconds_bucket{command=\"admit\",le=\"0.5\"} 2",
            "sticky_routing_redis_errors_total{kind=\"timeout\"} 2",
            "sticky_routing_noscript_fallbacks_total{script=\"record_success\"} 1",
            "sticky_routing_background_shed_total{command=\"experiment_flush\"} 1",
            "sticky_routing_admission_refusals_total{reason=\"memory_guard\"} 1",
            "sticky_routing_admission_refusals_total{reason=\"budget\"} 1",
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
    }

    #[test]
    fn breaker_instruments_render_with_their_labels() {
        let metrics = Metrics::new().unwrap();
        for reason in VETO_REASONS {
            metrics.breaker_veto(reason);
        }
        metrics.breaker_veto(VetoReason::CircuitHalfOpen);
        metrics.breaker_transition("open", "half_open");
        metrics.set_breakers_open(3);
        metrics.set_breakers_open(2);
        metrics.breaker_io_failure("flush");
        let text = metrics.render();
        for line in [
            "sticky_routing_breaker_vetoes_total{reason=\"score\"} 1",
            "sticky_routing_breaker_vetoes_total{reason=\"circuit_open\"} 1",
            "sticky_routing_breaker_vetoes_total{reason=\"circuit_half_open\"} 2",
            "sticky_routing_breaker_vetoes_total{reason=\"forced_open\"} 1",
            "sticky_routing_breaker_transitions_total{from=\"open\",to=\"half_open\"} 1",
            "sticky_routing_breakers_open 2",
            "sticky_routing_breaker_io_failures_total{op=\"flush\"} 1",
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
        for (index, reason) in VETO_REASONS.into_iter().enumerate() {
            assert_eq!(veto_index(reason), index, "{reason:?}");
        }
    }

    #[test]
    fn experiment_instruments_render_with_their_labels() {
        let metrics = Metrics::new().unwrap();
        for group in GROUPS {
            metrics.experiment_outcome(group, true);
        }
        metrics.experiment_outcome(Group::Holdout, false);
        metrics.experiment_outcome(Group::Holdout, false);
        metrics.experiment_io_failures("overflow", 7);
        let text = metrics.render();
        for line in [
            "sticky_routing_experiment_outcomes_total{group=\"treated\",outcome=\"success\"} 1",
            "sticky_routing_experiment_outcomes_total{group=\"holdout\",outcome=\"success\"} 1",
            "sticky_routing_experiment_outcomes_total{group=\"shadow\",outcome=\"success\"} 1",
            "sticky_routing_experiment_outcomes_total{group=\"holdout\",outcome=\"failure\"} 2",
            "sticky_routing_experiment_io_failures_total{op=\"overflow\"} 7",
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
        for (index, group) in GROUPS.into_iter().enumerate() {
            assert_eq!(group_index(group), index, "{group:?}");
        }
    }
}
