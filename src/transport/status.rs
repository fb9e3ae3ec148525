//! The one mapping from errors to `tonic::Status`.
//!
//! The code tells the caller whether a retry is safe: `UNAVAILABLE` means
//! nothing was applied; `UNKNOWN` and `DEADLINE_EXCEEDED` mean a write may
//! have been applied, so only a retry with the same `attempt_id` is safe.
//! Messages are plain words built from the error's kind; Redis's own words
//! (addresses, user names, error codes) stay in the log.

use tonic::Status;

use crate::domain::InvalidInput;
use crate::domain::tenant::{TENANT_HEADER, Tenant};
use crate::storage::{NoAnswer, NotApplied, StorageError};

/// Everything a handler can fail with.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error(transparent)]
    Invalid(#[from] InvalidInput),
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// An admin RPC from a client that `STICKY_ROUTING_ADMIN_CLIENTS` does
    /// not name; the RPC's name.
    #[error("{0} is limited to the client identities in STICKY_ROUTING_ADMIN_CLIENTS")]
    NotAdmin(&'static str),
    /// A circuit breaker admin RPC while `STICKY_ROUTING_BREAKER=off`:
    /// there is no breaker to show or steer; the RPC's name.
    #[error(
        "{0} needs the connector circuit breaker, which STICKY_ROUTING_BREAKER=off turns off on this server"
    )]
    BreakerOff(&'static str),
    /// A valid tenant that `STICKY_ROUTING_TENANTS` does not list.
    #[error("{TENANT_HEADER}: tenant `{0}` is not among this server's STICKY_ROUTING_TENANTS")]
    TenantNotAllowed(Tenant),
}

impl From<ApiError> for Status {
    fn from(error: ApiError) -> Self {
        match error {
            ApiError::Invalid(invalid) => Status::invalid_argument(invalid.to_string()),
            ApiError::Storage(storage) => storage_status(&storage),
            not_admin @ ApiError::NotAdmin(_) => Status::permission_denied(format!(
                "{not_admin}; this client's certificate names none of them"
            )),
            off @ ApiError::BreakerOff(_) => Status::failed_precondition(off.to_string()),
            denied @ ApiError::TenantNotAllowed(_) => Status::permission_denied(denied.to_string()),
        }
    }
}

fn storage_status(error: &StorageError) -> Status {
    match error {
        StorageError::Unavailable { why, .. } => Status::unavailable(format!(
            "{}; nothing was applied, so retrying is safe",
            not_applied(*why)
        )),
        StorageError::MaybeApplied { why, .. } => Status::unknown(format!(
            "{}; the write may have been applied: retry only with the same attempt_id",
            no_answer(*why)
        )),
        StorageError::DeadlineExceeded => Status::deadline_exceeded(
            "the deadline passed before Redis answered; a write may have been applied: \
             retry only with the same attempt_id",
        ),
        StorageError::ForeignValue { key_kind, .. } => Status::internal(format!(
            "a value stored under {key_kind} is not one this service writes; nothing was written"
        )),
        StorageError::Unexpected(_) => {
            Status::internal("Redis answered something this service does not expect")
        }
    }
}

fn not_applied(why: NotApplied) -> &'static str {
    match why {
        NotApplied::NoConnection => "Redis is unreachable",
        NotApplied::QueueFull => "too many calls are waiting for Redis",
        NotApplied::Failover => "Redis is failing over to a new primary",
        NotApplied::Refused => {
            "Redis refused the call (loading, read-only, out of memory, or refusing this \
             service's user)"
        }
        NotApplied::ReadFailed => "Redis did not answer",
        NotApplied::EarlierStepFailed => "the admission check got no answer from Redis",
        NotApplied::Permission => {
            "the service's Redis user lacks a permission that this write needs (the service's \
             log names it)"
        }
    }
}

fn no_answer(why: NoAnswer) -> String {
    match why {
        NoAnswer::Timeout(timeout) => {
            format!("Redis did not answer within {}ms", timeout.as_millis())
        }
        NoAnswer::ConnectionLost => "the connection to Redis dropped before it answered".into(),
        NoAnswer::ScriptStopped => {
            "Redis stopped the write part-way: the service's Redis user lost a permission it \
             needs (the service's log names it)"
                .into()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tonic::Code;

    #[test]
    fn each_error_gets_its_code() {
        let invalid: Status =
            ApiError::from(InvalidInput::new("customer_id", "must not be empty")).into();
        assert_eq!(invalid.code(), Code::InvalidArgument);
        assert_eq!(invalid.message(), "customer_id: must not be empty");
        let cases = [
            (
                StorageError::Unavailable {
                    why: NotApplied::NoConnection,
                    detail: "down".into(),
                },
                Code::Unavailable,
            ),
            (
                StorageError::MaybeApplied {
                    why: NoAnswer::Timeout(Duration::from_millis(250)),
                    detail: "timed out".into(),
                },
                Code::Unknown,
            ),
            (StorageError::DeadlineExceeded, Code::DeadlineExceeded),
            (
                StorageError::ForeignValue {
                    key_kind: "the customer's hash",
                    detail: "x".into(),
                },
                Code::Internal,
            ),
            (StorageError::Unexpected("odd".into()), Code::Internal),
        ];
        for (error, code) in cases {
            assert_eq!(Status::from(ApiError::from(error)).code(), code);
        }
        let off = Status::from(ApiError::BreakerOff("GetConnectorHealth"));
        assert_eq!(off.code(), Code::FailedPrecondition);
        assert!(off.message().starts_with("GetConnectorHealth "), "{off:?}");
        assert!(off.message().contains("STICKY_ROUTING_BREAKER"), "{off:?}");
    }

    #[test]
    fn messages_carry_no_redis_internals() {
        let secret_detail = "NOPERM User svc-user has no permissions; 10.0.0.7:6379";
        let errors = [
            StorageError::Unavailable {
                why: NotApplied::Refused,
                detail: secret_detail.into(),
            },
            StorageError::MaybeApplied {
                why: NoAnswer::ConnectionLost,
                detail: secret_detail.into(),
            },
            StorageError::ForeignValue {
                key_kind: "the customer's hash",
                detail: secret_detail.into(),
            },
            StorageError::Unexpected(secret_detail.into()),
        ];
        for error in errors {
            let status = Status::from(ApiError::from(error));
            for internal in ["NOPERM", "svc-user", "10.0.0.7", "6379"] {
                assert!(!status.message().contains(internal), "{}", status.message());
            }
        }
    }
}
