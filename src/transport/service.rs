//! The `sticky_routing.v1.StickyRouting` handlers. Each one validates its
//! request into domain values, runs one operation (the record flow, one
//! store read, or a call to the circuit breaker engine), and records
//! metrics; the rules themselves live in `domain` (GetPin's mode and
//! holdout, and the experiment's cells, in `domain::rollout`), the record
//! flow in `crate::record`, the breakers in `crate::breaker`, and the
//! experiment counts in `crate::experiment`.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status};
use tracing::{Instrument as _, Span};

use super::convert;
use super::deadline::deadline_of;
use super::pb;
use super::pb::sticky_routing_server::StickyRouting;
use super::status::ApiError;
use super::tenant::call_tenant;
use crate::breaker::Breakers;
use crate::domain::Rules;
use crate::domain::counts::{Outcome, Recorded};
use crate::domain::habits::ordered_habits;
use crate::domain::pin::{PinChoice, choose_pin, choose_pin_with};
use crate::domain::rollout::{self, Group, Mode, PinAnswer, PinReason, Rollout, Split};
use crate::domain::tenant::{Tenant, TenantAllowlist};
use crate::experiment::Experiments;
use crate::pki::{AdminClients, ClientIdentity};
use crate::record::{RecordCommand, record_outcome};
use crate::storage::{RedisStore, StorageError};
use crate::telemetry::{
    CallFailure, CallIds, FailureLog, Metrics, PinOutcome, Verdict, WriteOutcome,
    admission_refusal_label, traces,
};

/// The service state shared by every call.
pub struct StickyRoutingService {
    store: RedisStore,
    metrics: Arc<Metrics>,
    /// Failed calls: the first of a kind logged in full, then counted.
    failures: Arc<FailureLog>,
    rules: Arc<Rules>,
    /// The longest a call may take when the caller sets no shorter deadline.
    call_ceiling: Duration,
    /// Who may call the admin RPCs.
    admin: AdminClients,
    /// The tenants a call may name besides the default.
    tenants: TenantAllowlist,
    /// The connector circuit breakers; `None` when
    /// `STICKY_ROUTING_BREAKER=off`: GetPin as in v1.1, nothing counted,
    /// and the breaker's admin RPCs answer `FAILED_PRECONDITION`.
    breakers: Option<Arc<Breakers>>,
    /// The rollout's experiment counts: always there; RecordOutcome counts
    /// in them only with a `pin_connector` and a mode other than `off`.
    experiments: Arc<Experiments>,
}

