//! `sticky-routing report [--config FILE] [--tenant ID] [--merchant ID] [--days N]
//! [--format text|json]`: the experiment's uplift per merchant of one
//! tenant (contract v1.2 §4), from the counts every instance flushed to
//! Redis, as a table a person reads or as JSON Lines with GetUplift's field
//! names plus `merchant_id`, `days` and `follow_rate`, for every tenant.
//!
//! The tenant is `--tenant`'s, else the default one. The default tenant's
//! SCAN pattern, `sticky_exp_*`, matches every tenant's keys: a key counts
//! for the tenant `domain::keys::parse_experiment_key` reads in it, and another
//! tenant's key is passed over without a word.
//!
//! It loads the settings as the server does and reads Redis as `export`
//! does (SCAN of `sticky_exp_*` on every primary, HGETALL of each key
//! found, and the shards' counts logs: [`read`]), so
//! `deploy/redis-acl-export.txt`'s read-only user runs it. The
//! days are the last N UTC days including today, as GetUplift's; a key
//! of another day is skipped. Without `--merchant` it reports every
//! merchant with counts in those days; with it, that merchant, with zeros
//! when it has none.
//!
//! Exit codes: 0 when every key was read; 1 when some key under the
//! experiment prefix was not one the service writes (skipped; stderr says
//! how many); 2 for usage, settings or Redis errors.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use serde::Serialize;

use crate::config::Settings;
use crate::domain::ids::MerchantId;
use crate::domain::tenant::Tenant;
use crate::domain::uplift::{GroupCounts, Uplift};
use crate::experiment::{DEFAULT_DAYS, MAX_DAYS, days, uplift_of};
use crate::storage::{ExperimentCounts, HashScanner, ScanError};

mod read;

/// `report --help`.
pub const HELP: &str = "\
usage: sticky-routing report [--config FILE] [--tenant ID] [--merchant ID]
                             [--days N] [--format text|json]

Reports the rollout's experiment per merchant: for treated, holdout and shadow,
the outcomes, successes and success rate; treated's followed and overridden
counts and follow rate; the difference of success rates treated - holdout with
its 95 % confidence interval (Newcombe's hybrid score method), and whether both
groups have the 100 outcomes each that the contract calls enough data. The
counts are every instance's, as flushed to Redis (within 2 s of each call).

  --config FILE      the service's TOML settings (else STICKY_ROUTING_CONFIG);
                     the STICKY_ROUTING_REDIS_* variables apply as for the server
  --tenant ID        this tenant's merchants (else the default tenant's)
  --merchant ID      only this merchant (else every merchant with counts)
  --days N           the last N UTC days, today included: 1 to 35 (default 7)
  --format F         text (a table, the default) or json (JSON Lines, one
                     object per merchant, GetUplift's field names)

Exit status: 0 done; 1 some keys under sticky_exp_ were not the service's and
were skipped (counted on stderr); 2 usage, settings or Redis error.";

/// One line for the binary's `--help`.
pub const SUMMARY: &str = "sticky-routing report [--tenant ID] [--merchant ID] [--days N] \
     [--format text|json]  (see report --help)";

/// How the report is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Text,
    Json,
}

/// What the command line asks for.
#[derive(Debug, PartialEq, Eq)]
struct Request {
    config_file: Option<PathBuf>,
    tenant: Tenant,
    merchant: Option<MerchantId>,
    days: u32,
    format: Format,
}

/// Runs the report; `args` are the arguments after `report`.
pub fn run(args: &[String], env: &HashMap<String, String>) -> ExitCode {
    match super::runtime() {
        Ok(runtime) => runtime.block_on(run_on_runtime(args, env)),
        Err(error) => fail(&format!("cannot start the runtime: {error}")),
    }
}

async fn run_on_runtime(args: &[String], env: &HashMap<String, String>) -> ExitCode {
    let (request, settings) =
        match super::request_and_settings("report", args, env, HELP, parse_args, |request| {
            request.config_file.as_deref()
        }) {
            Ok(started) => started,
            Err(code) => return code,
        };
    let wanted = days::last_days(request.days, crate::process::unix_millis());
    let read = match read_counts(&request, &settings, &wanted).await {
        Ok(read) => read,
        Err(problem) => return fail(&problem),
    };
    let text = render(&request, &read.by_merchant);
    let mut stdout = std::io::stdout().lock();
    if let Err(error) = stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
    {
        return fail(&format!("cannot write to stdout: {error}"));
    }
    if read.rescans > 0 {
        eprintln!(
            "sticky-routing report: {} shards were scanned again, as their counts were being \
             added into their hashes meanwhile",
            read.rescans
        );
    }
    if read.unreadable == 0 {
        return ExitCode::SUCCESS;
    }
    eprintln!(
        "sticky-routing report: warning: skipped {} keys under the experiment prefix that this \
         service does not write (not counted)",
        read.unreadable
    );
    ExitCode::from(1)
}

