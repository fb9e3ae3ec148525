//! `sticky-bench`'s comparison: one Redis, the service and the no-op floor,
//! all started here; the same generator and concurrency against each; the
//! service's figures as ratios to its floors, checked against the targets.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::BoxError;
use crate::cli::WorkloadArgs;
use crate::cpu::CpuMeter;
use crate::procs::{self, Proc};
use crate::redis_info::{RedisProbe, Snapshot};
use crate::report::Report;
use crate::run::{self, RunSpec, Stop};
use crate::target::{StoreWrite, Target};
use crate::workload::{CallKind, Generator, Workload};

/// What to run.
#[derive(Debug, Clone)]
pub struct CompareSpec {
    pub duration: Duration,
    pub warmup: Duration,
    pub concurrency: usize,
    pub connections: usize,
    pub pool_size: usize,
    /// Runtime threads of the service and of the no-op floor alike.
    pub worker_threads: usize,
    pub workload: WorkloadArgs,
    /// Customers per memory measurement; 0 skips it.
    pub memory_customers: u64,
    pub service_env: Vec<(String, String)>,
    pub redis_server: String,
    /// The service binary; `None` is the `sticky-routing` beside this one.
    pub service_bin: Option<PathBuf>,
    /// Only the no-op and service runs: for A/B experiments.
    pub quick: bool,
    pub out_dir: PathBuf,
}

/// Round trips the service made per call in one run.
#[derive(Debug, Clone, Serialize)]
pub struct RoundTrips {
    pub call: String,
    pub commands_per_call: BTreeMap<String, f64>,
    pub reads_per_call: f64,
    /// Redis's CPU (user + system, `/proc`) per call over the same run.
    pub redis_cpu_us_per_call: Option<f64>,
}

impl RoundTrips {
    fn with_redis_cpu(self, micros: Option<f64>) -> Self {
        Self {
            redis_cpu_us_per_call: micros,
            ..self
        }
    }
}

/// A target from an issue, with what was measured.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub target: String,
    pub measured: String,
    pub goal: String,
    pub met: bool,
}

impl Check {
    /// The "Targets" section of a report: one row per check, a miss in bold.
    pub fn markdown_table(checks: &[Check]) -> String {
        let mut out = String::from(
            "\n### Targets\n\n| target | measured | goal | met |\n|---|---:|---:|:---:|\n",
        );
        for c in checks {
            out.push_str(&format!(
                "| {} | {} | {} | {} |\n",
                c.target,
                c.measured,
                c.goal,
                if c.met { "yes" } else { "**no**" }
            ));
        }
        out
    }
}

/// `used_memory` growth per customer.
#[derive(Debug, Clone, Serialize)]
pub struct MemoryRow {
    pub customers: u64,
    pub combos: u64,
    pub bytes_per_customer: f64,
}

/// Everything one comparison measured.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    pub machine: String,
    pub setup: String,
    pub runs: Vec<(Report, String)>,
    pub round_trips: Vec<RoundTrips>,
    pub checks: Vec<Check>,
    pub service_peak_rss_bytes: u64,
    pub memory: Vec<MemoryRow>,
}

struct Bench {
    spec: CompareSpec,
    probe: RedisProbe,
    noop: Target,
    service: Target,
    store: Target,
    multi: Target,
    /// The processes whose CPU each run reads from `/proc`.
    noop_pid: Option<u32>,
    service_pid: Option<u32>,
    redis_pid: Option<u32>,
}

/// Which of the bench's targets a run drives.
#[derive(Debug, Clone, Copy, PartialEq)]
enum On {
    Noop,
    Service,
    /// The storage floor (EVALSHA or HGETALL through `RedisStore`).
    Store,
    /// The storage floor's MULTI write.
    Multi,
}

/// A measured run with the CPU the server and Redis spent on it.
struct Measured {
    result: run::RunResult,
    server_cpu: Option<f64>,
    redis_cpu: Option<f64>,
}

impl Measured {
    fn report(&self, name: impl Into<String>) -> Report {
        Report::new(name, &self.result).with_cpu(self.server_cpu, self.redis_cpu)
    }
}

impl Bench {
    fn target(&self, on: On) -> &Target {
        match on {
            On::Noop => &self.noop,
            On::Service => &self.service,
            On::Store => &self.store,
            On::Multi => &self.multi,
        }
    }

    /// The process serving `on`'s calls; the storage floor runs in this one,
    /// beside the generator, so it has none of its own.
    fn server_pid(&self, on: On) -> Option<u32> {
        match on {
            On::Noop => self.noop_pid,
            On::Service => self.service_pid,
            On::Store | On::Multi => None,
        }
    }

