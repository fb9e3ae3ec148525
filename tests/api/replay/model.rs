//! A generated history against the independent model of
//! `support::replay_model`: the binary's `--json` figures, overall and per
//! merchant, are exactly the model's, under a short key TTL with times in
//! every notation, a small cap, `MIN_PIN_COUNT`, attempt ids and their
//! repeats, `count` rows and, in one case, the admission budgets by `at`.

use std::collections::BTreeMap;

use rstest::rstest;

use crate::support::bulk::file_with;
use crate::support::replay::{
    Shape, assert_report, assert_table_row, csv, customers_with_habits, expected_report,
    generated_history, replay, report_of,
};
use crate::support::replay_model::{Budgets, Model, ModelRules};

/// The history: 1,500 rows of 5 customer ids under 3 merchants (15
/// customers, a third of the rows one busy customer's), up to 6 s apart and
/// now and then over a minute, so that under a 60 s TTL habits often expire
/// and often just survive, and the busy customer sends more than 8 attempt
/// ids in one life.
fn history(seed: u64) -> Shape {
    Shape {
        seed,
        rows: 1_500,
        merchants: 3,
        customers: 5,
        times: true,
    }
}

#[rstest]
#[case::cap_3_pins_from_1(3, 1, false)]
#[case::cap_2_pins_from_2_with_admission(2, 2, true)]
#[tokio::test]
async fn a_generated_history_gives_exactly_the_models_figures(
    #[case] cap: usize,
    #[case] min_pin_count: i64,
    #[case] admission: bool,
) {
    let rows = generated_history(history(0xa11ce + cap as u64));
    let mut model = Model::new(ModelRules {
        key_ttl_ms: 60_000,
        cap,
        min_pin_count,
        admission: admission.then(|| Budgets {
            window_ms: 90_000,
            default: 5,
            overrides: BTreeMap::from([("m1".to_owned(), 2)]),
        }),
    });
    for row in &rows {
        model.row(row);
    }
    // Every rule decided something in this history.
    let seen = model.exercised;
    assert!(seen.expired > 0, "{seen:?}");
    assert!(seen.survived_long_gap > 0, "{seen:?}");
    assert!(seen.pruned > 0 && seen.prune_ties > 0, "{seen:?}");
    assert!(seen.pin_ties > 0, "{seen:?}");
    assert!(
        seen.duplicates > 0 && seen.forgotten_repeats > 0,
        "{seen:?}"
    );
    assert!(seen.emptied > 0 && seen.ignored > 0, "{seen:?}");
    assert!(seen.counted > 0, "{seen:?}");
    assert_eq!(seen.below_min > 0, min_pin_count > 1, "{seen:?}");
    assert_eq!(seen.not_admitted > 0, admission, "{seen:?}");

    let (_dir, path) = file_with("history.csv", &csv(&rows));
    let cap = cap.to_string();
    let min = min_pin_count.to_string();
    let mut vars = vec![
        ("STICKY_ROUTING_KEY_TTL", "60"),
        ("STICKY_ROUTING_MAX_COMBOS_PER_CUSTOMER", cap.as_str()),
        ("STICKY_ROUTING_MIN_PIN_COUNT", min.as_str()),
    ];
    let mut args = vec![path.as_str()];
    if admission {
        vars.extend([
            ("STICKY_ROUTING_ADMISSION_WINDOW", "90s"),
            ("STICKY_ROUTING_MAX_CUSTOMERS", "5"),
            ("STICKY_ROUTING_MAX_CUSTOMERS_m1", "2"),
        ]);
        args.insert(0, "--admission");
    }
    let expected = expected_report(&model.overall, &model.merchants, 10);
    assert_eq!(expected.merchants.len(), 3);

    let json = replay(&[&args[..], &["--json"]].concat(), &vars, None).await;
    assert_eq!(json.code, 0, "{}{}", json.stdout, json.stderr);
    assert_report(&report_of(&json), &expected);

    // The table says the same, and how many customers still had habits at
    // the last row's time.
    let table = replay(&args, &vars, None).await;
    assert_eq!(table.code, 0, "{}{}", table.stdout, table.stderr);
    assert_table_row(&table.stdout, "(all)", &expected.overall);
    for merchant in &expected.merchants {
        let id = merchant.merchant_id.as_deref().unwrap();
        assert_table_row(&table.stdout, id, merchant);
    }
    assert_eq!(
        customers_with_habits(&table.stdout),
        model.customers_with_habits()
    );
    // And it says plainly what the figures are, and what the experiment is.
    assert!(
        table
            .stdout
            .contains("observational estimate, not an experiment"),
        "{}",
        table.stdout
    );
    assert!(table.stdout.contains("STICKY_ROUTING_HOLDOUT"));
}
