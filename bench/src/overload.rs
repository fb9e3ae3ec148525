//! The overload study (`sticky-bench --overload`, `make bench OVERLOAD=1`):
//! find the service's capacity C, then offer 0.5C, 1C, 3C and 5C open loop
//! over several connections, and check what an overloaded payment service
//! owes its callers: goodput stays near C, refusals come at once, and the
//! calls it accepts are not slowed by the ones it refuses.
//!
//! Open loop, because a closed-loop client slows down with the server and
//! never overloads it. The service can be pinned to CPUs of its own
//! (`--server-cpus`) while the load and Redis run on the others, as they do
//! on other machines in production: on one shared set of cores the
//! generator cannot offer several times what the server serves, since
//! sending a call costs the client about what refusing it costs the server.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::BoxError;
use crate::cli::WorkloadArgs;
use crate::compare::{Check, machine};
use crate::procs;
use crate::report::Report;
use crate::run::{self, RunResult, RunSpec, Stop};
use crate::target::Target;
use crate::workload::{CallKind, Generator};

/// The offered loads, as multiples of the capacity.
pub const FACTORS: [f64; 4] = [0.5, 1.0, 3.0, 5.0];
/// Closed-loop concurrencies tried when looking for the capacity; past the
/// service's limit they also show closed-loop overload (with the limit
/// lifted, `--service-env STICKY_ROUTING_MAX_IN_FLIGHT=1000000`, they show
/// what each level of concurrency buys, which is how the default was
/// chosen).
const CAPACITY_CONCURRENCY: [usize; 6] = [32, 64, 128, 256, 512, 1024];

/// What to run.
#[derive(Debug, Clone)]
pub struct OverloadSpec {
    pub duration: Duration,
    pub warmup: Duration,
    pub connections: usize,
    /// Open-loop dispatchers, spread over the connections; each call runs in
    /// a task of its own ([`run::run_unbounded`]).
    pub dispatchers: usize,
    /// The deadline every call carries.
    pub deadline: Duration,
    pub pool_size: usize,
    pub workload: WorkloadArgs,
    pub service_env: Vec<(String, String)>,
    pub redis_server: String,
    pub service_bin: Option<std::path::PathBuf>,
    /// `taskset` CPU list for the service (e.g. `0`).
    pub server_cpus: Option<String>,
    pub out_dir: std::path::PathBuf,
}

/// One offered load and what came of it.
#[derive(Debug, Clone, Serialize)]
pub struct Step {
    pub factor: f64,
    /// The rate asked of the generator.
    pub offered: f64,
    /// The rate it really sent.
    pub sent: f64,
    /// OK answers per second.
    pub goodput: f64,
    /// `RESOURCE_EXHAUSTED` answers per second.
    pub shed: f64,
    pub shed_p50_ms: Option<f64>,
    pub ok_p50_ms: Option<f64>,
    pub ok_p99_ms: Option<f64>,
    /// Answers other than OK and `RESOURCE_EXHAUSTED`.
    pub other: u64,
    pub late: u64,
    pub report: Report,
}

/// The whole study.
#[derive(Debug, Clone, Serialize)]
pub struct OverloadStudy {
    pub machine: String,
    pub setup: String,
    /// Closed-loop runs; the best goodput is C.
    pub capacity_runs: Vec<(usize, Report)>,
    pub capacity: f64,
    pub steps: Vec<Step>,
    pub checks: Vec<Check>,
}

