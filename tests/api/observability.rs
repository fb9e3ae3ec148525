//! What operators see: Prometheus metrics on `/metrics`, and server
//! reflection for grpcurl and ghz.

use std::time::{Duration, Instant};

use sticky_routing::domain::ids::MerchantId;
use sticky_routing::startup::Application;
use sticky_routing::transport::pb::sticky_routing_client::StickyRoutingClient;
use tonic_reflection::pb::v1::ServerReflectionRequest;
use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;

use crate::support::*;

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
        // The one not admitted: the `closed` merchant's budget is 0.
        (
            "sticky_routing_admission_refusals_total{reason=\"budget\"}",
            1,
        ),
    ] {
        assert_eq!(
            sample(&text, series),
            Some(expected as f64),
            "`{series}` in:\n{text}"
        );
    }
    assert_eq!(
        sample(
            &text,
            "sticky_routing_admission_refusals_total{reason=\"memory_guard\"}"
        ),
        None,
        "{text}"
    );
}

/// `sticky_routing_redis_command_duration_seconds_count` for `command`.
fn redis_calls(text: &str, command: &str) -> Option<f64> {
    let series =
        format!("sticky_routing_redis_command_duration_seconds_count{{command=\"{command}\"}}");
    sample(text, &series)
}

/// Every Redis call an RPC makes is timed once, under what it is for: a new
/// customer's success is three (the write finds no hash, admission, the
/// write again), and every other RPC one. A healthy Redis fails none, and
/// its node shows as up once the memory guard's poll has reached it.
#[tokio::test]
async fn redis_calls_are_timed_by_what_they_are_for() {
    let app = spawn_app().await;
    app.success("new", "A").await;
    app.success("new", "A").await;
    app.failure("new", "A").await;
    assert!(app.pin(pin_request("new", &[])).await.unwrap().pinned);
    app.habits("new").await;
    assert!(app.forget("new").await.existed);

    let text = app.scrape().await;
    for (command, calls) in [
        ("record_success", 3),
        ("admit", 1),
        ("record_failure", 1),
        ("read_combos", 1),
        ("read_habits", 1),
        ("forget", 1),
    ] {
        assert_eq!(
            redis_calls(&text, command),
            Some(f64::from(calls)),
            "{command} in:\n{text}"
        );
    }
    // Readiness pings every 500 ms, and the app is ready: at least once.
    assert!(
        redis_calls(&text, "ping").is_some_and(|pings| pings >= 1.0),
        "{text}"
    );
    assert!(
        samples(&text, "sticky_routing_redis_errors_total").is_empty(),
        "{text}"
    );
    let node = format!("127.0.0.1:{}", app.redis.data_ports()[0]);
    let up = format!("sticky_routing_redis_up{{node=\"{node}\"}}");
    scrape_until(app.metrics_addr, "up", |text| {
        assert_ne!(sample(text, &up), Some(0.0), "a live node is down:\n{text}");
        sample(text, &up) == Some(1.0)
    })
    .await;
}

/// Scrapes `metrics_addr` every 50 ms until `done` holds for the text, for
/// up to 10 s; the text that passed.
async fn scrape_until(
    metrics_addr: std::net::SocketAddr,
    what: &str,
    done: impl Fn(&str) -> bool,
) -> String {
    let give_up = Instant::now() + Duration::from_secs(10);
    loop {
        let text = scrape(metrics_addr).await;
        if done(&text) {
            return text;
        }
        assert!(Instant::now() < give_up, "never {what}:\n{text}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A Redis that is down shows as `redis_up` 0, on the label it shows as 1
/// once it is back; and every Redis call made meanwhile, the readiness
/// pings' and the RPCs', is a failure of kind `no_connection` (the call
/// was never sent).
#[tokio::test]
async fn a_redis_that_is_down_is_0_and_its_failed_calls_are_counted_by_kind() {
    let mut redis = RedisServer::start();
    redis.stop();
    let app = Application::build(test_settings(&redis))
        .await
        .expect("start-up does not need redis");
    let (addr, metrics_addr) = (app.grpc_addr(), app.metrics_addr());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(app.run_until_stopped(async {
        let _ = stopped.await;
    }));
    let up = format!(
        "sticky_routing_redis_up{{node=\"127.0.0.1:{}\"}}",
        redis.port
    );

    scrape_until(metrics_addr, "down", |text| {
        assert_ne!(sample(text, &up), Some(1.0), "a dead node is up:\n{text}");
        sample(text, &up) == Some(0.0)
    })
    .await;

    let channel = tonic::transport::Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut api = StickyRoutingClient::new(channel);
    for _ in 0..3 {
        let refused = api.get_pin(pin_request("c1", &[])).await.unwrap_err();
        assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");
    }
    // Every call timed was a failure, and no other failed: the count of
    // failures is the count of calls (scraped again should a readiness
    // ping land between its time and its failure being counted).
    let text = scrape_until(metrics_addr, "every call counted as failed", |text| {
        let calls: f64 = samples(text, "sticky_routing_redis_command_duration_seconds_count")
            .iter()
            .map(|(_, count)| count)
            .sum();
        let failed = sample(
            text,
            "sticky_routing_redis_errors_total{kind=\"no_connection\"}",
        );
        failed == Some(calls)
    })
    .await;
    assert_eq!(redis_calls(&text, "read_combos"), Some(3.0), "{text}");
    assert!(redis_calls(&text, "ping").is_some(), "{text}");
    assert_eq!(
        samples(&text, "sticky_routing_redis_errors_total").len(),
        1,
        "{text}"
    );

    redis.restart();
    scrape_until(metrics_addr, "up again", |text| {
        sample(text, &up) == Some(1.0)
    })
    .await;
    let _ = stop.send(());
    server.await.unwrap().unwrap();
}

/// On Cluster each primary is a node of its own on `/metrics`: one
/// `redis_up` series per primary, replicas aside, each 1.
#[tokio::test]
async fn on_cluster_redis_up_has_one_series_per_primary() {
    let app = spawn_app_on(Topology::Cluster, |_| {}).await;
    let mut primaries = app.redis.data_ports();
    primaries.sort_unstable();
    let text = scrape_until(app.metrics_addr, "every primary up", |text| {
        let up = samples(text, "sticky_routing_redis_up");
        up.len() >= primaries.len() && up.iter().all(|(_, value)| *value == 1.0)
    })
    .await;
    let mut nodes: Vec<u16> = samples(&text, "sticky_routing_redis_up")
        .iter()
        .map(|(labels, _)| {
            let node = labels.strip_prefix("node=\"").unwrap();
            node.trim_end_matches('"')
                .rsplit_once(':')
                .unwrap()
                .1
                .parse()
                .unwrap()
        })
        .collect();
    nodes.sort_unstable();
    assert_eq!(nodes, primaries, "{text}");
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
