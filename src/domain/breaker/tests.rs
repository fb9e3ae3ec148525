//! Tests of the breaker's rules, and of the state machine built from them
//! (`model.rs`) against contract v1.2 §3, sentence by sentence.

use std::time::Duration;

use proptest::prelude::*;

use super::model::{Event, Model};
use super::*;

const S: BreakerSettings = BreakerSettings::DEFAULT;

fn counts(calls: u64, failures: u64) -> Counts {
    Counts { calls, failures }
}

fn share(text: &str) -> Share {
    Share::parse(text).unwrap()
}

#[test]
fn defaults_are_the_contracts() {
    assert_eq!(S.window_ms(), 60_000);
    assert_eq!(S.min_calls, 20);
    assert_eq!(S.failure_ratio, Share::new(0.5).unwrap());
    assert_eq!(S.open_for_ms(), 30_000);
    assert_eq!(S.probe_calls, 5);
    assert_eq!(S.probe_share, Share::new(0.1).unwrap());
    assert_eq!(S.max_tracked, 100_000);
    assert_eq!(BreakerSettings::default(), S);
    assert_eq!(S.bucket_ms(), 6_000);
    assert_eq!(S.ring_len(), 12);
    assert_eq!(S.half_open_for_ms(), 120_000);
}

#[test]
fn shares_read_as_fractions_or_percentages() {
    assert_eq!(share("0.5"), share("50%"));
    assert_eq!(share("1"), Share::ALL);
    assert_eq!(share("100%"), Share::ALL);
    assert_eq!(share("0.1").get(), 0.1);
    assert_eq!(share("12.5%").ppm(), 125_000);
    assert_eq!(share("1%").ppm(), 10_000);
    for bad in [
        "", "0", "0.0", "1.5", "-0.5", ".5", "5.", "0.5%", "150%", "NaN", "inf", "1e-1", "50 %",
        "half",
    ] {
        let why = Share::parse(bad).unwrap_err();
        assert!(why.contains(&format!("`{bad}`")), "{bad}: {why}");
    }
    assert_eq!(Share::new(0.0), None);
    assert_eq!(Share::new(1.000_001), None);
    assert_eq!(Share::new(f64::NAN), None);
    // Tiny but positive stays positive.
    assert_eq!(Share::new(1e-12).unwrap().ppm(), 1);
    assert_eq!(Share::from_ppm(0).ppm(), 1);
    assert_eq!(Share::from_ppm(2_000_000), Share::ALL);
}

#[test]
fn the_trip_is_inclusive_and_needs_min_calls() {
    assert!(trips(counts(20, 10), &S));
    assert!(!trips(counts(20, 9), &S));
    assert!(!trips(counts(19, 19), &S));
    assert!(trips(counts(21, 11), &S));
    assert!(!trips(counts(21, 10), &S));
    // 0.1 × 30 is 3.0000000000000004 in f64: integers keep it inclusive.
    let tenth = BreakerSettings {
        failure_ratio: share("0.1"),
        ..S
    };
    assert!(trips(counts(30, 3), &tenth));
    let one = BreakerSettings {
        min_calls: 1,
        failure_ratio: Share::ALL,
        ..S
    };
    assert!(trips(counts(1, 1), &one));
    assert!(!trips(counts(1, 0), &one));
    // min_calls below 1 is refused by config; zero calls never trip anyway.
    let zero = BreakerSettings { min_calls: 0, ..S };
    assert!(!trips(counts(0, 0), &zero));
}

