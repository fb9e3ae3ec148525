//! The bulk subcommands, `sticky-routing import` and `sticky-routing export`:
//! habits in and out of Redis as rows of a CSV or JSONL file; and
//! `sticky-routing report` ([`report`]), the experiment's uplift per
//! merchant, which reaches Redis as `export` does.
//!
//! Every one of them, and `replay`, works within one tenant, `--tenant ID`
//! (the default tenant without it); `export --all-tenants` writes every
//! tenant's habits with a [`TENANT_COLUMN`], which `import` reads back.
//!
//! Both load the service's own settings (defaults, `--config FILE` or
//! `STICKY_ROUTING_CONFIG`, then the environment), so they reach Redis
//! exactly as the server does (single node, Cluster, Sentinel, TLS, ACL user)
//! and apply the same rules. They share the row format: the columns
//! [`COLUMNS`], an optional `count` and `attempt_id`, and how they use
//! Redis: [`bulk_redis`]'s settings, [`START_WITHIN`] to connect, and
//! [`quit_within`] to leave, so that a Redis that is not there, dies or
//! freezes ends either command with exit 2 within seconds.

pub mod export;
mod flags;
pub mod import;
mod progress;
pub mod replay;
pub mod report;
mod rows;

use std::collections::HashMap;
use std::io::Read;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use crate::config::{self, Settings};
use crate::storage::RedisSettings;

/// The columns every row has, in the order export writes them.
pub const COLUMNS: [&str; 6] = [
    "merchant_id",
    "customer_id",
    "payment_method",
    "payment_method_type",
    "connector",
    "outcome",
];
/// The optional columns: how many outcomes a row stands for (absent or empty:
/// 1), and the orchestrator's attempt id.
pub const COUNT_COLUMN: &str = "count";
pub const ATTEMPT_COLUMN: &str = "attempt_id";
/// `replay`'s optional column: the attempt's time (RFC 3339 or Unix
/// seconds). `import` ignores it.
pub const AT_COLUMN: &str = "at";
/// The optional column of a row's tenant (contract v1.2, "Tenants"): the
/// empty cell is the default tenant. `export --all-tenants` writes it, and
/// `import` and `replay` read it.
pub const TENANT_COLUMN: &str = "tenant_id";
/// The most outcomes one row's `count` may stand for: import refuses more,
/// and export splits a larger net count over rows of at most this. Far
/// above any real history, and far below where a count could overflow
/// Redis's 64-bit integers however many rows add up.
pub const MAX_COUNT: u32 = 1_000_000_000;

/// A row file's format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Comma-separated, with a header line naming the columns (any order).
    Csv,
    /// One JSON object per line.
    Jsonl,
}

impl Format {
    /// `--format`'s value.
    pub fn from_flag(word: &str) -> Option<Self> {
        match word {
            "csv" => Some(Self::Csv),
            "jsonl" | "ndjson" => Some(Self::Jsonl),
            _ => None,
        }
    }

    /// The format a file name says: `.csv`, `.jsonl` or `.ndjson`.
    pub fn from_path(path: &Path) -> Option<Self> {
        let extension = path.extension()?.to_str()?.to_ascii_lowercase();
        Self::from_flag(&extension)
    }
}

/// How long a bulk command waits for Redis at its start before it gives up
/// (exit 2). Above the store's connection and handshake timeouts (2 s), so
/// a refused connection is reported at once and a peer that accepts TCP but
/// never answers (a frozen Redis, a black-holing proxy) as a timeout, both
/// within this; nothing is retried past it: a one-off command should not
/// sit out an outage, and an operator runs it again.
pub const START_WITHIN: Duration = Duration::from_secs(3);

/// What a bulk call may take beyond the service's `REDIS_TIMEOUT`. The
/// calls are larger than the service's (a script call of 64 import rows, a
/// SCAN page and its 1,000 HGETALLs in one pipeline), yet each takes Redis
/// about a millisecond: this is room for a busy Redis and the network, not
/// for the work. A Redis that died or froze is given up on within
/// `REDIS_TIMEOUT` plus this.
const CALL_SLACK: Duration = Duration::from_secs(2);

/// How long a bulk command waits for its client's QUIT at the end.
const QUIT_WITHIN: Duration = Duration::from_millis(500);

