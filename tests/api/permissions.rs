//! A Redis user narrower than `deploy/redis-acl.txt`: the service finds out
//! before a write does (NOT_SERVING, the log names the permission), refuses
//! writes with nothing written, leaves no key without a TTL when a
//! permission goes away under it, and serves again once the ACL is fixed.
//! The import checks the same before its first row.

use std::process::Stdio;
use std::time::Duration;

use rstest::rstest;
use sticky_routing::transport::pb;
use sticky_routing::transport::pb::sticky_routing_client::StickyRoutingClient;
use tonic::Code;
use tonic_health::pb::health_client::HealthClient;

use crate::support::bulk::{HEADER, Target, file_with};
use crate::support::*;

/// `ACL SETUSER` for the service's user on every node that holds data.
async fn set_service_user(app: &TestApp, rules: &[&str]) {
    let mut args = vec!["SETUSER", SERVICE_USER];
    args.extend_from_slice(rules);
    let _: Vec<String> = app.on_every_primary("ACL", args).await;
}

/// The reads the write scripts make first (HMGET, EXISTS, HLEN), as Redis
/// counts them on every node: the permission probe makes none, so they
/// tell whether a write's script ran.
async fn script_reads(app: &TestApp) -> u64 {
    let infos: Vec<String> = app.on_every_primary("INFO", vec!["commandstats"]).await;
    infos
        .iter()
        .flat_map(|info| info.lines())
        .filter_map(|line| {
            let (name, stats) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = stats.strip_prefix("calls=")?.split(',').next()?;
            ["hmget", "exists", "hlen"]
                .contains(&name)
                .then(|| calls.parse::<u64>().ok())?
        })
        .sum()
}

fn new_customer(customer: &str) -> pb::RecordOutcomeRequest {
    outcome("m1", customer, "PAYPAL", pb::Outcome::Success)
}

