//! The request path is isolated from background work (issue 41), on real
//! Redis: a background burst takes none of the request path's in-flight
//! slots or connections and is shed (counted) past its own bound; the
//! readiness check takes no slot, so a full request queue alone never
//! fails it; and the background lane follows a Sentinel failover.
//!
//! Here, inside the crate, because [`Exec`] is the storage layer's own:
//! the breakers' and experiments' flushes reach it through the store.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fred::clients::{Client, WithOptions};
use fred::interfaces::ClientLike;
use fred::prelude::Error;
use fred::types::InfoKind;
use fred::util::redis_keyslot;
use rstest::rstest;
use tokio::task::JoinSet;
use tokio_util::task::TaskTracker;

use test_support::redis_cluster::RedisCluster;
use test_support::redis_sentinel::RedisSentinel;
use test_support::redis_server::{RedisServer, SERVICE_PASSWORD, SERVICE_USER};

use super::super::error::{NotApplied, StorageError};
use super::super::topology::Backend;
use super::super::{RedisSettings, RedisStore, Secret};
use crate::telemetry::{Metrics, RedisCommand};

/// Commands in flight per connection: small, so a test can fill a lane.
const QUEUE_LIMIT: usize = 4;
/// The background lane's slots: its floor, above QUEUE_LIMIT.
const BACKGROUND_SLOTS: usize = crate::storage::topology::BACKGROUND_MIN_SLOTS;
/// Request-path connections per node.
const POOL_SIZE: usize = 2;
/// A breaker key (the service's user may write it).
const KEY: &str = "sticky_brk_isolation";

async fn connect(url: String) -> (RedisStore, Arc<Metrics>) {
    let settings = RedisSettings {
        url: url.into(),
        username: Some(SERVICE_USER.into()),
        password: Some(Secret::new(SERVICE_PASSWORD)),
        tls: None,
        pool_size: POOL_SIZE,
        command_timeout: Duration::from_secs(5),
        queue_limit: QUEUE_LIMIT,
    };
    let metrics = Arc::new(Metrics::new().unwrap());
    let store = RedisStore::connect(&settings, &TaskTracker::new(), metrics.clone()).unwrap();
    assert!(store.wait_connected(Duration::from_secs(20)).await);
    (store, metrics)
}

/// The id Redis gives the connection the call went on.
async fn client_id(client: WithOptions<Client>) -> Result<i64, Error> {
    client.custom(fred::cmd!("CLIENT"), vec!["ID"]).await
}

/// The port of the server the call reached (`INFO server`).
async fn server_port(client: WithOptions<Client>) -> Result<u16, Error> {
    let info: String = client.info(Some(InfoKind::Server)).await?;
    Ok(info
        .lines()
        .find_map(|line| line.strip_prefix("tcp_port:"))
        .and_then(|port| port.trim().parse().ok())
        .unwrap_or(0))
}

fn is_queue_full(result: &Result<i64, StorageError>) -> bool {
    matches!(
        result,
        Err(StorageError::Unavailable {
            why: NotApplied::QueueFull,
            ..
        })
    )
}

/// Lets spawned calls start (take their slots, reach the socket).
async fn settle() {
    tokio::time::sleep(Duration::from_millis(300)).await;
}

/// With Redis frozen, the background lane is filled and one more background
/// call is shed at once (counted, not a Redis error); the request path still
/// has every one of its slots, and once they are all taken too, the
/// readiness check is still sent: when Redis answers again, every held call
/// and the check pass.
#[tokio::test]
async fn a_background_burst_takes_no_request_slot_and_readiness_needs_none() {
    let redis = RedisServer::start();
    let (store, metrics) = connect(redis.url()).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    redis.signal("-STOP");

    let mut background = JoinSet::new();
    for _ in 0..BACKGROUND_SLOTS {
        let store = store.clone();
        background.spawn(async move {
            let exec = store.exec();
            exec.on_key_background(RedisCommand::BreakerFlush, KEY, deadline, client_id)
                .await
        });
    }
    settle().await;

    let mut requests = JoinSet::new();
    for _ in 0..QUEUE_LIMIT * POOL_SIZE {
        let store = store.clone();
        requests.spawn(async move {
            let exec = store.exec();
            exec.on_key(RedisCommand::ReadCombos, KEY, deadline, false, client_id)
                .await
        });
    }
    settle().await;
    // None of the request path's calls was refused for the background's
    // sake...
    let refused: Vec<_> = std::iter::from_fn(|| requests.try_join_next())
        .map(Result::unwrap)
        .collect();
    assert!(
        refused.is_empty(),
        "request-path calls ended while Redis was frozen: {refused:?}"
    );
    // ...while one more background call is shed at once...
    let shed = store
        .exec()
        .on_key_background(RedisCommand::BreakerFlush, KEY, deadline, client_id)
        .await;
    assert!(is_queue_full(&shed), "{shed:?}");
    // ...and the request path's own bound still holds.
    let over = store
        .exec()
        .on_key(RedisCommand::ReadCombos, KEY, deadline, false, client_id)
        .await;
    assert!(is_queue_full(&over), "{over:?}");
    let ping = tokio::spawn({
        let store = store.clone();
        async move { store.ping(deadline).await }
    });
    settle().await;
    assert!(
        !ping.is_finished(),
        "the readiness check ended while Redis was frozen: {:?}",
        ping.await
    );

    redis.signal("-CONT");
    assert!(
        ping.await.unwrap().is_ok(),
        "readiness failed once Redis answered"
    );
    for result in requests.join_all().await {
        assert!(result.is_ok(), "{result:?}");
    }
    for result in background.join_all().await {
        assert!(result.is_ok(), "{result:?}");
    }
    let text = metrics.render();
    assert!(
        text.contains("sticky_routing_background_shed_total{command=\"breaker_flush\"} 1"),
        "{text}"
    );
    assert_eq!(
        text.matches("sticky_routing_redis_errors_total{kind=\"queue_full\"} 1")
            .count(),
        1,
        "only the request path's refusal is a Redis error: {text}"
    );
    store.quit().await;
}

