//! Rounds on four lanes at once, so that Redis runs one lane's round while
//! the importer reads another's replies and builds its next one. With a
//! single lane the two take turns, and each waits out the other: the
//! import's wall time was close to the sum of Redis's time and the
//! importer's (bench/README.md, "Import").
//!
//! A customer always goes to the same lane, so its rows keep their file
//! order. Rows are handed to a lane in file order, and a stop (a signal, a
//! file error, or Redis failing on another lane) hands out no more but lets
//! every lane finish what it was given: so every row before the first one
//! not handed out is finished, and none after it was sent, and "resume with
//! --skip N" stays exact. A lane whose round failed in Redis sends nothing
//! more; its unfinished rows make N.

use std::collections::VecDeque;
use std::future::Future;
use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};
use std::pin::Pin;
use std::task::Poll;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::apply::{Applier, Pending};
use super::summary::Tally;
use super::{Batch, Ended, ROUND_ROWS, Run};
use crate::bulk::rows::{FileError, Parsed};
use crate::storage::StorageError;

/// Two already overlap the importer's work with Redis's; four kept Redis
/// busier (about 90 % of the wall time against 85 %) in runs on two cores,
/// with the same rows in flight as two lanes of twice the round.
const LANES: usize = 4;

/// What a lane's round gives back.
struct Finished {
    tally: Tally,
    reports: Vec<String>,
    held: Vec<Pending>,
    result: Result<(), StorageError>,
}

type Running<'a> = Pin<Box<dyn Future<Output = Finished> + 'a>>;

#[derive(Default)]
struct Lane<'a> {
    /// Rows handed to this lane and not yet in a round, in file order.
    queue: VecDeque<Pending>,
    /// Rows of its last round to send again, in file order.
    held: Vec<Pending>,
    running: Option<Running<'a>>,
    /// Its round failed in Redis: it sends nothing more.
    failed: bool,
}

impl Lane<'_> {
    /// Whether it has a round out, or rows waiting for one.
    fn busy(&self) -> bool {
        self.running.is_some() || !self.queue.is_empty() || !self.held.is_empty()
    }

    /// The next round: the held rows first (they come first in the file
    /// for their customers), then queued ones.
    fn take_round(&mut self) -> Vec<Pending> {
        let mut round = std::mem::take(&mut self.held);
        let room = ROUND_ROWS.saturating_sub(round.len()).min(self.queue.len());
        round.extend(self.queue.drain(..room));
        round
    }
}

/// The lane of a customer's key: fixed for the whole run.
fn lane_of(key: &str) -> usize {
    let hash = BuildHasherDefault::<DefaultHasher>::default().hash_one(key);
    (hash % LANES as u64) as usize
}

impl Run {
    /// Applies every row until the file ends, a signal stops it (after the
    /// rows already handed to a lane are finished), or Redis fails.
    pub(super) async fn apply_all(
        &mut self,
        applier: &Applier<'_>,
        batches: &mut mpsc::Receiver<Batch>,
        stop: &CancellationToken,
    ) -> Ended {
        let mut lanes: Vec<Lane<'_>> = (0..LANES).map(|_| Lane::default()).collect();
        let mut file_error: Option<FileError> = None;
        let mut redis_error: Option<StorageError> = None;
        loop {
            let stopping = stop.is_cancelled() || file_error.is_some() || redis_error.is_some();
            for lane in 0..LANES {
                if lanes[lane].running.is_some() || lanes[lane].failed {
                    continue;
                }
                if !stopping
                    && let Err(error) = self.hand_out(&mut lanes, lane, batches, stop).await
                {
                    file_error = Some(error);
                }
                let round = lanes[lane].take_round();
                if !round.is_empty() {
                    lanes[lane].running = Some(Box::pin(run_round(applier, round)));
                }
            }
            let Some((lane, finished)) = next_finished(&mut lanes).await else {
                let resume = self.resume_point(&lanes);
                return match (redis_error, file_error) {
                    (Some(error), _) => Ended::RedisFailed { error, resume },
                    (None, Some(error)) => Ended::FileFailed { error, resume },
                    // The signal may have come while `hand_out` waited.
                    (None, None) if stopping || stop.is_cancelled() => {
                        Ended::Interrupted { resume }
                    }
                    (None, None) => Ended::Complete,
                };
            };
            self.tally.absorb(&finished.tally);
            for line in &finished.reports {
                self.progress.println(line);
            }
            self.progress.update(self.tally.rows());
            lanes[lane].held = finished.held;
            if let Err(error) = finished.result {
                lanes[lane].failed = true;
                redis_error.get_or_insert(error);
            }
        }
    }

    /// Hands rows read so far to their lanes until `lane` has a round's
    /// worth or some lane has too much waiting. Waits for the reader only
    /// when nothing else could go on meanwhile.
    async fn hand_out(
        &mut self,
        lanes: &mut [Lane<'_>],
        lane: usize,
        batches: &mut mpsc::Receiver<Batch>,
        stop: &CancellationToken,
    ) -> Result<(), FileError> {
        loop {
            // A signal hands out nothing more (see the top of this file).
            if stop.is_cancelled() {
                return Ok(());
            }
            let wanted = lanes[lane].held.len() + lanes[lane].queue.len();
            if wanted >= ROUND_ROWS || lanes.iter().any(|l| l.queue.len() >= 2 * ROUND_ROWS) {
                return Ok(());
            }
            match self.buffer.pop_front() {
                Some((index, Parsed::Row(row))) => {
                    let pending = Pending::new(index, row);
                    lanes[lane_of(pending.key())].queue.push_back(pending);
                }
                Some((_, Parsed::Bad { line, reason })) => self.bad_row(line, &reason),
                None if self.reader_done => return Ok(()),
                None if !batches.is_empty() => self.receive(batches, stop).await?,
                // Another lane can go on: with rows queued, or a round out.
                None if wanted > 0 || lanes.iter().any(Lane::busy) => return Ok(()),
                None => self.receive(batches, stop).await?,
            }
        }
    }

    /// The number of leading data rows that are all finished.
    fn resume_point(&self, lanes: &[Lane<'_>]) -> u64 {
        let unfinished = lanes.iter().flat_map(|lane| {
            let held = lane.held.first().map(|p| p.index);
            let queued = lane.queue.front().map(|p| p.index);
            held.into_iter().chain(queued)
        });
        let unread = self.buffer.front().map(|(index, _)| *index);
        unfinished.chain(unread).fold(self.received, u64::min)
    }
}

/// One lane's round, counted on its own tally (the lanes run at once).
async fn run_round(applier: &Applier<'_>, round: Vec<Pending>) -> Finished {
    let mut tally = Tally::default();
    let mut reports = Vec::new();
    let mut held = Vec::new();
    let result = applier
        .apply(round, &mut tally, &mut |line| reports.push(line), &mut held)
        .await;
    Finished {
        tally,
        reports,
        held,
        result,
    }
}

/// The next lane to finish its round, or `None` when none is running.
async fn next_finished(lanes: &mut [Lane<'_>]) -> Option<(usize, Finished)> {
    if lanes.iter().all(|lane| lane.running.is_none()) {
        return None;
    }
    let finished = std::future::poll_fn(|cx| {
        for (index, lane) in lanes.iter_mut().enumerate() {
            if let Some(running) = lane.running.as_mut()
                && let Poll::Ready(finished) = running.as_mut().poll(cx)
            {
                lane.running = None;
                return Poll::Ready((index, finished));
            }
        }
        Poll::Pending
    })
    .await;
    Some(finished)
}
