//! The breaker scripts' codec: the arguments of `breaker_flush.lua` and
//! `breaker_transition.lua` (their headers say the layout) and their
//! replies, and the values the counts hashes and the index keep.

use fred::prelude::Value;

use super::log::{READ_MOST, read_log};
use super::{
    BreakerTransition, ConnectorSnapshot, ConnectorTally, IndexEntry, LogRead, MerchantTallies,
    ShardLog, TimeTransition, TimedTransition,
};
use crate::domain::breaker::{BreakerSettings, Counts, Override, OverrideUntil, Tripped};
use crate::domain::keys::{IndexFieldKind, parse_index_field};
use crate::storage::error::{NotApplied, StorageError};

pub(super) fn decimal(n: impl Into<i64>) -> Value {
    Value::from(n.into().to_string())
}

/// One number of the packed probes (breaker_flush.lua's ARGV[7]): an
/// i8 of Lua's struct, little-endian. Counts past i64 do not happen (a
/// tick's calls of one pair); they are held at i64::MAX, never wrapped.
fn put_i8(packed: &mut Vec<u8>, n: impl TryInto<i64>) {
    packed.extend_from_slice(&n.try_into().unwrap_or(i64::MAX).to_le_bytes());
}

/// A length of the packed tallies: an I2. The engine never sends more
/// than a shard's chunk of merchants or a pair's window of buckets, and a
/// connector is at most 64 bytes; a larger one is held at u16::MAX, which
/// the script then reads as a different layout and fails loudly on.
fn put_len(packed: &mut Vec<u8>, n: usize) {
    packed.extend_from_slice(&u16::try_from(n).unwrap_or(u16::MAX).to_le_bytes());
}

/// How long the index may keep a trip: max(2 × WINDOW, OPEN_FOR), the
/// longest TTL the contract lets a breaker key have (overrides aside).
pub(super) fn index_cap_ms(settings: &BreakerSettings) -> i64 {
    settings.half_open_for_ms().max(settings.open_for_ms())
}

/// breaker_flush.lua's arguments: `merchants`' probe counts, and the
/// counts log's append and reads (`log`, with the first call of a tick).
pub(super) fn flush_args(
    merchants: &[MerchantTallies],
    log: Option<&ShardLog>,
    now_ms: i64,
    s: &BreakerSettings,
) -> Vec<Value> {
    let mut args = vec![
        decimal(now_ms),
        decimal(s.window_ms()),
        decimal(s.bucket_ms()),
        decimal(s.ring_len()),
        decimal(s.half_open_for_ms()),
        decimal(index_cap_ms(s)),
    ];
    // One string for every merchant's probes, not an argument per
    // number: a frame per number here and a Lua string per number in
    // Redis were most of a tick's cost per merchant (bench/README.md).
    let mut packed = Vec::with_capacity(merchants.len() * 64);
    for merchant in merchants {
        put_len(&mut packed, merchant.tallies.len());
        for tally in &merchant.tallies {
            put_len(&mut packed, tally.connector.len());
            packed.extend_from_slice(tally.connector.as_bytes());
            let (until, probes) = tally.probes.unwrap_or_default();
            put_i8(&mut packed, until);
            put_i8(&mut packed, probes.calls);
            put_i8(&mut packed, probes.failures);
        }
    }
    args.push(Value::Bytes(packed.into()));
    let reads: &[(i64, u64)] = log.map_or(&[], |log| &log.reads);
    let (frames, append_to) = match log {
        Some(log) if !log.frames.is_empty() => {
            let to = reads
                .iter()
                .position(|&(period, _)| period == log.append_period)
                .map_or(0, |at| at + 1);
            (log.frames.clone(), to)
        }
        _ => (Vec::new(), 0),
    };
    args.push(decimal(i64::try_from(reads.len()).unwrap_or(i64::MAX)));
    args.push(Value::Bytes(frames.into()));
    args.push(decimal(i64::try_from(append_to).unwrap_or(0)));
    args.push(decimal(log_ttl_ms(s)));
    args.push(decimal(i64::try_from(READ_MOST).unwrap_or(i64::MAX)));
    for &(_, from) in reads {
        args.push(decimal(i64::try_from(from).unwrap_or(i64::MAX)));
    }
    args
}

