//! Following a Sentinel failover at once, and acknowledging no write that
//! the failover will throw away.
//!
//! fred asks Sentinel where the primary is only when it connects. After a
//! failover the old primary keeps its clients and keeps accepting writes
//! until Sentinel demotes it, which on Sentinel's 10 s INFO period can take
//! that long; every write acknowledged there meanwhile is lost when it
//! resyncs from the new primary. The Sentinel failover test
//! (`tests/api/failover.rs`) measures that loss; docs/operations.md quotes it.
//!
//! Two things close that gap:
//! - **Follow.** Every half second, and at once on Sentinel's
//!   `+switch-master`, ask Sentinel for the primary; when a pool is
//!   connected elsewhere, force its reconnection, which asks Sentinel again.
//!   Both of the node's pools are followed (the request and background
//!   lanes, `lanes.rs`): a background write left on the old primary would
//!   be lost with it.
//! - **Fence.** Sentinel announces `+failover-state-send-slaveof-noone` just
//!   before it promotes a replica. From then until every pool is connected
//!   to the new primary, writes are refused with UNAVAILABLE instead of being
//!   acknowledged by a primary whose writes are about to be discarded. Reads
//!   go on. The fence falls by itself after [`FENCE_MAX`], should the
//!   failover stall, and at once when Sentinel aborts it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fred::clients::{Client, Pool, SubscriberClient};
use fred::interfaces::{ClientLike, EventInterface, PubsubInterface};
use fred::prelude::{Config, Error, Options};
use fred::types::config::{Server, ServerConfig};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::connect::{sentinel_builder, spawn_until_stopped};

/// How often Sentinel is asked for the primary.
const INTERVAL: Duration = Duration::from_millis(500);
/// The longest writes stay fenced if the failover never completes.
pub const FENCE_MAX: Duration = Duration::from_secs(10);

/// Sentinel events (pub/sub channels) the watch listens to.
const PROMOTING: &str = "+failover-state-send-slaveof-noone";
const SWITCHED: &str = "+switch-master";
const ABORTS: &[&str] = &[
    "-failover-abort-not-elected",
    "-failover-abort-no-good-slave",
    "-failover-abort-slave-timeout",
];

/// Writes pause while it is up.
pub struct WriteFence {
    base: Instant,
    /// Milliseconds after `base` until which the fence is up; 0 when down.
    until_ms: AtomicU64,
    /// Where the pools were connected when the fence went up: the fence
    /// falls only once they are connected somewhere else.
    old_primary: Mutex<Vec<Server>>,
}

impl WriteFence {
    fn new() -> Self {
        Self {
            base: Instant::now(),
            until_ms: AtomicU64::new(0),
            old_primary: Mutex::new(Vec::new()),
        }
    }

    pub fn is_up(&self) -> bool {
        self.elapsed_ms() < self.until_ms.load(Ordering::Acquire)
    }

    fn raise(&self, connected: Vec<Server>) {
        if let Ok(mut old) = self.old_primary.lock() {
            *old = connected;
        }
        let until = self.elapsed_ms() + u64::try_from(FENCE_MAX.as_millis()).unwrap_or(u64::MAX);
        self.until_ms.store(until, Ordering::Release);
    }

    fn lower(&self) {
        self.until_ms.store(0, Ordering::Release);
    }

    fn was_connected_to(&self, server: &Server) -> bool {
        self.old_primary
            .lock()
            .map_or(true, |old| old.iter().any(|s| same(s, server)))
    }

    fn elapsed_ms(&self) -> u64 {
        u64::try_from(self.base.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}

/// The running watch: its fence and its connections to the sentinels
/// (closed by [`SentinelWatch::close`]). Its tasks run on the store's
/// tracker and end with the store's stop token.
pub struct SentinelWatch {
    pub fence: Arc<WriteFence>,
    queries: Vec<Client>,
    events: Vec<SubscriberClient>,
}

impl SentinelWatch {
    /// Closes the sentinel connections, which would otherwise keep
    /// reconnecting after the store quit. The store cancels the tasks first.
    pub async fn close(&self) {
        for query in &self.queries {
            let _ = query.quit().await;
        }
        for events in &self.events {
            let _ = events.quit().await;
        }
    }
}

/// Starts the watch when `config` points at Sentinel; `None` otherwise. It
/// follows every one of `pools` (all to the same primary). Its tasks run on
/// `tasks` until `stop` is cancelled.
pub fn spawn(
    config: &Config,
    pools: Vec<Pool>,
    tasks: &TaskTracker,
    stop: &CancellationToken,
) -> Result<Option<SentinelWatch>, Error> {
    let ServerConfig::Sentinel {
        hosts,
        service_name,
        username,
        password,
    } = &config.server
    else {
        return Ok(None);
    };
    let sentinel_config = |host: &Server| {
        let mut sentinel = config.clone();
        sentinel.server = ServerConfig::Centralized {
            server: host.clone(),
        };
        sentinel.username.clone_from(username);
        sentinel.password.clone_from(password);
        sentinel.fail_fast = true;
        sentinel_builder(sentinel)
    };
    let fence = Arc::new(WriteFence::new());
    let check_now = Arc::new(Notify::new());
    let mut queries = Vec::with_capacity(hosts.len());
    let mut subscribers = Vec::with_capacity(hosts.len());
    for host in hosts {
        let query = sentinel_config(host).build()?;
        drop(query.connect());
        queries.push(query);
        let events = sentinel_config(host).build_subscriber_client()?;
        subscribers.push(events.clone());
        let events = listen(
            events,
            service_name.clone(),
            pools.clone(),
            fence.clone(),
            check_now.clone(),
        );
        spawn_until_stopped(tasks, stop, events);
    }
    let follow = follow(
        queries.clone(),
        service_name.clone(),
        pools,
        fence.clone(),
        check_now,
    );
    spawn_until_stopped(tasks, stop, follow);
    Ok(Some(SentinelWatch {
        fence,
        queries,
        events: subscribers,
    }))
}

/// Asks Sentinel for the primary every `INTERVAL` (or when told to), moves
/// every pool there, and lowers the fence once they all are there.
async fn follow(
    sentinels: Vec<Client>,
    service_name: String,
    pools: Vec<Pool>,
    fence: Arc<WriteFence>,
    check_now: Arc<Notify>,
) {
    let mut ticker = tokio::time::interval(INTERVAL);
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            () = check_now.notified() => {}
        }
        let Some(primary) = ask(&sentinels, &service_name).await else {
            continue;
        };
        let mut moved = true;
        for pool in &pools {
            moved &= move_to(pool, &primary).await;
        }
        if !moved {
            continue;
        }
        let on_primary = pools.iter().all(|pool| {
            let connected = pool.active_connections();
            !connected.is_empty() && connected.iter().all(|s| same(s, &primary))
        });
        if fence.is_up() && on_primary && !fence.was_connected_to(&primary) {
            fence.lower();
            tracing::info!(primary = %primary, "connected to the new primary: writes resume");
        }
    }
}

