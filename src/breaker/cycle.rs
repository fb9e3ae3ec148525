//! The breaker's background cycle: every [`TICK`], one script per Redis
//! shard (`domain::shards`) appends this instance's CLOSED counts of the
//! shard's merchants to the shard's counts log, reads back every
//! instance's appends since its last read, adds the half-open probes into
//! their hashes and polls the shard's index; the log folds into the
//! windows ([`super::window`]), and the transitions the windows and the
//! probes call for are decided with the domain's rules and written, one
//! script per shard that has any, each with its index entry; then the
//! polls replace the view, and the transitions time made (OPEN →
//! HALF-OPEN, an undecided HALF-OPEN → CLOSED), which each poll that saw
//! one first reports, are logged and counted. So a tick costs at most
//! 2 × [`SHARDS`] background calls (a few more with many probing
//! merchants), however many merchants have counts, and every transition
//! is logged and counted once.
//!
//! Its bound on "every instance sees a transition within 2 s": the calls
//! that trip a breaker wait at most one tick in memory and the spread of
//! the shards' calls over it (`domain::shards::SPREAD`, 250 ms), the
//! transition is written in that tick, and every other instance reads it
//! at its next poll of the shard, at most one tick later, so 1.25 s plus
//! three round trips.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::Breakers;
use super::decide::{Planned, decide_probes, decide_window};
use super::own_changes::Change;
use super::window::Folded;
use crate::domain::breaker::{BreakerState, Counts, Tripped, state_at};
use crate::domain::shards::{SHARDS, SPREAD, Shard, shard_of};
use crate::domain::tenant::Tenant;
use crate::process::unix_millis;
use crate::storage::{
    BreakerTransition, IndexEntry, MerchantTallies, PlannedTransition, ShardLog, ShardTick,
    StorageError, TimeTransition, log_frames, probing,
};

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
    // The first tick reads every shard at once: until a shard is read, its
    // breakers (an override this instance sets included) are not acted on
    // (`Snapshot::fresh`), so a starting instance should not wait for the
    // spread.
    let mut spread = Duration::ZERO;
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            () = stop.cancelled() => {
                // The calls answered before the shutdown still count, and
                // go at once.
                tick(&breakers, Duration::ZERO).await;
                return;
            }
        }
        tick(&breakers, spread).await;
        spread = SPREAD;
        seen.observe(&breakers);
    }
}

/// One tick: every shard, their calls spread over `spread`.
pub(super) async fn tick(breakers: &Arc<Breakers>, spread: Duration) {
    let now = unix_millis();
    let settings = breakers.settings;
    let mut due: Vec<Vec<Folded>> = (0..SHARDS).map(|_| Vec::new()).collect();
    for (tenant, merchant, connector) in breakers.rechecks.take_due(now) {
        let shard = shard_of(&tenant, &merchant);
        due[shard.index()].push((
            tenant,
            merchant.as_str().to_owned(),
            connector.as_str().to_owned(),
        ));
    }
    // The tick's own CPU work (taking every tally, encoding, folding) runs
    // on the blocking pool, not on a runtime worker: at 100,000 merchants
    // it is milliseconds a tick, and on a worker every call queued behind
    // it waited as long (p99, bench/README.md "Platform scale").
    let taken = off_the_workers(breakers, |breakers| {
        breakers
            .pending
            .take()
            .into_iter()
            .map(|merchants| {
                let frames = log_frames(&merchants);
                let probing = probing(&merchants);
                (merchants, frames, probing)
            })
            .collect::<Vec<_>>()
    })
    .await
    .unwrap_or_default();
    let start = Instant::now();
    // Taken before the reads: this instance's changes after it may be
    // missing from the answers, and are applied over them.
    let seen = breakers.view.own_changes_seen();
    let mut shards = JoinSet::new();
    for ((shard, (merchants, frames, probing)), due) in Shard::all().zip(taken).zip(due) {
        let breakers = breakers.clone();
        let at = start + shard.offset_in(spread);
        shards.spawn(async move {
            tokio::time::sleep_until(at.into()).await;
            let deadline = Instant::now() + STEP_DEADLINE;
            // The CLOSED counts go to the shard's log; only the probes of
            // HALF-OPEN breakers go into their merchants' hashes.
            let log = ShardLog {
                frames,
                append_period: settings.bucket_of(now),
                reads: breakers.windows.reads(shard, now, &settings),
            };
            let answer = breakers
                .store
                .breaker_tick(shard, &log, &probing, now, &settings, deadline)
                .await;
            match answer {
                Ok(answer) => {
                    let consumed: Vec<u64> = answer.log.iter().map(|read| read.consumed).collect();
                    breakers
                        .windows
                        .advance(shard, &log.reads, &consumed, now, &settings);
                    Some((
                        shard,
                        act(&breakers, shard, &probing, answer, due, now).await,
                    ))
                }
                Err(error) => {
                    if error.is_background_failure() {
                        breakers.io_failed("flush", &error);
                    }
                    // Nothing applied (shed on a full background lane, no
                    // connection, a failover): the counts wait for the
                    // next tick instead of being lost.
                    if matches!(error, StorageError::Unavailable { .. }) {
                        breakers.pending.put_back(merchants);
                    }
                    None
                }
            }
        });
    }
    let mut polls = Vec::with_capacity(SHARDS);
    while let Some(joined) = shards.join_next().await {
        if let Ok(Some(poll)) = joined {
            polls.push(poll);
        }
    }
    off_the_workers(breakers, move |breakers| {
        breakers.windows.prune(now, &settings);
    })
    .await;
    let dropped = breakers
        .view
        .replace(polls, now, breakers.settings.max_tracked, seen);
    if dropped > 0 && breakers.bound_log.due() {
        tracing::warn!(
            dropped,
            max_tracked = breakers.settings.max_tracked,
            "more breakers are tripped or overridden than STICKY_ROUTING_BREAKER_MAX_TRACKED; \
             the HALF-OPEN ones past it read as CLOSED on this instance (every OPEN and \
             overridden one is kept; logged every 30 s)"
        );
    }
}

