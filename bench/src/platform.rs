//! `sticky-bench --platform` (issue 41): RecordOutcome at a few merchants
//! and at a platform's count of them, spread over tenants, with the breaker
//! on and `pin_connector` on every call (so the breaker's and the
//! experiment's background work both run), against the same load at the
//! platform's count with the breaker off and no `pin_connector`. Each run
//! gets a fresh service on one shared Redis, whose customers are written
//! first, so every call meets an existing customer as in `make bench`.
//!
//! Per run: errors by code, p99, the service's and Redis's CPU per call
//! (`/proc`), the service's Redis calls from its own `/metrics` (request
//! path per RPC, background per second), and its API health polled all
//! through the warm-up and the run. [`crate::platform_report`] turns that
//! into the table and the targets.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::BoxError;
use crate::compare::machine;
use crate::cpu::CpuMeter;
use crate::health_watch::HealthWatch;
use crate::platform_report::{Limits, PlatformRun, PlatformStudy};
use crate::procs::{self, API_SERVICE};
use crate::redis_info::RedisProbe;
use crate::report::Report;
use crate::run::{self, RunSpec, Stop};
use crate::service_metrics::{self, Side};
use crate::target::Target;
use crate::workload::{CallKind, Generator, KeySpace, Workload, tenant_list};

/// The platform study's load and targets.
#[derive(Debug, Clone, clap::Args)]
pub struct PlatformArgs {
    /// Merchant counts to run, breaker on and `pin_connector` sent; the
    /// largest is also run as the baseline (breaker off, no
    /// `pin_connector`), and the targets are checked there.
    #[arg(long, value_delimiter = ',', default_value = "10,100000")]
    pub platform_merchants: Vec<u64>,
    /// Customers, spread over the merchants (customer n belongs to
    /// merchant n mod merchants).
    #[arg(long, default_value_t = 200_000)]
    pub platform_customers: u64,
    /// Zipf exponent of customer popularity. 0 (uniform) by default: with
    /// Zipf 1, 200,000 customers over 100,000 merchants, a 10 s run calls
    /// about a third of the merchants (bench/README.md).
    #[arg(long, default_value_t = 0.0)]
    pub platform_zipf: f64,
    /// Share of RecordOutcome calls that report a gateway failure.
    #[arg(long, default_value_t = 0.2)]
    pub platform_failure_ratio: f64,
    /// Tenants the merchants are spread over (`x-tenant-id`), all listed
    /// in the service's STICKY_ROUTING_TENANTS.
    #[arg(long, default_value_t = 10)]
    pub platform_tenants: u64,
    /// Rounds of (platform count with the breaker on, baseline); the
    /// targets compare medians. `--quick` runs one.
    #[arg(long, default_value_t = 3)]
    pub platform_rounds: usize,
    /// The bound on the service's background Redis calls per second (one
    /// instance), checked at every merchant count: the service's own, 16
    /// shards x (4 tick calls + 1 transition call + 3 experiment calls:
    /// a push, a batch read, a chunk) per 500 ms tick.
    #[arg(long, default_value_t = 256.0)]
    pub max_background_rate: f64,
    /// The background rates at the fewest and the most merchants are of
    /// the same order when the larger is at most this many times the
    /// smaller (taken as at least 1/s).
    #[arg(long, default_value_t = 10.0)]
    pub background_order: f64,
    /// Also run, each round at the largest count, the breaker alone (no
    /// `pin_connector`) and the experiment counts alone (breaker off,
    /// `pin_connector` sent): which of the two background costs what.
    /// Neither enters the targets.
    #[arg(long)]
    pub platform_split: bool,
    /// How often the API's health is polled during each run.
    #[arg(long, value_parser = crate::cli::parse_duration, default_value = "100ms")]
    pub health_every: Duration,
}

/// What to run.
#[derive(Debug, Clone)]
pub struct PlatformSpec {
    pub args: PlatformArgs,
    pub duration: Duration,
    pub warmup: Duration,
    pub concurrency: usize,
    pub connections: usize,
    pub pool_size: usize,
    /// Combos per customer.
    pub combos: u64,
    pub quick: bool,
    pub service_env: Vec<(String, String)>,
    pub redis_server: String,
    pub service_bin: Option<PathBuf>,
    pub out_dir: PathBuf,
}

/// One run's shape.
#[derive(Debug, Clone)]
struct Plan {
    merchants: u64,
    breaker: bool,
    pin_connector: bool,
    round: usize,
}

impl Plan {
    fn name(&self) -> String {
        let what = match (self.breaker, self.pin_connector) {
            (true, true) => "breaker on, pin_connector",
            (false, false) => "baseline: breaker off, no pin_connector",
            (true, false) => "split: breaker on, no pin_connector",
            (false, true) => "split: breaker off, pin_connector",
        };
        format!("{} merchants, {what}", self.merchants)
    }

