//! Settings, parsed once at start-up into typed structs.
//!
//! Layers, later winning: built-in defaults, then an optional TOML file
//! (`--config FILE` or `STICKY_ROUTING_CONFIG`), then `STICKY_ROUTING_*`
//! environment variables. Every bad value is collected and reported at once,
//! named by its variable, so an operator fixes a deployment in one round.
//!
//! The environment is passed in as a map, so tests never touch the process
//! environment.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::domain::admission::Budgets;

const ENV_PREFIX: &str = "STICKY_ROUTING_";
const OVERRIDE_PREFIX: &str = "STICKY_ROUTING_MAX_CUSTOMERS_";
/// The variable that names the TOML file when `--config` is not given.
pub const CONFIG_FILE_VAR: &str = "STICKY_ROUTING_CONFIG";

/// Everything the service needs to start.
#[derive(Debug, Clone)]
pub struct Settings {
    pub listen_addr: SocketAddr,
    pub metrics_addr: SocketAddr,
    pub redis: RedisSettings,
    pub rules: RuleSettings,
    /// How long in-flight calls may take to finish after SIGTERM.
    pub shutdown_grace: Duration,
    /// In-flight calls beyond this are shed with `RESOURCE_EXHAUSTED`.
    pub max_in_flight_per_connection: usize,
}

/// How to reach Redis.
#[derive(Clone)]
pub struct RedisSettings {
    pub url: String,
    pub pool_size: usize,
    /// Upper bound for one Redis call; the caller's deadline may shorten it.
    pub command_timeout: Duration,
}

/// The URL may hold a password: keep it out of `{:?}`.
impl std::fmt::Debug for RedisSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisSettings")
            .field("url", &redact_url(&self.url))
            .field("pool_size", &self.pool_size)
            .field("command_timeout", &self.command_timeout)
            .finish()
    }
}

/// The contract's tunables.
#[derive(Debug, Clone)]
pub struct RuleSettings {
    /// Sliding TTL of every customer hash, re-armed on each write.
    pub key_ttl: Duration,
    pub max_combos_per_customer: u32,
    pub admission_window: Duration,
    pub budgets: Budgets,
    pub min_pin_count: i64,
}

/// Every problem found in the configuration, one per line.
#[derive(Debug, thiserror::Error)]
#[error("invalid configuration:\n  {}", .problems.join("\n  "))]
pub struct ConfigError {
    pub problems: Vec<String>,
}

/// The raw layered values before typing; every field is optional text so
/// that each can be checked and reported on its own.
#[derive(Debug, Default, Deserialize)]
struct RawSettings {
    listen_addr: Option<String>,
    metrics_addr: Option<String>,
    redis_url: Option<String>,
    redis_pool_size: Option<String>,
    redis_timeout: Option<String>,
    key_ttl: Option<String>,
    max_combos_per_customer: Option<String>,
    max_customers: Option<String>,
    /// TOML only: `[max_customers_overrides]` with `merchant_id = budget`.
    max_customers_overrides: Option<HashMap<String, String>>,
    admission_window: Option<String>,
    min_pin_count: Option<String>,
    shutdown_grace: Option<String>,
    max_in_flight_per_connection: Option<String>,
}

/// The keys that may appear in the file and, upper-cased, after the prefix.
const KNOWN_KEYS: &[&str] = &[
    "listen_addr",
    "metrics_addr",
    "redis_url",
    "redis_pool_size",
    "redis_timeout",
    "key_ttl",
    "max_combos_per_customer",
    "max_customers",
    "admission_window",
    "min_pin_count",
    "shutdown_grace",
    "max_in_flight_per_connection",
];

