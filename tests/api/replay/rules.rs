//! Hand-computed histories, one rule of contract v1.2 §5 each, where a
//! single row decides: the time of rows without `at` (the first at 0, then
//! one second after the row before, with or without an `at` column),
//! expiry "more than KEY_TTL" after the last write to the millisecond,
//! repeats by `attempt_id` (the 9th id forgets the first, a repeat writes
//! nothing, not even the TTL), the admission budgets and their windows by
//! `at`, only with `--admission`, and ids read as RecordOutcome reads them.

use std::collections::BTreeMap;

use rstest::rstest;

use crate::support::bulk::file_with;
use crate::support::replay::{
    At, HistoryRow, REPLAY_HEADER, Tally, assert_report, csv, customers_with_habits,
    expected_report, replay, report_of,
};

/// Unix seconds given in milliseconds.
fn secs(ms: i64) -> At {
    At::Unix(ms)
}

/// The figures of `rows` replayed with `vars` and `flags`, and the table.
async fn run(
    rows: &str,
    vars: &[(&str, &str)],
    flags: &[&str],
) -> (crate::support::replay::Report, String) {
    let (_dir, path) = file_with("history.csv", rows);
    let json = replay(&[flags, &["--json", &path]].concat(), vars, None).await;
    assert_eq!(json.code, 0, "{}{}", json.stdout, json.stderr);
    let table = replay(&[flags, &[&path]].concat(), vars, None).await;
    assert_eq!(table.code, 0, "{}{}", table.stdout, table.stderr);
    (report_of(&json), table.stdout)
}

/// `attempts` successes through stripe, `pinned` of them pinned to it.
fn successes(attempts: u64, pinned: u64) -> Tally {
    Tally {
        attempts,
        with_pin: pinned,
        followed: pinned,
        successes: attempts,
        followed_successes: pinned,
        no_pin_successes: attempts - pinned,
        ..Tally::default()
    }
}

/// `tally` as m1's, and as every merchant's.
fn only_m1(tally: Tally) -> (Tally, BTreeMap<String, Tally>) {
    (tally, BTreeMap::from([("m1".to_owned(), tally)]))
}

/// Under a 60 s TTL: the first row without `at` is at 0 (a later `at` of 0
/// is no earlier); a habit written at 0 is still there at 60 s and gone at
/// 60.001 s; an empty `at` is one second after the row before, to the
/// millisecond.
#[tokio::test]
async fn rows_without_at_follow_the_row_before_by_one_second_and_expiry_is_by_the_millisecond() {
    let c = |customer: &str, at: At| HistoryRow::card("m1", customer, "stripe").at(at);
    let rows = [
        c("c1", At::Absent),    // 0
        c("c2", secs(0)),       // 0: not earlier than the first row
        c("c1", secs(60_000)),  // 60 s after c1's write: pinned
        c("c2", secs(60_001)),  // 60.001 s after c2's: gone
        c("c3", At::Absent),    // 61.001
        c("c3", secs(121_001)), // 60 s after: pinned
        c("c4", At::Absent),    // 122.001
        c("c4", secs(182_002)), // 60.001 s after: gone
    ];
    let (report, table) = run(&csv(&rows), &[("STICKY_ROUTING_KEY_TTL", "60")], &[]).await;
    let (overall, merchants) = only_m1(successes(8, 2));
    assert_report(&report, &expected_report(&overall, &merchants, 10));
    // At 182.002 s only c4's habit (written then) is left.
    assert_eq!(customers_with_habits(&table), 1, "{table}");
}

