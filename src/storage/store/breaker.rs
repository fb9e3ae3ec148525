//! The connector circuit breaker's tier 2 (contract v1.2 §3): the
//! [`RedisStore`] calls the breaker engine (`src/breaker/`) and its admin
//! RPCs make, typed in and out, and the codec of their scripts
//! (`scripts/breaker_*.lua`, whose headers say the layout).
//!
//! Every breaker is a (tenant, merchant, connector)'s: each call takes the
//! tenant, whose namespace the keys and the index fields carry
//! (`domain::keys`), so two tenants with the same merchant and connector
//! ids never share a count, a trip or an override.
//!
//! Every write here is a background or admin call, and goes through the
//! Sentinel write fence as `forget` does: refused, unsent, while a
//! failover is under way.

use std::collections::BTreeMap;
use std::time::Instant;

use fred::interfaces::HashesInterface;
use fred::prelude::Value;

use super::RedisStore;
use crate::domain::breaker::{
    BreakerSettings, BreakerState, Counts, Override, OverrideUntil, Tripped, state_at,
};
use crate::domain::ids::MerchantId;
use crate::domain::keys::{
    self, BREAKER_INDEX_KEY, IndexFieldKind, index_override_field, index_trip_field,
    parse_index_field,
};
use crate::domain::tenant::Tenant;
use crate::storage::error::{NotApplied, StorageError};
use crate::telemetry::RedisCommand;

/// One connector's counts an instance has not yet flushed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectorTally {
    pub connector: String,
    /// Calls counted while CLOSED, by bucket ([`BreakerSettings::bucket_of`]).
    pub buckets: Vec<(i64, Counts)>,
    /// Calls counted as probes of the HALF-OPEN that follows the trip open
    /// until the first value.
    pub probes: Option<(i64, Counts)>,
}

/// One connector's shared state after a flush.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectorSnapshot {
    pub connector: String,
    /// The calls of the current window (CLOSED only: a trip clears it).
    pub window: Counts,
    /// The trip, from the trip until the close.
    pub tripped: Option<Tripped>,
    /// The probes of the HALF-OPEN that `tripped` names.
    pub probes: Counts,
}

/// A transition the engine decided, applied only if the breaker is still
/// where the engine saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerTransition {
    /// CLOSED → OPEN, with the window's counts as Redis holds them;
    /// refused while a trip is OPEN or HALF-OPEN.
    Trip,
    /// HALF-OPEN → CLOSED, if the trip is still the one open until
    /// `open_until_ms`.
    Close { open_until_ms: i64 },
    /// HALF-OPEN → OPEN again, likewise.
    Reopen { open_until_ms: i64 },
}

/// One (tenant, merchant, connector) of the breaker index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexEntry {
    pub tenant: Tenant,
    pub merchant: String,
    pub connector: String,
    pub tripped: Option<Tripped>,
    pub over: Option<OverrideUntil>,
}

/// One connector of GetConnectorHealth.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectorHealthRow {
    pub connector: String,
    pub state: BreakerState,
    /// CLOSED: the current window's; HALF-OPEN: the probes so far; OPEN:
    /// the counts that tripped it.
    pub counts: Counts,
    /// When the OPEN ends; 0 unless OPEN.
    pub open_until_ms: i64,
    /// The override, while it holds.
    pub over: Option<OverrideUntil>,
}

impl RedisStore {
    /// Adds one (tenant, merchant)'s pending counts into Redis
    /// (breaker_flush.lua, one call) and answers each connector's shared
    /// state, in `tallies`' order. Nothing is sent for no tallies.
    pub async fn flush_breakers(
        &self,
        tenant: &Tenant,
        merchant: &MerchantId,
        tallies: &[ConnectorTally],
        now_ms: i64,
        settings: &BreakerSettings,
        deadline: Instant,
    ) -> Result<Vec<ConnectorSnapshot>, StorageError> {
        if tallies.is_empty() {
            return Ok(Vec::new());
        }
        let key = keys::breaker_counts_key(tenant, merchant);
        let args = flush_args(tallies, now_ms, settings);
        let reply: Vec<i64> = self
            .breaker_script(Script::Flush, &[key.as_str()], &args, deadline)
            .await?;
        flush_reply(&reply, tallies).map_err(|error| self.refused(key.as_str(), error))
    }