impl StickyRoutingService {
    // One argument per shared part, each built by startup; a struct
    // holding them would only repeat this one's fields.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        store: RedisStore,
        metrics: Arc<Metrics>,
        failures: Arc<FailureLog>,
        rules: Arc<Rules>,
        call_ceiling: Duration,
        admin: AdminClients,
        tenants: TenantAllowlist,
        breakers: Option<Arc<Breakers>>,
        experiments: Arc<Experiments>,
    ) -> Self {
        Self {
            store,
            metrics,
            failures,
            rules,
            call_ceiling,
            admin,
            tenants,
            breakers,
            experiments,
        }
    }

    /// Counts an answered RecordOutcome in the experiment, when
    /// [`experiment_cell`] says it counts.
    fn count_for_experiment(&self, cmd: &RecordCommand, recorded: &Recorded) {
        if let Some((group, split)) = experiment_cell(&self.rules.rollout, cmd, recorded) {
            let success = cmd.outcome == Outcome::Success;
            self.experiments
                .count(&cmd.tenant, &cmd.merchant, group, split, success);
        }
    }

    /// Counts an answered RecordOutcome for its (merchant, connector)
    /// breaker, when [`breaker_count`] says it counts.
    fn count_for_breaker(&self, cmd: &RecordCommand, recorded: &Recorded) {
        if let Some(breakers) = &self.breakers
            && let Some(failed) = breaker_count(cmd, recorded)
        {
            breakers.count(&cmd.tenant, &cmd.merchant, &cmd.connector, failed);
        }
    }

    /// The breakers, or the answer of a breaker admin RPC while they are off.
    fn breakers_for(&self, rpc: &'static str) -> Result<&Breakers, ApiError> {
        self.breakers.as_deref().ok_or(ApiError::BreakerOff(rpc))
    }

    /// Whether the caller of `request` may call an admin RPC: its TLS
    /// identity, which tonic puts in every request of the connection.
    fn admin_permitted<R>(&self, request: &Request<R>) -> bool {
        let identity = request
            .extensions()
            .get::<Option<ClientIdentity>>()
            .and_then(Option::as_ref);
        self.admin.permit(identity)
    }

    /// Runs one handler body with the request, its tenant, its deadline and
    /// its span, and records the latency. A call whose tenant is refused
    /// never reaches the body, so it reads and writes nothing. Whatever the
    /// store does, the answer leaves by the deadline. The span is disabled
    /// (and costs one check) unless traces are exported.
    async fn handle<R, T, F, Fut>(
        &self,
        method: &'static str,
        request: Request<R>,
        body: F,
    ) -> Result<Response<T>, Status>
    where
        F: FnOnce(R, Tenant, Instant, Span) -> Fut,
        Fut: Future<Output = Result<T, ApiError>>,
    {
        let started = Instant::now();
        let (metadata, _, message) = request.into_parts();
        let deadline = deadline_of(&metadata, self.call_ceiling);
        let span = traces::rpc_span(method, &metadata);
        let result = match call_tenant(&metadata, &self.tenants) {
            Ok(tenant) => {
                traces::record_tenant(&span, &tenant);
                // Instrumented only when traced: wrapping moves the body's
                // future, a copy every call would pay for nothing.
                let deadline_at = deadline.into();
                let finished = if span.is_disabled() {
                    let work = body(message, tenant, deadline, span.clone());
                    tokio::time::timeout_at(deadline_at, work).await
                } else {
                    let work = body(message, tenant, deadline, span.clone());
                    tokio::time::timeout_at(deadline_at, work.instrument(span.clone())).await
                };
                finished.unwrap_or(Err(ApiError::Storage(StorageError::DeadlineExceeded)))
            }
            Err(refused) => Err(refused),
        };
        if let Err(ApiError::Storage(error)) = &result {
            self.log_failure(method, error, &span, &metadata);
        }
        let result = result.map(Response::new).map_err(Status::from);
        let code = result
            .as_ref()
            .map_or_else(Status::code, |_| tonic::Code::Ok);
        traces::record_code(&span, code);
        self.metrics.rpc(method, code, started.elapsed());
        result
    }

    /// Logs a failed call in full when it is the first of its kind lately,
    /// with the ids to find it by; later ones only count towards the
    /// once-a-second summary (`telemetry::failures`).
    fn log_failure(
        &self,
        rpc: &'static str,
        error: &StorageError,
        span: &Span,
        metadata: &MetadataMap,
    ) {
        let kind = error.kind();
        if self.failures.failed(kind) == Verdict::LogInFull {
            let ids = CallIds::of(span, metadata);
            tracing::warn!(
                rpc,
                kind,
                %error,
                trace_id = ids.trace_id.as_deref(),
                request_id = ids.request_id.as_deref(),
                tenant_id = ids.tenant_id.as_deref(),
                "call failed; further failures of this kind are counted, one line a second"
            );
        }
    }
}

/// Whether an answered RecordOutcome counts for its breaker, and as a
/// failure (`Some(true)`: a gateway failure) or a success, whatever the
/// record flow answered: no habit and not admitted count too, since the
/// connector answered the payment all the same.
///
/// A duplicate does not count, nor does a call that failed (it never gets
/// here): a call answered "nothing applied" must change nothing, or a
/// retry (which `UNAVAILABLE` and a duplicate's answer invite) would count
/// one payment twice, and retries alone could open a breaker. After
/// `UNKNOWN` or `DEADLINE_EXCEEDED` the caller retries with the same
/// `attempt_id`; if the first call had been applied, the retry is a
/// duplicate and that payment goes uncounted: a breaker may count one call
/// too few, never one too many.
fn breaker_count(cmd: &RecordCommand, recorded: &Recorded) -> Option<bool> {
    match recorded {
        Recorded::Duplicate { .. } => None,
        Recorded::Applied { .. } | Recorded::IgnoredNoHabit | Recorded::NotAdmitted(_) => {
            Some(cmd.outcome == Outcome::GatewayFailure)
        }
    }
}

