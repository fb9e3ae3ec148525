//! Connections and streams the server must bound. A connection past its
//! age gets GOAWAY, idle or busy, the two-step way, so that clients
//! reconnect and spread over the pods an autoscaler added since they
//! connected; no call in flight is lost to it, and only a stream still open
//! a grace later is cut. A stream whose request never finishes arriving is
//! ended. The frames are read off the wire ([`crate::support::frames`]).

use std::time::{Duration, Instant};

use sticky_routing::transport::pb;
use sticky_routing::transport::pb::sticky_routing_client::StickyRoutingClient;

use crate::support::frames::{GOAWAY, MAX_STREAM_ID, PING, Wire, unary};
use crate::support::*;

const GET_PIN: &str = "/sticky_routing.v1.StickyRouting/GetPin";
const RECORD_OUTCOME: &str = "/sticky_routing.v1.StickyRouting/RecordOutcome";

/// What a loaded test machine's timer may be late by.
const SCHEDULING: Duration = Duration::from_millis(500);

/// Waits until `wire` has seen `count` GOAWAY frames, for at most `within`.
async fn until_goaways(
    wire: &Wire,
    count: usize,
    within: Duration,
) -> Vec<crate::support::frames::Frame> {
    let started = Instant::now();
    loop {
        let seen = wire.goaways();
        if seen.len() >= count || started.elapsed() > within {
            return seen;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits until connection `n` of `wire` has closed; when it did.
async fn until_closed(wire: &Wire, n: usize, within: Duration) -> Option<Instant> {
    let started = Instant::now();
    loop {
        let closed =
            wire.snapshot(|log| log.closed.iter().find(|(c, _)| *c == n).map(|(_, at)| *at));
        if closed.is_some() || started.elapsed() > within {
            return closed;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Connection `n` got the graceful two-step GOAWAY: a first one naming the
/// largest stream id with NO_ERROR, a PING, then within 1 s (the client
/// answers the PING at once) the final one naming `last_stream`. Returns
/// when the first one arrived.
fn assert_two_step_goaway(wire: &Wire, n: usize, last_stream: u32) -> Instant {
    wire.snapshot(|log| {
        let frames: Vec<_> = log.frames.iter().filter(|f| f.connection == n).collect();
        let goaways: Vec<_> = frames.iter().filter(|f| f.kind == GOAWAY).collect();
        assert_eq!(goaways.len(), 2, "connection {n}: {frames:?}");
        let (first, last) = (goaways[0], goaways[1]);
        assert_eq!(first.goaway, Some((MAX_STREAM_ID, 0)), "{first:?}");
        assert_eq!(last.goaway, Some((last_stream, 0)), "{last:?}");
        let ping_between = frames
            .iter()
            .any(|f| f.kind == PING && f.flags & 1 == 0 && f.at >= first.at && f.at <= last.at);
        assert!(ping_between, "no PING between the GOAWAYs: {frames:?}");
        assert!(
            last.at - first.at < Duration::from_secs(1),
            "the final GOAWAY came {:?} after the first",
            last.at - first.at
        );
        first.at
    })
}

#[tokio::test]
async fn an_idle_connection_gets_goaway_at_its_age_and_closes_at_once() {
    let age = Duration::from_secs(1);
    let grace = Duration::from_secs(5);
    let app = spawn_app_with(|s| {
        s.max_connection_age = age;
        s.max_connection_age_grace = grace;
    })
    .await;
    let wire = Wire::default();
    wire.idle_peer(app.addr).await;
    let opened = wire.snapshot(|log| log.opened[0]);
    until_goaways(&wire, 2, age * 2 + SCHEDULING).await;
    let closed = until_closed(&wire, 0, grace)
        .await
        .expect("the connection closed");
    // No stream opened: the final GOAWAY names stream 0.
    let goaway = assert_two_step_goaway(&wire, 0, 0);
    let at = goaway - opened;
    assert!(
        at >= age * 9 / 10 && at <= age * 11 / 10 + SCHEDULING,
        "GOAWAY after {at:?}"
    );
    // Idle: it closes at the final GOAWAY, not at the grace.
    assert!(
        closed - goaway < Duration::from_secs(1),
        "closed {:?} after GOAWAY",
        closed - goaway
    );
}

/// Whether tonic's client gave up `status`'s call before it left the client:
/// hyper's `Canceled` is a request still queued when its connection closed.
/// tonic (0.14.9) does not retry those on the next connection as gRPC's
/// transparent retry does (grpc-go, grpc-core); the caller here does, and
/// the count in Redis shows that none of them had been applied.
fn never_sent(status: &tonic::Status) -> bool {
    let mut source = std::error::Error::source(status);
    while let Some(error) = source {
        if error
            .downcast_ref::<hyper::Error>()
            .is_some_and(hyper::Error::is_canceled)
        {
            return true;
        }
        source = error.source();
    }
    false
}

/// Steady calls over one channel across several ages: every connection is
/// told to go away at its age although it is never idle, the channel moves
/// to a new one, not one call fails, and Redis counted exactly the calls
/// answered OK.
#[tokio::test]
async fn steady_calls_across_several_ages_lose_nothing() {
    let age = Duration::from_secs(1);
    let app = spawn_app_with(|s| s.max_connection_age = age).await;
    let wire = Wire::default();
    let api = StickyRoutingClient::new(wire.channel(app.addr).await);
    let until = Instant::now() + Duration::from_millis(3_500);
    let callers: Vec<_> = (0..16)
        .map(|_| {
            let mut api = api.clone();
            tokio::spawn(async move {
                let (mut ok, mut failed) = (0_i64, Vec::new());
                while Instant::now() < until {
                    let call = outcome("m1", "c1", "GIGADAT", pb::Outcome::Success);
                    match api.record_outcome(call).await {
                        Ok(answer) if answer.get_ref().result == APPLIED => ok += 1,
                        Err(status) if never_sent(&status) => {}
                        other => failed.push(format!("{other:?}")),
                    }
                }
                (ok, failed)
            })
        })
        .collect();
    let (mut ok, mut failed) = (0, Vec::new());
    for caller in callers {
        let (n, errors) = caller.await.unwrap();
        ok += n;
        failed.extend(errors);
    }
    assert!(
        failed.is_empty(),
        "{} failed calls: {:?}",
        failed.len(),
        &failed[..failed.len().min(5)]
    );
    let connections = wire.connections();
    assert!(
        connections >= 3,
        "{connections} connections in 3.5 s at an age of 1 s"
    );
    // Every connection but the newest was retired at its age, busy as it was.
    for n in 0..connections - 1 {
        let opened = wire.snapshot(|log| log.opened[n]);
        let first = wire.goaways().into_iter().find(|f| f.connection == n);
        let first = first.unwrap_or_else(|| panic!("connection {n} got no GOAWAY"));
        assert_eq!(first.goaway.map(|g| g.0), Some(MAX_STREAM_ID));
        let at = first.at - opened;
        assert!(
            at >= age * 9 / 10 && at <= age * 11 / 10 + SCHEDULING,
            "connection {n}: GOAWAY after {at:?}"
        );
    }
    let count = stored_count(&app, "c1").await;
    assert_eq!(count, ok, "Redis counted {count}, the callers saw {ok} OK");
    assert!(ok > 100, "only {ok} calls in 3.5 s");
}

/// Opens a raw connection through `wire` (one GetPin on stream 1), freezes
/// the app's Redis and starts a RecordOutcome on stream 3, which stays in
/// flight until Redis thaws: its grpc-status (or the stream's error), and
/// when it came.
async fn record_with_redis_frozen(
    app: &TestApp,
    wire: &Wire,
) -> tokio::task::JoinHandle<(Result<String, h2::Error>, Instant)> {
    let mut client = wire.h2(app.addr).await;
    let pin = unary(&mut client, GET_PIN, pin_request("c1", &[])).await;
    assert_eq!(pin.unwrap(), "0");
    app.redis.signal("-STOP");
    tokio::spawn(async move {
        let request = outcome("m1", "c1", "GIGADAT", pb::Outcome::Success);
        let answer = unary(&mut client, RECORD_OUTCOME, request).await;
        (answer, Instant::now())
    })
}

/// A call that is in flight when its connection reaches its age (Redis
/// frozen under it) gets its answer after the GOAWAY, and the connection
/// closes only then.
#[tokio::test]
async fn a_call_in_flight_at_the_age_completes() {
    let age = Duration::from_secs(1);
    let app = spawn_app_with(|s| {
        s.max_connection_age = age;
        s.redis.command_timeout = Duration::from_secs(5);
    })
    .await;
    let wire = Wire::default();
    let call = record_with_redis_frozen(&app, &wire).await;
    let first = until_goaways(&wire, 1, age * 2 + SCHEDULING).await;
    app.redis.signal("-CONT");
    assert!(!first.is_empty(), "no GOAWAY while the call was in flight");
    let (answer, answered) = call.await.unwrap();
    assert_eq!(answer.expect("the call completes"), "0", "its grpc-status");
    assert!(
        answered > first[0].at,
        "answered before the GOAWAY: not in flight at the age"
    );
    let closed = until_closed(&wire, 0, Duration::from_secs(5))
        .await
        .expect("closed");
    assert!(
        closed >= answered - Duration::from_millis(50),
        "closed before the answer"
    );
    // The final GOAWAY names the in-flight call's stream (3), so the client
    // knows it was accepted.
    assert_two_step_goaway(&wire, 0, 3);
    assert_eq!(stored_count(&app, "c1").await, 1);
}

/// What Redis counted for `customer`'s INTERAC/RTP with GIGADAT, read
/// straight from Redis: the harness's own gRPC connection is retired at
/// the same 1 s age, and a read through it can meet its close (a tonic
/// client does not retry; `Cancelled: connection closed` in CI).
async fn stored_count(app: &TestApp, customer: &str) -> i64 {
    let key = format!("sticky_gw_m1_{customer}");
    let count: Option<i64> =
        fred::interfaces::HashesInterface::hget(&app.inspect, key.as_str(), "INTERAC:RTP:GIGADAT")
            .await
            .unwrap();
    count.unwrap_or(0)
}

/// Only a stream still open a grace after the GOAWAY is cut.
#[tokio::test]
async fn a_stream_still_open_a_grace_after_the_goaway_is_cut() {
    let age = Duration::from_secs(1);
    let grace = Duration::from_secs(1);
    let app = spawn_app_with(|s| {
        s.max_connection_age = age;
        s.max_connection_age_grace = grace;
        s.redis.command_timeout = Duration::from_secs(8);
    })
    .await;
    let wire = Wire::default();
    let call = record_with_redis_frozen(&app, &wire).await;
    let first = until_goaways(&wire, 1, age * 2 + SCHEDULING).await;
    let closed = until_closed(&wire, 0, grace * 2 + SCHEDULING).await;
    app.redis.signal("-CONT");
    let first = first.first().expect("a GOAWAY").at;
    let closed = closed.expect("the connection was cut");
    let cut_after = closed - first;
    assert!(
        cut_after >= grace * 9 / 10 && cut_after <= grace + SCHEDULING,
        "cut {cut_after:?} after GOAWAY"
    );
    assert!(
        call.await.unwrap().0.is_err(),
        "the cut call cannot have an answer"
    );
}

/// Connections opened together are told to go away at different moments
/// (each draws its own age), so their clients do not reconnect in one wave.
#[tokio::test]
async fn connections_opened_together_get_goaway_at_spread_times() {
    let age = Duration::from_secs(2);
    let app = spawn_app_with(|s| s.max_connection_age = age).await;
    let wire = Wire::default();
    let mut channels = Vec::new();
    for _ in 0..8 {
        channels.push(wire.channel(app.addr).await);
    }
    let goaways = until_goaways(&wire, 16, age * 2).await;
    let at: Vec<Duration> = (0..8)
        .map(|n| {
            let opened = wire.snapshot(|log| log.opened[n]);
            let first = goaways.iter().find(|f| f.connection == n);
            first
                .unwrap_or_else(|| panic!("connection {n} got no GOAWAY"))
                .at
                - opened
        })
        .collect();
    for a in &at {
        assert!(
            *a >= age * 9 / 10 && *a <= age * 11 / 10 + SCHEDULING,
            "{at:?}"
        );
    }
    let spread = *at.iter().max().unwrap() - *at.iter().min().unwrap();
    // Eight draws over 400 ms fall within 50 ms of each other about once
    // in 250,000 runs; one age for all would give a few ms.
    assert!(
        spread >= Duration::from_millis(50),
        "GOAWAYs within {spread:?}: {at:?}"
    );
}

/// The plaintext health listener retires its connections the same way.
#[tokio::test]
async fn a_health_listener_connection_gets_goaway_at_its_age() {
    let age = Duration::from_secs(1);
    let app = spawn_app_with(|s| s.max_connection_age = age).await;
    let wire = Wire::default();
    wire.idle_peer(app.health_addr.unwrap()).await;
    until_goaways(&wire, 2, age * 2 + SCHEDULING).await;
    let goaway = assert_two_step_goaway(&wire, 0, 0);
    let at = goaway - wire.snapshot(|log| log.opened[0]);
    assert!(
        at >= age * 9 / 10 && at <= age * 11 / 10 + SCHEDULING,
        "GOAWAY after {at:?}"
    );
    assert!(
        until_closed(&wire, 0, Duration::from_secs(2))
            .await
            .is_some()
    );
}

/// The drain tells every open connection to go away, on the API listener
/// and on the health listener, long before any connection's age.
#[tokio::test]
async fn the_drain_sends_goaway_on_every_open_connection() {
    let mut app = spawn_app().await;
    let (api_wire, health_wire) = (Wire::default(), Wire::default());
    api_wire.idle_peer(app.addr).await;
    health_wire.idle_peer(app.health_addr.unwrap()).await;
    let draining = Instant::now();
    app.stop().await.unwrap();
    for (listener, wire) in [("api", &api_wire), ("health", &health_wire)] {
        eprintln!("{listener}");
        until_goaways(wire, 2, Duration::from_secs(2)).await;
        let goaway = assert_two_step_goaway(wire, 0, 0);
        assert!(
            goaway - draining < Duration::from_secs(1),
            "GOAWAY {:?} after the drain began",
            goaway - draining
        );
    }
}

/// A client that sends a request's headers and never its body must not hold
/// a call open: the server ends it within its 10 s bound.
#[tokio::test]
async fn a_request_whose_body_never_arrives_is_ended_by_the_server() {
    let app = spawn_app().await;
    let tcp = tokio::net::TcpStream::connect(app.addr).await.unwrap();
    let (client, connection) = h2::client::handshake(tcp).await.unwrap();
    tokio::spawn(connection);
    let mut client = client.ready().await.unwrap();
    let request = http::Request::post(format!(
        "http://{}/sticky_routing.v1.StickyRouting/GetPin",
        app.addr
    ))
    .header("content-type", "application/grpc")
    .header("te", "trailers")
    .body(())
    .unwrap();
    let sent = Instant::now();
    // Headers only: the body stream stays open, and nothing follows.
    let (response, _body) = client.send_request(request, false).unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(15), async {
        match response.await {
            // An answer: it must be a gRPC error, in headers or trailers.
            Ok(response) => {
                let (parts, mut body) = response.into_parts();
                let status = match parts.headers.get("grpc-status") {
                    Some(status) => status.clone(),
                    None => body.trailers().await.unwrap().unwrap()["grpc-status"].clone(),
                };
                assert_ne!(status, "0", "the call succeeded without a body");
            }
            // Or the stream is reset.
            Err(error) => assert!(error.is_reset() || error.is_go_away(), "{error:?}"),
        }
    })
    .await;
    let took = sent.elapsed();
    assert!(ended.is_ok(), "the server held the call for {took:?}");
    assert!(
        took >= Duration::from_secs(9),
        "ended after {took:?}: not the bound"
    );
}
