//! A scanned customer hash taken apart into export rows, as pure logic.
//!
//! Only what the service itself writes becomes a row: a key that
//! `customer_key` made, a field `{PM}:{PMT}:{connector}` that `Combo` would
//! make from its own parts, and a positive whole count. Anything else is
//! counted as unreadable instead, because import would turn it into a
//! different key or field (or reject it), and a silent drop would lose
//! habits unnoticed. The bookkeeping field (remembered attempts) is the
//! service's own and is skipped without a word: it is not a habit, and a
//! fresh Redis needs none.

use crate::domain::attempts::is_bookkeeping;
use crate::domain::combo::{Combo, split_field};
use crate::domain::ids::{Connector, CustomerId, MerchantId, PaymentMethod, PaymentMethodType};
use crate::domain::keys::parse_customer_key;
use crate::domain::tenant::Tenant;

/// One habit of one customer: a success row whose count is the net count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Habit {
    pub payment_method: String,
    pub payment_method_type: String,
    pub connector: String,
    pub count: i64,
}

/// What one scanned key holds, as export sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decoded {
    /// A customer's habits in bytewise field order, and how many of its
    /// fields were unreadable; the tenant whose namespace the key is in.
    Customer {
        tenant: Tenant,
        merchant: MerchantId,
        customer: CustomerId,
        habits: Vec<Habit>,
        unreadable_fields: usize,
    },
    /// A key under the customer prefix that the service cannot have made.
    UnreadableKey,
}

/// Decodes the key and every field of one hash.
pub fn decode_hash(key: &[u8], fields: &[(Vec<u8>, Vec<u8>)]) -> Decoded {
    let Some((tenant, merchant, customer)) =
        std::str::from_utf8(key).ok().and_then(parse_customer_key)
    else {
        return Decoded::UnreadableKey;
    };
    let mut sorted: Vec<&(Vec<u8>, Vec<u8>)> = fields.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    let mut habits = Vec::with_capacity(sorted.len());
    let mut unreadable_fields = 0;
    for (field, value) in sorted {
        let Ok(field) = std::str::from_utf8(field) else {
            unreadable_fields += 1;
            continue;
        };
        if is_bookkeeping(field) {
            continue;
        }
        match decode_field(field, value) {
            Some(habit) => habits.push(habit),
            None => unreadable_fields += 1,
        }
    }
    Decoded::Customer {
        tenant,
        merchant,
        customer,
        habits,
        unreadable_fields,
    }
}

/// One field and its value, when both are what the service writes.
fn decode_field(field: &str, value: &[u8]) -> Option<Habit> {
    let count = parse_count(value)?;
    let parts = split_field(field)?;
    let method = PaymentMethod::parse(parts.method).ok()?;
    let method_type = PaymentMethodType::parse(parts.method_type).ok()?;
    let connector = Connector::parse(parts.connector).ok()?;
    // Canonical only: `interac` or ` RTP` would import as another field.
    if Combo::new(&method, &method_type, &connector).ok()?.field() != field {
        return None;
    }
    Some(Habit {
        payment_method: method.as_str().to_owned(),
        payment_method_type: method_type.as_str().to_owned(),
        connector: connector.as_str().to_owned(),
        count,
    })
}

