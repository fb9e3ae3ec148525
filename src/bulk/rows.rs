//! Rows of an import file, read and validated one by one.
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

use crate::bulk::{ATTEMPT_COLUMN, COLUMNS, COUNT_COLUMN, Format, MAX_COUNT};
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
struct Fields<'a> {
    values: [Option<&'a str>; 8],
}

const ALL_COLUMNS: [&str; 8] = [
    COLUMNS[0],
    COLUMNS[1],
    COLUMNS[2],
    COLUMNS[3],
    COLUMNS[4],
    COLUMNS[5],
    COUNT_COLUMN,
    ATTEMPT_COLUMN,
];
const REQUIRED: usize = 6;

impl Fields<'_> {
    /// The row as a validated command, or the reason it is bad.
    fn validate(&self) -> Result<(RecordCommand, u32), String> {
        for (name, value) in ALL_COLUMNS.iter().zip(&self.values).take(REQUIRED) {
            if value.is_none() {
                return Err(format!("{name}: missing"));
            }
        }
        let text = |i: usize| self.values[i].unwrap_or_default();
        let raw = RawOutcome {
            merchant_id: text(0),
            customer_id: text(1),
            payment_method: text(2),
            payment_method_type: text(3),
            connector: text(4),
            attempt_id: text(7),
            // Backfilled history answered no GetPin: the experiment counts
            // no imported row.
            pin_connector: "",
        };
        let command = RecordCommand::parse(raw, || {
            Outcome::from_word(text(5)).ok_or_else(|| {
                InvalidInput::new("outcome", "must be `success` or `gateway_failure`")
            })
        })
        .map_err(|invalid| invalid.to_string())?;
        let times = parse_count(text(6))?;
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

fn parsed(line: u64, fields: &Fields<'_>) -> Parsed {
    match fields.validate() {
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
        reader: csv::Reader<Counted<Box<dyn Read + Send>>>,
        /// For each of [`ALL_COLUMNS`], its index in the file's rows.
        columns: [Option<usize>; 8],
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
                    .flexible(true)
                    .has_headers(true)
                    .from_reader(input);
                let header = reader.byte_headers().map_err(|e| match e.into_kind() {
                    csv::ErrorKind::Io(io) => FileError::Io(io),
                    other => FileError::Header(format!("{other:?}")),
                })?;
                let mut columns = [None; 8];
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
                    reader,
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

    /// The next data row; `None` at the end of the file.
    pub fn next_row(&mut self) -> Option<Result<Parsed, FileError>> {
        match &mut self.source {
            Source::Csv {
                reader,
                columns,
                record,
            } => next_csv(reader, columns, record),
            Source::Jsonl {
                reader,
                line,
                buffer,
            } => next_jsonl(reader, line, buffer),
        }
    }
}

fn next_csv<R: Read>(
    reader: &mut csv::Reader<R>,
    columns: &[Option<usize>; 8],
    record: &mut csv::ByteRecord,
) -> Option<Result<Parsed, FileError>> {
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
                        return Some(Ok(Parsed::Bad {
                            line,
                            reason: format!("{name}: not valid UTF-8"),
                        }));
                    }
                }
            }
            Some(Ok(parsed(line, &fields)))
        }
        Err(error) => {
            let line = error.position().map_or(0, csv::Position::line);
            match error.into_kind() {
                csv::ErrorKind::Io(io) => Some(Err(FileError::Io(io))),
                other => Some(Ok(Parsed::Bad {
                    line,
                    reason: format!("not a CSV row: {other:?}"),
                })),
            }
        }
    }
}

fn next_jsonl<R: BufRead>(
    reader: &mut R,
    line: &mut u64,
    buffer: &mut Vec<u8>,
) -> Option<Result<Parsed, FileError>> {
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
        return Some(Ok(json_row(*line, buffer)));
    }
}

fn json_row(line: u64, bytes: &[u8]) -> Parsed {
    let bad = |reason: String| Parsed::Bad { line, reason };
    let object = match serde_json::from_slice::<serde_json::Value>(bytes) {
        Ok(serde_json::Value::Object(object)) => object,
        Ok(_) => return bad("not a JSON object".into()),
        // serde_json's message names a column of the line, never its text.
        Err(error) => return bad(format!("not valid JSON ({error})")),
    };
    let count_text;
    let mut fields = Fields::default();
    for (slot, name) in fields.values.iter_mut().zip(ALL_COLUMNS) {
        match object.get(name) {
            None | Some(serde_json::Value::Null) => {}
            Some(serde_json::Value::String(text)) => *slot = Some(text.as_str()),
            Some(serde_json::Value::Number(_)) if name == COUNT_COLUMN => {}
            Some(_) => return bad(format!("{name}: must be a string")),
        }
    }
    if let Some(serde_json::Value::Number(number)) = object.get(COUNT_COLUMN) {
        count_text = number.to_string();
        fields.values[6] = Some(count_text.as_str());
    }
    parsed(line, &fields)
}

#[cfg(test)]
mod tests;
