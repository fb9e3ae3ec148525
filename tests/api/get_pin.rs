//! GetPin against real Redis: candidates, both tie-breaks, the eligible
//! list, the minimum count, and that reading changes nothing.

use fred::prelude::KeysInterface;

use rstest::rstest;

use crate::support::*;

async fn counts(app: &TestApp, customer: &str, pairs: &[(&str, usize)]) {
    for (connector, times) in pairs {
        for _ in 0..*times {
            app.success(customer, connector).await;
        }
    }
}

#[rstest]
#[case::single(Topology::Single)]
#[case::cluster(Topology::Cluster)]
#[tokio::test]
async fn no_hash_means_no_pin(#[case] topology: Topology) {
    let app = spawn_app_on(topology, |_| {}).await;
    let pin = app.pin(pin_request("c1", &[])).await.unwrap();
    assert!(!pin.pinned);
    assert_eq!((pin.connector.as_str(), pin.net_count), ("", 0));
    assert!(pin.candidates.is_empty());
    assert!(app.keys().await.is_empty(), "reading creates nothing");
}

#[rstest]
#[case::single(Topology::Single)]
#[case::cluster(Topology::Cluster)]
#[tokio::test]
async fn the_highest_count_of_the_method_is_pinned(#[case] topology: Topology) {
    let app = spawn_app_on(topology, |_| {}).await;
    counts(&app, "c1", &[("GIGADAT", 3), ("LOONIO", 2)]).await;
    let mut other = outcome(
        "m1",
        "c1",
        "ADYEN",
        sticky_routing::transport::pb::Outcome::Success,
    );
    other.payment_method = "card".into();
    for _ in 0..5 {
        app.record(other.clone()).await.unwrap();
    }
    let pin = app.pin(pin_request("c1", &[])).await.unwrap();
    assert!(pin.pinned);
    assert_eq!((pin.connector.as_str(), pin.net_count), ("GIGADAT", 3));
    assert_eq!(ranked(&pin), [("GIGADAT", 3), ("LOONIO", 2)]);
}

#[rstest]
#[case::single(Topology::Single)]
#[case::cluster(Topology::Cluster)]
#[tokio::test]
async fn method_and_type_match_case_insensitively(#[case] topology: Topology) {
    let app = spawn_app_on(topology, |_| {}).await;
    counts(&app, "c1", &[("GIGADAT", 1)]).await;
    let mut req = pin_request("c1", &[]);
    req.payment_method = "INTERAC".into();
    req.payment_method_type = " Rtp ".into();
    assert_eq!(app.pin(req).await.unwrap().connector, "GIGADAT");
}

#[rstest]
#[case::single(Topology::Single)]
#[case::cluster(Topology::Cluster)]
#[tokio::test]
async fn ties_without_a_list_go_to_the_bytewise_smallest_connector(#[case] topology: Topology) {
    let app = spawn_app_on(topology, |_| {}).await;
    counts(&app, "c1", &[("b", 2), ("a", 2), ("B", 2)]).await;
    let pin = app.pin(pin_request("c1", &[])).await.unwrap();
    assert_eq!(ranked(&pin), [("B", 2), ("a", 2), ("b", 2)]);
    assert_eq!(pin.connector, "B");
}

#[rstest]
#[case::single(Topology::Single)]
#[case::cluster(Topology::Cluster)]
#[tokio::test]
async fn ties_with_a_list_go_to_the_connector_listed_first(#[case] topology: Topology) {
    let app = spawn_app_on(topology, |_| {}).await;
    counts(&app, "c1", &[("a", 2), ("b", 2), ("c", 1)]).await;
    let pin = app.pin(pin_request("c1", &["c", "b", "a"])).await.unwrap();
    assert_eq!(ranked(&pin), [("b", 2), ("a", 2), ("c", 1)]);
    assert_eq!(pin.connector, "b");
}

#[rstest]
#[case::single(Topology::Single)]
#[case::cluster(Topology::Cluster)]
#[tokio::test]
async fn the_list_restricts_candidates_exactly_and_case_sensitively(#[case] topology: Topology) {
    let app = spawn_app_on(topology, |_| {}).await;
    counts(&app, "c1", &[("GIGADAT", 5), ("LOONIO", 1)]).await;
    let pin = app
        .pin(pin_request("c1", &["gigadat", "LOONIO"]))
        .await
        .unwrap();
    assert_eq!(ranked(&pin), [("LOONIO", 1)]);
    let pin = app.pin(pin_request("c1", &["PAYPAL"])).await.unwrap();
    assert!(!pin.pinned && pin.connector.is_empty());
}

#[rstest]
#[case::single(Topology::Single)]
#[case::cluster(Topology::Cluster)]
#[tokio::test]
async fn counts_below_the_minimum_do_not_qualify(#[case] topology: Topology) {
    let app = spawn_app_on(topology, |s| s.rules.min_pin_count = 3).await;
    counts(&app, "c1", &[("GIGADAT", 2), ("LOONIO", 3)]).await;
    assert_eq!(
        ranked(&app.pin(pin_request("c1", &[])).await.unwrap()),
        [("LOONIO", 3)]
    );
    app.failure("c1", "LOONIO").await;
    assert!(!app.pin(pin_request("c1", &[])).await.unwrap().pinned);
}

#[rstest]
#[case::single(Topology::Single)]
#[case::cluster(Topology::Cluster)]
#[tokio::test]
async fn a_habit_failed_back_to_zero_is_no_longer_pinned(#[case] topology: Topology) {
    let app = spawn_app_on(topology, |_| {}).await;
    counts(&app, "c1", &[("GIGADAT", 1)]).await;
    app.failure("c1", "GIGADAT").await;
    assert!(!app.pin(pin_request("c1", &[])).await.unwrap().pinned);
}

#[rstest]
#[case::single(Topology::Single)]
#[case::cluster(Topology::Cluster)]
#[tokio::test]
async fn reading_never_changes_state(#[case] topology: Topology) {
    let app = spawn_app_on(topology, |_| {}).await;
    counts(&app, "c1", &[("GIGADAT", 2)]).await;
    let _: () = app
        .inspect
        .expire("sticky_gw_m1_c1", 100, None)
        .await
        .unwrap();
    let before = app.keys().await;
    for _ in 0..3 {
        app.pin(pin_request("c1", &[])).await.unwrap();
        app.pin(pin_request("someone-else", &[])).await.unwrap();
    }
    assert_eq!(app.keys().await, before);
    assert!(
        app.ttl("sticky_gw_m1_c1").await <= 100,
        "a read does not slide the TTL"
    );
}

#[rstest]
#[case::single(Topology::Single)]
#[case::cluster(Topology::Cluster)]
#[tokio::test]
async fn a_pin_costs_one_hgetall(#[case] topology: Topology) {
    let app = spawn_app_on(topology, |_| {}).await;
    counts(&app, "c1", &[("GIGADAT", 1)]).await;
    let before = app.command_calls().await;
    app.pin(pin_request("c1", &["GIGADAT"])).await.unwrap();
    assert_eq!(
        app.commands_since(&before).await,
        [("hgetall".to_string(), 1)]
    );
}
