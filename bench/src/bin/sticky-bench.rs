//! `sticky-bench`: starts its own Redis, the service and the no-op floor,
//! runs the same load against each and against Redis directly, and prints
//! the comparison as a markdown table (`make bench`). With `--overload` it
//! runs the overload study instead (`make bench OVERLOAD=1`); with
//! `--platform`, issue 41's study at a platform's count of merchants
//! (`make bench` runs it after the comparison).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use sticky_bench::BoxError;
use sticky_bench::cli::{WorkloadArgs, parse_duration};
use sticky_bench::compare::{CompareSpec, Comparison, compare, memory_only};
use sticky_bench::otlp_sink::OtlpSink;
use sticky_bench::overload::{OverloadSpec, OverloadStudy, overload};
use sticky_bench::platform::{PlatformArgs, PlatformSpec, platform};
use sticky_bench::platform_report::PlatformStudy;

#[derive(Parser)]
#[command(
    version,
    about = "The service against its transport and storage floors."
)]
struct Args {
    /// Measured length of each run.
    #[arg(short = 'z', long, value_parser = parse_duration, default_value = "10s")]
    duration: Duration,
    /// Unmeasured warm-up before each run.
    #[arg(long, value_parser = parse_duration, default_value = "2s")]
    warmup: Duration,
    /// Concurrent workers: calls in flight.
    #[arg(short = 'c', long, default_value_t = 128)]
    concurrency: usize,
    /// HTTP/2 connections the workers share (default: 4, as several
    /// orchestrator pods would open).
    #[arg(long)]
    connections: Option<usize>,
    /// Redis pool size of the service and of the storage floor.
    #[arg(long, default_value_t = 2)]
    pool_size: usize,
    /// Runtime threads of the service and of the no-op floor alike
    /// (default: one per CPU, the service's own default).
    #[arg(long, default_value_t = cpus())]
    worker_threads: usize,
    /// Customers per memory measurement (0 skips it).
    #[arg(long, default_value_t = 100_000)]
    memory_customers: u64,
    /// Extra environment for the service, NAME=VALUE (repeatable).
    #[arg(long = "service-env", value_parser = parse_env)]
    service_env: Vec<(String, String)>,
    /// The redis-server binary.
    #[arg(long, default_value = "redis-server")]
    redis_server: String,
    /// The service binary to measure (default: the one beside this).
    #[arg(long)]
    service_bin: Option<PathBuf>,
    /// Only the Redis memory per customer, no service and no load: to
    /// compare servers (`--redis-server valkey-server`).
    #[arg(long, conflicts_with_all = ["quick", "overload"])]
    memory_only: bool,
    /// Only the no-op and service runs, for A/B experiments; with
    /// `--platform`, one round.
    #[arg(long)]
    quick: bool,
    /// Run issue 41's platform study instead: RecordOutcome at
    /// `--platform-merchants` over `--platform-tenants`, breaker on and
    /// `pin_connector` sent, against the breaker off without it.
    #[arg(long, conflicts_with_all = ["overload", "memory_only"])]
    platform: bool,
    #[command(flatten)]
    platform_args: PlatformArgs,
    /// Run the overload study instead: capacity C, then 0.5C to 5C offered.
    #[arg(long)]
    overload: bool,
    /// Overload study: open-loop dispatchers (each call runs in a task of
    /// its own, so nothing bounds the calls in flight).
    #[arg(long, default_value_t = 16)]
    dispatchers: usize,
    /// Overload study: the deadline of every call.
    #[arg(long, value_parser = parse_duration, default_value = "1s")]
    deadline: Duration,
    /// Overload study: run the service on these CPUs only (a taskset list,
    /// e.g. `0`); run sticky-bench itself, and so Redis, on the others.
    #[arg(long)]
    server_cpus: Option<String>,
    /// Export the service's traces to a span sink in this process, keeping
    /// this share of traces (OTEL_TRACES_SAMPLER=traceidratio): what
    /// tracing costs. Off by default: no endpoint, no exporter.
    #[arg(long)]
    trace_sample: Option<f64>,
    /// Where logs, report.md and report.json go.
    #[arg(long, default_value = "target/bench")]
    out: PathBuf,
    #[command(flatten)]
    workload: WorkloadArgs,
}

