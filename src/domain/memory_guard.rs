//! The memory guard for admission: how its limit is written, and when it
//! refuses new customers on one Redis node.
//!
//! The per-merchant budget bounds each merchant, but any caller can invent
//! merchant ids; the guard bounds them all together. When a node's
//! `used_memory` is at or above the limit, the customers whose hash would be
//! created on that node are refused admission, while customers who already
//! have a hash keep updating. The limit is a number of bytes, or a share of
//! the node's `maxmemory`, so one setting fits nodes of any size.
//!
//! Pure logic: the storage layer polls each node's `INFO memory` and asks
//! [`NodeMemory::verdict`] what it means.

use std::fmt;

use super::percent::Percent;

/// `STICKY_ROUTING_ADMISSION_MEMORY_LIMIT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryLimit {
    /// A fixed number of bytes, whatever the node's `maxmemory`.
    Bytes(u64),
    /// A share of each node's `maxmemory`: no limit on a node without one.
    OfMaxmemory(Percent),
}

impl fmt::Display for MemoryLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Bytes(bytes) => write!(f, "{bytes} bytes"),
            Self::OfMaxmemory(percent) => write!(f, "{percent} of maxmemory"),
        }
    }
}

/// The units a byte count may carry. Exactly these spellings: `mb` would be
/// ambiguous (Redis's own config reads it as binary), so it is refused.
const UNITS: &[(&str, u64)] = &[
    ("KiB", 1 << 10),
    ("MiB", 1 << 20),
    ("GiB", 1 << 30),
    ("KB", 1_000),
    ("MB", 1_000_000),
    ("GB", 1_000_000_000),
];

impl MemoryLimit {
    /// Reads `512MB`, `2GiB`, `1073741824` (bytes) or `80%`, `87.5%` (of
    /// `maxmemory`, 1 to 100). The error says what is accepted.
    pub fn parse(text: &str) -> Result<Self, String> {
        let expected = || {
            format!(
                "`{text}` is neither bytes (a whole number, optionally with KB, MB, GB, \
                 KiB, MiB or GiB) nor a percentage of maxmemory from 1% to 100%"
            )
        };
        if text.ends_with('%') {
            return Percent::parse(text)
                .map(Self::OfMaxmemory)
                .map_err(|_| expected());
        }
        let (digits, unit) = UNITS
            .iter()
            .find_map(|(unit, size)| text.strip_suffix(unit).map(|d| (d, *size)))
            .unwrap_or((text, 1));
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(expected());
        }
        digits
            .parse::<u64>()
            .ok()
            .and_then(|n| n.checked_mul(unit))
            .map(Self::Bytes)
            .ok_or_else(|| format!("`{text}` is more bytes than Redis can report"))
    }

    /// The limit in bytes on a node whose `maxmemory` is `maxmemory`;
    /// `None` when there is none (a share of an unset `maxmemory`).
    pub fn bytes_on(self, maxmemory: u64) -> Option<u64> {
        match self {
            Self::Bytes(bytes) => Some(bytes),
            Self::OfMaxmemory(_) if maxmemory == 0 => None,
            // "At or above 80 % of 1001 bytes" is at or above 800.8, so 801.
            // f64 is exact for every maxmemory below 8 PiB.
            Self::OfMaxmemory(percent) => {
                let bytes = (maxmemory as f64 * percent.get() / 100.0).ceil();
                Some(bytes.min(maxmemory as f64) as u64)
            }
        }
    }
}

/// What one poll of a node's `INFO memory` said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeMemory {
    pub used_memory: u64,
    pub maxmemory: u64,
}

/// The guard's state on one node, as a poll leaves it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Below the limit: new customers are admitted.
    Clear { limit: u64 },
    /// At or above the limit: new customers are refused.
    Engaged { limit: u64 },
    /// A share of `maxmemory` on a node without one: no limit.
    NoLimit,
}

impl Verdict {
    pub fn engaged(self) -> bool {
        matches!(self, Self::Engaged { .. })
    }

    /// The limit in bytes, when there is one.
    pub fn limit(self) -> Option<u64> {
        match self {
            Self::Clear { limit } | Self::Engaged { limit } => Some(limit),
            Self::NoLimit => None,
        }
    }
}

impl NodeMemory {
    /// The guard's verdict on this node under `limit`: engaged at or above it.
    pub fn verdict(self, limit: MemoryLimit) -> Verdict {
        match limit.bytes_on(self.maxmemory) {
            None => Verdict::NoLimit,
            Some(limit) if self.used_memory >= limit => Verdict::Engaged { limit },
            Some(limit) => Verdict::Clear { limit },
        }
    }
}