impl Settings {
    /// The built-in defaults, as a test's starting point.
    #[allow(
        clippy::expect_used,
        reason = "the defaults are constants; a unit test parses them"
    )]
    pub fn defaults() -> Self {
        Self::load(None, &HashMap::new()).expect("the built-in defaults are valid")
    }

    /// Loads the layers: defaults, then `config_file` (or the file named by
    /// `STICKY_ROUTING_CONFIG` in `env`), then `env`.
    pub fn load(
        config_file: Option<&Path>,
        env: &HashMap<String, String>,
    ) -> Result<Self, ConfigError> {
        let file = config_file
            .map(Path::to_path_buf)
            .or_else(|| env.get(CONFIG_FILE_VAR).map(PathBuf::from));
        let mut builder = config::Config::builder();
        if let Some(path) = &file {
            builder = builder
                .add_source(config::File::from(path.as_path()).format(config::FileFormat::Toml));
        }
        let known_env: HashMap<String, String> = env
            .iter()
            .filter_map(|(name, value)| {
                let key = name.strip_prefix(ENV_PREFIX)?.to_ascii_lowercase();
                KNOWN_KEYS
                    .contains(&key.as_str())
                    .then(|| (key, value.clone()))
            })
            .collect();
        builder = builder.add_source(config::Environment::default().source(Some(known_env)));
        let raw: RawSettings = builder
            .build()
            .and_then(config::Config::try_deserialize)
            .map_err(|e| ConfigError {
                problems: vec![format!(
                    "{}: {e}",
                    file.map_or("configuration".into(), |p| p.display().to_string())
                )],
            })?;
        let mut overrides = raw.max_customers_overrides.clone().unwrap_or_default();
        for (name, value) in env {
            if let Some(merchant) = name.strip_prefix(OVERRIDE_PREFIX) {
                overrides.insert(merchant.to_owned(), value.clone());
            }
        }
        Checker::default().check(raw, overrides)
    }
}

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
Durations take seconds or units: 90d, 12h, 250ms. Logs: RUST_LOG (info).";

/// Reads the process's arguments and environment.
pub fn from_process() -> Result<CommandLine, ConfigError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let env: HashMap<String, String> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect();
    parse_command_line(&args, &env)
}

/// `STICKY_ROUTING_*` variables this service does not know, such as a typo
/// like `STICKY_ROUTING_KEY_TLL`: worth a warning, since they change nothing.
pub fn unknown_variables<'a>(names: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    names
        .into_iter()
        .filter(|name| match name.strip_prefix(ENV_PREFIX) {
            None => false,
            Some(_) if *name == CONFIG_FILE_VAR || name.starts_with(OVERRIDE_PREFIX) => false,
            Some(key) => !KNOWN_KEYS.contains(&key.to_ascii_lowercase().as_str()),
        })
        .collect()
}

/// Parses `[--config FILE] | --help | --version` and loads the settings.
pub fn parse_command_line(
    args: &[String],
    env: &HashMap<String, String>,
) -> Result<CommandLine, ConfigError> {
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
                None => {
                    return Err(ConfigError {
                        problems: vec!["--config needs a FILE".into()],
                    });
                }
            },
            other => match other.strip_prefix("--config=") {
                Some(path) => config_file = Some(PathBuf::from(path)),
                None => {
                    return Err(ConfigError {
                        problems: vec![format!("unknown argument `{other}`; see --help")],
                    });
                }
            },
        }
    }
    Settings::load(config_file.as_deref(), env).map(|s| CommandLine::Run(Box::new(s)))
}

/// Types the raw values, collecting a problem for each bad one.
#[derive(Default)]
struct Checker {
    problems: Vec<String>,
}