/// The Redis settings both bulk commands connect with: the service's own
/// (URL, user, TLS, pool), each call bounded by `REDIS_TIMEOUT` plus
/// [`CALL_SLACK`].
pub fn bulk_redis(service: &RedisSettings) -> RedisSettings {
    let mut redis = service.clone();
    redis.command_timeout = service.command_timeout + CALL_SLACK;
    redis
}

/// Why a bulk command could not start: Redis at `redis.url` (its password
/// redacted) did not connect, and `why`.
pub fn unreachable(redis: &RedisSettings, why: &str) -> String {
    format!("cannot reach Redis at {}: {why}", redis.url)
}

/// Runs `quit` (closing the command's Redis connections) for at most
/// [`QUIT_WITHIN`]. fred 10.1's QUIT waits for the server's answer for the
/// whole command timeout, and against a dead or frozen Redis none comes, so
/// every failed run would end that much later; the process exits right
/// after, which closes the connections anyway.
pub async fn quit_within(quit: impl Future<Output = ()>) {
    let _ = tokio::time::timeout(QUIT_WITHIN, quit).await;
}

/// The runtime a bulk command runs on: two workers, so reading and parsing
/// the file overlaps with waiting for Redis.
pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
}

/// A read-only bulk command's start (`export`, `report`): its arguments
/// parsed (`--help` printed), then the settings loaded as the server loads
/// them from `config_file` and `env`, with a warning for each unknown
/// variable. `Err` is the exit code to end with, its reason already said.
pub fn request_and_settings<R>(
    command: &str,
    args: &[String],
    env: &HashMap<String, String>,
    help: &str,
    parse: impl FnOnce(&[String]) -> Result<Option<R>, String>,
    config_file: impl FnOnce(&R) -> Option<&Path>,
) -> Result<(R, Settings), ExitCode> {
    let request = match parse(args) {
        Ok(Some(request)) => request,
        Ok(None) => {
            crate::process::print_to_stdout(&format!("{help}\n"));
            return Err(ExitCode::SUCCESS);
        }
        Err(problem) => {
            return Err(fail(
                command,
                &format!("{problem}; see `sticky-routing {command} --help`"),
            ));
        }
    };
    let settings = Settings::load(config_file(&request), env)
        .map_err(|error| fail(command, &error.to_string()))?;
    for name in config::unknown_variables(env.keys().map(String::as_str)) {
        eprintln!("sticky-routing {command}: warning: unknown variable {name} ignored");
    }
    Ok((request, settings))
}

/// The rows' input: the file at `path` (with its size, when it is a
/// regular file, for the progress bar's ETA), or stdin when `None`.
pub fn open_input(path: Option<&Path>) -> Result<(Box<dyn Read + Send>, Option<u64>), String> {
    let Some(path) = path else {
        return Ok((Box::new(std::io::stdin()), None));
    };
    let file = std::fs::File::open(path)
        .map_err(|error| format!("cannot open {}: {error}", path.display()))?;
    let size = file
        .metadata()
        .ok()
        .filter(|m| m.is_file())
        .map(|m| m.len());
    Ok((Box::new(file), size))
}

/// Says why `command` could not run, and ends it with exit code 2.
pub fn fail(command: &str, problem: &str) -> ExitCode {
    eprintln!("sticky-routing {command}: {problem}");
    ExitCode::from(2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_name_gives_the_format_and_other_names_give_none() {
        assert_eq!(Format::from_path(Path::new("a/b.csv")), Some(Format::Csv));
        assert_eq!(Format::from_path(Path::new("b.JSONL")), Some(Format::Jsonl));
        assert_eq!(
            Format::from_path(Path::new("b.ndjson")),
            Some(Format::Jsonl)
        );
        assert_eq!(Format::from_path(Path::new("b.txt")), None);
        assert_eq!(Format::from_path(Path::new("-")), None);
    }

    #[test]
    fn bulk_calls_get_the_service_timeout_and_the_slack() {
        let mut service = crate::config::Settings::defaults().redis;
        service.command_timeout = Duration::from_millis(250);
        service.url = "redis://user:secret@127.0.0.1:6379".into();
        let bulk = bulk_redis(&service);
        assert_eq!(bulk.command_timeout, Duration::from_millis(2_250));
        assert_eq!(bulk.url, service.url);
        let problem = unreachable(&bulk, "refused");
        assert_eq!(
            problem,
            "cannot reach Redis at redis://user:***@127.0.0.1:6379: refused"
        );
    }
}
