//! The bulk commands and tenants (contract v1.2, "Tenants"), the real binary
//! against a real Redis: `import` puts each row in its `tenant_id`'s
//! namespace (or `--tenant`'s), `export` writes one tenant, or every tenant
//! with a `tenant_id` column that `import` reads back exactly (single node
//! and Cluster), `report --tenant` counts only that tenant's experiment,
//! `replay` keeps tenants apart; and what is refused: `--tenant` with a
//! `tenant_id` column, an invalid `--tenant`, an invalid cell.

use std::collections::BTreeMap;
use std::process::Output;

use rstest::rstest;
use sticky_routing::domain::ids::MerchantId;
use sticky_routing::domain::keys::{experiment_key, legacy_experiment_key};
use sticky_routing::domain::tenant::Tenant;
use test_support::redis_server::{EXPORT_PASSWORD, EXPORT_USER};

use crate::support::bulk::{Ran, Target, export_command, file_with, import_with, summary_count};
use crate::support::export_rows::{TenantRow as Row, csv_rows, jsonl_rows};
use crate::support::{Topology, redis_cli, service_binary};

/// The import columns with a `tenant_id` first.
const TENANT_HEADER: &str = "tenant_id,merchant_id,customer_id,payment_method,\
                             payment_method_type,connector,outcome,count\n";
/// The import columns without one.
const PLAIN_HEADER: &str =
    "merchant_id,customer_id,payment_method,payment_method_type,connector,outcome,count\n";

/// Three tenants that share merchant and customer ids; two differ only by
/// case.
const TENANTS: [&str; 3] = ["", "acme", "Acme"];
/// Ids that need the key's escapes (`_`, `*`) and CSV quoting.
const MERCHANTS: [&str; 3] = ["m1", "merchant_1", "a*"];
const CUSTOMERS: [&str; 3] = ["c1", "c_1", "c,\"q\" x"];

/// A customer hash's combos and counts.
type Hash = BTreeMap<String, i64>;

fn hash(pairs: &[(&str, i64)]) -> Hash {
    pairs.iter().map(|(f, n)| ((*f).to_owned(), *n)).collect()
}

