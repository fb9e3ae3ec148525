//! Bad rows and bad runs: every kind of bad row is reported on stderr as
//! `line N: reason` naming its field (never quoting the customer id),
//! skipped, and counted in `bad_rows` (for its merchant when its
//! `merchant_id` was valid), with exit 1 and the report still printed;
//! usage, settings and file errors are exit 2 with no report.

use std::collections::BTreeMap;

use crate::support::bulk::{Ran, file_with};
use crate::support::replay::{
    REPLAY_HEADER, Tally, assert_report, expected_report, replay, report_of,
};

/// Every `line N: …` of `stderr` starts with the matching `expected`
/// (`line N: field`), in order, and there are no others.
fn assert_reported(ran: &Ran, expected: &[&str]) {
    let reported: Vec<&str> = ran
        .stderr
        .lines()
        .filter(|line| line.starts_with("line "))
        .collect();
    assert_eq!(reported.len(), expected.len(), "{}", ran.stderr);
    for (line, expected) in reported.iter().zip(expected) {
        assert!(
            line.starts_with(&format!("{expected}:")) || line.starts_with(expected),
            "`{line}` is not `{expected}`:\n{}",
            ran.stderr
        );
    }
}

/// No customer id of the file (they all start `secret-`) in any output.
fn assert_no_customer_id(ran: &Ran) {
    assert!(!ran.stdout.contains("secret-"), "{}", ran.stdout);
    assert!(!ran.stderr.contains("secret-"), "{}", ran.stderr);
}

/// One row of each kind, then good rows whose figures show that no bad
/// row wrote anything, and that time goes on from the last good row.
#[tokio::test]
async fn each_kind_of_bad_csv_row_is_reported_by_line_and_field_skipped_and_counted() {
    let long_customer = format!("secret-{}", "x".repeat(200));
    let long_merchant = "m".repeat(129);
    let long_attempt = "a".repeat(129);
    let rows = [
        /* 2 */ "m1,secret-c1,card,credit,stripe,success,,,10".to_owned(),
        /* 3 */ "m1,secret-c1,card,credit,adyen,refund,,,11".to_owned(),
        /* 4 */ "m1,secret-c1,card,,adyen,success,,,12".to_owned(),
        /* 5 */ ",secret-c1,card,credit,adyen,success,,,12".to_owned(),
        /* 6 */ "m1,,card,credit,adyen,success,,,12".to_owned(),
        /* 7 */ "m1,secret-c1,card,credit,,success,,,12".to_owned(),
        /* 8 */ "m1,secret-c1,,credit,adyen,success,,,12".to_owned(),
        /* 9 */ "m1,secret-c1,card,credit,adyen,,,,12".to_owned(),
        /* 10 */ "m2,secret-c2,card,credit,adyen,success,,,yesterday".to_owned(),
        /* 11 */ "m2,secret-c2,card,credit,adyen,success,,,9".to_owned(),
        /* 12 */ "m2,secret-c2,card,credit,adyen,success,2,pay-1,13".to_owned(),
        /* 13 */ "m2,secret-c2,card,credit,adyen,success,0,,13".to_owned(),
        /* 14 */ "m2,secret-c2,card,credit,adyen,success,two,,13".to_owned(),
        /* 15 */ "m2,secret-c2,card,credit,adyen,success,-1,,13".to_owned(),
        /* 16 */ format!("m2,{long_customer},card,credit,adyen,success,,,13"),
        /* 17 */ "m2,secret-c2\u{7},card,credit,adyen,success,,,13".to_owned(),
        /* 18 */ "m2,secret-c2,card:x,credit,adyen,success,,,13".to_owned(),
        /* 19 */ format!("{long_merchant},secret-c1,card,credit,adyen,success,,,13"),
        /* 20 */ format!("m1,secret-c1,card,credit,adyen,success,,{long_attempt},13"),
        // Two faults: the first in import's order is named.
        /* 21 */
        "m1,secret-c1,card,credit,adyen,refund,0,,13".to_owned(),
        /* 22 */ "m2,secret-c2,card,credit,adyen,success,0,,yesterday".to_owned(),
        // Good again: 1 s after the last good row (10 s), not after the bad
        // rows' 13 s, so 11.5 s is in order.
        /* 23 */
        "m1,secret-c1,card,credit,stripe,success,,,".to_owned(),
        /* 24 */ "m1,secret-c1,card,credit,stripe,success,,,11.5".to_owned(),
        /* 25 */ "m2,secret-c2,card,credit,adyen,success,,,11.5".to_owned(),
    ];
    let text = format!("{REPLAY_HEADER}{}\n", rows.join("\n"));
    let (_dir, path) = file_with("history.csv", &text);
    let vars = [("STICKY_ROUTING_KEY_TTL", "60")];
    let ran = replay(&["--json", &path], &vars, None).await;
    assert_eq!(ran.code, 1, "{}{}", ran.stdout, ran.stderr);
    assert_reported(
        &ran,
        &[
            "line 3: outcome",
            "line 4: payment_method_type",
            "line 5: merchant_id",
            "line 6: customer_id",
            "line 7: connector",
            "line 8: payment_method",
            "line 9: outcome",
            "line 10: at",
            "line 11: at",
            "line 12: count",
            "line 13: count",
            "line 14: count",
            "line 15: count",
            "line 16: customer_id",
            "line 17: customer_id",
            "line 18: payment_method",
            "line 19: merchant_id",
            "line 20: attempt_id",
            "line 21: outcome",
            "line 22: count",
        ],
    );
    assert_no_customer_id(&ran);
    // c1's stripe habit alone: had a bad adyen row been applied, adyen
    // would tie and win the pin by name. c2 had no habit at line 25.
    let m1 = Tally {
        attempts: 3,
        with_pin: 2,
        followed: 2,
        successes: 3,
        followed_successes: 2,
        no_pin_successes: 1,
        bad_rows: 8,
        ..Tally::default()
    };
    let m2 = Tally {
        attempts: 1,
        successes: 1,
        no_pin_successes: 1,
        bad_rows: 10,
        ..Tally::default()
    };
    let merchants = BTreeMap::from([("m1".to_owned(), m1), ("m2".to_owned(), m2)]);
    let mut overall = Tally {
        // Lines 5 and 19: no valid merchant.
        bad_rows: 2,
        ..Tally::default()
    };
    merchants.values().for_each(|tally| overall.add(tally));
    assert_report(&report_of(&ran), &expected_report(&overall, &merchants, 10));

    // The table is printed too, with the same exit code.
    let table = replay(&[&path], &vars, None).await;
    assert_eq!(table.code, 1, "{}{}", table.stdout, table.stderr);
    assert!(table.stdout.contains("20 bad rows"), "{}", table.stdout);
    assert_no_customer_id(&table);
}