/// How long a log key lives after its last append: its counts count for
/// at most a window and a bucket after their bucket, and a key's appends
/// may carry counts of the bucket before its own (a tick's counts are
/// taken up to a tick late), with a bucket to spare.
pub(crate) fn log_ttl_ms(s: &BreakerSettings) -> i64 {
    s.window_ms() + 3 * s.bucket_ms()
}

/// What one script call answered for a whole shard: per merchant, its
/// snapshots or why it was left unwritten; the index's entries; the
/// transitions time made that this poll saw first; the log keys' reads.
pub(super) type FlushReply = (
    Vec<Result<Vec<ConnectorSnapshot>, StorageError>>,
    Vec<IndexEntry>,
    Vec<TimedTransition>,
    Vec<LogRead>,
);

/// breaker_flush.lua's reply: `{1, merchants, kept, events, logs}`.
pub(super) fn flush_reply(
    reply: Value,
    merchants: &[MerchantTallies],
    reads: usize,
) -> Result<FlushReply, StorageError> {
    let odd = || StorageError::Unexpected("breaker_flush replied in a shape it never does".into());
    let mut parts = reply.into_array().into_iter();
    let status = parts.next().ok_or_else(odd)?;
    match status.as_i64() {
        Some(1) => {}
        Some(-2) => return Err(no_pexpire()),
        _ => return Err(odd()),
    }
    let (Some(replies), Some(kept), Some(events), Some(logs), None) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return Err(odd());
    };
    let replies = replies.into_array();
    let logs = logs.into_array();
    if replies.len() != merchants.len() || logs.len() != reads {
        return Err(odd());
    }
    let snapshots = replies
        .into_iter()
        .zip(merchants)
        .map(|(reply, merchant)| {
            merchant_reply(&packed_numbers(reply).ok_or_else(odd)?, &merchant.tallies)
        })
        .collect();
    let logs = logs
        .into_iter()
        .map(|bytes| Some(read_log(bytes.as_bytes()?)))
        .collect::<Option<Vec<_>>>()
        .ok_or_else(odd)?;
    Ok((
        snapshots,
        index_entries(pairs_of(kept.into_array())),
        timed(events.into_array()),
        logs,
    ))
}

/// A reply's array of integers (the transitions').
fn numbers(reply: Value) -> Option<Vec<i64>> {
    reply.into_array().iter().map(Value::as_i64).collect()
}

/// A merchant's packed reply (the flush's): i8s, little-endian.
fn packed_numbers(reply: Value) -> Option<Vec<i64>> {
    unpack_i8s(reply.as_bytes()?)
}

/// Lua struct's i8s, little-endian, as breaker_flush.lua packs its
/// replies; `None` for bytes that are not whole i8s.
fn unpack_i8s(bytes: &[u8]) -> Option<Vec<i64>> {
    if !bytes.len().is_multiple_of(8) {
        return None;
    }
    Some(
        bytes
            .chunks_exact(8)
            .map(|n| i64::from_le_bytes(n.try_into().unwrap_or_default()))
            .collect(),
    )
}

/// One merchant's part of the reply: `{1, then per connector 5 numbers}`,
/// or its error.
pub(super) fn merchant_reply(
    reply: &[i64],
    tallies: &[ConnectorTally],
) -> Result<Vec<ConnectorSnapshot>, StorageError> {
    match reply {
        [-1] => return Err(foreign("the merchant's breaker counts")),
        [-2] => return Err(no_pexpire()),
        [1, rest @ ..] if rest.len() == tallies.len() * 5 => {
            let snapshots: Option<Vec<_>> = rest
                .chunks_exact(5)
                .zip(tallies)
                .map(|(n, tally)| {
                    Some(ConnectorSnapshot {
                        connector: tally.connector.clone(),
                        tripped: trip_of(n[0], n[1], n[2])?,
                        probes: counts_of(n[3], n[4])?,
                    })
                })
                .collect();
            if let Some(snapshots) = snapshots {
                return Ok(snapshots);
            }
        }
        _ => {}
    }
    Err(unexpected("breaker_flush", reply))
}

