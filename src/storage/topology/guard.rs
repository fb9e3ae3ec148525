//! One node's state as the storage layer's background checks last found
//! it, read by every call with atomic loads: whether the memory guard
//! refuses new customers there (written by `memory_watch.rs`), whether the
//! node answers, and whether the service's Redis user may do all it needs
//! there (`permissions.rs`, written by the readiness check).

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fred::prelude::{Error, ErrorKind};

use super::super::permissions::NodePermissions;
use super::connect::CONNECTION_TIMEOUT;
use crate::domain::memory_guard::{GuardReading, MemoryLimit, NodeMemory, Verdict};

/// How long a new pool may take to connect before its node counts as
/// unreachable: the pools' connection timeout, so by then at least one
/// attempt has failed.
pub(super) const CONNECT_GRACE: Duration = CONNECTION_TIMEOUT;

/// Not known: the value of a number no poll has reported yet.
const UNKNOWN: u64 = u64::MAX;

/// [`NodeGuard::reachable`]'s states.
const REACHABILITY_UNKNOWN: u8 = 0;
const REACHABLE: u8 = 1;
const UNREACHABLE: u8 = 2;

/// One node's guard: read by calls, written only by the watch.
pub(crate) struct NodeGuard {
    engaged: AtomicBool,
    /// The node as logs and `/metrics` name it (`host:port`). Behind
    /// Sentinel it follows the primary the pool is connected to.
    name: Mutex<Arc<str>>,
    /// The last successful poll's numbers, for `/metrics` only.
    used_memory: AtomicU64,
    limit: AtomicU64,
    /// The last verdict, to log each change once.
    last: Mutex<Option<Verdict>>,
    /// Whether the last poll failed, to warn once per run of failures.
    unanswered: AtomicBool,
    /// Whether the node answered its last poll (`REACHABLE`), did not or
    /// could not be asked (`UNREACHABLE`), or neither is known yet.
    reachable: AtomicU8,
    /// When the node's pool was started, for [`CONNECT_GRACE`].
    started: Instant,
    /// Whether the service's Redis user may do all it needs on this node,
    /// as the readiness check's probe last found (`permissions.rs`).
    pub(in crate::storage) permissions: NodePermissions,
}

impl NodeGuard {
    pub(crate) fn new(name: &str) -> Self {
        Self {
            engaged: AtomicBool::new(false),
            name: Mutex::new(name.into()),
            used_memory: AtomicU64::new(UNKNOWN),
            limit: AtomicU64::new(UNKNOWN),
            last: Mutex::new(None),
            unanswered: AtomicBool::new(false),
            reachable: AtomicU8::new(REACHABILITY_UNKNOWN),
            started: Instant::now(),
            permissions: NodePermissions::new(),
        }
    }

    /// Whether a new customer whose hash would live on this node is refused.
    pub(crate) fn refuses_new_customers(&self) -> bool {
        self.engaged.load(Ordering::Relaxed)
    }

    pub(in crate::storage) fn name(&self) -> Arc<str> {
        self.name
            .lock()
            .map_or_else(|_| Arc::from("-"), |name| name.clone())
    }

    /// What `/metrics` shows for this node.
    pub(crate) fn reading(&self) -> GuardReading {
        let known = |value: u64| (value != UNKNOWN).then_some(value);
        GuardReading {
            node: self.name().to_string(),
            engaged: self.refuses_new_customers(),
            used_memory: known(self.used_memory.load(Ordering::Relaxed)),
            limit: known(self.limit.load(Ordering::Relaxed)),
            reachable: match self.reachable.load(Ordering::Relaxed) {
                REACHABLE => Some(true),
                UNREACHABLE => Some(false),
                _ => None,
            },
        }
    }

    /// The node answered a poll.
    pub(super) fn answered(&self) {
        self.reachable.store(REACHABLE, Ordering::Relaxed);
    }

    /// The node's connection is down at `now`, so it was not polled: it is
    /// unreachable, unless its pool is still within its first connection's
    /// grace.
    pub(super) fn not_connected(&self, now: Instant) {
        if now.saturating_duration_since(self.started) >= CONNECT_GRACE {
            self.reachable.store(UNREACHABLE, Ordering::Relaxed);
        }
    }

