//! The replay's customers with habits, by their 128-bit identity: the one
//! structure whose size grows with a history, so it is built for memory.
//!
//! Two choices keep it near 100 bytes a customer (bench/README.md,
//! "Replay"):
//! - the identity is already a uniform hash, so the map hashes nothing and
//!   keys on two `u64` halves (8-byte aligned, where a `u128` would pad
//!   every entry to 16);
//! - the map is [`SHARDS`] tables, not one. A hash table grows by building
//!   a table twice its size beside the old one; one table of ten million
//!   customers would, for a moment, hold three times what it keeps, and the
//!   allocator may keep the old one's pages. Shards grow one at a time, each
//!   a small fraction of the whole.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};

/// How many tables the customers are spread over.
const SHARDS: usize = 64;

/// A customer's identity within a replay: a 128-bit hash of (merchant,
/// customer id), as two halves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity(pub [u64; 2]);

impl Identity {
    pub fn from_halves(high: u64, low: u64) -> Self {
        Self([high, low])
    }

    /// Which shard holds it: the top bits of the high half (the low half
    /// places it within the shard).
    fn shard(self) -> usize {
        (self.0[0] >> (64 - SHARDS.trailing_zeros())) as usize
    }
}

impl Hash for Identity {
    fn hash<H: Hasher>(&self, state: &mut H) {
        state.write_u64(self.0[1]);
    }
}

/// A hasher that passes a `u64` through: the identity is a hash already.
#[derive(Default)]
struct PassThrough(u64);

impl Hasher for PassThrough {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u64` is used (Identity's Hash); this keeps any other
        // caller correct, if slower.
        for byte in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(*byte);
        }
    }
    fn write_u64(&mut self, value: u64) {
        self.0 = value;
    }
}

type Shard<V> = HashMap<Identity, V, BuildHasherDefault<PassThrough>>;

/// Every customer with habits.
pub struct Customers<V> {
    shards: Vec<Shard<V>>,
    len: usize,
}

impl<V> Default for Customers<V> {
    fn default() -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Shard::default()).collect(),
            len: 0,
        }
    }
}

impl<V> Customers<V> {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn get(&self, id: Identity) -> Option<&V> {
        self.shards[id.shard()].get(&id)
    }

    pub fn get_mut(&mut self, id: Identity) -> Option<&mut V> {
        self.shards[id.shard()].get_mut(&id)
    }

    pub fn insert(&mut self, id: Identity, value: V) {
        if self.shards[id.shard()].insert(id, value).is_none() {
            self.len += 1;
        }
    }

    pub fn remove(&mut self, id: Identity) {
        if self.shards[id.shard()].remove(&id).is_some() {
            self.len -= 1;
        }
    }

    /// Keeps only the customers `keep` accepts.
    pub fn retain(&mut self, mut keep: impl FnMut(&V) -> bool) {
        for shard in &mut self.shards {
            shard.retain(|_, value| keep(value));
        }
        self.len = self.shards.iter().map(HashMap::len).sum();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(high: u64, low: u64) -> Identity {
        Identity::from_halves(high, low)
    }

    #[test]
    fn customers_are_found_by_both_halves_and_counted() {
        let mut customers = Customers::default();
        customers.insert(id(1, 7), "a");
        // Same low half, other high half: another customer, maybe another shard.
        customers.insert(id(u64::MAX, 7), "b");
        // Same high half, other low half.
        customers.insert(id(1, 8), "c");
        assert_eq!(customers.len(), 3);
        assert_eq!(customers.get(id(1, 7)), Some(&"a"));
        assert_eq!(customers.get(id(u64::MAX, 7)), Some(&"b"));
        assert_eq!(customers.get(id(1, 8)), Some(&"c"));
        assert_eq!(customers.get(id(2, 7)), None);
        customers.insert(id(1, 7), "a2");
        assert_eq!(customers.len(), 3);
        *customers.get_mut(id(1, 8)).unwrap() = "c2";
        assert_eq!(customers.get(id(1, 8)), Some(&"c2"));
        customers.remove(id(1, 7));
        customers.remove(id(1, 7));
        assert_eq!(customers.len(), 2);
        customers.retain(|value| *value != "b");
        assert_eq!(customers.len(), 1);
        assert_eq!(customers.get(id(1, 8)), Some(&"c2"));
    }

    #[test]
    fn every_shard_is_used() {
        let mut shards = std::collections::HashSet::new();
        for top in 0..SHARDS as u64 {
            shards.insert(id(top << 58, 0).shard());
        }
        assert_eq!(shards.len(), SHARDS);
    }
}
