//! The key layout of the default tenant: exactly the layout without tenants, injective, and apart across kinds.

use super::*;
use proptest::prelude::*;

fn key(merchant: &str, customer: &str) -> CustomerKey {
    customer_key(
        &Tenant::DEFAULT,
        &MerchantId::parse(merchant).unwrap(),
        &CustomerId::parse(customer).unwrap(),
    )
}

/// The ids `parse_customer_key` reads from `key`, as text.
fn decode(key: &str) -> (String, String) {
    let (tenant, merchant, customer) = parse_customer_key(key).unwrap();
    assert!(tenant.is_default());
    (merchant.as_str().to_owned(), customer.as_str().to_owned())
}

#[test]
fn keys_the_service_cannot_write_do_not_parse() {
    for key in [
        "sticky_adm_m1",
        "sticky_gw_m1",        // no customer
        "sticky_gw__c",        // empty merchant
        "sticky_gw_m1_",       // empty customer
        "sticky_gw_m%_c",      // a bare %
        "sticky_gw_m%41_c",    // an escape it never writes
        "sticky_gw_m1_c%5F",   // `_` is not escaped in a customer id
        "sticky_gw_{m}_c",     // a raw hash tag
        "sticky_gw_m1_ c",     // not trimmed
        "sticky_gw_m1_c\u{0}", // a control character
    ] {
        assert_eq!(parse_customer_key(key), None, "{key:?}");
    }
    assert_eq!(
        decode("sticky_gw_m%5F1_c_1%25"),
        ("m_1".into(), "c_1%".into())
    );
}

#[test]
fn the_match_pattern_escapes_glob_characters() {
    assert_eq!(customer_key_pattern(&Tenant::DEFAULT, None), "sticky_gw_*");
    let merchant = MerchantId::parse("a*?[x]\\_{%}").unwrap();
    assert_eq!(
        customer_key_pattern(&Tenant::DEFAULT, Some(&merchant)),
        "sticky_gw_a\\*\\?\\[x\\]\\\\%5F%7B%25%7D_*"
    );
}

#[test]
fn plain_ids_map_to_the_spec_layout() {
    assert_eq!(key("m1", "cust42"), "sticky_gw_m1_cust42");
    assert_eq!(key("m1", "cus_abc"), "sticky_gw_m1_cus_abc");
}

#[test]
fn underscores_in_merchant_ids_cannot_shift_the_boundary() {
    assert_eq!(
        key("merchant_123", "cus_abc"),
        "sticky_gw_merchant%5F123_cus_abc"
    );
    assert_ne!(key("a_b", "c"), key("a", "b_c"));
}

#[test]
fn hash_tags_and_escapes_are_neutralised() {
    assert_eq!(key("{m}", "{c}%"), "sticky_gw_%7Bm%7D_%7Bc%7D%25");
    assert_ne!(key("m", "%7B"), key("m", "{"));
}

#[test]
fn admission_keys_are_not_customer_keys() {
    let merchant = MerchantId::parse("m_1").unwrap();
    assert_eq!(
        admission_key(&Tenant::DEFAULT, &merchant),
        "sticky_adm_m%5F1"
    );
    assert!(!admission_key(&Tenant::DEFAULT, &merchant).starts_with(CUSTOMER_KEY_PREFIX));
    assert!(!CUSTOMER_KEY_PREFIX.starts_with(ADMISSION_KEY_PREFIX));
}

/// The escaped characters, their escapes, and parts of those: an id
/// made of them looks escaped already, which an escape rule that is not
/// injective gets wrong.
const ESCAPE_LIKE: &[&str] = &[
    "%", "_", "{", "}", "%25", "%5F", "%7B", "%7D", "25", "5F", "7B", "7D",
];

/// One piece of an id: a character of any kind an id may hold (both
/// cases, digits, a space, which is kept inside an id and trimmed at its
/// ends, and 2-, 3- and 4-byte UTF-8), or an escape-like piece.
fn piece() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-zA-Z0-9 é€日🦀]",
        prop::sample::select(ESCAPE_LIKE).prop_map(str::to_owned),
    ]
}

/// An id of up to `pieces` pieces that the id rules accept, as they
/// parse it (trimmed; one over 128 bytes is rejected, so dropped).
fn valid_id(pieces: usize, piece: impl Strategy<Value = String>) -> impl Strategy<Value = String> {
    prop::collection::vec(piece, 1..=pieces).prop_filter_map("not a valid id", |pieces| {
        let raw = pieces.concat();
        let merchant = MerchantId::parse(&raw).ok()?;
        CustomerId::parse(&raw).ok()?;
        Some(merchant.as_str().to_owned())
    })
}