fn fail(problem: &str) -> ExitCode {
    super::fail("report", problem)
}

/// The arguments; `Ok(None)` for `--help`.
fn parse_args(args: &[String]) -> Result<Option<Request>, String> {
    let mut request = Request {
        config_file: None,
        tenant: Tenant::DEFAULT,
        merchant: None,
        days: DEFAULT_DAYS,
        format: Format::Text,
    };
    let mut flags = super::flags::Flags::new(args);
    while let Some(name) = flags.next_word() {
        let mut value = || flags.value(name).map(str::to_owned);
        match name {
            "-h" | "--help" => return Ok(None),
            "--config" => request.config_file = Some(PathBuf::from(value()?)),
            super::flags::TENANT_FLAG => request.tenant = super::flags::tenant(&value()?)?,
            "--merchant" => {
                let id = value()?;
                let id = MerchantId::parse(&id).map_err(|e| format!("--merchant: {}", e.reason))?;
                request.merchant = Some(id);
            }
            "--days" => {
                let text = value()?;
                request.days = text
                    .trim()
                    .parse()
                    .ok()
                    .filter(|n| (1..=MAX_DAYS).contains(n))
                    .ok_or_else(|| {
                        format!("--days: `{text}` is not a whole number from 1 to {MAX_DAYS}")
                    })?;
            }
            "--format" => {
                let text = value()?;
                request.format = match text.as_str() {
                    "text" => Format::Text,
                    "json" | "jsonl" => Format::Json,
                    _ => return Err(format!("--format: `{text}` is not text or json")),
                };
            }
            other => return Err(format!("unknown argument `{other}`")),
        }
    }
    Ok(Some(request))
}

/// Connects, reads, quits.
async fn read_counts(
    request: &Request,
    settings: &Settings,
    wanted: &[u32],
) -> Result<read::Read, String> {
    let redis = super::bulk_redis(&settings.redis);
    let scanner = match HashScanner::connect(&redis, super::START_WITHIN).await {
        Ok(scanner) => scanner,
        Err(ScanError::Connect(why)) => return Err(super::unreachable(&redis, &why)),
        Err(error) => return Err(error.to_string()),
    };
    let wanted = read::Wanted {
        tenant: &request.tenant,
        merchant: request.merchant.as_ref(),
        days: wanted.iter().copied().collect(),
    };
    let read = read::read_counts(&scanner, &wanted).await;
    super::quit_within(scanner.quit()).await;
    read
}

/// The report of every merchant, in bytewise id order.
fn render(request: &Request, by_merchant: &BTreeMap<String, ExperimentCounts>) -> String {
    let mut out = String::new();
    for (merchant, counts) in by_merchant {
        let uplift = uplift_of(counts);
        match request.format {
            Format::Json => {
                let line = JsonLine::of(merchant, request.days, &uplift);
                let line = serde_json::to_string(&line).unwrap_or_default();
                out.push_str(&line);
                out.push('\n');
            }
            Format::Text => out.push_str(&text_block(
                &request.tenant,
                merchant,
                request.days,
                &uplift,
            )),
        }
    }
    if request.format == Format::Text && by_merchant.is_empty() {
        let tenant = match request.tenant.id() {
            Some(id) => format!(" for tenant {id}"),
            None => String::new(),
        };
        out.push_str(&format!(
            "no experiment counts{tenant} in the last {} UTC days\n",
            request.days
        ));
    }
    out
}

/// One JSON line: exactly GetUplift's fields plus `merchant_id`, `days`
/// and `follow_rate`, in the contract's order, for every tenant: the
/// caller named the tenant with `--tenant`, and the text report says it.
#[derive(Serialize)]
struct JsonLine<'a> {
    merchant_id: &'a str,
    days: u32,
    treated: GroupStats,
    holdout: GroupStats,
    shadow: GroupStats,
    difference: f64,
    ci_low: f64,
    ci_high: f64,
    enough_data: bool,
    follow_rate: f64,
}

/// GetUplift's `GroupStats`, by its field names.
#[derive(Serialize)]
struct GroupStats {
    outcomes: u64,
    successes: u64,
    success_rate: f64,
    followed: u64,
    overridden: u64,
}

impl GroupStats {
    fn of(group: &GroupCounts) -> Self {
        Self {
            outcomes: group.outcomes,
            successes: group.successes,
            success_rate: group.success_rate(),
            followed: group.followed,
            overridden: group.overridden,
        }
    }
}

