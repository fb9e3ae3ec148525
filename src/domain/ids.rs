//! Validated request values. Every field a caller sends is checked here, once,
//! and a rejection names the field so the caller can fix its request.
//!
//! The limits come from Redis: ids become part of a key, and a hash field must
//! stay within `hash-max-listpack-value` (64 bytes) so the customer hash keeps
//! its compact listpack encoding.
//!
//! No field may hold a control character or an invisible formatting one
//! (zero-width, bidirectional: see `text`). Ids come from the orchestrator's
//! own systems, which never make such ids, and accepting them would let two
//! ids that look the same in a log be two customers, or let an id display as
//! another. They are refused, not stripped, so no two ids merge. For the same
//! reason only ASCII blanks are trimmed from the ends of ids, payment methods
//! and attempt ids; any other whitespace there is refused (`text`).

use std::fmt;

use super::text;

/// Longest merchant or customer id, in bytes, after trimming ASCII blanks.
pub const MAX_ID_BYTES: usize = 128;
/// Longest hash field (and so longest part of one), in bytes.
pub const MAX_FIELD_BYTES: usize = 64;

/// A request value that breaks a rule; `field` is the protobuf field name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct InvalidInput {
    pub field: String,
    pub reason: String,
}

impl InvalidInput {
    pub fn new(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            reason: reason.into(),
        }
    }
}

/// A merchant id: trimmed, 1..=128 bytes, no control or invisible formatting
/// characters.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MerchantId(String);

/// A customer id: trimmed, 1..=128 bytes, no control or invisible formatting
/// characters. Personal data: never log it.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct CustomerId(String);

/// A payment method such as `INTERAC`: trimmed and upper-cased.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PaymentMethod(String);

/// A payment method type such as `RTP`: trimmed and upper-cased.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PaymentMethodType(String);

/// A connector (gateway) name, kept verbatim; it may hold `:`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Connector(String);

