//! `sticky-routing export [--config FILE] [--tenant ID | --all-tenants] [--merchant ID]
//! [--format csv|jsonl] [FILE|-]`: every habit of a tenant in Redis as the
//! rows `import` reads, so that export, then `import --no-admission` into an
//! empty Redis, gives the same habits.
//!
//! Tenants: without a flag, the default tenant's habits only; `--tenant X`
//! X's (rows without a tenant column: `import --tenant X` puts them back);
//! `--all-tenants` every tenant's, each row with its `tenant_id` (empty for
//! the default tenant), which `import` reads, so the round trip restores
//! every tenant. The default tenant's SCAN pattern, `sticky_gw_*`, matches
//! every tenant's keys: a key is kept by the tenant [`parse_customer_key`]
//! reads in it, and another tenant's key is passed over without a word (it
//! is no foreign key). A named tenant's pattern matches its keys only.
//!
//! It loads the settings as the server does (defaults, `--config FILE` or
//! `STICKY_ROUTING_CONFIG`, then the environment) and reads Redis with the
//! service's connection settings; `deploy/redis-acl-export.txt` is the
//! read-only user it needs. Rows go to stdout unless a FILE is named, data
//! only: progress, warnings and the summary go to stderr, and no customer id
//! ever appears there.
//!
//! Exit codes: 0 when every habit was written; 1 when some key or field
//! under the customer prefix was not one the service writes, so it was
//! skipped (the rest is written, and stderr says how many); 2 for usage,
//! settings, file or Redis errors (a file named is then not created).

mod decode;
mod output;
mod seen;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::Format;
use crate::config::Settings;
use crate::domain::ids::MerchantId;
use crate::domain::keys::customer_key_pattern;
use crate::domain::tenant::Tenant;
use crate::storage::{HashContents, HashScanner, ScanError, ScannedHash};
use decode::{Decoded, decode_hash};
use output::{Row, RowWriter};
use seen::Seen;

/// `export --help`, and the line the binary's own `--help` can show.
pub const HELP: &str = "\
usage: sticky-routing export [--config FILE] [--tenant ID | --all-tenants]
                             [--merchant ID] [--format csv|jsonl] [FILE|-]

Writes every habit of a tenant in Redis as success rows whose counts add up to
its net count (one row, or rows of at most 1,000,000,000, the most one import
row takes), in the format `sticky-routing import` reads. Rows go to FILE, or to
stdout (`-` or no FILE); progress and the summary go to stderr.

  --config FILE      the service's TOML settings (else STICKY_ROUTING_CONFIG);
                     the STICKY_ROUTING_REDIS_* variables apply as for the server
  --tenant ID        this tenant's habits (else the default tenant's only)
  --all-tenants      every tenant's habits, each row with a tenant_id column
                     (empty: the default tenant) that import reads back
  --merchant ID      only this merchant's customers (in every tenant, with
                     --all-tenants)
  --format F         csv or jsonl; by default from FILE's name (.csv, .jsonl,
                     .ndjson), and csv on stdout

Exit status: 0 all written; 1 some keys or fields were not the service's and
were skipped (counted on stderr); 2 usage, settings, file or Redis error.";

/// One line for the binary's `--help`.
pub const SUMMARY: &str = "sticky-routing export [--tenant ID | --all-tenants] [--merchant ID] \
     [--format csv|jsonl] [FILE|-]  (see export --help)";

/// How often a progress line is printed while the export runs.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

/// Whose habits an export writes.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Tenants {
    /// One tenant's (the default one without `--tenant`), without a
    /// `tenant_id` column.
    One(Tenant),
    /// Every tenant's, with a `tenant_id` column.
    All,
}

impl Tenants {
    /// Whether a key of `tenant` is exported.
    fn keeps(&self, tenant: &Tenant) -> bool {
        match self {
            Self::One(one) => one == tenant,
            Self::All => true,
        }
    }

    /// The SCAN pattern: every tenant's keys start as the default tenant's.
    fn pattern(&self, merchant: Option<&MerchantId>) -> String {
        match self {
            Self::One(tenant) => customer_key_pattern(tenant, merchant),
            Self::All => customer_key_pattern(&Tenant::DEFAULT, None),
        }
    }
}

/// What the command line asks for.
#[derive(Debug, PartialEq, Eq)]
struct Request {
    config_file: Option<PathBuf>,
    tenants: Tenants,
    merchant: Option<MerchantId>,
    format: Format,
    /// `None`: stdout.
    path: Option<PathBuf>,
}

