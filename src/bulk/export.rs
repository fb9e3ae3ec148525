//! `sticky-routing export`: built on its own branch; this stub keeps the
//! command line's dispatch compiling until it lands.

use std::collections::HashMap;
use std::process::ExitCode;

/// Runs `sticky-routing export ARGS`.
pub fn run(_args: &[String], _env: &HashMap<String, String>) -> ExitCode {
    eprintln!("sticky-routing export: not built yet");
    ExitCode::from(2)
}
