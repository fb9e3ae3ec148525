//! The hash field `{PM}:{PMT}:{connector}` that stores one combo's net count.
//!
//! Payment method and type never hold `:`, so a field splits unambiguously at
//! its first two colons even though a connector may hold more.

use super::ids::{Connector, InvalidInput, MAX_FIELD_BYTES, PaymentMethod, PaymentMethodType};

/// One (payment method, payment method type, connector) combo of a customer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Combo {
    field: String,
}

impl Combo {
    /// Builds the combo, rejecting one whose field would not stay listpack-encoded.
    pub fn new(
        method: &PaymentMethod,
        method_type: &PaymentMethodType,
        connector: &Connector,
    ) -> Result<Self, InvalidInput> {
        // Built by hand, not with `format!`: this runs on every
        // RecordOutcome, and the formatting machinery costs more than the
        // copies.
        let mut field = MethodPrefix::with_room(method, method_type, connector.as_str().len());
        field.push_str(connector.as_str());
        if field.len() > MAX_FIELD_BYTES {
            return Err(InvalidInput::new(
                "connector",
                format!(
                    "payment_method, payment_method_type and connector encode to the {}-byte \
                     hash field; the limit is {MAX_FIELD_BYTES} bytes",
                    field.len()
                ),
            ));
        }
        Ok(Self { field })
    }

    /// The hash field, e.g. `INTERAC:RTP:GIGADAT`.
    pub fn field(&self) -> &str {
        &self.field
    }
}

/// The `{PM}:{PMT}:` prefix shared by every connector of one payment method.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MethodPrefix(String);

impl MethodPrefix {
    pub fn new(method: &PaymentMethod, method_type: &PaymentMethodType) -> Self {
        Self(Self::with_room(method, method_type, 0))
    }

    /// `METHOD:TYPE:` with room for `more` bytes after it.
    fn with_room(method: &PaymentMethod, method_type: &PaymentMethodType, more: usize) -> String {
        let (method, method_type) = (method.as_str(), method_type.as_str());
        let mut prefix = String::with_capacity(method.len() + method_type.len() + 2 + more);
        prefix.push_str(method);
        prefix.push(':');
        prefix.push_str(method_type);
        prefix.push(':');
        prefix
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The connector of `field` when the field belongs to this prefix.
    pub fn connector_of<'f>(&self, field: &'f str) -> Option<&'f str> {
        field.strip_prefix(self.0.as_str())
    }
}

/// A stored field taken apart again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FieldParts<'f> {
    pub method: &'f str,
    pub method_type: &'f str,
    pub connector: &'f str,
}

/// Splits a field at its first two colons; `None` for a field this service
/// did not write (fewer than two colons).
pub fn split_field(field: &str) -> Option<FieldParts<'_>> {
    let mut parts = field.splitn(3, ':');
    Some(FieldParts {
        method: parts.next()?,
        method_type: parts.next()?,
        connector: parts.next()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn combo(pm: &str, pmt: &str, connector: &str) -> Result<Combo, InvalidInput> {
        Combo::new(
            &PaymentMethod::parse(pm)?,
            &PaymentMethodType::parse(pmt)?,
            &Connector::parse(connector)?,
        )
    }

    #[test]
    fn field_matches_the_spec_example() {
        assert_eq!(
            combo("interac", "rtp", "GIGADAT").unwrap().field(),
            "INTERAC:RTP:GIGADAT"
        );
    }

    #[test]
    fn a_field_over_64_bytes_is_rejected_naming_the_parts() {
        let err = combo(&"a".repeat(30), &"b".repeat(30), "cccc").unwrap_err();
        assert_eq!(err.field, "connector");
        assert!(err.reason.contains("payment_method") && err.reason.contains("66-byte"));
        assert!(combo(&"a".repeat(30), &"b".repeat(30), "cc").is_ok());
    }

    #[test]
    fn connector_colons_survive_the_split() {
        let parts = split_field("CARD:DEBIT:acme:eu:1").unwrap();
        assert_eq!(
            (parts.method, parts.method_type, parts.connector),
            ("CARD", "DEBIT", "acme:eu:1")
        );
        assert_eq!(split_field("no-colons"), None);
    }

    proptest! {
        #[test]
        fn split_inverts_the_encoding(
            pm in "[a-z]{1,8}", pmt in "[a-z]{1,8}", connector in "[ -~]{1,40}"
        ) {
            let combo = combo(&pm, &pmt, &connector).unwrap();
            let parts = split_field(combo.field()).unwrap();
            prop_assert_eq!(parts.method, pm.to_uppercase());
            prop_assert_eq!(parts.method_type, pmt.to_uppercase());
            prop_assert_eq!(parts.connector, connector.as_str());
        }
    }
}
