//! The `sticky-routing` binary: parse the settings, build, serve, drain;
//! or run a bulk subcommand (`import`, `export`, `report`, `replay`).
//!
//! The runtime is built by hand, after the settings are parsed, so that its
//! thread count is a checked setting like any other.

use std::process::ExitCode;

use sticky_routing::config::{self, CommandLine};
use sticky_routing::process::{print_to_stdout, shutdown_signal};
use sticky_routing::startup::Application;
use sticky_routing::telemetry;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let settings = match config::from_process() {
        Ok(CommandLine::Run(settings)) => settings,
        Ok(CommandLine::Exit(text)) => {
            print_to_stdout(&format!("{text}\n"));
            return ExitCode::SUCCESS;
        }
        Ok(CommandLine::Import(args)) => {
            return sticky_routing::bulk::import::run(&args, &config::process_env());
        }
        Ok(CommandLine::Export(args)) => {
            return sticky_routing::bulk::export::run(&args, &config::process_env());
        }
        Ok(CommandLine::Report(args)) => {
            return sticky_routing::bulk::report::run(&args, &config::process_env());
        }
        Ok(CommandLine::Replay(args)) => {
            return sticky_routing::bulk::replay::run(&args, &config::process_env());
        }
        Err(error) => {
            eprintln!("sticky-routing: {error}");
            return ExitCode::from(2);
        }
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(settings.worker_threads)
        .enable_all()
        .build();
    let runtime = match runtime {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("sticky-routing: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    // Inside the runtime: the trace exporter's channel lives on it.
    let initialised = {
        let _inside = runtime.enter();
        telemetry::init(&settings.telemetry)
    };
    let telemetry = match initialised {
        Ok(guard) => guard,
        Err(error) => {
            eprintln!("sticky-routing: {error}");
            return ExitCode::from(2);
        }
    };
    let code = runtime.block_on(serve(*settings));
    // Sends the spans still queued while the runtime still runs.
    drop(telemetry);
    code
}

async fn serve(settings: config::Settings) -> ExitCode {
    let names: Vec<String> = std::env::vars_os()
        .filter_map(|(k, _)| k.into_string().ok())
        .collect();
    for name in config::unknown_variables(names.iter().map(String::as_str)) {
        tracing::warn!(variable = name, "unknown configuration variable ignored");
    }
    let app = match Application::build(settings).await {
        Ok(app) => app,
        Err(error) => {
            tracing::error!(%error, "cannot start");
            return ExitCode::FAILURE;
        }
    };
    match app.run_until_stopped(shutdown_signal()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            tracing::error!(%error, "stopped with an error");
            ExitCode::FAILURE
        }
    }
}