/// Short ids from few pieces, so that a batch of them often holds two
/// pairs that escape alike unless the rule is injective.
fn clashing_id() -> impl Strategy<Value = String> {
    let pieces: Vec<&str> = ESCAPE_LIKE.iter().copied().chain(["é"]).collect();
    valid_id(3, prop::sample::select(pieces).prop_map(str::to_owned))
}

fn merchant(id: &str) -> MerchantId {
    MerchantId::parse(id).unwrap()
}

/// The Redis Cluster hash tag of `key`: what lies between its first `{`
/// and the next `}`, when that is not empty; else the whole key.
pub(super) fn hash_tag(key: &str) -> &str {
    key.find('{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            let close = rest.find('}')?;
            (close > 0).then(|| &rest[..close])
        })
        .unwrap_or(key)
}

#[test]
fn breaker_keys_follow_the_design_layout() {
    use crate::domain::shards::{Shard, shard_of};
    let m = merchant("m1");
    let tag = shard_of(&Tenant::DEFAULT, &m).tag();
    assert_eq!(
        breaker_counts_key(&Tenant::DEFAULT, &m),
        format!("sticky_brk_c{{{tag}}}m1").as_str()
    );
    assert_eq!(
        breaker_open_key(&Tenant::DEFAULT, &m, "GIGADAT"),
        format!("sticky_brk_o{{{tag}}}m1_GIGADAT").as_str()
    );
    let first = Shard::all().next().unwrap();
    assert_eq!(
        breaker_index_key(first),
        format!("sticky_brk_i{{{}}}", first.tag()).as_str()
    );
    assert_eq!(
        index_trip_field(&Tenant::DEFAULT, &m, "GIGADAT"),
        "t2:m1GIGADAT"
    );
    assert_eq!(
        index_override_field(&Tenant::DEFAULT, &m, "acme:eu"),
        "o2:m1acme:eu"
    );
    let odd = merchant("a_{b}%");
    let tag = shard_of(&Tenant::DEFAULT, &odd).tag();
    assert_eq!(
        breaker_counts_key(&Tenant::DEFAULT, &odd),
        format!("sticky_brk_c{{{tag}}}a%5F%7Bb%7D%25").as_str()
    );
    assert_eq!(
        breaker_open_key(&Tenant::DEFAULT, &odd, "x_{y}%"),
        format!("sticky_brk_o{{{tag}}}a%5F%7Bb%7D%25_x_%7By%7D%25").as_str()
    );
    // Every key of a merchant is in its shard's slot, with its index.
    assert_eq!(
        hash_tag(&breaker_open_key(&Tenant::DEFAULT, &odd, "}{")),
        tag
    );
    assert_eq!(hash_tag(&breaker_counts_key(&Tenant::DEFAULT, &odd)), tag);
    assert_eq!(
        hash_tag(&breaker_index_key(shard_of(&Tenant::DEFAULT, &odd))),
        tag
    );
    assert_eq!(
        hash_tag(&experiment_key(&Tenant::DEFAULT, &odd, 20261207)),
        tag
    );
    // Index fields hold the ids verbatim: the length ends the merchant.
    assert_eq!(index_trip_field(&Tenant::DEFAULT, &odd, "c"), "t6:a_{b}%c");
    let index = breaker_index_key(first);
    for key in [
        index.as_str(),
        &breaker_counts_key(&Tenant::DEFAULT, &m),
        &breaker_open_key(&Tenant::DEFAULT, &m, "c"),
    ] {
        assert!(key.starts_with(BREAKER_KEY_PREFIX));
        assert!(!key.starts_with(CUSTOMER_KEY_PREFIX));
        assert!(!key.starts_with(ADMISSION_KEY_PREFIX));
    }
    for prefix in [CUSTOMER_KEY_PREFIX, ADMISSION_KEY_PREFIX] {
        assert!(!prefix.starts_with(BREAKER_KEY_PREFIX));
        assert!(!BREAKER_KEY_PREFIX.starts_with(prefix));
    }
}

