//! Redis Cluster with one client pool per primary, so that a failed or hung
//! shard stalls only the calls whose keys live on it.
//!
//! fred's own cluster client drives every node's connection from one router
//! task. When a primary dies, that task reconnects *the whole client*: it
//! asks `CLUSTER SLOTS`, which still names the dead primary until its
//! replica is promoted, fails to connect to it, marks the client
//! disconnected (so every `fail_fast` call, on any shard, is refused with
//! "Connection closed unexpectedly"), and sleeps out its backoff without
//! writing a command to any other socket (calls already queued wait out
//! their timeout). So until the promotion every shard would be unavailable,
//! not only the failed one. With a pool per primary, calls for keys on the
//! healthy shards go on (docs/operations.md, "Failover under load").
//!
//! Here the service keeps the slot table itself. Each primary gets its own
//! centralized fred pools (its request and background lanes, `lanes.rs`),
//! with their own router tasks, reconnection and in-flight limits; a call
//! is routed by its key's slot to the primary that owns it. A background task refreshes the table from
//! `CLUSTER SLOTS`: every [`SLOW_REFRESH`], every [`FAST_REFRESH`] while a
//! primary is unreachable (to see its replica promoted at once), and soon
//! after a call meets MOVED or a broken connection.
//!
//! Redirections: MOVED means the command did not run, so the call is sent
//! once more to the named primary when the table knows it (a resharding
//! between known primaries); otherwise it is refused (UNAVAILABLE, nothing
//! applied) and the table refreshed. ASK (a key already moved while its slot
//! migrates) is refused the same way: following it needs ASKING on the same
//! connection just before the command, which a shared pool cannot promise.
//! fred's cluster client did no better: with one write attempt per command
//! it answered both MOVED and ASK with an error that reads as a lost
//! connection (so UNKNOWN, though nothing ran), and with more attempts it
//! sends ASKING to the new owner but the command again to the old one until
//! it runs out of redirections (tests/api/failover.rs, the resharding test).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use fred::clients::Client;
use fred::interfaces::ClientLike;
use fred::prelude::{Config, Error, ErrorKind, Options, Value};
use fred::types::cluster::ClusterRouting;
use fred::types::config::{Server, ServerConfig};
use fred::types::{ClusterHash, CustomCommand};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::super::settings::RedisSettings;
use super::connect::{discovery_client, spawn_until_stopped};
use super::guard::NodeGuard;
use super::lanes::Lanes;

/// Redis Cluster's hash slots.
const SLOTS: usize = 16_384;
/// How often the slot table is refreshed when all is well: a resharding or
/// a failover that no call noticed is seen within this.
const SLOW_REFRESH: Duration = Duration::from_secs(2);
/// How often while a primary in the table does not answer, so a promoted
/// replica takes over its slots within this of its promotion.
const FAST_REFRESH: Duration = Duration::from_millis(100);
/// The least time between two refreshes, however many calls ask for one.
const MIN_REFRESH_GAP: Duration = Duration::from_millis(50);

/// One primary: its lanes (`lanes.rs`), each with its own bound on
/// commands in flight, so that a hung shard's calls cannot take the places
/// of the others'.
pub(crate) struct Node {
    pub server: Server,
    pub lanes: Lanes,
    /// Whether this shard refuses new customers (the memory guard).
    pub guard: Arc<NodeGuard>,
}

/// Which primary serves each slot.
struct Table {
    /// Slot → index into `nodes`; [`NO_OWNER`] for a slot no primary serves.
    owners: Box<[u16]>,
    nodes: Vec<Arc<Node>>,
    /// The ranges as `CLUSTER SLOTS` gave them, to tell whether a refresh
    /// changed anything.
    ranges: Vec<(u16, u16, Server)>,
}

const NO_OWNER: u16 = u16::MAX;

impl Table {
    fn empty() -> Self {
        Self {
            owners: vec![NO_OWNER; SLOTS].into_boxed_slice(),
            nodes: Vec::new(),
            ranges: Vec::new(),
        }
    }
}

/// Why a call could not be routed to a primary.
pub(crate) enum NoRoute {
    /// The slot table is not known yet, or no primary serves this slot.
    NoOwner,
}

/// The slot table and the pools, shared by every clone of the store.
pub(crate) struct Cluster {
    table: RwLock<Arc<Table>>,
    /// The URL's nodes: asked for the slot table when no known primary answers.
    seeds: Vec<Server>,
    /// The client configuration, less the server.
    template: Config,
    redis: RedisSettings,
    refresh: Notify,
    problem: Arc<Mutex<Option<String>>>,
    tasks: TaskTracker,
    stop: CancellationToken,
}

