//! A whole (merchant, connector) breaker as one state machine driven by
//! events, built only from the public rules of `breaker.rs`: the executable
//! reading of contract v1.2 §3 that the property tests check, and that the
//! engine's tests can replay a trace against.

use std::collections::BTreeMap;

use super::{
    BreakerSettings, BreakerState, CountInto, Counts, ProbeVerdict, Tripped, count_into,
    probes_decide, state_at, trips,
};

/// What happens to a breaker.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Event {
    /// A RecordOutcome for the pair answered at `at_ms`.
    Call { at_ms: i64, failed: bool },
    /// Time passes to `to_ms`, with no call.
    Pass { to_ms: i64 },
}

/// A change of state and when it happened.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) struct Transition {
    pub at_ms: i64,
    pub from: BreakerState,
    pub to: BreakerState,
}

/// The breaker, decided the moment each call is counted (the engine
/// decides a little later, in the background; the rules are the same).
#[derive(Clone, Debug)]
pub(crate) struct Model {
    pub settings: BreakerSettings,
    now_ms: i64,
    tripped: Option<Tripped>,
    /// The window's buckets (only while CLOSED; pruned once they no longer count).
    buckets: BTreeMap<i64, Counts>,
    /// The probes of the half-open that `tripped` names.
    probes: Counts,
    pub transitions: Vec<Transition>,
}

impl Model {
    pub fn new(settings: BreakerSettings, start_ms: i64) -> Self {
        Self {
            settings,
            now_ms: start_ms,
            tripped: None,
            buckets: BTreeMap::new(),
            probes: Counts::default(),
            transitions: Vec::new(),
        }
    }

    pub fn apply(&mut self, event: Event) {
        match event {
            Event::Call { at_ms, failed } => self.call(at_ms, failed),
            Event::Pass { to_ms } => self.advance(to_ms),
        }
    }

    pub fn state(&self) -> BreakerState {
        state_at(self.tripped.as_ref(), self.now_ms, &self.settings)
    }

    pub fn tripped(&self) -> Option<Tripped> {
        self.tripped
    }

    pub fn probes(&self) -> Counts {
        self.probes
    }

    /// The CLOSED window's counts now.
    pub fn window(&self) -> Counts {
        self.settings.window_counts(&self.buckets, self.now_ms)
    }

    /// Time passes: an undecided half-open that has run out closes (counts
    /// afresh), and buckets that no longer count are dropped.
    pub fn advance(&mut self, to_ms: i64) {
        let to_ms = to_ms.max(self.now_ms);
        self.now_ms = to_ms;
        if let Some(tripped) = self
            .tripped
            .filter(|_| self.state() == BreakerState::Closed)
        {
            self.transitions.push(Transition {
                at_ms: tripped.open_until_ms + self.settings.half_open_for_ms(),
                from: BreakerState::HalfOpen {
                    since_ms: tripped.open_until_ms,
                },
                to: BreakerState::Closed,
            });
            self.tripped = None;
            self.probes = Counts::default();
            self.buckets.clear();
        }
        let (settings, now) = (self.settings, self.now_ms);
        self.buckets
            .retain(|bucket, _| settings.keeps_bucket(*bucket, now));
    }

    /// A call answered at `at_ms` counts where the state then says, and
    /// may trip, close or reopen the breaker.
    pub fn call(&mut self, at_ms: i64, failed: bool) {
        self.advance(at_ms);
        let s = self.settings;
        let before = self.state();
        match count_into(before, self.now_ms, &s) {
            CountInto::Nowhere => {}
            CountInto::Bucket(bucket) => {
                *self.buckets.entry(bucket).or_default() += Counts::one(failed);
                let window = self.window();
                if trips(window, &s) {
                    self.open(window);
                }
            }
            CountInto::Probe { open_until_ms } => {
                if self.tripped.map(|t| t.open_until_ms) != Some(open_until_ms) {
                    // Probes of another half-open: never carried over.
                    return;
                }
                self.probes += Counts::one(failed);
                match probes_decide(self.probes, &s) {
                    None => {}
                    Some(ProbeVerdict::Reopen) => self.open(self.probes),
                    Some(ProbeVerdict::Close) => {
                        self.tripped = None;
                        self.probes = Counts::default();
                        self.buckets.clear();
                    }
                }
            }
        }
        let after = self.state();
        if after != before {
            self.transitions.push(Transition {
                at_ms,
                from: before,
                to: after,
            });
        }
    }

    /// OPEN for OPEN_FOR from now, holding the counts that opened it.
    fn open(&mut self, counts: Counts) {
        self.tripped = Some(Tripped {
            open_until_ms: self.now_ms.saturating_add(self.settings.open_for_ms()),
            calls: counts.calls,
            failures: counts.failures,
        });
        self.probes = Counts::default();
        self.buckets.clear();
    }
}