    /// An unmeasured warm-up, then a measured run.
    async fn measure(
        &self,
        on: On,
        call: CallKind,
        rate: Option<f64>,
    ) -> Result<Measured, BoxError> {
        let generator = self.warm_up(on, call, rate).await?;
        self.timed(on, generator, rate).await
    }

    /// The service's RecordOutcome with attempt ids on every call and
    /// `--retry-ratio` of them repeats: what de-duplication costs.
    async fn measure_with_attempt_ids(&self) -> Result<Measured, BoxError> {
        let mut workload = self.spec.workload.workload(CallKind::Record);
        workload.attempt_ids = true;
        let generator = self.warm_up_with(On::Service, workload, None).await?;
        self.timed(On::Service, generator, None).await
    }

    /// A service run with the Redis counters read around it (after the
    /// warm-up, so only measured calls are counted).
    async fn measure_service(
        &self,
        call: CallKind,
        rate: Option<f64>,
    ) -> Result<(Measured, RoundTrips), BoxError> {
        let generator = self.warm_up(On::Service, call, rate).await?;
        let before: Snapshot = self.probe.snapshot().await?;
        let measured = self.timed(On::Service, generator, rate).await?;
        let after = self.probe.snapshot().await?;
        let calls = measured.result.calls();
        let trips = RoundTrips {
            call: call_name(call).to_owned(),
            commands_per_call: before.commands_per_call(&after, calls),
            reads_per_call: before.reads_per_call(&after, calls),
            redis_cpu_us_per_call: None,
        };
        Ok((measured, trips))
    }

    async fn warm_up(
        &self,
        on: On,
        call: CallKind,
        rate: Option<f64>,
    ) -> Result<Arc<Generator>, BoxError> {
        self.warm_up_with(on, self.spec.workload.workload(call), rate)
            .await
    }

    /// `workload`'s generator, after an unmeasured warm-up run of it.
    async fn warm_up_with(
        &self,
        on: On,
        workload: Workload,
        rate: Option<f64>,
    ) -> Result<Arc<Generator>, BoxError> {
        let generator = Arc::new(Generator::new(workload)?);
        if !self.spec.warmup.is_zero() {
            let spec = self.run_spec(self.spec.warmup, rate, 7);
            run::run(self.target(on), Arc::clone(&generator), spec).await?;
        }
        Ok(generator)
    }

    /// One measured run, with the CPU of the server and of Redis read from
    /// `/proc` before and after it.
    async fn timed(
        &self,
        on: On,
        generator: Arc<Generator>,
        rate: Option<f64>,
    ) -> Result<Measured, BoxError> {
        let server = self.server_pid(on).and_then(CpuMeter::start);
        let redis = self.redis_pid.and_then(CpuMeter::start);
        let result = run::run(
            self.target(on),
            generator,
            self.run_spec(self.spec.duration, rate, 1),
        )
        .await?;
        let calls = result.calls();
        Ok(Measured {
            server_cpu: server.and_then(|m| m.micros_per_call(calls)),
            redis_cpu: redis.and_then(|m| m.micros_per_call(calls)),
            result,
        })
    }

    fn run_spec(&self, length: Duration, rate: Option<f64>, seed: u64) -> RunSpec {
        RunSpec {
            concurrency: self.spec.concurrency,
            stop: Stop::After(length),
            rate,
            seed,
        }
    }
}

/// Only the memory rows (`sticky-bench --memory-only`): the same fill and
/// `used_memory` reading as the full comparison's, on a server of their own,
/// in a minute instead of half an hour. It is how the README's figures for
/// Redis and Valkey side by side were measured (`--redis-server
/// valkey-server`): a second full comparison would only repeat throughput
/// rows that a server swap does not explain on this shared machine.
pub async fn memory_only(
    redis_server: &str,
    out_dir: &std::path::Path,
    customers: u64,
    merchants: u64,
) -> Result<Comparison, BoxError> {
    std::fs::create_dir_all(out_dir)?;
    let out_dir = out_dir.canonicalize()?;
    let redis = procs::start_redis(redis_server, &out_dir).await?;
    let probe = RedisProbe::connect(&format!("redis://{}", redis.addr)).await?;
    let machine = format!("{}; Redis {}", machine(), probe.version().await?);
    let mut memory = Vec::new();
    for combos in [2, 30] {
        eprintln!("memory: {customers} customers × {combos} combos");
        let bytes = probe
            .bytes_per_customer(customers, combos, merchants)
            .await?;
        memory.push(MemoryRow {
            customers,
            combos,
            bytes_per_customer: bytes,
        });
    }
    probe.quit().await;
    drop(redis);
    Ok(Comparison {
        machine,
        setup: "memory only".into(),
        runs: Vec::new(),
        round_trips: Vec::new(),
        checks: Vec::new(),
        service_peak_rss_bytes: 0,
        memory,
    })
}

