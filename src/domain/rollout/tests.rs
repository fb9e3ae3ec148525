//! Tests of the rollout rules against contract v1.2 §4: the holdout share's
//! syntax, holdout membership (fixed vectors computed outside this code, and
//! its properties), GetPin's reason in every mode, and the experiment cell.

use proptest::prelude::*;

use super::*;

fn merchant(id: &str) -> MerchantId {
    MerchantId::parse(id).unwrap()
}

fn customer(id: &str) -> CustomerId {
    CustomerId::parse(id).unwrap()
}

fn connector(name: &str) -> Connector {
    Connector::parse(name).unwrap()
}

fn share(text: &str) -> HoldoutShare {
    HoldoutShare::parse(text).unwrap()
}

fn bp(points: u16) -> HoldoutShare {
    HoldoutShare::from_basis_points(points).unwrap()
}

// ---- HoldoutShare ----------------------------------------------------------

#[test]
fn holdout_shares_run_from_zero_to_fifty_percent_to_a_hundredth() {
    for (text, points) in [
        ("0%", 0),
        ("0.0%", 0),
        ("0.01%", 1),
        ("0.1%", 10),
        ("0.5%", 50),
        ("1%", 100),
        ("12.34%", 1234),
        ("12.5%", 1250),
        ("12.340%", 1234),
        ("012%", 1200),
        ("49.99%", 4999),
        ("50%", 5000),
        ("50.00%", 5000),
    ] {
        assert_eq!(share(text).basis_points(), points, "{text}");
    }
}

#[test]
fn anything_else_is_refused_naming_the_range() {
    for bad in [
        "",
        "%",
        "5",
        "0.05",
        "50.01%",
        "51%",
        "100%",
        "-1%",
        "+1%",
        "12.345%",
        "0.001%",
        ".5%",
        "5.%",
        " 5%",
        "5 %",
        "5%%",
        "1e1%",
        "NaN%",
        "inf%",
        "12,5%",
        "five%",
        "99999999999999999999999%",
        "٥%",
    ] {
        let why = HoldoutShare::parse(bad).unwrap_err();
        assert!(why.contains(&format!("`{bad}`")), "{bad}: {why}");
        assert!(why.contains("0% to 50%"), "{bad}: {why}");
    }
}

#[test]
fn basis_points_stop_at_fifty_percent() {
    assert_eq!(HoldoutShare::from_basis_points(5000), Some(bp(5000)));
    assert_eq!(HoldoutShare::from_basis_points(5001), None);
    assert_eq!(HoldoutShare::default(), HoldoutShare::ZERO);
    assert_eq!(Rollout::DEFAULT_HOLDOUT.basis_points(), 0);
}

proptest! {
    /// Every share prints as text that reads back as itself.
    #[test]
    fn a_share_reads_back_as_it_prints(points in 0u16..=5000) {
        let s = bp(points);
        prop_assert_eq!(HoldoutShare::parse(&s.to_string()), Ok(s));
    }
}

// ---- Mode and Rollout ------------------------------------------------------

#[test]
fn modes_read_in_any_case() {
    assert_eq!(Mode::parse("on"), Ok(Mode::On));
    assert_eq!(Mode::parse("ON"), Ok(Mode::On));
    assert_eq!(Mode::parse("Shadow"), Ok(Mode::Shadow));
    assert_eq!(Mode::parse("off"), Ok(Mode::Off));
    for bad in ["", "enabled", " on", "of", "shadowed", "1"] {
        let why = Mode::parse(bad).unwrap_err();
        assert!(why.contains(&format!("`{bad}`")), "{bad}: {why}");
    }
    for mode in [Mode::On, Mode::Shadow, Mode::Off] {
        assert_eq!(Mode::parse(&mode.to_string()), Ok(mode));
    }
}

