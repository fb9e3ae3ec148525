//! The storage boundary's typed operations and replies: what the record
//! flow asks of Redis ([`Op`]) and what Redis answered ([`Reply`]), encoded
//! into script calls and decoded from the scripts' integers here and
//! nowhere else.
//!
//! One call at a time (RecordOutcome) and batches (the bulk import) run the
//! same [`Op`]s through the same codec, so the two can never speak to the
//! scripts differently. The optional arguments (a row's count, its import
//! mark, how many customers ask admission at once) are sent only when they
//! say something, so RecordOutcome's calls stay exactly the scripts' plain
//! form.

use fred::prelude::Value;

use super::error::{NotApplied, StorageError};
use crate::domain::admission::WindowCounters;
use crate::domain::attempts::AttemptDigest;
use crate::domain::counts::Recorded;
use crate::domain::import_mark::ImportMark;
use crate::domain::keys::{AdmissionKey, CustomerKey};

/// A success write, as record_success.lua takes it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SuccessWrite<'a> {
    pub field: &'a str,
    pub ttl_secs: u64,
    pub cap: u32,
    /// Create the hash when absent (the customer passed admission).
    pub create: bool,
    /// The attempt to check and remember, when the caller sent one.
    pub attempt: Option<AttemptDigest>,
}

/// A gateway failure write, as record_failure.lua takes it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FailureWrite<'a> {
    pub field: &'a str,
    pub ttl_secs: u64,
    pub attempt: Option<AttemptDigest>,
}

/// One admission request, as admit.lua takes it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AdmissionRequest {
    pub now_ms: i64,
    pub window_ms: i64,
    pub budget: u64,
}

/// How many outcomes a write stands for, and the import row it is (both
/// bulk import only: RecordOutcome's writes are one outcome, unmarked).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Times {
    pub times: u32,
    pub mark: Option<ImportMark>,
}

impl Times {
    /// One outcome, no import mark: a RecordOutcome call.
    pub const ONE: Self = Self {
        times: 1,
        mark: None,
    };
}

/// One operation on one key.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Op<'a> {
    Success {
        key: &'a CustomerKey,
        write: SuccessWrite<'a>,
        times: Times,
    },
    Failure {
        key: &'a CustomerKey,
        write: FailureWrite<'a>,
        times: Times,
    },
    /// `asking` new customers of the key's merchant at once, each decided
    /// as if alone, one after the other.
    Admit {
        key: &'a AdmissionKey,
        request: AdmissionRequest,
        asking: u32,
    },
}

/// What Redis answered to an [`Op`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reply {
    /// A write's effect.
    Recorded(Recorded),
    /// A success without `create` found no hash: nothing was written, the
    /// customer is new.
    NeedsAdmission,
    /// How many of the customers asking were admitted (the first ones), and
    /// the merchant's window counters after the call.
    Admitted {
        admitted: u32,
        counters: WindowCounters,
    },
}

/// What became of one op of a batch.
#[derive(Debug)]
pub(crate) enum BatchOutcome {
    /// The script ran: its reply, or why it cannot be read as the op's
    /// (a foreign value under the key, a missing permission); in both
    /// cases the script wrote nothing.
    Replied(Result<Reply, StorageError>),
    /// The script did not run, and may be sent again: Redis had forgotten
    /// it (NOSCRIPT; it is loaded again before this is returned), or on
    /// Cluster the slot moved (MOVED, ASK, TRYAGAIN).
    NotRun,
    /// The call failed: it may or may not have run (see the error).
    Failed(StorageError),
}

/// Which script an encoded call runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ScriptName {
    RecordSuccess,
    RecordFailure,
    Admit,
}

impl ScriptName {
    /// The batch script's name for it (`scripts/batch.lua`).
    pub(super) fn batch_letter(self) -> &'static str {
        match self {
            Self::RecordSuccess => "s",
            Self::RecordFailure => "f",
            Self::Admit => "a",
        }
    }
}

/// An [`Op`] as the wire carries it: the script, its one key and its
/// arguments. Decoding its reply needs what the op was ([`Decode`]).
#[derive(Debug, Clone)]
pub(super) struct ScriptCall {
    pub script: ScriptName,
    pub key: String,
    pub args: Vec<Value>,
    pub decode: Decode,
}

/// How to read a call's reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Decode {
    Success,
    Failure,
    Admit { asking: u32 },
}