/// Runs the whole comparison. Progress goes to stderr.
pub async fn compare(mut spec: CompareSpec) -> Result<Comparison, BoxError> {
    std::fs::create_dir_all(&spec.out_dir)?;
    // redis-server changes into --dir before it opens its log file.
    spec.out_dir = spec.out_dir.canonicalize()?;
    let redis = procs::start_redis(&spec.redis_server, &spec.out_dir).await?;
    let url = format!("redis://{}", redis.addr);
    let mut env = vec![(
        "STICKY_ROUTING_REDIS_POOL_SIZE".to_owned(),
        spec.pool_size.to_string(),
    )];
    env.extend(spec.service_env.iter().cloned());
    let service_proc: Proc =
        procs::start_service(spec.service_bin.as_deref(), &url, &env, &spec.out_dir).await?;
    let noop_proc = procs::start_noop(spec.worker_threads).await?;
    let timeout = Duration::from_secs(5);
    let probe = RedisProbe::connect(&url).await?;
    let bench = Bench {
        noop: Target::grpc(&noop_proc.addr.to_string(), spec.connections, timeout).await?,
        service: Target::grpc(&service_proc.addr.to_string(), spec.connections, timeout).await?,
        store: Target::store(&url, spec.pool_size, StoreWrite::Script, timeout).await?,
        multi: Target::store(&url, spec.pool_size, StoreWrite::Multi, timeout).await?,
        noop_pid: noop_proc.child.id(),
        service_pid: service_proc.child.id(),
        redis_pid: redis.child.id(),
        probe,
        spec: spec.clone(),
    };
    let machine = format!("{}; Redis {}", machine(), bench.probe.version().await?);

    eprintln!(
        "filling {} customers × {} combos through the service",
        spec.workload.customers, spec.workload.combos
    );
    let generator = Arc::new(Generator::new(spec.workload.workload(CallKind::Record))?);
    let filled = run::fill(&bench.service, generator, spec.concurrency).await?;
    if filled.ok() != filled.calls() {
        return Err(format!("the fill failed: {:?}", filled.statuses).into());
    }

    let mut runs = Vec::new();
    let mut round_trips = Vec::new();
    let mut checks = Vec::new();
    for (call, goal) in [(CallKind::Record, 0.5), (CallKind::Pin, 0.6)] {
        let name = call_name(call);
        eprintln!("{name}: no-op floor");
        let noop = bench
            .measure(On::Noop, call, None)
            .await?
            .report(format!("no-op {name}"));
        eprintln!("{name}: service");
        let (measured, trips) = bench.measure_service(call, None).await?;
        let service = measured.report(format!("service {name}"));
        let vs_noop = service.rps / noop.rps.max(1e-9);
        let cpu_vs_noop = cpu_ratio(&service, &noop);
        // Bracketed by two runs without attempt ids: consecutive runs of
        // one build drift by several percent on this machine, and the mean
        // of the runs either side cancels a steady drift.
        let deduplicated = if call == CallKind::Record {
            eprintln!("{name}: service with attempt ids");
            let with_ids = bench.measure_with_attempt_ids().await?.report(format!(
                "service {name}, attempt ids ({:.0}% retries)",
                spec.workload.retry_ratio * 100.0
            ));
            eprintln!("{name}: service again, without attempt ids");
            let again = bench
                .measure(On::Service, call, None)
                .await?
                .report(format!("service {name} again"));
            let plain = f64::midpoint(service.rps, again.rps);
            let ratio = with_ids.rps / plain.max(1e-9);
            let drift = again.rps / service.rps.max(1e-9);
            Some([
                (
                    with_ids,
                    format!("{ratio:.2}× without attempt ids (mean of the runs either side)"),
                ),
                (again, format!("{drift:.2}× the first run")),
            ])
        } else {
            None
        };
        checks.push(Check {
            target: format!("{name} service CPU per call vs no-op"),
            measured: cpu_vs_noop.map_or_else(|| "—".to_owned(), |r| format!("{r:.2}×")),
            goal: "≤ 1.50×".into(),
            met: cpu_vs_noop.is_some_and(|r| r <= 1.5),
        });
        let service_ratio = format!(
            "{vs_noop:.2}× no-op; CPU {}× no-op",
            cpu_vs_noop.map_or_else(|| "—".to_owned(), |r| format!("{r:.2}"))
        );
        if spec.quick {
            runs.push((noop, "floor".to_owned()));
            runs.push((service, service_ratio));
            runs.extend(deduplicated.into_iter().flatten());
            round_trips.push(trips.with_redis_cpu(measured.redis_cpu));
            continue;
        }
        eprintln!("{name}: storage floor");
        let store = bench
            .measure(On::Store, call, None)
            .await?
            .report(format!("redis {name} (fred, no gRPC)"));
        let vs_store = service.rps / store.rps.max(1e-9);
        checks.push(Check {
            target: format!("{name} throughput vs no-op"),
            measured: format!("{vs_noop:.2}×"),
            goal: format!("≥ {goal:.2}×"),
            met: vs_noop >= goal,
        });
        let commands: f64 = trips.commands_per_call.values().sum();
        checks.push(Check {
            target: format!("Redis commands per {name} (existing customer)"),
            measured: format!("{commands:.3}"),
            goal: "1".into(),
            met: (commands - 1.0).abs() < 0.005,
        });
        checks.push(Check {
            target: format!("Redis socket reads per {name}"),
            measured: format!("{:.3}", trips.reads_per_call),
            goal: "≤ 1".into(),
            met: trips.reads_per_call <= 1.0,
        });
        eprintln!("{name}: service at half its maximum rate");
        let half_rate = service.rps / 2.0;
        let half = bench
            .measure(On::Service, call, Some(half_rate))
            .await?
            .report(format!("service {name} at {half_rate:.0}/s (half max)"));
        // The same rate on the no-op floor: the tail this machine gives any
        // gRPC server at that load, which bounds the service's from below.
        let noop_half = bench
            .measure(On::Noop, call, Some(half_rate))
            .await?
            .report(format!("no-op {name} at {half_rate:.0}/s"));
        let over_noop = half.latency_ms.p99 - noop_half.latency_ms.p99;
        checks.push(Check {
            target: format!("{name} p99 at half max throughput, over the no-op's at that rate"),
            measured: format!(
                "{over_noop:+.2} ms ({:.2} against {:.2})",
                half.latency_ms.p99, noop_half.latency_ms.p99
            ),
            goal: "≤ 1 ms".into(),
            met: over_noop <= 1.0,
        });
        runs.push((noop, "floor".to_owned()));
        runs.push((service, format!("{service_ratio}; {vs_store:.2}× redis")));
        let store_row = runs.len();
        runs.push((store, "floor".to_owned()));
        if call == CallKind::Record {
            eprintln!("{name}: storage floor with MULTI");
            let multi = bench
                .measure(On::Multi, call, None)
                .await?
                .report(format!("redis {name} as MULTI (fred, no gRPC)"));
            let ratio = multi.rps / runs[store_row].0.rps.max(1e-9);
            runs.push((multi, format!("{ratio:.2}× EVALSHA")));
            runs.extend(deduplicated.into_iter().flatten());
        }
        let late = format!("open loop, {} late", half.late);
        runs.push((half, late));
        let late = format!("open loop, {} late", noop_half.late);
        runs.push((noop_half, late));
        round_trips.push(trips.with_redis_cpu(measured.redis_cpu));
    }
    if spec.quick {
        let service_peak_rss_bytes = service_proc.rss().map_or(0, |(peak, _)| peak);
        return Ok(Comparison {
            machine,
            setup: "quick".into(),
            runs,
            round_trips,
            checks,
            service_peak_rss_bytes,
            memory: Vec::new(),
        });
    }
    eprintln!("mix: service");
    let mix = bench
        .measure(On::Service, CallKind::Mix, None)
        .await?
        .report(format!(
            "service mix ({:.0}% GetPin)",
            spec.workload.pin_ratio * 100.0
        ));
    runs.push((mix, String::new()));

    let service_peak_rss_bytes = service_proc.rss().map_or(0, |(peak, _)| peak);
    checks.push(Check {
        target: "service peak RSS".into(),
        measured: format!("{:.1} MB", mb(service_peak_rss_bytes)),
        goal: "≤ 64 MB".into(),
        met: service_peak_rss_bytes > 0 && mb(service_peak_rss_bytes) <= 64.0,
    });

    let mut memory = Vec::new();
    if spec.memory_customers > 0 {
        for combos in [2, 30] {
            eprintln!(
                "memory: {} customers × {combos} combos",
                spec.memory_customers
            );
            let bytes = bench
                .probe
                .bytes_per_customer(spec.memory_customers, combos, spec.workload.merchants)
                .await?;
            memory.push(MemoryRow {
                customers: spec.memory_customers,
                combos,
                bytes_per_customer: bytes,
            });
        }
    }

    for target in [bench.noop, bench.service, bench.store, bench.multi] {
        target.close().await;
    }
    bench.probe.quit().await;
    drop((service_proc, noop_proc, redis));
    let setup = format!(
        "concurrency {} over {} HTTP/2 connection(s); {} s per run after {} s of warm-up; {} customers (Zipf {}) over {} merchants, {} combos each; Redis pool {} (service and floor); {} worker thread(s) (service and no-op)",
        spec.concurrency,
        spec.connections,
        spec.duration.as_secs(),
        spec.warmup.as_secs(),
        spec.workload.customers,
        spec.workload.zipf,
        spec.workload.merchants,
        spec.workload.combos,
        spec.pool_size,
        spec.worker_threads,
    );
    Ok(Comparison {
        machine,
        setup,
        runs,
        round_trips,
        checks,
        service_peak_rss_bytes,
        memory,
    })
}

