//! The connector circuit breaker's engine: one breaker per (tenant,
//! merchant, connector), fed by RecordOutcome, read by GetPin, kept in two
//! tiers. Two tenants with the same merchant and connector ids never share
//! a breaker (contract v1.2, "Tenants"): their tallies, states and
//! overrides are apart in memory as in Redis, with the same settings.
//!
//! Tier 2 is Redis, where every instance's counts meet and where the state
//! lives (`storage`'s breaker scripts); tier 1 is this process's memory,
//! so that neither RPC pays a Redis round trip for the breaker:
//! - RecordOutcome adds its call to a tally in memory ([`pending`]);
//! - GetPin reads the states from a snapshot in memory ([`view`]);
//! - one background task ([`cycle`]) moves both, every [`cycle::TICK`]:
//!   per Redis shard (`domain::shards`, a fixed number), one script
//!   appends the CLOSED counts of the shard's merchants to the shard's
//!   counts log and reads back every instance's appends since the last
//!   read, which fold into the windows held in memory ([`window`]); it
//!   also adds the half-open probes into their merchants' hashes, and
//!   reads back the shard's index of every breaker that is not plainly
//!   CLOSED. The transitions are decided with the domain's rules and
//!   written, with their index entries, in one more script per shard that
//!   has any. So a transition made by any instance is seen by every
//!   instance within two ticks, and the background cost is bounded by the
//!   shards, not by the merchants (issue 41: at 20,000 merchants a script
//!   per merchant per tick filled the request path's Redis slots), and
//!   Redis's by the bytes of the counts, not by a command per merchant.
//!
//! It fails open: a flush that fails loses its tallies (counts are a
//! signal, not a record), and a shard that Redis has not answered for
//! OPEN_FOR has its breakers read as CLOSED. No RPC waits on the breaker.
//!
//! Polling alone carries transitions between instances: a shard's index is
//! read by the same script that flushes it, every tick, so there is no
//! pub/sub message to lose and nothing to resubscribe after a reconnect.

mod cycle;
mod decide;
mod own_changes;
mod pending;
mod rechecks;
mod view;
mod window;

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::domain::breaker::{
    BreakerSettings, BreakerState, CountInto, Override, OverrideUntil, Share, VetoReason,
    breaker_veto, count_into, state_at,
};
use crate::domain::ids::{Connector, MerchantId};
use crate::domain::tenant::Tenant;
use crate::process::unix_millis;
pub use crate::storage::ConnectorHealthRow;
use crate::storage::{RedisStore, StorageError};
use crate::telemetry::{LogThrottle, Metrics};
use own_changes::Change;
use pending::Pending;
use rechecks::Rechecks;
use view::View;
use window::Windows;

/// The breakers of every (tenant, merchant, connector) this process serves.
pub struct Breakers {
    store: RedisStore,
    settings: BreakerSettings,
    metrics: Arc<Metrics>,
    pending: Pending,
    windows: Windows,
    view: View,
    rechecks: Rechecks,
    /// Failed breaker reads and writes: a line every 30 s at most.
    failure_log: LogThrottle,
    /// Breakers past `MAX_TRACKED` in the view: a line every 30 s at most.
    bound_log: LogThrottle,
    /// The tick's CPU work takes this to run, one piece at a time
    /// (`cycle::off_the_workers`).
    tick_cpu: tokio::sync::Semaphore,
}

impl Breakers {
    pub fn new(store: RedisStore, settings: BreakerSettings, metrics: Arc<Metrics>) -> Self {
        Self {
            pending: Pending::new(settings.max_tracked),
            windows: Windows::new(settings.max_tracked),
            view: View::default(),
            rechecks: Rechecks::new(settings.max_tracked),
            failure_log: LogThrottle::new(cycle::LOG_FAILURES_EVERY),
            bound_log: LogThrottle::new(cycle::LOG_FAILURES_EVERY),
            tick_cpu: tokio::sync::Semaphore::new(1),
            store,
            settings,
            metrics,
        }
    }

    /// Starts the background cycle. It ends when `stop` is cancelled, after
    /// one last flush, so the counts of the calls answered before a
    /// shutdown still reach Redis; await the handle before closing the store.
    pub fn start(self: &Arc<Self>, stop: CancellationToken) -> JoinHandle<()> {
        tokio::spawn(cycle::run(self.clone(), stop))
    }

