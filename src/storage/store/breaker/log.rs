//! The breaker counts log's frames: what one instance appends per shard
//! and tick (its CLOSED counts of every merchant of the shard), and how
//! every instance reads them back. Written and read only here; Redis
//! stores the bytes and never looks inside (breaker_flush.lua).
//!
//! A frame is one APPEND, so a reader never sees part of one: `u32` body
//! length, then the body, all little-endian. The body, per merchant:
//! `u16` tenant length and bytes (empty: the default tenant), `u16`
//! merchant length and bytes, `u16` connectors; per connector `u16`
//! length and bytes, `u16` buckets; per bucket `i64` bucket, `u64` calls,
//! `u64` failures. A body holds whole merchants and stays under
//! [`FRAME_BODY_MAX`] unless one merchant alone is larger, so a frame
//! always fits in one read ([`READ_MOST`]).

use super::super::bytes::{Cursor, put_bytes, put_u16};
use crate::domain::breaker::Counts;
use crate::domain::ids::MerchantId;
use crate::domain::tenant::Tenant;
use crate::storage::{ConnectorTally, MerchantTallies};

/// A body is closed once it reaches this size (a merchant is never split).
const FRAME_BODY_MAX: usize = 64 * 1024;

/// The most bytes one tick reads from one log key: many frames, and a
/// starting instance catches up on a long window over a few ticks.
pub(crate) const READ_MOST: u64 = 4 * 1024 * 1024;

/// One pair's CLOSED counts of one bucket, as an instance appended them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRecord {
    pub tenant: Tenant,
    pub merchant: String,
    pub connector: String,
    pub bucket: i64,
    pub counts: Counts,
}

/// What one read of a log key gave: its records, the bytes they took
/// (the reader's offset moves by as much: a frame cut by the read's end
/// is read whole next time), and the frames it could not read.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct LogRead {
    pub records: Vec<LogRecord>,
    pub consumed: u64,
    pub unreadable: u64,
}

/// The frames of `merchants`' bucket counts; empty when none has any.
pub fn log_frames(merchants: &[MerchantTallies]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut body = Vec::new();
    for merchant in merchants {
        let tallies: Vec<_> = merchant
            .tallies
            .iter()
            .filter(|t| !t.buckets.is_empty())
            .collect();
        if tallies.is_empty() {
            continue;
        }
        put_bytes(&mut body, merchant.tenant.as_str().as_bytes());
        put_bytes(&mut body, merchant.merchant.as_str().as_bytes());
        put_u16(&mut body, tallies.len());
        for tally in tallies {
            put_bytes(&mut body, tally.connector.as_bytes());
            put_u16(&mut body, tally.buckets.len());
            for (bucket, counts) in &tally.buckets {
                body.extend_from_slice(&bucket.to_le_bytes());
                body.extend_from_slice(&counts.calls.to_le_bytes());
                body.extend_from_slice(&counts.failures.to_le_bytes());
            }
        }
        if body.len() >= FRAME_BODY_MAX {
            close_frame(&mut out, &mut body);
        }
    }
    if !body.is_empty() {
        close_frame(&mut out, &mut body);
    }
    out
}

/// The merchants with probe counts, with only those: what a tick adds
/// into the merchants' hashes (the rest goes to the log, `log_frames`).
pub fn probing(merchants: &[MerchantTallies]) -> Vec<MerchantTallies> {
    merchants
        .iter()
        .filter_map(|merchant| {
            let tallies: Vec<ConnectorTally> = merchant
                .tallies
                .iter()
                .filter(|tally| tally.probes.is_some())
                .map(|tally| ConnectorTally {
                    buckets: Vec::new(),
                    ..tally.clone()
                })
                .collect();
            (!tallies.is_empty()).then(|| MerchantTallies {
                tenant: merchant.tenant.clone(),
                merchant: merchant.merchant.clone(),
                tallies,
            })
        })
        .collect()
}

fn close_frame(out: &mut Vec<u8>, body: &mut Vec<u8>) {
    let len = u32::try_from(body.len()).unwrap_or(u32::MAX);
    out.extend_from_slice(&len.to_le_bytes());
    out.append(body);
}

/// Reads the whole frames at the start of `bytes`.
pub fn read_log(bytes: &[u8]) -> LogRead {
    let mut read = LogRead::default();
    let mut at = 0usize;
    while let Some(len) = bytes.get(at..at + 4) {
        let len = u32::from_le_bytes([len[0], len[1], len[2], len[3]]) as usize;
        let Some(body) = bytes.get(at + 4..at + 4 + len) else {
            break;
        };
        if read_body(body, &mut read.records).is_none() {
            read.unreadable += 1;
        }
        at += 4 + len;
    }
    read.consumed = at as u64;
    read
}

