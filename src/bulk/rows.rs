//! Rows of an import file, read one by one: `import` validates each into a
//! [`Row`], `replay` reads the same fields ([`Fields`]) plus `at`.
//!
//! Validation is RecordOutcome's own ([`RecordCommand::parse`]); a row only
//! adds its tenant, its outcome word and its `count`. The tenant is the
//! row's `tenant_id` cell (the empty cell, or none, is the default tenant),
//! checked first as a call's header is; or, for `import --tenant X`
//! ([`RowReader::for_tenant`]), X for every row, and then a file with a
//! `tenant_id` column is a usage error ([`FileError::TenantColumn`]): the
//! file would say one tenant and the flag another. A bad row is reported by its
//! physical line in the file (a CSV header is line 1; a quoted CSV field
//! that holds newlines spans lines, and the row is named by the line it
//! starts on) and a reason that names the field but never quotes the
//! customer id.

use std::io::{self, BufRead, BufReader, Read};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::bulk::{
    AT_COLUMN, ATTEMPT_COLUMN, COLUMNS, COUNT_COLUMN, Format, MAX_COUNT, TENANT_COLUMN,
};
use crate::domain::InvalidInput;
use crate::domain::counts::Outcome;
use crate::domain::ids::trim_blanks;
use crate::domain::tenant::Tenant;
use crate::record::{RawOutcome, RecordCommand};

/// One valid row.
#[derive(Debug, Clone)]
pub struct Row {
    /// The physical line the row starts on.
    pub line: u64,
    pub command: RecordCommand,
    /// How many outcomes the row stands for.
    pub times: u32,
}

/// One data row of the file, valid or not.
#[derive(Debug)]
pub enum Parsed {
    Row(Row),
    Bad { line: u64, reason: String },
}

/// The file's fields of one row, before validation; `None`: absent.
#[derive(Debug, Default)]
pub struct Fields<'a> {
    values: [Option<&'a str>; COLUMN_COUNT],
    /// The first cell that could not be read as text (a CSV cell that is
    /// not UTF-8, a JSON value that is not a string): the row is bad, but
    /// its other cells, its merchant id among them, are still read, so a
    /// replay counts it for its merchant and `--merchant` can skip it.
    unreadable: Option<String>,
}

/// How many columns a row may have.
const COLUMN_COUNT: usize = 10;

/// The columns a row may have, in [`Fields`]' order.
const ALL_COLUMNS: [&str; COLUMN_COUNT] = [
    COLUMNS[0],
    COLUMNS[1],
    COLUMNS[2],
    COLUMNS[3],
    COLUMNS[4],
    COLUMNS[5],
    COUNT_COLUMN,
    ATTEMPT_COLUMN,
    AT_COLUMN,
    TENANT_COLUMN,
];
const REQUIRED: usize = 6;
/// Where `count`, `at` and `tenant_id` are in [`ALL_COLUMNS`].
const COUNT_AT: usize = 6;
const AT_AT: usize = 8;
const TENANT_AT: usize = 9;

impl<'a> Fields<'a> {
    /// Why the row is bad before any value is checked: its first cell
    /// that could not be read, else the first required column it lacks.
    pub fn unusable(&self) -> Option<String> {
        self.unreadable.clone().or_else(|| self.missing())
    }

    /// The first required column the row lacks, as its reason.
    fn missing(&self) -> Option<String> {
        ALL_COLUMNS
            .iter()
            .zip(&self.values)
            .take(REQUIRED)
            .find(|(_, value)| value.is_none())
            .map(|(name, _)| format!("{name}: missing"))
    }

