//! The storage layer's errors: [`StorageError`] for a call, sorted by what
//! the caller can do about it, and [`ConnectError`] for settings that no
//! amount of retrying will make work.
//!
//! A write's error says whether the write may have happened, because that is
//! what tells an orchestrator whether a retry is safe. Only two things prove
//! that nothing was applied: the command never left this process (no
//! connection, a full queue, a passed deadline, a Sentinel fence), or Redis
//! refused it before running it (an error reply such as LOADING or READONLY,
//! which Redis gives before the script's first write). Anything else after the
//! command was handed to the client (a dropped connection, no reply within the
//! Redis timeout) may have applied it.
//!
//! Each error keeps Redis's own words (`detail`) for the log; the caller's
//! message is built from the kind alone, in plain words, so that no address,
//! user name or Redis error text reaches a client.

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

#[derive(Debug, Clone, thiserror::Error)]
pub enum StorageError {
    /// Nothing was applied: retrying is safe.
    #[error("nothing applied ({why:?}): {detail}")]
    Unavailable { why: NotApplied, detail: String },
    /// A write was sent and no answer came back: it may have been applied.
    #[error("write may have been applied ({why:?}): {detail}")]
    MaybeApplied { why: NoAnswer, detail: String },
    /// The caller's deadline passed; a write may have been applied.
    #[error("the caller's deadline passed before redis answered")]
    DeadlineExceeded,
    /// A value under one of the service's keys is not one the service writes
    /// (a non-integer count written by someone else); nothing was written.
    #[error("a value under {key_kind} is not one this service writes: {detail}")]
    ForeignValue {
        key_kind: &'static str,
        detail: String,
    },
    /// Redis answered something this service never expects: a bug.
    #[error("unexpected redis reply: {0}")]
    Unexpected(String),
}

/// How we know that nothing was applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotApplied {
    /// No connection to Redis: the command was never sent.
    NoConnection,
    /// The connection's queue is full: the command was never sent.
    QueueFull,
    /// A Sentinel failover is under way: writes are held back.
    Failover,
    /// Redis refused the command before running it (loading, read-only,
    /// out of memory, no permission, failed authentication, cluster down).
    Refused,
    /// A read got no answer; reads never change anything.
    ReadFailed,
    /// A step before the write (admission) got no answer, so the write
    /// itself was never sent.
    EarlierStepFailed,
    /// The service's Redis user lacks a permission a write needs: the
    /// permission probe found it missing on this key's node, or a script
    /// checked it before writing (`permissions.rs`).
    Permission,
}

impl NotApplied {
    /// See [`StorageError::kind`].
    pub fn kind(self) -> &'static str {
        match self {
            Self::NoConnection => "no_connection",
            Self::QueueFull => "queue_full",
            Self::Failover => "failover",
            Self::Refused => "refused",
            Self::ReadFailed => "read_failed",
            Self::EarlierStepFailed => "earlier_step_failed",
            Self::Permission => "permission",
        }
    }
}

/// Why a sent write got no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoAnswer {
    /// No reply within the Redis timeout.
    Timeout(Duration),
    /// The connection dropped with the command in flight.
    ConnectionLost,
    /// Redis stopped a script part-way because the user may not run one of
    /// its commands (a permission revoked while the service runs): the
    /// script's earlier commands may have written. It does not stop a
    /// script before it creates a key that it could not give a TTL: the
    /// scripts check that themselves, and answer [`NotApplied::Permission`].
    ScriptStopped,
}

impl NoAnswer {
    /// See [`StorageError::kind`].
    pub fn kind(self) -> &'static str {
        match self {
            Self::Timeout(_) => "timeout",
            Self::ConnectionLost => "connection_lost",
            Self::ScriptStopped => "script_stopped",
        }
    }
}

/// Redis error replies that Redis gives before a command (or a script's
/// first write) runs: the server is busy, failing over, out of memory, or
/// refuses the service's user. `NOSCRIPT` is handled before this, by
/// sending the script body.
const REFUSALS: &[&str] = &[
    "NOSCRIPT",
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
    "MISCONF",
    "MOVED",
    "ASK",
];

/// fred's answer when `fail_fast` stops a command before it is queued,
/// because the client is not connected (fred 10, `interfaces.rs`).
const FAIL_FAST_DETAIL: &str = "Connection closed unexpectedly.";

/// What a call was, for classifying its error.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CallKind {
    /// Whether the command changes state; a read that fails applied nothing.
    pub write: bool,
    /// Whether the timeout in force was the caller's deadline rather than
    /// the Redis timeout.
    pub deadline_bound: bool,
    pub timeout: Duration,
}

