//! Every setting, declared once: its name, its default, how its text is
//! parsed (range included) and its line of help.
//!
//! Everything else about settings comes from this table: `--help`, which
//! names the TOML file and the environment may use, the warning about an
//! unknown `STICKY_ROUTING_*` variable, and the name a problem is reported
//! under. A test holds the README's configuration table and
//! `deploy/config.env` (the ConfigMap's settings) to it, so the docs cannot drift either.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use super::ENV_PREFIX;
use crate::domain::memory_guard::MemoryLimit;
use crate::domain::percent::Percent;
use crate::domain::pin::ScoreRatio;
use crate::pki::AdminClients;
use crate::telemetry::LogFormat;

/// What a setting is, apart from its type.
#[derive(Debug, Clone, Copy)]
pub(super) struct About {
    /// The key in the TOML file; the variable is `STICKY_ROUTING_` and the
    /// key upper-cased. For a per-merchant family, the key's prefix.
    pub key: &'static str,
    pub default: Fallback,
    /// One line for `--help`; more lines may follow, each after a `\n`.
    pub help: &'static str,
    /// Also settable as `{key}_file`: the path of a file that holds the
    /// value (the habit for Kubernetes secrets).
    pub or_file: bool,
    /// One setting per merchant: `{key}{merchant_id}`.
    pub per_merchant: bool,
}