impl MerchantId {
    pub fn parse(raw: &str) -> Result<Self, InvalidInput> {
        parse_id(raw, "merchant_id").map(Self)
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Looks a merchant up by its text, as a configured budget is: the derived
/// `Hash` and `Eq` are the inner string's, as `Borrow` requires.
impl std::borrow::Borrow<str> for MerchantId {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl CustomerId {
    pub fn parse(raw: &str) -> Result<Self, InvalidInput> {
        Self::check(raw).map(|id| Self(id.to_owned()))
    }

    /// The id [`CustomerId::parse`] would keep, borrowed from `raw`: for a
    /// caller that only hashes it (`sticky-routing replay`) and must not
    /// allocate per row.
    pub fn check(raw: &str) -> Result<&str, InvalidInput> {
        check_id(raw, "customer_id")
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Customer ids are personal data: a stray `{:?}` must not leak one into logs.
impl fmt::Debug for CustomerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("CustomerId(<redacted>)")
    }
}

impl PaymentMethod {
    pub fn parse(raw: &str) -> Result<Self, InvalidInput> {
        parse_method_part(raw, "payment_method").map(Self)
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl PaymentMethodType {
    pub fn parse(raw: &str) -> Result<Self, InvalidInput> {
        parse_method_part(raw, "payment_method_type").map(Self)
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl Connector {
    pub fn into_string(self) -> String {
        self.0
    }

    pub fn parse(raw: &str) -> Result<Self, InvalidInput> {
        Self::parse_as(raw, "connector")
    }

    /// Parses a connector that arrives in another field, such as
    /// `eligible_connectors[3]`.
    pub fn parse_as(raw: &str, field: &str) -> Result<Self, InvalidInput> {
        if raw.is_empty() {
            return Err(InvalidInput::new(field, "must not be empty"));
        }
        reject_forbidden_chars(raw, field)?;
        reject_longer_than(raw, MAX_FIELD_BYTES, field)?;
        Ok(Self(raw.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

fn parse_id(raw: &str, field: &str) -> Result<String, InvalidInput> {
    check_id(raw, field).map(str::to_owned)
}

fn check_id<'a>(raw: &'a str, field: &str) -> Result<&'a str, InvalidInput> {
    let id = trim_blanks(raw, field)?;
    if id.is_empty() {
        return Err(InvalidInput::new(field, "must not be empty"));
    }
    reject_longer_than(id, MAX_ID_BYTES, field)?;
    reject_forbidden_chars(id, field)?;
    Ok(id)
}

fn parse_method_part(raw: &str, field: &str) -> Result<String, InvalidInput> {
    let trimmed = trim_blanks(raw, field)?;
    // The same result for ASCII, without the Unicode case tables: this runs
    // twice on every call.
    let part = if trimmed.is_ascii() {
        trimmed.to_ascii_uppercase()
    } else {
        trimmed.to_uppercase()
    };
    if part.is_empty() {
        return Err(InvalidInput::new(field, "must not be empty"));
    }
    if part.contains(':') {
        return Err(InvalidInput::new(
            field,
            "must not contain ':' (it separates the parts of a hash field)",
        ));
    }
    reject_forbidden_chars(&part, field)?;
    reject_longer_than(&part, MAX_FIELD_BYTES, field)?;
    Ok(part)
}

/// `raw` less its ASCII blanks (see `text`); refused by `field` when it
/// begins or ends with any other whitespace, which is never stripped.
pub(crate) fn trim_blanks<'a>(raw: &'a str, field: &str) -> Result<&'a str, InvalidInput> {
    text::trim_blanks(raw).map_err(|blank| {
        InvalidInput::new(
            field,
            format!(
                "must not begin or end with U+{:04X}: only ASCII blanks (space, tab, CR, LF, \
                 form feed) are trimmed, and other whitespace is refused so that two ids \
                 never merge",
                u32::from(blank)
            ),
        )
    })
}

/// Refuses control and invisible formatting characters (see `text`), naming
/// the code point so the caller can find a character it cannot see.
pub(crate) fn reject_forbidden_chars(value: &str, field: &str) -> Result<(), InvalidInput> {
    match text::first_forbidden(value) {
        None => Ok(()),
        Some(ch) => Err(InvalidInput::new(
            field,
            format!(
                "must not contain U+{:04X}: control characters and invisible formatting \
                 characters (zero-width, bidirectional) are not allowed",
                u32::from(ch)
            ),
        )),
    }
}

fn reject_longer_than(value: &str, max: usize, field: &str) -> Result<(), InvalidInput> {
    if value.len() > max {
        return Err(InvalidInput::new(
            field,
            format!("is {} bytes long; the limit is {max} bytes", value.len()),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Trimmed of ASCII blanks (space, tab, CR, LF, form feed) only; a
    /// no-break space inside was never stripped, and is kept.
    #[test]
    fn ids_are_trimmed_and_keep_their_case() {
        assert_eq!(
            MerchantId::parse("  Merchant_1\t").unwrap().as_str(),
            "Merchant_1"
        );
        assert_eq!(CustomerId::parse(" Cus_AB ").unwrap().as_str(), "Cus_AB");
        let id = CustomerId::parse(" \t\r\n\x0Cc\u{A0}1 \n").unwrap();
        assert_eq!(id.as_str(), "c\u{A0}1");
    }

    #[test]
    fn bad_ids_are_rejected_by_field_name() {
        for raw in ["", "   ", "a\u{0}b", "a\nb", &"x".repeat(129)] {
            assert_eq!(
                MerchantId::parse(raw).unwrap_err().field,
                "merchant_id",
                "{raw:?}"
            );
            assert_eq!(
                CustomerId::parse(raw).unwrap_err().field,
                "customer_id",
                "{raw:?}"
            );
        }
        assert!(MerchantId::parse(&"x".repeat(128)).is_ok());
    }

    /// A zero-width space makes a look-alike of a valid id; a right-to-left
    /// override makes an id display reversed. Both are refused by field name.
    #[test]
    fn ids_with_invisible_or_bidi_characters_are_rejected() {
        for raw in [
            "c\u{200B}1",
            "\u{202E}1c",
            "c1\u{FEFF}",
            "c\u{2066}1\u{2069}",
        ] {
            let err = CustomerId::parse(raw).unwrap_err();
            assert_eq!(err.field, "customer_id", "{raw:?}");
            assert!(err.reason.contains("U+"), "{}", err.reason);
            assert_eq!(MerchantId::parse(raw).unwrap_err().field, "merchant_id");
        }
        assert!(CustomerId::parse("c1").is_ok());
        let err = CustomerId::parse("c\u{200B}1").unwrap_err();
        assert!(
            err.reason.starts_with("must not contain U+200B"),
            "{}",
            err.reason
        );
    }

    #[test]
    fn other_text_fields_reject_invisible_characters_too() {
        assert_eq!(
            PaymentMethod::parse("inter\u{200B}ac").unwrap_err().field,
            "payment_method"
        );
        assert_eq!(
            PaymentMethodType::parse("\u{202E}rtp").unwrap_err().field,
            "payment_method_type"
        );
        assert_eq!(
            Connector::parse("GIGA\u{200D}DAT").unwrap_err().field,
            "connector"
        );
    }

    #[test]
    fn methods_are_trimmed_and_upper_cased() {
        assert_eq!(
            PaymentMethod::parse(" interac\r\n").unwrap().as_str(),
            "INTERAC"
        );
        assert_eq!(PaymentMethodType::parse("rtp").unwrap().as_str(), "RTP");
    }

    #[test]
    fn methods_reject_empty_colon_control_and_long() {
        for raw in ["", " ", "a:b", "a\u{7}b", &"x".repeat(65)] {
            assert_eq!(
                PaymentMethod::parse(raw).unwrap_err().field,
                "payment_method"
            );
            assert_eq!(
                PaymentMethodType::parse(raw).unwrap_err().field,
                "payment_method_type"
            );
        }
    }

    #[test]
    fn connectors_are_verbatim_and_may_hold_colons() {
        assert_eq!(Connector::parse(" Giga:Dat").unwrap().as_str(), " Giga:Dat");
        assert_eq!(Connector::parse("").unwrap_err().field, "connector");
        assert_eq!(Connector::parse("a\rb").unwrap_err().field, "connector");
        assert_eq!(
            Connector::parse_as(&"c".repeat(65), "eligible_connectors[2]")
                .unwrap_err()
                .field,
            "eligible_connectors[2]"
        );
    }

    /// Whitespace that `str::trim` strips and ASCII trimming does not: the
    /// line and paragraph separators, NEL, NBSP, the wide and thin spaces,
    /// and the vertical tab (Unicode White_Space, not ASCII whitespace).
    const OTHER_BLANKS: &[char] = &[
        '\u{2028}', '\u{2029}', '\u{85}', '\u{A0}', '\u{1680}', '\u{2000}', '\u{2009}', '\u{200A}',
        '\u{202F}', '\u{205F}', '\u{3000}', '\u{B}',
    ];

    /// `c1` and `c1` followed by U+2028 must never be one customer: such a
    /// blank at either end of an id or a method is refused by the field's
    /// name and the code point, not stripped.
    #[test]
    fn other_blanks_at_the_ends_are_refused_not_stripped() {
        for &blank in OTHER_BLANKS {
            let code_point = format!("U+{:04X}", u32::from(blank));
            for raw in [
                format!("c1{blank}"),
                format!("{blank}c1"),
                format!(" {blank}c1\t"),
                format!("c1{blank} "),
            ] {
                let refused = [
                    MerchantId::parse(&raw).map(drop),
                    CustomerId::parse(&raw).map(drop),
                    PaymentMethod::parse(&raw).map(drop),
                    PaymentMethodType::parse(&raw).map(drop),
                ]
                .map(Result::unwrap_err);
                let fields = refused.each_ref().map(|err| err.field.as_str());
                let expected = [
                    "merchant_id",
                    "customer_id",
                    "payment_method",
                    "payment_method_type",
                ];
                assert_eq!(fields, expected, "{raw:?}");
                assert!(
                    refused.iter().all(|err| err.reason.contains(&code_point)),
                    "{raw:?}"
                );
            }
        }
    }

    #[test]
    fn customer_debug_output_is_redacted() {
        let id = CustomerId::parse("cus_secret").unwrap();
        assert!(!format!("{id:?}").contains("secret"));
    }

    /// ASCII blanks, as a caller may pad an id with them.
    fn ascii_blanks() -> impl Strategy<Value = String> {
        "[ \t\r\n\x0C]{0,3}"
    }

    /// A character at an id's end: any at all, or one of the blanks that
    /// `str::trim` used to strip.
    fn edge() -> impl Strategy<Value = String> {
        prop_oneof![
            any::<char>().prop_map(String::from),
            prop::sample::select(OTHER_BLANKS).prop_map(String::from),
            "[a-z]",
        ]
    }

    proptest! {
        /// Whatever sits at the ends, an accepted id (or method) is the
        /// text less its ASCII blanks: no other character is ever
        /// stripped, and a Unicode blank left at an end refuses the value
        /// by its field.
        #[test]
        fn no_character_but_an_ascii_blank_is_ever_stripped(
            pad in (ascii_blanks(), ascii_blanks()),
            ends in (edge(), edge()),
            middle in "\\PC{0,8}",
        ) {
            let raw = format!("{}{}{middle}{}{}", pad.0, ends.0, ends.1, pad.1);
            let kept = raw.trim_ascii();
            let blank_end = kept.starts_with(char::is_whitespace) || kept.ends_with(char::is_whitespace);
            match CustomerId::parse(&raw) {
                Ok(id) => prop_assert_eq!(id.as_str(), kept),
                Err(err) => prop_assert_eq!(err.field, "customer_id"),
            }
            prop_assert!(!blank_end || CustomerId::parse(&raw).is_err());
            match PaymentMethod::parse(&raw) {
                Ok(method) => prop_assert_eq!(method.as_str(), kept.to_uppercase()),
                Err(err) => prop_assert_eq!(err.field, "payment_method"),
            }
            prop_assert!(!blank_end || PaymentMethod::parse(&raw).is_err());
        }

        #[test]
        fn accepted_ids_are_trimmed_bounded_and_printable(raw in "\\PC{0,140}") {
            if let Ok(id) = MerchantId::parse(&raw) {
                prop_assert_eq!(id.as_str(), raw.trim_ascii());
                prop_assert!(!id.as_str().is_empty() && id.as_str().len() <= MAX_ID_BYTES);
                prop_assert!(!id.as_str().chars().any(text::is_forbidden));
            }
        }

        #[test]
        fn accepted_methods_and_connectors_fit_a_hash_field(raw in any::<String>()) {
            if let Ok(method) = PaymentMethod::parse(&raw) {
                prop_assert!(!method.as_str().contains(':'));
                prop_assert_eq!(method.as_str(), raw.trim_ascii().to_uppercase());
                prop_assert!(method.as_str().len() <= MAX_FIELD_BYTES);
            }
            if let Ok(connector) = Connector::parse(&raw) {
                prop_assert_eq!(connector.as_str(), raw.as_str());
                prop_assert!(!raw.chars().any(char::is_control));
            }
        }
    }
}
