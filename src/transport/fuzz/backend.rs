//! The handlers as `StickyRoutingService` runs them, with the store's
//! answer taken from the case instead of Redis: validate with `convert`,
//! encode the keys, build the answer with the domain and `convert`, map
//! errors with `ApiError`. On the way it checks what the domain promises of
//! every value it accepted.

use tonic::{Request, Response, Status};

use super::requests::{Rpc, StoreAnswer, StoreFailure};
use crate::domain::attempts::{self, AttemptId};
use crate::domain::combo::{Combo, split_field};
use crate::domain::habits::ordered_habits;
use crate::domain::ids::{CustomerId, MAX_FIELD_BYTES, MAX_ID_BYTES, MerchantId};
use crate::domain::keys::{self, ADMISSION_KEY_PREFIX, CUSTOMER_KEY_PREFIX};
use crate::domain::pin::{ScoreRatio, choose_pin, choose_pin_with};
use crate::domain::rollout::{self, Mode};
use crate::domain::tenant::Tenant;
use crate::domain::text;
use crate::storage::{NoAnswer, NotApplied, StorageError};
use crate::transport::convert;
use crate::transport::pb;
use crate::transport::pb::sticky_routing_server::StickyRouting;
use crate::transport::status::ApiError;

pub struct Backend;

/// The store's answer the case put in the request's extensions.
fn answer_of<T>(request: &Request<T>) -> StoreAnswer {
    request
        .extensions()
        .get::<StoreAnswer>()
        .cloned()
        .expect("every fuzz call carries the store's answer")
}

fn respond<T>(result: Result<T, ApiError>) -> Result<Response<T>, Status> {
    result.map(Response::new).map_err(Status::from)
}

impl StoreAnswer {
    /// The breaker's admin RPCs' answer when the server runs without it.
    fn breaker(&self) -> Result<(), ApiError> {
        match self.breaker_off {
            true => Err(ApiError::BreakerOff("fuzz")),
            false => Ok(()),
        }
    }

    /// The store's failure, if the case has it fail `rpc`.
    fn outcome_of(&self, rpc: Rpc) -> Result<(), ApiError> {
        let error = match self.fails(rpc) {
            None => return Ok(()),
            Some(StoreFailure::Unavailable) => StorageError::Unavailable {
                why: NotApplied::NoConnection,
                detail: "fuzz: 10.0.0.7:6379 down".into(),
            },
            Some(StoreFailure::MaybeApplied) => StorageError::MaybeApplied {
                why: NoAnswer::ConnectionLost,
                detail: "fuzz: 10.0.0.7:6379 lost".into(),
            },
            Some(StoreFailure::DeadlineExceeded) => StorageError::DeadlineExceeded,
        };
        Err(error.into())
    }
}

#[tonic::async_trait]
impl StickyRouting for Backend {
    async fn record_outcome(
        &self,
        request: Request<pb::RecordOutcomeRequest>,
    ) -> Result<Response<pb::RecordOutcomeResponse>, Status> {
        let answer = answer_of(&request);
        let req = request.into_inner();
        respond((|| {
            let cmd = convert::record_command(&req)?;
            check_customer(&cmd.merchant, &cmd.customer);
            check_combo(&cmd.combo, &req);
            check_attempt(cmd.attempt.as_ref(), &req.attempt_id);
            answer.outcome_of(Rpc::RecordOutcome)?;
            Ok(convert::record_response(answer.recorded))
        })())
    }

    async fn get_pin(
        &self,
        request: Request<pb::GetPinRequest>,
    ) -> Result<Response<pb::GetPinResponse>, Status> {
        let answer = answer_of(&request);
        let req = request.into_inner();
        respond((|| {
            let (merchant, customer, query) =
                convert::pin_query(&req, answer.min_pin_count, ScoreRatio::DEFAULT)?;
            check_customer(&merchant, &customer);
            if answer.mode == Mode::Off {
                answer.outcome_of(Rpc::GetPin)?;
                return Ok(convert::pin_response(
                    None,
                    rollout::answer(Mode::Off, false, None),
                ));
            }
            answer.outcome_of(Rpc::GetPin)?;
            let choice = if answer.breaker_off {
                choose_pin(&answer.fields, &query)
            } else {
                let vetoes = &answer.breaker_vetoes;
                choose_pin_with(&answer.fields, &query, |c| vetoes.get(c).copied())
            };
            let held_out = answer.mode == Mode::On && answer.held_out;
            let pin = rollout::answer(answer.mode, held_out, Some(&choice));
            Ok(convert::pin_response(Some(choice), pin))
        })())
    }

    async fn get_habits(
        &self,
        request: Request<pb::GetHabitsRequest>,
    ) -> Result<Response<pb::GetHabitsResponse>, Status> {
        let answer = answer_of(&request);
        let req = request.into_inner();
        respond((|| {
            let (merchant, customer) = convert::customer_ref(&req.merchant_id, &req.customer_id)?;
            check_customer(&merchant, &customer);
            answer.outcome_of(Rpc::GetHabits)?;
            let habits = ordered_habits(&answer.fields);
            Ok(convert::habits_response(habits, answer.ttl.max(0)))
        })())
    }