/// `work` on the runtime's blocking pool, one piece of the tick's work at
/// a time (`process::off_the_workers`).
async fn off_the_workers<T: Send + 'static>(
    breakers: &Arc<Breakers>,
    work: impl FnOnce(&Breakers) -> T + Send + 'static,
) -> Option<T> {
    let held = breakers.clone();
    crate::process::off_the_workers(&breakers.tick_cpu, move || work(&held)).await
}

/// A breaker's ids as one key: tenant, merchant and connector, each ended
/// by a 0 byte (no id holds one).
fn join(tenant: &Tenant, merchant: &str, connector: &str) -> String {
    let mut key = String::new();
    join_into(&mut key, tenant, merchant, connector);
    key
}

fn join_into(key: &mut String, tenant: &Tenant, merchant: &str, connector: &str) {
    for id in [tenant.as_str(), merchant, connector] {
        key.push_str(id);
        key.push('\0');
    }
}

/// Acts on one shard's answer: folds the log it read into the windows,
/// and writes the transitions the windows and the probes call for, in one
/// call; logs the transitions time made. The shard's index entries, for
/// the view.
async fn act(
    breakers: &Arc<Breakers>,
    shard: Shard,
    merchants: &[MerchantTallies],
    answer: ShardTick,
    due: Vec<Folded>,
    now: i64,
) -> Vec<IndexEntry> {
    let settings = &breakers.settings;
    let mut planned = Vec::new();
    let mut unwritten = Vec::new();
    for (merchant, reply) in merchants.iter().zip(answer.merchants) {
        match reply {
            Ok(snapshots) => {
                for snapshot in snapshots {
                    planned.extend(decide_probes(breakers, merchant, snapshot, now));
                }
            }
            Err(error) => {
                if error.is_background_failure() {
                    breakers.io_failed("flush", &error);
                }
                // Nothing of it applied (a later call of the tick that
                // failed, or was never sent): its probes wait for the
                // next tick.
                if matches!(error, StorageError::Unavailable { .. }) {
                    unwritten.push(merchant.clone());
                }
            }
        }
    }
    if !unwritten.is_empty() {
        breakers.pending.put_back(unwritten);
    }
    // A tripped breaker's calls count nowhere, and its window so far goes.
    let tripped: Vec<Folded> = answer
        .index
        .iter()
        .filter(|entry| state_at(entry.tripped.as_ref(), now, settings) != BreakerState::Closed)
        .map(|entry| {
            (
                entry.tenant.clone(),
                entry.merchant.clone(),
                entry.connector.clone(),
            )
        })
        .collect();
    let records: Vec<_> = answer
        .log
        .into_iter()
        .flat_map(|read| read.records)
        .collect();
    let from_windows = off_the_workers(breakers, move |breakers| {
        let settings = &breakers.settings;
        for (tenant, merchant, connector) in &tripped {
            breakers.windows.clear(tenant, merchant, connector);
        }
        // Looked up by one joined key in a buffer: no allocation per
        // record, and none at all while nothing is tripped.
        let joined: HashSet<String> = tripped.iter().map(|(t, m, c)| join(t, m, c)).collect();
        let mut key = String::new();
        let mut is_tripped = |t: &Tenant, m: &str, c: &str| {
            if joined.is_empty() {
                return false;
            }
            key.clear();
            join_into(&mut key, t, m, c);
            joined.contains(key.as_str())
        };
        let mut folded = breakers
            .windows
            .fold(records, now, settings, &mut is_tripped);
        folded.extend(due.into_iter().filter(|(t, m, c)| !is_tripped(t, m, c)));
        folded
            .into_iter()
            .filter_map(|(tenant, merchant, connector)| {
                decide_window(breakers, tenant, merchant, connector, now)
            })
            .collect::<Vec<_>>()
    })
    .await;
    planned.extend(from_windows.into_iter().flatten());
    for timed in answer.timed {
        let (from, to) = match timed.kind {
            TimeTransition::HalfOpen => (
                BreakerState::Open {
                    until_ms: timed.tripped.open_until_ms,
                },
                BreakerState::HalfOpen {
                    since_ms: timed.tripped.open_until_ms,
                },
            ),
            TimeTransition::Closed => (
                BreakerState::HalfOpen {
                    since_ms: timed.tripped.open_until_ms,
                },
                BreakerState::Closed,
            ),
        };
        let (tenant, merchant) = (&timed.tenant, timed.merchant.as_str());
        log_transition(
            breakers,
            tenant,
            merchant,
            &timed.connector,
            from,
            to,
            timed.tripped.counts(),
        );
    }
    if !planned.is_empty() {
        write(breakers, shard, planned, now).await;
    }
    answer.index
}

