//! Flags shared by `sticky-load` and `sticky-bench`, named as ghz names them
//! where ghz has the same idea.

use std::time::Duration;

use crate::workload::{CallKind, KeySpace, Workload};

/// The key space and request mix.
#[derive(Debug, Clone, clap::Args)]
pub struct WorkloadArgs {
    /// Distinct merchants; customer n belongs to merchant n mod this.
    #[arg(long, default_value_t = 10)]
    pub merchants: u64,
    /// Distinct customers.
    #[arg(long, default_value_t = 10_000)]
    pub customers: u64,
    /// Zipf exponent of customer popularity; 0 is uniform.
    #[arg(long, default_value_t = 1.0)]
    pub zipf: f64,
    /// Distinct combos per customer (above the cap, 30 by default, every new
    /// combo prunes one).
    #[arg(long, default_value_t = 4)]
    pub combos: u64,
    /// Share of RecordOutcome calls that report a gateway failure.
    #[arg(long, default_value_t = 0.0)]
    pub failure_ratio: f64,
    /// Share of GetPin calls in `--call mix`.
    #[arg(long, default_value_t = 0.5)]
    pub pin_ratio: f64,
    /// RecordOutcome calls carry an `attempt_id` (exactly-once feedback).
    #[arg(long)]
    pub attempt_ids: bool,
    /// With `--attempt-ids`: share of RecordOutcome calls that retry an
    /// attempt already sent, as an orchestrator does after a lost answer.
    #[arg(long, default_value_t = 0.1)]
    pub retry_ratio: f64,
    /// RecordOutcome calls carry `pin_connector` (their own connector, as
    /// if GetPin pinned it), so the service's experiment counts run.
    #[arg(long)]
    pub pin_connector: bool,
    /// Spread the merchants over this many tenants, sent as `x-tenant-id`
    /// (merchant m belongs to `tenant_{m mod N}`); 0 sends no header. The
    /// service must allow them (STICKY_ROUTING_TENANTS).
    #[arg(long, default_value_t = 0)]
    pub tenants: u64,
}

impl WorkloadArgs {
    pub fn workload(&self, call: CallKind) -> Workload {
        Workload {
            call,
            pin_ratio: self.pin_ratio.clamp(0.0, 1.0),
            failure_ratio: self.failure_ratio.clamp(0.0, 1.0),
            attempt_ids: self.attempt_ids,
            retry_ratio: self.retry_ratio.clamp(0.0, 1.0),
            pin_connector: self.pin_connector,
            tenants: self.tenants,
            keys: KeySpace {
                merchants: self.merchants,
                customers: self.customers,
                zipf: self.zipf,
                combos: self.combos,
            },
        }
    }
}

/// `10s`, `250ms`, `2m`: humantime, as ghz's `-z` takes them.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text).map_err(|e| e.to_string())
}
