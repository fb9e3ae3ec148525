//! Shutdown and start-up of the real binary: SIGTERM turns every health
//! status NOT_SERVING, drains in-flight calls and exits 0, bad configuration
//! stops it at start naming the variables, and the in-process drain returns
//! Ok.

use std::process::Stdio;
use std::time::{Duration, Instant};

use sticky_routing::transport::pb;
use sticky_routing::transport::pb::sticky_routing_client::StickyRoutingClient;
use tokio::process::Child;
use tonic::transport::Channel;
use tonic::{Code, Streaming};
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};

use crate::support::*;

/// A running binary on free ports against `redis`, and a channel to it,
/// once both health statuses are SERVING.
async fn start_binary(redis: &RedisServer, extra: &[(&str, String)]) -> (Child, Channel) {
    let (child, channel) = start_binary_listening(redis.url(), extra, Stdio::null()).await;
    let health = HealthClient::new(channel.clone());
    let deadline = Instant::now() + Duration::from_secs(15);
    while health_status(&health, "").await != SERVING
        || health_status(&health, API).await != SERVING
    {
        assert!(Instant::now() < deadline, "the binary never became SERVING");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (child, channel)
}

fn sigterm(child: &Child) {
    test_support::signal::send_to_child(child, "-TERM");
}

/// Waits for the child to exit and asserts code 0 within `within`.
async fn assert_exits_cleanly(child: &mut Child, within: Duration) {
    let status = tokio::time::timeout(within, child.wait())
        .await
        .unwrap_or_else(|_| panic!("the process did not exit within {within:?} of SIGTERM"))
        .unwrap();
    assert_eq!(status.code(), Some(0), "{status:?}");
}

#[tokio::test]
async fn sigterm_stops_the_binary_with_exit_code_0() {
    let redis = RedisServer::start();
    let (mut child, channel) = start_binary(&redis, &[]).await;
    let mut api = StickyRoutingClient::new(channel);
    let recorded = api
        .record_outcome(outcome("m1", "c1", "GIGADAT", pb::Outcome::Success))
        .await
        .unwrap();
    assert_eq!(recorded.into_inner().result, APPLIED);
    sigterm(&child);
    assert_exits_cleanly(&mut child, Duration::from_secs(5)).await;
}

/// A health Watch of `service`, past its first answer, which must be SERVING.
async fn watch_serving(
    health: &HealthClient<Channel>,
    service: &str,
) -> Streaming<HealthCheckResponse> {
    let request = HealthCheckRequest {
        service: service.into(),
    };
    let mut watch = health.clone().watch(request).await.unwrap().into_inner();
    let first = watch.message().await.unwrap().expect("a first status");
    assert_eq!(first.status, SERVING, "{service:?} before SIGTERM");
    watch
}

/// Reads `watch` until it reports NOT_SERVING, for at most 5 s.
async fn until_not_serving(service: &str, watch: &mut Streaming<HealthCheckResponse>) {
    let within = Duration::from_secs(5);
    let reported = async {
        while let Some(update) = watch.message().await.unwrap() {
            if update.status == NOT_SERVING {
                return;
            }
        }
        panic!("the watch of {service:?} ended before NOT_SERVING");
    };
    tokio::time::timeout(within, reported)
        .await
        .unwrap_or_else(|_| panic!("{service:?} was not NOT_SERVING {within:?} after SIGTERM"));
}

/// Kubelet and linkerd stop sending traffic on NOT_SERVING, so the drain
/// must report it for the process (`""`) and for the API while the process
/// still runs. Redis stays up, so the API's status can only turn for the
/// drain. The open Watch streams are calls that never finish by themselves:
/// once they have reported NOT_SERVING they must end cleanly, not hold the
/// drain open until the grace period runs out.
#[tokio::test]
async fn sigterm_turns_every_health_status_not_serving_before_the_process_exits() {
    let redis = RedisServer::start();
    let (mut child, channel) = start_binary(&redis, &[]).await;
    let health = HealthClient::new(channel);
    let mut process = watch_serving(&health, "").await;
    let mut api = watch_serving(&health, API).await;
    sigterm(&child);
    until_not_serving("", &mut process).await;
    until_not_serving(API, &mut api).await;
    assert_exits_cleanly(&mut child, Duration::from_secs(5)).await;
    for (service, mut watch) in [("", process), (API, api)] {
        let ended = async {
            while let Some(update) = watch.message().await.unwrap() {
                assert_eq!(update.status, NOT_SERVING, "{service:?} after the drain");
            }
        };
        tokio::time::timeout(Duration::from_secs(1), ended)
            .await
            .unwrap_or_else(|_| panic!("the watch of {service:?} did not end"));
    }
}

#[tokio::test]
async fn in_flight_calls_get_their_answer_before_the_process_exits() {
    let redis = RedisServer::start();
    let timeout = [("STICKY_ROUTING_REDIS_TIMEOUT", "1500ms".to_owned())];
    let (mut child, channel) = start_binary(&redis, &timeout).await;
    let mut api = StickyRoutingClient::new(channel);
    redis.signal("-STOP");
    let started = Instant::now();
    let call = tokio::spawn(async move {
        api.record_outcome(outcome("m1", "c1", "GIGADAT", pb::Outcome::Success))
            .await
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    sigterm(&child);
    let result = tokio::time::timeout(Duration::from_secs(10), call)
        .await
        .expect("the call hung")
        .unwrap();
    let status = result.expect_err("redis is frozen: the call cannot succeed");
    // The write reached the frozen server: it may have been applied.
    assert_eq!(status.code(), Code::Unknown, "{status:?}");
    assert!(
        status.message().contains("Redis"),
        "not the service's answer but a transport error: {status:?}"
    );
    assert!(
        started.elapsed() >= Duration::from_millis(1_000),
        "answered before the redis timeout: {status:?}"
    );
    assert_exits_cleanly(&mut child, Duration::from_secs(8)).await;
    redis.signal("-CONT");
}

#[tokio::test]
async fn bad_configuration_stops_the_binary_naming_each_variable() {
    let vars = [
        ("STICKY_ROUTING_KEY_TTL", "soon".to_owned()),
        ("STICKY_ROUTING_MAX_COMBOS_PER_CUSTOMER", "0".to_owned()),
        (
            "STICKY_ROUTING_LISTEN_ADDR",
            format!("127.0.0.1:{}", free_port()),
        ),
        (
            "STICKY_ROUTING_METRICS_ADDR",
            format!("127.0.0.1:{}", free_port()),
        ),
        (
            "STICKY_ROUTING_REDIS_URL",
            format!("redis://127.0.0.1:{}", free_port()),
        ),
    ];
    let started = Instant::now();
    let output = service_binary(&vars).output();
    let output = tokio::time::timeout(Duration::from_secs(10), output)
        .await
        .expect("the binary hung")
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
    assert!(!output.status.success(), "{:?}", output.status);
    let stderr = String::from_utf8_lossy(&output.stderr);
    for name in [
        "STICKY_ROUTING_KEY_TTL",
        "STICKY_ROUTING_MAX_COMBOS_PER_CUSTOMER",
    ] {
        assert!(
            stderr.contains(name),
            "{name} missing from stderr:\n{stderr}"
        );
    }
}

#[tokio::test]
async fn the_in_process_drain_returns_ok() {
    let mut app = spawn_app().await;
    app.success("c1", "GIGADAT").await;
    let stopped = tokio::time::timeout(Duration::from_secs(10), app.stop())
        .await
        .expect("stop hung");
    assert!(stopped.is_ok(), "{stopped:?}");
    assert!(
        app.record(outcome("m1", "c2", "GIGADAT", pb::Outcome::Success))
            .await
            .is_err()
    );
}

/// The service's connections to Redis, as Redis lists them.
async fn service_connections(app: &TestApp) -> usize {
    let lists: Vec<String> = app.on_every_primary("CLIENT", vec!["LIST"]).await;
    let user = format!(" user={SERVICE_USER} ");
    lists
        .iter()
        .flat_map(|list| list.lines())
        .filter(|line| line.contains(&user))
        .count()
}

#[tokio::test]
async fn stopping_closes_every_connection_to_redis() {
    let mut app = spawn_app().await;
    app.success("c1", "GIGADAT").await;
    assert!(
        service_connections(&app).await > 0,
        "the service never connected"
    );
    app.stop().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let open = service_connections(&app).await;
        if open == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{open} connections still open after the drain"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
