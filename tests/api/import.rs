//! `sticky-routing import`, the real binary against a real Redis: the state
//! it leaves, its reports and exit codes, resuming, re-runs, stdin, Ctrl-C,
//! admission, and Cluster.

use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncReadExt;

use crate::support::bulk::*;
use crate::support::{Topology, service_binary};

#[tokio::test]
async fn a_hundred_thousand_rows_leave_exactly_the_state_the_rules_predict() {
    let target = Target::start(Topology::Single).await;
    let (text, model) = generated(100_000, 3_000, 4, 0x5eed);
    let (_dir, path) = file_with("history.csv", &text);
    let ran = target
        .import(
            &["--no-admission", &path],
            &[("STICKY_ROUTING_MAX_COMBOS_PER_CUSTOMER", "4")],
        )
        .await;
    assert_eq!(ran.code, 0, "{}{}", ran.stdout, ran.stderr);
    assert!(summary_count(&ran, "applied gateway_failure") > 0);
    assert!(summary_count(&ran, "ignored_no_habit") > 0);
    assert_eq!(target.state().await, model.0);
}

#[tokio::test]
async fn bad_rows_are_reported_by_line_and_the_good_ones_applied() {
    let target = Target::start(Topology::Single).await;
    let text = format!(
        "{HEADER}\
         m1,good-1,card,credit,stripe,success,2,\n\
         m1,\"multi\nline-secret\",card,credit,stripe,refund,1,\n\
         m1,good-2,card,credit,stripe,success,,\n\
         m1,good-3,card,,stripe,success,1,\n\
         m1,good-3,card,credit,stripe,success,0,\n\
         m1,good-3,card,credit,stripe,success,1,{}\n\
         m1,good-3,card,credit,stripe,success,3,\n",
        "x".repeat(200)
    );
    let (_dir, path) = file_with("rows.csv", &text);
    let ran = target.import(&[&path], &[]).await;
    assert_eq!(ran.code, 1, "{}{}", ran.stdout, ran.stderr);
    for expected in [
        "line 3: customer_id:",
        "line 6: payment_method_type:",
        "line 7: count:",
        "line 8: attempt_id:",
    ] {
        assert!(
            ran.stderr.contains(expected),
            "no `{expected}` in:\n{}",
            ran.stderr
        );
    }
    assert!(!ran.stderr.contains("secret"), "{}", ran.stderr);
    assert_eq!(summary_count(&ran, "bad rows"), 4);
    let counts: Vec<i64> = target
        .state()
        .await
        .values()
        .map(|combos| combos["CARD:CREDIT:stripe"])
        .collect();
    assert_eq!(counts, vec![2, 1, 3]);
}

/// The import follows the API's blank rule: `c1` followed by U+2028, NEL
/// or NBSP is a bad row naming `customer_id`, never a row for `c1`; ASCII
/// blanks are trimmed.
#[tokio::test]
async fn unicode_blanks_at_the_ends_of_ids_are_bad_rows_not_stripped() {
    let target = Target::start(Topology::Single).await;
    let text = format!(
        "{HEADER}\
         m1,\tc1 ,card,credit,stripe,success,,\n\
         m1,c1\u{2028},card,credit,stripe,success,,\n\
         m1,c1\u{85},card,credit,stripe,success,,\n\
         m1,\u{A0}c1,card,credit,stripe,success,,\n\
         m1\u{3000},c1,card,credit,stripe,success,,\n"
    );
    let (_dir, path) = file_with("rows.csv", &text);
    let ran = target.import(&[&path], &[]).await;
    assert_eq!(ran.code, 1, "{}{}", ran.stdout, ran.stderr);
    // Each bad row's `line N: field`, and nothing else reported bad.
    let bad: Vec<String> = ran
        .stderr
        .lines()
        .filter(|line| line.starts_with("line "))
        .map(|line| line.splitn(3, ": ").take(2).collect::<Vec<_>>().join(": "))
        .collect();
    let expected = [
        "line 3: customer_id",
        "line 4: customer_id",
        "line 5: customer_id",
        "line 6: merchant_id",
    ];
    assert_eq!(bad, expected, "{}", ran.stderr);
    assert_eq!(summary_count(&ran, "bad rows"), 4);
    let state = target.state().await;
    assert_eq!(state.len(), 1, "{state:?}");
    assert_eq!(state["sticky_gw_m1_c1"]["CARD:CREDIT:stripe"], 1);
}

