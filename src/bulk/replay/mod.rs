//! `sticky-routing replay`: what pinning would have done on a payment
//! history, computed offline, in memory, without Redis.
//!
//! The rows are import's ([`crate::bulk::rows`]) plus `at`; each is read
//! into small numbers ([`catalog`]), a merchant being a (tenant, merchant
//! id) pair so that tenants are kept apart, and each attempt is replayed by
//! [`engine`] with the service's own rules and settings: the pin first,
//! then the attempt recorded. [`figures`] turns the counts into the
//! report. One thread does it all: a replay is bound by parsing and
//! hashing, and one core reads a CSV history at about two million attempts
//! a second (bench/README.md, "Replay").
//!
//! Time is the file's own: a row's `at`, or one second after the previous
//! good row of the file, of any merchant or tenant, whatever `--merchant`
//! or `--tenant` leaves out, so that a filtered replay reports for a
//! merchant what the whole replay does. A row earlier than the good row
//! before it is bad (a history must be in time order, or expiry and
//! admission would be decided backwards).

pub mod args;
mod at;
pub mod catalog;
mod customers;
pub mod engine;
pub mod figures;

use std::collections::HashMap;
use std::io::Read;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use crate::bulk::Format;
use crate::bulk::progress::Progress;
use crate::bulk::rows::{FileError, RowReader};
use crate::domain::Rules;
use crate::domain::tenant::Tenant;
use args::ReplayArgs;
use catalog::{Catalog, Read as RowRead};
use engine::{Engine, Seen};
use figures::{Figures, Report};

const EXIT_BAD_ROWS: u8 = 1;
/// How many rows go by between two progress updates.
const PROGRESS_EVERY: u64 = 1 << 16;
/// The time of a row without `at`: this long after the good row before.
const IMPLIED_STEP_MS: i64 = 1_000;

/// Runs `sticky-routing replay ARGS` with the process environment `env`.
pub fn run(args: &[String], env: &HashMap<String, String>) -> ExitCode {
    let (args, settings) = match crate::bulk::request_and_settings(
        "replay",
        args,
        env,
        args::USAGE,
        args::parse,
        |args: &ReplayArgs| args.config_file.as_deref(),
    ) {
        Ok(started) => started,
        Err(code) => return code,
    };
    let (input, size) = match crate::bulk::open_input(args.file.as_deref()) {
        Ok(opened) => opened,
        Err(problem) => return crate::bulk::fail("replay", &problem),
    };
    let bytes = Arc::new(AtomicU64::new(0));
    let mut progress = Progress::new("replay", size, bytes.clone());
    let replayed = replay(
        input,
        args.format,
        bytes,
        &settings.rules,
        &args,
        |event| match event {
            Event::Bad { line, reason } => progress.println(&format!("line {line}: {reason}")),
            Event::Rows(rows) => progress.update(rows),
            Event::Attempt { .. } => {}
        },
    );
    progress.finish();
    let replayed = match replayed {
        Ok(replayed) => replayed,
        Err(problem) => return crate::bulk::fail("replay", &problem),
    };
    let report = replayed.report(args.top);
    let source = args
        .file
        .as_ref()
        .map_or_else(|| "stdin".to_owned(), |path| path.display().to_string());
    let text = if args.json {
        format!("{}\n", report.json())
    } else {
        report.text(&source, replayed.customers)
    };
    crate::process::print_to_stdout(&text);
    if report.overall.bad_rows > 0 {
        ExitCode::from(EXIT_BAD_ROWS)
    } else {
        ExitCode::SUCCESS
    }
}

/// What a replay tells its caller as it goes.
pub enum Event<'a> {
    /// A bad row, reported and skipped.
    Bad { line: u64, reason: &'a str },
    /// This many data rows were read so far (every [`PROGRESS_EVERY`]).
    Rows(u64),
    /// One attempt (not a duplicate): the line it came from, its tenant,
    /// merchant and connector, and the connector GetPin would have pinned
    /// it to.
    Attempt {
        line: u64,
        tenant: &'a Tenant,
        merchant: &'a str,
        connector: &'a str,
        pin: Option<&'a str>,
    },
}

/// A finished replay: its figures, and what its report needs.
pub struct Replayed {
    catalog: Catalog,
    overall: figures::Tally,
    merchants: Vec<(u32, figures::Tally)>,
    /// Customers with habits at the end.
    pub customers: usize,
}