impl Op<'_> {
    /// The key the op touches.
    pub(super) fn key(&self) -> &str {
        match self {
            Self::Success { key, .. } | Self::Failure { key, .. } => key.as_str(),
            Self::Admit { key, .. } => key.as_str(),
        }
    }

    /// The op as a script call of its own key.
    pub(super) fn encode(&self) -> ScriptCall {
        let (script, args, decode) = self.encode_args();
        ScriptCall {
            script,
            key: self.key().to_owned(),
            args,
            decode,
        }
    }

    /// The op's script, its arguments, and how to read its reply.
    pub(super) fn encode_args(&self) -> (ScriptName, Vec<Value>, Decode) {
        match *self {
            Self::Success { write, times, .. } => {
                let mut args = vec![
                    Value::from(write.field),
                    Value::from(write.ttl_secs.to_string()),
                    Value::from(write.cap.to_string()),
                    Value::from(if write.create { "1" } else { "0" }),
                    attempt_arg(write.attempt),
                ];
                times_args(times, &mut args);
                (ScriptName::RecordSuccess, args, Decode::Success)
            }
            Self::Failure { write, times, .. } => {
                let mut args = vec![
                    Value::from(write.field),
                    Value::from(write.ttl_secs.to_string()),
                    attempt_arg(write.attempt),
                ];
                times_args(times, &mut args);
                (ScriptName::RecordFailure, args, Decode::Failure)
            }
            Self::Admit {
                request, asking, ..
            } => {
                let mut args = vec![
                    Value::from(request.now_ms.to_string()),
                    Value::from(request.window_ms.to_string()),
                    Value::from(request.budget.to_string()),
                ];
                if asking != 1 {
                    args.push(Value::from(asking.to_string()));
                }
                (ScriptName::Admit, args, Decode::Admit { asking })
            }
        }
    }
}

impl Decode {
    /// The script's integers as the op's [`Reply`].
    pub(super) fn reply(self, reply: &[i64]) -> Result<Reply, StorageError> {
        match self {
            Self::Success => success_reply(reply),
            Self::Failure => failure_reply(reply).map(Reply::Recorded),
            Self::Admit { asking } => admit_reply(reply, asking),
        }
    }
}

/// A write's count and mark, after its own arguments, when they say more
/// than "one outcome, unmarked": the mark goes after the count, so a
/// marked call always sends both.
fn times_args(times: Times, args: &mut Vec<Value>) {
    if times.times != 1 || times.mark.is_some() {
        args.push(Value::from(times.times.to_string()));
    }
    if let Some(mark) = times.mark {
        args.push(Value::Bytes(mark.encode().into()));
    }
}

/// The script argument for an optional attempt: its digest, or empty.
fn attempt_arg(attempt: Option<AttemptDigest>) -> Value {
    attempt.map_or_else(
        || Value::from(""),
        |digest| Value::Bytes(digest.0.to_vec().into()),
    )
}

/// record_success.lua's reply.
fn success_reply(reply: &[i64]) -> Result<Reply, StorageError> {
    match *reply {
        [0, _, _] => Ok(Reply::NeedsAdmission),
        [1, net_count, pruned] => Ok(Reply::Recorded(Recorded::Applied {
            net_count,
            pruned: u32::try_from(pruned).unwrap_or(u32::MAX),
        })),
        [2, net_count, _] => Ok(Reply::Recorded(Recorded::Duplicate { net_count })),
        [-1, _, _] => Err(foreign_value("the customer's hash")),
        [-2, _, _] => Err(no_ttl_permission("EXPIRE")),
        _ => Err(StorageError::Unexpected(format!(
            "record_success replied {reply:?}"
        ))),
    }
}

/// record_failure.lua's reply.
fn failure_reply(reply: &[i64]) -> Result<Recorded, StorageError> {
    match *reply {
        [0, _] => Ok(Recorded::IgnoredNoHabit),
        [1, net_count] => Ok(Recorded::Applied {
            net_count,
            pruned: 0,
        }),
        [2, net_count] => Ok(Recorded::Duplicate { net_count }),
        [-1, _] => Err(foreign_value("the customer's hash")),
        _ => Err(StorageError::Unexpected(format!(
            "record_failure replied {reply:?}"
        ))),
    }
}

/// admit.lua's reply to `asking` customers at once.
fn admit_reply(reply: &[i64], asking: u32) -> Result<Reply, StorageError> {
    match *reply {
        [admitted, window, current, previous]
            if (0..=i64::from(asking)).contains(&admitted) && current >= 0 && previous >= 0 =>
        {
            Ok(Reply::Admitted {
                admitted: u32::try_from(admitted).unwrap_or(asking),
                counters: WindowCounters {
                    window,
                    current: current.unsigned_abs(),
                    previous: previous.unsigned_abs(),
                },
            })
        }
        [-1, ..] => Err(foreign_value("the merchant's admission key")),
        [-2, ..] => Err(no_ttl_permission("PEXPIRE")),
        _ => Err(StorageError::Unexpected(format!(
            "admit replied {reply:?} to {asking} customers"
        ))),
    }
}

fn foreign_value(key_kind: &'static str) -> StorageError {
    StorageError::ForeignValue {
        key_kind,
        detail: "a stored value is not a whole number, or not a valid attempts list".into(),
    }
}

/// A script's refusal to create a key that the service's Redis user could
/// not give a TTL: `command` is the one the user may not run.
fn no_ttl_permission(command: &str) -> StorageError {
    StorageError::Unavailable {
        why: NotApplied::Permission,
        detail: format!(
            "the Redis user may not run {command} on this key (needs +{}), so the script \
             created nothing",
            command.to_ascii_lowercase()
        ),
    }
}

#[cfg(test)]
mod tests;
