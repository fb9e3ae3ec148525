//! What the report lists: `--merchant` replays one merchant's rows alone
//! (in the file's time), `--top N` lists the N merchants with the most
//! attempts, ties by merchant id bytewise (10 by default, none with 0), and
//! a merchant is listed once it had an attempt or a bad row.

use std::collections::BTreeMap;

use crate::support::bulk::file_with;
use crate::support::replay::{
    HistoryRow, REPLAY_HEADER, Tally, assert_report, csv, expected_report, replay, report_of,
    table_row,
};

/// Thirteen merchants: m1 with 7 attempts, m10 and m9 with 5, B and a with
/// 3, m2 to m4 with 2, m5 to m8 with 1, and zz with only a bad row. Each
/// merchant's attempts are successes of one customer through stripe, so all
/// but its first are pinned.
fn thirteen_merchants() -> (String, Tally, BTreeMap<String, Tally>) {
    let attempts: [(&str, u32); 12] = [
        ("m1", 7),
        ("m10", 5),
        ("m9", 5),
        ("B", 3),
        ("a", 3),
        ("m2", 2),
        ("m3", 2),
        ("m4", 2),
        ("m5", 1),
        ("m6", 1),
        ("m7", 1),
        ("m8", 1),
    ];
    // Written in an order that is neither the report's nor bytewise.
    let mut rows = Vec::new();
    for (merchant, n) in attempts.iter().rev() {
        rows.push(HistoryRow::card(merchant, "c1", "stripe").times(*n));
    }
    let mut text = csv(&rows);
    text.push_str("zz,c1,card,credit,stripe,refund,,,\n");
    let mut merchants = BTreeMap::new();
    let mut overall = Tally::default();
    for (merchant, n) in attempts {
        let n = u64::from(n);
        let tally = Tally {
            attempts: n,
            with_pin: n - 1,
            followed: n - 1,
            successes: n,
            followed_successes: n - 1,
            no_pin_successes: 1,
            ..Tally::default()
        };
        overall.add(&tally);
        merchants.insert(merchant.to_owned(), tally);
    }
    let zz = Tally {
        bad_rows: 1,
        ..Tally::default()
    };
    overall.add(&zz);
    merchants.insert("zz".to_owned(), zz);
    (text, overall, merchants)
}

#[tokio::test]
async fn top_lists_the_merchants_with_most_attempts_ties_by_id_bytewise() {
    let (text, overall, merchants) = thirteen_merchants();
    let (_dir, path) = file_with("history.csv", &text);
    for (args, top) in [
        (&[][..], 10),
        (&["--top", "3"][..], 3),
        (&["--top", "0"][..], 0),
        (&["--top", "100"][..], 100),
    ] {
        let ran = replay(&[args, &["--json", &path]].concat(), &[], None).await;
        assert_eq!(ran.code, 1, "{args:?}: {}", ran.stderr);
        let report = report_of(&ran);
        let expected = expected_report(&overall, &merchants, top);
        assert_report(&report, &expected);
        let ids: Vec<&str> = report
            .merchants
            .iter()
            .map(|m| m.merchant_id.as_deref().unwrap())
            .collect();
        let order = [
            "m1", "m10", "m9", "B", "a", "m2", "m3", "m4", "m5", "m6", "m7", "m8", "zz",
        ];
        assert_eq!(ids, order[..top.min(order.len())], "{args:?}");
    }
    // The table lists the same merchants.
    let ran = replay(&["--top", "3", &path], &[], None).await;
    for listed in ["(all)", "m1", "m10", "m9"] {
        table_row(&ran.stdout, listed);
    }
    for left_out in ["B", "a", "m2", "zz"] {
        let shown = ran
            .stdout
            .lines()
            .any(|line| line.split_whitespace().next() == Some(left_out));
        assert!(!shown, "{left_out} listed:\n{}", ran.stdout);
    }
}

/// Under `--merchant m2` the other merchants' rows are skipped (m1's
/// out-of-order `at` and bad outcome are not reported), a row whose
/// `merchant_id` is itself bad still is, and m2's rows are in the file's
/// time: its first row, without `at`, is one second after m1's 1000 s, so
/// its own `at` of 30 s is out of order, as in the whole replay.
#[tokio::test]
async fn merchant_replays_only_that_merchants_rows_in_the_files_time() {
    let text = format!(
        "{REPLAY_HEADER}\
         m1,c1,card,credit,stripe,success,,,1000\n\
         m2,c1,card,credit,stripe,success,,,\n\
         m1,c1,card,credit,stripe,success,,,500\n\
         m2,c1,card,credit,stripe,success,,,30\n\
         ,c9,card,credit,stripe,success,,,\n\
         m2,c1,card,credit,stripe,success,,,\n\
         m1,c2,card,credit,stripe,refund,,,\n\
         m2,c2,card,credit,adyen,success,,,\n"
    );
    let (_dir, path) = file_with("history.csv", &text);
    let vars = [("STICKY_ROUTING_KEY_TTL", "60")];

    // m2 alone: its rows at 1001, 1002 and 1003 s (30 s is out of order);
    // c1 pinned at 1002.
    let only_m2 = replay(&["--json", "--merchant", "m2", &path], &vars, None).await;
    assert_eq!(only_m2.code, 1, "{}", only_m2.stderr);
    let reported: Vec<&str> = only_m2
        .stderr
        .lines()
        .filter(|l| l.starts_with("line "))
        .collect();
    assert_eq!(reported.len(), 2, "{}", only_m2.stderr);
    assert!(reported[0].starts_with("line 5: at"), "{}", only_m2.stderr);
    assert!(
        reported[1].starts_with("line 6: merchant_id"),
        "{}",
        only_m2.stderr
    );
    let m2 = Tally {
        attempts: 3,
        with_pin: 1,
        followed: 1,
        successes: 3,
        followed_successes: 1,
        no_pin_successes: 2,
        bad_rows: 1,
        ..Tally::default()
    };
    let overall = Tally { bad_rows: 2, ..m2 };
    let merchants = BTreeMap::from([("m2".to_owned(), m2)]);
    assert_report(
        &report_of(&only_m2),
        &expected_report(&overall, &merchants, 10),
    );

    // Every merchant: m2's figures are the same; m1's 500 s is out of
    // order too.
    let all = replay(&["--json", &path], &vars, None).await;
    assert_eq!(all.code, 1, "{}", all.stderr);
    let m1 = Tally {
        attempts: 1,
        successes: 1,
        no_pin_successes: 1,
        bad_rows: 2,
        ..Tally::default()
    };
    let m2 = Tally {
        attempts: 3,
        with_pin: 1,
        followed: 1,
        successes: 3,
        followed_successes: 1,
        no_pin_successes: 2,
        bad_rows: 1,
        ..Tally::default()
    };
    let merchants = BTreeMap::from([("m1".to_owned(), m1), ("m2".to_owned(), m2)]);
    let mut overall = Tally {
        bad_rows: 1,
        ..Tally::default()
    };
    merchants.values().for_each(|t| overall.add(t));
    assert_report(&report_of(&all), &expected_report(&overall, &merchants, 10));

    // A merchant with no rows: nothing replayed, nothing listed.
    let none = replay(&["--json", "--merchant", "m3", &path], &vars, None).await;
    let report = report_of(&none);
    assert_eq!(report.overall.attempts, 0);
    assert!(report.merchants.is_empty(), "{}", none.stdout);
}