/// The experiment cell an answered RecordOutcome counts in (contract v1.2
/// §4): none without `pin_connector` (checked first: no hashing then), for
/// a duplicate (by `breaker_count`'s reasoning: a retry must never count
/// one payment twice), or in mode `off`; else the domain's cell, by the
/// merchant's mode and, in mode `on`, the customer's holdout membership.
fn experiment_cell(
    rollout: &Rollout,
    cmd: &RecordCommand,
    recorded: &Recorded,
) -> Option<(Group, Option<Split>)> {
    let pin = cmd.pin_connector.as_ref()?;
    if matches!(recorded, Recorded::Duplicate { .. }) {
        return None;
    }
    let mode = rollout.mode_of(&cmd.merchant);
    let held_out = mode == Mode::On && rollout.in_holdout(&cmd.merchant, &cmd.customer);
    rollout::cell(mode, held_out, &cmd.connector, Some(pin))
}

/// How a GetPin ended: its answer's reason, or its failure.
fn pin_outcome(result: &Result<(Option<PinChoice>, PinAnswer), ApiError>) -> PinOutcome {
    match result {
        Ok((_, answer)) => match answer.reason {
            PinReason::Pinned => PinOutcome::Pinned,
            PinReason::NoHabit => PinOutcome::NoHabit,
            PinReason::AllVetoed => PinOutcome::Vetoed,
            PinReason::Holdout => PinOutcome::Holdout,
            PinReason::Shadow => PinOutcome::Shadow,
            PinReason::Disabled => PinOutcome::Disabled,
        },
        Err(error) => PinOutcome::Failed(failure(error)),
    }
}

/// How a failed call is counted.
fn failure(error: &ApiError) -> CallFailure {
    match error {
        ApiError::Invalid(_) => CallFailure::Invalid,
        ApiError::Storage(_) => CallFailure::Error,
        ApiError::NotAdmin(_) | ApiError::TenantNotAllowed(_) => CallFailure::Denied,
        // Only the breaker's admin RPCs answer it, and they count no pin
        // or write; the caller asked for what this server does not run.
        ApiError::BreakerOff(_) => CallFailure::Invalid,
    }
}

#[tonic::async_trait]
impl StickyRouting for StickyRoutingService {
    async fn record_outcome(
        &self,
        request: Request<pb::RecordOutcomeRequest>,
    ) -> Result<Response<pb::RecordOutcomeResponse>, Status> {
        self.handle(
            "RecordOutcome",
            request,
            |req, tenant, deadline, span| async move {
                let result = async {
                    let cmd = convert::record_command(&req)?.in_tenant(tenant);
                    traces::record_merchant(&span, cmd.merchant.as_str());
                    // Boxed: the store's futures hold fred's command futures
                    // and run to kilobytes; inline, async_trait's boxing of this
                    // handler would copy them whole on every call (bench/README.md
                    // counts the copy).
                    // A refusal is not logged: it is routine (a spent budget),
                    // and the metric and the span say which it was.
                    let recorded =
                        Box::pin(record_outcome(&self.store, &self.rules, &cmd, deadline)).await?;
                    self.count_for_breaker(&cmd, &recorded);
                    self.count_for_experiment(&cmd, &recorded);
                    Ok(recorded)
                }
                .await;
                let outcome = match &result {
                    Ok(Recorded::Applied { pruned, .. }) => {
                        self.metrics.pruned(*pruned);
                        WriteOutcome::Applied
                    }
                    Ok(Recorded::IgnoredNoHabit) => WriteOutcome::NoHabit,
                    Ok(Recorded::NotAdmitted(why)) => {
                        self.metrics.admission_refused(*why);
                        traces::record_admission_refusal(&span, admission_refusal_label(*why));
                        WriteOutcome::NotAdmitted
                    }
                    Ok(Recorded::Duplicate { .. }) => WriteOutcome::Duplicate,
                    Err(error) => WriteOutcome::Failed(failure(error)),
                };
                self.metrics.write(outcome);
                traces::record_result(&span, outcome.label());
                result.map(convert::record_response)
            },
        )
        .await
    }

