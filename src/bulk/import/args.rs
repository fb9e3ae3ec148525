//! `sticky-routing import`'s command line.

use std::path::PathBuf;

use crate::bulk::Format;
use crate::domain::tenant::Tenant;

pub const USAGE: &str = "\
usage: sticky-routing import [--format csv|jsonl] [--dry-run] [--no-admission]
                             [--skip N] [--tenant ID] [--config FILE] FILE|-

Applies historical outcomes, one per row, through the same validation, rules,
scripts and admission as RecordOutcome, in file order per customer.
Columns: merchant_id, customer_id, payment_method, payment_method_type,
connector, outcome (success|gateway_failure), optional count (1..=1000000000,
empty: 1), attempt_id and tenant_id (the row's tenant; empty: the default
tenant). CSV has a header line; JSONL one object per line.

  --format csv|jsonl  needed for stdin (-) and names other than .csv/.jsonl/.ndjson
  --dry-run           validate only; connects to nothing, writes nothing
  --no-admission      create new customers without asking the admission budget
                      or the memory guard
  --skip N            skip the first N data rows (resume after a stop)
  --tenant ID         every row is this tenant's (else each row's tenant_id,
                      or the default tenant); a file with a tenant_id column
                      cannot go with it (exit 2)
  --config FILE       the service's settings file (else STICKY_ROUTING_CONFIG)

Running the same FILE again, or resuming it with --skip, applies no row twice:
each customer's hash keeps a mark of the last row of that file applied to it
(importing another file for the customer replaces it; it goes with the hash).
Stdin has no mark: there only an attempt_id among the customer's last 8 keeps
a row from being applied twice.

Exit: 0 every row applied or intentionally not applied (ignored_no_habit,
not_admitted, duplicate); 1 some row was bad or not applied; 2 usage, file or
Redis error; 130 interrupted. After a stop it prints `resume with --skip N`.";

/// What the command line asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportArgs {
    pub format: Format,
    /// `None`: stdin.
    pub file: Option<PathBuf>,
    pub dry_run: bool,
    pub no_admission: bool,
    pub skip: u64,
    /// `--tenant`: every row is this tenant's; `None`: each row's own.
    pub tenant: Option<Tenant>,
    pub config_file: Option<PathBuf>,
}

/// `Err(None)`: `--help`; `Err(Some(problem))`: a usage error.
pub fn parse(args: &[String]) -> Result<ImportArgs, Option<String>> {
    let mut input = crate::bulk::flags::Input::default();
    let mut dry_run = false;
    let mut no_admission = false;
    let mut skip = 0;
    let mut tenant = None;
    let mut config_file = None;
    let mut flags = crate::bulk::flags::Flags::new(args);
    while let Some(flag) = flags.next_word() {
        if input.take(flag, &mut flags).map_err(Some)? {
            continue;
        }
        let mut value = || flags.value(flag).map(str::to_owned).map_err(Some);
        match flag {
            "-h" | "--help" => return Err(None),
            "--dry-run" => dry_run = true,
            "--no-admission" => no_admission = true,
            "--skip" => {
                let word = value()?;
                skip = word.parse().map_err(|_| {
                    Some(format!("--skip needs a whole number of rows, not `{word}`"))
                })?;
            }
            crate::bulk::flags::TENANT_FLAG => {
                tenant = Some(crate::bulk::flags::tenant(&value()?).map_err(Some)?);
            }
            "--config" => config_file = Some(PathBuf::from(value()?)),
            other => return Err(Some(format!("unknown option `{other}`"))),
        }
    }
    let (file, format) = input.finish().map_err(Some)?;
    Ok(ImportArgs {
        format,
        file,
        dry_run,
        no_admission,
        skip,
        tenant,
        config_file,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_words(words: &str) -> Result<ImportArgs, Option<String>> {
        let args: Vec<String> = words.split_whitespace().map(str::to_owned).collect();
        parse(&args)
    }

    #[test]
    fn flags_and_the_file_are_read() {
        let args = parse_words("--dry-run --skip 12 --no-admission rows.csv").unwrap();
        assert_eq!(args.format, Format::Csv);
        assert_eq!(args.file, Some(PathBuf::from("rows.csv")));
        assert!(args.dry_run && args.no_admission);
        assert_eq!(args.skip, 12);
        let args = parse_words("--format=jsonl --config s.toml -").unwrap();
        assert_eq!((args.format, args.file), (Format::Jsonl, None));
        assert_eq!(args.config_file, Some(PathBuf::from("s.toml")));
        assert_eq!(args.tenant, None);
        let args = parse_words("--tenant acme r.csv").unwrap();
        assert_eq!(args.tenant, Tenant::parse("acme").ok());
        let args = parse_words("--tenant= r.csv").unwrap();
        assert_eq!(args.tenant, Some(Tenant::DEFAULT));
    }

    #[test]
    fn usage_errors_say_what_is_wrong() {
        for (words, says) in [
            ("-", "stdin (-) needs --format"),
            ("rows.txt", "cannot tell the format"),
            ("--format xml rows.csv", "--format must be csv or jsonl"),
            ("--skip -3 rows.csv", "--skip needs a whole number"),
            ("--skip", "--skip needs a value"),
            ("", "a FILE"),
            ("a.csv b.csv", "one too many"),
            ("--frobnicate a.csv", "unknown option"),
            ("--tenant a.b a.csv", "--tenant: may hold only"),
            ("--tenant", "--tenant needs a value"),
        ] {
            let problem = parse_words(words).unwrap_err().unwrap();
            assert!(problem.contains(says), "{words}: {problem}");
        }
        assert_eq!(parse_words("--help"), Err(None));
    }
}
