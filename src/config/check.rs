//! Typing the raw values by their declarations: configuration's own
//! settings here, Redis's and telemetry's by their owners
//! (`from_declared`), every problem collected in one [`Checker`] and
//! reported together.

use std::collections::HashMap;

use super::declarations::{self as declared, KEY_TTL, MAX_CUSTOMERS, MAX_CUSTOMERS_FOR, Setting};
use super::sources::RawValues;
use super::{ConfigError, Settings};
use crate::declare::{About, Checker, Raw};
use crate::domain::Rules;
use crate::domain::admission::Budgets;
use crate::domain::breaker::BreakerSettings;
use crate::domain::ids::MerchantId;
use crate::domain::priority::Shares;
use crate::domain::rollout::Rollout;
use crate::domain::tenant::TenantAllowlist;
use crate::pki::{AdminClients, ServerTlsFiles, TlsFileKind};
use crate::storage::RedisSettings;
use crate::telemetry::TelemetrySettings;

/// Types `raw`, falling back on the declared defaults.
pub(super) fn check(raw: RawValues) -> Result<Settings, ConfigError> {
    let RawValues {
        values,
        mut per_merchant,
        problems,
    } = raw;
    let mut c = Checker::new(values, problems);
    let listen_addr = c.value(&declared::LISTEN_ADDR);
    let metrics_addr = c.value(&declared::METRICS_ADDR);
    let health_listen_addr = c.value(&declared::HEALTH_LISTEN_ADDR);
    let tenants = c.value_or(&declared::TENANTS, Some(TenantAllowlist::ANY));
    let (tls, admin_clients) = server_tls(&mut c);
    let redis = RedisSettings::from_declared(&mut c);
    let key_ttl = c.value(&KEY_TTL);
    let admission_window = c.value_or(&declared::ADMISSION_WINDOW, key_ttl);
    let admission_memory_limit = c.value(&declared::ADMISSION_MEMORY_LIMIT);
    let max_combos_per_customer = c.value(&declared::MAX_COMBOS_PER_CUSTOMER);
    let default_budget = c.value(&MAX_CUSTOMERS);
    let overrides = per_merchant_values(
        &mut c,
        &MAX_CUSTOMERS_FOR,
        per_merchant.remove(MAX_CUSTOMERS_FOR.about.key),
    );
    let min_pin_count = c.value(&declared::MIN_PIN_COUNT);
    let min_score_ratio = c.value(&declared::MIN_SCORE_RATIO);
    let shutdown_grace = c.value(&declared::SHUTDOWN_GRACE);
    let max_in_flight = c.value(&declared::MAX_IN_FLIGHT);
    let shares = shares(&mut c);
    let breaker = breaker(&mut c);
    let rollout = rollout(&mut c, &mut per_merchant);
    let experiment_retention = c.value(&declared::EXPERIMENT_RETENTION);
    let experiment_batch_age = c.value(&declared::EXPERIMENT_BATCH_AGE);
    let max_connection_age = c.value(&declared::MAX_CONNECTION_AGE);
    let max_connection_age_grace = c.value(&declared::MAX_CONNECTION_AGE_GRACE);
    let worker_threads = c.value(&declared::WORKER_THREADS);
    // The `OTEL_*` variables are read beside these, in `Settings::load`.
    let telemetry = TelemetrySettings::from_declared(&mut c);
    let settings = || -> Option<Settings> {
        Some(Settings {
            listen_addr: listen_addr?,
            metrics_addr: metrics_addr?,
            health_listen_addr: health_listen_addr?,
            tls,
            admin_clients: admin_clients?,
            tenants: tenants?,
            redis: redis?,
            rules: Rules {
                key_ttl: key_ttl?,
                max_combos_per_customer: max_combos_per_customer?,
                admission_window: admission_window?,
                budgets: Budgets {
                    default: default_budget?,
                    overrides,
                },
                admission_memory_limit: admission_memory_limit?,
                min_pin_count: min_pin_count?,
                min_score_ratio: min_score_ratio?,
                rollout: rollout?,
            },
            shutdown_grace: shutdown_grace?,
            max_in_flight: max_in_flight?,
            shares: shares?,
            breaker: breaker?,
            experiment_retention: experiment_retention?,
            experiment_batch_age: experiment_batch_age?,
            max_connection_age: max_connection_age?,
            max_connection_age_grace: max_connection_age_grace?,
            worker_threads: worker_threads?,
            telemetry: telemetry?,
        })
    };
    match settings() {
        Some(settings) if !c.has_problems() => Ok(settings),
        _ => Err(ConfigError::new(c.into_problems())),
    }
}

