//! `sticky-routing import` run again over the same file: however many rows
//! a customer has, with or without `attempt_id`, the second run applies
//! nothing (the import mark, `domain::import_mark`); and a key the service
//! does not own is one bad row, not the end of the import.

use rstest::rstest;

use crate::support::Topology;
use crate::support::bulk::{HEADER, Target, file_with, summary_count};
use test_support::redis_server::redis_cli;

/// `rows` successes of 2 for customer c1 of m1, with attempt ids or not:
/// more than the 8 attempts a hash remembers.
fn one_customer(rows: usize, attempt_ids: bool) -> String {
    let mut text = String::from(HEADER);
    for i in 0..rows {
        let attempt = if attempt_ids {
            format!("att-{i}")
        } else {
            String::new()
        };
        text.push_str(&format!("m1,c1,card,credit,stripe,success,2,{attempt}\n"));
    }
    text
}

#[rstest]
#[tokio::test]
async fn running_a_file_again_applies_none_of_a_customers_many_rows(
    #[values(true, false)] attempt_ids: bool,
    #[values(Topology::Single, Topology::Cluster)] topology: Topology,
) {
    const ROWS: usize = 12;
    let target = Target::start(topology).await;
    let (_dir, path) = file_with("rows.csv", &one_customer(ROWS, attempt_ids));
    let first = target.import(&["--no-admission", &path], &[]).await;
    assert_eq!(first.code, 0, "{}{}", first.stdout, first.stderr);
    assert_eq!(summary_count(&first, "applied success"), ROWS as u64);
    let once = target.state().await;
    assert_eq!(
        once["sticky_gw_m1_c1"]["CARD:CREDIT:stripe"],
        2 * ROWS as i64
    );
    let again = target.import(&["--no-admission", &path], &[]).await;
    assert_eq!(again.code, 0, "{}{}", again.stdout, again.stderr);
    assert_eq!(
        summary_count(&again, "applied success"),
        0,
        "{}",
        again.stdout
    );
    assert_eq!(summary_count(&again, "duplicate"), ROWS as u64);
    assert_eq!(target.state().await, once);
}

/// The same rows in another file are another import: applied again.
#[tokio::test]
async fn another_file_with_the_same_rows_is_applied() {
    let target = Target::start(Topology::Single).await;
    let text = one_customer(3, false);
    let (_dir, path) = file_with("rows.csv", &text);
    let (_other_dir, other) = file_with("other.csv", &format!("{text}\n"));
    for file in [&path, &other] {
        let ran = target.import(&["--no-admission", file], &[]).await;
        assert_eq!(summary_count(&ran, "applied success"), 3, "{}", ran.stdout);
    }
    assert_eq!(
        target.state().await["sticky_gw_m1_c1"]["CARD:CREDIT:stripe"],
        12
    );
}

/// `SET sticky_gw_m1_c2 foreign`: that row is reported by its line (never
/// the customer id), not applied, exit 1; the import goes on, and a re-run
/// counts nothing twice.
#[tokio::test]
async fn a_key_of_another_type_is_one_bad_row_and_the_import_goes_on() {
    let target = Target::start(Topology::Single).await;
    let port = target.redis.data_ports()[0];
    redis_cli(port, &["SET", "sticky_gw_m1_c2", "foreign"]);
    let text = format!(
        "{HEADER}m1,c2,card,credit,stripe,success,1,\nm1,c3,card,credit,stripe,success,1,\n"
    );
    let (_dir, path) = file_with("rows.csv", &text);
    for run in 0..2 {
        let ran = target.import(&[&path], &[]).await;
        assert_eq!(ran.code, 1, "run {run}: {}{}", ran.stdout, ran.stderr);
        assert!(ran.stderr.contains("line 2: not applied"), "{}", ran.stderr);
        assert!(!ran.stderr.contains("c2"), "{}", ran.stderr);
        assert!(!ran.stderr.contains("resume"), "{}", ran.stderr);
        assert_eq!(summary_count(&ran, "not applied (foreign value)"), 1);
        // Not `state()`: it reads every customer key as a hash.
        let c3 = redis_cli(port, &["HGET", "sticky_gw_m1_c3", "CARD:CREDIT:stripe"]);
        assert_eq!(c3.trim(), "1", "run {run}");
    }
    assert_eq!(
        redis_cli(port, &["GET", "sticky_gw_m1_c2"]).trim(),
        "foreign"
    );
}