/// A file with no `at` column at all: rows 0 s, 1 s, 2 s, … apart, so under
/// a 2 s TTL a habit last written 3 s before is gone.
#[tokio::test]
async fn without_an_at_column_rows_are_one_second_apart_from_0() {
    let text = "merchant_id,customer_id,payment_method,payment_method_type,connector,outcome\n\
                m1,c1,card,credit,stripe,success\n\
                m1,c1,card,credit,stripe,success\n\
                m1,c2,card,credit,stripe,success\n\
                m1,c3,card,credit,stripe,success\n\
                m1,c1,card,credit,stripe,success\n\
                m1,c1,card,credit,stripe,success\n";
    // c1 at 0 (no pin), 1 (pinned), 4 (3 s after its write: gone), 5 (pinned).
    let (report, table) = run(text, &[("STICKY_ROUTING_KEY_TTL", "2")], &[]).await;
    let (overall, merchants) = only_m1(successes(6, 2));
    assert_report(&report, &expected_report(&overall, &merchants, 10));
    // At 5 s: c1 (written at 5) and c3 (at 3); c2 (at 2) is gone.
    assert_eq!(customers_with_habits(&table), 2, "{table}");
}

/// Repeats by `attempt_id` under a 60 s TTL, customer by customer:
/// - c1 sends a1…a9: a2 is still remembered, a1 is not (applied again, and
///   then it is a2 that is forgotten);
/// - c2's repeat, as a failure through another connector, is a duplicate
///   and does not re-arm the TTL;
/// - c3's failure empties its hash, which takes its attempts along;
/// - c4's failure without a habit writes nothing, so records no attempt;
/// - c5's habit expires, and its attempts with it;
/// - c6's failure on a combo it does not have writes nothing either.
#[tokio::test]
async fn repeats_are_the_last_eight_attempts_that_wrote_and_write_nothing() {
    let row = |customer: &str, id: &str, at_ms: i64| {
        HistoryRow::card("m1", customer, "stripe")
            .attempt(id)
            .at(secs(at_ms))
    };
    let mut rows: Vec<HistoryRow> = (1..=9)
        .map(|i| row("c1", &format!("a{i}"), (i - 1) * 1_000))
        .collect();
    rows.extend([
        row("c1", "a2", 9_000),  // duplicate
        row("c1", "a1", 10_000), // forgotten: an attempt, pinned
        row("c1", "a1", 11_000), // duplicate
        row("c1", "a2", 12_000), // forgotten now: an attempt, pinned
        row("c2", "b1", 100_000),
        HistoryRow::card("m1", "c2", "adyen")
            .failed()
            .attempt("b1")
            .at(secs(150_000)), // duplicate, TTL not re-armed
        HistoryRow::card("m1", "c2", "stripe").at(secs(160_001)), // gone: no pin
        row("c3", "d1", 170_000),
        row("c3", "d2", 171_000).failed(), // pinned; the hash goes
        row("c3", "d1", 172_000),          // an attempt, no pin
        row("c4", "e1", 173_000).failed(), // no habit: nothing written
        row("c4", "e1", 174_000),          // an attempt, no pin
        row("c4", "e1", 175_000),          // duplicate
        row("c5", "f1", 176_000),
        row("c5", "f1", 236_001), // expired: an attempt, no pin
        row("c6", "g1", 240_000),
        HistoryRow::card("m1", "c6", "adyen")
            .failed()
            .attempt("g2")
            .at(secs(241_000)), // pinned elsewhere; nothing written
        HistoryRow::card("m1", "c6", "adyen")
            .attempt("g2")
            .at(secs(242_000)), // an attempt, pinned elsewhere
    ]);
    let tally = Tally {
        // c1 11, c2 2, c3 3, c4 2, c5 2, c6 3
        attempts: 23,
        // c1 10, c3 1, c6 2
        with_pin: 13,
        followed: 11,
        successes: 20,
        followed_successes: 10,
        elsewhere_successes: 1,
        no_pin_successes: 9,
        // c1 2, c2 1, c4 1
        duplicates: 4,
        bad_rows: 0,
    };
    let (report, _) = run(&csv(&rows), &[("STICKY_ROUTING_KEY_TTL", "60")], &[]).await;
    let (overall, merchants) = only_m1(tally);
    assert_report(&report, &expected_report(&overall, &merchants, 10));
}