/// Forces `pool` to reconnect when it is connected anywhere but to
/// `primary`; false when it could not.
async fn move_to(pool: &Pool, primary: &Server) -> bool {
    let stale: Vec<String> = pool
        .active_connections()
        .iter()
        .filter(|s| !same(s, primary))
        .map(ToString::to_string)
        .collect();
    if stale.is_empty() {
        return true;
    }
    tracing::warn!(
        primary = %primary,
        connected = ?stale,
        "sentinel reports a new primary: reconnecting"
    );
    if let Err(error) = pool.force_reconnection().await {
        tracing::warn!(%error, "could not reconnect to the new primary yet");
        return false;
    }
    true
}

/// Listens to one sentinel's failover events for `service_name`.
async fn listen(
    events: SubscriberClient,
    service_name: String,
    pools: Vec<Pool>,
    fence: Arc<WriteFence>,
    check_now: Arc<Notify>,
) {
    let mut messages = events.message_rx();
    drop(events.connect());
    let _resubscribe = events.manage_subscriptions();
    let channels: Vec<&str> = [PROMOTING, SWITCHED]
        .iter()
        .chain(ABORTS)
        .copied()
        .collect();
    let mut warned = false;
    while let Err(error) = events.subscribe(channels.clone()).await {
        if !warned {
            tracing::warn!(
                %error,
                "cannot subscribe to sentinel's failover events (retrying): until then writes are not fenced during a failover"
            );
            warned = true;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    loop {
        let message = match messages.recv().await {
            Ok(message) => message,
            Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
            Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
        };
        let text = message.value.as_string().unwrap_or_default();
        let channel = &*message.channel;
        let ours = match channel {
            // "<name> <old ip> <old port> <new ip> <new port>"
            SWITCHED => text.split(' ').next() == Some(service_name.as_str()),
            // "<role> <name:port> <ip> <port> @ <name> <ip> <port>"
            _ => text.contains(&format!("@ {service_name} ")),
        };
        if !ours {
            continue;
        }
        match channel {
            PROMOTING if !fence.is_up() => {
                fence.raise(pools.iter().flat_map(Pool::active_connections).collect());
                tracing::warn!(
                    "sentinel is promoting a replica: writes pause until the new primary is reached"
                );
            }
            SWITCHED => check_now.notify_one(),
            abort if ABORTS.contains(&abort) => {
                fence.lower();
                tracing::warn!(
                    event = abort,
                    "sentinel aborted the failover: writes resume"
                );
            }
            _ => {}
        }
    }
}

/// The primary's address from the first sentinel that answers.
async fn ask(sentinels: &[Client], service_name: &str) -> Option<Server> {
    let options = Options {
        timeout: Some(Duration::from_secs(1)),
        max_attempts: Some(1),
        fail_fast: true,
        ..Options::default()
    };
    for sentinel in sentinels {
        let reply: Result<Vec<String>, Error> = sentinel
            .with_options(&options)
            .custom(
                fred::cmd!("SENTINEL"),
                vec!["GET-MASTER-ADDR-BY-NAME", service_name],
            )
            .await;
        if let Ok([host, port]) = reply.as_deref()
            && let Ok(port) = port.parse()
        {
            return Some(Server::new(host.as_str(), port));
        }
    }
    None
}

fn same(a: &Server, b: &Server) -> bool {
    a.host == b.host && a.port == b.port
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fence_stands_until_lowered_and_remembers_the_old_primary() {
        let fence = WriteFence::new();
        assert!(!fence.is_up());
        fence.raise(vec![Server::new("10.0.0.1", 6379)]);
        assert!(fence.is_up());
        assert!(fence.was_connected_to(&Server::new("10.0.0.1", 6379)));
        assert!(!fence.was_connected_to(&Server::new("10.0.0.2", 6379)));
        fence.lower();
        assert!(!fence.is_up());
    }

    #[test]
    fn the_fence_falls_by_itself_after_its_maximum() {
        let fence = WriteFence::new();
        fence.raise(Vec::new());
        let expired = fence.elapsed_ms().saturating_sub(1);
        fence.until_ms.store(expired, Ordering::Release);
        assert!(!fence.is_up());
    }
}
