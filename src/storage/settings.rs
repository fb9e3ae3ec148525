//! How to reach Redis, and whether those settings can work at all.
//!
//! Storage owns these settings because only storage knows what a usable
//! Redis URL, credential or TLS file is. They are declared here, beside
//! their struct, and read by [`RedisSettings::from_declared`] through the
//! configuration's checker: a new Redis setting is one declaration and its
//! use. [`RedisSettings::problems`] says what is wrong; the checker names
//! each setting the way the operator wrote it (a variable, or a key in a
//! file).

use std::path::PathBuf;
use std::time::Duration;

use super::tls::{self, ClientCertFiles, TlsFile, TlsFiles};
use crate::declare::{About, Checker, Fallback, Raw, parse, settings};

use Fallback::{Cpus, Text, Unset};

/// How to reach Redis. `{:?}` shows no secret: the URL and the password
/// redact themselves.
#[derive(Clone, Debug)]
pub struct RedisSettings {
    /// Any URL fred's `Config::from_url` takes: `redis://`, `rediss://`,
    /// `redis-cluster://`, `redis-sentinel://`, `redis+unix://`.
    pub url: RedisUrl,
    /// ACL user; wins over none in the URL (both set is a config error).
    pub username: Option<String>,
    pub password: Option<Secret>,
    /// Trust and identity for `rediss` URLs; `None` trusts the system roots.
    pub tls: Option<TlsFiles>,
    pub pool_size: usize,
    /// Upper bound for one Redis call; the caller's deadline may shorten it.
    pub command_timeout: Duration,
    /// Commands in flight (queued, or awaiting a reply) per connection;
    /// past it a call is refused at once (nothing sent) rather than queued
    /// towards its deadline.
    pub queue_limit: usize,
}

/// A Redis URL. It may hold a password (`redis://user:secret@host`, a
/// sentinel URL's `sentinelPassword=`), so it shows itself, with `{}` or
/// `{:?}`, only as [`redact_url`] writes it; [`RedisUrl::expose`] gives the
/// text itself, for the client that connects.
#[derive(Clone, PartialEq, Eq)]
pub struct RedisUrl(String);

impl RedisUrl {
    /// The URL itself, secrets and all.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl From<String> for RedisUrl {
    fn from(url: String) -> Self {
        Self(url)
    }
}

impl From<&str> for RedisUrl {
    fn from(url: &str) -> Self {
        Self(url.to_owned())
    }
}

impl std::fmt::Display for RedisUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&redact_url(&self.0))
    }
}

impl std::fmt::Debug for RedisUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", redact_url(&self.0))
    }
}

settings! {
    pub REDIS_SETTINGS;
    REDIS_URL: String = About::new(
        "redis_url",
        Text("redis://127.0.0.1:6379"),
        "Redis URL\nalso rediss://, redis-cluster://h:p?node=h:p,\nredis-sentinel://h:p?sentinelServiceName=NAME",
    ), parse::text;
    REDIS_USERNAME: String = About::new("redis_username", Unset(""), "ACL user, or a file holding it").or_file(), parse::text;
    REDIS_PASSWORD: String = About::new("redis_password", Unset(""), "password, or a file holding it").or_file(), parse::text;
    REDIS_TLS_CA_FILE: PathBuf = About::new("redis_tls_ca_file", Unset("the system roots"), "PEM CA to trust"), parse::path;
    REDIS_TLS_CERT_FILE: PathBuf = About::new("redis_tls_cert_file", Unset(""), "PEM client certificate (with the key)"), parse::path;
    REDIS_TLS_KEY_FILE: PathBuf = About::new("redis_tls_key_file", Unset(""), "PEM client key (with the certificate)"), parse::path;
    REDIS_POOL_SIZE: usize = About::new("redis_pool_size", Cpus, "Redis connections, 1 to 1024"), |t| parse::whole_number(t, 1, 1024);
    REDIS_TIMEOUT: Duration = About::new("redis_timeout", Text("250ms"), "upper bound for one Redis call, up to 60s"), parse_redis_timeout;
    REDIS_QUEUE_LIMIT: usize = About::new("redis_queue_limit", Text("1024"), "Redis commands in flight per connection; past\nit calls are refused at once, 1 to 1000000"), |t| parse::whole_number(t, 1, 1_000_000);
}

