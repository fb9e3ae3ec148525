//! The probe's list held to the scripts and to the deployed ACL, and the
//! verdicts it gives.

use super::*;
use crate::domain::keys::{
    ADMISSION_KEY_PREFIX, BREAKER_KEY_PREFIX, CUSTOMER_KEY_PREFIX, EXPERIMENT_KEY_PREFIX,
    parse_customer_key, parse_experiment_key,
};

/// Every Lua source the service sends.
const SCRIPTS: &[(&str, &str)] = &[
    ("attempts.lua", include_str!("../scripts/attempts.lua")),
    (
        "record_success.lua",
        include_str!("../scripts/record_success.lua"),
    ),
    (
        "record_failure.lua",
        include_str!("../scripts/record_failure.lua"),
    ),
    ("admit.lua", include_str!("../scripts/admit.lua")),
    ("batch.lua", include_str!("../scripts/batch.lua")),
    (
        "breaker_common.lua",
        include_str!("../scripts/breaker_common.lua"),
    ),
    (
        "breaker_flush.lua",
        include_str!("../scripts/breaker_flush.lua"),
    ),
    (
        "breaker_transition.lua",
        include_str!("../scripts/breaker_transition.lua"),
    ),
    (
        "breaker_index.lua",
        include_str!("../scripts/breaker_index.lua"),
    ),
    (
        "experiment_log_state.lua",
        include_str!("../scripts/experiment_log_state.lua"),
    ),
    (
        "experiment_append.lua",
        include_str!("../scripts/experiment_append.lua"),
    ),
    (
        "experiment_compact.lua",
        include_str!("../scripts/experiment_compact.lua"),
    ),
    (
        "experiment_read.lua",
        include_str!("../scripts/experiment_read.lua"),
    ),
];

/// The commands a Lua source calls or checks: the first argument of each
/// `redis.call(`, `redis.pcall(` and `redis.acl_check_cmd(`.
fn commands_in(lua: &str) -> Vec<String> {
    let mut found = Vec::new();
    for opener in ["redis.call(", "redis.pcall(", "redis.acl_check_cmd("] {
        for (at, _) in lua.match_indices(opener) {
            let rest = &lua[at + opener.len()..];
            let quoted = rest.trim_start().strip_prefix('\'');
            let name = quoted
                .and_then(|rest| rest.split_once('\''))
                .map(|(name, _)| name);
            found.push(
                name.expect("a script names its command in quotes")
                    .to_ascii_uppercase(),
            );
        }
    }
    found
}

#[test]
fn scripts_call_nothing_unprobed() {
    let mut seen = 0;
    for (file, lua) in SCRIPTS {
        for command in commands_in(lua) {
            seen += 1;
            assert!(
                NEEDS
                    .iter()
                    .chain(BREAKER_NEEDS)
                    .chain(EXPERIMENT_NEEDS)
                    .any(|need| need.words[0] == command),
                "{file} calls {command}, which the permission probe does not check: add it to NEEDS"
            );
        }
    }
    assert!(seen >= 10, "the scan found only {seen} commands");
}

#[test]
fn the_deployed_acl_grants_every_need() {
    let acl = include_str!("../../../deploy/redis-acl.txt");
    let rules: Vec<&str> = acl
        .lines()
        .filter(|line| !line.trim_start().starts_with('#'))
        .flat_map(str::split_whitespace)
        .collect();
    for need in NEEDS.iter().chain(BREAKER_NEEDS).chain(EXPERIMENT_NEEDS) {
        assert!(rules.contains(&need.grant), "{acl}\nlacks {}", need.grant);
        if let Some(keys) = need.keys {
            assert!(
                rules.contains(&format!("~{keys}").as_str()),
                "lacks ~{keys}"
            );
        }
    }
}

#[test]
fn probe_keys_are_in_the_families_and_never_a_customers_or_a_merchants() {
    assert!(CUSTOMER.starts_with(CUSTOMER_KEY_PREFIX));
    assert!(ADMISSION.starts_with(ADMISSION_KEY_PREFIX));
    assert_eq!(parse_customer_key(CUSTOMER), None, "an empty merchant id");
    // An admission key's merchant id is never empty either.
    let rest = &ADMISSION[ADMISSION_KEY_PREFIX.len()..];
    assert!(rest.starts_with('_'), "{ADMISSION}");
    // Nor is the breaker probe key any breaker key: those go on with `c{`,
    // `o{` or `i{`.
    assert!(BREAKER.starts_with(BREAKER_KEY_PREFIX));
    let rest = &BREAKER[BREAKER_KEY_PREFIX.len()..];
    assert!(
        !rest.starts_with("c{") && !rest.starts_with("o{") && !rest.starts_with("i{"),
        "{BREAKER}"
    );
    assert!(EXPERIMENT.starts_with(EXPERIMENT_KEY_PREFIX));
    assert_eq!(
        parse_experiment_key(EXPERIMENT),
        None,
        "an empty merchant id"
    );
    for need in NEEDS {
        let pattern = need.keys.map(|keys| keys.trim_end_matches('*'));
        for word in need.words {
            if word.starts_with("sticky_") {
                assert!(pattern.is_some_and(|p| word.starts_with(p)), "{need:?}");
            }
        }
    }
}