    async fn get_pin(
        &self,
        request: Request<pb::GetPinRequest>,
    ) -> Result<Response<pb::GetPinResponse>, Status> {
        self.handle(
            "GetPin",
            request,
            |req, tenant, deadline, span| async move {
                let result = async {
                    let (merchant, customer, query) = convert::pin_query(
                        &req,
                        self.rules.min_pin_count,
                        self.rules.min_score_ratio,
                    )?;
                    traces::record_merchant(&span, merchant.as_str());
                    let rollout = &self.rules.rollout;
                    let mode = rollout.mode_of(&merchant);
                    // Off reads nothing (contract v1.2 §4): no Redis, no breaker.
                    if mode == Mode::Off {
                        return Ok((None, rollout::answer(mode, false, None)));
                    }
                    // Boxed, as in record_outcome: see there.
                    let fields = Box::pin(
                        self.store
                            .read_combos(&tenant, &merchant, &customer, deadline),
                    )
                    .await?;
                    // The breakers' states are in memory (the engine keeps them
                    // in step with Redis in the background): GetPin stays one
                    // Redis round trip.
                    let choice = match &self.breakers {
                        Some(breakers) => {
                            choose_pin_with(&fields, &query, breakers.veto_for(&tenant, &merchant))
                        }
                        None => choose_pin(&fields, &query),
                    };
                    // The holdout applies in mode on only, and a share of 0
                    // (the default) hashes nothing.
                    let held_out = mode == Mode::On
                        && rollout::in_holdout(
                            &rollout.salt,
                            &merchant,
                            &customer,
                            rollout.holdout_of(&merchant),
                        );
                    let answer = rollout::answer(mode, held_out, Some(&choice));
                    Ok((Some(choice), answer))
                }
                .await;
                if let Ok((Some(choice), _)) = &result {
                    for (_, reason) in &choice.vetoes {
                        self.metrics.breaker_veto(*reason);
                    }
                }
                let outcome = pin_outcome(&result);
                self.metrics.pin(outcome);
                traces::record_result(&span, outcome.label());
                result.map(|(choice, answer)| convert::pin_response(choice, answer))
            },
        )
        .await
    }

    async fn get_habits(
        &self,
        request: Request<pb::GetHabitsRequest>,
    ) -> Result<Response<pb::GetHabitsResponse>, Status> {
        let permitted = self.admin_permitted(&request);
        self.handle(
            "GetHabits",
            request,
            |req, tenant, deadline, span| async move {
                if !permitted {
                    return Err(ApiError::NotAdmin("GetHabits"));
                }
                let (merchant, customer) =
                    convert::customer_ref(&req.merchant_id, &req.customer_id)?;
                traces::record_merchant(&span, merchant.as_str());
                let (fields, ttl) = self
                    .store
                    .read_habits(&tenant, &merchant, &customer, deadline)
                    .await?;
                Ok(convert::habits_response(ordered_habits(&fields), ttl))
            },
        )
        .await
    }