/// What a setting is when it is not given.
#[derive(Debug, Clone, Copy)]
pub(super) enum Fallback {
    /// This text, parsed like a given value.
    Text(&'static str),
    /// The number of CPUs.
    Cpus,
    /// This many per CPU.
    PerCpu(usize),
    /// The value of the setting with this key.
    Follows(&'static str),
    /// Not set; the text says what that means, if anything.
    Unset(&'static str),
}

/// A setting of type `T`.
pub(super) struct Setting<T> {
    pub about: About,
    pub parse: fn(&str) -> Result<T, String>,
}

impl About {
    const fn new(key: &'static str, default: Fallback, help: &'static str) -> Self {
        Self {
            key,
            default,
            help,
            or_file: false,
            per_merchant: false,
        }
    }

    const fn or_file(self) -> Self {
        Self {
            or_file: true,
            ..self
        }
    }

    const fn per_merchant(self) -> Self {
        Self {
            per_merchant: true,
            ..self
        }
    }

    /// The environment variable, as `--help` and the docs write it.
    pub fn variable(&self) -> String {
        let name = format!("{ENV_PREFIX}{}", self.key.to_ascii_uppercase());
        match (self.per_merchant, self.or_file) {
            (true, _) => format!("{name}{{merchant_id}}"),
            (false, true) => format!("{name}[_FILE]"),
            (false, false) => name,
        }
    }

    /// The default as `--help` shows it.
    pub fn shown_default(&self) -> Option<String> {
        match self.default {
            Fallback::Text(text) => Some(text.to_owned()),
            Fallback::Cpus => Some("number of CPUs".to_owned()),
            Fallback::PerCpu(n) => Some(format!("{n} per CPU")),
            Fallback::Follows(key) => Some(format!("{ENV_PREFIX}{}", key.to_ascii_uppercase())),
            Fallback::Unset("") => None,
            Fallback::Unset(meaning) => Some(meaning.to_owned()),
        }
    }
}

/// Declares each setting as a constant and lists them all in [`ALL`], so a
/// setting cannot exist without being listed.
macro_rules! settings {
    ($($(#[$doc:meta])* $name:ident: $ty:ty = $about:expr, $parse:expr;)*) => {
        $($(#[$doc])* pub(super) const $name: Setting<$ty> = Setting { about: $about, parse: $parse };)*
        /// Every setting, in `--help` order.
        pub(super) const ALL: &[About] = &[$($name.about),*];
    };
}

use Fallback::{Cpus, Follows, PerCpu, Text, Unset};

settings! {
    LISTEN_ADDR: SocketAddr = About::new("listen_addr", Text("0.0.0.0:50051"), "gRPC address"), parse_addr;
    METRICS_ADDR: SocketAddr = About::new("metrics_addr", Text("0.0.0.0:9464"), "Prometheus /metrics address"), parse_addr;
    HEALTH_LISTEN_ADDR: Option<SocketAddr> = About::new("health_listen_addr", Text("0.0.0.0:50052"), "plaintext grpc.health.v1 only, for probes\nthat do not speak TLS; `off` disables it"), parse_addr_or_off;
    TLS_CERT_FILE: PathBuf = About::new("tls_cert_file", Unset("plaintext gRPC"), "PEM server certificate chain: serve gRPC over TLS\n(with the key); re-read when it changes"), parse_path;
    TLS_KEY_FILE: PathBuf = About::new("tls_key_file", Unset(""), "PEM server key (PKCS#8, PKCS#1 RSA or SEC1 EC)"), parse_path;
    TLS_CLIENT_CA_FILE: PathBuf = About::new("tls_client_ca_file", Unset("no client certificates"), "PEM CA that signs client certificates: mTLS"), parse_path;
    ADMIN_CLIENTS: AdminClients = About::new("admin_clients", Unset("any authenticated client"), "with mTLS: the client identities allowed GetHabits\nand ForgetCustomer, comma-separated: a URI\n(spiffe://…) matches URI names, a bare name DNS names"), AdminClients::parse;
    REDIS_URL: String = About::new(
        "redis_url",
        Text("redis://127.0.0.1:6379"),
        "Redis URL\nalso rediss://, redis-cluster://h:p?node=h:p,\nredis-sentinel://h:p?sentinelServiceName=NAME",
    ), parse_text;
    REDIS_USERNAME: String = About::new("redis_username", Unset(""), "ACL user, or a file holding it").or_file(), parse_text;
    REDIS_PASSWORD: String = About::new("redis_password", Unset(""), "password, or a file holding it").or_file(), parse_text;
    REDIS_TLS_CA_FILE: PathBuf = About::new("redis_tls_ca_file", Unset("the system roots"), "PEM CA to trust"), parse_path;
    REDIS_TLS_CERT_FILE: PathBuf = About::new("redis_tls_cert_file", Unset(""), "PEM client certificate (with the key)"), parse_path;
    REDIS_TLS_KEY_FILE: PathBuf = About::new("redis_tls_key_file", Unset(""), "PEM client key (with the certificate)"), parse_path;
    REDIS_POOL_SIZE: usize = About::new("redis_pool_size", Cpus, "Redis connections, 1 to 1024"), |t| whole_number(t, 1, 1024);
    REDIS_TIMEOUT: Duration = About::new("redis_timeout", Text("250ms"), "upper bound for one Redis call, up to 60s"), parse_redis_timeout;
    REDIS_QUEUE_LIMIT: usize = About::new("redis_queue_limit", Text("1024"), "Redis commands in flight per connection; past\nit calls are refused at once, 1 to 1000000"), |t| whole_number(t, 1, 1_000_000);
    KEY_TTL: Duration = About::new("key_ttl", Text("90d"), "sliding TTL of each customer hash, at least 1s"), parse_whole_seconds;
    MAX_COMBOS_PER_CUSTOMER: u32 = About::new("max_combos_per_customer", Text("30"), "combo cap per customer, 1 to 10000"), |t| whole_number(t, 1, 10_000);
    MAX_CUSTOMERS: u64 = About::new("max_customers", Text("1000000"), "new customers per merchant per window"), |t| whole_number(t, 0, u64::MAX);
    /// The per-merchant override of [`MAX_CUSTOMERS`].
    MAX_CUSTOMERS_FOR: u64 = About::new("max_customers_", Unset(""), "per-merchant override of the budget").per_merchant(), |t| whole_number(t, 0, u64::MAX);
    ADMISSION_WINDOW: Duration = About::new("admission_window", Follows("key_ttl"), "admission window, at least 1s"), parse_whole_seconds;
    ADMISSION_MEMORY_LIMIT: MemoryLimit = About::new("admission_memory_limit", Text("80%"), "no new customer while a Redis node's used_memory\nis at or above this: bytes (512MB, 2GiB) or 1% to\n100% of its maxmemory"), MemoryLimit::parse;
    MIN_PIN_COUNT: i64 = About::new("min_pin_count", Text("1"), "smallest count that can be pinned, at least 1"), |t| whole_number(t, 1, i64::MAX);
    MIN_SCORE_RATIO: ScoreRatio = About::new("min_score_ratio", Text("0.5"), "health veto: share of the top live score a pin\nneeds, 0 to 1; 0 turns the veto off"), parse_score_ratio;
    SHUTDOWN_GRACE: Duration = About::new("shutdown_grace", Text("20s"), "drain time after SIGTERM"), parse_duration;
    MAX_IN_FLIGHT: usize = About::new("max_in_flight", PerCpu(128), "StickyRouting calls in progress on this server;\npast it calls get RESOURCE_EXHAUSTED, 1 to 1000000"), |t| whole_number(t, 1, 1_000_000);
    FEEDBACK_SHARE: Percent = About::new("feedback_share", Text("80%"), "RecordOutcome starts only while the calls in\nprogress are below this share of MAX_IN_FLIGHT,\nso GetPin keeps the rest; 1% to 100%"), Percent::parse;
    LOW_SHARE: Percent = About::new("low_share", Text("10%"), "the same for admin calls and calls marked\n`x-request-priority: low`; 1% to FEEDBACK_SHARE"), Percent::parse;
    MAX_CONNECTION_AGE: Duration = About::new("max_connection_age", Text("5m"), "GOAWAY a connection this old (±10 %), so\nclients spread over new pods"), parse_positive_duration;
    MAX_CONNECTION_AGE_GRACE: Duration = About::new("max_connection_age_grace", Text("10s"), "time a connection past its age has to finish"), parse_duration;
    LOG_FORMAT: LogFormat = About::new("log_format", Text("text"), "stderr log lines: `text` for people, `json` for\nlog pipelines (one object per line)"), LogFormat::parse;
    WORKER_THREADS: usize = About::new("worker_threads", Cpus, "runtime threads, 1 to 1024"), |t| whole_number(t, 1, 1024);
}

/// `host:port`, where host is an IP address or a name resolved at start-up
/// (`localhost:50051`).
fn parse_addr(text: &str) -> Result<SocketAddr, String> {
    if let Ok(addr) = text.parse() {
        return Ok(addr);
    }
    std::net::ToSocketAddrs::to_socket_addrs(text)
        .ok()
        .and_then(|mut addrs| addrs.next())
        .ok_or_else(|| format!("`{text}` is not a host:port address such as 0.0.0.0:50051"))
}

/// An address, or `off`.
fn parse_addr_or_off(text: &str) -> Result<Option<SocketAddr>, String> {
    match text {
        "off" => Ok(None),
        text => parse_addr(text).map(Some),
    }
}

/// Any text; storage checks what it means (a URL, a credential).
fn parse_text(text: &str) -> Result<String, String> {
    Ok(text.to_owned())
}

fn parse_path(text: &str) -> Result<PathBuf, String> {
    match text {
        "" => Err("is empty; give the path of a file".to_owned()),
        path => Ok(PathBuf::from(path)),
    }
}

fn whole_number<T: FromStr + PartialOrd + std::fmt::Display>(
    text: &str,
    min: T,
    max: T,
) -> Result<T, String> {
    match text.parse::<T>() {
        Ok(n) if min <= n && n <= max => Ok(n),
        _ => Err(format!(
            "`{text}` is not a whole number from {min} to {max}"
        )),
    }
}

/// A decimal number from 0 to 1.
fn parse_score_ratio(text: &str) -> Result<ScoreRatio, String> {
    text.parse::<f64>()
        .ok()
        .and_then(ScoreRatio::new)
        .ok_or_else(|| format!("`{text}` is not a number from 0 to 1"))
}

/// Seconds (`3600`) or a duration (`90d`, `12h`, `250ms`).
fn parse_duration(text: &str) -> Result<Duration, String> {
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

/// The longest `REDIS_TIMEOUT`: a payment's hot path never waits a minute
/// for one Redis call, and the bound keeps every deadline sum finite.
const MAX_REDIS_TIMEOUT: Duration = Duration::from_secs(60);

fn parse_redis_timeout(text: &str) -> Result<Duration, String> {
    match parse_positive_duration(text)? {
        d if d > MAX_REDIS_TIMEOUT => Err(format!(
            "`{text}` is longer than {}s",
            MAX_REDIS_TIMEOUT.as_secs()
        )),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_take_ips_and_host_names() {
        assert_eq!(parse_addr("[::]:50051").unwrap().port(), 50051);
        assert!(parse_addr("localhost:9464").unwrap().ip().is_loopback());
        assert!(parse_addr("nowhere").is_err());
        assert!(parse_addr("0.0.0.0:99999").is_err());
    }

    #[test]
    fn durations_take_seconds_or_units() {
        assert_eq!(parse_duration("90d"), Ok(Duration::from_secs(90 * 86_400)));
        assert_eq!(parse_duration("45"), Ok(Duration::from_secs(45)));
        assert!(parse_whole_seconds("500ms").is_err());
        assert!(parse_duration("ninety").is_err());
    }

    #[test]
    fn keys_are_unique_and_no_setting_hides_in_a_family() {
        for (i, a) in ALL.iter().enumerate() {
            for b in &ALL[i + 1..] {
                assert_ne!(a.key, b.key);
            }
            for family in ALL.iter().filter(|f| f.per_merchant) {
                assert!(
                    a.per_merchant || !a.key.starts_with(family.key),
                    "{} would read as a merchant of {}",
                    a.key,
                    family.key
                );
            }
        }
    }

    #[test]
    fn followed_settings_exist_and_cpu_defaults_parse() {
        for about in ALL {
            if let Fallback::Follows(key) = about.default {
                assert!(ALL.iter().any(|other| other.key == key), "{key}");
            }
        }
        let cpus = std::thread::available_parallelism().map_or(1, usize::from);
        assert!((REDIS_POOL_SIZE.parse)(&cpus.to_string()).is_ok());
        assert!((WORKER_THREADS.parse)(&cpus.to_string()).is_ok());
    }
}
