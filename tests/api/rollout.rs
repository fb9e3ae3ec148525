//! The rollout through the API (contract v1.2 §4): each merchant's mode
//! (`on` pins, `shadow` answers the pin it would give, `off` reads nothing
//! from Redis), the holdout drawn by the published formula, GetPin's
//! reason in every answer, and RecordOutcome's `pin_connector`, checked
//! like `connector`.

use std::collections::HashMap;

use sticky_routing::config::Settings;
use sticky_routing::domain::rollout::Rollout;
use sticky_routing::transport::pb;
use tonic::Code;

use crate::support::*;

/// The rollout `vars` configure, read as the service reads its settings.
fn rollout(vars: &[(&str, &str)]) -> Rollout {
    let env: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Settings::load(None, &env).unwrap().rules.rollout
}

async fn rollout_app(vars: &[(&str, &str)]) -> TestApp {
    let rollout = rollout(vars);
    spawn_app_with(move |s| s.rules.rollout = rollout).await
}

fn pin_for(merchant: &str, customer: &str) -> pb::GetPinRequest {
    pb::GetPinRequest {
        merchant_id: merchant.into(),
        ..pin_request(customer, &[])
    }
}

async fn success_for(app: &TestApp, merchant: &str, customer: &str, connector: &str) {
    let recorded = app
        .record(outcome(merchant, customer, connector, pb::Outcome::Success))
        .await
        .unwrap();
    assert_eq!(recorded.result, APPLIED, "{merchant} {customer}");
}

/// The contract's draw, recomputed here from its text rather than by the
/// service's function: u64_be(first 8 bytes of SHA-256(salt ‖ merchant ‖
/// 0x00 ‖ customer)) mod 10000 < round(percent × 100).
fn in_holdout(salt: &str, merchant: &str, customer: &str, percent: f64) -> bool {
    let mut input = Vec::new();
    input.extend_from_slice(salt.as_bytes());
    input.extend_from_slice(merchant.as_bytes());
    input.push(0);
    input.extend_from_slice(customer.as_bytes());
    let digest = ring::digest::digest(&ring::digest::SHA256, &input);
    let first: [u8; 8] = digest.as_ref()[..8].try_into().unwrap();
    u64::from_be_bytes(first) % 10_000 < (percent * 100.0).round() as u64
}

#[tokio::test]
async fn each_merchant_gets_its_own_mode_and_off_reads_nothing() {
    let app = rollout_app(&[
        ("STICKY_ROUTING_MODE", "shadow"),
        ("STICKY_ROUTING_MODE_m_on", "on"),
        ("STICKY_ROUTING_MODE_m_off", "off"),
    ])
    .await;
    // RecordOutcome records in every mode, so turning a merchant on
    // starts with warm habits.
    for merchant in ["m_on", "m_shadow", "m_off"] {
        success_for(&app, merchant, "c1", "GIGADAT").await;
        success_for(&app, merchant, "c1", "GIGADAT").await;
    }
    let on = app.pin(pin_for("m_on", "c1")).await.unwrap();
    assert!(on.pinned);
    assert_eq!((on.connector.as_str(), on.net_count), ("GIGADAT", 2));
    assert_eq!(on.reason(), pb::PinReason::Pinned);
    assert_eq!(on.would_pin, "GIGADAT");

    let shadow = app.pin(pin_for("m_shadow", "c1")).await.unwrap();
    assert!(!shadow.pinned);
    assert_eq!((shadow.connector.as_str(), shadow.net_count), ("", 0));
    assert_eq!(shadow.reason(), pb::PinReason::Shadow);
    assert_eq!(shadow.would_pin, "GIGADAT");
    assert_eq!(ranked(&shadow), [("GIGADAT", 2)]);
    let no_habit = app.pin(pin_for("m_shadow", "c2")).await.unwrap();
    assert_eq!(no_habit.reason(), pb::PinReason::NoHabit);
    assert_eq!(no_habit.would_pin, "");

    let before = app.command_calls().await;
    let off = app.pin(pin_for("m_off", "c1")).await.unwrap();
    assert_eq!(app.commands_since(&before).await, [], "mode off read Redis");
    assert_eq!(
        off,
        pb::GetPinResponse {
            reason: pb::PinReason::Disabled.into(),
            ..Default::default()
        }
    );
    // Off still validates: a bad request is refused by name.
    let bad = app.pin(pin_for("m_off", " ")).await.unwrap_err();
    assert_eq!(bad.code(), Code::InvalidArgument);
    assert!(bad.message().starts_with("customer_id: "), "{bad:?}");
    // And the others read once each, as before.
    let before = app.command_calls().await;
    app.pin(pin_for("m_on", "c1")).await.unwrap();
    assert_eq!(
        app.commands_since(&before).await,
        [("hgetall".to_owned(), 1)]
    );

    let metrics = app.scrape().await;
    for (outcome, count) in [
        ("pinned", 2.0),
        ("shadow", 1.0),
        ("no_habit", 1.0),
        ("disabled", 1.0),
    ] {
        let series = format!("sticky_routing_pins_total{{outcome=\"{outcome}\"}}");
        assert_eq!(
            sample(&metrics, &series),
            Some(count),
            "{series}\n{metrics}"
        );
    }
}