    async fn forget_customer(
        &self,
        request: Request<pb::ForgetCustomerRequest>,
    ) -> Result<Response<pb::ForgetCustomerResponse>, Status> {
        let permitted = self.admin_permitted(&request);
        // For the line it logs; an admin call is rare enough to copy them.
        let metadata = request.metadata().clone();
        self.handle(
            "ForgetCustomer",
            request,
            |req, tenant, deadline, span| async move {
                if !permitted {
                    return Err(ApiError::NotAdmin("ForgetCustomer"));
                }
                let (merchant, customer) =
                    convert::customer_ref(&req.merchant_id, &req.customer_id)?;
                traces::record_merchant(&span, merchant.as_str());
                let existed = self
                    .store
                    .forget(&tenant, &merchant, &customer, deadline)
                    .await?;
                let ids = CallIds::of(&span, &metadata);
                tracing::info!(
                    tenant = %tenant,
                    merchant = merchant.as_str(),
                    existed,
                    trace_id = ids.trace_id.as_deref(),
                    request_id = ids.request_id.as_deref(),
                    tenant_id = ids.tenant_id.as_deref(),
                    "customer forgotten"
                );
                Ok(pb::ForgetCustomerResponse { existed })
            },
        )
        .await
    }

    async fn get_connector_health(
        &self,
        request: Request<pb::GetConnectorHealthRequest>,
    ) -> Result<Response<pb::GetConnectorHealthResponse>, Status> {
        const RPC: &str = "GetConnectorHealth";
        let permitted = self.admin_permitted(&request);
        self.handle(RPC, request, |req, tenant, deadline, span| async move {
            if !permitted {
                return Err(ApiError::NotAdmin(RPC));
            }
            let breakers = self.breakers_for(RPC)?;
            let merchant = convert::connector_health_request(&req)?;
            traces::record_merchant(&span, merchant.as_str());
            let rows = breakers.health(&tenant, &merchant, deadline).await?;
            Ok(convert::connector_health_response(rows))
        })
        .await
    }

    async fn set_connector_override(
        &self,
        request: Request<pb::SetConnectorOverrideRequest>,
    ) -> Result<Response<pb::SetConnectorOverrideResponse>, Status> {
        const RPC: &str = "SetConnectorOverride";
        let permitted = self.admin_permitted(&request);
        // For the line it logs; an admin call is rare enough to copy them.
        let metadata = request.metadata().clone();
        self.handle(RPC, request, |req, tenant, deadline, span| async move {
            if !permitted {
                return Err(ApiError::NotAdmin(RPC));
            }
            let breakers = self.breakers_for(RPC)?;
            let (merchant, connector, over) = convert::connector_override(&req)?;
            traces::record_merchant(&span, merchant.as_str());
            breakers
                .set_override(&tenant, &merchant, &connector, over, deadline)
                .await?;
            // An operator steering routing: worth a line, with who asked.
            let ids = CallIds::of(&span, &metadata);
            tracing::info!(
                tenant = %tenant,
                merchant = merchant.as_str(),
                connector = connector.as_str(),
                kind = over.map_or("none", |(kind, _)| kind.label()),
                ttl_seconds = over.map_or(0, |(_, ttl)| ttl.as_secs()),
                trace_id = ids.trace_id.as_deref(),
                request_id = ids.request_id.as_deref(),
                tenant_id = ids.tenant_id.as_deref(),
                "connector override set"
            );
            Ok(pb::SetConnectorOverrideResponse {})
        })
        .await
    }

