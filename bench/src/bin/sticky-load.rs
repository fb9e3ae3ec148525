//! `sticky-load`: a ghz-like load generator for sticky-routing, on the
//! service's own generated client. Point it at the service, at the no-op
//! floor (`sticky-noop`), or with `--redis` straight at Redis (the storage
//! floor).

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use sticky_bench::BoxError;
use sticky_bench::cli::{WorkloadArgs, parse_duration};
use sticky_bench::report::Report;
use sticky_bench::run::{self, RunSpec, Stop};
use sticky_bench::target::{StoreWrite, Target};
use sticky_bench::workload::{CallKind, Generator};

#[derive(Parser)]
#[command(version, about = "Load generator for sticky-routing (ghz-like flags).")]
struct Args {
    /// The server, host:port. Ignored with --redis.
    #[arg(default_value = "127.0.0.1:50051")]
    host: String,
    /// The call: record (RecordOutcome), pin (GetPin) or mix.
    #[arg(long, value_enum, default_value = "record")]
    call: CallKind,
    /// Concurrent workers.
    #[arg(short = 'c', long, default_value_t = 50)]
    concurrency: usize,
    /// HTTP/2 connections the workers share.
    #[arg(long, default_value_t = 1)]
    connections: usize,
    /// Total calls; ignored with --duration.
    #[arg(short = 'n', long, default_value_t = 200)]
    total: u64,
    /// Run for this long instead of a count (e.g. 10s).
    #[arg(short = 'z', long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Fixed rate in calls per second across all workers (open loop).
    #[arg(long)]
    rps: Option<f64>,
    /// Per-call deadline, sent as grpc-timeout.
    #[arg(short = 't', long, value_parser = parse_duration, default_value = "20s")]
    timeout: Duration,
    /// Record one success for every (customer, combo) before the run.
    #[arg(long)]
    fill: bool,
    /// Skip gRPC: issue the same Redis operations through fred at this URL.
    #[arg(long)]
    redis: Option<String>,
    /// With --redis: the success write as the service's script or as MULTI.
    #[arg(long, value_enum, default_value = "script")]
    store_write: StoreWrite,
    /// With --redis: fred pool size.
    #[arg(long, default_value_t = 2)]
    pool_size: usize,
    /// Output: summary (ghz's text) or json.
    #[arg(short = 'O', long, default_value = "summary", value_parser = ["summary", "json"])]
    format: String,
    /// Seed for the request sequence.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[command(flatten)]
    workload: WorkloadArgs,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    match load(&args).await {
        Ok(report) => {
            if args.format == "json" {
                match serde_json::to_string_pretty(&report) {
                    Ok(json) => println!("{json}"),
                    Err(error) => eprintln!("sticky-load: {error}"),
                }
            } else {
                print!("{}", report.text());
            }
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("sticky-load: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn load(args: &Args) -> Result<Report, BoxError> {
    let generator = Arc::new(Generator::new(args.workload.workload(args.call))?);
    let target = match &args.redis {
        Some(url) => Target::store(url, args.pool_size, args.store_write, args.timeout).await?,
        None => Target::grpc(&args.host, args.connections, args.timeout).await?,
    };
    if args.fill {
        let filled = run::fill(&target, Arc::clone(&generator), args.concurrency).await?;
        eprintln!("filled: {}", Report::new("fill", &filled).text());
    }
    let spec = RunSpec {
        concurrency: args.concurrency,
        stop: args.duration.map_or(Stop::Count(args.total), Stop::After),
        rate: args.rps,
        seed: args.seed,
    };
    let result = run::run(&target, generator, spec).await?;
    target.close().await;
    let name = match &args.redis {
        Some(_) => format!("redis {:?}", args.call),
        None => format!("{} {:?}", args.host, args.call),
    };
    Ok(Report::new(name, &result))
}
