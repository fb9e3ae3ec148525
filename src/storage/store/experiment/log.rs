//! The experiment counts log's frames, and what a batch of them adds up
//! to: what one instance pushes per shard and tick (its counts of every
//! merchant-day of the shard), how the compaction splits a batch into
//! chunks every instance splits the same way, and how a reader finds the
//! counts not yet added into the day hashes. Written and read only here;
//! Redis keeps the bytes and never looks inside them.
//!
//! A frame is one list element. It starts with [`FRAME_VERSION`]; then,
//! per merchant-day, little-endian: `u16` tenant length and bytes (empty:
//! the default tenant), `u16` merchant length and bytes, `u32` day
//! (`YYYYMMDD`), `u16` the mask of the [`EXPERIMENT_FIELDS`] it counts,
//! and a `u32` count per field in the mask, in the fields' order.

use std::collections::HashMap;

use super::super::bytes::{Cursor, put_bytes, put_u16};
use super::{ExperimentCounts, ExperimentEntry};
use crate::domain::ids::MerchantId;
use crate::domain::keys::EXPERIMENT_FIELDS;
use crate::domain::tenant::Tenant;

/// The first byte of every frame of this layout.
const FRAME_VERSION: u8 = 1;

/// The most merchant-days one compaction call adds: each costs Redis a
/// few microseconds (an HINCRBY per field and a PEXPIRE), so a call holds
/// it about a millisecond.
pub const CHUNK_ENTRIES: usize = 256;

/// The frame of `entries` (one shard's, one tick's); `None` when none has
/// a count. A count past `u32::MAX` in one tick (none can be: a tick is
/// 500 ms) would be cut to it.
pub fn log_frame(entries: &[ExperimentEntry]) -> Option<Vec<u8>> {
    let mut out = vec![FRAME_VERSION];
    for entry in entries.iter().filter(|e| !e.counts.is_empty()) {
        put_bytes(&mut out, entry.tenant.as_str().as_bytes());
        put_bytes(&mut out, entry.merchant.as_str().as_bytes());
        out.extend_from_slice(&entry.day.to_le_bytes());
        let mask = entry
            .counts
            .counts
            .iter()
            .enumerate()
            .filter(|(_, n)| **n > 0)
            .fold(0usize, |mask, (i, _)| mask | 1 << i);
        put_u16(&mut out, mask);
        for &n in entry.counts.counts.iter().filter(|n| **n > 0) {
            out.extend_from_slice(&u32::try_from(n).unwrap_or(u32::MAX).to_le_bytes());
        }
    }
    (out.len() > 1).then_some(out)
}

/// A frame's merchant-days; `None` when it is not a frame this service
/// writes (none of it is then counted).
pub fn read_frame(frame: &[u8]) -> Option<Vec<ExperimentEntry>> {
    let (&version, body) = frame.split_first()?;
    if version != FRAME_VERSION {
        return None;
    }
    let mut cursor = Cursor::new(body);
    let mut entries = Vec::new();
    while !cursor.done() {
        let tenant = match cursor.text()? {
            "" => Tenant::DEFAULT,
            id => Tenant::parse(id).ok()?,
        };
        let merchant = MerchantId::parse(cursor.text()?).ok()?;
        let day = u32::from_le_bytes(cursor.take()?);
        let mask = cursor.u16()?;
        if mask >> EXPERIMENT_FIELDS.len() != 0 {
            return None;
        }
        let mut counts = ExperimentCounts::default();
        for (i, count) in counts.counts.iter_mut().enumerate() {
            if mask & 1 << i != 0 {
                *count = u64::from(u32::from_le_bytes(cursor.take()?));
            }
        }
        entries.push(ExperimentEntry {
            tenant,
            merchant,
            day,
            counts,
        });
    }
    Some(entries)
}

/// The chunk (`0..chunks`) a merchant-day's counts of a batch are added
/// in: FNV-1a of the tenant, merchant and day, so every instance and
/// every reader splits a batch alike. Part of the stored layout: a
/// reader of a batch half added must split it as its writer did.
pub fn chunk_of(tenant: &Tenant, merchant: &MerchantId, day: u32, chunks: u64) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for &b in bytes {
            hash ^= u64::from(b);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    };
    eat(tenant.as_str().as_bytes());
    eat(&[0]);
    eat(merchant.as_str().as_bytes());
    eat(&[0]);
    eat(&day.to_le_bytes());
    hash % chunks.max(1)
}

