//! Exactly-once feedback: which payment attempts a customer's hash remembers,
//! so that a RecordOutcome sent again after a lost answer is not counted twice.
//!
//! The memory lives inside the customer's own hash, in one field that no combo
//! can ever have ([`ATTEMPTS_FIELD`] starts with `:`, and a combo field starts
//! with a non-empty payment method that holds no `:`). Keeping it there is
//! what makes the check and the write one atomic script on one key: a
//! recorded attempt never exists without its write, nor the other way round,
//! and it works unchanged on Redis Cluster. It also dies with the hash: a
//! TTL expiry, ForgetCustomer, or a failure that deletes the last combo takes
//! the attempts with it.
//!
//! The field's value is the last [`REMEMBERED_ATTEMPTS`] attempts as 8-byte
//! digests, oldest first: at most 64 bytes, so the hash stays
//! listpack-encoded (`hash-max-listpack-value` 64). The digest is the first
//! 8 bytes of SHA-1 over the attempt id; two different attempt ids of one
//! customer collide with odds of about 7 in 2^64 per call.
//!
//! The scripts `record_success.lua` and `record_failure.lua` run this logic
//! inside Redis; `src/storage/scripts/tests.rs` holds them equal to
//! [`Remembered`].

use sha1::{Digest, Sha1};

use super::ids::{InvalidInput, reject_forbidden_chars, trim_blanks};

/// The hash field that holds the remembered attempts.
pub const ATTEMPTS_FIELD: &str = ":a";

/// How many attempts a customer's hash remembers: the current one and the 7
/// before it, as the contract requires.
pub const REMEMBERED_ATTEMPTS: usize = 8;

/// Longest attempt id, in bytes, after trimming.
pub const MAX_ATTEMPT_ID_BYTES: usize = 128;

/// Bytes of one attempt's digest in the stored value.
pub const DIGEST_BYTES: usize = 8;

/// Whether a hash field is the service's own bookkeeping rather than a combo
/// (the attempts, [`ATTEMPTS_FIELD`], and the import mark,
/// [`super::import_mark::MARK_FIELD`]): reads skip it, and the cap never
/// counts it. The one rule; `record_success.lua`'s cap tests the same.
pub fn is_bookkeeping(field: &str) -> bool {
    field.starts_with(':')
}

/// The orchestrator's id of one payment attempt: trimmed, case kept,
/// 1..=128 bytes, no control or invisible formatting characters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttemptId(String);

impl AttemptId {
    /// `None` when the caller sent none (empty after trimming its ASCII
    /// blanks): v1 behaviour, no de-duplication.
    pub fn parse(raw: &str) -> Result<Option<Self>, InvalidInput> {
        Ok(Self::check(raw)?.map(|id| Self(id.to_owned())))
    }

    /// The digest of the attempt id in `raw`, validated as [`AttemptId::parse`]
    /// does, without keeping the id: for a caller that must not allocate per
    /// row (`sticky-routing replay`).
    pub fn parse_digest(raw: &str) -> Result<Option<AttemptDigest>, InvalidInput> {
        Ok(Self::check(raw)?.map(digest_of))
    }

    fn check(raw: &str) -> Result<Option<&str>, InvalidInput> {
        let id = trim_blanks(raw, "attempt_id")?;
        if id.is_empty() {
            return Ok(None);
        }
        if id.len() > MAX_ATTEMPT_ID_BYTES {
            return Err(InvalidInput::new(
                "attempt_id",
                format!(
                    "is {} bytes long; the limit is {MAX_ATTEMPT_ID_BYTES} bytes",
                    id.len()
                ),
            ));
        }
        reject_forbidden_chars(id, "attempt_id")?;
        Ok(Some(id))
    }

    /// What the hash stores for this attempt.
    pub fn digest(&self) -> AttemptDigest {
        digest_of(&self.0)
    }
}

/// The first [`DIGEST_BYTES`] bytes of SHA-1 over the trimmed attempt id.
fn digest_of(id: &str) -> AttemptDigest {
    let sha = Sha1::digest(id.as_bytes());
    let mut digest = [0; DIGEST_BYTES];
    digest.copy_from_slice(&sha[..DIGEST_BYTES]);
    AttemptDigest(digest)
}

/// The stored form of one attempt id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttemptDigest(pub [u8; DIGEST_BYTES]);

/// The attempts one hash remembers, oldest first: one to
/// [`REMEMBERED_ATTEMPTS`] digests (a hash that remembers none has no
/// `Remembered` at all).
///
/// Eight slots and no length: `sticky-routing replay` boxes one for every
/// customer that sent attempt ids, and 64 bytes is an allocator's size
/// class where 65 takes 80. Until eight are remembered, the slots before
/// the oldest hold copies of it. A hash never remembers one attempt twice
/// (a repeat writes nothing), so the copies change no answer of
/// [`Self::contains`], the first slot is always the next one forgotten, and
/// the stored form is the slots from the last copy on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Remembered([AttemptDigest; REMEMBERED_ATTEMPTS]);

impl Remembered {
    /// Remembers one attempt.
    pub fn first(attempt: AttemptDigest) -> Self {
        Self([attempt; REMEMBERED_ATTEMPTS])
    }

