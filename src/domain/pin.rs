//! Pin choice: which connector the orchestrator should pin a payment to.
//!
//! Candidates are the fields `{PM}:{PMT}:*` whose count reaches the minimum,
//! restricted to the eligible connectors when the caller lists them. The
//! highest count wins; ties go to the connector listed first in
//! `eligible_connectors`, or without that list to the bytewise-smallest name.
//!
//! The health veto lets a pin yield to a connector that is failing right now:
//! given the orchestrator's live scores, a candidate scoring below
//! `ratio × top` is vetoed, and the pin is the best candidate left. It reads
//! nothing more than the hash, so GetPin stays one Redis command.
//!
//! The circuit breaker (contract v1.2 §3) vetoes too: [`choose_pin_with`]
//! asks it about each candidate, its reason wins over the score's, and the
//! pin is the best candidate vetoed for no reason. [`choose_pin`] is v1.1's
//! GetPin exactly (no breaker).

use std::cmp::Ordering;
use std::collections::HashMap;

use super::breaker::VetoReason;
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
    /// The health veto, when the caller sent scores and a non-zero ratio.
    pub veto: Option<Veto>,
}

/// The share of the top score a candidate needs to escape the veto: a finite
/// number in [0, 1]; 0 disables the veto.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScoreRatio(f64);

impl ScoreRatio {
    pub const DEFAULT: Self = Self(0.5);

    /// `None` unless `ratio` is in [0, 1].
    pub fn new(ratio: f64) -> Option<Self> {
        (0.0..=1.0).contains(&ratio).then_some(Self(ratio))
    }

    pub fn get(self) -> f64 {
        self.0
    }
}

/// Never NaN, so equality is total.
impl Eq for ScoreRatio {}

/// The live scores that can veto a candidate, and the bar they set.
#[derive(Debug, Clone, PartialEq)]
pub struct Veto {
    scores: HashMap<String, f64>,
    /// `ratio × top`: a scored candidate below it is vetoed.
    bar: f64,
}

impl Veto {
    /// The veto for `scores` (finite and non-negative, checked by the caller),
    /// where `top` is the best score among the eligible connectors (all of
    /// them when `eligible` is empty). `None` when nothing can be vetoed.
    pub fn new(
        scores: HashMap<String, f64>,
        ratio: ScoreRatio,
        eligible: &[Connector],
    ) -> Option<Self> {
        if ratio.get() == 0.0 {
            return None;
        }
        let top = scores
            .iter()
            .filter(|(connector, _)| {
                eligible.is_empty() || eligible.iter().any(|c| c.as_str() == connector.as_str())
            })
            .map(|(_, score)| *score)
            .reduce(f64::max)?;
        Some(Self {
            scores,
            bar: ratio.get() * top,
        })
    }

    /// A connector without a score is never vetoed.
    pub fn vetoes(&self, connector: &str) -> bool {
        self.scores
            .get(connector)
            .is_some_and(|score| *score < self.bar)
    }
}

/// GetPin's answer: every qualifying candidate best first, the vetoed ones
/// in the same order (each once, whatever vetoed it), every veto with its
/// reason in that order too, and the pin, the best candidate not vetoed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinChoice {
    pub candidates: Vec<Candidate>,
    pub vetoed: Vec<Candidate>,
    /// The vetoed candidates with why: the breaker's reason wins over the
    /// score's when both veto one (contract v1.2 §3).
    pub vetoes: Vec<(Candidate, VetoReason)>,
    pub pin: Option<Candidate>,
}

/// Ranks the candidates and applies the score veto: v1.1's GetPin.
pub fn choose_pin(fields: &[(String, i64)], query: &PinQuery) -> PinChoice {
    choose_pin_with(fields, query, |_| None)
}

