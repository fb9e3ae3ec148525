//! Which keys an export has already written, so that a key SCAN names twice
//! is written once.
//!
//! SCAN may name a key more than once (when the table is resized or
//! rehashed mid-scan, or a key moves on Cluster), and importing a customer
//! twice would count its habits twice. Keeping every key written would cost
//! the keys themselves (tens of bytes each, about 1 GB for 10 million
//! customers); this keeps an 8-byte digest of each instead: a `HashSet<u64>`
//! is about 150 MB at 10 million keys (hashbrown's 16 Mi buckets of 9
//! bytes), and half again while it grows.
//!
//! The price is that two different keys with the same digest would make
//! the second one look written already, and it would be left out. The
//! digest is SipHash keyed at random for each run, so no choice of keys
//! makes that likelier and a rerun draws new keys; the chance that any two
//! of n keys collide is about n²/2⁶⁵: 3 in a million for 10 million
//! customers, 3 in ten thousand for 100 million.

use std::collections::HashSet;
use std::hash::{BuildHasher, RandomState};

/// The keys written so far, as digests.
#[derive(Default)]
pub struct Seen {
    digests: HashSet<u64>,
    /// The digest's random key, drawn once per export.
    digest: RandomState,
}

impl Seen {
    /// Records `key`; `true` the first time it is offered.
    pub fn first_time(&mut self, key: &[u8]) -> bool {
        self.digests.insert(self.digest.hash_one(key))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_new_once() {
        let mut seen = Seen::default();
        assert!(seen.first_time(b"sticky_gw_m1_c1"));
        assert!(seen.first_time(b"sticky_gw_m1_c2"));
        assert!(!seen.first_time(b"sticky_gw_m1_c1"));
        assert!(!seen.first_time(b"sticky_gw_m1_c2"));
        assert!(seen.first_time(b"sticky_gw_m1_c3"));
    }
}
