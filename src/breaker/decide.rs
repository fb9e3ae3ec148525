//! The transitions the engine decides in a tick (`cycle.rs` writes
//! them): a trip that a CLOSED breaker's window, as folded from the
//! counts log, calls for, and the close or reopen a HALF-OPEN breaker's
//! probes call for. Pure reads of the engine's memory; the one write is
//! the view's, when a flush's answer shows a trip it did not know.

use super::Breakers;
use super::own_changes::Change;
use crate::domain::breaker::{BreakerState, Counts, ProbeVerdict, probes_decide, state_at, trips};
use crate::domain::ids::{Connector, MerchantId};
use crate::domain::tenant::Tenant;
use crate::storage::{BreakerTransition, ConnectorSnapshot, MerchantTallies, PlannedTransition};

/// A transition to write, with what it was decided from.
pub(super) struct Planned {
    pub plan: PlannedTransition,
    pub from: BreakerState,
    pub counts: Counts,
}

/// The trip a CLOSED breaker's window calls for, if any; a window that
/// will trip as it ages is looked at again then.
pub(super) fn decide_window(
    breakers: &Breakers,
    tenant: Tenant,
    merchant: String,
    connector: String,
    now: i64,
) -> Option<Planned> {
    let settings = &breakers.settings;
    let known = breakers
        .view
        .load()
        .entry(&tenant, &merchant, &connector)
        .and_then(|entry| entry.tripped);
    if state_at(known.as_ref(), now, settings) != BreakerState::Closed {
        return None;
    }
    let (counts, trips_later) = breakers
        .windows
        .judge(&tenant, &merchant, &connector, now, settings)?;
    // Parsed only for a trip or a recheck: most windows need neither.
    let ids = || {
        Some((
            MerchantId::parse(&merchant).ok()?,
            Connector::parse(&connector).ok()?,
        ))
    };
    if !trips(counts, settings) {
        if let Some(at) = trips_later
            && let Some((id, connector_id)) = ids()
        {
            breakers.rechecks.schedule(at, (tenant, id, connector_id));
        }
        return None;
    }
    let (id, _) = ids()?;
    Some(Planned {
        plan: PlannedTransition {
            tenant,
            merchant: id,
            connector,
            transition: BreakerTransition::Trip { window: counts },
        },
        from: BreakerState::Closed,
        counts,
    })
}

/// Learns a probing breaker's state from a flush's answer, and the
/// transition its probes call for, if any.
pub(super) fn decide_probes(
    breakers: &Breakers,
    merchant: &MerchantTallies,
    snapshot: ConnectorSnapshot,
    now: i64,
) -> Option<Planned> {
    let settings = &breakers.settings;
    let (tenant, id) = (&merchant.tenant, merchant.merchant.as_str());
    let connector = snapshot.connector.as_str();
    let known = breakers
        .view
        .load()
        .entry(tenant, id, connector)
        .and_then(|entry| entry.tripped);
    if known != snapshot.tripped {
        breakers.view.update(
            tenant,
            id,
            connector,
            Change::Tripped(snapshot.tripped),
            settings.max_tracked,
        );
    }
    let state = state_at(snapshot.tripped.as_ref(), now, settings);
    let BreakerState::HalfOpen { since_ms } = state else {
        return None;
    };
    let transition = match probes_decide(snapshot.probes, settings)? {
        ProbeVerdict::Close => BreakerTransition::Close {
            open_until_ms: since_ms,
        },
        ProbeVerdict::Reopen => BreakerTransition::Reopen {
            open_until_ms: since_ms,
        },
    };
    Some(Planned {
        plan: PlannedTransition {
            tenant: tenant.clone(),
            merchant: merchant.merchant.clone(),
            connector: snapshot.connector,
            transition,
        },
        from: state,
        counts: snapshot.probes,
    })
}
