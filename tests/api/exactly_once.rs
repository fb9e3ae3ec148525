//! Exactly-once feedback through the API: a RecordOutcome repeated with the
//! same `attempt_id` is counted once, on one node and on Cluster, also when
//! the repeats race; what de-duplication stores stays invisible to reads and
//! to the cap, costs little memory, and keeps the hash listpack-encoded.

use std::collections::HashMap;

use fred::prelude::{HashesInterface, KeysInterface};
use rstest::rstest;
use sticky_routing::transport::pb;

use crate::support::*;

const KEY: &str = "sticky_gw_m1_c1";

fn attempt(connector: &str, kind: pb::Outcome, attempt_id: &str) -> pb::RecordOutcomeRequest {
    pb::RecordOutcomeRequest {
        attempt_id: attempt_id.into(),
        ..outcome("m1", "c1", connector, kind)
    }
}

fn success(connector: &str, attempt_id: &str) -> pb::RecordOutcomeRequest {
    attempt(connector, pb::Outcome::Success, attempt_id)
}

async fn count(app: &TestApp, connector: &str) -> i64 {
    let value: Option<i64> = app
        .inspect
        .hget(KEY, format!("INTERAC:RTP:{connector}"))
        .await
        .unwrap();
    value.unwrap_or(0)
}

/// The hash's encoding (one node).
async fn encoding(app: &TestApp, key: &str) -> String {
    let replies: Vec<String> = app.on_every_primary("OBJECT", vec!["ENCODING", key]).await;
    replies.into_iter().next().unwrap()
}

#[rstest]
#[case::single(Topology::Single)]
#[case::cluster(Topology::Cluster)]
#[tokio::test]
async fn a_repeated_attempt_is_counted_once_and_writes_nothing(#[case] topology: Topology) {
    let app = spawn_app_on(topology, |_| {}).await;
    let first = app.record(success("GIGADAT", "pay-1")).await.unwrap();
    assert_eq!((first.result, first.net_count), (APPLIED, 1));
    let _: () = app.inspect.expire(KEY, 100, None).await.unwrap();

    // A repeat answers DUPLICATE whatever its other fields, with the count
    // of the combo it names, and does not even re-arm the TTL.
    let repeat = app.record(success("GIGADAT", "pay-1")).await.unwrap();
    assert_eq!((repeat.result, repeat.net_count), (DUPLICATE, 1));
    let other_combo = app.record(success("LOONIO", " pay-1 ")).await.unwrap();
    assert_eq!((other_combo.result, other_combo.net_count), (DUPLICATE, 0));
    let as_failure = app
        .record(attempt("GIGADAT", pb::Outcome::GatewayFailure, "pay-1"))
        .await
        .unwrap();
    assert_eq!((as_failure.result, as_failure.net_count), (DUPLICATE, 1));
    assert_eq!(count(&app, "GIGADAT").await, 1);
    assert_eq!(count(&app, "LOONIO").await, 0);
    assert!(app.ttl(KEY).await <= 100, "a duplicate re-armed the TTL");

    // Case is kept: another case is another attempt.
    let other = app.record(success("GIGADAT", "PAY-1")).await.unwrap();
    assert_eq!((other.result, other.net_count), (APPLIED, 2));
    app.assert_every_key_has_a_ttl().await;
}

#[tokio::test]
async fn the_last_eight_attempts_are_remembered_and_the_ninth_is_not() {
    let app = spawn_app().await;
    for i in 0..9 {
        let reply = app
            .record(success("GIGADAT", &format!("a{i}")))
            .await
            .unwrap();
        assert_eq!(reply.result, APPLIED);
    }
    // a1..a8 are the last eight; a0 has 8 newer attempts after it.
    for i in 1..9 {
        let reply = app
            .record(success("GIGADAT", &format!("a{i}")))
            .await
            .unwrap();
        assert_eq!(reply.result, DUPLICATE, "a{i}");
    }
    let forgotten = app.record(success("GIGADAT", "a0")).await.unwrap();
    assert_eq!((forgotten.result, forgotten.net_count), (APPLIED, 10));
}

#[tokio::test]
async fn calls_that_wrote_nothing_record_no_attempt() {
    let app = spawn_app_with(|s| {
        s.rules.budgets.default = 0;
    })
    .await;
    let refused = app.record(success("GIGADAT", "pay-1")).await.unwrap();
    assert_eq!(refused.result, NOT_ADMITTED);
    let failure = attempt("GIGADAT", pb::Outcome::GatewayFailure, "pay-2");
    let ignored = app.record(failure.clone()).await.unwrap();
    assert_eq!(ignored.result, IGNORED_NO_HABIT);

    // The customer gets a hash; the retries are evaluated afresh.
    let _: () = app
        .inspect
        .hset(KEY, ("INTERAC:RTP:GIGADAT", "1"))
        .await
        .unwrap();
    let _: () = app.inspect.expire(KEY, 100, None).await.unwrap();
    let retried = app.record(success("GIGADAT", "pay-1")).await.unwrap();
    assert_eq!((retried.result, retried.net_count), (APPLIED, 2));
    let retried = app.record(failure).await.unwrap();
    assert_eq!((retried.result, retried.net_count), (APPLIED, 1));
}

#[tokio::test]
async fn a_failure_that_deletes_the_last_combo_takes_the_attempts_with_the_hash() {
    let app = spawn_app().await;
    app.record(success("GIGADAT", "pay-1")).await.unwrap();
    let failure = attempt("GIGADAT", pb::Outcome::GatewayFailure, "pay-2");
    let applied = app.record(failure.clone()).await.unwrap();
    assert_eq!((applied.result, applied.net_count), (APPLIED, 0));
    assert!(app.customer_keys().await.is_empty(), "the hash is gone");
    let repeat = app.record(failure).await.unwrap();
    assert_eq!(repeat.result, IGNORED_NO_HABIT);
    assert!(app.customer_keys().await.is_empty());
}

