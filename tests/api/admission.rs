//! The per-merchant admission budget: new customers are capped per window
//! (default, overrides, 0, under concurrency, sliding), existing ones are not.

use std::collections::BTreeSet;
use std::time::Duration;

use fred::prelude::KeysInterface;
use sticky_routing::config::Settings;
use sticky_routing::domain::ids::MerchantId;
use sticky_routing::transport::pb;

use rstest::rstest;

use crate::support::*;

/// An app whose default budget is `default`, with `overrides` per merchant.
async fn app_with_budget(topology: Topology, default: u64, overrides: &[(&str, u64)]) -> TestApp {
    spawn_app_on(topology, |s| budgets(s, default, overrides)).await
}

fn budgets(settings: &mut Settings, default: u64, overrides: &[(&str, u64)]) {
    settings.rules.budgets.default = default;
    settings.rules.budgets.overrides = overrides
        .iter()
        .map(|(m, b)| (MerchantId::parse(m).unwrap(), *b))
        .collect();
    // Under a loaded test machine, do not let the 250ms default fail a call.
    settings.redis.command_timeout = Duration::from_secs(5);
}

/// A first success for a customer who has no hash yet.
async fn new_customer(app: &TestApp, merchant: &str, customer: &str) -> pb::RecordOutcomeResponse {
    app.record(outcome(merchant, customer, "GIGADAT", pb::Outcome::Success))
        .await
        .unwrap()
}

/// The results of first successes for customers `c1..=cn` of `merchant`.
async fn new_customers(app: &TestApp, merchant: &str, n: usize) -> Vec<i32> {
    let mut results = Vec::with_capacity(n);
    for i in 1..=n {
        results.push(new_customer(app, merchant, &format!("c{i}")).await.result);
    }
    results
}

async fn exists(app: &TestApp, key: &str) -> bool {
    app.inspect.exists::<i64, _>(key).await.unwrap() == 1
}

#[rstest]
#[case::single(Topology::Single)]
#[case::cluster(Topology::Cluster)]
#[tokio::test]
async fn a_spent_budget_admits_no_new_customer_but_existing_ones_keep_updating(
    #[case] topology: Topology,
) {
    let app = app_with_budget(topology, 2, &[]).await;
    assert_eq!(new_customers(&app, "m1", 2).await, [APPLIED, APPLIED]);

    let refused = app.success("c3", "GIGADAT").await;
    assert_eq!(
        (refused.result, refused.net_count, refused.pruned),
        (NOT_ADMITTED, 0, 0)
    );
    assert!(
        !exists(&app, "sticky_gw_m1_c3").await,
        "a refused customer gets no hash"
    );

    let again = app.success("c1", "GIGADAT").await;
    assert_eq!((again.result, again.net_count), (APPLIED, 2));
    let other_combo = app.success("c1", "LOONIO").await;
    assert_eq!(
        (other_combo.result, other_combo.net_count),
        (APPLIED, 1),
        "a new combo is not a new customer"
    );
    let failed = app.failure("c1", "GIGADAT").await;
    assert_eq!((failed.result, failed.net_count), (APPLIED, 1));
    assert_eq!(app.failure("c3", "GIGADAT").await.result, IGNORED_NO_HABIT);

    assert_eq!(
        app.keys().await,
        ["sticky_adm_m1", "sticky_gw_m1_c1", "sticky_gw_m1_c2"]
    );
    app.assert_every_key_has_a_ttl().await;
}

#[rstest]
#[case::single(Topology::Single)]
#[case::cluster(Topology::Cluster)]
#[tokio::test]
async fn a_merchant_override_replaces_the_default_budget(#[case] topology: Topology) {
    let app = app_with_budget(topology, 1, &[("big_merchant", 3)]).await;
    assert_eq!(
        new_customers(&app, "big_merchant", 4).await,
        [APPLIED, APPLIED, APPLIED, NOT_ADMITTED]
    );
    assert_eq!(new_customers(&app, "m2", 2).await, [APPLIED, NOT_ADMITTED]);

    let keys = app.keys().await;
    let count = |prefix: &str| keys.iter().filter(|k| k.starts_with(prefix)).count();
    assert_eq!(count("sticky_gw_big%5Fmerchant_"), 3);
    assert_eq!(count("sticky_gw_m2_"), 1);
}