/// The priority shares; the low share must not exceed the feedback
/// share, or admin calls and backfills could start where RecordOutcome
/// may not.
fn shares(c: &mut Checker) -> Option<Shares> {
    let feedback = c.value(&declared::FEEDBACK_SHARE);
    let low = c.value(&declared::LOW_SHARE);
    let (feedback, low) = (feedback?, low?);
    if low > feedback {
        let name = c.name(declared::LOW_SHARE.about.key);
        let other = c.name(declared::FEEDBACK_SHARE.about.key);
        c.problem(format!(
            "{name}: {low} is above {other} ({feedback}); admin and low calls \
             may not start where RecordOutcome may not"
        ));
        return None;
    }
    Some(Shares { feedback, low })
}

/// The circuit breaker's settings, or `Some(None)` when it is off. Every
/// one is checked even when the breaker is off, so that a bad value is
/// found before someone turns it on.
fn breaker(c: &mut Checker) -> Option<Option<BreakerSettings>> {
    let on = c.value(&declared::BREAKER);
    let window = c.value(&declared::BREAKER_WINDOW);
    let min_calls = c.value(&declared::BREAKER_MIN_CALLS);
    let failure_ratio = c.value(&declared::BREAKER_FAILURE_RATIO);
    let open_for = c.value(&declared::BREAKER_OPEN_FOR);
    let probe_calls = c.value(&declared::BREAKER_PROBE_CALLS);
    let probe_share = c.value(&declared::BREAKER_PROBE_SHARE);
    let max_tracked = c.value(&declared::BREAKER_MAX_TRACKED);
    let settings = BreakerSettings {
        window: window?,
        min_calls: min_calls?,
        failure_ratio: failure_ratio?,
        open_for: open_for?,
        probe_calls: probe_calls?,
        probe_share: probe_share?,
        max_tracked: max_tracked?,
    };
    Some(on?.then_some(settings))
}

/// The rollout: the mode and the holdout, each with its per-merchant
/// values, and the experiment's salt, which is taken verbatim (its bytes
/// are hashed; trimming them would draw another holdout).
fn rollout(
    c: &mut Checker,
    per_merchant: &mut HashMap<&'static str, HashMap<String, Raw>>,
) -> Option<Rollout> {
    let mode = c.value(&declared::MODE);
    let mode_for = per_merchant_values(
        c,
        &declared::MODE_FOR,
        per_merchant.remove(declared::MODE_FOR.about.key),
    );
    let holdout = c.value(&declared::HOLDOUT);
    let holdout_for = per_merchant_values(
        c,
        &declared::HOLDOUT_FOR,
        per_merchant.remove(declared::HOLDOUT_FOR.about.key),
    );
    // Not an `_FILE` setting: this reads the given text as it is.
    let salt = c
        .optional_or_file(&declared::EXPERIMENT_SALT)
        .unwrap_or_default();
    Some(Rollout {
        mode: mode?,
        mode_for: by_id(mode_for),
        holdout: holdout?,
        holdout_for: by_id(holdout_for),
        salt: salt.into_bytes(),
    })
}

