//! The rollout's settings: the contract's defaults, per-merchant modes and
//! holdouts beside the global ones, the salt taken verbatim, the
//! retention's floor, and every bad value reported by its name.

use super::*;
use crate::domain::ids::MerchantId;
use crate::domain::rollout::{HoldoutShare, Mode};

fn load(pairs: &[(&str, &str)]) -> Result<Settings, ConfigError> {
    Settings::load(None, &env(pairs))
}

fn merchant(id: &str) -> MerchantId {
    MerchantId::parse(id).unwrap()
}

fn share(text: &str) -> HoldoutShare {
    HoldoutShare::parse(text).unwrap()
}

#[test]
fn the_defaults_pin_everyone_with_no_salt_and_keep_35_days() {
    let s = Settings::defaults();
    let rollout = &s.rules.rollout;
    assert_eq!(rollout.mode, Mode::On);
    assert!(rollout.mode_for.is_empty() && rollout.holdout_for.is_empty());
    assert_eq!(rollout.holdout, share("0%"));
    assert!(rollout.salt.is_empty());
    assert_eq!(s.experiment_retention, Duration::from_secs(35 * 86_400));
}

#[test]
fn per_merchant_modes_and_holdouts_win_over_the_global_ones() {
    let s = load(&[
        ("STICKY_ROUTING_MODE", "shadow"),
        ("STICKY_ROUTING_MODE_m_1", "OFF"),
        ("STICKY_ROUTING_MODE_Big", "on"),
        ("STICKY_ROUTING_HOLDOUT", "10%"),
        ("STICKY_ROUTING_HOLDOUT_m_1", "12.5%"),
        ("STICKY_ROUTING_HOLDOUT_Big", "0%"),
        ("STICKY_ROUTING_EXPERIMENT_SALT", "2026-q4"),
        ("STICKY_ROUTING_EXPERIMENT_RETENTION", "1d"),
    ])
    .unwrap();
    let rollout = &s.rules.rollout;
    assert_eq!(rollout.mode_of(&merchant("m_1")), Mode::Off);
    assert_eq!(rollout.mode_of(&merchant("Big")), Mode::On);
    assert_eq!(rollout.mode_of(&merchant("big")), Mode::Shadow);
    assert_eq!(rollout.holdout_of(&merchant("m_1")), share("12.5%"));
    assert_eq!(rollout.holdout_of(&merchant("Big")), share("0%"));
    assert_eq!(rollout.holdout_of(&merchant("other")), share("10%"));
    assert_eq!(rollout.holdout_of(&merchant("m_1")).basis_points(), 1250);
    assert_eq!(rollout.salt, b"2026-q4");
    assert_eq!(s.experiment_retention, Duration::from_secs(86_400));
}

/// The salt's bytes are hashed, so they are kept as given: a blank at an
/// end would otherwise draw another holdout than the operator's own
/// recomputation.
#[test]
fn the_salt_is_taken_verbatim() {
    let s = load(&[("STICKY_ROUTING_EXPERIMENT_SALT", " é salt\t")]).unwrap();
    assert_eq!(s.rules.rollout.salt, " é salt\t".as_bytes());
}

/// A family read by prefix takes only its own names: the salt is no
/// merchant's holdout, a mode is no holdout, and a budget no mode.
#[test]
fn the_families_do_not_capture_each_other_or_the_salt() {
    let s = load(&[
        ("STICKY_ROUTING_EXPERIMENT_SALT", "s"),
        ("STICKY_ROUTING_HOLDOUT_SALT", "5%"),
        ("STICKY_ROUTING_MODE_HOLDOUT", "off"),
        ("STICKY_ROUTING_MAX_CUSTOMERS_MODE", "3"),
    ])
    .unwrap();
    let rollout = &s.rules.rollout;
    assert_eq!(rollout.salt, b"s");
    assert_eq!(rollout.holdout_for.len(), 1);
    assert_eq!(rollout.holdout_of(&merchant("SALT")), share("5%"));
    assert_eq!(rollout.mode_for.len(), 1);
    assert_eq!(rollout.mode_of(&merchant("HOLDOUT")), Mode::Off);
    assert_eq!(rollout.holdout_of(&merchant("HOLDOUT")), share("0%"));
    assert_eq!(s.rules.budgets.overrides[&merchant("MODE")], 3);
    for name in [
        "STICKY_ROUTING_MODE",
        "STICKY_ROUTING_MODE_x",
        "STICKY_ROUTING_HOLDOUT",
        "STICKY_ROUTING_HOLDOUT_x",
        "STICKY_ROUTING_EXPERIMENT_SALT",
        "STICKY_ROUTING_EXPERIMENT_RETENTION",
    ] {
        assert!(unknown_variables([name]).is_empty(), "{name}");
    }
    assert_eq!(
        unknown_variables(["STICKY_ROUTING_EXPERIMENT_SALTS"]),
        ["STICKY_ROUTING_EXPERIMENT_SALTS"]
    );
}

