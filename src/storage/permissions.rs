//! The permission probe: whether the service's Redis user may run every
//! command the service sends and its scripts call, on the keys it runs them
//! on, checked on every node with the readiness PING.
//!
//! Why: Redis checks a script's commands one by one as the script runs. A
//! user without `+expire` lets record_success.lua write the count and then
//! stops it at the EXPIRE, leaving a key without a TTL and a caller who
//! cannot tell what happened. So the scripts themselves check, before they
//! create a key, that they can give it its TTL (the one rule that keeps
//! memory bounded); and this probe finds any missing permission before a
//! write meets it:
//!
//! - Until a node's probe passes, readiness is NOT_SERVING, and the log
//!   names what the user lacks, in ACL words (`+expire on ~sticky_gw_*`).
//! - While the last probe of a node found something missing, a write to
//!   that node is refused with nothing sent (`NotApplied::Permission`).
//! - While a node is not known to be fine, each readiness check (500 ms)
//!   probes it again, so a fixed ACL is seen within one check. Once it is,
//!   it is probed again at the check after any call there met a refusal
//!   for want of a permission, at the first check that reaches it after
//!   one that did not (a restart or a failover may bring another ACL), and
//!   otherwise every [`REPROBE_EVERY`]: so a
//!   permission revoked while the service runs is seen within one check of
//!   the first call that meets it. The calls in between get what Redis
//!   says, which is UNKNOWN for a script stopped part-way.
//!
//! Why not probe at every check: the probe is a script call (EVALSHA),
//! and an operator or a test that counts the service's EVALSHAs per RPC in
//! `INFO commandstats` would see two more a second per node.
//!
//! probe.lua asks `redis.acl_check_cmd` (Redis 7 and later, Valkey), so it
//! runs none of the commands and writes nothing. A Redis 6 cannot say; the
//! probe then passes, the log says once that it could not check, and the
//! scripts' own check is skipped too (they test for `acl_check_cmd`).

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

use fred::prelude::Value;

use super::error::{NotApplied, StorageError, is_acl_refusal};

/// How often a node whose user had every permission at the last probe is
/// probed again when no call there met a refusal.
pub(super) const REPROBE_EVERY: Duration = Duration::from_secs(30);

/// A customer key as the ACL sees it: the family's prefix and a name no
/// customer key has (a merchant id is never empty). Nothing is written
/// under it: the probe only asks whether it could be.
const CUSTOMER: &str = "sticky_gw__probe";
/// An admission key, likewise.
const ADMISSION: &str = "sticky_adm__probe";
/// A breaker key, likewise: `sticky_brk__` begins no breaker key (each
/// family letter follows the prefix).
#[cfg(test)]
const BREAKER: &str = "sticky_brk__probe";
/// An experiment key, likewise: a merchant id is never empty, so no
/// experiment key starts `sticky_exp__`.
#[cfg(test)]
const EXPERIMENT: &str = "sticky_exp__probe";
/// Any 40 hex digits: EVALSHA's ACL check reads its key, not its script.
const ANY_SHA: &str = "0000000000000000000000000000000000000000";

/// One thing the service does with Redis: the ACL rule that allows it, and
/// the command line probe.lua checks.
#[derive(Debug)]
pub(super) struct Need {
    /// The rule, as `deploy/redis-acl.txt` writes it.
    grant: &'static str,
    /// The key pattern it runs on, if any.
    keys: Option<&'static str>,
    words: &'static [&'static str],
}

impl Need {
    const fn new(grant: &'static str, words: &'static [&'static str]) -> Self {
        Self {
            grant,
            keys: None,
            words,
        }
    }

    const fn on(grant: &'static str, keys: &'static str, words: &'static [&'static str]) -> Self {
        Self {
            grant,
            keys: Some(keys),
            words,
        }
    }

    fn describe(&self) -> String {
        match self.keys {
            Some(keys) => format!("{} on ~{keys}", self.grant),
            None => self.grant.to_string(),
        }
    }
}

const CUSTOMERS: &str = "sticky_gw_*";
const ADMISSIONS: &str = "sticky_adm_*";
#[cfg(test)]
const BREAKERS: &str = "sticky_brk_*";
#[cfg(test)]
const EXPERIMENTS: &str = "sticky_exp_*";

