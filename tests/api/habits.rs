//! GetHabits: every stored combo, ordered, with the remaining TTL.

use sticky_routing::transport::pb;

use rstest::rstest;

use crate::support::*;

fn habits_request(customer: &str) -> pb::GetHabitsRequest {
    pb::GetHabitsRequest {
        merchant_id: "m1".into(),
        customer_id: customer.into(),
    }
}

#[rstest]
#[case::single(Topology::Single)]
#[case::cluster(Topology::Cluster)]
#[tokio::test]
async fn habits_come_highest_count_first_then_in_field_order(#[case] topology: Topology) {
    let app = spawn_app_on(topology, |_| {}).await;
    for connector in ["b", "a", "c", "c"] {
        app.success("c1", connector).await;
    }
    let mut card = outcome("m1", "c1", "ADYEN", pb::Outcome::Success);
    card.payment_method = "card".into();
    card.payment_method_type = "debit".into();
    app.record(card).await.unwrap();

    let reply = app
        .api
        .clone()
        .get_habits(habits_request("c1"))
        .await
        .unwrap()
        .into_inner();
    let habits: Vec<(&str, &str, &str, i64)> = reply
        .habits
        .iter()
        .map(|h| {
            (
                h.payment_method.as_str(),
                h.payment_method_type.as_str(),
                h.connector.as_str(),
                h.net_count,
            )
        })
        .collect();
    assert_eq!(
        habits,
        [
            ("INTERAC", "RTP", "c", 2),
            ("CARD", "DEBIT", "ADYEN", 1),
            ("INTERAC", "RTP", "a", 1),
            ("INTERAC", "RTP", "b", 1),
        ]
    );
    let key_ttl = app.settings.rules.key_ttl.as_secs() as i64;
    assert!(reply.ttl_seconds > key_ttl - 5 && reply.ttl_seconds <= key_ttl);
}

#[rstest]
#[case::single(Topology::Single)]
#[case::cluster(Topology::Cluster)]
#[tokio::test]
async fn an_unknown_customer_has_no_habits_and_no_ttl(#[case] topology: Topology) {
    let app = spawn_app_on(topology, |_| {}).await;
    let reply = app
        .api
        .clone()
        .get_habits(habits_request("nobody"))
        .await
        .unwrap()
        .into_inner();
    assert!(reply.habits.is_empty());
    assert_eq!(reply.ttl_seconds, 0);
}
