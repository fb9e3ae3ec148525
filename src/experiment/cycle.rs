//! The experiment counts' background cycle: every [`TICK`], push the
//! tallies onto the shards' counts logs, one script call per Redis shard
//! (`domain::shards`) that has counts, spread over the tick, however many
//! merchants have counts, and move each shard's compaction on a step
//! (`compact.rs`); a last push when the service stops.
//!
//! Its bound on "visible to a report within 2 s of the calls' answers": a
//! count waits at most one tick in memory and the spread (250 ms), then
//! one script call (bounded by [`STEP_DEADLINE`]); GetUplift and the
//! report read the logs.
//!
//! Its bound on calls per tick, whatever the merchants: per shard, one
//! push (or, every `compact::ASK_EVERY` when this instance has nothing to
//! push, one question), one read of a batch and one chunk added: at most
//! 48 calls a tick, 96 a second.
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
use super::compact::Step;
use crate::domain::shards::{SHARDS, SPREAD, Shard, shard_of};
use crate::storage::{
    ExperimentBatch, ExperimentEntry, ExperimentLog, StorageError, experiment_frame,
};

/// How often tallies are flushed.
pub(super) const TICK: Duration = Duration::from_millis(500);
/// The longest one flush may take.
const STEP_DEADLINE: Duration = Duration::from_secs(1);
/// A failing Redis is logged at most this often (`/metrics` counts each).
pub(super) const LOG_FAILURES_EVERY: Duration = Duration::from_secs(30);

pub(super) async fn run(experiments: Arc<Experiments>, stop: CancellationToken) {
    let mut ticker = tokio::time::interval(TICK);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The first tick (asking where each log stands) at once, as the
    // breaker's: a starting instance learns the logs' state before calls.
    let mut spread = Duration::ZERO;
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            () = stop.cancelled() => {
                // The calls answered before the shutdown still count.
                flush(&experiments, true, Duration::ZERO).await;
                return;
            }
        }
        flush(&experiments, false, spread).await;
        spread = SPREAD;
    }
}

/// Pushes every tally onto its shard's log, one script per shard, their
/// calls spread over `spread`, and moves each shard's compaction on a
/// step; with `last` (the service stopping), only pushes.
pub(super) async fn flush(experiments: &Arc<Experiments>, last: bool, spread: Duration) {
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
    let start = Instant::now();
    // The tick's CPU work (taking the tallies, encoding the frames) on the
    // blocking pool, as the breaker's. `None` (the runtime stopping): the
    // work never ran, so nothing was taken.
    let held = experiments.clone();
    let work = move || frames(&held);
    let Some(framed) = crate::process::off_the_workers(&experiments.tick_cpu, work).await else {
        return;
    };
    let mut shards = JoinSet::new();
    for (shard, (entries, frame)) in Shard::all().zip(framed) {
        let ask = !last && experiments.compactions.wants_to_ask(shard, Instant::now());
        if frame.is_none() && !ask {
            continue;
        }
        // Half a step after the breaker's call of the same shard.
        let at = start + shard.offset_in(spread) + spread / (2 * SHARDS as u32);
        let experiments = experiments.clone();
        shards.spawn(async move {
            tokio::time::sleep_until(at.into()).await;
            let deadline = Instant::now() + STEP_DEADLINE;
            let pushed = experiments
                .store
                .append_experiment(
                    shard,
                    frame,
                    experiments.retention,
                    crate::process::unix_millis(),
                    deadline,
                )
                .await;
            match pushed {
                Ok(state) if !last => compact(&experiments, shard, &state, deadline).await,
                Ok(_) => {}
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
    while shards.join_next().await.is_some() {}
}

/// Every tally taken, by shard, each shard's with its frame (`None` for
/// a shard with none).
fn frames(experiments: &Experiments) -> Vec<(Vec<ExperimentEntry>, Option<Vec<u8>>)> {
    let mut by_shard: Vec<Vec<ExperimentEntry>> = (0..SHARDS).map(|_| Vec::new()).collect();
    for (tenant, merchant, day, counts) in experiments.tally.take() {
        by_shard[shard_of(&tenant, &merchant).index()].push(ExperimentEntry {
            tenant,
            merchant,
            day,
            counts,
        });
    }
    by_shard
        .into_iter()
        .map(|entries| {
            let frame = experiment_frame(&entries);
            (entries, frame)
        })
        .collect()
}

/// One step of `shard`'s compaction (`compact.rs` plans it): at most one
/// read of a batch and one chunk added.
async fn compact(
    experiments: &Experiments,
    shard: Shard,
    state: &ExperimentLog,
    deadline: Instant,
) {
    let compactions = &experiments.compactions;
    let now_ms = crate::process::unix_millis();
    let (number, frames, chunk, known) =
        match compactions.plan(shard, state, Instant::now(), now_ms) {
            Step::Nothing => return,
            Step::Begin { batch, frames } => (batch, frames, 0, None),
            Step::Continue { batch, adding } => {
                (batch, adding.frames, adding.next, Some(adding.chunks))
            }
        };
    let held = known.and_then(|chunks| {
        compactions
            .held_chunk(shard, number, frames, chunks, chunk)
            .map(|entries| (chunks, entries))
    });
    let (chunks, entries) = match held {
        Some(held) => held,
        None => {
            let read = experiments
                .store
                .read_experiment_batch(shard, frames, deadline)
                .await;
            let read = match read {
                Ok(read) if read.len() as u64 == frames => read,
                Ok(_) => return, // trimmed meanwhile: the next tick asks again
                Err(error) => return experiments.compact_failed(&error),
            };
            // Up to BATCH_FRAMES frames to read and add up: on the blocking
            // pool, not a worker that calls wait behind.
            let Some(batch) = crate::process::off_the_workers(&experiments.batch_cpu, move || {
                ExperimentBatch::of(&read)
            })
            .await
            else {
                return;
            };
            if batch.unreadable > 0 {
                experiments
                    .metrics
                    .experiment_io_failures("unreadable", batch.unreadable);
            }
            let chunks = batch.chunks.len() as u64;
            if known.is_some_and(|known| known != chunks) {
                experiments.log_failure(&format!(
                    "the experiment counts log of shard {} is split in {known:?} chunks by \
                     another instance, {chunks} here; its batch waits for that instance",
                    shard.index()
                ));
                return;
            }
            let entries = batch
                .chunks
                .get(chunk as usize)
                .cloned()
                .unwrap_or_default();
            compactions.hold(shard, number, frames, batch);
            (chunks, entries)
        }
    };
    let done = experiments
        .store
        .compact_experiment(
            shard,
            number,
            frames,
            chunks,
            chunk,
            &entries,
            experiments.retention,
            now_ms,
            deadline,
        )
        .await;
    match done {
        Ok(done) if done.added => {
            for error in done.answers.iter().filter_map(|a| a.as_ref().err()) {
                experiments.io_failed("compact", error);
            }
            if done.state.adding.is_none() {
                compactions.drop_held(shard);
            } else {
                compactions.drive_held(shard);
            }
        }
        // Another instance added it: hold the batch only while it is this
        // one (to take it over if that instance stops).
        Ok(done) if done.state.batch == number && done.state.adding.is_some() => {}
        Ok(_) => compactions.drop_held(shard),
        Err(error) => experiments.compact_failed(&error),
    }
}

impl Experiments {
    /// A compaction step that failed: counted and logged (throttled); the
    /// next tick tries again (the script adds each chunk once).
    fn compact_failed(&self, error: &StorageError) {
        if error.is_background_failure() {
            self.io_failed("compact", error);
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
