//! Settings, parsed once at start-up into typed structs.
//!
//! Layers, later winning: built-in defaults, then an optional TOML file
//! (`--config FILE` or `STICKY_ROUTING_CONFIG`), then `STICKY_ROUTING_*`
//! environment variables. Every bad value is collected and reported at once,
//! named by its variable, so an operator fixes a deployment in one round.
//!
//! Every setting is declared once ([`crate::declare`]: name, default, parse
//! and range, help), beside the code that uses it: Redis's in storage, the
//! log format in telemetry, and the rest, whose owners read no settings
//! themselves (the pure domain's [`Rules`], the server's listeners, TLS and
//! limits), in [`declarations`]. Configuration gathers the declarations
//! and asks each owner to read its own (`RedisSettings::from_declared`),
//! so an owner says what cannot work while configuration says which
//! variable to fix.
//!
//! The environment is passed in as a map, so tests never touch the process
//! environment.

mod check;
mod cli;
mod declarations;
mod sources;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use cli::{CommandLine, from_process, parse_command_line, process_env};

use crate::declare::ENV_PREFIX;
use crate::domain::Rules;
use crate::domain::breaker::BreakerSettings;
use crate::domain::priority::Shares;
use crate::domain::tenant::TenantAllowlist;
use crate::pki::{AdminClients, ServerTlsFiles};
use crate::storage::RedisSettings;
use crate::telemetry::{self, TelemetrySettings};
use sources::RawValues;
/// The variable that names the TOML file when `--config` is not given.
pub const CONFIG_FILE_VAR: &str = "STICKY_ROUTING_CONFIG";

/// Everything the service needs to start.
#[derive(Debug, Clone)]
pub struct Settings {
    pub listen_addr: SocketAddr,
    pub metrics_addr: SocketAddr,
    /// The plaintext listener for health checks alone; `None`: off.
    pub health_listen_addr: Option<SocketAddr>,
    /// gRPC over TLS when set; mTLS when it names a client CA.
    pub tls: Option<ServerTlsFiles>,
    /// Who may call GetHabits and ForgetCustomer.
    pub admin_clients: AdminClients,
    /// The tenants a call may name besides the default
    /// (`STICKY_ROUTING_TENANTS`); any valid one when unset.
    pub tenants: TenantAllowlist,
    /// How to reach Redis; storage owns these and says what is wrong.
    pub redis: RedisSettings,
    /// The contract's tunables, owned by the domain.
    pub rules: Rules,
    /// How long in-flight calls may take to finish after SIGTERM.
    pub shutdown_grace: Duration,
    /// StickyRouting calls in progress across all connections; beyond it
    /// calls are shed with `RESOURCE_EXHAUSTED`.
    pub max_in_flight: usize,
    /// The shares of `max_in_flight` below which RecordOutcome, and the
    /// admin and low-priority calls, may start: GetPin is shed last.
    pub shares: Shares,
    /// The connector circuit breaker (contract v1.2 §3); `None` when
    /// `STICKY_ROUTING_BREAKER=off`: nothing counted or kept.
    pub breaker: Option<BreakerSettings>,
    /// How long the experiment's daily counts live in Redis (the TTL of
    /// each `sticky_exp_*` key, contract v1.2 §4); the rollout itself is in
    /// [`Rules::rollout`].
    pub experiment_retention: Duration,
    /// How long the experiment's counts wait in their shard's log before a
    /// batch of them is added into the daily hashes (`src/experiment/`).
    pub experiment_batch_age: Duration,
    /// A connection older than this (±10 % per process) gets GOAWAY, so
    /// that clients reconnect and spread over pods added since.
    pub max_connection_age: Duration,
    /// How long a connection past its age may finish its calls.
    pub max_connection_age_grace: Duration,
    /// Tokio worker threads. One per CPU by default; where the service
    /// shares a small machine with Redis, fewer win (bench/README.md).
    pub worker_threads: usize,
    /// Log format, and where traces go (none unless an OTLP endpoint is set).
    pub telemetry: TelemetrySettings,
}

/// Every problem found in the configuration, one per line; never empty.
#[derive(Debug, thiserror::Error)]
#[error("invalid configuration:\n  {}", .problems.join("\n  "))]
pub struct ConfigError {
    pub problems: Vec<String>,
}

impl ConfigError {
    /// The error for `problems`. A check that fails must say why, so an
    /// empty list (a bug) still yields a line to report.
    fn new(mut problems: Vec<String>) -> Self {
        if problems.is_empty() {
            problems.push("the settings are incomplete, yet no value was reported bad; this is a bug, please report it".into());
        }
        Self { problems }
    }
}

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
        let settings = check::check(RawValues::collect(file.as_deref(), env));
        match (settings, telemetry::traces_from_env(env)) {
            (Ok(mut settings), Ok(traces)) => {
                settings.telemetry.traces = traces;
                Ok(settings)
            }
            (Ok(_), Err(problems)) => Err(ConfigError::new(problems)),
            (Err(error), Ok(_)) => Err(error),
            (Err(mut error), Err(problems)) => {
                error.problems.extend(problems);
                Err(error)
            }
        }
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

#[cfg(test)]
mod tests;
