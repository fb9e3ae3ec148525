//! The background counts' shards: a fixed number of Redis Cluster hash
//! tags that every (tenant, merchant)'s breaker and experiment keys are
//! spread over, so that the background flushes cost one script per shard
//! per tick, however many merchants have counts (contract v1.2 §3: the hot
//! path does not pay for the breaker; a platform has 100,000 merchants).
//!
//! Why a fixed number: a script may only touch keys of one Cluster slot, so
//! with a hash tag per merchant (the layout before) the flush was one
//! script per merchant per tick, and its cost grew with the merchants. With
//! [`SHARDS`] tags, the merchants of one shard share a slot, and one script
//! carries all their counts. Each tag is chosen to fall in its own
//! sixteenth of the slot space, so the shards spread over a Cluster's
//! primaries as the slots do (on three primaries: six, five and five).
//!
//! The tags and the choice of shard are part of the key layout: every
//! instance, of every version, must compute the same ones. A unit test
//! pins them.

use std::sync::OnceLock;

use super::ids::MerchantId;
use super::tenant::Tenant;

/// How many shards: the bound on background scripts per tick.
pub const SHARDS: usize = 16;

/// How much of a background tick (500 ms) the shards' calls are spread
/// over ([`Shard::offset_in`]): half, so a tick still ends within its
/// period, and a count or a transition waits at most 250 ms more.
pub const SPREAD: std::time::Duration = std::time::Duration::from_millis(250);

/// Redis Cluster's hash slots.
const SLOTS: u16 = 16_384;

/// One shard, `0..SHARDS`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Shard(u8);

impl Shard {
    /// Every shard, in order.
    pub fn all() -> impl Iterator<Item = Self> {
        (0..SHARDS).filter_map(|i| u8::try_from(i).ok().map(Self))
    }

    /// The shard's number, `0..SHARDS`.
    pub fn index(self) -> usize {
        usize::from(self.0)
    }

    /// When, within a tick whose calls are spread over `span`, this
    /// shard's background call goes: shard `i` at `i / SHARDS` of it. A
    /// tick's scripts then reach Redis one after another instead of in one
    /// burst, which Redis, one thread, served while every request-path
    /// command waited (p99, bench/README.md "Platform scale").
    pub fn offset_in(self, span: std::time::Duration) -> std::time::Duration {
        span * u32::from(self.0) / SHARDS as u32
    }

    /// The shard's hash tag, without its braces: `b<n>.<k>`, the first `k`
    /// whose slot lies in the shard's sixteenth of the slot space.
    pub fn tag(self) -> &'static str {
        static TAGS: OnceLock<Vec<String>> = OnceLock::new();
        let tags = TAGS.get_or_init(|| Self::all().map(find_tag).collect());
        tags.get(self.index()).map_or("", String::as_str)
    }
}

/// The Cluster slot of a hash tag's content (CRC16/XMODEM mod 16384, as
/// Redis computes it).
pub fn slot_of(tag: &str) -> u16 {
    crc16::State::<crc16::XMODEM>::calculate(tag.as_bytes()) % SLOTS
}

fn find_tag(shard: Shard) -> String {
    let width = SLOTS / SHARDS as u16;
    let wanted = u16::from(shard.0);
    (0u32..)
        .map(|k| format!("b{}.{k}", shard.0))
        .find(|tag| slot_of(tag) / width == wanted)
        .unwrap_or_default()
}

/// The shard of `tenant`'s `merchant`: CRC16 of the tenant's id, a 0 byte
/// and the merchant id, mod [`SHARDS`] (the same on every instance).
pub fn shard_of(tenant: &Tenant, merchant: &MerchantId) -> Shard {
    let mut crc = crc16::State::<crc16::XMODEM>::new();
    crc.update(tenant.id().unwrap_or("").as_bytes());
    crc.update(&[0]);
    crc.update(merchant.as_str().as_bytes());
    let shard = usize::from(crc.get()) % SHARDS;
    Shard(u8::try_from(shard).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ticks_calls_are_spread_evenly_over_the_span() {
        let offsets: Vec<u128> = Shard::all()
            .map(|s| s.offset_in(SPREAD).as_millis())
            .collect();
        assert_eq!(offsets[..3], [0, 15, 31]);
        assert_eq!(offsets[SHARDS - 1], 234);
        assert_eq!(
            Shard::all()
                .last()
                .unwrap()
                .offset_in(std::time::Duration::ZERO)
                .as_millis(),
            0
        );
    }

    #[test]
    fn tags_are_pinned_and_each_in_its_own_sixteenth_of_the_slots() {
        let tags: Vec<&str> = Shard::all().map(Shard::tag).collect();
        assert_eq!(tags.len(), SHARDS);
        for (i, tag) in tags.iter().enumerate() {
            assert!(tag.starts_with(&format!("b{i}.")), "{tag}");
            assert_eq!(usize::from(slot_of(tag) / 1024), i, "{tag}");
        }
        // The layout: these never change, or keys written before are lost.
        assert_eq!(
            tags,
            [
                "b0.2", "b1.1", "b2.61", "b3.62", "b4.22", "b5.21", "b6.11", "b7.12", "b8.61",
                "b9.62", "b10.63", "b11.60", "b12.42", "b13.41", "b14.13", "b15.10"
            ]
        );
    }

    #[test]
    fn redis_computes_the_same_slot() {
        // Known slots (CLUSTER KEYSLOT): "foo" 12182, "bar" 5061.
        assert_eq!(slot_of("foo"), 12182);
        assert_eq!(slot_of("bar"), 5061);
    }

    #[test]
    fn merchants_spread_over_every_shard_and_tenants_apart() {
        let mut seen = [0usize; SHARDS];
        for i in 0..16_000 {
            let m = MerchantId::parse(&format!("merchant_{i}")).unwrap();
            seen[shard_of(&Tenant::DEFAULT, &m).index()] += 1;
        }
        for n in seen {
            assert!((800..1200).contains(&n), "{seen:?}");
        }
        let m = MerchantId::parse("m1").unwrap();
        let shards: std::collections::BTreeSet<_> = ["a", "b", "c", "d", "e", "f"]
            .iter()
            .map(|t| shard_of(&Tenant::parse(t).unwrap(), &m))
            .collect();
        assert!(shards.len() > 1, "the tenant is part of the shard's hash");
    }
}