/// Everything the service and its scripts send. `scripts_call_nothing_unprobed`
/// holds the scripts' commands to this list.
pub(super) const NEEDS: &[Need] = &[
    // Sent by the service itself: readiness, the memory guard's poll, the
    // scripts' calls and their NOSCRIPT fallback, GetPin, GetHabits and
    // ForgetCustomer.
    Need::new("+ping", &["PING"]),
    Need::new("+info", &["INFO", "memory"]),
    Need::new("+script|load", &["SCRIPT", "LOAD", "return 1"]),
    Need::on("+evalsha", CUSTOMERS, &["EVALSHA", ANY_SHA, "1", CUSTOMER]),
    Need::on(
        "+evalsha",
        ADMISSIONS,
        &["EVALSHA", ANY_SHA, "1", ADMISSION],
    ),
    Need::on("+eval", CUSTOMERS, &["EVAL", "return 1", "1", CUSTOMER]),
    Need::on("+eval", ADMISSIONS, &["EVAL", "return 1", "1", ADMISSION]),
    Need::on("+hgetall", CUSTOMERS, &["HGETALL", CUSTOMER]),
    Need::on("+ttl", CUSTOMERS, &["TTL", CUSTOMER]),
    Need::on("+del", CUSTOMERS, &["DEL", CUSTOMER]),
    // Called by record_success.lua and record_failure.lua.
    Need::on("+hmget", CUSTOMERS, &["HMGET", CUSTOMER, ":a"]),
    Need::on("+exists", CUSTOMERS, &["EXISTS", CUSTOMER]),
    Need::on("+hlen", CUSTOMERS, &["HLEN", CUSTOMER]),
    Need::on("+hincrby", CUSTOMERS, &["HINCRBY", CUSTOMER, "f", "1"]),
    Need::on("+hset", CUSTOMERS, &["HSET", CUSTOMER, "f", "1"]),
    Need::on("+hdel", CUSTOMERS, &["HDEL", CUSTOMER, "f"]),
    Need::on("+expire", CUSTOMERS, &["EXPIRE", CUSTOMER, "1"]),
    // Called by admit.lua.
    Need::on("+hmget", ADMISSIONS, &["HMGET", ADMISSION, "w"]),
    Need::on("+hset", ADMISSIONS, &["HSET", ADMISSION, "w", "1"]),
    Need::on("+pexpire", ADMISSIONS, &["PEXPIRE", ADMISSION, "1"]),
];

/// What the circuit breaker sends: granted by `deploy/redis-acl.txt`, but
/// not probed. The breaker fails open (contract: no call fails because of
/// it), so a Redis user without these keeps serving and shows the refusals
/// as `breaker_io_failures_total` and a warning instead of turning
/// readiness NOT_SERVING. Its scripts' calls, GetConnectorHealth's HGETALL...
#[cfg(test)]
pub(super) const BREAKER_NEEDS: &[Need] = &[
    Need::on("+evalsha", BREAKERS, &["EVALSHA", ANY_SHA, "1", BREAKER]),
    Need::on("+eval", BREAKERS, &["EVAL", "return 1", "1", BREAKER]),
    Need::on("+hgetall", BREAKERS, &["HGETALL", BREAKER]),
    // ...and what breaker_flush.lua, breaker_transition.lua and
    // breaker_index.lua call.
    Need::on("+hmget", BREAKERS, &["HMGET", BREAKER, "f"]),
    Need::on("+hget", BREAKERS, &["HGET", BREAKER, "f"]),
    Need::on("+hset", BREAKERS, &["HSET", BREAKER, "f", "1"]),
    Need::on("+hincrby", BREAKERS, &["HINCRBY", BREAKER, "f", "1"]),
    Need::on("+hdel", BREAKERS, &["HDEL", BREAKER, "f"]),
    Need::on("+del", BREAKERS, &["DEL", BREAKER]),
    Need::on("+pttl", BREAKERS, &["PTTL", BREAKER]),
    Need::on("+pexpire", BREAKERS, &["PEXPIRE", BREAKER, "1"]),
    // The counts log.
    Need::on("+append", BREAKERS, &["APPEND", BREAKER, "x"]),
    Need::on("+getrange", BREAKERS, &["GETRANGE", BREAKER, "0", "1"]),
];

