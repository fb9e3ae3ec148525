//! Typing the raw values by their declarations: each bad value becomes a
//! problem that names its variable, and all problems are reported together.

use std::collections::HashMap;

use super::declarations::{
    self as declared, About, Fallback, KEY_TTL, MAX_CUSTOMERS, MAX_CUSTOMERS_FOR, Setting,
};
use super::sources::{Raw, RawValues};
use super::{ConfigError, Settings};
use crate::domain::Rules;
use crate::domain::admission::Budgets;
use crate::domain::ids::MerchantId;
use crate::domain::priority::Shares;
use crate::pki::{AdminClients, ServerTlsFiles, TlsFileKind};
use crate::storage::{RedisSetting, RedisSettings, Secret, TlsFiles};
use crate::telemetry::TelemetrySettings;

/// Types `raw`, falling back on the declared defaults.
pub(super) fn check(raw: RawValues) -> Result<Settings, ConfigError> {
    let RawValues {
        values,
        mut per_merchant,
        problems,
    } = raw;
    let mut c = Checker { values, problems };
    let listen_addr = c.value(&declared::LISTEN_ADDR);
    let metrics_addr = c.value(&declared::METRICS_ADDR);
    let health_listen_addr = c.value(&declared::HEALTH_LISTEN_ADDR);
    let (tls, admin_clients) = c.server_tls();
    let redis = c.redis();
    let key_ttl = c.value(&KEY_TTL);
    let admission_window = c.value_or(&declared::ADMISSION_WINDOW, key_ttl);
    let admission_memory_limit = c.value(&declared::ADMISSION_MEMORY_LIMIT);
    let max_combos_per_customer = c.value(&declared::MAX_COMBOS_PER_CUSTOMER);
    let default_budget = c.value(&MAX_CUSTOMERS);
    let overrides = c.per_merchant(
        &MAX_CUSTOMERS_FOR,
        per_merchant.remove(MAX_CUSTOMERS_FOR.about.key),
    );
    let min_pin_count = c.value(&declared::MIN_PIN_COUNT);
    let min_score_ratio = c.value(&declared::MIN_SCORE_RATIO);
    let shutdown_grace = c.value(&declared::SHUTDOWN_GRACE);
    let max_in_flight = c.value(&declared::MAX_IN_FLIGHT);
    let shares = c.shares();
    let max_connection_age = c.value(&declared::MAX_CONNECTION_AGE);
    let max_connection_age_grace = c.value(&declared::MAX_CONNECTION_AGE_GRACE);
    let worker_threads = c.value(&declared::WORKER_THREADS);
    let log_format = c.value(&declared::LOG_FORMAT);
    let settings = || -> Option<Settings> {
        Some(Settings {
            listen_addr: listen_addr?,
            metrics_addr: metrics_addr?,
            health_listen_addr: health_listen_addr?,
            tls,
            admin_clients: admin_clients?,
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
            },
            shutdown_grace: shutdown_grace?,
            max_in_flight: max_in_flight?,
            shares: shares?,
            max_connection_age: max_connection_age?,
            max_connection_age_grace: max_connection_age_grace?,
            worker_threads: worker_threads?,
            // The `OTEL_*` variables are read beside these, in `Settings::load`.
            telemetry: TelemetrySettings {
                log_format: log_format?,
                traces: None,
            },
        })
    };
    match settings() {
        Some(settings) if c.problems.is_empty() => Ok(settings),
        _ => Err(ConfigError::new(c.problems)),
    }
}

struct Checker {
    values: HashMap<String, Raw>,
    problems: Vec<String>,
}

impl Checker {
    /// The setting's value, given or by its default; `None` after
    /// recording a problem that names the variable.
    fn value<T>(&mut self, setting: &Setting<T>) -> Option<T> {
        let key = setting.about.key;
        if self.values.contains_key(key) {
            return self.optional(setting);
        }
        match setting.about.default {
            Fallback::Text(text) => self.parse(setting, key, text),
            Fallback::Cpus => self.parse(setting, key, &cpus().to_string()),
            Fallback::PerCpu(n) => {
                let value = n.saturating_mul(cpus());
                self.parse(setting, key, &value.to_string())
            }
            Fallback::Follows(_) | Fallback::Unset(_) => {
                self.problems.push(format!(
                    "{}: has no default; this is a bug, please report it",
                    Raw::env_name(key)
                ));
                None
            }
        }
    }

    /// For a setting whose default follows another: its own value when
    /// given, else `other`.
    fn value_or<T>(&mut self, setting: &Setting<T>, other: Option<T>) -> Option<T> {
        match self.values.contains_key(setting.about.key) {
            true => self.optional(setting),
            false => other,
        }
    }