impl Replayed {
    /// Every merchant together, and the `top` merchants by attempts (ties
    /// by tenant id, then merchant id, bytewise: the default tenant first).
    pub fn report(&self, top: usize) -> Report {
        let mut merchants: Vec<(&Tenant, &str, &figures::Tally)> = self
            .merchants
            .iter()
            .map(|(index, tally)| {
                let merchant = self.catalog.merchant(*index).as_str();
                (self.catalog.tenant(*index), merchant, tally)
            })
            .collect();
        merchants.sort_by(|a, b| {
            b.2.attempts.cmp(&a.2.attempts).then_with(|| {
                let tenant = a.0.as_str().as_bytes().cmp(b.0.as_str().as_bytes());
                tenant.then_with(|| a.1.as_bytes().cmp(b.1.as_bytes()))
            })
        });
        Report {
            overall: Figures::of(None, &self.overall),
            merchants: merchants
                .into_iter()
                .take(top)
                .map(|(tenant, id, tally)| Figures::of(Some(id), tally).in_tenant(tenant))
                .collect(),
        }
    }
}

/// Replays the rows of `input` under `rules` as `args` asks (`--tenant`,
/// `--merchant`, `--admission`), telling `seen` of every bad row, attempt
/// and progress.
/// `Err` is a problem with the file as a whole (exit 2).
pub fn replay(
    input: Box<dyn Read + Send>,
    format: Format,
    bytes: Arc<AtomicU64>,
    rules: &Rules,
    args: &ReplayArgs,
    mut seen: impl FnMut(Event<'_>),
) -> Result<Replayed, String> {
    let mut reader = RowReader::new(input, format, bytes).map_err(|error| error.to_string())?;
    let mut catalog = Catalog::new(args.merchant.clone(), args.tenant.clone());
    let mut engine = Engine::new(rules, args.admission);
    let mut previous_at: Option<i64> = None;
    let mut rows = 0u64;
    loop {
        let next =
            reader.next_with(|line, fields| (line, fields.map(|fields| catalog.read(fields))));
        let (line, read) = match next {
            None => break,
            Some(Ok(read)) => read,
            Some(Err(error)) => return Err(file_problem(&error)),
        };
        rows += 1;
        if rows.is_multiple_of(PROGRESS_EVERY) {
            seen(Event::Rows(rows));
        }
        let attempt = match read {
            Ok(RowRead::Attempt(attempt)) => attempt,
            Ok(RowRead::Skipped { at }) => {
                // Another's good row: not replayed, but it is the file's
                // time (an out-of-order one is bad, and sets none).
                if let Some(at) = time_of(at, previous_at) {
                    previous_at = Some(at);
                }
                continue;
            }
            Ok(RowRead::SkippedBad) => continue,
            Ok(RowRead::Bad { reason, merchant }) => {
                engine.bad_row(merchant);
                seen(Event::Bad {
                    line,
                    reason: &reason,
                });
                continue;
            }
            Err(reason) => {
                engine.bad_row(None);
                seen(Event::Bad {
                    line,
                    reason: &reason,
                });
                continue;
            }
        };
        let Some(at) = time_of(attempt.at, previous_at) else {
            engine.bad_row(Some(attempt.merchant));
            seen(Event::Bad {
                line,
                reason: "at: earlier than the row before it (rows must be in time order)",
            });
            continue;
        };
        previous_at = Some(at);
        for _ in 0..attempt.times {
            let Seen::Attempt { pin } = engine
                .attempt(&catalog, &attempt, at)
                .map_err(|disagreement| disagreement.to_string())?
            else {
                continue;
            };
            seen(Event::Attempt {
                line,
                tenant: catalog.tenant(attempt.merchant),
                merchant: catalog.merchant(attempt.merchant).as_str(),
                connector: catalog.connector(attempt.combo),
                pin,
            });
        }
    }
    Ok(Replayed {
        overall: *engine.overall(),
        merchants: engine
            .merchants()
            .map(|(index, tally)| (index, *tally))
            .collect(),
        customers: engine.customers_at(previous_at.unwrap_or_default()),
        catalog,
    })
}

/// The time of a good row whose `at` is `at`, after a good row at
/// `previous`; `None` when it is earlier than `previous` (a bad row).
fn time_of(at: Option<i64>, previous: Option<i64>) -> Option<i64> {
    match (at, previous) {
        (Some(at), Some(previous)) if at < previous => None,
        (Some(at), _) => Some(at),
        (None, Some(previous)) => Some(previous.saturating_add(IMPLIED_STEP_MS)),
        (None, None) => Some(0),
    }
}

fn file_problem(error: &FileError) -> String {
    format!("{error}")
}
