//! Where replay's rows come from: a file or stdin (`-`, with `--format`),
//! CSV or JSON Lines with `at` as a number or a string, and nothing else:
//! no Redis is needed or even contacted.

use std::net::TcpListener;

use rstest::rstest;

use crate::support::bulk::file_with;
use crate::support::replay::{
    At, HistoryRow, Shape, Tally, assert_report, csv, expected_report, generated_history, jsonl,
    replay, report_of,
};

/// A history with a bad row at line 5 (of the CSV; the 4th JSON line).
fn history_with_a_bad_row() -> Vec<HistoryRow> {
    let mut rows = generated_history(Shape {
        seed: 0x57d1,
        rows: 300,
        merchants: 3,
        customers: 5,
        times: true,
    });
    rows[3].connector = String::new();
    rows
}

/// Piped into `-` with `--format`, the rows give the very report, the same
/// bad lines and the same exit code as the file does; and the same rows as
/// CSV or as JSON Lines give the same report.
#[rstest]
#[case::csv("csv", "history.csv")]
#[case::jsonl("jsonl", "history.jsonl")]
#[tokio::test]
async fn stdin_gives_the_same_report_as_the_file(#[case] format: &str, #[case] name: &str) {
    let rows = history_with_a_bad_row();
    let text = if format == "csv" {
        csv(&rows)
    } else {
        jsonl(&rows)
    };
    let (_dir, path) = file_with(name, &text);
    let vars = [("STICKY_ROUTING_KEY_TTL", "60")];
    let from_file = replay(&["--json", &path], &vars, None).await;
    assert_eq!(from_file.code, 1, "{}", from_file.stderr);
    let bad_line = if format == "csv" {
        "line 5: "
    } else {
        "line 4: "
    };
    assert!(
        from_file.stderr.contains(&format!("{bad_line}connector")),
        "{}",
        from_file.stderr
    );
    assert!(report_of(&from_file).overall.attempts > 300);
    let piped = replay(
        &["--json", "--format", format, "-"],
        &vars,
        Some(text.as_bytes()),
    )
    .await;
    assert_eq!(piped.code, from_file.code, "{}", piped.stderr);
    assert_eq!(piped.stdout, from_file.stdout);
    assert_eq!(piped.stderr, from_file.stderr);
    // `--format` also reads a file whose name says nothing.
    let (_txt_dir, txt) = file_with("history.txt", &text);
    let named = replay(&["--json", "--format", format, &txt], &vars, None).await;
    assert_eq!(named.stdout, from_file.stdout);

    let (_csv_dir, as_csv) = file_with("history.csv", &csv(&rows));
    let other = replay(&["--json", &as_csv], &vars, None).await;
    assert_eq!(other.stdout, from_file.stdout, "CSV and JSON Lines differ");
}