impl Checker {
    fn check(
        mut self,
        raw: RawSettings,
        overrides: HashMap<String, String>,
    ) -> Result<Settings, ConfigError> {
        let cpus = std::thread::available_parallelism()
            .map_or(1, usize::from)
            .to_string();
        let listen_addr = self.value("listen_addr", raw.listen_addr, "0.0.0.0:50051", parse_addr);
        let metrics_addr = self.value("metrics_addr", raw.metrics_addr, "0.0.0.0:9464", parse_addr);
        let url = self.value(
            "redis_url",
            raw.redis_url,
            "redis://127.0.0.1:6379",
            parse_redis_url,
        );
        let pool_size = self.value("redis_pool_size", raw.redis_pool_size, &cpus, |t| {
            parse_in_range(t, 1, 1024)
        });
        let command_timeout = self.value(
            "redis_timeout",
            raw.redis_timeout,
            "250ms",
            parse_positive_duration,
        );
        let key_ttl = self.value("key_ttl", raw.key_ttl, "90d", parse_whole_seconds);
        let admission_window = match raw.admission_window {
            Some(text) => self.value("admission_window", Some(text), "", parse_whole_seconds),
            None => key_ttl,
        };
        let max_combos = self.value(
            "max_combos_per_customer",
            raw.max_combos_per_customer,
            "30",
            |t| parse_in_range(t, 1, 10_000),
        );
        let default_budget = self.value("max_customers", raw.max_customers, "1000000", parse_u64);
        let overrides = self.overrides(overrides);
        let min_pin_count = self.value("min_pin_count", raw.min_pin_count, "1", |t| {
            parse_in_range(t, 1, i64::MAX as usize)
        });
        let shutdown_grace =
            self.value("shutdown_grace", raw.shutdown_grace, "20s", parse_duration);
        let max_in_flight_per_connection = self.value(
            "max_in_flight_per_connection",
            raw.max_in_flight_per_connection,
            "4096",
            |t| parse_in_range(t, 1, 1_000_000),
        );
        let settings = || -> Option<Settings> {
            Some(Settings {
                listen_addr: listen_addr?,
                metrics_addr: metrics_addr?,
                redis: RedisSettings {
                    url: url?,
                    pool_size: pool_size?,
                    command_timeout: command_timeout?,
                },
                rules: RuleSettings {
                    key_ttl: key_ttl?,
                    max_combos_per_customer: u32::try_from(max_combos?).ok()?,
                    admission_window: admission_window?,
                    budgets: Budgets {
                        default: default_budget?,
                        overrides,
                    },
                    min_pin_count: i64::try_from(min_pin_count?).ok()?,
                },
                shutdown_grace: shutdown_grace?,
                max_in_flight_per_connection: max_in_flight_per_connection?,
            })
        };
        match settings() {
            Some(settings) if self.problems.is_empty() => Ok(settings),
            _ => Err(ConfigError {
                problems: self.problems,
            }),
        }
    }

    /// Parses `raw` (or `default`), recording a problem named after the
    /// variable when it is bad.
    fn value<T>(
        &mut self,
        key: &str,
        raw: Option<String>,
        default: &str,
        parse: impl Fn(&str) -> Result<T, String>,
    ) -> Option<T> {
        let text = raw.unwrap_or_else(|| default.to_owned());
        parse(text.trim())
            .map_err(|why| {
                let name = key.to_ascii_uppercase();
                self.problems
                    .push(format!("{ENV_PREFIX}{name} ({key}): {why}"));
            })
            .ok()
    }

    fn overrides(&mut self, raw: HashMap<String, String>) -> HashMap<String, u64> {
        let mut budgets = HashMap::new();
        for (merchant, text) in raw {
            let name = format!("{OVERRIDE_PREFIX}{merchant}");
            if merchant.trim().is_empty() || merchant.trim() != merchant {
                self.problems.push(format!(
                    "{name}: the merchant id must be non-empty and trimmed"
                ));
                continue;
            }
            match parse_u64(text.trim()) {
                Ok(budget) => {
                    budgets.insert(merchant, budget);
                }
                Err(why) => self.problems.push(format!("{name}: {why}")),
            }
        }
        budgets
    }
}

fn parse_addr(text: &str) -> Result<SocketAddr, String> {
    text.parse()
        .map_err(|_| format!("`{text}` is not a socket address such as 0.0.0.0:50051"))
}

fn parse_redis_url(text: &str) -> Result<String, String> {
    crate::storage::check_redis_url(text)?;
    Ok(text.to_owned())
}