async fn overload_study(args: Args) -> ExitCode {
    let spec = OverloadSpec {
        duration: args.duration,
        warmup: args.warmup,
        connections: args.connections.unwrap_or(4),
        dispatchers: args.dispatchers,
        deadline: args.deadline,
        pool_size: args.pool_size,
        workload: args.workload,
        service_env: args.service_env,
        redis_server: args.redis_server,
        service_bin: args.service_bin,
        server_cpus: args.server_cpus,
        out_dir: args.out.clone(),
    };
    let study = overload(spec).await;
    finish(&args.out, "overload", study, OverloadStudy::markdown)
}

/// A run's end: its report printed as markdown and written to `NAME.md` and
/// `NAME.json` in `dir` (a failure to write is reported, not fatal), or its
/// error; the exit code says which.
fn finish<T: serde::Serialize>(
    dir: &Path,
    name: &str,
    result: Result<T, BoxError>,
    markdown: fn(&T) -> String,
) -> ExitCode {
    match result {
        Ok(report) => {
            let markdown = markdown(&report);
            println!("{markdown}");
            write_reports(dir, name, &markdown, &report);
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("sticky-bench: {error}");
            ExitCode::FAILURE
        }
    }
}

/// `NAME.md` and `NAME.json` in `dir`; a failure is reported, not fatal.
fn write_reports(dir: &Path, name: &str, markdown: &str, report: &impl serde::Serialize) {
    let written = std::fs::write(dir.join(format!("{name}.md")), markdown).and_then(|()| {
        let json = serde_json::to_string_pretty(report).map_err(std::io::Error::other)?;
        std::fs::write(dir.join(format!("{name}.json")), json)
    });
    if let Err(error) = written {
        eprintln!("sticky-bench: cannot write the report files: {error}");
    }
}

fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
}

fn parse_env(text: &str) -> Result<(String, String), String> {
    text.split_once('=')
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .ok_or_else(|| format!("expected NAME=VALUE, got {text:?}"))
}

#[tokio::main]
async fn main() -> ExitCode {
    let mut args = Args::parse();
    let sink = match args.trace_sample {
        Some(ratio) => match OtlpSink::start().await {
            Ok(sink) => {
                args.service_env.extend([
                    (
                        "OTEL_EXPORTER_OTLP_ENDPOINT".to_owned(),
                        format!("http://{}", sink.addr),
                    ),
                    ("OTEL_TRACES_SAMPLER".to_owned(), "traceidratio".to_owned()),
                    ("OTEL_TRACES_SAMPLER_ARG".to_owned(), ratio.to_string()),
                ]);
                Some(sink)
            }
            Err(error) => {
                eprintln!("sticky-bench: cannot start the span sink: {error}");
                return ExitCode::FAILURE;
            }
        },
        None => None,
    };
    let code = run(args).await;
    if let Some(sink) = sink {
        println!("spans received by the sink: {}", sink.spans());
    }
    code
}

async fn platform_study(args: Args) -> ExitCode {
    let spec = PlatformSpec {
        args: args.platform_args,
        duration: args.duration,
        warmup: args.warmup,
        concurrency: args.concurrency,
        connections: args.connections.unwrap_or(4),
        pool_size: args.pool_size,
        combos: args.workload.combos,
        quick: args.quick,
        service_env: args.service_env,
        redis_server: args.redis_server,
        service_bin: args.service_bin,
        out_dir: args.out.clone(),
    };
    let study = platform(spec).await;
    finish(&args.out, "platform", study, PlatformStudy::markdown)
}

async fn run(args: Args) -> ExitCode {
    if args.overload {
        return overload_study(args).await;
    }
    if args.platform {
        return platform_study(args).await;
    }
    if args.memory_only {
        let measured = memory_only(
            &args.redis_server,
            &args.out,
            args.memory_customers,
            args.workload.merchants,
        )
        .await;
        return finish(&args.out, "memory", measured, Comparison::markdown);
    }
    let spec = CompareSpec {
        duration: args.duration,
        warmup: args.warmup,
        concurrency: args.concurrency,
        connections: args.connections.unwrap_or(4),
        pool_size: args.pool_size,
        worker_threads: args.worker_threads,
        workload: args.workload,
        memory_customers: args.memory_customers,
        service_env: args.service_env,
        redis_server: args.redis_server,
        service_bin: args.service_bin,
        quick: args.quick,
        out_dir: args.out.clone(),
    };
    let comparison = compare(spec).await;
    finish(&args.out, "report", comparison, Comparison::markdown)
}
