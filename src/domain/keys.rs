//! Redis key encoding. One hash per (merchant, customer):
//! `sticky_gw_{merchant}_{customer}`, one admission key per merchant
//! `sticky_adm_{merchant}`, and the circuit breaker's family `sticky_brk_`
//! (contract v1.2 §3): per merchant a counts hash `sticky_brk_c{M}`, per
//! (merchant, connector) an OPEN key `sticky_brk_o{M}C`, and one global
//! index hash `sticky_brk_i` whose fields ([`index_trip_field`],
//! [`index_override_field`]) name a pair by length prefix; and the
//! experiment counts (contract v1.2 §4), one hash per merchant and UTC day
//! `sticky_exp_{merchant}_{YYYYMMDD}` ([`experiment_key`]) with the fields
//! [`EXPERIMENT_FIELDS`].
//!
//! The encoding must be injective, and no customer key may equal any other
//! key of the service. The escape rule (documented in docs/contract.md):
//! - in the merchant id, `%`, `_`, `{` and `}` become `%25`, `%5F`, `%7B`,
//!   `%7D`, so the first `_` after the prefix always ends the merchant id;
//! - in the customer id, `%`, `{` and `}` are escaped the same way (it is the
//!   tail of the key, so `_` needs no escape);
//! - every kind of key has its own prefix, and no prefix starts another.
//!
//! `{` and `}` are escaped so a caller's id can never form a Redis Cluster
//! hash tag and pile customers into one slot. The breaker keys write the
//! braces themselves around the escaped merchant id (M), so that tag is the
//! merchant: its counts hash and OPEN keys share a slot, which the scripts
//! that touch both need; the connector (C) after it has `%`, `{` and `}`
//! escaped. Ids without `_` in the merchant
//! id and without `%`, `{`, `}` map to exactly `sticky_gw_{merchant}_{customer}`.
//!
//! Export reads keys back: [`parse_customer_key`] inverts [`customer_key`]
//! exactly, and [`customer_key_pattern`] is the SCAN `MATCH` pattern for
//! every customer key, or for one merchant's.

use super::ids::{Connector, CustomerId, MerchantId};

/// Prefix of every customer hash.
pub const CUSTOMER_KEY_PREFIX: &str = "sticky_gw_";
/// Prefix of every per-merchant admission key.
pub const ADMISSION_KEY_PREFIX: &str = "sticky_adm_";

/// A customer's hash key. Only [`customer_key`] makes one, so a key handed
/// to the store is always a correctly escaped customer key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CustomerKey(String);

/// A merchant's admission-budget key (both window counters live in it).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AdmissionKey(String);

/// The customer's hash key.
pub fn customer_key(merchant: &MerchantId, customer: &CustomerId) -> CustomerKey {
    let mut key = String::with_capacity(
        CUSTOMER_KEY_PREFIX.len() + merchant.as_str().len() + customer.as_str().len() + 1,
    );
    key.push_str(CUSTOMER_KEY_PREFIX);
    escape_into(&mut key, merchant.as_str(), true);
    key.push('_');
    escape_into(&mut key, customer.as_str(), false);
    CustomerKey(key)
}

/// The merchant's admission-budget key.
pub fn admission_key(merchant: &MerchantId) -> AdmissionKey {
    let mut key = String::from(ADMISSION_KEY_PREFIX);
    escape_into(&mut key, merchant.as_str(), true);
    AdmissionKey(key)
}

/// Prefix of every circuit-breaker key (the ACL pattern `~sticky_brk_*`).
pub const BREAKER_KEY_PREFIX: &str = "sticky_brk_";
/// The global index of every breaker that is not CLOSED and every override.
pub const BREAKER_INDEX_KEY: &str = "sticky_brk_i";

/// A merchant's breaker counts: one hash for all its connectors.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BreakerCountsKey(String);

/// One (merchant, connector) breaker's OPEN key, whose TTL is OPEN_FOR.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BreakerOpenKey(String);

/// `sticky_brk_c{M}`: the merchant, escaped as customer keys escape it, is
/// the Cluster hash tag, so its counts hash and its open keys share a slot.
pub fn breaker_counts_key(merchant: &MerchantId) -> BreakerCountsKey {
    let mut key = String::with_capacity(BREAKER_KEY_PREFIX.len() + merchant.as_str().len() + 3);
    key.push_str(BREAKER_KEY_PREFIX);
    key.push_str("c{");
    escape_into(&mut key, merchant.as_str(), true);
    key.push('}');
    BreakerCountsKey(key)
}

