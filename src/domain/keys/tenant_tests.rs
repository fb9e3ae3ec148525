//! Tenants' namespaces: every kind of key of a tenant is apart from every
//! other tenant's and from the default tenant's, reads back to its tenant,
//! and a (tenant, merchant)'s breaker keys still share one hash tag.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::tests::hash_tag;
use super::*;

fn tenant(id: &str) -> Tenant {
    Tenant::parse(id).unwrap()
}

fn merchant(id: &str) -> MerchantId {
    MerchantId::parse(id).unwrap()
}

fn customer(id: &str) -> CustomerId {
    CustomerId::parse(id).unwrap()
}

#[test]
fn a_tenants_keys_follow_the_documented_layout() {
    let (acme, m1) = (tenant("acme"), merchant("m1"));
    assert_eq!(
        customer_key(&acme, &m1, &customer("cust42")),
        "sticky_gw_%Tacme_m1_cust42"
    );
    assert_eq!(admission_key(&acme, &m1), "sticky_adm_%Tacme_m1");
    // acme's m1 is in shard 6 (its tag is pinned in domain::shards).
    assert_eq!(
        experiment_key(&acme, &m1, 20261202),
        "sticky_exp_{b6.11}%Tacme_m1_20261202"
    );
    assert_eq!(
        legacy_experiment_key(&acme, &m1, 20261202),
        "sticky_exp_%Tacme_m1_20261202"
    );
    assert_eq!(
        breaker_counts_key(&acme, &m1),
        "sticky_brk_c{b6.11}%Tacme_m1"
    );
    assert_eq!(
        breaker_open_key(&acme, &m1, "GIGADAT"),
        "sticky_brk_o{b6.11}%Tacme_m1_GIGADAT"
    );
    assert_eq!(
        index_trip_field(&acme, &m1, "GIGADAT"),
        "@4:acmet2:m1GIGADAT"
    );
    assert_eq!(index_override_field(&acme, &m1, "G"), "@4:acmeo2:m1G");
    // A tenant's `_` is escaped, so its first `_` ends it.
    assert_eq!(
        customer_key(&tenant("a_b"), &m1, &customer("c")),
        "sticky_gw_%Ta%5Fb_m1_c"
    );
    // The default tenant's keys are the layout without tenants.
    assert_eq!(
        customer_key(&Tenant::DEFAULT, &m1, &customer("cust42")),
        "sticky_gw_m1_cust42"
    );
}

#[test]
fn a_tenants_patterns_match_only_its_own_keys() {
    let (acme, m1) = (tenant("ac_me"), merchant("m1"));
    assert_eq!(customer_key_pattern(&acme, None), "sticky_gw_%Tac%5Fme_*");
    assert_eq!(
        customer_key_pattern(&acme, Some(&m1)),
        "sticky_gw_%Tac%5Fme_m1_*"
    );
    assert_eq!(
        experiment_key_patterns(&acme, None),
        ["sticky_exp_{*}%Tac%5Fme_*", "sticky_exp_%Tac%5Fme_*"]
    );
    let tag = crate::domain::shards::shard_of(&acme, &m1).tag();
    assert_eq!(
        experiment_key_patterns(&acme, Some(&m1)),
        [
            format!("sticky_exp_{{{tag}}}%Tac%5Fme_m1_*"),
            "sticky_exp_%Tac%5Fme_m1_*".to_owned()
        ]
    );
}

#[test]
fn namespaces_the_service_cannot_write_do_not_parse() {
    for key in [
        "sticky_gw_%T_m1_c",     // an empty tenant
        "sticky_gw_%Ta.b_m1_c",  // a tenant id may not hold `.`
        "sticky_gw_%Ta%41_m1_c", // an escape it never writes
        "sticky_gw_%Tacme",      // nothing after the tenant
        "sticky_gw_%Tacme_m1",   // no customer
        "sticky_exp_%Tacme_20261202",
        "sticky_exp_%T_m1_20261202",
    ] {
        assert_eq!(parse_customer_key(key), None, "{key:?}");
        assert_eq!(parse_experiment_key(key), None, "{key:?}");
    }
    for field in [
        "@0:t2:m1c",
        "@4:acmeacmet2:m1c",
        "@4:a.bct2:m1c",
        "@x:acmet2:m1c",
        "@4:acme",
    ] {
        assert_eq!(parse_index_field(field), None, "{field:?}");
    }
    assert_eq!(
        parse_index_field("@4:acmet2:m1GIGADAT"),
        Some((
            IndexFieldKind::Trip,
            tenant("acme"),
            merchant("m1"),
            "GIGADAT".to_owned()
        ))
    );
}

/// Tenant ids, the default among them, that collide with each other and
/// with merchant ids under naive concatenation.
fn clashing_tenant() -> impl Strategy<Value = Tenant> {
    prop::collection::vec(
        prop::sample::select(vec!["a", "_", "-", "T", "5F", "1"]),
        0..4,
    )
    .prop_map(|pieces| Tenant::parse(&pieces.concat()).unwrap())
}

