//! The command line: `[--config FILE] | --help | --version`.

use std::collections::HashMap;
use std::path::PathBuf;

use super::{ConfigError, Settings};

/// What the command line asks for.
#[derive(Debug)]
pub enum CommandLine {
    /// Serve with these settings.
    Run(Box<Settings>),
    /// Print this text (`--help`, `--version`) and exit 0.
    Exit(String),
}

const USAGE: &str = "\
sticky-routing: sticky connector routing over gRPC, state in Redis

usage: sticky-routing [--config FILE]

Settings come from built-in defaults, then the TOML file (--config FILE or
STICKY_ROUTING_CONFIG), then these environment variables:
  STICKY_ROUTING_LISTEN_ADDR               gRPC address          (0.0.0.0:50051)
  STICKY_ROUTING_METRICS_ADDR              Prometheus /metrics   (0.0.0.0:9464)
  STICKY_ROUTING_REDIS_URL                 Redis URL             (redis://127.0.0.1:6379)
                                           also rediss://, redis-cluster://h:p?node=h:p,
                                           redis-sentinel://h:p?sentinelServiceName=NAME
  STICKY_ROUTING_REDIS_USERNAME[_FILE]     ACL user, or a file holding it
  STICKY_ROUTING_REDIS_PASSWORD[_FILE]     password, or a file holding it
  STICKY_ROUTING_REDIS_TLS_CA_FILE         PEM CA to trust       (the system roots)
  STICKY_ROUTING_REDIS_TLS_CERT_FILE       PEM client certificate, with
  STICKY_ROUTING_REDIS_TLS_KEY_FILE        its PEM key
  STICKY_ROUTING_REDIS_POOL_SIZE           Redis connections     (number of CPUs)
  STICKY_ROUTING_REDIS_TIMEOUT             per Redis call        (250ms)
  STICKY_ROUTING_KEY_TTL                   sliding key TTL       (90d)
  STICKY_ROUTING_MAX_COMBOS_PER_CUSTOMER   combo cap             (30)
  STICKY_ROUTING_MAX_CUSTOMERS             new customers per merchant per window (1000000)
  STICKY_ROUTING_MAX_CUSTOMERS_<merchant>  per-merchant override
  STICKY_ROUTING_ADMISSION_WINDOW          admission window      (the key TTL)
  STICKY_ROUTING_MIN_PIN_COUNT             smallest count to pin (1)
  STICKY_ROUTING_SHUTDOWN_GRACE            drain time on SIGTERM (20s)
  STICKY_ROUTING_MAX_IN_FLIGHT_PER_CONNECTION  calls in flight per connection (4096)
  STICKY_ROUTING_WORKER_THREADS            runtime threads       (number of CPUs)
Durations take seconds or units: 90d, 12h, 250ms. Logs: RUST_LOG (info).";

/// Reads the process's arguments and environment.
pub fn from_process() -> Result<CommandLine, ConfigError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let env: HashMap<String, String> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect();
    parse_command_line(&args, &env)
}

/// Parses the arguments and loads the settings.
pub fn parse_command_line(
    args: &[String],
    env: &HashMap<String, String>,
) -> Result<CommandLine, ConfigError> {
    let usage_error = |problem: String| ConfigError {
        problems: vec![problem],
    };
    let mut config_file = None;
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        match arg.as_str() {
            "-h" | "--help" => return Ok(CommandLine::Exit(USAGE.to_owned())),
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
