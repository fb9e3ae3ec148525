//! `sticky-routing import` when Redis fails under it: killed or frozen in
//! the middle of a file, or forgetting its scripts in the middle of a file.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::{Duration, Instant};

use rstest::rstest;
use sticky_routing::domain::ids::{CustomerId, MerchantId};
use sticky_routing::domain::keys::customer_key;
use sticky_routing::domain::tenant::Tenant;
use tokio::process::Child;
use tokio::task::JoinHandle;

use crate::support::bulk::{
    COMBOS, HEADER, Model, Rng, Target, generated, info, keys, resume_hint, script_calls,
    summary_count,
};
use crate::support::{
    RedisFailure, RedisServer, TestRedis, Topology, bulk_gives_up_within, drain, service_binary,
    until_while_running,
};
use test_support::redis_server::{ServerOptions, redis_cli};

/// One row of [`replay_safe`], as the model applies it.
struct ModelRow {
    key: String,
    merchant: String,
    customer: String,
    field: String,
    delta: i64,
}

/// `customers` × `per_customer` rows, shuffled, every other one with an
/// attempt id, that a resume may send twice without changing the result:
/// the import mark keeps every row of a customer however many (more than
/// the 8 attempts a hash remembers), and a failure never removes the
/// customer's last combo (that deletes the hash, and its mark with it: the
/// customer's rows would replay from an empty hash).
fn replay_safe(
    customers: u64,
    per_customer: usize,
    cap: usize,
    seed: u64,
) -> (String, Vec<ModelRow>) {
    let mut rng = Rng(seed);
    let mut order: Vec<u64> = (0..customers)
        .flat_map(|c| std::iter::repeat_n(c, per_customer))
        .collect();
    for i in (1..order.len()).rev() {
        order.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let mut text = String::from(HEADER);
    let mut model = Model::default();
    let mut rows = Vec::with_capacity(order.len());
    for (i, customer) in order.into_iter().enumerate() {
        let merchant = format!("merchant_{}", customer % 7);
        let customer = format!("cus_{customer}");
        let key = key_of(&merchant, &customer);
        let (pm, pmt, connector) = COMBOS[rng.below(6) as usize];
        let field = format!("{}:{}:{connector}", pm.to_uppercase(), pmt.to_uppercase());
        let count = 1 + rng.below(3) as i64;
        let keeps_the_hash = model.0.get(&key).is_some_and(|hash| {
            hash.get(&field)
                .is_some_and(|&now| now > count || hash.len() > 1)
        });
        let success = !keeps_the_hash || rng.below(3) != 0;
        let outcome = if success {
            "success"
        } else {
            "gateway_failure"
        };
        let attempt = if i % 2 == 0 {
            format!("att-{i}")
        } else {
            String::new()
        };
        text.push_str(&format!(
            "{merchant},{customer},{pm},{pmt},{connector},{outcome},{count},{attempt}\n"
        ));
        let delta = if success { count } else { -count };
        model.apply(&merchant, &customer, &field, delta, cap);
        rows.push(ModelRow {
            key,
            merchant,
            customer,
            field,
            delta,
        });
    }
    (text, rows)
}

fn key_of(merchant: &str, customer: &str) -> String {
    customer_key(
        &Tenant::DEFAULT,
        &MerchantId::parse(merchant).unwrap(),
        &CustomerId::parse(customer).unwrap(),
    )
    .as_str()
    .to_owned()
}

/// What the model makes of `rows`.
fn model_of<'a>(rows: impl IntoIterator<Item = &'a ModelRow>, cap: usize) -> Model {
    let mut model = Model::default();
    for row in rows {
        model.apply(&row.merchant, &row.customer, &row.field, row.delta, cap);
    }
    model
}

/// Panics unless every customer's hash in `state` is what its rows before
/// `done` make, followed by some of its later rows in file order (those
/// were in flight, and may or may not have been applied).
fn assert_done_then_some_in_order(
    state: &BTreeMap<String, BTreeMap<String, i64>>,
    rows: &[ModelRow],
    done: usize,
    cap: usize,
) {
    let mut by_customer: BTreeMap<&str, Vec<(usize, &ModelRow)>> = BTreeMap::new();
    for (index, row) in rows.iter().enumerate() {
        by_customer.entry(&row.key).or_default().push((index, row));
    }
    let unknown: Vec<&String> = state
        .keys()
        .filter(|k| !by_customer.contains_key(k.as_str()))
        .collect();
    assert!(unknown.is_empty(), "keys no row writes: {unknown:?}");
    for (key, customer_rows) in by_customer {
        let mut model = model_of(
            customer_rows
                .iter()
                .filter(|(i, _)| *i < done)
                .map(|(_, r)| *r),
            cap,
        );
        let mut allowed = vec![model.0.get(key).cloned()];
        for (_, row) in customer_rows.iter().filter(|(i, _)| *i >= done) {
            model.apply(&row.merchant, &row.customer, &row.field, row.delta, cap);
            allowed.push(model.0.get(key).cloned());
        }
        let found = state.get(key).cloned();
        assert!(
            allowed.contains(&found),
            "{key} is {found:?}, not its rows before {done} plus some after: {allowed:?}"
        );
    }
}

