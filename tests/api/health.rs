//! Health and Redis trouble: liveness ("") stays SERVING, readiness follows
//! Redis, and calls fail fast (UNAVAILABLE / DEADLINE_EXCEEDED) while Redis is
//! down or frozen, then recover without a restart.

use std::time::{Duration, Instant};

use sticky_routing::transport::pb;
use sticky_routing::transport::pb::sticky_routing_client::StickyRoutingClient;
use tonic::{Code, Status};

use crate::helpers::*;

/// Runs `call`, bounded so a hang fails the test, and returns its result with
/// how long it took.
async fn timed<T>(call: impl Future<Output = Result<T, Status>>) -> (Result<T, Status>, Duration) {
    let started = Instant::now();
    let result = tokio::time::timeout(Duration::from_secs(10), call)
        .await
        .expect("the call hung");
    (result, started.elapsed())
}

/// Asserts a failed call with one of `codes`, answered within `limit`.
fn assert_fails<T: std::fmt::Debug>(
    what: &str,
    (result, took): (Result<T, Status>, Duration),
    codes: &[Code],
    limit: Duration,
) {
    let status = result.expect_err(&format!("{what} succeeded"));
    assert!(codes.contains(&status.code()), "{what}: {status:?}");
    assert!(took < limit, "{what} took {took:?}, limit {limit:?}");
}

#[tokio::test]
async fn liveness_and_readiness_are_serving_while_redis_answers() {
    let app = spawn_app().await;
    assert_eq!(app.health_status("").await, SERVING);
    assert_eq!(app.health_status(API).await, SERVING);
    app.success("c1", "GIGADAT").await;
    assert_eq!(app.health_status(API).await, SERVING);
}

#[tokio::test]
async fn redis_down_turns_readiness_off_fails_fast_and_recovers() {
    let mut app = spawn_app().await;
    app.success("c1", "GIGADAT").await;

    app.redis.stop();
    let started = Instant::now();
    app.wait_until_ready(false).await;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "readiness took {:?}",
        started.elapsed()
    );
    assert_eq!(app.health_status(API).await, NOT_SERVING);
    assert_eq!(
        app.health_status("").await,
        SERVING,
        "liveness must not follow redis"
    );

    let fast = Duration::from_millis(800);
    for customer in ["c1", "c2"] {
        let record = app.record(outcome("m1", customer, "GIGADAT", pb::Outcome::Success));
        assert_fails(
            "RecordOutcome while redis is down",
            timed(record).await,
            &[Code::Unavailable],
            fast,
        );
        let pin = timed(app.pin(pin_request(customer, &[]))).await;
        assert_fails(
            "GetPin while redis is down",
            pin,
            &[Code::Unavailable],
            fast,
        );
    }

    app.redis.restart();
    app.wait_until_ready(true).await;
    assert_eq!(app.health_status("").await, SERVING);
    let recorded = app.success("c1", "GIGADAT").await;
    assert_eq!(
        (recorded.result, recorded.net_count),
        (APPLIED, 1),
        "the new redis is empty"
    );
    let answer = app.pin(pin_request("c1", &[])).await.unwrap();
    assert_eq!(
        (answer.pinned, answer.connector.as_str()),
        (true, "GIGADAT")
    );
}

#[tokio::test]
async fn a_frozen_redis_never_hangs_a_call_nor_answers_a_pin() {
    let command_timeout = Duration::from_millis(200);
    let app = spawn_app_with(|s| s.redis.command_timeout = command_timeout).await;
    app.success("c1", "GIGADAT").await;
    app.redis.signal("-STOP");

    // Only the server enforces this deadline: the client would wait 10 s.
    let deadline = Duration::from_millis(200);
    let request = with_deadline(pin_request("c1", &[]), deadline);
    let (result, took) = timed(deadline_blind_api(app.addr).get_pin(request)).await;
    let status = result.expect_err("GetPin with a 200ms deadline succeeded on a frozen redis");
    assert_eq!(
        status.code(),
        Code::DeadlineExceeded,
        "the server did not honour grpc-timeout: {status:?} after {took:?}"
    );
    assert!(
        took < deadline + Duration::from_millis(150),
        "the server answered a 200ms deadline after {took:?}"
    );

    // A deadline longer than the command timeout: the server's own answer,
    // UNAVAILABLE, arrives before the caller gives up.
    let mut request = tonic::Request::new(pin_request("c1", &[]));
    request.set_timeout(Duration::from_millis(600));
    let (result, took) = timed(app.api.clone().get_pin(request)).await;
    let status = result.expect_err("GetPin with a 600ms deadline succeeded on a frozen redis");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(
        std::error::Error::source(&status).is_none(),
        "not the server's answer: {status:?}"
    );
    assert!(
        took < Duration::from_millis(550),
        "GetPin with a 600ms deadline took {took:?}"
    );

    let bound = command_timeout * 4 + Duration::from_millis(500);
    let without_deadline = timed(app.pin(pin_request("c1", &[]))).await;
    assert_fails(
        "GetPin without a deadline",
        without_deadline,
        &[Code::Unavailable],
        bound,
    );
    // The script reached the frozen server's socket: it may still run once
    // Redis thaws, so the answer must not promise that nothing was applied.
    let record = timed(app.record(outcome("m1", "c1", "GIGADAT", pb::Outcome::Success))).await;
    assert_fails(
        "RecordOutcome without a deadline",
        record,
        &[Code::Unknown],
        bound,
    );

    app.redis.signal("-CONT");
    let deadline = Instant::now() + Duration::from_secs(10);
    let answer = loop {
        match app.pin(pin_request("c1", &[])).await {
            Ok(answer) => break answer,
            Err(status) => assert!(
                Instant::now() < deadline,
                "no recovery after thaw: {status:?}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(answer.connector, "GIGADAT");
}

#[tokio::test]
async fn the_service_starts_without_redis_and_becomes_ready_when_it_comes() {
    let mut redis = RedisServer::start();
    redis.stop();
    let app = sticky_routing::startup::Application::build(test_settings(&redis))
        .await
        .expect("start-up does not need redis");
    let addr = app.grpc_addr();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(app.run_until_stopped(async {
        let _ = stopped.await;
    }));
    let channel = tonic::transport::Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let health = tonic_health::pb::health_client::HealthClient::new(channel.clone());
    let status = |service: &'static str| health_status(&health, service);
    assert_eq!(status("").await, SERVING, "liveness without redis");
    assert_eq!(status(API).await, NOT_SERVING);
    let mut api = StickyRoutingClient::new(channel);
    let refused = api.get_pin(pin_request("c1", &[])).await.unwrap_err();
    assert_eq!(refused.code(), Code::Unavailable, "{refused:?}");

    redis.restart();
    let deadline = Instant::now() + Duration::from_secs(10);
    while status(API).await != SERVING {
        assert!(Instant::now() < deadline, "never became ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let reply = api
        .record_outcome(outcome("m1", "c1", "GIGADAT", pb::Outcome::Success))
        .await
        .unwrap();
    assert_eq!(reply.into_inner().result, APPLIED);
    let _ = stop.send(());
    server.await.unwrap().unwrap();
}
