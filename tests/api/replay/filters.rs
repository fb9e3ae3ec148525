//! `--merchant` and `--tenant` leave rows out of a replay, never out of
//! its time: a row without `at` is one second after the previous good row
//! of the file, of any merchant or tenant, so a filtered replay reports for
//! a merchant exactly what the whole replay does (issue 42).

use std::collections::BTreeMap;

use serde_json::Value;

use crate::support::bulk::{Rng, file_with};
use crate::support::replay::replay;

/// The replay columns with a `tenant_id` first.
const HEADER: &str = "tenant_id,merchant_id,customer_id,payment_method,payment_method_type,\
                      connector,outcome,count,attempt_id,at\n";

/// Each listed merchant's figures in a `--json` run of `args`, by
/// (tenant, merchant id).
async fn figures(args: &[&str], vars: &[(&str, &str)]) -> BTreeMap<(String, String), Value> {
    let mut all = vec!["--json", "--top", "1000"];
    all.extend_from_slice(args);
    let ran = replay(&all, vars, None).await;
    assert!(ran.code == 0 || ran.code == 1, "{args:?}: {}", ran.stderr);
    let report: Value = serde_json::from_str(ran.stdout.trim())
        .unwrap_or_else(|e| panic!("{e}: not the report:\n{}", ran.stdout));
    report["merchants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let tenant = m.get("tenant_id").and_then(Value::as_str).unwrap_or("");
            let merchant = m["merchant_id"].as_str().unwrap();
            ((tenant.to_owned(), merchant.to_owned()), m.clone())
        })
        .collect()
}

/// The history: m1's customer pins stripe at 0 s, m2's rows come in
/// between, and m1's next row has no `at`. With a key TTL of 2 s its habit
/// has expired by then (3 s), filtered or not; reading m1's rows alone as
/// if m2's were not there put it at 1 s, pinned.
#[tokio::test]
async fn a_row_without_at_follows_the_files_previous_good_row_under_merchant() {
    let text = format!(
        "{HEADER}\
         ,m1,c1,card,credit,stripe,success,,,0\n\
         ,m2,c1,card,credit,stripe,success,,,\n\
         ,m2,c1,card,credit,stripe,refund,,,\n\
         ,m2,c1,card,credit,stripe,success,,,\n\
         ,m1,c1,card,credit,stripe,success,,,\n"
    );
    let (_dir, path) = file_with("history.csv", &text);
    let vars = [("STICKY_ROUTING_KEY_TTL", "2s")];
    let whole = figures(&[&path], &vars).await;
    let m1 = (String::new(), "m1".to_owned());
    assert_eq!(whole[&m1]["attempts"], 2);
    assert_eq!(whole[&m1]["with_pin"], 0, "{:?}", whole[&m1]);
    let only_m1 = figures(&["--merchant", "m1", &path], &vars).await;
    assert_eq!(only_m1.keys().collect::<Vec<_>>(), [&m1]);
    assert_eq!(only_m1[&m1], whole[&m1]);
}

/// A history of two tenants' three merchants each, most rows without `at`,
/// some with one (a few out of order), some bad in other ways: every
/// filter's figures for each merchant it keeps are the whole replay's.
#[tokio::test]
async fn a_filtered_replays_figures_for_a_merchant_are_the_whole_replays() {
    let mut rng = Rng(0x42);
    let mut text = HEADER.to_owned();
    let mut clock = 0;
    for _ in 0..600 {
        let tenant = ["", "acme"][rng.below(2) as usize];
        let merchant = ["m1", "m2", "m3"][rng.below(3) as usize];
        let customer = format!("c{}", rng.below(4));
        let connector = ["stripe", "adyen", "checkout"][rng.below(3) as usize];
        let outcome = match rng.below(20) {
            0 => "refund",
            1..=6 => "gateway_failure",
            _ => "success",
        };
        let at = match rng.below(10) {
            0 => {
                clock += 1 + rng.below(4);
                clock.to_string()
            }
            // Out of order, unless the clock is still near 0.
            1 => clock.saturating_sub(3 + rng.below(5)).to_string(),
            _ => String::new(),
        };
        let connector = if rng.below(30) == 0 { "" } else { connector };
        text.push_str(&format!(
            "{tenant},{merchant},{customer},card,credit,{connector},{outcome},,,{at}\n"
        ));
        // Rows without `at` move time on too; keep the explicit ones near.
        if at.is_empty() {
            clock += 1;
        }
    }
    let (_dir, path) = file_with("history.csv", &text);
    let vars = [("STICKY_ROUTING_KEY_TTL", "6s")];
    let whole = figures(&[&path], &vars).await;
    assert_eq!(whole.len(), 6, "{:?}", whole.keys());
    let filters: Vec<Vec<&str>> = vec![
        vec!["--merchant", "m1"],
        vec!["--merchant", "m3"],
        vec!["--tenant", "acme"],
        vec!["--tenant", ""],
        vec!["--tenant", "acme", "--merchant", "m2"],
    ];
    for filter in filters {
        let mut args = filter.clone();
        args.push(&path);
        let filtered = figures(&args, &vars).await;
        assert!(!filtered.is_empty(), "{filter:?} kept no merchant");
        for (merchant, figures) in &filtered {
            assert_eq!(
                figures, &whole[merchant],
                "{filter:?}: {merchant:?} differs from the whole replay"
            );
        }
    }
}