#[test]
fn a_merchant_s_own_setting_wins_over_the_default() {
    let mut rollout = Rollout::default();
    assert_eq!(rollout.mode_of(&merchant("m1")), Mode::On);
    assert_eq!(rollout.holdout_of(&merchant("m1")), HoldoutShare::ZERO);
    rollout.mode = Mode::Shadow;
    rollout.holdout = share("5%");
    rollout.mode_for.insert("m1".into(), Mode::Off);
    rollout.holdout_for.insert("m1".into(), share("0%"));
    assert_eq!(rollout.mode_of(&merchant("m1")), Mode::Off);
    assert_eq!(rollout.holdout_of(&merchant("m1")), HoldoutShare::ZERO);
    assert_eq!(rollout.mode_of(&merchant("m2")), Mode::Shadow);
    assert_eq!(rollout.holdout_of(&merchant("m2")), share("5%"));
    // Looked up by the trimmed id.
    assert_eq!(rollout.mode_of(&merchant("  m1 ")), Mode::Off);
}

// ---- Holdout membership ----------------------------------------------------

/// Vectors computed outside this code, with Python's hashlib:
///
/// ```text
/// >>> import hashlib
/// >>> def bucket(salt, m, c):
/// ...     h = hashlib.sha256(salt + m.encode() + b"\x00" + c.encode()).digest()
/// ...     return int.from_bytes(h[:8], "big") % 10000
/// >>> bucket(b"", "merchant_1", "cust_42")        # first 8 bytes 1ced13385338e671
/// 1937
/// >>> bucket(b"s3cret", "acme", "customer-7")     # first 8 bytes 8f9eed4036d73ee9
/// 4361
/// >>> bucket(b"", "m", "c")                       # first 8 bytes 07418c60dd64e752
/// 4802
/// ```
#[test]
fn membership_matches_vectors_computed_independently() {
    assert_eq!(
        holdout_bucket(b"", &merchant("merchant_1"), &customer("cust_42")),
        1937
    );
    assert_eq!(
        holdout_bucket(b"s3cret", &merchant("acme"), &customer("customer-7")),
        4361
    );
    assert_eq!(holdout_bucket(b"", &merchant("m"), &customer("c")), 4802);

    // In below the bucket's boundary, out at it: bucket < basis points.
    let (m, c) = (merchant("merchant_1"), customer("cust_42"));
    assert!(!in_holdout(b"", &m, &c, share("19.37%")));
    assert!(in_holdout(b"", &m, &c, share("19.38%")));
    let (m, c) = (merchant("acme"), customer("customer-7"));
    assert!(!in_holdout(b"s3cret", &m, &c, share("43.61%")));
    assert!(in_holdout(b"s3cret", &m, &c, share("43.62%")));
    // The salt matters: without it this customer is elsewhere.
    assert_ne!(holdout_bucket(b"", &m, &c), 4361);
}

#[test]
fn membership_uses_the_trimmed_ids() {
    let trimmed = holdout_bucket(b"", &merchant("merchant_1"), &customer("cust_42"));
    let padded = holdout_bucket(b"", &merchant(" merchant_1\t"), &customer("  cust_42 "));
    assert_eq!(trimmed, padded);
}

#[test]
fn the_separator_keeps_the_ids_apart() {
    // Without the 0x00, ("ab", "c") and ("a", "bc") would hash the same bytes.
    let ab_c = holdout_bucket(b"", &merchant("ab"), &customer("c"));
    let a_bc = holdout_bucket(b"", &merchant("a"), &customer("bc"));
    assert_ne!(ab_c, a_bc);
}

/// Over 20,000 customers a share holds out about that share: the bounds are
/// loose (about ±7 standard deviations) so that only a wrong rule fails.
#[test]
fn a_share_holds_out_about_that_share_of_customers() {
    let m = merchant("merchant_1");
    let customers: Vec<CustomerId> = (0..20_000).map(|i| customer(&format!("c{i}"))).collect();
    let held = |s: HoldoutShare| {
        customers
            .iter()
            .filter(|c| in_holdout(b"", &m, c, s))
            .count()
    };
    let half = held(share("50%"));
    assert!((9_500..=10_500).contains(&half), "{half} of 20000 at 50%");
    let tenth = held(share("10%"));
    assert!((1_700..=2_300).contains(&tenth), "{tenth} of 20000 at 10%");
    let hundredth = held(share("0.01%"));
    assert!(hundredth <= 12, "{hundredth} of 20000 at 0.01%");
    assert_eq!(held(HoldoutShare::ZERO), 0);
}

fn id() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9_:.-]{1,40}"
}

