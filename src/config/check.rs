//! Typing the raw values: each bad one becomes a problem that names its
//! variable, and all problems are reported together.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::sources::{Raw, RawValues};
use super::{
    ClientCertFiles, ConfigError, RedisSettings, RuleSettings, Secret, Settings, TlsFiles,
};
use crate::domain::admission::Budgets;
use crate::storage::UrlFacts;
use crate::storage::tls::{self, TlsFile};

/// Types `raw`, falling back on the built-in defaults.
pub(super) fn check(raw: RawValues) -> Result<Settings, ConfigError> {
    let RawValues {
        values,
        overrides,
        problems,
    } = raw;
    let mut c = Checker { values, problems };
    let cpus = std::thread::available_parallelism()
        .map_or(1, usize::from)
        .to_string();
    let listen_addr = c.value("listen_addr", "0.0.0.0:50051", parse_addr);
    let metrics_addr = c.value("metrics_addr", "0.0.0.0:9464", parse_addr);
    let url = c.value("redis_url", "redis://127.0.0.1:6379", parse_redis_url);
    let username = c.value_or_file("redis_username");
    let password = c.value_or_file("redis_password").map(Secret::new);
    if let Some((_, facts)) = &url {
        c.one_source_of_credentials(facts, username.is_some(), password.is_some());
    }
    let tls = c.tls_files(url.as_ref().map(|(_, facts)| facts.uses_tls));
    let pool_size = c.value("redis_pool_size", &cpus, |t| parse_in_range(t, 1, 1024));
    let command_timeout = c.value("redis_timeout", "250ms", parse_positive_duration);
    let key_ttl = c.value("key_ttl", "90d", parse_whole_seconds);
    let admission_window = match c.values.contains_key("admission_window") {
        true => c.value("admission_window", "", parse_whole_seconds),
        false => key_ttl,
    };
    let max_combos = c.value("max_combos_per_customer", "30", |t| {
        parse_in_range(t, 1, 10_000)
    });
    let default_budget = c.value("max_customers", "1000000", parse_u64);
    let overrides = c.overrides(overrides);
    let min_pin_count = c.value("min_pin_count", "1", |t| {
        parse_in_range(t, 1, i64::MAX as usize)
    });
    let shutdown_grace = c.value("shutdown_grace", "20s", parse_duration);
    let max_in_flight_per_connection = c.value("max_in_flight_per_connection", "4096", |t| {
        parse_in_range(t, 1, 1_000_000)
    });
    let worker_threads = c.value("worker_threads", &cpus, |t| parse_in_range(t, 1, 1024));
    let settings = || -> Option<Settings> {
        Some(Settings {
            listen_addr: listen_addr?,
            metrics_addr: metrics_addr?,
            redis: RedisSettings {
                url: url?.0,
                username,
                password,
                tls,
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
            worker_threads: worker_threads?,
        })
    };
    match settings() {
        Some(settings) if c.problems.is_empty() => Ok(settings),
        _ => Err(ConfigError {
            problems: c.problems,
        }),
    }
}

struct Checker {
    values: HashMap<&'static str, Raw>,
    problems: Vec<String>,
}

impl Checker {
    /// Parses the value of `key` (or `default`), recording a problem that
    /// names the variable when it is bad.
    fn value<T>(
        &mut self,
        key: &str,
        default: &str,
        parse: impl Fn(&str) -> Result<T, String>,
    ) -> Option<T> {
        let Some(raw) = self.values.get(key) else {
            return parse(default).ok();
        };
        parse(raw.text.trim())
            .map_err(|why| self.problems.push(format!("{}: {why}", raw.describe(key))))
            .ok()
    }

    /// A value given directly (`STICKY_ROUTING_REDIS_PASSWORD`) or as the
    /// path of a file holding it (`..._FILE`, the Kubernetes secret habit).
    /// One trailing newline of the file is dropped.
    fn value_or_file(&mut self, key: &str) -> Option<String> {
        let file_key = format!("{key}_file");
        match (self.values.get(key), self.values.get(file_key.as_str())) {
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
                let path = file.text.trim();
                match std::fs::read_to_string(path) {
                    Ok(text) => {
                        let text = text.strip_suffix('\n').unwrap_or(&text);
                        let text = text.strip_suffix('\r').unwrap_or(text);
                        if text.is_empty() {
                            self.problems
                                .push(format!("{}: {path} is empty", file.describe(&file_key)));
                            return None;
                        }
                        Some(text.to_owned())
                    }
                    Err(e) => {
                        self.problems.push(format!(
                            "{}: cannot read {path}: {e}",
                            file.describe(&file_key)
                        ));
                        None
                    }
                }
            }
            (None, None) => None,
        }
    }

    /// How a problem names the setting `key`: as [`Raw::describe`] when it
    /// was given, else just its variable.
    fn name(&self, key: &str) -> String {
        self.values
            .get(key)
            .map_or_else(|| Raw::env_name(key), |raw| raw.describe(key))
    }

    /// Credentials come from the URL or from their own settings, never
    /// both: which one wins would be a guess.
    fn one_source_of_credentials(&mut self, url: &UrlFacts, username: bool, password: bool) {
        for (given, in_url, key) in [
            (username, url.has_username, "redis_username"),
            (password, url.has_password, "redis_password"),
        ] {
            if given && in_url {
                let file_key = format!("{key}_file");
                let set = if self.values.contains_key(key) {
                    key
                } else {
                    &file_key
                };
                let name = self.name(set);
                self.problems.push(format!(
                    "{name}: STICKY_ROUTING_REDIS_URL holds one too; give one"
                ));
            }
        }
    }

    /// The TLS files, checked by reading them. They only make sense with a
    /// TLS URL (`rediss://`), so setting them without one is an error rather
    /// than a silently plaintext connection.
    fn tls_files(&mut self, url_uses_tls: Option<bool>) -> Option<TlsFiles> {
        const CA: &str = "redis_tls_ca_file";
        const CERT: &str = "redis_tls_cert_file";
        const KEY: &str = "redis_tls_key_file";
        let path =
            |c: &Self, key: &str| c.values.get(key).map(|raw| PathBuf::from(raw.text.trim()));
        let client_cert = match (path(self, CERT), path(self, KEY)) {
            (Some(cert_file), Some(key_file)) => Some(ClientCertFiles {
                cert_file,
                key_file,
            }),
            (None, None) => None,
            (cert, _) => {
                let (set, missing) = if cert.is_some() {
                    (CERT, KEY)
                } else {
                    (KEY, CERT)
                };
                let problem = format!(
                    "{}: needs {} as well",
                    self.name(set),
                    Raw::env_name(missing)
                );
                self.problems.push(problem);
                return None;
            }
        };
        let files = TlsFiles {
            ca_file: path(self, CA),
            client_cert,
        };
        let set = [CA, CERT, KEY]
            .into_iter()
            .find(|key| self.values.contains_key(key))?;
        if url_uses_tls == Some(false) {
            let problem = format!(
                "{}: set, but STICKY_ROUTING_REDIS_URL does not use TLS (rediss://, rediss-cluster://, rediss-sentinel://)",
                self.name(set)
            );
            self.problems.push(problem);
            return None;
        }
        for problem in tls::check_files(&files) {
            let key = match problem.file {
                TlsFile::Ca => CA,
                TlsFile::Cert => CERT,
                TlsFile::Key => KEY,
            };
            let line = format!("{}: {problem}", self.name(key));
            self.problems.push(line);
        }
        Some(files)
    }

    fn overrides(&mut self, raw: HashMap<String, Raw>) -> HashMap<String, u64> {
        let mut budgets = HashMap::new();
        for (merchant, value) in raw {
            let name = value.describe_override(&merchant);
            if merchant.trim().is_empty() || merchant.trim() != merchant {
                self.problems.push(format!(
                    "{name}: the merchant id must be non-empty and trimmed"
                ));
                continue;
            }
            match parse_u64(value.text.trim()) {
                Ok(budget) => {
                    budgets.insert(merchant, budget);
                }
                Err(why) => self.problems.push(format!("{name}: {why}")),
            }
        }
        budgets
    }
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

fn parse_redis_url(text: &str) -> Result<(String, UrlFacts), String> {
    let facts = crate::storage::check_redis_url(text)?;
    Ok((text.to_owned(), facts))
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
}