/// A batch of frames, added up per merchant-day and split into its
/// chunks: `chunks[k]` is what the compaction's call `k` adds.
#[derive(Debug, Default)]
pub struct ExperimentBatch {
    pub chunks: Vec<Vec<ExperimentEntry>>,
    /// Frames that were not this service's: skipped, counted.
    pub unreadable: u64,
}

impl ExperimentBatch {
    /// Adds up `frames` (a prefix of the log) and splits them into as many
    /// chunks as [`CHUNK_ENTRIES`] asks.
    pub fn of<B: AsRef<[u8]>>(frames: &[B]) -> Self {
        let (sum, unreadable) = sum_frames(frames);
        let chunks = sum.len().div_ceil(CHUNK_ENTRIES).max(1);
        let mut split: Vec<Vec<ExperimentEntry>> = vec![Vec::new(); chunks];
        for ((tenant, merchant, day), counts) in sum {
            let k = chunk_of(&tenant, &merchant, day, chunks as u64) as usize;
            split[k].push(ExperimentEntry {
                tenant,
                merchant,
                day,
                counts,
            });
        }
        Self {
            chunks: split,
            unreadable,
        }
    }
}

type DayKey = (Tenant, MerchantId, u32);

fn sum_frames<B: AsRef<[u8]>>(frames: &[B]) -> (HashMap<DayKey, ExperimentCounts>, u64) {
    let mut sum: HashMap<DayKey, ExperimentCounts> = HashMap::new();
    let mut unreadable = 0;
    for frame in frames {
        let Some(entries) = read_frame(frame.as_ref()) else {
            unreadable += 1;
            continue;
        };
        for entry in entries {
            sum.entry((entry.tenant, entry.merchant, entry.day))
                .or_default()
                .add(&entry.counts);
        }
    }
    (sum, unreadable)
}

/// Where a shard's log stands in being added into the day hashes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExperimentLog {
    /// Frames in the log.
    pub frames: u64,
    /// The last batch begun (0: none yet).
    pub batch: u64,
    /// The batch being added: its first `frames` frames, split in
    /// `chunks`, of which those before `next` are added.
    pub adding: Option<Adding>,
    /// When (Unix ms, by the appending instance's clock) the oldest frame
    /// not in a batch was pushed; `None` when there is none.
    pub since: Option<i64>,
}

impl ExperimentLog {
    /// Whether `other` stands at the same step of the same batch: no chunk
    /// was added between the two (pushes may have been).
    pub fn same_batch(&self, other: &Self) -> bool {
        self.batch == other.batch && self.adding == other.adding
    }
}

/// Where a log stands from its meta hash's fields (experiment_log_state.lua
/// names them), with `frames` frames in it; a field that is not a whole
/// number reads as absent.
pub fn log_state_of_meta(fields: &[(Vec<u8>, Vec<u8>)], frames: u64) -> ExperimentLog {
    let get = |name: &[u8]| {
        fields
            .iter()
            .find(|(f, _)| f.as_slice() == name)
            .and_then(|(_, v)| std::str::from_utf8(v).ok()?.parse::<u64>().ok())
    };
    let adding = match (get(b"frames"), get(b"chunks"), get(b"next")) {
        (Some(frames), Some(chunks), Some(next)) => Some(Adding {
            frames,
            chunks,
            next,
        }),
        _ => None,
    };
    ExperimentLog {
        frames,
        batch: get(b"batch").unwrap_or(0),
        adding,
        since: get(b"since").and_then(|s| i64::try_from(s).ok()),
    }
}

/// A batch under way (see [`ExperimentLog::adding`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Adding {
    pub frames: u64,
    pub chunks: u64,
    pub next: u64,
}

/// The merchant-days of `frames` (the whole log, read with its state at
/// one instant) that are not yet in the day hashes and that `keep`
/// keeps: the batch's chunks from `next` on, and every frame after the
/// batch. Also the frames that were not this service's.
pub fn unadded<B: AsRef<[u8]>>(
    frames: &[B],
    adding: Option<Adding>,
    mut keep: impl FnMut(&ExperimentEntry) -> bool,
) -> (Vec<ExperimentEntry>, u64) {
    let mut found = Vec::new();
    let mut unreadable = 0;
    for (at, frame) in frames.iter().enumerate() {
        let Some(entries) = read_frame(frame.as_ref()) else {
            unreadable += 1;
            continue;
        };
        let batch = adding.filter(|a| (at as u64) < a.frames);
        for entry in entries {
            let added = batch.is_some_and(|a| {
                chunk_of(&entry.tenant, &entry.merchant, entry.day, a.chunks) < a.next
            });
            if !added && keep(&entry) {
                found.push(entry);
            }
        }
    }
    (found, unreadable)
}

#[cfg(test)]
mod tests;