/// The index's entries, one per (tenant, merchant, connector), in that
/// order (the default tenant first); fields and values it cannot read are
/// skipped.
pub(super) fn index_entries(pairs: Vec<(String, String)>) -> Vec<IndexEntry> {
    let mut merged: std::collections::BTreeMap<
        (crate::domain::tenant::Tenant, String, String),
        IndexEntry,
    > = std::collections::BTreeMap::new();
    for (field, value) in pairs {
        let Some((kind, tenant, merchant, connector)) = parse_index_field(&field) else {
            continue;
        };
        let entry = merged
            .entry((
                tenant.clone(),
                merchant.as_str().to_owned(),
                connector.clone(),
            ))
            .or_insert_with(|| IndexEntry {
                tenant,
                merchant: merchant.as_str().to_owned(),
                connector,
                tripped: None,
                over: None,
            });
        match kind {
            IndexFieldKind::Trip => entry.tripped = parse_index_trip(&value),
            IndexFieldKind::Override => entry.over = parse_override(&value),
        }
    }
    merged
        .into_values()
        .filter(|entry| entry.tripped.is_some() || entry.over.is_some())
        .collect()
}

/// The poll's events: field, value, what.
fn timed(flat: Vec<Value>) -> Vec<TimedTransition> {
    let mut events = Vec::new();
    let mut flat = flat.into_iter().filter_map(Value::into_string);
    while let (Some(field), Some(value), Some(what)) = (flat.next(), flat.next(), flat.next()) {
        let (Some((IndexFieldKind::Trip, tenant, merchant, connector)), Some(tripped)) =
            (parse_index_field(&field), parse_index_trip(&value))
        else {
            continue;
        };
        let kind = match what.as_str() {
            "half_open" => TimeTransition::HalfOpen,
            "closed" => TimeTransition::Closed,
            _ => continue,
        };
        events.push(TimedTransition {
            tenant,
            merchant,
            connector,
            tripped,
            kind,
        });
    }
    events
}

/// breaker_transition.lua's arguments after the common ones, for one
/// transition: kind, connector, expected T, the index field, and a trip's
/// window counts.
pub(super) fn transition_args(
    transition: BreakerTransition,
    connector: &str,
    field: String,
) -> [Value; 6] {
    let (kind, expect, window) = match transition {
        BreakerTransition::Trip { window } => ("trip", 0, window),
        BreakerTransition::Close { open_until_ms } => ("close", open_until_ms, Counts::default()),
        BreakerTransition::Reopen { open_until_ms } => ("reopen", open_until_ms, Counts::default()),
    };
    let count = |n: u64| decimal(i64::try_from(n).unwrap_or(i64::MAX));
    [
        Value::from(kind),
        Value::from(connector),
        decimal(expect),
        Value::from(field),
        count(window.calls),
        count(window.failures),
    ]
}

/// One transition's reply: the trip it made (Trip, Reopen) or the trip it
/// closed, with no counts (Close); `None` when the breaker was not where
/// the engine saw it, and nothing was written.
pub(super) fn transition_reply(
    reply: &[i64],
    transition: BreakerTransition,
) -> Result<Option<Tripped>, StorageError> {
    let tripped = match (reply, transition) {
        ([0], _) => return Ok(None),
        ([-1], _) => return Err(foreign("the merchant's breaker counts")),
        ([-2], _) => return Err(no_pexpire()),
        ([1], BreakerTransition::Close { open_until_ms }) => Some(Tripped {
            open_until_ms,
            calls: 0,
            failures: 0,
        }),
        (
            &[1, until, calls, failures],
            BreakerTransition::Trip { .. } | BreakerTransition::Reopen { .. },
        ) => trip_of(until, calls, failures).flatten(),
        _ => None,
    };
    match tripped {
        Some(tripped) => Ok(Some(tripped)),
        None => Err(unexpected("breaker_transition", reply)),
    }
}

/// The transitions' replies, one per transition sent.
pub(super) fn transition_replies(reply: Value, sent: usize) -> Result<Vec<Vec<i64>>, StorageError> {
    let replies: Option<Vec<Vec<i64>>> = reply.into_array().into_iter().map(numbers).collect();
    match replies {
        Some(replies) if replies.len() == sent => Ok(replies),
        _ => Err(StorageError::Unexpected(
            "breaker_transition replied in a shape it never does".into(),
        )),
    }
}

