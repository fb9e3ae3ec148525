//! The instruments every call records: the RPC and Redis latency histograms
//! and the GetPin and RecordOutcome outcome counters, on the prometheus
//! crate's atomic instruments, each label set resolved once.
//!
//! Why not OpenTelemetry's, like the other metrics: opentelemetry_sdk 0.33
//! turns the attributes of every `record`/`add` into a sorted, hashed set
//! and looks it up under a lock, about 700 to 1,100 instructions a
//! measurement, three or four measurements a call (bench/README.md). Here a
//! measurement is an array index and a few atomic adds. The series appear
//! on `/metrics` when first recorded, under the same names, labels, help
//! and buckets as before, in the same registry; nothing a dashboard reads
//! changes.

use std::sync::OnceLock;

use prometheus::core::Collector;
use prometheus::{
    Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, Opts, Registry,
};

// The StickyRouting methods, each at its index in the RPC histograms.
use super::RPC_NAMES as RPCS;
use super::outcomes::{PinOutcome, WriteOutcome};
use super::redis_command::RedisCommand;

/// A labelled family: its series for one set of label values.
trait Family {
    type Series;
    fn series(&self, labels: &[&str]) -> Option<Self::Series>;
}

impl Family for HistogramVec {
    type Series = Histogram;
    fn series(&self, labels: &[&str]) -> Option<Histogram> {
        self.get_metric_with_label_values(labels).ok()
    }
}

impl Family for IntCounterVec {
    type Series = IntCounter;
    fn series(&self, labels: &[&str]) -> Option<IntCounter> {
        self.get_metric_with_label_values(labels).ok()
    }
}

/// One label set's series of `family`, made on first use and then read
/// without a lock or a hash.
struct Series<F: Family, const N: usize> {
    family: F,
    slots: [OnceLock<F::Series>; N],
}

impl<F: Family, const N: usize> Series<F, N> {
    fn new(family: F) -> Self {
        Self {
            family,
            slots: [const { OnceLock::new() }; N],
        }
    }

    /// Applies `record` to the series labelled `labels`, kept at `slot`
    /// (the same labels every time for one slot: the caller's index says
    /// which); a label set without a slot (`None`, or out of range) is
    /// looked up in the family's map instead, off the hot path.
    fn record(&self, slot: Option<usize>, labels: &[&str], record: impl FnOnce(&F::Series)) {
        match slot.and_then(|slot| self.slots.get(slot)) {
            Some(cell) => {
                if let Some(series) = cell.get() {
                    record(series);
                } else if let Some(series) = self.family.series(labels) {
                    record(cell.get_or_init(|| series));
                }
            }
            None => {
                if let Some(series) = self.family.series(labels) {
                    record(&series);
                }
            }
        }
    }
}

/// gRPC codes 0 (OK) to 16 (UNAUTHENTICATED).
const CODES: usize = 17;

/// The hot instruments, registered in the service's registry.
pub(super) struct HotInstruments {
    rpc: Series<HistogramVec, { RPCS.len() * CODES }>,
    redis: Series<HistogramVec, { RedisCommand::ALL.len() }>,
    pins: Series<IntCounterVec, { PinOutcome::ALL.len() }>,
    writes: Series<IntCounterVec, { WriteOutcome::ALL.len() }>,
}

/// Names, help and buckets of the hot instruments, as `/metrics` shows them.
pub(super) struct HotSpec<'a> {
    pub rpc_help: &'a str,
    pub rpc_buckets: &'a [f64],
    pub redis_help: &'a str,
    pub redis_buckets: &'a [f64],
    pub pins_help: &'a str,
    pub writes_help: &'a str,
}

impl HotInstruments {
    pub(super) fn register(
        registry: &Registry,
        spec: &HotSpec<'_>,
    ) -> Result<Self, prometheus::Error> {
        let rpc = HistogramVec::new(
            HistogramOpts::new("sticky_routing_rpc_duration_seconds", spec.rpc_help)
                .buckets(spec.rpc_buckets.to_vec()),
            &["code", "rpc"],
        )?;
        let redis = HistogramVec::new(
            HistogramOpts::new(
                "sticky_routing_redis_command_duration_seconds",
                spec.redis_help,
            )
            .buckets(spec.redis_buckets.to_vec()),
            &["command"],
        )?;
        let pins = IntCounterVec::new(
            Opts::new("sticky_routing_pins_total", spec.pins_help),
            &["outcome"],
        )?;
        let writes = IntCounterVec::new(
            Opts::new("sticky_routing_writes_total", spec.writes_help),
            &["outcome"],
        )?;
        for collector in [
            Box::new(rpc.clone()) as Box<dyn Collector>,
            Box::new(redis.clone()),
            Box::new(pins.clone()),
            Box::new(writes.clone()),
        ] {
            registry.register(collector)?;
        }
        Ok(Self {
            rpc: Series::new(rpc),
            redis: Series::new(redis),
            pins: Series::new(pins),
            writes: Series::new(writes),
        })
    }

    /// One answered RPC: `method` is one of [`RPCS`] (anything else is
    /// still counted, through the family's map); `code` is the gRPC code's
    /// number, `code_label` its name.
    pub(super) fn rpc(&self, method: &str, code: usize, code_label: &str, seconds: f64) {
        let slot = RPCS
            .iter()
            .position(|rpc| *rpc == method)
            .filter(|_| code < CODES)
            .map(|rpc| rpc * CODES + code);
        self.rpc.record(slot, &[code_label, method], |series| {
            series.observe(seconds)
        });
    }