#[tokio::test]
async fn a_dry_run_writes_nothing_and_needs_no_redis() {
    let text =
        format!("{HEADER}m1,c1,card,credit,stripe,success,1,\nm1,c1,card,credit,stripe,oops,1,\n");
    let (_dir, path) = file_with("rows.csv", &text);
    // Nothing listens on this port.
    let vars = [(
        "STICKY_ROUTING_REDIS_URL",
        format!("redis://127.0.0.1:{}", crate::support::free_port()),
    )];
    let ran = import_with(&vars, &["--dry-run", &path], None).await;
    assert_eq!(ran.code, 1, "{}{}", ran.stdout, ran.stderr);
    assert!(ran.stderr.contains("line 3: outcome:"), "{}", ran.stderr);
    assert_eq!(summary_count(&ran, "valid"), 1);
    let target = Target::start(Topology::Single).await;
    let good = format!("{HEADER}m1,c1,card,credit,stripe,success,1,\n");
    let (_dir, path) = file_with("good.csv", &good);
    let ran = target.import(&["--dry-run", &path], &[]).await;
    assert_eq!(ran.code, 0, "{}{}", ran.stdout, ran.stderr);
    assert!(target.state().await.is_empty());
}

/// `import … | head` closes stdout before the summary: the import still
/// ends with its own exit code, not a panic.
#[tokio::test]
async fn a_closed_stdout_is_no_panic() {
    let text = format!("{HEADER}m1,c1,card,credit,stripe,success,1,\n");
    let (_dir, path) = file_with("rows.csv", &text);
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let output = service_binary(&[])
        .args(["import", "--dry-run", &path])
        .stdout(Stdio::from(writer))
        .stderr(Stdio::piped())
        // Not `output()`: tokio's would replace stdout with a pipe of its own.
        .spawn()
        .unwrap()
        .wait_with_output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(output.status.code(), Some(0), "{stderr}");
}

#[tokio::test]
async fn a_rerun_with_attempt_ids_applies_nothing_twice_and_skip_resumes() {
    let target = Target::start(Topology::Single).await;
    let mut text = String::from(HEADER);
    for i in 0..50 {
        // A failure only after the customer's first success: a failure that
        // writes nothing records no attempt, so a re-run would apply it.
        let outcome = if i >= 35 && i % 5 == 4 {
            "gateway_failure"
        } else {
            "success"
        };
        text.push_str(&format!(
            "m1,c{},card,credit,stripe,{outcome},2,att-{i}\n",
            i % 7
        ));
    }
    let (_dir, path) = file_with("rows.csv", &text);
    let first = target.import(&["--skip", "20", &path], &[]).await;
    assert_eq!(first.code, 0, "{}{}", first.stdout, first.stderr);
    assert_eq!(summary_count(&first, "skipped (--skip)"), 20);
    let resumed = target.state().await;
    // `--skip 20` said the first 20 rows were done: running the file whole
    // now applies none of its rows (its customers' import marks cover them).
    let whole = target.import(&[&path], &[]).await;
    assert_eq!(summary_count(&whole, "duplicate"), 50, "{}", whole.stdout);
    assert_eq!(target.state().await, resumed);
    // The same rows in another file (another identity, so only the attempt
    // ids protect them): the last 30 were recorded once, the first 20 are
    // new.
    let (_other_dir, other) = file_with("again.csv", &format!("{text}\n"));
    let full = target.import(&[&other], &[]).await;
    assert_eq!(full.code, 0, "{}{}", full.stdout, full.stderr);
    assert_eq!(summary_count(&full, "duplicate"), 30, "{}", full.stdout);
    let after_full = target.state().await;
    assert_ne!(after_full, resumed);
    let again = target.import(&[&other], &[]).await;
    assert_eq!(again.code, 0);
    assert_eq!(summary_count(&again, "duplicate"), 50);
    assert_eq!(target.state().await, after_full);
}

#[tokio::test]
async fn stdin_needs_a_format_and_reads_jsonl() {
    let target = Target::start(Topology::Single).await;
    let rows = b"{\"merchant_id\":\"m1\",\"customer_id\":\"c1\",\"payment_method\":\"card\",\"payment_method_type\":\"credit\",\"connector\":\"stripe\",\"outcome\":\"success\",\"count\":5}\n\
{\"merchant_id\":\"m1\",\"customer_id\":\"c1\",\"payment_method\":\"card\",\"payment_method_type\":\"credit\",\"connector\":\"stripe\",\"outcome\":\"gateway_failure\",\"count\":\"2\"}\n";
    let vars = target.vars(&[]);
    let ran = import_with(&vars, &["-"], Some(rows)).await;
    assert_eq!(ran.code, 2, "{}", ran.stderr);
    assert!(ran.stderr.contains("--format"), "{}", ran.stderr);
    let ran = import_with(&vars, &["--format", "jsonl", "-"], Some(rows)).await;
    assert_eq!(ran.code, 0, "{}{}", ran.stdout, ran.stderr);
    let state = target.state().await;
    let counts: Vec<i64> = state.values().map(|c| c["CARD:CREDIT:stripe"]).collect();
    assert_eq!(counts, vec![3]);
}

#[tokio::test]
async fn unreachable_redis_is_exit_2_with_a_clear_message() {
    let text = format!("{HEADER}m1,c1,card,credit,stripe,success,1,\n");
    let (_dir, path) = file_with("rows.csv", &text);
    let vars = [(
        "STICKY_ROUTING_REDIS_URL",
        format!("redis://127.0.0.1:{}", crate::support::free_port()),
    )];
    let ran = import_with(&vars, &[&path], None).await;
    assert_eq!(ran.code, 2, "{}{}", ran.stdout, ran.stderr);
    assert!(
        ran.stderr
            .contains("cannot reach Redis at redis://127.0.0.1:"),
        "{}",
        ran.stderr
    );
}