/// Runs the export; `args` are the arguments after `export`.
pub fn run(args: &[String], env: &HashMap<String, String>) -> ExitCode {
    match super::runtime() {
        Ok(runtime) => runtime.block_on(run_on_runtime(args, env)),
        Err(error) => fail(&format!("cannot start the runtime: {error}")),
    }
}

async fn run_on_runtime(args: &[String], env: &HashMap<String, String>) -> ExitCode {
    let (request, settings) =
        match super::request_and_settings("export", args, env, HELP, parse_args, |request| {
            request.config_file.as_deref()
        }) {
            Ok(started) => started,
            Err(code) => return code,
        };
    match export(&request, &settings).await {
        Ok(summary) => summary.report(),
        Err(problem) => fail(&problem),
    }
}

fn fail(problem: &str) -> ExitCode {
    super::fail("export", problem)
}

/// The arguments; `Ok(None)` for `--help`.
fn parse_args(args: &[String]) -> Result<Option<Request>, String> {
    let (mut config_file, mut merchant, mut format, mut path) = (None, None, None, None);
    let (mut tenant, mut all_tenants) = (None, false);
    let mut flags = super::flags::Flags::new(args);
    while let Some(name) = flags.next_word() {
        let mut value = || flags.value(name).map(str::to_owned);
        match name {
            "-h" | "--help" => return Ok(None),
            "--config" => config_file = Some(PathBuf::from(value()?)),
            super::flags::TENANT_FLAG => tenant = Some(super::flags::tenant(&value()?)?),
            "--all-tenants" => all_tenants = true,
            "--merchant" => {
                let id = value()?;
                let id = MerchantId::parse(&id).map_err(|e| format!("--merchant: {}", e.reason))?;
                merchant = Some(id);
            }
            "--format" => {
                let text = value()?;
                let parsed = Format::from_flag(&text)
                    .ok_or_else(|| format!("--format: `{text}` is not csv or jsonl"))?;
                format = Some(parsed);
            }
            "-" if path.is_none() => path = Some(None),
            other if other.starts_with('-') => return Err(format!("unknown option `{other}`")),
            file if path.is_none() => path = Some(Some(PathBuf::from(file))),
            _ => return Err("give at most one FILE".into()),
        }
    }
    let tenants = match (tenant, all_tenants) {
        (Some(_), true) => return Err("give --tenant ID or --all-tenants, not both".into()),
        (_, true) => Tenants::All,
        (tenant, false) => Tenants::One(tenant.unwrap_or_default()),
    };
    let path: Option<PathBuf> = path.flatten();
    let format = match (format, &path) {
        (Some(format), _) => format,
        (None, None) => Format::Csv,
        (None, Some(file)) => Format::from_path(file).ok_or_else(|| {
            format!(
                "cannot tell the format from `{}`: name it .csv, .jsonl or .ndjson, or give --format",
                file.display()
            )
        })?,
    };
    Ok(Some(Request {
        config_file,
        tenants,
        merchant,
        format,
        path,
    }))
}

/// What an export wrote and skipped.
#[derive(Debug, Default)]
struct Summary {
    customers: u64,
    rows: u64,
    unreadable_keys: u64,
    unreadable_fields: u64,
    /// Keys SCAN named again after they were written, and not written again.
    repeats: u64,
    elapsed: Duration,
}

impl Summary {
    fn rate(&self) -> u64 {
        let secs = self.elapsed.as_secs_f64();
        if secs > 0.0 {
            (self.rows as f64 / secs) as u64
        } else {
            0
        }
    }

    fn report(&self) -> ExitCode {
        eprintln!(
            "sticky-routing export: done: {} customers, {} rows in {:.1}s ({} rows/s)",
            self.customers,
            self.rows,
            self.elapsed.as_secs_f64(),
            self.rate()
        );
        if self.repeats > 0 {
            eprintln!(
                "sticky-routing export: {} keys that the scan named more than once were written once",
                self.repeats
            );
        }
        if self.unreadable_keys + self.unreadable_fields == 0 {
            return ExitCode::SUCCESS;
        }
        eprintln!(
            "sticky-routing export: warning: skipped {} keys and {} fields under the customer \
             prefix that this service does not write (not exported)",
            self.unreadable_keys, self.unreadable_fields
        );
        ExitCode::from(1)
    }
}

