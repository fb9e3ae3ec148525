//! The platform study's statistics and targets, on made-up runs.

use std::collections::BTreeMap;
use std::time::Duration;

use super::*;
use crate::run::RunResult;

/// A run of 1000 calls in 1 s, latencies 1..=1000 µs scaled by `slower`
/// (so p99 is about 0.99 ms × `slower`), `errors` of them UNAVAILABLE.
fn run(merchants: u64, breaker: bool, round: usize, shape: Shape) -> PlatformRun {
    let mut latency = hdrhistogram::Histogram::new_with_bounds(1, 60_000_000, 3).unwrap();
    for micros in 1..=1000u64 {
        latency.record(micros * shape.slower).unwrap();
    }
    let mut statuses = BTreeMap::from([("OK".to_owned(), 1000 - shape.errors)]);
    if shape.errors > 0 {
        statuses.insert("UNAVAILABLE".to_owned(), shape.errors);
    }
    let result = RunResult {
        latency,
        latency_by_status: BTreeMap::new(),
        statuses,
        elapsed: Duration::from_secs(1),
        late: 0,
    };
    PlatformRun {
        name: format!("{merchants} {breaker}"),
        merchants,
        breaker,
        pin_connector: breaker,
        round,
        report: Report::new("x", &result).with_cpu(Some(shape.cpu), Some(shape.redis_cpu)),
        request_path_per_rpc: 1.0,
        request_path: BTreeMap::from([("record_success".to_owned(), 800.0)]),
        background_per_sec: shape.background,
        background: BTreeMap::from([("breaker_flush".to_owned(), shape.background)]),
        health: HealthTally {
            serving: 100,
            not_serving: shape.not_serving,
            failed: 0,
        },
        merchants_called: merchants / 2,
    }
}

#[derive(Clone, Copy)]
struct Shape {
    slower: u64,
    errors: u64,
    cpu: f64,
    redis_cpu: f64,
    background: f64,
    not_serving: u64,
}

const GOOD: Shape = Shape {
    slower: 1,
    errors: 0,
    cpu: 50.0,
    redis_cpu: 17.0,
    background: 40.0,
    not_serving: 0,
};

const LIMITS: Limits = Limits {
    max_background_rate: 80.0,
    background_order: 10.0,
};

fn met(checks: &[Check]) -> Vec<(String, bool)> {
    checks.iter().map(|c| (c.target.clone(), c.met)).collect()
}

#[test]
fn the_median_of_odd_and_even_counts() {
    assert_eq!(median(vec![]), None);
    assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
    assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), Some(2.5));
}

/// 10 merchants, then 100,000 with the breaker on and its baseline, each
/// within every target.
fn as_cheap_as_the_baseline() -> Vec<PlatformRun> {
    vec![
        run(
            10,
            true,
            1,
            Shape {
                background: 20.0,
                ..GOOD
            },
        ),
        run(100_000, true, 1, Shape { cpu: 52.0, ..GOOD }),
        run(
            100_000,
            false,
            1,
            Shape {
                background: 0.0,
                ..GOOD
            },
        ),
    ]
}

#[test]
fn a_service_as_cheap_as_its_baseline_meets_every_target() {
    let runs = as_cheap_as_the_baseline();
    let checks = checks(&runs, LIMITS);
    assert_eq!(checks.len(), 8, "{checks:#?}");
    assert!(checks.iter().all(|c| c.met), "{checks:#?}");
    assert_eq!(checks[2].measured, "+4.0% (52.0 against 50.0 µs, medians)");
    assert_eq!(checks[7].measured, "2.0× (20.0/s against 40.0/s)");
}

#[test]
fn split_runs_are_neither_targets_nor_baselines() {
    let costly = Shape {
        slower: 5,
        errors: 7,
        cpu: 90.0,
        redis_cpu: 60.0,
        background: 5000.0,
        not_serving: 3,
    };
    let split = |breaker: bool| PlatformRun {
        pin_connector: !breaker,
        ..run(100_000, breaker, 1, costly)
    };
    let mut runs = as_cheap_as_the_baseline();
    runs.extend([split(true), split(false)]);
    let checks = checks(&runs, LIMITS);
    assert_eq!(checks.len(), 8, "{checks:#?}");
    assert!(checks.iter().all(|c| c.met), "{checks:#?}");
    assert_eq!(checks[2].measured, "+4.0% (52.0 against 50.0 µs, medians)");
}

#[test]
fn todays_service_at_platform_scale_misses_them() {
    let bad = Shape {
        slower: 5,
        errors: 590,
        cpu: 67.1,
        redis_cpu: 31.6,
        background: 2857.2,
        not_serving: 3,
    };
    let runs = vec![
        run(
            10,
            true,
            1,
            Shape {
                background: 41.9,
                ..GOOD
            },
        ),
        run(100_000, true, 1, bad),
        run(
            100_000,
            false,
            1,
            Shape {
                cpu: 45.5,
                redis_cpu: 16.5,
                ..GOOD
            },
        ),
        run(100_000, true, 2, Shape { errors: 0, ..bad }),
        run(
            100_000,
            false,
            2,
            Shape {
                cpu: 45.5,
                redis_cpu: 16.5,
                ..GOOD
            },
        ),
    ];
    let checks = checks(&runs, LIMITS);
    let results = met(&checks);
    let missed: Vec<&str> = results
        .iter()
        .filter(|(_, met)| !met)
        .map(|(t, _)| t.as_str())
        .collect();
    assert_eq!(
        missed,
        [
            "errors at 100000 merchants, breaker on (all rounds)",
            "`sticky_routing.v1.StickyRouting` SERVING throughout at 100000 merchants",
            "service CPU per RecordOutcome at 100000 merchants, over the baseline",
            "Redis CPU per RecordOutcome at 100000 merchants, over the baseline",
            "p99 at 100000 merchants, over the baseline",
            "background Redis calls per second at 100000 merchants (worst round)",
            "background rate of the same order at 10 and 100000 merchants",
        ],
        "{checks:#?}"
    );
    assert_eq!(checks[0].measured, "590", "errors summed over rounds");
    assert_eq!(
        checks[1].measured,
        "200 of 206 SERVING (6 NOT_SERVING, 0 failed)"
    );
    assert!(
        checks[4].measured.starts_with("+3.96 ms"),
        "{}",
        checks[4].measured
    );
    let study = PlatformStudy::new("m".into(), "s".into(), runs, LIMITS);
    let markdown = study.markdown();
    assert!(
        markdown.contains("| 100000 true | 1 | 1000 | 590 (UNAVAILABLE 590) | 4.95 | 67.1 | 31.6 | 1.000 | 2857.2 | 100 of 103 SERVING (3 NOT_SERVING, 0 failed) | 50000 of 100000 (50%) |"),
        "{markdown}"
    );
    assert!(markdown.contains("| 100000 true | 1 | record_success 0.800 | breaker_flush 2857.2 |"));
    assert!(markdown.contains("| **no** |"));
}

#[test]
fn a_missing_baseline_or_cpu_reading_is_a_miss_not_a_pass() {
    let mut only_on = run(100_000, true, 1, GOOD);
    only_on.report.cpu_us_per_call = None;
    let checks = checks(&[only_on], LIMITS);
    let cpu = checks
        .iter()
        .find(|c| c.target.starts_with("service CPU"))
        .unwrap();
    assert!(!cpu.met);
    assert_eq!(cpu.measured, "—");
    assert!(checks.iter().all(|c| !c.target.contains("same order")));
    assert!(super::checks(&[], LIMITS).is_empty());
}