/// `sticky_brk_o{M}C`: the connector follows the hash tag with `%`, `{`
/// and `}` escaped (the escaped merchant holds no `}`, so the tag ends
/// where the merchant does).
pub fn breaker_open_key(merchant: &MerchantId, connector: &str) -> BreakerOpenKey {
    let mut key = String::with_capacity(
        BREAKER_KEY_PREFIX.len() + merchant.as_str().len() + connector.len() + 3,
    );
    key.push_str(BREAKER_KEY_PREFIX);
    key.push_str("o{");
    escape_into(&mut key, merchant.as_str(), true);
    key.push('}');
    escape_into(&mut key, connector, false);
    BreakerOpenKey(key)
}

/// What an index field of [`BREAKER_INDEX_KEY`] holds for its pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IndexFieldKind {
    /// The breaker's trip (`t…`).
    Trip,
    /// An operator's override (`o…`).
    Override,
}

/// The index field of a (merchant, connector) breaker's trip:
/// `t` + the merchant's length in bytes + `:` + merchant + connector.
pub fn index_trip_field(merchant: &MerchantId, connector: &str) -> String {
    index_field('t', merchant.as_str(), connector)
}

/// The index field of a (merchant, connector) breaker's override:
/// `o` + the merchant's length in bytes + `:` + merchant + connector.
pub fn index_override_field(merchant: &MerchantId, connector: &str) -> String {
    index_field('o', merchant.as_str(), connector)
}

fn index_field(kind: char, merchant: &str, connector: &str) -> String {
    // The length prefix, not an escape, ends the merchant: ids go in verbatim.
    format!("{kind}{}:{merchant}{connector}", merchant.len())
}

/// Inverts [`index_trip_field`] and [`index_override_field`]: the kind,
/// merchant and connector of `field`, or `None` for any field they cannot
/// have written (so a stray field is skipped, never misread).
pub fn parse_index_field(field: &str) -> Option<(IndexFieldKind, MerchantId, String)> {
    let kind = match field.as_bytes().first()? {
        b't' => IndexFieldKind::Trip,
        b'o' => IndexFieldKind::Override,
        _ => return None,
    };
    let (len, rest) = field.get(1..)?.split_once(':')?;
    if len.is_empty() || !len.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let len: usize = len.parse().ok()?;
    let merchant = MerchantId::parse(rest.get(..len)?).ok()?;
    let connector = rest.get(len..)?;
    Connector::parse(connector).ok()?;
    // Canonical only (no leading zeros, an id as `parse` keeps it).
    let back = match kind {
        IndexFieldKind::Trip => index_trip_field(&merchant, connector),
        IndexFieldKind::Override => index_override_field(&merchant, connector),
    };
    (back == field).then(|| (kind, merchant, connector.to_owned()))
}

/// Prefix of every experiment-count key (the ACL pattern `~sticky_exp_*`).
pub const EXPERIMENT_KEY_PREFIX: &str = "sticky_exp_";

/// The fields of an experiment hash, `<group>:<split>:<outcome>`: group
/// `t` (treated), `h` (holdout), `s` (shadow); split `f` (followed), `o`
/// (overridden), `-` (the holdout has none); outcome `s` (success), `f`
/// (gateway failure). Each counts outcomes.
pub const EXPERIMENT_FIELDS: [&str; 10] = [
    "t:f:s", "t:f:f", "t:o:s", "t:o:f", "h:-:s", "h:-:f", "s:f:s", "s:f:f", "s:o:s", "s:o:f",
];

/// One merchant's experiment counts of one UTC day.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ExperimentKey(String);

/// `sticky_exp_{M}_{YYYYMMDD}`: the merchant escaped as in customer and
/// admission keys (its own `_` too, so the first `_` after the prefix ends
/// it), then the day, eight digits (`day` is YYYYMMDD; a larger number is
/// written whole, and still parses back). No hash tag: every call touches
/// one key.
pub fn experiment_key(merchant: &MerchantId, day: u32) -> ExperimentKey {
    let mut key = String::with_capacity(EXPERIMENT_KEY_PREFIX.len() + merchant.as_str().len() + 9);
    key.push_str(EXPERIMENT_KEY_PREFIX);
    escape_into(&mut key, merchant.as_str(), true);
    key.push('_');
    key.push_str(&format!("{day:08}"));
    ExperimentKey(key)
}