/// Connects, scans, writes; an error names what failed.
async fn export(request: &Request, settings: &Settings) -> Result<Summary, String> {
    let redis = super::bulk_redis(&settings.redis);
    let scanner = match HashScanner::connect(&redis, super::START_WITHIN).await {
        Ok(scanner) => scanner,
        Err(ScanError::Connect(why)) => return Err(super::unreachable(&redis, &why)),
        Err(error) => return Err(error.to_string()),
    };
    let with_tenant = request.tenants == Tenants::All;
    let writer = RowWriter::open(request.path.as_deref(), request.format, with_tenant)
        .map_err(|e| cannot_write(request.path.as_deref(), &e))?;
    let pages = scanner.scan(&request.tenants.pattern(request.merchant.as_ref()));
    let result = write_all(pages, request, writer).await;
    super::quit_within(scanner.quit()).await;
    result
}

/// Writes every page that `pages` brings, each key once; the file is
/// renamed into place only if the pages end without an error.
async fn write_all(
    mut pages: mpsc::Receiver<Result<Vec<ScannedHash>, ScanError>>,
    request: &Request,
    mut writer: RowWriter,
) -> Result<Summary, String> {
    let started = Instant::now();
    let mut summary = Summary::default();
    let mut seen = Seen::default();
    let mut next_progress = started + PROGRESS_EVERY;
    while let Some(page) = pages.recv().await {
        let written = page
            .map_err(|e| e.to_string())
            .and_then(|page| write_page(&page, request, &mut writer, &mut seen, &mut summary));
        if let Err(problem) = written {
            writer.abandon();
            return Err(problem);
        }
        if Instant::now() >= next_progress {
            next_progress += PROGRESS_EVERY;
            summary.elapsed = started.elapsed();
            eprintln!(
                "sticky-routing export: {} customers, {} rows ({} rows/s)",
                summary.customers,
                summary.rows,
                summary.rate()
            );
        }
    }
    writer
        .finish()
        .map_err(|e| cannot_write(request.path.as_deref(), &e))?;
    summary.elapsed = started.elapsed();
    Ok(summary)
}

/// Writes one page's customers. A key counts as written (in `seen`) once
/// it gave rows or was counted unreadable; a key found empty (deleted
/// between SCAN and HGETALL) or of another merchant or tenant is not, so a
/// later sighting of it is still read.
fn write_page(
    page: &[ScannedHash],
    request: &Request,
    writer: &mut RowWriter,
    seen: &mut Seen,
    summary: &mut Summary,
) -> Result<(), String> {
    for hash in page {
        let fields = match &hash.contents {
            HashContents::Fields(fields) => fields,
            HashContents::NotAHash => {
                if first_sighting(&hash.key, seen, summary) {
                    summary.unreadable_keys += 1;
                }
                continue;
            }
        };
        match decode_hash(&hash.key, fields) {
            Decoded::UnreadableKey => {
                if first_sighting(&hash.key, seen, summary) {
                    summary.unreadable_keys += 1;
                }
            }
            Decoded::Customer {
                tenant,
                merchant,
                customer,
                habits,
                unreadable_fields,
            } => {
                // The MATCH pattern already keeps to the merchant asked for,
                // but not to the default tenant: its pattern matches all.
                if request.merchant.as_ref().is_some_and(|m| *m != merchant)
                    || !request.tenants.keeps(&tenant)
                {
                    continue;
                }
                let nothing = habits.is_empty() && unreadable_fields == 0;
                if nothing || !first_sighting(&hash.key, seen, summary) {
                    continue;
                }
                summary.unreadable_fields += unreadable_fields as u64;
                if habits.is_empty() {
                    continue;
                }
                summary.customers += 1;
                // The column only when every tenant is written.
                let tenant_id = (request.tenants == Tenants::All).then(|| tenant.as_str());
                for habit in &habits {
                    let rows =
                        Row::successes(tenant_id, merchant.as_str(), customer.as_str(), habit);
                    for row in rows {
                        writer
                            .write(&row)
                            .map_err(|e| cannot_write(request.path.as_deref(), &e))?;
                        summary.rows += 1;
                    }
                }
            }
        }
    }
    Ok(())
}

/// Whether `key` is written now for the first time; a repeat is counted.
fn first_sighting(key: &[u8], seen: &mut Seen, summary: &mut Summary) -> bool {
    let first = seen.first_time(key);
    summary.repeats += u64::from(!first);
    first
}