    fn dir_name(&self) -> String {
        let what = match (self.breaker, self.pin_connector) {
            (true, true) => "on",
            (false, false) => "off",
            (true, false) => "breaker-only",
            (false, true) => "experiment-only",
        };
        format!("m{}-{what}-r{}", self.merchants, self.round)
    }
}

/// The runs in order: every count but the largest once, then per round
/// the largest with the breaker on and its baseline (and, with `split`,
/// the breaker alone and the experiment counts alone), interleaved so a
/// drift of this machine falls on all.
fn plans(merchants: &[u64], rounds: usize, split: bool) -> Vec<Plan> {
    let mut counts = merchants.to_vec();
    counts.sort_unstable();
    counts.dedup();
    let Some(&largest) = counts.last() else {
        return Vec::new();
    };
    let run = |merchants, breaker, round| Plan {
        merchants,
        breaker,
        pin_connector: breaker,
        round,
    };
    let split_run = |merchants, breaker, round| Plan {
        merchants,
        breaker,
        pin_connector: !breaker,
        round,
    };
    let mut plans: Vec<Plan> = counts[..counts.len() - 1]
        .iter()
        .map(|&m| run(m, true, 1))
        .collect();
    for round in 1..=rounds.max(1) {
        plans.push(run(largest, true, round));
        plans.push(run(largest, false, round));
        if split {
            plans.push(split_run(largest, true, round));
            plans.push(split_run(largest, false, round));
        }
    }
    plans
}

/// Runs the whole study. Progress goes to stderr.
pub async fn platform(mut spec: PlatformSpec) -> Result<PlatformStudy, BoxError> {
    if spec.args.platform_merchants.contains(&0) || spec.args.platform_customers == 0 {
        return Err("--platform-merchants and --platform-customers must be at least 1".into());
    }
    let out = spec.out_dir.join("platform");
    std::fs::create_dir_all(&out)?;
    spec.out_dir = out.canonicalize()?;
    let rounds = if spec.quick {
        1
    } else {
        spec.args.platform_rounds
    };
    let plans = plans(
        &spec.args.platform_merchants,
        rounds,
        spec.args.platform_split,
    );
    let redis = procs::start_redis(&spec.redis_server, &spec.out_dir).await?;
    let url = format!("redis://{}", redis.addr);
    let probe = RedisProbe::connect(&url).await?;
    let machine = format!("{}; Redis {}", machine(), probe.version().await?);
    let mut counts: Vec<u64> = plans.iter().map(|p| p.merchants).collect();
    counts.dedup();
    for merchants in counts {
        eprintln!(
            "platform: writing {} customers × {} combos over {merchants} merchants",
            spec.args.platform_customers, spec.combos
        );
        probe
            .write_customers(
                spec.args.platform_customers,
                spec.combos,
                merchants,
                spec.args.platform_tenants,
            )
            .await?;
    }
    let mut runs = Vec::new();
    for plan in &plans {
        eprintln!("platform: {} (round {})", plan.name(), plan.round);
        probe.clear_background_state().await?;
        runs.push(measure(&spec, plan, &url, redis.child.id()).await?);
    }
    probe.quit().await;
    drop(redis);
    let a = &spec.args;
    let setup = format!(
        "concurrency {} over {} HTTP/2 connection(s); RecordOutcome only; {} s per run after {} s of warm-up; {} customers (Zipf {}) over the merchants, {} combos each, {:.0}% gateway failures; merchants spread over {} tenants (x-tenant-id); Redis pool {}; health polled every {} ms; {} round(s) at {} merchants",
        spec.concurrency,
        spec.connections,
        spec.duration.as_secs(),
        spec.warmup.as_secs(),
        a.platform_customers,
        a.platform_zipf,
        spec.combos,
        a.platform_failure_ratio * 100.0,
        a.platform_tenants,
        spec.pool_size,
        a.health_every.as_millis(),
        rounds,
        plans.last().map_or(0, |p| p.merchants),
    );
    let limits = Limits {
        max_background_rate: a.max_background_rate,
        background_order: a.background_order,
    };
    Ok(PlatformStudy::new(machine, setup, runs, limits))
}

