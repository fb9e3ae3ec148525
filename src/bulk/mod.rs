//! Bulk commands of the `sticky-routing` binary, run beside the server
//! rather than inside it: `export` dumps every habit as rows that import
//! reads back.

pub mod export;
