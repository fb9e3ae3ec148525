//! The experiment counts log's compaction, as each instance drives it
//! (contract v1.2 §4): when a shard's oldest unbatched frame is the batch
//! age old (`experiment_batch_age`, a minute by default), or the log holds
//! [`BATCH_FRAMES`] frames, one
//! instance reads the log's first frames, adds them up per merchant-day
//! and adds them into the day hashes, one chunk a tick
//! (experiment_compact.lua). Every instance splits a batch the same way,
//! and the script adds a chunk only when it is that chunk's turn, so a
//! chunk is added once whichever instance sends it, and an instance that
//! stops half way is taken over.
//!
//! Why a minute: a merchant-day's outcomes of a batch cost Redis one
//! merchant-day's commands, however many they are; at 100,000 merchants
//! and 15,000 outcomes a second, a minute gathers about nine of each
//! merchant's outcomes into one add. The counts wait in the log meanwhile,
//! where GetUplift and the report read them.
//!
//! Its bound per instance and shard and tick: one read of a batch and one
//! chunk (at most 256 merchant-days, `storage`'s `CHUNK_ENTRIES`),
//! whatever the merchants.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::domain::shards::{SHARDS, Shard};
use crate::storage::{ExperimentAdding, ExperimentBatch, ExperimentEntry, ExperimentLog};

/// A batch begins at once when the log holds this many frames; a batch
/// holds at most this many.
pub const BATCH_FRAMES: u64 = 1024;
/// The spread of when each instance begins a due batch, as a share of the
/// batch age: a sixth (10 s of a minute), so instances rarely race.
const BEGIN_SPREAD: u32 = 6;
/// An instance that did not begin a batch takes it over when it has not
/// moved for this long.
const TAKE_OVER_AFTER: Duration = Duration::from_secs(5);
/// A shard this instance pushed nothing to is asked where its log stands
/// this often, so a batch left by a stopped instance still gets added.
pub const ASK_EVERY: Duration = Duration::from_secs(10);

/// What to do with a shard's log this tick.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    Nothing,
    /// Read the first `frames` frames and add chunk 0 of them as batch
    /// `batch`.
    Begin {
        batch: u64,
        frames: u64,
    },
    /// Add chunk `adding.next` of batch `batch`.
    Continue {
        batch: u64,
        adding: ExperimentAdding,
    },
}

/// One instance's view of each shard's compaction.
pub struct Compactions {
    shards: Vec<Mutex<ShardView>>,
    /// Per shard, how long a frame waits before this instance begins a
    /// batch: the batch age, and up to a sixth more.
    wait: Vec<Duration>,
}

#[derive(Default)]
struct ShardView {
    /// When this instance last learnt where the log stands.
    asked: Option<Instant>,
    /// The batch this instance holds, added up.
    batch: Option<Held>,
    /// The batch under way as last seen, and since when it stood there.
    seen: Option<(u64, ExperimentAdding, Instant)>,
    /// When the unbatched frames last seen are due for a batch.
    due: Option<Instant>,
}

struct Held {
    number: u64,
    frames: u64,
    chunks: Vec<Vec<ExperimentEntry>>,
    /// Whether this instance began it (and so drives it without waiting).
    mine: bool,
}

impl Compactions {
    /// Frames wait `batch_age` (and up to a sixth more) before a batch.
    pub fn new(batch_age: Duration) -> Self {
        let random = RandomState::new();
        let spread = u64::try_from((batch_age / BEGIN_SPREAD).as_millis()).unwrap_or(u64::MAX);
        let wait = (0..SHARDS)
            .map(|shard| batch_age + Duration::from_millis(random.hash_one(shard) % spread.max(1)))
            .collect();
        Self {
            shards: (0..SHARDS).map(|_| Mutex::default()).collect(),
            wait,
        }
    }

    fn view(&self, shard: Shard) -> std::sync::MutexGuard<'_, ShardView> {
        // A poisoned view is only a view: take it as it is.
        self.shards[shard.index()]
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether to ask where `shard`'s log stands though this instance has
    /// nothing to push to it.
    pub fn wants_to_ask(&self, shard: Shard, now: Instant) -> bool {
        let view = self.view(shard);
        view.batch.is_some()
            || view.seen.is_some()
            || view.due.is_some_and(|due| due <= now)
            || view
                .asked
                .is_none_or(|at| now.duration_since(at) >= ASK_EVERY)
    }

    /// What to do, now that the log stands at `state`.
    pub fn plan(&self, shard: Shard, state: &ExperimentLog, now: Instant, now_ms: i64) -> Step {
        let mut view = self.view(shard);
        view.asked = Some(now);
        if let Some(adding) = state.adding {
            let moved = view
                .seen
                .is_none_or(|(batch, seen, _)| batch != state.batch || seen != adding);
            if moved {
                view.seen = Some((state.batch, adding, now));
            }
            let since = view.seen.map_or(now, |(_, _, at)| at);
            let mine = view
                .batch
                .as_ref()
                .is_some_and(|held| held.mine && held.number == state.batch);
            if mine || now.duration_since(since) >= TAKE_OVER_AFTER {
                return Step::Continue {
                    batch: state.batch,
                    adding,
                };
            }
            return Step::Nothing;
        }
        view.seen = None;
        view.batch = None;
        let wait = self.wait[shard.index()];
        let age = state
            .since
            .map(|since| Duration::from_millis(u64::try_from(now_ms - since).unwrap_or(0)));
        view.due = match age {
            Some(age) if state.frames > 0 => Some(now + wait.saturating_sub(age)),
            _ => None,
        };
        let aged = age.is_some_and(|age| age >= wait);
        if state.frames > 0 && (aged || state.frames >= BATCH_FRAMES) {
            return Step::Begin {
                batch: state.batch + 1,
                frames: state.frames.min(BATCH_FRAMES),
            };
        }
        Step::Nothing
    }