    /// An optional setting: `None` when not given (or bad, with a problem).
    fn optional<T>(&mut self, setting: &Setting<T>) -> Option<T> {
        let key = setting.about.key;
        let text = self.values.get(key)?.text.trim().to_owned();
        self.parse(setting, key, &text)
    }

    /// A value given directly (`STICKY_ROUTING_REDIS_PASSWORD`), verbatim,
    /// or as the path of a file holding it (`..._FILE`, the Kubernetes
    /// secret habit). One trailing newline of the file is dropped.
    fn optional_or_file(&mut self, setting: &Setting<String>) -> Option<String> {
        let key = setting.about.key;
        let file_key = format!("{key}_file");
        match (self.values.get(key), self.values.get(&file_key)) {
            (Some(direct), Some(file)) => {
                self.problems.push(format!(
                    "{} and {}: both are set; give one",
                    direct.describe(key),
                    file.describe(&file_key)
                ));
                None
            }
            (Some(direct), None) => Some(direct.text.clone()),
            (None, Some(file)) => {
                let (name, path) = (file.describe(&file_key), file.text.trim().to_owned());
                let text = match std::fs::read_to_string(&path) {
                    Ok(text) => text,
                    Err(e) => {
                        self.problems
                            .push(format!("{name}: cannot read {path}: {e}"));
                        return None;
                    }
                };
                let text = text.strip_suffix('\n').unwrap_or(&text);
                let text = text.strip_suffix('\r').unwrap_or(text);
                if text.is_empty() {
                    self.problems.push(format!("{name}: {path} is empty"));
                    return None;
                }
                Some(text.to_owned())
            }
            (None, None) => None,
        }
    }

    fn parse<T>(&mut self, setting: &Setting<T>, key: &str, text: &str) -> Option<T> {
        (setting.parse)(text)
            .map_err(|why| {
                let name = self.name(key);
                self.problems.push(format!("{name}: {why}"));
            })
            .ok()
    }

    /// How a problem names the setting `key`: as [`Raw::describe`] when it
    /// was given, else just its variable.
    fn name(&self, key: &str) -> String {
        self.values
            .get(key)
            .map_or_else(|| Raw::env_name(key), |raw| raw.describe(key))
    }

    /// The priority shares; the low share must not exceed the feedback
    /// share, or admin calls and backfills could start where RecordOutcome
    /// may not.
    fn shares(&mut self) -> Option<Shares> {
        let feedback = self.value(&declared::FEEDBACK_SHARE);
        let low = self.value(&declared::LOW_SHARE);
        let (feedback, low) = (feedback?, low?);
        if low > feedback {
            let name = self.name(declared::LOW_SHARE.about.key);
            let other = self.name(declared::FEEDBACK_SHARE.about.key);
            self.problems.push(format!(
                "{name}: {low} is above {other} ({feedback}); admin and low calls \
                 may not start where RecordOutcome may not"
            ));
            return None;
        }
        Some(Shares { feedback, low })
    }

    /// The Redis settings, checked by storage, which knows what can work.
    fn redis(&mut self) -> Option<RedisSettings> {
        let url = self.value(&declared::REDIS_URL);
        let username = self.optional_or_file(&declared::REDIS_USERNAME);
        let password = self
            .optional_or_file(&declared::REDIS_PASSWORD)
            .map(Secret::new);
        let tls = self.tls_files();
        let pool_size = self.value(&declared::REDIS_POOL_SIZE);
        let command_timeout = self.value(&declared::REDIS_TIMEOUT);
        let queue_limit = self.value(&declared::REDIS_QUEUE_LIMIT);
        // Checked even when a number is bad, so every problem shows at once.
        let settings = RedisSettings {
            url: url?,
            username,
            password,
            tls,
            pool_size: pool_size.unwrap_or(1),
            command_timeout: command_timeout.unwrap_or_default(),
            queue_limit: queue_limit.unwrap_or(1),
        };
        let problems = settings.problems(&|setting| self.redis_name(setting));
        self.problems.extend(problems);
        Some(settings)
            .filter(|_| pool_size.is_some() && command_timeout.is_some() && queue_limit.is_some())
    }

    /// The TLS files; a certificate without its key is a problem here, and
    /// the rest of the Redis settings are checked as if neither were set.
    fn tls_files(&mut self) -> Option<TlsFiles> {
        let ca = self.optional(&declared::REDIS_TLS_CA_FILE);
        let cert = self.optional(&declared::REDIS_TLS_CERT_FILE);
        let key = self.optional(&declared::REDIS_TLS_KEY_FILE);
        match TlsFiles::from_paths(ca, cert, key) {
            Ok(files) => files,
            Err((given, missing)) => {
                let problem = format!(
                    "{}: needs {} as well",
                    self.redis_name(given),
                    Raw::env_name(redis_key(missing))
                );
                self.problems.push(problem);
                None
            }
        }
    }