    async fn get_uplift(
        &self,
        request: Request<pb::GetUpliftRequest>,
    ) -> Result<Response<pb::GetUpliftResponse>, Status> {
        const RPC: &str = "GetUplift";
        let permitted = self.admin_permitted(&request);
        self.handle(RPC, request, |req, tenant, deadline, span| async move {
            if !permitted {
                return Err(ApiError::NotAdmin(RPC));
            }
            let (merchant, days) = convert::uplift_request(&req)?;
            traces::record_merchant(&span, merchant.as_str());
            let uplift = self
                .experiments
                .uplift(&tenant, &merchant, days, deadline)
                .await?;
            Ok(convert::uplift_response(&uplift))
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::admission::AdmissionRefusal;

    fn command(outcome: pb::Outcome) -> RecordCommand {
        convert::record_command(&pb::RecordOutcomeRequest {
            merchant_id: "m1".into(),
            customer_id: "c1".into(),
            payment_method: "interac".into(),
            payment_method_type: "rtp".into(),
            connector: "GIGADAT".into(),
            outcome: outcome.into(),
            attempt_id: "pay_1".into(),
            pin_connector: String::new(),
        })
        .unwrap()
    }

    /// Every answer but a duplicate counts, as a failure exactly when the
    /// outcome was a gateway failure.
    #[test]
    fn every_answered_outcome_but_a_duplicate_counts_for_the_breaker() {
        let counted = [
            Recorded::Applied {
                net_count: 1,
                pruned: 0,
            },
            Recorded::IgnoredNoHabit,
            Recorded::NotAdmitted(AdmissionRefusal::Budget),
            Recorded::NotAdmitted(AdmissionRefusal::MemoryGuard),
        ];
        let (success, failure) = (
            command(pb::Outcome::Success),
            command(pb::Outcome::GatewayFailure),
        );
        assert_eq!(success.connector.as_str(), "GIGADAT");
        for recorded in counted {
            assert_eq!(
                breaker_count(&success, &recorded),
                Some(false),
                "{recorded:?}"
            );
            assert_eq!(
                breaker_count(&failure, &recorded),
                Some(true),
                "{recorded:?}"
            );
        }
        let duplicate = Recorded::Duplicate { net_count: 3 };
        assert_eq!(breaker_count(&success, &duplicate), None);
        assert_eq!(breaker_count(&failure, &duplicate), None);
    }

    /// The experiment cell: none without pin_connector, for a duplicate,
    /// or in mode off; treated or holdout by membership in mode on (a 50 %
    /// holdout splits customers both ways), shadow in mode shadow, whatever
    /// the holdout; followed when the call went to the named connector.
    #[test]
    fn an_answered_outcome_with_a_pin_connector_counts_in_its_cell() {
        use crate::domain::rollout::HoldoutShare;
        let with_pin = |customer: &str, connector: &str, pin: &str| {
            convert::record_command(&pb::RecordOutcomeRequest {
                merchant_id: "m1".into(),
                customer_id: customer.into(),
                payment_method: "interac".into(),
                payment_method_type: "rtp".into(),
                connector: connector.into(),
                outcome: pb::Outcome::Success.into(),
                attempt_id: String::new(),
                pin_connector: pin.into(),
            })
            .unwrap()
        };
        let applied = Recorded::Applied {
            net_count: 1,
            pruned: 0,
        };
        let mut rollout = Rollout {
            holdout: HoldoutShare::parse("50%").unwrap(),
            ..Rollout::default()
        };
        let cell = |rollout: &Rollout, cmd: &RecordCommand, recorded: &Recorded| {
            experiment_cell(rollout, cmd, recorded)
        };
        assert_eq!(
            cell(&rollout, &command(pb::Outcome::Success), &applied),
            None
        );
        let followed = with_pin("c1", "A", "A");
        assert_eq!(
            cell(&rollout, &followed, &Recorded::Duplicate { net_count: 1 }),
            None
        );
        let mut groups = std::collections::BTreeSet::new();
        for i in 0..64 {
            let cmd = with_pin(&format!("c{i}"), "A", "B");
            let got = cell(&rollout, &cmd, &Recorded::IgnoredNoHabit).unwrap();
            let held_out = rollout.in_holdout(&cmd.merchant, &cmd.customer);
            let expected = if held_out {
                (Group::Holdout, None)
            } else {
                (Group::Treated, Some(Split::Overridden))
            };
            assert_eq!(got, expected);
            groups.insert(format!("{got:?}"));
        }
        assert_eq!(
            groups.len(),
            2,
            "a 50 % holdout splits 64 customers both ways"
        );
        rollout.mode = Mode::Shadow;
        assert_eq!(
            cell(&rollout, &followed, &applied),
            Some((Group::Shadow, Some(Split::Followed)))
        );
        rollout.mode_for.insert("m1".into(), Mode::Off);
        assert_eq!(cell(&rollout, &followed, &applied), None);
    }
}
