//! The storage layer's errors: [`StorageError`] for a call, sorted by what
//! the caller can do about it, and [`ConnectError`] for settings that no
//! amount of retrying will make work.

use std::time::Duration;

use fred::prelude::{Error, ErrorKind};

use super::tls::TlsError;

/// Why a store could not be built: a deployment to fix, not a Redis that
/// is down (that only shows later, as [`StorageError::Unavailable`]).
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("the redis URL cannot be used: {0}")]
    Url(#[source] Error),
    #[error("redis TLS cannot be set up: {0}")]
    Tls(#[from] TlsError),
    #[error("the redis client cannot be built: {0}")]
    Client(#[source] Error),
    #[error("the sentinel watch cannot be built: {0}")]
    Sentinel(#[source] Error),
}

#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// Redis is down, unreachable, loading, read-only or out of memory, or did
    /// not answer within the command timeout: try again later.
    #[error("redis unavailable: {0}")]
    Unavailable(String),
    /// The caller's deadline passed before Redis answered.
    #[error("the caller's deadline passed before redis answered")]
    DeadlineExceeded,
    /// Redis answered something this service never writes or expects: a bug,
    /// or a foreign value under one of our keys.
    #[error("unexpected redis reply: {0}")]
    Unexpected(String),
}

/// Redis error replies that mean "not now" rather than "wrong": the server
/// is busy or failing over, or refuses the service's user (a deployment to
/// fix, not a bug in the service).
const TRANSIENT_REPLIES: &[&str] = &[
    "NOPERM",
    "NOAUTH",
    "WRONGPASS",
    "LOADING",
    "BUSY",
    "READONLY",
    "MASTERDOWN",
    "TRYAGAIN",
    "CLUSTERDOWN",
    "OOM",
    "NOREPLICAS",
];

impl StorageError {
    /// Classifies a fred error. `deadline_bound` says whether the timeout in
    /// force was the caller's deadline rather than the command timeout.
    pub(crate) fn from_redis(error: &Error, deadline_bound: bool, timeout: Duration) -> Self {
        match error.kind() {
            ErrorKind::Timeout if deadline_bound => Self::DeadlineExceeded,
            ErrorKind::Timeout => Self::Unavailable(format!("no answer within {timeout:?}")),
            ErrorKind::Parse | ErrorKind::InvalidArgument | ErrorKind::InvalidCommand => {
                Self::Unexpected(error.to_string())
            }
            ErrorKind::Unknown if !is_transient_reply(error.details()) => {
                Self::Unexpected(error.to_string())
            }
            _ => Self::Unavailable(error.to_string()),
        }
    }
}

fn is_transient_reply(details: &str) -> bool {
    TRANSIENT_REPLIES
        .iter()
        .any(|prefix| details.starts_with(prefix))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_follow_whose_deadline_it_was() {
        let timeout = Error::new(ErrorKind::Timeout, "timed out");
        let t = Duration::from_millis(5);
        assert!(matches!(
            StorageError::from_redis(&timeout, true, t),
            StorageError::DeadlineExceeded
        ));
        assert!(matches!(
            StorageError::from_redis(&timeout, false, t),
            StorageError::Unavailable(_)
        ));
    }

    #[test]
    fn connection_trouble_is_unavailable_and_odd_replies_are_unexpected() {
        let t = Duration::from_millis(5);
        let io = Error::new(ErrorKind::IO, "connection reset");
        let loading = Error::new(
            ErrorKind::Unknown,
            "LOADING Redis is loading the dataset in memory",
        );
        let noperm = Error::new(
            ErrorKind::Unknown,
            "NOPERM User sticky-routing has no permissions to run the 'hset' command",
        );
        assert!(matches!(
            StorageError::from_redis(&noperm, false, t),
            StorageError::Unavailable(_)
        ));
        let wrongtype = Error::new(
            ErrorKind::Unknown,
            "WRONGTYPE Operation against a key holding the wrong kind of value",
        );
        assert!(matches!(
            StorageError::from_redis(&io, false, t),
            StorageError::Unavailable(_)
        ));
        assert!(matches!(
            StorageError::from_redis(&loading, false, t),
            StorageError::Unavailable(_)
        ));
        assert!(matches!(
            StorageError::from_redis(&wrongtype, false, t),
            StorageError::Unexpected(_)
        ));
    }
}
