//! What operators see: Prometheus metrics on `/metrics`, and server
//! reflection for grpcurl and ghz.

use sticky_routing::domain::ids::MerchantId;
use tonic_reflection::pb::v1::ServerReflectionRequest;
use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;

use crate::helpers::*;

#[tokio::test]
async fn metrics_count_outcomes_prunes_and_latency() {
    let app = spawn_app_with(|s| {
        s.rules.max_combos_per_customer = 1;
        s.rules
            .budgets
            .overrides
            .insert(MerchantId::parse("closed").unwrap(), 0);
    })
    .await;
    app.success("c1", "A").await;
    app.success("c1", "B").await; // prunes A
    app.failure("c9", "A").await;
    app.record(outcome(
        "closed",
        "c1",
        "A",
        sticky_routing::transport::pb::Outcome::Success,
    ))
    .await
    .unwrap();
    app.record(outcome(
        "",
        "c1",
        "A",
        sticky_routing::transport::pb::Outcome::Success,
    ))
    .await
    .unwrap_err();
    app.pin(pin_request("c1", &[])).await.unwrap();
    app.pin(pin_request("c2", &[])).await.unwrap();
    // A repeated attempt, and a pin whose only candidate is vetoed.
    let attempt = sticky_routing::transport::pb::RecordOutcomeRequest {
        attempt_id: "pay-1".into(),
        ..outcome(
            "m1",
            "c1",
            "B",
            sticky_routing::transport::pb::Outcome::Success,
        )
    };
    app.record(attempt.clone()).await.unwrap();
    app.record(attempt).await.unwrap();
    let vetoed = sticky_routing::transport::pb::GetPinRequest {
        connector_scores: [("B".to_owned(), 0.1), ("Z".to_owned(), 1.0)].into(),
        ..pin_request("c1", &[])
    };
    assert!(!app.pin(vetoed).await.unwrap().pinned);

    let text = app.scrape().await;
    for (series, expected) in [
        ("sticky_routing_writes_total{outcome=\"applied\"}", 3),
        ("sticky_routing_writes_total{outcome=\"duplicate\"}", 1),
        ("sticky_routing_writes_total{outcome=\"no_habit\"}", 1),
        ("sticky_routing_writes_total{outcome=\"not_admitted\"}", 1),
        ("sticky_routing_writes_total{outcome=\"invalid\"}", 1),
        ("sticky_routing_pins_total{outcome=\"pinned\"}", 1),
        ("sticky_routing_pins_total{outcome=\"no_habit\"}", 1),
        ("sticky_routing_pins_total{outcome=\"vetoed\"}", 1),
        ("sticky_routing_pruned_fields_total", 1),
        (
            "sticky_routing_rpc_duration_seconds_count{code=\"OK\",rpc=\"RecordOutcome\"}",
            6,
        ),
        (
            "sticky_routing_rpc_duration_seconds_count{code=\"INVALID_ARGUMENT\",rpc=\"RecordOutcome\"}",
            1,
        ),
        (
            "sticky_routing_rpc_duration_seconds_count{code=\"OK\",rpc=\"GetPin\"}",
            3,
        ),
    ] {
        assert_eq!(
            sample(&text, series),
            Some(expected as f64),
            "`{series}` in:\n{text}"
        );
    }
}

/// The value of `series` (name and labels, exactly as exposed) in a
/// Prometheus text exposition; `None` when no line has it. The whole series
/// must match and the value is compared as a number, so `… 2` does not
/// pass for `… 20`.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .find_map(|line| {
            let (name, value) = line.rsplit_once(' ')?;
            (name == series).then(|| value.parse().unwrap())
        })
}

#[tokio::test]
async fn reflection_lists_the_api_and_health() {
    let app = spawn_app().await;
    let channel = tonic::transport::Channel::from_shared(format!("http://{}", app.addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let request = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut replies = ServerReflectionClient::new(channel)
        .server_reflection_info(tokio_stream::iter([request]))
        .await
        .unwrap()
        .into_inner();
    let reply = replies.message().await.unwrap().expect("one reply");
    let Some(MessageResponse::ListServicesResponse(list)) = reply.message_response else {
        panic!("unexpected reply {reply:?}");
    };
    let names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
    for service in ["sticky_routing.v1.StickyRouting", "grpc.health.v1.Health"] {
        assert!(
            names.iter().any(|n| n == service),
            "{service} missing from {names:?}"
        );
    }
}
