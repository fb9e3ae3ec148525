//! Placeholder of the circuit breaker engine's API (contract v1.2 §3), so
//! that transport compiles against it; the engine replaces this file.
//! Every body does the trivial thing: no veto, nothing counted, nothing
//! stored.

use std::time::{Duration, Instant};

use crate::domain::breaker::{BreakerState, Counts, Override, OverrideUntil, VetoReason};
use crate::domain::ids::{Connector, MerchantId};
use crate::storage::StorageError;

/// One connector's breaker as GetConnectorHealth shows it. Storage owns
/// it in the engine (`crate::storage::ConnectorHealthRow`); the engine
/// re-exports it here, where transport takes it from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectorHealthRow {
    pub connector: String,
    pub state: BreakerState,
    pub counts: Counts,
    pub open_until_ms: i64,
    pub over: Option<OverrideUntil>,
}

/// Every (merchant, connector) breaker this process knows; shared as
/// `Arc<Breakers>`.
#[derive(Debug, Default)]
pub struct Breakers;

impl Breakers {
    /// The breaker's veto for each candidate of one GetPin of `merchant`
    /// (draws the half-open probe once per call, lazily).
    pub fn veto_for<'a>(
        &'a self,
        _merchant: &'a MerchantId,
    ) -> impl FnMut(&str) -> Option<VetoReason> + 'a {
        |_| None
    }

    /// Counts one answered RecordOutcome (not a duplicate) for its
    /// (merchant, connector) breaker.
    pub fn count(&self, _merchant: &MerchantId, _connector: &Connector, _failed: bool) {}

    /// Every connector of `merchant` with a breaker state, counts or an
    /// override, read from Redis, in bytewise connector order.
    pub async fn health(
        &self,
        _merchant: &MerchantId,
        _deadline: Instant,
    ) -> Result<Vec<ConnectorHealthRow>, StorageError> {
        Ok(Vec::new())
    }

    /// Sets `connector`'s override for a while; `None` clears it.
    pub async fn set_override(
        &self,
        _merchant: &MerchantId,
        _connector: &Connector,
        _over: Option<(Override, Duration)>,
        _deadline: Instant,
    ) -> Result<(), StorageError> {
        Ok(())
    }
}