    /// The breaker's veto for each candidate of one GetPin of `tenant`'s
    /// `merchant`. Nothing is read from Redis and nothing allocated; while
    /// no breaker is tripped or overridden it costs no lookup at all, and
    /// no clock read; otherwise a lookup per candidate, which hashes no
    /// tenant for the default one. The half-open probe is drawn at most once per GetPin,
    /// and only when a candidate is HALF-OPEN.
    pub fn veto_for<'a>(
        &'a self,
        tenant: &'a Tenant,
        merchant: &'a MerchantId,
    ) -> impl FnMut(&str) -> Option<VetoReason> + 'a {
        let snapshot = self.view.load();
        let mut now_ms = None;
        let mut probe = None;
        move |connector| {
            let entry = *snapshot.entry(tenant, merchant.as_str(), connector)?;
            let now = *now_ms.get_or_insert_with(unix_millis);
            if !snapshot.fresh(&entry, now, &self.settings) {
                return None;
            }
            let state = state_at(entry.tripped.as_ref(), now, &self.settings);
            let probe_now = matches!(state, BreakerState::HalfOpen { .. })
                && *probe.get_or_insert_with(|| draw(self.settings.probe_share));
            breaker_veto(state, entry.over, now, probe_now)
        }
    }

    /// Counts one answered RecordOutcome for its (tenant, merchant,
    /// connector) breaker: where it goes (a window bucket, the half-open
    /// probes, or nowhere while OPEN) is decided by this instance's view now.
    pub fn count(
        &self,
        tenant: &Tenant,
        merchant: &MerchantId,
        connector: &Connector,
        failed: bool,
    ) {
        let now = unix_millis();
        let snapshot = self.view.load();
        let tripped = snapshot
            .entry(tenant, merchant.as_str(), connector.as_str())
            .filter(|entry| snapshot.fresh(entry, now, &self.settings))
            .and_then(|entry| entry.tripped);
        let state = state_at(tripped.as_ref(), now, &self.settings);
        let into = count_into(state, now, &self.settings);
        if into != CountInto::Nowhere {
            self.pending.add(tenant, merchant, connector, into, failed);
        }
    }

    /// Every connector of `tenant`'s `merchant` with a state, counts in the
    /// current window or an override, read from Redis (not from this
    /// instance). Another tenant's breakers of the same merchant id are not
    /// this merchant's.
    pub async fn health(
        &self,
        tenant: &Tenant,
        merchant: &MerchantId,
        deadline: Instant,
    ) -> Result<Vec<ConnectorHealthRow>, StorageError> {
        let now = unix_millis();
        let windows = self
            .windows
            .of_merchant(tenant, merchant.as_str(), now, &self.settings);
        let result = self
            .store
            .breaker_health(tenant, merchant, &windows, now, &self.settings, deadline)
            .await;
        if result.is_err() {
            self.metrics.breaker_io_failure("health");
        }
        result
    }

    /// Sets `over` for `ttl` on `tenant`'s (merchant, connector) breaker, or
    /// clears the override (`None`). This instance sees it at once, every
    /// other within a tick or two.
    pub async fn set_override(
        &self,
        tenant: &Tenant,
        merchant: &MerchantId,
        connector: &Connector,
        over: Option<(Override, Duration)>,
        deadline: Instant,
    ) -> Result<(), StorageError> {
        let now = unix_millis();
        let over = over.map(|(kind, ttl)| OverrideUntil {
            kind,
            until_ms: now.saturating_add(i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX)),
        });
        let result = self
            .store
            .set_override(tenant, merchant, connector.as_str(), over, now, deadline)
            .await;
        match result {
            Ok(()) => {
                self.view.update(
                    tenant,
                    merchant.as_str(),
                    connector.as_str(),
                    Change::Override(over),
                    self.settings.max_tracked,
                );
                Ok(())
            }
            Err(error) => {
                self.metrics.breaker_io_failure("override");
                Err(error)
            }
        }
    }
}

/// True for about `share` of calls: the half-open probe's draw. The
/// standard library's hash keys differ for every `RandomState`, which is
/// random enough to spread probes and needs no generator to seed or share.
fn draw(share: Share) -> bool {
    use std::hash::{BuildHasher, Hasher};
    let random = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    random % 1_000_000 < u64::from(share.ppm())
}