    /// Applies one transition (breaker_transition.lua): the trip it made
    /// (Trip, Reopen) or the trip it closed, with no counts (Close);
    /// `None` when the breaker was not where the engine saw it, and
    /// nothing was written.
    // The breaker's three ids and the transition's four inputs: a struct
    // for its one caller would only rename them.
    #[allow(clippy::too_many_arguments)]
    pub async fn transition_breaker(
        &self,
        tenant: &Tenant,
        merchant: &MerchantId,
        connector: &str,
        transition: BreakerTransition,
        now_ms: i64,
        settings: &BreakerSettings,
        deadline: Instant,
    ) -> Result<Option<Tripped>, StorageError> {
        let counts = keys::breaker_counts_key(tenant, merchant);
        let open = keys::breaker_open_key(tenant, merchant, connector);
        let (kind, expect) = match transition {
            BreakerTransition::Trip => ("trip", 0),
            BreakerTransition::Close { open_until_ms } => ("close", open_until_ms),
            BreakerTransition::Reopen { open_until_ms } => ("reopen", open_until_ms),
        };
        let args = [
            Value::from(kind),
            Value::from(connector),
            decimal(now_ms),
            decimal(settings.open_for_ms()),
            decimal(settings.half_open_for_ms()),
            decimal(expect),
            decimal(settings.window_ms()),
            decimal(settings.bucket_ms()),
            decimal(settings.ring_len()),
        ];
        let reply: Vec<i64> = self
            .breaker_script(
                Script::Transition,
                &[counts.as_str(), open.as_str()],
                &args,
                deadline,
            )
            .await?;
        transition_reply(&reply, transition).map_err(|error| self.refused(counts.as_str(), error))
    }

