//! The settings configuration owns, declared once each: the listeners,
//! gRPC TLS and the admin list, the domain's rules (the domain is pure and
//! reads nothing), the serving limits, the circuit breaker, the rollout
//! (mode, holdout, experiment) and the runtime. Storage declares
//! its Redis settings and telemetry its log format, each beside the code
//! that reads them; [`all`] lists every declaration, in `--help` order.
//!
//! Everything else about settings comes from the declarations: `--help`,
//! which names the TOML file and the environment may use, the warning about
//! an unknown `STICKY_ROUTING_*` variable, and the name a problem is reported
//! under. A test holds the README's configuration table and
//! `deploy/config.env` (the ConfigMap's settings) to them, so the docs cannot
//! drift either.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

pub(super) use crate::declare::Setting;
use crate::declare::parse::{
    addr as parse_addr, addr_or_off as parse_addr_or_off, duration as parse_duration,
    path as parse_path, positive_duration as parse_positive_duration, whole_number,
};
use crate::declare::{About, Fallback, settings};
use crate::domain::breaker::Share;
use crate::domain::memory_guard::MemoryLimit;
use crate::domain::percent::Percent;
use crate::domain::pin::ScoreRatio;
use crate::domain::rollout::{HoldoutShare, Mode};
use crate::domain::tenant::TenantAllowlist;
use crate::pki::AdminClients;
use crate::{storage, telemetry};

/// Every setting, in `--help` order: the server's, Redis's, the rules and
/// limits, the circuit breaker, the rollout, the log format, the runtime.
pub(super) fn all() -> impl Iterator<Item = &'static About> + Clone {
    SERVER
        .iter()
        .chain(storage::REDIS_SETTINGS)
        .chain(RULES_AND_LIMITS)
        .chain(CIRCUIT_BREAKER)
        .chain(ROLLOUT)
        .chain(telemetry::TELEMETRY_SETTINGS)
        .chain(RUNTIME)
}

use Fallback::{Cpus, Follows, PerCpu, Text, Unset};

settings! {
    pub(super) SERVER;
    LISTEN_ADDR: SocketAddr = About::new("listen_addr", Text("0.0.0.0:50051"), "gRPC address"), parse_addr;
    METRICS_ADDR: SocketAddr = About::new("metrics_addr", Text("0.0.0.0:9464"), "Prometheus /metrics address"), parse_addr;
    HEALTH_LISTEN_ADDR: Option<SocketAddr> = About::new("health_listen_addr", Text("0.0.0.0:50052"), "plaintext grpc.health.v1 only, for probes\nthat do not speak TLS; `off` disables it"), parse_addr_or_off;
    TLS_CERT_FILE: PathBuf = About::new("tls_cert_file", Unset("plaintext gRPC"), "PEM server certificate chain: serve gRPC over TLS\n(with the key); re-read when it changes"), parse_path;
    TLS_KEY_FILE: PathBuf = About::new("tls_key_file", Unset(""), "PEM server key (PKCS#8, PKCS#1 RSA or SEC1 EC)"), parse_path;
    TLS_CLIENT_CA_FILE: PathBuf = About::new("tls_client_ca_file", Unset("no client certificates"), "PEM CA that signs client certificates: mTLS"), parse_path;
    ADMIN_CLIENTS: AdminClients = About::new("admin_clients", Unset("any authenticated client"), "with mTLS: the client identities allowed GetHabits\nand ForgetCustomer, comma-separated: a URI\n(spiffe://…) matches URI names, a bare name DNS names"), AdminClients::parse;
    TENANTS: TenantAllowlist = About::new("tenants", Unset("any valid tenant id"), "the `x-tenant-id` values allowed besides the\ndefault tenant, comma-separated (case kept); any\nother is PERMISSION_DENIED"), TenantAllowlist::parse;
}

settings! {
    pub(super) RULES_AND_LIMITS;
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
}