impl<'a> JsonLine<'a> {
    fn of(merchant_id: &'a str, days: u32, uplift: &Uplift) -> Self {
        Self {
            merchant_id,
            days,
            treated: GroupStats::of(&uplift.treated),
            holdout: GroupStats::of(&uplift.holdout),
            shadow: GroupStats::of(&uplift.shadow),
            difference: uplift.difference,
            ci_low: uplift.ci_low,
            ci_high: uplift.ci_high,
            enough_data: uplift.enough_data,
            follow_rate: uplift.follow_rate,
        }
    }
}

/// One merchant's block of the text report.
fn text_block(tenant: &Tenant, merchant: &str, days: u32, uplift: &Uplift) -> String {
    let percent = |rate: f64| format!("{:.2}%", rate * 100.0);
    let points = |diff: f64| format!("{:+.2} pp", diff * 100.0);
    let tenant = match tenant.id() {
        Some(id) => format!(" (tenant {id})"),
        None => String::new(),
    };
    let mut out = format!(
        "merchant {merchant}{tenant}: last {days} UTC day{}\n",
        if days == 1 { "" } else { "s" }
    );
    out.push_str(&format!(
        "  {:<8} {:>10} {:>10} {:>8} {:>10} {:>10}\n",
        "group", "outcomes", "successes", "rate", "followed", "overridden"
    ));
    for (name, group, split) in [
        ("treated", &uplift.treated, true),
        ("holdout", &uplift.holdout, false),
        ("shadow", &uplift.shadow, true),
    ] {
        let (followed, overridden) = if split {
            (group.followed.to_string(), group.overridden.to_string())
        } else {
            ("-".to_owned(), "-".to_owned())
        };
        out.push_str(&format!(
            "  {name:<8} {:>10} {:>10} {:>8} {followed:>10} {overridden:>10}\n",
            group.outcomes,
            group.successes,
            percent(group.success_rate()),
        ));
    }
    out.push_str(&format!(
        "  follow rate (treated): {}\n",
        percent(uplift.follow_rate)
    ));
    let interval = if uplift.treated.outcomes > 0 && uplift.holdout.outcomes > 0 {
        format!(
            "95% CI [{}, {}]",
            points(uplift.ci_low),
            points(uplift.ci_high)
        )
    } else {
        "no 95% CI (treated or holdout has no outcome)".to_owned()
    };
    out.push_str(&format!(
        "  difference treated - holdout: {}, {interval}\n",
        points(uplift.difference)
    ));
    out.push_str(&format!(
        "  enough data: {}\n\n",
        if uplift.enough_data {
            "yes"
        } else {
            "no (treated and holdout need 100 outcomes each)"
        }
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::keys::EXPERIMENT_FIELDS;

    fn parse(args: &[&str]) -> Result<Option<Request>, String> {
        parse_args(&args.iter().map(|a| a.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn options_are_read_in_both_spellings_with_their_defaults() {
        let request = parse(&[]).unwrap().unwrap();
        assert_eq!((request.days, request.format), (7, Format::Text));
        assert_eq!(request.merchant, None);
        let request = parse(&["--merchant= m_1 ", "--days", "35", "--format=json"])
            .unwrap()
            .unwrap();
        assert_eq!(request.merchant.unwrap().as_str(), "m_1");
        assert_eq!((request.days, request.format), (35, Format::Json));
        assert_eq!(request.tenant, Tenant::DEFAULT);
        assert_eq!(parse(&["--days=1", "--help"]).unwrap(), None);
        let request = parse(&["--tenant", " Acme"]).unwrap().unwrap();
        assert_eq!(request.tenant.id(), Some("Acme"));
    }

    #[test]
    fn usage_errors_name_the_problem() {
        for (args, says) in [
            (
                &["--days", "0"][..],
                "--days: `0` is not a whole number from 1 to 35",
            ),
            (&["--days", "36"], "from 1 to 35"),
            (&["--days", "x"], "from 1 to 35"),
            (&["--days"], "--days needs a value"),
            (&["--merchant", ""], "--merchant: must not be empty"),
            (&["--format", "csv"], "`csv` is not text or json"),
            (&["extra"], "unknown argument `extra`"),
            (&["--tenant", "a.b"], "--tenant: may hold only"),
            (&["--tenant"], "--tenant needs a value"),
        ] {
            let problem = parse(args).unwrap_err();
            assert!(problem.contains(says), "{args:?}: {problem}");
        }
    }

    fn counts(pairs: &[(&str, u64)]) -> ExperimentCounts {
        let mut counts = ExperimentCounts::default();
        for (field, n) in pairs {
            let at = EXPERIMENT_FIELDS.iter().position(|f| f == field).unwrap();
            counts.counts[at] = *n;
        }
        counts
    }

    #[test]
    fn json_lines_carry_exactly_the_contracts_fields_in_its_order() {
        let request = parse(&["--format", "json", "--days", "3"])
            .unwrap()
            .unwrap();
        let by_merchant = BTreeMap::from([
            (
                "m1".to_owned(),
                counts(&[("t:f:s", 56), ("t:f:f", 14), ("h:-:s", 48), ("h:-:f", 32)]),
            ),
            ("m0".to_owned(), counts(&[("s:o:f", 1)])),
        ]);
        let text = render(&request, &by_merchant);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2);
        assert!(lines[0].starts_with("{\"merchant_id\":\"m0\",\"days\":3,"));
        let line: serde_json::Value = serde_json::from_str(lines[1]).unwrap();
        let keys: Vec<&str> = line
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        let mut expected = [
            "merchant_id",
            "days",
            "treated",
            "holdout",
            "shadow",
            "difference",
            "ci_low",
            "ci_high",
            "enough_data",
            "follow_rate",
        ];
        let mut sorted = keys.clone();
        sorted.sort_unstable();
        expected.sort_unstable();
        assert_eq!(sorted, expected);
        for group in ["treated", "holdout", "shadow"] {
            let mut fields: Vec<&str> = line[group]
                .as_object()
                .unwrap()
                .keys()
                .map(String::as_str)
                .collect();
            fields.sort_unstable();
            assert_eq!(
                fields,
                [
                    "followed",
                    "outcomes",
                    "overridden",
                    "success_rate",
                    "successes"
                ]
            );
        }
        assert_eq!(line["merchant_id"], "m1");
        assert_eq!(line["treated"]["outcomes"], 70);
        assert_eq!(line["treated"]["followed"], 70);
        assert_eq!(line["holdout"]["successes"], 48);
        assert_eq!(line["follow_rate"], 1.0);
        assert_eq!(line["enough_data"], false);
        // Newcombe (1998) Table II, example (a): 56/70 − 48/80, method 10:
        // 0.2000, 95 % CI 0.0524 to 0.3339.
        let diff = line["difference"].as_f64().unwrap();
        assert!((diff - 0.2).abs() < 1e-9, "{diff}");
        assert!((line["ci_low"].as_f64().unwrap() - 0.0524).abs() < 5e-5);
        assert!((line["ci_high"].as_f64().unwrap() - 0.3339).abs() < 5e-5);
    }

    #[test]
    fn the_text_report_is_a_table_with_the_interval_in_points() {
        let request = parse(&["--days", "1"]).unwrap().unwrap();
        let by_merchant = BTreeMap::from([(
            "shop".to_owned(),
            counts(&[
                ("t:f:s", 50),
                ("t:o:s", 6),
                ("t:o:f", 14),
                ("h:-:s", 48),
                ("h:-:f", 32),
            ]),
        )]);
        let text = render(&request, &by_merchant);
        for line in [
            "merchant shop: last 1 UTC day",
            "  treated          70         56   80.00%         50         20",
            "  holdout          80         48   60.00%          -          -",
            "  shadow            0          0    0.00%          0          0",
            "  follow rate (treated): 71.43%",
            "  difference treated - holdout: +20.00 pp, 95% CI [+5.24 pp, +33.39 pp]",
            "  enough data: no (treated and holdout need 100 outcomes each)",
        ] {
            assert!(text.contains(line), "{line:?} missing from:\n{text}");
        }
        let lonely = BTreeMap::from([("m".to_owned(), counts(&[("t:f:s", 1)]))]);
        assert!(
            render(&request, &lonely).contains("no 95% CI (treated or holdout has no outcome)")
        );
        assert_eq!(
            render(&request, &BTreeMap::new()),
            "no experiment counts in the last 1 UTC days\n"
        );
    }

    #[test]
    fn a_tenants_table_says_whose_it_is_and_its_json_has_the_contracts_fields() {
        let by_merchant = BTreeMap::from([("m1".to_owned(), counts(&[("t:f:s", 1)]))]);
        let request = parse(&["--tenant", "acme", "--days", "1"])
            .unwrap()
            .unwrap();
        let text = render(&request, &by_merchant);
        assert!(
            text.starts_with("merchant m1 (tenant acme): last 1 UTC day\n"),
            "{text}"
        );
        assert_eq!(
            render(&request, &BTreeMap::new()),
            "no experiment counts for tenant acme in the last 1 UTC days\n"
        );
        let request = parse(&["--tenant", "acme", "--format", "json"])
            .unwrap()
            .unwrap();
        // Exactly the contract's fields, for a named tenant as for the
        // default one.
        let line = render(&request, &by_merchant);
        assert!(line.starts_with("{\"merchant_id\":\"m1\","), "{line}");
        let request = parse(&["--format", "json"]).unwrap().unwrap();
        assert_eq!(render(&request, &by_merchant), line);
    }
}
