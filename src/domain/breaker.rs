//! The connector circuit breaker as pure rules (contract v1.2 §3): its
//! settings, the bucketed window, when a window trips, how the half-open
//! probes decide, what GetPin vetoes and where a RecordOutcome counts.
//!
//! Nothing here reads a clock or Redis: every time is Unix milliseconds
//! passed in, so the engine, the Lua scripts' callers and the tests all
//! apply exactly the same rules (`tests.rs` holds a whole state machine,
//! built from these functions only, to the contract).

use std::time::Duration;

use super::percent::Percent;

/// A share in (0, 1]: the failure ratio that trips a breaker, or the share
/// of GetPins that probe a half-open one.
///
/// It is kept in parts per million so the trip compares integers: with
/// floats, 3 failures in 30 calls would miss a 0.1 ratio
/// (0.1 × 30 = 3.0000000000000004), and the trip is inclusive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Share {
    ppm: u32,
}

const PPM: u32 = 1_000_000;

impl Share {
    /// All of it (1, or 100 %).
    pub const ALL: Self = Self { ppm: PPM };

    /// `None` outside (0, 1] (NaN included). A share below one part per
    /// million counts as one part per million, so it never becomes 0.
    pub fn new(share: f64) -> Option<Self> {
        if !(share > 0.0 && share <= 1.0) {
            return None;
        }
        // In (0, 1e6] after the check: the cast cannot saturate.
        let ppm = (share * f64::from(PPM)).round() as u32;
        Some(Self {
            ppm: ppm.clamp(1, PPM),
        })
    }

    /// A share written in code, in parts per million, held to (0, 1e6].
    pub const fn from_ppm(ppm: u32) -> Self {
        let ppm = if ppm < 1 {
            1
        } else if ppm > PPM {
            PPM
        } else {
            ppm
        };
        Self { ppm }
    }

    /// Reads `0.5` (a number in (0, 1]) or `50%` (1 % to 100 %, as
    /// [`Percent`] reads it).
    pub fn parse(text: &str) -> Result<Self, String> {
        if text.ends_with('%') {
            let percent = Percent::parse(text)?;
            return Self::new(percent.get() / 100.0)
                .ok_or_else(|| format!("`{text}` is not a share in (0, 1] or 1%-100%"));
        }
        let plain = text
            .split_once('.')
            .map_or(!text.is_empty(), |(w, f)| !w.is_empty() && !f.is_empty())
            && text.bytes().all(|b| b.is_ascii_digit() || b == b'.');
        plain
            .then(|| text.parse::<f64>().ok())
            .flatten()
            .and_then(Self::new)
            .ok_or_else(|| {
                format!("`{text}` is not a share in (0, 1] (such as 0.5) or from 1% to 100%")
            })
    }

    pub fn get(self) -> f64 {
        f64::from(self.ppm) / f64::from(PPM)
    }

    pub fn ppm(self) -> u32 {
        self.ppm
    }

    /// `part ≥ share × whole`, exactly (the inclusive trip).
    pub fn reached_by(self, part: u64, whole: u64) -> bool {
        u128::from(part) * u128::from(PPM) >= u128::from(self.ppm) * u128::from(whole)
    }
}

impl std::fmt::Display for Share {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.get())
    }
}

/// The breaker's settings (`STICKY_ROUTING_BREAKER_*`), checked by config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BreakerSettings {
    /// The failure window (default 60 s, at least 1 s).
    pub window: Duration,
    /// Calls the window needs before it can trip (default 20, at least 1).
    pub min_calls: u32,
    /// Failures ÷ calls at which the window trips, inclusive (default 0.5).
    pub failure_ratio: Share,
    /// How long a trip stays OPEN (default 30 s, at least 1 s).
    pub open_for: Duration,
    /// Calls a HALF-OPEN breaker decides on (default 5, at least 1).
    pub probe_calls: u32,
    /// The share of GetPins that probe a HALF-OPEN candidate (default 0.10).
    pub probe_share: Share,
    /// Pairs one process keeps in memory (default 100,000, at least 1).
    pub max_tracked: usize,
}

impl BreakerSettings {
    pub const DEFAULT: Self = Self {
        window: Duration::from_secs(60),
        min_calls: 20,
        failure_ratio: Share::from_ppm(500_000),
        open_for: Duration::from_secs(30),
        probe_calls: 5,
        probe_share: Share::from_ppm(100_000),
        max_tracked: 100_000,
    };

    pub fn window_ms(&self) -> i64 {
        duration_ms(self.window)
    }

    pub fn open_for_ms(&self) -> i64 {
        duration_ms(self.open_for)
    }

    /// A bucket is a tenth of the window, rounded down, at least 1 ms: no
    /// longer than the contract allows (WINDOW / 10).
    pub fn bucket_ms(&self) -> i64 {
        (self.window_ms() / 10).max(1)
    }