    /// The breaker index (breaker_index.lua's poll): every trip and
    /// override still of use at `now_ms`, of every tenant (the index is one
    /// hash for all), one entry per (tenant, merchant, connector), in that
    /// order (the default tenant first). The poll also deletes
    /// the entries past their use and keeps the index's TTL to the longest
    /// left.
    pub async fn poll_breaker_index(
        &self,
        now_ms: i64,
        settings: &BreakerSettings,
        deadline: Instant,
    ) -> Result<Vec<IndexEntry>, StorageError> {
        let args = [
            Value::from("poll"),
            decimal(now_ms),
            decimal(settings.half_open_for_ms()),
            decimal(index_cap_ms(settings)),
        ];
        let reply: Value = self
            .breaker_script(Script::Index, &[BREAKER_INDEX_KEY], &args, deadline)
            .await?;
        let mut merged: BTreeMap<(Tenant, String, String), IndexEntry> = BTreeMap::new();
        for (field, value) in pairs_of(reply.into_array()) {
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
                IndexFieldKind::Trip => entry.tripped = parse_trip(&value),
                IndexFieldKind::Override => entry.over = parse_override(&value),
            }
        }
        Ok(merged
            .into_values()
            .filter(|entry| entry.tripped.is_some() || entry.over.is_some())
            .collect())
    }

    /// Names `tripped` in the index, so that every instance sees it at its
    /// next poll. The index keeps it (and its own TTL) for at most
    /// max(2 × WINDOW, OPEN_FOR); each poll renews that while the trip is
    /// of use.
    pub async fn index_trip(
        &self,
        tenant: &Tenant,
        merchant: &MerchantId,
        connector: &str,
        tripped: Tripped,
        settings: &BreakerSettings,
        deadline: Instant,
    ) -> Result<(), StorageError> {
        let field = index_trip_field(tenant, merchant, connector);
        let value = trip_value(&tripped);
        self.index_set(&field, &value, index_cap_ms(settings), deadline)
            .await
    }

    /// Takes the trip open until `open_until_ms` out of the index (a close);
    /// a later trip of the same breaker stays. Whether it was there.
    pub async fn index_clear_trip(
        &self,
        tenant: &Tenant,
        merchant: &MerchantId,
        connector: &str,
        open_until_ms: i64,
        deadline: Instant,
    ) -> Result<bool, StorageError> {
        let field = index_trip_field(tenant, merchant, connector);
        // The space ends the number: T = 12 never clears T = 123.
        self.index_del(&field, &format!("{open_until_ms} "), deadline)
            .await
    }

    /// Sets the breaker's override until its end (kept in the index for
    /// as long), or clears it (`None`, or one already over at `now_ms`).
    pub async fn set_override(
        &self,
        tenant: &Tenant,
        merchant: &MerchantId,
        connector: &str,
        over: Option<OverrideUntil>,
        now_ms: i64,
        deadline: Instant,
    ) -> Result<(), StorageError> {
        let field = index_override_field(tenant, merchant, connector);
        match over.filter(|over| over.active_at(now_ms)) {
            Some(over) => {
                let lifetime = over.until_ms.saturating_sub(now_ms);
                self.index_set(&field, &override_value(&over), lifetime, deadline)
                    .await
            }
            None => self.index_del(&field, "", deadline).await.map(|_| ()),
        }
    }

    /// GetConnectorHealth, from Redis: every connector of `tenant`'s
    /// merchant with a trip not yet over, calls in the current window, or
    /// an override, in bytewise connector order. Two reads (the (tenant,
    /// merchant)'s counts hash, the index shared by every tenant, of which
    /// only this tenant's fields count), sent together; no state change.
    pub async fn breaker_health(
        &self,
        tenant: &Tenant,
        merchant: &MerchantId,
        now_ms: i64,
        settings: &BreakerSettings,
        deadline: Instant,
    ) -> Result<Vec<ConnectorHealthRow>, StorageError> {
        let counts_key = keys::breaker_counts_key(tenant, merchant);
        let counts_key = counts_key.as_str();
        let (counts, index) = tokio::join!(
            self.exec.on_key(
                RedisCommand::BreakerHealth,
                counts_key,
                deadline,
                false,
                |client| async move { client.hgetall::<Value, _>(counts_key).await },
            ),
            self.exec.on_key(
                RedisCommand::BreakerHealth,
                BREAKER_INDEX_KEY,
                deadline,
                false,
                |client| async move { client.hgetall::<Value, _>(BREAKER_INDEX_KEY).await },
            ),
        );
        let counts = pairs_of(counts?.into_array());
        let index = pairs_of(index?.into_array());
        health_rows(tenant, merchant, &counts, &index, now_ms, settings)
    }

    async fn index_set(
        &self,
        field: &str,
        value: &str,
        lifetime_ms: i64,
        deadline: Instant,
    ) -> Result<(), StorageError> {
        let args = [
            Value::from("set"),
            Value::from(field),
            Value::from(value),
            decimal(lifetime_ms.max(1)),
        ];
        let reply: Vec<i64> = self
            .breaker_script(Script::Index, &[BREAKER_INDEX_KEY], &args, deadline)
            .await?;
        match *reply {
            [1] => Ok(()),
            [-2] => Err(self.refused(BREAKER_INDEX_KEY, no_pexpire())),
            _ => Err(unexpected("breaker_index set", &reply)),
        }
    }

    async fn index_del(
        &self,
        field: &str,
        prefix: &str,
        deadline: Instant,
    ) -> Result<bool, StorageError> {
        let args = [Value::from("del"), Value::from(field), Value::from(prefix)];
        let reply: Vec<i64> = self
            .breaker_script(Script::Index, &[BREAKER_INDEX_KEY], &args, deadline)
            .await?;
        match *reply {
            [deleted @ (0 | 1)] => Ok(deleted == 1),
            _ => Err(unexpected("breaker_index del", &reply)),
        }
    }

    /// Runs one of the breaker's scripts on `keys` (of one slot; the first
    /// routes it) as a write: fenced during a Sentinel failover, refused
    /// unsent where the permission probe found the user lacking.
    async fn breaker_script<R: fred::prelude::FromValue>(
        &self,
        script: Script,
        keys: &[&str],
        args: &[Value],
        deadline: Instant,
    ) -> Result<R, StorageError> {
        self.exec.check_fence()?;
        let scripts = &*self.exec.scripts;
        let script = match script {
            Script::Flush => &scripts.breaker_flush,
            Script::Transition => &scripts.breaker_transition,
            Script::Index => &scripts.breaker_index,
        };
        let metrics = &*self.exec.metrics;
        let route = keys.first().copied().unwrap_or(BREAKER_INDEX_KEY);
        self.exec
            .on_key(script.command, route, deadline, true, |client| async move {
                script.run_keys(&client, keys, args, metrics).await
            })
            .await
    }

    /// A script's decoded reply that is an error: a refusal for want of a
    /// permission has the node probed again, as `Exec::run` has it.
    fn refused(&self, key: &str, error: StorageError) -> StorageError {
        self.exec.note_refusal(key, &error);
        error
    }
}