    /// The chunk `chunk` of the batch this instance holds, if it holds
    /// batch `number` of `frames` frames in `chunks` chunks.
    pub fn held_chunk(
        &self,
        shard: Shard,
        number: u64,
        frames: u64,
        chunks: u64,
        chunk: u64,
    ) -> Option<Vec<ExperimentEntry>> {
        let view = self.view(shard);
        let held = view.batch.as_ref()?;
        let same =
            held.number == number && held.frames == frames && held.chunks.len() as u64 == chunks;
        same.then(|| held.chunks.get(chunk as usize).cloned())
            .flatten()
    }

    /// Holds `batch`, read and added up, as batch `number`.
    pub fn hold(&self, shard: Shard, number: u64, frames: u64, batch: ExperimentBatch) {
        self.view(shard).batch = Some(Held {
            number,
            frames,
            chunks: batch.chunks,
            mine: false,
        });
    }

    /// Forgets the held batch (another instance's won, or it is done).
    pub fn drop_held(&self, shard: Shard) {
        self.view(shard).batch = None;
    }

    /// This instance added a chunk of the batch it holds: it drives the
    /// rest without waiting.
    pub fn drive_held(&self, shard: Shard) {
        if let Some(held) = self.view(shard).batch.as_mut() {
            held.mine = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shard() -> Shard {
        Shard::all().nth(2).unwrap()
    }

    fn state(frames: u64, since: Option<i64>, adding: Option<ExperimentAdding>) -> ExperimentLog {
        ExperimentLog {
            frames,
            batch: 4,
            adding,
            since,
        }
    }

    #[test]
    fn a_batch_begins_when_its_oldest_frame_is_due_or_the_log_is_long() {
        let c = Compactions::new(Duration::from_secs(60));
        let now = Instant::now();
        let due = 70_000;
        let at = 1_000_000_000;
        assert_eq!(
            c.plan(shard(), &state(0, None, None), now, at),
            Step::Nothing
        );
        assert_eq!(
            c.plan(shard(), &state(5, Some(at - 1000), None), now, at),
            Step::Nothing
        );
        // Nothing to push meanwhile: the log is asked about again once due
        // (59 to 69 s on), not only every ASK_EVERY.
        assert!(!c.wants_to_ask(shard(), now + Duration::from_secs(1)));
        assert!(c.wants_to_ask(shard(), now + Duration::from_secs(70)));
        assert_eq!(
            c.plan(shard(), &state(5, Some(at - due), None), now, at),
            Step::Begin {
                batch: 5,
                frames: 5
            }
        );
        assert_eq!(
            c.plan(shard(), &state(BATCH_FRAMES + 9, Some(at), None), now, at),
            Step::Begin {
                batch: 5,
                frames: BATCH_FRAMES
            }
        );
    }

    #[test]
    fn a_batch_under_way_is_driven_by_its_instance_and_taken_over_when_it_stands() {
        let c = Compactions::new(Duration::from_secs(60));
        let start = Instant::now();
        let adding = ExperimentAdding {
            frames: 3,
            chunks: 4,
            next: 1,
        };
        // Not this instance's: it waits while the batch moves.
        let under_way = state(9, None, Some(adding));
        assert_eq!(c.plan(shard(), &under_way, start, 0), Step::Nothing);
        let later = start + TAKE_OVER_AFTER / 2;
        assert_eq!(c.plan(shard(), &under_way, later, 0), Step::Nothing);
        let moved = state(9, None, Some(ExperimentAdding { next: 2, ..adding }));
        let stood = start + TAKE_OVER_AFTER;
        assert_eq!(c.plan(shard(), &moved, stood, 0), Step::Nothing, "it moved");
        // It stood still for TAKE_OVER_AFTER: taken over.
        let stood = stood + TAKE_OVER_AFTER;
        assert_eq!(
            c.plan(shard(), &moved, stood, 0),
            Step::Continue {
                batch: 4,
                adding: ExperimentAdding { next: 2, ..adding }
            }
        );
        assert!(
            c.wants_to_ask(shard(), stood),
            "a batch under way is asked about every tick"
        );

        // This instance's own batch: driven every tick.
        let c = Compactions::new(Duration::from_secs(60));
        c.hold(shard(), 4, 3, ExperimentBatch::default());
        c.drive_held(shard());
        assert_eq!(
            c.plan(shard(), &under_way, start, 0),
            Step::Continue { batch: 4, adding }
        );
        // Once none is under way, the held batch is forgotten.
        assert_eq!(
            c.plan(shard(), &state(0, None, None), start, 0),
            Step::Nothing
        );
        assert_eq!(c.held_chunk(shard(), 4, 3, 0, 0), None);
        assert!(!c.wants_to_ask(shard(), start));
        assert!(c.wants_to_ask(shard(), start + ASK_EVERY));
    }
}