    /// The raw outcome of the row (absent columns empty); `pin_connector`
    /// is always empty: history answered no GetPin.
    pub fn raw(&self) -> RawOutcome<'a> {
        let text = |i: usize| self.values[i].unwrap_or_default();
        RawOutcome {
            merchant_id: text(0),
            customer_id: text(1),
            payment_method: text(2),
            payment_method_type: text(3),
            connector: text(4),
            attempt_id: text(7),
            // Backfilled history answered no GetPin: the experiment counts
            // no imported row.
            pin_connector: "",
        }
    }

    /// Whether the row has a `merchant_id` cell.
    pub fn merchant_given(&self) -> bool {
        self.values[0].is_some()
    }

    /// The `outcome` column's text (empty when absent).
    pub fn outcome_word(&self) -> &'a str {
        self.values[5].unwrap_or_default()
    }

    /// The `at` column's text, `None` when absent.
    pub fn at(&self) -> Option<&'a str> {
        self.values[AT_AT]
    }

    /// The row's `count`: how many outcomes it stands for.
    pub fn count(&self) -> Result<u32, String> {
        parse_count(self.values[COUNT_AT].unwrap_or_default())
    }

    /// The `tenant_id` cell's text, `None` when the row has no such column
    /// (a JSON `null` is none either).
    pub fn tenant_cell(&self) -> Option<&'a str> {
        self.values[TENANT_AT]
    }
}

/// A `tenant_id` cell's tenant: the empty cell is the default tenant; an
/// invalid id is an error naming `tenant_id`.
pub fn parse_tenant(cell: &str) -> Result<Tenant, InvalidInput> {
    Tenant::parse_as(cell, TENANT_COLUMN)
}

/// The `outcome` word, or why it is not one.
pub fn parse_outcome(word: &str) -> Result<Outcome, InvalidInput> {
    Outcome::from_word(word)
        .ok_or_else(|| InvalidInput::new("outcome", "must be `success` or `gateway_failure`"))
}

impl Fields<'_> {
    /// The row as a validated command of `tenant` (else of its `tenant_id`
    /// cell's), or the reason it is bad.
    fn validate(&self, tenant: Option<&Tenant>) -> Result<(RecordCommand, u32), String> {
        if let Some(missing) = self.unusable() {
            return Err(missing);
        }
        // The tenant first, as a call's header is checked before its body.
        let tenant = match tenant {
            Some(tenant) => tenant.clone(),
            None => parse_tenant(self.tenant_cell().unwrap_or_default())
                .map_err(|invalid| invalid.to_string())?,
        };
        let command = RecordCommand::parse(self.raw(), || parse_outcome(self.outcome_word()))
            .map_err(|invalid| invalid.to_string())?;
        let times = self.count()?;
        Ok((command.in_tenant(tenant), times))
    }
}

/// `count`: empty means 1; else a whole number from 1 to [`MAX_COUNT`].
/// Trimmed as every other field is.
fn parse_count(text: &str) -> Result<u32, String> {
    let text = trim_blanks(text, COUNT_COLUMN).map_err(|invalid| invalid.to_string())?;
    if text.is_empty() {
        return Ok(1);
    }
    match text.parse::<u32>() {
        Ok(n) if (1..=MAX_COUNT).contains(&n) && text.bytes().all(|b| b.is_ascii_digit()) => Ok(n),
        _ => Err(format!(
            "count: must be a whole number from 1 to {MAX_COUNT} (or empty for 1)"
        )),
    }
}

/// One row as import reads it: of `tenant` when `--tenant` names one, and
/// then a row with a `tenant_id` cell stops the file.
fn parsed(
    line: u64,
    fields: Result<&Fields<'_>, String>,
    tenant: Option<&Tenant>,
) -> Result<Parsed, FileError> {
    if tenant.is_some()
        && let Ok(fields) = &fields
        && fields.tenant_cell().is_some()
    {
        return Err(FileError::TenantColumn { line: Some(line) });
    }
    Ok(match fields.and_then(|fields| fields.validate(tenant)) {
        Ok((command, times)) => Parsed::Row(Row {
            line,
            command,
            times,
        }),
        Err(reason) => Parsed::Bad { line, reason },
    })
}