#[test]
fn a_reply_names_what_is_lacking_in_acl_words() {
    assert_eq!(Verdict::of_reply(&[]).unwrap(), Verdict::Granted);
    assert_eq!(Verdict::of_reply(&[-1]).unwrap(), Verdict::Unchecked);
    let expire = NEEDS.iter().position(|n| n.words[0] == "EXPIRE").unwrap() as i64 + 1;
    let hincrby = NEEDS.iter().position(|n| n.words[0] == "HINCRBY").unwrap() as i64 + 1;
    assert_eq!(
        Verdict::of_reply(&[hincrby, expire]).unwrap(),
        Verdict::Lacking("+hincrby on ~sticky_gw_*, +expire on ~sticky_gw_*".into())
    );
    assert_eq!(
        Verdict::of_reply(&[1]).unwrap(),
        Verdict::Lacking("+ping".into())
    );
    for odd in [[0], [NEEDS.len() as i64 + 1], [-2]] {
        assert!(matches!(
            Verdict::of_reply(&odd),
            Err(StorageError::Unexpected(_))
        ));
    }
}

#[test]
fn the_probes_own_refusal_is_a_verdict_and_a_lost_answer_is_not() {
    let refused = StorageError::Unavailable {
        why: NotApplied::Refused,
        detail: "NOPERM User sticky-routing has no permissions to run the 'evalsha' command".into(),
    };
    assert!(matches!(
        Verdict::of_failed_probe(&refused),
        Some(Verdict::Lacking(words)) if words.contains("'evalsha'")
    ));
    let lost = StorageError::Unavailable {
        why: NotApplied::ReadFailed,
        detail: "Connection reset by peer".into(),
    };
    assert_eq!(Verdict::of_failed_probe(&lost), None);
    assert_eq!(
        Verdict::of_failed_probe(&StorageError::DeadlineExceeded),
        None
    );
}

#[test]
fn writes_are_refused_only_while_a_permission_is_known_missing() {
    let node = NodePermissions::new();
    assert!(
        node.refusal().is_none(),
        "not probed yet: the scripts check"
    );
    assert!(
        matches!(
            node.readiness(),
            Err(StorageError::Unavailable {
                why: NotApplied::ReadFailed,
                ..
            })
        ),
        "not ready before a probe passes, and nothing known to be missing"
    );

    node.record(Verdict::Lacking("+expire on ~sticky_gw_*".into()), "n1");
    let refusal = node.refusal().expect("refused");
    assert!(matches!(
        &refusal,
        StorageError::Unavailable { why: NotApplied::Permission, detail }
            if detail == "the Redis user lacks +expire on ~sticky_gw_*"
    ));
    assert!(
        node.readiness()
            .unwrap_err()
            .to_string()
            .contains("+expire")
    );

    node.record(Verdict::Granted, "n1");
    assert!(node.refusal().is_none());
    assert!(node.readiness().is_ok());

    node.record(Verdict::Unchecked, "n1");
    assert!(node.refusal().is_none());
    assert!(node.readiness().is_ok(), "Redis 6: nothing to wait for");
}

#[test]
fn a_node_is_probed_until_known_fine_then_after_a_refusal_or_a_while() {
    let node = NodePermissions::new();
    let now = Instant::now();
    assert!(node.probe_due(now), "not probed yet");
    node.record(Verdict::Lacking("+expire on ~sticky_gw_*".into()), "n1");
    assert!(node.probe_due(now), "lacking: every check, to see the fix");

    node.record(Verdict::Granted, "n1");
    assert!(!node.probe_due(Instant::now()), "fine, and just probed");
    node.suspect();
    assert!(node.probe_due(Instant::now()), "a call met a refusal");
    assert!(!node.probe_due(Instant::now()), "once per refusal");
    assert!(
        node.probe_due(Instant::now() + REPROBE_EVERY),
        "and every while"
    );

    node.record(Verdict::Unchecked, "n1");
    assert!(!node.probe_due(Instant::now()), "Redis 6: as fine");
}