#[tokio::test]
async fn a_spent_budget_makes_new_customers_not_admitted_with_exit_0() {
    let target = Target::start(Topology::Single).await;
    let text = format!(
        "{HEADER}mzero,c1,card,credit,stripe,success,1,\nmzero,c2,card,credit,stripe,success,3,\n\
         mzero,c1,card,credit,stripe,gateway_failure,1,\nmopen,c1,card,credit,stripe,success,1,\n"
    );
    let (_dir, path) = file_with("rows.csv", &text);
    let ran = target
        .import(&[&path], &[("STICKY_ROUTING_MAX_CUSTOMERS_mzero", "0")])
        .await;
    assert_eq!(ran.code, 0, "{}{}", ran.stdout, ran.stderr);
    assert_eq!(summary_count(&ran, "not_admitted (budget)"), 2);
    assert_eq!(summary_count(&ran, "ignored_no_habit"), 1);
    assert_eq!(summary_count(&ran, "applied success"), 1);
    assert_eq!(target.state().await.len(), 1);
}

#[tokio::test]
async fn a_budget_of_three_admits_three_of_ten_new_customers() {
    let target = Target::start(Topology::Single).await;
    let mut text = String::from(HEADER);
    for customer in 0..10 {
        text.push_str(&format!(
            "mthree,c{customer},card,credit,stripe,success,1,\n"
        ));
    }
    let (_dir, path) = file_with("rows.csv", &text);
    let ran = target
        .import(&[&path], &[("STICKY_ROUTING_MAX_CUSTOMERS_mthree", "3")])
        .await;
    assert_eq!(ran.code, 0, "{}{}", ran.stdout, ran.stderr);
    assert_eq!(summary_count(&ran, "applied success"), 3);
    assert_eq!(summary_count(&ran, "not_admitted (budget)"), 7);
    assert_eq!(target.state().await.len(), 3);
}

/// Three rows per customer whose result depends on their order: success,
/// failure, success leaves 1; any other order leaves 2 (or 1 from a
/// different path).
fn order_sensitive(customers: usize) -> (String, usize) {
    let mut text = String::from(HEADER);
    for step in ["success", "gateway_failure", "success"] {
        for c in 0..customers {
            let count = if step == "success" { 1 } else { 5 };
            text.push_str(&format!(
                "m{},cust-{c},card,credit,stripe,{step},{count},\n",
                c % 3
            ));
        }
    }
    (text, customers)
}

#[tokio::test]
async fn on_cluster_each_customers_rows_keep_their_order() {
    let target = Target::start(Topology::Cluster).await;
    let (text, customers) = order_sensitive(3_000);
    let (_dir, path) = file_with("rows.csv", &text);
    let ran = target.import(&[&path], &[]).await;
    assert_eq!(ran.code, 0, "{}{}", ran.stdout, ran.stderr);
    let state = target.state().await;
    assert_eq!(state.len(), customers);
    assert!(state.values().all(|c| c["CARD:CREDIT:stripe"] == 1));
    assert!(target.redis.data_ports().len() > 1);
}

#[tokio::test]
async fn ctrl_c_stops_cleanly_and_the_resume_reaches_the_same_state() {
    let (text, _) = generated(400_000, 20_000, 30, 0xc0ffee);
    let (_dir, path) = file_with("big.csv", &text);
    let whole = Target::start(Topology::Single).await;
    let ran = whole.import(&[&path], &[]).await;
    assert_eq!(ran.code, 0, "{}", ran.stderr);

    let target = Target::start(Topology::Single).await;
    let mut command = service_binary(&target.vars(&[]));
    command
        .arg("import")
        .arg(&path)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().unwrap();
    // Once it writes: before, it hashes the file (the mark's identity), and
    // a signal then stops it with nothing applied.
    let port = target.redis.data_ports()[0];
    let writing = crate::support::until_while_running(&mut child, Duration::from_secs(30), || {
        crate::support::bulk::keys(port) > 0
    });
    assert!(writing.await, "the import never wrote");
    tokio::time::sleep(Duration::from_millis(300)).await;
    test_support::signal::send_to_child(&child, "-INT");
    let status = tokio::time::timeout(Duration::from_secs(60), child.wait())
        .await
        .unwrap()
        .unwrap();
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .await
        .unwrap();
    assert_eq!(status.code(), Some(130), "{stderr}");
    let skip = resume_hint(&stderr);
    assert!(skip > 0 && skip < 400_000, "stopped at {skip}");
    let resumed = target
        .import(&["--skip", &skip.to_string(), &path], &[])
        .await;
    assert_eq!(resumed.code, 0, "{}", resumed.stderr);
    assert_eq!(target.state().await, whole.state().await);
}
