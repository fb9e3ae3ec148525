//! The Redis adapter: [`RedisStore`] runs the domain rules against Redis.
//!
//! Every command and script touches exactly one key, so the same code runs
//! on a single node and on Redis Cluster. Writes are never retried behind
//! the caller's back (a lost reply after HINCRBY would otherwise count
//! twice), and every call has a timeout no longer than the caller's deadline.

mod error;
pub mod scripts;
mod sentinel_watch;
mod store;
pub mod tls;

pub use error::StorageError;
pub use store::{AdmissionRequest, RedisStore, SuccessWrite};

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

/// What the configuration check needs to know about a valid Redis URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UrlFacts {
    pub uses_tls: bool,
    pub has_username: bool,
    pub has_password: bool,
}

/// Checks that `url` is a Redis URL this build can connect with.
pub fn check_redis_url(url: &str) -> Result<UrlFacts, String> {
    if !SCHEMES.iter().any(|scheme| url.starts_with(scheme)) {
        return Err(format!(
            "the URL must start with one of {}",
            SCHEMES.join(", ")
        ));
    }
    let config = fred::prelude::Config::from_url(url)
        .map_err(|e| format!("not a usable Redis URL: {}", e.details()))?;
    Ok(UrlFacts {
        uses_tls: config.uses_tls(),
        has_username: config.username.is_some(),
        has_password: config.password.is_some(),
    })
}
