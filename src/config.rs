//! Settings, parsed once at start-up into typed structs.
//!
//! Layers, later winning: built-in defaults, then an optional TOML file
//! (`--config FILE` or `STICKY_ROUTING_CONFIG`), then `STICKY_ROUTING_*`
//! environment variables. Every bad value is collected and reported at once,
//! named by its variable, so an operator fixes a deployment in one round.
//!
//! The environment is passed in as a map, so tests never touch the process
//! environment.

mod check;
mod cli;
mod sources;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use cli::{CommandLine, from_process, parse_command_line};

use crate::domain::admission::Budgets;
use sources::RawValues;

const ENV_PREFIX: &str = "STICKY_ROUTING_";
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
    /// Tokio worker threads. One per CPU by default; where the service
    /// shares a small machine with Redis, fewer win (bench/README.md).
    pub worker_threads: usize,
}

/// How to reach Redis.
#[derive(Clone)]
pub struct RedisSettings {
    /// Any URL fred's `Config::from_url` takes: `redis://`, `rediss://`,
    /// `redis-cluster://`, `redis-sentinel://`, `redis+unix://`.
    pub url: String,
    /// ACL user; wins over none in the URL (both set is a config error).
    pub username: Option<String>,
    pub password: Option<Secret>,
    /// Trust and identity for `rediss` URLs; `None` trusts the system roots.
    pub tls: Option<TlsFiles>,
    pub pool_size: usize,
    /// Upper bound for one Redis call; the caller's deadline may shorten it.
    pub command_timeout: Duration,
}

/// The URL and the password may hold secrets: keep them out of `{:?}`.
impl std::fmt::Debug for RedisSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisSettings")
            .field("url", &redact_url(&self.url))
            .field("username", &self.username)
            .field("password", &self.password)
            .field("tls", &self.tls)
            .field("pool_size", &self.pool_size)
            .field("command_timeout", &self.command_timeout)
            .finish()
    }
}

/// A value that must never reach a log: `{:?}` prints `***`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The value itself, for the one place that hands it to Redis.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

/// PEM files for TLS to Redis.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsFiles {
    /// CA certificates to trust instead of the system roots.
    pub ca_file: Option<PathBuf>,
    /// A client certificate and its key, for Redis with `tls-auth-clients`.
    pub client_cert: Option<ClientCertFiles>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientCertFiles {
    pub cert_file: PathBuf,
    pub key_file: PathBuf,
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

/// The keys that may appear in the file and, upper-cased, after the prefix.
const KNOWN_KEYS: &[&str] = &[
    "listen_addr",
    "metrics_addr",
    "redis_url",
    "redis_username",
    "redis_username_file",
    "redis_password",
    "redis_password_file",
    "redis_tls_ca_file",
    "redis_tls_cert_file",
    "redis_tls_key_file",
    "redis_pool_size",
    "redis_timeout",
    "key_ttl",
    "max_combos_per_customer",
    "max_customers",
    "admission_window",
    "min_pin_count",
    "shutdown_grace",
    "max_in_flight_per_connection",
    "worker_threads",
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
        check::check(RawValues::collect(file.as_deref(), env))
    }
}

/// `STICKY_ROUTING_*` variables this service does not know, such as a typo
/// like `STICKY_ROUTING_KEY_TLL`: worth a warning, since they change nothing.
pub fn unknown_variables<'a>(names: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    names
        .into_iter()
        .filter(|name| {
            name.starts_with(ENV_PREFIX)
                && *name != CONFIG_FILE_VAR
                && sources::setting_named(name).is_none()
        })
        .collect()
}

/// `redis://user:secret@host` → `redis://user:***@host`, and a sentinel
/// URL's `sentinelPassword=secret` → `sentinelPassword=***`, for logs.
pub fn redact_url(url: &str) -> String {
    let (head, query) = match url.split_once('?') {
        Some((head, query)) => (head, Some(query)),
        None => (url, None),
    };
    let mut redacted = match (head.find("://"), head.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &head[scheme + 3..at];
            let user = userinfo.split(':').next().unwrap_or("");
            format!("{}{user}:***{}", &head[..scheme + 3], &head[at..])
        }
        _ => head.to_owned(),
    };
    if let Some(query) = query {
        let pairs: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((name, _)) if name.eq_ignore_ascii_case("sentinelPassword") => {
                    format!("{name}=***")
                }
                _ => pair.to_owned(),
            })
            .collect();
        redacted = format!("{redacted}?{}", pairs.join("&"));
    }
    redacted
}

#[cfg(test)]
mod tests;