/// Writes one shard's transitions, each with its index entry, and shows
/// and logs the ones made.
async fn write(breakers: &Breakers, shard: Shard, planned: Vec<Planned>, now: i64) {
    let settings = &breakers.settings;
    let plans: Vec<PlannedTransition> = planned.iter().map(|p| p.plan.clone()).collect();
    let deadline = Instant::now() + STEP_DEADLINE;
    let made = match breakers
        .store
        .breaker_transitions(shard, &plans, now, settings, deadline)
        .await
    {
        Ok(made) => made,
        Err(error) => {
            breakers.io_failed("transition", &error);
            return;
        }
    };
    for (planned, made) in planned.into_iter().zip(made) {
        let Planned { plan, from, counts } = planned;
        let tripped: Option<Tripped> = match made {
            // Another instance got there first: its transition is in the index.
            Ok(None) => continue,
            Ok(Some(tripped)) => match plan.transition {
                BreakerTransition::Close { .. } => None,
                _ => Some(tripped),
            },
            Err(error) => {
                breakers.io_failed("transition", &error);
                continue;
            }
        };
        let (tenant, merchant) = (&plan.tenant, plan.merchant.as_str());
        if tripped.is_some() {
            breakers.windows.clear(tenant, merchant, &plan.connector);
        }
        breakers.view.update(
            tenant,
            merchant,
            &plan.connector,
            Change::Tripped(tripped),
            settings.max_tracked,
        );
        let to = state_at(tripped.as_ref(), now, settings);
        log_transition(
            breakers,
            tenant,
            merchant,
            &plan.connector,
            from,
            to,
            counts,
        );
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

/// Whether some shards' states had gone stale (fail-open), to say so
/// once, and the open-breakers gauge.
#[derive(Default)]
struct Seen {
    stale: usize,
}

impl Seen {
    fn observe(&mut self, breakers: &Breakers) {
        let now = unix_millis();
        let settings = &breakers.settings;
        let snapshot = breakers.view.load();
        let stale = snapshot.stale_shards(now, settings);
        if stale > 0 && self.stale == 0 {
            tracing::warn!(
                stale,
                shards = SHARDS,
                "some breaker shards' states have not been read from Redis for OPEN_FOR; \
                 their breakers read as CLOSED (fail-open) until Redis answers"
            );
        }
        self.stale = stale;
        let open = snapshot
            .entries()
            .filter(|(_, _, _, entry)| snapshot.fresh(entry, now, settings))
            .filter(|(_, _, _, entry)| {
                matches!(
                    state_at(entry.tripped.as_ref(), now, settings),
                    BreakerState::Open { .. }
                )
            })
            .count();
        breakers.metrics.set_breakers_open(open as u64);
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
