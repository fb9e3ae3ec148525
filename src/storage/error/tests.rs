//! The error classification: whether a call may have been applied, for
//! each error Redis or fred gives.

use super::*;

const WRITE: CallKind = CallKind {
    write: true,
    deadline_bound: false,
    timeout: Duration::from_millis(5),
};
const READ: CallKind = CallKind {
    write: false,
    ..WRITE
};

fn classify(kind: ErrorKind, details: &'static str, call: CallKind) -> StorageError {
    StorageError::from_redis(&Error::new(kind, details), call)
}

#[test]
fn timeouts_follow_whose_deadline_it_was() {
    let deadline = CallKind {
        deadline_bound: true,
        ..WRITE
    };
    assert!(matches!(
        classify(ErrorKind::Timeout, "timed out", deadline),
        StorageError::DeadlineExceeded
    ));
    assert!(matches!(
        classify(ErrorKind::Timeout, "timed out", WRITE),
        StorageError::MaybeApplied {
            why: NoAnswer::Timeout(_),
            ..
        }
    ));
}

#[test]
fn only_what_never_ran_is_nothing_applied() {
    let refused = [
        (
            ErrorKind::Unknown,
            "LOADING Redis is loading the dataset in memory",
        ),
        (
            ErrorKind::Unknown,
            "READONLY You can't write against a read only replica.",
        ),
        (
            ErrorKind::Unknown,
            "OOM command not allowed when used memory > 'maxmemory'.",
        ),
        (
            ErrorKind::Unknown,
            "NOPERM User sticky-routing has no permissions to run the 'hset' command",
        ),
        (ErrorKind::Auth, "WRONGPASS invalid username-password pair"),
        (ErrorKind::Cluster, "CLUSTERDOWN The cluster is down"),
    ];
    for (kind, details) in refused {
        assert!(
            matches!(
                classify(kind, details, WRITE),
                StorageError::Unavailable {
                    why: NotApplied::Refused,
                    ..
                }
            ),
            "{details}"
        );
    }
    assert!(matches!(
        classify(
            ErrorKind::Backpressure,
            "Max in-flight commands reached.",
            WRITE
        ),
        StorageError::Unavailable {
            why: NotApplied::QueueFull,
            ..
        }
    ));
    assert!(matches!(
        classify(ErrorKind::Canceled, FAIL_FAST_DETAIL, WRITE),
        StorageError::Unavailable {
            why: NotApplied::NoConnection,
            ..
        }
    ));
}

#[test]
fn a_write_lost_in_flight_may_have_been_applied_and_a_read_never_was() {
    for (kind, details) in [
        (ErrorKind::IO, "Connection reset by peer"),
        (ErrorKind::IO, "Connection Closed"),
        (ErrorKind::Canceled, "Canceled."),
    ] {
        let write = classify(kind.clone(), details, WRITE);
        assert!(
            matches!(write, StorageError::MaybeApplied { .. }),
            "{details}"
        );
        assert!(
            matches!(
                classify(kind, details, READ),
                StorageError::Unavailable {
                    why: NotApplied::ReadFailed,
                    ..
                }
            ),
            "{details}"
        );
    }
}

#[test]
fn every_variant_has_its_own_kind_in_snake_case() {
    let detail = String::new;
    let errors = [
        StorageError::Unavailable {
            why: NotApplied::NoConnection,
            detail: detail(),
        },
        StorageError::Unavailable {
            why: NotApplied::QueueFull,
            detail: detail(),
        },
        StorageError::Unavailable {
            why: NotApplied::Failover,
            detail: detail(),
        },
        StorageError::Unavailable {
            why: NotApplied::Refused,
            detail: detail(),
        },
        StorageError::Unavailable {
            why: NotApplied::ReadFailed,
            detail: detail(),
        },
        StorageError::Unavailable {
            why: NotApplied::EarlierStepFailed,
            detail: detail(),
        },
        StorageError::Unavailable {
            why: NotApplied::Permission,
            detail: detail(),
        },
        StorageError::MaybeApplied {
            why: NoAnswer::ScriptStopped,
            detail: detail(),
        },
        StorageError::MaybeApplied {
            why: NoAnswer::Timeout(Duration::from_millis(250)),
            detail: detail(),
        },
        StorageError::MaybeApplied {
            why: NoAnswer::ConnectionLost,
            detail: detail(),
        },
        StorageError::DeadlineExceeded,
        StorageError::ForeignValue {
            key_kind: "the customer's hash",
            detail: detail(),
        },
        StorageError::Unexpected(detail()),
    ];
    let kinds: std::collections::BTreeSet<&str> = errors.iter().map(StorageError::kind).collect();
    assert_eq!(
        kinds.len(),
        errors.len(),
        "two variants share a kind: {kinds:?}"
    );
    for kind in kinds {
        assert!(
            !kind.is_empty() && kind.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
            "{kind}"
        );
    }
    // The words a dashboard matches on.
    assert_eq!(
        classify(ErrorKind::Canceled, FAIL_FAST_DETAIL, READ).kind(),
        "no_connection"
    );
    assert_eq!(
        classify(ErrorKind::Timeout, "timed out", WRITE).kind(),
        "timeout"
    );
}

