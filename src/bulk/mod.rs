//! The bulk subcommands, `sticky-routing import` and `sticky-routing export`:
//! habits in and out of Redis as rows of a CSV or JSONL file.
//!
//! Both load the service's own settings (defaults, `--config FILE` or
//! `STICKY_ROUTING_CONFIG`, then the environment), so they reach Redis
//! exactly as the server does (single node, Cluster, Sentinel, TLS, ACL user)
//! and apply the same rules. They share the row format: the columns
//! [`COLUMNS`], an optional `count` and `attempt_id`.

pub mod export;
mod flags;
pub mod import;

use std::path::Path;

/// The columns every row has, in the order export writes them.
pub const COLUMNS: [&str; 6] = [
    "merchant_id",
    "customer_id",
    "payment_method",
    "payment_method_type",
    "connector",
    "outcome",
];
/// The optional columns: how many outcomes a row stands for (absent or empty:
/// 1), and the orchestrator's attempt id.
pub const COUNT_COLUMN: &str = "count";
pub const ATTEMPT_COLUMN: &str = "attempt_id";

/// A row file's format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Comma-separated, with a header line naming the columns (any order).
    Csv,
    /// One JSON object per line.
    Jsonl,
}

impl Format {
    /// `--format`'s value.
    pub fn from_flag(word: &str) -> Option<Self> {
        match word {
            "csv" => Some(Self::Csv),
            "jsonl" | "ndjson" => Some(Self::Jsonl),
            _ => None,
        }
    }

    /// The format a file name says: `.csv`, `.jsonl` or `.ndjson`.
    pub fn from_path(path: &Path) -> Option<Self> {
        let extension = path.extension()?.to_str()?.to_ascii_lowercase();
        Self::from_flag(&extension)
    }
}

/// Writes `text` to stdout, ignoring a closed pipe (`import … | head`):
/// `print!` would panic there, and what is lost is only the reader's
/// choice. The exit code still says how the command went.
pub fn print_to_stdout(text: &str) {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    let _ = stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush());
}

/// The runtime a bulk command runs on: two workers, so reading and parsing
/// the file overlaps with waiting for Redis.
pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_name_gives_the_format_and_other_names_give_none() {
        assert_eq!(Format::from_path(Path::new("a/b.csv")), Some(Format::Csv));
        assert_eq!(Format::from_path(Path::new("b.JSONL")), Some(Format::Jsonl));
        assert_eq!(
            Format::from_path(Path::new("b.ndjson")),
            Some(Format::Jsonl)
        );
        assert_eq!(Format::from_path(Path::new("b.txt")), None);
        assert_eq!(Format::from_path(Path::new("-")), None);
    }
}