/// Ranks the candidates and applies both vetoes: `breaker` says, for one
/// connector, whether its circuit breaker vetoes it (called once per
/// candidate, in candidates order).
pub fn choose_pin_with(
    fields: &[(String, i64)],
    query: &PinQuery,
    mut breaker: impl FnMut(&str) -> Option<VetoReason>,
) -> PinChoice {
    let candidates = rank_candidates(fields, query);
    let mut vetoed = Vec::new();
    let mut vetoes = Vec::new();
    let mut pin = None;
    for candidate in &candidates {
        let by_score = || {
            query
                .veto
                .as_ref()
                .is_some_and(|veto| veto.vetoes(&candidate.connector))
                .then_some(VetoReason::Score)
        };
        match breaker(&candidate.connector).or_else(by_score) {
            Some(reason) => {
                vetoed.push(candidate.clone());
                vetoes.push((candidate.clone(), reason));
            }
            None if pin.is_none() => pin = Some(candidate.clone()),
            None => {}
        }
    }
    PinChoice {
        candidates,
        vetoed,
        vetoes,
        pin,
    }
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
        .filter_map(|(field, count)| {
            let connector = qualifying(field, *count, &query.prefix, query.min_count)?;
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

/// The pin of a GetPin with no eligible list and no veto, as
/// [`rank_candidates`] ranks it, without allocating: the connector and its
/// count. `sticky-routing replay` asks this once per attempt of a history.
pub fn best_candidate<'f>(
    fields: impl IntoIterator<Item = (&'f str, i64)>,
    prefix: &MethodPrefix,
    min_count: i64,
) -> Option<(&'f str, i64)> {
    fields
        .into_iter()
        .filter_map(|(field, count)| Some((qualifying(field, count, prefix, min_count)?, count)))
        .min_by(|a, b| by_count_then_name((a.1, a.0), (b.1, b.0)))
}

/// The connector of `field` when it is a candidate: of the payment method
/// of `prefix`, with a count of at least `min_count`.
fn qualifying<'f>(
    field: &'f str,
    count: i64,
    prefix: &MethodPrefix,
    min_count: i64,
) -> Option<&'f str> {
    if count < min_count {
        return None;
    }
    prefix.connector_of(field)
}

/// Best first: the higher count, then the bytewise-smaller connector.
fn by_count_then_name(a: (i64, &str), b: (i64, &str)) -> Ordering {
    b.0.cmp(&a.0)
        .then_with(|| a.1.as_bytes().cmp(b.1.as_bytes()))
}

fn best_first(a: &(Option<usize>, Candidate), b: &(Option<usize>, Candidate)) -> Ordering {
    match (a.0, b.0) {
        (Some(ia), Some(ib)) => b.1.net_count.cmp(&a.1.net_count).then(ia.cmp(&ib)),
        _ => by_count_then_name(
            (a.1.net_count, &a.1.connector),
            (b.1.net_count, &b.1.connector),
        ),
    }
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
            veto: None,
        }
    }

    fn vetoed_query(eligible: &[&str], scores: &[(&str, f64)], ratio: f64) -> PinQuery {
        let mut q = query(eligible, 1);
        q.veto = Veto::new(
            scores.iter().map(|(c, s)| (c.to_string(), *s)).collect(),
            ScoreRatio::new(ratio).unwrap(),
            &q.eligible,
        );
        q
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

    #[test]
    fn a_failing_pinned_connector_yields_to_the_next_candidate() {
        let fields = hash(&[
            ("INTERAC:RTP:a", 5),
            ("INTERAC:RTP:b", 3),
            ("INTERAC:RTP:c", 1),
        ]);
        let choice = choose_pin(&fields, &vetoed_query(&[], &[("a", 0.2), ("b", 0.9)], 0.5));
        assert_eq!(names(&choice.candidates), ["a", "b", "c"]);
        assert_eq!(names(&choice.vetoed), ["a"]);
        assert_eq!(choice.pin.unwrap().connector, "b");
    }

    #[test]
    fn unscored_candidates_are_never_vetoed_and_all_vetoed_means_no_pin() {
        let fields = hash(&[("INTERAC:RTP:a", 5), ("INTERAC:RTP:b", 3)]);
        let choice = choose_pin(&fields, &vetoed_query(&[], &[("a", 0.1), ("z", 1.0)], 0.5));
        assert_eq!(choice.pin.unwrap().connector, "b");
        let choice = choose_pin(
            &fields,
            &vetoed_query(&[], &[("a", 0.1), ("b", 0.4), ("z", 1.0)], 0.5),
        );
        assert_eq!(names(&choice.vetoed), ["a", "b"]);
        assert_eq!(choice.pin, None);
    }

    #[test]
    fn the_top_score_comes_from_eligible_connectors_only() {
        let fields = hash(&[("INTERAC:RTP:a", 5), ("INTERAC:RTP:b", 3)]);
        // z is not eligible, so the top is a's 0.4 and nothing is vetoed.
        let choice = choose_pin(
            &fields,
            &vetoed_query(&["a", "b"], &[("a", 0.4), ("b", 0.3), ("z", 1.0)], 0.5),
        );
        assert!(choice.vetoed.is_empty());
        assert_eq!(choice.pin.unwrap().connector, "a");
    }

    #[test]
    fn the_bar_is_exclusive_and_a_zero_ratio_disables_the_veto() {
        let fields = hash(&[("INTERAC:RTP:a", 5)]);
        let at_bar = vetoed_query(&[], &[("a", 0.5), ("z", 1.0)], 0.5);
        assert_eq!(choose_pin(&fields, &at_bar).pin.unwrap().connector, "a");
        let off = vetoed_query(&[], &[("a", 0.0), ("z", 1.0)], 0.0);
        assert!(off.veto.is_none());
        assert_eq!(ScoreRatio::new(1.5), None);
        assert_eq!(ScoreRatio::new(f64::NAN), None);
    }

    fn reasons(choice: &PinChoice) -> Vec<(&str, VetoReason)> {
        choice
            .vetoes
            .iter()
            .map(|(c, r)| (c.connector.as_str(), *r))
            .collect()
    }

    #[test]
    fn score_vetoes_are_listed_with_their_reason() {
        let fields = hash(&[("INTERAC:RTP:a", 5), ("INTERAC:RTP:b", 3)]);
        let choice = choose_pin(&fields, &vetoed_query(&[], &[("a", 0.1), ("b", 0.9)], 0.5));
        assert_eq!(reasons(&choice), [("a", VetoReason::Score)]);
        assert_eq!(choose_pin(&fields, &query(&[], 1)).vetoes, []);
    }

    #[test]
    fn an_open_breaker_passes_the_pin_to_the_next_candidate() {
        let fields = hash(&[
            ("INTERAC:RTP:a", 5),
            ("INTERAC:RTP:b", 3),
            ("INTERAC:RTP:c", 1),
        ]);
        let choice = choose_pin_with(&fields, &query(&[], 1), |c| {
            (c == "a").then_some(VetoReason::CircuitOpen)
        });
        assert_eq!(names(&choice.candidates), ["a", "b", "c"]);
        assert_eq!(names(&choice.vetoed), ["a"]);
        assert_eq!(reasons(&choice), [("a", VetoReason::CircuitOpen)]);
        assert_eq!(choice.pin.unwrap().connector, "b");
    }

    #[test]
    fn a_candidate_vetoed_twice_is_listed_once_with_the_breakers_reason() {
        let fields = hash(&[
            ("INTERAC:RTP:a", 5),
            ("INTERAC:RTP:b", 3),
            ("INTERAC:RTP:c", 1),
        ]);
        // a: score and breaker; b: breaker only; c: score only.
        let q = vetoed_query(&[], &[("a", 0.1), ("b", 1.0), ("c", 0.1)], 0.5);
        let mut asked = Vec::new();
        let choice = choose_pin_with(&fields, &q, |c| {
            asked.push(c.to_owned());
            match c {
                "a" => Some(VetoReason::ForcedOpen),
                "b" => Some(VetoReason::CircuitHalfOpen),
                _ => None,
            }
        });
        assert_eq!(asked, ["a", "b", "c"]);
        assert_eq!(names(&choice.vetoed), ["a", "b", "c"]);
        assert_eq!(
            reasons(&choice),
            [
                ("a", VetoReason::ForcedOpen),
                ("b", VetoReason::CircuitHalfOpen),
                ("c", VetoReason::Score),
            ]
        );
        assert_eq!(choice.pin, None);
    }

    /// GetPin as v1.1 wrote it, before the breaker: the reference
    /// `choose_pin` must still match exactly.
    fn v1_1_choose_pin(
        fields: &[(String, i64)],
        query: &PinQuery,
    ) -> (Vec<Candidate>, Vec<Candidate>, Option<Candidate>) {
        let candidates = rank_candidates(fields, query);
        let vetoed: Vec<Candidate> = match &query.veto {
            Some(veto) => candidates
                .iter()
                .filter(|c| veto.vetoes(&c.connector))
                .cloned()
                .collect(),
            None => Vec::new(),
        };
        let pin = candidates.iter().find(|c| !vetoed.contains(c)).cloned();
        (candidates, vetoed, pin)
    }

    fn breaker_reason() -> impl Strategy<Value = Option<VetoReason>> {
        prop_oneof![
            Just(None),
            Just(Some(VetoReason::CircuitOpen)),
            Just(Some(VetoReason::CircuitHalfOpen)),
            Just(Some(VetoReason::ForcedOpen)),
        ]
    }

    proptest! {
        #[test]
        fn without_breaker_vetoes_getpin_is_v1_1_exactly(
            counts in proptest::collection::btree_map("[a-d]", -1i64..6, 0..5),
            scores in proptest::collection::hash_map("[a-e]", 0.0f64..1.0, 0..6),
            ratio in 0.0f64..=1.0,
            eligible in proptest::collection::vec("[a-e]", 0..4),
            min_count in 1i64..3,
        ) {
            let fields: Vec<(String, i64)> =
                counts.iter().map(|(c, n)| (format!("INTERAC:RTP:{c}"), *n)).collect();
            let eligible: Vec<&str> = eligible.iter().map(String::as_str).collect();
            let mut q = query(&eligible, min_count);
            q.veto = Veto::new(scores, ScoreRatio::new(ratio).unwrap(), &q.eligible);
            let (candidates, vetoed, pin) = v1_1_choose_pin(&fields, &q);
            let with = choose_pin_with(&fields, &q, |_| None);
            prop_assert_eq!(&with, &choose_pin(&fields, &q));
            prop_assert_eq!(&with.candidates, &candidates);
            prop_assert_eq!(&with.vetoed, &vetoed);
            prop_assert_eq!(&with.pin, &pin);
            let scored: Vec<(Candidate, VetoReason)> =
                vetoed.into_iter().map(|c| (c, VetoReason::Score)).collect();
            prop_assert_eq!(with.vetoes, scored);
        }

        #[test]
        fn the_pin_is_the_best_candidate_vetoed_for_no_reason(
            counts in proptest::collection::btree_map("[a-d]", 1i64..6, 0..5),
            scores in proptest::collection::hash_map("[a-e]", 0.0f64..1.0, 0..6),
            ratio in 0.0f64..=1.0,
            breaker in proptest::collection::hash_map("[a-e]", breaker_reason(), 0..6),
        ) {
            let fields: Vec<(String, i64)> =
                counts.iter().map(|(c, n)| (format!("INTERAC:RTP:{c}"), *n)).collect();
            let mut q = query(&[], 1);
            q.veto = Veto::new(scores, ScoreRatio::new(ratio).unwrap(), &[]);
            let by_breaker = |c: &str| breaker.get(c).copied().flatten();
            let choice = choose_pin_with(&fields, &q, by_breaker);
            let reason = |c: &Candidate| {
                by_breaker(&c.connector).or_else(|| {
                    q.veto.as_ref().is_some_and(|v| v.vetoes(&c.connector)).then_some(VetoReason::Score)
                })
            };
            let expected: Vec<(Candidate, VetoReason)> = choice
                .candidates
                .iter()
                .filter_map(|c| Some((c.clone(), reason(c)?)))
                .collect();
            prop_assert_eq!(&choice.vetoes, &expected);
            let vetoed: Vec<Candidate> = expected.into_iter().map(|(c, _)| c).collect();
            prop_assert_eq!(&choice.vetoed, &vetoed);
            prop_assert_eq!(
                choice.pin.as_ref(),
                choice.candidates.iter().find(|c| reason(c).is_none())
            );
        }

        #[test]
        fn the_pin_is_the_best_candidate_not_vetoed(
            counts in proptest::collection::btree_map("[a-d]", 1i64..6, 0..5),
            scores in proptest::collection::hash_map("[a-e]", 0.0f64..1.0, 0..6),
            ratio in 0.0f64..=1.0,
        ) {
            let fields: Vec<(String, i64)> =
                counts.iter().map(|(c, n)| (format!("INTERAC:RTP:{c}"), *n)).collect();
            let mut q = query(&[], 1);
            q.veto = Veto::new(scores.clone(), ScoreRatio::new(ratio).unwrap(), &[]);
            let choice = choose_pin(&fields, &q);
            let top = scores.values().copied().fold(0.0, f64::max);
            let vetoed = |c: &Candidate| {
                ratio > 0.0 && scores.get(&c.connector).is_some_and(|s| *s < ratio * top)
            };
            let expected: Vec<&Candidate> = choice.candidates.iter().filter(|c| vetoed(c)).collect();
            prop_assert_eq!(choice.vetoed.iter().collect::<Vec<_>>(), expected);
            prop_assert_eq!(choice.pin.as_ref(), choice.candidates.iter().find(|c| !vetoed(c)));
        }

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

        #[test]
        fn the_allocation_free_pin_is_the_first_ranked_candidate(
            counts in proptest::collection::btree_map("[a-cA-C]{1,2}", -2i64..6, 0..10),
            other_method in proptest::collection::btree_map("[a-c]", 1i64..9, 0..3),
            min_count in 1i64..4,
        ) {
            let mut fields: Vec<(String, i64)> =
                counts.iter().map(|(c, n)| (format!("INTERAC:RTP:{c}"), *n)).collect();
            // Another method's combos are never candidates, however high.
            fields.extend(other_method.iter().map(|(c, n)| (format!("CARD:CREDIT:{c}"), *n)));
            let q = query(&[], min_count);
            let ranked = rank_candidates(&fields, &q);
            let best = best_candidate(fields.iter().map(|(f, n)| (f.as_str(), *n)), &q.prefix, min_count);
            prop_assert_eq!(
                best,
                ranked.first().map(|c| (c.connector.as_str(), c.net_count))
            );
        }
    }
}