/// m1's budget is 2 new customers per 100 s window, m2's is 0. Each new
/// customer's row stands for 2 attempts: the second is pinned only when the
/// first was admitted. m1's c1 and c2 are admitted at 0 s and 1 s, c3 is
/// not; at 150 s the estimate is 0 + 2 × (1 − 0.5) = 1, so c4 is; at 151 s
/// it is 1 + 2 × 0.49 = 1.98 and c5 is not; at 250 s, 0 + 1 × 0.5: c6 is;
/// at 450 s both windows are empty: c7 and c8 are, c9 is not. Without
/// `--admission` every one is admitted. The window is
/// `ADMISSION_WINDOW`, or by default the key TTL.
#[rstest]
#[case::admission_window(&[("STICKY_ROUTING_ADMISSION_WINDOW", "100s")], true)]
#[case::window_is_the_key_ttl(&[("STICKY_ROUTING_KEY_TTL", "100")], true)]
#[case::without_admission(&[("STICKY_ROUTING_ADMISSION_WINDOW", "100s")], false)]
#[tokio::test]
async fn admission_budgets_and_windows_go_by_at_only_with_admission(
    #[case] window: &[(&str, &str)],
    #[case] admission: bool,
) {
    let new = |merchant: &str, customer: &str, at_s: i64| {
        HistoryRow::card(merchant, customer, "stripe")
            .times(2)
            .at(secs(at_s * 1_000))
    };
    let rows = [
        new("m1", "c1", 0),
        new("m1", "c2", 1),
        new("m1", "c3", 2),
        new("m1", "c4", 150),
        new("m1", "c5", 151),
        new("m1", "c6", 250),
        new("m1", "c7", 450),
        new("m1", "c8", 450),
        new("m1", "c9", 450),
        new("m2", "c1", 450),
    ];
    let mut vars = vec![
        ("STICKY_ROUTING_MAX_CUSTOMERS", "2"),
        ("STICKY_ROUTING_MAX_CUSTOMERS_m2", "0"),
    ];
    vars.extend_from_slice(window);
    let flags: &[&str] = if admission { &["--admission"] } else { &[] };
    let (report, _) = run(&csv(&rows), &vars, flags).await;
    let (m1_pinned, m2_pinned) = if admission { (6, 0) } else { (9, 1) };
    let merchants = BTreeMap::from([
        ("m1".to_owned(), successes(18, m1_pinned)),
        ("m2".to_owned(), successes(2, m2_pinned)),
    ]);
    let mut overall = Tally::default();
    merchants.values().for_each(|tally| overall.add(tally));
    assert_report(&report, &expected_report(&overall, &merchants, 10));
}

/// Ids are read as RecordOutcome reads them: merchant and customer ids and
/// attempt ids trimmed, payment method and type upper-cased, customer ids
/// and connectors with their case kept, `count` trimmed.
#[tokio::test]
async fn ids_are_read_as_record_outcome_reads_them() {
    let text = format!(
        "{REPLAY_HEADER}\
         m1, c1 ,card,credit,stripe,success,,,\n\
         m1,c1,Card, CREDIT ,stripe,success,,,\n\
         \x20m1 ,c1,card,credit,stripe,success,,,\n\
         m1,C1,card,credit,stripe,success,,,\n\
         m1,c1,card,credit,Stripe,success,,,\n\
         m1,c1,card,credit,stripe,success,,p1 ,\n\
         m1,c1,card,credit,stripe,success,, p1,\n\
         m1,c1,card,credit,stripe,success, 2 ,,\n"
    );
    // c1 pinned to stripe from the 2nd row on (the 5th goes to Stripe, another
    // connector); C1 is another customer; the 7th row repeats p1.
    let tally = Tally {
        attempts: 8,
        with_pin: 6,
        followed: 5,
        successes: 8,
        followed_successes: 5,
        elsewhere_successes: 1,
        no_pin_successes: 2,
        duplicates: 1,
        bad_rows: 0,
    };
    let (report, _) = run(&text, &[], &[]).await;
    let (overall, merchants) = only_m1(tally);
    assert_report(&report, &expected_report(&overall, &merchants, 10));
}
