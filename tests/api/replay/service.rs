//! Replay against the running service: one generated history fed to a real
//! service on real Redis (GetPin, then RecordOutcome, for every attempt) and
//! to the replay library gives the same pin for every attempt, leaves out
//! exactly the attempts the service answered DUPLICATE, and the binary's
//! figures are the ones the service's own answers make.

use std::collections::BTreeMap;
use std::io::Cursor;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use rstest::rstest;
use sticky_routing::bulk::Format;
use sticky_routing::bulk::replay::args::ReplayArgs;
use sticky_routing::bulk::replay::{Event, replay};
use sticky_routing::domain::Rules;
use sticky_routing::domain::ids::MerchantId;
use sticky_routing::domain::rollout::Rollout;
use sticky_routing::transport::pb;

use crate::support::bulk::file_with;
use crate::support::replay::{
    self as harness, HistoryRow, Shape, Tally, assert_report, csv, expected_report,
    generated_history, report_of,
};
use crate::support::{DUPLICATE, IGNORED_NO_HABIT, NOT_ADMITTED, TestApp, spawn_app_with};

/// What the service answered for one attempt.
#[derive(Debug)]
struct Answer {
    /// The file line of the attempt's row (the header is line 1).
    line: u64,
    merchant: String,
    connector: String,
    success: bool,
    pin: Option<String>,
    result: i32,
    pruned: u32,
}

/// Each row's attempts through the service, as an orchestrator makes
/// them: GetPin (no eligible list, no scores), then RecordOutcome with the
/// row's attempt id.
async fn through_service(app: &TestApp, rows: &[HistoryRow]) -> Vec<Answer> {
    let mut answers = Vec::new();
    for (index, row) in rows.iter().enumerate() {
        for _ in 0..row.count {
            let pin = app
                .pin(pb::GetPinRequest {
                    merchant_id: row.merchant.clone(),
                    customer_id: row.customer.clone(),
                    payment_method: row.method.clone(),
                    payment_method_type: row.method_type.clone(),
                    ..Default::default()
                })
                .await
                .unwrap();
            // Mode on, no holdout, no breaker: the answer is the rules' pick.
            let reasons = [pb::PinReason::Pinned, pb::PinReason::NoHabit].map(|r| r as i32);
            assert!(reasons.contains(&pin.reason), "{pin:?}");
            let outcome = if row.success {
                pb::Outcome::Success
            } else {
                pb::Outcome::GatewayFailure
            };
            let recorded = app
                .record(pb::RecordOutcomeRequest {
                    merchant_id: row.merchant.clone(),
                    customer_id: row.customer.clone(),
                    payment_method: row.method.clone(),
                    payment_method_type: row.method_type.clone(),
                    connector: row.connector.clone(),
                    outcome: outcome.into(),
                    attempt_id: row.attempt_id.clone().unwrap_or_default(),
                    ..Default::default()
                })
                .await
                .unwrap();
            answers.push(Answer {
                line: index as u64 + 2,
                merchant: row.merchant.clone(),
                connector: row.connector.clone(),
                success: row.success,
                pin: pin.pinned.then_some(pin.connector),
                result: recorded.result,
                pruned: recorded.pruned,
            });
        }
    }
    answers
}

/// One attempt as the replay saw it: line, merchant, connector, pin.
type Replayed = (u64, String, String, Option<String>);

/// The history through the replay library under `rules`, every attempt's
/// event in order.
fn through_replay(rules: &Rules, text: &str, admission: bool) -> Vec<Replayed> {
    let args = ReplayArgs {
        format: Format::Csv,
        file: None,
        tenant: None,
        merchant: None,
        admission,
        top: 10,
        json: false,
        config_file: None,
    };
    let mut attempts = Vec::new();
    let input = Box::new(Cursor::new(text.as_bytes().to_vec()));
    let bytes = Arc::new(AtomicU64::new(0));
    replay(
        input,
        Format::Csv,
        bytes,
        rules,
        &args,
        |event| match event {
            Event::Attempt {
                line,
                merchant,
                connector,
                pin,
                ..
            } => attempts.push((
                line,
                merchant.to_owned(),
                connector.to_owned(),
                pin.map(str::to_owned),
            )),
            Event::Bad { line, reason } => panic!("line {line}: {reason}"),
            Event::Rows(_) => {}
        },
    )
    .unwrap();
    attempts
}