async fn export(target: &Target, args: &[&str]) -> Output {
    export_command(target.redis.url(), args)
        .output()
        .await
        .expect("the binary runs")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// A CSV file of `rows`, each a record of `header`'s columns.
fn csv_text(header: &str, rows: &[Vec<String>]) -> String {
    let mut writer = csv::WriterBuilder::new()
        .has_headers(false)
        .from_writer(Vec::new());
    writer.write_record(header.trim_end().split(',')).unwrap();
    for row in rows {
        writer.write_record(row).unwrap();
    }
    String::from_utf8(writer.into_inner().unwrap()).unwrap()
}

/// Every tenant × merchant × customer with one habit of its own count
/// (`CARD:CREDIT:stripe`), imported through the `tenant_id` column: the
/// rows export must write, each with its tenant.
async fn populate(target: &Target) -> Vec<Row> {
    let mut rows = Vec::new();
    let mut expected = Vec::new();
    for (t, tenant) in TENANTS.iter().enumerate() {
        for (m, merchant) in MERCHANTS.iter().enumerate() {
            for (c, customer) in CUSTOMERS.iter().enumerate() {
                let count = (100 * (t + 1) + 10 * m + c + 1) as i64;
                let parts = [tenant, merchant, customer, "card", "credit", "stripe"];
                let mut row: Vec<String> = parts.iter().map(|p| (*p).to_owned()).collect();
                row.extend(["success".to_owned(), count.to_string()]);
                rows.push(row);
                expected.push((
                    Some((*tenant).to_owned()),
                    (*merchant).to_owned(),
                    (*customer).to_owned(),
                    "CARD".to_owned(),
                    "CREDIT".to_owned(),
                    "stripe".to_owned(),
                    "success".to_owned(),
                    count,
                ));
            }
        }
    }
    let (_dir, path) = file_with("made.csv", &csv_text(TENANT_HEADER, &rows));
    let ran = target.import(&["--no-admission", &path], &[]).await;
    assert_eq!(ran.code, 0, "{}{}", ran.stdout, ran.stderr);
    expected.sort();
    expected
}

/// `expected`'s rows of `tenant`, without the tenant column.
fn of_tenant(expected: &[Row], tenant: &str) -> Vec<Row> {
    expected
        .iter()
        .filter(|row| row.0.as_deref() == Some(tenant))
        .map(|row| {
            let mut row = row.clone();
            row.0 = None;
            row
        })
        .collect()
}

#[tokio::test]
async fn import_puts_each_row_in_its_tenants_namespace() {
    let target = Target::start(Topology::Single).await;
    // The same merchant and customer ids in the default tenant, `acme` and
    // `Acme`; a cell is trimmed as the header is. Admission on: each
    // tenant's merchant asks its own budget.
    let text = format!(
        "{TENANT_HEADER}\
         ,m1,c1,card,credit,stripe,success,1\n\
         acme,m1,c1,card,credit,stripe,success,2\n\
         Acme,m1,c1,card,credit,stripe,success,3\n\
         \" acme \",m1,c1,card,credit,adyen,success,4\n\
         acme,m1,c1,card,credit,stripe,gateway_failure,1\n"
    );
    let (_dir, path) = file_with("tenants.csv", &text);
    let ran = target.import(&[&path], &[]).await;
    assert_eq!(ran.code, 0, "{}{}", ran.stdout, ran.stderr);
    let expected = BTreeMap::from([
        (
            "sticky_gw_m1_c1".to_owned(),
            hash(&[("CARD:CREDIT:stripe", 1)]),
        ),
        (
            "sticky_gw_%Tacme_m1_c1".to_owned(),
            hash(&[("CARD:CREDIT:stripe", 1), ("CARD:CREDIT:adyen", 4)]),
        ),
        (
            "sticky_gw_%TAcme_m1_c1".to_owned(),
            hash(&[("CARD:CREDIT:stripe", 3)]),
        ),
    ]);
    assert_eq!(target.state().await, expected);

    // JSON Lines: `tenant_id` a key of its own; absent or null is the
    // default tenant.
    let text = "{\"tenant_id\":\"acme\",\"merchant_id\":\"m2\",\"customer_id\":\"c1\",\
                \"payment_method\":\"card\",\"payment_method_type\":\"credit\",\
                \"connector\":\"stripe\",\"outcome\":\"success\",\"count\":5}\n\
                {\"tenant_id\":null,\"merchant_id\":\"m2\",\"customer_id\":\"c1\",\
                \"payment_method\":\"card\",\"payment_method_type\":\"credit\",\
                \"connector\":\"stripe\",\"outcome\":\"success\",\"count\":6}\n\
                {\"merchant_id\":\"m2\",\"customer_id\":\"c1\",\
                \"payment_method\":\"card\",\"payment_method_type\":\"credit\",\
                \"connector\":\"stripe\",\"outcome\":\"success\",\"count\":7}\n";
    let (_dir, path) = file_with("tenants.jsonl", text);
    let ran = target.import(&[&path], &[]).await;
    assert_eq!(ran.code, 0, "{}{}", ran.stdout, ran.stderr);
    let state = target.state().await;
    assert_eq!(
        state["sticky_gw_%Tacme_m2_c1"],
        hash(&[("CARD:CREDIT:stripe", 5)])
    );
    assert_eq!(
        state["sticky_gw_m2_c1"],
        hash(&[("CARD:CREDIT:stripe", 13)])
    );

    // `--tenant acme` of a file without the column: every row is acme's.
    let text = format!(
        "{PLAIN_HEADER}\
         m1,c2,card,credit,stripe,success,8\n\
         m1,c1,card,credit,adyen,success,1\n"
    );
    let (_dir, path) = file_with("acme.csv", &text);
    let ran = target.import(&["--tenant", "acme", &path], &[]).await;
    assert_eq!(ran.code, 0, "{}{}", ran.stdout, ran.stderr);
    assert_eq!(summary_count(&ran, "applied success"), 2);
    let state = target.state().await;
    assert_eq!(
        state["sticky_gw_%Tacme_m1_c2"],
        hash(&[("CARD:CREDIT:stripe", 8)])
    );
    assert_eq!(
        state["sticky_gw_%Tacme_m1_c1"],
        hash(&[("CARD:CREDIT:stripe", 1), ("CARD:CREDIT:adyen", 5)])
    );
    assert!(!state.contains_key("sticky_gw_m1_c2"), "{state:?}");
    assert_eq!(state["sticky_gw_m1_c1"], expected["sticky_gw_m1_c1"]);
    assert_eq!(
        state["sticky_gw_%TAcme_m1_c1"],
        expected["sticky_gw_%TAcme_m1_c1"]
    );
}

#[rstest]
#[case::single_csv(Topology::Single, "csv")]
#[case::single_jsonl(Topology::Single, "jsonl")]
#[case::cluster_csv(Topology::Cluster, "csv")]
#[tokio::test]
async fn export_writes_one_tenant_or_all_and_all_round_trips_exactly(
    #[case] topology: Topology,
    #[case] format: &str,
) {
    let source = Target::start(topology).await;
    let expected = populate(&source).await;
    let state = source.state().await;
    assert_eq!(
        state.len(),
        TENANTS.len() * MERCHANTS.len() * CUSTOMERS.len()
    );
    let rows = |file: &std::path::Path| {
        let bytes = std::fs::read(file).unwrap();
        if format == "csv" {
            csv_rows(&bytes)
        } else {
            jsonl_rows(&bytes)
        }
    };
    let dir = tempfile::tempdir().unwrap();

    // No flag: the default tenant only, without a tenant column; the other
    // tenants' keys (which its SCAN pattern matches) are not foreign keys.
    let file = dir.path().join(format!("default.{format}"));
    let output = export(&source, &[file.to_str().unwrap()]).await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let per_tenant = MERCHANTS.len() * CUSTOMERS.len();
    let summary = format!("done: {per_tenant} customers, {per_tenant} rows");
    assert!(stderr(&output).contains(&summary), "{}", stderr(&output));
    assert_eq!(rows(&file), (false, of_tenant(&expected, "")));

    for tenant in ["acme", "Acme"] {
        let file = dir.path().join(format!("{tenant}.{format}"));
        let output = export(&source, &["--tenant", tenant, file.to_str().unwrap()]).await;
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
        assert_eq!(
            rows(&file),
            (false, of_tenant(&expected, tenant)),
            "{tenant}"
        );
    }

    // Every tenant, each row with its tenant_id (empty: the default).
    let file = dir.path().join(format!("all.{format}"));
    let output = export(&source, &["--all-tenants", file.to_str().unwrap()]).await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(rows(&file), (true, expected.clone()));

    // The round trip: into an empty Redis, every tenant exactly.
    let target = Target::start(topology).await;
    assert!(target.state().await.is_empty());
    let ran = target
        .import(&["--no-admission", file.to_str().unwrap()], &[])
        .await;
    assert_eq!(ran.code, 0, "{}{}", ran.stdout, ran.stderr);
    assert_eq!(target.state().await, state);
    assert!(state.contains_key("sticky_gw_%Tacme_m1_c1"), "{state:?}");

    // One tenant's export goes back with `import --tenant`.
    let file = dir.path().join(format!("acme.{format}"));
    let target = Target::start(topology).await;
    let ran = target
        .import(
            &["--no-admission", "--tenant", "acme", file.to_str().unwrap()],
            &[],
        )
        .await;
    assert_eq!(ran.code, 0, "{}{}", ran.stdout, ran.stderr);
    let mut acme = state.clone();
    acme.retain(|key, _| key.starts_with("sticky_gw_%Tacme_"));
    assert_eq!(acme.len(), per_tenant);
    assert_eq!(target.state().await, acme);
}

#[tokio::test]
async fn tenant_flags_and_cells_that_cannot_be_are_refused() {
    let target = Target::start(Topology::Single).await;
    let row = "m1,c1,card,credit,stripe,success,1";

    // `--tenant` with a file that names its rows' tenants: a usage error,
    // before anything is written, in CSV (the header says) and JSON Lines
    // (the first line does).
    let (_dir, csv) = file_with("t.csv", &format!("{TENANT_HEADER}acme,{row}\n,{row}\n"));
    let json = "{\"tenant_id\":\"\",\"merchant_id\":\"m1\",\"customer_id\":\"c1\",\
                \"payment_method\":\"card\",\"payment_method_type\":\"credit\",\
                \"connector\":\"stripe\",\"outcome\":\"success\"}\n";
    let (_dir2, jsonl) = file_with("t.jsonl", json);
    for path in [&csv, &jsonl] {
        for tenant in ["acme", ""] {
            let ran = target.import(&["--tenant", tenant, path], &[]).await;
            assert_eq!(ran.code, 2, "{path}: {}{}", ran.stdout, ran.stderr);
            assert!(
                ran.stderr.contains("`tenant_id` column") && ran.stderr.contains("--tenant"),
                "{path}: {}",
                ran.stderr
            );
            // CSV: refused at the header, before any row was read (no
            // line, nothing to resume); JSON Lines: at its first line.
            let at_header = !ran.stderr.contains("line ") && !ran.stderr.contains("resume");
            assert_eq!(at_header, path == &csv, "{path}: {}", ran.stderr);
        }
    }
    // From stdin too.
    let ran = import_with(
        &target.vars(&[]),
        &["--tenant", "acme", "--format", "csv", "-"],
        Some(format!("{TENANT_HEADER}acme,{row}\n").as_bytes()),
    )
    .await;
    assert_eq!(ran.code, 2, "{}", ran.stderr);
    assert!(target.state().await.is_empty(), "something was written");

    // An invalid `--tenant` is a usage error naming the flag, in every
    // bulk command.
    let (_dir3, plain) = file_with("p.csv", &format!("{PLAIN_HEADER}{row}\n"));
    for tenant in ["a.b", "a b", &"a".repeat(65)] {
        let ran = target.import(&["--tenant", tenant, &plain], &[]).await;
        assert_usage_error(&ran, tenant);
        let output = export(&target, &["--tenant", tenant]).await;
        assert_usage_error(&ran_of(output), tenant);
        let output = report(&target, &["--tenant", tenant]).await;
        assert_usage_error(&ran_of(output), tenant);
        let output = replay(&["--tenant", tenant, &plain]).await;
        assert_usage_error(&ran_of(output), tenant);
    }
    let output = export(&target, &["--tenant", "acme", "--all-tenants"]).await;
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(target.state().await.is_empty(), "something was written");

    // A bad tenant_id cell is a bad row, named by line and field; the good
    // rows are applied.
    let text = format!(
        "{TENANT_HEADER}\
         acme,{row}\n\
         a.b,{row}\n\
         {},{row}\n\
         Acme,{row}\n",
        "x".repeat(65)
    );
    let (_dir4, path) = file_with("bad.csv", &text);
    let ran = target.import(&[&path], &[]).await;
    assert_eq!(ran.code, 1, "{}{}", ran.stdout, ran.stderr);
    for line in ["line 3: tenant_id: ", "line 4: tenant_id: "] {
        assert!(ran.stderr.contains(line), "no `{line}` in:\n{}", ran.stderr);
    }
    assert_eq!(summary_count(&ran, "bad rows"), 2);
    let keys: Vec<String> = target.state().await.into_keys().collect();
    assert_eq!(keys, ["sticky_gw_%TAcme_m1_c1", "sticky_gw_%Tacme_m1_c1"]);

    // Replay reports it the same way.
    let output = replay(&["--json", &path]).await;
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("line 3: tenant_id: "),
        "{}",
        stderr(&output)
    );
}