/// The breaker's scripts.
#[derive(Debug, Clone, Copy)]
enum Script {
    Flush,
    Transition,
    Index,
}

/// How long the index may keep a trip: max(2 × WINDOW, OPEN_FOR), the
/// longest TTL the contract lets a breaker key have (overrides aside).
fn index_cap_ms(settings: &BreakerSettings) -> i64 {
    settings.half_open_for_ms().max(settings.open_for_ms())
}

fn decimal(n: impl Into<i64>) -> Value {
    Value::from(n.into().to_string())
}

fn count(n: u64) -> Value {
    Value::from(n.to_string())
}

/// breaker_flush.lua's arguments.
fn flush_args(tallies: &[ConnectorTally], now_ms: i64, s: &BreakerSettings) -> Vec<Value> {
    let mut args = vec![
        decimal(now_ms),
        decimal(s.window_ms()),
        decimal(s.bucket_ms()),
        decimal(s.ring_len()),
        decimal(s.half_open_for_ms()),
    ];
    for tally in tallies {
        args.push(Value::from(tally.connector.as_str()));
        args.push(decimal(
            i64::try_from(tally.buckets.len()).unwrap_or(i64::MAX),
        ));
        for (bucket, counts) in &tally.buckets {
            args.extend([
                decimal(*bucket),
                count(counts.calls),
                count(counts.failures),
            ]);
        }
        let (until, probes) = tally.probes.unwrap_or_default();
        args.extend([decimal(until), count(probes.calls), count(probes.failures)]);
    }
    args
}

/// breaker_flush.lua's reply: `{1, then 7 numbers per connector}`.
fn flush_reply(
    reply: &[i64],
    tallies: &[ConnectorTally],
) -> Result<Vec<ConnectorSnapshot>, StorageError> {
    match reply {
        [-1] => return Err(foreign("the merchant's breaker counts")),
        [-2] => return Err(no_pexpire()),
        [1, rest @ ..] if rest.len() == 7 * tallies.len() => {
            let snapshots = rest.chunks_exact(7).zip(tallies).map(|(row, tally)| {
                let &[calls, failures, until, trip_calls, trip_failures, hc, hf] = row else {
                    return None;
                };
                Some(ConnectorSnapshot {
                    connector: tally.connector.clone(),
                    window: counts_of(calls, failures)?,
                    tripped: trip_of(until, trip_calls, trip_failures)?,
                    probes: counts_of(hc, hf)?,
                })
            });
            if let Some(snapshots) = snapshots.collect::<Option<Vec<_>>>() {
                return Ok(snapshots);
            }
        }
        _ => {}
    }
    Err(unexpected("breaker_flush", reply))
}

/// breaker_transition.lua's reply.
fn transition_reply(
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
            BreakerTransition::Trip | BreakerTransition::Reopen { .. },
        ) => trip_of(until, calls, failures).flatten(),
        _ => None,
    };
    match tripped {
        Some(tripped) => Ok(Some(tripped)),
        None => Err(unexpected("breaker_transition", reply)),
    }
}