/// The TOML file takes the families as tables, like the budgets.
#[test]
fn the_file_takes_modes_and_holdouts_as_tables() {
    let path = temp_file(
        "rollout.toml",
        "mode = \"off\"\nholdout = \"1%\"\nexperiment_salt = \"x\"\n\
         [mode_overrides]\nm1 = \"on\"\n[holdout_overrides]\nm1 = \"50%\"\n",
    );
    let s = Settings::load(Some(&path), &HashMap::new()).unwrap();
    let rollout = &s.rules.rollout;
    assert_eq!(rollout.mode, Mode::Off);
    assert_eq!(rollout.mode_of(&merchant("m1")), Mode::On);
    assert_eq!(rollout.holdout_of(&merchant("m1")), share("50%"));
    assert_eq!(rollout.holdout, share("1%"));
    assert_eq!(rollout.salt, b"x");
}

/// Each bad value alone is one problem naming its variable, and all of
/// them together are reported at once.
#[test]
fn every_bad_rollout_value_is_reported_by_its_name() {
    let bad = [
        ("STICKY_ROUTING_MODE", "maybe"),
        ("STICKY_ROUTING_MODE_m1", "true"),
        ("STICKY_ROUTING_HOLDOUT", "50.01%"),
        ("STICKY_ROUTING_HOLDOUT_m2", "60%"),
        ("STICKY_ROUTING_EXPERIMENT_RETENTION", "23h"),
    ];
    let more_bad = [
        ("STICKY_ROUTING_HOLDOUT", "10"),
        ("STICKY_ROUTING_HOLDOUT", "-1%"),
        ("STICKY_ROUTING_HOLDOUT_m2", "0.001%"),
        ("STICKY_ROUTING_HOLDOUT_m2", "5 %"),
        ("STICKY_ROUTING_MODE", ""),
        ("STICKY_ROUTING_EXPERIMENT_RETENTION", "forever"),
        ("STICKY_ROUTING_EXPERIMENT_RETENTION", "0"),
    ];
    for (name, value) in bad.iter().chain(&more_bad) {
        let err = load(&[(name, value)]).unwrap_err();
        assert_eq!(err.problems.len(), 1, "{name}={value}: {err}");
        assert!(
            err.problems[0].starts_with(&format!("{name}: ")),
            "{name}={value}: {err}"
        );
    }
    let err = load(&bad).unwrap_err();
    assert_eq!(err.problems.len(), bad.len(), "{err}");
    for (name, _) in &bad {
        assert!(
            err.problems
                .iter()
                .any(|p| p.starts_with(&format!("{name}: "))),
            "{name} missing from {err}"
        );
    }
}

#[test]
fn a_per_merchant_mode_or_holdout_must_name_a_valid_merchant_id() {
    let long = format!("STICKY_ROUTING_HOLDOUT_{}", "m".repeat(200));
    let err = load(&[
        (long.as_str(), "5%"),
        ("STICKY_ROUTING_MODE_", "off"),
        ("STICKY_ROUTING_MODE_ok", "off"),
    ])
    .unwrap_err();
    assert_eq!(err.problems.len(), 2, "{err}");
    assert!(err.problems.iter().any(|p| p.contains(&long)), "{err}");
    assert!(
        err.problems
            .iter()
            .any(|p| p.starts_with("STICKY_ROUTING_MODE_")),
        "{err}"
    );
}
