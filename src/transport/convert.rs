//! Protobuf requests into validated domain values, and domain results back
//! into protobuf. Fields are checked in declaration order, and the first bad
//! one is reported by name.

use std::collections::HashMap;
use std::time::Duration;

use super::pb;
use crate::breaker::ConnectorHealthRow;
use crate::domain::InvalidInput;
use crate::domain::breaker::{BreakerState, Override, OverrideUntil, VetoReason};
use crate::domain::combo::MethodPrefix;
use crate::domain::counts::{Outcome, Recorded};
use crate::domain::habits::Habit;
use crate::domain::ids::{Connector, CustomerId, MerchantId, PaymentMethod, PaymentMethodType};
use crate::domain::pin::{Candidate, PinChoice, PinQuery, ScoreRatio, Veto};
use crate::domain::rollout::{PinAnswer, PinReason};
use crate::domain::uplift::{self, GroupCounts, Uplift};
use crate::record::{RawOutcome, RecordCommand};

/// The most connectors a GetPin may list.
pub const MAX_ELIGIBLE_CONNECTORS: usize = 64;
/// The most live scores a GetPin may send.
pub const MAX_CONNECTOR_SCORES: usize = 64;
/// The longest override SetConnectorOverride takes: a week, in seconds.
pub const MAX_OVERRIDE_TTL_SECONDS: u32 = 604_800;

pub fn record_command(req: &pb::RecordOutcomeRequest) -> Result<RecordCommand, InvalidInput> {
    let raw = RawOutcome {
        merchant_id: &req.merchant_id,
        customer_id: &req.customer_id,
        payment_method: &req.payment_method,
        payment_method_type: &req.payment_method_type,
        connector: &req.connector,
        attempt_id: &req.attempt_id,
        pin_connector: &req.pin_connector,
    };
    RecordCommand::parse(raw, || match pb::Outcome::try_from(req.outcome) {
        Ok(pb::Outcome::Success) => Ok(Outcome::Success),
        Ok(pb::Outcome::GatewayFailure) => Ok(Outcome::GatewayFailure),
        Ok(pb::Outcome::Unspecified) => Err(InvalidInput::new(
            "outcome",
            "must be OUTCOME_SUCCESS or OUTCOME_GATEWAY_FAILURE, not OUTCOME_UNSPECIFIED",
        )),
        Err(_) => Err(InvalidInput::new(
            "outcome",
            format!(
                "unknown value {}; must be OUTCOME_SUCCESS or OUTCOME_GATEWAY_FAILURE",
                req.outcome
            ),
        )),
    })
}

/// The pin query, with the veto built from the caller's scores and ratio
/// (or `default_ratio` when the call names none).
pub fn pin_query(
    req: &pb::GetPinRequest,
    min_count: i64,
    default_ratio: ScoreRatio,
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
    let scores = connector_scores(&req.connector_scores)?;
    let ratio = match req.min_score_ratio {
        None => default_ratio,
        Some(ratio) => ScoreRatio::new(ratio).ok_or_else(|| {
            InvalidInput::new(
                "min_score_ratio",
                format!("is {ratio}; it must be a number from 0 to 1"),
            )
        })?,
    };
    let veto = Veto::new(scores, ratio, &eligible);
    let query = PinQuery {
        prefix: MethodPrefix::new(&method, &method_type),
        eligible,
        min_count,
        veto,
    };
    Ok((merchant, customer, query))
}