/// Panics, naming a few customers that differ, unless `state` is what
/// `model` predicts (the whole maps would be thousands of lines).
fn assert_same_state(
    state: &BTreeMap<String, BTreeMap<String, i64>>,
    model: &Model,
    summary: &str,
) {
    let keys: std::collections::BTreeSet<&String> = state.keys().chain(model.0.keys()).collect();
    let differ: Vec<_> = keys
        .into_iter()
        .filter(|k| state.get(*k) != model.0.get(*k))
        .collect();
    let examples: Vec<_> = differ
        .iter()
        .take(3)
        .map(|k| format!("{k}: {:?}, the model: {:?}", state.get(*k), model.0.get(*k)))
        .collect();
    assert!(
        differ.is_empty(),
        "{} of {} customers differ from the model, e.g.\n{}\n{summary}",
        differ.len(),
        model.0.len(),
        examples.join("\n")
    );
}

/// `import --no-admission FILE` against `target`, its output drained as it
/// comes.
fn spawn_import(
    target: &Target,
    vars: &[(&'static str, &str)],
    path: &str,
) -> (Child, JoinHandle<String>, JoinHandle<String>) {
    let mut child = service_binary(&target.vars(vars))
        .args(["import", "--no-admission", path])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (stdout, stderr) = (drain(child.stdout.take()), drain(child.stderr.take()));
    (child, stdout, stderr)
}

/// Whether some connection to Redis on `port` holds bytes Redis has not
/// read (from the kernel's socket table: Linux only, as the suite is).
fn unread_input(port: u16) -> bool {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    table.lines().skip(1).any(|line| {
        let columns: Vec<&str> = line.split_whitespace().collect();
        // `sl local_address rem_address st tx_queue:rx_queue …`, in hex.
        let local_port = columns.get(1).and_then(|a| a.rsplit(':').next());
        let unread = columns.get(4).and_then(|q| q.split(':').nth(1));
        let hex = |text: Option<&str>| text.and_then(|t| u64::from_str_radix(t, 16).ok());
        hex(local_port) == Some(u64::from(port)) && hex(unread).is_some_and(|n| n > 0)
    })
}

/// Exit code, stdout and stderr of an import child, which must have ended
/// by `deadline`.
async fn finish(
    mut child: Child,
    stdout: JoinHandle<String>,
    stderr: JoinHandle<String>,
    deadline: Instant,
) -> (i32, String, String) {
    let status = tokio::time::timeout_at(deadline.into(), child.wait())
        .await
        .expect("the import ends in time")
        .unwrap();
    (
        status.code().unwrap_or(-1),
        stdout.await.unwrap(),
        stderr.await.unwrap(),
    )
}

/// Redis failed under an import by [`strike`], and where the import said
/// to resume.
struct Struck {
    target: Target,
    port: u16,
    skip: usize,
}

/// Starts a durable Redis, imports `path` into it, and fails it (`failure`)
/// with rows of the import sent and unanswered: the import must exit 2
/// within the Redis timeout and a few seconds (not a batch timeout of its
/// own), with the resume hint. `None` when that hint is 0, Redis having
/// failed before the round holding the first row was answered: on a
/// loaded machine the reader can fill every lane's first round (16,384
/// rows, naming ~95 % of the customers) before the first is sent, so the
/// strike below can land inside them (seen under load; most likely the
/// failure of a CI run whose message was cut).
async fn strike(
    failure: RedisFailure,
    path: &str,
    limits: &[(&'static str, &str)],
    rows: usize,
) -> Option<Struck> {
    // Every write Redis answered is on disk before the answer leaves it, so
    // a killed server comes back with at least what the import saw applied.
    let durable = ServerOptions {
        args: ["--appendonly", "yes", "--appendfsync", "always"]
            .map(String::from)
            .to_vec(),
        ..ServerOptions::default()
    };
    let mut target = Target {
        redis: TestRedis::Single(RedisServer::start_with(durable)),
    };
    let port = target.redis.server().port;
    let (mut child, stdout, stderr) = spawn_import(&target, limits, path);
    // 90% of the customers: usually past the first rows' answers, and far
    // from the end of the file.
    let writing =
        until_while_running(&mut child, Duration::from_secs(30), || keys(port) >= 5_400).await;
    assert!(
        writing,
        "the import wrote nothing, or ended before Redis failed"
    );
    // Frozen first, so that Redis fails with the import's next rows sent
    // and unanswered: the case where they may or may not have been applied.
    target.redis.signal("-STOP");
    let struck = Instant::now();
    let sent = until_while_running(&mut child, Duration::from_secs(20), || unread_input(port));
    assert!(sent.await, "the import sent nothing to the frozen Redis");
    if failure == RedisFailure::Killed {
        target.redis.stop();
    }
    let deadline = struck + bulk_gives_up_within();
    let (code, stdout, stderr) = finish(child, stdout, stderr, deadline).await;
    eprintln!(
        "Redis {failure:?}: the import exited {:?} later",
        struck.elapsed()
    );
    assert_eq!(code, 2, "{stdout}{stderr}");
    assert!(
        stderr.contains("rows from there on may already have been applied"),
        "{stderr}"
    );
    let skip = usize::try_from(resume_hint(&stderr)).unwrap();
    assert!(skip < rows, "stopped at {skip} of {rows}");
    (skip > 0).then_some(Struck { target, port, skip })
}

/// Redis killed, or frozen, with rows of the import sent and unanswered
/// ([`strike`]), then back: the resume from the import's hint reaches
/// exactly the model however many of those rows had run, with 12 rows per
/// customer, half of them without an attempt id.
#[rstest]
#[tokio::test]
async fn redis_failing_mid_import_is_exit_2_in_time_and_the_resume_reaches_the_model(
    #[values(RedisFailure::Killed, RedisFailure::Frozen)] failure: RedisFailure,
) {
    const CAP: usize = 4;
    let (text, rows) = replay_safe(6_000, 12, CAP, 0xdead);
    let (_dir, path) = crate::support::bulk::file_with("history.csv", &text);
    let cap = CAP.to_string();
    let limits = [("STICKY_ROUTING_MAX_COMBOS_PER_CUSTOMER", cap.as_str())];
    let mut struck = None;
    for attempt in 1..=3 {
        struck = strike(failure, &path, &limits, rows.len()).await;
        if struck.is_some() {
            break;
        }
        eprintln!("attempt {attempt}: Redis failed before the first row was answered; again");
    }
    let Struck {
        mut target,
        port,
        skip,
    } = struck.expect("three times, Redis failed before the first row was answered");

    match failure {
        RedisFailure::Killed => {
            target.redis.restart();
            test_support::wait::wait_for(
                Duration::from_secs(20),
                Duration::from_millis(20),
                "Redis never finished loading its append-only file",
                || (info(port, "persistence", "loading") == Some(0)).then_some(()),
            );
        }
        // Thawed, Redis reads and runs what the import had sent before it
        // exited: the rows whose fate the import could not know.
        RedisFailure::Frozen => {
            target.redis.signal("-CONT");
            test_support::wait::wait_for(
                Duration::from_secs(20),
                Duration::from_millis(20),
                "the thawed Redis never read what the import had sent",
                || (!unread_input(port)).then_some(()),
            );
        }
    }
    assert_done_then_some_in_order(&target.state().await, &rows, skip, CAP);
    // The resume needs no disk.
    redis_cli(port, &["CONFIG", "SET", "appendonly", "no"]);
    let resumed = target
        .import(
            &["--no-admission", "--skip", &skip.to_string(), &path],
            &limits,
        )
        .await;
    assert_eq!(resumed.code, 0, "{}{}", resumed.stdout, resumed.stderr);
    assert_eq!(summary_count(&resumed, "skipped (--skip)"), skip as u64);
    assert_same_state(
        &target.state().await,
        &model_of(&rows, CAP),
        &resumed.stdout,
    );
}

#[tokio::test]
async fn scripts_flushed_mid_import_are_sent_again_and_the_state_is_exact() {
    // As restarts or failovers would come, now and then: each flush waits
    // until the import has loaded the scripts again and run more of them (a
    // row refused over and over stops the import, on purpose). A refused
    // row must also not be overtaken by its customer's later rows: the
    // model, in file order, would see that.
    const FLUSHES: usize = 5;
    let target = Target::start(Topology::Single).await;
    let port = target.redis.data_ports()[0];
    let (text, model) = generated(150_000, 5_000, 4, 0xf1a5);
    let (_dir, path) = crate::support::bulk::file_with("history.csv", &text);
    let limits = [("STICKY_ROUTING_MAX_COMBOS_PER_CUSTOMER", "4")];
    let (mut child, stdout, stderr) = spawn_import(&target, &limits, &path);
    let cached = || info(port, "memory", "number_of_cached_scripts").unwrap_or(0) > 0;
    // Flushes after which the import loaded the scripts again: it had met
    // NOSCRIPT.
    let mut recovered = 0;
    for flush in 0..=FLUSHES {
        if !until_while_running(&mut child, Duration::from_secs(30), cached).await {
            break;
        }
        if flush > 0 {
            recovered += 1;
        }
        let before = script_calls(port);
        let ran_more = until_while_running(&mut child, Duration::from_secs(30), || {
            script_calls(port) > before
        });
        if flush == FLUSHES || !ran_more.await {
            break;
        }
        redis_cli(port, &["SCRIPT", "FLUSH"]);
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let (code, stdout, stderr) = finish(child, stdout, stderr, deadline).await;
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        recovered >= 3,
        "only {recovered} flushes hit the import before it ended: make the file bigger"
    );
    let refused = info(port, "errorstats", "errorstat_NOSCRIPT").unwrap_or(0);
    assert!(refused >= recovered as u64, "{refused} NOSCRIPT replies");
    assert_same_state(&target.state().await, &model, &stdout);
}
