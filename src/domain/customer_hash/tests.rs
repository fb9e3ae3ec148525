//! The in-memory hash against the rules it puts together.

use std::time::Duration;

use super::*;
use crate::domain::attempts::AttemptId;

fn digest(id: &str) -> Option<AttemptDigest> {
    AttemptId::parse_digest(id).unwrap()
}

fn name(field: &'static str) -> &'static str {
    field
}

fn counts(hash: &CustomerHash<&'static str>) -> Vec<(&'static str, i64)> {
    let mut fields: Vec<_> = hash.fields().collect();
    fields.sort();
    fields
}

#[test]
fn a_success_counts_up_and_a_new_combo_starts_at_one() {
    let mut hash = CustomerHash::created("A:B:x", None);
    assert_eq!(
        hash.success("A:B:x", 5, None, name),
        Recorded::Applied {
            net_count: 2,
            pruned: 0
        }
    );
    assert_eq!(
        hash.success("A:B:y", 5, None, name),
        Recorded::Applied {
            net_count: 1,
            pruned: 0
        }
    );
    assert_eq!(counts(&hash), vec![("A:B:x", 2), ("A:B:y", 1)]);
}

#[test]
fn the_cap_drops_the_lowest_other_combo_and_ties_go_bytewise_first() {
    let mut hash = CustomerHash::created("A:B:z", None);
    hash.success("A:B:z", 2, None, name);
    hash.success("A:B:b", 2, None, name);
    // z=2, b=1; a new combo c=1 makes three: b (1) goes, never c.
    assert_eq!(
        hash.success("A:B:c", 2, None, name),
        Recorded::Applied {
            net_count: 1,
            pruned: 1
        }
    );
    assert_eq!(counts(&hash), vec![("A:B:c", 1), ("A:B:z", 2)]);
    // Another new combo a: the lowest of the others, c, goes.
    assert_eq!(
        hash.success("A:B:a", 2, None, name),
        Recorded::Applied {
            net_count: 1,
            pruned: 1
        }
    );
    assert_eq!(counts(&hash), vec![("A:B:a", 1), ("A:B:z", 2)]);
}

#[test]
fn a_failure_counts_down_deletes_at_zero_and_the_last_combo_takes_the_hash() {
    let mut hash = CustomerHash::created("A:B:x", digest("p1"));
    hash.success("A:B:x", 5, None, name);
    assert_eq!(
        hash.failure("A:B:y", None),
        (Recorded::IgnoredNoHabit, Left::Kept)
    );
    assert_eq!(
        hash.failure("A:B:x", None),
        (
            Recorded::Applied {
                net_count: 1,
                pruned: 0
            },
            Left::Kept
        )
    );
    assert_eq!(
        hash.failure("A:B:x", None),
        (
            Recorded::Applied {
                net_count: 0,
                pruned: 0
            },
            Left::Gone
        )
    );
}

#[test]
fn a_repeat_writes_nothing_and_answers_the_named_count() {
    let mut hash = CustomerHash::created("A:B:x", digest("p1"));
    let before = hash.clone();
    assert_eq!(
        hash.success("A:B:x", 5, digest("p1"), name),
        Recorded::Duplicate { net_count: 1 }
    );
    assert_eq!(
        hash.failure("A:B:y", digest("p1")),
        (Recorded::Duplicate { net_count: 0 }, Left::Kept)
    );
    assert_eq!(hash, before);
    assert!(hash.remembers(digest("p1")));
    assert!(!hash.remembers(None));
}

#[test]
fn the_ninth_attempt_after_one_forgets_it() {
    let mut hash = CustomerHash::created("A:B:x", digest("first"));
    for i in 0..7 {
        hash.success("A:B:x", 5, digest(&format!("n{i}")), name);
    }
    assert!(hash.remembers(digest("first")));
    hash.success("A:B:x", 5, digest("n7"), name);
    assert!(!hash.remembers(digest("first")));
}

#[test]
fn a_hash_lives_exactly_its_ttl_after_its_last_write() {
    let ttl = Duration::from_secs(10);
    assert!(!outlived(1_000, 11_000, ttl));
    assert!(outlived(1_000, 11_001, ttl));
    assert!(!outlived(1_000, 500, ttl));
    assert!(!outlived(i64::MIN, i64::MAX, Duration::MAX));
}