settings! {
    pub(super) CIRCUIT_BREAKER;
    BREAKER: bool = About::new("breaker", Text("on"), "the connector circuit breaker: `on` or `off`;\n`off` counts and keeps nothing, as before v1.2"), parse_on_off;
    BREAKER_WINDOW: Duration = About::new("breaker_window", Text("60s"), "the breaker counts calls over this window, at\nleast 1s"), parse_breaker_duration;
    BREAKER_MIN_CALLS: u32 = About::new("breaker_min_calls", Text("20"), "calls in the window before a breaker can open,\n1 to 1000000"), |t| whole_number(t, 1, 1_000_000);
    BREAKER_FAILURE_RATIO: Share = About::new("breaker_failure_ratio", Text("0.5"), "failures / calls at which a breaker opens: 0.5,\nor 1% to 100%"), Share::parse;
    BREAKER_OPEN_FOR: Duration = About::new("breaker_open_for", Text("30s"), "how long an open breaker vetoes its connector\nbefore probing it, at least 1s"), parse_breaker_duration;
    BREAKER_PROBE_CALLS: u32 = About::new("breaker_probe_calls", Text("5"), "calls a half-open breaker counts before it\ncloses or opens again, 1 to 1000000"), |t| whole_number(t, 1, 1_000_000);
    BREAKER_PROBE_SHARE: Share = About::new("breaker_probe_share", Text("10%"), "share of GetPins that may pin to a half-open\nconnector, to probe it: 0.1, or 1% to 100%"), Share::parse;
    BREAKER_MAX_TRACKED: usize = About::new("breaker_max_tracked", Text("100000"), "(merchant, connector) breakers one process keeps\nin memory (a tick's counts, the windows, the breakers\nopen); 1 to 100000000"), |t| whole_number(t, 1, 100_000_000);
}

// The per-merchant families here (`mode_`, `holdout_`) are read by prefix:
// no other setting may start with one (a test holds it), which is why the
// salt is `experiment_salt` and not `holdout_salt`, a merchant's holdout.
settings! {
    pub(super) ROLLOUT;
    MODE: Mode = About::new("mode", Text("on"), "GetPin's mode: `on` pins; `shadow` decides as `on`\nbut answers would_pin only; `off` answers DISABLED\nand reads nothing (RecordOutcome records in all)"), Mode::parse;
    /// The per-merchant override of [`MODE`].
    MODE_FOR: Mode = About::new("mode_", Unset(""), "per-merchant mode").per_merchant(), Mode::parse;
    HOLDOUT: HoldoutShare = About::new("holdout", Text("0%"), "share of each merchant's customers never pinned in\nmode `on` (reason HOLDOUT), 0% to 50%, to 0.01%"), HoldoutShare::parse;
    /// The per-merchant override of [`HOLDOUT`].
    HOLDOUT_FOR: HoldoutShare = About::new("holdout_", Unset(""), "per-merchant holdout share").per_merchant(), HoldoutShare::parse;
    EXPERIMENT_SALT: String = About::new("experiment_salt", Unset("empty"), "bytes hashed before the ids to draw the holdout;\na new salt draws a new holdout"), |t| Ok(t.to_owned());
    EXPERIMENT_RETENTION: Duration = About::new("experiment_retention", Text("35d"), "how long the experiment's daily counts are kept\nin Redis, at least 1d"), parse_retention;
    EXPERIMENT_BATCH_AGE: Duration = About::new("experiment_batch_age", Text("60s"), "how long the experiment's counts wait in their\nshard's log in Redis before they are added into\nthe daily hashes: longer, fewer Redis writes and\na longer log; 1s to 1h"), parse_batch_age;
}

settings! {
    pub(super) RUNTIME;
    WORKER_THREADS: usize = About::new("worker_threads", Cpus, "runtime threads, 1 to 1024"), |t| whole_number(t, 1, 1024);
}

/// A decimal number from 0 to 1.
fn parse_score_ratio(text: &str) -> Result<ScoreRatio, String> {
    text.parse::<f64>()
        .ok()
        .and_then(ScoreRatio::new)
        .ok_or_else(|| format!("`{text}` is not a number from 0 to 1"))
}

/// `on` or `off`, in any case.
fn parse_on_off(text: &str) -> Result<bool, String> {
    match text.to_ascii_lowercase().as_str() {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(format!("`{text}` is neither `on` nor `off`")),
    }
}

/// The longest breaker window or open time: a day is far past any use,
/// and keeps every sum of them in milliseconds (and Redis TTLs) small.
const MAX_BREAKER_DURATION: Duration = Duration::from_secs(86_400);

/// A breaker window or open time: at least 1s (the window is counted in
/// tenths of it), at most a day.
fn parse_breaker_duration(text: &str) -> Result<Duration, String> {
    match parse_duration(text)? {
        d if d < Duration::from_secs(1) => Err(format!("`{text}` is shorter than 1s")),
        d if d > MAX_BREAKER_DURATION => Err(format!("`{text}` is longer than 1d")),
        d => Ok(d),
    }
}

/// The experiment's retention: whole seconds (a Redis TTL), at least a
/// day, since the counts are kept by UTC day.
fn parse_retention(text: &str) -> Result<Duration, String> {
    match parse_whole_seconds(text)? {
        d if d < Duration::from_secs(86_400) => Err(format!("`{text}` is shorter than 1d")),
        d => Ok(d),
    }
}