proptest! {
    #[test]
    fn membership_is_stable(salt in any::<Vec<u8>>(), m in id(), c in id(), points in 0u16..=5000) {
        let (m, c, s) = (merchant(&m), customer(&c), bp(points));
        let first = in_holdout(&salt, &m, &c, s);
        prop_assert_eq!(in_holdout(&salt, &m, &c, s), first);
        prop_assert_eq!(in_holdout(&salt, &m.clone(), &c.clone(), s), first);
        prop_assert_eq!(first, holdout_bucket(&salt, &m, &c) < points);
    }

    #[test]
    fn a_zero_share_holds_out_nobody(salt in any::<Vec<u8>>(), m in id(), c in id()) {
        prop_assert!(!in_holdout(&salt, &merchant(&m), &customer(&c), HoldoutShare::ZERO));
    }

    /// Raising the share only adds customers: in at p means in at every q ≥ p.
    #[test]
    fn membership_grows_with_the_share(
        salt in any::<Vec<u8>>(), m in id(), c in id(), p in 0u16..=5000, q in 0u16..=5000,
    ) {
        let (low, high) = (p.min(q), p.max(q));
        let (m, c) = (merchant(&m), customer(&c));
        if in_holdout(&salt, &m, &c, bp(low)) {
            prop_assert!(in_holdout(&salt, &m, &c, bp(high)));
        }
    }
}

// ---- GetPin's answer -------------------------------------------------------

fn candidate(name: &str, net_count: i64) -> Candidate {
    Candidate {
        connector: name.to_owned(),
        net_count,
    }
}

/// A choice over `candidates` whose pin is `pin` (vetoes are not read by
/// `answer`, only whether a pin is left).
fn choice(candidates: &[Candidate], pin: Option<&Candidate>) -> PinChoice {
    PinChoice {
        candidates: candidates.to_vec(),
        vetoed: candidates
            .iter()
            .filter(|c| Some(*c) != pin)
            .cloned()
            .collect(),
        vetoes: Vec::new(),
        pin: pin.cloned(),
    }
}

#[test]
fn each_mode_answers_as_the_contract_says() {
    let stripe = candidate("stripe", 7);
    let adyen = candidate("adyen", 3);
    let pinned = choice(&[stripe.clone(), adyen.clone()], Some(&stripe));
    let all_vetoed = choice(&[stripe.clone(), adyen], None);
    let no_habit = choice(&[], None);
    let would = Some("stripe".to_owned());

    let on = answer(Mode::On, false, Some(&pinned));
    assert_eq!(
        on,
        PinAnswer {
            pinned: true,
            connector: Some(stripe),
            would_pin: would.clone(),
            reason: PinReason::Pinned
        }
    );
    let holdout = answer(Mode::On, true, Some(&pinned));
    assert_eq!(
        holdout,
        PinAnswer {
            pinned: false,
            connector: None,
            would_pin: would.clone(),
            reason: PinReason::Holdout
        }
    );
    for in_holdout in [false, true] {
        let shadow = answer(Mode::Shadow, in_holdout, Some(&pinned));
        assert_eq!(
            shadow,
            PinAnswer {
                pinned: false,
                connector: None,
                would_pin: would.clone(),
                reason: PinReason::Shadow
            }
        );
        for mode in [Mode::On, Mode::Shadow] {
            let reason = |c: Option<&PinChoice>| answer(mode, in_holdout, c).reason;
            assert_eq!(reason(Some(&no_habit)), PinReason::NoHabit);
            assert_eq!(reason(None), PinReason::NoHabit);
            assert_eq!(reason(Some(&all_vetoed)), PinReason::AllVetoed);
            assert_eq!(answer(mode, in_holdout, Some(&all_vetoed)).would_pin, None);
        }
        for c in [None, Some(&pinned), Some(&all_vetoed), Some(&no_habit)] {
            assert_eq!(
                answer(Mode::Off, in_holdout, c),
                PinAnswer {
                    pinned: false,
                    connector: None,
                    would_pin: None,
                    reason: PinReason::Disabled
                }
            );
        }
    }
}

fn any_mode() -> impl Strategy<Value = Mode> {
    prop_oneof![Just(Mode::On), Just(Mode::Shadow), Just(Mode::Off)]
}

