//! `sticky-routing replay`'s command line.

use std::path::PathBuf;

use crate::bulk::Format;
use crate::domain::ids::MerchantId;
use crate::domain::tenant::Tenant;

pub const USAGE: &str = "\
usage: sticky-routing replay [--format csv|jsonl] [--tenant ID] [--merchant ID]
                             [--admission] [--top N] [--json] [--config FILE]
                             FILE|-

Replays a payment history in memory, without Redis, through the service's own
rules and settings, and reports what pinning would have done: for each attempt,
first the pin GetPin would have given from the habits of the rows before it,
then the attempt recorded as RecordOutcome records it.
Rows are import's (merchant_id, customer_id, payment_method,
payment_method_type, connector, outcome, optional count, attempt_id and
tenant_id) in time order, plus an optional `at`: the attempt's time, RFC 3339
or Unix seconds (a row without one is one second after the row before; the
first is at 0). Tenants are kept apart: the same merchant and customer ids in
two tenants (two tenant_id cells; empty: the default tenant) are two merchants
and two customers.

  --format csv|jsonl  needed for stdin (-) and names other than .csv/.jsonl/.ndjson
  --tenant ID         replay only this tenant's rows (a row without a tenant_id
                      is this tenant's)
  --merchant ID       replay only this merchant's rows
  --admission         apply the admission budgets and windows, by `at`
  --top N             the N merchants with the most attempts (default 10)
  --json              one JSON object instead of the table
  --config FILE       the service's settings file (else STICKY_ROUTING_CONFIG)

The figures are an observational estimate, not an experiment: the holdout
(STICKY_ROUTING_HOLDOUT) measures the uplift of a real rollout.

Exit: 0 every row replayed; 1 some row was bad (reported as `line N: reason`
and skipped); 2 usage or file error.";

/// How many merchants the report lists by default.
pub const DEFAULT_TOP: usize = 10;

/// What the command line asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayArgs {
    pub format: Format,
    /// `None`: stdin.
    pub file: Option<PathBuf>,
    pub merchant: Option<MerchantId>,
    /// `--tenant`: only this tenant's rows, and the tenant of a row
    /// without a `tenant_id`.
    pub tenant: Option<Tenant>,
    pub admission: bool,
    pub top: usize,
    pub json: bool,
    pub config_file: Option<PathBuf>,
}

/// `Ok(None)`: `--help`; `Err(problem)`: a usage error.
pub fn parse(args: &[String]) -> Result<Option<ReplayArgs>, String> {
    let mut input = crate::bulk::flags::Input::default();
    let mut merchant = None;
    let mut tenant = None;
    let mut admission = false;
    let mut top = DEFAULT_TOP;
    let mut json = false;
    let mut config_file = None;
    let mut flags = crate::bulk::flags::Flags::new(args);
    while let Some(flag) = flags.next_word() {
        if input.take(flag, &mut flags)? {
            continue;
        }
        let mut value = || flags.value(flag);
        match flag {
            "-h" | "--help" => return Ok(None),
            "--admission" => admission = true,
            "--json" => json = true,
            "--merchant" => {
                let id = MerchantId::parse(value()?)
                    .map_err(|invalid| format!("--merchant: {}", invalid.reason))?;
                merchant = Some(id);
            }
            crate::bulk::flags::TENANT_FLAG => tenant = Some(crate::bulk::flags::tenant(value()?)?),
            "--top" => {
                let word = value()?;
                top = word.parse().map_err(|_| {
                    format!("--top needs a whole number of merchants, not `{word}`")
                })?;
            }
            "--config" => config_file = Some(PathBuf::from(value()?)),
            other => return Err(format!("unknown option `{other}`")),
        }
    }
    let (file, format) = input.finish()?;
    Ok(Some(ReplayArgs {
        format,
        file,
        merchant,
        tenant,
        admission,
        top,
        json,
        config_file,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_words(words: &str) -> Result<Option<ReplayArgs>, String> {
        let args: Vec<String> = words.split_whitespace().map(str::to_owned).collect();
        parse(&args)
    }

    #[test]
    fn flags_and_the_file_are_read() {
        let args = parse_words("--admission --top 3 --json --merchant m1 h.csv")
            .unwrap()
            .unwrap();
        assert_eq!(args.format, Format::Csv);
        assert_eq!(args.file, Some(PathBuf::from("h.csv")));
        assert!(args.admission && args.json);
        assert_eq!(args.top, 3);
        assert_eq!(args.merchant, Some(MerchantId::parse("m1").unwrap()));
        let args = parse_words("--format=jsonl -").unwrap().unwrap();
        assert_eq!((args.format, args.file), (Format::Jsonl, None));
        assert_eq!(args.top, DEFAULT_TOP);
        assert!(!args.admission && !args.json && args.merchant.is_none());
        assert_eq!(args.tenant, None);
        let args = parse_words("--tenant Acme h.csv").unwrap().unwrap();
        assert_eq!(args.tenant, Tenant::parse("Acme").ok());
    }

    #[test]
    fn usage_errors_say_what_is_wrong() {
        for (words, says) in [
            ("-", "stdin (-) needs --format"),
            ("h.txt", "cannot tell the format"),
            ("--format xml h.csv", "--format must be csv or jsonl"),
            ("--top -1 h.csv", "--top needs a whole number"),
            ("--top", "--top needs a value"),
            ("--merchant", "--merchant needs a value"),
            ("", "a FILE"),
            ("a.csv b.csv", "one too many"),
            ("--frobnicate a.csv", "unknown option"),
            ("--tenant a.b h.csv", "--tenant: may hold only"),
            ("--tenant", "--tenant needs a value"),
        ] {
            let problem = parse_words(words).unwrap_err();
            assert!(problem.contains(says), "{words}: {problem}");
        }
        let empty = vec!["--merchant".to_owned(), " ".to_owned(), "h.csv".to_owned()];
        assert!(
            parse(&empty)
                .unwrap_err()
                .starts_with("--merchant: must not be empty")
        );
        assert_eq!(parse_words("--help"), Ok(None));
    }
}
