//! The memory guard's watch: polls each Redis node's `INFO memory` about
//! once a second and keeps, per node, whether new customers are refused
//! there (the rule itself is `domain::memory_guard`).
//!
//! No call waits for a poll: a call reads its node's [`NodeGuard`], one
//! atomic load, and the poll runs on its own task. Until a node's first
//! successful poll it admits; when a poll fails (no answer, no connection),
//! the node keeps the state its last successful poll left, since a node that
//! does not answer cannot be filled by new customers anyway.
//!
//! Polls go out at most once per [`POLL_INTERVAL`] per node, each bounded by
//! that same interval, and every node is polled at once: a hung node delays
//! no other node's poll. So a node's state lags its `used_memory` by about a
//! second at most, well inside the 3 s the contract allows.
//!
//! The same poll is each node's reachability probe (`sticky_routing_redis_up`):
//! the watch polls whatever the limit says (100 %, or a node without
//! `maxmemory`, still polls), so no second probe is needed and none adds a
//! round trip. A node is reachable when it answered its last poll, and
//! unreachable when the poll failed or its connection is down. Nothing is
//! claimed before the first poll: a node whose pool is still making its
//! first connection, within [`CONNECT_GRACE`] of the pool's start, is not
//! yet called unreachable, so a pod that just started does not show a
//! healthy Redis as down for its first second.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use fred::clients::{Client, Pool};
use fred::interfaces::ClientLike;
use fred::prelude::{Error, ErrorKind, Options};
use fred::types::InfoKind;
use tokio::time::MissedTickBehavior;

use super::cluster::Cluster;
use super::permissions::NodePermissions;
use crate::domain::memory_guard::{GuardReading, MemoryLimit, NodeMemory, Verdict};

/// How often each node is polled, and the longest one poll may take.
pub(super) const POLL_INTERVAL: Duration = Duration::from_secs(1);

/// How long a new pool may take to connect before its node counts as
/// unreachable: the pools' connection timeout, so by then at least one
/// attempt has failed.
pub(super) const CONNECT_GRACE: Duration = super::store::CONNECTION_TIMEOUT;

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
    pub(super) permissions: NodePermissions,
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

    pub(super) fn name(&self) -> Arc<str> {
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
    fn answered(&self) {
        self.reachable.store(REACHABLE, Ordering::Relaxed);
    }

    /// The node's connection is down at `now`, so it was not polled: it is
    /// unreachable, unless its pool is still within its first connection's
    /// grace.
    fn not_connected(&self, now: Instant) {
        if now.saturating_duration_since(self.started) >= CONNECT_GRACE {
            self.reachable.store(UNREACHABLE, Ordering::Relaxed);
        }
    }

    /// Applies one successful poll, logging each change of verdict once.
    fn apply(&self, memory: NodeMemory, limit: MemoryLimit) {
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
    fn unanswered(&self, error: &Error) {
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

    fn rename(&self, name: String) {
        if let Ok(mut current) = self.name.lock()
            && **current != *name
        {
            *current = name.into();
        }
    }
}

/// What the watch polls.
#[derive(Clone)]
pub(super) enum Watched {
    /// One node, or the primary behind Sentinel, through the store's pool.
    Single { pool: Pool, guard: Arc<NodeGuard> },
    /// Every primary in the slot table as it is at each poll.
    Cluster(Weak<Cluster>),
}

impl Watched {
    /// Each node to poll: a connected client and its guard.
    fn nodes(&self) -> Vec<(Client, Arc<NodeGuard>)> {
        match self {
            Self::Single { pool, guard } => vec![(pool.next_connected().clone(), guard.clone())],
            Self::Cluster(cluster) => cluster.upgrade().map_or_else(Vec::new, |cluster| {
                cluster
                    .primaries()
                    .0
                    .iter()
                    .map(|node| (node.pool.next_connected().clone(), node.guard.clone()))
                    .collect()
            }),
        }
    }

    /// Every node's state, for `/metrics`.
    pub(super) fn readings(&self) -> Vec<GuardReading> {
        match self {
            Self::Single { guard, .. } => vec![guard.reading()],
            Self::Cluster(cluster) => cluster.upgrade().map_or_else(Vec::new, |cluster| {
                let nodes = cluster.primaries().0;
                nodes.iter().map(|node| node.guard.reading()).collect()
            }),
        }
    }
}

/// Polls every node of `watched` about once a second, for ever (the store's
/// stop token ends it).
pub(super) async fn watch(watched: Watched, limit: MemoryLimit) {
    tracing::info!(%limit, "memory guard for admission watching redis");
    let mut ticker = tokio::time::interval(POLL_INTERVAL);
    // A late tick is not made up for: a node is never polled more often.
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let single = matches!(watched, Watched::Single { .. });
    loop {
        ticker.tick().await;
        let mut polls = tokio::task::JoinSet::new();
        for (client, guard) in watched.nodes() {
            // Not connected: nothing to ask, and the pool already logs why;
            // but the node is not reachable.
            if !client.is_connected() {
                guard.not_connected(Instant::now());
                continue;
            }
            polls.spawn(async move {
                match poll(&client).await {
                    Ok(memory) => {
                        if single && let Some(server) = client.active_connections().first() {
                            guard.rename(server.to_string());
                        }
                        guard.answered();
                        guard.apply(memory, limit);
                    }
                    Err(error) => guard.unanswered(&error),
                }
            });
        }
        // Every poll is bounded by the interval, so this ends by the next tick.
        while polls.join_next().await.is_some() {}
    }
}

/// One `INFO memory`, within [`POLL_INTERVAL`], never resent.
async fn poll(client: &Client) -> Result<NodeMemory, Error> {
    let options = Options {
        max_attempts: Some(1),
        timeout: Some(POLL_INTERVAL),
        fail_fast: true,
        ..Options::default()
    };
    let text: String = client
        .with_options(&options)
        .info(Some(InfoKind::Memory))
        .await?;
    parse_info_memory(&text).ok_or_else(|| {
        Error::new(
            ErrorKind::Parse,
            "INFO memory named no used_memory or no maxmemory",
        )
    })
}

/// `used_memory` and `maxmemory` from `INFO memory`'s `name:value` lines.
fn parse_info_memory(text: &str) -> Option<NodeMemory> {
    let field = |name: &str| {
        text.lines()
            .find_map(|line| line.trim_end().strip_prefix(name)?.strip_prefix(':'))
            .and_then(|value| value.parse().ok())
    };
    Some(NodeMemory {
        used_memory: field("used_memory")?,
        maxmemory: field("maxmemory")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::percent::Percent;

    #[test]
    fn info_memory_gives_used_memory_and_maxmemory_not_their_kin() {
        let info = "# Memory\r\nused_memory:1048576\r\nused_memory_human:1.00M\r\n\
                    used_memory_rss:9000000\r\nmaxmemory:2097152\r\nmaxmemory_human:2.00M\r\n\
                    maxmemory_policy:noeviction\r\n";
        assert_eq!(
            parse_info_memory(info),
            Some(NodeMemory {
                used_memory: 1_048_576,
                maxmemory: 2_097_152
            })
        );
        assert_eq!(parse_info_memory("# Memory\r\nused_memory:1\r\n"), None);
        assert_eq!(parse_info_memory("used_memory:x\r\nmaxmemory:0\r\n"), None);
    }

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
