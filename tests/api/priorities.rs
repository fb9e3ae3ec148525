//! Priorities under a stalled Redis: RecordOutcome stops being admitted at
//! its share of the limit while GetPin still is, a backfill marked
//! `x-request-priority: low` never holds more than its share, and every
//! refusal carries `grpc-retry-pushback-ms` and is counted by class.
//!
//! Redis's replies are held by a `FaultProxy`, so admitted calls stay in
//! progress, as they do when Redis is slow, until the test lets them go.

use std::time::Duration;

use sticky_routing::transport::pb;
use tonic::{Code, Status};

use crate::support::held_calls::{behind_a_proxy, new_connection, wait_for_commands};
use crate::support::*;
use test_support::fault_proxy::Replies;

/// The limit of these tests: feedback may start below 8, admin and low
/// below 1 (the defaults, 80 % and 10 %).
const LIMIT: usize = 10;

fn marked<T>(message: T, priority: &str) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request
        .metadata_mut()
        .insert("x-request-priority", priority.parse().unwrap());
    request
}

/// Asserts a shed answer with this pushback, and returns its message.
fn assert_shed(answer: Result<impl std::fmt::Debug, Status>, pushback_ms: &str) -> String {
    let status = answer.expect_err("shed");
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    let pushback = status.metadata().get("grpc-retry-pushback-ms");
    assert_eq!(
        pushback.map(|v| v.to_str().unwrap()),
        Some(pushback_ms),
        "{status:?}"
    );
    status.message().to_owned()
}

#[tokio::test]
async fn record_outcome_stops_at_its_share_while_get_pin_is_still_admitted() {
    let (app, proxy) = behind_a_proxy(LIMIT).await;
    proxy.set(Replies::Stall);
    let before = app.command_calls().await;
    let mut held = Vec::new();
    for n in 0..8 {
        let api = new_connection(&app).await;
        let customer = format!("held{n}");
        held.push(tokio::spawn(async move {
            let request = outcome("m1", &customer, "GIGADAT", pb::Outcome::Success);
            api.clone().record_outcome(request).await.map(|_| ())
        }));
    }
    wait_for_commands(&app, &before, "evalsha", 8).await;

    // The ninth RecordOutcome is refused at once; nothing reaches Redis.
    let before_refusals = app.command_calls().await;
    let refused = app
        .api
        .clone()
        .record_outcome(outcome("m1", "late", "GIGADAT", pb::Outcome::Success))
        .await;
    let message = assert_shed(refused, "250");
    assert!(message.contains("feedback"), "{message}");
    assert_eq!(app.commands_since(&before_refusals).await, vec![]);

    // GetPin still starts, up to the whole limit.
    let before_pins = app.command_calls().await;
    for n in 0..2 {
        let api = new_connection(&app).await;
        let customer = format!("pin{n}");
        held.push(tokio::spawn(async move {
            api.clone()
                .get_pin(pin_request(&customer, &[]))
                .await
                .map(|_| ())
        }));
    }
    wait_for_commands(&app, &before_pins, "hgetall", 2).await;
    let before_refusals = app.command_calls().await;
    let refused = app.api.clone().get_pin(pin_request("late", &[])).await;
    assert_shed(refused, "20");
    assert_eq!(app.commands_since(&before_refusals).await, vec![]);

    let metrics = app.scrape().await;
    for class in ["feedback", "pin"] {
        let series =
            format!("sticky_routing_refused_calls_total{{class=\"{class}\",reason=\"shed\"}} 1");
        assert!(metrics.contains(&series), "no {series}: {metrics}");
    }

    // Let Redis answer: every admitted call completes, and each applied.
    proxy.set(Replies::Pass);
    for call in held {
        call.await.unwrap().expect("an admitted call is answered");
    }
    for n in 0..8 {
        let request = pin_request(&format!("held{n}"), &[]);
        let pin = app.api.clone().get_pin(request).await.unwrap().into_inner();
        assert_eq!(ranked(&pin), vec![("GIGADAT", 1)], "held{n}");
    }
}

#[tokio::test]
async fn a_backfill_marked_low_never_holds_more_than_its_share() {
    let (app, proxy) = behind_a_proxy(LIMIT).await;
    proxy.set(Replies::Stall);
    let before = app.command_calls().await;

    // A backfill of 20 concurrent calls, on four connections, marked low
    // in any case: one may start (10 % of 10); the rest are refused at once.
    let mut connections = Vec::new();
    for _ in 0..4 {
        connections.push(new_connection(&app).await);
    }
    let mut calls = Vec::new();
    for n in 0..20 {
        let api = connections[n % 4].clone();
        let priority = ["low", "LOW", "Low", "lOw"][n % 4];
        calls.push(tokio::spawn(async move {
            let request = outcome(
                "m1",
                &format!("backfill{n}"),
                "GIGADAT",
                pb::Outcome::Success,
            );
            api.clone().record_outcome(marked(request, priority)).await
        }));
    }
    wait_for_commands(&app, &before, "evalsha", 1).await;
    let (mut admitted, mut refused) = (0, 0);
    for call in calls {
        // A refused call answers at once; the admitted one waits on Redis.
        match tokio::time::timeout(Duration::from_secs(2), call).await {
            Ok(answer) => {
                assert_shed(answer.unwrap(), "2000");
                refused += 1;
            }
            Err(_) => admitted += 1,
        }
    }
    assert_eq!((admitted, refused), (1, 19));
    assert_eq!(
        app.commands_since(&before).await,
        vec![("evalsha".to_owned(), 1)],
        "only the admitted call reached Redis"
    );

    // An admin call shares the low share; GetPin, even with another value
    // of the header, does not.
    let habits = pb::GetHabitsRequest {
        merchant_id: "m1".into(),
        customer_id: "c1".into(),
    };
    assert_shed(app.api.clone().get_habits(habits).await, "1000");
    let api = app.api.clone();
    let pin = tokio::spawn(async move {
        api.clone()
            .get_pin(marked(pin_request("c1", &[]), "high"))
            .await
    });
    wait_for_commands(&app, &before, "hgetall", 1).await;

    let metrics = app.scrape().await;
    for (class, shed) in [("low", 19), ("admin", 1)] {
        let series = format!(
            "sticky_routing_refused_calls_total{{class=\"{class}\",reason=\"shed\"}} {shed}"
        );
        assert!(metrics.contains(&series), "no {series}: {metrics}");
    }
    assert!(!metrics.contains("class=\"pin\""), "{metrics}");
    proxy.set(Replies::Pass);
    pin.await.unwrap().expect("the pin is answered");
}