#[test]
fn experiment_keys_of_both_layouts_parse_back_and_never_meet() {
    let acme = Tenant::parse("acme").unwrap();
    for tenant in [&Tenant::DEFAULT, &acme] {
        for m in ["m1", "a_{b}%", "%Tx"] {
            let m = merchant(m);
            let new = experiment_key(tenant, &m, 20261207);
            let old = legacy_experiment_key(tenant, &m, 20261207);
            assert_ne!(new, old);
            assert!(new.as_str().starts_with("sticky_exp_{"), "{new:?}");
            assert!(!old.as_str().starts_with("sticky_exp_{"), "{old:?}");
            for key in [&new, &old] {
                assert_eq!(
                    parse_experiment_key(key),
                    Some((tenant.clone(), m.clone(), 20261207))
                );
            }
        }
    }
    // The layout before the shards, exactly.
    assert_eq!(
        legacy_experiment_key(&acme, &merchant("m_1"), 20261202),
        "sticky_exp_%Tacme_m%5F1_20261202"
    );
    // A tag of another shard does not parse.
    let m = merchant("m1");
    let key = experiment_key(&Tenant::DEFAULT, &m, 20261207);
    let wrong = key.as_str().replacen(
        crate::domain::shards::shard_of(&Tenant::DEFAULT, &m).tag(),
        "b99.0",
        1,
    );
    assert_eq!(parse_experiment_key(&wrong), None, "{wrong}");
}

#[test]
fn index_fields_the_service_cannot_write_do_not_parse() {
    for field in [
        "",
        "t",
        "t2",
        "t2:",
        "t2:m1",
        "x2:m1c",
        "t02:m1c",
        "t:m1c",
        "t3:m1c",
        "t-1:m1c",
        "t2:m\u{0}c",
        "t9999999999999999999999:m1c",
        "t1: c",
        "t2:m1\u{7}",
        "t1:\u{e9}c", // inside a character
    ] {
        assert_eq!(parse_index_field(field), None, "{field:?}");
    }
    assert_eq!(
        parse_index_field("o3:m:1c:2"),
        Some((
            IndexFieldKind::Override,
            Tenant::DEFAULT,
            merchant("m:1"),
            "c:2".to_owned()
        ))
    );
}

/// A connector the id rules accept (verbatim, so blanks at its ends too).
fn connector() -> impl Strategy<Value = String> {
    prop::collection::vec(piece(), 1..=12).prop_filter_map("not a valid connector", |pieces| {
        let raw = pieces.concat();
        Connector::parse(&raw).ok().map(|c| c.as_str().to_owned())
    })
}

fn clashing_connector() -> impl Strategy<Value = String> {
    let pieces: Vec<&str> = ESCAPE_LIKE
        .iter()
        .copied()
        .chain(["é", ":", "1", " "])
        .collect();
    prop::collection::vec(prop::sample::select(pieces), 1..=3).prop_filter_map(
        "not a valid connector",
        |pieces| {
            let raw = pieces.concat();
            Connector::parse(&raw).ok().map(|c| c.as_str().to_owned())
        },
    )
}

#[test]
fn experiment_keys_follow_the_design_layout() {
    let m = merchant("m1");
    let tag = crate::domain::shards::shard_of(&Tenant::DEFAULT, &m).tag();
    assert_eq!(
        experiment_key(&Tenant::DEFAULT, &m, 20261202),
        format!("sticky_exp_{{{tag}}}m1_20261202").as_str()
    );
    assert_eq!(
        legacy_experiment_key(&Tenant::DEFAULT, &m, 20261202),
        "sticky_exp_m1_20261202"
    );
    assert_eq!(
        legacy_experiment_key(&Tenant::DEFAULT, &m, 101),
        "sticky_exp_m1_00000101"
    );
    let odd = merchant("a_{b}%");
    assert_eq!(
        legacy_experiment_key(&Tenant::DEFAULT, &odd, 20261202),
        "sticky_exp_a%5F%7Bb%7D%25_20261202"
    );
    assert_eq!(
        parse_experiment_key("sticky_exp_a%5F%7Bb%7D%25_20261202"),
        Some((Tenant::DEFAULT, odd.clone(), 20261202))
    );
    // The hash tag is the shard's: the escaped merchant holds no brace.
    assert_eq!(
        hash_tag(&experiment_key(&Tenant::DEFAULT, &odd, 1)),
        crate::domain::shards::shard_of(&Tenant::DEFAULT, &odd).tag()
    );
    // The legacy layout has none.
    assert_eq!(
        hash_tag(&legacy_experiment_key(&Tenant::DEFAULT, &odd, 1)),
        legacy_experiment_key(&Tenant::DEFAULT, &odd, 1).as_str()
    );
    assert_eq!(
        experiment_key_patterns(&Tenant::DEFAULT, None),
        ["sticky_exp_*"]
    );
    let globby = merchant("a*?[x]\\_{%}");
    let tag = crate::domain::shards::shard_of(&Tenant::DEFAULT, &globby).tag();
    assert_eq!(
        experiment_key_patterns(&Tenant::DEFAULT, Some(&globby)),
        [
            format!("sticky_exp_{{{tag}}}a\\*\\?\\[x\\]\\\\%5F%7B%25%7D_*"),
            "sticky_exp_a\\*\\?\\[x\\]\\\\%5F%7B%25%7D_*".to_owned()
        ]
    );
    let prefixes = [
        CUSTOMER_KEY_PREFIX,
        ADMISSION_KEY_PREFIX,
        BREAKER_KEY_PREFIX,
        EXPERIMENT_KEY_PREFIX,
    ];
    for a in prefixes {
        for b in prefixes {
            assert!(a == b || !a.starts_with(b), "{a} starts with {b}");
        }
    }
    let fields: std::collections::BTreeSet<_> = EXPERIMENT_FIELDS.iter().collect();
    assert_eq!(fields.len(), EXPERIMENT_FIELDS.len());
}