/// A family's values keyed by the merchant id's text, as the domain's
/// [`Rollout`] keeps them.
fn by_id<T>(values: HashMap<MerchantId, T>) -> HashMap<String, T> {
    values
        .into_iter()
        .map(|(id, value)| (id.as_str().to_owned(), value))
        .collect()
}

/// gRPC TLS and who may call the admin RPCs. The files are read and
/// checked here, so that every problem is reported at start, by its
/// variable.
fn server_tls(c: &mut Checker) -> (Option<ServerTlsFiles>, Option<AdminClients>) {
    let (cert_about, key_about) = (
        &declared::TLS_CERT_FILE.about,
        &declared::TLS_KEY_FILE.about,
    );
    let (ca_about, admin_about) = (
        &declared::TLS_CLIENT_CA_FILE.about,
        &declared::ADMIN_CLIENTS.about,
    );
    let given = |c: &Checker, about: &About| c.given(about.key);
    let (cert_given, key_given) = (given(c, cert_about), given(c, key_about));
    let (ca_given, admin_given) = (given(c, ca_about), given(c, admin_about));
    let cert = c.optional(&declared::TLS_CERT_FILE);
    let key = c.optional(&declared::TLS_KEY_FILE);
    let client_ca = c.optional(&declared::TLS_CLIENT_CA_FILE);
    let admin = c.optional(&declared::ADMIN_CLIENTS);
    let named = |about: &About| Raw::env_name(about.key);
    let alone = match (cert_given, key_given) {
        (true, false) => Some((cert_about, key_about)),
        (false, true) => Some((key_about, cert_about)),
        _ => None,
    };
    if let Some((given, missing)) = alone {
        let problem = format!("{}: needs {} as well", c.name(given.key), named(missing));
        c.problem(problem);
    }
    if client_ca.is_some() && !cert_given && !key_given {
        let problem = format!(
            "{}: mTLS needs a server certificate; set {} and {}",
            c.name(ca_about.key),
            named(cert_about),
            named(key_about)
        );
        c.problem(problem);
    }
    if admin_given && !ca_given {
        let problem = format!(
            "{}: names client identities, which only mTLS proves; set {} (with the server certificate and key)",
            c.name(admin_about.key),
            named(ca_about)
        );
        c.problem(problem);
    }
    let files = match (cert, key) {
        (Some(cert_file), Some(key_file)) => Some(ServerTlsFiles {
            cert_file,
            key_file,
            client_ca_file: client_ca,
        }),
        _ => None,
    };
    if let Some(Err(problem)) = files.as_ref().map(ServerTlsFiles::load) {
        let setting = match problem.file {
            TlsFileKind::Cert => cert_about,
            TlsFileKind::Key => key_about,
            TlsFileKind::ClientCa => ca_about,
        };
        let problem = format!("{}: {problem}", c.name(setting.key));
        c.problem(problem);
    }
    let admin = match admin_given {
        true => admin,
        false => Some(AdminClients::Anyone),
    };
    (files, admin)
}

/// One family's values by merchant id; an id that breaks the merchant
/// id rule is a problem, since no request could ever match it.
fn per_merchant_values<T>(
    c: &mut Checker,
    family: &Setting<T>,
    raw: Option<HashMap<String, Raw>>,
) -> HashMap<MerchantId, T> {
    let mut values = HashMap::new();
    for (merchant, value) in raw.unwrap_or_default() {
        let name = value.describe_member(family.about.key, &merchant);
        let id = match MerchantId::parse(&merchant) {
            Ok(id) if id.as_str() == merchant => id,
            Ok(_) => {
                c.problem(format!("{name}: the merchant id must be trimmed"));
                continue;
            }
            Err(invalid) => {
                c.problem(format!("{name}: the merchant id {}", invalid.reason));
                continue;
            }
        };
        match (family.parse)(value.text.trim()) {
            Ok(parsed) => {
                values.insert(id, parsed);
            }
            Err(why) => c.problem(format!("{name}: {why}")),
        }
    }
    values
}