#[rstest]
#[case::single(Topology::Single)]
#[case::cluster(Topology::Cluster)]
#[tokio::test]
async fn parallel_repeats_of_one_attempt_apply_exactly_once(#[case] topology: Topology) {
    let app = spawn_app_on(topology, |s| s.redis.pool_size = 4).await;
    // The customer exists, and is new: both paths race.
    app.success("c1", "GIGADAT").await;
    for (customer, attempt_id) in [("c1", "race-1"), ("c2", "race-2")] {
        let mut calls = tokio::task::JoinSet::new();
        for _ in 0..32 {
            let req = pb::RecordOutcomeRequest {
                attempt_id: attempt_id.into(),
                ..outcome("m1", customer, "GIGADAT", pb::Outcome::Success)
            };
            let mut api = app.api.clone();
            calls.spawn(async move { api.record_outcome(req).await });
        }
        let mut results: HashMap<i32, usize> = HashMap::new();
        for reply in calls.join_all().await {
            *results
                .entry(reply.unwrap().into_inner().result)
                .or_default() += 1;
        }
        assert_eq!(results.get(&APPLIED), Some(&1), "{customer}: {results:?}");
        assert_eq!(
            results.get(&DUPLICATE),
            Some(&31),
            "{customer}: {results:?}"
        );
    }
    assert_eq!(count(&app, "GIGADAT").await, 2);
}

#[rstest]
#[case::single(Topology::Single)]
#[case::cluster(Topology::Cluster)]
#[tokio::test]
async fn reads_the_cap_and_forget_never_see_the_attempts(#[case] topology: Topology) {
    let app = spawn_app_on(topology, |s| s.rules.max_combos_per_customer = 2).await;
    app.record(success("A", "p1")).await.unwrap();
    app.record(success("B", "p2")).await.unwrap();
    // A third combo prunes exactly one: the attempts field is not a combo.
    let third = app.record(success("C", "p3")).await.unwrap();
    assert_eq!((third.result, third.pruned), (APPLIED, 1));

    let pin = app.pin(pin_request("c1", &[])).await.unwrap();
    assert_eq!(ranked(&pin), [("B", 1), ("C", 1)]);
    let habits = app.habits("c1").await;
    let connectors: Vec<&str> = habits.habits.iter().map(|h| h.connector.as_str()).collect();
    assert_eq!(connectors, ["B", "C"]);

    assert!(app.forget("c1").await.existed);
    assert!(app.customer_keys().await.is_empty());
    // Forgotten attempts are new again.
    let again = app.record(success("A", "p1")).await.unwrap();
    assert_eq!((again.result, again.net_count), (APPLIED, 1));
}

/// Memory, as docs/operations.md quotes it: a customer with three combos, with and
/// without a full attempt memory (eight attempts, the most it keeps).
#[tokio::test]
async fn the_attempt_memory_costs_at_most_100_bytes_per_customer_and_keeps_listpack() {
    let app = spawn_app().await;
    const CUSTOMERS: usize = 50;
    for (merchant, with_attempts) in [("plain", false), ("dedup", true)] {
        for c in 0..CUSTOMERS {
            for (i, connector) in ["GIGADAT", "LOONIO", "PAYSAFE"].iter().enumerate() {
                for n in 0..3 {
                    let attempt_id = if with_attempts {
                        format!("attempt-{c}-{i}-{n}")
                    } else {
                        String::new()
                    };
                    let req = pb::RecordOutcomeRequest {
                        attempt_id,
                        ..outcome(
                            merchant,
                            &format!("cus_{c}"),
                            connector,
                            pb::Outcome::Success,
                        )
                    };
                    assert_eq!(app.record(req).await.unwrap().result, APPLIED);
                }
            }
        }
    }
    let mut usage: HashMap<&str, i64> = HashMap::new();
    for merchant in ["plain", "dedup"] {
        for c in 0..CUSTOMERS {
            let key = format!("sticky_gw_{merchant}_cus_{c}");
            let bytes: Vec<i64> = app
                .on_every_primary("MEMORY", vec!["USAGE", &key, "SAMPLES", "0"])
                .await;
            *usage.entry(merchant).or_default() += bytes[0];
            assert_eq!(encoding(&app, &key).await, "listpack", "{key}");
        }
    }
    let extra = (usage["dedup"] - usage["plain"]) / CUSTOMERS as i64;
    println!(
        "per customer: {} bytes without attempts, {} with eight; {extra} extra",
        usage["plain"] / CUSTOMERS as i64,
        usage["dedup"] / CUSTOMERS as i64
    );
    assert!(
        extra > 0 && extra <= 100,
        "{extra} extra bytes per customer"
    );
}

#[tokio::test]
async fn the_largest_hash_stays_listpack_with_its_attempts() {
    let app = spawn_app().await;
    let cap = app.settings.rules.max_combos_per_customer;
    for i in 0..cap + 8 {
        // 64-byte fields, the longest a combo may have.
        let connector = format!("{i:0>52}");
        let req = pb::RecordOutcomeRequest {
            attempt_id: format!("{i:x>128}"),
            ..outcome("m1", "c1", &connector, pb::Outcome::Success)
        };
        assert_eq!(app.record(req).await.unwrap().result, APPLIED);
    }
    assert_eq!(encoding(&app, KEY).await, "listpack");
    let fields: i64 = app.inspect.hlen(KEY).await.unwrap();
    assert_eq!(fields, i64::from(cap) + 1);
}