fn parse_u64(text: &str) -> Result<u64, String> {
    text.parse()
        .map_err(|_| format!("`{text}` is not a whole number ≥ 0"))
}

fn parse_in_range(text: &str, min: usize, max: usize) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(format!(
            "`{text}` is not a whole number from {min} to {max}"
        )),
    }
}

/// Seconds (`3600`) or a duration (`90d`, `12h`, `250ms`).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return text
            .parse::<u64>()
            .map(Duration::from_secs)
            .map_err(|_| format!("`{text}` is too large"));
    }
    humantime::parse_duration(text)
        .map_err(|_| format!("`{text}` is not a duration (seconds, or e.g. 90d, 12h, 250ms)"))
}

fn parse_positive_duration(text: &str) -> Result<Duration, String> {
    match parse_duration(text)? {
        d if d.is_zero() => Err("must be greater than 0".into()),
        d => Ok(d),
    }
}

/// A TTL or window: Redis expires keys in whole seconds here, so at least 1s.
fn parse_whole_seconds(text: &str) -> Result<Duration, String> {
    let d = parse_duration(text)?;
    if d < Duration::from_secs(1) {
        return Err(format!("`{text}` is shorter than 1s"));
    }
    if d.as_secs() > i64::MAX as u64 / 2_000 {
        return Err(format!("`{text}` is too long"));
    }
    Ok(Duration::from_secs(d.as_secs()))
}

