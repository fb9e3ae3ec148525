//! A node's two lanes to Redis: the request path's pool and in-flight
//! slots, and a background lane with a connection and slots of its own.
//!
//! Why (issue 41): the breakers' and experiments' background flushes went
//! out on the request path's connections and took its in-flight slots, so
//! at platform scale (20,000 merchants) a flush burst filled every slot:
//! RecordOutcome calls were refused `queue_full`, and so was the readiness
//! PING, which turned `sticky_routing.v1.StickyRouting` NOT_SERVING. Now a
//! background call goes on its node's background connection, bounded by
//! the background slots, and past them it is shed, never queued on a
//! caller's connection or slot. The readiness check takes no slot at all
//! ([`Lane::Readiness`]): it asks whether Redis answers the request path,
//! on the request path's connection, and a full queue alone never fails it.

use std::sync::{Arc, Mutex};

use fred::clients::Pool;
use fred::interfaces::ClientLike;
use fred::prelude::{Config, Error};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::super::settings::RedisSettings;
use super::connect::start_pool;

/// The background lane's connections per node: its calls are a few
/// scripts per tick, never a caller's, so one connection carries them.
pub(crate) const BACKGROUND_CONNECTIONS: usize = 1;

/// The fewest in-flight slots the background lane has, whatever
/// `REDIS_QUEUE_LIMIT` says: a tick has at most one call in flight per
/// shard for each of the breaker's counts, its transitions and the
/// experiment counts (48), so a queue limit set low for callers' sake
/// must not shed the background's own tick every time.
pub(crate) const BACKGROUND_MIN_SLOTS: usize = 64;

/// Which lane a call takes on its node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lane {
    /// A caller's call: the request pool, bounded by its in-flight slots.
    Request,
    /// Background work (the breakers' and experiments' flushes): the
    /// node's background connection, bounded by the background slots.
    Background,
    /// The readiness check: the request pool's connection, with no slot,
    /// so it says whether Redis answers the request path even while every
    /// slot is taken. It is one PING (and at times one probe) per node per
    /// check, so it needs no bound of its own.
    Readiness,
}

/// A node's pools and their in-flight slots: one permit per command that
/// may be in flight (queued, or sent and awaiting its reply),
/// `queue_limit` per connection. Past it a call is refused at once, with
/// nothing sent, instead of piling up behind a slow or stalled Redis until
/// its deadline.
#[derive(Clone)]
pub(crate) struct Lanes {
    /// The request path's pool (`REDIS_POOL_SIZE` connections).
    pub request: Pool,
    request_slots: Arc<Semaphore>,
    /// The background lane's pool ([`BACKGROUND_CONNECTIONS`]).
    pub background: Pool,
    background_slots: Arc<Semaphore>,
}

impl Lanes {
    /// Both pools for the node `config` names, connecting in the background
    /// as [`start_pool`] does (reconnection, TLS and credentials alike).
    pub(super) fn start(
        config: &Config,
        redis: &RedisSettings,
        problem: &Arc<Mutex<Option<String>>>,
        tasks: &TaskTracker,
        stop: &CancellationToken,
    ) -> Result<Self, Error> {
        let request = start_pool(
            config.clone(),
            redis,
            redis.pool_size,
            redis.queue_limit,
            problem,
            tasks,
            stop,
        )?;
        let background_limit = redis.queue_limit.max(BACKGROUND_MIN_SLOTS);
        let background = start_pool(
            config.clone(),
            redis,
            BACKGROUND_CONNECTIONS,
            background_limit,
            problem,
            tasks,
            stop,
        )?;
        Ok(Self {
            request,
            request_slots: slots(redis, redis.pool_size),
            background,
            background_slots: Arc::new(Semaphore::new(
                background_limit
                    .saturating_mul(BACKGROUND_CONNECTIONS)
                    .min(Semaphore::MAX_PERMITS),
            )),
        })
    }

    /// The pool a call of `lane` goes on.
    pub(crate) fn pool(&self, lane: Lane) -> &Pool {
        match lane {
            Lane::Request | Lane::Readiness => &self.request,
            Lane::Background => &self.background,
        }
    }

    /// The slots a call of `lane` takes one of; none for readiness.
    pub(crate) fn slots(&self, lane: Lane) -> Option<&Arc<Semaphore>> {
        match lane {
            Lane::Request => Some(&self.request_slots),
            Lane::Background => Some(&self.background_slots),
            Lane::Readiness => None,
        }
    }

    /// Both pools: the Sentinel watch moves them together.
    pub(super) fn pools(&self) -> Vec<Pool> {
        vec![self.request.clone(), self.background.clone()]
    }

    /// Whether every connection of both pools is up.
    pub(crate) fn all_connected(&self) -> bool {
        [&self.request, &self.background]
            .iter()
            .all(|pool| pool.clients().iter().all(ClientLike::is_connected))
    }

    /// Waits until both pools are connected.
    pub(crate) async fn wait_connected(&self) -> Result<(), Error> {
        let (request, background) = tokio::join!(
            self.request.wait_for_connect(),
            self.background.wait_for_connect()
        );
        request.and(background)
    }

    /// Closes both pools.
    pub(crate) async fn quit(&self) {
        let _ = tokio::join!(self.request.quit(), self.background.quit());
    }
}

/// `queue_limit` per connection of a pool of `connections`.
fn slots(redis: &RedisSettings, connections: usize) -> Arc<Semaphore> {
    let limit = redis.queue_limit.saturating_mul(connections);
    Arc::new(Semaphore::new(limit.min(Semaphore::MAX_PERMITS)))
}