impl Comparison {
    /// The whole comparison as markdown.
    pub fn markdown(&self) -> String {
        let mut out = format!(
            "## sticky-routing benchmark\n\n- Machine: {}\n- Setup: {}\n\n",
            self.machine, self.setup
        );
        out.push_str(crate::report::MARKDOWN_HEADER);
        out.push('\n');
        for (report, ratio) in &self.runs {
            out.push_str(&report.markdown_row(ratio));
            out.push('\n');
        }
        out.push_str(&Check::markdown_table(&self.checks));
        out.push_str("\n### Redis work per call (service runs, from INFO deltas / calls)\n\n| call | commands per call | socket reads per call | Redis CPU µs per call |\n|---|---|---:|---:|\n");
        for t in &self.round_trips {
            let commands: Vec<String> = t
                .commands_per_call
                .iter()
                .map(|(c, n)| format!("{c} {n:.3}"))
                .collect();
            out.push_str(&format!(
                "| {} | {} | {:.3} | {} |\n",
                t.call,
                commands.join(", "),
                t.reads_per_call,
                t.redis_cpu_us_per_call
                    .map_or_else(|| "—".to_owned(), |v| format!("{v:.1}"))
            ));
        }
        if !self.memory.is_empty() {
            out.push_str("\n### Redis memory per customer (used_memory growth / customers)\n\n| customers | combos | bytes per customer | 1M customers | 10M | 100M |\n|---:|---:|---:|---:|---:|---:|\n");
            for m in &self.memory {
                let gib = |n: f64| m.bytes_per_customer * n / f64::from(1u32 << 30);
                out.push_str(&format!(
                    "| {} | {} | {:.0} | {:.2} GiB | {:.1} GiB | {:.0} GiB |\n",
                    m.customers,
                    m.combos,
                    m.bytes_per_customer,
                    gib(1e6),
                    gib(1e7),
                    gib(1e8)
                ));
            }
        }
        out
    }
}