/// One body's records into `records`; `None` (and none of them kept) when
/// it is not a body this service writes.
fn read_body(body: &[u8], records: &mut Vec<LogRecord>) -> Option<()> {
    let mut cursor = Cursor::new(body);
    let mut found = Vec::new();
    while !cursor.done() {
        let tenant = match cursor.text()? {
            "" => Tenant::DEFAULT,
            id => Tenant::parse(id).ok()?,
        };
        let merchant = MerchantId::parse(cursor.text()?).ok()?;
        for _ in 0..cursor.u16()? {
            let connector = cursor.text()?.to_owned();
            for _ in 0..cursor.u16()? {
                let bucket = i64::from_le_bytes(cursor.take()?);
                let calls = u64::from_le_bytes(cursor.take()?);
                let failures = u64::from_le_bytes(cursor.take()?);
                found.push(LogRecord {
                    tenant: tenant.clone(),
                    merchant: merchant.as_str().to_owned(),
                    connector: connector.clone(),
                    bucket,
                    counts: Counts { calls, failures },
                });
            }
        }
    }
    records.append(&mut found);
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connector and its (bucket, calls, failures).
    type Buckets<'a> = (&'a str, &'a [(i64, u64, u64)]);

    fn merchant(tenant: &str, id: &str, connectors: &[Buckets<'_>]) -> MerchantTallies {
        MerchantTallies {
            tenant: Tenant::parse(tenant).unwrap(),
            merchant: MerchantId::parse(id).unwrap(),
            tallies: connectors
                .iter()
                .map(|(c, buckets)| ConnectorTally {
                    connector: (*c).to_owned(),
                    buckets: buckets
                        .iter()
                        .map(|&(b, calls, failures)| (b, Counts { calls, failures }))
                        .collect(),
                    probes: None,
                })
                .collect(),
        }
    }

    fn record(tenant: &str, m: &str, c: &str, bucket: i64, calls: u64, failures: u64) -> LogRecord {
        LogRecord {
            tenant: Tenant::parse(tenant).unwrap(),
            merchant: m.to_owned(),
            connector: c.to_owned(),
            bucket,
            counts: Counts { calls, failures },
        }
    }

    #[test]
    fn frames_read_back_as_the_records_they_carry() {
        let merchants = [
            merchant(
                "",
                "m1",
                &[("a", &[(7, 3, 1), (8, 1, 0)]), ("b:x", &[(8, 2, 2)])],
            ),
            merchant("acme", "m1", &[("a", &[(8, 5, 0)])]),
            merchant("", "probes-only", &[("a", &[])]),
        ];
        let read = read_log(&log_frames(&merchants));
        assert_eq!(
            read.records,
            vec![
                record("", "m1", "a", 7, 3, 1),
                record("", "m1", "a", 8, 1, 0),
                record("", "m1", "b:x", 8, 2, 2),
                record("acme", "m1", "a", 8, 5, 0),
            ]
        );
        assert_eq!(read.unreadable, 0);
        assert!(log_frames(&merchants[2..]).is_empty());
    }

    #[test]
    fn a_cut_frame_is_left_for_the_next_read_and_a_bad_one_skipped() {
        let many: Vec<_> = (0..3000)
            .map(|n| merchant("", &format!("merchant-{n}"), &[("a", &[(1, 1, 0)])]))
            .collect();
        let bytes = log_frames(&many);
        let whole = read_log(&bytes);
        assert_eq!(whole.records.len(), 3000);
        assert_eq!(whole.consumed, bytes.len() as u64);
        // More than one frame: a read cut inside the second keeps the first.
        let first = u32::from_le_bytes(bytes[..4].try_into().unwrap()) as usize + 4;
        assert!(first < bytes.len());
        let cut = read_log(&bytes[..first + 10]);
        assert_eq!(cut.consumed, first as u64);
        assert!(!cut.records.is_empty() && cut.records.len() < 3000);

        let mut bad = vec![3, 0, 0, 0, 0xff, 0xff, 0xff];
        bad.extend_from_slice(&log_frames(&many[..1]));
        let read = read_log(&bad);
        assert_eq!(read.unreadable, 1);
        assert_eq!(read.records, vec![record("", "merchant-0", "a", 1, 1, 0)]);
        assert_eq!(read.consumed, bad.len() as u64);
    }
}
