//! GetConnectorHealth's rows, from a (tenant, merchant)'s counts hash and
//! its shard's index, as Redis holds them, and its CLOSED windows as the
//! engine folded them from the shard's counts log.

use std::collections::BTreeMap;

use super::ConnectorHealthRow;
use super::codec::{foreign, parse_index_trip, parse_override, parse_trip};
use crate::domain::breaker::{
    BreakerSettings, BreakerState, Counts, OverrideUntil, Tripped, state_at,
};
use crate::domain::ids::MerchantId;
use crate::domain::keys::{IndexFieldKind, parse_index_field};
use crate::domain::tenant::Tenant;
use crate::storage::error::StorageError;

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

/// GetConnectorHealth's rows from the (tenant, merchant)'s counts hash,
/// the index, whose other tenants' and merchants' fields are skipped, and
/// `windows`, each connector's CLOSED window.
pub(super) fn health_rows(
    tenant: &Tenant,
    merchant: &MerchantId,
    counts: &[(String, Vec<u8>)],
    index: &[(String, String)],
    windows: &[(String, Counts)],
    now_ms: i64,
    s: &BreakerSettings,
) -> Result<Vec<ConnectorHealthRow>, StorageError> {
    let foreign = || foreign("the merchant's breaker counts");
    let mut held: BTreeMap<String, Held> = BTreeMap::new();
    for (field, value) in counts {
        let Some((name, connector)) = field.split_once(':') else {
            continue;
        };
        if name == "r" {
            // A window of the layout before the counts log: read no more.
            continue;
        }
        let entry = held.entry(connector.to_owned()).or_default();
        // The other fields are text.
        let value = std::str::from_utf8(value).map_err(|_| foreign())?;
        match name {
            "t" => entry.tripped = Some(parse_trip(value).ok_or_else(foreign)?),
            "x" => entry.closed = Some(value.parse().map_err(|_| foreign())?),
            "hc" => entry.probes.calls = value.parse().map_err(|_| foreign())?,
            "hf" => entry.probes.failures = value.parse().map_err(|_| foreign())?,
            _ => {}
        }
    }
    for (connector, window) in windows {
        held.entry(connector.clone()).or_default().window = *window;
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
            IndexFieldKind::Trip => entry.indexed = parse_index_trip(value),
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