/// The service's CPU per call over the no-op floor's, when both were read.
fn cpu_ratio(service: &Report, noop: &Report) -> Option<f64> {
    let (service, noop) = (service.cpu_us_per_call?, noop.cpu_us_per_call?);
    (noop > 0.0).then(|| service / noop)
}

fn call_name(call: CallKind) -> &'static str {
    match call {
        CallKind::Record => "RecordOutcome",
        CallKind::Pin => "GetPin",
        CallKind::Mix => "mix",
    }
}

fn mb(bytes: u64) -> f64 {
    #[allow(clippy::cast_precision_loss)]
    let mb = bytes as f64 / 1_048_576.0;
    mb
}

/// CPU count and model, from the OS.
pub fn machine() -> String {
    // Counted from cpuinfo, not from this process's affinity: the overload
    // study runs pinned to some of the CPUs.
    let info = std::fs::read_to_string("/proc/cpuinfo").ok();
    let cores = info.as_deref().map_or(0, |info| {
        info.lines().filter(|l| l.starts_with("processor")).count()
    });
    let model = info
        .and_then(|info| {
            info.lines().find_map(|l| {
                l.strip_prefix("model name")?
                    .split_once(':')
                    .map(|(_, m)| m.trim().to_owned())
            })
        })
        .unwrap_or_else(|| "unknown CPU".into());
    format!("{cores} cores, {model}")
}