/// JSON Lines: lines are counted physically (blank ones too); a line that
/// is not JSON, not an object, lacks a field, holds a non-string where a
/// string belongs, or a bad `at`, `count` or pair of them is reported.
#[tokio::test]
async fn each_kind_of_bad_json_line_is_reported_by_its_line() {
    let good = r#"{"merchant_id":"m1","customer_id":"secret-c1","payment_method":"card","payment_method_type":"credit","connector":"stripe","outcome":"success""#;
    let lines = [
        /* 1 */ format!("{good},\"at\":10}}"),
        /* 2 */ String::new(),
        /* 3 */ format!("{good},\"at\":"),
        /* 4 */ "[\"m1\",\"secret-c1\"]".to_owned(),
        /* 5 */ r#"{"merchant_id":"m1","customer_id":"secret-c1","payment_method":"card","payment_method_type":"credit","connector":"stripe"}"#.to_owned(),
        /* 6 */ r#"{"merchant_id":"m1","customer_id":7,"payment_method":"card","payment_method_type":"credit","connector":"stripe","outcome":"success"}"#.to_owned(),
        /* 7 */ format!("{good},\"at\":true}}"),
        /* 8 */ format!("{good},\"count\":2,\"attempt_id\":\"p1\"}}"),
        /* 9 */ format!("{good},\"at\":\"2026-13-01T00:00:00Z\"}}"),
        /* 10 */ format!("{good},\"count\":\"0\"}}"),
        /* 11 */ format!("{good},\"at\":9}}"),
        /* 12 */ format!("{good},\"at\":11}}"),
    ];
    let (_dir, path) = file_with("history.jsonl", &format!("{}\n", lines.join("\n")));
    let ran = replay(&["--json", &path], &[], None).await;
    assert_eq!(ran.code, 1, "{}{}", ran.stdout, ran.stderr);
    assert_reported(
        &ran,
        &[
            "line 3: not valid JSON",
            "line 4: not a JSON object",
            "line 5: outcome",
            "line 6: customer_id",
            "line 7: at",
            "line 8: count",
            "line 9: at",
            "line 10: count",
            "line 11: at",
        ],
    );
    assert_no_customer_id(&ran);
    let report = report_of(&ran);
    assert_eq!(report.overall.bad_rows, 9);
    assert_eq!((report.overall.attempts, report.overall.with_pin), (2, 1));
}

/// A row that lacks a column altogether (a short CSV row) is reported by
/// the first missing field and skipped.
#[tokio::test]
async fn a_row_missing_a_column_is_reported_skipped_and_counted() {
    let text = format!(
        "{REPLAY_HEADER}m1,secret-c1,card,credit,stripe,success,,,\n\
         m1,secret-c1,card,credit\n\
         m1,secret-c1,card,credit,stripe,success,,,\n"
    );
    let (_dir, path) = file_with("history.csv", &text);
    let ran = replay(&["--json", &path], &[], None).await;
    assert_eq!(ran.code, 1, "{}{}", ran.stdout, ran.stderr);
    assert_reported(&ran, &["line 3: connector: missing"]);
    assert_no_customer_id(&ran);
    let report = report_of(&ran);
    assert_eq!(report.overall.bad_rows, 1);
    assert_eq!((report.overall.attempts, report.overall.with_pin), (2, 1));
}