/// A choice as the rules make one: ranked candidates, and as the pin either
/// one of them or none (all vetoed, or no candidate at all).
fn any_choice() -> impl Strategy<Value = Option<PinChoice>> {
    let candidates = prop::collection::vec(("[a-z]{1,8}", 1i64..100), 0..4).prop_map(|v| {
        v.into_iter()
            .map(|(name, count)| candidate(&name, count))
            .collect::<Vec<_>>()
    });
    let with_pin = (candidates, any::<prop::sample::Index>(), any::<bool>()).prop_map(
        |(candidates, at, vetoed_all)| {
            let pin = (!vetoed_all && !candidates.is_empty())
                .then(|| &candidates[at.index(candidates.len())]);
            choice(&candidates, pin)
        },
    );
    prop::option::of(with_pin)
}

proptest! {
    #[test]
    fn every_answer_keeps_the_contract_s_invariants(
        mode in any_mode(), in_holdout in any::<bool>(), choice in any_choice(),
    ) {
        let a = answer(mode, in_holdout, choice.as_ref());
        let pin = choice.as_ref().and_then(|c| c.pin.as_ref());
        // HOLDOUT and SHADOW always come with a would_pin.
        if matches!(a.reason, PinReason::Holdout | PinReason::Shadow) {
            prop_assert!(a.would_pin.is_some());
        }
        // PINNED, and only PINNED, pins; its connector is the would_pin.
        prop_assert_eq!(a.pinned, a.reason == PinReason::Pinned);
        prop_assert_eq!(a.connector.is_some(), a.pinned);
        if a.pinned {
            prop_assert_eq!(a.connector.as_ref().map(|c| &c.connector), a.would_pin.as_ref());
            prop_assert_eq!(a.connector.as_ref(), pin);
        }
        // Off is DISABLED with nothing named.
        if mode == Mode::Off {
            prop_assert_eq!(a.reason, PinReason::Disabled);
            prop_assert_eq!(a.would_pin.as_ref(), None);
        } else {
            prop_assert_ne!(a.reason, PinReason::Disabled);
            // would_pin is the rules' pick, whatever the mode did with it.
            prop_assert_eq!(a.would_pin.as_ref(), pin.map(|p| &p.connector));
        }
        if matches!(a.reason, PinReason::NoHabit | PinReason::AllVetoed) {
            prop_assert!(a.would_pin.is_none());
        }
        // The holdout applies in mode on only.
        if mode != Mode::On {
            prop_assert_eq!(&a, &answer(mode, !in_holdout, choice.as_ref()));
        }
        if a.reason == PinReason::Holdout {
            prop_assert!(mode == Mode::On && in_holdout);
        }
        if a.reason == PinReason::Shadow {
            prop_assert_eq!(mode, Mode::Shadow);
        }
    }
}

// ---- The experiment cell ---------------------------------------------------

#[test]
fn outcomes_count_in_the_contract_s_cells() {
    let stripe = connector("stripe");
    let adyen = connector("adyen");
    let followed = (&stripe, Some(&stripe));
    let overridden = (&adyen, Some(&stripe));
    let cell_of = |mode, held, (c, pin): (&Connector, Option<&Connector>)| cell(mode, held, c, pin);

    use Group::*;
    use Split::*;
    assert_eq!(
        cell_of(Mode::On, false, followed),
        Some((Treated, Some(Followed)))
    );
    assert_eq!(
        cell_of(Mode::On, false, overridden),
        Some((Treated, Some(Overridden)))
    );
    assert_eq!(cell_of(Mode::On, true, followed), Some((Holdout, None)));
    assert_eq!(cell_of(Mode::On, true, overridden), Some((Holdout, None)));
    for held in [false, true] {
        assert_eq!(
            cell_of(Mode::Shadow, held, followed),
            Some((Shadow, Some(Followed)))
        );
        assert_eq!(
            cell_of(Mode::Shadow, held, overridden),
            Some((Shadow, Some(Overridden)))
        );
        assert_eq!(cell_of(Mode::Off, held, followed), None);
        assert_eq!(cell_of(Mode::Off, held, overridden), None);
        for mode in [Mode::On, Mode::Shadow, Mode::Off] {
            assert_eq!(cell(mode, held, &stripe, None), None);
        }
    }
    // A connector is compared verbatim: names differing in case are two.
    let upper = connector("Stripe");
    assert_eq!(
        cell(Mode::On, false, &upper, Some(&stripe)),
        Some((Treated, Some(Overridden)))
    );
}
