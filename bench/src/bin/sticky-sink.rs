//! `sticky-sink`: the span sink of `sticky-bench --trace-sample` as its own
//! process, for scripts that run the service themselves
//! (`scripts/measure-instructions.sh` with `TRACE_SAMPLE`). Prints its
//! OTLP/gRPC endpoint on the first line of stdout, and the spans it
//! received on stderr when stdin closes or it is interrupted.

use std::process::ExitCode;

use sticky_bench::otlp_sink::OtlpSink;
use tokio::io::AsyncReadExt as _;

#[tokio::main]
async fn main() -> ExitCode {
    let sink = match OtlpSink::start().await {
        Ok(sink) => sink,
        Err(error) => {
            eprintln!("sticky-sink: {error}");
            return ExitCode::FAILURE;
        }
    };
    println!("http://{}", sink.addr);
    let mut stdin = tokio::io::stdin();
    let mut buffer = [0u8; 64];
    loop {
        tokio::select! {
            read = stdin.read(&mut buffer) => {
                if !matches!(read, Ok(n) if n > 0) {
                    break;
                }
            }
            _ = tokio::signal::ctrl_c() => break,
        }
    }
    eprintln!("spans received: {}", sink.spans());
    ExitCode::SUCCESS
}
