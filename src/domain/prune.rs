//! The per-customer combo cap. When a write creates a new field and the hash
//! then holds more than the cap, the excess fields with the lowest counts go,
//! never the field just written; ties go bytewise-smallest field first.
//!
//! The prune has to be atomic with the write, so it runs inside Redis as
//! `storage/scripts/record_success.lua`; `src/storage/scripts/tests.rs` holds that
//! script equal to [`fields_to_prune`].

use std::cmp::Ordering;

/// The fields the cap removes from `fields` after `just_written` was created,
/// in the order they are chosen.
pub fn fields_to_prune<'f>(
    fields: &'f [(String, i64)],
    cap: usize,
    just_written: &str,
) -> Vec<&'f str> {
    prune_among(
        fields.iter().map(|(field, count)| (field.as_str(), *count)),
        cap,
        just_written,
    )
}

/// [`fields_to_prune`] over any listing of a hash's fields, for a caller
/// that keeps them in another shape (`sticky-routing replay`).
pub fn prune_among<'f>(
    fields: impl ExactSizeIterator<Item = (&'f str, i64)>,
    cap: usize,
    just_written: &str,
) -> Vec<&'f str> {
    let excess = fields.len().saturating_sub(cap);
    if excess == 0 {
        return Vec::new();
    }
    let mut victims: Vec<(&str, i64)> =
        fields.filter(|(field, _)| *field != just_written).collect();
    victims.sort_by(prune_order);
    victims
        .into_iter()
        .take(excess)
        .map(|(field, _)| field)
        .collect()
}

/// Lowest count first; on a tie the bytewise-smallest field name.
fn prune_order(a: &(&str, i64), b: &(&str, i64)) -> Ordering {
    a.1.cmp(&b.1)
        .then_with(|| a.0.as_bytes().cmp(b.0.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn hash(pairs: &[(&str, i64)]) -> Vec<(String, i64)> {
        pairs.iter().map(|(f, c)| (f.to_string(), *c)).collect()
    }

    #[test]
    fn nothing_goes_at_or_under_the_cap() {
        assert!(fields_to_prune(&hash(&[("a", 1), ("b", 1)]), 2, "b").is_empty());
    }

    #[test]
    fn the_lowest_count_goes_but_never_the_new_field() {
        let fields = hash(&[("A:B:x", 5), ("A:B:y", 2), ("A:B:new", 1)]);
        assert_eq!(fields_to_prune(&fields, 2, "A:B:new"), vec!["A:B:y"]);
    }

    #[test]
    fn ties_go_bytewise_smallest_first() {
        let fields = hash(&[("A:B:b", 2), ("A:B:B", 2), ("A:B:a", 2), ("A:B:z", 1)]);
        // 'B' (0x42) sorts before 'a' and 'b'.
        assert_eq!(fields_to_prune(&fields, 2, "A:B:z"), vec!["A:B:B", "A:B:a"]);
    }

    #[test]
    fn the_whole_excess_drains_when_the_cap_shrank() {
        let fields = hash(&[("a", 9), ("b", 8), ("c", 7), ("d", 6), ("n", 1)]);
        assert_eq!(fields_to_prune(&fields, 2, "n"), vec!["d", "c", "b"]);
    }

    proptest! {
        #[test]
        fn pruning_lands_on_the_cap_and_keeps_the_best(
            counts in proptest::collection::btree_map("[a-d]{1,3}", 1i64..5, 2..12),
            cap in 1usize..8,
        ) {
            let fields: Vec<(String, i64)> = counts.clone().into_iter().collect();
            let just_written = fields[0].0.clone();
            let pruned = fields_to_prune(&fields, cap, &just_written);
            prop_assert_eq!(pruned.len(), fields.len().saturating_sub(cap));
            prop_assert!(!pruned.contains(&just_written.as_str()));
            let kept: BTreeMap<_, _> = counts.iter().filter(|(f, _)| !pruned.contains(&f.as_str())).collect();
            for victim in &pruned {
                let victim_count = counts[*victim];
                for (field, count) in &kept {
                    if **field != just_written {
                        prop_assert!((**count, field.as_bytes()) > (victim_count, victim.as_bytes()));
                    }
                }
            }
        }
    }
}