impl Cluster {
    /// Starts discovering the cluster from `config`'s nodes in the
    /// background; calls are refused (UNAVAILABLE) until a table is known.
    pub(crate) fn start(
        config: &Config,
        redis: &RedisSettings,
        problem: Arc<Mutex<Option<String>>>,
        tasks: &TaskTracker,
        stop: &CancellationToken,
    ) -> Arc<Self> {
        let cluster = Arc::new(Self {
            table: RwLock::new(Arc::new(Table::empty())),
            seeds: config.server.hosts(),
            template: config.clone(),
            redis: redis.clone(),
            refresh: Notify::new(),
            problem,
            tasks: tasks.clone(),
            stop: stop.clone(),
        });
        spawn_until_stopped(tasks, stop, cluster.clone().follow_topology());
        cluster
    }

    fn table(&self) -> Arc<Table> {
        self.table
            .read()
            .map_or_else(|_| Arc::new(Table::empty()), |table| table.clone())
    }

    /// The primary that serves `slot`.
    pub(crate) fn route(&self, slot: u16) -> Result<Arc<Node>, NoRoute> {
        let table = self.table.read().map_err(|_| NoRoute::NoOwner)?;
        let index = table
            .owners
            .get(usize::from(slot))
            .copied()
            .unwrap_or(NO_OWNER);
        table
            .nodes
            .get(usize::from(index))
            .cloned()
            .ok_or(NoRoute::NoOwner)
    }

    /// The known primary at `host:port`, for a MOVED reply. A reply without
    /// a host (Redis's `unknown-endpoint`) names none: a port alone could be
    /// any node's.
    pub(crate) fn node_at(&self, address: &str) -> Option<Arc<Node>> {
        let (host, port) = address.rsplit_once(':')?;
        let port: u16 = port.parse().ok()?;
        if host.is_empty() {
            return None;
        }
        self.table()
            .nodes
            .iter()
            .find(|node| node.server.port == port && *node.server.host == *host)
            .cloned()
    }

    /// Asks for a refresh of the slot table soon (a call met MOVED, or a
    /// primary's connection failed).
    pub(crate) fn refresh_soon(&self) {
        self.refresh.notify_one();
    }

    /// Every primary in the table, and whether every slot has one.
    pub(crate) fn primaries(&self) -> (Vec<Arc<Node>>, bool) {
        let table = self.table();
        let covered = !table.nodes.is_empty() && !table.owners.contains(&NO_OWNER);
        (table.nodes.clone(), covered)
    }

