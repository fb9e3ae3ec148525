//! The circuit breaker's settings: the contract's defaults, `off`, the
//! forms a ratio or share takes, and every bad value reported by its name.

use super::*;
use crate::domain::breaker::BreakerSettings;

fn breaker(pairs: &[(&str, &str)]) -> Result<Option<BreakerSettings>, ConfigError> {
    Settings::load(None, &env(pairs)).map(|s| s.breaker)
}

#[test]
fn the_breaker_is_on_by_default_with_the_contracts_values() {
    let s = Settings::defaults()
        .breaker
        .expect("the breaker is on by default");
    assert_eq!(s.window, Duration::from_secs(60));
    assert_eq!(s.min_calls, 20);
    assert_eq!(s.failure_ratio.get(), 0.5);
    assert_eq!(s.open_for, Duration::from_secs(30));
    assert_eq!(s.probe_calls, 5);
    assert_eq!(s.probe_share.get(), 0.1);
    assert_eq!(s.max_tracked, 100_000);
    assert_eq!(s, BreakerSettings::DEFAULT);
}

#[test]
fn off_turns_it_off_in_any_case() {
    for off in ["off", "OFF", " Off "] {
        let off = breaker(&[("STICKY_ROUTING_BREAKER", off)]);
        assert!(off.unwrap().is_none());
    }
    assert!(
        breaker(&[("STICKY_ROUTING_BREAKER", "on")])
            .unwrap()
            .is_some()
    );
}

#[test]
fn every_breaker_setting_is_read() {
    let s = breaker(&[
        ("STICKY_ROUTING_BREAKER_WINDOW", "2m"),
        ("STICKY_ROUTING_BREAKER_MIN_CALLS", "7"),
        ("STICKY_ROUTING_BREAKER_FAILURE_RATIO", "25%"),
        ("STICKY_ROUTING_BREAKER_OPEN_FOR", "1500ms"),
        ("STICKY_ROUTING_BREAKER_PROBE_CALLS", "1"),
        ("STICKY_ROUTING_BREAKER_PROBE_SHARE", "0.75"),
        ("STICKY_ROUTING_BREAKER_MAX_TRACKED", "3"),
    ])
    .unwrap()
    .unwrap();
    assert_eq!(s.window, Duration::from_secs(120));
    assert_eq!(s.min_calls, 7);
    assert_eq!(s.failure_ratio.get(), 0.25);
    assert_eq!(s.open_for, Duration::from_millis(1500));
    assert_eq!(s.probe_calls, 1);
    assert_eq!(s.probe_share.get(), 0.75);
    assert_eq!(s.max_tracked, 3);
}

/// Each bad value alone is one problem naming its variable, and all of
/// them together are reported at once, even with the breaker off.
#[test]
fn every_bad_breaker_value_is_reported_by_its_name() {
    let bad = [
        ("STICKY_ROUTING_BREAKER", "maybe"),
        ("STICKY_ROUTING_BREAKER_WINDOW", "999ms"),
        ("STICKY_ROUTING_BREAKER_MIN_CALLS", "0"),
        ("STICKY_ROUTING_BREAKER_FAILURE_RATIO", "0"),
        ("STICKY_ROUTING_BREAKER_OPEN_FOR", "0s"),
        ("STICKY_ROUTING_BREAKER_PROBE_CALLS", "-1"),
        ("STICKY_ROUTING_BREAKER_PROBE_SHARE", "1.5"),
        ("STICKY_ROUTING_BREAKER_MAX_TRACKED", "0"),
        ("STICKY_ROUTING_BREAKER_FAILURE_RATIO", "0.5%"),
        ("STICKY_ROUTING_BREAKER_PROBE_SHARE", "101%"),
        ("STICKY_ROUTING_BREAKER_PROBE_SHARE", "10"),
        ("STICKY_ROUTING_BREAKER_WINDOW", "2d"),
    ];
    for (name, value) in bad {
        let err = breaker(&[(name, value)]).unwrap_err();
        assert_eq!(err.problems.len(), 1, "{name}={value}: {err}");
        assert!(
            err.problems[0].starts_with(&format!("{name}: ")),
            "{name}={value}: {err}"
        );
    }
    let mut all: Vec<(&str, &str)> = bad[1..8].to_vec();
    all.push(("STICKY_ROUTING_BREAKER", "off"));
    let err = breaker(&all).unwrap_err();
    assert_eq!(err.problems.len(), 7, "{err}");
    for (name, _) in &bad[1..8] {
        assert!(
            err.problems
                .iter()
                .any(|p| p.starts_with(&format!("{name}: "))),
            "{name} missing from {err}"
        );
    }
}