/// Runs the study. Progress goes to stderr.
pub async fn overload(mut spec: OverloadSpec) -> Result<OverloadStudy, BoxError> {
    std::fs::create_dir_all(&spec.out_dir)?;
    spec.out_dir = spec.out_dir.canonicalize()?;
    let cpus = spec.server_cpus.as_deref();
    // Redis runs beside the load, not the service: in production it is on
    // other machines, and a service that refuses calls must not starve it.
    let redis = procs::start_redis(&spec.redis_server, &spec.out_dir).await?;
    let url = format!("redis://{}", redis.addr);
    let mut env = vec![(
        "STICKY_ROUTING_REDIS_POOL_SIZE".to_owned(),
        spec.pool_size.to_string(),
    )];
    env.extend(spec.service_env.iter().cloned());
    let service =
        procs::start_service_on(spec.service_bin.as_deref(), &url, &env, &spec.out_dir, cpus)
            .await?;
    let target = Target::grpc(&service.addr.to_string(), spec.connections, spec.deadline).await?;
    let call = CallKind::Record;
    let generator = Arc::new(Generator::new(spec.workload.workload(call))?);
    eprintln!("overload: filling");
    let filled = run::fill(&target, Arc::clone(&generator), 64).await?;
    if filled.ok() != filled.calls() {
        return Err(format!("the fill failed: {:?}", filled.statuses).into());
    }

    let mut capacity_runs = Vec::new();
    for concurrency in CAPACITY_CONCURRENCY {
        eprintln!("overload: capacity, closed loop, {concurrency} in flight");
        let result = closed_loop(&spec, &target, &generator, concurrency).await?;
        capacity_runs.push((
            concurrency,
            Report::new(format!("closed loop, {concurrency} in flight"), &result),
        ));
    }
    let capacity = capacity_runs
        .iter()
        .map(|(_, r)| ok_rate(r))
        .fold(0.0, f64::max);

    let mut steps = Vec::new();
    for factor in FACTORS {
        let offered = capacity * factor;
        eprintln!("overload: {factor}C = {offered:.0} calls/s, open loop");
        let result = open_loop(&spec, &target, &generator, offered).await?;
        steps.push(step(factor, offered, &result));
    }
    target.close().await;
    drop((service, redis));
    let checks = checks(capacity, &steps);
    let setup = format!(
        "RecordOutcome on existing customers; {} connections; open loop from {} dispatchers, a task per call; deadline {:?}; {} s per run after {} s of warm-up; service on CPUs {}; Redis pool {}",
        spec.connections,
        spec.dispatchers,
        spec.deadline,
        spec.duration.as_secs(),
        spec.warmup.as_secs(),
        cpus.unwrap_or("shared with the load"),
        spec.pool_size,
    );
    Ok(OverloadStudy {
        machine: machine(),
        setup,
        capacity_runs,
        capacity,
        steps,
        checks,
    })
}

/// A warm-up, then a measured run, closed loop with `concurrency` workers.
async fn closed_loop(
    spec: &OverloadSpec,
    target: &Target,
    generator: &Arc<Generator>,
    concurrency: usize,
) -> Result<RunResult, BoxError> {
    let run_spec = |length, seed| RunSpec {
        concurrency,
        stop: Stop::After(length),
        rate: None,
        seed,
    };
    if !spec.warmup.is_zero() {
        run::run(target, Arc::clone(generator), run_spec(spec.warmup, 7)).await?;
    }
    run::run(target, Arc::clone(generator), run_spec(spec.duration, 1)).await
}

/// A warm-up, then a measured run, open loop at `rate` with nothing
/// bounding the calls in flight.
async fn open_loop(
    spec: &OverloadSpec,
    target: &Target,
    generator: &Arc<Generator>,
    rate: f64,
) -> Result<RunResult, BoxError> {
    let dispatchers = spec.dispatchers;
    if !spec.warmup.is_zero() {
        let warmup = Arc::clone(generator);
        run::run_unbounded(target, warmup, dispatchers, rate, spec.warmup, 7).await?;
    }
    run::run_unbounded(
        target,
        Arc::clone(generator),
        dispatchers,
        rate,
        spec.duration,
        1,
    )
    .await
}

fn ok_rate(report: &Report) -> f64 {
    // Call counts stay far below 2^53.
    #[allow(clippy::cast_precision_loss)]
    let ok = report.statuses.get("OK").copied().unwrap_or(0) as f64;
    ok / report.seconds.max(1e-9)
}

fn step(factor: f64, offered: f64, result: &RunResult) -> Step {
    let other = result
        .statuses
        .iter()
        .filter(|(code, _)| !matches!(code.as_str(), "OK" | "RESOURCE_EXHAUSTED"))
        .map(|(_, n)| n)
        .sum();
    Step {
        factor,
        offered,
        sent: result.rate(),
        goodput: result.rate_of("OK"),
        shed: result.rate_of("RESOURCE_EXHAUSTED"),
        shed_p50_ms: result.latency_ms_of("RESOURCE_EXHAUSTED", 0.5),
        ok_p50_ms: result.latency_ms_of("OK", 0.5),
        ok_p99_ms: result.latency_ms_of("OK", 0.99),
        other,
        late: result.late,
        report: Report::new(format!("{factor}C"), result),
    }
}

