//! The service as its own least-privilege Redis user: every RPC works with
//! exactly the rules of `deploy/redis-acl.txt`, on a single node and on
//! Cluster, and Redis refuses nothing it sends.

use fred::prelude::Value;
use rstest::rstest;

use crate::support::*;

#[rstest]
#[case::single(Topology::Single)]
#[case::cluster(Topology::Cluster)]
#[tokio::test]
async fn every_rpc_works_within_the_documented_acl(#[case] topology: Topology) {
    let app = spawn_app_on(topology, |_| {}).await;
    // New customer (admission), existing customer, forgotten scripts (EVAL
    // and reload), failure to zero, every read, and forget.
    app.success("c1", "GIGADAT").await;
    app.success("c1", "GIGADAT").await;
    app.flush_scripts().await;
    assert_eq!(app.failure("c1", "GIGADAT").await.net_count, 1);
    assert_eq!(
        app.pin(pin_request("c1", &[])).await.unwrap().connector,
        "GIGADAT"
    );
    let habits = app.habits("c1").await;
    assert_eq!(habits.habits.len(), 1);
    app.failure("c1", "GIGADAT").await;
    app.success("c2", "PAYPAL").await;
    let forgotten = app.forget("c2").await;
    assert!(forgotten.existed);

    let clients: Vec<String> = app.on_every_primary("CLIENT", vec!["LIST"]).await;
    assert!(
        clients
            .iter()
            .any(|list| list.contains(&format!("user={SERVICE_USER}"))),
        "the service is not logged in as {SERVICE_USER}: {clients:?}"
    );
    let denials: Vec<Vec<Value>> = app.on_every_primary("ACL", vec!["LOG"]).await;
    assert!(
        denials.iter().all(Vec::is_empty),
        "Redis refused some of the service's commands: {denials:?}"
    );
}