fn counts_of(calls: i64, failures: i64) -> Option<Counts> {
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
fn trip_value(tripped: &Tripped) -> String {
    format!(
        "{} {} {}",
        tripped.open_until_ms, tripped.calls, tripped.failures
    )
}

fn parse_trip(value: &str) -> Option<Tripped> {
    let mut words = value.split(' ');
    let tripped = Tripped {
        open_until_ms: words.next()?.parse().ok()?,
        calls: words.next()?.parse().ok()?,
        failures: words.next()?.parse().ok()?,
    };
    words.next().is_none().then_some(tripped)
}

/// An override as the index keeps it: "<until_ms> open|closed" (the end
/// first, so breaker_index.lua reads every entry's end alike).
fn override_value(over: &OverrideUntil) -> String {
    let kind = match over.kind {
        Override::ForceOpen => "open",
        Override::ForceClosed => "closed",
    };
    format!("{} {kind}", over.until_ms)
}

fn parse_override(value: &str) -> Option<OverrideUntil> {
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

/// A flat field/value list (HGETALL's, the poll's) as UTF-8 pairs; a pair
/// that is not UTF-8 is none this service wrote, and is skipped.
fn pairs_of(flat: Vec<Value>) -> Vec<(String, String)> {
    let mut pairs = Vec::with_capacity(flat.len() / 2);
    let mut flat = flat.into_iter();
    while let (Some(field), Some(value)) = (flat.next(), flat.next()) {
        if let (Some(field), Some(value)) = (field.into_string(), value.into_string()) {
            pairs.push((field, value));
        }
    }
    pairs
}

/// What the counts hash holds for one connector.
#[derive(Default)]
struct Held {
    window: Counts,
    tripped: Option<Tripped>,
    probes: Counts,
    closed: Option<i64>,
    over: Option<OverrideUntil>,
    indexed: Option<Tripped>,
}

/// GetConnectorHealth's rows from the (tenant, merchant)'s counts hash and
/// the index, whose other tenants' and merchants' fields are skipped.
fn health_rows(
    tenant: &Tenant,
    merchant: &MerchantId,
    counts: &[(String, String)],
    index: &[(String, String)],
    now_ms: i64,
    s: &BreakerSettings,
) -> Result<Vec<ConnectorHealthRow>, StorageError> {
    let foreign = || foreign("the merchant's breaker counts");
    let mut held: BTreeMap<String, Held> = BTreeMap::new();
    for (field, value) in counts {
        let Some((name, connector)) = field.split_once(':') else {
            continue;
        };
        let entry = held.entry(connector.to_owned()).or_default();
        match name {
            "t" => entry.tripped = Some(parse_trip(value).ok_or_else(foreign)?),
            "x" => entry.closed = Some(value.parse().map_err(|_| foreign())?),
            "hc" => entry.probes.calls = value.parse().map_err(|_| foreign())?,
            "hf" => entry.probes.failures = value.parse().map_err(|_| foreign())?,
            _ if name.len() > 1
                && name.starts_with('b')
                && name[1..].bytes().all(|b| b.is_ascii_digit()) =>
            {
                // A ring slot: "<bucket> <calls> <failures>", the same
                // shape as a trip.
                let slot = parse_trip(value).ok_or_else(foreign)?;
                if s.counts_in_window(slot.open_until_ms, now_ms) {
                    entry.window += Counts {
                        calls: slot.calls,
                        failures: slot.failures,
                    };
                }
            }
            _ => {}
        }
    }
    for (field, value) in index {
        let Some((kind, of_tenant, of, connector)) = parse_index_field(field) else {
            continue;
        };
        if of != *merchant || of_tenant != *tenant {
            continue;
        }
        let entry = held.entry(connector).or_default();
        match kind {
            IndexFieldKind::Trip => entry.indexed = parse_trip(value),
            IndexFieldKind::Override => {
                entry.over = parse_override(value).filter(|over| over.active_at(now_ms));
            }
        }
    }
    let mut rows = Vec::new();
    for (connector, held) in held {
        // The counts hash's trip is the breaker's own; the index's stands
        // in when the hash lost it (expired during a long OPEN), unless the
        // hash says that trip was closed.
        let tripped = held.tripped.or(held
            .indexed
            .filter(|t| held.closed.is_none_or(|x| t.open_until_ms > x)));
        let state = state_at(tripped.as_ref(), now_ms, s);
        let (counts, open_until_ms) = match (state, tripped) {
            (BreakerState::Open { until_ms }, Some(t)) => (t.counts(), until_ms),
            (BreakerState::HalfOpen { .. }, _) => (held.probes, 0),
            _ => (held.window, 0),
        };
        if state != BreakerState::Closed || counts.calls > 0 || held.over.is_some() {
            rows.push(ConnectorHealthRow {
                connector,
                state,
                counts,
                open_until_ms,
                over: held.over,
            });
        }
    }
    Ok(rows)
}

fn foreign(key_kind: &'static str) -> StorageError {
    StorageError::ForeignValue {
        key_kind,
        detail: "a stored value is not one the breaker writes".into(),
    }
}

/// A breaker script's refusal to make a key it could not give a TTL.
fn no_pexpire() -> StorageError {
    StorageError::Unavailable {
        why: NotApplied::Permission,
        detail: "the Redis user may not run PEXPIRE on this key (needs +pexpire), so the \
                 script created nothing"
            .into(),
    }
}

fn unexpected(script: &str, reply: &[i64]) -> StorageError {
    StorageError::Unexpected(format!("{script} replied {reply:?}"))
}

#[cfg(test)]
mod tests;