    /// The bucket `at_ms` falls in (buckets start at the epoch, so every
    /// instance agrees on them).
    pub fn bucket_of(&self, at_ms: i64) -> i64 {
        at_ms.div_euclid(self.bucket_ms())
    }

    /// How many ring slots hold a window: more than the buckets that can
    /// count at any one time, so two of those never share a slot.
    pub fn ring_len(&self) -> i64 {
        let bucket = self.bucket_ms();
        let window = self.window_ms();
        // div_ceil on i64 is unstable; both are positive here.
        (window + bucket - 1) / bucket + 2
    }

    /// Whether the calls of `bucket` still count at `now_ms`: until its end
    /// plus a window, so a call counts for at least WINDOW and never after
    /// WINDOW plus one bucket; a bucket of the future does not count yet.
    pub fn counts_in_window(&self, bucket: i64, now_ms: i64) -> bool {
        let end = bucket.saturating_add(1).saturating_mul(self.bucket_ms());
        end.saturating_add(self.window_ms()) > now_ms && bucket <= self.bucket_of(now_ms)
    }

    /// Whether a window keeps `bucket` at `now_ms`: its calls count now,
    /// or it is a bucket still to come (another instance's clock ahead of
    /// this one's), whose calls count when its time comes.
    pub fn keeps_bucket(&self, bucket: i64, now_ms: i64) -> bool {
        self.counts_in_window(bucket, now_ms) || bucket > self.bucket_of(now_ms)
    }

    /// A window's counts at `now_ms`: the calls of its buckets that count.
    pub fn window_counts<'a>(
        &self,
        buckets: impl IntoIterator<Item = (&'a i64, &'a Counts)>,
        now_ms: i64,
    ) -> Counts {
        let mut sum = Counts::default();
        for (bucket, counts) in buckets {
            if self.counts_in_window(*bucket, now_ms) {
                sum += *counts;
            }
        }
        sum
    }

    /// How long an undecided HALF-OPEN lasts before the breaker closes.
    pub fn half_open_for_ms(&self) -> i64 {
        self.window_ms().saturating_mul(2)
    }
}

impl Default for BreakerSettings {
    fn default() -> Self {
        Self::DEFAULT
    }
}

fn duration_ms(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// Calls and failures of a window, a bucket or a half-open's probes.
#[derive(Clone, Copy, Default, PartialEq, Eq, Debug)]
pub struct Counts {
    pub calls: u64,
    pub failures: u64,
}

impl Counts {
    /// One call, failed or not.
    pub fn one(failed: bool) -> Self {
        Self {
            calls: 1,
            failures: u64::from(failed),
        }
    }

    pub fn add(&mut self, other: Counts) {
        self.calls = self.calls.saturating_add(other.calls);
        self.failures = self.failures.saturating_add(other.failures);
    }

    pub fn is_empty(&self) -> bool {
        self.calls == 0
    }
}

impl std::ops::AddAssign for Counts {
    fn add_assign(&mut self, other: Counts) {
        self.add(other);
    }
}

/// The trip as Redis keeps it: OPEN until `open_until_ms`, then HALF-OPEN
/// until `open_until_ms + 2 × WINDOW` unless decided; `calls`/`failures`
/// are the counts that tripped it (or the probes that reopened it).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Tripped {
    pub open_until_ms: i64,
    pub calls: u64,
    pub failures: u64,
}

impl Tripped {
    pub fn counts(&self) -> Counts {
        Counts {
            calls: self.calls,
            failures: self.failures,
        }
    }
}

/// A breaker's state at one instant.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum BreakerState {
    Closed,
    Open { until_ms: i64 },
    HalfOpen { since_ms: i64 },
}

impl BreakerState {
    /// The label of `/metrics` and of the transition log lines.
    pub fn label(self) -> &'static str {
        match self {
            Self::Closed => "closed",
            Self::Open { .. } => "open",
            Self::HalfOpen { .. } => "half_open",
        }
    }
}

/// The state a trip (if any) puts a breaker in at `now_ms`: OPEN until
/// `open_until_ms`, then HALF-OPEN for 2 × WINDOW, then CLOSED again.
pub fn state_at(tripped: Option<&Tripped>, now_ms: i64, s: &BreakerSettings) -> BreakerState {
    let Some(tripped) = tripped else {
        return BreakerState::Closed;
    };
    let until = tripped.open_until_ms;
    if now_ms < until {
        BreakerState::Open { until_ms: until }
    } else if now_ms < until.saturating_add(s.half_open_for_ms()) {
        BreakerState::HalfOpen { since_ms: until }
    } else {
        BreakerState::Closed
    }
}