/// No window that trips, now or as it ages (`trips_at`), is passed over
/// by `may_trip`, and a sparse merchant's window is.
#[test]
fn may_trip_passes_every_window_that_trips_now_or_later() {
    assert!(!may_trip(counts(3, 1), &S), "below MIN_CALLS");
    assert!(
        !may_trip(counts(40, 9), &S),
        "fewer failures than a trip needs"
    );
    assert!(
        may_trip(counts(40, 10), &S),
        "trips when 20 successes age out"
    );
    for (min_calls, ratio) in [(1, "1"), (4, "0.5"), (5, "0.3"), (20, "0.5"), (3, "0.01")] {
        let s = BreakerSettings {
            min_calls,
            failure_ratio: share(ratio),
            ..S
        };
        let now = 100_000;
        let buckets: Vec<i64> = (0..4).map(|i| s.bucket_of(now) - i).collect();
        for a in 0..8u64 {
            for b in 0..8u64 {
                for fa in 0..=a {
                    for fb in 0..=b {
                        let ring = [(buckets[2], counts(a, fa)), (buckets[0], counts(b, fb))];
                        let window = s.window_counts(ring.iter().map(|(b, c)| (b, c)), now);
                        let later = trips_at(&ring, now, &s);
                        if trips(window, &s) || later.is_some() {
                            assert!(
                                may_trip(window, &s),
                                "{ring:?} {later:?} {min_calls} {ratio}"
                            );
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn probes_decide_after_probe_calls_below_the_ratio_closing() {
    assert_eq!(probes_decide(counts(4, 0), &S), None);
    assert_eq!(probes_decide(counts(5, 2), &S), Some(ProbeVerdict::Close));
    assert_eq!(probes_decide(counts(6, 3), &S), Some(ProbeVerdict::Reopen));
    assert_eq!(probes_decide(counts(5, 3), &S), Some(ProbeVerdict::Reopen));
    assert_eq!(probes_decide(counts(4, 2), &S), None);
    // Exactly the ratio is not below it: reopen.
    let even = BreakerSettings {
        probe_calls: 4,
        ..S
    };
    assert_eq!(
        probes_decide(counts(4, 2), &even),
        Some(ProbeVerdict::Reopen)
    );
}

#[test]
fn a_trip_is_open_then_half_open_then_closed() {
    let t = Tripped {
        open_until_ms: 1_000_000,
        calls: 20,
        failures: 10,
    };
    assert_eq!(state_at(None, 5, &S), BreakerState::Closed);
    assert_eq!(
        state_at(Some(&t), 999_999, &S),
        BreakerState::Open {
            until_ms: 1_000_000
        }
    );
    let half = BreakerState::HalfOpen {
        since_ms: 1_000_000,
    };
    assert_eq!(state_at(Some(&t), 1_000_000, &S), half);
    assert_eq!(state_at(Some(&t), 1_119_999, &S), half);
    assert_eq!(state_at(Some(&t), 1_120_000, &S), BreakerState::Closed);
}

#[test]
fn calls_count_by_state() {
    assert_eq!(
        count_into(BreakerState::Closed, 12_345, &S),
        CountInto::Bucket(2)
    );
    assert_eq!(
        count_into(BreakerState::Closed, -1, &S),
        CountInto::Bucket(-1)
    );
    assert_eq!(
        count_into(BreakerState::Open { until_ms: 9 }, 5, &S),
        CountInto::Nowhere
    );
    assert_eq!(
        count_into(BreakerState::HalfOpen { since_ms: 9 }, 50, &S),
        CountInto::Probe { open_until_ms: 9 }
    );
}

#[test]
fn labels_are_the_metrics() {
    assert_eq!(BreakerState::Closed.label(), "closed");
    assert_eq!(BreakerState::Open { until_ms: 0 }.label(), "open");
    assert_eq!(BreakerState::HalfOpen { since_ms: 0 }.label(), "half_open");
    assert_eq!(VetoReason::Score.label(), "score");
    assert_eq!(VetoReason::CircuitOpen.label(), "circuit_open");
    assert_eq!(VetoReason::CircuitHalfOpen.label(), "circuit_half_open");
    assert_eq!(VetoReason::ForcedOpen.label(), "forced_open");
}

#[test]
fn the_override_wins_and_expires() {
    let open = BreakerState::Open { until_ms: 100 };
    let half = BreakerState::HalfOpen { since_ms: 100 };
    let force = |kind| Some(OverrideUntil { kind, until_ms: 50 });
    let (fo, fc) = (force(Override::ForceOpen), force(Override::ForceClosed));
    for state in [BreakerState::Closed, open, half] {
        for probe in [false, true] {
            assert_eq!(
                breaker_veto(state, fo, 49, probe),
                Some(VetoReason::ForcedOpen)
            );
            assert_eq!(breaker_veto(state, fc, 49, probe), None);
            // Expired at until_ms: the state decides.
            for over in [fo, fc, None] {
                assert_eq!(
                    breaker_veto(state, over, 50, probe),
                    breaker_veto(state, None, 0, probe)
                );
            }
        }
    }
    assert_eq!(breaker_veto(BreakerState::Closed, None, 0, false), None);
    assert_eq!(
        breaker_veto(open, None, 0, true),
        Some(VetoReason::CircuitOpen)
    );
    assert_eq!(
        breaker_veto(half, None, 0, false),
        Some(VetoReason::CircuitHalfOpen)
    );
    assert_eq!(breaker_veto(half, None, 0, true), None);
}

#[test]
fn twenty_failures_in_a_minute_trip_the_default_breaker() {
    let mut m = Model::new(S, 1_000_000);
    for i in 0..19 {
        m.call(1_000_000 + i * 3_000, true);
        assert_eq!(m.state(), BreakerState::Closed, "call {i}");
    }
    m.call(1_060_000, true);
    assert_eq!(
        m.state(),
        BreakerState::Open {
            until_ms: 1_090_000
        }
    );
    assert_eq!(m.tripped().unwrap().counts(), counts(20, 20));
}

#[test]
fn calls_older_than_window_plus_a_bucket_stop_counting() {
    let mut m = Model::new(S, 0);
    for _ in 0..19 {
        m.call(0, true);
    }
    // At 66 s the bucket [0, 6 s) has aged out: the 20th failure is alone.
    m.call(66_000, true);
    assert_eq!(m.state(), BreakerState::Closed);
    assert_eq!(m.window(), counts(1, 1));
    let mut m = Model::new(S, 0);
    for _ in 0..19 {
        m.call(0, true);
    }
    // At exactly 60 s they still count.
    m.call(60_000, true);
    assert!(matches!(m.state(), BreakerState::Open { .. }));
}

/// Small settings, so that random traces trip, decide and time out often.
fn settings() -> impl Strategy<Value = BreakerSettings> {
    (
        1_000u64..5_000,
        1u32..6,
        1u32..=100,
        1_000u64..4_000,
        1u32..5,
    )
        .prop_map(
            |(window, min_calls, percent, open_for, probe_calls)| BreakerSettings {
                window: Duration::from_millis(window),
                min_calls,
                failure_ratio: Share::new(f64::from(percent) / 100.0).unwrap(),
                open_for: Duration::from_millis(open_for),
                probe_calls,
                ..S
            },
        )
}

/// A trace: gaps between events, each a call (failing with the trace's
/// odds) or time passing.
fn trace() -> impl Strategy<Value = (u8, Vec<(i64, u8, bool)>)> {
    (
        0u8..=100,
        prop::collection::vec((0i64..1_500, 0u8..100, prop::bool::weighted(0.9)), 0..120),
    )
}

/// The ratio as the contract states it, on whole percentages:
/// failures ÷ calls ≥ percent ÷ 100.
fn at_ratio(c: Counts, s: &BreakerSettings) -> bool {
    let percent = u64::from(s.failure_ratio.ppm() / 10_000);
    c.failures * 100 >= percent * c.calls
}

fn sum<'a>(calls: impl Iterator<Item = &'a (i64, bool)>) -> Counts {
    let mut sum = Counts::default();
    for (_, failed) in calls {
        sum += Counts::one(*failed);
    }
    sum
}

/// Whether `inner` can be a subset of `outer` counts-wise (as many or more
/// calls, failures and successes).
fn within(inner: Counts, outer: Counts) -> bool {
    inner.calls <= outer.calls
        && inner.failures <= outer.failures
        && inner.calls - inner.failures <= outer.calls - outer.failures
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn the_trip_is_inclusive_at_any_ratio(
        percent in 1u32..=100, calls in 1u64..500, min_calls in 1u32..40,
    ) {
        let s = BreakerSettings {
            min_calls,
            failure_ratio: Share::new(f64::from(percent) / 100.0).unwrap(),
            ..S
        };
        // The fewest failures at the ratio: ceil(percent × calls / 100).
        let needed = (u64::from(percent) * calls).div_ceil(100);
        let enough = calls >= u64::from(min_calls);
        prop_assert_eq!(trips(counts(calls, needed), &s), enough);
        prop_assert!(!trips(counts(calls, needed - 1), &s));
        prop_assert_eq!(trips(counts(calls, calls), &s), enough);
    }

    #[test]
    fn buckets_are_a_tenth_and_calls_count_for_a_window_plus_at_most_a_bucket(
        window in 1u64..200_000, at in -1_000_000i64..1_000_000, age in 0i64..300_000,
    ) {
        let s = BreakerSettings { window: Duration::from_millis(window), ..S };
        let (w, b) = (s.window_ms(), s.bucket_ms());
        prop_assert!(b >= 1);
        prop_assert!(b <= w / 10 || w < 10);
        let now = at + age;
        let counts = s.counts_in_window(s.bucket_of(at), now);
        if age <= w {
            prop_assert!(counts, "a call {} ms old must count", age);
        }
        if age >= w + b {
            prop_assert!(!counts, "a call {} ms old must not count", age);
        }
        // A future bucket never counts.
        prop_assert!(!s.counts_in_window(s.bucket_of(now) + 1, now));
    }

    #[test]
    fn the_buckets_counting_at_once_fit_the_ring_without_sharing_a_slot(
        window in 1u64..200_000, now in -1_000_000i64..1_000_000,
    ) {
        let s = BreakerSettings { window: Duration::from_millis(window), ..S };
        let last = s.bucket_of(now);
        let counting: Vec<i64> = (last - s.ring_len() - 5..=last + 2)
            .filter(|bucket| s.counts_in_window(*bucket, now))
            .collect();
        prop_assert!(counting.len() as i64 <= s.ring_len());
        let mut slots: Vec<i64> = counting.iter().map(|b| b.rem_euclid(s.ring_len())).collect();
        slots.sort_unstable();
        slots.dedup();
        prop_assert_eq!(slots.len(), counting.len());
        // And they are contiguous, ending now.
        prop_assert_eq!(counting.last().copied(), Some(last));
    }

    #[test]
    fn a_window_of_failures_trips_at_exactly_min_calls(
        s in settings(), gaps in prop::collection::vec(0i64..200, 1..40),
    ) {
        let mut m = Model::new(s, 10_000);
        let mut t = 10_000;
        let mut calls = 0u32;
        for gap in gaps {
            // Every failure well within one window of the first.
            if t + gap - 10_000 > s.window_ms() {
                break;
            }
            t += gap;
            m.call(t, true);
            calls += 1;
            let open = matches!(m.state(), BreakerState::Open { .. });
            prop_assert_eq!(open, calls == s.min_calls, "after {} failures", calls);
            if open {
                break;
            }
        }
    }

    #[test]
    fn override_precedence(
        kind in prop_oneof![Just(Override::ForceOpen), Just(Override::ForceClosed)],
        until in 0i64..100, now in 0i64..100, probe: bool,
        state in prop_oneof![
            Just(BreakerState::Closed),
            (0i64..100).prop_map(|until_ms| BreakerState::Open { until_ms }),
            (0i64..100).prop_map(|since_ms| BreakerState::HalfOpen { since_ms }),
        ],
    ) {
        let veto = breaker_veto(state, Some(OverrideUntil { kind, until_ms: until }), now, probe);
        let own = breaker_veto(state, None, now, probe);
        let expected = match kind {
            _ if now >= until => own,
            Override::ForceOpen => Some(VetoReason::ForcedOpen),
            Override::ForceClosed => None,
        };
        prop_assert_eq!(veto, expected);
    }

    /// Runs a random trace through the model and checks every call against
    /// §3: where it counts, when the breaker trips, how long it is OPEN,
    /// when HALF-OPEN decides and how, and when it gives up deciding.
    #[test]
    fn the_model_follows_the_contract(s in settings(), (odds, events) in trace()) {
        let (w, b) = (s.window_ms(), s.bucket_ms());
        let mut m = Model::new(s, 0);
        let mut now = 0i64;
        // What the checker knows, from the calls and the states it saw:
        // the calls answered CLOSED since the breaker last (re)started
        // counting, and the probes of the current HALF-OPEN.
        let mut closed: Vec<(i64, bool)> = Vec::new();
        let mut probes: Vec<(i64, bool)> = Vec::new();
        let mut seen = m.state();
        for (gap, roll, is_call) in events {
            now += gap;
            m.apply(Event::Pass { to_ms: now });
            let state = m.state();
            // Time alone: OPEN lasts OPEN_FOR, HALF-OPEN 2 × WINDOW undecided.
            match seen {
                BreakerState::Closed => prop_assert_eq!(state, seen),
                BreakerState::Open { until_ms } if now < until_ms => prop_assert_eq!(state, seen),
                BreakerState::Open { until_ms } | BreakerState::HalfOpen { since_ms: until_ms } => {
                    if now < until_ms + 2 * w {
                        prop_assert_eq!(state, BreakerState::HalfOpen { since_ms: until_ms });
                    } else {
                        prop_assert_eq!(state, BreakerState::Closed);
                        prop_assert!((probes.len() as u32) < s.probe_calls);
                        closed.clear();
                        probes.clear();
                        prop_assert_eq!(m.window(), Counts::default());
                    }
                }
            }
            seen = state;
            if !is_call {
                continue;
            }
            let failed = roll < odds;
            let window_before = m.window();
            if let BreakerState::HalfOpen { since_ms } = seen {
                // The half-open is the one the trip names.
                prop_assert_eq!(m.tripped().map(|t| t.open_until_ms), Some(since_ms));
            }
            m.apply(Event::Call { at_ms: now, failed });
            let after = m.state();
            match seen {
                BreakerState::Open { .. } => {
                    // Calls while OPEN count nowhere.
                    prop_assert_eq!(after, seen);
                    prop_assert_eq!(m.window(), window_before);
                    prop_assert_eq!(m.probes(), Counts::default());
                }
                BreakerState::Closed => {
                    closed.push((now, failed));
                    // A call counts for at least WINDOW, never after WINDOW + a bucket.
                    let surely = sum(closed.iter().filter(|(t, _)| now - t <= w));
                    let maybe = sum(closed.iter().filter(|(t, _)| now - t < w + b));
                    match after {
                        BreakerState::Closed => {
                            let window = m.window();
                            prop_assert!(within(surely, window), "{:?} ⊄ {:?}", surely, window);
                            prop_assert!(within(window, maybe), "{:?} ⊄ {:?}", window, maybe);
                            prop_assert!(
                                window.calls < u64::from(s.min_calls) || !at_ratio(window, &s)
                            );
                        }
                        BreakerState::Open { until_ms } => {
                            prop_assert_eq!(until_ms, now + s.open_for_ms());
                            let tripped = m.tripped().unwrap().counts();
                            prop_assert!(within(surely, tripped));
                            prop_assert!(within(tripped, maybe));
                            // Never OPEN without MIN_CALLS calls in the window,
                            // all counted since it last started afresh.
                            prop_assert!(tripped.calls >= u64::from(s.min_calls));
                            prop_assert!(closed.len() as u64 >= tripped.calls);
                            prop_assert!(at_ratio(tripped, &s));
                            closed.clear();
                            probes.clear();
                        }
                        BreakerState::HalfOpen { .. } => prop_assert!(false, "CLOSED → HALF-OPEN"),
                    }
                }
                BreakerState::HalfOpen { .. } => {
                    probes.push((now, failed));
                    let counted = sum(probes.iter());
                    if (probes.len() as u32) < s.probe_calls {
                        prop_assert_eq!(after, seen);
                        prop_assert_eq!(m.probes(), counted);
                    } else {
                        // Decided on exactly PROBE_CALLS calls of this half-open.
                        prop_assert_eq!(probes.len() as u32, s.probe_calls);
                        if at_ratio(counted, &s) {
                            prop_assert_eq!(after, BreakerState::Open { until_ms: now + s.open_for_ms() });
                            prop_assert_eq!(m.tripped().unwrap().counts(), counted);
                        } else {
                            prop_assert_eq!(after, BreakerState::Closed);
                            prop_assert_eq!(m.window(), Counts::default());
                            closed.clear();
                        }
                        // Probes never carry over.
                        prop_assert_eq!(m.probes(), Counts::default());
                        probes.clear();
                    }
                }
            }
            seen = after;
        }
        // The model's log agrees: every transition is a legal one.
        for t in &m.transitions {
            let legal = matches!(
                (t.from, t.to),
                (BreakerState::Closed, BreakerState::Open { .. })
                    | (BreakerState::HalfOpen { .. }, BreakerState::Open { .. })
                    | (BreakerState::HalfOpen { .. }, BreakerState::Closed)
            );
            prop_assert!(legal, "{:?}", t);
        }
    }

    #[test]
    fn after_a_close_the_next_trip_needs_min_calls_new_calls(
        s in settings(), (odds, events) in trace(),
    ) {
        let mut m = Model::new(s, 0);
        let mut now = 0;
        let mut since_closed = 0u32;
        for (gap, roll, _) in events {
            now += gap;
            m.advance(now);
            let before = m.state();
            m.call(now, roll < odds);
            let after = m.state();
            match (before, after) {
                (BreakerState::Closed, BreakerState::Open { .. }) => {
                    since_closed += 1;
                    prop_assert!(since_closed >= s.min_calls);
                    since_closed = 0;
                }
                (BreakerState::Closed, _) => since_closed += 1,
                (_, BreakerState::Closed) => since_closed = 0,
                _ => {}
            }
        }
    }
}