/// Counts the bytes read, for progress against the file's size.
struct Counted<R> {
    inner: R,
    bytes: Arc<AtomicU64>,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.bytes.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

/// Reads the data rows of a file, one at a time.
pub struct RowReader {
    source: Source,
    /// `--tenant`'s tenant, for every row ([`RowReader::for_tenant`]).
    tenant: Option<Tenant>,
}

enum Source {
    Csv {
        /// Boxed: the CSV reader's state is large beside the JSONL one's.
        reader: Box<csv::Reader<Counted<Box<dyn Read + Send>>>>,
        /// For each of [`ALL_COLUMNS`], its index in the file's rows.
        columns: [Option<usize>; COLUMN_COUNT],
        record: csv::ByteRecord,
    },
    Jsonl {
        reader: BufReader<Counted<Box<dyn Read + Send>>>,
        line: u64,
        buffer: Vec<u8>,
    },
}

/// A problem with the file as a whole: stops the import.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("cannot read the file: {0}")]
    Io(#[from] io::Error),
    #[error("the CSV header has no `{0}` column (it needs {columns})", columns = COLUMNS.join(", "))]
    MissingColumn(&'static str),
    #[error("the CSV header cannot be read: {0}")]
    Header(String),
    /// `import --tenant` of rows that name their own tenant: at the header
    /// (`None`) or at the first JSON line with a `tenant_id`.
    #[error(
        "{}the rows have a `tenant_id` column, and --tenant cannot go with it \
         (without --tenant, each row goes to its own tenant_id's tenant)",
        line.map(|line| format!("line {line}: ")).unwrap_or_default()
    )]
    TenantColumn { line: Option<u64> },
}

impl RowReader {
    /// Starts reading `input` as `format`; every byte read is added to
    /// `bytes`. A CSV file's header is read here.
    pub fn new(
        input: Box<dyn Read + Send>,
        format: Format,
        bytes: Arc<AtomicU64>,
    ) -> Result<Self, FileError> {
        let input = Counted {
            inner: input,
            bytes,
        };
        let source = match format {
            Format::Csv => {
                let mut reader = csv::ReaderBuilder::new()
                    .buffer_capacity(256 * 1024)
                    .flexible(true)
                    .has_headers(true)
                    .from_reader(input);
                let header = reader.byte_headers().map_err(|e| match e.into_kind() {
                    csv::ErrorKind::Io(io) => FileError::Io(io),
                    other => FileError::Header(format!("{other:?}")),
                })?;
                let mut columns = [None; COLUMN_COUNT];
                for (index, name) in header.iter().enumerate() {
                    let name = String::from_utf8_lossy(name);
                    let name = name.trim().trim_start_matches('\u{feff}');
                    if let Some(at) = ALL_COLUMNS.iter().position(|c| *c == name) {
                        columns[at].get_or_insert(index);
                    }
                }
                if let Some(missing) = (0..REQUIRED).find(|&i| columns[i].is_none()) {
                    return Err(FileError::MissingColumn(ALL_COLUMNS[missing]));
                }
                Source::Csv {
                    reader: Box::new(reader),
                    columns,
                    record: csv::ByteRecord::new(),
                }
            }
            Format::Jsonl => Source::Jsonl {
                reader: BufReader::with_capacity(256 * 1024, input),
                line: 0,
                buffer: Vec::new(),
            },
        };
        Ok(Self {
            source,
            tenant: None,
        })
    }

    /// Whether the rows carry a `tenant_id` column: `Some` for CSV, whose
    /// header says; `None` for JSON Lines, where each line says for itself.
    pub fn has_tenant_column(&self) -> Option<bool> {
        match &self.source {
            Source::Csv { columns, .. } => Some(columns[TENANT_AT].is_some()),
            Source::Jsonl { .. } => None,
        }
    }

    /// Every row is `tenant`'s (`import --tenant`): a CSV header with a
    /// `tenant_id` column is refused here, before any row is read, and a
    /// JSON line with a `tenant_id` key stops [`Self::next_row`] there.
    pub fn for_tenant(mut self, tenant: Tenant) -> Result<Self, FileError> {
        if self.has_tenant_column() == Some(true) {
            return Err(FileError::TenantColumn { line: None });
        }
        self.tenant = Some(tenant);
        Ok(self)
    }

    /// The next data row, validated as an import row; `None` at the end of
    /// the file.
    pub fn next_row(&mut self) -> Option<Result<Parsed, FileError>> {
        let tenant = self.tenant.as_ref();
        next_from(&mut self.source, |line, fields| {
            parsed(line, fields, tenant)
        })
        .map(|read| read.and_then(|parsed| parsed))
    }