#[test]
fn experiment_keys_the_service_cannot_write_do_not_parse() {
    for key in [
        "sticky_exp_m1",             // no day
        "sticky_exp__20261202",      // empty merchant
        "sticky_exp_m1_2026120",     // seven digits
        "sticky_exp_m1_2026120x",    // not a number
        "sticky_exp_m1_020261202",   // a leading zero past eight digits
        "sticky_exp_m1_+2026120",    // a sign
        "sticky_exp_m_1_20261202",   // an unescaped `_` in the merchant
        "sticky_exp_m%_20261202",    // a bare %
        "sticky_exp_{m}_20261202",   // a raw hash tag
        "sticky_exp_ m_20261202",    // not trimmed
        "sticky_exp_m1_99999999999", // over u32
        "sticky_gw_m1_20261202",     // a customer key
    ] {
        assert_eq!(parse_experiment_key(key), None, "{key:?}");
    }
    assert_eq!(
        parse_experiment_key("sticky_exp_m1_4294967295"),
        Some((Tenant::DEFAULT, merchant("m1"), u32::MAX))
    );
}

proptest! {
    #[test]
    fn experiment_keys_parse_back_to_their_merchant_and_day(
        m in valid_id(40, piece()), day in any::<u32>(),
    ) {
        let mid = merchant(&m);
        let key = experiment_key(&Tenant::DEFAULT, &mid, day);
        let legacy = legacy_experiment_key(&Tenant::DEFAULT, &mid, day);
        prop_assert!(!legacy.contains(['{', '}']), "{:?} holds a hash tag", legacy);
        let patterns = experiment_key_patterns(&Tenant::DEFAULT, Some(&mid));
        // Each layout's key parses back, and its merchant's pattern
        // matches it (the pattern's `_` ends the merchant).
        for (key, pattern) in [(&key, &patterns[0]), (&legacy, &patterns[1])] {
            prop_assert_eq!(parse_experiment_key(key), Some((Tenant::DEFAULT, mid.clone(), day)));
            let unescaped: String = pattern.trim_end_matches('*').replace('\\', "");
            prop_assert!(key.starts_with(&unescaped));
            prop_assert_eq!(parse_customer_key(key), None);
        }
    }

    #[test]
    fn only_experiment_keys_the_service_writes_parse(
        text in "sticky_exp_[a-z_%{}57BDF2 ]{0,8}_?[0-9]{0,10}",
    ) {
        if let Some((t, m, day)) = parse_experiment_key(&text) {
            prop_assert!(
                experiment_key(&t, &m, day) == text.as_str()
                    || legacy_experiment_key(&t, &m, day) == text.as_str()
            );
        }
    }

    /// Every experiment key of a batch of ids that collide under naive
    /// concatenation, and days whose digits could run into an id, is
    /// distinct from every other, and from every customer, admission
    /// and breaker key of the same ids.
    #[test]
    fn experiment_keys_are_injective_and_apart_from_other_keys(
        pairs in prop::collection::btree_set(
            (clashing_id(), prop::sample::select(vec![0u32, 1, 20261202, 20261203, 99_999_999, u32::MAX])),
            1..30,
        ),
    ) {
        let mut keys = std::collections::BTreeMap::new();
        let mut put = |key: String, made_of: String| {
            if let Some(before) = keys.insert(key.clone(), made_of.clone()) {
                prop_assert_eq!(&before, &made_of, "{:?} made twice", key);
            }
            Ok(())
        };
        for shard in crate::domain::shards::Shard::all() {
            put(breaker_index_key(shard).as_str().into(), format!("index {shard:?}"))?;
        }
        for (m, day) in &pairs {
            let mid = merchant(m);
            put(experiment_key(&Tenant::DEFAULT, &mid, *day).as_str().into(), format!("experiment {m:?} {day}"))?;
            put(legacy_experiment_key(&Tenant::DEFAULT, &mid, *day).as_str().into(), format!("legacy experiment {m:?} {day}"))?;
            put(admission_key(&Tenant::DEFAULT, &mid).as_str().into(), format!("admission {m:?}"))?;
            put(breaker_counts_key(&Tenant::DEFAULT, &mid).as_str().into(), format!("counts {m:?}"))?;
            let day_text = format!("{day:08}");
            put(breaker_open_key(&Tenant::DEFAULT, &mid, &day_text).as_str().into(), format!("open {m:?} {day}"))?;
            let customer = CustomerId::parse(&day_text).unwrap();
            put(
                customer_key(&Tenant::DEFAULT, &mid, &customer).as_str().into(),
                format!("customer {m:?} {day_text}"),
            )?;
        }
    }
}

