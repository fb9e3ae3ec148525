//! `sticky-noop`: the transport floor as its own process. Prints the bound
//! address on its first line of stdout, then serves until killed.

use std::net::SocketAddr;
use std::process::ExitCode;

use clap::Parser;
use sticky_bench::noop;

/// A no-op sticky-routing server with the service's transport settings.
#[derive(Parser)]
#[command(version, about)]
struct Args {
    /// Where to listen; port 0 picks a free one.
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Same meaning as the service's STICKY_ROUTING_MAX_IN_FLIGHT (whose default,
    /// 128 per CPU, is 256 on a 2-core machine).
    #[arg(long, default_value_t = 256)]
    max_in_flight: usize,
    /// Tokio worker threads, as the service's WORKER_THREADS (default: CPUs).
    #[arg(long)]
    worker_threads: Option<usize>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Some(threads) = args.worker_threads {
        runtime.worker_threads(threads.max(1));
    }
    let result = match runtime.enable_all().build() {
        Ok(runtime) => runtime.block_on(serve(&args)),
        Err(error) => Err(error.into()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("sticky-noop: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(args: &Args) -> Result<(), sticky_bench::BoxError> {
    {
        let (listener, addr) = noop::bind(args.listen).await?;
        println!("{addr}");
        noop::serve(listener, args.max_in_flight).await
    }
}
