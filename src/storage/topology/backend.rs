//! [`Backend`]: where calls go, one node or a Cluster's primaries, and how
//! it is started; [`WeakBackend`], its twin for the background watchers and
//! `/metrics`, which must never keep the connections open.

use std::sync::{Arc, Mutex, Weak};

use fred::clients::{Client, Pool};
use fred::interfaces::ClientLike;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::super::error::ConnectError;
use super::super::settings::RedisSettings;
use super::cluster::Cluster;
use super::connect::{client_config, first_host, in_flight_limit, start_pool};
use super::guard::NodeGuard;
use super::sentinel_watch::SentinelWatch;
use crate::domain::memory_guard::GuardReading;

/// Where calls go.
#[derive(Clone)]
pub(in crate::storage) enum Backend {
    /// One node, or the primary behind Sentinel: one fred pool, and nothing
    /// between a call and it.
    Single {
        pool: Pool,
        /// One permit per command that may be in flight (queued, or sent and
        /// awaiting its reply): `queue_limit` per connection. Past it a call
        /// is refused at once, with nothing sent, instead of piling up behind
        /// a slow or stalled Redis until its deadline.
        in_flight: Arc<Semaphore>,
        /// The node's state as the background checks last found it.
        guard: Arc<NodeGuard>,
    },
    /// Redis Cluster: a pool per primary, chosen by the key's slot, so that
    /// one shard's failure stalls no other shard (see `cluster.rs`).
    Cluster(Arc<Cluster>),
}

impl Backend {
    /// Builds the pools for `redis` and starts connecting in the
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
        let pool = start_pool(config.clone(), redis, problem, tasks, stop)
            .map_err(ConnectError::Client)?;
        let sentinel_watch = super::sentinel_watch::spawn(&config, pool.clone(), tasks, stop)
            .map_err(ConnectError::Sentinel)?;
        let single = Self::Single {
            pool,
            in_flight: in_flight_limit(redis),
            guard: Arc::new(NodeGuard::new(&first_host(&config))),
        };
        Ok((single, sentinel_watch))
    }

    /// One connected client per primary known now.
    pub(in crate::storage) fn primary_clients(&self) -> Vec<Client> {
        match self {
            Self::Single { pool, .. } => vec![pool.next_connected().clone()],
            Self::Cluster(cluster) => cluster
                .primaries()
                .0
                .iter()
                .map(|node| node.pool.next_connected().clone())
                .collect(),
        }
    }

    /// The twin that holds a Cluster's pools only weakly.
    pub(in crate::storage) fn downgrade(&self) -> WeakBackend {
        match self {
            Self::Single { pool, guard, .. } => WeakBackend::Single {
                pool: pool.clone(),
                guard: guard.clone(),
            },
            Self::Cluster(cluster) => WeakBackend::Cluster(Arc::downgrade(cluster)),
        }
    }

    /// Closes every connection.
    pub(in crate::storage) async fn quit(&self) {
        match self {
            Self::Single { pool, .. } => {
                let _ = pool.quit().await;
            }
            Self::Cluster(cluster) => cluster.quit().await,
        }
    }
}

/// What the background watchers see of a [`Backend`].
#[derive(Clone)]
pub(in crate::storage) enum WeakBackend {
    /// One node, or the primary behind Sentinel, through the store's pool.
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
                    .map(|node| (node.pool.next_connected().clone(), node.guard.clone()))
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
