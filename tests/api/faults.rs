//! Network faults between the service and Redis, injected by [`FaultProxy`]:
//! the answer codes must tell the caller the truth about whether a write
//! happened, and a retry with the same attempt id must count once.
//!
//! These tests also pin down the fred options the answers rely on: a build
//! that queues commands behind a broken connection (`fail_fast` off) fails
//! the refused-connection test, and one that also lets fred resend a write
//! after a reconnect (`max_attempts` above 1) fails the lost-reply tests.
//! (With `fail_fast` on, fred 10 fails an in-flight command when its
//! connection drops instead of replaying it, whatever `max_attempts` says.)

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use fred::prelude::{HashesInterface, KeysInterface};
use sticky_routing::transport::pb;
use sticky_routing::transport::pb::sticky_routing_client::StickyRoutingClient;
use tonic::Code;
use tonic::transport::Channel;

use crate::support::*;
use test_support::fault_proxy::{FaultProxy, Replies};

const REDIS_TIMEOUT: Duration = Duration::from_millis(300);
/// How late an answer may be, past the bound it should meet, on a busy
/// 2-core machine.
const SLACK: Duration = Duration::from_millis(80);

/// The service behind a proxy, with one Redis connection so that a fault on
/// "the" connection hits the call under test.
async fn app_behind_proxy(
    configure: impl FnOnce(&mut sticky_routing::config::Settings),
) -> (TestApp, FaultProxy) {
    let redis = RedisServer::start();
    let proxy = FaultProxy::start(([127, 0, 0, 1], redis.port).into()).await;
    let app = spawn_app_against(TestRedis::Single(redis), proxy.url(), |s| {
        s.redis.pool_size = 1;
        s.redis.command_timeout = REDIS_TIMEOUT;
        configure(s);
    })
    .await;
    (app, proxy)
}

fn success(customer: &str, attempt_id: &str) -> pb::RecordOutcomeRequest {
    pb::RecordOutcomeRequest {
        attempt_id: attempt_id.into(),
        ..outcome("m1", customer, "GIGADAT", pb::Outcome::Success)
    }
}

async fn count(app: &TestApp, customer: &str) -> i64 {
    let value: Option<i64> = app
        .inspect
        .hget(format!("sticky_gw_m1_{customer}"), "INTERAC:RTP:GIGADAT")
        .await
        .unwrap();
    value.unwrap_or(0)
}