/// How long a log's counts wait before they are added: 1 s to an hour.
fn parse_batch_age(text: &str) -> Result<Duration, String> {
    match parse_duration(text)? {
        d if d < Duration::from_secs(1) => Err(format!("`{text}` is shorter than 1s")),
        d if d > Duration::from_secs(3600) => Err(format!("`{text}` is longer than 1h")),
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
    fn durations_take_seconds_or_units() {
        assert_eq!(parse_duration("90d"), Ok(Duration::from_secs(90 * 86_400)));
        assert_eq!(parse_duration("45"), Ok(Duration::from_secs(45)));
        assert!(parse_whole_seconds("500ms").is_err());
        assert!(parse_duration("ninety").is_err());
    }

    #[test]
    fn shares_take_a_decimal_or_a_percentage_in_zero_to_one() {
        let share = |text| (BREAKER_PROBE_SHARE.parse)(text).map(Share::get);
        assert_eq!(share("0.5"), Ok(0.5));
        assert_eq!(share("1"), Ok(1.0));
        assert_eq!(share("0.001"), Ok(0.001));
        assert_eq!(share("10%"), Ok(0.1));
        assert_eq!(share("12.5%"), Ok(0.125));
        assert_eq!(share("100%"), Ok(1.0));
        assert_eq!(share("1%"), Ok(0.01));
        for bad in [
            "", "0", "0.0", "1.01", "2", "-0.5", ".5", "5.", "0%", "0.5%", "101%", "50", "1e-1",
            "NaN", "inf", "half", "10 %",
        ] {
            let why = (BREAKER_FAILURE_RATIO.parse)(bad).unwrap_err();
            assert!(why.contains(&format!("`{bad}`")), "{bad}: {why}");
        }
    }

    #[test]
    fn breaker_durations_run_from_a_second_to_a_day() {
        assert_eq!(parse_breaker_duration("1s"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_breaker_duration("60"), Ok(Duration::from_secs(60)));
        assert_eq!(
            parse_breaker_duration("1500ms"),
            Ok(Duration::from_millis(1500))
        );
        assert_eq!(parse_breaker_duration("1d"), Ok(MAX_BREAKER_DURATION));
        for bad in ["999ms", "0", "25h", "soon"] {
            assert!(parse_breaker_duration(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_on_off("OFF"), Ok(false));
        assert_eq!(parse_on_off("on"), Ok(true));
        assert!(parse_on_off("true").is_err());
    }

    #[test]
    fn keys_are_unique_and_no_setting_hides_in_a_family() {
        let all: Vec<&About> = all().collect();
        for (i, a) in all.iter().enumerate() {
            for b in &all[i + 1..] {
                assert_ne!(a.key, b.key);
            }
            for family in all.iter().filter(|f| f.per_merchant) {
                assert!(
                    a.per_merchant || !a.key.starts_with(family.key),
                    "{} would read as a merchant of {}",
                    a.key,
                    family.key
                );
            }
        }
    }

    /// A family read by prefix must not swallow another family's names
    /// either: `STICKY_ROUTING_HOLDOUT_x` is merchant `x`'s holdout, never
    /// some other family's member.
    #[test]
    fn no_family_hides_in_another() {
        let families: Vec<&About> = all().filter(|f| f.per_merchant).collect();
        assert!(families.len() >= 3);
        for a in &families {
            for b in &families {
                assert!(
                    a.key == b.key || !a.key.starts_with(b.key),
                    "{} would read as a merchant of {}",
                    a.key,
                    b.key
                );
            }
        }
    }

    #[test]
    fn a_batch_age_is_a_second_to_an_hour() {
        assert_eq!(parse_batch_age("60s"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_batch_age("1h"), Ok(Duration::from_secs(3600)));
        for bad in ["500ms", "0", "61m", "soon"] {
            assert!(parse_batch_age(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn retention_is_at_least_a_day_in_whole_seconds() {
        assert_eq!(parse_retention("35d"), Ok(Duration::from_secs(35 * 86_400)));
        assert_eq!(parse_retention("1d"), Ok(Duration::from_secs(86_400)));
        assert_eq!(parse_retention("86400"), Ok(Duration::from_secs(86_400)));
        for bad in ["23h", "86399", "0", "soon", ""] {
            assert!(parse_retention(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn followed_settings_exist_and_cpu_defaults_parse() {
        for about in all() {
            if let Fallback::Follows(key) = about.default {
                assert!(all().any(|other| other.key == key), "{key}");
            }
        }
        let cpus = std::thread::available_parallelism().map_or(1, usize::from);
        assert!((WORKER_THREADS.parse)(&cpus.to_string()).is_ok());
    }
}