pub(super) fn counts_of(calls: i64, failures: i64) -> Option<Counts> {
    Some(Counts {
        calls: u64::try_from(calls).ok()?,
        failures: u64::try_from(failures).ok()?,
    })
}

/// A trip from its three numbers: `Some(None)` for none (T = 0; times are
/// Unix milliseconds, never 0), `None` for numbers no trip has.
fn trip_of(until: i64, calls: i64, failures: i64) -> Option<Option<Tripped>> {
    if until == 0 {
        return Some(None);
    }
    let counts = counts_of(calls, failures)?;
    Some(Some(Tripped {
        open_until_ms: until,
        calls: counts.calls,
        failures: counts.failures,
    }))
}

/// A trip as the counts hash and the index keep it: "T calls failures".
#[cfg(test)]
pub(super) fn trip_value(tripped: &Tripped) -> String {
    format!(
        "{} {} {}",
        tripped.open_until_ms, tripped.calls, tripped.failures
    )
}

pub(super) fn parse_trip(value: &str) -> Option<Tripped> {
    let mut words = value.split(' ');
    let tripped = Tripped {
        open_until_ms: words.next()?.parse().ok()?,
        calls: words.next()?.parse().ok()?,
        failures: words.next()?.parse().ok()?,
    };
    words.next().is_none().then_some(tripped)
}

/// A trip as the index keeps it: "T calls failures", and " h" once a poll
/// saw it HALF-OPEN.
pub(super) fn parse_index_trip(value: &str) -> Option<Tripped> {
    parse_trip(value.strip_suffix(" h").unwrap_or(value))
}

/// An override as the index keeps it: "<until_ms> open|closed" (the end
/// first, so the poll reads every entry's end alike).
pub(super) fn override_value(over: &OverrideUntil) -> String {
    let kind = match over.kind {
        Override::ForceOpen => "open",
        Override::ForceClosed => "closed",
    };
    format!("{} {kind}", over.until_ms)
}

pub(super) fn parse_override(value: &str) -> Option<OverrideUntil> {
    let (until, kind) = value.split_once(' ')?;
    let kind = match kind {
        "open" => Override::ForceOpen,
        "closed" => Override::ForceClosed,
        _ => return None,
    };
    Some(OverrideUntil {
        kind,
        until_ms: until.parse().ok()?,
    })
}

/// A flat field/value list as pairs of a UTF-8 field and its value's
/// bytes (the counts hash: its ring is binary); a field that is not UTF-8
/// is none this service wrote, and is skipped.
pub(super) fn byte_pairs_of(flat: Vec<Value>) -> Vec<(String, Vec<u8>)> {
    pairs_with(flat, |value| value.as_bytes().map(<[u8]>::to_vec))
}

/// A flat field/value list (HGETALL's, the poll's) as UTF-8 pairs; a pair
/// that is not UTF-8 is none this service wrote, and is skipped.
pub(super) fn pairs_of(flat: Vec<Value>) -> Vec<(String, String)> {
    pairs_with(flat, Value::into_string)
}

/// A flat field/value list as pairs of a UTF-8 field and what `value`
/// makes of its value; a pair either cannot be read as is skipped.
fn pairs_with<V>(flat: Vec<Value>, value: impl Fn(Value) -> Option<V>) -> Vec<(String, V)> {
    let mut pairs = Vec::with_capacity(flat.len() / 2);
    let mut flat = flat.into_iter();
    while let (Some(field), Some(v)) = (flat.next(), flat.next()) {
        if let (Some(field), Some(v)) = (field.into_string(), value(v)) {
            pairs.push((field, v));
        }
    }
    pairs
}

pub(super) fn foreign(key_kind: &'static str) -> StorageError {
    StorageError::ForeignValue {
        key_kind,
        detail: "a stored value is not one the breaker writes".into(),
    }
}

/// A breaker script's refusal to make a key it could not give a TTL.
pub(super) fn no_pexpire() -> StorageError {
    StorageError::Unavailable {
        why: NotApplied::Permission,
        detail: "the Redis user may not run PEXPIRE on this key (needs +pexpire), so the \
                 script created nothing"
            .into(),
    }
}

pub(super) fn unexpected(script: &str, reply: &[i64]) -> StorageError {
    StorageError::Unexpected(format!("{script} replied {reply:?}"))
}
