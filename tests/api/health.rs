//! Health and Redis trouble: liveness and Kubernetes readiness ("") stay
//! SERVING, the API's status follows Redis (on Cluster, every primary), and
//! calls fail fast (UNAVAILABLE / DEADLINE_EXCEEDED) while Redis is down or
//! frozen, then recover without a restart.

use std::time::{Duration, Instant};

use fred::util::redis_keyslot;
use rstest::rstest;
use sticky_routing::storage::RedisStore;
use sticky_routing::transport::pb;
use sticky_routing::transport::pb::sticky_routing_client::StickyRoutingClient;
use tokio_util::task::TaskTracker;
use tonic::{Code, Status};

use crate::support::*;
use test_support::redis_cluster::owned_slots;
use test_support::redis_server::redis_cli;
use test_support::repo::deploy_setting;

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

/// A frozen primary (SIGSTOP: it keeps its connections and answers nothing,
/// like a Redis stuck on a slow command) turns the API's status NOT_SERVING
/// within one Redis timeout of the next check, and keeps it there for as
/// long as it hangs; liveness stays SERVING, and calls for keys on the other
/// shards keep answering at once the whole time. Its replica is told not to
/// take over, so the primary hangs for longer than fred's unresponsive
/// timeout (2 s), after which fred's cluster client reconnected the whole
/// client and every shard failed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_cluster_primary_turns_the_api_status_off_and_spares_the_other_shards() {
    let redis_timeout = Duration::from_millis(250);
    let hung_for = Duration::from_secs(4);
    let mut app = spawn_app_on(Topology::Cluster, |s| {
        s.redis.command_timeout = redis_timeout;
    })
    .await;
    let cluster = app.redis.cluster();
    let victim = cluster.primaries()[0];
    let heir = cluster.replica_of(victim);
    redis_cli(
        heir,
        &["config", "set", "cluster-replica-no-failover", "yes"],
    );
    let victim_slots = owned_slots(victim);
    let elsewhere: Vec<String> = (0..100)
        .map(|i| format!("c{i}"))
        .filter(|c| {
            let slot = redis_keyslot(format!("sticky_gw_m1_{c}").as_bytes());
            !victim_slots.iter().any(|range| range.contains(&slot))
        })
        .take(6)
        .collect();
    for customer in &elsewhere {
        app.success(customer, "GIGADAT").await;
    }

    app.redis.cluster().node(victim).signal("-STOP");
    let frozen = Instant::now();
    app.wait_until_ready(false).await;
    // The next check starts within one interval (500 ms) and gives up after
    // the Redis timeout; the rest is slack for a busy machine.
    let limit = Duration::from_millis(500) + redis_timeout + Duration::from_millis(500);
    assert!(
        frozen.elapsed() < limit,
        "a hung primary was noticed after {:?}",
        frozen.elapsed()
    );
    while frozen.elapsed() < hung_for {
        assert_eq!(
            app.health_status(API).await,
            NOT_SERVING,
            "{API} turned SERVING {:?} into the hang",
            frozen.elapsed()
        );
        assert_eq!(
            app.health_status("").await,
            SERVING,
            "liveness followed redis"
        );
        for customer in &elsewhere {
            let (answer, took) = timed(app.pin(pin_request(customer, &[]))).await;
            let answer = answer.unwrap_or_else(|s| {
                panic!(
                    "a healthy shard's GetPin failed {:?} into the hang: {s:?}",
                    frozen.elapsed()
                )
            });
            assert_eq!(answer.connector, "GIGADAT");
            assert!(
                took < redis_timeout,
                "a healthy shard's GetPin took {took:?}"
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    app.redis.cluster().node(victim).signal("-CONT");
    app.wait_until_ready(true).await;
}

/// The connection problem the store keeps for the log ("redis does not
/// answer … connection=…") is set while Redis is unreachable and cleared by
/// the first check that passes again: a recovered Redis leaves no stale
/// reason behind. On Cluster, a killed primary's problem clears once its
/// replica is promoted.
#[rstest]
#[case::single(Topology::Single)]
#[case::cluster(Topology::Cluster)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stored_connection_problem_clears_once_redis_answers_again(#[case] topology: Topology) {
    let mut redis = TestRedis::start(topology);
    let settings = test_settings_for(redis.url());
    let tasks = TaskTracker::new();
    let store = RedisStore::connect(
        &settings.redis,
        &tasks,
        std::sync::Arc::new(sticky_routing::telemetry::Metrics::new().unwrap()),
    )
    .unwrap();
    assert!(store.wait_connected(Duration::from_secs(10)).await);
    let check = async || {
        store
            .ping(Instant::now() + Duration::from_secs(1))
            .await
            .is_ok()
    };
    assert!(check().await);
    assert_eq!(store.connection_problem(), None);

    match &mut redis {
        TestRedis::Single(server) => server.stop(),
        TestRedis::Cluster(cluster) => {
            let victim = cluster.primaries()[0];
            cluster.node(victim).stop();
        }
        TestRedis::Sentinel(_) => unreachable!(),
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while check().await || store.connection_problem().is_none() {
        assert!(
            Instant::now() < deadline,
            "no connection problem was stored"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    if let TestRedis::Single(server) = &mut redis {
        server.restart();
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while !check().await {
        assert!(Instant::now() < deadline, "redis never answered again");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(check().await);
    assert_eq!(
        store.connection_problem(),
        None,
        "the problem outlived the recovery"
    );
    store.quit().await;
    tasks.close();
    tasks.wait().await;
}

/// Kubernetes readiness follows the process (""), never Redis, so that a
/// Redis or shard outage never takes every pod out of rotation at once; and
/// one slow check (a pod starved of CPU for a moment) must not eject it.
#[test]
fn the_readiness_probe_checks_the_process_and_tolerates_one_slow_check() {
    let manifest = include_str!("../../deploy/deployment.yaml");
    let probe = yaml_block(manifest, "readinessProbe:");
    let field = |name: &str| -> String {
        probe
            .iter()
            .find_map(|line| line.strip_prefix(&format!("{name}:")))
            .unwrap_or_else(|| panic!("readinessProbe has no {name}"))
            .trim()
            .to_owned()
    };
    assert_eq!(
        field("service"),
        "\"\"",
        "readiness must check service \"\""
    );
    let failure_threshold: u32 = field("failureThreshold").parse().unwrap();
    assert!(
        failure_threshold >= 2,
        "one slow check ejects the pod (failureThreshold {failure_threshold})"
    );
    let timeout: u32 = field("timeoutSeconds").parse().unwrap();
    assert!(
        timeout >= 2,
        "timeoutSeconds {timeout} leaves no room for a slow check"
    );
}

/// The kubelet's gRPC probes do not speak TLS, so every probe targets the
/// plaintext health listener the ConfigMap sets, never the API port.
#[test]
fn every_probe_targets_the_plaintext_health_listener() {
    let manifest = include_str!("../../deploy/deployment.yaml");
    let health_port = deploy_setting("STICKY_ROUTING_HEALTH_LISTEN_ADDR")
        .expect("deploy/config.env sets the health listener")
        .rsplit(':')
        .next()
        .unwrap()
        .to_owned();
    for probe in ["startupProbe:", "livenessProbe:", "readinessProbe:"] {
        let port = yaml_block(manifest, probe)
            .iter()
            .find_map(|line| line.strip_prefix("port:"))
            .unwrap_or_else(|| panic!("{probe} has no port"))
            .trim()
            .to_owned();
        assert_eq!(
            port, health_port,
            "{probe} does not probe the health listener"
        );
    }
}

/// The lines under `header` in a YAML text, trimmed and without comments.
fn yaml_block<'a>(yaml: &'a str, header: &str) -> Vec<&'a str> {
    let mut lines = yaml.lines().skip_while(|line| line.trim() != header);
    let indent = |line: &str| line.len() - line.trim_start().len();
    let head = indent(lines.next().unwrap_or_else(|| panic!("no {header}")));
    lines
        .map(|line| line.split('#').next().unwrap_or(""))
        .filter(|line| !line.trim().is_empty())
        .take_while(|line| indent(line) > head)
        .map(str::trim)
        .collect()
}
