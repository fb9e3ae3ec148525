//! The breaker's background cycle: every [`TICK`], flush the tallies to
//! Redis, decide and write the transitions they cause, then poll the index
//! into the view, and log what time alone changed (OPEN → HALF-OPEN, an
//! undecided HALF-OPEN → CLOSED).
//!
//! Its bound on "every instance sees a transition within 2 s": the calls
//! that trip a breaker wait at most one tick in memory, the transition is
//! written in that tick's flush, and every other instance reads it at its
//! next poll, at most one tick later, so two ticks (1 s) plus two round
//! trips.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::Breakers;
use super::own_changes::Change;
use crate::domain::breaker::{
    BreakerState, Counts, ProbeVerdict, Tripped, probes_decide, state_at, trips,
};
use crate::domain::ids::MerchantId;
use crate::domain::tenant::Tenant;
use crate::process::unix_millis;
use crate::storage::{BreakerTransition, ConnectorSnapshot, StorageError};

/// How often tallies are flushed and the index is read.
pub(super) const TICK: Duration = Duration::from_millis(500);
/// The longest one step of a tick may take.
const STEP_DEADLINE: Duration = Duration::from_secs(1);
/// A failing Redis is logged at most this often (`/metrics` counts each).
pub(super) const LOG_FAILURES_EVERY: Duration = Duration::from_secs(30);

pub(super) async fn run(breakers: Arc<Breakers>, stop: CancellationToken) {
    let mut ticker = tokio::time::interval(TICK);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut seen = Seen::default();
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            () = stop.cancelled() => {
                // The calls answered before the shutdown still count.
                flush(&breakers).await;
                return;
            }
        }
        flush(&breakers).await;
        poll(&breakers).await;
        seen.observe(&breakers);
    }
}

/// Sends every tally, one script per (tenant, merchant), all at once, and
/// acts on what Redis answers.
async fn flush(breakers: &Arc<Breakers>) {
    let by_merchant = breakers.pending.take();
    if by_merchant.is_empty() {
        return;
    }
    let now = unix_millis();
    let deadline = Instant::now() + STEP_DEADLINE;
    let mut flushes = JoinSet::new();
    for (tenant, merchant, tallies) in by_merchant {
        let breakers = breakers.clone();
        flushes.spawn(async move {
            let answer = breakers
                .store
                .flush_breakers(
                    &tenant,
                    &merchant,
                    &tallies,
                    now,
                    &breakers.settings,
                    deadline,
                )
                .await;
            (tenant, merchant, answer)
        });
    }
    while let Some(joined) = flushes.join_next().await {
        let Ok((tenant, merchant, answer)) = joined else {
            continue;
        };
        match answer {
            Ok(snapshots) => {
                for snapshot in snapshots {
                    decide(breakers, &tenant, &merchant, snapshot, now).await;
                }
            }
            Err(error) => breakers.io_failed("flush", &error),
        }
    }
}

/// Learns the breaker's state from a flush's answer and makes the
/// transition the domain's rules call for, if any.
async fn decide(
    breakers: &Breakers,
    tenant: &Tenant,
    merchant: &MerchantId,
    snapshot: ConnectorSnapshot,
    now: i64,
) {
    let settings = &breakers.settings;
    let connector = snapshot.connector.as_str();
    let known = breakers
        .view
        .load()
        .entry(tenant, merchant.as_str(), connector)
        .and_then(|entry| entry.tripped);
    if known != snapshot.tripped {
        breakers.view.update(
            tenant,
            merchant.as_str(),
            connector,
            Change::Tripped(snapshot.tripped),
            settings.max_tracked,
        );
    }
    let state = state_at(snapshot.tripped.as_ref(), now, settings);
    let (transition, from, counts) = match state {
        BreakerState::Closed if trips(snapshot.window, settings) => {
            (BreakerTransition::Trip, state, snapshot.window)
        }
        BreakerState::HalfOpen { since_ms } => match probes_decide(snapshot.probes, settings) {
            Some(ProbeVerdict::Close) => (
                BreakerTransition::Close {
                    open_until_ms: since_ms,
                },
                state,
                snapshot.probes,
            ),
            Some(ProbeVerdict::Reopen) => (
                BreakerTransition::Reopen {
                    open_until_ms: since_ms,
                },
                state,
                snapshot.probes,
            ),
            None => return,
        },
        _ => return,
    };
    let deadline = Instant::now() + STEP_DEADLINE;
    let made = breakers
        .store
        .transition_breaker(
            tenant, merchant, connector, transition, now, settings, deadline,
        )
        .await;
    let tripped: Option<Tripped> = match made {
        // Another instance got there first: its transition is in the index.
        Ok(None) => return,
        Ok(Some(tripped)) => match transition {
            BreakerTransition::Close { .. } => None,
            _ => Some(tripped),
        },
        Err(error) => {
            breakers.io_failed("transition", &error);
            return;
        }
    };
    breakers.view.update(
        tenant,
        merchant.as_str(),
        connector,
        Change::Tripped(tripped),
        settings.max_tracked,
    );
    let to = state_at(tripped.as_ref(), now, settings);
    log_transition(
        breakers,
        tenant,
        merchant.as_str(),
        connector,
        from,
        to,
        counts,
    );
    let indexed = match (transition, tripped) {
        (BreakerTransition::Close { open_until_ms }, _) => breakers
            .store
            .index_clear_trip(tenant, merchant, connector, open_until_ms, deadline)
            .await
            .map(|_removed| ()),
        (_, Some(tripped)) => {
            breakers
                .store
                .index_trip(tenant, merchant, connector, tripped, settings, deadline)
                .await
        }
        (_, None) => Ok(()),
    };
    if let Err(error) = indexed {
        breakers.io_failed("index", &error);
    }
}