/// One node's guard, and whether it answers, as `/metrics` shows them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GuardReading {
    /// The node, `host:port`.
    pub node: String,
    /// Whether new customers are refused there now.
    pub engaged: bool,
    /// The last successful poll's `used_memory`; `None` before the first.
    pub used_memory: Option<u64>,
    /// The limit in bytes there; `None` before the first poll, or when a
    /// percentage limit meets a node without `maxmemory`.
    pub limit: Option<u64>,
    /// Whether the node answered the last poll, which doubles as its
    /// reachability probe (`sticky_routing_redis_up`); `None` while that is
    /// not known yet.
    pub reachable: Option<bool>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn percent(value: f64) -> MemoryLimit {
        MemoryLimit::OfMaxmemory(Percent::new(value).unwrap())
    }

    #[test]
    fn bytes_take_the_six_units_or_none() {
        let parsed = |t| MemoryLimit::parse(t).unwrap();
        assert_eq!(parsed("1073741824"), MemoryLimit::Bytes(1 << 30));
        assert_eq!(parsed("0"), MemoryLimit::Bytes(0));
        assert_eq!(parsed("512KB"), MemoryLimit::Bytes(512_000));
        assert_eq!(parsed("512MB"), MemoryLimit::Bytes(512_000_000));
        assert_eq!(parsed("3GB"), MemoryLimit::Bytes(3_000_000_000));
        assert_eq!(parsed("512KiB"), MemoryLimit::Bytes(512 * 1024));
        assert_eq!(parsed("512MiB"), MemoryLimit::Bytes(512 << 20));
        assert_eq!(parsed("3GiB"), MemoryLimit::Bytes(3 << 30));
    }

    #[test]
    fn percentages_are_shares_of_maxmemory() {
        // How a percentage is read is `Percent::parse`'s, tested beside it.
        let parsed = |t| MemoryLimit::parse(t).unwrap();
        assert_eq!(parsed("80%"), percent(80.0));
        assert_eq!(parsed("87.5%"), percent(87.5));
    }

    #[test]
    fn anything_else_is_refused() {
        for text in [
            "",
            "0%",
            "0.5%",
            "0.99%",
            "100.01%",
            "101%",
            "-5%",
            "%",
            "80 %",
            ".5%",
            "5.%",
            "80%%",
            "NaN%",
            "inf%",
            "1e2%",
            "-1",
            "1.5GB",
            "1.5",
            "512mb",
            "512kb",
            "512B",
            "512 MB",
            "1TB",
            "MB",
            "GiB",
            " 5",
            "0x10",
            "+5",
            "18446744073709551616",
            "99999999999999GiB",
            "eighty",
        ] {
            let result = MemoryLimit::parse(text);
            assert!(result.is_err(), "`{text}` gave {result:?}");
        }
    }

    #[test]
    fn a_share_of_an_unset_maxmemory_is_no_limit() {
        assert_eq!(percent(80.0).bytes_on(0), None);
        assert_eq!(MemoryLimit::Bytes(5).bytes_on(0), Some(5));
        let memory = NodeMemory {
            used_memory: u64::MAX,
            maxmemory: 0,
        };
        assert_eq!(memory.verdict(percent(1.0)), Verdict::NoLimit);
        assert!(!memory.verdict(percent(1.0)).engaged());
    }

    #[test]
    fn engaged_at_or_above_the_limit() {
        let at = |used, maxmemory, limit| {
            NodeMemory {
                used_memory: used,
                maxmemory,
            }
            .verdict(limit)
        };
        assert_eq!(at(799, 1000, percent(80.0)), Verdict::Clear { limit: 800 });
        assert_eq!(
            at(800, 1000, percent(80.0)),
            Verdict::Engaged { limit: 800 }
        );
        assert_eq!(at(800, 1001, percent(80.0)), Verdict::Clear { limit: 801 });
        assert_eq!(
            at(1000, 1000, percent(100.0)),
            Verdict::Engaged { limit: 1000 }
        );
        let bytes = MemoryLimit::Bytes(10);
        assert!(!at(9, 0, bytes).engaged());
        assert!(at(10, 0, bytes).engaged());
        assert!(at(10, 5, bytes).engaged(), "bytes ignore maxmemory");
        assert!(at(0, 0, MemoryLimit::Bytes(0)).engaged());
    }

    proptest! {
        #[test]
        fn a_share_never_exceeds_maxmemory_and_grows_with_it(
            hundredths in 100u32..=10_000,
            maxmemory in 1u64..(1 << 50),
        ) {
            let share = f64::from(hundredths) / 100.0;
            let limit = percent(share).bytes_on(maxmemory).unwrap();
            prop_assert!(limit <= maxmemory);
            prop_assert!(limit as f64 >= maxmemory as f64 * share / 100.0);
            prop_assert!(percent(share).bytes_on(maxmemory + 1).unwrap() >= limit);
        }

        #[test]
        fn the_verdict_is_engaged_exactly_at_or_above_the_limit(
            used in any::<u64>(),
            bytes in any::<u64>(),
        ) {
            let memory = NodeMemory { used_memory: used, maxmemory: 0 };
            prop_assert_eq!(memory.verdict(MemoryLimit::Bytes(bytes)).engaged(), used >= bytes);
        }

        #[test]
        fn written_percentages_read_back(hundredths in 100u32..=10_000) {
            let text = format!("{}.{:02}%", hundredths / 100, hundredths % 100);
            let parsed = MemoryLimit::parse(&text).unwrap();
            prop_assert_eq!(parsed, percent(f64::from(hundredths) / 100.0));
        }
    }
}
