//! The server-wide limit on StickyRouting calls in progress: a call over it
//! is refused at once with `RESOURCE_EXHAUSTED`, touches no Redis, and is
//! counted; health and reflection are never counted nor refused.
//!
//! The calls that fill the limit hang on purpose: a `FaultProxy` holds
//! Redis's replies, so they stay in progress until the test lets them go.

use std::time::{Duration, Instant};

use sticky_routing::transport::pb;
use tonic::Code;

use crate::support::held_calls::{behind_a_proxy, new_connection, wait_for_commands};
use crate::support::*;
use test_support::fault_proxy::Replies;

const SERVING: i32 = 1;
const LIMIT: usize = 2;

#[tokio::test]
async fn a_call_over_the_server_wide_limit_is_refused_at_once_without_touching_redis() {
    let (app, proxy) = behind_a_proxy(LIMIT).await;

    // Fill the limit with calls on two connections of their own: the limit
    // is the server's, not each connection's.
    let before = app.command_calls().await;
    proxy.set(Replies::Stall);
    let mut held = Vec::new();
    for n in 0..LIMIT {
        let api = new_connection(&app).await;
        let customer = format!("held{n}");
        held.push(tokio::spawn(async move {
            api.clone().get_pin(pin_request(&customer, &[])).await
        }));
    }
    wait_for_commands(&app, &before, "hgetall", LIMIT as u64).await;

    // A third connection's call is refused, at once, and reads nothing:
    // a GetPin, whose ceiling is the whole limit.
    let before = app.command_calls().await;
    let started = Instant::now();
    let refused = new_connection(&app)
        .await
        .get_pin(pin_request("c1", &[]))
        .await
        .expect_err("over the limit");
    let took = started.elapsed();
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert!(
        refused.message().contains("calls in progress"),
        "{refused:?}"
    );
    // The bench measures the real figure (well under 1 ms); this bound only
    // tells "at once" from "after the held calls".
    assert!(took < Duration::from_millis(500), "refused after {took:?}");

    // Health and reflection are neither refused nor counted.
    assert_eq!(app.health_status("").await, SERVING);
    assert_eq!(app.health_status(API).await, SERVING);

    assert_eq!(
        app.commands_since(&before).await,
        vec![],
        "it reached Redis"
    );
    let metrics = app.scrape().await;
    assert!(
        metrics.contains("sticky_routing_refused_calls_total{class=\"pin\",reason=\"shed\"} 1"),
        "{metrics}"
    );

    // Once the held calls finish, their slots serve again.
    proxy.set(Replies::Pass);
    for call in held {
        call.await.unwrap().expect("a held call is answered");
    }
    assert_eq!(app.success("c1", "GIGADAT").await.result, APPLIED);
}

#[tokio::test]
async fn calls_within_the_limit_are_never_refused() {
    // As many concurrent RecordOutcome calls as their ceiling (80 % of 10),
    // from many connections, again and again: none is refused, so the limit
    // counts slots exactly and gives each back.
    let app = spawn_app_with(|s| s.max_in_flight = 10).await;
    for round in 0..20 {
        let mut calls = Vec::new();
        for n in 0..8 {
            let api = if n % 2 == 0 {
                app.api.clone()
            } else {
                new_connection(&app).await
            };
            let customer = format!("c{round}-{n}");
            calls.push(tokio::spawn(async move {
                api.clone()
                    .record_outcome(outcome("m1", &customer, "GIGADAT", pb::Outcome::Success))
                    .await
            }));
        }
        for call in calls {
            let answer = call.await.unwrap();
            assert!(answer.is_ok(), "round {round}: {answer:?}");
        }
    }
    assert!(
        !app.scrape().await.contains("reason=\"shed\""),
        "nothing was shed"
    );
}
