//! Exact re-runs of an import: the mark a customer's hash keeps of the last
//! row of one import file applied to it.
//!
//! The attempt memory (`attempts.rs`) holds a customer's last 8 attempts,
//! so a re-run of a file with more rows than that for one customer applied
//! the older ones again, and rows without an `attempt_id` were never
//! protected. The mark is one more bookkeeping field, [`MARK_FIELD`], in
//! the customer's own hash: (the file's identity, the data row). The write
//! scripts check it before they write and move it in the same atomic call
//! as the row it marks, so it is Cluster-safe and never exists without its
//! write. A customer's rows are applied in file order, so the mark only
//! grows within a file, and a row at or below it was applied already: it
//! writes nothing (a duplicate).
//!
//! Only rows that write move the mark: a row that wrote nothing left the
//! hash as it was, so sent again against the same hash it writes nothing
//! again. RecordOutcome sends no mark and never moves one.
//!
//! Limits: one file's mark per customer (importing another file for that
//! customer replaces it), and it dies with the hash (a TTL expiry,
//! ForgetCustomer, a failure that deletes the last combo).
//!
//! `record_success.lua` and `record_failure.lua` run [`ImportMark::covers`]
//! inside Redis; `src/storage/scripts/tests` holds them equal.

use sha1::{Digest, Sha1};

/// The hash field that holds the import mark. It starts with `:`, so it is
/// bookkeeping ([`super::attempts::is_bookkeeping`]): never a combo.
pub const MARK_FIELD: &str = ":i";

/// Bytes of a file's identity.
pub const FILE_ID_BYTES: usize = 8;

/// The longest stored mark: the identity, then at most 20 decimal digits.
pub const MAX_MARK_BYTES: usize = FILE_ID_BYTES + 20;

/// An import file's identity: the first 8 bytes of SHA-1 over its whole
/// content, so the same bytes under any name or path are the same file.
/// Two different files collide with odds of about 1 in 2^64.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileId(pub [u8; FILE_ID_BYTES]);

/// Builds a [`FileId`] from a file's bytes, fed in order.
#[derive(Default)]
pub struct FileIdHasher(Sha1);

impl FileIdHasher {
    pub fn update(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }

    pub fn finish(self) -> FileId {
        let sha = self.0.finalize();
        let mut id = [0; FILE_ID_BYTES];
        id.copy_from_slice(&sha[..FILE_ID_BYTES]);
        FileId(id)
    }
}

/// One row of one file: what a hash's mark says was applied last, or what
/// a row asks to be checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImportMark {
    pub file: FileId,
    /// 0-based among the file's data rows (bad and skipped rows included),
    /// so it is the same in every run of the file, whatever `--skip`.
    pub row: u64,
}

impl ImportMark {
    /// The stored form: the identity's 8 bytes, then the row in decimal.
    pub fn encode(&self) -> Vec<u8> {
        let mut stored = self.file.0.to_vec();
        stored.extend_from_slice(self.row.to_string().as_bytes());
        stored
    }

    /// Reads the stored value; `None` when it is not one this service writes.
    pub fn decode(stored: &[u8]) -> Option<Self> {
        if stored.len() <= FILE_ID_BYTES || stored.len() > MAX_MARK_BYTES {
            return None;
        }
        let (file, row) = stored.split_at(FILE_ID_BYTES);
        if !row.iter().all(u8::is_ascii_digit) {
            return None;
        }
        let row = std::str::from_utf8(row).ok()?.parse().ok()?;
        let mut id = [0; FILE_ID_BYTES];
        id.copy_from_slice(file);
        Some(Self {
            file: FileId(id),
            row,
        })
    }

    /// Whether a hash marked `self` has had `row` applied already: the same
    /// file, and a row at or after it.
    pub fn covers(&self, row: &Self) -> bool {
        self.file == row.file && self.row >= row.row
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::attempts::is_bookkeeping;

    fn file(text: &str) -> FileId {
        let mut hasher = FileIdHasher::default();
        for piece in text.as_bytes().chunks(3) {
            hasher.update(piece);
        }
        hasher.finish()
    }

    #[test]
    fn the_identity_is_the_start_of_sha1_of_the_content() {
        // SHA-1("abc") = a9993e36 4706816a ...
        assert_eq!(
            file("abc").0,
            [0xa9, 0x99, 0x3e, 0x36, 0x47, 0x06, 0x81, 0x6a]
        );
        assert_ne!(file("abc"), file("abd"));
    }

    #[test]
    fn a_mark_covers_its_own_file_up_to_its_row() {
        let mark = ImportMark {
            file: file("a"),
            row: 10,
        };
        let at = |f: &str, row| ImportMark { file: file(f), row };
        assert!(mark.covers(&at("a", 10)) && mark.covers(&at("a", 0)));
        assert!(!mark.covers(&at("a", 11)));
        assert!(!mark.covers(&at("b", 3)));
    }

    #[test]
    fn marks_round_trip_and_foreign_values_do_not_decode() {
        for row in [0, 9, 10, u64::MAX] {
            let mark = ImportMark {
                file: file("x"),
                row,
            };
            let stored = mark.encode();
            assert!(stored.len() <= MAX_MARK_BYTES);
            assert_eq!(ImportMark::decode(&stored), Some(mark));
        }
        for foreign in [&b"12345678"[..], b"12345678x", b"1234567", b"12345678-1"] {
            assert_eq!(ImportMark::decode(foreign), None, "{foreign:?}");
        }
        assert_eq!(ImportMark::decode(&[b'1'; 29]), None);
    }

    #[test]
    fn the_mark_is_bookkeeping_never_a_combo() {
        assert!(is_bookkeeping(MARK_FIELD));
    }
}
