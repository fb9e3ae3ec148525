//! The command line: `[--config FILE] | --help | --version`, or a bulk
//! subcommand (`import ...`, `export ...`, `report ...`, `replay ...`) that reads its own
//! arguments.

use std::collections::HashMap;
use std::path::PathBuf;

use super::{ConfigError, Settings, declarations};

/// What the command line asks for.
#[derive(Debug)]
pub enum CommandLine {
    /// Serve with these settings.
    Run(Box<Settings>),
    /// Print this text (`--help`, `--version`) and exit 0.
    Exit(String),
    /// `sticky-routing import ARGS`: the bulk import reads the arguments.
    Import(Vec<String>),
    /// `sticky-routing export ARGS`: the bulk export reads the arguments.
    Export(Vec<String>),
    /// `sticky-routing report ARGS`: the experiment report reads the
    /// arguments.
    Report(Vec<String>),
    /// `sticky-routing replay ARGS`: the offline replay reads the
    /// arguments.
    Replay(Vec<String>),
}

/// `--help`: the usage line, then every setting from its declaration.
fn usage() -> String {
    let mut text = String::from(
        "sticky-routing: sticky connector routing over gRPC, state in Redis\n\n\
         usage: sticky-routing [--config FILE]           serve gRPC\n\
         \x20      sticky-routing import [OPTIONS] FILE|-  apply historical outcomes (--help)\n\
         \x20      sticky-routing export [OPTIONS] [FILE]  write every habit as rows (--help)\n\
         \x20      sticky-routing report [OPTIONS]         the rollout's uplift per merchant (--help)\n\
         \x20      sticky-routing replay [OPTIONS] FILE|-  what pinning would have done on a history (--help)\n\n\
         Settings come from built-in defaults, then the TOML file (--config FILE or\n\
         STICKY_ROUTING_CONFIG), then these environment variables:\n",
    );
    for about in declarations::all() {
        let mut lines = about.help.lines();
        let first = lines.next().unwrap_or_default();
        let default = about
            .shown_default()
            .map(|d| format!(" (default: {d})"))
            .unwrap_or_default();
        text.push_str(&format!("  {:<44} {first}{default}\n", about.variable()));
        for more in lines {
            text.push_str(&format!("  {:<44} {more}\n", ""));
        }
    }
    text.push_str("Durations take seconds or units: 90d, 12h, 250ms. Logs: RUST_LOG (info).\n");
    text.push_str("Traces (none unless an endpoint is set), by the OpenTelemetry variables:\n  ");
    text.push_str(&crate::telemetry::OTEL_VARIABLES.join("\n  "));
    text
}

/// Reads the process's arguments and environment.
pub fn from_process() -> Result<CommandLine, ConfigError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    parse_command_line(&args, &process_env())
}

/// The process's environment, as settings read it (names and values that
/// are not UTF-8 are left out).
pub fn process_env() -> HashMap<String, String> {
    std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect()
}

/// Parses the arguments and loads the settings.
pub fn parse_command_line(
    args: &[String],
    env: &HashMap<String, String>,
) -> Result<CommandLine, ConfigError> {
    let usage_error = |problem: String| ConfigError::new(vec![problem]);
    match args.first().map(String::as_str) {
        Some("import") => return Ok(CommandLine::Import(args[1..].to_vec())),
        Some("export") => return Ok(CommandLine::Export(args[1..].to_vec())),
        Some("report") => return Ok(CommandLine::Report(args[1..].to_vec())),
        Some("replay") => return Ok(CommandLine::Replay(args[1..].to_vec())),
        _ => {}
    }
    let mut config_file = None;
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "-h" | "--help" => return Ok(CommandLine::Exit(usage())),
            "-V" | "--version" => {
                return Ok(CommandLine::Exit(format!(
                    "sticky-routing {}",
                    env!("CARGO_PKG_VERSION")
                )));
            }
            "--config" => match rest.next() {
                Some(path) => config_file = Some(PathBuf::from(path)),
                None => return Err(usage_error("--config needs a FILE".into())),
            },
            other => match other.strip_prefix("--config=") {
                Some(path) => config_file = Some(PathBuf::from(path)),
                None => {
                    return Err(usage_error(format!(
                        "unknown argument `{other}`; see --help"
                    )));
                }
            },
        }
    }
    Settings::load(config_file.as_deref(), env).map(|s| CommandLine::Run(Box::new(s)))
}
