//! Tests of the uplift arithmetic: Newcombe's method 10 against the limits
//! published in Newcombe (1998), Table II, and the report's derived fields.

use proptest::prelude::*;

use super::*;

/// Rounded to 4 decimals, as Newcombe's Table II prints its limits.
fn round4(x: f64) -> f64 {
    (x * 10_000.0).round() / 10_000.0
}

fn limits(s1: u64, n1: u64, s2: u64, n2: u64) -> (f64, f64) {
    let (_, lo, hi) = newcombe_hybrid(s1, n1, s2, n2).unwrap();
    (round4(lo), round4(hi))
}

/// Method 10 ("score", hybrid) of Newcombe RG (1998), "Interval estimation
/// for the difference between independent proportions: comparison of eleven
/// methods", Stat Med 17:873–890, Table II, examples (a), (b) and (d). The
/// published limits are quoted from two independent test suites that check
/// themselves against that table:
/// - (a) 56/70 − 48/80: 0.0524 to 0.3339 and (b) 9/10 − 3/10: 0.1705 to
///   0.8090, from the R package propint (github.com/m-Py/propint,
///   tests/testthat/test_Two_Independent_Props_CI.R, "produces the results
///   reported in Newcombe1998");
/// - (d) 5/56 − 0/29: −0.0381 to 0.1926, from the R package ratesci
///   (CRAN, tests/testthat/test3.R, "Newcombe RD example (d)",
///   "Newcombe/'Score'/Square&add", as shown on
///   rdrr.io/cran/ratesci/src/tests/testthat/test3.R).
#[test]
fn newcombe_s_published_examples() {
    assert_eq!(limits(56, 70, 48, 80), (0.0524, 0.3339)); // (a)
    assert_eq!(limits(9, 10, 3, 10), (0.1705, 0.8090)); // (b)
    assert_eq!(limits(5, 56, 0, 29), (-0.0381, 0.1926)); // (d)

    let (d, _, _) = newcombe_hybrid(56, 70, 48, 80).unwrap();
    assert!((d - 0.2).abs() < 1e-12);
    let (d, _, _) = newcombe_hybrid(5, 56, 0, 29).unwrap();
    assert!((d - 5.0 / 56.0).abs() < 1e-12);
}

#[test]
fn wilson_intervals_stay_in_the_unit_interval_and_hold_the_rate() {
    // 0/29 and 29/29: one limit is exactly the boundary.
    assert_eq!(wilson(0, 29, Z_95).0, 0.0);
    assert_eq!(wilson(29, 29, Z_95).1, 1.0);
    // Nothing known without outcomes.
    assert_eq!(wilson(0, 0, Z_95), (0.0, 1.0));
    // Computed outside this code with Python's math module, from Newcombe's
    // formula for method 3, (2np + z² ± z√(z² + 4np(1 − p))) / (2(n + z²)):
    // 48/80 → 0.490454649…, 0.700381724…; 0/29 → 0, 0.116969800…
    let (lo, hi) = wilson(48, 80, Z_95);
    assert!((lo - 0.490_454_649).abs() < 1e-9 && (hi - 0.700_381_724).abs() < 1e-9);
    let (lo, hi) = wilson(0, 29, Z_95);
    assert!(lo == 0.0 && (hi - 0.116_969_800).abs() < 1e-9);
}

#[test]
fn no_interval_without_outcomes_in_both_groups() {
    assert_eq!(newcombe_hybrid(0, 0, 5, 10), None);
    assert_eq!(newcombe_hybrid(5, 10, 0, 0), None);
    assert_eq!(newcombe_hybrid(0, 0, 0, 0), None);
    // More successes than outcomes is no count at all.
    assert_eq!(newcombe_hybrid(11, 10, 5, 10), None);
    assert!(newcombe_hybrid(0, 1, 1, 1).is_some());
}

proptest! {
    #[test]
    fn the_interval_holds_the_difference_within_minus_one_to_one(
        n1 in 1u64..5_000, n2 in 1u64..5_000, a in 0.0f64..=1.0, b in 0.0f64..=1.0,
    ) {
        let s1 = (a * n1 as f64).floor() as u64;
        let s2 = (b * n2 as f64).floor() as u64;
        let (d, lo, hi) = newcombe_hybrid(s1, n1, s2, n2).unwrap();
        prop_assert!((-1.0..=1.0).contains(&lo) && (-1.0..=1.0).contains(&hi));
        prop_assert!(lo <= d + 1e-12 && d <= hi + 1e-12, "{lo} {d} {hi}");
        // Swapping the groups mirrors the interval.
        let (md, mlo, mhi) = newcombe_hybrid(s2, n2, s1, n1).unwrap();
        prop_assert!((md + d).abs() < 1e-12);
        prop_assert!((mlo + hi).abs() < 1e-9 && (mhi + lo).abs() < 1e-9);
    }
}

// ---- Uplift ----------------------------------------------------------------

fn counts(outcomes: u64, successes: u64, followed: u64, overridden: u64) -> GroupCounts {
    GroupCounts {
        outcomes,
        successes,
        followed,
        overridden,
    }
}

#[test]
fn the_uplift_is_treated_minus_holdout_with_newcombe_s_interval() {
    let treated = counts(70, 56, 60, 10);
    let holdout = counts(80, 48, 0, 0);
    let shadow = counts(9, 4, 5, 4);
    let u = Uplift::from(treated, holdout, shadow);
    assert_eq!((u.treated, u.holdout, u.shadow), (treated, holdout, shadow));
    assert!((u.difference - 0.2).abs() < 1e-12);
    assert_eq!((round4(u.ci_low), round4(u.ci_high)), (0.0524, 0.3339));
    assert!(!u.enough_data, "70 and 80 outcomes are fewer than 100");
    assert!((u.follow_rate - 60.0 / 70.0).abs() < 1e-12);
    assert!((treated.success_rate() - 0.8).abs() < 1e-12);
    assert!((shadow.success_rate() - 4.0 / 9.0).abs() < 1e-12);
}

#[test]
fn enough_data_needs_a_hundred_outcomes_in_both_groups() {
    let g = |n| counts(n, n / 2, 0, 0);
    assert!(Uplift::from(g(100), g(100), g(0)).enough_data);
    assert!(!Uplift::from(g(99), g(100), g(0)).enough_data);
    assert!(!Uplift::from(g(100), g(99), g(1000)).enough_data);
    assert!(Uplift::from(g(5000), g(100), g(0)).enough_data);
}

#[test]
fn empty_groups_give_zeros_not_nan() {
    let none = GroupCounts::default();
    assert_eq!(none.success_rate(), 0.0);
    let u = Uplift::from(none, none, none);
    assert_eq!(
        (
            u.difference,
            u.ci_low,
            u.ci_high,
            u.follow_rate,
            u.enough_data
        ),
        (0.0, 0.0, 0.0, 0.0, false)
    );
    // One group only: its rate is the difference, but there is no interval.
    let u = Uplift::from(counts(10, 9, 10, 0), none, none);
    assert!((u.difference - 0.9).abs() < 1e-12);
    assert_eq!((u.ci_low, u.ci_high), (0.0, 0.0));
    assert_eq!(u.follow_rate, 1.0);
    let u = Uplift::from(none, counts(10, 3, 0, 0), none);
    assert!((u.difference + 0.3).abs() < 1e-12);
    assert_eq!((u.ci_low, u.ci_high, u.follow_rate), (0.0, 0.0, 0.0));
}
