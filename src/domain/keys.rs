//! Redis key encoding. One hash per (merchant, customer):
//! `sticky_gw_{merchant}_{customer}`, plus one admission key per merchant.
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
//! hash tag and pile customers into one slot. Ids without `_` in the merchant
//! id and without `%`, `{`, `}` map to exactly `sticky_gw_{merchant}_{customer}`.
//!
//! Export reads keys back: [`parse_customer_key`] inverts [`customer_key`]
//! exactly, and [`customer_key_pattern`] is the SCAN `MATCH` pattern for
//! every customer key, or for one merchant's.

use super::ids::{CustomerId, MerchantId};

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
    if connector.is_empty() {
        return None;
    }
    // Canonical only (no leading zeros, an id as `parse` keeps it).
    let back = match kind {
        IndexFieldKind::Trip => index_trip_field(&merchant, connector),
        IndexFieldKind::Override => index_override_field(&merchant, connector),
    };
    (back == field).then(|| (kind, merchant, connector.to_owned()))
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

key_as_str!(CustomerKey, AdmissionKey, BreakerCountsKey, BreakerOpenKey);

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
        let mut escaped = String::new();
        escape_into(&mut escaped, merchant.as_str(), true);
        for ch in escaped.chars() {
            if matches!(ch, '*' | '?' | '[' | ']' | '\\') {
                pattern.push('\\');
            }
            pattern.push(ch);
        }
        // The escaped merchant id holds no `_`: this one ends it.
        pattern.push('_');
    }
    pattern.push('*');
    pattern
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

    proptest! {
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