/// A 50 % holdout withholds the pin from exactly the customers the
/// formula draws, salt included, and applies in mode `on` only.
#[tokio::test]
async fn the_holdout_is_the_customers_the_formula_draws() {
    const SALT: &str = "exp-2026";
    let app = rollout_app(&[
        ("STICKY_ROUTING_HOLDOUT_m1", "50%"),
        ("STICKY_ROUTING_HOLDOUT_m2", "50%"),
        ("STICKY_ROUTING_MODE_m2", "shadow"),
        ("STICKY_ROUTING_HOLDOUT_m3", "0%"),
        ("STICKY_ROUTING_EXPERIMENT_SALT", SALT),
    ])
    .await;
    let (mut held, mut treated) = (0, 0);
    for i in 0..40 {
        let customer = format!("cus_{i}");
        for merchant in ["m1", "m2", "m3"] {
            success_for(&app, merchant, &customer, "LOONIO").await;
        }
        let pin = app.pin(pin_for("m1", &customer)).await.unwrap();
        assert_eq!(pin.would_pin, "LOONIO", "{customer}");
        if in_holdout(SALT, "m1", &customer, 50.0) {
            held += 1;
            assert_eq!(pin.reason(), pb::PinReason::Holdout, "{customer}");
            assert!(!pin.pinned && pin.connector.is_empty(), "{pin:?}");
            assert_eq!(ranked(&pin), [("LOONIO", 1)]);
        } else {
            treated += 1;
            assert_eq!(pin.reason(), pb::PinReason::Pinned, "{customer}");
            assert_eq!(pin.connector, "LOONIO");
        }
        // The salt is part of the draw: without it, another holdout.
        let shadow = app.pin(pin_for("m2", &customer)).await.unwrap();
        assert_eq!(shadow.reason(), pb::PinReason::Shadow, "{customer}");
        let none = app.pin(pin_for("m3", &customer)).await.unwrap();
        assert_eq!(none.reason(), pb::PinReason::Pinned, "{customer}");
    }
    assert!(held > 5 && treated > 5, "held {held}, treated {treated}");
    let unsalted: Vec<bool> = (0..40)
        .map(|i| in_holdout("", "m1", &format!("cus_{i}"), 50.0))
        .collect();
    let salted: Vec<bool> = (0..40)
        .map(|i| in_holdout(SALT, "m1", &format!("cus_{i}"), 50.0))
        .collect();
    assert_ne!(unsalted, salted, "the salt changes the draw");
    let metrics = app.scrape().await;
    assert_eq!(
        sample(&metrics, "sticky_routing_pins_total{outcome=\"holdout\"}"),
        Some(f64::from(held)),
        "{metrics}"
    );
}

/// Candidates all vetoed is ALL_VETOED, with no would_pin, in `on` and
/// `shadow` alike; no candidate at all is NO_HABIT.
#[tokio::test]
async fn an_answer_without_a_pick_says_no_habit_or_all_vetoed() {
    let app = rollout_app(&[("STICKY_ROUTING_MODE_m2", "shadow")]).await;
    for merchant in ["m1", "m2"] {
        success_for(&app, merchant, "c1", "GIGADAT").await;
        let vetoed = app
            .pin(pb::GetPinRequest {
                connector_scores: [("GIGADAT".to_string(), 0.1), ("LOONIO".to_string(), 1.0)]
                    .into_iter()
                    .collect(),
                ..pin_for(merchant, "c1")
            })
            .await
            .unwrap();
        assert_eq!(vetoed.reason(), pb::PinReason::AllVetoed, "{merchant}");
        assert!(!vetoed.pinned && vetoed.would_pin.is_empty(), "{vetoed:?}");
        assert_eq!(vetoed.vetoes.len(), 1);
        let none = app.pin(pin_for(merchant, "nobody")).await.unwrap();
        assert_eq!(none.reason(), pb::PinReason::NoHabit, "{merchant}");
        assert!(none.candidates.is_empty() && none.would_pin.is_empty());
    }
}

/// `pin_connector` is checked like `connector`: a bad one is refused by
/// name with nothing written; a good one changes nothing written.
#[tokio::test]
async fn a_bad_pin_connector_is_refused_by_name_and_writes_nothing() {
    let app = spawn_app().await;
    let before = app.command_calls().await;
    for bad in ["LOON\u{200B}IO", "a\u{7}", &"c".repeat(65)] {
        let status = app
            .record(pb::RecordOutcomeRequest {
                pin_connector: bad.to_owned(),
                ..outcome("m1", "c1", "GIGADAT", pb::Outcome::Success)
            })
            .await
            .unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{bad:?}");
        assert!(
            status.message().starts_with("pin_connector: "),
            "{status:?}"
        );
    }
    assert_eq!(app.commands_since(&before).await, []);
    assert_eq!(app.keys().await, Vec::<String>::new());
    for pin_connector in ["LOONIO", "GIGADAT", ""] {
        let recorded = app
            .record(pb::RecordOutcomeRequest {
                pin_connector: pin_connector.into(),
                ..outcome("m1", "c1", "GIGADAT", pb::Outcome::Success)
            })
            .await
            .unwrap();
        assert_eq!(recorded.result, APPLIED);
    }
    let habits = app.habits("c1").await.habits;
    assert_eq!(habits.len(), 1);
    assert_eq!(
        (habits[0].connector.as_str(), habits[0].net_count),
        ("GIGADAT", 3)
    );
}
