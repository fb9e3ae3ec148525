//! Where export rows go, and in which format: the rows import reads back.
//!
//! CSV: the header `merchant_id,customer_id,payment_method,
//! payment_method_type,connector,outcome,count`, then one row per habit,
//! quoted by the `csv` crate wherever a value needs it. JSON lines: one
//! object per habit with the same names, `count` a JSON integer. Every row's
//! outcome is `success` and its count the habit's net count: importing it
//! is that many successes.
//!
//! A file is written under a `.partial` name beside it and renamed into
//! place only once the export finished, so a failed export never leaves a
//! file that looks complete.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::decode::Habit;
use crate::bulk::{COLUMNS, COUNT_COLUMN, Format};

/// One exported habit.
#[derive(Debug, Serialize)]
pub struct Row<'a> {
    pub merchant_id: &'a str,
    pub customer_id: &'a str,
    pub payment_method: &'a str,
    pub payment_method_type: &'a str,
    pub connector: &'a str,
    pub outcome: &'static str,
    pub count: i64,
}

impl<'a> Row<'a> {
    pub fn success(merchant_id: &'a str, customer_id: &'a str, habit: &'a Habit) -> Self {
        Self {
            merchant_id,
            customer_id,
            payment_method: &habit.payment_method,
            payment_method_type: &habit.payment_method_type,
            connector: &habit.connector,
            outcome: "success",
            count: habit.count,
        }
    }
}

/// Writes rows in one format to stdout or a file.
pub struct RowWriter {
    sink: Sink,
    /// For a file: the `.partial` file written, and the name it gets.
    file: Option<(PathBuf, PathBuf)>,
}

type Out = BufWriter<Box<dyn Write + Send>>;

enum Sink {
    /// Boxed: the csv writer is large, and there is one sink.
    Csv(Box<csv::Writer<Out>>),
    Jsonl(Out),
}

const BUFFER_BYTES: usize = 256 * 1024;

impl RowWriter {
    /// Opens stdout (`None`) or `path`, and writes the CSV header.
    pub fn open(path: Option<&Path>, format: Format) -> io::Result<Self> {
        let (out, file): (Box<dyn Write + Send>, _) = match path {
            None => (Box::new(io::stdout()), None),
            // A device or a pipe (`/dev/stdout`, a FIFO) cannot be renamed
            // into: write to it directly.
            Some(path) if path.exists() && !path.is_file() => (Box::new(File::create(path)?), None),
            Some(path) => {
                let mut partial = path.as_os_str().to_owned();
                partial.push(".partial");
                let partial = PathBuf::from(partial);
                let file = File::create(&partial)?;
                (Box::new(file), Some((partial, path.to_path_buf())))
            }
        };
        let out = BufWriter::with_capacity(BUFFER_BYTES, out);
        let sink = match format {
            Format::Csv => {
                let mut csv = csv::WriterBuilder::new()
                    .has_headers(false)
                    .from_writer(out);
                csv.write_record(COLUMNS.iter().chain([&COUNT_COLUMN]))
                    .map_err(io::Error::other)?;
                Sink::Csv(Box::new(csv))
            }
            Format::Jsonl => Sink::Jsonl(out),
        };
        Ok(Self { sink, file })
    }

    pub fn write(&mut self, row: &Row<'_>) -> io::Result<()> {
        match &mut self.sink {
            Sink::Csv(csv) => csv.serialize(row).map_err(io::Error::other),
            Sink::Jsonl(out) => {
                serde_json::to_writer(&mut *out, row).map_err(io::Error::other)?;
                out.write_all(b"\n")
            }
        }
    }

    /// Flushes everything and, for a file, renames it into place.
    pub fn finish(mut self) -> io::Result<()> {
        match &mut self.sink {
            Sink::Csv(csv) => csv.flush()?,
            Sink::Jsonl(out) => out.flush()?,
        }
        let file = self.file.take();
        drop(self);
        if let Some((partial, path)) = file {
            std::fs::rename(partial, path)?;
        }
        Ok(())
    }

    /// Removes the `.partial` file of an export that did not finish.
    pub fn abandon(mut self) {
        if let Some((partial, _)) = self.file.take() {
            drop(self);
            let _ = std::fs::remove_file(partial);
        }
    }
}