/// Section 4's targets, each against what was measured.
fn checks(capacity: f64, steps: &[Step]) -> Vec<Check> {
    let mut checks = Vec::new();
    let base_p99 = steps
        .iter()
        .find(|s| (s.factor - 0.5).abs() < f64::EPSILON)
        .and_then(|s| s.ok_p99_ms);
    for s in steps {
        let c = s.factor;
        checks.push(Check {
            target: format!("{c}C: the generator sent what was asked"),
            measured: format!("{:.0} of {:.0} calls/s", s.sent, s.offered),
            goal: "≥ 0.95 × asked".into(),
            met: s.sent >= 0.95 * s.offered,
        });
        if c >= 3.0 {
            checks.push(Check {
                target: format!("{c}C: goodput"),
                measured: format!("{:.2} C", s.goodput / capacity.max(1e-9)),
                goal: "≥ 0.90 C".into(),
                met: s.goodput >= 0.9 * capacity,
            });
            checks.push(Check {
                target: format!("{c}C: median time to refuse"),
                measured: s
                    .shed_p50_ms
                    .map_or("nothing refused".into(), |ms| format!("{ms:.3} ms")),
                goal: "≤ 1 ms".into(),
                met: s.shed_p50_ms.is_none_or(|ms| ms <= 1.0),
            });
        }
        if let (Some(p99), Some(base)) = (s.ok_p99_ms, base_p99) {
            checks.push(Check {
                target: format!("{c}C: p99 of accepted calls"),
                measured: format!("{p99:.2} ms ({:.2}× 0.5C)", p99 / base.max(1e-9)),
                goal: "≤ 2 × p99 at 0.5C".into(),
                met: p99 <= 2.0 * base,
            });
        }
    }
    checks
}

impl OverloadStudy {
    /// The study as markdown.
    pub fn markdown(&self) -> String {
        let mut out = format!(
            "## sticky-routing overload study\n\n- Machine: {}\n- Setup: {}\n- Capacity C = {:.0} OK calls/s (best closed-loop goodput: {})\n\n",
            self.machine,
            self.setup,
            self.capacity,
            self.capacity_runs
                .iter()
                .map(|(c, r)| format!("{:.0}/s at {c} in flight", ok_rate(r)))
                .collect::<Vec<_>>()
                .join(", ")
        );
        out.push_str(
            "| offered | sent/s | goodput/s | goodput / C | shed/s | shed p50 | OK p50 | OK p99 | other errors | late sends |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        );
        let ms = |v: Option<f64>| v.map_or("–".to_owned(), |ms| format!("{ms:.2} ms"));
        for s in &self.steps {
            out.push_str(&format!(
                "| {}C ({:.0}/s) | {:.0} | {:.0} | {:.2} | {:.0} | {} | {} | {} | {} | {} |\n",
                s.factor,
                s.offered,
                s.sent,
                s.goodput,
                s.goodput / self.capacity.max(1e-9),
                s.shed,
                ms(s.shed_p50_ms),
                ms(s.ok_p50_ms),
                ms(s.ok_p99_ms),
                s.other,
                s.late,
            ));
        }
        out.push_str(&Check::markdown_table(&self.checks));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn a_step(factor: f64, goodput: f64, shed_p50: Option<f64>, ok_p99: f64) -> Step {
        let report = Report {
            name: String::new(),
            calls: 0,
            seconds: 1.0,
            rps: 0.0,
            latency_ms: crate::report::Latency {
                p50: 0.0,
                p90: 0.0,
                p99: 0.0,
                p999: 0.0,
                mean: 0.0,
                max: 0.0,
            },
            statuses: BTreeMap::new(),
            late: 0,
            cpu_us_per_call: None,
            redis_cpu_us_per_call: None,
        };
        Step {
            factor,
            offered: factor * 100.0,
            sent: factor * 100.0,
            goodput,
            shed: 0.0,
            shed_p50_ms: shed_p50,
            ok_p50_ms: Some(0.5),
            ok_p99_ms: Some(ok_p99),
            other: 0,
            late: 0,
            report,
        }
    }

    #[test]
    fn each_target_fails_when_its_figure_misses_it() {
        let steps = [
            a_step(0.5, 50.0, None, 1.0),
            a_step(1.0, 100.0, None, 1.5),
            a_step(3.0, 95.0, Some(0.4), 1.9),
            a_step(5.0, 80.0, Some(1.5), 2.5),
        ];
        let checks = checks(100.0, &steps);
        let failed: Vec<&str> = checks
            .iter()
            .filter(|c| !c.met)
            .map(|c| c.target.as_str())
            .collect();
        assert_eq!(
            failed,
            [
                "5C: goodput",
                "5C: median time to refuse",
                "5C: p99 of accepted calls"
            ]
        );
    }
}
