//! Rows of an import file, read one by one: `import` validates each into a
//! [`Row`], `replay` reads the same fields ([`Fields`]) plus `at`.
//!
//! Validation is RecordOutcome's own ([`RecordCommand::parse`]); a row only
//! adds its outcome word and its `count`. A bad row is reported by its
//! physical line in the file (a CSV header is line 1; a quoted CSV field
//! that holds newlines spans lines, and the row is named by the line it
//! starts on) and a reason that names the field but never quotes the
//! customer id.

use std::io::{self, BufRead, BufReader, Read};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::bulk::{AT_COLUMN, ATTEMPT_COLUMN, COLUMNS, COUNT_COLUMN, Format, MAX_COUNT};
use crate::domain::InvalidInput;
use crate::domain::counts::Outcome;
use crate::domain::ids::trim_blanks;
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
    values: [Option<&'a str>; 9],
    /// The first cell that could not be read as text (a CSV cell that is
    /// not UTF-8, a JSON value that is not a string): the row is bad, but
    /// its other cells, its merchant id among them, are still read, so a
    /// replay counts it for its merchant and `--merchant` can skip it.
    unreadable: Option<String>,
}

/// The columns a row may have, in [`Fields`]' order.
const ALL_COLUMNS: [&str; 9] = [
    COLUMNS[0],
    COLUMNS[1],
    COLUMNS[2],
    COLUMNS[3],
    COLUMNS[4],
    COLUMNS[5],
    COUNT_COLUMN,
    ATTEMPT_COLUMN,
    AT_COLUMN,
];
const REQUIRED: usize = 6;
/// Where `count` and `at` are in [`ALL_COLUMNS`].
const COUNT_AT: usize = 6;
const AT_AT: usize = 8;

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
}

/// The `outcome` word, or why it is not one.
pub fn parse_outcome(word: &str) -> Result<Outcome, InvalidInput> {
    Outcome::from_word(word)
        .ok_or_else(|| InvalidInput::new("outcome", "must be `success` or `gateway_failure`"))
}

impl Fields<'_> {
    /// The row as a validated command, or the reason it is bad.
    fn validate(&self) -> Result<(RecordCommand, u32), String> {
        if let Some(missing) = self.unusable() {
            return Err(missing);
        }
        let command = RecordCommand::parse(self.raw(), || parse_outcome(self.outcome_word()))
            .map_err(|invalid| invalid.to_string())?;
        let times = self.count()?;
        Ok((command, times))
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

fn parsed(line: u64, fields: Result<&Fields<'_>, String>) -> Parsed {
    match fields.and_then(Fields::validate) {
        Ok((command, times)) => Parsed::Row(Row {
            line,
            command,
            times,
        }),
        Err(reason) => Parsed::Bad { line, reason },
    }
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
}

enum Source {
    Csv {
        /// Boxed: the CSV reader's state is large beside the JSONL one's.
        reader: Box<csv::Reader<Counted<Box<dyn Read + Send>>>>,
        /// For each of [`ALL_COLUMNS`], its index in the file's rows.
        columns: [Option<usize>; 9],
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
                let mut columns = [None; 9];
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
        Ok(Self { source })
    }

    /// The next data row, validated as an import row; `None` at the end of
    /// the file.
    pub fn next_row(&mut self) -> Option<Result<Parsed, FileError>> {
        self.next_with(parsed)
    }

    /// Hands the next data row to `read`: its line, and its fields or why
    /// they cannot be read; `None` at the end of the file. A CSV row is
    /// read into a buffer kept from row to row, and `read` borrows it: no
    /// allocation per row.
    pub fn next_with<T>(
        &mut self,
        read: impl FnOnce(u64, Result<&Fields<'_>, String>) -> T,
    ) -> Option<Result<T, FileError>> {
        match &mut self.source {
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
}

fn next_csv<R: Read, T>(
    reader: &mut csv::Reader<R>,
    columns: &[Option<usize>; 9],
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