    /// Hands the next data row to `read`: its line, and its fields or why
    /// they cannot be read; `None` at the end of the file. A CSV row is
    /// read into a buffer kept from row to row, and `read` borrows it: no
    /// allocation per row.
    pub fn next_with<T>(
        &mut self,
        read: impl FnOnce(u64, Result<&Fields<'_>, String>) -> T,
    ) -> Option<Result<T, FileError>> {
        next_from(&mut self.source, read)
    }
}

fn next_from<T>(
    source: &mut Source,
    read: impl FnOnce(u64, Result<&Fields<'_>, String>) -> T,
) -> Option<Result<T, FileError>> {
    match source {
        Source::Csv {
            reader,
            columns,
            record,
        } => next_csv(&mut **reader, columns, record, read),
        Source::Jsonl {
            reader,
            line,
            buffer,
        } => next_jsonl(reader, line, buffer, read),
    }
}

fn next_csv<R: Read, T>(
    reader: &mut csv::Reader<R>,
    columns: &[Option<usize>; COLUMN_COUNT],
    record: &mut csv::ByteRecord,
    read: impl FnOnce(u64, Result<&Fields<'_>, String>) -> T,
) -> Option<Result<T, FileError>> {
    match reader.read_byte_record(record) {
        Ok(false) => None,
        Ok(true) => {
            let line = record.position().map_or(0, csv::Position::line);
            let mut fields = Fields::default();
            for (at, column) in columns.iter().enumerate() {
                let Some(bytes) = column.and_then(|c| record.get(c)) else {
                    continue;
                };
                match std::str::from_utf8(bytes) {
                    Ok(text) => fields.values[at] = Some(text),
                    Err(_) => {
                        let name = ALL_COLUMNS[at];
                        fields
                            .unreadable
                            .get_or_insert_with(|| format!("{name}: not valid UTF-8"));
                    }
                }
            }
            Some(Ok(read(line, Ok(&fields))))
        }
        Err(error) => {
            let line = error.position().map_or(0, csv::Position::line);
            match error.into_kind() {
                csv::ErrorKind::Io(io) => Some(Err(FileError::Io(io))),
                other => Some(Ok(read(line, Err(format!("not a CSV row: {other:?}"))))),
            }
        }
    }
}

fn next_jsonl<R: BufRead, T>(
    reader: &mut R,
    line: &mut u64,
    buffer: &mut Vec<u8>,
    read: impl FnOnce(u64, Result<&Fields<'_>, String>) -> T,
) -> Option<Result<T, FileError>> {
    loop {
        buffer.clear();
        match reader.read_until(b'\n', buffer) {
            Ok(0) => return None,
            Ok(_) => {}
            Err(error) => return Some(Err(FileError::Io(error))),
        }
        *line += 1;
        if buffer.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        return Some(Ok(json_row(*line, buffer, read)));
    }
}

/// The columns that may hold a JSON number: read as its text.
const NUMERIC: [usize; 2] = [COUNT_AT, AT_AT];

fn json_row<T>(
    line: u64,
    bytes: &[u8],
    read: impl FnOnce(u64, Result<&Fields<'_>, String>) -> T,
) -> T {
    let object = match serde_json::from_slice::<serde_json::Value>(bytes) {
        Ok(serde_json::Value::Object(object)) => object,
        Ok(_) => return read(line, Err("not a JSON object".into())),
        // serde_json's message names a column of the line, never its text.
        Err(error) => return read(line, Err(format!("not valid JSON ({error})"))),
    };
    let mut numbers: [String; 2] = Default::default();
    for (slot, at) in numbers.iter_mut().zip(NUMERIC) {
        if let Some(serde_json::Value::Number(number)) = object.get(ALL_COLUMNS[at]) {
            *slot = number.to_string();
        }
    }
    let mut fields = Fields::default();
    for (at, (slot, name)) in fields.values.iter_mut().zip(ALL_COLUMNS).enumerate() {
        match object.get(name) {
            None | Some(serde_json::Value::Null) => {}
            Some(serde_json::Value::String(text)) => *slot = Some(text.as_str()),
            Some(serde_json::Value::Number(_)) if NUMERIC.contains(&at) => {
                let which = NUMERIC.iter().position(|n| *n == at).unwrap_or_default();
                *slot = Some(numbers[which].as_str());
            }
            Some(_) => {
                fields
                    .unreadable
                    .get_or_insert_with(|| format!("{name}: must be a string"));
            }
        }
    }
    read(line, Ok(&fields))
}

#[cfg(test)]
mod tests;
