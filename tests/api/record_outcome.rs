//! RecordOutcome against real Redis: the success and failure rules, the
//! sliding TTL, the combo cap and the key layout.

use fred::prelude::{HashesInterface, KeysInterface};
use sticky_routing::transport::pb;

use rstest::rstest;

use crate::support::*;

const KEY: &str = "sticky_gw_m1_c1";

async fn hash(app: &TestApp, key: &str) -> Vec<(String, i64)> {
    let map: std::collections::HashMap<String, i64> = app.inspect.hgetall(key).await.unwrap();
    let mut pairs: Vec<_> = map.into_iter().collect();
    pairs.sort();
    pairs
}

#[rstest]
#[case::single(Topology::Single)]
#[case::cluster(Topology::Cluster)]
#[tokio::test]
async fn a_first_success_creates_the_spec_layout_with_a_ttl(#[case] topology: Topology) {
    let app = spawn_app_on(topology, |_| {}).await;
    let reply = app.success("c1", "GIGADAT").await;
    assert_eq!(
        (reply.result, reply.net_count, reply.pruned),
        (APPLIED, 1, 0)
    );
    assert_eq!(app.keys().await, ["sticky_adm_m1", KEY]);
    assert_eq!(
        hash(&app, KEY).await,
        [("INTERAC:RTP:GIGADAT".to_string(), 1)]
    );
    let ttl = app.ttl(KEY).await;
    let key_ttl = app.settings.rules.key_ttl.as_secs() as i64;
    assert!(ttl > key_ttl - 5 && ttl <= key_ttl, "ttl {ttl}");
    app.assert_every_key_has_a_ttl().await;
}

#[rstest]
#[case::single(Topology::Single)]
#[case::cluster(Topology::Cluster)]
#[tokio::test]
async fn successes_add_one_and_rearm_the_ttl(#[case] topology: Topology) {
    let app = spawn_app_on(topology, |_| {}).await;
    app.success("c1", "GIGADAT").await;
    let _: () = app.inspect.expire(KEY, 100, None).await.unwrap();
    let reply = app.success("c1", "GIGADAT").await;
    assert_eq!((reply.result, reply.net_count), (APPLIED, 2));
    assert!(app.ttl(KEY).await > 100, "the TTL slides on every write");
}

#[rstest]
#[case::single(Topology::Single)]
#[case::cluster(Topology::Cluster)]
#[tokio::test]
async fn payment_method_and_type_are_upper_cased_and_the_connector_kept(
    #[case] topology: Topology,
) {
    let app = spawn_app_on(topology, |_| {}).await;
    let mut req = outcome("m1", "c1", "Giga:Dat", pb::Outcome::Success);
    req.payment_method = " Interac ".into();
    req.payment_method_type = "rTp".into();
    app.record(req).await.unwrap();
    assert_eq!(
        hash(&app, KEY).await,
        [("INTERAC:RTP:Giga:Dat".to_string(), 1)]
    );
}

#[rstest]
#[case::single(Topology::Single)]
#[case::cluster(Topology::Cluster)]
#[tokio::test]
async fn ids_with_underscores_and_reserved_characters_are_escaped(#[case] topology: Topology) {
    let app = spawn_app_on(topology, |_| {}).await;
    app.record(outcome(
        "merchant_123",
        "cus_abc",
        "X",
        pb::Outcome::Success,
    ))
    .await
    .unwrap();
    app.record(outcome(
        "merchant",
        "123_cus_abc",
        "X",
        pb::Outcome::Success,
    ))
    .await
    .unwrap();
    app.record(outcome("m{1}", "c%1", "X", pb::Outcome::Success))
        .await
        .unwrap();
    assert_eq!(
        app.customer_keys().await,
        [
            "sticky_gw_m%7B1%7D_c%251",
            "sticky_gw_merchant%5F123_cus_abc",
            "sticky_gw_merchant_123_cus_abc"
        ]
    );
}

#[rstest]
#[case::single(Topology::Single)]
#[case::cluster(Topology::Cluster)]
#[tokio::test]
async fn a_failure_without_a_hash_writes_nothing(#[case] topology: Topology) {
    let app = spawn_app_on(topology, |_| {}).await;
    let reply = app.failure("c1", "GIGADAT").await;
    assert_eq!(
        (reply.result, reply.net_count, reply.pruned),
        (IGNORED_NO_HABIT, 0, 0)
    );
    assert!(app.keys().await.is_empty());
}