    /// Waits until a table is known and both lanes of every primary are
    /// connected.
    pub(crate) async fn wait_connected(&self) {
        loop {
            let (nodes, covered) = self.primaries();
            if covered && nodes.iter().all(|node| node.lanes.all_connected()) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Closes every primary's pools.
    pub(crate) async fn quit(&self) {
        for node in &self.table().nodes {
            node.lanes.quit().await;
        }
    }

    /// Refreshes the slot table until the store stops.
    async fn follow_topology(self: Arc<Self>) {
        let start = Instant::now();
        let mut last = start.checked_sub(SLOW_REFRESH).unwrap_or(start);
        loop {
            let wait = if self.healthy() {
                SLOW_REFRESH
            } else {
                FAST_REFRESH
            };
            tokio::select! {
                () = tokio::time::sleep_until((last + wait).into()) => {}
                () = self.refresh.notified() => {}
            }
            tokio::time::sleep_until((last + MIN_REFRESH_GAP).into()).await;
            last = Instant::now();
            match self.discover().await {
                Ok(routing) => self.apply(&routing),
                Err(error) => self.note_problem(&error),
            }
        }
    }

    /// Whether a table is known and every primary in it is connected.
    fn healthy(&self) -> bool {
        let (nodes, covered) = self.primaries();
        covered
            && nodes.iter().all(|node| {
                node.lanes
                    .request
                    .clients()
                    .iter()
                    .any(ClientLike::is_connected)
            })
    }

    /// `CLUSTER SLOTS` from whichever connected primary answers first (all
    /// are asked at once, so a hung one costs nothing), else from the first
    /// of the URL's nodes that answers.
    async fn discover(&self) -> Result<ClusterRouting, Error> {
        let mut last_error = Error::new(ErrorKind::Cluster, "no cluster node answered");
        let timeout = self.redis.command_timeout.max(Duration::from_secs(1));
        let mut asks = tokio::task::JoinSet::new();
        for node in &self.table().nodes {
            let client = node.lanes.request.next_connected();
            if client.is_connected() {
                let (client, server) = (client.clone(), node.server.clone());
                asks.spawn(async move { cluster_slots(&client, &server, timeout).await });
            }
        }
        while let Some(answer) = asks.join_next().await {
            match answer {
                Ok(Ok(routing)) => return Ok(routing),
                Ok(Err(error)) => last_error = error,
                Err(_) => {}
            }
        }
        for seed in &self.seeds {
            match self.ask_seed(seed).await {
                Ok(routing) => return Ok(routing),
                Err(error) => last_error = error,
            }
        }
        Err(last_error)
    }

    /// Asks one of the URL's nodes on a short-lived connection of its own.
    async fn ask_seed(&self, seed: &Server) -> Result<ClusterRouting, Error> {
        let client = discovery_client(self.node_config(seed))?;
        let connected = tokio::time::timeout(Duration::from_secs(3), client.init()).await;
        let result = match connected {
            Ok(Ok(_)) => cluster_slots(&client, seed, Duration::from_secs(2)).await,
            Ok(Err(error)) => Err(error),
            Err(_) => Err(Error::new(
                ErrorKind::Timeout,
                "no answer from a cluster seed",
            )),
        };
        let _ = client.quit().await;
        result
    }

    /// The client configuration for one node.
    fn node_config(&self, server: &Server) -> Config {
        let mut config = self.template.clone();
        config.server = ServerConfig::Centralized {
            server: server.clone(),
        };
        config
    }

    /// Installs `routing` as the table, reusing the pools of primaries it
    /// already had, starting pools for new ones and closing those of nodes
    /// that no longer serve slots.
    fn apply(&self, routing: &ClusterRouting) {
        let ranges: Vec<(u16, u16, Server)> = routing
            .slots()
            .iter()
            .map(|range| (range.start, range.end, range.primary.clone()))
            .collect();
        let old = self.table();
        if old.ranges == ranges {
            return;
        }
        let mut nodes: Vec<Arc<Node>> = Vec::new();
        let mut index_of: HashMap<Server, u16> = HashMap::new();
        let mut owners = vec![NO_OWNER; SLOTS].into_boxed_slice();
        for (start, end, server) in &ranges {
            let index = match index_of.get(server) {
                Some(index) => *index,
                None => {
                    let node = match old.nodes.iter().find(|n| n.server == *server) {
                        Some(node) => node.clone(),
                        None => match self.start_node(server) {
                            Ok(node) => node,
                            Err(error) => {
                                self.note_problem(&error);
                                continue;
                            }
                        },
                    };
                    let index = u16::try_from(nodes.len()).unwrap_or(NO_OWNER);
                    nodes.push(node);
                    index_of.insert(server.clone(), index);
                    index
                }
            };
            let (start, end) = (usize::from(*start), usize::from(*end).min(SLOTS - 1));
            if let Some(slots) = owners.get_mut(start..=end) {
                slots.fill(index);
            }
        }
        let gone: Vec<Arc<Node>> = old
            .nodes
            .iter()
            .filter(|n| !index_of.contains_key(&n.server))
            .cloned()
            .collect();
        tracing::info!(
            primaries = ?nodes.iter().map(|n| n.server.to_string()).collect::<Vec<_>>(),
            "redis cluster slot table updated"
        );
        let table = Arc::new(Table {
            owners,
            nodes,
            ranges,
        });
        if let Ok(mut current) = self.table.write() {
            *current = table;
        }
        for node in gone {
            // Calls already on it finish first: QUIT queues behind them.
            self.tasks.spawn(async move {
                node.lanes.quit().await;
            });
        }
    }

    /// One primary's lanes, connecting in the background.
    fn start_node(&self, server: &Server) -> Result<Arc<Node>, Error> {
        let config = self.node_config(server);
        let lanes = Lanes::start(&config, &self.redis, &self.problem, &self.tasks, &self.stop)?;
        Ok(Arc::new(Node {
            server: server.clone(),
            lanes,
            guard: Arc::new(NodeGuard::new(&server.to_string())),
        }))
    }

    fn note_problem(&self, error: &Error) {
        let text = error.to_string();
        if let Ok(mut last) = self.problem.lock()
            && last.as_deref() != Some(text.as_str())
        {
            tracing::warn!(error = %text, "redis cluster slot table not refreshed");
            *last = Some(text);
        }
    }
}

/// `CLUSTER SLOTS` from `client`, connected to `server` (whose host stands
/// for the nodes the reply names without one), within `timeout`.
async fn cluster_slots(
    client: &Client,
    server: &Server,
    timeout: Duration,
) -> Result<ClusterRouting, Error> {
    let options = Options {
        max_attempts: Some(1),
        timeout: Some(timeout),
        fail_fast: true,
        ..Options::default()
    };
    let command = CustomCommand::new_static("CLUSTER", ClusterHash::FirstKey, false);
    let reply: Value = client
        .with_options(&options)
        .custom(command, vec![Value::from("SLOTS")])
        .await?;
    let routing = ClusterRouting::from_cluster_slots(reply, server.host.clone())?;
    if routing.slots().is_empty() {
        return Err(Error::new(
            ErrorKind::Cluster,
            "CLUSTER SLOTS named no slot",
        ));
    }
    Ok(routing)
}