/// What the experiment counts send: granted by `deploy/redis-acl.txt`, and
/// not probed, as the breaker's are. The counts are written in the
/// background and fail alone (contract: RecordOutcome stays one round
/// trip and never fails because of them), so a Redis user without these
/// keeps serving and shows the refusals as
/// `experiment_io_failures_total` and a warning; GetUplift answers
/// UNAVAILABLE. The experiment log scripts' calls (experiment_append.lua,
/// experiment_compact.lua, experiment_read.lua) and what they call, the
/// compaction's LRANGE, and GetUplift's HGETALL.
#[cfg(test)]
pub(super) const EXPERIMENT_NEEDS: &[Need] = &[
    Need::on(
        "+evalsha",
        EXPERIMENTS,
        &["EVALSHA", ANY_SHA, "1", EXPERIMENT],
    ),
    Need::on("+eval", EXPERIMENTS, &["EVAL", "return 1", "1", EXPERIMENT]),
    Need::on("+hgetall", EXPERIMENTS, &["HGETALL", EXPERIMENT]),
    Need::on("+hmget", EXPERIMENTS, &["HMGET", EXPERIMENT, "f"]),
    Need::on("+hincrby", EXPERIMENTS, &["HINCRBY", EXPERIMENT, "f", "1"]),
    Need::on("+pexpire", EXPERIMENTS, &["PEXPIRE", EXPERIMENT, "1"]),
    Need::on("+rpush", EXPERIMENTS, &["RPUSH", EXPERIMENT, "f"]),
    Need::on("+lrange", EXPERIMENTS, &["LRANGE", EXPERIMENT, "0", "1"]),
    Need::on("+ltrim", EXPERIMENTS, &["LTRIM", EXPERIMENT, "0", "1"]),
    Need::on("+llen", EXPERIMENTS, &["LLEN", EXPERIMENT]),
    Need::on("+hset", EXPERIMENTS, &["HSET", EXPERIMENT, "f", "1"]),
    Need::on("+hsetnx", EXPERIMENTS, &["HSETNX", EXPERIMENT, "f", "1"]),
    Need::on("+hdel", EXPERIMENTS, &["HDEL", EXPERIMENT, "f"]),
];

/// probe.lua's arguments: each need's word count, then its words.
pub(super) static PROBE_ARGS: LazyLock<Vec<Value>> = LazyLock::new(|| {
    NEEDS
        .iter()
        .flat_map(|need| {
            std::iter::once(Value::from(need.words.len() as i64))
                .chain(need.words.iter().map(|word| Value::from(*word)))
        })
        .collect()
});

/// What one probe found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Verdict {
    /// The user may run everything.
    Granted,
    /// What the user lacks, in ACL words, comma-separated.
    Lacking(String),
    /// The server cannot say (Redis before 7).
    Unchecked,
}

impl Verdict {
    /// probe.lua's reply: the numbers of the needs refused, or `[-1]`.
    pub(super) fn of_reply(reply: &[i64]) -> Result<Self, StorageError> {
        if reply == [-1] {
            return Ok(Self::Unchecked);
        }
        let mut lacking = Vec::with_capacity(reply.len());
        for &number in reply {
            let need = usize::try_from(number)
                .ok()
                .and_then(|n| n.checked_sub(1))
                .and_then(|index| NEEDS.get(index))
                .ok_or_else(|| StorageError::Unexpected(format!("probe replied {reply:?}")))?;
            lacking.push(need.describe());
        }
        Ok(if lacking.is_empty() {
            Self::Granted
        } else {
            Self::Lacking(lacking.join(", "))
        })
    }

    /// The probe's own call failed: an ACL refusal of it (no `+evalsha`, no
    /// `+eval`) is a verdict; any other failure says nothing about
    /// permissions.
    pub(super) fn of_failed_probe(error: &StorageError) -> Option<Self> {
        let detail = match error {
            StorageError::Unavailable { detail, .. }
            | StorageError::MaybeApplied { detail, .. } => detail,
            _ => return None,
        };
        is_acl_refusal(detail).then(|| Self::Lacking(format!("the probe itself: {detail}")))
    }
}

/// [`NodePermissions`]'s states.
const UNKNOWN: u8 = 0;
const GRANTED: u8 = 1;
const LACKING: u8 = 2;
const UNCHECKED: u8 = 3;

/// One node's last verdict: read by every write (one atomic load), written
/// by the readiness check.
pub(crate) struct NodePermissions {
    state: AtomicU8,
    /// What the user lacks, while the state is `LACKING`.
    lacking: Mutex<String>,
    /// A call met a refusal for want of a permission since the last probe.
    suspect: AtomicBool,
    /// The last readiness PING got no answer: probe once one does.
    unreached: AtomicBool,
    /// When the last verdict was kept.
    probed_at: Mutex<Option<Instant>>,
}