#[rstest]
#[case::single(Topology::Single)]
#[case::cluster(Topology::Cluster)]
#[tokio::test]
async fn a_budget_of_zero_admits_nobody_and_writes_nothing(#[case] topology: Topology) {
    for (default, overrides) in [(0, &[][..]), (5, &[("m1", 0)][..])] {
        let app = app_with_budget(topology, default, overrides).await;
        for customer in ["c1", "c2"] {
            assert_eq!(app.success(customer, "GIGADAT").await.result, NOT_ADMITTED);
        }
        assert_eq!(
            app.keys().await,
            Vec::<String>::new(),
            "default {default}, overrides {overrides:?}"
        );
        if default > 0 {
            assert_eq!(
                new_customer(&app, "m2", "c1").await.result,
                APPLIED,
                "the override is m1's only"
            );
        }
    }
}

#[rstest]
#[case::single(Topology::Single)]
#[case::cluster(Topology::Cluster)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_new_customers_never_exceed_the_budget(#[case] topology: Topology) {
    let app = app_with_budget(topology, 10, &[]).await;
    let calls: Vec<_> = (0..60)
        .map(|i| {
            let mut api = app.api.clone();
            tokio::spawn(async move {
                let req = outcome("m1", &format!("c{i}"), "GIGADAT", pb::Outcome::Success);
                (
                    format!("sticky_gw_m1_c{i}"),
                    api.record_outcome(req).await.unwrap().into_inner().result,
                )
            })
        })
        .collect();
    let mut admitted = BTreeSet::new();
    let mut refused = 0;
    for call in calls {
        match call.await.unwrap() {
            (key, APPLIED) => assert!(admitted.insert(key)),
            (_, NOT_ADMITTED) => refused += 1,
            (key, other) => panic!("{key}: unexpected result {other}"),
        }
    }
    assert_eq!((admitted.len(), refused), (10, 50));
    let stored: BTreeSet<String> = app.customer_keys().await.into_iter().collect();
    assert_eq!(
        stored, admitted,
        "exactly the admitted customers have a hash"
    );
}

#[rstest]
#[case::single(Topology::Single)]
#[case::cluster(Topology::Cluster)]
#[tokio::test]
async fn the_window_slides_and_the_budget_comes_back(#[case] topology: Topology) {
    let app = spawn_app_on(topology, |s| {
        budgets(s, 1, &[]);
        s.rules.admission_window = Duration::from_secs(1);
    })
    .await;
    assert_eq!(new_customers(&app, "m1", 2).await, [APPLIED, NOT_ADMITTED]);
    // Two windows later the previous window no longer weighs.
    tokio::time::sleep(Duration::from_millis(2_200)).await;
    assert_eq!(app.success("c3", "GIGADAT").await.result, APPLIED);
    assert_eq!(
        app.success("c4", "GIGADAT").await.result,
        NOT_ADMITTED,
        "the new window has a budget too"
    );
}

/// The previous window's admissions weigh until the end of the next window,
/// so the counters must outlive it: a key that expired after one window
/// would forget them and let up to twice the budget in just after a window
/// boundary. The rule is TTL = 2 × window, re-armed on every admission.
#[rstest]
#[case::single(Topology::Single)]
#[case::cluster(Topology::Cluster)]
#[tokio::test]
async fn the_admission_key_lives_two_windows_after_an_admission(#[case] topology: Topology) {
    let window = Duration::from_secs(60);
    let app = spawn_app_on(topology, |s| {
        budgets(s, 5, &[]);
        s.rules.admission_window = window;
    })
    .await;
    assert_eq!(app.success("c1", "GIGADAT").await.result, APPLIED);
    let pttl: i64 = app.inspect.pttl("sticky_adm_m1").await.unwrap();
    let two_windows = 2 * window.as_millis() as i64;
    // The read comes a few milliseconds after the write; a second is ample.
    let read_delay = Duration::from_secs(1).as_millis() as i64;
    assert!(
        pttl > two_windows - read_delay && pttl <= two_windows,
        "admission key pttl {pttl} ms right after an admission; the rule is {two_windows} ms"
    );
    app.assert_every_key_has_a_ttl().await;
}