/// Live scores: at most 64, each a finite, non-negative number for a
/// connector name that could be stored.
fn connector_scores(raw: &HashMap<String, f64>) -> Result<HashMap<String, f64>, InvalidInput> {
    const FIELD: &str = "connector_scores";
    if raw.len() > MAX_CONNECTOR_SCORES {
        return Err(InvalidInput::new(
            FIELD,
            format!(
                "has {} entries; the limit is {MAX_CONNECTOR_SCORES}",
                raw.len()
            ),
        ));
    }
    for (connector, score) in raw {
        Connector::parse_as(connector, FIELD)?;
        if !score.is_finite() || *score < 0.0 {
            return Err(InvalidInput::new(
                FIELD,
                format!(
                    "the score of {connector:?} is {score}; scores must be finite and not negative"
                ),
            ));
        }
    }
    Ok(raw.clone())
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
        Recorded::NotAdmitted(_) => (pb::RecordResult::NotAdmitted, 0, 0),
        Recorded::Duplicate { net_count } => (pb::RecordResult::Duplicate, net_count, 0),
    };
    pb::RecordOutcomeResponse {
        result: result.into(),
        net_count,
        pruned,
    }
}

/// GetPin's answer: the pin (or none) and why as the rollout decided
/// (`answer`), with the candidates and vetoes the rules found (`choice`;
/// `None` in mode off, where nothing was read).
pub fn pin_response(choice: Option<PinChoice>, answer: PinAnswer) -> pb::GetPinResponse {
    let (pinned, connector, net_count) = match answer.connector {
        Some(pin) if answer.pinned => (true, pin.connector, pin.net_count),
        _ => (false, String::new(), 0),
    };
    let (candidates, vetoed, vetoes) = match choice {
        Some(choice) => (choice.candidates, choice.vetoed, choice.vetoes),
        None => Default::default(),
    };
    let vetoes = vetoes
        .into_iter()
        .map(|(c, reason)| pb::Veto {
            connector: c.connector,
            net_count: c.net_count,
            reason: veto_reason(reason).into(),
        })
        .collect();
    pb::GetPinResponse {
        pinned,
        connector,
        net_count,
        candidates: connector_counts(candidates),
        vetoed: connector_counts(vetoed),
        reason: pin_reason(answer.reason).into(),
        would_pin: answer.would_pin.unwrap_or_default(),
        vetoes,
    }
}

pub fn pin_reason(reason: PinReason) -> pb::PinReason {
    match reason {
        PinReason::Pinned => pb::PinReason::Pinned,
        PinReason::NoHabit => pb::PinReason::NoHabit,
        PinReason::AllVetoed => pb::PinReason::AllVetoed,
        PinReason::Holdout => pb::PinReason::Holdout,
        PinReason::Shadow => pb::PinReason::Shadow,
        PinReason::Disabled => pb::PinReason::Disabled,
    }
}

fn veto_reason(reason: VetoReason) -> pb::VetoReason {
    match reason {
        VetoReason::Score => pb::VetoReason::Score,
        VetoReason::CircuitOpen => pb::VetoReason::CircuitOpen,
        VetoReason::CircuitHalfOpen => pb::VetoReason::CircuitHalfOpen,
        VetoReason::ForcedOpen => pb::VetoReason::ForcedOpen,
    }
}

/// GetUplift's merchant and days: 1 to 35, 0 meaning 7.
pub fn uplift_request(req: &pb::GetUpliftRequest) -> Result<(MerchantId, u32), InvalidInput> {
    let merchant = MerchantId::parse(&req.merchant_id)?;
    let days = match req.days {
        0 => uplift::DEFAULT_DAYS,
        days @ 1..=uplift::MAX_DAYS => days,
        days => {
            return Err(InvalidInput::new(
                "days",
                format!(
                    "is {days}; a report covers 1 to {} days (0 means {})",
                    uplift::MAX_DAYS,
                    uplift::DEFAULT_DAYS
                ),
            ));
        }
    };
    Ok((merchant, days))
}