enum Topology {
    Single(RedisServer),
    Cluster(RedisCluster),
}

/// Background calls go on a connection of their own on every node: Redis
/// names (CLIENT ID) a different connection for them than for any call of
/// the request path on the same key, and the same one for all of them.
#[rstest]
#[case::single(false)]
#[case::cluster(true)]
#[tokio::test]
async fn background_calls_go_on_a_connection_of_their_own(#[case] cluster: bool) {
    let redis = if cluster {
        Topology::Cluster(RedisCluster::start())
    } else {
        Topology::Single(RedisServer::start())
    };
    let url = match &redis {
        Topology::Single(server) => server.url(),
        Topology::Cluster(cluster) => cluster.url(),
    };
    let (store, _) = connect(url).await;
    let exec = store.exec();
    let deadline = Instant::now() + Duration::from_secs(10);
    // One key per primary: on Cluster, every primary's lanes are checked.
    let keys: Vec<String> = match &exec.backend {
        Backend::Single { .. } => vec![KEY.to_owned()],
        Backend::Cluster(cluster) => {
            let mut by_node = BTreeMap::new();
            for n in 0..1_000 {
                let key = format!("{KEY}_{n}");
                let Ok(node) = cluster.route(redis_keyslot(key.as_bytes())) else {
                    continue;
                };
                by_node.entry(node.server.to_string()).or_insert(key);
            }
            assert_eq!(by_node.len(), 3, "{by_node:?}");
            by_node.into_values().collect()
        }
    };
    for key in &keys {
        let (mut request, mut background) = (BTreeSet::new(), BTreeSet::new());
        for _ in 0..3 * POOL_SIZE {
            let id = exec.on_key(RedisCommand::ReadCombos, key, deadline, false, client_id);
            request.insert(id.await.unwrap());
        }
        for _ in 0..3 * POOL_SIZE {
            let id = exec.on_key_background(RedisCommand::BreakerFlush, key, deadline, client_id);
            background.insert(id.await.unwrap());
        }
        assert_eq!(request.len(), POOL_SIZE, "{key}: {request:?}");
        assert_eq!(background.len(), 1, "{key}: {background:?}");
        assert!(
            request.is_disjoint(&background),
            "{key}: background calls went on a request-path connection: request \
             {request:?}, background {background:?}"
        );
    }
    store.quit().await;
}

/// After a Sentinel failover, background calls reach the new primary, as
/// the request path's do, and none is acknowledged by the old primary once
/// the request path has left it: the watch moves both lanes, and the fence
/// holds background writes until both are there. (Without the watch, the
/// background lane would stay on the old primary until Sentinel demotes it
/// and kills its clients, and what it wrote there meanwhile would be lost.)
#[tokio::test]
async fn the_background_lane_follows_a_sentinel_failover() {
    let sentinel = RedisSentinel::start();
    let old = sentinel.primary.port;
    let (store, _) = connect(sentinel.url()).await;
    let exec = store.exec();
    let deadline = || Instant::now() + Duration::from_secs(2);
    let reached = exec
        .on_key_background(RedisCommand::BreakerFlush, KEY, deadline(), server_port)
        .await;
    assert_eq!(reached.unwrap(), old);

    sentinel.failover();
    let given_up = Instant::now() + Duration::from_secs(30);
    let mut request_moved = false;
    let mut seen = Vec::new();
    while Instant::now() < given_up {
        let background = exec
            .on_key_background(RedisCommand::BreakerFlush, KEY, deadline(), server_port)
            .await
            .ok();
        let request = exec
            .on_key(
                RedisCommand::ReadCombos,
                KEY,
                deadline(),
                false,
                server_port,
            )
            .await
            .ok();
        seen.push((background, request));
        assert!(
            !(request_moved && background == Some(old)),
            "a background call reached the old primary {old} after the request path had left \
             it; the last (background, request) ports: {:?}",
            last(&seen)
        );
        request_moved |= request.is_some_and(|port| port != old);
        if request_moved && background.is_some_and(|port| port != old) {
            assert_eq!(background, request, "{:?}", last(&seen));
            store.quit().await;
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!(
        "the lanes never both reached a new primary: {:?}",
        last(&seen)
    );
}

/// The last few of `seen`.
fn last<T>(seen: &[T]) -> &[T] {
    &seen[seen.len().saturating_sub(8)..]
}