/// `at` as a JSON number (whole or with milliseconds) and as a string (RFC
/// 3339 with `Z` or an offset, a space or a `T`, or Unix seconds), `null`
/// and `""` (no `at`: one second after the row before). Under a 60 s TTL
/// each gap is exactly 60 s (the habit stays) or 60.001 s (it is gone), so
/// a time read a millisecond off changes the figures.
#[tokio::test]
async fn json_lines_take_at_as_a_number_or_a_string() {
    let at_values = [
        "1772366400",                        // 12:00:00.000
        "\"2026-03-01T12:01:00Z\"",          // +60 s: pinned
        "1772366520.001",                    // +60.001 s: gone
        "\"2026-03-01 13:03:00.001+01:00\"", // 12:03:00.001, +60 s: pinned
        "null",                              // 12:03:01.001: pinned
        "\"\"",                              // 12:03:02.001: pinned
        "\"1772366642.001\"",                // 12:04:02.001, +60 s: pinned
        "1772366702.002",                    // +60.001 s: gone
        "\"2026-03-01T06:36:02.002-05:30\"", // 12:06:02.002, +60 s: pinned
    ];
    let text: String = at_values
        .iter()
        .map(|at| {
            format!(
                "{{\"merchant_id\":\"m1\",\"customer_id\":\"c1\",\"payment_method\":\"card\",\
                 \"payment_method_type\":\"credit\",\"connector\":\"stripe\",\
                 \"outcome\":\"success\",\"at\":{at}}}\n"
            )
        })
        .collect();
    let (_dir, path) = file_with("history.jsonl", &text);
    let vars = [("STICKY_ROUTING_KEY_TTL", "60")];
    let ran = replay(&["--json", &path], &vars, None).await;
    assert_eq!(ran.code, 0, "{}{}", ran.stdout, ran.stderr);
    let m1 = Tally {
        attempts: 9,
        with_pin: 6,
        followed: 6,
        successes: 9,
        followed_successes: 6,
        no_pin_successes: 3,
        ..Tally::default()
    };
    let merchants = [("m1".to_owned(), m1)].into();
    let expected = expected_report(&m1, &merchants, 10);
    assert_report(&report_of(&ran), &expected);

    // The same times in CSV cells.
    let rows: Vec<HistoryRow> = [
        At::Unix(1_772_366_400_000),
        At::Rfc3339 {
            ms: 1_772_366_460_000,
            offset_minutes: 0,
        },
        At::Unix(1_772_366_520_001),
        At::Rfc3339 {
            ms: 1_772_366_580_001,
            offset_minutes: 60,
        },
        At::Absent,
        At::Absent,
        At::Unix(1_772_366_642_001),
        At::Unix(1_772_366_702_002),
        At::Rfc3339 {
            ms: 1_772_366_762_002,
            offset_minutes: -330,
        },
    ]
    .into_iter()
    .map(|at| HistoryRow::card("m1", "c1", "stripe").at(at))
    .collect();
    let (_csv_dir, as_csv) = file_with("history.csv", &csv(&rows));
    let ran = replay(&["--json", &as_csv], &vars, None).await;
    assert_eq!(ran.code, 0, "{}{}", ran.stdout, ran.stderr);
    assert_report(&report_of(&ran), &expected);
}

/// Replay runs in memory: with `STICKY_ROUTING_REDIS_URL` at a port where
/// a listener waits, it finishes and never connects there (every other
/// replay test points it at a port where nothing listens).
#[tokio::test]
async fn replay_needs_no_redis_and_never_connects_to_one() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let url = format!(
        "redis://127.0.0.1:{}",
        listener.local_addr().unwrap().port()
    );
    let rows = generated_history(Shape {
        seed: 0x4ed15,
        rows: 200,
        merchants: 2,
        customers: 4,
        times: true,
    });
    let (_dir, path) = file_with("history.csv", &csv(&rows));
    let vars = [("STICKY_ROUTING_REDIS_URL", url.as_str())];
    let ran = replay(&["--json", "--admission", &path], &vars, None).await;
    assert_eq!(ran.code, 0, "{}{}", ran.stdout, ran.stderr);
    assert!(report_of(&ran).overall.attempts >= 200);
    let accepted = listener.accept();
    assert!(
        matches!(&accepted, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock),
        "replay connected to Redis: {accepted:?}"
    );
}

/// The rules' settings come from `--config FILE` or `STICKY_ROUTING_CONFIG`,
/// and the environment wins over the file: c1's habit, written at 0 s, is
/// gone at 61 s under a 60 s TTL and still there under an hour's.
#[tokio::test]
async fn settings_come_from_the_config_file_and_the_environment_wins() {
    let rows = [
        HistoryRow::card("m1", "c1", "stripe").at(At::Unix(0)),
        HistoryRow::card("m1", "c1", "stripe").at(At::Unix(61_000)),
    ];
    let (_dir, path) = file_with("history.csv", &csv(&rows));
    let (_config_dir, config) = file_with("settings.toml", "key_ttl = \"60s\"\n");
    let pinned = |ran: &crate::support::bulk::Ran| {
        assert_eq!(ran.code, 0, "{}{}", ran.stdout, ran.stderr);
        report_of(ran).overall.with_pin
    };
    let hour = [("STICKY_ROUTING_KEY_TTL", "1h")];
    let from_flag = replay(&["--json", "--config", &config, &path], &[], None).await;
    assert_eq!(pinned(&from_flag), 0);
    let from_variable = [("STICKY_ROUTING_CONFIG", config.as_str())];
    let from_env_file = replay(&["--json", &path], &from_variable, None).await;
    assert_eq!(pinned(&from_env_file), 0);
    let overridden = replay(&["--json", "--config", &config, &path], &hour, None).await;
    assert_eq!(pinned(&overridden), 1);
    // The default TTL (90 days) keeps it too.
    let defaults = replay(&["--json", &path], &[], None).await;
    assert_eq!(pinned(&defaults), 1);
}