/// Inverts [`experiment_key`]: the merchant and day of `key`, or `None`
/// for any key it cannot have made (so a stray key is skipped, never
/// misread).
pub fn parse_experiment_key(key: &str) -> Option<(MerchantId, u32)> {
    let rest = key.strip_prefix(EXPERIMENT_KEY_PREFIX)?;
    let (merchant, day) = rest.split_once('_')?;
    if day.len() < 8 || !day.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let day: u32 = day.parse().ok()?;
    let merchant = MerchantId::parse(&unescape(merchant, true)?).ok()?;
    // Canonical only: trimmed ids, the day's own digits.
    (experiment_key(&merchant, day) == key).then_some((merchant, day))
}

/// The SCAN `MATCH` pattern for the experiment keys of `merchant`, or of
/// every merchant (glob characters of the id escaped, as in
/// [`customer_key_pattern`]).
pub fn experiment_key_pattern(merchant: Option<&MerchantId>) -> String {
    let mut pattern = String::from(EXPERIMENT_KEY_PREFIX);
    if let Some(merchant) = merchant {
        push_glob_escaped(&mut pattern, merchant);
        pattern.push('_');
    }
    pattern.push('*');
    pattern
}

/// Every key kind reads as the Redis key it is.
macro_rules! key_as_str {
    ($($key:ident),*) => {$(
        impl $key {
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl std::ops::Deref for $key {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl PartialEq<&str> for $key {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }
    )*};
}

key_as_str!(
    CustomerKey,
    AdmissionKey,
    BreakerCountsKey,
    BreakerOpenKey,
    ExperimentKey
);

/// The (merchant, customer) whose hash `key` is: `None` for any key that
/// [`customer_key`] cannot have made (another prefix, an escape it never
/// writes, an id the id rules reject). It accepts exactly the keys the
/// service writes, so an exported id imports back to the very same key.
pub fn parse_customer_key(key: &str) -> Option<(MerchantId, CustomerId)> {
    let rest = key.strip_prefix(CUSTOMER_KEY_PREFIX)?;
    // The merchant id's own `_` are escaped: its first `_` ends it.
    let (merchant, customer) = rest.split_once('_')?;
    let merchant = MerchantId::parse(&unescape(merchant, true)?).ok()?;
    let customer = CustomerId::parse(&unescape(customer, false)?).ok()?;
    // Canonical only: an id with spaces at its ends is trimmed by `parse`,
    // so it would no longer encode to `key`.
    (customer_key(&merchant, &customer) == key).then_some((merchant, customer))
}

/// The SCAN `MATCH` pattern for the customer keys of `merchant`, or of every
/// merchant. The escaped merchant id is itself glob-escaped: an id such as
/// `a*` must match only its own keys, not those of `ab`.
pub fn customer_key_pattern(merchant: Option<&MerchantId>) -> String {
    let mut pattern = String::from(CUSTOMER_KEY_PREFIX);
    if let Some(merchant) = merchant {
        push_glob_escaped(&mut pattern, merchant);
        // The escaped merchant id holds no `_`: this one ends it.
        pattern.push('_');
    }
    pattern.push('*');
    pattern
}

/// The merchant id, escaped as keys hold it, with the glob characters of
/// a `MATCH` pattern escaped too.
fn push_glob_escaped(pattern: &mut String, merchant: &MerchantId) {
    let mut escaped = String::new();
    escape_into(&mut escaped, merchant.as_str(), true);
    for ch in escaped.chars() {
        if matches!(ch, '*' | '?' | '[' | ']' | '\\') {
            pattern.push('\\');
        }
        pattern.push(ch);
    }
}

/// Undoes [`escape_into`]; `None` for text it cannot have written: a `%`
/// that starts no escape it uses, or a character it always escapes.
fn unescape(escaped: &str, escape_underscore: bool) -> Option<String> {
    let mut out = String::with_capacity(escaped.len());
    let mut rest = escaped;
    while let Some(at) = rest.find(['%', '{', '}', '_']) {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        let (ch, len) = match tail.get(..3) {
            Some("%25") => ('%', 3),
            Some("%7B") => ('{', 3),
            Some("%7D") => ('}', 3),
            Some("%5F") if escape_underscore => ('_', 3),
            _ if tail.starts_with('_') && !escape_underscore => ('_', 1),
            _ => return None,
        };
        out.push(ch);
        rest = &tail[len..];
    }
    out.push_str(rest);
    Some(out)
}

fn escape_into(out: &mut String, id: &str, escape_underscore: bool) {
    for ch in id.chars() {
        match ch {
            '%' => out.push_str("%25"),
            '{' => out.push_str("%7B"),
            '}' => out.push_str("%7D"),
            '_' if escape_underscore => out.push_str("%5F"),
            other => out.push(other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn key(merchant: &str, customer: &str) -> CustomerKey {
        customer_key(
            &MerchantId::parse(merchant).unwrap(),
            &CustomerId::parse(customer).unwrap(),
        )
    }

    /// The ids `parse_customer_key` reads from `key`, as text.
    fn decode(key: &str) -> (String, String) {
        let (merchant, customer) = parse_customer_key(key).unwrap();
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
        assert_eq!(customer_key_pattern(None), "sticky_gw_*");
        let merchant = MerchantId::parse("a*?[x]\\_{%}").unwrap();
        assert_eq!(
            customer_key_pattern(Some(&merchant)),
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
        assert_eq!(admission_key(&merchant), "sticky_adm_m%5F1");
        assert!(!admission_key(&merchant).starts_with(CUSTOMER_KEY_PREFIX));
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
    fn valid_id(
        pieces: usize,
        piece: impl Strategy<Value = String>,
    ) -> impl Strategy<Value = String> {
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
    fn hash_tag(key: &str) -> &str {
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
        let m = merchant("m1");
        assert_eq!(breaker_counts_key(&m), "sticky_brk_c{m1}");
        assert_eq!(breaker_open_key(&m, "GIGADAT"), "sticky_brk_o{m1}GIGADAT");
        assert_eq!(BREAKER_INDEX_KEY, "sticky_brk_i");
        assert_eq!(index_trip_field(&m, "GIGADAT"), "t2:m1GIGADAT");
        assert_eq!(index_override_field(&m, "acme:eu"), "o2:m1acme:eu");
        let odd = merchant("a_{b}%");
        assert_eq!(breaker_counts_key(&odd), "sticky_brk_c{a%5F%7Bb%7D%25}");
        assert_eq!(
            breaker_open_key(&odd, "x_{y}%"),
            "sticky_brk_o{a%5F%7Bb%7D%25}x_%7By%7D%25"
        );
        assert_eq!(hash_tag(&breaker_open_key(&odd, "}{")), "a%5F%7Bb%7D%25");
        // Index fields hold the ids verbatim: the length ends the merchant.
        assert_eq!(index_trip_field(&odd, "c"), "t6:a_{b}%c");
        for key in [
            BREAKER_INDEX_KEY,
            &breaker_counts_key(&m),
            &breaker_open_key(&m, "c"),
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
            Some((IndexFieldKind::Override, merchant("m:1"), "c:2".to_owned()))
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
        assert_eq!(experiment_key(&m, 20261202), "sticky_exp_m1_20261202");
        assert_eq!(experiment_key(&m, 101), "sticky_exp_m1_00000101");
        let odd = merchant("a_{b}%");
        assert_eq!(
            experiment_key(&odd, 20261202),
            "sticky_exp_a%5F%7Bb%7D%25_20261202"
        );
        assert_eq!(
            parse_experiment_key("sticky_exp_a%5F%7Bb%7D%25_20261202"),
            Some((odd.clone(), 20261202))
        );
        // No hash tag: the escaped merchant holds no brace.
        assert_eq!(
            hash_tag(&experiment_key(&odd, 1)),
            experiment_key(&odd, 1).as_str()
        );
        assert_eq!(experiment_key_pattern(None), "sticky_exp_*");
        assert_eq!(
            experiment_key_pattern(Some(&merchant("a*?[x]\\_{%}"))),
            "sticky_exp_a\\*\\?\\[x\\]\\\\%5F%7B%25%7D_*"
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
            Some((merchant("m1"), u32::MAX))
        );
    }

    proptest! {
        #[test]
        fn experiment_keys_parse_back_to_their_merchant_and_day(
            m in valid_id(40, piece()), day in any::<u32>(),
        ) {
            let mid = merchant(&m);
            let key = experiment_key(&mid, day);
            prop_assert!(!key.contains(['{', '}']), "{:?} holds a hash tag", key);
            prop_assert_eq!(parse_experiment_key(&key), Some((mid.clone(), day)));
            // Its merchant's pattern matches it; other merchants' do not
            // start it (the pattern's `_` ends the merchant).
            let pattern = experiment_key_pattern(Some(&mid));
            let unescaped: String = pattern.trim_end_matches('*').replace('\\', "");
            prop_assert!(key.starts_with(&unescaped));
            prop_assert_eq!(parse_customer_key(&key), None);
        }

        #[test]
        fn only_experiment_keys_the_service_writes_parse(
            text in "sticky_exp_[a-z_%{}57BDF2 ]{0,8}_?[0-9]{0,10}",
        ) {
            if let Some((m, day)) = parse_experiment_key(&text) {
                prop_assert_eq!(experiment_key(&m, day), text.as_str());
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
            put(BREAKER_INDEX_KEY.to_owned(), "index".into())?;
            for (m, day) in &pairs {
                let mid = merchant(m);
                put(experiment_key(&mid, *day).as_str().into(), format!("experiment {m:?} {day}"))?;
                put(admission_key(&mid).as_str().into(), format!("admission {m:?}"))?;
                put(breaker_counts_key(&mid).as_str().into(), format!("counts {m:?}"))?;
                let day_text = format!("{day:08}");
                put(breaker_open_key(&mid, &day_text).as_str().into(), format!("open {m:?} {day}"))?;
                let customer = CustomerId::parse(&day_text).unwrap();
                put(
                    customer_key(&mid, &customer).as_str().into(),
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
            let counts = breaker_counts_key(&mid);
            let open = breaker_open_key(&mid, &c);
            prop_assert_eq!(hash_tag(&counts), hash_tag(&open));
            // The tag is the escaped merchant: one per merchant.
            let mut escaped = String::new();
            escape_into(&mut escaped, &m, true);
            prop_assert_eq!(hash_tag(&counts), escaped.as_str());
            if m != other {
                let other_counts = breaker_counts_key(&oid);
                prop_assert_ne!(hash_tag(&counts), hash_tag(&other_counts));
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
                prop_assert_ne!(breaker_open_key(&m1, &c1), breaker_open_key(&m2, &c2));
                prop_assert_ne!(breaker_counts_key(&m1), breaker_counts_key(&m2));
                prop_assert_ne!(index_trip_field(&m1, &c1), index_trip_field(&m2, &c2));
                prop_assert_ne!(index_override_field(&m1, &c1), index_override_field(&m2, &c2));
            }
        }

        #[test]
        fn index_fields_parse_back_to_their_pair(
            m in valid_id(40, piece()), c in connector(),
        ) {
            let mid = merchant(&m);
            prop_assert_eq!(
                parse_index_field(&index_trip_field(&mid, &c)),
                Some((IndexFieldKind::Trip, mid.clone(), c.clone()))
            );
            prop_assert_eq!(
                parse_index_field(&index_override_field(&mid, &c)),
                Some((IndexFieldKind::Override, mid, c))
            );
        }

        #[test]
        fn only_index_fields_the_service_writes_parse(text in "[to][0-9]{0,2}:?[a-z:_{} 12]{0,8}") {
            if let Some((kind, m, c)) = parse_index_field(&text) {
                let back = match kind {
                    IndexFieldKind::Trip => index_trip_field(&m, &c),
                    IndexFieldKind::Override => index_override_field(&m, &c),
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
            put(&mut keys, BREAKER_INDEX_KEY.to_owned(), "index".into())?;
            for (m, c) in &pairs {
                let mid = merchant(m);
                put(&mut keys, breaker_counts_key(&mid).as_str().into(), format!("counts {m:?}"))?;
                put(&mut keys, breaker_open_key(&mid, c).as_str().into(), format!("open {m:?} {c:?}"))?;
                put(&mut keys, admission_key(&mid).as_str().into(), format!("admission {m:?}"))?;
                // The connector read as a customer id, where it is one.
                if let Ok(customer) = CustomerId::parse(c) {
                    put(
                        &mut keys,
                        customer_key(&mid, &customer).as_str().into(),
                        format!("customer {m:?} {:?}", customer.as_str()),
                    )?;
                }
                put(&mut fields, index_trip_field(&mid, c), format!("trip {m:?} {c:?}"))?;
                put(&mut fields, index_override_field(&mid, c), format!("override {m:?} {c:?}"))?;
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
            if let Some((merchant, customer)) = parse_customer_key(&text) {
                prop_assert_eq!(customer_key(&merchant, &customer), text.as_str());
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
}
