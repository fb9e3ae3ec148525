//! Where export rows go, and in which format: the rows import reads back.
//!
//! CSV: the header `merchant_id,customer_id,payment_method,
//! payment_method_type,connector,outcome,count`, then the rows of each
//! habit, quoted by the `csv` crate wherever a value needs it. JSON lines:
//! one object per row with the same names, `count` a JSON integer. An
//! export of every tenant puts a `tenant_id` column first (the empty
//! string for the default tenant), in the header and in every row. Every
//! row's outcome is `success`, and a habit's rows add up to its net count:
//! importing them is that many successes.
//!
//! A habit is one row unless its count is above what import takes in one
//! row ([`MAX_COUNT`]): then it is as many rows of `MAX_COUNT` as fit, and
//! one of the rest. Import is left as it is, rather than made to take any
//! count Redis holds, because its scripts do arithmetic in Lua's doubles
//! (exact only to 2^53) and one row must never overflow a count. The cost
//! is one row per 10^9 of a count, which is never more rows than the
//! imports (at most 10^9 a row) or calls (1 each) that made the count.
//!
//! A file is written under a `.partial` name beside it and renamed into
//! place only once the export finished, so a failed export never leaves a
//! file that looks complete.

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::Serialize;

use super::decode::Habit;
use crate::bulk::{COLUMNS, COUNT_COLUMN, Format, MAX_COUNT, TENANT_COLUMN};

/// One exported habit.
#[derive(Debug, Serialize)]
pub struct Row<'a> {
    /// Only in an export of every tenant: the same for every row of it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tenant_id: Option<&'a str>,
    pub merchant_id: &'a str,
    pub customer_id: &'a str,
    pub payment_method: &'a str,
    pub payment_method_type: &'a str,
    pub connector: &'a str,
    pub outcome: &'static str,
    pub count: i64,
}

impl<'a> Row<'a> {
    /// The success rows of one habit: their counts add up to its count,
    /// and each is one import takes.
    pub fn successes(
        tenant_id: Option<&'a str>,
        merchant_id: &'a str,
        customer_id: &'a str,
        habit: &'a Habit,
    ) -> impl Iterator<Item = Self> + 'a {
        row_counts(habit.count).map(move |count| Self {
            tenant_id,
            merchant_id,
            customer_id,
            payment_method: &habit.payment_method,
            payment_method_type: &habit.payment_method_type,
            connector: &habit.connector,
            outcome: "success",
            count,
        })
    }
}

/// A positive count as row counts of at most [`MAX_COUNT`] that add up to
/// it: the full rows first, then the rest, if any.
fn row_counts(count: i64) -> impl Iterator<Item = i64> {
    let most = i64::from(MAX_COUNT);
    let (full, rest) = (count / most, count % most);
    // At most i64::MAX / 10^9 (about 9.2e9): fits a 64-bit usize.
    let full = usize::try_from(full).unwrap_or(usize::MAX);
    std::iter::repeat_n(most, full).chain((rest > 0).then_some(rest))
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
    /// Opens stdout (`None`) or `path`, and writes the CSV header, with
    /// the `tenant_id` column first when `with_tenant` (every row must then
    /// have a `tenant_id`, and no row may have one otherwise).
    pub fn open(path: Option<&Path>, format: Format, with_tenant: bool) -> io::Result<Self> {
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
                let tenant = with_tenant.then_some(&TENANT_COLUMN);
                csv.write_record(tenant.into_iter().chain(&COLUMNS).chain([&COUNT_COLUMN]))
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

#[cfg(test)]
mod tests {
    use super::*;

    fn habit() -> Habit {
        Habit {
            payment_method: "INTERAC".into(),
            payment_method_type: "RTP".into(),
            connector: "GIGADAT".into(),
            count: 2,
        }
    }

    /// What `rows` of `habit()` write in `format`, with the tenant column
    /// when `tenant` is given.
    fn written(format: Format, tenant: Option<&str>) -> String {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out");
        let mut writer = RowWriter::open(Some(&path), format, tenant.is_some()).unwrap();
        let habit = habit();
        for row in Row::successes(tenant, "m1", "c,1", &habit) {
            writer.write(&row).unwrap();
        }
        writer.finish().unwrap();
        std::fs::read_to_string(&path).unwrap()
    }

    #[test]
    fn the_tenant_column_comes_first_only_when_asked_for() {
        assert_eq!(
            written(Format::Csv, None),
            "merchant_id,customer_id,payment_method,payment_method_type,connector,outcome,count\n\
             m1,\"c,1\",INTERAC,RTP,GIGADAT,success,2\n"
        );
        assert_eq!(
            written(Format::Csv, Some("")),
            "tenant_id,merchant_id,customer_id,payment_method,payment_method_type,connector,\
             outcome,count\n\
             ,m1,\"c,1\",INTERAC,RTP,GIGADAT,success,2\n"
        );
        assert_eq!(
            written(Format::Csv, Some("acme")).lines().nth(1),
            Some("acme,m1,\"c,1\",INTERAC,RTP,GIGADAT,success,2")
        );
        assert_eq!(
            written(Format::Jsonl, None),
            "{\"merchant_id\":\"m1\",\"customer_id\":\"c,1\",\"payment_method\":\"INTERAC\",\
             \"payment_method_type\":\"RTP\",\"connector\":\"GIGADAT\",\"outcome\":\"success\",\
             \"count\":2}\n"
        );
        assert!(
            written(Format::Jsonl, Some("")).starts_with("{\"tenant_id\":\"\",\"merchant_id\":")
        );
    }

    #[test]
    fn a_count_import_takes_is_one_row() {
        for count in [1, 7, 999_999_999, 1_000_000_000] {
            assert_eq!(row_counts(count).collect::<Vec<_>>(), [count]);
        }
    }

    #[test]
    fn a_larger_count_is_split_into_rows_import_takes() {
        let split = |count| row_counts(count).collect::<Vec<_>>();
        assert_eq!(split(1_000_000_001), [1_000_000_000, 1]);
        assert_eq!(split(2_000_000_000), [1_000_000_000, 1_000_000_000]);
        assert_eq!(
            split(25_000_000_003),
            [vec![1_000_000_000; 25], vec![3]].concat()
        );
    }

    #[test]
    fn the_largest_count_redis_holds_is_split_without_loss() {
        // HINCRBY stops at i64::MAX, so no stored count is larger. Its
        // 9.2e9 rows are counted from the iterator's exact length, not
        // made one by one.
        let counts = row_counts(i64::MAX);
        assert_eq!(counts.size_hint(), (9_223_372_037, Some(9_223_372_037)));
        let mut counts = counts.skip(9_223_372_035);
        assert_eq!(counts.next(), Some(1_000_000_000));
        assert_eq!(counts.next(), Some(854_775_807));
        assert_eq!(counts.next(), None);
        assert_eq!(9_223_372_036 * 1_000_000_000 + 854_775_807, i64::MAX);
    }
}