/// A positive count in HINCRBY's canonical form (no sign, no leading zero,
/// no space). Zero and below are never stored: a count that reaches 0 is
/// deleted.
fn parse_count(value: &[u8]) -> Option<i64> {
    let text = std::str::from_utf8(value).ok()?;
    let count: i64 = text.parse().ok()?;
    (count > 0 && count.to_string() == text).then_some(count)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::attempts::ATTEMPTS_FIELD;
    use crate::domain::keys::customer_key;

    fn key(merchant: &str, customer: &str) -> Vec<u8> {
        key_in(&Tenant::DEFAULT, merchant, customer)
    }

    fn key_in(tenant: &Tenant, merchant: &str, customer: &str) -> Vec<u8> {
        customer_key(
            tenant,
            &MerchantId::parse(merchant).unwrap(),
            &CustomerId::parse(customer).unwrap(),
        )
        .as_bytes()
        .to_vec()
    }

    fn fields(pairs: &[(&[u8], &[u8])]) -> Vec<(Vec<u8>, Vec<u8>)> {
        pairs
            .iter()
            .map(|(f, v)| (f.to_vec(), v.to_vec()))
            .collect()
    }

    fn habit(pm: &str, pmt: &str, connector: &str, count: i64) -> Habit {
        Habit {
            payment_method: pm.into(),
            payment_method_type: pmt.into(),
            connector: connector.into(),
            count,
        }
    }

    #[test]
    fn habits_come_out_in_field_order_without_bookkeeping() {
        let decoded = decode_hash(
            &key("m_1", "c{1}"),
            &fields(&[
                (b"INTERAC:RTP:LOONIO", b"2"),
                (ATTEMPTS_FIELD.as_bytes(), &[0xff; 16]),
                (b"CARD:DEBIT:acme:eu", b"7"),
            ]),
        );
        let Decoded::Customer {
            tenant,
            merchant,
            customer,
            habits,
            unreadable_fields,
        } = decoded
        else {
            panic!("a customer key: {decoded:?}");
        };
        assert!(tenant.is_default());
        assert_eq!((merchant.as_str(), customer.as_str()), ("m_1", "c{1}"));
        assert_eq!(
            habits,
            [
                habit("CARD", "DEBIT", "acme:eu", 7),
                habit("INTERAC", "RTP", "LOONIO", 2)
            ]
        );
        assert_eq!(unreadable_fields, 0);
    }

    #[test]
    fn fields_and_values_the_service_never_writes_are_counted() {
        let bad: &[(&[u8], &[u8])] = &[
            (b"INTERAC:RTP:X", b"0"),
            (b"INTERAC:RTP:X", b"-3"),
            (b"INTERAC:RTP:X", b"+3"),
            (b"INTERAC:RTP:X", b"03"),
            (b"INTERAC:RTP:X", b"1.5"),
            (b"INTERAC:RTP:X", b""),
            (b"interac:RTP:X", b"1"),
            (b"INTERAC: RTP:X", b"1"),
            (b"INTERAC:RTP:", b"1"),
            (b"INTERAC:RTP", b"1"),
            (b"INTERAC:RTP:a\nb", b"1"),
            (b"\xff:RTP:X", b"1"),
        ];
        for (field, value) in bad {
            let decoded = decode_hash(&key("m", "c"), &fields(&[(field, value)]));
            let Decoded::Customer {
                habits,
                unreadable_fields,
                ..
            } = decoded
            else {
                panic!("a customer key");
            };
            assert!(habits.is_empty(), "{field:?} = {value:?}");
            assert_eq!(unreadable_fields, 1, "{field:?} = {value:?}");
        }
        let long = format!("CARD:DEBIT:{}", "x".repeat(60));
        let decoded = decode_hash(&key("m", "c"), &fields(&[(long.as_bytes(), b"1")]));
        assert!(matches!(
            decoded,
            Decoded::Customer {
                unreadable_fields: 1,
                ..
            }
        ));
    }

    #[test]
    fn a_tenants_key_gives_its_tenant() {
        for id in ["acme", "Acme", "a_b-1"] {
            let tenant = Tenant::parse(id).unwrap();
            let decoded = decode_hash(&key_in(&tenant, "m_1", "c_1"), &[]);
            let Decoded::Customer {
                tenant: read,
                merchant,
                customer,
                ..
            } = decoded
            else {
                panic!("a customer key: {decoded:?}");
            };
            assert_eq!(read, tenant);
            assert_eq!((merchant.as_str(), customer.as_str()), ("m_1", "c_1"));
        }
    }

    #[test]
    fn keys_the_service_never_writes_are_unreadable() {
        for key in [&b"sticky_gw_m%_c"[..], b"sticky_gw_m", b"sticky_gw_m_\xff"] {
            assert_eq!(decode_hash(key, &[]), Decoded::UnreadableKey, "{key:?}");
        }
    }
}