/// Sends `req` until it gets an answer, as an orchestrator retries on the
/// codes that allow it; returns the answer and every code seen before it.
async fn retry_until_answered(
    api: &StickyRoutingClient<Channel>,
    req: &pb::RecordOutcomeRequest,
) -> (pb::RecordOutcomeResponse, Vec<Code>) {
    let give_up = Instant::now() + Duration::from_secs(10);
    let mut seen = Vec::new();
    loop {
        match api.clone().record_outcome(req.clone()).await {
            Ok(reply) => return (reply.into_inner(), seen),
            Err(status) => {
                assert!(
                    matches!(
                        status.code(),
                        Code::Unavailable | Code::Unknown | Code::DeadlineExceeded
                    ),
                    "a retryable fault got {status:?}"
                );
                assert!(Instant::now() < give_up, "no answer after 10s: {status:?}");
                seen.push(status.code());
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

/// Asserts a message a client may see holds none of Redis's internals.
fn assert_plain_words(status: &tonic::Status, app: &TestApp) {
    let port = app
        .settings
        .redis
        .url
        .expose()
        .rsplit(':')
        .next()
        .unwrap()
        .to_owned();
    for internal in [
        port.as_str(),
        "127.0.0.1",
        SERVICE_USER,
        "NOSCRIPT",
        "ERR ",
        "IO Error",
    ] {
        assert!(
            !status.message().contains(internal),
            "{internal:?} in {:?}",
            status.message()
        );
    }
}

#[tokio::test]
async fn a_lost_reply_then_a_retry_with_the_attempt_id_counts_once() {
    let (app, proxy) = app_behind_proxy(|_| {}).await;
    app.success("c1", "GIGADAT").await;

    proxy.set(Replies::LoseNextArray);
    let lost = app.record(success("c1", "pay-1")).await.unwrap_err();
    assert_eq!(lost.code(), Code::Unknown, "{lost:?}");
    assert_plain_words(&lost, &app);

    let (retried, _) = retry_until_answered(&app.api, &success("c1", "pay-1")).await;
    assert_eq!((retried.result, retried.net_count), (DUPLICATE, 2));
    assert_eq!(count(&app, "c1").await, 2, "the attempt counted once");
}

#[tokio::test]
async fn a_lost_reply_without_an_attempt_id_is_unknown_and_applied_once() {
    let (app, proxy) = app_behind_proxy(|_| {}).await;
    app.success("c1", "GIGADAT").await;

    proxy.set(Replies::LoseNextArray);
    let lost = app.record(success("c1", "")).await.unwrap_err();
    assert_eq!(
        lost.code(),
        Code::Unknown,
        "not UNAVAILABLE: it ran: {lost:?}"
    );
    assert!(lost.message().contains("attempt_id"), "{lost:?}");

    // Give a client that resends after reconnecting the time to do it.
    app.wait_until_ready(true).await;
    tokio::time::sleep(REDIS_TIMEOUT * 2).await;
    assert_eq!(count(&app, "c1").await, 2, "applied once, never resent");
}

#[tokio::test]
async fn a_slow_reply_within_the_timeout_is_waited_for() {
    let (app, proxy) = app_behind_proxy(|_| {}).await;
    app.success("c1", "GIGADAT").await;
    let delay = REDIS_TIMEOUT / 3;
    proxy.set(Replies::Delay(delay));
    let started = Instant::now();
    let reply = app.record(success("c1", "")).await.unwrap();
    assert_eq!((reply.result, reply.net_count), (APPLIED, 2));
    assert!(started.elapsed() >= delay, "{:?}", started.elapsed());
}

#[tokio::test]
async fn a_stall_longer_than_the_redis_timeout_is_answered_in_time() {
    let (app, proxy) = app_behind_proxy(|_| {}).await;
    app.success("c1", "GIGADAT").await;
    proxy.set(Replies::Stall);

    let started = Instant::now();
    let write = app.record(success("c1", "")).await.unwrap_err();
    let took = started.elapsed();
    assert_eq!(write.code(), Code::Unknown, "{write:?}");
    assert!(
        took >= REDIS_TIMEOUT - Duration::from_millis(5) && took < REDIS_TIMEOUT + SLACK,
        "answered after {took:?}"
    );

    let started = Instant::now();
    let read = app.pin(pin_request("c1", &[])).await.unwrap_err();
    assert_eq!(
        read.code(),
        Code::Unavailable,
        "reads keep v1's code: {read:?}"
    );
    assert!(
        started.elapsed() < REDIS_TIMEOUT + SLACK,
        "{:?}",
        started.elapsed()
    );

    // The caller's shorter deadline wins.
    let mut request = tonic::Request::new(success("c1", ""));
    request.set_timeout(Duration::from_millis(150));
    let started = Instant::now();
    let status = app.api.clone().record_outcome(request).await.unwrap_err();
    assert!(
        matches!(status.code(), Code::DeadlineExceeded | Code::Cancelled),
        "{status:?}"
    );
    assert!(
        started.elapsed() < Duration::from_millis(150) + SLACK,
        "{:?}",
        started.elapsed()
    );

    // The stalled writes had reached Redis: they ran, as UNKNOWN warned.
    proxy.set(Replies::Pass);
    assert_eq!(count(&app, "c1").await, 3);

    // On /metrics: one write timed out (the stalled readiness pings are
    // reads, so never `timeout`), and the stall shows past the 250 ms bucket.
    let text = app.scrape().await;
    assert_eq!(
        sample(&text, "sticky_routing_redis_errors_total{kind=\"timeout\"}"),
        Some(1.0),
        "{text}"
    );
    let writes = |bucket: &str| {
        let series = format!(
            "sticky_routing_redis_command_duration_seconds_bucket{{command=\"record_success\",le=\"{bucket}\"}}"
        );
        sample(&text, &series).unwrap()
    };
    assert!(writes("0.25") < writes("+Inf"), "{text}");
}

#[tokio::test]
async fn a_refused_connection_is_unavailable_at_once_and_applies_nothing() {
    let (mut app, mut proxy) = app_behind_proxy(|_| {}).await;
    app.success("c1", "GIGADAT").await;
    let keys_before = app.keys().await;

    proxy.refuse().await;
    app.wait_until_ready(false).await;
    for req in [
        success("c1", "pay-1"),
        success("c1", ""),
        success("new", "pay-2"),
    ] {
        let started = Instant::now();
        let status = app.record(req).await.unwrap_err();
        assert_eq!(status.code(), Code::Unavailable, "{status:?}");
        assert!(
            started.elapsed() < Duration::from_millis(100),
            "{:?}",
            started.elapsed()
        );
        assert!(
            status.message().contains("nothing was applied"),
            "{status:?}"
        );
        assert_plain_words(&status, &app);
    }
    assert_eq!(count(&app, "c1").await, 1);
    assert_eq!(app.keys().await, keys_before);

    proxy.accept();
    app.wait_until_ready(true).await;
    let (again, _) = retry_until_answered(&app.api, &success("c1", "pay-1")).await;
    assert_eq!((again.result, again.net_count), (APPLIED, 2));
    app.stop().await.unwrap();
}

#[tokio::test]
async fn calls_caught_in_reconnections_never_get_internal_and_retries_count_once() {
    let (app, proxy) = app_behind_proxy(|s| s.redis.pool_size = 2).await;
    const CUSTOMERS: usize = 8;
    const ATTEMPTS: usize = 8;
    for c in 0..CUSTOMERS {
        app.success(&format!("c{c}"), "GIGADAT").await;
    }

    let chaos = async {
        for _ in 0..30 {
            tokio::time::sleep(Duration::from_millis(25)).await;
            proxy.reset_all();
        }
    };
    let callers = async {
        let mut calls = tokio::task::JoinSet::new();
        for c in 0..CUSTOMERS {
            let api = app.api.clone();
            calls.spawn(async move {
                let mut seen = BTreeSet::new();
                for a in 0..ATTEMPTS {
                    let req = success(&format!("c{c}"), &format!("c{c}-a{a}"));
                    let (reply, codes) = retry_until_answered(&api, &req).await;
                    assert!(matches!(reply.result, APPLIED | DUPLICATE), "{reply:?}");
                    seen.extend(codes.into_iter().map(|code| format!("{code:?}")));
                }
                seen
            });
        }
        calls.join_all().await
    };
    let ((), seen) = tokio::join!(chaos, callers);
    println!("codes seen during reconnections: {seen:?}");
    for c in 0..CUSTOMERS {
        assert_eq!(
            count(&app, &format!("c{c}")).await,
            1 + ATTEMPTS as i64,
            "c{c}: every attempt counted exactly once"
        );
    }
}

#[tokio::test]
async fn past_the_queue_limit_calls_are_refused_at_once() {
    let (app, proxy) = app_behind_proxy(|s| {
        s.redis.queue_limit = 2;
        s.redis.command_timeout = Duration::from_secs(2);
    })
    .await;
    app.success("c1", "GIGADAT").await;
    proxy.set(Replies::Stall);

    let stuck: Vec<_> = (0..2)
        .map(|_| {
            let mut api = app.api.clone();
            tokio::spawn(async move { api.record_outcome(success("c1", "")).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    for _ in 0..5 {
        let started = Instant::now();
        let status = app.record(success("c1", "")).await.unwrap_err();
        assert_eq!(status.code(), Code::Unavailable, "{status:?}");
        assert!(status.message().contains("too many calls"), "{status:?}");
        assert!(
            started.elapsed() < Duration::from_millis(50),
            "{:?}",
            started.elapsed()
        );
    }
    proxy.set(Replies::Pass);
    for call in stuck {
        let reply = call.await.unwrap().unwrap().into_inner();
        assert_eq!(reply.result, APPLIED);
    }
    assert_eq!(
        count(&app, "c1").await,
        3,
        "the refused calls wrote nothing"
    );
}

#[tokio::test]
async fn a_foreign_value_is_internal_and_nothing_is_written() {
    let app = spawn_app().await;
    const KEY: &str = "sticky_gw_m1_c1";
    let _: () = app
        .inspect
        .hset(
            KEY,
            [("INTERAC:RTP:GIGADAT", "lots"), ("CARD:DEBIT:X", "2")],
        )
        .await
        .unwrap();
    let _: () = app.inspect.expire(KEY, 100, None).await.unwrap();
    let before: std::collections::HashMap<String, String> = app.inspect.hgetall(KEY).await.unwrap();
    for kind in [pb::Outcome::Success, pb::Outcome::GatewayFailure] {
        for attempt_id in ["", "pay-1"] {
            let req = pb::RecordOutcomeRequest {
                attempt_id: attempt_id.into(),
                ..outcome("m1", "c1", "GIGADAT", kind)
            };
            let status = app.record(req).await.unwrap_err();
            assert_eq!(status.code(), Code::Internal, "{status:?}");
            assert!(
                status.message().contains("nothing was written"),
                "{status:?}"
            );
        }
    }
    let after: std::collections::HashMap<String, String> = app.inspect.hgetall(KEY).await.unwrap();
    assert_eq!(after, before);
    assert!(app.ttl(KEY).await <= 100, "the TTL was re-armed");
}
