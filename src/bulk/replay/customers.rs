//! The replay's customers with habits, by their 128-bit identity: the one
//! structure whose size grows with a history, so it is built for memory.
//!
//! Three choices keep it well under 200 bytes a customer (bench/README.md,
//! "Replay"):
//! - the identity is already a uniform hash, so the map hashes nothing and
//!   keys on two `u64` halves (8-byte aligned, where a `u128` would pad
//!   every entry to 16);
//! - the map is [`SHARDS`] tables, not one. A hash table grows by building
//!   a table twice its size beside the old one; one table of ten million
//!   customers would, for a moment, hold three times what it keeps, and the
//!   allocator may keep the old one's pages. Shards grow one at a time, each
//!   a small fraction of the whole;
//! - the shards are of unequal sizes, shard `i` taking a share in
//!   proportion to 2^(i / SHARDS). A table's buckets are a power of two
//!   filled to at most 7/8, so right after it doubles it is less than half
//!   full. Equal shards would all double at the same count, and the memory
//!   per customer would swing with the history's size between about 1.1 and
//!   2.3 entries' worth; shards spread evenly over one doubling keep it near
//!   the mean, about 1.65.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};

/// How many tables the customers are spread over.
const SHARDS: usize = 64;
/// The top bits of an identity that pick its shard, through [`ShardMap`].
const SHARD_BITS: u32 = 12;

/// A customer's identity within a replay: a 128-bit hash of (merchant,
/// customer id), as two halves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity(pub [u64; 2]);

impl Identity {
    pub fn from_halves(high: u64, low: u64) -> Self {
        Self([high, low])
    }

    /// Its slot in the [`ShardMap`]: the top bits of the high half (the low
    /// half places it within its shard).
    fn slot(self) -> usize {
        (self.0[0] >> (64 - SHARD_BITS)) as usize
    }
}

/// Which shard each slot belongs to: shard `i` holds about
/// 2^(i / SHARDS) / Σ of the slots, so the shards' sizes are spread evenly,
/// on a log scale, over one doubling.
struct ShardMap(Box<[u8]>);

impl Default for ShardMap {
    fn default() -> Self {
        let slots = 1usize << SHARD_BITS;
        let weight = |shard: usize| (shard as f64 / SHARDS as f64).exp2();
        let total: f64 = (0..SHARDS).map(weight).sum();
        let mut map = Vec::with_capacity(slots);
        let mut before = 0.0;
        for shard in 0..SHARDS {
            before += weight(shard);
            // Up to this shard's cumulative share of the slots; the last
            // shard takes whatever rounding left.
            let end = if shard + 1 == SHARDS {
                slots
            } else {
                (before / total * slots as f64).round() as usize
            };
            map.resize(end.max(map.len()), shard as u8);
        }
        Self(map.into_boxed_slice())
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
    map: ShardMap,
    len: usize,
}

impl<V> Default for Customers<V> {
    fn default() -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Shard::default()).collect(),
            map: ShardMap::default(),
            len: 0,
        }
    }
}

impl<V> Customers<V> {
    pub fn len(&self) -> usize {
        self.len
    }

    fn shard(&self, id: Identity) -> usize {
        usize::from(self.map.0[id.slot()])
    }

    pub fn get(&self, id: Identity) -> Option<&V> {
        self.shards[self.shard(id)].get(&id)
    }

    pub fn get_mut(&mut self, id: Identity) -> Option<&mut V> {
        let shard = self.shard(id);
        self.shards[shard].get_mut(&id)
    }

    pub fn insert(&mut self, id: Identity, value: V) {
        let shard = self.shard(id);
        if self.shards[shard].insert(id, value).is_none() {
            self.len += 1;
        }
    }

    pub fn remove(&mut self, id: Identity) {
        let shard = self.shard(id);
        if self.shards[shard].remove(&id).is_some() {
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
    fn the_shards_shares_double_from_the_first_to_the_last() {
        let map = ShardMap::default();
        assert_eq!(map.0.len(), 1 << SHARD_BITS);
        let mut slots = [0usize; SHARDS];
        for &shard in &map.0 {
            slots[usize::from(shard)] += 1;
        }
        // Every shard is used, in order, and each holds about 2^(1/64)
        // times its predecessor's share: the last about twice the first.
        assert!(map.0.is_sorted());
        assert!(slots.iter().all(|&n| n > 0), "{slots:?}");
        let ratio = slots[SHARDS - 1] as f64 / slots[0] as f64;
        assert!((1.9..=2.1).contains(&ratio), "{ratio}: {slots:?}");
        // An identity's top bits reach its slot's shard.
        let customers = Customers::<()>::default();
        assert_eq!(customers.shard(id(0, 0)), 0);
        assert_eq!(customers.shard(id(u64::MAX, 0)), SHARDS - 1);
    }
}
