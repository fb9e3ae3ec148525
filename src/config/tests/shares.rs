//! The priority shares: their defaults, the percentages they take, and the
//! low share never above the feedback share, each refusal naming its variable.

use super::*;
use crate::domain::percent::Percent;
use crate::domain::priority::Shares;

fn shares(pairs: &[(&str, &str)]) -> Result<Shares, ConfigError> {
    Settings::load(None, &env(pairs)).map(|s| s.shares)
}

fn percent(value: f64) -> Percent {
    Percent::new(value).unwrap()
}

#[test]
fn the_defaults_are_eighty_and_ten_percent() {
    assert_eq!(Settings::defaults().shares, Shares::default());
    assert_eq!(Shares::default().feedback, percent(80.0));
    assert_eq!(Shares::default().low, percent(10.0));
}

#[test]
fn shares_take_percentages_with_decimals() {
    let s = shares(&[
        ("STICKY_ROUTING_FEEDBACK_SHARE", "62.5%"),
        ("STICKY_ROUTING_LOW_SHARE", " 5% "),
    ])
    .unwrap();
    assert_eq!(s.feedback, percent(62.5));
    assert_eq!(s.low, percent(5.0));
    let equal = shares(&[
        ("STICKY_ROUTING_FEEDBACK_SHARE", "30%"),
        ("STICKY_ROUTING_LOW_SHARE", "30%"),
    ]);
    assert!(equal.is_ok(), "the low share may equal the feedback share");
}

#[test]
fn a_bad_share_is_reported_by_its_name() {
    for (name, bad) in [
        ("STICKY_ROUTING_FEEDBACK_SHARE", "80"),
        ("STICKY_ROUTING_FEEDBACK_SHARE", "0%"),
        ("STICKY_ROUTING_FEEDBACK_SHARE", "101%"),
        ("STICKY_ROUTING_LOW_SHARE", "0.5%"),
        ("STICKY_ROUTING_LOW_SHARE", "ten%"),
    ] {
        let err = shares(&[(name, bad)]).unwrap_err();
        assert_eq!(err.problems.len(), 1, "{err}");
        assert!(err.problems[0].starts_with(&format!("{name}: ")), "{err}");
    }
}

#[test]
fn a_low_share_above_the_feedback_share_is_refused() {
    let err = shares(&[
        ("STICKY_ROUTING_FEEDBACK_SHARE", "20%"),
        ("STICKY_ROUTING_LOW_SHARE", "25%"),
    ])
    .unwrap_err();
    assert_eq!(err.problems.len(), 1, "{err}");
    let problem = &err.problems[0];
    assert!(problem.starts_with("STICKY_ROUTING_LOW_SHARE: "), "{err}");
    assert!(problem.contains("STICKY_ROUTING_FEEDBACK_SHARE"), "{err}");
    // The default low share is above a feedback share of 5 %.
    let err = shares(&[("STICKY_ROUTING_FEEDBACK_SHARE", "5%")]).unwrap_err();
    assert!(
        err.problems[0].starts_with("STICKY_ROUTING_LOW_SHARE: "),
        "{err}"
    );
}