#[test]
fn a_command_refused_inside_a_script_may_have_followed_writes() {
    // Redis 7.0's words, then Redis 7.2's, then Valkey 8.0's (measured on
    // Debian's valkey-server 8.0.1).
    for details in [
        "ERR The user executing the script can't run this command or subcommand script: \
         e8b02014deef4913a53a9c9e335b4732858d5f80, on @user_script:1.",
        "NOPERM User sticky-routing has no permissions to run the 'expire' command script: \
         e8b02014deef4913a53a9c9e335b4732858d5f80, on @user_script:71.",
        "ERR ACL failure in script: User sticky-routing has no permissions to run the \
         'expire' command script: e8b02014deef4913a53a9c9e335b4732858d5f80, on @user_script:1.",
    ] {
        assert!(
            matches!(
                classify(ErrorKind::Unknown, details, WRITE),
                StorageError::MaybeApplied {
                    why: NoAnswer::ScriptStopped,
                    ..
                }
            ),
            "{details}"
        );
        assert!(matches!(
            classify(ErrorKind::Unknown, details, READ),
            StorageError::Unavailable {
                why: NotApplied::ReadFailed,
                ..
            }
        ));
    }
    // EVALSHA itself, or its key, refused: the script never ran.
    for details in [
        "NOPERM User sticky-routing has no permissions to run the 'evalsha' command",
        "NOPERM No permissions to access a key",
    ] {
        assert!(
            matches!(
                classify(ErrorKind::Unknown, details, WRITE),
                StorageError::Unavailable {
                    why: NotApplied::Refused,
                    ..
                }
            ),
            "{details}"
        );
    }
    // Out of memory inside a script is refused at its first write only.
    assert!(matches!(
        classify(
            ErrorKind::Unknown,
            "OOM command not allowed when used memory > 'maxmemory'. script: \
             e8b02014deef4913a53a9c9e335b4732858d5f80, on @user_script:70.",
            WRITE
        ),
        StorageError::Unavailable {
            why: NotApplied::Refused,
            ..
        }
    ));
}

#[test]
fn odd_replies_are_unexpected() {
    for (kind, details) in [
        (
            ErrorKind::InvalidArgument,
            "WRONGTYPE Operation against a key holding the wrong kind of value",
        ),
        (
            ErrorKind::Unknown,
            "ERR user_script:1: Script attempted to access nonexistent global variable",
        ),
    ] {
        assert!(
            matches!(classify(kind, details, WRITE), StorageError::Unexpected(_)),
            "{details}"
        );
    }
}

#[test]
fn a_refusal_for_want_of_a_permission_is_told_from_other_failures() {
    let refused = |why, detail: &str| StorageError::Unavailable {
        why,
        detail: detail.into(),
    };
    assert!(refused(NotApplied::Permission, "lacks +expire").is_permission_refusal());
    assert!(
        refused(
            NotApplied::Refused,
            "NOPERM User sticky-routing has no permissions to run the 'hgetall' command"
        )
        .is_permission_refusal()
    );
    assert!(!refused(NotApplied::Refused, "OOM command not allowed").is_permission_refusal());
    assert!(!refused(NotApplied::NoConnection, "down").is_permission_refusal());
    let stopped = StorageError::MaybeApplied {
        why: NoAnswer::ScriptStopped,
        detail: "NOPERM".into(),
    };
    assert!(stopped.is_permission_refusal());
    assert!(!StorageError::DeadlineExceeded.is_permission_refusal());
}
