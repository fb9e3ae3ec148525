//! The experiment counts' background cycle: every [`TICK`], flush the
//! tallies to Redis, one script call per Redis shard (`domain::shards`)
//! that has counts, all at once, however many merchants have counts; a
//! last flush when the service stops.
//!
//! Its bound on "visible to a report within 2 s of the calls' answers": a
//! count waits at most one tick in memory, then one script call (bounded
//! by [`STEP_DEADLINE`]).
//!
//! A flush that certainly wrote nothing (Redis refused it, or it never
//! left: no connection, a failover's fence) puts its counts back for the
//! next tick, so a short outage loses none; one that may have written (no
//! answer) does not, since counting again could count twice: the counts
//! may then miss some outcomes, never count one twice.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::Experiments;
use crate::domain::shards::{SHARDS, Shard, shard_of};
use crate::storage::{ExperimentEntry, StorageError};

/// How often tallies are flushed.
pub(super) const TICK: Duration = Duration::from_millis(500);
/// The longest one flush may take.
const STEP_DEADLINE: Duration = Duration::from_secs(1);
/// A failing Redis is logged at most this often (`/metrics` counts each).
pub(super) const LOG_FAILURES_EVERY: Duration = Duration::from_secs(30);

pub(super) async fn run(experiments: Arc<Experiments>, stop: CancellationToken) {
    let mut ticker = tokio::time::interval(TICK);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            () = stop.cancelled() => {
                // The calls answered before the shutdown still count.
                flush(&experiments).await;
                return;
            }
        }
        flush(&experiments).await;
    }
}

/// Sends every tally, one script per shard, all at once.
pub(super) async fn flush(experiments: &Arc<Experiments>) {
    let dropped = experiments.tally.take_dropped();
    if dropped > 0 {
        experiments
            .metrics
            .experiment_io_failures("overflow", dropped);
        experiments.log_failure(&format!(
            "{dropped} experiment outcomes were not counted: more than {} (tenant, \
             merchant)s were waiting to be written at once",
            super::tally::MAX_MERCHANTS
        ));
    }
    let taken = experiments.tally.take();
    if taken.is_empty() {
        return;
    }
    let mut by_shard: Vec<Vec<ExperimentEntry>> = (0..SHARDS).map(|_| Vec::new()).collect();
    for (tenant, merchant, day, counts) in taken {
        by_shard[shard_of(&tenant, &merchant).index()].push(ExperimentEntry {
            tenant,
            merchant,
            day,
            counts,
        });
    }
    let deadline = Instant::now() + STEP_DEADLINE;
    let mut flushes = JoinSet::new();
    for (shard, entries) in Shard::all().zip(by_shard) {
        if entries.is_empty() {
            continue;
        }
        let experiments = experiments.clone();
        flushes.spawn(async move {
            let result = experiments
                .store
                .flush_experiment(shard, &entries, experiments.retention, deadline)
                .await;
            match result {
                Ok(answers) => {
                    for (entry, answer) in entries.iter().zip(answers) {
                        if let Err(error) = answer {
                            experiments.failed(entry, &error);
                        }
                    }
                }
                Err(error) => {
                    for entry in &entries {
                        experiments.put_back_unwritten(entry, &error);
                    }
                    // A shed flush is counted as shed, not as a failure.
                    if error.is_background_failure() {
                        experiments.io_failed("flush", &error);
                    }
                }
            }
        });
    }
    while flushes.join_next().await.is_some() {}
}

impl Experiments {
    /// One hash Redis did not write: counted, and put back.
    /// (Not counted as failed: shed on a full background lane, counted as
    /// shed; or never sent, after an earlier call of the flush failed.)
    fn failed(&self, entry: &ExperimentEntry, error: &StorageError) {
        self.put_back_unwritten(entry, error);
        if error.is_background_failure() {
            self.io_failed("flush", error);
        }
    }

    /// Counts that certainly were not written (Redis refused them, or they
    /// never left) are put back for the next tick.
    fn put_back_unwritten(&self, entry: &ExperimentEntry, error: &StorageError) {
        if matches!(error, StorageError::Unavailable { .. }) {
            self.tally
                .put_back(&entry.tenant, &entry.merchant, entry.day, &entry.counts);
        }
    }

    /// Counts a failed experiment read or write, and logs it when Redis
    /// has not failed the experiment lately.
    pub(super) fn io_failed(&self, op: &'static str, error: &StorageError) {
        self.metrics.experiment_io_failures(op, 1);
        self.log_failure(&format!(
            "an experiment count {op} failed: {error}; RecordOutcome is unaffected (further \
             failures are counted in sticky_routing_experiment_io_failures_total, logged \
             every 30 s)"
        ));
    }

    fn log_failure(&self, message: &str) {
        if self.failure_log.due() {
            tracing::warn!("{message}");
        }
    }
}