    async fn forget_customer(
        &self,
        request: Request<pb::ForgetCustomerRequest>,
    ) -> Result<Response<pb::ForgetCustomerResponse>, Status> {
        let answer = answer_of(&request);
        let req = request.into_inner();
        respond((|| {
            let (merchant, customer) = convert::customer_ref(&req.merchant_id, &req.customer_id)?;
            check_customer(&merchant, &customer);
            answer.outcome_of(Rpc::ForgetCustomer)?;
            Ok(pb::ForgetCustomerResponse {
                existed: answer.existed,
            })
        })())
    }

    async fn get_connector_health(
        &self,
        request: Request<pb::GetConnectorHealthRequest>,
    ) -> Result<Response<pb::GetConnectorHealthResponse>, Status> {
        let answer = answer_of(&request);
        let req = request.into_inner();
        respond((|| {
            answer.breaker()?;
            convert::connector_health_request(&req)?;
            answer.outcome_of(Rpc::GetConnectorHealth)?;
            Ok(convert::connector_health_response(answer.health.clone()))
        })())
    }

    async fn set_connector_override(
        &self,
        request: Request<pb::SetConnectorOverrideRequest>,
    ) -> Result<Response<pb::SetConnectorOverrideResponse>, Status> {
        let answer = answer_of(&request);
        let req = request.into_inner();
        respond((|| {
            answer.breaker()?;
            let (_, connector, over) = convert::connector_override(&req)?;
            assert_eq!(connector.as_str(), req.connector);
            if let Some((_, ttl)) = over {
                assert!((1..=604_800).contains(&ttl.as_secs()), "{ttl:?}");
            }
            answer.outcome_of(Rpc::SetConnectorOverride)?;
            Ok(pb::SetConnectorOverrideResponse {})
        })())
    }

    /// Validation only: the counts are the experiment engine's, and an
    /// empty report is a well-formed answer.
    async fn get_uplift(
        &self,
        request: Request<pb::GetUpliftRequest>,
    ) -> Result<Response<pb::GetUpliftResponse>, Status> {
        let answer = answer_of(&request);
        let req = request.into_inner();
        respond((|| {
            let (_, days) = convert::uplift_request(&req)?;
            assert!((1..=35).contains(&days), "{days}");
            answer.outcome_of(Rpc::GetUplift)?;
            Ok(pb::GetUpliftResponse::default())
        })())
    }
}

/// An accepted id has no blank of any kind at its ends (ASCII ones are
/// trimmed, others refused), is 1..=128 bytes and visible; both keys hold no
/// hash tag and decode back to the ids, so no two customers share a key.
fn check_customer(merchant: &MerchantId, customer: &CustomerId) {
    for id in [merchant.as_str(), customer.as_str()] {
        assert!(!id.is_empty() && id.len() <= MAX_ID_BYTES && id == id.trim());
        assert_eq!(text::first_forbidden(id), None);
    }
    let key = keys::customer_key(&Tenant::DEFAULT, merchant, customer);
    assert!(!key.contains(['{', '}']), "a hash tag in a customer key");
    let (m, c) = key
        .strip_prefix(CUSTOMER_KEY_PREFIX)
        .and_then(|rest| rest.split_once('_'))
        .expect("a customer key is prefix, merchant, '_', customer");
    assert_eq!(unescape(m), merchant.as_str());
    assert_eq!(unescape(c), customer.as_str());
    let admission = keys::admission_key(&Tenant::DEFAULT, merchant);
    let m = admission
        .strip_prefix(ADMISSION_KEY_PREFIX)
        .expect("an admission key starts with its prefix");
    assert!(!m.contains(['{', '}', '_']));
    assert_eq!(unescape(m), merchant.as_str());
}

/// The inverse of the key escape (docs/contract.md, "Redis layout").
fn unescape(escaped: &str) -> String {
    escaped
        .replace("%5F", "_")
        .replace("%7B", "{")
        .replace("%7D", "}")
        .replace("%25", "%")
}

/// The combo's field fits a listpack entry, is never the bookkeeping field,
/// and splits back into what the caller sent.
fn check_combo(combo: &Combo, req: &pb::RecordOutcomeRequest) {
    let field = combo.field();
    assert!(field.len() <= MAX_FIELD_BYTES && !attempts::is_bookkeeping(field));
    let parts = split_field(field).expect("a combo field has two colons");
    assert_eq!(parts.method, req.payment_method.trim_ascii().to_uppercase());
    assert_eq!(
        parts.method_type,
        req.payment_method_type.trim_ascii().to_uppercase()
    );
    assert_eq!(parts.connector, req.connector);
}

/// An attempt id is present exactly when the caller sent a non-blank one.
fn check_attempt(attempt: Option<&AttemptId>, raw: &str) {
    assert_eq!(attempt.is_some(), !raw.trim_ascii().is_empty());
    if let Some(attempt) = attempt {
        attempt.digest();
    }
}