/// One run: a fresh service, a warm-up, and the measured run, with the
/// health polled through both and the counters read around the second.
async fn measure(
    spec: &PlatformSpec,
    plan: &Plan,
    url: &str,
    redis_pid: Option<u32>,
) -> Result<PlatformRun, BoxError> {
    let dir = spec.out_dir.join(plan.dir_name());
    std::fs::create_dir_all(&dir)?;
    let service = procs::start_service(
        spec.service_bin.as_deref(),
        url,
        &service_env(spec, plan),
        &dir,
    )
    .await?;
    let metrics = service.metrics_addr.ok_or("the service has no /metrics")?;
    let target = Target::grpc(
        &service.addr.to_string(),
        spec.connections,
        Duration::from_secs(5),
    )
    .await?;
    let workload = workload(spec, plan);
    let health = HealthWatch::start(
        service.addr,
        API_SERVICE,
        spec.args.health_every,
        Duration::from_secs(1),
    )
    .await?;
    if !spec.warmup.is_zero() {
        let warm = Arc::new(Generator::new(workload.clone())?);
        run::run(&target, warm, run_spec(spec, spec.warmup, 7)).await?;
    }
    let generator = Arc::new(Generator::new(workload)?.tracking_merchants());
    let before = service_metrics::command_counts(metrics).await?;
    let started = Instant::now();
    let service_cpu = service.child.id().and_then(CpuMeter::start);
    let redis_cpu = redis_pid.and_then(CpuMeter::start);
    let result = run::run(
        &target,
        Arc::clone(&generator),
        run_spec(spec, spec.duration, 1),
    )
    .await?;
    let calls = result.calls();
    let service_cpu = service_cpu.and_then(|m| m.micros_per_call(calls));
    let redis_cpu = redis_cpu.and_then(|m| m.micros_per_call(calls));
    let after = service_metrics::command_counts(metrics).await?;
    let seconds = started.elapsed().as_secs_f64();
    let health = health.stop().await?;
    target.close().await;
    drop(service);
    let delta = before.delta(&after);
    Ok(PlatformRun {
        name: plan.name(),
        merchants: plan.merchants,
        breaker: plan.breaker,
        pin_connector: plan.pin_connector,
        round: plan.round,
        report: Report::new(plan.name(), &result).with_cpu(service_cpu, redis_cpu),
        request_path_per_rpc: delta.total(Side::RequestPath) / f64_of(calls.max(1)),
        request_path: delta.of(Side::RequestPath),
        background_per_sec: delta.total(Side::Background) / seconds.max(1e-9),
        background: delta
            .of(Side::Background)
            .into_iter()
            .map(|(k, v)| (k, v / seconds.max(1e-9)))
            .collect(),
        health,
        merchants_called: generator.merchants_seen().unwrap_or(0),
    })
}

fn service_env(spec: &PlatformSpec, plan: &Plan) -> Vec<(String, String)> {
    let mut env = vec![(
        "STICKY_ROUTING_REDIS_POOL_SIZE".to_owned(),
        spec.pool_size.to_string(),
    )];
    if spec.args.platform_tenants > 0 {
        env.push((
            "STICKY_ROUTING_TENANTS".to_owned(),
            tenant_list(spec.args.platform_tenants),
        ));
    }
    env.push((
        "STICKY_ROUTING_BREAKER".to_owned(),
        if plan.breaker { "on" } else { "off" }.to_owned(),
    ));
    env.extend(spec.service_env.iter().cloned());
    env
}

fn workload(spec: &PlatformSpec, plan: &Plan) -> Workload {
    let a = &spec.args;
    Workload {
        call: CallKind::Record,
        pin_ratio: 0.0,
        failure_ratio: a.platform_failure_ratio.clamp(0.0, 1.0),
        attempt_ids: false,
        retry_ratio: 0.0,
        pin_connector: plan.pin_connector,
        tenants: a.platform_tenants,
        keys: KeySpace {
            merchants: plan.merchants,
            customers: a.platform_customers,
            zipf: a.platform_zipf,
            combos: spec.combos,
        },
    }
}

fn run_spec(spec: &PlatformSpec, length: Duration, seed: u64) -> RunSpec {
    RunSpec {
        concurrency: spec.concurrency,
        stop: Stop::After(length),
        rate: None,
        seed,
    }
}

fn f64_of(n: u64) -> f64 {
    // Call counts stay far below 2^53.
    #[allow(clippy::cast_precision_loss)]
    let n = n as f64;
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_largest_count_is_run_each_round_with_its_baseline_after_the_others() {
        let planned = plans(&[100_000, 10, 10], 2, false);
        let shape: Vec<(u64, bool, bool, usize)> = planned
            .iter()
            .map(|p| (p.merchants, p.breaker, p.pin_connector, p.round))
            .collect();
        assert_eq!(
            shape,
            [
                (10, true, true, 1),
                (100_000, true, true, 1),
                (100_000, false, false, 1),
                (100_000, true, true, 2),
                (100_000, false, false, 2),
            ]
        );
        assert_eq!(plans(&[5], 0, false).len(), 2, "one round at least");
        assert!(plans(&[], 3, false).is_empty());
        assert_eq!(planned[2].dir_name(), "m100000-off-r1");
    }

    #[test]
    fn a_split_adds_the_breaker_alone_and_the_experiment_alone_each_round() {
        let planned = plans(&[10, 100_000], 1, true);
        let shape: Vec<(u64, bool, bool)> = planned
            .iter()
            .map(|p| (p.merchants, p.breaker, p.pin_connector))
            .collect();
        assert_eq!(
            shape,
            [
                (10, true, true),
                (100_000, true, true),
                (100_000, false, false),
                (100_000, true, false),
                (100_000, false, true),
            ]
        );
        assert_eq!(planned[3].dir_name(), "m100000-breaker-only-r1");
        assert_eq!(
            planned[4].name(),
            "100000 merchants, split: breaker off, pin_connector"
        );
    }
}
