//! Protobuf requests into validated domain values, and domain results back
//! into protobuf. Fields are checked in declaration order, and the first bad
//! one is reported by name.

use super::pb;
use crate::domain::InvalidInput;
use crate::domain::combo::{Combo, MethodPrefix};
use crate::domain::counts::{Outcome, Recorded};
use crate::domain::habits::Habit;
use crate::domain::ids::{Connector, CustomerId, MerchantId, PaymentMethod, PaymentMethodType};
use crate::domain::pin::{Candidate, PinQuery};
use crate::record::RecordCommand;

/// The most connectors a GetPin may list.
pub const MAX_ELIGIBLE_CONNECTORS: usize = 64;

pub fn record_command(req: &pb::RecordOutcomeRequest) -> Result<RecordCommand, InvalidInput> {
    let (merchant, customer) = customer_ref(&req.merchant_id, &req.customer_id)?;
    let method = PaymentMethod::parse(&req.payment_method)?;
    let method_type = PaymentMethodType::parse(&req.payment_method_type)?;
    let connector = Connector::parse(&req.connector)?;
    let outcome = match pb::Outcome::try_from(req.outcome) {
        Ok(pb::Outcome::Success) => Outcome::Success,
        Ok(pb::Outcome::GatewayFailure) => Outcome::GatewayFailure,
        Ok(pb::Outcome::Unspecified) => {
            return Err(InvalidInput::new(
                "outcome",
                "must be OUTCOME_SUCCESS or OUTCOME_GATEWAY_FAILURE, not OUTCOME_UNSPECIFIED",
            ));
        }
        Err(_) => {
            return Err(InvalidInput::new(
                "outcome",
                format!(
                    "unknown value {}; must be OUTCOME_SUCCESS or OUTCOME_GATEWAY_FAILURE",
                    req.outcome
                ),
            ));
        }
    };
    let combo = Combo::new(&method, &method_type, &connector)?;
    Ok(RecordCommand {
        merchant,
        customer,
        combo,
        outcome,
    })
}

pub fn pin_query(
    req: &pb::GetPinRequest,
    min_count: i64,
) -> Result<(MerchantId, CustomerId, PinQuery), InvalidInput> {
    let (merchant, customer) = customer_ref(&req.merchant_id, &req.customer_id)?;
    let method = PaymentMethod::parse(&req.payment_method)?;
    let method_type = PaymentMethodType::parse(&req.payment_method_type)?;
    if req.eligible_connectors.len() > MAX_ELIGIBLE_CONNECTORS {
        return Err(InvalidInput::new(
            "eligible_connectors",
            format!(
                "has {} entries; the limit is {MAX_ELIGIBLE_CONNECTORS}",
                req.eligible_connectors.len()
            ),
        ));
    }
    let eligible = req
        .eligible_connectors
        .iter()
        .enumerate()
        .map(|(i, raw)| Connector::parse_as(raw, &format!("eligible_connectors[{i}]")))
        .collect::<Result<Vec<_>, _>>()?;
    let query = PinQuery {
        prefix: MethodPrefix::new(&method, &method_type),
        eligible,
        min_count,
    };
    Ok((merchant, customer, query))
}

pub fn customer_ref(
    merchant_id: &str,
    customer_id: &str,
) -> Result<(MerchantId, CustomerId), InvalidInput> {
    Ok((
        MerchantId::parse(merchant_id)?,
        CustomerId::parse(customer_id)?,
    ))
}

pub fn record_response(recorded: Recorded) -> pb::RecordOutcomeResponse {
    let (result, net_count, pruned) = match recorded {
        Recorded::Applied { net_count, pruned } => (pb::RecordResult::Applied, net_count, pruned),
        Recorded::IgnoredNoHabit => (pb::RecordResult::IgnoredNoHabit, 0, 0),
        Recorded::NotAdmitted => (pb::RecordResult::NotAdmitted, 0, 0),
    };
    pb::RecordOutcomeResponse {
        result: result.into(),
        net_count,
        pruned,
    }
}

pub fn pin_response(candidates: Vec<Candidate>) -> pb::GetPinResponse {
    let (pinned, connector, net_count) = match candidates.first() {
        Some(best) => (true, best.connector.clone(), best.net_count),
        None => (false, String::new(), 0),
    };
    pb::GetPinResponse {
        pinned,
        connector,
        net_count,
        candidates: candidates
            .into_iter()
            .map(|c| pb::ConnectorCount {
                connector: c.connector,
                net_count: c.net_count,
            })
            .collect(),
    }
}

pub fn habits_response(habits: Vec<Habit>, ttl_seconds: i64) -> pb::GetHabitsResponse {
    pb::GetHabitsResponse {
        habits: habits
            .into_iter()
            .map(|h| pb::Habit {
                payment_method: h.method,
                payment_method_type: h.method_type,
                connector: h.connector,
                net_count: h.net_count,
            })
            .collect(),
        ttl_seconds,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(
        f: impl FnOnce(&mut pb::RecordOutcomeRequest),
    ) -> Result<RecordCommand, InvalidInput> {
        let mut req = pb::RecordOutcomeRequest {
            merchant_id: "m1".into(),
            customer_id: "c1".into(),
            payment_method: "interac".into(),
            payment_method_type: "rtp".into(),
            connector: "GIGADAT".into(),
            outcome: pb::Outcome::Success.into(),
        };
        f(&mut req);
        record_command(&req)
    }

    #[test]
    fn a_good_request_converts() {
        let cmd = record(|_| {}).unwrap();
        assert_eq!(cmd.combo.field(), "INTERAC:RTP:GIGADAT");
        assert_eq!(cmd.outcome, Outcome::Success);
    }

    #[test]
    fn outcomes_must_be_known_and_specified() {
        assert_eq!(record(|r| r.outcome = 0).err().unwrap().field, "outcome");
        assert_eq!(record(|r| r.outcome = 9).err().unwrap().field, "outcome");
    }

    #[test]
    fn each_bad_field_is_named() {
        assert_eq!(
            record(|r| r.merchant_id.clear()).err().unwrap().field,
            "merchant_id"
        );
        assert_eq!(
            record(|r| r.customer_id = " ".into()).err().unwrap().field,
            "customer_id"
        );
        assert_eq!(
            record(|r| r.payment_method = "a:b".into())
                .err()
                .unwrap()
                .field,
            "payment_method"
        );
        assert_eq!(
            record(|r| r.payment_method_type.clear())
                .err()
                .unwrap()
                .field,
            "payment_method_type"
        );
        assert_eq!(
            record(|r| r.connector.clear()).err().unwrap().field,
            "connector"
        );
    }

    #[test]
    fn eligible_connectors_are_bounded_and_checked() {
        let mut req = pb::GetPinRequest {
            merchant_id: "m1".into(),
            customer_id: "c1".into(),
            payment_method: "interac".into(),
            payment_method_type: "rtp".into(),
            eligible_connectors: vec!["a".into(); 65],
        };
        assert_eq!(
            pin_query(&req, 1).err().unwrap().field,
            "eligible_connectors"
        );
        req.eligible_connectors = vec!["a".into(), String::new()];
        assert_eq!(
            pin_query(&req, 1).err().unwrap().field,
            "eligible_connectors[1]"
        );
        req.eligible_connectors = vec!["a".into(); 64];
        assert!(pin_query(&req, 1).is_ok());
    }
}
