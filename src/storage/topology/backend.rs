//! [`Backend`]: where calls go, one node or a Cluster's primaries, and how
//! it is started; [`WeakBackend`], its twin for the background watchers and
//! `/metrics`, which must never keep the connections open.

use std::sync::{Arc, Mutex, Weak};

use fred::clients::{Client, Pool};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::super::error::ConnectError;
use super::super::settings::RedisSettings;
use super::cluster::Cluster;
use super::connect::{client_config, first_host};
use super::guard::NodeGuard;
use super::lanes::Lanes;
use super::sentinel_watch::SentinelWatch;
use crate::domain::memory_guard::GuardReading;

/// Where calls go.
#[derive(Clone)]
pub(in crate::storage) enum Backend {
    /// One node, or the primary behind Sentinel: its request and background
    /// lanes (`lanes.rs`), and nothing between a call and them.
    Single {
        lanes: Lanes,
        /// The node's state as the background checks last found it.
        guard: Arc<NodeGuard>,
    },
    /// Redis Cluster: each primary's lanes, chosen by the key's slot, so
    /// that one shard's failure stalls no other shard (see `cluster.rs`).
    Cluster(Arc<Cluster>),
}

impl Backend {
    /// Builds the pools for `redis` (each node's two lanes) and starts connecting in the
    /// background: it does not wait for Redis. Connection errors are kept
    /// in `problem`; background tasks run on `tasks` until `stop`. Behind
    /// Sentinel, also the watch that follows failovers.
    pub(in crate::storage) fn start(
        redis: &RedisSettings,
        problem: &Arc<Mutex<Option<String>>>,
        tasks: &TaskTracker,
        stop: &CancellationToken,
    ) -> Result<(Self, Option<SentinelWatch>), ConnectError> {
        let mut config = client_config(redis)?;
        // Keep retrying the first connection too, rather than giving up.
        config.fail_fast = false;
        if config.server.is_clustered() {
            let cluster = Cluster::start(&config, redis, problem.clone(), tasks, stop);
            return Ok((Self::Cluster(cluster), None));
        }
        let lanes =
            Lanes::start(&config, redis, problem, tasks, stop).map_err(ConnectError::Client)?;
        // Both lanes follow a failover: a background write left on the old
        // primary would be thrown away with it.
        let sentinel_watch = super::sentinel_watch::spawn(&config, lanes.pools(), tasks, stop)
            .map_err(ConnectError::Sentinel)?;
        let single = Self::Single {
            lanes,
            guard: Arc::new(NodeGuard::new(&first_host(&config))),
        };
        Ok((single, sentinel_watch))
    }

    /// One connected client per primary known now.
    pub(in crate::storage) fn primary_clients(&self) -> Vec<Client> {
        match self {
            Self::Single { lanes, .. } => vec![lanes.request.next_connected().clone()],
            Self::Cluster(cluster) => cluster
                .primaries()
                .0
                .iter()
                .map(|node| node.lanes.request.next_connected().clone())
                .collect(),
        }
    }

    /// The twin that holds a Cluster's pools only weakly.
    pub(in crate::storage) fn downgrade(&self) -> WeakBackend {
        match self {
            Self::Single { lanes, guard } => WeakBackend::Single {
                pool: lanes.request.clone(),
                guard: guard.clone(),
            },
            Self::Cluster(cluster) => WeakBackend::Cluster(Arc::downgrade(cluster)),
        }
    }

    /// Closes every connection.
    pub(in crate::storage) async fn quit(&self) {
        match self {
            Self::Single { lanes, .. } => lanes.quit().await,
            Self::Cluster(cluster) => cluster.quit().await,
        }
    }
}

/// What the background watchers see of a [`Backend`].
#[derive(Clone)]
pub(in crate::storage) enum WeakBackend {
    /// One node, or the primary behind Sentinel, through the store's
    /// request pool.
    Single { pool: Pool, guard: Arc<NodeGuard> },
    /// Every primary in the slot table as it is at each look.
    Cluster(Weak<Cluster>),
}

impl WeakBackend {
    pub(super) fn is_single(&self) -> bool {
        matches!(self, Self::Single { .. })
    }

    /// Each node: a connected client and its guard.
    pub(super) fn nodes(&self) -> Vec<(Client, Arc<NodeGuard>)> {
        match self {
            Self::Single { pool, guard } => vec![(pool.next_connected().clone(), guard.clone())],
            Self::Cluster(cluster) => cluster.upgrade().map_or_else(Vec::new, |cluster| {
                cluster
                    .primaries()
                    .0
                    .iter()
                    .map(|node| {
                        let client = node.lanes.request.next_connected().clone();
                        (client, node.guard.clone())
                    })
                    .collect()
            }),
        }
    }

    /// Every node's state, for `/metrics`.
    pub(in crate::storage) fn readings(&self) -> Vec<GuardReading> {
        match self {
            Self::Single { guard, .. } => vec![guard.reading()],
            Self::Cluster(cluster) => cluster.upgrade().map_or_else(Vec::new, |cluster| {
                let nodes = cluster.primaries().0;
                nodes.iter().map(|node| node.guard.reading()).collect()
            }),
        }
    }
}
