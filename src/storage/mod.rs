//! The Redis adapter: [`RedisStore`] runs the domain rules against Redis.
//!
//! Every command and script touches exactly one key, so the same code runs
//! on a single node and on Redis Cluster. Writes are never retried behind
//! the caller's back (a lost reply after HINCRBY would otherwise count
//! twice), and every call has a timeout no longer than the caller's deadline.

mod error;
pub mod scripts;
mod store;

pub use error::StorageError;
pub use store::{AdmissionRequest, RedisStore, SuccessWrite};

/// URL schemes this build can connect with.
const SCHEMES: &[&str] = &["redis://", "redis-cluster://", "redis-sentinel://"];

/// Checks that `url` is a Redis URL this build can connect with.
pub fn check_redis_url(url: &str) -> Result<(), String> {
    if !SCHEMES.iter().any(|scheme| url.starts_with(scheme)) {
        return Err(format!(
            "the URL must start with one of {}",
            SCHEMES.join(", ")
        ));
    }
    fred::prelude::Config::from_url(url)
        .map(drop)
        .map_err(|e| format!("not a usable Redis URL: {}", e.details()))
}