    /// One Redis call of `command`, kept at the command's index.
    pub(super) fn redis(&self, command: RedisCommand, seconds: f64) {
        self.redis
            .record(Some(command as usize), &[command.label()], |series| {
                series.observe(seconds)
            });
    }

    /// One GetPin outcome, kept at its index in `PinOutcome::ALL`.
    pub(super) fn pin(&self, outcome: PinOutcome) {
        let slot = PinOutcome::ALL.iter().position(|o| *o == outcome);
        self.pins.record(slot, &[outcome.label()], IntCounter::inc);
    }

    /// One RecordOutcome outcome, kept at its index in `WriteOutcome::ALL`.
    pub(super) fn write(&self, outcome: WriteOutcome) {
        let slot = WriteOutcome::ALL.iter().position(|o| *o == outcome);
        self.writes
            .record(slot, &[outcome.label()], IntCounter::inc);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus::{Encoder, TextEncoder};

    fn registered() -> (Registry, HotInstruments) {
        let registry = Registry::new();
        let spec = HotSpec {
            rpc_help: "rpc",
            rpc_buckets: &[0.001, 0.01],
            redis_help: "redis",
            redis_buckets: &[0.001],
            pins_help: "pins",
            writes_help: "writes",
        };
        let hot = HotInstruments::register(&registry, &spec).unwrap();
        (registry, hot)
    }

    fn render(registry: &Registry) -> String {
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&registry.gather(), &mut out)
            .unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn each_label_set_is_its_own_series_and_one_without_a_slot_still_counts() {
        let (registry, hot) = registered();
        hot.rpc("GetPin", 0, "OK", 0.0005);
        hot.rpc("GetPin", 0, "OK", 0.005);
        hot.rpc("GetPin", 14, "UNAVAILABLE", 0.5);
        hot.rpc("RecordOutcome", 0, "OK", 0.0005);
        // No slot: a method outside the list, a code past 16.
        hot.rpc("Check", 0, "OK", 0.0005);
        hot.rpc("GetPin", 40, "CODE_40", 0.0005);
        hot.redis(RedisCommand::ReadCombos, 0.0005);
        hot.redis(RedisCommand::ReadCombos, 0.0005);
        hot.redis(RedisCommand::Admit, 0.0005);
        hot.pin(PinOutcome::Pinned);
        hot.pin(PinOutcome::Pinned);
        hot.pin(PinOutcome::NoHabit);
        hot.write(WriteOutcome::Duplicate);
        let text = render(&registry);
        for line in [
            "sticky_routing_rpc_duration_seconds_count{code=\"OK\",rpc=\"GetPin\"} 2",
            "sticky_routing_rpc_duration_seconds_bucket{code=\"OK\",rpc=\"GetPin\",le=\"0.001\"} 1",
            "sticky_routing_rpc_duration_seconds_count{code=\"UNAVAILABLE\",rpc=\"GetPin\"} 1",
            "sticky_routing_rpc_duration_seconds_count{code=\"OK\",rpc=\"RecordOutcome\"} 1",
            "sticky_routing_rpc_duration_seconds_count{code=\"OK\",rpc=\"Check\"} 1",
            "sticky_routing_rpc_duration_seconds_count{code=\"CODE_40\",rpc=\"GetPin\"} 1",
            "sticky_routing_redis_command_duration_seconds_count{command=\"read_combos\"} 2",
            "sticky_routing_redis_command_duration_seconds_count{command=\"admit\"} 1",
            "sticky_routing_pins_total{outcome=\"pinned\"} 2",
            "sticky_routing_pins_total{outcome=\"no_habit\"} 1",
            "sticky_routing_writes_total{outcome=\"duplicate\"} 1",
        ] {
            assert!(text.contains(line), "no `{line}` in:\n{text}");
        }
        // A series shows once recorded, not before.
        assert!(!text.contains("rpc=\"GetHabits\""), "{text}");
    }

    #[test]
    fn a_label_set_without_a_slot_still_counts_and_one_with_a_slot_keeps_it() {
        let registry = Registry::new();
        let family = IntCounterVec::new(Opts::new("c_total", "c"), &["outcome"]).unwrap();
        registry.register(Box::new(family.clone())).unwrap();
        let series: Series<IntCounterVec, 2> = Series::new(family);
        series.record(Some(1), &["kept"], IntCounter::inc);
        series.record(Some(1), &["kept"], IntCounter::inc);
        series.record(Some(99), &["elsewhere"], IntCounter::inc);
        series.record(None, &["unlisted"], IntCounter::inc);
        assert!(series.slots[1].get().is_some());
        let text = render(&registry);
        for line in [
            "c_total{outcome=\"kept\"} 2",
            "c_total{outcome=\"elsewhere\"} 1",
            "c_total{outcome=\"unlisted\"} 1",
        ] {
            assert!(text.contains(line), "no `{line}` in:\n{text}");
        }
    }

    #[test]
    fn a_second_registration_in_one_registry_is_refused() {
        let (registry, _hot) = registered();
        let spec = HotSpec {
            rpc_help: "rpc",
            rpc_buckets: &[0.001],
            redis_help: "redis",
            redis_buckets: &[0.001],
            pins_help: "pins",
            writes_help: "writes",
        };
        assert!(HotInstruments::register(&registry, &spec).is_err());
    }
}