fn cannot_write(path: Option<&Path>, error: &std::io::Error) -> String {
    match path {
        Some(path) => format!("cannot write {}: {error}", path.display()),
        None => format!("cannot write to stdout: {error}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Option<Request>, String> {
        parse_args(&args.iter().map(|a| a.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn the_format_comes_from_the_flag_then_the_name_then_stdout_csv() {
        let format = |args: &[&str]| parse(args).unwrap().unwrap().format;
        assert_eq!(format(&[]), Format::Csv);
        assert_eq!(format(&["-"]), Format::Csv);
        assert_eq!(format(&["--format", "jsonl"]), Format::Jsonl);
        assert_eq!(format(&["out.NDJSON"]), Format::Jsonl);
        assert_eq!(format(&["out.jsonl"]), Format::Jsonl);
        assert_eq!(format(&["--format=csv", "out.jsonl"]), Format::Csv);
        assert!(parse(&["out.txt"]).unwrap_err().contains("--format"));
    }

    #[test]
    fn options_are_read_in_both_spellings() {
        let request = parse(&["--merchant= m_1 ", "--config", "a.toml", "x.csv"])
            .unwrap()
            .unwrap();
        assert_eq!(request.merchant.unwrap().as_str(), "m_1");
        assert_eq!(request.config_file, Some(PathBuf::from("a.toml")));
        assert_eq!(request.path, Some(PathBuf::from("x.csv")));
        assert_eq!(request.tenants, Tenants::One(Tenant::DEFAULT));
        assert_eq!(parse(&["x.csv", "--help"]).unwrap(), None);
        let request = parse(&["--tenant", " Acme "]).unwrap().unwrap();
        assert_eq!(request.tenants, Tenants::One(tenant("Acme")));
        let request = parse(&["--all-tenants"]).unwrap().unwrap();
        assert_eq!(request.tenants, Tenants::All);
    }

    fn tenant(id: &str) -> Tenant {
        Tenant::parse(id).unwrap()
    }

    #[test]
    fn the_default_tenants_pattern_matches_all_and_keeps_only_its_own() {
        let default = Tenants::One(Tenant::DEFAULT);
        assert_eq!(default.pattern(None), "sticky_gw_*");
        assert!(default.keeps(&Tenant::DEFAULT) && !default.keeps(&tenant("acme")));
        let acme = Tenants::One(tenant("acme"));
        assert_eq!(acme.pattern(None), "sticky_gw_%Tacme_*");
        assert!(acme.keeps(&tenant("acme")) && !acme.keeps(&tenant("Acme")));
        assert!(!acme.keeps(&Tenant::DEFAULT));
        assert_eq!(Tenants::All.pattern(None), "sticky_gw_*");
        let m1 = MerchantId::parse("m1").unwrap();
        assert_eq!(Tenants::All.pattern(Some(&m1)), "sticky_gw_*");
        assert!(Tenants::All.keeps(&Tenant::DEFAULT) && Tenants::All.keeps(&tenant("x")));
    }

    /// A customer hash of merchant `m1` as a SCAN page brings it.
    fn scanned(customer: &str, contents: HashContents) -> ScannedHash {
        scanned_in(&Tenant::DEFAULT, customer, contents)
    }

    fn scanned_in(tenant: &Tenant, customer: &str, contents: HashContents) -> ScannedHash {
        let key = crate::domain::keys::customer_key(
            tenant,
            &MerchantId::parse("m1").unwrap(),
            &crate::domain::ids::CustomerId::parse(customer).unwrap(),
        );
        ScannedHash {
            key: key.as_bytes().to_vec(),
            contents,
        }
    }

    fn habit(count: &str) -> HashContents {
        HashContents::Fields(vec![(b"INTERAC:RTP:GIGADAT".to_vec(), count.into())])
    }

    #[tokio::test]
    async fn a_key_the_scan_names_again_is_written_once() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("out.csv");
        let request = parse(&[file.to_str().unwrap()]).unwrap().unwrap();
        let writer = RowWriter::open(request.path.as_deref(), request.format, false).unwrap();
        // As SCAN may page when the table is resized mid-scan: keys already
        // given come again, on later pages and on the same one. A key found
        // empty (deleted between SCAN and HGETALL) is no sighting: when it
        // comes again with habits, it is written.
        let pages = [
            vec![scanned("c1", habit("1")), scanned("c2", habit("2"))],
            vec![scanned("c3", habit("3")), scanned("c2", habit("2"))],
            vec![scanned("c1", habit("1")), scanned("c1", habit("1"))],
            vec![scanned("x", HashContents::NotAHash)],
            vec![scanned("x", HashContents::NotAHash)],
            vec![scanned("c4", HashContents::Fields(Vec::new()))],
            vec![scanned("c4", habit("4"))],
        ];
        let (sender, receiver) = mpsc::channel(pages.len());
        for page in pages {
            sender.send(Ok(page)).await.unwrap();
        }
        drop(sender);

        let summary = write_all(receiver, &request, writer).await.unwrap();
        let written = std::fs::read_to_string(&file).unwrap();
        let mut rows: Vec<&str> = written.lines().skip(1).collect();
        rows.sort_unstable();
        assert_eq!(
            rows,
            [
                "m1,c1,INTERAC,RTP,GIGADAT,success,1",
                "m1,c2,INTERAC,RTP,GIGADAT,success,2",
                "m1,c3,INTERAC,RTP,GIGADAT,success,3",
                "m1,c4,INTERAC,RTP,GIGADAT,success,4",
            ]
        );
        assert_eq!((summary.customers, summary.rows), (4, 4));
        assert_eq!((summary.repeats, summary.unreadable_keys), (4, 1));
    }

    /// Writes `pages` as `args` ask; the file's lines after the header,
    /// sorted, and the summary.
    async fn written(args: &[&str], pages: Vec<Vec<ScannedHash>>) -> (Vec<String>, Summary) {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("out.csv");
        let mut args = args.to_vec();
        args.push(file.to_str().unwrap());
        let request = parse(&args).unwrap().unwrap();
        let with_tenant = request.tenants == Tenants::All;
        let writer = RowWriter::open(request.path.as_deref(), request.format, with_tenant).unwrap();
        let (sender, receiver) = mpsc::channel(pages.len().max(1));
        for page in pages {
            sender.send(Ok(page)).await.unwrap();
        }
        drop(sender);
        let summary = write_all(receiver, &request, writer).await.unwrap();
        let text = std::fs::read_to_string(&file).unwrap();
        let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
        lines[1..].sort_unstable();
        (lines, summary)
    }

    #[tokio::test]
    async fn each_tenant_is_exported_alone_and_all_with_a_tenant_column() {
        let pages = || {
            vec![vec![
                scanned_in(&Tenant::DEFAULT, "c1", habit("1")),
                scanned_in(&tenant("acme"), "c1", habit("2")),
                scanned_in(&tenant("Acme"), "c1", habit("3")),
            ]]
        };
        let header = "merchant_id,customer_id,payment_method,payment_method_type,connector,\
                      outcome,count";
        let (lines, summary) = written(&[], pages()).await;
        assert_eq!(lines, [header, "m1,c1,INTERAC,RTP,GIGADAT,success,1"]);
        // Another tenant's key is no foreign key: nothing unreadable.
        assert_eq!((summary.customers, summary.unreadable_keys), (1, 0));
        let (lines, _) = written(&["--tenant", "acme"], pages()).await;
        assert_eq!(lines, [header, "m1,c1,INTERAC,RTP,GIGADAT,success,2"]);
        let (lines, summary) = written(&["--all-tenants"], pages()).await;
        assert_eq!(
            lines,
            [
                &format!("tenant_id,{header}"),
                ",m1,c1,INTERAC,RTP,GIGADAT,success,1",
                "Acme,m1,c1,INTERAC,RTP,GIGADAT,success,3",
                "acme,m1,c1,INTERAC,RTP,GIGADAT,success,2",
            ]
        );
        assert_eq!(summary.customers, 3);
    }

    #[test]
    fn usage_errors_name_the_problem() {
        for (args, says) in [
            (&["--merchant"][..], "--merchant needs"),
            (&["--merchant", ""], "--merchant: must not be empty"),
            (&["--format", "xml"], "`xml` is not csv"),
            (&["--bogus"], "unknown option `--bogus`"),
            (&["a.csv", "b.csv"], "at most one FILE"),
            (&["--tenant", "a.b"], "--tenant: may hold only"),
            (&["--tenant"], "--tenant needs a value"),
            (&["--tenant", "x", "--all-tenants"], "not both"),
        ] {
            let problem = parse(args).unwrap_err();
            assert!(problem.contains(says), "{args:?}: {problem}");
        }
    }
}