proptest! {
    #[test]
    fn a_merchants_breaker_keys_share_its_hash_tag(
        m in valid_id(40, piece()), c in connector(), other in valid_id(40, piece()),
    ) {
        let (mid, oid) = (merchant(&m), merchant(&other));
        let counts = breaker_counts_key(&Tenant::DEFAULT, &mid);
        let open = breaker_open_key(&Tenant::DEFAULT, &mid, &c);
        prop_assert_eq!(hash_tag(&counts), hash_tag(&open));
        // The tag is the merchant's shard's: merchants of one shard share
        // it (and its slot), other shards' differ.
        let shard = crate::domain::shards::shard_of(&Tenant::DEFAULT, &mid);
        prop_assert_eq!(hash_tag(&counts), shard.tag());
        let other_shard = crate::domain::shards::shard_of(&Tenant::DEFAULT, &oid);
        let other_counts = breaker_counts_key(&Tenant::DEFAULT, &oid);
        prop_assert_eq!(hash_tag(&counts) == hash_tag(&other_counts), shard == other_shard);
        if m != other {
            prop_assert_ne!(counts, other_counts);
        }
    }

    /// One text split into (merchant, connector) at two places: naive
    /// concatenation would give both splits one key and one field.
    #[test]
    fn splits_of_one_text_get_distinct_keys_and_fields(
        pieces in prop::collection::vec(
            prop::sample::select(vec!["a", "_", "%", "{", "}", "1", ":", "%5F", "%7D", "é"]),
            2..10,
        ),
        at in any::<prop::sample::Index>(),
        other_at in any::<prop::sample::Index>(),
    ) {
        let text = pieces.concat();
        let split = |i: prop::sample::Index| {
            let bounds: Vec<usize> = (1..text.len()).filter(|b| text.is_char_boundary(*b)).collect();
            let b = bounds[i.index(bounds.len())];
            let (m, c) = text.split_at(b);
            Some((MerchantId::parse(m).ok().filter(|id| id.as_str() == m)?, c.to_owned()))
        };
        if let (Some((m1, c1)), Some((m2, c2))) = (split(at), split(other_at)) {
            prop_assume!(m1 != m2);
            prop_assert_ne!(breaker_open_key(&Tenant::DEFAULT, &m1, &c1), breaker_open_key(&Tenant::DEFAULT, &m2, &c2));
            prop_assert_ne!(breaker_counts_key(&Tenant::DEFAULT, &m1), breaker_counts_key(&Tenant::DEFAULT, &m2));
            prop_assert_ne!(index_trip_field(&Tenant::DEFAULT, &m1, &c1), index_trip_field(&Tenant::DEFAULT, &m2, &c2));
            prop_assert_ne!(index_override_field(&Tenant::DEFAULT, &m1, &c1), index_override_field(&Tenant::DEFAULT, &m2, &c2));
        }
    }

    #[test]
    fn index_fields_parse_back_to_their_pair(
        m in valid_id(40, piece()), c in connector(),
    ) {
        let mid = merchant(&m);
        prop_assert_eq!(
            parse_index_field(&index_trip_field(&Tenant::DEFAULT, &mid, &c)),
            Some((IndexFieldKind::Trip, Tenant::DEFAULT, mid.clone(), c.clone()))
        );
        prop_assert_eq!(
            parse_index_field(&index_override_field(&Tenant::DEFAULT, &mid, &c)),
            Some((IndexFieldKind::Override, Tenant::DEFAULT, mid, c))
        );
    }

    #[test]
    fn only_index_fields_the_service_writes_parse(text in "[to][0-9]{0,2}:?[a-z:_{} 12]{0,8}") {
        if let Some((kind, t, m, c)) = parse_index_field(&text) {
            let back = match kind {
                IndexFieldKind::Trip => index_trip_field(&t, &m, &c),
                IndexFieldKind::Override => index_override_field(&t, &m, &c),
            };
            prop_assert_eq!(back, text);
        }
    }

    /// Every breaker key, index field and customer or admission key of
    /// a batch of ids that collide under naive concatenation is distinct
    /// from every other, unless made from the same ids.
    #[test]
    fn breaker_keys_and_fields_are_injective_and_apart_from_other_keys(
        pairs in prop::collection::btree_set((clashing_id(), clashing_connector()), 1..30),
    ) {
        let mut keys = std::collections::BTreeMap::new();
        let mut fields = std::collections::BTreeMap::new();
        let put = |map: &mut std::collections::BTreeMap<String, String>,
                       key: String,
                       made_of: String| {
            if let Some(before) = map.insert(key.clone(), made_of.clone()) {
                prop_assert_eq!(&before, &made_of, "{:?} made twice", key);
            }
            Ok(())
        };
        for shard in crate::domain::shards::Shard::all() {
            put(&mut keys, breaker_index_key(shard).as_str().into(), format!("index {shard:?}"))?;
        }
        for (m, c) in &pairs {
            let mid = merchant(m);
            put(&mut keys, breaker_counts_key(&Tenant::DEFAULT, &mid).as_str().into(), format!("counts {m:?}"))?;
            put(&mut keys, breaker_open_key(&Tenant::DEFAULT, &mid, c).as_str().into(), format!("open {m:?} {c:?}"))?;
            put(&mut keys, admission_key(&Tenant::DEFAULT, &mid).as_str().into(), format!("admission {m:?}"))?;
            // The connector read as a customer id, where it is one.
            if let Ok(customer) = CustomerId::parse(c) {
                put(
                    &mut keys,
                    customer_key(&Tenant::DEFAULT, &mid, &customer).as_str().into(),
                    format!("customer {m:?} {:?}", customer.as_str()),
                )?;
            }
            put(&mut fields, index_trip_field(&Tenant::DEFAULT, &mid, c), format!("trip {m:?} {c:?}"))?;
            put(&mut fields, index_override_field(&Tenant::DEFAULT, &mid, c), format!("override {m:?} {c:?}"))?;
        }
    }

    #[test]
    fn customer_keys_decode_back_to_their_ids(
        merchant in valid_id(40, piece()), customer in valid_id(40, piece())
    ) {
        let key = key(&merchant, &customer);
        prop_assert!(!key.contains(['{', '}']), "{key:?} holds a hash tag");
        let (m, c) = decode(&key);
        prop_assert_eq!(m, merchant);
        prop_assert_eq!(c, customer);
    }

    #[test]
    fn only_keys_the_service_writes_parse(text in "sticky_gw_[a-z_%{}57BDF2 ]{0,12}") {
        if let Some((tenant, merchant, customer)) = parse_customer_key(&text) {
            prop_assert_eq!(customer_key(&tenant, &merchant, &customer), text.as_str());
        }
    }

    #[test]
    fn distinct_pairs_get_distinct_keys(
        pairs in prop::collection::btree_set((clashing_id(), clashing_id()), 1..40)
    ) {
        let keys: std::collections::BTreeSet<String> =
            pairs.iter().map(|(m, c)| key(m, c).as_str().to_owned()).collect();
        prop_assert_eq!(keys.len(), pairs.len(), "two of {:?} share a key", pairs);
    }
}