impl NodePermissions {
    pub(super) fn new() -> Self {
        Self {
            state: AtomicU8::new(UNKNOWN),
            lacking: Mutex::new(String::new()),
            suspect: AtomicBool::new(false),
            unreached: AtomicBool::new(false),
            probed_at: Mutex::new(None),
        }
    }

    /// Whether the readiness check at `now` probes this node: always while
    /// its permissions are unknown or lacking; after a refusal; and every
    /// [`REPROBE_EVERY`].
    pub(super) fn probe_due(&self, now: Instant) -> bool {
        if !matches!(self.state.load(Ordering::Relaxed), GRANTED | UNCHECKED)
            || self.suspect.swap(false, Ordering::Relaxed)
        {
            return true;
        }
        self.probed_at.lock().map_or(true, |at| {
            at.is_none_or(|at| now.saturating_duration_since(at) >= REPROBE_EVERY)
        })
    }

    /// A call to this node was refused for want of a permission: the next
    /// readiness check probes.
    pub(super) fn suspect(&self) {
        self.suspect.store(true, Ordering::Relaxed);
    }

    /// The readiness PING got no answer.
    pub(super) fn unreached(&self) {
        self.unreached.store(true, Ordering::Relaxed);
    }

    /// A readiness PING was answered: whether the one before was not, so
    /// the node may be another process now and is to be probed.
    pub(super) fn reached(&self) -> bool {
        self.unreached.swap(false, Ordering::Relaxed)
    }

    /// A write's refusal, while the last probe found a permission missing;
    /// `None` otherwise (not probed yet included: the scripts' own check
    /// still keeps every key's TTL).
    pub(super) fn refusal(&self) -> Option<StorageError> {
        (self.state.load(Ordering::Relaxed) == LACKING).then(|| StorageError::Unavailable {
            why: NotApplied::Permission,
            detail: self.lacking_words(),
        })
    }

    /// Readiness: passes once a probe has, and while the last verdict holds.
    /// Only a verdict that something is missing is a `Permission` error.
    pub(super) fn readiness(&self) -> Result<(), StorageError> {
        let (why, detail) = match self.state.load(Ordering::Relaxed) {
            GRANTED | UNCHECKED => return Ok(()),
            LACKING => (NotApplied::Permission, self.lacking_words()),
            // The probe is a read that has not answered yet: nothing is
            // known to be missing.
            _ => (
                NotApplied::ReadFailed,
                "the permission probe has not answered yet".to_string(),
            ),
        };
        Err(StorageError::Unavailable { why, detail })
    }

    fn lacking_words(&self) -> String {
        let lacking = self
            .lacking
            .lock()
            .map_or_else(|_| String::new(), |l| l.clone());
        format!("the Redis user lacks {lacking}")
    }

    /// Keeps `verdict` for `node`, logging each change once.
    pub(super) fn record(&self, verdict: Verdict, node: &str) {
        let (state, words) = match verdict {
            Verdict::Granted => (GRANTED, String::new()),
            Verdict::Unchecked => (UNCHECKED, String::new()),
            Verdict::Lacking(words) => (LACKING, words),
        };
        if let Ok(mut at) = self.probed_at.lock() {
            *at = Some(Instant::now());
        }
        let Ok(mut lacking) = self.lacking.lock() else {
            return;
        };
        let before = self.state.swap(state, Ordering::Relaxed);
        if state == LACKING && (before != LACKING || *lacking != words) {
            tracing::error!(
                %node,
                lacking = %words,
                "the Redis user lacks {words}: writes to this node are refused and \
                 sticky_routing.v1.StickyRouting is NOT_SERVING until it has them \
                 (deploy/redis-acl.txt lists what the service needs)"
            );
        } else if state == GRANTED && before == LACKING {
            tracing::info!(%node, "the Redis user has every permission the service needs again");
        } else if state == UNCHECKED && before != UNCHECKED {
            tracing::warn!(
                %node,
                "this Redis cannot check the service user's permissions (redis.acl_check_cmd \
                 needs Redis 7): a missing one shows only when a call meets it"
            );
        }
        *lacking = words;
    }
}

#[cfg(test)]
mod tests;