#[rstest]
#[case::single(Topology::Single)]
#[case::cluster(Topology::Cluster)]
#[tokio::test]
async fn a_failure_on_an_absent_field_leaves_the_hash_and_its_ttl_alone(
    #[case] topology: Topology,
) {
    let app = spawn_app_on(topology, |_| {}).await;
    app.success("c1", "GIGADAT").await;
    let _: () = app.inspect.expire(KEY, 100, None).await.unwrap();
    let reply = app.failure("c1", "LOONIO").await;
    assert_eq!((reply.result, reply.net_count), (IGNORED_NO_HABIT, 0));
    assert_eq!(
        hash(&app, KEY).await,
        [("INTERAC:RTP:GIGADAT".to_string(), 1)]
    );
    assert!(app.ttl(KEY).await <= 100, "the TTL was not touched");
}

#[rstest]
#[case::single(Topology::Single)]
#[case::cluster(Topology::Cluster)]
#[tokio::test]
async fn failures_decrement_then_delete_at_zero(#[case] topology: Topology) {
    let app = spawn_app_on(topology, |_| {}).await;
    for _ in 0..2 {
        app.success("c1", "GIGADAT").await;
    }
    app.success("c1", "LOONIO").await;
    let _: () = app.inspect.expire(KEY, 100, None).await.unwrap();

    let reply = app.failure("c1", "GIGADAT").await;
    assert_eq!((reply.result, reply.net_count), (APPLIED, 1));
    assert!(
        app.ttl(KEY).await > 100,
        "a failure that leaves the hash re-arms its TTL"
    );

    let reply = app.failure("c1", "GIGADAT").await;
    assert_eq!((reply.result, reply.net_count), (APPLIED, 0));
    assert_eq!(
        hash(&app, KEY).await,
        [("INTERAC:RTP:LOONIO".to_string(), 1)],
        "0 is deleted"
    );

    let reply = app.failure("c1", "GIGADAT").await;
    assert_eq!(
        (reply.result, reply.net_count),
        (IGNORED_NO_HABIT, 0),
        "absent stays absent"
    );

    app.failure("c1", "LOONIO").await;
    let exists: i64 = app.inspect.exists(KEY).await.unwrap();
    assert_eq!(exists, 0, "the last field's deletion removes the hash");
}

#[rstest]
#[case::single(Topology::Single)]
#[case::cluster(Topology::Cluster)]
#[tokio::test]
async fn the_cap_prunes_the_lowest_count_never_the_new_field(#[case] topology: Topology) {
    let app = spawn_app_on(topology, |s| s.rules.max_combos_per_customer = 3).await;
    for (connector, times) in [("A", 3), ("B", 1), ("C", 2)] {
        for _ in 0..times {
            app.success("c1", connector).await;
        }
    }
    let reply = app.success("c1", "NEW").await;
    assert_eq!(
        (reply.result, reply.net_count, reply.pruned),
        (APPLIED, 1, 1)
    );
    let fields: Vec<String> = hash(&app, KEY).await.into_iter().map(|(f, _)| f).collect();
    assert_eq!(
        fields,
        ["INTERAC:RTP:A", "INTERAC:RTP:C", "INTERAC:RTP:NEW"]
    );
}

#[rstest]
#[case::single(Topology::Single)]
#[case::cluster(Topology::Cluster)]
#[tokio::test]
async fn cap_ties_go_bytewise_smallest_first(#[case] topology: Topology) {
    let app = spawn_app_on(topology, |s| s.rules.max_combos_per_customer = 3).await;
    for connector in ["b", "B", "a"] {
        app.success("c1", connector).await;
        app.success("c1", connector).await;
    }
    let reply = app.success("c1", "z").await;
    assert_eq!(reply.pruned, 1);
    let fields: Vec<String> = hash(&app, KEY).await.into_iter().map(|(f, _)| f).collect();
    assert_eq!(
        fields,
        ["INTERAC:RTP:a", "INTERAC:RTP:b", "INTERAC:RTP:z"],
        "'B' < 'a' < 'b' bytewise"
    );
}