/// GetUplift's answer: each group's counts and success rate, the
/// difference and its interval, `enough_data`. (The follow rate is the
/// report's; the response carries treated's followed count instead.)
pub fn uplift_response(uplift: &Uplift) -> pb::GetUpliftResponse {
    let stats = |group: &GroupCounts| pb::GroupStats {
        outcomes: group.outcomes,
        successes: group.successes,
        success_rate: group.success_rate(),
        followed: group.followed,
        overridden: group.overridden,
    };
    pb::GetUpliftResponse {
        treated: Some(stats(&uplift.treated)),
        holdout: Some(stats(&uplift.holdout)),
        shadow: Some(stats(&uplift.shadow)),
        difference: uplift.difference,
        ci_low: uplift.ci_low,
        ci_high: uplift.ci_high,
        enough_data: uplift.enough_data,
    }
}

/// GetConnectorHealth's merchant.
pub fn connector_health_request(
    req: &pb::GetConnectorHealthRequest,
) -> Result<MerchantId, InvalidInput> {
    MerchantId::parse(&req.merchant_id)
}

/// An override and how long it lasts, as `Breakers::set_override` takes
/// it; `None` clears the override.
pub type OverrideChange = Option<(Override, Duration)>;

/// SetConnectorOverride's merchant, connector and override with its
/// lifetime; `None` clears the override (`BREAKER_OVERRIDE_NONE`, whose
/// `ttl_seconds` is ignored).
pub fn connector_override(
    req: &pb::SetConnectorOverrideRequest,
) -> Result<(MerchantId, Connector, OverrideChange), InvalidInput> {
    let merchant = MerchantId::parse(&req.merchant_id)?;
    let connector = Connector::parse(&req.connector)?;
    let kind = match pb::BreakerOverride::try_from(req.r#override) {
        Ok(pb::BreakerOverride::None) => return Ok((merchant, connector, None)),
        Ok(pb::BreakerOverride::ForceOpen) => Override::ForceOpen,
        Ok(pb::BreakerOverride::ForceClosed) => Override::ForceClosed,
        Err(_) => {
            return Err(InvalidInput::new(
                "override",
                format!(
                    "unknown value {}; must be BREAKER_OVERRIDE_NONE, BREAKER_OVERRIDE_FORCE_OPEN \
                     or BREAKER_OVERRIDE_FORCE_CLOSED",
                    req.r#override
                ),
            ));
        }
    };
    let ttl = req.ttl_seconds;
    if !(1..=MAX_OVERRIDE_TTL_SECONDS).contains(&ttl) {
        return Err(InvalidInput::new(
            "ttl_seconds",
            format!("is {ttl}; an override lasts 1 to {MAX_OVERRIDE_TTL_SECONDS} seconds (7 days)"),
        ));
    }
    let over = (kind, Duration::from_secs(u64::from(ttl)));
    Ok((merchant, connector, Some(over)))
}

/// GetConnectorHealth's answer, in the rows' order (bytewise by
/// connector, as storage reads them). Times are Unix milliseconds;
/// `open_until_unix_ms` is 0 unless the breaker is OPEN.
pub fn connector_health_response(rows: Vec<ConnectorHealthRow>) -> pb::GetConnectorHealthResponse {
    let connectors = rows
        .into_iter()
        .map(|row| {
            let (state, open_until_unix_ms) = match row.state {
                BreakerState::Closed => (pb::BreakerState::Closed, 0),
                BreakerState::Open { until_ms } => (pb::BreakerState::Open, until_ms),
                BreakerState::HalfOpen { .. } => (pb::BreakerState::HalfOpen, 0),
            };
            let (over, override_until_unix_ms) = match row.over {
                None => (pb::BreakerOverride::None, 0),
                Some(OverrideUntil { kind, until_ms }) => (
                    match kind {
                        Override::ForceOpen => pb::BreakerOverride::ForceOpen,
                        Override::ForceClosed => pb::BreakerOverride::ForceClosed,
                    },
                    until_ms,
                ),
            };
            pb::ConnectorHealth {
                connector: row.connector,
                state: state.into(),
                calls: row.counts.calls,
                failures: row.counts.failures,
                open_until_unix_ms,
                r#override: over.into(),
                override_until_unix_ms,
            }
        })
        .collect();
    pb::GetConnectorHealthResponse { connectors }
}