fn ran_of(output: Output) -> Ran {
    Ran {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

fn assert_usage_error(ran: &Ran, tenant: &str) {
    assert_eq!(
        ran.code, 2,
        "--tenant {tenant}: {}{}",
        ran.stdout, ran.stderr
    );
    assert!(
        ran.stderr.contains("--tenant: "),
        "--tenant {tenant}: {}",
        ran.stderr
    );
}

/// `sticky-routing report args…` against `target`, as the export's user.
async fn report(target: &Target, args: &[&str]) -> Output {
    let vars = [
        ("STICKY_ROUTING_REDIS_URL", target.redis.url()),
        ("STICKY_ROUTING_REDIS_USERNAME", EXPORT_USER.to_owned()),
        ("STICKY_ROUTING_REDIS_PASSWORD", EXPORT_PASSWORD.to_owned()),
    ];
    service_binary(&vars)
        .arg("report")
        .args(args)
        .output()
        .await
        .expect("the binary runs")
}

/// `sticky-routing replay args…`, with the default settings (no Redis).
async fn replay(args: &[&str]) -> Output {
    service_binary(&[])
        .arg("replay")
        .args(args)
        .output()
        .await
        .expect("the binary runs")
}

#[tokio::test]
async fn report_counts_only_its_tenants_experiment() {
    let target = Target::start(Topology::Single).await;
    let port = target.redis.data_ports()[0];
    let today = sticky_routing::experiment::days::today();
    let m1 = MerchantId::parse("m1").unwrap();
    // Today's counts of m1 in three tenants, as the service writes them:
    // the treated in today's layout, the holdout in the layout before the
    // shards (kept until it expires), which the report reads too.
    for (tenant, treated, holdout) in [("", "5", "2"), ("acme", "7", "3"), ("Acme", "11", "4")] {
        let tenant = Tenant::parse(tenant).unwrap();
        let key = experiment_key(&tenant, &m1, today);
        redis_cli(port, &["HSET", key.as_str(), "t:f:s", treated]);
        let legacy = legacy_experiment_key(&tenant, &m1, today);
        redis_cli(
            port,
            &["HSET", legacy.as_str(), "h:-:s", holdout, "h:-:f", "1"],
        );
    }
    let keys = redis_cli(port, &["KEYS", "sticky_exp_*"]);
    assert!(
        keys.contains(&format!("sticky_exp_%Tacme_m1_{today}")),
        "{keys}"
    );
    assert!(keys.contains("sticky_exp_{"), "{keys}");

    let json_lines = |output: &Output| -> Vec<serde_json::Value> {
        assert_eq!(output.status.code(), Some(0), "{}", stderr(output));
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    };
    for (tenant, treated, holdout) in [("acme", 7, 4), ("Acme", 11, 5)] {
        let output = report(&target, &["--tenant", tenant, "--format", "json"]).await;
        let lines = json_lines(&output);
        assert_eq!(lines.len(), 1, "{lines:?}");
        // Exactly the contract's fields: the caller named the tenant.
        assert!(lines[0].get("tenant_id").is_none(), "{:?}", lines[0]);
        assert_eq!(lines[0]["merchant_id"], "m1");
        assert_eq!(lines[0]["treated"]["outcomes"], treated, "{tenant}");
        assert_eq!(lines[0]["holdout"]["outcomes"], holdout, "{tenant}");
    }
    // The default tenant's, as before tenants (no tenant_id); the other
    // tenants' keys, which its pattern matches, are not foreign keys.
    let output = report(&target, &["--format", "json"]).await;
    let lines = json_lines(&output);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].get("tenant_id").is_none(), "{:?}", lines[0]);
    assert_eq!(lines[0]["treated"]["outcomes"], 5);
    assert_eq!(lines[0]["holdout"]["outcomes"], 3);
    // With --merchant too, and the table says whose.
    let output = report(&target, &["--tenant", "acme", "--merchant", "m1"]).await;
    let text = String::from_utf8_lossy(&output.stdout);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(text.starts_with("merchant m1 (tenant acme): "), "{text}");
    let treated = text
        .lines()
        .find(|line| line.trim_start().starts_with("treated"));
    let outcomes = treated.and_then(|line| line.split_whitespace().nth(1));
    assert_eq!(outcomes, Some("7"), "{text}");
    // A tenant without counts has none.
    let output = report(&target, &["--tenant", "nobody", "--format", "json"]).await;
    assert!(json_lines(&output).is_empty());
}

