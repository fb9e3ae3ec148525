//! Pin choice: which connector the orchestrator should pin a payment to.
//!
//! Candidates are the fields `{PM}:{PMT}:*` whose count reaches the minimum,
//! restricted to the eligible connectors when the caller lists them. The
//! highest count wins; ties go to the connector listed first in
//! `eligible_connectors`, or without that list to the bytewise-smallest name.

use std::cmp::Ordering;

use super::combo::MethodPrefix;
use super::ids::Connector;

/// Everything GetPin needs besides the stored hash.
#[derive(Debug, Clone)]
pub struct PinQuery {
    pub prefix: MethodPrefix,
    /// Empty means any connector.
    pub eligible: Vec<Connector>,
    /// Counts below this do not qualify (at least 1).
    pub min_count: i64,
}

/// A qualifying connector with its net count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub connector: String,
    pub net_count: i64,
}

/// Every qualifying candidate, best first; the pin is the first, if any.
pub fn rank_candidates(fields: &[(String, i64)], query: &PinQuery) -> Vec<Candidate> {
    let mut ranked: Vec<(Option<usize>, Candidate)> = fields
        .iter()
        .filter(|(_, count)| *count >= query.min_count)
        .filter_map(|(field, count)| {
            let connector = query.prefix.connector_of(field)?;
            let eligible_at = if query.eligible.is_empty() {
                None
            } else {
                Some(
                    query
                        .eligible
                        .iter()
                        .position(|c| c.as_str() == connector)?,
                )
            };
            Some((
                eligible_at,
                Candidate {
                    connector: connector.to_owned(),
                    net_count: *count,
                },
            ))
        })
        .collect();
    ranked.sort_by(best_first);
    ranked.into_iter().map(|(_, candidate)| candidate).collect()
}

fn best_first(a: &(Option<usize>, Candidate), b: &(Option<usize>, Candidate)) -> Ordering {
    b.1.net_count
        .cmp(&a.1.net_count)
        .then_with(|| match (a.0, b.0) {
            (Some(ia), Some(ib)) => ia.cmp(&ib),
            _ => a.1.connector.as_bytes().cmp(b.1.connector.as_bytes()),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::ids::{PaymentMethod, PaymentMethodType};
    use proptest::prelude::*;

    fn query(eligible: &[&str], min_count: i64) -> PinQuery {
        PinQuery {
            prefix: MethodPrefix::new(
                &PaymentMethod::parse("interac").unwrap(),
                &PaymentMethodType::parse("rtp").unwrap(),
            ),
            eligible: eligible
                .iter()
                .map(|c| Connector::parse(c).unwrap())
                .collect(),
            min_count,
        }
    }

    fn hash(pairs: &[(&str, i64)]) -> Vec<(String, i64)> {
        pairs.iter().map(|(f, c)| (f.to_string(), *c)).collect()
    }

    fn names(candidates: &[Candidate]) -> Vec<&str> {
        candidates.iter().map(|c| c.connector.as_str()).collect()
    }

    #[test]
    fn highest_count_of_the_method_wins() {
        let fields = hash(&[
            ("INTERAC:RTP:GIGADAT", 3),
            ("INTERAC:RTP:LOONIO", 2),
            ("CARD:DEBIT:ADYEN", 9),
        ]);
        assert_eq!(
            names(&rank_candidates(&fields, &query(&[], 1))),
            ["GIGADAT", "LOONIO"]
        );
    }

    #[test]
    fn ties_without_a_list_go_bytewise_smallest() {
        let fields = hash(&[
            ("INTERAC:RTP:b", 2),
            ("INTERAC:RTP:B", 2),
            ("INTERAC:RTP:a", 2),
        ]);
        assert_eq!(
            names(&rank_candidates(&fields, &query(&[], 1))),
            ["B", "a", "b"]
        );
    }

    #[test]
    fn ties_with_a_list_follow_the_list_order() {
        let fields = hash(&[
            ("INTERAC:RTP:a", 2),
            ("INTERAC:RTP:b", 2),
            ("INTERAC:RTP:c", 5),
        ]);
        let ranked = rank_candidates(&fields, &query(&["b", "a", "c"], 1));
        assert_eq!(names(&ranked), ["c", "b", "a"]);
    }

    #[test]
    fn the_list_restricts_candidates_case_sensitively() {
        let fields = hash(&[("INTERAC:RTP:Gigadat", 9), ("INTERAC:RTP:LOONIO", 1)]);
        assert_eq!(
            names(&rank_candidates(&fields, &query(&["GIGADAT", "LOONIO"], 1))),
            ["LOONIO"]
        );
    }

    #[test]
    fn counts_below_the_minimum_do_not_qualify() {
        let fields = hash(&[
            ("INTERAC:RTP:a", 2),
            ("INTERAC:RTP:b", 3),
            ("INTERAC:RTP:z", 0),
        ]);
        assert_eq!(names(&rank_candidates(&fields, &query(&[], 3))), ["b"]);
        assert_eq!(names(&rank_candidates(&fields, &query(&[], 1))), ["b", "a"]);
    }

    #[test]
    fn connectors_with_colons_are_matched_whole() {
        let fields = hash(&[("INTERAC:RTP:acme:eu", 2)]);
        assert_eq!(
            names(&rank_candidates(&fields, &query(&["acme:eu"], 1))),
            ["acme:eu"]
        );
    }

    proptest! {
        #[test]
        fn candidates_are_sorted_and_qualify(
            counts in proptest::collection::btree_map("[a-cA-C]{1,2}", -2i64..6, 0..10),
            min_count in 1i64..4,
        ) {
            let fields: Vec<(String, i64)> =
                counts.iter().map(|(c, n)| (format!("INTERAC:RTP:{c}"), *n)).collect();
            let ranked = rank_candidates(&fields, &query(&[], min_count));
            let expected = counts.values().filter(|n| **n >= min_count).count();
            prop_assert_eq!(ranked.len(), expected);
            for pair in ranked.windows(2) {
                prop_assert!((-pair[0].net_count, pair[0].connector.as_bytes())
                    < (-pair[1].net_count, pair[1].connector.as_bytes()));
            }
        }
    }
}
