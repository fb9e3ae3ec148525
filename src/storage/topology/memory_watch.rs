//! The memory guard's watch: polls each Redis node's `INFO memory` about
//! once a second and keeps, per node, whether new customers are refused
//! there (the rule itself is `domain::memory_guard`).
//!
//! No call waits for a poll: a call reads its node's `NodeGuard`, one
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
//! first connection, within `CONNECT_GRACE` of the pool's start, is not
//! yet called unreachable, so a pod that just started does not show a
//! healthy Redis as down for its first second.

use std::time::{Duration, Instant};

use fred::clients::Client;
use fred::interfaces::ClientLike;
use fred::prelude::{Error, ErrorKind, Options};
use fred::types::InfoKind;
use tokio::time::MissedTickBehavior;

use super::backend::WeakBackend;
use crate::domain::memory_guard::{MemoryLimit, NodeMemory};

/// How often each node is polled, and the longest one poll may take.
pub(super) const POLL_INTERVAL: Duration = Duration::from_secs(1);

/// Polls every node of `watched` about once a second, for ever (the store's
/// stop token ends it).
pub(in crate::storage) async fn watch(watched: WeakBackend, limit: MemoryLimit) {
    tracing::info!(%limit, "memory guard for admission watching redis");
    let mut ticker = tokio::time::interval(POLL_INTERVAL);
    // A late tick is not made up for: a node is never polled more often.
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let single = watched.is_single();
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
}