/// The longest `REDIS_TIMEOUT`: a payment's hot path never waits a minute
/// for one Redis call, and the bound keeps every deadline sum finite.
const MAX_REDIS_TIMEOUT: Duration = Duration::from_secs(60);

fn parse_redis_timeout(text: &str) -> Result<Duration, String> {
    match parse::positive_duration(text)? {
        d if d > MAX_REDIS_TIMEOUT => Err(format!(
            "`{text}` is longer than {}s",
            MAX_REDIS_TIMEOUT.as_secs()
        )),
        d => Ok(d),
    }
}

impl RedisSettings {
    /// The Redis settings as declared above, with every problem recorded in
    /// `c` under the variable the operator gave. The settings are checked
    /// ([`Self::problems`]) even when a number is bad, so every problem
    /// shows at once.
    pub fn from_declared(c: &mut Checker) -> Option<Self> {
        let url = c.value(&REDIS_URL);
        let username = c.optional_or_file(&REDIS_USERNAME);
        let password = c.optional_or_file(&REDIS_PASSWORD).map(Secret::new);
        let tls = tls_files(c);
        let pool_size = c.value(&REDIS_POOL_SIZE);
        let command_timeout = c.value(&REDIS_TIMEOUT);
        let queue_limit = c.value(&REDIS_QUEUE_LIMIT);
        let settings = Self {
            url: RedisUrl::from(url?),
            username,
            password,
            tls,
            pool_size: pool_size.unwrap_or(1),
            command_timeout: command_timeout.unwrap_or_default(),
            queue_limit: queue_limit.unwrap_or(1),
        };
        let problems = settings.problems(&|setting| c.name_or_file(setting.key()));
        for problem in problems {
            c.problem(problem);
        }
        Some(settings)
            .filter(|_| pool_size.is_some() && command_timeout.is_some() && queue_limit.is_some())
    }
}

/// The TLS files; a certificate without its key is a problem here, and
/// the rest of the Redis settings are checked as if neither were set.
fn tls_files(c: &mut Checker) -> Option<TlsFiles> {
    let ca = c.optional(&REDIS_TLS_CA_FILE);
    let cert = c.optional(&REDIS_TLS_CERT_FILE);
    let key = c.optional(&REDIS_TLS_KEY_FILE);
    match TlsFiles::from_paths(ca, cert, key) {
        Ok(files) => files,
        Err((given, missing)) => {
            let problem = format!(
                "{}: needs {} as well",
                c.name_or_file(given.key()),
                Raw::env_name(missing.key())
            );
            c.problem(problem);
            None
        }
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

/// Each Redis setting a problem can be about, so the caller can name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedisSetting {
    Url,
    Username,
    Password,
    TlsCaFile,
    TlsCertFile,
    TlsKeyFile,
}

impl From<TlsFile> for RedisSetting {
    fn from(file: TlsFile) -> Self {
        match file {
            TlsFile::Ca => Self::TlsCaFile,
            TlsFile::Cert => Self::TlsCertFile,
            TlsFile::Key => Self::TlsKeyFile,
        }
    }
}

impl RedisSetting {
    /// The declared key of the setting.
    fn key(self) -> &'static str {
        let declared: &About = match self {
            Self::Url => &REDIS_URL.about,
            Self::Username => &REDIS_USERNAME.about,
            Self::Password => &REDIS_PASSWORD.about,
            Self::TlsCaFile => &REDIS_TLS_CA_FILE.about,
            Self::TlsCertFile => &REDIS_TLS_CERT_FILE.about,
            Self::TlsKeyFile => &REDIS_TLS_KEY_FILE.about,
        };
        declared.key
    }
}