#[rstest]
#[case::cap_3(3, 1, None)]
#[case::cap_2_min_pin_count_2(2, 2, None)]
#[case::admission_m2_budget_5(3, 1, Some(5))]
#[tokio::test]
async fn replay_and_the_running_service_agree_on_every_pin(
    #[case] cap: u32,
    #[case] min_pin_count: i64,
    #[case] m2_budget: Option<u64>,
) {
    let app = spawn_app_with(|s| {
        s.rules.max_combos_per_customer = cap;
        s.rules.min_pin_count = min_pin_count;
        if let Some(budget) = m2_budget {
            let m2 = MerchantId::parse("m2").unwrap();
            s.rules.budgets.overrides.insert(m2, budget);
        }
        // GetPin must be the rules alone: no breaker veto, mode on, no
        // holdout (the test harness already leaves the breaker off).
        s.breaker = None;
        s.rules.rollout = Rollout::default();
        // A loaded CI machine must not turn one slow call into a failure.
        s.redis.command_timeout = Duration::from_secs(5);
    })
    .await;
    // Eight customers under each of three merchants: with a budget of 5,
    // three of m2's are never admitted.
    let rows = generated_history(Shape {
        seed: 0x5ca1e + u64::from(cap) + m2_budget.unwrap_or(0),
        rows: 360,
        merchants: 3,
        customers: 8,
        times: false,
    });
    let text = csv(&rows);
    let answers = through_service(&app, &rows).await;
    let replayed = through_replay(&app.settings.rules, &text, m2_budget.is_some());

    // The history exercised what it is meant to.
    let results = |code: i32| answers.iter().filter(|a| a.result == code).count();
    assert!(results(DUPLICATE) > 0, "no duplicate");
    assert!(results(IGNORED_NO_HABIT) > 0, "no failure without habit");
    assert!(answers.iter().any(|a| a.pruned > 0), "the cap never pruned");
    assert!(answers.iter().any(|a| a.pin.is_some()), "no pin");
    assert_eq!(results(NOT_ADMITTED) > 0, m2_budget.is_some());

    // A duplicate is no attempt; every other attempt has the service's pin.
    let attempts: Vec<&Answer> = answers.iter().filter(|a| a.result != DUPLICATE).collect();
    assert_eq!(attempts.len(), replayed.len(), "attempts");
    for (service, replay) in attempts.iter().zip(&replayed) {
        let seen = (
            service.line,
            service.merchant.clone(),
            service.connector.clone(),
            service.pin.clone(),
        );
        assert_eq!(&seen, replay, "service vs replay");
    }

    // The binary's figures are the service's answers counted.
    let mut overall = Tally::default();
    let mut merchants: BTreeMap<String, Tally> = BTreeMap::new();
    for answer in &answers {
        let merchant = merchants.entry(answer.merchant.clone()).or_default();
        if answer.result == DUPLICATE {
            overall.duplicates += 1;
            merchant.duplicates += 1;
            continue;
        }
        let pin = answer.pin.as_deref();
        overall.attempt(pin, &answer.connector, answer.success);
        merchant.attempt(pin, &answer.connector, answer.success);
    }
    let (_dir, path) = file_with("history.csv", &text);
    let (cap, min) = (cap.to_string(), min_pin_count.to_string());
    let mut vars = vec![
        ("STICKY_ROUTING_MAX_COMBOS_PER_CUSTOMER", cap.as_str()),
        ("STICKY_ROUTING_MIN_PIN_COUNT", min.as_str()),
    ];
    let budget = m2_budget.map(|b| b.to_string());
    let mut args = vec!["--json", path.as_str()];
    if let Some(budget) = &budget {
        vars.push(("STICKY_ROUTING_MAX_CUSTOMERS_m2", budget));
        args.insert(0, "--admission");
    }
    let ran = harness::replay(&args, &vars, None).await;
    assert_eq!(ran.code, 0, "{}{}", ran.stdout, ran.stderr);
    assert_report(&report_of(&ran), &expected_report(&overall, &merchants, 10));
}