/// Reads the index into the view.
async fn poll(breakers: &Breakers) {
    let now = unix_millis();
    let deadline = Instant::now() + STEP_DEADLINE;
    // Taken before the read: this instance's changes after it may be
    // missing from the answer, and are applied over it.
    let seen = breakers.view.own_changes_seen();
    match breakers
        .store
        .poll_breaker_index(now, &breakers.settings, deadline)
        .await
    {
        Ok(entries) => {
            let dropped = breakers
                .view
                .replace(entries, now, breakers.settings.max_tracked, seen);
            if dropped > 0 {
                tracing::warn!(
                    dropped,
                    max_tracked = breakers.settings.max_tracked,
                    "more breakers are tripped or overridden than STICKY_ROUTING_BREAKER_MAX_TRACKED; \
                     the rest read as CLOSED on this instance"
                );
            }
        }
        Err(error) => breakers.io_failed("poll", &error),
    }
}

fn log_transition(
    breakers: &Breakers,
    tenant: &Tenant,
    merchant: &str,
    connector: &str,
    from: BreakerState,
    to: BreakerState,
    counts: Counts,
) {
    // The tenant is in the line, never in the metric's labels (contract
    // v1.2, "Tenants": one series per tenant would be unbounded).
    breakers
        .metrics
        .breaker_transition(from.label(), to.label());
    tracing::info!(
        tenant = %tenant,
        merchant,
        connector,
        from = from.label(),
        to = to.label(),
        calls = counts.calls,
        failures = counts.failures,
        "breaker transition"
    );
}

/// What each breaker of the view was at the last tick, to log the
/// transitions that time makes (no instance writes those) and to keep the
/// open-breakers gauge.
#[derive(Default)]
struct Seen {
    states: HashMap<(Tenant, Box<str>, Box<str>), BreakerState>,
    /// Whether the view had gone stale (fail-open), to say so once.
    stale: bool,
}

impl Seen {
    fn observe(&mut self, breakers: &Breakers) {
        let now = unix_millis();
        let settings = &breakers.settings;
        let snapshot = breakers.view.load();
        let fresh = snapshot.fresh(now, settings);
        if fresh == self.stale {
            self.stale = !fresh;
            if self.stale {
                tracing::warn!(
                    "the breakers' states have not been read from Redis for OPEN_FOR; \
                     every breaker reads as CLOSED (fail-open) until Redis answers"
                );
            }
        }
        let mut states = HashMap::with_capacity(snapshot.len());
        let mut open = 0u64;
        for (tenant, merchant, connector, entry) in snapshot.entries() {
            let state = if fresh {
                state_at(entry.tripped.as_ref(), now, settings)
            } else {
                BreakerState::Closed
            };
            open += u64::from(matches!(state, BreakerState::Open { .. }));
            let key = (
                tenant.clone(),
                Box::<str>::from(merchant),
                Box::<str>::from(connector),
            );
            let before = self.states.get(&key).copied();
            let by_time = match (before, state) {
                (Some(BreakerState::Open { until_ms }), BreakerState::HalfOpen { since_ms }) => {
                    until_ms == since_ms
                }
                (Some(BreakerState::HalfOpen { .. }), BreakerState::Closed) => fresh,
                _ => false,
            };
            if let (true, Some(before), Some(tripped)) = (by_time, before, entry.tripped) {
                log_transition(
                    breakers,
                    tenant,
                    merchant,
                    connector,
                    before,
                    state,
                    tripped.counts(),
                );
            }
            states.insert(key, state);
        }
        self.states = states;
        breakers.metrics.set_breakers_open(open);
    }
}

impl Breakers {
    /// Counts a failed breaker read or write, and logs it when Redis has
    /// not failed the breaker lately.
    fn io_failed(&self, op: &'static str, error: &StorageError) {
        self.metrics.breaker_io_failure(op);
        if self.failure_log.due() {
            tracing::warn!(
                op,
                %error,
                "a breaker read or write failed; the breaker fails open (further failures are \
                 counted in sticky_routing_breaker_io_failures_total, logged every 30 s)"
            );
        }
    }
}