    /// Applies one successful poll, logging each change of verdict once.
    pub(super) fn apply(&self, memory: NodeMemory, limit: MemoryLimit) {
        let verdict = memory.verdict(limit);
        self.used_memory
            .store(memory.used_memory, Ordering::Relaxed);
        self.limit
            .store(verdict.limit().unwrap_or(UNKNOWN), Ordering::Relaxed);
        self.engaged.store(verdict.engaged(), Ordering::Relaxed);
        let node = self.name();
        if self.unanswered.swap(false, Ordering::Relaxed) {
            tracing::info!(%node, "redis answers the memory poll again");
        }
        let Ok(mut last) = self.last.lock() else {
            return;
        };
        let before = last.replace(verdict);
        let was_engaged = before.is_some_and(Verdict::engaged);
        let used_memory = memory.used_memory;
        if verdict.engaged() && !was_engaged {
            tracing::warn!(
                %node, used_memory, limit = verdict.limit(),
                "memory guard engaged: new customers are not admitted on this node"
            );
        } else if was_engaged && !verdict.engaged() {
            tracing::info!(
                %node, used_memory, limit = verdict.limit(),
                "memory guard released: new customers are admitted again on this node"
            );
        }
        if verdict == Verdict::NoLimit && before != Some(Verdict::NoLimit) {
            tracing::info!(
                %node,
                "memory guard: this node has no maxmemory, so the limit, a percentage \
                 of it, is no limit here"
            );
        }
    }

    /// A poll failed: no answer in time, an error reply, or an answer
    /// without the two numbers.
    pub(super) fn unanswered(&self, error: &Error) {
        self.reachable.store(
            if *error.kind() == ErrorKind::Parse {
                REACHABLE
            } else {
                UNREACHABLE
            },
            Ordering::Relaxed,
        );
        if !self.unanswered.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                node = %self.name(), %error,
                engaged = self.refuses_new_customers(),
                "memory poll failed: the memory guard keeps its last known state"
            );
        }
    }

    pub(super) fn rename(&self, name: String) {
        if let Ok(mut current) = self.name.lock()
            && **current != *name
        {
            *current = name.into();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::percent::Percent;

    #[test]
    fn a_node_admits_until_a_poll_engages_it_and_keeps_its_state_on_failure() {
        let guard = NodeGuard::new("127.0.0.1:6379");
        let limit = MemoryLimit::OfMaxmemory(Percent::new(50.0).unwrap());
        assert!(!guard.refuses_new_customers(), "none known: admit");
        assert_eq!(guard.reading().used_memory, None);

        let full = NodeMemory {
            used_memory: 60,
            maxmemory: 100,
        };
        guard.apply(full, limit);
        assert!(guard.refuses_new_customers());
        guard.unanswered(&Error::new(ErrorKind::Timeout, "no answer"));
        assert!(guard.refuses_new_customers(), "the last known state holds");
        let reading = guard.reading();
        assert_eq!(
            (reading.engaged, reading.used_memory, reading.limit),
            (true, Some(60), Some(50))
        );

        guard.apply(
            NodeMemory {
                used_memory: 49,
                ..full
            },
            limit,
        );
        assert!(!guard.refuses_new_customers());
        guard.apply(
            NodeMemory {
                used_memory: 99,
                maxmemory: 0,
            },
            limit,
        );
        assert!(!guard.refuses_new_customers(), "no maxmemory: no limit");
        assert_eq!(guard.reading().limit, None);
    }

    #[test]
    fn a_node_is_reachable_as_its_last_poll_says_and_unknown_until_one_does() {
        let guard = NodeGuard::new("127.0.0.1:6379");
        let reachable = || guard.reading().reachable;
        assert_eq!(reachable(), None, "not polled yet");
        guard.not_connected(Instant::now());
        assert_eq!(reachable(), None, "still making its first connection");
        guard.not_connected(Instant::now() + CONNECT_GRACE);
        assert_eq!(reachable(), Some(false), "no connection after the grace");

        guard.answered();
        assert_eq!(reachable(), Some(true));
        guard.unanswered(&Error::new(ErrorKind::Timeout, "no answer"));
        assert_eq!(reachable(), Some(false));
        guard.answered();
        guard.unanswered(&Error::new(ErrorKind::IO, "Connection reset by peer"));
        assert_eq!(reachable(), Some(false));
        guard.unanswered(&Error::new(
            ErrorKind::Parse,
            "INFO memory named no used_memory or no maxmemory",
        ));
        assert_eq!(reachable(), Some(true), "an odd answer is still an answer");

        let fresh = NodeGuard::new("127.0.0.1:6380");
        fresh.unanswered(&Error::new(ErrorKind::Timeout, "no answer"));
        assert_eq!(
            fresh.reading().reachable,
            Some(false),
            "a failed poll counts at once"
        );
    }
}