/// Replay's JSON report of `args`.
async fn replay_json(args: &[&str]) -> serde_json::Value {
    let output = replay(args).await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    serde_json::from_slice(&output.stdout).unwrap()
}

/// Each merchant of a replay report: (tenant_id, merchant_id) → (attempts,
/// with_pin, followed).
fn merchants(report: &serde_json::Value) -> BTreeMap<(String, String), (u64, u64, u64)> {
    report["merchants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            let tenant = m
                .get("tenant_id")
                .map(|t| t.as_str().unwrap().to_owned())
                .unwrap_or_default();
            let merchant = m["merchant_id"].as_str().unwrap().to_owned();
            let n = |name: &str| m[name].as_u64().unwrap();
            (
                (tenant, merchant),
                (n("attempts"), n("with_pin"), n("followed")),
            )
        })
        .collect()
}

#[tokio::test]
async fn replay_keeps_tenants_apart_and_replays_one_with_tenant() {
    // The default tenant's m1/c1 keeps to stripe; acme's m1/c1, the same
    // ids, to adyen. Had the two been one customer, acme's attempts would
    // have been pinned to stripe (3 successes) and not followed it.
    let text = format!(
        "{}\
         ,m1,c1,card,credit,stripe,success,3\n\
         acme,m1,c1,card,credit,adyen,success,1\n\
         acme,m1,c1,card,credit,adyen,success,1\n\
         ,m1,c1,card,credit,stripe,success,1\n",
        TENANT_HEADER
    );
    let (_dir, path) = file_with("history.csv", &text);
    let report = replay_json(&["--json", &path]).await;
    let acme = ("acme".to_owned(), "m1".to_owned());
    let default = (String::new(), "m1".to_owned());
    assert_eq!(
        merchants(&report),
        BTreeMap::from([
            // 4 attempts: the first had no habit, the others pinned stripe.
            (default.clone(), (4, 3, 3)),
            // The first had no habit of acme's; the second pinned adyen.
            (acme.clone(), (2, 1, 1)),
        ])
    );
    assert_eq!(report["overall"]["attempts"], 6);
    assert!(report["overall"].get("tenant_id").is_none());

    // Only acme's rows.
    let report = replay_json(&["--json", "--tenant", "acme", &path]).await;
    assert_eq!(
        merchants(&report),
        BTreeMap::from([(acme.clone(), (2, 1, 1))])
    );
    assert_eq!(report["overall"]["attempts"], 2);
    // Only the default tenant's.
    let report = replay_json(&["--json", "--tenant", "", &path]).await;
    assert_eq!(merchants(&report), BTreeMap::from([(default, (4, 3, 3))]));

    // The table names acme's merchant `acme/m1`.
    let output = replay(&[&path]).await;
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let table = String::from_utf8_lossy(&output.stdout);
    assert!(
        table.lines().any(|line| line.starts_with("acme/m1 ")),
        "{table}"
    );

    // Without a tenant_id column, `--tenant acme` takes every row as acme's.
    let text = format!(
        "{PLAIN_HEADER}\
         m1,c1,card,credit,adyen,success,1\n\
         m1,c1,card,credit,adyen,success,1\n"
    );
    let (_dir, plain) = file_with("acme.csv", &text);
    let report = replay_json(&["--json", "--tenant", "acme", &plain]).await;
    assert_eq!(merchants(&report), BTreeMap::from([(acme, (2, 1, 1))]));
}