    /// gRPC TLS and who may call the admin RPCs. The files are read and
    /// checked here, so that every problem is reported at start, by its
    /// variable.
    fn server_tls(&mut self) -> (Option<ServerTlsFiles>, Option<AdminClients>) {
        let (cert_about, key_about) = (
            &declared::TLS_CERT_FILE.about,
            &declared::TLS_KEY_FILE.about,
        );
        let (ca_about, admin_about) = (
            &declared::TLS_CLIENT_CA_FILE.about,
            &declared::ADMIN_CLIENTS.about,
        );
        let given = |about: &About| self.values.contains_key(about.key);
        let (cert_given, key_given) = (given(cert_about), given(key_about));
        let (ca_given, admin_given) = (given(ca_about), given(admin_about));
        let cert = self.optional(&declared::TLS_CERT_FILE);
        let key = self.optional(&declared::TLS_KEY_FILE);
        let client_ca = self.optional(&declared::TLS_CLIENT_CA_FILE);
        let admin = self.optional(&declared::ADMIN_CLIENTS);
        let named = |about: &About| Raw::env_name(about.key);
        let alone = match (cert_given, key_given) {
            (true, false) => Some((cert_about, key_about)),
            (false, true) => Some((key_about, cert_about)),
            _ => None,
        };
        if let Some((given, missing)) = alone {
            let problem = format!("{}: needs {} as well", self.name(given.key), named(missing));
            self.problems.push(problem);
        }
        if client_ca.is_some() && !cert_given && !key_given {
            let problem = format!(
                "{}: mTLS needs a server certificate; set {} and {}",
                self.name(ca_about.key),
                named(cert_about),
                named(key_about)
            );
            self.problems.push(problem);
        }
        if admin_given && !ca_given {
            let problem = format!(
                "{}: names client identities, which only mTLS proves; set {} (with the server certificate and key)",
                self.name(admin_about.key),
                named(ca_about)
            );
            self.problems.push(problem);
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
            let problem = format!("{}: {problem}", self.name(setting.key));
            self.problems.push(problem);
        }
        let admin = match admin_given {
            true => admin,
            false => Some(AdminClients::Anyone),
        };
        (files, admin)
    }

    /// How a problem names a Redis setting: by the form that was given.
    fn redis_name(&self, setting: RedisSetting) -> String {
        let key = redis_key(setting);
        let file_key = format!("{key}_file");
        match self.values.contains_key(&file_key) && !self.values.contains_key(key) {
            true => self.name(&file_key),
            false => self.name(key),
        }
    }

    /// One family's values by merchant id; an id that breaks the merchant
    /// id rule is a problem, since no request could ever match it.
    fn per_merchant<T>(
        &mut self,
        family: &Setting<T>,
        raw: Option<HashMap<String, Raw>>,
    ) -> HashMap<MerchantId, T> {
        let mut values = HashMap::new();
        for (merchant, value) in raw.unwrap_or_default() {
            let name = value.describe_member(family.about.key, &merchant);
            let id = match MerchantId::parse(&merchant) {
                Ok(id) if id.as_str() == merchant => id,
                Ok(_) => {
                    self.problems
                        .push(format!("{name}: the merchant id must be trimmed"));
                    continue;
                }
                Err(invalid) => {
                    self.problems
                        .push(format!("{name}: the merchant id {}", invalid.reason));
                    continue;
                }
            };
            match (family.parse)(value.text.trim()) {
                Ok(parsed) => {
                    values.insert(id, parsed);
                }
                Err(why) => self.problems.push(format!("{name}: {why}")),
            }
        }
        values
    }
}

/// The declared key of each Redis setting.
fn redis_key(setting: RedisSetting) -> &'static str {
    let declared: &About = match setting {
        RedisSetting::Url => &declared::REDIS_URL.about,
        RedisSetting::Username => &declared::REDIS_USERNAME.about,
        RedisSetting::Password => &declared::REDIS_PASSWORD.about,
        RedisSetting::TlsCaFile => &declared::REDIS_TLS_CA_FILE.about,
        RedisSetting::TlsCertFile => &declared::REDIS_TLS_CERT_FILE.about,
        RedisSetting::TlsKeyFile => &declared::REDIS_TLS_KEY_FILE.about,
    };
    declared.key
}

/// The CPUs this process may run on (its affinity, on Linux).
fn cpus() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}