#[rstest]
#[case::single(Topology::Single)]
#[case::cluster(Topology::Cluster)]
#[tokio::test]
async fn the_whole_excess_drains_after_the_cap_shrank(#[case] topology: Topology) {
    let app = spawn_app_on(topology, |s| s.rules.max_combos_per_customer = 2).await;
    let fields: Vec<(String, String)> = (1..=5)
        .map(|n| (format!("INTERAC:RTP:K{n}"), n.to_string()))
        .collect();
    let _: () = app.inspect.hset(KEY, fields).await.unwrap();
    let _: () = app.inspect.expire(KEY, 1000, None).await.unwrap();

    let reply = app.success("c1", "K5").await;
    assert_eq!(
        (reply.net_count, reply.pruned),
        (6, 0),
        "an existing field never prunes"
    );

    let reply = app.success("c1", "NEW").await;
    assert_eq!(reply.pruned, 4);
    assert_eq!(
        hash(&app, KEY).await,
        [
            ("INTERAC:RTP:K5".to_string(), 6),
            ("INTERAC:RTP:NEW".to_string(), 1)
        ]
    );
}

#[rstest]
#[case::single(Topology::Single)]
#[case::cluster(Topology::Cluster)]
#[tokio::test]
async fn forget_customer_deletes_the_hash(#[case] topology: Topology) {
    let app = spawn_app_on(topology, |_| {}).await;
    app.success("c1", "GIGADAT").await;
    let mut api = app.api.clone();
    let forget = pb::ForgetCustomerRequest {
        merchant_id: "m1".into(),
        customer_id: "c1".into(),
    };
    assert!(
        api.forget_customer(forget.clone())
            .await
            .unwrap()
            .into_inner()
            .existed
    );
    assert!(!app.pin(pin_request("c1", &[])).await.unwrap().pinned);
    assert!(
        !api.forget_customer(forget)
            .await
            .unwrap()
            .into_inner()
            .existed
    );
}

#[rstest]
#[case::single(Topology::Single)]
#[case::cluster(Topology::Cluster)]
#[tokio::test]
async fn scripts_survive_a_redis_that_forgot_them(#[case] topology: Topology) {
    let app = spawn_app_on(topology, |_| {}).await;
    app.success("c1", "GIGADAT").await;
    let fallbacks = async |script: &str| {
        let series = format!("sticky_routing_noscript_fallbacks_total{{script=\"{script}\"}}");
        sample(&app.scrape().await, &series)
    };
    assert_eq!(fallbacks("record_success").await, None, "preloaded");
    app.flush_scripts().await;
    let reply = app.success("c1", "GIGADAT").await;
    assert_eq!((reply.result, reply.net_count), (APPLIED, 2));
    let reply = app.failure("c1", "GIGADAT").await;
    assert_eq!((reply.result, reply.net_count), (APPLIED, 1));
    // Each script fell back to EVAL once, which cached it again.
    let reply = app.success("c1", "GIGADAT").await;
    assert_eq!((reply.result, reply.net_count), (APPLIED, 2));
    assert_eq!(fallbacks("record_success").await, Some(1.0));
    assert_eq!(fallbacks("record_failure").await, Some(1.0));
    assert_eq!(fallbacks("admit").await, None);
}

#[rstest]
#[case::single(Topology::Single)]
#[case::cluster(Topology::Cluster)]
#[tokio::test]
async fn an_existing_customer_costs_one_redis_command_per_outcome(#[case] topology: Topology) {
    let app = spawn_app_on(topology, |_| {}).await;
    app.success("c1", "GIGADAT").await;
    let before = app.command_calls().await;
    app.success("c1", "GIGADAT").await;
    assert_eq!(
        app.commands_since(&before).await,
        [("evalsha".to_string(), 1)]
    );
    let before = app.command_calls().await;
    app.failure("c1", "GIGADAT").await;
    assert_eq!(
        app.commands_since(&before).await,
        [("evalsha".to_string(), 1)]
    );
}

#[rstest]
#[case::single(Topology::Single)]
#[case::cluster(Topology::Cluster)]
#[tokio::test]
async fn a_new_customer_passes_admission_first(#[case] topology: Topology) {
    let app = spawn_app_on(topology, |_| {}).await;
    let before = app.command_calls().await;
    app.success("c1", "GIGADAT").await;
    assert_eq!(
        app.commands_since(&before).await,
        [("evalsha".to_string(), 3)]
    );
}