    /// Reads the stored value: `None` when it is not one this service
    /// writes, `Some(None)` when it remembers nothing.
    pub fn decode(stored: &[u8]) -> Option<Option<Self>> {
        if !stored.len().is_multiple_of(DIGEST_BYTES)
            || stored.len() > REMEMBERED_ATTEMPTS * DIGEST_BYTES
        {
            return None;
        }
        let mut remembered: Option<Self> = None;
        for chunk in stored.chunks_exact(DIGEST_BYTES) {
            let mut digest = [0; DIGEST_BYTES];
            digest.copy_from_slice(chunk);
            let digest = AttemptDigest(digest);
            match &mut remembered {
                Some(remembered) => remembered.remember(digest),
                None => remembered = Some(Self::first(digest)),
            }
        }
        Some(remembered)
    }

    pub fn encode(&self) -> Vec<u8> {
        self.as_slice().iter().flat_map(|digest| digest.0).collect()
    }

    pub fn contains(&self, attempt: AttemptDigest) -> bool {
        self.0.contains(&attempt)
    }

    /// Remembers `attempt`, which it does not remember yet, as the newest,
    /// forgetting the oldest past the limit.
    pub fn remember(&mut self, attempt: AttemptDigest) {
        self.0.rotate_left(1);
        self.0[REMEMBERED_ATTEMPTS - 1] = attempt;
    }

    /// The attempts, oldest first: the slots from the last copy of the
    /// first on.
    fn as_slice(&self) -> &[AttemptDigest] {
        let copies = self.0.iter().take_while(|d| **d == self.0[0]).count();
        &self.0[copies - 1..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn digest(id: &str) -> AttemptDigest {
        AttemptId::parse(id).unwrap().unwrap().digest()
    }

    #[test]
    fn an_empty_attempt_id_means_none() {
        assert_eq!(AttemptId::parse("").unwrap(), None);
        assert_eq!(AttemptId::parse("  \t ").unwrap(), None);
    }

    #[test]
    fn attempt_ids_are_trimmed_and_keep_their_case() {
        assert_eq!(digest(" Pay_1 "), digest("Pay_1"));
        assert_ne!(digest("pay_1"), digest("Pay_1"));
    }

    #[test]
    fn bad_attempt_ids_are_rejected_by_name() {
        for raw in [
            "a\u{0}b",
            "a\nb",
            "a\u{200B}b",
            "\u{202E}ab",
            &"x".repeat(129),
        ] {
            assert_eq!(AttemptId::parse(raw).unwrap_err().field, "attempt_id");
        }
        assert!(AttemptId::parse(&"x".repeat(128)).unwrap().is_some());
    }

    /// Only ASCII blanks are trimmed: `p1` followed by U+2028 is not `p1`,
    /// and a lone NBSP is not "no attempt id". Both are refused by name.
    #[test]
    fn other_blanks_at_the_ends_are_refused_not_stripped() {
        for raw in [
            "p1\u{2028}",
            "\u{A0}p1",
            " p1\u{3000}\t",
            "\u{85}",
            "\u{A0}",
        ] {
            assert_eq!(
                AttemptId::parse(raw).unwrap_err().field,
                "attempt_id",
                "{raw:?}"
            );
        }
        assert_eq!(digest("\tp1\r\n"), digest("p1"));
    }

    #[test]
    fn the_digest_is_the_start_of_sha1() {
        // SHA-1("abc") = a9993e36 4706816a ba3e2571 7850c26c 9cd0d89d
        assert_eq!(
            digest("abc").0,
            [0xa9, 0x99, 0x3e, 0x36, 0x47, 0x06, 0x81, 0x6a]
        );
    }

    #[test]
    fn bookkeeping_fields_can_never_be_combos() {
        assert!(is_bookkeeping(ATTEMPTS_FIELD));
        assert!(!is_bookkeeping("INTERAC:RTP:GIGADAT"));
    }

    #[test]
    fn the_stored_value_fits_a_listpack_entry() {
        let mut remembered = Remembered::first(digest("a"));
        assert_eq!(remembered.encode(), digest("a").0);
        for i in 0..20 {
            remembered.remember(digest(&format!("a{i}")));
        }
        assert_eq!(remembered.encode().len(), 64);
        assert_eq!(size_of::<Remembered>(), 64);
    }

    #[test]
    fn foreign_values_do_not_decode() {
        assert_eq!(Remembered::decode(b"abc"), None);
        assert_eq!(Remembered::decode(&[0; 72]), None);
        assert_eq!(Remembered::decode(b""), Some(None));
    }

    proptest! {
        #[test]
        fn the_last_eight_attempts_are_remembered_and_older_ones_are_not(
            ids in proptest::collection::hash_set("[a-z0-9]{1,12}", 1..30),
        ) {
            let ids: Vec<String> = ids.into_iter().collect();
            let mut remembered: Option<Remembered> = None;
            for id in &ids {
                match &mut remembered {
                    Some(remembered) => remembered.remember(digest(id)),
                    None => remembered = Some(Remembered::first(digest(id))),
                }
                let stored = remembered.map(|r| r.encode()).unwrap_or_default();
                remembered = Remembered::decode(&stored).unwrap();
            }
            let remembered = remembered.unwrap();
            let cut = ids.len().saturating_sub(REMEMBERED_ATTEMPTS);
            for (i, id) in ids.iter().enumerate() {
                prop_assert_eq!(remembered.contains(digest(id)), i >= cut);
            }
            // The stored form is exactly the last eight, oldest first.
            let expected: Vec<u8> = ids[cut..].iter().flat_map(|id| digest(id).0).collect();
            prop_assert_eq!(remembered.encode(), expected);
        }
    }
}