/// Whether a CLOSED breaker's window trips it: at least MIN_CALLS calls and
/// failures ÷ calls ≥ the ratio (inclusive: 10 in 20 trips at 0.5).
pub fn trips(window: Counts, s: &BreakerSettings) -> bool {
    window.calls >= u64::from(s.min_calls)
        && window.calls > 0
        && s.failure_ratio.reached_by(window.failures, window.calls)
}

/// Whether a CLOSED breaker's window could trip it now or later as its
/// calls age out, with no call added: a later window holds no more calls
/// and no more failures than this one, so it needs MIN_CALLS calls now and
/// as many failures as the ratio asks of MIN_CALLS calls. At a platform's
/// sparse merchants almost no window passes, so almost none is judged.
pub fn may_trip(window: Counts, s: &BreakerSettings) -> bool {
    let fewest = u64::from(s.min_calls).max(1);
    window.calls >= fewest && s.failure_ratio.reached_by(window.failures, fewest)
}

/// What a HALF-OPEN breaker's probes decide.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ProbeVerdict {
    /// Failures ÷ calls below the ratio: CLOSED, counts start afresh.
    Close,
    /// Otherwise: OPEN again for OPEN_FOR.
    Reopen,
}

/// `None` while the probes are fewer than PROBE_CALLS; then the verdict.
pub fn probes_decide(probes: Counts, s: &BreakerSettings) -> Option<ProbeVerdict> {
    if probes.calls < u64::from(s.probe_calls.max(1)) {
        return None;
    }
    Some(
        if s.failure_ratio.reached_by(probes.failures, probes.calls) {
            ProbeVerdict::Reopen
        } else {
            ProbeVerdict::Close
        },
    )
}

/// An operator's override of one breaker.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Override {
    /// Never pin to it (reason `FORCED_OPEN`).
    ForceOpen,
    /// The breaker is ignored.
    ForceClosed,
}

impl Override {
    pub fn label(self) -> &'static str {
        match self {
            Self::ForceOpen => "force_open",
            Self::ForceClosed => "force_closed",
        }
    }
}

/// An override and when it ends (exclusive).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct OverrideUntil {
    pub kind: Override,
    pub until_ms: i64,
}

impl OverrideUntil {
    /// Whether it still holds at `now_ms`.
    pub fn active_at(&self, now_ms: i64) -> bool {
        now_ms < self.until_ms
    }
}

/// Why GetPin vetoed a candidate (the proto's `VetoReason`).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
pub enum VetoReason {
    /// The orchestrator's live score (v1.1's health veto).
    Score,
    CircuitOpen,
    CircuitHalfOpen,
    ForcedOpen,
}

impl VetoReason {
    /// The label of `/metrics`.
    pub fn label(self) -> &'static str {
        match self {
            Self::Score => "score",
            Self::CircuitOpen => "circuit_open",
            Self::CircuitHalfOpen => "circuit_half_open",
            Self::ForcedOpen => "forced_open",
        }
    }
}

/// The breaker's veto of one candidate: the override first (ForceOpen →
/// ForcedOpen, ForceClosed → none; an expired override is ignored), then
/// the state: OPEN → CircuitOpen; HALF-OPEN → CircuitHalfOpen unless this
/// GetPin drew a `probe`.
pub fn breaker_veto(
    state: BreakerState,
    over: Option<OverrideUntil>,
    now_ms: i64,
    probe: bool,
) -> Option<VetoReason> {
    if let Some(over) = over.filter(|o| o.active_at(now_ms)) {
        return match over.kind {
            Override::ForceOpen => Some(VetoReason::ForcedOpen),
            Override::ForceClosed => None,
        };
    }
    match state {
        BreakerState::Closed => None,
        BreakerState::Open { .. } => Some(VetoReason::CircuitOpen),
        BreakerState::HalfOpen { .. } if probe => None,
        BreakerState::HalfOpen { .. } => Some(VetoReason::CircuitHalfOpen),
    }
}

/// Where a RecordOutcome's call counts.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum CountInto {
    /// OPEN: calls count nowhere. (Overrides do not stop counting.)
    Nowhere,
    /// CLOSED: this bucket of the window.
    Bucket(i64),
    /// HALF-OPEN: the probes of the half-open that follows the trip open
    /// until `open_until_ms` (the tag drops counts of an older half-open).
    Probe { open_until_ms: i64 },
}

/// Where a call answered at `now_ms` counts, given the breaker's state then.
pub fn count_into(state: BreakerState, now_ms: i64, s: &BreakerSettings) -> CountInto {
    match state {
        BreakerState::Closed => CountInto::Bucket(s.bucket_of(now_ms)),
        BreakerState::Open { .. } => CountInto::Nowhere,
        BreakerState::HalfOpen { since_ms } => CountInto::Probe {
            open_until_ms: since_ms,
        },
    }
}

mod aging;

pub use aging::trips_at;

#[cfg(test)]
pub(crate) mod model;

#[cfg(test)]
mod tests;