impl StorageError {
    /// What went wrong, in one fixed word per variant (and per reason inside
    /// [`Self::Unavailable`] and [`Self::MaybeApplied`]): the `kind` label of
    /// `sticky_routing_redis_errors_total`, and a field a log can filter on.
    /// Static, so counting an error allocates nothing, and bounded by the
    /// enum, so no id or Redis text can ever become a label value.
    /// (`earlier_step_failed` is the record flow's answer about a whole
    /// RecordOutcome, made from the admission call's own error after that
    /// call was counted, so the metric never shows it; a log may.)
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Unavailable { why, .. } => why.kind(),
            Self::MaybeApplied { why, .. } => why.kind(),
            Self::DeadlineExceeded => "deadline_exceeded",
            Self::ForeignValue { .. } => "foreign_value",
            Self::Unexpected(_) => "unexpected",
        }
    }

    /// Classifies a fred error.
    pub(crate) fn from_redis(error: &Error, call: CallKind) -> Self {
        let detail = error.to_string();
        let not_applied = |why| Self::Unavailable {
            why,
            detail: detail.clone(),
        };
        let maybe_applied = |why| {
            if call.write {
                Self::MaybeApplied {
                    why,
                    detail: detail.clone(),
                }
            } else {
                not_applied(NotApplied::ReadFailed)
            }
        };
        let code = error_code(error.details());
        match error.kind() {
            ErrorKind::Timeout if call.deadline_bound => Self::DeadlineExceeded,
            ErrorKind::Timeout => maybe_applied(NoAnswer::Timeout(call.timeout)),
            ErrorKind::Backpressure => not_applied(NotApplied::QueueFull),
            ErrorKind::Canceled if error.details() == FAIL_FAST_DETAIL => {
                not_applied(NotApplied::NoConnection)
            }
            ErrorKind::Auth => not_applied(NotApplied::Refused),
            // Before the refusals: a NOPERM raised by a command inside a
            // script (Redis 7.2 and Valkey say NOPERM there; 7.0 says ERR)
            // comes after the script's earlier commands ran.
            _ if refused_inside_script(error.details()) => maybe_applied(NoAnswer::ScriptStopped),
            _ if REFUSALS.contains(&code) => not_applied(NotApplied::Refused),
            ErrorKind::Parse | ErrorKind::InvalidArgument | ErrorKind::InvalidCommand => {
                Self::Unexpected(detail)
            }
            // Any other error reply: a script error or WRONGTYPE, which stop
            // before the first write (the scripts check before they write).
            // Redis error codes are one upper-case word; fred's own words
            // about a connection are not.
            ErrorKind::Unknown
                if !code.is_empty() && code.bytes().all(|b| b.is_ascii_uppercase()) =>
            {
                Self::Unexpected(detail)
            }
            _ => maybe_applied(NoAnswer::ConnectionLost),
        }
    }
}

impl StorageError {
    /// Whether background work was shed unsent on a full background lane
    /// (counted in `sticky_routing_background_shed_total`, not as a
    /// failure). A caller's call refused `queue_full` is refused, not shed,
    /// but only background work asks.
    pub(crate) fn is_shed(&self) -> bool {
        matches!(
            self,
            Self::Unavailable {
                why: NotApplied::QueueFull,
                ..
            }
        )
    }

    /// Background work past a chunked call that failed: never sent.
    pub(crate) fn earlier_call_failed() -> Self {
        Self::Unavailable {
            why: NotApplied::EarlierStepFailed,
            detail: "an earlier call of this shard's background work failed".into(),
        }
    }

    /// Whether a background call's failure is one to count as an io
    /// failure: not when it was shed (counted as shed) or never sent after
    /// an earlier call of its tick failed (that one is counted).
    pub(crate) fn is_background_failure(&self) -> bool {
        !self.is_shed()
            && !matches!(
                self,
                Self::Unavailable {
                    why: NotApplied::EarlierStepFailed,
                    ..
                }
            )
    }

    /// The answers of a chunked background call from its failing chunk on:
    /// `failed` answers carry `error`, and the rest up to `total`, never
    /// sent, [`Self::earlier_call_failed`].
    pub(crate) fn fill_after_failure<T>(
        answers: &mut Vec<Result<T, Self>>,
        error: &Self,
        failed: usize,
        total: usize,
    ) {
        answers.extend((0..failed).map(|_| Err(error.clone())));
        let unsent = total.saturating_sub(answers.len());
        answers.extend((0..unsent).map(|_| Err(Self::earlier_call_failed())));
    }

    /// Whether the service's Redis user lacked a permission for this call:
    /// refused unsent, by a script's own check, inside a script, or by
    /// Redis before running it.
    pub(crate) fn is_permission_refusal(&self) -> bool {
        match self {
            Self::Unavailable {
                why: NotApplied::Permission,
                ..
            }
            | Self::MaybeApplied {
                why: NoAnswer::ScriptStopped,
                ..
            } => true,
            Self::Unavailable {
                why: NotApplied::Refused,
                detail,
            } => is_acl_refusal(detail),
            _ => false,
        }
    }
}

/// Whether `details` is an ACL refusal of a command that a script called:
/// Redis names the script's place (`@user_script:LINE`) after the refusal.
/// A refusal of EVALSHA itself (or of its keys) names no script place: the
/// script never ran.
fn refused_inside_script(details: &str) -> bool {
    details.contains("@user_script:") && is_acl_refusal(details)
}

/// Whether `message` is Redis's ACL refusal of a command: `NOPERM …`, or
/// the words for a command refused inside a script: Redis 7.0's, and Valkey
/// 8's (`ERR ACL failure in script: User … has no permissions …`).
pub(crate) fn is_acl_refusal(message: &str) -> bool {
    message.starts_with("NOPERM")
        || message.contains("can't run this command")
        || message.contains("ACL failure in script")
}

/// The first word of an error: Redis's error code, when it is Redis's reply.
fn error_code(details: &str) -> &str {
    details.split_whitespace().next().unwrap_or("")
}

#[cfg(test)]
mod tests;
