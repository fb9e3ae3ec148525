//! The uplift of sticky routing (contract v1.2 §4): each group's success
//! rate, and the difference treated − holdout with its 95 % confidence
//! interval by Newcombe's hybrid score method (method 10 of Newcombe 1998,
//! "Interval estimation for the difference between independent
//! proportions: comparison of eleven methods", Stat Med 17:873–890).
//!
//! Pure arithmetic over counts; GetUplift and `sticky-routing report` both
//! build their answer here, so the two never disagree.

/// The normal quantile of a two-sided 95 % interval, as the contract fixes it.
pub const Z_95: f64 = 1.959964;

/// The most UTC days GetUplift and the report cover.
pub const MAX_DAYS: u32 = 35;
/// The days GetUplift covers when asked for 0.
pub const DEFAULT_DAYS: u32 = 7;

/// Wilson's score interval for `successes` out of `n`, clamped to [0, 1]
/// (it is inside in exact arithmetic; rounding can step out by an ulp).
/// With `n` = 0 nothing is known: (0, 1).
pub fn wilson(successes: u64, n: u64, z: f64) -> (f64, f64) {
    if n == 0 {
        return (0.0, 1.0);
    }
    let n = n as f64;
    let p = successes as f64 / n;
    let z2 = z * z;
    // (2np + z² ± z √(z² + 4np(1 − p))) / (2(n + z²)), Newcombe's eq. for method 3.
    let centre = 2.0 * n * p + z2;
    let spread = z * (z2 + 4.0 * n * p * (1.0 - p)).sqrt();
    let denominator = 2.0 * (n + z2);
    (
        ((centre - spread) / denominator).clamp(0.0, 1.0),
        ((centre + spread) / denominator).clamp(0.0, 1.0),
    )
}

/// `(d, lower, upper)` for d = s1/n1 − s2/n2 by the hybrid score method:
/// with (l1, u1) and (l2, u2) the Wilson intervals of each rate,
/// L = d − √((p1 − l1)² + (u2 − p2)²) and U = d + √((u1 − p1)² + (p2 − l2)²),
/// at z = [`Z_95`]. `None` unless both groups have at least one outcome and
/// no more successes than outcomes.
pub fn newcombe_hybrid(s1: u64, n1: u64, s2: u64, n2: u64) -> Option<(f64, f64, f64)> {
    if n1 == 0 || n2 == 0 || s1 > n1 || s2 > n2 {
        return None;
    }
    let (p1, p2) = (s1 as f64 / n1 as f64, s2 as f64 / n2 as f64);
    let (l1, u1) = wilson(s1, n1, Z_95);
    let (l2, u2) = wilson(s2, n2, Z_95);
    let d = p1 - p2;
    let lower = d - ((p1 - l1).powi(2) + (u2 - p2).powi(2)).sqrt();
    let upper = d + ((u1 - p1).powi(2) + (p2 - l2).powi(2)).sqrt();
    Some((d, lower.max(-1.0), upper.min(1.0)))
}

/// One group's counts over the report's days. `followed` and `overridden`
/// are counted for treated and shadow only (0 for the holdout).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GroupCounts {
    pub outcomes: u64,
    pub successes: u64,
    pub followed: u64,
    pub overridden: u64,
}

impl GroupCounts {
    /// successes ÷ outcomes, 0 when there is no outcome.
    pub fn success_rate(&self) -> f64 {
        if self.outcomes == 0 {
            0.0
        } else {
            self.successes as f64 / self.outcomes as f64
        }
    }
}

/// The fewest outcomes each of treated and holdout needs before the
/// difference is called `enough_data`.
pub const ENOUGH_OUTCOMES: u64 = 100;

/// GetUplift's answer, plus the follow rate the report adds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Uplift {
    pub treated: GroupCounts,
    pub holdout: GroupCounts,
    pub shadow: GroupCounts,
    /// treated's success rate − holdout's (each 0 without outcomes).
    pub difference: f64,
    /// The 95 % interval of the difference; both 0 when either group has no
    /// outcome (then there is no interval).
    pub ci_low: f64,
    pub ci_high: f64,
    /// Both treated and holdout have at least [`ENOUGH_OUTCOMES`].
    pub enough_data: bool,
    /// treated followed ÷ treated outcomes, 0 without outcomes.
    pub follow_rate: f64,
}

impl Uplift {
    pub fn from(treated: GroupCounts, holdout: GroupCounts, shadow: GroupCounts) -> Self {
        let interval = newcombe_hybrid(
            treated.successes,
            treated.outcomes,
            holdout.successes,
            holdout.outcomes,
        );
        let (ci_low, ci_high) = interval.map_or((0.0, 0.0), |(_, lo, hi)| (lo, hi));
        let follow_rate = if treated.outcomes == 0 {
            0.0
        } else {
            treated.followed as f64 / treated.outcomes as f64
        };
        Self {
            treated,
            holdout,
            shadow,
            difference: treated.success_rate() - holdout.success_rate(),
            ci_low,
            ci_high,
            enough_data: treated.outcomes >= ENOUGH_OUTCOMES && holdout.outcomes >= ENOUGH_OUTCOMES,
            follow_rate,
        }
    }
}

#[cfg(test)]
mod tests;