/// Ids of merchants, customers and connectors that look like namespaces,
/// escapes or their parts.
fn clashing_id() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop::sample::select(vec![
            "a", "_", "%", "%T", "T", "%5F", "5F", "{", "}", "-", "é",
        ]),
        1..4,
    )
    .prop_filter_map("not a valid id", |pieces| {
        let raw = pieces.concat();
        MerchantId::parse(&raw).ok()?;
        Connector::parse(&raw).ok()?;
        CustomerId::parse(&raw).ok().map(|c| c.as_str().to_owned())
    })
}

proptest! {
    /// Every key of every kind, and every index field, made from a batch of
    /// (tenant, merchant, customer or connector) triples that collide under
    /// naive concatenation, is made from one triple only; keys read back to
    /// their tenant, merchant and customer or day.
    #[test]
    fn keys_are_injective_across_tenants_merchants_and_customers(
        triples in prop::collection::btree_set(
            (clashing_tenant(), clashing_id(), clashing_id()),
            1..30,
        ),
    ) {
        let mut keys = BTreeMap::new();
        let mut fields = BTreeMap::new();
        let put = |map: &mut BTreeMap<String, String>, key: String, made_of: String| {
            if let Some(before) = map.insert(key.clone(), made_of.clone()) {
                prop_assert_eq!(&before, &made_of, "{:?} made twice", key);
            }
            Ok(())
        };
        for shard in crate::domain::shards::Shard::all() {
            put(&mut keys, breaker_index_key(shard).as_str().into(), format!("index {shard:?}"))?;
        }
        for (t, m, c) in &triples {
            let (mid, cid) = (merchant(m), customer(c));
            let key = customer_key(t, &mid, &cid);
            prop_assert_eq!(parse_customer_key(&key), Some((t.clone(), mid.clone(), cid.clone())));
            put(&mut keys, key.as_str().into(), format!("customer {t:?} {m:?} {c:?}"))?;
            put(&mut keys, admission_key(t, &mid).as_str().into(), format!("admission {t:?} {m:?}"))?;
            let day = experiment_key(t, &mid, 20261202);
            prop_assert_eq!(parse_experiment_key(&day), Some((t.clone(), mid.clone(), 20261202)));
            put(&mut keys, day.as_str().into(), format!("experiment {t:?} {m:?}"))?;
            let counts = breaker_counts_key(t, &mid);
            let open = breaker_open_key(t, &mid, c);
            prop_assert_eq!(hash_tag(&counts), hash_tag(&open));
            put(&mut keys, counts.as_str().into(), format!("counts {t:?} {m:?}"))?;
            put(&mut keys, open.as_str().into(), format!("open {t:?} {m:?} {c:?}"))?;
            for (kind, field) in [
                (IndexFieldKind::Trip, index_trip_field(t, &mid, c)),
                (IndexFieldKind::Override, index_override_field(t, &mid, c)),
            ] {
                prop_assert_eq!(
                    parse_index_field(&field),
                    Some((kind, t.clone(), mid.clone(), c.clone()))
                );
                put(&mut fields, field, format!("{kind:?} {t:?} {m:?} {c:?}"))?;
            }
        }
    }

    /// A tenant's pattern without a merchant matches exactly its keys: a
    /// key of another tenant never starts with it, except the default
    /// tenant's pattern, whose reader keeps only what parses as default.
    #[test]
    fn a_tenants_pattern_starts_only_its_own_keys(
        t in clashing_tenant(), other in clashing_tenant(),
        m in clashing_id(), c in clashing_id(),
    ) {
        prop_assume!(!t.is_default() && t != other);
        let (mid, cid) = (merchant(&m), customer(&c));
        let unglob = |pattern: String| pattern.trim_end_matches('*').replace('\\', "");
        let own = unglob(customer_key_pattern(&t, None));
        prop_assert!(customer_key(&t, &mid, &cid).starts_with(&own));
        prop_assert!(!customer_key(&other, &mid, &cid).starts_with(&own));
        let patterns = experiment_key_patterns(&t, None);
        // The sharded pattern's `{*}` matches any tag: compare what follows.
        let after_tag = |key: &str| key.split_once('}').map(|(_, rest)| rest.to_owned()).unwrap();
        let own = unglob(after_tag(&patterns[0]));
        prop_assert!(after_tag(&experiment_key(&t, &mid, 1)).starts_with(&own));
        prop_assert!(!after_tag(&experiment_key(&other, &mid, 1)).starts_with(&own));
        let own = unglob(patterns[1].clone());
        prop_assert!(legacy_experiment_key(&t, &mid, 1).starts_with(&own));
        prop_assert!(!legacy_experiment_key(&other, &mid, 1).starts_with(&own));
    }
}