impl TlsFiles {
    /// The files from three optional paths. A certificate without its key
    /// (or the reverse) is an error naming the one given and the one missing.
    pub fn from_paths(
        ca_file: Option<PathBuf>,
        cert_file: Option<PathBuf>,
        key_file: Option<PathBuf>,
    ) -> Result<Option<Self>, (RedisSetting, RedisSetting)> {
        let client_cert = match (cert_file, key_file) {
            (Some(cert_file), Some(key_file)) => Some(ClientCertFiles {
                cert_file,
                key_file,
            }),
            (None, None) => None,
            (Some(_), None) => return Err((RedisSetting::TlsCertFile, RedisSetting::TlsKeyFile)),
            (None, Some(_)) => return Err((RedisSetting::TlsKeyFile, RedisSetting::TlsCertFile)),
        };
        if ca_file.is_none() && client_cert.is_none() {
            return Ok(None);
        }
        Ok(Some(Self {
            ca_file,
            client_cert,
        }))
    }

    /// The first of the files that is set, to name in a problem about all.
    fn first_set(&self) -> RedisSetting {
        match self.ca_file {
            Some(_) => RedisSetting::TlsCaFile,
            None => RedisSetting::TlsCertFile,
        }
    }
}

/// URL schemes this build can connect with: every one fred's
/// `Config::from_url` takes (the `valkey` spellings too).
const SCHEMES: &[&str] = &[
    "redis://",
    "rediss://",
    "redis-cluster://",
    "rediss-cluster://",
    "redis-sentinel://",
    "rediss-sentinel://",
    "redis+unix://",
    "valkey://",
    "valkeys://",
    "valkey-cluster://",
    "valkeys-cluster://",
    "valkey-sentinel://",
    "valkeys-sentinel://",
    "valkey+unix://",
];

impl RedisSettings {
    /// Every reason these settings cannot work, one line each, with each
    /// setting named by `name`. The TLS files are read, so a missing or
    /// unparsable file is reported now rather than at the first connection.
    pub fn problems(&self, name: &dyn Fn(RedisSetting) -> String) -> Vec<String> {
        let mut problems = Vec::new();
        let url = match parse_url(self.url.expose()) {
            Ok(config) => Some(config),
            Err(why) => {
                problems.push(format!("{}: {why}", name(RedisSetting::Url)));
                None
            }
        };
        // Credentials come from the URL or from their own settings, never
        // both: which one wins would be a guess.
        if let Some(config) = &url {
            let twice = [
                (
                    RedisSetting::Username,
                    self.username.is_some() && config.username.is_some(),
                ),
                (
                    RedisSetting::Password,
                    self.password.is_some() && config.password.is_some(),
                ),
            ];
            for (setting, _) in twice.into_iter().filter(|(_, twice)| *twice) {
                problems.push(format!(
                    "{}: {} holds one too; give one",
                    name(setting),
                    name(RedisSetting::Url)
                ));
            }
        }
        // TLS files only make sense with a TLS URL: without one they would
        // be ignored, and the connection silently plaintext.
        if let Some(files) = &self.tls {
            if url.as_ref().is_some_and(|config| !config.uses_tls()) {
                problems.push(format!(
                    "{}: set, but {} does not use TLS (rediss://, rediss-cluster://, rediss-sentinel://)",
                    name(files.first_set()),
                    name(RedisSetting::Url)
                ));
            } else {
                for problem in tls::check_files(files) {
                    problems.push(format!("{}: {problem}", name(problem.file.into())));
                }
            }
        }
        problems
    }
}

/// `url` as fred reads it, when it is a Redis URL this build can use.
fn parse_url(url: &str) -> Result<fred::prelude::Config, String> {
    if !SCHEMES.iter().any(|scheme| url.starts_with(scheme)) {
        return Err(format!(
            "the URL must start with one of {}",
            SCHEMES.join(", ")
        ));
    }
    fred::prelude::Config::from_url(url)
        .map_err(|e| format!("not a usable Redis URL: {}", e.details()))
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
mod tests {
    use super::*;

    #[test]
    fn the_pool_size_default_parses() {
        let cpus = std::thread::available_parallelism().map_or(1, usize::from);
        assert!((REDIS_POOL_SIZE.parse)(&cpus.to_string()).is_ok());
    }
}
