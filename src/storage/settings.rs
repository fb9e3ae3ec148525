//! How to reach Redis, and whether those settings can work at all.
//!
//! Storage owns these settings because only storage knows what a usable
//! Redis URL, credential or TLS file is. Configuration reads the raw values
//! and asks [`RedisSettings::problems`] what is wrong, passing a function
//! that names each setting the way the operator wrote it (a variable, or a
//! key in a file); storage says what is wrong, configuration says where.

use std::path::PathBuf;
use std::time::Duration;

use super::tls::{self, ClientCertFiles, TlsFile, TlsFiles};

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
    /// Commands in flight (queued, or awaiting a reply) per connection;
    /// past it a call is refused at once (nothing sent) rather than queued
    /// towards its deadline.
    pub queue_limit: usize,
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
            .field("queue_limit", &self.queue_limit)
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
        let url = match parse_url(&self.url) {
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
