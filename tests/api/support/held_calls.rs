//! Harness for the in-flight limit's tests: a service whose Redis replies
//! a [`FaultProxy`] can hold, so that calls stay in progress until the test
//! lets them go, and fresh connections to it.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use sticky_routing::transport::pb::sticky_routing_client::StickyRoutingClient;
use tonic::transport::Channel;

use crate::support::*;
use test_support::fault_proxy::FaultProxy;

/// A service with `max_in_flight` = `limit` behind a proxy to its Redis;
/// Redis's replies wait up to 5 s, longer than any test holds them.
pub async fn behind_a_proxy(limit: usize) -> (TestApp, FaultProxy) {
    let redis = RedisServer::start();
    let proxy = FaultProxy::start(([127, 0, 0, 1], redis.port).into()).await;
    let app = spawn_app_against(TestRedis::Single(redis), proxy.url(), |s| {
        s.max_in_flight = limit;
        s.redis.command_timeout = Duration::from_secs(5);
    })
    .await;
    (app, proxy)
}

/// A client on a connection of its own: the limit is the server's, not
/// each connection's.
pub async fn new_connection(app: &TestApp) -> StickyRoutingClient<Channel> {
    let channel = Channel::from_shared(format!("http://{}", app.addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    StickyRoutingClient::new(channel)
}

/// Waits until Redis has run `calls` more of `command` (lower case, as
/// `INFO commandstats` names it) than in `before`: the calls that sent them
/// are in progress, holding their slots.
pub async fn wait_for_commands(
    app: &TestApp,
    before: &BTreeMap<String, u64>,
    command: &str,
    calls: u64,
) {
    let give_up = Instant::now() + Duration::from_secs(10);
    loop {
        let seen = app.commands_since(before).await;
        if seen.contains(&(command.to_owned(), calls)) {
            return;
        }
        assert!(
            Instant::now() < give_up,
            "the held calls never reached Redis as {calls} {command}: {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