fn connector_counts(candidates: Vec<Candidate>) -> Vec<pb::ConnectorCount> {
    candidates
        .into_iter()
        .map(|c| pb::ConnectorCount {
            connector: c.connector,
            net_count: c.net_count,
        })
        .collect()
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
    use crate::domain::rollout::{self, Mode};

    fn record_request() -> pb::RecordOutcomeRequest {
        pb::RecordOutcomeRequest {
            merchant_id: "m1".into(),
            customer_id: "c1".into(),
            payment_method: "interac".into(),
            payment_method_type: "rtp".into(),
            connector: "GIGADAT".into(),
            outcome: pb::Outcome::Success.into(),
            attempt_id: String::new(),
            pin_connector: String::new(),
        }
    }

    fn record(
        f: impl FnOnce(&mut pb::RecordOutcomeRequest),
    ) -> Result<RecordCommand, InvalidInput> {
        let mut req = record_request();
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
    fn attempt_ids_are_optional_and_checked() {
        assert_eq!(record(|_| {}).unwrap().attempt, None);
        assert!(
            record(|r| r.attempt_id = " p1 ".into())
                .unwrap()
                .attempt
                .is_some()
        );
        assert_eq!(
            record(|r| r.attempt_id = "a\u{7}".into())
                .err()
                .unwrap()
                .field,
            "attempt_id"
        );
    }

    /// `pin_connector` is optional: empty is none, anything else a
    /// connector by `connector`'s rules (kept exactly, blanks included),
    /// named `pin_connector` when bad.
    #[test]
    fn a_pin_connector_is_optional_and_checked_like_connector() {
        assert_eq!(record(|_| {}).unwrap().pin_connector, None);
        let named = record(|r| r.pin_connector = "LOONIO".into()).unwrap();
        assert_eq!(
            named
                .pin_connector
                .map(|c| c.as_str().to_owned())
                .as_deref(),
            Some("LOONIO")
        );
        assert_eq!(named.connector.as_str(), "GIGADAT");
        let spaced = record(|r| r.pin_connector = " Giga:Dat".into()).unwrap();
        assert_eq!(spaced.pin_connector.unwrap().as_str(), " Giga:Dat");
        for bad in ["a\u{7}", "x\u{200B}", &"c".repeat(65)] {
            let err = record(|r| r.pin_connector = bad.to_owned()).unwrap_err();
            assert_eq!(err.field, "pin_connector", "{bad:?}");
            let as_connector = record(|r| r.connector = bad.to_owned()).unwrap_err();
            assert_eq!(as_connector.reason, err.reason, "{bad:?}");
        }
    }

    /// Whether `field`, as an error names it, is the proto field `name`
    /// (a list's entry names its index: `eligible_connectors[0]`).
    fn is_field(field: &str, name: &str) -> bool {
        field == name || field.starts_with(&format!("{name}["))
    }

    /// Spoils one field of a request with its bad value number 0 or 1.
    type Spoil<R> = fn(&mut R, usize);

    /// Two bad values of every id and payment method: blank, and a
    /// zero-width space inside.
    const BAD_TEXT: [&str; 2] = [" ", "a\u{200B}b"];

    /// The spoils of fields 1 to 4, which RecordOutcome and GetPin share
    /// (a macro: the two requests have no common type).
    macro_rules! shared_fields {
        () => {
            [
                ("merchant_id", |r, v| r.merchant_id = BAD_TEXT[v].into()),
                ("customer_id", |r, v| r.customer_id = BAD_TEXT[v].into()),
                ("payment_method", |r, v| {
                    r.payment_method = BAD_TEXT[v].into()
                }),
                ("payment_method_type", |r, v| {
                    r.payment_method_type = BAD_TEXT[v].into()
                }),
            ]
        };
    }

    /// For every set of bad fields (each subset of a request's fields,
    /// given in the proto's order, with either bad value for each), the
    /// error names the bad field with the lowest number, whatever the
    /// later ones hold.
    fn assert_lowest_bad_field_named<R: Clone>(
        rpc: &str,
        good: &R,
        fields: &[(&str, Spoil<R>)],
        parse: impl Fn(&R) -> Result<(), InvalidInput>,
    ) {
        parse(good).expect("the good request is accepted");
        for bad in 1..1u32 << fields.len() {
            for variant in 0..2 {
                let mut req = good.clone();
                for (i, (_, spoil)) in fields.iter().enumerate() {
                    if bad & (1 << i) != 0 {
                        spoil(&mut req, (variant + i) % 2);
                    }
                }
                let lowest = fields[bad.trailing_zeros() as usize].0;
                let err = parse(&req).expect_err("a bad request was accepted");
                assert!(
                    is_field(&err.field, lowest),
                    "{rpc}, bad fields {bad:#b} (variant {variant}): named {err}, not {lowest}"
                );
            }
        }
    }

    /// The case among them: a 61-byte connector (its combo over 64
    /// bytes) with OUTCOME_UNSPECIFIED is a bad `connector`, field 5.
    #[test]
    fn record_outcome_names_its_lowest_numbered_bad_field() {
        let mut good = record_request();
        good.attempt_id = "pay_1".into();
        let shared: [(&str, Spoil<pb::RecordOutcomeRequest>); 4] = shared_fields!();
        good.pin_connector = "GIGADAT".into();
        let own: [(&str, Spoil<pb::RecordOutcomeRequest>); 4] = [
            ("connector", |r, v| r.connector = "c".repeat([61, 0][v])),
            ("outcome", |r, v| r.outcome = [0, 9][v]),
            ("attempt_id", |r, v| {
                r.attempt_id = ["a\u{7}".into(), "x".repeat(129)][v].clone();
            }),
            ("pin_connector", |r, v| {
                r.pin_connector = ["c\u{200B}".into(), "c".repeat(65)][v].clone();
            }),
        ];
        let fields: Vec<_> = shared.into_iter().chain(own).collect();
        assert_lowest_bad_field_named("RecordOutcome", &good, &fields, |r| {
            record_command(r).map(drop)
        });
    }

    #[test]
    fn get_pin_names_its_lowest_numbered_bad_field() {
        let mut good = pin_request();
        good.eligible_connectors = vec!["GIGADAT".into()];
        good.connector_scores = HashMap::from([("GIGADAT".into(), 0.5)]);
        good.min_score_ratio = Some(0.5);
        let shared: [(&str, Spoil<pb::GetPinRequest>); 4] = shared_fields!();
        let own: [(&str, Spoil<pb::GetPinRequest>); 3] = [
            ("eligible_connectors", |r, v| {
                r.eligible_connectors = vec![String::new(); [1, 65][v]];
            }),
            ("connector_scores", |r, v| {
                r.connector_scores
                    .insert(["a", ""][v].into(), [-1.0, 1.0][v]);
            }),
            ("min_score_ratio", |r, v| {
                r.min_score_ratio = Some([1.5, f64::NAN][v]);
            }),
        ];
        let fields: Vec<_> = shared.into_iter().chain(own).collect();
        assert_lowest_bad_field_named("GetPin", &good, &fields, |r| {
            pin_query(r, 1, ScoreRatio::DEFAULT).map(drop)
        });
    }

    /// GetHabits and ForgetCustomer both read their two ids with
    /// `customer_ref`.
    #[test]
    fn get_habits_and_forget_customer_name_their_lowest_numbered_bad_field() {
        let good = pb::GetHabitsRequest {
            merchant_id: "m1".into(),
            customer_id: "c1".into(),
        };
        let fields: [(&str, Spoil<pb::GetHabitsRequest>); 2] = [
            ("merchant_id", |r, v| r.merchant_id = BAD_TEXT[v].into()),
            ("customer_id", |r, v| r.customer_id = BAD_TEXT[v].into()),
        ];
        assert_lowest_bad_field_named("GetHabits, ForgetCustomer", &good, &fields, |r| {
            customer_ref(&r.merchant_id, &r.customer_id).map(drop)
        });
    }

    fn pin_request() -> pb::GetPinRequest {
        pb::GetPinRequest {
            merchant_id: "m1".into(),
            customer_id: "c1".into(),
            payment_method: "interac".into(),
            payment_method_type: "rtp".into(),
            ..Default::default()
        }
    }

    fn pin_error(req: &pb::GetPinRequest) -> String {
        pin_query(req, 1, ScoreRatio::DEFAULT).err().unwrap().field
    }

    #[test]
    fn eligible_connectors_are_bounded_and_checked() {
        let mut req = pin_request();
        req.eligible_connectors = vec!["a".into(); 65];
        assert_eq!(pin_error(&req), "eligible_connectors");
        req.eligible_connectors = vec!["a".into(), String::new()];
        assert_eq!(pin_error(&req), "eligible_connectors[1]");
        req.eligible_connectors = vec!["a".into(); 64];
        assert!(pin_query(&req, 1, ScoreRatio::DEFAULT).is_ok());
    }

    #[test]
    fn scores_and_the_ratio_are_checked_even_alone() {
        let mut req = pin_request();
        for bad in [-0.1, 1.1, f64::NAN, f64::INFINITY] {
            req.min_score_ratio = Some(bad);
            assert_eq!(pin_error(&req), "min_score_ratio", "{bad}");
        }
        req.min_score_ratio = Some(1.0);
        for bad in [-1.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
            req.connector_scores = HashMap::from([("a".into(), bad)]);
            assert_eq!(pin_error(&req), "connector_scores", "{bad}");
        }
        req.connector_scores = (0..65).map(|i| (i.to_string(), 1.0)).collect();
        assert_eq!(pin_error(&req), "connector_scores");
        req.connector_scores = (0..64).map(|i| (i.to_string(), 1.0)).collect();
        assert!(pin_query(&req, 1, ScoreRatio::DEFAULT).is_ok());
    }

    fn override_request() -> pb::SetConnectorOverrideRequest {
        pb::SetConnectorOverrideRequest {
            merchant_id: "m1".into(),
            connector: "GIGADAT".into(),
            r#override: pb::BreakerOverride::ForceOpen.into(),
            ttl_seconds: 60,
        }
    }

    #[test]
    fn set_connector_override_names_its_lowest_numbered_bad_field() {
        let fields: [(&str, Spoil<pb::SetConnectorOverrideRequest>); 4] = [
            ("merchant_id", |r, v| r.merchant_id = BAD_TEXT[v].into()),
            ("connector", |r, v| {
                r.connector = ["", "c\u{200B}"][v].into()
            }),
            ("override", |r, v| r.r#override = [3, -1][v]),
            ("ttl_seconds", |r, v| r.ttl_seconds = [0, 604_801][v]),
        ];
        assert_lowest_bad_field_named("SetConnectorOverride", &override_request(), &fields, |r| {
            connector_override(r).map(drop)
        });
    }

    #[test]
    fn an_override_lasts_a_second_to_a_week_and_none_ignores_its_ttl() {
        let with = |kind: pb::BreakerOverride, ttl_seconds| {
            connector_override(&pb::SetConnectorOverrideRequest {
                r#override: kind.into(),
                ttl_seconds,
                ..override_request()
            })
        };
        let (_, connector, over) = with(pb::BreakerOverride::ForceOpen, 1).unwrap();
        assert_eq!(connector.as_str(), "GIGADAT");
        assert_eq!(over, Some((Override::ForceOpen, Duration::from_secs(1))));
        let (_, _, over) = with(pb::BreakerOverride::ForceClosed, 604_800).unwrap();
        assert_eq!(
            over,
            Some((Override::ForceClosed, Duration::from_secs(604_800)))
        );
        for ttl in [0, 1, 604_801, u32::MAX] {
            assert_eq!(with(pb::BreakerOverride::None, ttl).unwrap().2, None);
        }
        let err = with(pb::BreakerOverride::ForceClosed, 604_801).unwrap_err();
        assert_eq!(err.field, "ttl_seconds");
        assert!(err.reason.contains("604801"), "{err}");
    }

    #[test]
    fn get_uplift_names_its_lowest_numbered_bad_field_and_reads_0_as_7_days() {
        let good = pb::GetUpliftRequest {
            merchant_id: "m1".into(),
            days: 35,
        };
        let fields: [(&str, Spoil<pb::GetUpliftRequest>); 2] = [
            ("merchant_id", |r, v| r.merchant_id = BAD_TEXT[v].into()),
            ("days", |r, v| r.days = [36, u32::MAX][v]),
        ];
        assert_lowest_bad_field_named("GetUplift", &good, &fields, |r| uplift_request(r).map(drop));
        let days = |days| {
            uplift_request(&pb::GetUpliftRequest {
                days,
                ..good.clone()
            })
        };
        assert_eq!(days(0).unwrap().1, 7);
        assert_eq!(days(1).unwrap().1, 1);
        assert_eq!(days(35).unwrap().1, 35);
        assert!(days(36).unwrap_err().reason.contains("36"));
    }

    #[test]
    fn connector_health_names_a_bad_merchant() {
        for bad in BAD_TEXT {
            let req = pb::GetConnectorHealthRequest {
                merchant_id: bad.into(),
            };
            assert_eq!(
                connector_health_request(&req).unwrap_err().field,
                "merchant_id"
            );
        }
        let req = pb::GetConnectorHealthRequest {
            merchant_id: " m1 ".into(),
        };
        assert_eq!(connector_health_request(&req).unwrap().as_str(), "m1");
    }

    /// Only an OPEN breaker has an end, and only an override its own.
    #[test]
    fn connector_health_shows_times_only_where_they_apply() {
        use crate::domain::breaker::Counts;
        let row = |connector: &str, state, over| ConnectorHealthRow {
            connector: connector.into(),
            state,
            counts: Counts {
                calls: 20,
                failures: 10,
            },
            open_until_ms: 1_700_000_030_000,
            over,
        };
        let response = connector_health_response(vec![
            row(
                "A",
                BreakerState::Open {
                    until_ms: 1_700_000_030_000,
                },
                Some(OverrideUntil {
                    kind: Override::ForceClosed,
                    until_ms: 1_700_000_060_000,
                }),
            ),
            row(
                "B",
                BreakerState::HalfOpen {
                    since_ms: 1_700_000_030_000,
                },
                None,
            ),
            row("C", BreakerState::Closed, None),
        ]);
        let shown: Vec<_> = response
            .connectors
            .iter()
            .map(|c| {
                (
                    c.connector.as_str(),
                    c.state(),
                    c.calls,
                    c.failures,
                    c.open_until_unix_ms,
                    c.r#override(),
                    c.override_until_unix_ms,
                )
            })
            .collect();
        assert_eq!(
            shown,
            [
                (
                    "A",
                    pb::BreakerState::Open,
                    20,
                    10,
                    1_700_000_030_000,
                    pb::BreakerOverride::ForceClosed,
                    1_700_000_060_000
                ),
                (
                    "B",
                    pb::BreakerState::HalfOpen,
                    20,
                    10,
                    0,
                    pb::BreakerOverride::None,
                    0
                ),
                (
                    "C",
                    pb::BreakerState::Closed,
                    20,
                    10,
                    0,
                    pb::BreakerOverride::None,
                    0
                ),
            ]
        );
    }

    #[test]
    fn vetoes_keep_the_candidates_order_and_their_reasons() {
        let candidate = |connector: &str, net_count| Candidate {
            connector: connector.into(),
            net_count,
        };
        let choice = PinChoice {
            candidates: vec![candidate("A", 5), candidate("B", 4), candidate("C", 3)],
            vetoed: vec![candidate("A", 5), candidate("C", 3)],
            vetoes: vec![
                (candidate("A", 5), VetoReason::CircuitHalfOpen),
                (candidate("C", 3), VetoReason::Score),
            ],
            pin: Some(candidate("B", 4)),
        };
        let answer = rollout::answer(Mode::On, false, Some(&choice));
        let response = pin_response(Some(choice), answer);
        let vetoes: Vec<_> = response
            .vetoes
            .iter()
            .map(|v| (v.connector.as_str(), v.net_count, v.reason()))
            .collect();
        assert_eq!(
            vetoes,
            [
                ("A", 5, pb::VetoReason::CircuitHalfOpen),
                ("C", 3, pb::VetoReason::Score)
            ]
        );
        assert_eq!(response.connector, "B");
        assert_eq!(response.reason(), pb::PinReason::Pinned);
        assert_eq!(response.would_pin, "B");
        for reason in [VetoReason::CircuitOpen, VetoReason::ForcedOpen] {
            assert_eq!(
                veto_reason(reason).as_str_name(),
                format!("VETO_REASON_{}", reason.label().to_uppercase())
            );
        }
    }

    /// The answer's pin fields follow the rollout's answer, the lists the
    /// rules' choice, whatever the mode; mode off lists nothing.
    #[test]
    fn the_reason_and_would_pin_follow_the_answer_and_the_lists_the_choice() {
        let candidate = |connector: &str, net_count| Candidate {
            connector: connector.into(),
            net_count,
        };
        let choice = PinChoice {
            candidates: vec![candidate("A", 5), candidate("B", 4)],
            vetoed: vec![candidate("A", 5)],
            vetoes: vec![(candidate("A", 5), VetoReason::CircuitOpen)],
            pin: Some(candidate("B", 4)),
        };
        let cases = [
            (Mode::Shadow, false, pb::PinReason::Shadow),
            (Mode::Shadow, true, pb::PinReason::Shadow),
            (Mode::On, true, pb::PinReason::Holdout),
        ];
        for (mode, held_out, reason) in cases {
            let answer = rollout::answer(mode, held_out, Some(&choice));
            let response = pin_response(Some(choice.clone()), answer);
            assert!(!response.pinned, "{mode:?}");
            assert_eq!(response.connector, "");
            assert_eq!(response.net_count, 0);
            assert_eq!(response.would_pin, "B");
            assert_eq!(response.reason(), reason);
            assert_eq!(response.candidates.len(), 2);
            assert_eq!(response.vetoed.len(), 1);
            assert_eq!(response.vetoes.len(), 1);
        }
        let off = pin_response(None, rollout::answer(Mode::Off, false, None));
        assert_eq!(
            off,
            pb::GetPinResponse {
                reason: pb::PinReason::Disabled.into(),
                ..Default::default()
            }
        );
        let vetoed = PinChoice {
            pin: None,
            vetoed: choice.candidates.clone(),
            vetoes: vec![
                (candidate("A", 5), VetoReason::CircuitOpen),
                (candidate("B", 4), VetoReason::Score),
            ],
            ..choice.clone()
        };
        let response = pin_response(
            Some(vetoed.clone()),
            rollout::answer(Mode::Shadow, false, Some(&vetoed)),
        );
        assert_eq!(response.reason(), pb::PinReason::AllVetoed);
        assert_eq!(response.would_pin, "");
        for reason in [
            PinReason::Pinned,
            PinReason::NoHabit,
            PinReason::AllVetoed,
            PinReason::Holdout,
            PinReason::Shadow,
            PinReason::Disabled,
        ] {
            let name = pin_reason(reason).as_str_name();
            assert!(name.starts_with("PIN_REASON_"), "{name}");
            assert_ne!(pin_reason(reason), pb::PinReason::Unspecified);
        }
    }
}