#[rstest]
#[case::single(Topology::Single)]
#[case::cluster(Topology::Cluster)]
#[tokio::test]
async fn a_revoked_expire_refuses_new_keys_and_a_fixed_acl_serves_again(
    #[case] topology: Topology,
) {
    let app = spawn_app_on(topology, |_| {}).await;
    app.success("c1", "PAYPAL").await;

    set_service_user(&app, &["-expire"]).await;
    // Before the next readiness check has probed, the script's own check
    // refuses; after it, the service does without sending: the same answer.
    for customer in ["c2", "c3"] {
        let refused = app.record(new_customer(customer)).await.unwrap_err();
        assert_eq!(refused.code(), Code::Unavailable, "{refused:?}");
        assert!(
            refused.message().contains("permission"),
            "{}",
            refused.message()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    app.wait_until_ready(false).await;
    let before = script_reads(&app).await;
    let refused = app.record(new_customer("c4")).await.unwrap_err();
    assert_eq!(refused.code(), Code::Unavailable);
    assert!(
        refused.message().contains("lacks a permission"),
        "{}",
        refused.message()
    );
    assert_eq!(
        script_reads(&app).await,
        before,
        "a write's script ran while the user lacks a permission"
    );
    assert_eq!(app.customer_keys().await.len(), 1, "no key was created");
    app.assert_every_key_has_a_ttl().await;
    // Reads need no write permission.
    assert_eq!(
        app.pin(pin_request("c1", &[])).await.unwrap().connector,
        "PAYPAL"
    );

    set_service_user(&app, &["+expire"]).await;
    app.wait_until_ready(true).await;
    assert_eq!(app.success("c4", "PAYPAL").await.net_count, 1);
    app.assert_every_key_has_a_ttl().await;
}

#[tokio::test]
async fn a_permission_revoked_mid_traffic_never_leaves_a_key_without_a_ttl() {
    let app = spawn_app().await;
    let writes = {
        let app_api = app.api.clone();
        tokio::spawn(async move {
            let mut codes = Vec::new();
            // Past the next readiness check, so that both the scripts'
            // check and the probe's refusal are met.
            let until = tokio::time::Instant::now() + Duration::from_millis(1500);
            for i in 0.. {
                if tokio::time::Instant::now() > until {
                    break;
                }
                let mut api = app_api.clone();
                // New customers, and one that exists.
                let request = new_customer(&format!("c{}", if i % 2 == 0 { i } else { 1 }));
                let code = match api.record_outcome(request).await {
                    Ok(_) => Code::Ok,
                    Err(status) => status.code(),
                };
                codes.push(code);
            }
            codes
        })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    // Without +expire, a new customer would be written and left without a
    // TTL, and a known one is stopped after its count (its old TTL stays).
    set_service_user(&app, &["-expire"]).await;
    let codes = writes.await.unwrap();
    assert!(
        codes
            .iter()
            .all(|code| matches!(code, Code::Ok | Code::Unavailable | Code::Unknown)),
        "{codes:?}"
    );
    assert!(codes.contains(&Code::Unavailable), "{codes:?}");
    app.assert_every_key_has_a_ttl().await;
}

#[tokio::test]
async fn the_log_names_what_the_user_lacks_and_readiness_waits_for_it() {
    let redis = RedisServer::start();
    redis_cli(redis.port, &["ACL", "SETUSER", SERVICE_USER, "-expire"]);
    let (mut child, channel) = start_binary_listening(redis.url(), &[], Stdio::piped()).await;
    let stderr = drain(child.stderr.take());
    let health = HealthClient::new(channel.clone());
    let mut api = StickyRoutingClient::new(channel);

    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_ne!(health_status(&health, API).await, SERVING);
    let refused = api.record_outcome(new_customer("c1")).await.unwrap_err();
    assert_eq!(refused.code(), Code::Unavailable, "{refused:?}");
    assert_eq!(redis_cli(redis.port, &["DBSIZE"]).trim(), "0");

    redis_cli(redis.port, &["ACL", "SETUSER", SERVICE_USER, "+expire"]);
    wait_for_readiness(&health, true).await;
    api.record_outcome(new_customer("c1")).await.unwrap();

    send_to_child(&child, "-TERM");
    child.wait().await.unwrap();
    let log = stderr.await.unwrap();
    assert!(
        log.contains("the Redis user lacks +expire on ~sticky_gw_*"),
        "{log}"
    );
    assert!(
        log.contains("every permission the service needs again"),
        "{log}"
    );
}

#[tokio::test]
async fn import_with_a_user_lacking_a_permission_stops_before_the_first_row() {
    let target = Target::start(Topology::Single).await;
    let port = target.redis.data_ports()[0];
    redis_cli(port, &["ACL", "SETUSER", SERVICE_USER, "-hincrby"]);
    let (_dir, path) = file_with(
        "history.csv",
        &format!("{HEADER}m1,c1,card,credit,stripe,success,1,\n"),
    );

    let ran = target.import(&[&path, "--no-admission"], &[]).await;

    assert_eq!(ran.code, 2, "{}", ran.stderr);
    assert!(
        ran.stderr.contains("lacks +hincrby on ~sticky_gw_*"),
        "{}",
        ran.stderr
    );
    assert_eq!(redis_cli(port, &["DBSIZE"]).trim(), "0");
}

#[tokio::test]
async fn a_node_that_comes_back_after_an_outage_is_probed_again() {
    let app = spawn_app().await;
    // Revoked while no call meets it: nothing makes the service look again
    // for 30 s...
    set_service_user(&app, &["-expire"]).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(app.health_status(API).await, SERVING);
    // ...but a node that stopped answering may come back with another ACL.
    app.redis.signal("-STOP");
    app.wait_until_ready(false).await;
    app.redis.signal("-CONT");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_ne!(
        app.health_status(API).await,
        SERVING,
        "the first check that reached Redis again did not probe"
    );
    let refused = app.record(new_customer("c1")).await.unwrap_err();
    assert_eq!(refused.code(), Code::Unavailable, "{refused:?}");
}