/// The contract: "a bad row counts for its merchant when its merchant_id
/// was valid" and "a merchant appears once it had … a bad row"; under
/// `--merchant`, "the other merchants' rows are skipped unread beyond their
/// merchant_id". Each row of m1 here has a valid merchant_id and one other
/// fault: a CSV row short of columns, a CSV cell that is not UTF-8, a JSON
/// number where a string belongs. Each should count for m1, and be skipped
/// unread (not reported, not counted) under `--merchant m2`.
#[tokio::test]
async fn a_row_with_a_valid_merchant_id_counts_for_its_merchant_whatever_else_is_wrong() {
    let m2_row = "m2,secret-c2,card,credit,stripe,success\n";
    let header = "merchant_id,customer_id,payment_method,payment_method_type,connector,outcome\n";
    let short_row = format!("{header}m1,secret-c1,card,credit\n{m2_row}").into_bytes();
    let mut not_utf8 = format!("{header}m1,secret-c1,card,credit,str").into_bytes();
    not_utf8.extend_from_slice(b"\xffipe,success\n");
    not_utf8.extend_from_slice(m2_row.as_bytes());
    let number = "{\"merchant_id\":\"m1\",\"customer_id\":7,\"payment_method\":\"card\",\"payment_method_type\":\"credit\",\"connector\":\"stripe\",\"outcome\":\"success\"}\n\
         {\"merchant_id\":\"m2\",\"customer_id\":\"secret-c2\",\"payment_method\":\"card\",\"payment_method_type\":\"credit\",\"connector\":\"stripe\",\"outcome\":\"success\"}\n"
        .as_bytes()
        .to_vec();
    let dir = tempfile::tempdir().unwrap();
    let mut wrong = Vec::new();
    for (name, bytes) in [
        ("short.csv", short_row),
        ("not-utf8.csv", not_utf8),
        ("number.jsonl", number),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        let path = path.to_string_lossy().into_owned();
        let every = replay(&["--json", &path], &[], None).await;
        let m1_bad_rows = report_of(&every)
            .merchants
            .iter()
            .find(|m| m.merchant_id.as_deref() == Some("m1"))
            .map(|m| m.bad_rows);
        let only_m2 = replay(&["--json", "--merchant", "m2", &path], &[], None).await;
        let seen = (
            m1_bad_rows,
            only_m2.code,
            report_of(&only_m2).overall.bad_rows,
        );
        if seen != (Some(1), 0, 0) {
            wrong.push(format!(
                "{name}: m1's bad_rows {:?}; under --merchant m2 exit {} and {} bad rows:\n{}",
                seen.0, seen.1, seen.2, only_m2.stderr
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// A bad run: its arguments, its settings, and what stderr must say.
type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str);

/// Usage, settings and file errors: exit 2, the reason on stderr, no
/// report on stdout.
#[tokio::test]
async fn usage_settings_and_file_errors_are_exit_2_without_a_report() {
    let good = format!("{REPLAY_HEADER}m1,secret-c1,card,credit,stripe,success,,,\n");
    let (_dir, csv_path) = file_with("history.csv", &good);
    let (_txt_dir, txt_path) = file_with("history.txt", &good);
    let (_no_dir, headless) = file_with(
        "headless.csv",
        "merchant_id,customer_id,payment_method,payment_method_type,connector\nm1,c1,card,credit,stripe\n",
    );
    let missing = csv_path.replace("history.csv", "gone.csv");
    let cases: [Case; 8] = [
        (
            &["--frobnicate", &csv_path],
            &[],
            "unknown option `--frobnicate`",
        ),
        (&["-"], &[], "stdin (-) needs --format"),
        (
            &["--format", "xml", "-"],
            &[],
            "--format must be csv or jsonl",
        ),
        (&[&txt_path], &[], "cannot tell the format"),
        (
            &["--top", "many", &csv_path],
            &[],
            "--top needs a whole number",
        ),
        (&[&missing], &[], "cannot open"),
        (&[&headless], &[], "no `outcome` column"),
        (
            &[&csv_path],
            &[("STICKY_ROUTING_MIN_PIN_COUNT", "0")],
            "STICKY_ROUTING_MIN_PIN_COUNT",
        ),
    ];
    for (args, vars, says) in cases {
        // Rows on stdin, as an operator would pipe them, even where the
        // run is refused before it reads them.
        let ran = replay(args, vars, Some(good.as_bytes())).await;
        assert_eq!(ran.code, 2, "{args:?}: {}{}", ran.stdout, ran.stderr);
        assert!(ran.stderr.contains(says), "{args:?}: {}", ran.stderr);
        assert_eq!(ran.stdout, "", "{args:?}: no report");
    }
}