/// `redis://user:secret@host` → `redis://user:***@host`, for logs.
pub fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            let user = userinfo.split(':').next().unwrap_or("");
            format!("{}{user}:***{}", &url[..scheme + 3], &url[at..])
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn defaults_match_the_spec() {
        let s = Settings::defaults();
        assert_eq!(s.listen_addr, "0.0.0.0:50051".parse().unwrap());
        assert_eq!(s.metrics_addr, "0.0.0.0:9464".parse().unwrap());
        assert_eq!(s.redis.url, "redis://127.0.0.1:6379");
        assert_eq!(
            s.redis.pool_size,
            std::thread::available_parallelism().unwrap().get()
        );
        assert_eq!(s.rules.key_ttl, Duration::from_secs(90 * 86_400));
        assert_eq!(s.rules.admission_window, s.rules.key_ttl);
        assert_eq!(s.rules.max_combos_per_customer, 30);
        assert_eq!(s.rules.budgets.default, 1_000_000);
        assert_eq!(s.rules.min_pin_count, 1);
    }

    #[test]
    fn environment_values_are_typed() {
        let s = Settings::load(
            None,
            &env(&[
                ("STICKY_ROUTING_KEY_TTL", "12h"),
                ("STICKY_ROUTING_ADMISSION_WINDOW", "3600"),
                ("STICKY_ROUTING_MAX_CUSTOMERS", "7"),
                ("STICKY_ROUTING_MAX_CUSTOMERS_Merchant_1", "0"),
                ("STICKY_ROUTING_MIN_PIN_COUNT", "3"),
                ("STICKY_ROUTING_REDIS_POOL_SIZE", "4"),
            ]),
        )
        .unwrap();
        assert_eq!(s.rules.key_ttl, Duration::from_secs(12 * 3600));
        assert_eq!(s.rules.admission_window, Duration::from_secs(3600));
        assert_eq!(s.rules.budgets.default, 7);
        assert_eq!(s.rules.budgets.overrides["Merchant_1"], 0);
        assert_eq!(s.rules.min_pin_count, 3);
        assert_eq!(s.redis.pool_size, 4);
    }

    #[test]
    fn every_bad_value_is_reported_by_name_at_once() {
        let err = Settings::load(
            None,
            &env(&[
                ("STICKY_ROUTING_KEY_TTL", "soon"),
                ("STICKY_ROUTING_LISTEN_ADDR", "nowhere"),
                ("STICKY_ROUTING_MAX_COMBOS_PER_CUSTOMER", "0"),
                ("STICKY_ROUTING_MAX_CUSTOMERS_m1", "-1"),
                ("STICKY_ROUTING_REDIS_URL", "http://x"),
                ("STICKY_ROUTING_MIN_PIN_COUNT", "0"),
            ]),
        )
        .unwrap_err();
        let text = err.to_string();
        for name in [
            "STICKY_ROUTING_KEY_TTL",
            "STICKY_ROUTING_LISTEN_ADDR",
            "STICKY_ROUTING_MAX_COMBOS_PER_CUSTOMER",
            "STICKY_ROUTING_MAX_CUSTOMERS_m1",
            "STICKY_ROUTING_REDIS_URL",
            "STICKY_ROUTING_MIN_PIN_COUNT",
        ] {
            assert!(text.contains(name), "{name} missing from:\n{text}");
        }
        assert_eq!(err.problems.len(), 6, "{text}");
    }

    #[test]
    fn the_file_sits_between_defaults_and_environment() {
        let dir = std::env::temp_dir().join(format!("sticky-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("settings.toml");
        std::fs::write(
            &path,
            "key_ttl = \"2d\"\nmax_combos_per_customer = 5\n[max_customers_overrides]\nBig_Merchant = 99\n",
        )
        .unwrap();
        let s = Settings::load(
            Some(&path),
            &env(&[("STICKY_ROUTING_MAX_COMBOS_PER_CUSTOMER", "6")]),
        )
        .unwrap();
        assert_eq!(s.rules.key_ttl, Duration::from_secs(2 * 86_400));
        assert_eq!(s.rules.max_combos_per_customer, 6);
        assert_eq!(s.rules.budgets.overrides["Big_Merchant"], 99);
        let via_env =
            Settings::load(None, &env(&[(CONFIG_FILE_VAR, path.to_str().unwrap())])).unwrap();
        assert_eq!(via_env.rules.max_combos_per_customer, 5);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn the_command_line_takes_a_config_file_help_and_version() {
        let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(
            matches!(parse_command_line(&args(&["--help"]), &env(&[])), Ok(CommandLine::Exit(t)) if t.contains("STICKY_ROUTING_KEY_TTL"))
        );
        assert!(matches!(
            parse_command_line(&args(&[]), &env(&[])),
            Ok(CommandLine::Run(_))
        ));
        let err =
            parse_command_line(&args(&["--config", "/nonexistent/x.toml"]), &env(&[])).unwrap_err();
        assert!(err.to_string().contains("/nonexistent/x.toml"), "{err}");
        assert!(parse_command_line(&args(&["--bogus"]), &env(&[])).is_err());
    }

    #[test]
    fn unknown_variables_are_found_and_known_ones_are_not() {
        let names = [
            "STICKY_ROUTING_KEY_TLL",
            "STICKY_ROUTING_KEY_TTL",
            "STICKY_ROUTING_CONFIG",
            "STICKY_ROUTING_MAX_CUSTOMERS_m1",
            "PATH",
        ];
        assert_eq!(unknown_variables(names), ["STICKY_ROUTING_KEY_TLL"]);
    }

    #[test]
    fn durations_take_seconds_or_units() {
        assert_eq!(parse_duration("90d"), Ok(Duration::from_secs(90 * 86_400)));
        assert_eq!(parse_duration("45"), Ok(Duration::from_secs(45)));
        assert!(parse_whole_seconds("500ms").is_err());
        assert!(parse_duration("ninety").is_err());
    }

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            redact_url("redis://u:hunter2@h:6379"),
            "redis://u:***@h:6379"
        );
        assert_eq!(redact_url("redis://h:6379"), "redis://h:6379");
        let s = Settings::load(
            None,
            &env(&[("STICKY_ROUTING_REDIS_URL", "redis://:hunter2@h:1")]),
        )
        .unwrap();
        assert!(!format!("{s:?}").contains("hunter2"));
    }
}
