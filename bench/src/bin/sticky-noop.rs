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
    /// Same meaning as the service's MAX_IN_FLIGHT_PER_CONNECTION.
    #[arg(long, default_value_t = 4096)]
    max_in_flight_per_connection: usize,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let result = async {
        let (listener, addr) = noop::bind(args.listen).await?;
        println!("{addr}");
        noop::serve(listener, args.max_in_flight_per_connection).await
    }
    .await;
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("sticky-noop: {error}");
            ExitCode::FAILURE
        }
    }
}
